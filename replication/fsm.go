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

	"github.com/hashicorp/raft"

	"github.com/flexkv/flexkv/group"
	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/multicast/rawnode"
)

// fsm is the raft state machine of a group replica.
type fsm struct {
	cfg  group.Config
	exec group.Executor
	// output receives what each applied entry produced (the replica's
	// transmitter takes the frames when it leads).
	output func(out rawnode.Output)

	// invalid counts the entries the state skipped as malformed (a frame
	// from a faulty sender, an ack of envelopes never sent): on a healthy
	// cluster none; one at a single replica would mean its state diverged.
	invalid atomic.Int64
	// appliedIdx mirrors state.Applied(); applying is the index of the
	// entry being applied, 0 between batches (see applied).
	appliedIdx, applying atomic.Uint64
	// epoch mirrors state.Epoch() (DESIGN 14), for requests that name none.
	epoch atomic.Uint64
	// execRestores counts the executor states installed from raft
	// snapshots (a replica that fell behind its group's log, or was wiped).
	execRestores atomic.Int64

	mu sync.Mutex
	m  *group.Machine
	// advanced, made when a reader waits (appliedAtLeast), is closed at the
	// next advance of the state; nil while none waits, so that a batch
	// applied with no reader waiting allocates nothing.
	advanced chan struct{}
	// persisted is the index of the last raft snapshot persisted by this
	// process; the one before it bounds what the executor keeps for Sent.
	persisted uint64
	// stateMax, when set, replaces StateBytesMax (tests).
	stateMax uint64
}

var _ raft.BatchingFSM = (*fsm)(nil)

func newFSM(cfg group.Config, exec group.Executor, output func(rawnode.Output)) (*fsm, error) {
	m, err := group.NewMachine(cfg, exec)
	if err != nil {
		return nil, err
	}
	f := &fsm{cfg: cfg, exec: exec, output: output, m: m}
	f.epoch.Store(m.State().Epoch())
	return f, nil
}

// appliedAtLeast reports whether the state has applied index; if not, it
// returns a channel closed the next time the state advances.
func (f *fsm) appliedAtLeast(index uint64) (bool, <-chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.m.State().Applied() >= index {
		return true, nil
	}
	if f.advanced == nil {
		f.advanced = make(chan struct{})
	}
	return false, f.advanced
}

// applied returns the state's applied index and the index of the entry
// being applied now (0: none), without waiting for the state: monitoring
// reads them while an entry executes.
func (f *fsm) applied() (applied, applying uint64) {
	return f.appliedIdx.Load(), f.applying.Load()
}

// signalAdvanced wakes the waiters of appliedAtLeast, if any (with f.mu
// held).
func (f *fsm) signalAdvanced() {
	if f.advanced != nil {
		close(f.advanced)
		f.advanced = nil
	}
}

// ApplyBatch applies committed entries in log order. The response of a
// command is the outcome of the request it carries (group.Machine.Apply;
// nil: accepted).
func (f *fsm) ApplyBatch(logs []*raft.Log) []any {
	f.mu.Lock()
	defer f.mu.Unlock()
	res := make([]any, len(logs))
	for i, l := range logs {
		if l.Type != raft.LogCommand || l.Index <= f.m.State().Applied() {
			continue
		}
		f.applying.Store(l.Index)
		out, result, err := f.m.Apply(l.Index, l.Data)
		if err != nil {
			// The replica can no longer keep its state: stop it rather
			// than diverge from the group.
			panic(fmt.Sprintf("replication: %v", err))
		}
		res[i] = result
		if errors.Is(result, multicast.ErrInvalid) {
			f.invalid.Add(1)
		}
		if f.output != nil {
			f.output(out)
		}
	}
	f.applying.Store(0)
	f.appliedIdx.Store(f.m.State().Applied())
	f.epoch.Store(f.m.State().Epoch())
	f.signalAdvanced()
	return res
}

// Apply applies one entry.
func (f *fsm) Apply(l *raft.Log) any { return f.ApplyBatch([]*raft.Log{l})[0] }

// withState runs fn with the state locked (reads by the replica).
func (f *fsm) withState(fn func(*group.State)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f.m.State())
}

// Snapshot captures the protocol state and makes the executor durable up to
// it. The executor's own state is written by Persist, streaming.
func (f *fsm) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	sn, err := f.m.Snapshot()
	if err != nil {
		return nil, fmt.Errorf("replication: snapshot: %w", err)
	}
	return &fsmSnapshot{fsm: f, sn: sn}, nil
}

// persistedSnapshot records that the raft snapshot at index is durable: the
// executor may forget its Sent records up to the snapshot before it. (Not
// up to this one: should this snapshot prove unreadable at the next start,
// raft falls back to the previous one, which raft keeps too.)
func (f *fsm) persistedSnapshot(index uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	prev := f.persisted
	if index > f.persisted {
		f.persisted = index
	}
	if prev == 0 {
		return nil
	}
	return f.exec.ForgetSent(prev)
}

// Restore replaces the state with a snapshot, as group.Machine.Restore
// says: the protocol state always, the executor's only if the executor is
// behind the executor state the snapshot carries.
//
// Restore runs at startup (the latest local snapshot) and when the leader
// installs a snapshot on a follower that fell behind. In the second case an
// executor that is already ahead is kept and nothing is synced: after a crash
// its durable index may be below the snapshot's, which is still sound
// because startup restores that same snapshot first.
func (f *fsm) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	r := bufio.NewReader(rc)
	var n uint64
	if err := binary.Read(r, binary.BigEndian, &n); err != nil {
		return fmt.Errorf("replication: restore: %w", err)
	}
	// The length is the stream's claim: a corrupt or hostile snapshot may
	// claim far more than it carries. The buffer grows with the bytes that
	// arrive (a chunk at a time), never to the claim up front.
	if n > f.stateBytesMax() {
		return fmt.Errorf("replication: restore: a protocol state of %d bytes, more than the bound of %d", n, f.stateBytesMax())
	}
	var buf bytes.Buffer
	buf.Grow(int(min(n, restoreChunk)))
	if _, err := io.CopyN(&buf, r, int64(n)); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return fmt.Errorf("replication: restore: a protocol state of %d bytes declared, %d read: %w", n, buf.Len(), err)
	}
	st, err := group.RestoreState(f.cfg, buf.Bytes())
	if err != nil {
		return fmt.Errorf("replication: restore: %w", err)
	}
	var execIndex uint64
	if err := binary.Read(r, binary.BigEndian, &execIndex); err != nil {
		return fmt.Errorf("replication: restore: %w", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	restored, err := f.m.Restore(st, execIndex, r)
	if err != nil {
		return fmt.Errorf("replication: %w", err)
	}
	if restored {
		f.execRestores.Add(1)
	}
	f.appliedIdx.Store(st.Applied())
	f.epoch.Store(st.Epoch())
	f.signalAdvanced()
	return nil
}

// StateBytesMax bounds the protocol state a snapshot may declare: far above
// what the configured bounds let a state hold (outboxes, holdback, client
// sessions), yet a bound on what a restore reads into memory.
const StateBytesMax = 1 << 34

// restoreChunk is the buffer a restore starts with; it grows, by doubling,
// only as the state's bytes arrive.
const restoreChunk = 1 << 20

// stateBytesMax is the bound on a restored state: StateBytesMax unless a
// test set stateMax.
func (f *fsm) stateBytesMax() uint64 {
	if f.stateMax > 0 {
		return f.stateMax
	}
	return StateBytesMax
}

type fsmSnapshot struct {
	fsm *fsm
	sn  group.Snapshot
}

// Persist writes the state's length and bytes, the executor's index, then
// the executor's state.
func (s *fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	w := bufio.NewWriter(sink)
	err := binary.Write(w, binary.BigEndian, uint64(len(s.sn.State)))
	if err == nil {
		_, err = w.Write(s.sn.State)
	}
	if err == nil {
		err = binary.Write(w, binary.BigEndian, s.sn.ExecIndex)
	}
	if err == nil {
		_, err = s.sn.Exec.WriteTo(w)
	}
	if err == nil {
		err = w.Flush()
	}
	if err != nil {
		return errors.Join(fmt.Errorf("replication: persist snapshot: %w", err), sink.Cancel())
	}
	if err := sink.Close(); err != nil {
		return err
	}
	// Forgetting is an optimisation: a failure leaves records behind, not a
	// wrong state, and the snapshot itself is good.
	_ = s.fsm.persistedSnapshot(s.sn.Index)
	return nil
}

func (s *fsmSnapshot) Release() { s.sn.Exec.Release() }
