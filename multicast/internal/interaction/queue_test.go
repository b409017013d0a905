package interaction

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestQueueOrder: events come out by time, and at one time in the order
// they were pushed, whatever the order of pushes and removals.
func TestQueueOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	type ev struct {
		at int64
		n  int
	}
	var q Queue[ev]
	var want []ev
	for n := range 500 {
		e := ev{at: rng.Int64N(20), n: n}
		q.Push(e.at, e)
		want = append(want, e)
	}
	slices.SortStableFunc(want, func(a, b ev) int { return int(a.at - b.at) })
	// Remove the third event with an odd n, then pop the rest.
	var odd []int
	for i, e := range want {
		if e.n%2 == 1 {
			odd = append(odd, i)
		}
	}
	at, got, ok := q.Remove(func(e ev) bool { return e.n%2 == 1 }, 2)
	if !ok || got != want[odd[2]] || at != got.at {
		t.Fatalf("Remove(odd, 2) = %v at %d, %v; want %v", got, at, ok, want[odd[2]])
	}
	want = slices.Delete(want, odd[2], odd[2]+1)
	var each []ev
	q.Each(func(_ int64, e ev) { each = append(each, e) })
	if !slices.Equal(each, want) {
		t.Fatalf("Each does not list the events in order")
	}
	for i, w := range want {
		if at, e := q.Pop(); e != w || at != w.at {
			t.Fatalf("pop %d: got %v at %d, want %v", i, e, at, w)
		}
	}
	if q.Len() != 0 {
		t.Fatalf("%d events left", q.Len())
	}
	if _, _, ok := q.Remove(func(ev) bool { return true }, 0); ok {
		t.Fatalf("Remove on an empty queue found an event")
	}
}
