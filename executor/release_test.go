package executor

import (
	"errors"
	"slices"
	"testing"

	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/partition"
	"github.com/flexkv/flexkv/txn"
)

// newStrictCluster is newCluster with Config.Strict on every executor.
func newStrictCluster(t *testing.T) *cluster { return newStrictClusterWith(t, nil) }

func newStrictClusterWith(t *testing.T, procs *txn.Registry) *cluster {
	t.Helper()
	c := newCluster(t, procs)
	c.strict = true
	for g := range c.reps {
		c.restart(partition.GroupID(g))
	}
	return c
}

// released reports whether group g released m: Result answers it and
// OnReleased reported it.
func (c *cluster) released(g partition.GroupID, m multicast.Message) bool {
	c.t.Helper()
	found := c.hasResult(g, m)
	if reported := slices.Contains(c.reps[g].executed, m.ID); reported != found {
		c.t.Fatalf("group %d: %s: Result found %v, OnReleased reported %v", g, m.ID, found, reported)
	}
	return found
}

// TestReleaseRealTime is the anomaly of release.go: T writes at groups a
// and b and runs at a first; U, of a alone, reads T's write there. U's
// answer waits until T is released at b (b's note), else a transaction V of
// b sent after U's answer could be ordered before T at b. A transaction of
// a that touches none of T's keys is answered at once; a restart keeps U
// waiting.
func TestReleaseRealTime(t *testing.T) {
	c := newStrictCluster(t)
	T := c.msg(1, `{"then":[{"op":"put","key":"w/0001/x","value":"t"},{"op":"put","key":"w/0003/y","value":"t"}]}`)
	U := c.msg(2, `{"then":[{"op":"get","key":"w/0001/x"}]}`)
	W := c.msg(3, `{"then":[{"op":"put","key":"w/0002/z","value":"w"}]}`)
	if T.Dst != partition.SetOf(0, 1) || U.Dst != partition.SetOf(0) {
		t.Fatalf("destinations %s and %s", T.Dst, U.Dst)
	}
	sends := c.deliver(0, T, U, W)
	if !c.released(0, T) {
		t.Fatal("T's piece at a, which waits for nothing, is not released")
	}
	if c.released(0, U) {
		t.Fatal("U, which read T's write, was answered before T was released at b")
	}
	if !c.released(0, W) {
		t.Fatal("W, which touches none of T's keys, waits")
	}
	if len(sends) != 1 || sends[0].To != 1 || !txn.IsRelease(sends[0].Payload) {
		t.Fatalf("a sent %+v; want one release note of T to b", sends)
	}
	c.restart(0)
	if c.released(0, U) {
		t.Fatal("after a restart, U is answered before T was released at b")
	}
	c.deliver(1, T) // b runs T and sends a its note
	if !c.released(1, T) {
		t.Fatal("T's piece at b is not released")
	}
	c.deliver(0) // the note arrives
	if !c.released(0, U) {
		t.Fatal("U is not released once T is complete")
	}
	if got := c.result(0, U); len(got.Results) != 1 || string(got.Results[0].Value) != "t" {
		t.Fatalf("U read %+v, want T's write", got)
	}
	if n := len(c.reps[0].ex.rel.open) + len(c.reps[1].ex.rel.open); n != 0 {
		t.Fatalf("%d jobs still open after every note arrived", n)
	}
	// T delivered again at b (its id used again): b skips it and notes it
	// again, for a destination that would run it again; a, which has T's
	// result, takes the note for junk.
	sends = c.deliver(1, T)
	if len(sends) != 1 || sends[0].To != 0 || !txn.IsRelease(sends[0].Payload) {
		t.Fatalf("b sent %+v on a skipped delivery of T; want its release note to a", sends)
	}
	junk := c.reps[0].ex.Stats().VotesJunk
	c.deliver(0)
	if got := c.reps[0].ex.Stats().VotesJunk; got != junk+1 || len(c.reps[0].ex.rel.early) != 0 {
		t.Fatalf("a: junk %d -> %d, %d early notes; want the note counted as junk, none kept", junk, got, len(c.reps[0].ex.rel.early))
	}
}

// TestReleaseChain: a job that waits holds up the jobs that conflict with
// it, even when they do not conflict with what it waits for; and a note
// that arrives before its job ran here is kept for it.
func TestReleaseChain(t *testing.T) {
	c := newStrictCluster(t)
	T := c.msg(1, `{"then":[{"op":"put","key":"w/0001/x","value":"t"},{"op":"put","key":"w/0003/y","value":"t"}]}`)
	U := c.msg(2, `{"then":[{"op":"get","key":"w/0001/x"},{"op":"put","key":"w/0001/u","value":"u"}]}`)
	V := c.msg(3, `{"then":[{"op":"get","key":"w/0001/u"}]}`)
	c.deliver(1, T) // b first: its note reaches a before a runs T
	c.deliver(0, U) // with b's note on T; U runs before T at a: nothing to wait for
	if !c.released(0, U) {
		t.Fatal("U, ahead of T, waits")
	}
	U2 := c.msg(4, `{"then":[{"op":"get","key":"w/0001/x"},{"op":"put","key":"w/0001/u","value":"u2"}]}`)
	c.reps[0].ex.mu.Lock()
	early := len(c.reps[0].ex.rel.early)
	c.reps[0].ex.mu.Unlock()
	if early != 1 {
		t.Fatalf("%d early notes kept, want b's note on T", early)
	}
	c.restart(0)
	// T runs with b's note kept: it is complete at once.
	c.deliver(0, T, U2, V)
	if !c.released(0, T) || !c.released(0, U2) || !c.released(0, V) {
		t.Fatal("with T's note from b, nothing should wait")
	}

	// Now without the note: T2 at a, then U3 reads T2's write and writes
	// u, V2 reads u only.
	T2 := c.msg(5, `{"then":[{"op":"put","key":"w/0001/x","value":"t2"},{"op":"put","key":"w/0003/y","value":"t2"}]}`)
	U3 := c.msg(6, `{"then":[{"op":"get","key":"w/0001/x"},{"op":"put","key":"w/0001/u","value":"u3"}]}`)
	V2 := c.msg(7, `{"then":[{"op":"get","key":"w/0001/u"}]}`)
	c.deliver(0, T2, U3, V2)
	if c.released(0, U3) || c.released(0, V2) {
		t.Fatal("U3 (reads T2's write) or V2 (reads U3's) answered before T2 is complete")
	}
	c.deliver(1, T2)
	c.deliver(0)
	if !c.released(0, U3) || !c.released(0, V2) {
		t.Fatal("U3 and V2 not released once T2 is complete")
	}
}

// TestReadCallWaitsForOpenWrites: a read-only call at the leader is checked
// against the open jobs for what it read: a job open that wrote elsewhere
// lets it through, one that wrote what it read holds it until complete.
func TestReadCallWaitsForOpenWrites(t *testing.T) {
	c := newStrictClusterWith(t, readRegistry(t))
	c.seed(0, map[string]string{"w/0001/y": "y0"})
	ex := c.reps[0].ex
	look := func(seq uint64) (string, error) {
		res, err := ex.ReadCall(multicast.MsgID{Client: 3, Seq: seq}, txn.Call{Name: "look"})
		return describeResult(res), err
	}
	other := c.msg(1, `{"then":[{"op":"put","key":"w/0001/q","value":"q"},{"op":"put","key":"w/0003/q","value":"q"}]}`)
	c.deliver(0, other)
	if got, err := look(1); err != nil || got != "succeeded true: 0:get w/0001/y=y0" {
		t.Fatalf("call beside an open job that wrote elsewhere: %s, %v", got, err)
	}
	T := c.msg(2, `{"then":[{"op":"put","key":"w/0001/y","value":"t"},{"op":"put","key":"w/0003/y","value":"t"}]}`)
	c.deliver(0, T)
	got, waitErr := look(2)
	if !errors.Is(waitErr, ErrReadWaits) {
		t.Fatalf("call that reads the write of an open job: %s, %v; want ErrReadWaits", got, waitErr)
	}
	// The refusal keeps what the call read: held up while T is open, also
	// after an entry that completes another job only.
	if !ex.HeldUp(waitErr) {
		t.Fatal("HeldUp: false while T, which wrote what the call read, is open")
	}
	c.deliver(1, other)
	c.deliver(0)
	if !ex.HeldUp(waitErr) {
		t.Fatal("HeldUp: false once another job completed, with T still open")
	}
	if ex.HeldUp(ErrReadWaits) || ex.HeldUp(nil) {
		t.Fatal("HeldUp: true for an error that carries no reads")
	}
	c.deliver(1, T)
	c.deliver(0)
	if ex.HeldUp(waitErr) {
		t.Fatal("HeldUp: true once T is complete")
	}
	if got, err := look(3); err != nil || got != "succeeded true: 0:get w/0001/y=t" {
		t.Fatalf("call once the job is complete: %s, %v", got, err)
	}
}
