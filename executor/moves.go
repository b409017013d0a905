package executor

import (
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/flexkv/flexkv/group"
	"github.com/flexkv/flexkv/internal/wire"
	"github.com/flexkv/flexkv/kv"
	"github.com/flexkv/flexkv/partition"
)

// Partition moves (DESIGN 14; group/moves.go). The executor runs each
// delivery with the partition map of the epoch it was delivered in: the
// machine gives it, before each entry, the map at the entry's start and
// after each change among its deliveries (SetPartitions), and the executor
// keeps every map it switched to, in its store, by the queue sequence of
// the first delivery queued under it
// (auxOwners). A delivery is prepared, and a call's procedure sees what
// the group owns, with the map of its sequence: a call queued before a
// partition moved here and run after does not see the partition as its
// group's; and a restart prepares its queued deliveries with the maps they
// were prepared with. A map no queued delivery needs any more is dropped
// at the next change of the owners.
//
// Its state hands the executor, as payloads from the group itself, the
// rows of each chunk of a partition moving in (written as they are) and
// the deletion of a partition's range once another group owns it.

// auxOwners starts the keys of the owners records:
//
//	'w' seq (8 B BE) -> count:uvarint (owner+1:uvarint)*count
//
// the owners of the deliveries queued from sequence seq on; none: the
// configuration's.
const auxOwners byte = 'w'

func ownersKey(seq uint64) []byte {
	return binary.BigEndian.AppendUint64([]byte{auxOwners}, seq)
}

// pmAt is a partition map and the queue sequence from which deliveries are
// prepared with it.
type pmAt struct {
	seq uint64
	pm  *partition.PartitionMap
}

// Partitions returns the partition map the executor routes with now.
func (e *Executor) Partitions() *partition.PartitionMap { return e.partitions() }

// partitions returns the map the executor routes with, for a caller that
// does not hold mu (reads at the leader); an execution, which holds mu,
// reads pmCur itself.
func (e *Executor) partitions() *partition.PartitionMap {
	e.pmMu.Lock()
	defer e.pmMu.Unlock()
	return e.pmCur
}

func (e *Executor) setPartitions(pm *partition.PartitionMap) {
	e.pmMu.Lock()
	defer e.pmMu.Unlock()
	e.pmCur = pm
}

// SetPartitions gives the executor the partition maps of the entry it
// executes next: the map at the entry's start (At 0) and the map after each
// change the entry delivers, from the change's place among its deliveries
// on (group.PartitionSwitch).
func (e *Executor) SetPartitions(switches []group.PartitionSwitch) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.pmNext = switches
}

// pmFor returns the map of the deliveries queued at sequence seq.
func (e *Executor) pmFor(seq uint64) *partition.PartitionMap {
	for i := len(e.pms) - 1; i >= 0; i-- {
		if e.pms[i].seq <= seq {
			return e.pms[i].pm
		}
	}
	return e.cfg.Partitions
}

// switchesUpTo makes the executor's the maps SetPartitions gave for the
// deliveries up to position k of the entry, in order.
func (x *execution) switchesUpTo(k int) error {
	for len(x.switches) > 0 && x.switches[0].At <= k {
		if err := x.switchPartitions(x.switches[0].PM); err != nil {
			return err
		}
		x.switches = x.switches[1:]
	}
	return nil
}

// switchPartitions makes next the executor's map when its owners differ,
// writing it in the entry's batch from the next queue sequence on, and
// drops the maps no queued delivery needs.
func (x *execution) switchPartitions(next *partition.PartitionMap) error {
	e := x.e
	cur := e.pmCur
	if next == nil || next == cur {
		return nil
	}
	owners := next.Owners()
	if slices.Equal(owners, cur.Owners()) {
		return nil
	}
	b := wire.AppendUvarint(nil, uint64(len(owners)))
	for _, g := range owners {
		b = wire.AppendUvarint(b, uint64(g+1))
	}
	seq := x.meta.qNext
	if err := x.b.PutAux(ownersKey(seq), b); err != nil {
		return err
	}
	oldest := seq
	if len(e.queue) > 0 {
		oldest = e.queue[0].seq
	}
	keep := e.pms[:0]
	for i, at := range e.pms {
		if i+1 < len(e.pms) && e.pms[i+1].seq <= oldest {
			if err := x.b.DeleteAux(ownersKey(at.seq)); err != nil {
				return err
			}
			continue
		}
		keep = append(keep, at)
	}
	if n := len(keep); n > 0 && keep[n-1].seq == seq {
		keep = keep[:n-1]
	}
	e.pms = append(keep, pmAt{seq: seq, pm: next})
	e.setPartitions(next)
	return nil
}

// loadPartitions reads the owners records: the maps the executor prepares
// its queue with, and the one it routes with.
func (e *Executor) loadPartitions() error {
	e.pms = nil
	err := scanAux(e.cfg.Store, []byte{auxOwners}, []byte{auxOwners + 1}, func(r kv.KV) error {
		if len(r.Key) != 9 {
			return fmt.Errorf("%w: owners record key of %d bytes", kv.ErrCorrupt, len(r.Key))
		}
		d := wire.NewDecoder(r.Value)
		n := d.Count(1)
		owners := make([]partition.GroupID, 0, n)
		for range n {
			owners = append(owners, partition.GroupID(d.Uvarint())-1)
		}
		if err := d.Finish(); err != nil {
			return fmt.Errorf("%w: owners record: %w", kv.ErrCorrupt, err)
		}
		pm, err := e.cfg.Partitions.WithOwners(e.cfg.Topology, owners)
		if err != nil {
			return fmt.Errorf("%w: owners record: %w", kv.ErrCorrupt, err)
		}
		e.pms = append(e.pms, pmAt{seq: binary.BigEndian.Uint64(r.Key[1:]), pm: pm})
		return nil
	})
	if err != nil {
		return err
	}
	cur := e.cfg.Partitions
	if n := len(e.pms); n > 0 {
		cur = e.pms[n-1].pm
	}
	e.setPartitions(cur)
	return nil
}

// receiveMove writes a chunk's rows, or deletes a partition's range.
func (x *execution) receiveMove(payload []byte) error {
	rows, drop, err := group.DecodeMovePayload(payload)
	if err != nil {
		// The group's own state made it from an entry it checked.
		return fmt.Errorf("%w: %w", kv.ErrCorrupt, err)
	}
	if drop >= 0 {
		pm := x.e.pmCur
		if drop >= pm.Len() {
			return fmt.Errorf("%w: drop of partition %d of %d", kv.ErrCorrupt, drop, pm.Len())
		}
		p := pm.At(drop)
		return x.b.DeleteRange(p.Start, p.End)
	}
	for _, r := range rows {
		if err := x.b.Put(r.Key, r.Value); err != nil {
			return err
		}
	}
	return nil
}

// NextSeq returns the queue sequence of the next delivery: every delivery
// queued so far has a lower one.
func (e *Executor) NextSeq() uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.meta.qNext
}

// QueuedTouch reports whether a delivery queued here with a sequence below
// before may touch a key in [start, end) (an empty end has no upper bound):
// one whose footprint has such a key, or a stored-procedure call, which may
// touch any key of the group. The partition of a move is frozen at its old
// owner once none of the deliveries before the move's cut may (moves.go).
func (e *Executor) QueuedTouch(before uint64, start, end []byte) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	r := span{start: string(start), end: string(end)}
	in := func(k string) bool { return k >= r.start && (r.end == "" || k < r.end) }
	for _, q := range e.queue {
		if q.seq >= before {
			break
		}
		fp := q.footprint() // the pass's, computed once
		if fp.all {
			return true
		}
		for _, k := range slices.Concat(fp.reads, fp.writes) {
			if in(k) {
				return true
			}
		}
		for _, sc := range fp.scans {
			if (r.end == "" || sc.start < r.end) && (sc.end == "" || sc.end > r.start) {
				return true
			}
		}
	}
	return false
}
