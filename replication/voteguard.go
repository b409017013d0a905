package replication

import (
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"
)

// voteGuard wraps raft's transport for a replica that joins an existing
// group (Config.Existing, DESIGN 13): while the replica's log is empty it
// answers every RequestVote and pre-vote RPC itself, refused, and hands
// everything else to raft. hashicorp/raft grants a vote from an empty log
// (an empty configuration looks like a group being bootstrapped), so a
// replica whose data was wiped would otherwise help elect a candidate that
// lacks entries the group committed with this replica's help before the
// wipe: raft amnesia. Once the log holds an entry (appended by the leader,
// or a snapshot installed) the guard lets every RPC through; it never arms
// again.
type voteGuard struct {
	raft.Transport
	id raft.ServerID // this replica's
	// empty reports whether the local log and snapshots hold nothing.
	empty   func() bool
	filled  atomic.Bool // the log held something once: pass everything
	refused atomic.Int64

	in   <-chan raft.RPC
	out  chan raft.RPC
	stop chan struct{}
	once sync.Once
	done chan struct{}
}

func newVoteGuard(t raft.Transport, id raft.ServerID, empty func() bool) *voteGuard {
	g := &voteGuard{Transport: t, id: id, empty: empty, in: t.Consumer(), out: make(chan raft.RPC), stop: make(chan struct{}), done: make(chan struct{})}
	go g.run()
	return g
}

// Consumer is raft's side of the guard.
func (g *voteGuard) Consumer() <-chan raft.RPC { return g.out }

func (g *voteGuard) run() {
	defer close(g.done)
	for {
		var rpc raft.RPC
		select {
		case <-g.stop:
			return
		case rpc = <-g.in:
		}
		if g.refuse(rpc) {
			continue
		}
		select {
		case <-g.stop:
			return
		case g.out <- rpc:
		}
	}
}

// refuse answers rpc when it asks for a vote while the log is empty.
func (g *voteGuard) refuse(rpc raft.RPC) bool {
	if g.filled.Load() {
		return false
	}
	switch req := rpc.Command.(type) {
	case *raft.RequestVoteRequest:
		if !g.stillEmpty() {
			return false
		}
		g.refused.Add(1)
		// The candidate's own term: it neither steps down nor counts
		// the answer as a vote.
		rpc.Respond(&raft.RequestVoteResponse{RPCHeader: g.header(req.RPCHeader), Term: req.Term, Granted: false}, nil)
		return true
	case *raft.RequestPreVoteRequest:
		if !g.stillEmpty() {
			return false
		}
		g.refused.Add(1)
		rpc.Respond(&raft.RequestPreVoteResponse{RPCHeader: g.header(req.RPCHeader), Term: req.Term, Granted: false}, nil)
		return true
	}
	return false
}

func (g *voteGuard) stillEmpty() bool {
	if g.empty() {
		return true
	}
	g.filled.Store(true)
	return false
}

// header is the answer's RPC header: the request's protocol version, this
// replica's id and address.
func (g *voteGuard) header(req raft.RPCHeader) raft.RPCHeader {
	return raft.RPCHeader{ProtocolVersion: req.ProtocolVersion, ID: []byte(g.id), Addr: g.EncodePeer(g.id, g.LocalAddr())}
}

// RequestPreVote passes the replica's own pre-votes through, so that raft
// keeps pre-voting (it pre-votes only over a transport that can).
func (g *voteGuard) RequestPreVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestPreVoteRequest, resp *raft.RequestPreVoteResponse) error {
	return preVoteThrough(g.Transport, id, target, args, resp)
}

// Close stops the guard and closes the transport it wraps (raft closes its
// transport at shutdown).
func (g *voteGuard) Close() error {
	g.once.Do(func() { close(g.stop) })
	<-g.done
	return closeTransport(g.Transport)
}
