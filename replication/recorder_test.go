package replication

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/flexkv/flexkv/group"
	"github.com/flexkv/flexkv/internal/wire"
	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/multicast/check"
	"github.com/flexkv/flexkv/multicast/rawnode"
	"github.com/flexkv/flexkv/partition"
)

// Recorder is the executor of this package's tests (group.Executor): it
// records a replica's deliveries durably, in a Pebble store of its own,
// and writes them as a delivery log (DESIGN 10.1). It stands in for the
// transaction executor, as the shell's tests check the ordering and the
// snapshots the shell produces without executing anything. With VoteTo set
// (not 0), each delivery also sends one application payload, its id, to
// that group, kept durably with its entry for Sent.
type Recorder struct {
	db     *pebble.DB
	VoteTo partition.GroupID

	mu      sync.Mutex
	applied uint64
	seq     uint64 // deliveries recorded
	// delivered mirrors seq, for readers that must not wait for mu.
	delivered atomic.Int64
}

var _ group.Executor = (*Recorder)(nil)

// Delivery is a recorded delivery.
type Delivery struct {
	Index uint64 // raft index of the entry that delivered it
	ID    multicast.MsgID
	Dst   partition.GroupSet
}

var (
	keyApplied      = []byte("a")
	keyDeliveryLow  = []byte("d")
	keyDeliveryHigh = []byte("e")
	keySentLow      = []byte("s")
	keySentHigh     = []byte("t")
)

func deliveryKey(seq uint64) []byte {
	return binary.BigEndian.AppendUint64([]byte("d"), seq)
}

// sentKey is the key of the i-th send of entry index; sentKey(index+1, 0)
// bounds those of index.
func sentKey(index uint64, i int) []byte {
	k := binary.BigEndian.AppendUint64([]byte("s"), index)
	return binary.BigEndian.AppendUint32(k, uint32(i))
}

// OpenRecorder opens (or creates) a recorder in dir.
func OpenRecorder(dir string) (*Recorder, error) { return openRecorderOn(nil, dir) }

// openRecorderOn opens (or creates) a recorder in dir of fs (nil: the
// operating system's).
func openRecorderOn(fs vfs.FS, dir string) (*Recorder, error) {
	// No WAL, as a replica's data store (kv.Options.NoWAL): the raft log is
	// the recorder's, and the power loss tests attack that argument.
	db, err := pebble.Open(dir, &pebble.Options{Logger: quietPebble{}, FS: fs, DisableWAL: true})
	if err != nil {
		return nil, fmt.Errorf("replication: recorder: %w", err)
	}
	r := &Recorder{db: db}
	v, closer, err := db.Get(keyApplied)
	switch {
	case err == nil:
		r.applied = binary.BigEndian.Uint64(v)
		closer.Close()
	case errors.Is(err, pebble.ErrNotFound):
	default:
		db.Close()
		return nil, fmt.Errorf("replication: recorder: %w", err)
	}
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: keyDeliveryLow, UpperBound: keyDeliveryHigh})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("replication: recorder: %w", err)
	}
	if it.Last() {
		r.seq = binary.BigEndian.Uint64(it.Key()[1:])
	}
	r.delivered.Store(int64(r.seq))
	if err := it.Close(); err != nil {
		db.Close()
		return nil, fmt.Errorf("replication: recorder: %w", err)
	}
	return r, nil
}

// Close closes the store.
func (r *Recorder) Close() error { return errors.Join(r.db.Flush(), r.db.Close()) }

// Execute records the deliveries of entry index with the index, and the
// sends it makes to VoteTo, in one batch (not synced: the raft log is the
// write-ahead log). It ignores the clock and the application payloads
// received.
func (r *Recorder) Execute(index uint64, _ group.Clock, ds []multicast.Message, _ []rawnode.AppInbound) ([]rawnode.AppSend, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if index <= r.applied {
		return nil, fmt.Errorf("replication: recorder: entry %d executed at %d", index, r.applied)
	}
	b := r.db.NewBatch()
	defer b.Close()
	seq := r.seq
	var sends []rawnode.AppSend
	for _, m := range ds {
		seq++
		v := wire.AppendUvarint(nil, index)
		v = multicast.AppendMsgID(v, m.ID)
		v = wire.AppendUvarint(v, uint64(m.Dst))
		if err := b.Set(deliveryKey(seq), v, nil); err != nil {
			return nil, err
		}
		if r.VoteTo != 0 {
			a := rawnode.AppSend{To: r.VoteTo, About: m.ID, Payload: []byte(m.ID.String())}
			v := multicast.AppendMsgID(wire.AppendUvarint(nil, uint64(a.To)), a.About)
			if err := b.Set(sentKey(index, len(sends)), wire.AppendBytes(v, a.Payload), nil); err != nil {
				return nil, err
			}
			sends = append(sends, a)
		}
	}
	if err := b.Set(keyApplied, binary.BigEndian.AppendUint64(nil, index), nil); err != nil {
		return nil, err
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		return nil, err
	}
	r.seq, r.applied = seq, index
	r.delivered.Store(int64(seq))
	return sends, nil
}

// Sent returns what Execute returned for entry index, unless ForgetSent or
// a restore dropped it.
func (r *Recorder) Sent(index uint64) ([]rawnode.AppSend, error) {
	it, err := r.db.NewIter(&pebble.IterOptions{LowerBound: sentKey(index, 0), UpperBound: sentKey(index+1, 0)})
	if err != nil {
		return nil, err
	}
	var sends []rawnode.AppSend
	for ok := it.First(); ok; ok = it.Next() {
		d := wire.NewDecoder(it.Value())
		a := rawnode.AppSend{To: partition.GroupID(d.Uvarint()), About: multicast.DecodeMsgID(d), Payload: bytes.Clone(d.Bytes())}
		if err := d.Finish(); err != nil {
			it.Close()
			return nil, fmt.Errorf("replication: recorder: send of entry %d: %w", index, err)
		}
		sends = append(sends, a)
	}
	return sends, it.Close()
}

// ForgetSent drops the sends of the entries at or below index.
func (r *Recorder) ForgetSent(index uint64) error {
	return r.db.DeleteRange(keySentLow, sentKey(index+1, 0), pebble.NoSync)
}

// Delivered returns the number of deliveries recorded, without waiting for
// an Execute in progress.
func (r *Recorder) Delivered() int64 { return r.delivered.Load() }

// AppliedIndex returns the index of the last entry recorded.
func (r *Recorder) AppliedIndex() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.applied
}

// Sync makes every recorded delivery durable: it flushes the memtable.
func (r *Recorder) Sync() error { return r.db.Flush() }

// Snapshot captures the recorded deliveries.
func (r *Recorder) Snapshot() (group.ExecutorSnapshot, error) {
	return &recorderSnapshot{snap: r.db.NewSnapshot()}, nil
}

type recorderSnapshot struct{ snap *pebble.Snapshot }

// WriteTo writes every recorded delivery, length-prefixed, then a zero;
// then every kept send, its key and its value length-prefixed, then a zero.
func (s *recorderSnapshot) WriteTo(w io.Writer) (int64, error) {
	var n int64
	for _, sec := range []struct {
		low, high []byte
		keys      bool
	}{{keyDeliveryLow, keyDeliveryHigh, false}, {keySentLow, keySentHigh, true}} {
		it, err := s.snap.NewIter(&pebble.IterOptions{LowerBound: sec.low, UpperBound: sec.high})
		if err != nil {
			return n, err
		}
		var buf []byte
		for ok := it.First(); ok; ok = it.Next() {
			buf = buf[:0]
			if sec.keys {
				buf = wire.AppendBytes(buf, it.Key())
			}
			buf = wire.AppendBytes(buf, it.Value())
			k, err := w.Write(buf)
			n += int64(k)
			if err != nil {
				it.Close()
				return n, err
			}
		}
		if err := it.Close(); err != nil {
			return n, err
		}
		k, err := w.Write([]byte{0})
		n += int64(k)
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

func (s *recorderSnapshot) Release() { s.snap.Close() }

// Restore replaces the recorded deliveries and the kept sends with a
// snapshot's.
func (r *Recorder) Restore(rd io.Reader, index uint64) error {
	br := bufio.NewReader(rd)
	r.mu.Lock()
	defer r.mu.Unlock()
	b := r.db.NewBatch()
	defer b.Close()
	if err := b.DeleteRange(keyDeliveryLow, keyDeliveryHigh, nil); err != nil {
		return err
	}
	if err := b.DeleteRange(keySentLow, keySentHigh, nil); err != nil {
		return err
	}
	var seq uint64
	for {
		v, err := readRecord(br)
		if err != nil || v == nil {
			if err != nil {
				return err
			}
			break
		}
		seq++
		if err := b.Set(deliveryKey(seq), v, nil); err != nil {
			return err
		}
	}
	for {
		k, err := readRecord(br)
		if err != nil || k == nil {
			if err != nil {
				return err
			}
			break
		}
		if !bytes.HasPrefix(k, keySentLow) {
			return fmt.Errorf("replication: recorder snapshot: send key %q", k)
		}
		v, err := readRecord(br)
		if err != nil || v == nil {
			return fmt.Errorf("replication: recorder snapshot: send %q without a value (%w)", k, err)
		}
		if err := b.Set(k, v, nil); err != nil {
			return err
		}
	}
	if err := b.Set(keyApplied, binary.BigEndian.AppendUint64(nil, index), nil); err != nil {
		return err
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		return err
	}
	if err := r.db.Flush(); err != nil {
		return err
	}
	r.seq, r.applied = seq, index
	r.delivered.Store(int64(seq))
	return nil
}

// readRecord reads one length-prefixed record of a recorder snapshot; nil
// at a zero length, the end of a section.
func readRecord(br *bufio.Reader) ([]byte, error) {
	n, err := binary.ReadUvarint(br)
	if err != nil {
		return nil, fmt.Errorf("replication: recorder snapshot: %w", err)
	}
	if n == 0 {
		return nil, nil
	}
	if n > 1<<10 {
		return nil, fmt.Errorf("replication: recorder snapshot: record of %d bytes", n)
	}
	v := make([]byte, n)
	if _, err := io.ReadFull(br, v); err != nil {
		return nil, fmt.Errorf("replication: recorder snapshot: %w", err)
	}
	return v, nil
}

// Deliveries returns every recorded delivery, in delivery order.
func (r *Recorder) Deliveries() ([]Delivery, error) {
	it, err := r.db.NewIter(&pebble.IterOptions{LowerBound: keyDeliveryLow, UpperBound: keyDeliveryHigh})
	if err != nil {
		return nil, err
	}
	var out []Delivery
	for ok := it.First(); ok; ok = it.Next() {
		d := wire.NewDecoder(it.Value())
		x := Delivery{Index: d.Uvarint(), ID: multicast.DecodeMsgID(d), Dst: partition.GroupSet(d.Uvarint())}
		if err := d.Finish(); err != nil {
			it.Close()
			return nil, fmt.Errorf("replication: recorder: %w", err)
		}
		out = append(out, x)
	}
	return out, it.Close()
}

// WriteLog writes the deliveries as "deliver" lines of a delivery log.
func (r *Recorder) WriteLog(w *check.Writer, top *partition.Topology, group partition.GroupID, replica string) error {
	ds, err := r.Deliveries()
	if err != nil {
		return err
	}
	for _, d := range ds {
		if err := w.Deliver(top.Name(group), replica, d.ID.String(), groupNames(top, d.Dst)); err != nil {
			return err
		}
	}
	return nil
}

// groupNames returns the names of the groups of s, in rank order.
func groupNames(top *partition.Topology, s partition.GroupSet) []string {
	out := make([]string, 0, s.Len())
	for _, g := range s.Slice() {
		out = append(out, top.Name(g))
	}
	return out
}

// quietPebble drops Pebble's informational logs.
type quietPebble struct{}

func (quietPebble) Infof(string, ...any)  {}
func (quietPebble) Errorf(string, ...any) {}
func (quietPebble) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf("replication: pebble: "+format, args...))
}
