package server

import (
	"math/rand/v2"
	"sync"

	"github.com/flexkv/flexkv/executor"
	"github.com/flexkv/flexkv/group"
	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/txn"
)

// waiters hands the calls waiting for transactions to be executed at this
// replica (Txn at the entry group, Await at the others) their results: a
// call whose piece is executed while it waits reads no store after the
// execution. The executor calls done after each commit, from the raft FSM:
// done must not block.
type waiters struct {
	mu sync.Mutex
	m  map[multicast.MsgID][]waiter
}

// waiter is one call's wait: it receives the result of its transaction
// once it is executed here. done sends on it once (its room of one never
// makes done wait) and forgets it.
type waiter chan txn.PieceResult

func newWaiters() *waiters { return &waiters{m: make(map[multicast.MsgID][]waiter)} }

// add returns a wait for id's execution here, and a function that forgets
// it. Register before checking the store, so that an execution between the
// check and the wait is not missed.
func (w *waiters) add(id multicast.MsgID) (waiter, func()) {
	wt := make(waiter, 1)
	w.mu.Lock()
	w.m[id] = append(w.m[id], wt)
	w.mu.Unlock()
	return wt, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		list := w.m[id]
		for i, x := range list {
			if x == wt {
				list = append(list[:i], list[i+1:]...)
				break
			}
		}
		if len(list) == 0 {
			delete(w.m, id)
		} else {
			w.m[id] = list
		}
	}
}

func (w *waiters) done(done []executor.Executed) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.m) == 0 {
		return
	}
	for i := range done {
		d := &done[i]
		for _, wt := range w.m[d.ID] {
			wt <- d.Result
		}
		delete(w.m, d.ID)
	}
}

// freshID gives an anonymous request (one that names no client id) an id
// of its own: group.AnonymousBit and 63 random bits, with sequence number 1.
// It belongs to no session, so the group admits it without deduplication:
// sent again, it runs again. A client that retries must open a session.
func freshID() multicast.MsgID {
	for {
		if c := group.AnonymousBit | rand.Uint64(); c != multicast.FlushClient {
			return multicast.MsgID{Client: c, Seq: 1}
		}
	}
}
