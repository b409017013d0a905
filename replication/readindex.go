package replication

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"
)

// Batched read barriers (DESIGN 5, Reads): every linearizable read at the
// leader needs a barrier (ReadBarrier) that starts after the read was
// invoked, and one barrier serves every read that joined it before it
// started, as etcd batches its ReadIndex requests. Reads arrive while a
// round runs: they join the next round, which starts when the running one
// ends, so at most one round runs and one waits, and the rounds cost a
// heartbeat round each, however many reads share them.
//
// Why sharing is sound: a round reads the commit index after it starts,
// hence after every read that joined it was invoked, and confirms the
// leadership in that term after that, by answers to calls made after that
// (barrierRound, confirmLeader); so it gives each of its reads what a
// barrier of its own, started a little later, would.

// readRounds is the queue of read rounds of a replica.
type readRounds struct {
	mu      sync.Mutex
	running bool       // a round runs (runReadRounds)
	next    *readRound // the round that the reads arriving now join; nil: none yet

	rounds atomic.Uint64 // rounds run
	served atomic.Uint64 // reads the rounds served
	early  atomic.Uint64 // rounds raft's VerifyLeader passed before fresh answers (confirmLeader)
}

// readRound is one barrier shared by the reads that joined it.
type readRound struct {
	done  chan struct{} // closed when err is set
	err   error
	reads uint64 // reads that joined; fixed once the round left next
	// calls is the count of raft's AppendEntries calls (peerProgress)
	// when the last read joined: the round counts answers to calls made
	// after it, which every read of the round was invoked before.
	calls uint64
}

// join adds a read, invoked when the leader had made calls AppendEntries
// calls, to the next round and returns it; when no round runs, it starts
// that one at once with run, in a goroutine that ends with the last round
// (each bounded by ApplyTimeout).
func (q *readRounds) join(calls uint64, run func(*readRound)) *readRound {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.next == nil {
		q.next = &readRound{done: make(chan struct{})}
	}
	rd := q.next
	rd.reads++
	rd.calls = max(rd.calls, calls)
	if !q.running {
		q.running, q.next = true, nil
		go run(rd)
	}
	return rd
}

// after ends round rd's turn and returns the round to run next, nil when
// no read waits.
func (q *readRounds) after() *readRound {
	q.mu.Lock()
	defer q.mu.Unlock()
	rd := q.next
	q.next = nil
	if rd == nil {
		q.running = false
	}
	return rd
}

// runReadRounds runs round rd, then the rounds the reads that arrived
// meanwhile joined, until none waits.
func (r *Replica) runReadRounds(rd *readRound) {
	for rd != nil {
		r.reads.rounds.Add(1)
		r.reads.served.Add(rd.reads)
		rd.err = r.barrierRound(rd.calls)
		close(rd.done)
		rd = r.reads.after()
	}
}

// ReadStats counts the read barriers of a replica since it opened.
type ReadStats struct {
	// Rounds is the number of barrier rounds run (a heartbeat round each,
	// or a barrier entry in the log when the leader has not committed an
	// entry of its term yet); Reads the reads they served. Reads/Rounds
	// is how many reads shared a round.
	Rounds, Reads uint64
	// Early counts the rounds in which hashicorp/raft's VerifyLeader
	// passed before a majority had answered calls made after the round's
	// reads were invoked (it may count older answers): those rounds
	// waited on for fresh answers (confirmLeader).
	Early uint64
}

// ReadStats returns the replica's read-barrier counts.
func (r *Replica) ReadStats() ReadStats {
	return ReadStats{Rounds: r.reads.rounds.Load(), Reads: r.reads.served.Load(), Early: r.reads.early.Load()}
}

// WaitApplied returns once the replica's state has applied index, or with
// ctx's error, or raft.ErrRaftShutdown when the replica stops. A reader
// that must let the state move on (an executor read that a queued
// delivery holds up) waits with it for the next entry.
func (r *Replica) WaitApplied(ctx context.Context, index uint64) error {
	for {
		done, advanced := r.fsm.appliedAtLeast(index)
		if done {
			return nil
		}
		if err := r.waitAdvanced(ctx, advanced); err != nil {
			return err
		}
	}
}

// waitAdvanced waits until advanced closes (the state applied another
// entry), ctx ends, or the replica stops.
func (r *Replica) waitAdvanced(ctx context.Context, advanced <-chan struct{}) error {
	select {
	case <-advanced:
		return nil
	case <-r.stop:
		return raft.ErrRaftShutdown
	case <-ctx.Done():
		return ctx.Err()
	}
}

// WaitEpoch returns once the replica's group has started epoch e (DESIGN
// 14), or with ctx's error, or raft.ErrRaftShutdown when the replica stops:
// a request that names an epoch its client saw begin at another group waits
// here for this group's delivery of the same change.
func (r *Replica) WaitEpoch(ctx context.Context, e uint64) error {
	for {
		// The channel first: an entry applied after it is taken closes it,
		// so the epoch read below cannot miss the change.
		_, advanced := r.fsm.appliedAtLeast(r.Applied() + 1)
		if r.Epoch() >= e {
			return nil
		}
		if advanced == nil {
			continue
		}
		if err := r.waitAdvanced(ctx, advanced); err != nil {
			return err
		}
	}
}

// Applied returns the index of the last entry the replica's state applied.
func (r *Replica) Applied() uint64 { return r.fsm.appliedIdx.Load() }
