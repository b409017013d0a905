// Package executor is FlexKV's deterministic transaction executor (DESIGN
// 2.5, 6): it runs a group replica's deliveries, transactions and
// stored-procedure calls of package txn, on the replica's kv.Store in
// delivery order, one Pebble batch per log entry, and exchanges the votes by
// which a transaction commits or aborts at every destination alike. It keeps
// results by transaction id, its queue of deliveries that wait, and what
// each entry sent, so that a restarted replica neither runs anything twice
// nor forgets a vote.
package executor

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"

	"github.com/flexkv/flexkv/group"
	"github.com/flexkv/flexkv/kv"
	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/multicast/rawnode"
	"github.com/flexkv/flexkv/partition"
	"github.com/flexkv/flexkv/txn"
)

// Executor runs the deliveries of one group replica on its kv.Store
// (DESIGN 2.5, 5, 6), with the outcome of running them in delivery order.
// It is the executor of the group's contract (group.Executor): the group's
// state machine calls Execute, single-threaded, in log order, with each
// entry's deliveries, the votes the entry brought from other groups and
// the group's log time, and snapshots and restores it for the replication
// shell through the same contract.
//
// # Execution order and votes
//
// Each delivery is a transaction or a stored-procedure call (DecodePayload).
// The group runs its piece of it (Txn.Pieces; a procedure's Run). A
// delivery that cannot run yet joins a durable queue, in delivery order: a
// transaction piece that waits for votes (Piece.Voters) it does not have,
// or any delivery that conflicts with one queued ahead of it. A piece whose
// group votes (Piece.VoteTo) evaluates its vote (EvalVote) and sends it
// once, as soon as no delivery ahead of it that has not run may write what
// the vote reads; a delivery runs as soon as it has its votes and conflicts
// with no delivery ahead of it that has not run. An all-or-nothing
// stored-procedure call (txn.AllOrNothing) to several groups votes too, at
// every destination whose piece can abort (txn.PieceVotes): its vote is a
// trial run of its piece, taken at the head of the queue, and it commits
// only if no destination's piece aborted (runCall). A destination whose
// piece cannot abort sends no vote; if some other piece can, it waits for
// those votes, after a trial run at the head of the queue that sends
// nothing and records what the call touches, as a voter's does, so that
// the deliveries behind it that touch none of it run meanwhile. These two
// rules
// (conflict.go) give every vote, every result and the state the values of
// a serial execution in delivery order, while a piece waiting for a vote's
// round trip between groups holds back only the deliveries that touch its
// keys. Votes that arrive are stored until their piece runs, which consumes
// them; they may arrive before their delivery. Because every group
// delivers in an order consistent with the others' (the multicast's acyclic
// order), and the head of the queue can always vote, the waits cannot form
// a cycle (DESIGN 6).
//
// A piece writes its effects and its PieceResult in the batch of the entry
// that runs it. A session's result is kept until the session acknowledges
// it (its next request delivered here) or expires here; the others are kv
// results under the transaction id (MsgID.String), of which kv keeps the
// latest ResultsMax (see Session results, sessions.go). A
// delivery that cannot run at all (a malformed payload, one that does not
// fit the partition map, an unknown procedure) gets an aborted PieceResult
// naming the problem, at once, since it touches no key; every replica
// records the same.
//
// # Reused ids
//
// A delivery whose id already has a result, or is queued, is skipped (a
// duplicate): in delivery order it would find the first one's result. The
// multicast delivers a message once; a re-submitted transaction keeps its
// first result. But an id comes back in other ways: a client that reuses
// one for another transaction, or a re-submission accepted again after the
// entry group forgot the id while a destination still holds its result,
// and another dropped it (anonymous results are kept in bounded number,
// a session's until acknowledged). Then the
// destinations disagree on whether the delivery is a duplicate, and one
// that runs it may wait for the vote of one that skipped it. So a skipped
// delivery whose piece would vote sends a used vote instead (Vote.Used),
// with the digest of the delivery (dst and payload, stored beside each
// result and kept with each queued delivery), and says whether the id was
// used here by another transaction (Vote.Other). A destination that runs a
// piece with that digest takes a used vote for the voter's vote and aborts
// the piece: `txn: id c77.1 was already used at group eu` (plus `by another
// transaction`). It does not run the transaction a second time, nor wait.
//
// One exception keeps a plain re-submission harmless: a duplicate with the
// digest of the queued delivery under its id, whose piece has not voted
// yet, sends nothing, as that piece's own vote, sent later, is the one the
// other destinations wait for. A used vote never overrides a real one: a
// real vote that arrives after a used vote of the same group on the same
// id replaces it (the used vote was about another delivery, which the
// digest tells), and a used vote after a real one is junk. A used vote
// whose digest is not the piece's is no vote for it: the piece waits for
// the real one that replaces it. Every voter delivers the piece's message
// too, and sends for it a real vote or a used vote with its digest; as
// groups deliver any two messages in the same relative order and channels
// are FIFO, the used votes of a voter on the id that reach a destination
// before the one it needs are about messages the destination delivered
// first, whose pieces consume them. So every wait ends. A group that skips
// a delivery whose piece does not vote holds nobody up, and its part of a
// reused id does not run: reusing an id is the client's error, and only
// the waits are guarded against.
//
// # Durability
//
// Everything an entry changes (user writes, results, the queue and the
// voted marks of its pieces, stored votes, the entry's sends) is committed
// in one kv batch with the entry's index, so a crash leaves the state of
// some entry, whole. The executor keeps the queue and the set of stored
// votes in memory too, read back from the store when it starts, when a
// snapshot is restored, and after an Execute that failed. The sends are
// kept by index (Sent) so that a replica whose store is ahead of the raft
// snapshot it restarts from can hand the channel layer the sends of the
// entries it does not execute again; ForgetSent drops them once no replay
// can need them.
//
// # Bounds
//
// The executor refuses nothing that was delivered or received: refusing
// would break agreement between replicas and groups. Its queue holds the
// pieces that wait for votes and the deliveries that conflict with a queued
// one, which is at most what the multicast delivers to the group in one
// vote's round trip; the stored votes are those of
// transactions a voter executed before this group delivered them. Both are
// bounded upstream, by the admission control of the entry groups (the
// channel outboxes' bound, which stops new requests while groups lag) and
// the channel's hold-back bound. Stats reports both. A vote for an id that
// already has a result here, or that repeats a stored vote, is junk:
// counted, not stored.
//
// Votes for transactions this group never delivers (a faulty sender's, a
// used vote on an id whose result this group has forgotten) would stay
// stored forever; Config.StoredVoteBytesMax bounds the stored votes in
// bytes. When an entry leaves more, the executor deletes the oldest stored
// votes (by arrival, a number stored with each) of transactions not queued
// here until they fit (Stats.VotesEvicted): a function of the entries
// executed, so every replica deletes the same ones, also one restarted in
// between. A vote of a queued transaction is never deleted: its piece
// waits for it. A needed vote that might be deleted is one that arrived
// before its delivery, while its transaction is in flight to this group;
// the votes stored after it would have to exceed the bound before the
// delivery comes. But the votes on transactions in flight are bounded
// upstream (above): the channel layer refuses new requests once the
// backlog behind a peer reaches its bound (channel.Config.BacklogBytesMax,
// 16 MiB by default, of all that is sent, votes a small part of it), and
// holds back at most HoldbackBytesMax from each sender; and the leftovers,
// which alone grow without bound, are older and go first. Only many groups
// with full backlogs of votes in flight to one group at once, or a bound
// set below what is in flight, could delete a needed vote: its piece would
// then wait forever, on every replica alike, and Stats.VotesEvicted would
// say why.
//
// # Determinism
//
// Execute reads no clock, draws no random numbers and iterates no map: the
// same inputs in the same order give the same store contents and the same
// sends on every replica, provided every replica has the same partition
// map, topology and registered procedures.
type Executor struct {
	cfg Config
	// pmCur is the map the executor routes with now: written with mu
	// and pmMu held, read with either; pmNext the maps SetPartitions gave
	// for the next entry, pms those queued deliveries may need (moves.go;
	// both guarded by mu).
	pmMu   sync.Mutex
	pmCur  *partition.PartitionMap
	pmNext []group.PartitionSwitch
	pms    []pmAt // every map a queued delivery may need, by sequence

	// mu serializes the methods that write or capture the state. The
	// fields below are guarded by it.
	mu   sync.Mutex
	meta execMeta // the committed meta record
	// queue is the committed queue, in delivery order.
	queue []*queued
	// votes are the groups whose votes are stored, by transaction.
	votes map[multicast.MsgID]partition.GroupSet
	// stored are the arrival and size of every stored vote, arrivals
	// the stored votes oldest first, with stale entries (a vote consumed,
	// evicted or replaced since), and voteBytes the size of them all
	// (voteRecordSize): the bound on stored votes (evictVotes).
	stored    map[voteSlot]voteInfo
	arrivals  []arrival
	voteBytes int64
	// sessions are the session records (sessions.go).
	sessions *sessionTable
	// conflicts is the pass's scratch set, kept to reuse its memory.
	conflicts *conflictSet
	// spareView is the view of the last piece that ran, kept to reuse
	// its overlay's room for writes (newView).
	spareView *procView
	// stale: an Execute failed after changing queue or votes, which must
	// be read back from the store.
	stale bool
	// rel are the open jobs and early release notes (release.go).
	rel releases

	// unreleased are the jobs that ran and are not released (release.go):
	// Result does not answer them. Guarded by relMu, not mu, so that
	// Result does not wait for an Execute.
	relMu      sync.Mutex
	unreleased map[multicast.MsgID]struct{}

	statsMu sync.Mutex
	stats   Stats
	// checkpointErr is the last checkpoint's error (backup.go).
	checkpointErr error
}

// Config configures an Executor.
type Config struct {
	// Store holds the group replica's state; the executor does not close
	// it.
	Store      *kv.Store
	Partitions *partition.PartitionMap
	Topology   *partition.Topology
	// Self is the group the replica belongs to.
	Self partition.GroupID
	// Procedures are the stored procedures calls may name; nil: none.
	Procedures *txn.Registry
	// StoredVoteBytesMax bounds the stored votes, in bytes (key and value
	// of their records): storing one beyond it drops the oldest stored
	// votes of transactions not queued here (see Executor, Bounds). 0:
	// StoredVoteBytesDefault; otherwise at least StoredVoteBytesMin. Every
	// replica of a group must have the same.
	StoredVoteBytesMax int64
	// ResultSessionsMax bounds the sessions whose results this group keeps
	// until they are acknowledged (see Session results, sessions.go): a
	// session delivered past it drops the least recently used one and its
	// result. 0: ResultSessionsDefault. Every replica of a group must have
	// the same.
	ResultSessionsMax int
	// Strict releases results in real-time order (release.go): a result
	// is answered once every transaction that conflicts with it and ran
	// before it here is complete, and the destinations of a transaction
	// tell each other their releases. Without it a result is answered when
	// its piece runs: serializable, not strictly. Every replica of every
	// group must have the same.
	Strict bool
	// OnReleased, when not nil, is called after each commit with the
	// transactions whose results the commit released (with Strict; without,
	// those it stored), in the order they were released (which may differ
	// from delivery order, see Executor). It must not block (it runs in the
	// raft apply loop) and must not call Execute; done and its results are
	// the callee's, the executor keeps none of them.
	OnReleased func(done []Executed)
}

// Executed is a transaction whose result a commit released: its id and its
// result at this group, as Result reads it back.
type Executed struct {
	ID     multicast.MsgID
	Result txn.PieceResult
}

// Bounds of Config.StoredVoteBytesMax.
const (
	// StoredVoteBytesDefault is 64 MiB: some 20,000 votes of the largest
	// size (txn.VoteBytesMax), a million of a usual one (a few dozen
	// bytes).
	StoredVoteBytesDefault = 64 << 20
	// StoredVoteBytesMin holds 16 votes of the largest size.
	StoredVoteBytesMin = 16 * voteRecordMax
)

// Stats counts what an executor did. Every field is a function of
// the replica's inputs, stored with its state: replicas at the same entry
// report the same numbers, and they survive restarts.
type Stats struct {
	Executed    uint64 // results stored: pieces run, malformed deliveries included
	Aborted     uint64 // of which aborted
	Queued      uint64 // deliveries waiting now
	VotesStored uint64 // votes stored now
	VotesJunk   uint64 // votes ignored: undecodable, misdirected, late, repeated or replaced
	// VotesEarly counts the votes sent while a delivery ahead had not
	// run, RanAhead the deliveries run before one ahead of them: what
	// pipelining gained.
	VotesEarly uint64
	RanAhead   uint64
	// Duplicates counts the deliveries skipped because their id was
	// already used here (see Executor, Reused ids).
	Duplicates uint64
	// VotesSent counts the votes sent, one per group sent to, used votes
	// included.
	VotesSent uint64
	// VotesEvicted counts the stored votes dropped to keep within
	// Config.StoredVoteBytesMax (see Executor, Bounds).
	VotesEvicted uint64
	// Sessions and SessionResults are the session records kept now and
	// the results they keep, unacknowledged (sessions.go);
	// ResultsAcked counts the results deleted by an acknowledgement,
	// SessionsExpired the records dropped by log time, SessionsEvicted
	// those dropped for Config.ResultSessionsMax.
	Sessions        uint64
	SessionResults  uint64
	ResultsAcked    uint64
	SessionsExpired uint64
	SessionsEvicted uint64
	// Open counts the jobs that ran here and are not complete, Unreleased
	// those of them whose answers wait for a conflicting transaction to
	// complete, EarlyNotes the release notes kept for jobs that have not
	// run here (Config.Strict, release.go).
	Open, Unreleased, EarlyNotes uint64
}

// NewExecutor returns the executor of cfg.Store, resuming its queue and
// stored votes.
func NewExecutor(cfg Config) (*Executor, error) {
	switch {
	case cfg.Store == nil:
		return nil, errors.New("txn: executor without a store")
	case cfg.Partitions == nil || cfg.Topology == nil:
		return nil, errors.New("txn: executor without a partition map or topology")
	case !cfg.Topology.Valid(cfg.Self):
		return nil, fmt.Errorf("txn: executor of group %d, not a group of the topology (0..%d)", cfg.Self, cfg.Topology.Len()-1)
	case cfg.StoredVoteBytesMax == 0:
		cfg.StoredVoteBytesMax = StoredVoteBytesDefault
	case cfg.StoredVoteBytesMax < StoredVoteBytesMin:
		return nil, fmt.Errorf("txn: executor: stored vote bound of %d bytes, want at least StoredVoteBytesMin (%d), or 0 for the default (%d)",
			cfg.StoredVoteBytesMax, StoredVoteBytesMin, StoredVoteBytesDefault)
	}
	switch {
	case cfg.ResultSessionsMax == 0:
		cfg.ResultSessionsMax = ResultSessionsDefault
	case cfg.ResultSessionsMax < ResultSessionsMin:
		return nil, fmt.Errorf("txn: executor: result sessions bound %d, want at least %d, or 0 for the default (%d)",
			cfg.ResultSessionsMax, ResultSessionsMin, ResultSessionsDefault)
	}
	e := &Executor{cfg: cfg, conflicts: newConflictSet()}
	if err := e.load(); err != nil {
		return nil, err
	}
	return e, nil
}

// load reads the committed state back from the store; mu is held (or e is
// new).
func (e *Executor) load() error {
	s := e.cfg.Store
	if err := e.loadPartitions(); err != nil {
		return fmt.Errorf("txn: executor state: %w", err)
	}
	m, err := loadMeta(s)
	if err != nil {
		return err
	}
	var queue []*queued
	err = scanAux(s, []byte{auxQueue}, []byte{auxQueue + 1}, func(r kv.KV) error {
		seq, mark, err := parseQueueKey(r.Key)
		if err != nil {
			return err
		}
		if mark {
			// The mark follows its delivery's record.
			if len(queue) == 0 || queue[len(queue)-1].seq != seq || !queue[len(queue)-1].job.voteStep() {
				return fmt.Errorf("%w: voted mark of queued delivery %d, which does not vote", kv.ErrCorrupt, seq)
			}
			q := queue[len(queue)-1]
			q.voted, q.votedStored = true, true
			return nil
		}
		if seq >= m.qNext {
			return fmt.Errorf("%w: queued delivery %d, not below the next sequence %d", kv.ErrCorrupt, seq, m.qNext)
		}
		d, err := decodeDelivery(r.Value)
		if err != nil {
			return fmt.Errorf("%w: %w", kv.ErrCorrupt, err)
		}
		q := e.newQueued(seq, e.prepare(d, e.pmFor(seq)))
		q.stored = true
		queue = append(queue, q)
		return nil
	})
	if err != nil {
		return fmt.Errorf("txn: executor state: %w", err)
	}
	if uint64(len(queue)) != m.queued {
		return fmt.Errorf("txn: executor state: %w: %d queued deliveries, the meta record says %d", kv.ErrCorrupt, len(queue), m.queued)
	}
	votes := map[multicast.MsgID]partition.GroupSet{}
	stored := map[voteSlot]voteInfo{}
	var arrivals []arrival
	n, size := uint64(0), int64(0)
	err = scanAux(s, []byte{auxVote}, []byte{auxVote + 1}, func(r kv.KV) error {
		id, g, err := parseVoteKey(r.Key)
		if err != nil {
			return err
		}
		seq, payload, err := parseVoteRecord(r.Value)
		if err != nil {
			return err
		}
		if seq >= m.voteNext {
			return fmt.Errorf("%w: vote of group %d on %s arrived %d, not before the next arrival %d", kv.ErrCorrupt, g, id, seq, m.voteNext)
		}
		votes[id] = votes[id].Add(g)
		slot := voteSlot{id, g}
		sv := voteInfo{seq: seq, size: voteRecordSize(len(payload))}
		stored[slot] = sv
		arrivals = append(arrivals, arrival{seq: seq, slot: slot})
		n++
		size += sv.size
		return nil
	})
	if err != nil {
		return fmt.Errorf("txn: executor state: %w", err)
	}
	if n != m.votes {
		return fmt.Errorf("txn: executor state: %w: %d stored votes, the meta record says %d", kv.ErrCorrupt, n, m.votes)
	}
	slices.SortFunc(arrivals, func(a, b arrival) int { return cmp.Compare(a.seq, b.seq) })
	sessions, kept, err := loadSessions(s)
	switch {
	case err != nil:
		return fmt.Errorf("txn: executor state: %w", err)
	case uint64(sessions.len()) != m.sessions || kept != m.sessionResults:
		return fmt.Errorf("txn: executor state: %w: %d session records keeping %d results, the meta record says %d and %d",
			kv.ErrCorrupt, sessions.len(), kept, m.sessions, m.sessionResults)
	}
	if err := e.loadReleases(); err != nil {
		return fmt.Errorf("txn: executor state: %w", err)
	}
	e.sessions = sessions
	e.queue, e.votes, e.stale = queue, votes, false
	e.stored, e.arrivals, e.voteBytes = stored, arrivals, size
	e.setMeta(m)
	if err := e.resumeMarker(); err != nil {
		return fmt.Errorf("txn: executor state: %w", err)
	}
	return nil
}

// voteSlot names a stored vote: group g's on transaction id.
type voteSlot struct {
	id multicast.MsgID
	g  partition.GroupID
}

// voteInfo is what the executor keeps in memory of a stored vote.
type voteInfo struct {
	seq  uint64 // its arrival
	size int64  // voteRecordSize
}

// arrival is an entry of Executor.arrivals: the vote of slot that arrived
// seq-th, stale unless stored[slot].seq is still seq.
type arrival struct {
	seq  uint64
	slot voteSlot
}

// setMeta installs the committed meta record; mu is held (or e is new).
func (e *Executor) setMeta(m execMeta) {
	e.meta = m
	st := m.stats()
	st.Open, st.EarlyNotes = uint64(len(e.rel.open)), uint64(len(e.rel.early))
	e.relMu.Lock()
	st.Unreleased = uint64(len(e.unreleased))
	e.relMu.Unlock()
	e.statsMu.Lock()
	e.stats = st
	e.statsMu.Unlock()
}

// Stats returns the executor's counters.
func (e *Executor) Stats() Stats {
	e.statsMu.Lock()
	defer e.statsMu.Unlock()
	return e.stats
}

// AppliedIndex returns the index of the last entry executed.
func (e *Executor) AppliedIndex() uint64 { return e.cfg.Store.AppliedIndex() }

// Sync makes every executed entry durable.
func (e *Executor) Sync() error { return e.cfg.Store.Sync() }

// Result returns the committed result of transaction id at this group, if
// it is still kept and released (Config.Strict). A session's result acknowledged here (see Session
// results, sessions.go) is an error wrapping ErrAcknowledged. Safe to call
// concurrently with Execute.
func (e *Executor) Result(id multicast.MsgID) (txn.PieceResult, bool, error) {
	if e.cfg.Strict {
		// Before the store: a job is marked unreleased before the commit
		// that stores its result.
		e.relMu.Lock()
		_, waits := e.unreleased[id]
		e.relMu.Unlock()
		if waits {
			return txn.PieceResult{}, false, nil
		}
	}
	b, ok, err := e.storedResult(id)
	if err != nil || !ok {
		return txn.PieceResult{}, false, err
	}
	r, err := decodeStoredResult(id, b)
	if err != nil {
		return txn.PieceResult{}, false, err
	}
	return r, true, nil
}

// Execute runs raft entry index at the group's log time clock
// (group.Executor): first it drops the session records idle for
// clock.SessionTicks or more (see Session results, sessions.go); a Clock
// whose Now is behind the last one's keeps the last. Then it queues the
// deliveries, in order, stores the inbound votes, and goes through the
// queue in order, letting each piece vote and each delivery run as the
// rules of conflict.go allow. It commits all of it, with the sends it
// returns, in one batch with index, which must be above AppliedIndex. The
// sends are the votes the entry's pieces sent, in queue order, for the
// channel layer. An error is the store's (the replica must stop) or an
// invalid index; bad input never fails Execute.
func (e *Executor) Execute(index uint64, clock group.Clock, deliveries []multicast.Message, inbound []rawnode.AppInbound) ([]rawnode.AppSend, error) {
	sends, done, err := e.execute(index, clock, deliveries, inbound)
	if err != nil {
		return nil, err
	}
	if len(done) > 0 && e.cfg.OnReleased != nil {
		e.cfg.OnReleased(done)
	}
	return sends, nil
}

func (e *Executor) execute(index uint64, clock group.Clock, deliveries []multicast.Message, inbound []rawnode.AppInbound) ([]rawnode.AppSend, []Executed, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.stale {
		if err := e.load(); err != nil {
			return nil, nil, fmt.Errorf("txn: execute %d: %w", index, err)
		}
	}
	if applied := e.cfg.Store.AppliedIndex(); index <= applied {
		return nil, nil, fmt.Errorf("txn: execute: %w: index %d not after the applied index %d", kv.ErrInvalid, index, applied)
	}
	b := e.cfg.Store.NewBatch()
	defer b.Close()
	x := &execution{e: e, b: b, rw: batchRW{b}, meta: e.meta}
	x.meta.now = max(x.meta.now, clock.Now)
	x.now = x.meta.now
	if err := x.apply(index, clock.SessionTicks, deliveries, inbound); err != nil {
		e.stale = true
		return nil, nil, fmt.Errorf("txn: execute %d: %w", index, err)
	}
	if len(e.queue) == 0 && len(e.rel.open) == 0 {
		// Nothing put off may write what a read of this state reads, and
		// nothing it reads waits for its release: reads at the leader may
		// go ahead without mu (read.go).
		b.MarkSettled()
	}
	e.markUnreleased(x)
	if err := e.cfg.Store.Commit(b, index); err != nil {
		e.stale = true
		return nil, nil, err
	}
	e.markReleased(x)
	e.setMeta(x.meta)
	if x.marker == nil {
		return x.sends, x.released, nil
	}
	parts, err := e.afterMarkers(index, x)
	if err != nil {
		e.stale = true
		return nil, nil, err
	}
	sends, done := x.sends, x.released
	for _, p := range parts {
		sends, done = append(sends, p.sends...), append(done, p.released...)
	}
	return sends, done, nil
}

// loadReleases reads the open jobs and early notes back (release.go), and
// marks the open jobs not released here; mu is held (or e is new).
func (e *Executor) loadReleases() error {
	rel, err := loadReleases(e.cfg.Store)
	if err != nil {
		return err
	}
	unreleased := map[multicast.MsgID]struct{}{}
	for _, o := range rel.open {
		if !o.here {
			unreleased[o.id] = struct{}{}
		}
	}
	e.relMu.Lock()
	e.unreleased = unreleased
	e.relMu.Unlock()
	e.rel = rel
	return nil
}

// markUnreleased marks the jobs that ran in x and wait for their release,
// before the commit that stores their results.
func (e *Executor) markUnreleased(x *execution) {
	if len(x.waited) == 0 {
		return
	}
	e.relMu.Lock()
	for _, id := range x.waited {
		e.unreleased[id] = struct{}{}
	}
	e.relMu.Unlock()
}

// markReleased forgets the jobs x released from the unreleased ones, once
// the commit that released them is made: Result answers them from then on.
// The entry is committed in the log, so every replica releases them too.
func (e *Executor) markReleased(x *execution) {
	if !e.cfg.Strict || len(x.released) == 0 {
		return
	}
	e.relMu.Lock()
	for _, d := range x.released {
		delete(e.unreleased, d.ID)
	}
	e.relMu.Unlock()
}

// Sent returns what Execute returned for entry index (nil if nothing, or
// if ForgetSent dropped it); index must not be above AppliedIndex.
func (e *Executor) Sent(index uint64) ([]rawnode.AppSend, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if applied := e.cfg.Store.AppliedIndex(); index > applied {
		return nil, fmt.Errorf("txn: sent: %w: index %d after the applied index %d", kv.ErrInvalid, index, applied)
	}
	var sends []rawnode.AppSend
	err := scanAux(e.cfg.Store, sentKey(index, 0), sentPrefixEnd(index), func(r kv.KV) error {
		s, err := decodeSend(r.Value)
		if err != nil {
			return err
		}
		sends = append(sends, s)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("txn: sent %d: %w", index, err)
	}
	return sends, nil
}

// ForgetSent drops the Sent records of the entries at or below index: the
// shell calls it once its raft snapshot covers them, as no replay can ask
// for them again.
func (e *Executor) ForgetSent(index uint64) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	b := e.cfg.Store.NewBatch()
	defer b.Close()
	if err := b.DeleteAuxRange([]byte{auxSent}, sentPrefixEnd(index)); err != nil {
		return fmt.Errorf("txn: forget sent: %w", err)
	}
	if err := e.cfg.Store.CommitAux(b); err != nil {
		return fmt.Errorf("txn: forget sent: %w", err)
	}
	return nil
}

// snapshot is a captured executor state: the store's, queue and votes
// included.
type snapshot struct {
	sn *kv.Snapshot
}

// WriteTo writes the snapshot as a stream that Restore reads; two
// replicas at the same entry write the same bytes if the shell made the
// same ForgetSent calls on both.
func (s snapshot) WriteTo(w io.Writer) (int64, error) { return s.sn.WriteTo(w) }

// Release releases the snapshot; a second Release does nothing.
func (s snapshot) Release() { s.sn.Release() }

// Snapshot captures the state as of AppliedIndex, a store snapshot that
// copies nothing. It stays valid across later Executes until Release.
func (e *Executor) Snapshot() (group.ExecutorSnapshot, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	sn, err := e.cfg.Store.Snapshot()
	if err != nil {
		return nil, fmt.Errorf("txn: snapshot: %w", err)
	}
	return snapshot{sn: sn}, nil
}

// Restore replaces the state with a stream written by a snapshot's WriteTo
// at index (kv.Store.RestoreSnapshot: atomic, a bad stream leaves the
// state as it was).
func (e *Executor) Restore(r io.Reader, index uint64) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.cfg.Store.RestoreSnapshot(r, index); err != nil {
		return fmt.Errorf("txn: restore: %w", err)
	}
	if err := e.load(); err != nil {
		e.stale = true
		return fmt.Errorf("txn: restore: %w", err)
	}
	return nil
}

var _ group.Executor = (*Executor)(nil)

// batchRW reads and writes user keys through a kv batch.
type batchRW struct{ b *kv.Batch }

func (rw batchRW) Get(key []byte) ([]byte, bool, error) { return rw.b.Get(key) }

func (rw batchRW) Scan(start, end []byte, limit int) ([]txn.KV, error) {
	return txnKVs(rw.b.Scan(start, end, limit))
}

// txnKVs returns a scan of the store as txn's pairs.
func txnKVs(kvs []kv.KV, err error) ([]txn.KV, error) {
	if err != nil {
		return nil, err
	}
	out := make([]txn.KV, len(kvs))
	for i, p := range kvs {
		out[i] = txn.KV{Key: p.Key, Value: p.Value}
	}
	return out, nil
}

func (rw batchRW) Put(key, value []byte) error { return rw.b.Put(key, value) }
func (rw batchRW) Delete(key []byte) error     { return rw.b.Delete(key) }
