package group

import (
	"errors"
	"io"

	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/multicast/rawnode"
)

// Executor is the one contract of what runs a group replica's deliveries
// (DESIGN 1, 5, 6). Package executor implements it on Pebble. A Machine
// calls it: Execute, Sent and AppliedIndex as it applies log entries, Sync,
// Snapshot and Restore as it is snapshotted and restored (Machine.Snapshot,
// Machine.Restore); the replication shell (and the whole-database
// simulator, which plays its part) calls ForgetSent as its snapshots become
// durable. Nothing else calls it.
//
// The caller serializes the calls, but for a snapshot's WriteTo and
// Release, which may run concurrently with later calls.
//
// The obligations, which the machine's replay rule (Machine.Apply) and the
// shell's snapshots rely on:
//
//   - Execute is deterministic: the same entries, with the same Clock, give
//     the same sends and the same state on every replica. It reads no clock
//     of its own, draws no random numbers and lets no map's iteration order
//     reach its state or its sends.
//   - Execute runs the deliveries of entry index, in delivery order, and the
//     application payloads (votes) the entry brought, in channel order, and
//     returns the application payloads to send, which the machine queues on
//     the group's channels like the core's envelopes. index is above
//     AppliedIndex.
//   - Execute need not sync, but stores the entry's index atomically with
//     its effects and its sends, so that after a crash AppliedIndex names the
//     last entry whose effects survived, and Sent can still answer for it.
//   - Sent(index), for an index at or below AppliedIndex, returns what
//     Execute returned for that entry: a replica that replays an entry its
//     executor ran before a restart queues those sends again without
//     executing, because the channels they ride are part of the replicated
//     state. It keeps them until ForgetSent(index) or a later one: the shell
//     calls ForgetSent once a durable snapshot covers the entry and no replay
//     can ask for it again.
//   - Sync makes every executed entry durable. Machine.Snapshot calls it
//     first, so that AppliedIndex never falls behind the snapshot that a
//     replay starts from.
//   - Snapshot is cheap: it captures the state as of AppliedIndex, between
//     two Executes, without copying it (a store snapshot, not a dump). The
//     shell writes it out later (ExecutorSnapshot.WriteTo), concurrently with
//     further Executes, and then releases it.
//   - Restore discards all prior state and replaces it with what a
//     snapshot's WriteTo wrote when the executor was at index; AppliedIndex
//     is index afterwards. It is atomic: a crash or a bad stream leaves the
//     old state or the new one, never a mix.
//
// An error from any method but ForgetSent means that the replica can no
// longer keep its state: it stops rather than diverge from its group
// (ErrExecutor). A ForgetSent that fails leaves records behind, not a wrong
// state.
type Executor interface {
	// Execute runs entry index at the group's log time clock.
	Execute(index uint64, clock Clock, deliveries []multicast.Message, inbound []rawnode.AppInbound) ([]rawnode.AppSend, error)
	// Sent returns what Execute returned for entry index <= AppliedIndex.
	Sent(index uint64) ([]rawnode.AppSend, error)
	// ForgetSent drops what Sent keeps for the entries at or below index.
	ForgetSent(index uint64) error
	// AppliedIndex is the last entry whose effects are stored.
	AppliedIndex() uint64
	// Sync makes every executed entry durable.
	Sync() error
	// Snapshot captures the state as of AppliedIndex.
	Snapshot() (ExecutorSnapshot, error)
	// Restore replaces the state with a snapshot taken at index.
	Restore(r io.Reader, index uint64) error
}

// ExecutorSnapshot is an executor's state captured by Executor.Snapshot.
type ExecutorSnapshot interface {
	// WriteTo writes the state as the stream Executor.Restore reads.
	WriteTo(w io.Writer) (int64, error)
	// Release frees what the snapshot holds; the snapshot is not used
	// after it.
	Release()
}

// Clock is a group's log time at an entry (DESIGN 6: sessions expire by
// log time, never by count): Now is State.LogTime after the entry, and
// SessionTicks the group's Config.SessionTicks, how long a session lives
// idle. Every replica sees the same Clock at the same entry. An executor
// that keeps per-session state (package executor keeps the results a
// session has not acknowledged) expires it by this clock; one that keeps
// none ignores it.
type Clock struct {
	Now          uint64
	SessionTicks uint64
}

// ErrExecutor wraps a failure of the executor: the replica can no longer
// keep its state, and must stop rather than diverge from its group.
var ErrExecutor = errors.New("group: executor failed")
