package replication

import (
	"errors"
	"testing"

	"github.com/hashicorp/raft"
)

// TestPeerProgressRefusesPipelines: the replica's transport offers raft no
// pipeline (AppendEntriesPipeline says why), so raft replicates with
// AppendEntries, which peerProgress records and the transport bounds.
func TestPeerProgressRefusesPipelines(t *testing.T) {
	_, trans := raft.NewInmemTransport("a")
	p := newPeerProgress(trans)
	pl, err := p.AppendEntriesPipeline("b", "b")
	if pl != nil || !errors.Is(err, raft.ErrPipelineReplicationNotSupported) {
		t.Fatalf("AppendEntriesPipeline = %v, %v; want no pipeline, raft.ErrPipelineReplicationNotSupported", pl, err)
	}
}

// answerer is a raft transport whose AppendEntries answers with the term
// the test sends on the call's follower's channel, once the test sends it.
type answerer struct {
	raft.Transport
	terms map[raft.ServerID]chan uint64
}

func (a *answerer) AppendEntries(id raft.ServerID, _ raft.ServerAddress, _ *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	resp.Term = <-a.terms[id]
	return nil
}

// TestPeerProgressConfirmsTerm: a wait for a term's confirmation counts a
// voter's answer only if it is in the term of its call, that term the
// wait's, and its call began after the wait did; it closes once need of
// its voters answered so.
func TestPeerProgressConfirmsTerm(t *testing.T) {
	ids := []raft.ServerID{"b", "c", "d", "e"}
	a := &answerer{terms: map[raft.ServerID]chan uint64{}}
	for _, id := range ids {
		a.terms[id] = make(chan uint64)
	}
	p := newPeerProgress(a)
	// call has id answer a call of term callTerm with term answer, and
	// returns once the answer is recorded. begun is closed once the call
	// is numbered.
	call := func(id raft.ServerID, callTerm uint64) (answer func(uint64)) {
		done := make(chan struct{})
		go func() {
			defer close(done)
			var resp raft.AppendEntriesResponse
			if err := p.AppendEntries(id, "", &raft.AppendEntriesRequest{Term: callTerm}, &resp); err != nil {
				t.Error(err)
			}
		}()
		numbered := p.callsMade()
		waitFor(t, "the call to be numbered", func() bool { return p.callsMade() > numbered })
		return func(term uint64) {
			a.terms[id] <- term
			<-done
		}
	}
	closed := func(w *termWait) bool {
		select {
		case <-w.done:
			return true
		default:
			return false
		}
	}

	// Calls made before the wait: their answers come after.
	staleB, staleC := call("b", 5), call("c", 5)
	w := p.watch(5, []raft.ServerID{"b", "c", "d"}, 2) // "e" does not vote
	defer p.unwatch(w)
	staleB(5)
	staleC(5)
	call("c", 5)(6) // the follower had moved to a later term
	call("d", 4)(4) // an answer in an earlier term's call
	call("e", 5)(5) // not a voter
	if closed(w) {
		t.Fatal("the wait closed on answers to a call made before it, in other terms, and of a non-voter")
	}
	call("b", 5)(5)
	if closed(w) {
		t.Fatal("the wait closed on one answer; it needs two")
	}
	call("c", 5)(5)
	if !closed(w) {
		t.Fatal("two voters answered calls made after the wait began, in its term: it did not close")
	}
	if n := len(p.waits); n != 0 {
		t.Fatalf("%d waits left after the only one closed", n)
	}

	if w := p.watch(5, nil, 0); !closed(w) {
		t.Fatal("a wait that needs no answer did not close at once")
	}
	w = p.watch(6, []raft.ServerID{"b"}, 1)
	p.unwatch(w)
	call("b", 6)(6)
	if closed(w) || len(p.waits) != 0 {
		t.Fatal("an unwatched wait was kept or closed")
	}
}

// callsMade returns the number of AppendEntries calls p has begun.
func (p *peerProgress) callsMade() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls
}
