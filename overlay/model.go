package overlay

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
)

// Objective is what the search minimises: the mean, per transaction, of
// its first answer, of its last, or of the mean of its answers.
type Objective int

// The objectives.
const (
	First Objective = iota
	Last
	Mean
)

// ObjectiveNames lists what ParseObjective accepts, in Objective order.
var ObjectiveNames = []string{"first", "last", "mean"}

func (o Objective) String() string {
	if o < 0 || int(o) >= len(ObjectiveNames) {
		return fmt.Sprintf("Objective(%d)", int(o))
	}
	return ObjectiveNames[o]
}

// ParseObjective parses "first", "last" or "mean".
func ParseObjective(s string) (Objective, error) {
	if i := slices.Index(ObjectiveNames, s); i >= 0 {
		return Objective(i), nil
	}
	return 0, fmt.Errorf("overlay: unknown objective %q (want %s)", s, strings.Join(ObjectiveNames, ", "))
}

// AnswersMax is the number of answers a Prediction reports: the
// workload's sets have at most three destinations.
const AnswersMax = 3

// Model is the contention-free latency model of the package comment.
type Model struct {
	// RTTMs are the round trips between the groups, in ms: RTTMs[a][b]
	// from a to b, RTTMs[a][a] inside a's region.
	RTTMs [][]float64
	// CommitMs is the cost of one step of a group (a raft commit).
	CommitMs float64
	// Notifications counts FlexCast's notifications (strategy c) of the
	// groups ranked between a message's destinations.
	Notifications bool
	// FlushMs is the period of FlexCast's flush (0: no flush counted): a
	// destination delivers a message only after the last flush its lca
	// delivered before it (see the package comment).
	FlushMs float64
}

// flushPhases is the number of points at which eval averages a set's
// answers over the phase of the flush period.
const flushPhases = 16

// Validate checks the matrix and the commit cost.
func (m *Model) Validate() error {
	if err := checkMatrix(m.RTTMs); err != nil {
		return err
	}
	if !(m.CommitMs >= 0) {
		return fmt.Errorf("overlay: commit cost %v ms, want >= 0", m.CommitMs)
	}
	if !(m.FlushMs >= 0) || math.IsInf(m.FlushMs, 1) {
		return fmt.Errorf("overlay: flush period %v ms, want >= 0 and finite", m.FlushMs)
	}
	return nil
}

// Prediction is the model's expected latency of a protocol's answers, per
// transaction over every client, closed-loop weighted.
type Prediction struct {
	// AnswerMs[k] is the mean (k+1)-th answer, over the transactions with
	// more than k destinations (0 when there are none).
	AnswerMs [AnswersMax]float64
	FirstMs  float64 // the mean first answer (AnswerMs[0])
	LastMs   float64 // the mean last answer
	MeanMs   float64 // the mean of each transaction's mean answer
	// HomeLastMs[h] is the mean last answer of client h's transactions (0
	// for a client with none): what KeepLast bounds, client by client.
	HomeLastMs []float64
}

// Score returns p's figure for o.
func (p Prediction) Score(o Objective) float64 {
	switch o {
	case Last:
		return p.LastMs
	case Mean:
		return p.MeanMs
	default:
		return p.FirstMs
	}
}

func (m *Model) ow(a, b int) float64 { return m.RTTMs[a][b] / 2 }

// answersFunc writes the answer times of s, as the client sees them, into
// out (len(s.Groups)) in any order.
type answersFunc func(s *Set, out []float64)

// predict aggregates answers over d with closed-loop weights.
func predict(d *Dist, answers answersFunc) Prediction {
	type acc struct {
		w, last, mean float64
		k             [AnswersMax]float64
		kw            [AnswersMax]float64
	}
	homes := make([]acc, d.N)
	buf := make([]float64, 0, SetGroupsMax)
	for i := range d.Sets {
		s := &d.Sets[i]
		buf = buf[:len(s.Groups)]
		answers(s, buf)
		slices.Sort(buf)
		a := &homes[s.Home]
		a.w += s.Prob
		a.last += s.Prob * buf[len(buf)-1]
		sum := 0.0
		for k, v := range buf {
			sum += v
			if k < AnswersMax {
				a.k[k] += s.Prob * v
				a.kw[k] += s.Prob
			}
		}
		a.mean += s.Prob * sum / float64(len(buf))
	}
	// Client h completes 1/E[last] transactions per ms: weigh its
	// per-transaction means by that rate (or by its counted share).
	p := Prediction{HomeLastMs: make([]float64, d.N)}
	for h, a := range homes {
		if a.w > 0 {
			p.HomeLastMs[h] = a.last / a.w
		}
	}
	var wSum float64
	var kSum, kw [AnswersMax]float64
	for h, a := range homes {
		rate, ok := clientRate(d, h, a.w, a.last)
		if !ok {
			continue
		}
		wSum += rate
		p.LastMs += rate * a.last / a.w
		p.MeanMs += rate * a.mean / a.w
		for k := range AnswersMax {
			if a.kw[k] > 0 {
				kSum[k] += rate * a.k[k] / a.w
				kw[k] += rate * a.kw[k] / a.w
			}
		}
	}
	if wSum == 0 {
		return p
	}
	p.LastMs /= wSum
	p.MeanMs /= wSum
	for k := range AnswersMax {
		if kw[k] > 0 {
			p.AnswerMs[k] = kSum[k] / kw[k]
		}
	}
	p.FirstMs = p.AnswerMs[0]
	return p
}

// clientRate is the weight of client h, whose sets have probabilities
// summing to w and last answers summing, weighted by probability, to last:
// the rate at which it completes transactions, w/last = 1/E[last], or its
// counted share (Dist.Shares: the closed loop is in the counts). ok is
// false for a client without sets or answers, which weighs nothing.
func clientRate(d *Dist, h int, w, last float64) (rate float64, ok bool) {
	if w == 0 || last == 0 {
		return 0, false
	}
	if d.Shares != nil {
		return d.Shares[h], true
	}
	return w / last, true
}

// CheckOrder returns an error unless order is a permutation of 0..n-1.
func CheckOrder(order []int, n int) error {
	if len(order) != n {
		return fmt.Errorf("overlay: overlay of %d groups, want %d", len(order), n)
	}
	seen := make([]bool, n)
	for _, g := range order {
		if g < 0 || g >= n || seen[g] {
			return fmt.Errorf("overlay: overlay %v is not an order of the %d groups", order, n)
		}
		seen[g] = true
	}
	return nil
}

// FlexCast predicts FlexCast's answers with the overlay order (order[r] is
// the group of rank r).
func (m *Model) FlexCast(d *Dist, order []int) (Prediction, error) {
	if err := CheckOrder(order, d.N); err != nil {
		return Prediction{}, err
	}
	e := newFlexEval(m, order)
	return predict(d, e.answers), nil
}

// flexEval computes FlexCast's answers for one order.
type flexEval struct {
	m     *Model
	order []int
	rank  []int
	// per rank, scratch for one set: send and ack-out times, written for
	// the ranks of the set's span before they are read.
	send, ackOut []float64
	isDst        []bool
	sum          [SetGroupsMax]float64 // eval's sums over the flush's phases
	// work counts the inner steps of eval, the cost a search budgets.
	work int64
}

func newFlexEval(m *Model, order []int) *flexEval {
	n := len(order)
	e := &flexEval{m: m, order: order, rank: make([]int, n), send: make([]float64, n), ackOut: make([]float64, n), isDst: make([]bool, n)}
	for r, g := range order {
		e.rank[g] = r
	}
	return e
}

// answers computes the answers of s; ranks above top (the prefix of a
// partial order, see bound) are unknown and not computed.
func (e *flexEval) answers(s *Set, out []float64) {
	e.eval(s, len(e.order), out)
}

// eval computes the answer of every destination of s ranked below top,
// exactly, and a lower bound for the others (ranked top or above, in any
// order among themselves); out follows s.Groups. With a flush period it
// averages over flushPhases phases of the flush the answers of the sets
// that a flush can hold back.
func (e *flexEval) eval(s *Set, top int, out []float64) {
	m := e.m
	lo, hi := len(e.order), -1
	for _, g := range s.Groups {
		r := e.rank[g]
		e.isDst[r] = true
		lo, hi = min(lo, r), max(hi, r)
	}
	end := min(hi, top-1)
	e.work += int64(end-lo+1) * int64(end-lo+1)
	e.times(s, lo, end, top, -1, out)
	if m.FlushMs > 0 && e.flushHolds(lo, end) {
		clear(e.sum[:len(out)])
		for k := range flushPhases {
			u := (float64(k) + 0.5) * m.FlushMs / flushPhases
			e.times(s, lo, end, top, u, out)
			for i, v := range out {
				e.sum[i] += v
			}
		}
		for i := range out {
			out[i] = e.sum[i] / flushPhases
		}
		e.work += flushPhases * int64(end-lo+1) * int64(end-lo+1)
	}
	for _, g := range s.Groups {
		e.isDst[e.rank[g]] = false
	}
}

// flushHolds tells whether the last flush can hold back a destination of
// the set eval is on, ranked lo..end: whether the flush, delivered by the
// lca at its delivery of the message, reaches some destination after the
// message would be delivered there. The flush is acknowledged along the
// ranks (package flexcast): it reaches rank r a hop and a commit after rank
// r-1. Called after times without a phase, which leaves the delivery times
// in ackOut.
func (e *flexEval) flushHolds(lo, end int) bool {
	m := e.m
	at := e.send[lo]
	for r := lo + 1; r <= end; r++ {
		at += m.ow(e.order[r-1], e.order[r]) + m.CommitMs
		if e.isDst[r] && at > e.ackOut[r] {
			return true
		}
	}
	return false
}

// times computes the answers of s (see eval) with the last flush before
// the message delivered by the lca u ms before it (u < 0: no flush).
func (e *flexEval) times(s *Set, lo, end, top int, u float64, out []float64) {
	m, h := e.m, s.Home
	C := m.CommitMs
	d0 := e.order[lo]
	t0 := m.ow(h, d0) + C
	e.send[lo], e.ackOut[lo] = t0, t0
	flush := t0 - u
	for r := lo + 1; r <= end; r++ {
		x := e.order[r]
		flush += m.ow(e.order[r-1], x) + C
		if e.isDst[r] {
			t := 0.0
			for y := lo; y < r; y++ {
				if e.isDst[y] || m.Notifications {
					t = max(t, e.ackOut[y]+m.ow(e.order[y], x))
				}
			}
			t += C
			if u >= 0 {
				t = max(t, flush)
			}
			e.send[r], e.ackOut[r] = t, t
			continue
		}
		if !m.Notifications {
			continue
		}
		first, last := -1.0, 0.0
		for y := lo; y < r; y++ {
			a := e.send[y] + m.ow(e.order[y], x)
			if first < 0 || a < first {
				first = a
			}
			last = max(last, a)
		}
		e.send[r], e.ackOut[r] = first+C, last+C
	}
	for i, g := range s.Groups {
		r := e.rank[g]
		if r <= end {
			out[i] = e.ackOut[r] + m.ow(g, h)
			continue
		}
		// Ranked at top or above: it waits at least for everything ranked
		// below top in its span.
		t := 0.0
		for y := lo; y < top; y++ {
			if e.isDst[y] || m.Notifications {
				t = max(t, e.ackOut[y]+m.ow(e.order[y], g))
			}
		}
		out[i] = t + C + m.ow(g, h)
	}
}

// Skeen predicts the answers of Skeen's protocol.
func (m *Model) Skeen(d *Dist) Prediction {
	return predict(d, func(s *Set, out []float64) {
		h, C := s.Home, m.CommitMs
		entry := s.Groups[0]
		for _, g := range s.Groups {
			if m.ow(h, g) < m.ow(h, entry) {
				entry = g
			}
		}
		var prop [8]float64
		pe := m.ow(h, entry) + C
		for i, g := range s.Groups {
			prop[i] = pe
			if g != entry {
				prop[i] = pe + m.ow(entry, g) + C
			}
		}
		for i, g := range s.Groups {
			t := prop[i]
			for j, y := range s.Groups {
				if j != i {
					t = max(t, prop[j]+m.ow(y, g))
				}
			}
			out[i] = t + C + m.ow(g, h)
		}
	})
}

// CheckTree returns an error unless parent (parent[g], -1 for the root)
// is a tree over n groups.
func CheckTree(parent []int, n int) error {
	if len(parent) != n {
		return fmt.Errorf("overlay: tree of %d groups, want %d", len(parent), n)
	}
	roots := 0
	for g, p := range parent {
		if p == -1 {
			roots++
			continue
		}
		if p < 0 || p >= n || p == g {
			return fmt.Errorf("overlay: tree: group %d has parent %d", g, p)
		}
	}
	if roots != 1 {
		return fmt.Errorf("overlay: tree has %d roots, want 1", roots)
	}
	for g := range n {
		x := g
		for k := 0; parent[x] != -1; k++ {
			if k > n {
				return errors.New("overlay: tree has a cycle")
			}
			x = parent[x]
		}
	}
	return nil
}

// Tree predicts the answers of the tree protocol over parent (parent[g],
// -1 for the root).
func (m *Model) Tree(d *Dist, parent []int) (Prediction, error) {
	if err := CheckTree(parent, d.N); err != nil {
		return Prediction{}, err
	}
	depth := treeDepths(parent)
	return predict(d, func(s *Set, out []float64) { m.treeAnswers(parent, depth, s, out) }), nil
}

func treeDepths(parent []int) []int {
	depth := make([]int, len(parent))
	for g := range parent {
		for x := g; parent[x] != -1; x = parent[x] {
			depth[g]++
		}
	}
	return depth
}

func (m *Model) treeAnswers(parent, depth []int, s *Set, out []float64) {
	h, C := s.Home, m.CommitMs
	lca := s.Groups[0]
	for _, g := range s.Groups[1:] {
		a, b := lca, g
		for depth[a] > depth[b] {
			a = parent[a]
		}
		for depth[b] > depth[a] {
			b = parent[b]
		}
		for a != b {
			a, b = parent[a], parent[b]
		}
		lca = a
	}
	tl := m.ow(h, lca) + C
	for i, g := range s.Groups {
		t := 0.0
		for x := g; x != lca; x = parent[x] {
			t += m.ow(parent[x], x) + C
		}
		out[i] = tl + t + m.ow(g, h)
	}
}
