package executor

import (
	"errors"
	"testing"

	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/partition"
	"github.com/flexkv/flexkv/txn"
)

// msgAs is transaction js under id, addressed to its destinations (home
// group 0).
func (c *cluster) msgAs(id multicast.MsgID, js string) multicast.Message {
	c.t.Helper()
	m := c.msg(0, js)
	m.ID = id
	return m
}

// voteOf decodes the vote a send carries.
func voteOf(t *testing.T, s []byte) txn.Vote {
	t.Helper()
	_, v, err := txn.DecodeVote(s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// An id used for one transaction at groups 0 and 2 is used again for
// another at groups 1 and 2, whose vote group 1 waits for. Group 2 skips
// its delivery as a duplicate, but still votes, saying that the id was
// used there: group 1 aborts the piece instead of waiting for ever, and
// what queued behind it runs.
func TestExecutorReusedIDVotesUsed(t *testing.T) {
	c := newCluster(t, nil)
	c.addTwins()
	id := multicast.MsgID{Client: 77, Seq: 1}
	first := c.msgAs(id, `{"then":[{"op":"put","key":"w/0001/a","value":"1"},{"op":"put","key":"w/0004/x","value":"1"}]}`)
	second := c.msgAs(id, `{"if":[{"key":"w/0004/x","cmp":"=","value":"1"}],"then":[{"op":"put","key":"w/0003/y","value":"1"}]}`)
	if first.Dst != partition.SetOf(0, 2) || second.Dst != partition.SetOf(1, 2) {
		t.Fatalf("destinations %s and %s", first.Dst, second.Dst)
	}
	behind := c.msg(2, `{"then":[{"op":"get","key":"w/0003/y"}]}`)
	c.deliver(0, first)
	c.deliver(2, first)
	c.settle()
	c.deliver(1, second, behind)
	if c.hasResult(1, behind) {
		t.Fatal("a piece touching the waiting piece's key ran ahead of it")
	}
	sends := c.deliver(2, second)
	if len(sends) != 1 || sends[0].To != 1 || sends[0].About != id {
		t.Fatalf("group 2 sent %+v, want one vote to group 1 about %s", sends, id)
	}
	if v := voteOf(t, sends[0].Payload); !v.Used || !v.Other || v.Group != 2 {
		t.Errorf("group 2's vote %+v, want a used vote, for another transaction", v)
	}
	c.settle()
	const reason = "txn: id c77.1 was already used at group c by another transaction"
	if r := c.result(1, second); !r.Aborted || r.Reason != reason {
		t.Errorf("group 1: %s, want aborted: %s", describeResult(r), reason)
	}
	if got := describeResult(c.result(1, behind)); got != "succeeded true: 0:get w/0003/y missing" {
		t.Errorf("behind the reused id: %s", got)
	}
	if got := describeResult(c.result(2, first)); got != "succeeded true: 1:put w/0004/x" {
		t.Errorf("group 2 keeps the first result: %s", got)
	}
	if got := c.data(1); got != "" {
		t.Errorf("group 1 wrote %s", got)
	}
	for g := range c.reps {
		st := c.reps[g].ex.Stats()
		if st.Queued != 0 || st.VotesStored != 0 || st.VotesJunk != 0 {
			t.Errorf("group %d stats %+v", g, st)
		}
		if want := map[bool]uint64{false: 0, true: 1}[g == 2]; st.Duplicates != want {
			t.Errorf("group %d counted %d duplicates, want %d", g, st.Duplicates, want)
		}
	}
	for g := range c.reps {
		if a, b := c.snapshot(partition.GroupID(g)), c.twinSnapshot(partition.GroupID(g)); string(a) != string(b) {
			t.Errorf("group %d: the twins differ", g)
		}
	}
}

// twinSnapshot returns the snapshot stream of group g's twin.
func (c *cluster) twinSnapshot(g partition.GroupID) []byte {
	c.t.Helper()
	saved := c.reps
	c.reps = c.twins
	defer func() { c.reps = saved }()
	return c.snapshot(g)
}

// reusedTxn is at groups 1 and 2, both voting: group 2 on its compare,
// group 1 on its add.
const reusedTxn = `{"if":[{"key":"w/0004/x","cmp":"=","value":"1"}],"then":[{"op":"add","key":"w/0003/n","int":1}]}`

// A transaction delivered again after one destination dropped its result
// (results are kept in bounded number) is not run again there: the
// destination that still has its result votes that the id was used, and
// the other aborts rather than apply the transaction twice.
func TestExecutorResubmittedAfterEviction(t *testing.T) {
	c := newCluster(t, nil)
	c.resultsMax = 1
	c.restart(1)
	c.seed(2, map[string]string{"w/0004/x": "1"})
	m := c.msgAs(multicast.MsgID{Client: 5, Seq: 1}, reusedTxn)
	c.deliver(1, m)
	c.deliver(2, m)
	c.settle()
	if got := c.data(1); got != "w/0003/n=1" {
		t.Fatalf("group 1: %s", got)
	}
	c.deliver(1, c.msg(1, `{"then":[{"op":"get","key":"w/0003/n"}]}`)) // evicts m's result
	if c.hasResult(1, m) {
		t.Fatal("group 1 kept more results than ResultsMax")
	}
	sends := c.deliver(2, m)
	if len(sends) != 1 || sends[0].To != 1 {
		t.Fatalf("group 2 sent %+v, want one vote to group 1", sends)
	}
	if v := voteOf(t, sends[0].Payload); !v.Used || v.Other {
		t.Errorf("group 2's vote %+v, want a used vote, for the same transaction", v)
	}
	c.deliver(1, m)
	c.settle()
	const reason = "txn: id c5.1 was already used at group c"
	if r := c.result(1, m); !r.Aborted || r.Reason != reason {
		t.Errorf("group 1: %s, want aborted: %s", describeResult(r), reason)
	}
	if got := c.data(1); got != "w/0003/n=1" {
		t.Errorf("group 1 ran the transaction again: %s", got)
	}
	// Group 1's own vote reached group 2, which has the result: junk.
	if st := c.reps[2].ex.Stats(); st.VotesJunk != 1 || st.VotesStored != 0 || st.Duplicates != 1 {
		t.Errorf("group 2 stats %+v", st)
	}
}

// A transaction delivered again while it is still queued, before its
// piece voted, is skipped silently: its vote, sent once it may vote, is
// the one the other destinations need. Once the piece voted, a used vote
// follows the real one, and the other destinations ignore it.
func TestExecutorResubmittedWhileQueued(t *testing.T) {
	c := newCluster(t, nil)
	c.addTwins()
	c.seed(2, map[string]string{"w/0004/x": "1"})
	m := c.msgAs(multicast.MsgID{Client: 5, Seq: 1}, reusedTxn)
	sends := c.deliver(2, m, m)
	if len(sends) != 1 || voteOf(t, sends[0].Payload).Used {
		t.Fatalf("group 2 sent %+v, want its one real vote", sends)
	}
	sends = c.deliver(2, m) // queued, voted: waits for group 1's vote
	if len(sends) != 1 || !voteOf(t, sends[0].Payload).Used {
		t.Fatalf("group 2 sent %+v, want a used vote", sends)
	}
	c.deliver(1, m)
	c.settle()
	for g, want := range map[partition.GroupID]string{1: "succeeded true: 0:add w/0003/n=1", 2: "succeeded true: "} { //flexkv:unordered independent checks
		if got := describeResult(c.result(g, m)); got != want {
			t.Errorf("group %d: %s, want %s", g, got, want)
		}
	}
	if got := c.data(1); got != "w/0003/n=1" {
		t.Errorf("group 1: %s", got)
	}
	if st := c.reps[1].ex.Stats(); st.VotesJunk != 1 || st.VotesStored != 0 || st.Aborted != 0 {
		t.Errorf("group 1 stats %+v: want the used vote junk", st)
	}
	if st := c.reps[2].ex.Stats(); st.Duplicates != 2 {
		t.Errorf("group 2 stats %+v: want 2 duplicates", st)
	}
}

// A used vote about another transaction reaches a destination before the
// real vote its piece waits for (the voter had that piece queued, not yet
// voted, when the other transaction came under the same id): the real
// vote replaces it, and the piece runs as it would have.
func TestExecutorRealVoteReplacesUsedVote(t *testing.T) {
	c := newCluster(t, nil)
	c.addTwins()
	c.seed(0, map[string]string{"w/0001/h": "1"})
	// head makes group 2 write w/0004/flag once group 0's vote arrives;
	// x's vote at group 2 reads that key, so it waits for head.
	head := c.msg(1, `{"if":[{"key":"w/0001/h","cmp":"=","value":"1"}],"then":[{"op":"put","key":"w/0004/flag","value":"on"}]}`)
	id := multicast.MsgID{Client: 9, Seq: 1}
	x := c.msgAs(id, `{"if":[{"key":"w/0004/flag","cmp":"=","value":"on"}],"then":[{"op":"put","key":"w/0003/x","value":"then"}],"else":[{"op":"put","key":"w/0003/x","value":"else"}]}`)
	y := c.msgAs(id, `{"if":[{"key":"w/0004/z","cmp":"=","value":""}],"then":[{"op":"put","key":"w/0003/y","value":"1"}]}`)
	if sends := c.deliver(2, head, x); len(sends) != 0 {
		t.Fatalf("group 2 voted early: %+v", sends)
	}
	sends := c.deliver(2, y)
	if len(sends) != 1 || sends[0].To != 1 || !voteOf(t, sends[0].Payload).Used {
		t.Fatalf("group 2 sent %+v, want a used vote to group 1", sends)
	}
	c.deliver(1, x, y)
	if c.hasResult(1, x) {
		t.Fatal("group 1 ran x with a vote about y")
	}
	c.deliver(0, head) // group 0's vote: head runs at group 2, which votes on x
	c.settle()
	if got := describeResult(c.result(1, x)); got != "succeeded true: 0:put w/0003/x" {
		t.Errorf("group 1: %s", got)
	}
	if got := c.data(1); got != "w/0003/x=then" {
		t.Errorf("group 1: %s", got)
	}
	if st := c.reps[1].ex.Stats(); st.VotesJunk != 1 || st.VotesStored != 0 || st.Queued != 0 {
		t.Errorf("group 1 stats %+v: want the used vote replaced, as junk", st)
	}
}

// A used vote aborts Eval: its group did not evaluate the piece.
func TestEvalUsedVoteAborts(t *testing.T) {
	top := testTopology(t)
	tx := mustParse(t, reusedTxn)
	pieces, err := tx.Pieces(testPartitionMap(t, top), top, partition.SetOf(1, 2))
	if err != nil {
		t.Fatal(err)
	}
	st := txn.NewMemStore(nil)
	_, _, err = txn.Eval(st, st, &pieces[0], txn.Vote{Group: 2, Used: true})
	if !errors.Is(err, txn.ErrAborted) || err.Error() != "txn: the transaction's id was already used at group 2" {
		t.Errorf("Eval with a used vote: %v", err)
	}
	if len(st.Writes()) != 0 {
		t.Errorf("Eval wrote %v", st.Writes())
	}
}
