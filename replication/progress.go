package replication

import (
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// peerProgress wraps raft's transport to learn, on the leader, how far
// each follower's log reaches and when it last answered: hashicorp/raft
// keeps its followers' match indexes to itself. Every answer to an
// AppendEntries call (raft's heartbeats, sent every few tens of
// milliseconds to every follower and learner, included) carries the
// follower's last log index; an installed snapshot moves it to the
// snapshot's index. Promote reads it: a learner is made a voter only once
// it answers and holds the configuration that made it a member, else a
// group with a voter down would count on an empty, or absent, new voter
// for every quorum, and lose its leader for good (an empty log refuses
// votes, DESIGN 13).
//
// It also confirms a leader's term for its read barriers (readindex.go,
// confirmLeader), which hashicorp/raft's VerifyLeader alone cannot do
// soundly: that counts any answer that arrives after the verification
// began, an answer to a call made before it too. Here every AppendEntries
// call takes the next number of the wrapper's count of calls before it
// goes out, and an answer in the call's own term (the follower had not
// moved past it) confirms the term as of that number: an answer counts
// for a barrier only if its call was numbered after the barrier's reads
// were invoked, so the follower produced it after that.
type peerProgress struct {
	raft.Transport
	mu    sync.Mutex
	peers map[raft.ServerID]peerContact
	calls atomic.Uint64 // AppendEntries calls begun; each takes the next number
	// terms holds, for each follower, the last term it confirmed and the
	// number of the last call it confirmed it for.
	terms map[raft.ServerID]termAnswer
	waits []*termWait // confirmations awaited (watch)
}

// termAnswer is a follower's latest answer in the term of its call.
type termAnswer struct {
	term uint64
	call uint64 // the call's number
}

// termWait is a confirmation awaited: done closes once need of voters
// answered in term to calls numbered after after.
type termWait struct {
	term, after uint64
	voters      []raft.ServerID
	need        int
	done        chan struct{}
}

// peerContact is what a follower last answered.
type peerContact struct {
	lastLog uint64    // its last log index
	at      time.Time // when it answered
}

func newPeerProgress(t raft.Transport) *peerProgress {
	return &peerProgress{Transport: t, peers: map[raft.ServerID]peerContact{}, terms: map[raft.ServerID]termAnswer{}}
}

// AppendEntries records the follower's answer.
func (p *peerProgress) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	term, call := args.Term, p.calls.Add(1)
	if err := p.Transport.AppendEntries(id, target, args, resp); err != nil {
		return err
	}
	last := resp.LastLog // taken before the entries were appended
	if resp.Success && len(args.Entries) > 0 {
		last = max(last, args.Entries[len(args.Entries)-1].Index)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.recordLocked(id, last)
	if resp.Term == term {
		p.answeredLocked(id, term, call)
	}
	return nil
}

// AppendEntriesPipeline refuses: raft then replicates with AppendEntries,
// one call in flight per follower, bounded by the transport's timeout.
// hashicorp/raft's pipelined replication can wedge for good: when a
// follower refuses an entry (a log mismatch, as after a change of members)
// the pipeline's decoder returns while the sender may already wait to
// queue one more call, which nobody takes; the pipeline is then never
// closed, that follower never gets another entry (its heartbeats still
// arrive, so it never calls an election), and the leader's shutdown waits
// for ever. TestReplaceMember hung so, stopping a removed leader.
func (p *peerProgress) AppendEntriesPipeline(raft.ServerID, raft.ServerAddress) (raft.AppendPipeline, error) {
	return nil, raft.ErrPipelineReplicationNotSupported
}

// InstallSnapshot records the follower's log at the snapshot's index.
func (p *peerProgress) InstallSnapshot(id raft.ServerID, target raft.ServerAddress, args *raft.InstallSnapshotRequest, resp *raft.InstallSnapshotResponse, data io.Reader) error {
	if err := p.Transport.InstallSnapshot(id, target, args, resp, data); err != nil {
		return err
	}
	if resp.Success {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.recordLocked(id, args.LastLogIndex)
	}
	return nil
}

func (p *peerProgress) recordLocked(id raft.ServerID, lastLog uint64) {
	// A follower's log may shrink (a conflicting suffix truncated): the
	// newest answer counts.
	p.peers[id] = peerContact{lastLog: lastLog, at: time.Now()}
}

// answeredLocked records id's answer in term to call number call, and
// closes the waits it completes.
func (p *peerProgress) answeredLocked(id raft.ServerID, term, call uint64) {
	if a := p.terms[id]; term < a.term || (term == a.term && call < a.call) {
		return // an older call's answer, overtaken
	}
	p.terms[id] = termAnswer{term: term, call: call}
	p.waits = slices.DeleteFunc(p.waits, func(w *termWait) bool {
		if w.term != term || p.answersLocked(w) < w.need {
			return false
		}
		close(w.done)
		return true
	})
}

// answersLocked counts the voters of w that answered in its term to calls
// numbered after w.after.
func (p *peerProgress) answersLocked(w *termWait) int {
	n := 0
	for _, v := range w.voters {
		if a := p.terms[v]; a.term == w.term && a.call > w.after {
			n++
		}
	}
	return n
}

// watch starts waiting for need of voters (followers, the leader not among
// them) to answer in term to calls numbered above after (a count of calls
// p.calls held); the wait's done closes then, at once if need is 0
// or the answers came already. unwatch ends it.
func (p *peerProgress) watch(term, after uint64, voters []raft.ServerID, need int) *termWait {
	p.mu.Lock()
	defer p.mu.Unlock()
	w := &termWait{term: term, after: after, voters: voters, need: need, done: make(chan struct{})}
	if p.answersLocked(w) >= need {
		close(w.done)
		return w
	}
	p.waits = append(p.waits, w)
	return w
}

// unwatch drops w, completed or not.
func (p *peerProgress) unwatch(w *termWait) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.waits = slices.DeleteFunc(p.waits, func(o *termWait) bool { return o == w })
}

// contact returns what id last answered; false if it never did.
func (p *peerProgress) contact(id raft.ServerID) (peerContact, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	c, ok := p.peers[id]
	return c, ok
}

// RequestPreVote passes pre-votes through, so that raft keeps pre-voting
// (it pre-votes only over a transport that can).
func (p *peerProgress) RequestPreVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestPreVoteRequest, resp *raft.RequestPreVoteResponse) error {
	return preVoteThrough(p.Transport, id, target, args, resp)
}

// Close closes the transport it wraps (raft closes its transport at
// shutdown).
func (p *peerProgress) Close() error { return closeTransport(p.Transport) }

// preVoteThrough sends a pre-vote request over t, for a wrapper of t.
func preVoteThrough(t raft.Transport, id raft.ServerID, target raft.ServerAddress, args *raft.RequestPreVoteRequest, resp *raft.RequestPreVoteResponse) error {
	pv, ok := t.(raft.WithPreVote)
	if !ok {
		return raft.ErrUnsupportedProtocol
	}
	return pv.RequestPreVote(id, target, args, resp)
}

// closeTransport closes t if it can be closed, for a wrapper of t.
func closeTransport(t raft.Transport) error {
	if c, ok := t.(raft.WithClose); ok {
		return c.Close()
	}
	return nil
}
