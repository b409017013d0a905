package replication

import (
	"errors"
	"slices"
	"sync"
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

// answerer is a raft transport whose AppendEntries answers each call
// (tagged by the test in LeaderCommitIndex) with the term the test sends
// on the call's channel, once the test sends it.
type answerer struct {
	raft.Transport
	mu    sync.Mutex
	calls map[uint64]chan uint64
}

func (a *answerer) answers(tag uint64) chan uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	c, ok := a.calls[tag]
	if !ok {
		c = make(chan uint64)
		a.calls[tag] = c
	}
	return c
}

func (a *answerer) AppendEntries(_ raft.ServerID, _ raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	resp.Term = <-a.answers(args.LeaderCommitIndex)
	return nil
}

// TestPeerProgressConfirmsTerm: a wait for a term's confirmation counts a
// voter's answer only if it is in the term of its call, that term the
// wait's, and its call began after the wait did; it closes once need of
// its voters answered so.
func TestPeerProgressConfirmsTerm(t *testing.T) {
	a := &answerer{calls: map[uint64]chan uint64{}}
	p := newPeerProgress(a)
	// call makes a call of term callTerm to id and returns, once the call
	// is numbered, a function that has id answer it with a term and
	// returns once the answer is recorded.
	tags := uint64(0)
	call := func(id raft.ServerID, callTerm uint64) (answer func(uint64)) {
		tags++
		tag := tags
		numbered := p.calls.Load()
		done := make(chan struct{})
		go func() {
			defer close(done)
			var resp raft.AppendEntriesResponse
			if err := p.AppendEntries(id, "", &raft.AppendEntriesRequest{Term: callTerm, LeaderCommitIndex: tag}, &resp); err != nil {
				t.Error(err)
			}
		}()
		waitFor(t, "the call to be numbered", func() bool { return p.calls.Load() > numbered })
		return func(term uint64) {
			a.answers(tag) <- term
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
	w := p.watch(5, p.calls.Load(), []raft.ServerID{"b", "c", "d"}, 2) // "e" does not vote
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

	if w := p.watch(5, p.calls.Load(), nil, 0); !closed(w) {
		t.Fatal("a wait that needs no answer did not close at once")
	}
	// A wait from a count noted earlier (when its reads were invoked)
	// counts the answers to calls made since, already in.
	noted := p.calls.Load()
	call("d", 5)(5)
	if w := p.watch(5, noted, []raft.ServerID{"b", "d"}, 1); !closed(w) {
		t.Fatal("a wait from an earlier count did not close on an answer already in to a call made after it")
	}
	if w := p.watch(5, p.calls.Load(), []raft.ServerID{"b", "d"}, 1); closed(w) {
		t.Fatal("a wait from the current count closed with no call made since")
	} else {
		p.unwatch(w)
	}
	w = p.watch(6, p.calls.Load(), []raft.ServerID{"b"}, 1)
	p.unwatch(w)
	call("b", 6)(6)
	if closed(w) || len(p.waits) != 0 {
		t.Fatal("an unwatched wait was kept or closed")
	}

	// Answers out of order: the answer to an older call, arriving after a
	// newer one's, does not take the follower back below a wait's start.
	older := call("c", 7)
	w = p.watch(7, p.calls.Load(), []raft.ServerID{"c"}, 1)
	defer p.unwatch(w)
	call("c", 7)(7)
	if !closed(w) {
		t.Fatal("an answer to a call made after the wait began did not close it")
	}
	older(7)
	w2 := p.watch(7, p.calls.Load(), []raft.ServerID{"c"}, 1)
	defer p.unwatch(w2)
	if closed(w2) {
		t.Fatal("a wait closed with no call made after it")
	}
	if a := p.terms["c"]; a.call != p.calls.Load() {
		t.Fatalf("follower c's last answer is of call %d, want the newest, %d: the older answer, arriving later, replaced it", a.call, p.calls.Load())
	}
}

// TestVotersBesides: the voters a leader waits for are its configuration's
// voters but itself, and a majority of all voters is need of them, with
// the leader's own vote if it has one.
func TestVotersBesides(t *testing.T) {
	server := func(id string, s raft.ServerSuffrage) raft.Server {
		return raft.Server{ID: raft.ServerID(id), Suffrage: s}
	}
	for _, tc := range []struct {
		name    string
		servers []raft.Server
		voters  []raft.ServerID
		need    int
	}{
		{"alone", []raft.Server{server("a", raft.Voter)}, nil, 0},
		{"three", []raft.Server{server("a", raft.Voter), server("b", raft.Voter), server("c", raft.Voter)}, []raft.ServerID{"b", "c"}, 1},
		{"learners", []raft.Server{server("a", raft.Voter), server("b", raft.Nonvoter), server("c", raft.Voter), server("d", raft.Nonvoter), server("e", raft.Staging)}, []raft.ServerID{"c"}, 1},
		{"four", []raft.Server{server("a", raft.Voter), server("b", raft.Voter), server("c", raft.Voter), server("d", raft.Voter)}, []raft.ServerID{"b", "c", "d"}, 2},
		{"leader no voter", []raft.Server{server("a", raft.Nonvoter), server("b", raft.Voter), server("c", raft.Voter), server("d", raft.Voter)}, []raft.ServerID{"b", "c", "d"}, 2},
		{"leader absent", []raft.Server{server("b", raft.Voter), server("c", raft.Voter)}, []raft.ServerID{"b", "c"}, 2},
	} {
		voters, need := votersBesides(raft.Configuration{Servers: tc.servers}, "a")
		if !slices.Equal(voters, tc.voters) || need != tc.need {
			t.Errorf("%s: voters %v, need %d; want %v, %d", tc.name, voters, need, tc.voters, tc.need)
		}
	}
}
