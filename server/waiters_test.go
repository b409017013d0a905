package server

import (
	"fmt"
	"testing"

	"github.com/flexkv/flexkv/executor"
	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/txn"
)

// received returns what wt was handed, if anything.
func received(wt waiter) (txn.PieceResult, bool) {
	select {
	case res := <-wt:
		return res, true
	default:
		return txn.PieceResult{}, false
	}
}

// Every call waiting for a transaction gets its result when it is executed;
// a call that stopped waiting, or waits for another, gets nothing.
func TestWaitersHandOverResults(t *testing.T) {
	w := newWaiters()
	a, b := multicast.MsgID{Client: 1, Seq: 1}, multicast.MsgID{Client: 2, Seq: 1}
	a1, forgetA1 := w.add(a)
	defer forgetA1()
	a2, forgetA2 := w.add(a)
	gone, forgetGone := w.add(a)
	forgetGone()
	other, forgetOther := w.add(b)
	defer forgetOther()
	if _, ok := received(a1); ok {
		t.Fatal("a result before the execution")
	}
	res := txn.PieceResult{Succeeded: true, Results: []txn.OpResult{{Value: []byte("v"), Found: true}}}
	w.done([]executor.Executed{{ID: a, Result: res}})
	for i, wt := range []waiter{a1, a2} {
		got, ok := received(wt)
		if !ok || !got.Succeeded || len(got.Results) != 1 || string(got.Results[0].Value) != "v" {
			t.Errorf("waiter %d of %s: %+v, %v; want the executed result", i, a, got, ok)
		}
	}
	forgetA2()
	if _, ok := received(gone); ok {
		t.Error("a forgotten wait got a result")
	}
	if _, ok := received(other); ok {
		t.Errorf("the wait for %s got %s's result", b, a)
	}
	if len(w.m) != 1 {
		t.Errorf("%d ids still waited for, want 1 (%s)", len(w.m), b)
	}
	// An execution before the wait is not handed over: the call reads
	// the store.
	late, forgetLate := w.add(a)
	defer forgetLate()
	if _, ok := received(late); ok {
		t.Error("a wait registered after the execution got a result")
	}
}

// Executions handed over while calls wait on other goroutines: each call
// sees its own result (run with -race: done's write of a result happens
// before the call's read).
func TestWaitersConcurrent(t *testing.T) {
	w := newWaiters()
	const n = 64
	errs := make(chan error, n)
	ready := make(chan struct{}, n)
	for i := range n {
		go func() {
			id := multicast.MsgID{Client: uint64(i + 1), Seq: 1}
			wt, forget := w.add(id)
			defer forget()
			ready <- struct{}{}
			res := <-wt
			if len(res.Results) != 1 || res.Results[0].Int != int64(i) {
				errs <- fmt.Errorf("waiter of %s: %+v", id, res)
				return
			}
			errs <- nil
		}()
	}
	for range n {
		<-ready
	}
	for i := range n {
		w.done([]executor.Executed{{ID: multicast.MsgID{Client: uint64(i + 1), Seq: 1}, Result: txn.PieceResult{Succeeded: true, Results: []txn.OpResult{{Int: int64(i)}}}}})
	}
	for range n {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}
