package replication

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/cockroachdb/pebble/v2"

	"github.com/flexkv/flexkv/internal/wire"
	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/multicast/check"
	"github.com/flexkv/flexkv/multicast/rawnode"
	"github.com/flexkv/flexkv/partition"
)

// Recorder is an Executor that records a replica's deliveries durably, in a
// Pebble store of its own, and writes them as a delivery log (DESIGN 10.1).
// It stands in for the transaction executor in this package's tests, which
// check the ordering the shell produces without executing anything.
type Recorder struct {
	db *pebble.DB

	mu      sync.Mutex
	applied uint64
	seq     uint64 // deliveries recorded
}

var _ Executor = (*Recorder)(nil)

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
)

func deliveryKey(seq uint64) []byte {
	return binary.BigEndian.AppendUint64([]byte("d"), seq)
}

// OpenRecorder opens (or creates) a recorder in dir.
func OpenRecorder(dir string) (*Recorder, error) {
	db, err := pebble.Open(dir, &pebble.Options{Logger: quietPebble{}})
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
	if err := it.Close(); err != nil {
		db.Close()
		return nil, fmt.Errorf("replication: recorder: %w", err)
	}
	return r, nil
}

// Close closes the store.
func (r *Recorder) Close() error { return r.db.Close() }

// Execute records the deliveries of entry index with the index, in one
// batch (not synced: the raft log is the write-ahead log). It sends nothing
// and ignores application payloads.
func (r *Recorder) Execute(index uint64, ds []multicast.Message, _ []rawnode.AppInbound) ([]rawnode.AppSend, error) {
	return nil, r.execute(index, ds)
}

// Sent returns nothing: a recorder sends nothing.
func (r *Recorder) Sent(uint64) ([]rawnode.AppSend, error) { return nil, nil }

// ForgetSent does nothing: a recorder keeps no sends.
func (r *Recorder) ForgetSent(uint64) error { return nil }

func (r *Recorder) execute(index uint64, ds []multicast.Message) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	b := r.db.NewBatch()
	defer b.Close()
	seq := r.seq
	for _, m := range ds {
		seq++
		v := wire.AppendUvarint(nil, index)
		v = wire.AppendMsgID(v, m.ID)
		v = wire.AppendUvarint(v, uint64(m.Dst))
		if err := b.Set(deliveryKey(seq), v, nil); err != nil {
			return err
		}
	}
	if err := b.Set(keyApplied, binary.BigEndian.AppendUint64(nil, index), nil); err != nil {
		return err
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		return err
	}
	r.seq, r.applied = seq, index
	return nil
}

// AppliedIndex returns the index of the last entry recorded.
func (r *Recorder) AppliedIndex() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.applied
}

// Sync makes every recorded delivery durable.
func (r *Recorder) Sync() error { return r.db.LogData(nil, pebble.Sync) }

// Snapshot captures the recorded deliveries.
func (r *Recorder) Snapshot() (ExecutorSnapshot, error) {
	return &recorderSnapshot{snap: r.db.NewSnapshot()}, nil
}

type recorderSnapshot struct{ snap *pebble.Snapshot }

// WriteTo writes every recorded delivery, length-prefixed, then a zero.
func (s *recorderSnapshot) WriteTo(w io.Writer) (int64, error) {
	it, err := s.snap.NewIter(&pebble.IterOptions{LowerBound: keyDeliveryLow, UpperBound: keyDeliveryHigh})
	if err != nil {
		return 0, err
	}
	var n int64
	var buf []byte
	for ok := it.First(); ok; ok = it.Next() {
		buf = wire.AppendBytes(buf[:0], it.Value())
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
	return n + int64(k), err
}

func (s *recorderSnapshot) Release() { s.snap.Close() }

// RestoreSnapshot replaces the recorded deliveries with a snapshot's.
func (r *Recorder) RestoreSnapshot(rd io.Reader, index uint64) error {
	br := bufio.NewReader(rd)
	r.mu.Lock()
	defer r.mu.Unlock()
	b := r.db.NewBatch()
	defer b.Close()
	if err := b.DeleteRange(keyDeliveryLow, keyDeliveryHigh, nil); err != nil {
		return err
	}
	var seq uint64
	for {
		n, err := binary.ReadUvarint(br)
		if err != nil {
			return fmt.Errorf("replication: recorder snapshot: %w", err)
		}
		if n == 0 {
			break
		}
		if n > 1<<10 {
			return fmt.Errorf("replication: recorder snapshot: record of %d bytes", n)
		}
		v := make([]byte, n)
		if _, err := io.ReadFull(br, v); err != nil {
			return fmt.Errorf("replication: recorder snapshot: %w", err)
		}
		seq++
		if err := b.Set(deliveryKey(seq), v, nil); err != nil {
			return err
		}
	}
	if err := b.Set(keyApplied, binary.BigEndian.AppendUint64(nil, index), nil); err != nil {
		return err
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return err
	}
	r.seq, r.applied = seq, index
	return nil
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
		x := Delivery{Index: d.Uvarint(), ID: d.MsgID(), Dst: partition.GroupSet(d.Uvarint())}
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
