package overlay

import (
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"testing"

	"github.com/flexkv/flexkv/partition"
)

// randomMatrix returns n regions on a plane, round trips twice the
// distance plus noise, and a few ms inside each.
func randomMatrix(rng *rand.Rand, n int) [][]float64 {
	x, y := make([]float64, n), make([]float64, n)
	for i := range n {
		x[i], y[i] = rng.Float64()*150, rng.Float64()*100
	}
	m := make([][]float64, n)
	for i := range n {
		m[i] = make([]float64, n)
		for j := range n {
			if i == j {
				m[i][j] = 1 + 4*rng.Float64()
				continue
			}
			m[i][j] = 2*math.Hypot(x[i]-x[j], y[i]-y[j]) + 5*rng.Float64()
		}
	}
	return m
}

func aws12(t testing.TB) (*partition.Latency, [][]float64) {
	t.Helper()
	f, err := os.Open("../configs/aws-12-regions-latency-ms.csv")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	l, err := partition.ReadLatency(f)
	if err != nil {
		t.Fatal(err)
	}
	regs := l.Regions()
	rtt := make([][]float64, len(regs))
	for i, a := range regs {
		rtt[i] = make([]float64, len(regs))
		for j, b := range regs {
			rtt[i][j] = l.RTTMs(a, b)
		}
	}
	return l, rtt
}

func paperOrder(t testing.TB, l *partition.Latency, name string) []int {
	t.Helper()
	o, err := partition.PaperOverlay(name)
	if err != nil {
		t.Fatal(err)
	}
	regs := l.Regions()
	order := make([]int, len(o))
	for r, g := range o {
		order[r] = slices.Index(regs, g)
	}
	return order
}

// paperTree returns the paper's tree name as parents by region index.
func paperTree(t testing.TB, l *partition.Latency, name string) []int {
	t.Helper()
	tree, err := partition.PaperTree(name)
	if err != nil {
		t.Fatal(err)
	}
	return TreeParents(tree, l.Regions())
}

var paperWorkload = Workload{Locality: 0.99, RemoteItem: 0.02, RemotePayment: 0.15, GlobalOnly: true}

func TestDestinationsSumToOne(t *testing.T) {
	_, rtt := aws12(t)
	for _, w := range []Workload{paperWorkload, {Locality: 0.9, RemoteItem: 0.01, RemotePayment: 0.15}, {Locality: 0, RemoteItem: 0.3, RemotePayment: 1, GlobalOnly: true}} {
		d, err := Destinations(rtt, w)
		if err != nil {
			t.Fatal(err)
		}
		sum := make([]float64, d.N)
		for _, s := range d.Sets {
			if !slices.Contains(s.Groups, s.Home) || !slices.IsSorted(s.Groups) || len(s.Groups) > AnswersMax {
				t.Fatalf("%+v: set %v of home %d", w, s.Groups, s.Home)
			}
			if w.GlobalOnly && len(s.Groups) < 2 {
				t.Fatalf("%+v: local set %v under global-only", w, s.Groups)
			}
			sum[s.Home] += s.Prob
		}
		for h, v := range sum {
			if math.Abs(v-1) > 1e-9 {
				t.Errorf("%+v: home %d: probabilities sum to %v, want 1", w, h, v)
			}
		}
	}
}

func TestDestinationsBadWorkload(t *testing.T) {
	_, rtt := aws12(t)
	for _, w := range []Workload{{Locality: 1.5}, {RemoteItem: -1}, {RemotePayment: math.NaN()}, {GlobalOnly: true}} {
		if _, err := Destinations(rtt, w); err == nil {
			t.Errorf("%+v: no error", w)
		}
	}
}

// permute calls f with every permutation of 0..n-1.
func permute(n int, f func([]int)) {
	p := make([]int, n)
	for i := range p {
		p[i] = i
	}
	var rec func(k int)
	rec = func(k int) {
		if k == n {
			f(p)
			return
		}
		for i := k; i < n; i++ {
			p[k], p[i] = p[i], p[k]
			rec(k + 1)
			p[k], p[i] = p[i], p[k]
		}
	}
	rec(0)
}

func TestBranchAndBoundAgreesWithBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(12, 6))
	for c := range 20 {
		rtt := randomMatrix(rng, 6)
		w := Workload{Locality: rng.Float64(), RemoteItem: 0.05 + 0.3*rng.Float64(), RemotePayment: 0.15, GlobalOnly: c%2 == 0}
		d, err := Destinations(rtt, w)
		if err != nil {
			t.Fatal(err)
		}
		m := &Model{RTTMs: rtt, CommitMs: float64(c % 3), Notifications: c%4 == 3, FlushMs: []float64{0, 400, 80}[c%3]}
		for _, obj := range []Objective{First, Last, Mean} {
			for _, lastW := range []float64{0, 0.25} {
				identity := []int{0, 1, 2, 3, 4, 5}
				f := newFixed(m, d, homeRates(d, newFlexEval(m, identity).answers), obj, lastW)
				brute := math.Inf(1)
				permute(6, func(p []int) { brute = min(brute, f.score(p)) })
				got := f.score(f.branchAndBound(identity))
				if math.Abs(got-brute) > 1e-9 {
					t.Errorf("case %d %v last weight %v: branch and bound %v, brute force %v", c, obj, lastW, got, brute)
				}
			}
		}
	}
}

// TestFlexCastAnswersByHand checks the model on four groups in a row, one
// ms apart (round trip 2), a message from group 0 to {0, 3}, commits of 2
// ms: the lca 0 delivers at C = 2 and answers at once, group 3 delivers a
// commit after 0's ACK (at 5) and answers 3 ms later. With Notifications,
// group 1 hears from 0 at 3 and answers at 5; group 2 hears from 0 at 4
// and from 1 at 6 and answers at 8, so 3 delivers at 9 + C.
// With a flush every 8 ms, the lca delivered the last flush u ms before the
// message, u uniform in [0, 8): the flush reaches group 3 along the ranks,
// a hop and a commit a rank, 9 ms after the lca, at 11 - u; without
// notifications group 3 delivers at max(7, 11 - u), 8 on average (11 - u,
// 9 on average, for u below 4; 7 above), and answers at 11; with them it
// delivers at 11, which the flush never delays.
func TestFlexCastAnswersByHand(t *testing.T) {
	rtt := make([][]float64, 4)
	for i := range rtt {
		rtt[i] = make([]float64, 4)
		for j := range rtt[i] {
			rtt[i][j] = 2 * math.Abs(float64(i-j))
		}
	}
	d := &Dist{N: 4, Sets: []Set{{Home: 0, Groups: []int{0, 3}, Prob: 1}}}
	for _, c := range []struct {
		notifs       bool
		flushMs      float64
		first, last  float64
		reversedLast float64 // ranked 3, 2, 1, 0
	}{
		{false, 0, 2, 5 + 2 + 3, 3 + 2 + 3 + 2 + 0},
		{true, 0, 2, 9 + 2 + 3, 14},
		{false, 8, 2, 8 + 3, 11},
		{true, 8, 2, 9 + 2 + 3, 14},
	} {
		m := &Model{RTTMs: rtt, CommitMs: 2, Notifications: c.notifs, FlushMs: c.flushMs}
		p, err := m.FlexCast(d, []int{0, 1, 2, 3})
		if err != nil {
			t.Fatal(err)
		}
		if p.FirstMs != c.first || p.LastMs != c.last {
			t.Errorf("notifications %v, flush %v: answers %v and %v, want %v and %v", c.notifs, c.flushMs, p.FirstMs, p.LastMs, c.first, c.last)
		}
		// Ranked 3, 2, 1, 0 the lca is 3 (delivers at 5): its answer takes
		// the round trip; group 0 hears from it at 8 and answers at 10, or,
		// with the flush, at max(10, 5 - u + 9), 11 on average. With
		// Notifications group 2 answers at 8, group 1 at 11 (it hears from
		// 2 at 9), and group 0 delivers at 12 + C = 14.
		if p, _ := m.FlexCast(d, []int{3, 2, 1, 0}); p.FirstMs != 3+2+3 || p.LastMs != c.reversedLast {
			t.Errorf("notifications %v, flush %v, reversed: answers %v and %v, want 8 and %v", c.notifs, c.flushMs, p.FirstMs, p.LastMs, c.reversedLast)
		}
	}
}

// TestUntouchedSetsKeepTheirAnswers: the annealing recomputes after a move
// only the sets whose rank span meets the ranks it changed; every other
// set's answers must not depend on the move (the flush's path runs inside
// the span).
func TestUntouchedSetsKeepTheirAnswers(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 4))
	for c := range 30 {
		n := 5 + c%8
		rtt := randomMatrix(rng, n)
		d, err := Destinations(rtt, Workload{Locality: rng.Float64(), RemoteItem: 0.05 + 0.3*rng.Float64(), RemotePayment: 0.3, GlobalOnly: c%2 == 0})
		if err != nil {
			t.Fatal(err)
		}
		m := &Model{RTTMs: rtt, CommitMs: float64(c % 3), Notifications: c%4 == 3, FlushMs: []float64{0, 60, 400}[c%3]}
		order := rng.Perm(n)
		before := newFlexEval(m, slices.Clone(order))
		a, b := rng.IntN(n), rng.IntN(n)
		moved := slices.Clone(order)
		if c%2 == 0 {
			moved[a], moved[b] = moved[b], moved[a]
		} else {
			g := moved[a]
			moved = slices.Insert(slices.Delete(moved, a, a+1), b, g)
		}
		after := newFlexEval(m, moved)
		x, y := min(a, b), max(a, b)
		for i := range d.Sets {
			s := &d.Sets[i]
			lo, hi := n, -1
			for _, g := range s.Groups {
				lo, hi = min(lo, before.rank[g]), max(hi, before.rank[g])
			}
			if hi >= x && lo <= y {
				continue
			}
			p, q := make([]float64, len(s.Groups)), make([]float64, len(s.Groups))
			before.answers(s, p)
			after.answers(s, q)
			if !slices.Equal(p, q) {
				t.Fatalf("case %d: set %v of home %d outside ranks %d..%d: answers %v, after the move %v", c, s.Groups, s.Home, x, y, p, q)
			}
		}
	}
}

func TestBoundIsALowerBound(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	rtt := randomMatrix(rng, 6)
	d, _ := Destinations(rtt, Workload{Locality: 0.5, RemoteItem: 0.2, RemotePayment: 0.3})
	for _, m := range []*Model{{RTTMs: rtt, CommitMs: 1, Notifications: true}, {RTTMs: rtt, CommitMs: 1, FlushMs: 100}, {RTTMs: rtt, CommitMs: 1, Notifications: true, FlushMs: 30}} {
		f := newFixed(m, d, homeRates(d, newFlexEval(m, []int{0, 1, 2, 3, 4, 5}).answers), Mean, 0.25)
		permute(6, func(p []int) {
			full := f.score(p)
			e := newFlexEval(m, slices.Clone(p))
			for top := range 6 {
				if b := f.bound(e, top); b > full+1e-9 {
					t.Fatalf("%+v order %v: bound at prefix %d is %v, above the order's %v", *m, p, top, b, full)
				}
			}
		})
	}
}

func TestSuggestNeverWorseThanO1OnAWS12(t *testing.T) {
	l, rtt := aws12(t)
	o1 := paperOrder(t, l, "O1")
	for _, w := range []Workload{paperWorkload, {Locality: 0.9, RemoteItem: 0.01, RemotePayment: 0.15}} {
		d, err := Destinations(rtt, w)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range []*Model{{RTTMs: rtt, CommitMs: 2, FlushMs: 400}, {RTTMs: rtt, CommitMs: 1, Notifications: true}} {
			base, _ := m.FlexCast(d, o1)
			for _, obj := range []Objective{First, Last, Mean} {
				res, err := m.SuggestOverlay(d, [][]int{o1}, Options{Objective: obj, Steps: 3000}, rand.New(rand.NewPCG(1, 1)))
				if err != nil {
					t.Fatal(err)
				}
				if got, want := res.Prediction.Score(obj), base.Score(obj); got > want+1e-9 {
					t.Errorf("%+v notifications %v flush %v %v: suggestion %v, worse than O1's %v", w, m.Notifications, m.FlushMs, obj, got, want)
				}
			}
		}
	}
}

// TestKeepLast: the first answer as low as it goes with the last kept at
// O1's, against first alone, which gives the last answer up.
func TestKeepLast(t *testing.T) {
	l, rtt := aws12(t)
	o1 := paperOrder(t, l, "O1")
	d, err := Destinations(rtt, paperWorkload)
	if err != nil {
		t.Fatal(err)
	}
	m := &Model{RTTMs: rtt, CommitMs: 1, Notifications: true}
	base, _ := m.FlexCast(d, o1)
	free, err := m.SuggestOverlay(d, [][]int{o1}, Options{Objective: First, Steps: 3000}, rand.New(rand.NewPCG(1, 1)))
	if err != nil {
		t.Fatal(err)
	}
	kept, err := m.SuggestOverlay(d, [][]int{o1}, Options{Objective: First, Steps: 3000, KeepLast: true, HomeSlack: HomeSlackDefault}, rand.New(rand.NewPCG(1, 1)))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("O1 %.1f / %.1f ms, first alone %.1f / %.1f, keeping the last %.1f / %.1f",
		base.FirstMs, base.LastMs, free.Prediction.FirstMs, free.Prediction.LastMs, kept.Prediction.FirstMs, kept.Prediction.LastMs)
	if free.Prediction.LastMs <= base.LastMs {
		t.Fatalf("first alone keeps O1's last answer (%v <= %v): the case tests nothing", free.Prediction.LastMs, base.LastMs)
	}
	if kept.Prediction.LastMs > base.LastMs+1e-9 {
		t.Errorf("KeepLast: last answer %v, above O1's %v", kept.Prediction.LastMs, base.LastMs)
	}
	if kept.Prediction.FirstMs > base.FirstMs/1.3 {
		t.Errorf("KeepLast: first answer %v, not a quarter below O1's %v", kept.Prediction.FirstMs, base.FirstMs)
	}
	for h, b := range base.HomeLastMs {
		if got := kept.Prediction.HomeLastMs[h]; got > b*(1+HomeSlackDefault)+1e-9 {
			t.Errorf("KeepLast: client %d's last answer %v, above O1's %v by more than the slack", h, got, b)
		}
	}
	parent := paperTree(t, l, "T1")
	t1p, _ := m.Tree(d, parent)
	tr, err := m.SuggestTree(d, [][]int{parent}, Options{Objective: First, Steps: 2000, KeepLast: true, HomeSlack: HomeSlackDefault}, rand.New(rand.NewPCG(1, 1)))
	if err != nil {
		t.Fatal(err)
	}
	if tr.Prediction.LastMs > t1p.LastMs+1e-9 || tr.Prediction.FirstMs > t1p.FirstMs {
		t.Errorf("tree with KeepLast: %v / %v ms, T1 %v / %v", tr.Prediction.FirstMs, tr.Prediction.LastMs, t1p.FirstMs, t1p.LastMs)
	}
}

// TestKeepLastBoundsEveryClient: on aws-12 at the paper's 0.99 locality,
// keeping only the mean last answer (HomeSlack -1) lets the search slow
// some region's clients down more than three times over for a low first
// answer (slow clients complete fewer transactions, and weigh less in the
// mean); the default keeps each within twice its last answer under O1,
// and a fifth within 1.2 times, each still lowering the first answer.
func TestKeepLastBoundsEveryClient(t *testing.T) {
	l, rtt := aws12(t)
	o1 := paperOrder(t, l, "O1")
	d, err := Destinations(rtt, Workload{Locality: 0.99, RemoteItem: 0.02, RemotePayment: 0.15, GlobalOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	m := &Model{RTTMs: rtt, CommitMs: 2, Notifications: true}
	base, _ := m.FlexCast(d, o1)
	worst := func(p Prediction) (float64, string) {
		x, at := 0.0, ""
		for h, b := range base.HomeLastMs {
			if r := p.HomeLastMs[h] / b; r > x {
				x, at = r, l.Regions()[h]
			}
		}
		return x, at
	}
	for _, c := range []struct {
		slack      float64
		bounded    bool
		firstBelow float64
	}{{-1, false, 11}, {HomeSlackDefault, true, 13}, {0.2, true, 17}} {
		res, err := m.SuggestOverlay(d, [][]int{o1}, Options{Objective: First, KeepLast: true, HomeSlack: c.slack, Steps: 10000}, rand.New(rand.NewPCG(1, 1)))
		if err != nil {
			t.Fatal(err)
		}
		x, at := worst(res.Prediction)
		t.Logf("slack %v: %.1f / %.1f ms (O1 %.1f / %.1f), slowest client %s x%.2f", c.slack, res.Prediction.FirstMs, res.Prediction.LastMs, base.FirstMs, base.LastMs, at, x)
		if res.Prediction.LastMs > base.LastMs+1e-9 {
			t.Errorf("slack %v: mean last answer %v, above O1's %v", c.slack, res.Prediction.LastMs, base.LastMs)
		}
		if res.Prediction.FirstMs >= c.firstBelow {
			t.Errorf("slack %v: first answer %v, want below %v", c.slack, res.Prediction.FirstMs, c.firstBelow)
		}
		if c.bounded && x > 1+c.slack+1e-9 {
			t.Errorf("slack %v: %s's clients wait x%.2f their last answer under O1", c.slack, at, x)
		}
		if !c.bounded && x < 3 {
			t.Errorf("slack %v: the slowest client waits x%.2f its last answer under O1: the case no longer shows what the bound is for", c.slack, x)
		}
	}
}

// TestKeepLastNeverWorseThanStart: with KeepLast the suggestion keeps the
// start's last answer and never scores worse than the start on the
// objective, whatever the weighted searches traded (random 5-group cases,
// random starts).
func TestKeepLastNeverWorseThanStart(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 4))
	for c := range 150 {
		rtt := randomMatrix(rng, 5)
		d, err := Destinations(rtt, Workload{Locality: rng.Float64(), RemoteItem: 0.1 + 0.3*rng.Float64(), RemotePayment: 0.5, GlobalOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		m := &Model{RTTMs: rtt, CommitMs: 1, Notifications: true}
		start := rng.Perm(5)
		base, _ := m.FlexCast(d, start)
		for _, obj := range []Objective{First, Mean} {
			// Branch and bound (5 groups), and the annealing with its
			// closed-loop scoring and bounded last answer (ExactMax -1).
			for _, exactMax := range []int{0, -1} {
				if exactMax < 0 && c%5 != 0 {
					continue
				}
				opt := Options{Objective: obj, KeepLast: true, HomeSlack: HomeSlackDefault, ExactMax: exactMax, Steps: 2000}
				res, err := m.SuggestOverlay(d, [][]int{start}, opt, rand.New(rand.NewPCG(1, uint64(c))))
				if err != nil {
					t.Fatal(err)
				}
				if p := res.Prediction; p.LastMs > base.LastMs+1e-9 || p.Score(obj) > base.Score(obj)+1e-9 {
					t.Fatalf("case %d %v exact max %d: suggestion %v scores %v, last %v; start %v scores %v, last %v",
						c, obj, exactMax, res.Order, p.Score(obj), p.LastMs, start, base.Score(obj), base.LastMs)
				}
				for h, b := range base.HomeLastMs {
					if got := res.Prediction.HomeLastMs[h]; got > b*(1+HomeSlackDefault)+1e-9 {
						t.Fatalf("case %d %v exact max %d: suggestion %v: client %d's last answer %v, above the start's %v by more than the slack",
							c, obj, exactMax, res.Order, h, got, b)
					}
				}
			}
		}
	}
}

// TestClosedLoopMatchesPredict: the annealing's per-home sums give the
// objective and the last answer that predict gives, for generated and
// for counted distributions (Shares).
func TestClosedLoopMatchesPredict(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 9))
	for c := range 40 {
		n := 4 + c%6
		rtt := randomMatrix(rng, n)
		d, err := Destinations(rtt, Workload{Locality: rng.Float64(), RemoteItem: 0.05 + 0.3*rng.Float64(), RemotePayment: 0.3, GlobalOnly: c%2 == 0})
		if err != nil {
			t.Fatal(err)
		}
		if c%3 == 0 {
			d.Shares = make([]float64, n)
			for h := range n {
				d.Shares[h] = rng.Float64()
			}
		}
		m := &Model{RTTMs: rtt, CommitMs: float64(c % 3), Notifications: c%2 == 1, FlushMs: []float64{400, 0, 50, 120}[c%4]}
		order := rng.Perm(n)
		want, err := m.FlexCast(d, order)
		if err != nil {
			t.Fatal(err)
		}
		for _, obj := range []Objective{First, Last, Mean} {
			f := newFixed(m, d, homeRates(d, newFlexEval(m, order).answers), obj, 0)
			e := newFlexEval(m, order)
			w, v, l := make([]float64, n), make([]float64, n), make([]float64, n)
			for i := range d.Sets {
				s := &d.Sets[i]
				out := make([]float64, len(s.Groups))
				e.answers(s, out)
				w[s.Home] += s.Prob
				v[s.Home] += s.Prob * f.objective(out)
				l[s.Home] += s.Prob * slices.Max(out)
			}
			got, last := f.closedLoop(w, v, l)
			if math.Abs(got-want.Score(obj)) > 1e-9 || math.Abs(last-want.LastMs) > 1e-9 {
				t.Fatalf("case %d %v: closed loop %v / last %v, predict %v / %v", c, obj, got, last, want.Score(obj), want.LastMs)
			}
		}
	}
}

func TestSuggestDeterministic(t *testing.T) {
	rtt := randomMatrix(rand.New(rand.NewPCG(5, 5)), 16)
	d, _ := Destinations(rtt, Workload{Locality: 0.9, RemoteItem: 0.02, RemotePayment: 0.15, GlobalOnly: true})
	m := &Model{RTTMs: rtt, CommitMs: 1, Notifications: true}
	run := func() ([]int, []int) {
		rng := rand.New(rand.NewPCG(7, 7))
		o, err := m.SuggestOverlay(d, nil, Options{Objective: Mean, Steps: 2000}, rng)
		if err != nil {
			t.Fatal(err)
		}
		tr, err := m.SuggestTree(d, nil, Options{Objective: Mean, Steps: 500}, rng)
		if err != nil {
			t.Fatal(err)
		}
		if err := CheckTree(tr.Parent, d.N); err != nil {
			t.Fatal(err)
		}
		return o.Order, tr.Parent
	}
	o1, t1 := run()
	o2, t2 := run()
	if !slices.Equal(o1, o2) || !slices.Equal(t1, t2) {
		t.Errorf("same seed, different results: %v %v, then %v %v", o1, t1, o2, t2)
	}
}

func TestTreeNeverWorseThanStarts(t *testing.T) {
	l, rtt := aws12(t)
	d, _ := Destinations(rtt, paperWorkload)
	m := &Model{RTTMs: rtt, CommitMs: 1, Notifications: true}
	parent := paperTree(t, l, "T1")
	base, err := m.Tree(d, parent)
	if err != nil {
		t.Fatal(err)
	}
	res, err := m.SuggestTree(d, [][]int{parent}, Options{Objective: Mean, Steps: 2000}, rand.New(rand.NewPCG(1, 1)))
	if err != nil {
		t.Fatal(err)
	}
	if res.Prediction.MeanMs > base.MeanMs+1e-9 {
		t.Errorf("suggested tree %v, worse than T1's %v", res.Prediction.MeanMs, base.MeanMs)
	}
}

// BenchmarkSuggest64 is `suggest` at 64 random groups, overlay and tree
// with the default steps and KeepLast against the identity order and the
// star: DESIGN 7 wants it under 10 s.
func BenchmarkSuggest64(b *testing.B) {
	rtt := randomMatrix(rand.New(rand.NewPCG(64, 64)), 64)
	w := Workload{Locality: 0.9, RemoteItem: 0.02, RemotePayment: 0.15, GlobalOnly: true}
	// flexkv's model: the servers' 400 ms flush, no notifications.
	m := &Model{RTTMs: rtt, CommitMs: 2, FlushMs: 400}
	for b.Loop() {
		d, err := Destinations(rtt, w)
		if err != nil {
			b.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(1, 1))
		identity := make([]int, d.N)
		for i := range identity {
			identity[i] = i
		}
		if _, err := m.SuggestOverlay(d, [][]int{identity}, Options{Objective: Mean, KeepLast: true, HomeSlack: HomeSlackDefault}, rng); err != nil {
			b.Fatal(err)
		}
		if _, err := m.SuggestTree(d, nil, Options{Objective: Mean, KeepLast: true, HomeSlack: HomeSlackDefault}, rng); err != nil {
			b.Fatal(err)
		}
	}
}
