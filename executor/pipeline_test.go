package executor

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/multicast/rawnode"
	"github.com/flexkv/flexkv/partition"
	"github.com/flexkv/flexkv/txn"
)

// A piece queued behind a waiting one votes at once when the waiting piece
// cannot write what its vote reads, and otherwise only once that piece ran,
// on the state it left.
func TestPipelineEarlyVote(t *testing.T) {
	c := newCluster(t, nil)
	c.seed(2, map[string]string{"w/0004/flag": "on"})
	head := c.msg(1, remoteCompare) // group 0 waits for group 2; writes w/0001/x
	disjoint := c.msg(2, `{"if":[{"key":"w/0001/y","cmp":"=","value":""}],`+
		`"then":[{"op":"put","key":"w/0004/d","value":"yes"}],"else":[{"op":"put","key":"w/0004/d","value":"no"}]}`)
	conflicting := c.msg(3, `{"if":[{"key":"w/0001/x","cmp":"=","value":"then"}],`+
		`"then":[{"op":"put","key":"w/0004/c","value":"yes"}],"else":[{"op":"put","key":"w/0004/c","value":"no"}]}`)
	sends := c.deliver(0, head, disjoint, conflicting)
	if len(sends) != 1 || sends[0].About != disjoint.ID || sends[0].To != 2 {
		t.Fatalf("group 0 sent %+v, want only its vote on %s to group 2", sends, disjoint.ID)
	}
	if st := c.reps[0].ex.Stats(); st.Queued != 2 || st.VotesEarly != 1 || st.RanAhead != 1 {
		t.Errorf("group 0 stats %+v, want 2 queued, 1 early vote, 1 run ahead", st)
	}
	c.deliver(2, head, disjoint, conflicting)
	if got := c.data(2); got != "w/0004/d=yes w/0004/flag=on" {
		t.Errorf("group 2 after the early vote: %s", got)
	}
	sends = c.deliver(0) // head's vote: head runs, then conflicting votes
	if len(sends) != 1 || sends[0].About != conflicting.ID {
		t.Fatalf("group 0 sent %+v, want its vote on %s", sends, conflicting.ID)
	}
	if _, v, err := txn.DecodeVote(sends[0].Payload); err != nil || !v.Holds {
		t.Errorf("vote on %s: %+v, %v: want it to hold on head's write", conflicting.ID, v, err)
	}
	c.settle()
	if got := c.data(2); got != "w/0004/c=yes w/0004/d=yes w/0004/flag=on" {
		t.Errorf("group 2: %s", got)
	}
	want := []multicast.MsgID{disjoint.ID, head.ID, conflicting.ID}
	if got := c.reps[0].executed; !slices.Equal(got, want) {
		t.Errorf("group 0 ran %v, want %v", got, want)
	}
	for g := range c.reps {
		if st := c.reps[g].ex.Stats(); st.Queued != 0 || st.VotesStored != 0 || st.VotesJunk != 0 {
			t.Errorf("group %d stats %+v", g, st)
		}
	}
}

// Deliveries behind a piece that waits for a vote run at once when they
// conflict with nothing queued ahead of them, and wait otherwise; whatever
// the order they run in, every result is the one of delivery order.
func TestPipelineRunAhead(t *testing.T) {
	for _, tc := range runAheadCases {
		t.Run(tc.name, func(t *testing.T) { checkRunAhead(t, tc) })
	}
}

// runAheadCase is a head, a piece of group 0 that waits for group 2's vote,
// and the deliveries behind it.
type runAheadCase struct {
	name string
	seed map[string]string
	head string // the head's transaction
	want string // head's result
	rest []runAheadLater
}

// runAheadLater is a delivery behind the head.
type runAheadLater struct {
	js   string
	now  bool   // runs at once, ahead of the head
	want string // its result
}

var runAheadCases = []runAheadCase{
	{
		name: "read after the head's write",
		head: remoteCompare,
		want: "succeeded true: 0:put w/0001/x",
		rest: []runAheadLater{
			{`{"then":[{"op":"put","key":"w/0001/y","value":"1"}]}`, true, "succeeded true: 0:put w/0001/y"},
			{`{"then":[{"op":"get","key":"w/0001/x"}]}`, false, "succeeded true: 0:get w/0001/x=then"},
			{`{"if":[{"key":"w/0001/x","cmp":"=","value":"then"}],"then":[{"op":"get","key":"w/0001/y"}]}`, false, "succeeded true: 0:get w/0001/y=1"},
			{`{"then":[{"op":"add","key":"w/0001/x","int":1}]}`, false,
				`aborted: txn: then[0]: add to "w/0001/x": stored value "then": not an integer`},
		},
	},
	{
		name: "write after the head's read",
		seed: map[string]string{"w/0001/r": "old"},
		head: `{"if":[{"key":"w/0004/flag","cmp":"=","value":"on"}],"then":[{"op":"get","key":"w/0001/r"},{"op":"put","key":"w/0001/x","value":"1"}]}`,
		want: "succeeded true: 0:get w/0001/r=old; 1:put w/0001/x",
		rest: []runAheadLater{
			{`{"then":[{"op":"get","key":"w/0001/r"}]}`, true, "succeeded true: 0:get w/0001/r=old"},
			{`{"then":[{"op":"put","key":"w/0001/r","value":"new"}]}`, false, "succeeded true: 0:put w/0001/r"},
			{`{"then":[{"op":"get","key":"w/0001/r"}]}`, false, "succeeded true: 0:get w/0001/r=new"},
			{`{"then":[{"op":"delete","key":"w/0001/r"}]}`, false, "succeeded true: 0:delete w/0001/r"},
			{`{"then":[{"op":"get","key":"w/0002/r"}]}`, true, "succeeded true: 0:get w/0002/r missing"},
		},
	},
	{
		name: "write into the head's scan",
		seed: map[string]string{"w/0001/b": "1"},
		head: `{"if":[{"key":"w/0004/flag","cmp":"=","value":"on"}],"then":[{"op":"scan","key":"w/0001/a","end":"w/0001/m","limit":10}]}`,
		want: "succeeded true: 0:scan [w/0001/b=1]",
		rest: []runAheadLater{
			{`{"then":[{"op":"put","key":"w/0001/c","value":"2"}]}`, false, "succeeded true: 0:put w/0001/c"},
			{`{"then":[{"op":"put","key":"w/0001/m","value":"3"}]}`, true, "succeeded true: 0:put w/0001/m"},
			{`{"then":[{"op":"put","key":"w/0001/a","value":"4"}]}`, false, "succeeded true: 0:put w/0001/a"},
			{`{"then":[{"op":"put","key":"w/0001/0","value":"5"}]}`, true, "succeeded true: 0:put w/0001/0"},
		},
	},
	{
		name: "scan over the head's write",
		head: `{"if":[{"key":"w/0004/flag","cmp":"=","value":"on"}],"then":[{"op":"put","key":"w/0001/c","value":"1"}]}`,
		want: "succeeded true: 0:put w/0001/c",
		rest: []runAheadLater{
			{`{"then":[{"op":"scan","key":"w/0001/a","end":"w/0001/d","limit":10}]}`, false, "succeeded true: 0:scan [w/0001/c=1]"},
			{`{"then":[{"op":"scan","key":"w/0001/d","end":"w/0001/z","limit":10}]}`, true, "succeeded true: 0:scan []"},
			{`{"then":[{"op":"scan","key":"w/0001/a","end":"w/0001/c","limit":10}]}`, true, "succeeded true: 0:scan []"},
		},
	},
	{
		name: "conflict with a queued delivery behind the head",
		head: remoteCompare,
		want: "succeeded true: 0:put w/0001/x",
		rest: []runAheadLater{
			{`{"then":[{"op":"get","key":"w/0001/x"},{"op":"put","key":"w/0001/y","value":"queued"}]}`, false,
				"succeeded true: 0:get w/0001/x=then; 1:put w/0001/y"},
			{`{"then":[{"op":"get","key":"w/0001/y"}]}`, false, "succeeded true: 0:get w/0001/y=queued"},
			{`{"then":[{"op":"get","key":"w/0001/z"}]}`, true, "succeeded true: 0:get w/0001/z missing"},
		},
	},
}

// checkRunAhead delivers tc's head and the deliveries behind it to group 0,
// checks which ran at once, then gives the head its vote and checks every
// result and the order they ran in.
func checkRunAhead(t *testing.T, tc runAheadCase) {
	c := newCluster(t, nil)
	c.addTwins()
	c.seed(2, map[string]string{"w/0004/flag": "on"})
	if tc.seed != nil {
		c.seed(0, tc.seed)
	}
	head := c.msg(1, tc.head)
	if head.Dst != partition.SetOf(0, 2) {
		t.Fatalf("head goes to %s", head.Dst)
	}
	c.deliver(0, head)
	var ms []multicast.Message
	var ahead []multicast.MsgID
	for i, l := range tc.rest {
		m := c.msg(uint64(i+2), l.js)
		ms = append(ms, m)
		c.deliver(0, m)
		if got := c.hasResult(0, m); got != l.now {
			t.Errorf("%s: ran at once %v, want %v", l.js, got, l.now)
		}
		if l.now {
			ahead = append(ahead, m.ID)
		}
	}
	if c.hasResult(0, head) {
		t.Fatal("the head ran without its vote")
	}
	c.deliver(2, head)
	c.deliver(0)
	if got := describeResult(c.result(0, head)); got != tc.want {
		t.Errorf("head: %s, want %s", got, tc.want)
	}
	for i, l := range tc.rest {
		if got := describeResult(c.result(0, ms[i])); got != l.want {
			t.Errorf("%s: %s, want %s", l.js, got, l.want)
		}
	}
	if got := c.reps[0].executed; !slices.Equal(got[:len(ahead)], ahead) || got[len(ahead)] != head.ID {
		t.Errorf("group 0 ran %v: want %v first, then the head", got, ahead)
	}
	if st := c.reps[0].ex.Stats(); st.RanAhead != uint64(len(ahead)) || st.Queued != 0 {
		t.Errorf("group 0 stats %+v, want %d run ahead, none queued", st, len(ahead))
	}
}

// A call conflicts with everything: it waits behind a waiting piece even
// when their keys are disjoint, and a transaction behind a queued call
// waits for it.
func TestPipelineCallsConflictWithEverything(t *testing.T) {
	c := newCluster(t, testRegistry(t))
	c.seed(0, map[string]string{"w/0001/a": "10", "item/1": "x"})
	c.seed(2, map[string]string{"w/0004/flag": "on", "w/0004/a": "0", "item/1": "x"})
	head := c.msg(1, remoteCompare)
	move := c.callMsg(1, "move", "w/0001/a w/0004/a 4 item/1")
	after := c.msg(3, `{"then":[{"op":"get","key":"w/0001/q"}]}`)
	c.deliver(0, head, move, after)
	for _, m := range []multicast.Message{move, after} {
		if c.hasResult(0, m) {
			t.Errorf("%s ran before the waiting piece ahead of it", m.ID)
		}
	}
	c.deliver(2, head, move)
	c.deliver(0)
	for _, m := range []multicast.Message{head, move, after} {
		if r := c.result(0, m); r.Aborted || !r.Succeeded {
			t.Errorf("%s: %s", m.ID, describeResult(r))
		}
	}
	if got, want := c.reps[0].executed, []multicast.MsgID{head.ID, move.ID, after.ID}; !slices.Equal(got, want) {
		t.Errorf("group 0 ran %v, want %v", got, want)
	}
	if got := c.data(0); got != "item/1=x w/0001/a=6 w/0001/x=then" {
		t.Errorf("group 0: %s", got)
	}
}

// A piece delivered twice, the second time while the first still waits,
// runs once, and a delivery of an id that has a result is skipped.
func TestPipelineDuplicateDelivery(t *testing.T) {
	c := newCluster(t, nil)
	c.seed(2, map[string]string{"w/0004/flag": "on"})
	head := c.msg(1, remoteCompare)
	c.deliver(0, head, head)
	if st := c.reps[0].ex.Stats(); st.Queued != 1 {
		t.Errorf("stats %+v, want the second delivery dropped", st)
	}
	c.deliver(2, head)
	c.deliver(0, head)
	c.deliver(0, head)
	if st := c.reps[0].ex.Stats(); st != (Stats{Executed: 1, Duplicates: 3}) {
		t.Errorf("stats %+v, want one run and 3 duplicates", st)
	}
}

// TestPipelineMatchesSerial runs random transactions over a few keys of
// three groups (compares, gets, puts, deletes, adds, scans, replicated
// keys, aborts) through the pipelined executors, with random batching,
// random vote delays and random restarts, and compares every destination's
// result and every group's final state with a serial execution of the
// global delivery order on one map. Twin replicas check determinism.
func TestPipelineMatchesSerial(t *testing.T) {
	seeds, txns := 12, 200
	if testing.Short() {
		seeds, txns = 3, 100
	}
	var early, ahead uint64
	for seed := range uint64(seeds) {
		t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) {
			// Every other seed releases in real-time order (release.go):
			// the same results and state, every piece released in the end.
			st := runPipelineVsSerial(t, seed, txns, seed%2 == 1)
			early += st.VotesEarly
			ahead += st.RanAhead
		})
	}
	// Without them the test would check nothing about pipelining.
	if early == 0 || ahead == 0 {
		t.Errorf("%d early votes, %d runs ahead: want both", early, ahead)
	}
}

// serialKeys are the keys the random transactions touch: a few in each
// group, and a replicated one.
var serialKeys = []string{"w/0001/a", "w/0001/b", "w/0002/a", "w/0003/a", "w/0003/b", "w/0004/a", "w/0004/b", "item/a"}

// serialScans are scan ranges, each inside one partition.
var serialScans = [][2]string{{"w/0001/", "w/0002/"}, {"w/0001/b", "w/0002/"}, {"w/0003/", "w/0004/"}, {"w/0004/a", "w/0004/b"}, {"item/", "item0"}}

var serialValues = []string{"0", "1", "2", "5", "x", ""}

// randomTxn returns a random transaction of 1..6 compares and operations.
func randomTxn(rng *rand.Rand) string {
	key := func() string {
		if rng.IntN(6) == 0 {
			return "item/a" // replicated: rarer, since a write goes everywhere
		}
		return serialKeys[rng.IntN(len(serialKeys)-1)]
	}
	var ifs, then, els []string
	for range rng.IntN(3) {
		if rng.IntN(2) == 0 {
			ifs = append(ifs, fmt.Sprintf(`{"key":%q,"cmp":"%s","int":%d}`, key(), txn.Cmp(1+rng.IntN(6)), rng.IntN(4)))
		} else {
			ifs = append(ifs, fmt.Sprintf(`{"key":%q,"cmp":"%s","value":%q}`, key(), txn.Cmp(1+rng.IntN(6)), serialValues[rng.IntN(len(serialValues))]))
		}
	}
	op := func() string {
		switch rng.IntN(9) {
		case 0, 1:
			return fmt.Sprintf(`{"op":"get","key":%q}`, key())
		case 2, 3:
			return fmt.Sprintf(`{"op":"put","key":%q,"value":%q}`, key(), serialValues[rng.IntN(len(serialValues))])
		case 4:
			return fmt.Sprintf(`{"op":"delete","key":%q}`, key())
		case 5, 6:
			n := rng.IntN(7) - 3
			if rng.IntN(20) == 0 {
				n = 1 << 62
			}
			return fmt.Sprintf(`{"op":"add","key":%q,"int":%d}`, key(), n)
		}
		s := serialScans[rng.IntN(len(serialScans))]
		return fmt.Sprintf(`{"op":"scan","key":%q,"end":%q,"limit":%d}`, s[0], s[1], 1+rng.IntN(3))
	}
	for range 1 + rng.IntN(3) {
		then = append(then, op())
	}
	for range rng.IntN(3) {
		els = append(els, op())
	}
	join := func(xs []string) string { return "[" + strings.Join(xs, ",") + "]" }
	return fmt.Sprintf(`{"if":%s,"then":%s,"else":%s}`, join(ifs), join(then), join(els))
}

// serialResults executes t on the whole store s, as one piece that owns
// every key, and returns what each destination of dst must report.
func serialResults(t *testing.T, c *cluster, s *txn.MemStore, tx *txn.Txn, dst partition.GroupSet) map[partition.GroupID]txn.PieceResult {
	t.Helper()
	whole := txn.Piece{Group: 0, Txn: tx, If: make([]txn.PieceCompare, len(tx.If))}
	for i := range whole.If {
		whole.If[i] = txn.PieceCompare{Local: true, Owner: partition.NoGroup}
	}
	for i := range tx.Then {
		whole.Then = append(whole.Then, i)
	}
	for i := range tx.Else {
		whole.Else = append(whole.Else, i)
	}
	holds, results, err := txn.Eval(s, s, &whole)
	pieces, perr := tx.Pieces(c.pm, c.top, dst)
	if perr != nil {
		t.Fatal(perr)
	}
	out := map[partition.GroupID]txn.PieceResult{}
	for _, p := range pieces {
		if err != nil {
			out[p.Group] = abortResult(err.Error())
			continue
		}
		ops := p.Then
		if !holds {
			ops = p.Else
		}
		r := txn.PieceResult{Succeeded: holds}
		for _, o := range results {
			if slices.Contains(ops, o.Index) {
				r.Results = append(r.Results, o)
			}
		}
		out[p.Group] = r
	}
	return out
}

func runPipelineVsSerial(t *testing.T, seed uint64, txns int, strict bool) Stats {
	rng := rand.New(rand.NewPCG(seed, 0x7069_7065))
	c := newCluster(t, nil)
	if strict {
		c.strict = true
		for g := range c.reps {
			c.restart(partition.GroupID(g))
		}
	}
	c.addTwins()
	ref := txn.NewMemStore(nil)

	var all []multicast.Message
	want := map[multicast.MsgID]map[partition.GroupID]txn.PieceResult{}
	queue := make([][]multicast.Message, len(c.reps))
	for i := range txns {
		js := randomTxn(rng)
		m := c.msg(uint64(i+1), js)
		tx := mustParse(t, js)
		want[m.ID] = serialResults(t, c, ref, tx, m.Dst)
		all = append(all, m)
		for _, g := range m.Dst.Slice() {
			queue[g] = append(queue[g], m)
		}
	}

	// sent[about][{from, to}] counts the votes each group sent on each
	// transaction to each destination.
	sent := map[multicast.MsgID]map[[2]partition.GroupID]int{}
	// Mostly hold votes back, so that pieces wait and later deliveries
	// pile up behind them.
	c.drive(t, seed, rng, queue, 3, 40, func(from partition.GroupID, s rawnode.AppSend) {
		if txn.IsRelease(s.Payload) {
			return
		}
		if sent[s.About] == nil {
			sent[s.About] = map[[2]partition.GroupID]int{}
		}
		sent[s.About][[2]partition.GroupID{from, s.To}]++
	})

	for _, m := range all {
		for g, w := range want[m.ID] {
			got := c.result(g, m)
			if string(txn.AppendPieceResult(nil, &got)) != string(txn.AppendPieceResult(nil, &w)) {
				t.Errorf("seed %d: %s at group %d: %s, serial execution %s", seed, m.ID, g, describeResult(got), describeResult(w))
			}
		}
		p, err := txn.DecodePayload(m.Payload)
		if err != nil {
			t.Fatal(err)
		}
		pieces, err := p.Txn.Pieces(c.pm, c.top, m.Dst)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pieces {
			for _, to := range p.VoteTo.Slice() {
				if n := sent[m.ID][[2]partition.GroupID{p.Group, to}]; n != 1 {
					t.Errorf("seed %d: group %d sent %d votes on %s to group %d, want 1", seed, p.Group, n, m.ID, to)
				}
			}
		}
	}
	var total Stats
	for g := range c.reps {
		gid := partition.GroupID(g)
		holds := txn.NewMemStore(nil)
		for _, k := range ref.Keys() {
			if p, err := c.pm.Lookup([]byte(k)); err == nil && (p.Replicated || p.Group == gid) {
				v, _, _ := ref.Get([]byte(k))
				if err := holds.Put([]byte(k), v); err != nil {
					t.Fatal(err)
				}
			}
		}
		if got, want := c.data(gid), holds.String(); got != want {
			t.Errorf("seed %d: group %d holds %s, serial execution %s", seed, g, got, want)
		}
		st := c.reps[g].ex.Stats()
		if st.Queued != 0 || st.VotesStored != 0 || st.VotesJunk != 0 {
			t.Errorf("group %d stats at the end %+v", g, st)
		}
		if r := &c.reps[g].ex.rel; len(r.open) != 0 || len(r.early) != 0 {
			t.Errorf("seed %d: group %d ends with %d open jobs and %d early notes", seed, g, len(r.open), len(r.early))
		}
		if a, b := c.snapshot(gid), twinSnapshot(t, c, g); string(a) != string(b) {
			t.Errorf("seed %d: group %d and its twin differ after the same entries", seed, g)
		}
		total.VotesEarly += st.VotesEarly
		total.RanAhead += st.RanAhead
	}
	return total
}
