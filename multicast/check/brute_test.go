package check

import (
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
)

// TestOrderAgainstDefinitions compares the prefix-order and acyclic-order
// verdicts on many small random logs with direct evaluations of the
// definitions: every pair of groups and messages for prefix order, the
// transitive closure of "some group delivers m before m'" for acyclic order.
func TestOrderAgainstDefinitions(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	sawPrefix, sawCycle := 0, 0
	for iter := range 3000 {
		groups := 2 + rng.IntN(3)
		msgs := 2 + rng.IntN(5)
		dst := make([][]int, msgs)
		var recs []Record
		name := func(g int) string { return string(rune('A' + g)) }
		names := func(gs []int) []string {
			var out []string
			for _, g := range gs {
				out = append(out, name(g))
			}
			return out
		}
		for m := range msgs {
			for g := range groups {
				if rng.IntN(2) == 0 {
					dst[m] = append(dst[m], g)
				}
			}
			if len(dst[m]) == 0 {
				dst[m] = []int{rng.IntN(groups)}
			}
			recs = append(recs, Record{Ev: EvMulticast, ID: "m" + strconv.Itoa(m), Dst: names(dst[m])})
		}
		// Each group delivers a random subset of its messages in a random order.
		order := make([][]int, groups)
		for g := range groups {
			for m := range msgs {
				if slices.Contains(dst[m], g) && rng.IntN(4) != 0 {
					order[g] = append(order[g], m)
				}
			}
			rng.Shuffle(len(order[g]), func(i, j int) { order[g][i], order[g][j] = order[g][j], order[g][i] })
			for _, m := range order[g] {
				recs = append(recs, Record{Ev: EvDeliver, Group: name(g), Replica: "r1", ID: "m" + strconv.Itoa(m), Dst: names(dst[m])})
			}
		}

		pos := func(g, m int) int { return slices.Index(order[g], m) } // -1: not delivered
		wantPrefix := 0
		for p := range groups {
			for q := p + 1; q < groups; q++ {
				bad := false
				for m := range msgs {
					for m2 := range msgs {
						if m == m2 || !slices.Contains(dst[m], p) || !slices.Contains(dst[m], q) ||
							!slices.Contains(dst[m2], p) || !slices.Contains(dst[m2], q) {
							continue
						}
						// Both ways round: (p delivers m, q delivers m2) and (q delivers m, p delivers m2).
						for _, pq := range [][2]int{{p, q}, {q, p}} {
							a, b := pq[0], pq[1]
							if pos(a, m) < 0 || pos(b, m2) < 0 {
								continue
							}
							aM2First := pos(a, m2) >= 0 && pos(a, m2) < pos(a, m)
							bMFirst := pos(b, m) >= 0 && pos(b, m) < pos(b, m2)
							if !aM2First && !bMFirst {
								bad = true
							}
						}
					}
				}
				if bad {
					wantPrefix++
				}
			}
		}
		reach := make([][]bool, msgs)
		for m := range reach {
			reach[m] = make([]bool, msgs)
		}
		for g := range groups {
			for i, m := range order[g] {
				for _, m2 := range order[g][i+1:] {
					reach[m][m2] = true
				}
			}
		}
		for k := range msgs {
			for i := range msgs {
				for j := range msgs {
					reach[i][j] = reach[i][j] || reach[i][k] && reach[k][j]
				}
			}
		}
		wantCycles := 0
		for m := range msgs {
			// Count each cyclic component once, at its lowest message.
			if !reach[m][m] {
				continue
			}
			lowest := true
			for m2 := range m {
				if reach[m][m2] && reach[m2][m] {
					lowest = false
				}
			}
			if lowest {
				wantCycles++
			}
		}

		rep := Check(recs, Options{})
		if got := rep.ViolationCounts[PrefixOrder]; got != wantPrefix {
			t.Fatalf("iteration %d: prefix-order violations = %d, want %d\norders %v dst %v\n%v", iter, got, wantPrefix, order, dst, rep.Violations)
		}
		if got := rep.ViolationCounts[AcyclicOrder]; got != wantCycles {
			t.Fatalf("iteration %d: acyclic-order violations = %d, want %d\norders %v dst %v\n%v", iter, got, wantCycles, order, dst, rep.Violations)
		}
		for _, v := range rep.Violations {
			if v.Property == AcyclicOrder {
				// The reported cycle is one: consecutive ids are ordered.
				for i, id := range v.IDs {
					m, _ := strconv.Atoi(id[1:])
					m2, _ := strconv.Atoi(v.IDs[(i+1)%len(v.IDs)][1:])
					if !reach[m][m2] {
						t.Fatalf("iteration %d: reported cycle %v has no edge %s -> m%d", iter, v.IDs, id, m2)
					}
				}
			}
		}
		if wantPrefix > 0 {
			sawPrefix++
		}
		if wantCycles > 0 {
			sawCycle++
		}
	}
	if sawPrefix < 100 || sawCycle < 100 {
		t.Errorf("too few violating logs to mean anything: %d with prefix-order, %d with cycles", sawPrefix, sawCycle)
	}
}
