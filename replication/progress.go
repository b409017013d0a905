package replication

import (
	"io"
	"sync"
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
type peerProgress struct {
	raft.Transport
	mu    sync.Mutex
	peers map[raft.ServerID]peerContact
}

// peerContact is what a follower last answered.
type peerContact struct {
	lastLog uint64    // its last log index
	at      time.Time // when it answered
}

func newPeerProgress(t raft.Transport) *peerProgress {
	return &peerProgress{Transport: t, peers: map[raft.ServerID]peerContact{}}
}

// AppendEntries records the follower's answer.
func (p *peerProgress) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	if err := p.Transport.AppendEntries(id, target, args, resp); err != nil {
		return err
	}
	last := resp.LastLog // taken before the entries were appended
	if resp.Success && len(args.Entries) > 0 {
		last = max(last, args.Entries[len(args.Entries)-1].Index)
	}
	p.record(id, last)
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
		p.record(id, args.LastLogIndex)
	}
	return nil
}

func (p *peerProgress) record(id raft.ServerID, lastLog uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	// A follower's log may shrink (a conflicting suffix truncated): the
	// newest answer counts.
	p.peers[id] = peerContact{lastLog: lastLog, at: time.Now()}
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
