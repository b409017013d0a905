package overlay

import (
	"math"
	"math/rand/v2"
	"slices"
)

// TreeParents returns tree (child name -> parent name, the root left out)
// as parents by index into names, -1 for the root (and for a name the
// tree does not list): the form Model.Tree and SuggestTree take.
func TreeParents(tree map[string]string, names []string) []int {
	parent := make([]int, len(names))
	for i, g := range names {
		parent[i] = -1
		if p, ok := tree[g]; ok {
			parent[i] = slices.Index(names, p)
		}
	}
	return parent
}

// TreeResult is SuggestTree's answer.
type TreeResult struct {
	Parent     []int // parent[g], -1 for the root
	Prediction Prediction
}

// SuggestTree returns a tree for the tree protocol that minimises
// opt.Objective for d under m: a seeded annealing over moves of one
// group under another parent and over changes of root, from each of
// starts (trees to compare with, such as the configured one: the result
// never scores worse than any of them) and from the star around the group
// of least mean round trip. Steps: opt.Steps, or derived from the size.
// With opt.KeepLast the result's last answer is no worse than starts[0]'s
// (the star's without starts).
func (m *Model) SuggestTree(d *Dist, starts [][]int, opt Options, rng *rand.Rand) (TreeResult, error) {
	if err := m.Validate(); err != nil {
		return TreeResult{}, err
	}
	for _, s := range starts {
		if err := CheckTree(s, d.N); err != nil {
			return TreeResult{}, err
		}
	}
	n := d.N
	score := func(parent []int) Prediction {
		depth := treeDepths(parent)
		return predict(d, func(s *Set, out []float64) { m.treeAnswers(parent, depth, s, out) })
	}
	centre, centreSum := 0, math.Inf(1)
	for g := range n {
		sum := 0.0
		for x := range n {
			sum += m.RTTMs[g][x]
		}
		if sum < centreSum {
			centre, centreSum = g, sum
		}
	}
	star := make([]int, n)
	for g := range star {
		star[g] = centre
	}
	star[centre] = -1
	all := append([][]int{star}, starts...)
	steps := opt.Steps
	if steps == 0 {
		steps = int(min(20000, max(1000, 2e7/float64(len(d.Sets)*(n+1)))))
	}
	search := func(lastW float64, lb *lastBound) TreeResult {
		key := func(p Prediction) float64 {
			return p.Score(opt.Objective) + lastW*p.LastMs + lb.excess(p.LastMs, p.HomeLastMs)
		}
		var best TreeResult
		consider := func(parent []int) {
			p := score(parent)
			if best.Parent == nil || key(p) < key(best.Prediction)-1e-9 {
				best = TreeResult{Parent: slices.Clone(parent), Prediction: p}
			}
		}
		for _, s := range all {
			consider(s)
		}
		for _, s := range all {
			consider(annealTree(s, steps, rng, func(p []int) float64 { return key(score(p)) }))
		}
		return best
	}
	if !opt.KeepLast {
		return search(0, nil), nil
	}
	cands := make([]candidate, len(all))
	for i, s := range all {
		cands[i] = candidate{layout: s, p: score(s)}
	}
	constrained := func(lb *lastBound, from candidate) candidate {
		all = append(all, from.layout) // search starts from all
		r := search(0, lb)
		return candidate{layout: r.Parent, p: r.Prediction}
	}
	bound := cands[min(1, len(all)-1)] // starts[0], else the star
	c := keepLast(opt.Objective, opt.HomeSlack, bound, cands, constrained, func(w float64) candidate {
		r := search(w, nil)
		return candidate{layout: r.Parent, p: r.Prediction}
	})
	return TreeResult{Parent: slices.Clone(c.layout), Prediction: c.p}, nil
}

// annealTree runs a seeded simulated annealing over trees from start and
// returns the best tree it saw.
func annealTree(start []int, steps int, rng *rand.Rand, score func([]int) float64) []int {
	n := len(start)
	cur := slices.Clone(start)
	curScore := score(cur)
	best, bestScore := slices.Clone(cur), curScore
	t0 := max(curScore*0.02, 1e-9)
	tEnd := t0 * 1e-3
	next := make([]int, n)
	inSubtree := func(p []int, x, root int) bool { // x in root's subtree
		for ; x != -1; x = p[x] {
			if x == root {
				return true
			}
		}
		return false
	}
	for step := range steps {
		temp := t0 * math.Pow(tEnd/t0, float64(step)/float64(steps))
		copy(next, cur)
		v, p := rng.IntN(n), rng.IntN(n)
		switch {
		case v == p:
			continue
		case next[v] == -1:
			// v is the root: reverse the path from p up to v, so that p
			// becomes the root and every subtree stays whole.
			prev, x := -1, p
			for x != -1 {
				up := next[x]
				next[x] = prev
				prev, x = x, up
			}
		case inSubtree(next, p, v):
			continue // would make a cycle
		default:
			next[v] = p
		}
		s := score(next)
		if s <= curScore || rng.Float64() < math.Exp(-(s-curScore)/temp) {
			copy(cur, next)
			curScore = s
			if s < bestScore-1e-12 {
				copy(best, cur)
				bestScore = s
			}
		}
	}
	return best
}
