package executor

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/flexkv/flexkv/group"
	"github.com/flexkv/flexkv/kv"
	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/multicast/rawnode"
	"github.com/flexkv/flexkv/partition"
	"github.com/flexkv/flexkv/txn"
)

// replica is one replica of a group in a test cluster: a store in its own
// directory and its executor.
type replica struct {
	g               partition.GroupID
	dir             string
	store           *kv.Store
	ex              *Executor
	index           uint64            // the last raft index given to Execute
	executed        []multicast.MsgID // what OnReleased reported, in order
	executedResults []txn.PieceResult // and the results it reported with them
}

// cluster is one replica per group of testTopology, and a router that
// hands each group the sends addressed to it, FIFO per sending group (the
// channel layer's guarantee), on the group's next Execute.
type cluster struct {
	t     testing.TB
	top   *partition.Topology
	pm    *partition.PartitionMap
	procs *txn.Registry
	// resultsMax is the kv.Options.ResultsMax of the replicas opened from
	// now on; 0: the store's default.
	resultsMax int
	// storedVoteBytesMax is the Config.StoredVoteBytesMax of the
	// executors opened from now on; 0: the default.
	storedVoteBytesMax int64
	// strict is the Config.Strict of the executors opened from now on.
	strict bool
	reps   []*replica
	// twins, when not nil, are a second replica of each group, given the
	// same entries as reps: they must send the same and end up with the
	// same bytes.
	twins []*replica
	// inbox[to][from] are the sends from -> to not handed over yet.
	inbox [][][]rawnode.AppInbound
}

func newCluster(t testing.TB, procs *txn.Registry) *cluster {
	t.Helper()
	top := testTopology(t)
	c := &cluster{t: t, top: top, pm: testPartitionMap(t, top), procs: procs}
	root := t.TempDir()
	for g := range top.Len() {
		r := &replica{g: partition.GroupID(g), dir: filepath.Join(root, fmt.Sprintf("g%d", g))}
		c.reps = append(c.reps, r)
		c.open(r)
		c.inbox = append(c.inbox, make([][]rawnode.AppInbound, top.Len()))
	}
	return c
}

// addTwins gives every group a second replica, at the same state as the
// first (so call it before any entry).
func (c *cluster) addTwins() {
	c.t.Helper()
	root := c.t.TempDir()
	for g := range c.reps {
		r := &replica{g: partition.GroupID(g), dir: filepath.Join(root, fmt.Sprintf("g%d", g))}
		c.open(r)
		c.twins = append(c.twins, r)
	}
}

func equalSends(a, b []rawnode.AppSend) bool {
	return slices.EqualFunc(a, b, func(x, y rawnode.AppSend) bool {
		return x.To == y.To && x.About == y.About && bytes.Equal(x.Payload, y.Payload)
	})
}

// open opens r's store and a new executor on it.
func (c *cluster) open(r *replica) {
	c.t.Helper()
	s, err := kv.Open(kv.Options{Dir: r.dir, NoSync: true, ResultsMax: c.resultsMax})
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() {
		if err := s.Close(); err != nil && !errors.Is(err, kv.ErrClosed) {
			c.t.Errorf("close store of group %d: %v", r.g, err)
		}
	})
	ex, err := NewExecutor(Config{
		Store: s, Partitions: c.pm, Topology: c.top, Self: r.g, Procedures: c.procs,
		StoredVoteBytesMax: c.storedVoteBytesMax, Strict: c.strict,
		OnReleased: func(done []Executed) {
			for _, d := range done {
				r.executed = append(r.executed, d.ID)
				r.executedResults = append(r.executedResults, d.Result)
			}
		},
	})
	if err != nil {
		c.t.Fatal(err)
	}
	r.store, r.ex, r.index = s, ex, s.AppliedIndex()
}

// restart closes group g's store and opens it again with a new executor.
func (c *cluster) restart(g partition.GroupID) {
	c.t.Helper()
	r := c.reps[g]
	if err := r.store.Close(); err != nil {
		c.t.Fatal(err)
	}
	c.open(r)
}

// seed writes kvs into group g's store directly, as one entry, and into
// its twin's.
func (c *cluster) seed(g partition.GroupID, kvs map[string]string) {
	c.t.Helper()
	reps := []*replica{c.reps[g]}
	if c.twins != nil {
		reps = append(reps, c.twins[g])
	}
	keys := make([]string, 0, len(kvs))
	for k := range kvs { //flexkv:unordered sorted below
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, r := range reps {
		b := r.store.NewBatch()
		for _, k := range keys {
			if err := b.Put([]byte(k), []byte(kvs[k])); err != nil {
				c.t.Fatal(err)
			}
		}
		r.index++
		if err := r.store.Commit(b, r.index); err != nil {
			c.t.Fatal(err)
		}
		b.Close()
	}
}

// pending returns how many sends wait for group g.
func (c *cluster) pending(g partition.GroupID) int {
	n := 0
	for _, q := range c.inbox[g] {
		n += len(q)
	}
	return n
}

// take removes and returns the first n[from] sends waiting for g from each
// group (all of them when n is nil), sender by sender.
func (c *cluster) take(g partition.GroupID, n []int) []rawnode.AppInbound {
	var in []rawnode.AppInbound
	for from, q := range c.inbox[g] {
		k := len(q)
		if n != nil {
			k = min(k, n[from])
		}
		in = append(in, q[:k]...)
		c.inbox[g][from] = q[k:]
	}
	return in
}

// execute runs one entry at group g with deliveries and inbound, and routes
// the sends.
// drive runs the groups in a random order until every queue is delivered
// and every vote consumed: each step, a random group gets the next 0-3 of
// its queued deliveries and, from each sender, a random prefix of the
// votes in flight to it (FIFO per channel, any delay; with holdOdds > 1,
// only one step in holdOdds hands any over, so that pieces wait and
// deliveries pile up behind them); one step in restartOdds restarts the
// group. onSend, when set, sees every vote a group sends. It fails the test
// after 100 steps per delivery.
func (c *cluster) drive(t *testing.T, seed uint64, rng *rand.Rand, queue [][]multicast.Message, holdOdds, restartOdds int, onSend func(from partition.GroupID, s rawnode.AppSend)) {
	t.Helper()
	total := 0
	for _, q := range queue {
		total += len(q)
	}
	for steps := 0; ; steps++ {
		if steps > 100*total {
			t.Fatalf("seed %d: no progress after %d steps", seed, steps)
		}
		busy := false
		for g := range c.reps {
			busy = busy || len(queue[g]) > 0 || c.pending(partition.GroupID(g)) > 0
		}
		if !busy {
			return
		}
		g := partition.GroupID(rng.IntN(len(c.reps)))
		k := min(rng.IntN(4), len(queue[g]))
		deliveries := queue[g][:k]
		queue[g] = queue[g][k:]
		n := make([]int, len(c.reps))
		for from := range n {
			if holdOdds <= 1 || rng.IntN(holdOdds) == 0 {
				n[from] = rng.IntN(len(c.inbox[g][from]) + 1)
			}
		}
		for _, s := range c.execute(g, deliveries, c.take(g, n)) {
			if onSend != nil {
				onSend(g, s)
			}
		}
		if rng.IntN(restartOdds) == 0 {
			c.restart(g)
		}
	}
}

func (c *cluster) execute(g partition.GroupID, deliveries []multicast.Message, inbound []rawnode.AppInbound) []rawnode.AppSend {
	c.t.Helper()
	r := c.reps[g]
	r.index++
	sends, err := r.ex.Execute(r.index, group.Clock{}, deliveries, inbound)
	if err != nil {
		c.t.Fatalf("group %d: Execute(%d): %v", g, r.index, err)
	}
	if c.twins != nil {
		tw := c.twins[g]
		tw.index++
		twin, err := tw.ex.Execute(tw.index, group.Clock{}, deliveries, inbound)
		if err != nil {
			c.t.Fatalf("group %d twin: Execute(%d): %v", g, tw.index, err)
		}
		if !equalSends(sends, twin) {
			c.t.Fatalf("group %d: entry %d: replica sends %+v, its twin %+v", g, r.index, sends, twin)
		}
	}
	for _, s := range sends {
		if s.To == g || !c.top.Valid(s.To) {
			c.t.Fatalf("group %d sends to group %d", g, s.To)
		}
		c.inbox[s.To][g] = append(c.inbox[s.To][g], rawnode.AppInbound{From: g, Payload: s.Payload})
	}
	return sends
}

// deliver runs an entry at g with deliveries and every send waiting for g.
func (c *cluster) deliver(g partition.GroupID, deliveries ...multicast.Message) []rawnode.AppSend {
	c.t.Helper()
	return c.execute(g, deliveries, c.take(g, nil))
}

// settle hands every waiting send over until none is left.
func (c *cluster) settle() {
	c.t.Helper()
	for moved := true; moved; {
		moved = false
		for g := range c.reps {
			if c.pending(partition.GroupID(g)) > 0 {
				c.deliver(partition.GroupID(g))
				moved = true
			}
		}
	}
}

// msg is transaction seq of client 1, in JSON, addressed to its
// destinations (home group 0).
func (c *cluster) msg(seq uint64, js string) multicast.Message {
	c.t.Helper()
	tx := mustParse(c.t, js)
	dst, err := tx.Destinations(c.pm, c.top, 0)
	if err != nil {
		c.t.Fatal(err)
	}
	return multicast.Message{ID: multicast.MsgID{Client: 1, Seq: seq}, Dst: dst, Payload: txn.AppendTxnPayload(nil, tx)}
}

// result returns group g's result of m, failing if there is none.
func (c *cluster) result(g partition.GroupID, m multicast.Message) txn.PieceResult {
	c.t.Helper()
	r, ok, err := c.reps[g].ex.Result(m.ID)
	if err != nil || !ok {
		c.t.Fatalf("group %d: result of %s: found %v, %v", g, m.ID, ok, err)
	}
	return r
}

// hasResult reports whether group g has a result of m.
func (c *cluster) hasResult(g partition.GroupID, m multicast.Message) bool {
	c.t.Helper()
	_, ok, err := c.reps[g].ex.Result(m.ID)
	if err != nil {
		c.t.Fatal(err)
	}
	return ok
}

// merged merges the results of m at each of its destinations.
func (c *cluster) merged(m multicast.Message) (txn.Result, error) {
	c.t.Helper()
	var prs []txn.PieceResult
	for _, g := range m.Dst.Slice() {
		prs = append(prs, c.result(g, m))
	}
	return txn.MergeResults(m.ID.String(), prs)
}

// data returns group g's user keys as "k=v ...".
func (c *cluster) data(g partition.GroupID) string {
	c.t.Helper()
	kvs, err := c.reps[g].store.Scan(nil, nil, kv.ScanLimitMax)
	if err != nil {
		c.t.Fatal(err)
	}
	var out []string
	for _, p := range kvs {
		out = append(out, string(p.Key)+"="+string(p.Value))
	}
	return strings.Join(out, " ")
}

// snapshot returns group g's snapshot stream.
func (c *cluster) snapshot(g partition.GroupID) []byte {
	c.t.Helper()
	sn, err := c.reps[g].ex.Snapshot()
	if err != nil {
		c.t.Fatal(err)
	}
	defer sn.Release()
	var buf bytes.Buffer
	if _, err := sn.WriteTo(&buf); err != nil {
		c.t.Fatal(err)
	}
	return buf.Bytes()
}

func describeResult(r txn.PieceResult) string {
	switch {
	case r.Aborted:
		return "aborted: " + r.Reason
	case r.Truncated:
		return fmt.Sprintf("succeeded %v, truncated", r.Succeeded)
	}
	return fmt.Sprintf("succeeded %v: %s", r.Succeeded, describeResults(r.Results))
}

func TestExecutorSingleGroup(t *testing.T) {
	c := newCluster(t, nil)
	c.seed(0, map[string]string{"w/0001/acct": "10"})
	m1 := c.msg(1, designTransfer)
	m2 := c.msg(2, designTransfer)
	m3 := c.msg(3, designTransfer)
	if sends := c.deliver(0, m1, m2); len(sends) != 0 {
		t.Errorf("a single-group transaction sent %d votes", len(sends))
	}
	c.deliver(0, m3)
	want := []string{
		"succeeded true: 0:add w/0001/acct=5; 1:add w/0002/acct=5",
		"succeeded true: 0:add w/0001/acct=0; 1:add w/0002/acct=10",
		"succeeded false: ",
	}
	if n := len(c.reps[0].executedResults); n != 3 {
		t.Fatalf("OnReleased reported %d results, want 3", n)
	}
	for i, m := range []multicast.Message{m1, m2, m3} {
		stored := c.result(0, m)
		if got := describeResult(stored); got != want[i] {
			t.Errorf("%s: %s, want %s", m.ID, got, want[i])
		}
		// OnReleased hands over the result the store keeps.
		if reported := &c.reps[0].executedResults[i]; !bytes.Equal(txn.AppendPieceResult(nil, reported), txn.AppendPieceResult(nil, &stored)) {
			t.Errorf("%s: OnReleased reported %s, the store keeps %s", m.ID, describeResult(*reported), describeResult(stored))
		}
	}
	if got, want := c.data(0), "w/0001/acct=0 w/0002/acct=10"; got != want {
		t.Errorf("data %s, want %s", got, want)
	}
	r := c.reps[0]
	if !slices.Equal(r.executed, []multicast.MsgID{m1.ID, m2.ID, m3.ID}) {
		t.Errorf("OnReleased reported %v", r.executed)
	}
	if got := r.ex.Stats(); got != (Stats{Executed: 3}) {
		t.Errorf("stats %+v", got)
	}
	if r.ex.AppliedIndex() != r.index {
		t.Errorf("AppliedIndex %d, want %d", r.ex.AppliedIndex(), r.index)
	}
	// Delivered again, a transaction keeps its first result and does not
	// run again.
	c.deliver(0, m1)
	if got := c.data(0); got != "w/0001/acct=0 w/0002/acct=10" {
		t.Errorf("a second delivery ran again: %s", got)
	}
	if got := r.ex.Stats().Executed; got != 3 {
		t.Errorf("executed %d after a second delivery, want 3", got)
	}
	// An index that does not increase is refused, and changes nothing.
	if _, err := r.ex.Execute(r.index, group.Clock{}, []multicast.Message{c.msg(9, designTransfer)}, nil); !errors.Is(err, kv.ErrInvalid) {
		t.Errorf("Execute at the applied index: %v, want kv.ErrInvalid", err)
	}
}

// remoteCompare is a put at group 0 under a compare owned by group 2.
const remoteCompare = `{"if":[{"key":"w/0004/flag","cmp":"=","value":"on"}],"then":[{"op":"put","key":"w/0001/x","value":"then"}],"else":[{"op":"put","key":"w/0001/x","value":"else"}]}`

// A piece waits for the vote of the owner of its remote compare, whether
// the vote arrives before or after the delivery.
func TestExecutorRemoteCompare(t *testing.T) {
	for _, tc := range []struct {
		name      string
		flag      string
		voteFirst bool
		want      string
	}{
		{"vote after delivery, holds", "on", false, "w/0001/x=then"},
		{"vote after delivery, fails", "off", false, "w/0001/x=else"},
		{"vote before delivery, holds", "on", true, "w/0001/x=then"},
		{"vote before delivery, fails", "off", true, "w/0001/x=else"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, nil)
			c.seed(2, map[string]string{"w/0004/flag": tc.flag})
			m := c.msg(1, remoteCompare)
			if m.Dst != partition.SetOf(0, 2) {
				t.Fatalf("destinations %s", m.Dst)
			}
			if !tc.voteFirst {
				if sends := c.deliver(0, m); len(sends) != 0 {
					t.Errorf("group 0 sent %d votes; it owns no compare", len(sends))
				}
				if c.hasResult(0, m) {
					t.Fatal("group 0 ran without the vote")
				}
				if got := c.reps[0].ex.Stats(); got.Queued != 1 {
					t.Errorf("group 0 stats %+v, want 1 queued", got)
				}
			}
			sends := c.deliver(2, m)
			if len(sends) != 1 || sends[0].To != 0 || sends[0].About != m.ID {
				t.Fatalf("group 2 sent %+v, want one vote to group 0 about %s", sends, m.ID)
			}
			if tc.voteFirst {
				c.deliver(0) // the vote alone: stored
				if got := c.reps[0].ex.Stats(); got.VotesStored != 1 || got.Queued != 0 {
					t.Errorf("group 0 stats %+v, want the vote stored and nothing queued", got)
				}
				c.deliver(0, m)
			} else {
				c.deliver(0)
			}
			if got := c.data(0); got != tc.want {
				t.Errorf("group 0 data %s, want %s", got, tc.want)
			}
			if got := c.reps[0].ex.Stats(); got != (Stats{Executed: 1}) {
				t.Errorf("group 0 stats %+v: want the vote consumed, the queue empty", got)
			}
			res, err := c.merged(m)
			if err != nil {
				t.Fatal(err)
			}
			if res.Succeeded != (tc.flag == "on") || len(res.Results) != 1 {
				t.Errorf("merged %+v", res)
			}
		})
	}
}

// The mixed transaction of the routing tests: three groups, each voting,
// each waiting for the two others, in every order of execution.
func TestExecutorThreeGroups(t *testing.T) {
	orders := [][]partition.GroupID{{0, 1, 2}, {2, 1, 0}, {1, 0, 2}}
	for _, order := range orders {
		t.Run(fmt.Sprint(order), func(t *testing.T) {
			c := newCluster(t, nil)
			c.seed(0, map[string]string{"w/0001/a": "10", "item/1": "x", "item/2": "pen"})
			c.seed(1, map[string]string{"w/0003/a": "1", "item/1": "x", "item/2": "pen"})
			c.seed(2, map[string]string{"w/0004/b": "1", "item/1": "x", "item/2": "pen"})
			m := c.msg(1, mixedTxn)
			for _, g := range order {
				c.deliver(g, m)
			}
			c.settle()
			res, err := c.merged(m)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := describeResults(res.Results), "0:get item/2=pen; 1:add w/0001/a=5; 2:add w/0003/a=6; 3:put item/3"; !res.Succeeded || got != want {
				t.Errorf("merged: succeeded %v, %s; want true, %s", res.Succeeded, got, want)
			}
			for g, want := range []string{
				"item/1=x item/2=pen item/3=y w/0001/a=5",
				"item/1=x item/2=pen item/3=y w/0003/a=6",
				"item/1=x item/2=pen item/3=y w/0004/b=1",
			} {
				if got := c.data(partition.GroupID(g)); got != want {
					t.Errorf("group %d: %s, want %s", g, got, want)
				}
				if st := c.reps[g].ex.Stats(); st != (Stats{Executed: 1, VotesSent: 2}) {
					t.Errorf("group %d stats %+v", g, st)
				}
			}
		})
	}
}

// Pieces delivered behind a waiting piece that touch its keys queue behind
// it and run in delivery order, seeing its writes, once its vote arrives;
// the head's vote is sent once.
func TestExecutorQueueBehindWaitingPiece(t *testing.T) {
	c := newCluster(t, nil)
	c.seed(2, map[string]string{"w/0004/flag": "on"})
	head := c.msg(1, remoteCompare)
	m2 := c.msg(2, `{"then":[{"op":"get","key":"w/0001/x"},{"op":"put","key":"w/0001/x","value":"second"}]}`)
	m3 := c.msg(3, `{"then":[{"op":"get","key":"w/0001/x"}]}`)
	// m4 has a compare owned by group 0 on a key the pieces ahead of it
	// write: group 0 votes once they ran, not before.
	m4 := c.msg(4, `{"if":[{"key":"w/0001/x","cmp":"=","value":"second"}],"then":[{"op":"put","key":"w/0004/seen","value":"yes"}]}`)
	c.deliver(0, head, m2)
	if sends := c.deliver(0, m3, m4); len(sends) != 0 {
		t.Errorf("group 0 voted on a queued piece: %+v", sends)
	}
	for _, m := range []multicast.Message{head, m2, m3, m4} {
		if c.hasResult(0, m) {
			t.Errorf("%s ran before the head's vote", m.ID)
		}
	}
	if st := c.reps[0].ex.Stats(); st.Queued != 4 {
		t.Errorf("group 0 stats %+v, want 4 queued", st)
	}
	c.deliver(2, head)
	c.deliver(2, m4) // waits for group 0's vote
	sends := c.deliver(0)
	if len(sends) != 1 || sends[0].To != 2 || sends[0].About != m4.ID {
		t.Fatalf("group 0 sent %+v, want its vote on %s to group 2", sends, m4.ID)
	}
	for i, want := range []string{
		"succeeded true: 0:put w/0001/x",
		"succeeded true: 0:get w/0001/x=then; 1:put w/0001/x",
		"succeeded true: 0:get w/0001/x=second",
		"succeeded true: ",
	} {
		m := []multicast.Message{head, m2, m3, m4}[i]
		if got := describeResult(c.result(0, m)); got != want {
			t.Errorf("%s: %s, want %s", m.ID, got, want)
		}
	}
	if r := c.reps[0]; !slices.Equal(r.executed, []multicast.MsgID{head.ID, m2.ID, m3.ID, m4.ID}) {
		t.Errorf("group 0 executed %v", r.executed)
	}
	c.settle()
	if got := c.data(2); got != "w/0004/flag=on w/0004/seen=yes" {
		t.Errorf("group 2: %s", got)
	}
	for g := range c.reps {
		if st := c.reps[g].ex.Stats(); st.Queued != 0 || st.VotesStored != 0 || st.VotesJunk != 0 {
			t.Errorf("group %d stats %+v", g, st)
		}
	}
}

// An add that aborts at one group aborts the transaction at every
// destination: nothing is written anywhere, and every group reports the
// same abort. An abort in the branch that does not run changes nothing.
func TestExecutorAddAbortIsAtomic(t *testing.T) {
	const reason = `txn: then[0]: add to "w/0001/x": stored value "abc": not an integer`
	for _, tc := range []struct {
		name, js string
		abort    string
		data     [3]string
	}{
		{
			name:  "add on a non-integer",
			js:    `{"then":[{"op":"add","key":"w/0001/x","int":1},{"op":"put","key":"w/0003/y","value":"v"},{"op":"add","key":"w/0004/n","int":1}]}`,
			abort: reason,
			data:  [3]string{"w/0001/x=abc", "", "w/0004/n=5"},
		},
		{
			name:  "two aborts: the lower index wins everywhere",
			js:    `{"then":[{"op":"put","key":"w/0003/y","value":"v"},{"op":"add","key":"w/0004/n","int":9223372036854775807},{"op":"add","key":"w/0001/x","int":1}]}`,
			abort: `txn: then[1]: add 9223372036854775807 to "w/0004/n": 5: integer overflow`,
			data:  [3]string{"w/0001/x=abc", "", "w/0004/n=5"},
		},
		{
			name: "abort in the branch that does not run",
			js: `{"if":[{"key":"w/0004/n","cmp":"=","int":5}],"then":[{"op":"put","key":"w/0003/y","value":"v"}],` +
				`"else":[{"op":"add","key":"w/0001/x","int":1}]}`,
			data: [3]string{"w/0001/x=abc", "w/0003/y=v", "w/0004/n=5"},
		},
		{
			name: "abort in the else branch that runs",
			js: `{"if":[{"key":"w/0004/n","cmp":"=","int":6}],"then":[{"op":"put","key":"w/0003/y","value":"v"}],` +
				`"else":[{"op":"put","key":"w/0003/y","value":"e"},{"op":"add","key":"w/0001/x","int":1}]}`,
			abort: `txn: else[1]: add to "w/0001/x": stored value "abc": not an integer`,
			data:  [3]string{"w/0001/x=abc", "", "w/0004/n=5"},
		},
		{
			name:  "int compare on a non-integer",
			js:    `{"if":[{"key":"w/0001/x","cmp":">","int":0}],"then":[{"op":"put","key":"w/0003/y","value":"v"}],"else":[{"op":"put","key":"w/0004/n","value":"0"}]}`,
			abort: `txn: if[0]: "w/0001/x" > 0: stored value "abc": not an integer`,
			data:  [3]string{"w/0001/x=abc", "", "w/0004/n=5"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, nil)
			c.seed(0, map[string]string{"w/0001/x": "abc"})
			c.seed(2, map[string]string{"w/0004/n": "5"})
			m := c.msg(1, tc.js)
			for _, g := range m.Dst.Slice() {
				c.deliver(g, m)
			}
			c.settle()
			for _, g := range m.Dst.Slice() {
				r := c.result(g, m)
				if tc.abort == "" {
					if r.Aborted {
						t.Errorf("group %d aborted: %s", g, r.Reason)
					}
					continue
				}
				if !r.Aborted || r.Reason != tc.abort {
					t.Errorf("group %d: %s, want aborted: %s", g, describeResult(r), tc.abort)
				}
			}
			for g, want := range tc.data {
				if got := c.data(partition.GroupID(g)); got != want {
					t.Errorf("group %d: %q, want %q", g, got, want)
				}
			}
			_, err := c.merged(m)
			if tc.abort != "" && (!errors.Is(err, txn.ErrAborted) || err.Error() != tc.abort) {
				t.Errorf("merged: %v, want the abort", err)
			}
			if tc.abort == "" && err != nil {
				t.Errorf("merged: %v", err)
			}
		})
	}
}

func TestExecutorSentAndForgetSent(t *testing.T) {
	c := newCluster(t, nil)
	c.seed(2, map[string]string{"w/0004/flag": "on"})
	m := c.msg(1, remoteCompare)
	sends := c.deliver(2, m)
	index := c.reps[2].index
	ex := c.reps[2].ex
	got, err := ex.Sent(index)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || len(sends) != 1 || got[0].To != sends[0].To || got[0].About != sends[0].About || !bytes.Equal(got[0].Payload, sends[0].Payload) {
		t.Errorf("Sent(%d) = %+v, Execute returned %+v", index, got, sends)
	}
	c.deliver(2, c.msg(2, `{"then":[{"op":"get","key":"w/0004/flag"}]}`))
	if got, err := ex.Sent(index + 1); err != nil || got != nil {
		t.Errorf("Sent of an entry without sends: %+v, %v", got, err)
	}
	if _, err := ex.Sent(index + 2); err == nil {
		t.Error("Sent of an entry not applied: no error")
	}
	if err := ex.ForgetSent(index - 1); err != nil {
		t.Fatal(err)
	}
	if got, err := ex.Sent(index); err != nil || len(got) != 1 {
		t.Errorf("ForgetSent(%d) dropped the sends of %d: %+v, %v", index-1, index, got, err)
	}
	applied := ex.AppliedIndex()
	if err := ex.ForgetSent(index); err != nil {
		t.Fatal(err)
	}
	if got, err := ex.Sent(index); err != nil || got != nil {
		t.Errorf("after ForgetSent: %+v, %v", got, err)
	}
	if ex.AppliedIndex() != applied {
		t.Errorf("ForgetSent moved the applied index to %d", ex.AppliedIndex())
	}
}

// The queue and the stored votes are durable: a restarted replica resumes
// them.
func TestExecutorRestartKeepsQueueAndVotes(t *testing.T) {
	c := newCluster(t, nil)
	c.seed(2, map[string]string{"w/0004/flag": "on"})
	head := c.msg(1, remoteCompare)
	next := c.msg(2, `{"then":[{"op":"get","key":"w/0001/x"}]}`)
	c.deliver(0, head, next)
	// A vote on a transaction group 0 has not delivered yet.
	early := c.msg(3, `{"if":[{"key":"w/0004/flag","cmp":"=","value":"on"}],"then":[{"op":"put","key":"w/0002/z","value":"1"}]}`)
	c.deliver(2, early) // group 2's vote on early, before head: FIFO keeps it first
	c.execute(0, nil, c.take(0, nil))
	before := c.reps[0].ex.Stats()
	if before.Queued != 2 || before.VotesStored != 1 {
		t.Fatalf("before restart: %+v", before)
	}
	c.restart(0)
	if got := c.reps[0].ex.Stats(); got != before {
		t.Errorf("after restart: %+v, want %+v", got, before)
	}
	c.deliver(2, head)
	c.deliver(0, early)
	for i, want := range []string{"succeeded true: 0:put w/0001/x", "succeeded true: 0:get w/0001/x=then", "succeeded true: 0:put w/0002/z"} {
		m := []multicast.Message{head, next, early}[i]
		if got := describeResult(c.result(0, m)); got != want {
			t.Errorf("%s: %s, want %s", m.ID, got, want)
		}
	}
	if got := c.data(0); got != "w/0001/x=then w/0002/z=1" {
		t.Errorf("group 0: %s", got)
	}
}

// A snapshot taken mid-queue restores into another replica, which then
// goes on exactly like the original, to the same bytes.
func TestExecutorSnapshotMidQueue(t *testing.T) {
	c := newCluster(t, nil)
	c.seed(2, map[string]string{"w/0004/flag": "off"})
	head := c.msg(1, remoteCompare)
	next := c.msg(2, `{"then":[{"op":"get","key":"w/0001/x"}]}`)
	c.deliver(0, head, next)
	stream := c.snapshot(0)
	index := c.reps[0].ex.AppliedIndex()

	twin := newCluster(t, nil)
	twin.seed(0, map[string]string{"w/0001/old": "gone"})
	r := twin.reps[0]
	if err := r.ex.Restore(bytes.NewReader(stream), index); err != nil {
		t.Fatal(err)
	}
	r.index = index
	if got, want := r.ex.Stats(), c.reps[0].ex.Stats(); got != want {
		t.Errorf("restored stats %+v, want %+v", got, want)
	}
	if !bytes.Equal(twin.snapshot(0), stream) {
		t.Error("the restored replica writes another stream")
	}
	vote := c.deliver(2, head)
	for _, cl := range []*cluster{c, twin} {
		cl.execute(0, nil, []rawnode.AppInbound{{From: 2, Payload: vote[0].Payload}})
	}
	if got := describeResult(twin.result(0, next)); got != "succeeded true: 0:get w/0001/x=else" {
		t.Errorf("restored replica: %s", got)
	}
	if !bytes.Equal(twin.snapshot(0), c.snapshot(0)) {
		t.Error("the original and the restored replica differ after the same entry")
	}
	if err := r.ex.Restore(bytes.NewReader(stream[:len(stream)-1]), index); err == nil {
		t.Error("a truncated snapshot restored")
	}
}

// Bad input never fails Execute: a delivery that cannot run gets an
// aborted result naming the problem; a junk vote is counted and dropped.
func TestExecutorJunk(t *testing.T) {
	c := newCluster(t, nil)
	id := func(seq uint64) multicast.MsgID { return multicast.MsgID{Client: 7, Seq: seq} }
	good := c.msg(100, designTransfer)
	tooBig := make([]byte, txn.PayloadMax+1)
	tooBig[0] = payloadCall
	for _, tc := range []struct {
		m    multicast.Message
		want string
	}{
		{multicast.Message{ID: id(1), Dst: partition.SetOf(0), Payload: []byte("junk")}, "txn: decode payload: wire: corrupt encoding: kind 106"},
		{multicast.Message{ID: id(2), Dst: partition.SetOf(0)}, "txn: decode payload: wire: corrupt encoding: empty"},
		{multicast.Message{ID: id(3), Dst: partition.SetOf(0, 1), Payload: good.Payload}, "txn: destination set {0,1}, want {0}"},
		{multicast.Message{ID: id(4), Dst: partition.SetOf(1), Payload: good.Payload}, "txn: group 0 is not a destination of c7.4 ({1})"},
		{multicast.Message{ID: id(5), Dst: partition.SetOf(0), Payload: txn.AppendTxnPayload(nil, mustParse(t, `{"then":[{"op":"get","key":"x/1"}]}`))}, "txn: then[0].key: partition: key \"x/1\""},
		{multicast.Message{ID: id(6), Dst: partition.SetOf(0), Payload: txn.AppendCallPayload(nil, txn.Call{Name: "nope"})}, `txn: unknown procedure "nope"`},
		{multicast.Message{ID: id(7), Dst: partition.SetOf(0), Payload: tooBig}, fmt.Sprintf("txn: decode payload: wire: corrupt encoding: %d bytes, more than PayloadMax", txn.PayloadMax+1)},
		{multicast.Message{ID: id(8), Dst: partition.SetOf(0), Payload: txn.AppendCallPayload(nil, txn.Call{Name: "Bad Name"})}, `txn: procedure name "Bad Name"`},
	} {
		c.deliver(0, tc.m)
		r := c.result(0, tc.m)
		if !r.Aborted || !strings.HasPrefix(r.Reason, tc.want) {
			t.Errorf("%s: %s, want aborted: %s...", tc.m.ID, describeResult(r), tc.want)
		}
	}
	// The same junk behind a waiting piece is judged alike, at once: it
	// touches no key.
	c.seed(2, map[string]string{"w/0004/flag": "on"})
	head := c.msg(1, remoteCompare)
	c.deliver(0, head, multicast.Message{ID: id(20), Dst: partition.SetOf(0), Payload: tooBig})
	if r := c.result(0, multicast.Message{ID: id(20)}); !r.Aborted || !strings.Contains(r.Reason, "more than PayloadMax") {
		t.Errorf("oversized payload behind a waiting piece: %s", describeResult(r))
	}
	c.deliver(2, head)
	c.deliver(0)

	vote := txn.AppendVote(nil, id(50), txn.Vote{Group: 2, Holds: true})
	before := c.reps[0].ex.Stats()
	c.execute(0, nil, []rawnode.AppInbound{
		{From: 2, Payload: []byte("junk")},
		{From: 1, Payload: vote}, // not its sender's
		{From: 0, Payload: txn.AppendVote(nil, id(50), txn.Vote{Group: 0, Holds: true})},  // this group's own
		{From: 2, Payload: txn.AppendVote(nil, head.ID, txn.Vote{Group: 2, Holds: true})}, // its transaction ran
		{From: 2, Payload: vote}, // stored
		{From: 2, Payload: vote}, // twice
	})
	got := c.reps[0].ex.Stats()
	if got.VotesJunk-before.VotesJunk != 5 || got.VotesStored != before.VotesStored+1 {
		t.Errorf("stats %+v after %+v: want 5 more junk votes, 1 more stored", got, before)
	}
	if got.Aborted != 9 || got.Executed != 10 {
		t.Errorf("stats %+v: want 10 executed, of which 9 aborted", got)
	}
	// A stored vote its piece does not wait for is dropped when the piece
	// runs, and counted as junk.
	c.deliver(0, multicast.Message{ID: id(50), Dst: partition.SetOf(0), Payload: good.Payload})
	if st := c.reps[0].ex.Stats(); st.VotesStored != 0 || st.VotesJunk != got.VotesJunk+1 {
		t.Errorf("stats %+v: want the unused vote dropped as junk", st)
	}
}

// A result too large to keep is left out: the piece's writes stay, and the
// client learns that the reads are lost.
func TestExecutorTruncatesLargeResults(t *testing.T) {
	c := newCluster(t, nil)
	big := strings.Repeat("v", txn.ValueMax)
	seed := map[string]string{}
	for i := range kv.ValueMax/txn.ValueMax + 1 {
		seed[fmt.Sprintf("w/0001/k%02d", i)] = big
	}
	c.seed(0, seed)
	m := c.msg(1, `{"then":[{"op":"scan","key":"w/0001/","end":"w/0002/","limit":100},{"op":"put","key":"w/0001/after","value":"1"}]}`)
	c.deliver(0, m)
	if r := c.result(0, m); !r.Truncated || !r.Succeeded || r.Results != nil {
		t.Errorf("result %s, want truncated", describeResult(r))
	}
	// OnReleased hands over the truncated result, as the store keeps it.
	if rs := c.reps[0].executedResults; len(rs) != 1 {
		t.Errorf("OnReleased reported %d results, want 1", len(rs))
	} else if !rs[0].Truncated || !rs[0].Succeeded || rs[0].Results != nil {
		t.Errorf("OnReleased reported %s, want the truncated result", describeResult(rs[0]))
	}
	if _, err := c.merged(m); !errors.Is(err, txn.ErrTruncated) {
		t.Errorf("merged: %v, want ErrTruncated", err)
	}
	if v, ok, err := c.reps[0].store.Get([]byte("w/0001/after")); err != nil || !ok || string(v) != "1" {
		t.Errorf("the write of a truncated piece: %q, %v, %v", v, ok, err)
	}
}

func TestNewExecutorRejects(t *testing.T) {
	c := newCluster(t, nil)
	s := c.reps[0].store
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"no store", Config{Partitions: c.pm, Topology: c.top}},
		{"no partition map", Config{Store: s, Topology: c.top}},
		{"no topology", Config{Store: s, Partitions: c.pm}},
		{"group out of range", Config{Store: s, Partitions: c.pm, Topology: c.top, Self: 3}},
		{"stored vote bound too small", Config{Store: s, Partitions: c.pm, Topology: c.top, StoredVoteBytesMax: StoredVoteBytesMin - 1}},
		{"negative stored vote bound", Config{Store: s, Partitions: c.pm, Topology: c.top, StoredVoteBytesMax: -1}},
	} {
		if _, err := NewExecutor(tc.cfg); err == nil {
			t.Errorf("%s: no error", tc.name)
		}
	}
}

// TestExecutorBoundsStoredVotes: votes on transactions never delivered
// here take at most Config.StoredVoteBytesMax: the oldest go first, alike
// on every replica, also one restarted in between (arrival order, not key
// order), and a vote of a queued transaction stays.
func TestExecutorBoundsStoredVotes(t *testing.T) {
	c := newCluster(t, nil)
	c.storedVoteBytesMax = StoredVoteBytesMin
	for _, r := range c.reps {
		c.restart(r.g)
	}
	c.addTwins()
	// Group 1 writes mixedTxn's w/0003/a and waits for the votes of
	// groups 0 and 2; it gets group 0's only.
	c.seed(0, map[string]string{"w/0001/a": "10"})
	c.seed(2, map[string]string{"w/0004/b": "1"})
	for _, g := range []partition.GroupID{0, 1, 2} {
		c.seed(g, map[string]string{"item/1": "x"})
	}
	m := c.msg(1, mixedTxn)
	c.deliver(0, m)
	c.deliver(2, m)
	c.execute(1, []multicast.Message{m}, c.take(1, []int{1, 0, 0}))
	if c.hasResult(1, m) {
		t.Fatal("group 1 ran without group 2's vote")
	}
	// Votes of group 2 on transactions never delivered, newest on the
	// lowest id: far more than the bound holds.
	junk := func(i int) []byte {
		return txn.AppendVote(nil, multicast.MsgID{Client: 9, Seq: uint64(100000 - i)}, txn.Vote{Group: 2, Holds: true})
	}
	size := voteRecordSize(len(junk(0)))
	per := int(StoredVoteBytesMin / size)
	const entries = 8
	for e := range entries {
		var in []rawnode.AppInbound
		for i := range per / 2 {
			in = append(in, rawnode.AppInbound{From: 2, Payload: junk(e*per/2 + i)})
		}
		c.execute(1, nil, in)
		if e == entries/2 {
			c.restart(1)
		}
		st, tw := c.reps[1].ex.Stats(), c.twins[1].ex.Stats()
		if st != tw {
			t.Fatalf("entry %d: stats %+v, the twin's %+v", e, st, tw)
		}
		if bytes := int64(st.VotesStored) * size; bytes > StoredVoteBytesMin+size {
			t.Fatalf("entry %d: %d votes stored, %d bytes, more than the bound %d", e, st.VotesStored, bytes, StoredVoteBytesMin)
		}
	}
	st := c.reps[1].ex.Stats()
	if st.VotesEvicted == 0 || st.VotesStored+st.VotesEvicted != uint64(entries*(per/2)+1) {
		t.Errorf("stats %+v: want %d votes stored or evicted", st, entries*(per/2)+1)
	}
	// The stored ones are the newest.
	for _, r := range []*replica{c.reps[1], c.twins[1]} {
		kept := 0
		for i := range entries * (per / 2) {
			about, _, _ := txn.DecodeVote(junk(i))
			if _, ok, err := r.store.GetAux(voteKey(about, 2)); err != nil {
				t.Fatal(err)
			} else if ok {
				kept++
			} else if kept > 0 {
				t.Fatalf("vote %d evicted after a newer one was kept", i)
			}
		}
		if kept != int(st.VotesStored)-1 {
			t.Errorf("%d junk votes kept, want %d", kept, st.VotesStored-1)
		}
	}
	// Group 0's vote on the queued transaction stayed: with group 2's,
	// it runs.
	c.settle()
	if r := c.result(1, m); !r.Succeeded {
		t.Errorf("group 1: %s, want succeeded", describeResult(r))
	}
}

// TestExecutorEpochAborted: a delivery the stop-sign aborted (DESIGN 14)
// runs nowhere: every destination reports the same abort, "epoch changed"
// naming the epoch, at once, without votes, and writes nothing; the merged
// result matches txn.ErrEpochChanged.
func TestExecutorEpochAborted(t *testing.T) {
	c := newCluster(t, nil)
	c.seed(0, map[string]string{"w/0001/acct": "10"})
	m := multicast.Message{ID: multicast.MsgID{Client: 7, Seq: 1}, Dst: partition.SetOf(0, 2), Payload: group.AbortedPayload(3)}
	if sends := c.deliver(0, m); len(sends) != 0 {
		t.Errorf("an aborted delivery sent %d votes", len(sends))
	}
	c.deliver(2, m)
	var pieces []txn.PieceResult
	for _, g := range []partition.GroupID{0, 2} {
		r := c.result(g, m)
		if !r.Aborted || r.Reason != txn.EpochChangedResult(3).Reason {
			t.Errorf("group %d: %s, want aborted: %s", g, describeResult(r), txn.EpochChangedResult(3).Reason)
		}
		pieces = append(pieces, r)
	}
	if _, err := txn.MergeResults(m.ID.String(), pieces); !errors.Is(err, txn.ErrEpochChanged) || !errors.Is(err, txn.ErrAborted) {
		t.Errorf("merged: %v, want ErrEpochChanged and ErrAborted", err)
	}
	if got := c.data(0); got != "w/0001/acct=10" {
		t.Errorf("data %s after an aborted delivery", got)
	}
}
