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
		l := randomBruteLog(rng)
		wantPrefix := l.prefixViolations()
		reach := l.reach()
		wantCycles := countCyclic(reach)

		rep := Check(l.recs, Options{})
		if got := rep.ViolationCounts[PrefixOrder]; got != wantPrefix {
			t.Fatalf("iteration %d: prefix-order violations = %d, want %d\norders %v dst %v\n%v", iter, got, wantPrefix, l.order, l.dst, rep.Violations)
		}
		if got := rep.ViolationCounts[AcyclicOrder]; got != wantCycles {
			t.Fatalf("iteration %d: acyclic-order violations = %d, want %d\norders %v dst %v\n%v", iter, got, wantCycles, l.order, l.dst, rep.Violations)
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

// bruteLog is a small random log of TestOrderAgainstDefinitions: dst[m] are
// the groups of message m, order[g] the messages group g delivers, in order,
// and recs the log's records.
type bruteLog struct {
	groups, msgs int
	dst, order   [][]int
	recs         []Record
}

// randomBruteLog draws 2 to 4 groups and 2 to 6 messages, each to a random
// non-empty set of groups; each group delivers a random subset of its
// messages in a random order.
func randomBruteLog(rng *rand.Rand) bruteLog {
	l := bruteLog{groups: 2 + rng.IntN(3), msgs: 2 + rng.IntN(5)}
	l.dst = make([][]int, l.msgs)
	name := func(g int) string { return string(rune('A' + g)) }
	names := func(gs []int) []string {
		var out []string
		for _, g := range gs {
			out = append(out, name(g))
		}
		return out
	}
	for m := range l.msgs {
		for g := range l.groups {
			if rng.IntN(2) == 0 {
				l.dst[m] = append(l.dst[m], g)
			}
		}
		if len(l.dst[m]) == 0 {
			l.dst[m] = []int{rng.IntN(l.groups)}
		}
		l.recs = append(l.recs, Record{Ev: EvMulticast, ID: "m" + strconv.Itoa(m), Dst: names(l.dst[m])})
	}
	l.order = make([][]int, l.groups)
	for g := range l.groups {
		for m := range l.msgs {
			if slices.Contains(l.dst[m], g) && rng.IntN(4) != 0 {
				l.order[g] = append(l.order[g], m)
			}
		}
		rng.Shuffle(len(l.order[g]), func(i, j int) { l.order[g][i], l.order[g][j] = l.order[g][j], l.order[g][i] })
		for _, m := range l.order[g] {
			l.recs = append(l.recs, Record{Ev: EvDeliver, Group: name(g), Replica: "r1", ID: "m" + strconv.Itoa(m), Dst: names(l.dst[m])})
		}
	}
	return l
}

// prefixViolations counts, straight from the definition, the pairs of
// groups p, q for which some messages m, m2 to both are delivered as m by
// one and m2 by the other, without either having delivered the other's
// first.
func (l bruteLog) prefixViolations() int {
	pos := func(g, m int) int { return slices.Index(l.order[g], m) } // -1: not delivered
	to := func(m, g int) bool { return slices.Contains(l.dst[m], g) }
	n := 0
	for p := range l.groups {
		for q := p + 1; q < l.groups; q++ {
			bad := false
			for m := range l.msgs {
				for m2 := range l.msgs {
					if m == m2 || !to(m, p) || !to(m, q) || !to(m2, p) || !to(m2, q) {
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
				n++
			}
		}
	}
	return n
}

// reach returns the transitive closure of "some group delivers m before
// m2": reach[m][m2].
func (l bruteLog) reach() [][]bool {
	reach := make([][]bool, l.msgs)
	for m := range reach {
		reach[m] = make([]bool, l.msgs)
	}
	for g := range l.groups {
		for i, m := range l.order[g] {
			for _, m2 := range l.order[g][i+1:] {
				reach[m][m2] = true
			}
		}
	}
	for k := range l.msgs {
		for i := range l.msgs {
			for j := range l.msgs {
				reach[i][j] = reach[i][j] || reach[i][k] && reach[k][j]
			}
		}
	}
	return reach
}

// countCyclic counts the components of reach that hold a cycle, each
// once, at its lowest message.
func countCyclic(reach [][]bool) int {
	n := 0
	for m := range reach {
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
			n++
		}
	}
	return n
}
