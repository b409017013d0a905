package check

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// validLog returns a log in which groups deliver, in one global order, the
// messages addressed to them: every replica of every destination delivers
// every message, so it satisfies every property.
func validLog(groups, replicas, messages int, seed uint64) []Record {
	rng := rand.New(rand.NewPCG(seed, seed))
	names := make([]string, groups)
	for g := range names {
		names[g] = "g" + strconv.Itoa(g)
	}
	var recs []Record
	for i := range messages {
		k := 1 + rng.IntN(min(4, groups))
		dst := slices.Clone(names)
		rng.Shuffle(len(dst), func(a, b int) { dst[a], dst[b] = dst[b], dst[a] })
		dst = dst[:k]
		id := fmt.Sprintf("c%d.%d", i%16, i)
		recs = append(recs, Record{Ev: EvMulticast, ID: id, Dst: dst})
		for _, g := range dst {
			if k > 1 && g != dst[0] {
				recs = append(recs, Record{Ev: EvSend, From: dst[0], To: g, Kind: "msg", About: id, Bytes: 100})
			}
			for r := range replicas {
				recs = append(recs, Record{Ev: EvDeliver, Group: g, Replica: "r" + strconv.Itoa(r), ID: id, Dst: dst})
			}
		}
	}
	return recs
}

func TestScaleValid(t *testing.T) {
	recs := validLog(12, 3, 27_000, 1)
	rep := Check(recs, Options{Complete: true, Genuine: true})
	if rep.Deliveries < 200_000 {
		t.Fatalf("only %d deliveries, want at least 200,000", rep.Deliveries)
	}
	if !rep.OK() {
		t.Fatalf("got %s, want ok", rep.Summary())
	}
	t.Log(rep.Summary())
}

// TestScaleSwap hides one swap of two messages in a large log.
func TestScaleSwap(t *testing.T) {
	recs := validLog(12, 1, 20_000, 2)
	// Swap, at group g3, the deliver lines of two messages that are both
	// addressed to another group too.
	var first, second = -1, -1
	for i, r := range recs {
		if r.Ev != EvDeliver || r.Group != "g3" {
			continue
		}
		if first < 0 && len(r.Dst) > 1 && i > len(recs)/2 {
			first = i
			continue
		}
		if first >= 0 && slices.ContainsFunc(r.Dst, func(g string) bool {
			return g != "g3" && slices.Contains(recs[first].Dst, g)
		}) {
			second = i
			break
		}
	}
	recs[first], recs[second] = recs[second], recs[first]
	rep := Check(recs, Options{Complete: true})
	if rep.ViolationCounts[AcyclicOrder] == 0 && rep.ViolationCounts[PrefixOrder] == 0 {
		t.Fatalf("got %s, want an ordering violation", rep.Summary())
	}
}

// TestRingCycle builds n groups in a ring: message i goes to groups i and
// i+1, and group i delivers message i-1 before message i. Any two groups
// share at most one message, so only the union of all orders shows the
// cycle, which runs through every message.
func TestRingCycle(t *testing.T) {
	const n = 1000
	group := func(i int) string { return "g" + strconv.Itoa((i+n)%n) }
	msg := func(i int) string { return "m" + strconv.Itoa((i+n)%n) }
	var recs []Record
	for i := range n {
		recs = append(recs, Record{Ev: EvMulticast, ID: msg(i), Dst: []string{group(i), group(i + 1)}})
	}
	for i := range n {
		for _, m := range []int{i - 1, i} {
			recs = append(recs, Record{Ev: EvDeliver, Group: group(i), Replica: "r1", ID: msg(m),
				Dst: []string{group(m), group(m + 1)}})
		}
	}
	rep := Check(recs, Options{Complete: true})
	if got, want := rep.ViolationCounts, map[string]int{AcyclicOrder: 1}; len(got) != 1 || got[AcyclicOrder] != 1 {
		t.Fatalf("violation counts %v, want %v", got, want)
	}
	ids := rep.Violations[0].IDs
	if len(ids) != n {
		t.Fatalf("cycle of %d messages, want %d", len(ids), n)
	}
	for i, id := range ids {
		if want := msg(i); id != want {
			t.Fatalf("cycle[%d] = %s, want %s", i, id, want)
		}
	}
	if detail, want := rep.Violations[0].Detail, "cycle of 1000 messages m0 -> m1 -> "; !strings.HasPrefix(detail, want) {
		t.Errorf("detail = %q, want it to start with %q", detail, want)
	}
}

func BenchmarkCheck(b *testing.B) {
	recs := validLog(12, 3, 27_000, 1)
	b.ResetTimer()
	for b.Loop() {
		if rep := Check(recs, Options{Complete: true, Genuine: true}); !rep.OK() {
			b.Fatal(rep.Summary())
		}
	}
}
