package sim

import (
	"container/heap"

	"github.com/flexkv/flexkv/partition"
)

type eventKind uint8

const (
	evSubmit    eventKind = iota + 1 // a client's request reaches its entry group
	evFrame                          // a frame reaches its receiver
	evTick                           // every node ticks
	evPartition                      // a partition epoch starts
	evHeal                           // one cut heals
	evHealAll                        // the faults end
)

// event is something that happens at a simulated time. Events at the same
// time happen in the order they were scheduled (seq), so that a run depends
// on nothing but its seed.
type event struct {
	atUs int64
	seq  uint64
	kind eventKind
	// evSubmit: the job; evFrame: the receiver and the encoded frame;
	// evHeal: the cut, b == NoGroup to isolate a.
	job  int
	to   partition.GroupID
	data []byte
	a, b partition.GroupID
}

// eventQueue is a min-heap of events by (atUs, seq).
type eventQueue []event

func (q eventQueue) Len() int { return len(q) }
func (q eventQueue) Less(i, j int) bool {
	if q[i].atUs != q[j].atUs {
		return q[i].atUs < q[j].atUs
	}
	return q[i].seq < q[j].seq
}
func (q eventQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *eventQueue) Push(x any)   { *q = append(*q, x.(event)) }
func (q *eventQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	old[len(old)-1] = event{}
	*q = old[:len(old)-1]
	return e
}

var _ heap.Interface = (*eventQueue)(nil)
