package server

import (
	"math/rand/v2"
	"sync"

	"github.com/flexkv/flexkv/group"
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
