package executor

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/partition"
	"github.com/flexkv/flexkv/txn"
)

// moveProc moves an amount between two keys, which may belong to different
// groups, if a replicated item key exists: args "from to amount item". The
// decision to abort depends only on the args and the replicated item, so
// every destination takes it alike; each group writes the keys it owns.
type moveProc struct{}

func parseMove(args []byte) (from, to string, amt int64, item string, err error) {
	f := strings.Fields(string(args))
	if len(f) != 4 {
		return "", "", 0, "", fmt.Errorf("want 4 args, got %d", len(f))
	}
	amt, err = strconv.ParseInt(f[2], 10, 64)
	return f[0], f[1], amt, f[3], err
}

func (moveProc) Keys(args []byte) ([][]byte, error) {
	from, to, _, item, err := parseMove(args)
	if err != nil {
		return nil, err
	}
	return [][]byte{[]byte(from), []byte(to), []byte(item)}, nil
}

func (moveProc) Run(p *txn.ProcPiece) (txn.PieceResult, error) {
	from, to, amt, item, err := parseMove(p.Args)
	if err != nil {
		return txn.PieceResult{}, err
	}
	_, ok, err := p.Reader.Get([]byte(item))
	switch {
	case err != nil:
		return txn.PieceResult{}, fmt.Errorf("item %s: %w", item, err)
	case !ok:
		return txn.PieceResult{}, fmt.Errorf("unknown item %s", item)
	}
	res := txn.PieceResult{Succeeded: true}
	for i, step := range []struct {
		key   string
		delta int64
	}{{from, -amt}, {to, amt}} {
		if !p.Owns([]byte(step.key)) {
			continue
		}
		v, _, err := p.Reader.Get([]byte(step.key))
		if err != nil {
			return txn.PieceResult{}, err
		}
		n, _ := strconv.ParseInt(string(v), 10, 64)
		n += step.delta
		if err := p.Writer.Put([]byte(step.key), []byte(strconv.FormatInt(n, 10))); err != nil {
			return txn.PieceResult{}, err
		}
		res.Results = append(res.Results, txn.OpResult{Index: i, Kind: txn.OpAdd, Key: []byte(step.key), Int: n})
	}
	return res, nil
}

// funcProc adapts functions to a Procedure.
type funcProc struct {
	keys func(args []byte) ([][]byte, error)
	run  func(p *txn.ProcPiece) (txn.PieceResult, error)
}

func (f funcProc) Keys(args []byte) ([][]byte, error)            { return f.keys(args) }
func (f funcProc) Run(p *txn.ProcPiece) (txn.PieceResult, error) { return f.run(p) }

// atomicProc is a funcProc whose calls are all or nothing.
type atomicProc struct{ funcProc }

func (atomicProc) AllOrNothing() bool { return true }

// pickyProc is an atomicProc that says which pieces can abort.
type pickyProc struct {
	atomicProc
	canAbort func(c *txn.CallPiece) bool
}

func (p pickyProc) CanAbort(c *txn.CallPiece) bool { return p.canAbort(c) }

// stampRun is stamp's Run: it writes a stamp into each of w/0001/s and
// w/0004/s the group owns, and aborts if the group lacks its row
// "w/000N/row".
func stampRun(p *txn.ProcPiece) (txn.PieceResult, error) {
	for _, row := range []string{"w/0001/row", "w/0004/row"} {
		if !p.Owns([]byte(row)) {
			continue
		}
		if _, found, err := p.Reader.Get([]byte(row)); err != nil || !found {
			return txn.PieceResult{Aborted: true, Reason: "missing row " + row}, err
		}
		if err := p.Writer.Put([]byte(row[:7]+"s"), []byte("stamped")); err != nil {
			return txn.PieceResult{}, err
		}
	}
	return txn.PieceResult{Succeeded: true}, nil
}

func fixedKeys(keys ...string) func([]byte) ([][]byte, error) {
	return func([]byte) ([][]byte, error) {
		out := make([][]byte, len(keys))
		for i, k := range keys {
			out[i] = []byte(k)
		}
		return out, nil
	}
}

func testRegistry(t *testing.T) *txn.Registry {
	t.Helper()
	r := txn.NewRegistry()
	for name, p := range map[string]txn.Procedure{
		"move": moveProc{},
		// peek reads a key of group 1 from every destination.
		"peek": funcProc{fixedKeys("w/0001/a", "w/0003/a"), func(p *txn.ProcPiece) (txn.PieceResult, error) {
			_, _, err := p.Reader.Get([]byte("w/0003/a"))
			return txn.PieceResult{Succeeded: true}, err
		}},
		// sneak writes a key of group 1, swallowing the error.
		"sneak": funcProc{fixedKeys("w/0001/a"), func(p *txn.ProcPiece) (txn.PieceResult, error) {
			_ = p.Writer.Put([]byte("w/0001/a"), []byte("mine"))
			_ = p.Writer.Put([]byte("w/0003/a"), []byte("theirs"))
			return txn.PieceResult{Succeeded: true}, nil
		}},
		// garbled reports results out of order.
		"garbled": funcProc{fixedKeys("w/0001/a"), func(p *txn.ProcPiece) (txn.PieceResult, error) {
			if err := p.Writer.Put([]byte("w/0001/a"), []byte("x")); err != nil {
				return txn.PieceResult{}, err
			}
			return txn.PieceResult{Succeeded: true, Results: []txn.OpResult{{Index: 1, Kind: txn.OpPut}, {Index: 0, Kind: txn.OpPut}}}, nil
		}},
		// stamp writes a stamp into each of its keys the group owns, and
		// aborts if the group lacks its row "w/000N/row" (stampRun).
		"stamp": atomicProc{funcProc{fixedKeys("w/0001/s", "w/0004/s"), stampRun}},
		// stamp.remote is stamp whose piece can abort at the owner of
		// w/0004 (group 2) only.
		"stamp.remote": pickyProc{atomicProc{funcProc{fixedKeys("w/0001/s", "w/0004/s"), stampRun}},
			func(c *txn.CallPiece) bool { return c.Owns([]byte("w/0004/row")) }},
		// stamp.sure is stamp whose pieces cannot abort (it is wrong of a
		// group that lacks its row).
		"stamp.sure": pickyProc{atomicProc{funcProc{fixedKeys("w/0001/s", "w/0004/s"), stampRun}},
			func(*txn.CallPiece) bool { return false }},
		// crash writes, then panics.
		"crash": funcProc{fixedKeys("w/0001/a"), func(p *txn.ProcPiece) (txn.PieceResult, error) {
			if err := p.Writer.Put([]byte("w/0001/a"), []byte("half")); err != nil {
				return txn.PieceResult{}, err
			}
			var rows []string
			_ = rows[len(p.Args)]
			return txn.PieceResult{Succeeded: true}, nil
		}},
		// reuser writes through Put from buffers it then overwrites, and
		// through PutOwned (txn.OwnedWriter) values it leaves alone; with
		// args, also a key of another group through PutOwned.
		"reuser": funcProc{fixedKeys("w/0001/a"), func(p *txn.ProcPiece) (txn.PieceResult, error) {
			key, val := []byte("w/0001/d"), []byte("copied")
			if err := p.Writer.Put(key, val); err != nil {
				return txn.PieceResult{}, err
			}
			copy(key, "w/0001/x")
			copy(val, "CHANGE")
			w, ok := p.Writer.(txn.OwnedWriter)
			if !ok {
				return txn.PieceResult{}, fmt.Errorf("the piece's writer %T is not a txn.OwnedWriter", p.Writer)
			}
			if err := w.PutOwned([]byte("w/0001/e"), []byte("kept")); err != nil {
				return txn.PieceResult{}, err
			}
			if len(p.Args) > 0 {
				if err := w.PutOwned([]byte("w/0003/a"), []byte("theirs")); err != nil {
					return txn.PieceResult{}, err
				}
			}
			return txn.PieceResult{Succeeded: true}, nil
		}},
		// scanner scans its partition and a replicated one.
		"scanner": funcProc{fixedKeys("w/0001/a"), func(p *txn.ProcPiece) (txn.PieceResult, error) {
			if err := p.Writer.Put([]byte("w/0001/c"), []byte("new")); err != nil {
				return txn.PieceResult{}, err
			}
			own, err := p.Reader.Scan([]byte("w/0001/"), []byte("w/0002/"), 10)
			if err != nil {
				return txn.PieceResult{}, err
			}
			items, err := p.Reader.Scan([]byte("item/"), []byte("item0"), 10)
			if err != nil {
				return txn.PieceResult{}, err
			}
			return txn.PieceResult{Succeeded: true, Results: []txn.OpResult{
				{Index: 0, Kind: txn.OpScan, Key: []byte("w/0001/"), KVs: own},
				{Index: 1, Kind: txn.OpScan, Key: []byte("item/"), KVs: items},
			}}, nil
		}},
	} { //flexkv:unordered registration order does not matter
		if err := r.Register(name, p); err != nil {
			t.Fatal(err)
		}
	}
	return r
}

func TestRegistry(t *testing.T) {
	r := testRegistry(t)
	if err := r.Register("move", moveProc{}); err == nil {
		t.Error("a name registered twice")
	}
	for _, name := range []string{"", "Move", "a b", strings.Repeat("x", txn.ProcNameMax+1)} {
		if err := r.Register(name, moveProc{}); !errors.Is(err, txn.ErrInvalid) {
			t.Errorf("Register(%q): %v, want ErrInvalid", name, err)
		}
	}
	if err := r.Register("nil", nil); err == nil {
		t.Error("a nil procedure registered")
	}
	if _, ok := r.Lookup("move"); !ok {
		t.Error("move not found")
	}
	if _, ok := r.Lookup("absent"); ok {
		t.Error("absent found")
	}
	top := testTopology(t)
	pm := testPartitionMap(t, top)
	for _, tc := range []struct {
		args string
		home partition.GroupID
		want partition.GroupSet
		err  string
	}{
		{"w/0001/a w/0004/a 5 item/1", 1, partition.SetOf(0, 2), ""},
		{"w/0001/a w/0002/a 5 item/1", 1, partition.SetOf(0), ""},
		{"item/1 item/2 5 item/3", 1, partition.SetOf(1), ""},
		{"item/1 item/2 5 item/3", 7, 0, "home group 7"},
		{"w/0001/a x/1 5 item/1", 1, 0, `key "x/1"`},
		{"too few", 1, 0, "want 4 args"},
	} {
		got, err := r.Destinations(txn.Call{Name: "move", Args: []byte(tc.args)}, pm, top, tc.home)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err) || !errors.Is(err, txn.ErrInvalid)):
			t.Errorf("%s: %v, want ErrInvalid with %q", tc.args, err, tc.err)
		case tc.err == "" && (err != nil || got != tc.want):
			t.Errorf("%s: %s, %v; want %s", tc.args, got, err, tc.want)
		}
	}
	if _, err := r.Destinations(txn.Call{Name: "absent"}, pm, top, 0); !errors.Is(err, txn.ErrInvalid) {
		t.Errorf("unknown procedure: %v", err)
	}
}

// callMsg is call seq of client 2, addressed as the registry routes it.
func (c *cluster) callMsg(seq uint64, name, args string) multicast.Message {
	c.t.Helper()
	call := txn.Call{Name: name, Args: []byte(args)}
	dst, err := c.procs.Destinations(call, c.pm, c.top, 0)
	if err != nil {
		c.t.Fatal(err)
	}
	return multicast.Message{ID: multicast.MsgID{Client: 2, Seq: seq}, Dst: dst, Payload: txn.AppendCallPayload(nil, call)}
}

func TestExecutorProcedures(t *testing.T) {
	c := newCluster(t, testRegistry(t))
	for g := range c.reps {
		c.seed(partition.GroupID(g), map[string]string{"item/1": "pen"})
	}
	c.seed(0, map[string]string{"w/0001/a": "10", "w/0001/b": "b"})
	c.seed(2, map[string]string{"w/0004/a": "1"})

	// A call that is not all or nothing takes no votes.
	move := c.callMsg(1, "move", "w/0001/a w/0004/a 4 item/1")
	for _, g := range []partition.GroupID{2, 0} {
		if sends := c.deliver(g, move); len(sends) != 0 {
			t.Errorf("group %d voted on a procedure call", g)
		}
	}
	res, err := c.merged(move)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := describeResults(res.Results), "0:add w/0001/a=6; 1:add w/0004/a=5"; got != want || !res.Succeeded {
		t.Errorf("move: %v %s, want %s", res.Succeeded, got, want)
	}

	// Unknown item: every destination aborts alike, nothing written.
	bad := c.callMsg(2, "move", "w/0001/a w/0004/a 4 item/9")
	c.deliver(0, bad)
	c.deliver(2, bad)
	c.settle()
	for _, g := range []partition.GroupID{0, 2} {
		if r := c.result(g, bad); !r.Aborted || r.Reason != `txn: procedure "move": unknown item item/9` {
			t.Errorf("group %d: %s", g, describeResult(r))
		}
	}

	peek := c.callMsg(3, "peek", "")
	c.deliver(0, peek)
	if r := c.result(0, peek); !r.Aborted || !strings.Contains(r.Reason, `get "w/0003/a": a key group 0 does not hold`) {
		t.Errorf("peek at group 0: %s", describeResult(r))
	}
	sneak := c.callMsg(4, "sneak", "")
	c.deliver(0, sneak)
	if r := c.result(0, sneak); !r.Aborted || !strings.Contains(r.Reason, `write "w/0003/a": a key group 0 does not own`) {
		t.Errorf("sneak: %s", describeResult(r))
	}
	garbled := c.callMsg(5, "garbled", "")
	c.deliver(0, garbled)
	if r := c.result(0, garbled); !r.Aborted || !strings.Contains(r.Reason, "bad result") {
		t.Errorf("garbled: %s", describeResult(r))
	}
	wrongDst := c.callMsg(6, "move", "w/0001/a w/0001/b 1 item/1")
	wrongDst.Dst = partition.SetOf(0, 1)
	c.deliver(0, wrongDst)
	if r := c.result(0, wrongDst); !r.Aborted || r.Reason != "txn: destination set {0,1}, want {0}" {
		t.Errorf("wrong destinations: %s", describeResult(r))
	}
	// A panic aborts the piece with the panic's text; its writes are
	// dropped and the executor goes on.
	crash := c.callMsg(8, "crash", "xyz")
	c.deliver(0, crash)
	if r := c.result(0, crash); !r.Aborted || r.Reason != `txn: procedure "crash": panicked: runtime error: index out of range [3] with length 0` {
		t.Errorf("crash: %s", describeResult(r))
	}
	if got, want := c.data(0), "item/1=pen w/0001/a=6 w/0001/b=b"; got != want {
		t.Errorf("group 0 after the aborted calls: %s, want %s", got, want)
	}

	scan := c.callMsg(7, "scanner", "")
	c.deliver(0, scan)
	if got, want := describeResult(c.result(0, scan)), "succeeded true: 0:scan [w/0001/a=6 w/0001/b=b w/0001/c=new]; 1:scan [item/1=pen]"; got != want {
		t.Errorf("scanner: %s, want %s", got, want)
	}
}

// TestExecutorProceduresInOneEntry: calls delivered together, in one
// Execute, run one after the other, each reading what the one before it
// wrote.
func TestExecutorProceduresInOneEntry(t *testing.T) {
	c := newCluster(t, testRegistry(t))
	for g := range c.reps {
		c.seed(partition.GroupID(g), map[string]string{"item/1": "pen"})
	}
	c.seed(0, map[string]string{"w/0001/a": "10"})
	c.seed(2, map[string]string{"w/0004/a": "1"})
	m1 := c.callMsg(1, "move", "w/0001/a w/0004/a 4 item/1")
	m2 := c.callMsg(2, "move", "w/0001/a w/0004/a 3 item/1")
	m3 := c.callMsg(3, "move", "w/0001/a w/0004/a 2 item/1")
	c.deliver(0, m1, m2, m3)
	c.deliver(2, m1, m2)
	c.deliver(2, m3)
	c.settle()
	if got, want := c.data(0), "item/1=pen w/0001/a=1"; got != want {
		t.Errorf("group 0: %s, want %s", got, want)
	}
	if got, want := c.data(2), "item/1=pen w/0004/a=10"; got != want {
		t.Errorf("group 2: %s, want %s", got, want)
	}
}

// TestExecutorProcedureAllOrNothing: a call whose piece at one destination
// misses a row aborts at every destination, with that destination's
// reason, and the piece that could have run writes nothing; with the row
// there, every destination commits. Restarts between the vote and the run
// change neither.
func TestExecutorProcedureAllOrNothing(t *testing.T) {
	c := newCluster(t, testRegistry(t))
	c.seed(0, map[string]string{"w/0001/row": "r"})
	m := c.callMsg(1, "stamp", "")
	c.deliver(0, m)
	c.restart(0)
	c.deliver(2, m)
	c.settle()
	for _, g := range []partition.GroupID{0, 2} {
		if r := c.result(g, m); !r.Aborted || r.Reason != `txn: procedure "stamp": missing row w/0004/row` {
			t.Errorf("group %d: %s, want the abort of group 2's missing row", g, describeResult(r))
		}
	}
	if got, want := c.data(0), "w/0001/row=r"; got != want {
		t.Errorf("group 0 after the aborted call: %s, want %s", got, want)
	}
	c.seed(2, map[string]string{"w/0004/row": "r"})
	m2 := c.callMsg(2, "stamp", "")
	c.deliver(2, m2)
	c.restart(2)
	c.deliver(0, m2)
	c.settle()
	for _, g := range []partition.GroupID{0, 2} {
		if r := c.result(g, m2); r.Aborted || !r.Succeeded {
			t.Errorf("group %d: %s, want committed", g, describeResult(r))
		}
	}
	if got, want := c.data(0), "w/0001/row=r w/0001/s=stamped"; got != want {
		t.Errorf("group 0: %s, want %s", got, want)
	}
	if got, want := c.data(2), "w/0004/row=r w/0004/s=stamped"; got != want {
		t.Errorf("group 2: %s, want %s", got, want)
	}
}

// TestExecutorProcedureVotesWhereAPieceCanAbort: only the pieces of an
// all-or-nothing call that can abort (txn.PieceVotes) vote. A call whose
// remote piece misses a row aborts at every destination, though the piece
// that cannot abort sends no vote; it waits for the vote of the one that
// can, holding back only what its trial run touched, also across a
// restart. A call no piece of which can abort takes no vote.
func TestExecutorProcedureVotesWhereAPieceCanAbort(t *testing.T) {
	c := newCluster(t, testRegistry(t))
	c.addTwins()
	c.seed(0, map[string]string{"w/0001/row": "r"})
	m := c.callMsg(1, "stamp.remote", "")
	if sends := c.deliver(0, m); len(sends) != 0 {
		t.Errorf("group 0, whose piece cannot abort, sent %+v", sends)
	}
	if c.hasResult(0, m) {
		t.Fatalf("group 0 ran the call before group 2's vote")
	}
	c.restart(0)
	// Behind the waiting call, a transaction that touches none of what
	// the call's trial touched runs; one that does waits.
	other := c.msg(2, `{"then":[{"op":"put","key":"w/0002/z","value":"1"}]}`)
	behind := c.msg(3, `{"then":[{"op":"put","key":"w/0001/row","value":"r2"}]}`)
	c.deliver(0, other, behind)
	if !c.hasResult(0, other) || c.hasResult(0, behind) {
		t.Errorf("behind the waiting call: unrelated ran %v (want true), conflicting ran %v (want false)", c.hasResult(0, other), c.hasResult(0, behind))
	}
	if sends := c.deliver(2, m); len(sends) != 1 || sends[0].To != 0 {
		t.Errorf("group 2, whose piece can abort, sent %+v, want one vote to group 0", sends)
	}
	c.settle()
	for _, g := range []partition.GroupID{0, 2} {
		if r := c.result(g, m); !r.Aborted || r.Reason != `txn: procedure "stamp.remote": missing row w/0004/row` {
			t.Errorf("group %d: %s, want the abort of group 2's missing row", g, describeResult(r))
		}
	}
	if got, want := c.data(0), "w/0001/row=r2 w/0002/z=1"; got != want {
		t.Errorf("group 0 after the aborted call: %s, want %s", got, want)
	}
	if st0, st2 := c.reps[0].ex.Stats(), c.reps[2].ex.Stats(); st0.VotesSent != 0 || st2.VotesSent != 1 || st0.VotesStored != 0 {
		t.Errorf("votes sent: group 0 %d (want 0), group 2 %d (want 1); stored at group 0: %d", st0.VotesSent, st2.VotesSent, st0.VotesStored)
	}

	// With the row there, the call commits everywhere, on one vote.
	c.seed(2, map[string]string{"w/0004/row": "r"})
	m2 := c.callMsg(2, "stamp.remote", "")
	c.deliver(2, m2)
	c.deliver(0, m2)
	c.settle()
	for _, g := range []partition.GroupID{0, 2} {
		if r := c.result(g, m2); r.Aborted || !r.Succeeded {
			t.Errorf("group %d: %s, want committed", g, describeResult(r))
		}
	}
	if st0, st2 := c.reps[0].ex.Stats(), c.reps[2].ex.Stats(); st0.VotesSent != 0 || st2.VotesSent != 2 {
		t.Errorf("votes sent: group 0 %d (want 0), group 2 %d (want 2)", st0.VotesSent, st2.VotesSent)
	}

	// No piece can abort: no vote, and each destination runs its piece
	// as soon as it is delivered.
	m3 := c.callMsg(3, "stamp.sure", "")
	for _, g := range []partition.GroupID{0, 2} {
		if sends := c.deliver(g, m3); len(sends) != 0 {
			t.Errorf("group %d sent %+v for a call no piece of which can abort", g, sends)
		}
		if r := c.result(g, m3); r.Aborted || !r.Succeeded {
			t.Errorf("group %d: %s, want committed", g, describeResult(r))
		}
	}
	if st0, st2 := c.reps[0].ex.Stats(), c.reps[2].ex.Stats(); st0.VotesSent != 0 || st2.VotesSent != 2 {
		t.Errorf("votes sent: group 0 %d (want 0), group 2 %d (want 2)", st0.VotesSent, st2.VotesSent)
	}
}

// TestExecutorProcedureTrialRuns: a piece that votes and waits for no vote
// runs its procedure once, its trial being its run; one that waits for a
// vote runs it twice, trial and run; one of a call that takes no vote,
// once.
func TestExecutorProcedureTrialRuns(t *testing.T) {
	runs := map[partition.GroupID]int{}
	counted := func(p *txn.ProcPiece) (txn.PieceResult, error) {
		runs[p.Group]++
		return stampRun(p)
	}
	r := txn.NewRegistry()
	for name, p := range map[string]txn.Procedure{
		"remote": pickyProc{atomicProc{funcProc{fixedKeys("w/0001/s", "w/0004/s"), counted}},
			func(c *txn.CallPiece) bool { return c.Owns([]byte("w/0004/row")) }},
		"sure": pickyProc{atomicProc{funcProc{fixedKeys("w/0001/s", "w/0004/s"), counted}},
			func(*txn.CallPiece) bool { return false }},
	} { //flexkv:unordered registration order does not matter
		if err := r.Register(name, p); err != nil {
			t.Fatal(err)
		}
	}
	c := newCluster(t, r)
	c.seed(0, map[string]string{"w/0001/row": "r"})
	c.seed(2, map[string]string{"w/0004/row": "r"})
	m := c.callMsg(1, "remote", "")
	c.deliver(0, m)
	c.deliver(2, m)
	c.settle()
	if runs[0] != 2 || runs[2] != 1 {
		t.Errorf("runs of a call whose group 2 alone votes: group 0 %d (want 2), group 2 %d (want 1)", runs[0], runs[2])
	}
	clear(runs)
	m2 := c.callMsg(2, "sure", "")
	c.deliver(0, m2)
	c.deliver(2, m2)
	if runs[0] != 1 || runs[2] != 1 {
		t.Errorf("runs of a call without votes: group 0 %d, group 2 %d, want 1 each", runs[0], runs[2])
	}
	for _, m := range []multicast.Message{m, m2} {
		for _, g := range []partition.GroupID{0, 2} {
			if res := c.result(g, m); !res.Succeeded {
				t.Errorf("group %d: %s: %s, want committed", g, m.ID, describeResult(res))
			}
		}
	}
}

// TestProcedurePutCopiesPutOwnedKeeps: a procedure may reuse its buffers
// after Put; PutOwned writes what it is given, through the same checks.
func TestProcedurePutCopiesPutOwnedKeeps(t *testing.T) {
	c := newCluster(t, testRegistry(t))
	m := c.callMsg(1, "reuser", "")
	c.deliver(0, m)
	if r := c.result(0, m); !r.Succeeded {
		t.Fatalf("reuser: %s", describeResult(r))
	}
	if got, want := c.data(0), "w/0001/d=copied w/0001/e=kept"; got != want {
		t.Errorf("group 0: %s, want %s", got, want)
	}
	foreign := c.callMsg(2, "reuser", "foreign")
	c.deliver(0, foreign)
	if r := c.result(0, foreign); !r.Aborted || !strings.Contains(r.Reason, `write "w/0003/a": a key group 0 does not own`) {
		t.Errorf("reuser writing another group's key through PutOwned: %s", describeResult(r))
	}
	if got, want := c.data(0), "w/0001/d=copied w/0001/e=kept"; got != want {
		t.Errorf("group 0 after the aborted call: %s, want %s", got, want)
	}
}
