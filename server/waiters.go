package server

import (
	"math/rand/v2"
	"sync"

	"github.com/flexkv/flexkv/multicast"
)

// waiters wakes the calls waiting for transactions to be executed at this
// replica (Txn at the entry group, Await at the others). The executor calls
// done after each commit, from the raft FSM: done must not block.
type waiters struct {
	mu sync.Mutex
	m  map[multicast.MsgID][]chan struct{}
}

func newWaiters() *waiters { return &waiters{m: make(map[multicast.MsgID][]chan struct{})} }

// add returns a channel closed once id is executed here, and a function
// that forgets it. Register before checking the store, so that an execution
// between the check and the wait is not missed.
func (w *waiters) add(id multicast.MsgID) (<-chan struct{}, func()) {
	c := make(chan struct{})
	w.mu.Lock()
	w.m[id] = append(w.m[id], c)
	w.mu.Unlock()
	return c, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		list := w.m[id]
		for i, x := range list {
			if x == c {
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

func (w *waiters) done(ids []multicast.MsgID) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, id := range ids {
		for _, c := range w.m[id] {
			close(c)
		}
		delete(w.m, id)
	}
}

// freshID gives a request that names no client id one of its own: a
// random 63-bit client id with sequence number 1. Such a request is not
// deduplicated across retries: a client that retries must name its id.
func freshID() multicast.MsgID {
	for {
		if c := rand.Uint64() >> 1; c != 0 {
			return multicast.MsgID{Client: c, Seq: 1}
		}
	}
}
