package executor

import (
	"encoding/binary"
	"fmt"
	"strconv"

	"github.com/flexkv/flexkv/kv"
	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/txn"
)

// Backup markers (DESIGN 14, Backup).
//
// A backup marker (txn.AppendBackupPayload) is delivered to every group;
// by prefix and acyclic order the deliveries before it, at every group,
// form a cut of the whole history. The executor runs it as a barrier: it
// runs once everything delivered before it here has run (nothing queued
// ahead of it), and nothing delivered after it runs before it (a pass
// stops at a queued marker). The pass that runs it stops right after it,
// and the entry is committed in parts (kv.Store.CommitMore): the first
// part holds exactly the deliveries before the marker and the marker's
// result; then the store takes a checkpoint named by the marker's id
// (kv.Store.Checkpoint); then a further pass runs what the marker held
// back, committed at the same index. Every replica does the same, so the
// replicated state (results, queue, sends) does not depend on the
// checkpoint, which is a side effect beside it.
//
// A crash between the parts leaves the marker record pending: the next
// load takes the checkpoint (the store holds the first part, exactly the
// cut) and runs the rest of the entry, whose sends Sent then answers for
// the replay of the entry, as for any other. A replica that catches up by
// a snapshot taken after the entry never holds the cut and takes no
// checkpoint: `flexkv backup create` copies another replica's.
//
// The marker's result at a group is succeeded, with one get result:
// key MarkerIndexKey, value the raft index of the entry that ran it (the
// applied index in the checkpoint), in decimal.

// MarkerIndexKey is the key of a backup marker's one result.
const MarkerIndexKey = "applied_index"

// auxBackup is the key of the marker record, the last marker run here:
//
//	'b' -> index (8 B BE) pending (1 B) client (8 B BE) seq (8 B BE) sent (4 B BE)
//
// pending: the entry index is committed up to the marker (its checkpoint
// and the rest of the entry still to do); sent counts the sends of the
// entry's parts committed so far.
const auxBackup byte = 'b'

var backupKey = []byte{auxBackup}

type markerRecord struct {
	index   uint64
	pending bool
	id      multicast.MsgID
	sent    uint32
}

func (r markerRecord) append(b []byte) []byte {
	b = binary.BigEndian.AppendUint64(b, r.index)
	p := byte(0)
	if r.pending {
		p = 1
	}
	b = append(b, p)
	b = binary.BigEndian.AppendUint64(b, r.id.Client)
	b = binary.BigEndian.AppendUint64(b, r.id.Seq)
	return binary.BigEndian.AppendUint32(b, r.sent)
}

const markerRecordSize = 8 + 1 + 8 + 8 + 4

func decodeMarkerRecord(b []byte) (markerRecord, error) {
	if len(b) != markerRecordSize || b[8] > 1 {
		return markerRecord{}, fmt.Errorf("%w: backup marker record of %d bytes", kv.ErrCorrupt, len(b))
	}
	return markerRecord{
		index:   binary.BigEndian.Uint64(b),
		pending: b[8] == 1,
		id:      multicast.MsgID{Client: binary.BigEndian.Uint64(b[9:]), Seq: binary.BigEndian.Uint64(b[17:])},
		sent:    binary.BigEndian.Uint32(b[25:]),
	}, nil
}

// markerResult is the result of a backup marker run at entry index.
func markerResult(index uint64) txn.PieceResult {
	return txn.PieceResult{Succeeded: true, Results: []txn.OpResult{{
		Kind: txn.OpGet, Key: []byte(MarkerIndexKey), Found: true, Value: []byte(strconv.FormatUint(index, 10)),
	}}}
}

// MarkerIndex returns the index a backup marker's result names, and
// whether r is such a result.
func MarkerIndex(r txn.PieceResult) (uint64, bool) {
	if !r.Succeeded || len(r.Results) != 1 || string(r.Results[0].Key) != MarkerIndexKey {
		return 0, false
	}
	n, err := strconv.ParseUint(string(r.Results[0].Value), 10, 64)
	return n, err == nil
}

// CheckpointName is the name of the checkpoint of backup marker id.
func CheckpointName(id multicast.MsgID) string { return id.String() }

// checkpoint takes the checkpoint of marker id. A failure (a full disk) is
// not the replicated state's: the replica goes on, without this
// checkpoint, and says why (CheckpointError).
func (e *Executor) checkpoint(id multicast.MsgID) {
	_, _, err := e.cfg.Store.Checkpoint(CheckpointName(id))
	e.statsMu.Lock()
	e.checkpointErr = err
	e.statsMu.Unlock()
}

// CheckpointError returns the error of the last checkpoint the executor
// tried to take, nil if it succeeded (or none was tried).
func (e *Executor) CheckpointError() error {
	e.statsMu.Lock()
	defer e.statsMu.Unlock()
	return e.checkpointErr
}

// afterMarkers finishes entry index after a part that ran a marker (prev):
// the checkpoint, then the next part, until a part runs no marker. It
// returns the sends and results of the further parts. mu is held.
func (e *Executor) afterMarkers(index uint64, prev *execution) ([]*execution, error) {
	var parts []*execution
	for prev.marker != nil {
		e.checkpoint(prev.marker.id)
		b := e.cfg.Store.NewBatch()
		x := &execution{e: e, b: b, rw: batchRW{b}, meta: e.meta, index: index,
			sentBase: prev.sentBase + uint32(len(prev.sends)), after: prev.marker.id}
		x.now = x.meta.now
		err := x.pass()
		if err == nil {
			err = x.finish(index)
		}
		if err == nil {
			e.markUnreleased(x)
			err = e.cfg.Store.CommitMore(b, index)
		}
		b.Close()
		if err != nil {
			return nil, fmt.Errorf("txn: execute %d after backup marker %s: %w", index, prev.marker.id, err)
		}
		e.markReleased(x)
		e.setMeta(x.meta)
		parts = append(parts, x)
		prev = x
	}
	return parts, nil
}

// putMarkerRecord writes the marker record the part leaves: pending if it
// ran a marker, done if it finishes the entry after one.
func (x *execution) putMarkerRecord(index uint64) error {
	var r markerRecord
	switch {
	case x.marker != nil:
		r = markerRecord{index: index, pending: true, id: x.marker.id, sent: x.sentBase + uint32(len(x.sends))}
	case x.after != (multicast.MsgID{}):
		r = markerRecord{index: index, id: x.after, sent: x.sentBase + uint32(len(x.sends))}
	default:
		return nil
	}
	return x.b.PutAux(backupKey, r.append(nil))
}

// resumeMarker finishes an entry that a crash interrupted between its parts
// (the marker record is pending): load calls it once the state is read
// back. mu is held (or e is new).
func (e *Executor) resumeMarker() error {
	b, ok, err := e.cfg.Store.GetAux(backupKey)
	if err != nil || !ok {
		return err
	}
	r, err := decodeMarkerRecord(b)
	if err != nil || !r.pending {
		return err
	}
	if applied := e.cfg.Store.AppliedIndex(); r.index != applied {
		return fmt.Errorf("%w: backup marker %s pending at entry %d, but the applied index is %d", kv.ErrCorrupt, r.id, r.index, applied)
	}
	prev := &execution{marker: &job{id: r.id}, sentBase: r.sent}
	_, err = e.afterMarkers(r.index, prev)
	return err
}
