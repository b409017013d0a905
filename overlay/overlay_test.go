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
		m := &Model{RTTMs: rtt, CommitMs: float64(c % 3), Notifications: c%4 != 3}
		for _, obj := range []Objective{First, Last, Mean} {
			identity := []int{0, 1, 2, 3, 4, 5}
			f := newFixed(m, d, homeRates(d, newFlexEval(m, identity).answers), obj)
			brute := math.Inf(1)
			permute(6, func(p []int) { brute = min(brute, f.score(p)) })
			got := f.score(f.branchAndBound(identity))
			if math.Abs(got-brute) > 1e-9 {
				t.Errorf("case %d %v: branch and bound %v, brute force %v", c, obj, got, brute)
			}
		}
	}
}

func TestBoundIsALowerBound(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	rtt := randomMatrix(rng, 6)
	d, _ := Destinations(rtt, Workload{Locality: 0.5, RemoteItem: 0.2, RemotePayment: 0.3})
	m := &Model{RTTMs: rtt, CommitMs: 1, Notifications: true}
	f := newFixed(m, d, homeRates(d, newFlexEval(m, []int{0, 1, 2, 3, 4, 5}).answers), Mean)
	permute(6, func(p []int) {
		full := f.score(p)
		e := newFlexEval(m, slices.Clone(p))
		for top := range 6 {
			if b := f.bound(e, top); b > full+1e-9 {
				t.Fatalf("order %v: bound at prefix %d is %v, above the order's %v", p, top, b, full)
			}
		}
	})
}

func TestSuggestNeverWorseThanO1OnAWS12(t *testing.T) {
	l, rtt := aws12(t)
	o1 := paperOrder(t, l, "O1")
	for _, w := range []Workload{paperWorkload, {Locality: 0.9, RemoteItem: 0.01, RemotePayment: 0.15}} {
		d, err := Destinations(rtt, w)
		if err != nil {
			t.Fatal(err)
		}
		m := &Model{RTTMs: rtt, CommitMs: 1, Notifications: true}
		base, _ := m.FlexCast(d, o1)
		for _, obj := range []Objective{First, Last, Mean} {
			res, err := m.SuggestOverlay(d, [][]int{o1}, Options{Objective: obj, Steps: 3000}, rand.New(rand.NewPCG(1, 1)))
			if err != nil {
				t.Fatal(err)
			}
			if got, want := res.Prediction.Score(obj), base.Score(obj); got > want+1e-9 {
				t.Errorf("%+v %v: suggestion %v, worse than O1's %v", w, obj, got, want)
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
	regs := l.Regions()
	tree, _ := partition.PaperTree("T1")
	parent := make([]int, len(regs))
	for i, r := range regs {
		parent[i] = -1
		if p, ok := tree[r]; ok {
			parent[i] = slices.Index(regs, p)
		}
	}
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
// with the default steps: DESIGN 7 wants it under 10 s.
func BenchmarkSuggest64(b *testing.B) {
	rtt := randomMatrix(rand.New(rand.NewPCG(64, 64)), 64)
	w := Workload{Locality: 0.9, RemoteItem: 0.02, RemotePayment: 0.15, GlobalOnly: true}
	m := &Model{RTTMs: rtt, CommitMs: 1, Notifications: true}
	for b.Loop() {
		d, err := Destinations(rtt, w)
		if err != nil {
			b.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(1, 1))
		if _, err := m.SuggestOverlay(d, nil, Options{Objective: Mean}, rng); err != nil {
			b.Fatal(err)
		}
		if _, err := m.SuggestTree(d, nil, Options{Objective: Mean}, rng); err != nil {
			b.Fatal(err)
		}
	}
}
