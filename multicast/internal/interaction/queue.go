package interaction

import (
	"container/heap"
	"slices"
)

// Queue is a min-heap of events by (time, scheduling order): events at the
// same time come out in the order they were pushed, so that a run depends on
// nothing but its script or its seed. The simulator and the interaction
// environment both schedule on it.
type Queue[E any] struct {
	h   queueHeap[E]
	seq uint64
}

type queued[E any] struct {
	at  int64
	seq uint64
	ev  E
}

type queueHeap[E any] []queued[E]

func (q queueHeap[E]) Len() int { return len(q) }
func (q queueHeap[E]) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].seq < q[j].seq
}
func (q queueHeap[E]) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *queueHeap[E]) Push(x any)   { *q = append(*q, x.(queued[E])) }
func (q *queueHeap[E]) Pop() any {
	old := *q
	e := old[len(old)-1]
	old[len(old)-1] = queued[E]{}
	*q = old[:len(old)-1]
	return e
}

// Len returns the number of events queued.
func (q *Queue[E]) Len() int { return len(q.h) }

// Push schedules ev at time at.
func (q *Queue[E]) Push(at int64, ev E) {
	q.seq++
	heap.Push(&q.h, queued[E]{at: at, seq: q.seq, ev: ev})
}

// Pop removes and returns the first event and its time. It panics on an
// empty queue.
func (q *Queue[E]) Pop() (int64, E) {
	e := heap.Pop(&q.h).(queued[E])
	return e.at, e.ev
}

// Peek returns the first event and its time without removing it. It panics
// on an empty queue.
func (q *Queue[E]) Peek() (int64, E) { return q.h[0].at, q.h[0].ev }

// Remove removes and returns the event that comes n-th (from 0), in (time,
// scheduling order), among those that match reports true for. It reports
// false if fewer match.
func (q *Queue[E]) Remove(match func(E) bool, n int) (int64, E, bool) {
	var idx []int
	for i := range q.h {
		if match(q.h[i].ev) {
			idx = append(idx, i)
		}
	}
	if n < 0 || n >= len(idx) {
		var zero E
		return 0, zero, false
	}
	slices.SortFunc(idx, func(i, j int) int {
		if q.h.Less(i, j) {
			return -1
		}
		return 1
	})
	e := heap.Remove(&q.h, idx[n]).(queued[E])
	return e.at, e.ev, true
}

// Each calls f on every queued event, in (time, scheduling order).
func (q *Queue[E]) Each(f func(at int64, ev E)) {
	sorted := make(queueHeap[E], len(q.h))
	copy(sorted, q.h)
	for len(sorted) > 0 {
		e := heap.Pop(&sorted).(queued[E])
		f(e.at, e.ev)
	}
}
