package overlay

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
)

// CountedSet is one destination set of one home group, counted in a run:
// an element of the "destination_sets" list of `flexkv gtpcc run --json`'s
// results (gtpcc.Report), which ReadSets reads.
type CountedSet struct {
	Home   string   `json:"home"`   // the clients' group
	Groups []string `json:"groups"` // the destinations
	Count  int64    `json:"count"`  // transactions of this home and set
}

// CountedSetsMax bounds the sets ReadSets takes.
const CountedSetsMax = 1 << 16

// ReadSets reads counted destination sets from r: a JSON object whose
// "destination_sets" is a list of CountedSet (the results JSON of a gTPC-C
// run is one; other fields are ignored). names are the groups, by matrix
// index. It returns their distribution: each home's sets with the
// probability of their counts among that home's, and each home's share of
// all counts (Dist.Shares). Sets of one home and the same groups are
// added up; a set of count 0 is left out.
func ReadSets(r io.Reader, names []string) (*Dist, error) {
	var doc struct {
		Sets *[]CountedSet `json:"destination_sets"`
	}
	if err := json.NewDecoder(io.LimitReader(r, 64<<20)).Decode(&doc); err != nil {
		return nil, fmt.Errorf("overlay: destination sets: %w", err)
	}
	if doc.Sets == nil {
		return nil, errors.New(`overlay: destination sets: no "destination_sets" list (the results JSON of "flexkv gtpcc run --json" has one)`)
	}
	return CountedDist(*doc.Sets, names)
}

// CountedDist returns the distribution of counted sets (see ReadSets).
func CountedDist(sets []CountedSet, names []string) (*Dist, error) {
	n := len(names)
	if n < 2 || n > 64 {
		return nil, fmt.Errorf("overlay: %d groups, want 2..64", n)
	}
	if len(sets) > CountedSetsMax {
		return nil, fmt.Errorf("overlay: %d destination sets, at most %d", len(sets), CountedSetsMax)
	}
	index := func(i int, what, name string) (int, error) {
		g := slices.Index(names, name)
		if g < 0 {
			return 0, fmt.Errorf("overlay: destination set %d: %s %q is not a group of the configuration (groups: %v)", i, what, name, names)
		}
		return g, nil
	}
	type key struct {
		home   int
		groups uint64
	}
	at := map[key]int{} // index into out
	var out []Set
	counts := []float64{}
	homeTotal := make([]float64, n)
	total := 0.0
	for i, cs := range sets {
		if cs.Count < 0 {
			return nil, fmt.Errorf("overlay: destination set %d: count %d, want >= 0", i, cs.Count)
		}
		if len(cs.Groups) == 0 || len(cs.Groups) > SetGroupsMax {
			return nil, fmt.Errorf("overlay: destination set %d: %d groups, want 1..%d", i, len(cs.Groups), SetGroupsMax)
		}
		h, err := index(i, "home", cs.Home)
		if err != nil {
			return nil, err
		}
		var mask uint64
		gs := make([]int, 0, len(cs.Groups))
		for _, name := range cs.Groups {
			g, err := index(i, "group", name)
			if err != nil {
				return nil, err
			}
			if mask&(1<<g) != 0 {
				return nil, fmt.Errorf("overlay: destination set %d: group %q twice", i, name)
			}
			mask |= 1 << g
			gs = append(gs, g)
		}
		if cs.Count == 0 {
			continue
		}
		slices.Sort(gs)
		c := float64(cs.Count)
		homeTotal[h] += c
		total += c
		k := key{h, mask}
		if j, ok := at[k]; ok {
			counts[j] += c
			continue
		}
		at[k] = len(out)
		out = append(out, Set{Home: h, Groups: gs})
		counts = append(counts, c)
	}
	if total == 0 {
		return nil, errors.New("overlay: destination sets: no transaction counted")
	}
	for i := range out {
		out[i].Prob = counts[i] / homeTotal[out[i].Home]
	}
	// By home, then in the order read.
	slices.SortStableFunc(out, func(a, b Set) int { return a.Home - b.Home })
	d := &Dist{N: n, Sets: out, Shares: make([]float64, n)}
	for h := range n {
		d.Shares[h] = homeTotal[h] / total
	}
	return d, nil
}
