package overlay

import (
	"math"
	"math/rand/v2"
	"slices"
)

// ExactMaxDefault is the largest cluster SuggestOverlay searches exactly
// by default: the branch and bound visits a small share of the n!
// orders, but that share still grows about as fast.
const ExactMaxDefault = 8

// roundsMax bounds the rounds of fixing the closed-loop weights and
// searching: the order usually stops changing after two.
const roundsMax = 4

// Options tunes a search.
type Options struct {
	Objective Objective
	// ExactMax: clusters of at most this many groups are searched
	// exactly; 0 is ExactMaxDefault, -1 never.
	ExactMax int
	// Steps of one annealing run; 0 is StepsDefault.
	Steps int
	// Work bounds the model's inner steps of one annealing run (a step
	// recomputes the sets whose rank span a move touches, each in about
	// its span squared, or flushPhases+1 times that when the flush can
	// hold it back); 0 is WorkDefault. A bound on work rather than on
	// time keeps the result a function of the arguments.
	Work int64
	// KeepLast bounds the suggestion's mean last answer by the first
	// start's (the configured overlay's or tree's; SuggestTree's star when
	// there are no starts), and every client's (Prediction.HomeLastMs) by
	// its own under that start plus HomeSlack: the closed-loop mean alone
	// would let a search slow a few regions' clients down many times over,
	// since slow clients complete fewer transactions and weigh less. The search
	// minimises the objective plus w times the mean last answer for each w
	// of LastWeights in turn, up to the first w whose result keeps the
	// bound; then the objective plus LastPenalty times the clients' excess
	// over their bounds, from that result and the starts, which finds
	// orders the weights miss; the better of the two within the bound
	// wins, and a start that keeps it and scores better wins over both.
	KeepLast bool
	// HomeSlack is how much a client's mean last answer may exceed its
	// bound, as a fraction of it (HomeSlackDefault is what flexkv uses);
	// negative leaves the clients unbounded (the mean alone is kept).
	HomeSlack float64
}

// HomeSlackDefault is flexkv's Options.HomeSlack: a client's mean last
// answer may at most double while the mean over all clients does not grow.
// On aws-12 (0.99 locality, global-only, 2 ms commits, the 400 ms flush)
// the model's frontier from O1's 21.1 ms first answer is 10.9 ms with every
// client within 1.07x of its last answer under O1 (slack 0.15), 10.5 ms
// within 1.41x (slack 0.5 and above, and with no bound). Under the
// earlier model (notifications counted, no flush) it was 15.4 ms within
// 1.14x, 11.7 ms within 1.93x (slack 1) and 9.6 ms with no bound, two
// regions' clients then waiting 6.3x longer; measured, the slack-1
// suggestion kept every pair of groups' 2nd answer within 14% of O1's,
// and a tighter slack gave up most of the first answer for a gain the
// runs did not show.
const HomeSlackDefault = 1

// LastPenalty is what a KeepLast search adds to the objective per ms of a
// client's mean last answer beyond its bound: enough that no order beyond
// it wins, since the objective's answers are themselves at most the last.
const LastPenalty = 100

// LastWeights are the weights of the last answer that a KeepLast search
// tries, lightest first.
var LastWeights = []float64{0, 1.0 / 32, 1.0 / 16, 1.0 / 8, 1.0 / 4, 1.0 / 2, 1, 2, 4}

// Defaults of Options: WorkDefault keeps `suggest` at 64 groups to a few
// seconds.
const (
	StepsDefault = 40000
	WorkDefault  = 200_000_000
)

// OrderResult is SuggestOverlay's answer.
type OrderResult struct {
	Order      []int // order[r]: the group of rank r
	Prediction Prediction
	// Exact tells that the order is optimal for its closed-loop weights.
	Exact bool
}

// SuggestOverlay returns the FlexCast order that minimises opt.Objective
// for d under m, the best of the search's and of starts (orders to compare
// with, such as the configured overlay: the result never scores worse than
// any of them, and with opt.KeepLast its last answer is no worse than
// starts[0]'s). rng seeds the annealing; the result is a function of the
// arguments and rng's state.
func (m *Model) SuggestOverlay(d *Dist, starts [][]int, opt Options, rng *rand.Rand) (OrderResult, error) {
	if err := m.Validate(); err != nil {
		return OrderResult{}, err
	}
	for _, s := range starts {
		if err := CheckOrder(s, d.N); err != nil {
			return OrderResult{}, err
		}
	}
	if !opt.KeepLast || len(starts) == 0 {
		return m.suggestOverlay(d, starts, opt, 0, nil, rng), nil
	}
	cands := make([]candidate, len(starts))
	for i, s := range starts {
		p, _ := m.FlexCast(d, s)
		cands[i] = candidate{layout: s, p: p}
	}
	constrained := func(lb *lastBound, from candidate) candidate {
		r := m.suggestOverlay(d, append(slices.Clone(starts), from.layout), opt, 0, lb, rng)
		return candidate{layout: r.Order, p: r.Prediction, exact: r.Exact}
	}
	c := keepLast(opt.Objective, opt.HomeSlack, cands[0], cands, constrained, func(w float64) candidate {
		r := m.suggestOverlay(d, starts, opt, w, nil, rng)
		return candidate{layout: r.Order, p: r.Prediction, exact: r.Exact}
	})
	return OrderResult{Order: slices.Clone(c.layout), Prediction: c.p, Exact: c.exact}, nil
}

// candidate is an order, or a tree's parents, with its prediction.
type candidate struct {
	layout []int
	p      Prediction
	exact  bool // optimal for its closed-loop weights (orders only)
}

// keepLast is a KeepLast search, bounded by bound's last answers with
// slack (newLastBound): search minimises the objective plus w times the
// mean last answer, and the first w of LastWeights whose result keeps the
// bounds gives a result;
// constrained, when not nil, then minimises the objective with every
// client's last answer at most its bound, starting from that result too,
// and wins if it keeps the bound and scores better. One of starts that
// keeps the bound and scores better on the objective alone wins over
// either (a weighted search may trade objective for last answer beyond
// what the bound asks). Without such a result, bound.
func keepLast(obj Objective, slack float64, bound candidate, starts []candidate, constrained func(lb *lastBound, from candidate) candidate, search func(lastW float64) candidate) candidate {
	lb := newLastBound(bound.p, slack)
	best := bound
	for _, w := range LastWeights {
		if c := search(w); lb.keeps(c.p) {
			c.exact = c.exact && w == 0 // exact for the weighted objective only
			best = c
			break
		}
	}
	if constrained != nil {
		if c := constrained(lb, best); lb.keeps(c.p) && c.p.Score(obj) < best.p.Score(obj)-1e-9 {
			best = c
		}
	}
	for _, s := range starts {
		if lb.keeps(s.p) && s.p.Score(obj) < best.p.Score(obj)-1e-9 {
			best = s
		}
	}
	return best
}

// suggestOverlay searches for the order of least objective plus lastW
// times the mean last answer plus the penalty of the last answers beyond
// lb (lastBound.excess; nil: no bound).
func (m *Model) suggestOverlay(d *Dist, starts [][]int, opt Options, lastW float64, lb *lastBound, rng *rand.Rand) OrderResult {
	exactMax := opt.ExactMax
	if exactMax == 0 {
		exactMax = ExactMaxDefault
	}
	score := func(order []int) Prediction { p, _ := m.FlexCast(d, order); return p }
	key := func(p Prediction) float64 {
		return p.Score(opt.Objective) + lastW*p.LastMs + lb.excess(p.LastMs, p.HomeLastMs)
	}
	var best OrderResult
	consider := func(order []int, exact bool) {
		p := score(order)
		if best.Order == nil || key(p) < key(best.Prediction)-1e-9 {
			best = OrderResult{Order: slices.Clone(order), Prediction: p, Exact: exact}
		} else if exact && slices.Equal(order, best.Order) {
			best.Exact = true
		}
	}
	identity := make([]int, d.N)
	for i := range identity {
		identity[i] = i
	}
	consider(identity, false)
	for g := range d.N {
		consider(m.nearestChain(g), false)
	}
	for _, s := range starts {
		consider(s, false)
	}
	for range roundsMax {
		w := homeRates(d, newFlexEval(m, best.Order).answers)
		f := newFixed(m, d, w, opt.Objective, lastW)
		f.lastMax = lb
		prev := best.Order
		if d.N <= exactMax {
			order := f.branchAndBound(best.Order)
			consider(order, true)
		} else {
			steps, work := opt.Steps, opt.Work
			if steps == 0 {
				steps = StepsDefault
			}
			if work == 0 {
				work = WorkDefault
			}
			consider(f.anneal(best.Order, steps, work, rng), false)
		}
		if slices.Equal(prev, best.Order) {
			break
		}
	}
	return best
}

// nearestChain returns the order that starts at group from and appends,
// each time, the unranked group nearest to the last one: neighbours get
// neighbouring ranks, so that few groups sit between a message's
// destinations.
func (m *Model) nearestChain(from int) []int {
	n := len(m.RTTMs)
	used := make([]bool, n)
	order := []int{from}
	used[from] = true
	for len(order) < n {
		last, next := order[len(order)-1], -1
		for g := range n {
			if !used[g] && (next < 0 || m.RTTMs[last][g] < m.RTTMs[last][next]) {
				next = g
			}
		}
		used[next] = true
		order = append(order, next)
	}
	return order
}

// homeRates returns each client's closed-loop rate, 1/E[last answer], or
// the shares of a counted distribution (Dist.Shares).
func homeRates(d *Dist, answers answersFunc) []float64 {
	if d.Shares != nil {
		return slices.Clone(d.Shares)
	}
	w, last := make([]float64, d.N), make([]float64, d.N)
	buf := make([]float64, SetGroupsMax)
	for i := range d.Sets {
		s := &d.Sets[i]
		out := buf[:len(s.Groups)]
		answers(s, out)
		w[s.Home] += s.Prob
		last[s.Home] += s.Prob * slices.Max(out)
	}
	for h := range w {
		if last[h] > 0 {
			w[h] /= last[h]
		}
	}
	return w
}

// lastBound is what a KeepLast search bounds: the mean last answer over
// all clients, and each client's (Prediction.HomeLastMs). A nil bound
// bounds nothing.
type lastBound struct {
	mean float64
	home []float64 // nil: the clients are not bounded
}

// newLastBound returns the bounds of KeepLast with p as the start: p's
// mean last answer, and each client's times 1+slack (slack as
// Options.HomeSlack).
func newLastBound(p Prediction, slack float64) *lastBound {
	b := &lastBound{mean: p.LastMs}
	if slack >= 0 {
		b.home = make([]float64, len(p.HomeLastMs))
		for h, x := range p.HomeLastMs {
			b.home[h] = x * (1 + slack)
		}
	}
	return b
}

// excess is LastPenalty times the excess of the mean last answer over its
// bound plus that of each client's (home, by client). It is monotone in
// every argument.
func (b *lastBound) excess(mean float64, home []float64) float64 {
	if b == nil {
		return 0
	}
	e := max(0, mean-b.mean)
	for h, x := range b.home {
		if home[h] > x {
			e += home[h] - x
		}
	}
	return LastPenalty * e
}

// keeps reports whether p keeps the bounds.
func (b *lastBound) keeps(p Prediction) bool {
	if b == nil {
		return true
	}
	if p.LastMs > b.mean+1e-9 {
		return false
	}
	for h, x := range b.home {
		if p.HomeLastMs[h] > x+1e-9 {
			return false
		}
	}
	return true
}

// fixed scores orders with fixed closed-loop weights: the objective is
// then a sum over sets, which the branch and bound bounds set by set, and
// the penalty of each client's mean last answer (lastBound.excess), a sum over
// the client's sets weighted by their probabilities, whatever the rates,
// and monotone in it.
type fixed struct {
	m   *Model
	d   *Dist
	obj Objective
	// lastW weighs each set's last answer into its value.
	lastW float64
	// lastMax bounds the mean last answer and each client's (nil: no
	// bound); homeProb[h] sums the probabilities of client h's sets;
	// homeLast and homeMean are scratch for bound and penalty.
	lastMax                      *lastBound
	homeProb, homeLast, homeMean []float64
	coef                         []float64 // per set: its client's rate times its probability, normalised
	// static[i] and staticLast[i]: lower bounds of set i's value and of
	// its last answer whatever the order.
	static, staticLast []float64
}

func newFixed(m *Model, d *Dist, rate []float64, obj Objective, lastW float64) *fixed {
	f := &fixed{m: m, d: d, obj: obj, lastW: lastW, coef: make([]float64, len(d.Sets)),
		homeProb: make([]float64, d.N), homeLast: make([]float64, d.N), homeMean: make([]float64, d.N),
		static: make([]float64, len(d.Sets)), staticLast: make([]float64, len(d.Sets))}
	for _, s := range d.Sets {
		f.homeProb[s.Home] += s.Prob
	}
	sum := 0.0
	for i, s := range d.Sets {
		f.coef[i] = rate[s.Home] * s.Prob
		sum += f.coef[i]
	}
	lb := make([]float64, SetGroupsMax)
	for i := range d.Sets {
		if sum > 0 {
			f.coef[i] /= sum
		}
		s := &d.Sets[i]
		out := lb[:len(s.Groups)]
		h, C := s.Home, m.CommitMs
		for j, g := range s.Groups {
			best := math.Inf(1)
			for _, x := range s.Groups {
				v := m.ow(h, g) + C + m.ow(g, h)
				if x != g {
					v = m.ow(h, x) + C + m.ow(x, g) + C + m.ow(g, h)
				}
				best = min(best, v)
			}
			out[j] = best
		}
		f.static[i] = f.value(out)
		f.staticLast[i] = slices.Max(out)
	}
	return f
}

// penalty is the bound's excess for a mean last answer of mean and for the
// clients whose sets' last answers, weighted by the sets' probabilities,
// sum to sums[h].
func (f *fixed) penalty(mean float64, sums []float64) float64 {
	if f.lastMax == nil {
		return 0
	}
	for h, x := range sums {
		f.homeMean[h] = 0
		if f.homeProb[h] > 0 {
			f.homeMean[h] = x / f.homeProb[h]
		}
	}
	return f.lastMax.excess(mean, f.homeMean)
}

// value is the objective's figure of one set's answers. It is monotone
// in every answer, so that lower bounds of the answers bound it.
func (f *fixed) value(ans []float64) float64 {
	return f.objective(ans) + f.lastW*slices.Max(ans)
}

func (f *fixed) objective(ans []float64) float64 {
	switch f.obj {
	case Last:
		return slices.Max(ans)
	case Mean:
		s := 0.0
		for _, v := range ans {
			s += v
		}
		return s / float64(len(ans))
	default:
		return slices.Min(ans)
	}
}

// score returns the fixed-weight objective of a complete order.
func (f *fixed) score(order []int) float64 {
	e := newFlexEval(f.m, order)
	return f.bound(e, len(order))
}

// bound returns a lower bound of the objective of every order whose ranks
// below top are e's (exact when top is every group).
func (f *fixed) bound(e *flexEval, top int) float64 {
	value, last := 0.0, 0.0
	clear(f.homeLast)
	buf := make([]float64, SetGroupsMax)
	for i := range f.d.Sets {
		s := &f.d.Sets[i]
		lo := len(e.order)
		for _, g := range s.Groups {
			lo = min(lo, e.rank[g])
		}
		if lo >= top {
			value += f.coef[i] * f.static[i]
			last += f.coef[i] * f.staticLast[i]
			f.homeLast[s.Home] += s.Prob * f.staticLast[i]
			continue
		}
		out := buf[:len(s.Groups)]
		e.eval(s, top, out)
		value += f.coef[i] * f.value(out)
		mx := slices.Max(out)
		last += f.coef[i] * mx
		f.homeLast[s.Home] += s.Prob * mx
	}
	return value + f.penalty(last, f.homeLast)
}

// branchAndBound returns an order of least fixed-weight objective,
// extending rank prefixes in the order of their bounds and pruning any
// prefix whose bound is no better than the best order found; incumbent
// is the first best.
func (f *fixed) branchAndBound(incumbent []int) []int {
	n := f.d.N
	best := slices.Clone(incumbent)
	bestScore := f.score(best)
	order := make([]int, n)
	used := make([]bool, n)
	e := newFlexEval(f.m, order)
	// place sets order[:k] and puts the unplaced groups after, in any
	// order: bound looks at ranks below k only.
	place := func(k int) {
		r := k
		for g := range n {
			if !used[g] {
				order[r] = g
				r++
			}
		}
		for r, g := range order {
			e.rank[g] = r
		}
	}
	type child struct {
		g     int
		bound float64
	}
	var dfs func(k int)
	dfs = func(k int) {
		if k == n {
			place(n)
			if s := f.bound(e, n); s < bestScore-1e-12 {
				bestScore = s
				copy(best, order)
			}
			return
		}
		var kids []child
		for g := range n {
			if used[g] {
				continue
			}
			used[g] = true
			order[k] = g
			place(k + 1)
			b := f.bound(e, k+1)
			used[g] = false
			if b < bestScore-1e-12 {
				kids = append(kids, child{g, b})
			}
		}
		slices.SortStableFunc(kids, func(a, b child) int {
			switch {
			case a.bound < b.bound:
				return -1
			case a.bound > b.bound:
				return 1
			}
			return 0
		})
		for _, c := range kids {
			if c.bound >= bestScore-1e-12 {
				break
			}
			used[c.g] = true
			order[k] = c.g
			dfs(k + 1)
			used[c.g] = false
		}
	}
	dfs(0)
	return best
}

// closedLoop is the prediction's objective from per-home sums, as predict
// weighs them: sets of home h have probabilities summing to w[h], values
// (f.objective) summing, weighted by probability, to v[h] and last answers
// to l[h] (clientRate). It returns the objective and the mean last answer.
func (f *fixed) closedLoop(w, v, l []float64) (obj, last float64) {
	rates := 0.0
	for h := range w {
		rate, ok := clientRate(f.d, h, w[h], l[h])
		if !ok {
			continue
		}
		rates += rate
		obj += rate * v[h] / w[h]
		last += rate * l[h] / w[h]
	}
	if rates == 0 {
		return 0, 0
	}
	return obj / rates, last / rates
}

// anneal runs a seeded simulated annealing from start over swaps of two
// ranks and moves of one group to another rank, and returns the best
// order it saw. It scores the closed-loop objective itself (closedLoop:
// the rates follow each order, unlike the branch and bound's fixed
// weights) plus lastW times the mean last answer and the penalty of a
// last answer beyond lastMax; only the sets whose rank span meets the
// ranks a move changes are recomputed, and their homes' sums updated.
// With a bound on the last answer, the walk may cross orders beyond it
// (their penalty makes it pay), but the best is kept among those within
// it, and the start (as if within) when none is.
func (f *fixed) anneal(start []int, steps int, work int64, rng *rand.Rand) []int {
	n := f.d.N
	cur := slices.Clone(start)
	e := newFlexEval(f.m, cur)
	sets := f.d.Sets
	val, lst := make([]float64, len(sets)), make([]float64, len(sets)) // per set, times its probability
	lo, hi := make([]int, len(sets)), make([]int, len(sets))
	w, v, l := make([]float64, n), make([]float64, n), make([]float64, n)
	buf := make([]float64, SetGroupsMax)
	span := func(i int) (int, int) {
		a, b := n, -1
		for _, g := range sets[i].Groups {
			a, b = min(a, e.rank[g]), max(b, e.rank[g])
		}
		return a, b
	}
	setValue := func(i int) (value, last float64) {
		out := buf[:len(sets[i].Groups)]
		e.eval(&sets[i], n, out)
		return sets[i].Prob * f.objective(out), sets[i].Prob * slices.Max(out)
	}
	score := func() (key, obj, last float64, within bool) {
		obj, last = f.closedLoop(w, v, l)
		excess := f.penalty(last, l)
		return obj + f.lastW*last + excess, obj, last, excess == 0
	}
	for i := range sets {
		lo[i], hi[i] = span(i)
		val[i], lst[i] = setValue(i)
		h := sets[i].Home
		w[h] += sets[i].Prob
		v[h] += val[i]
		l[h] += lst[i]
	}
	total, obj, last, _ := score()
	best, bestScore := slices.Clone(cur), obj+f.lastW*last
	t0 := max(total*0.02, 1e-9)
	tEnd := t0 * 1e-3
	var touched []int
	newVal, newLst := make([]float64, len(sets)), make([]float64, len(sets))
	prevOrder := make([]int, n)
	e.work = 0
	for step := 0; step < steps && e.work < work; step++ {
		done := max(float64(step)/float64(steps), float64(e.work)/float64(work))
		temp := t0 * math.Pow(tEnd/t0, done)
		a, b := rng.IntN(n), rng.IntN(n)
		if a == b {
			continue
		}
		copy(prevOrder, cur)
		if rng.IntN(2) == 0 {
			cur[a], cur[b] = cur[b], cur[a]
		} else {
			g := cur[a]
			cur = slices.Insert(slices.Delete(cur, a, a+1), b, g)
		}
		e.order = cur
		for r, g := range cur {
			e.rank[g] = r
		}
		x, y := min(a, b), max(a, b)
		touched = touched[:0]
		for i := range sets {
			if hi[i] < x || lo[i] > y {
				continue
			}
			touched = append(touched, i)
			newVal[i], newLst[i] = setValue(i)
			h := sets[i].Home
			v[h] += newVal[i] - val[i]
			l[h] += newLst[i] - lst[i]
		}
		key, obj, last, within := score()
		if delta := key - total; delta <= 0 || rng.Float64() < math.Exp(-delta/temp) {
			total = key
			for _, i := range touched {
				val[i], lst[i] = newVal[i], newLst[i]
				lo[i], hi[i] = span(i)
			}
			if within {
				if s := obj + f.lastW*last; s < bestScore-1e-12 {
					bestScore = s
					copy(best, cur)
				}
			}
			continue
		}
		for _, i := range touched {
			h := sets[i].Home
			v[h] -= newVal[i] - val[i]
			l[h] -= newLst[i] - lst[i]
		}
		copy(cur, prevOrder)
		for r, g := range cur {
			e.rank[g] = r
		}
	}
	return best
}
