package overlay

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// countsOf turns d into counted sets as a run would count them: each
// home's share of the transactions is its closed-loop rate under order.
func countsOf(t *testing.T, m *Model, d *Dist, order []int, names []string) []CountedSet {
	t.Helper()
	rate := homeRates(d, newFlexEval(m, order).answers)
	sum := 0.0
	for _, r := range rate {
		sum += r
	}
	var out []CountedSet
	for _, s := range d.Sets {
		cs := CountedSet{Home: names[s.Home], Count: int64(math.Round(1e12 * rate[s.Home] / sum * s.Prob))}
		for _, g := range s.Groups {
			cs.Groups = append(cs.Groups, names[g])
		}
		out = append(out, cs)
	}
	return out
}

// TestCountedSetsPredictAsTheirWorkload: sets counted from a run of the
// generator's own distribution predict what the distribution predicts.
func TestCountedSetsPredictAsTheirWorkload(t *testing.T) {
	l, rtt := aws12(t)
	names := l.Regions()
	d, err := Destinations(rtt, paperWorkload)
	if err != nil {
		t.Fatal(err)
	}
	m := &Model{RTTMs: rtt, CommitMs: 1, Notifications: true}
	o1 := paperOrder(t, l, "O1")
	b, err := json.Marshal(map[string]any{"protocol": "flexcast", "destination_sets": countsOf(t, m, d, o1, names)})
	if err != nil {
		t.Fatal(err)
	}
	c, err := ReadSets(strings.NewReader(string(b)), names)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Sets) != len(d.Sets) {
		t.Fatalf("%d counted sets, want %d", len(c.Sets), len(d.Sets))
	}
	want, err := m.FlexCast(d, o1)
	if err != nil {
		t.Fatal(err)
	}
	got, err := m.FlexCast(c, o1)
	if err != nil {
		t.Fatal(err)
	}
	for k := range AnswersMax {
		if math.Abs(got.AnswerMs[k]-want.AnswerMs[k]) > 1e-6*want.AnswerMs[k] {
			t.Errorf("answer %d: counted %.6f ms, generated %.6f ms", k+1, got.AnswerMs[k], want.AnswerMs[k])
		}
	}
	if math.Abs(got.LastMs-want.LastMs) > 1e-6*want.LastMs {
		t.Errorf("last: counted %.6f ms, generated %.6f ms", got.LastMs, want.LastMs)
	}
	// Under another order the weights stay the counts': the prediction is
	// the plain mean over the counted transactions (a closed-loop
	// reweighting by O2's rates would move it).
	o2 := paperOrder(t, l, "O2")
	got2, err := m.FlexCast(c, o2)
	if err != nil {
		t.Fatal(err)
	}
	e := newFlexEval(m, o2)
	var sum, w [AnswersMax]float64
	for _, s := range c.Sets {
		out := make([]float64, len(s.Groups))
		e.answers(&s, out)
		slices.Sort(out)
		for k := range min(len(out), AnswersMax) {
			sum[k] += c.Shares[s.Home] * s.Prob * out[k]
			w[k] += c.Shares[s.Home] * s.Prob
		}
	}
	for k := range AnswersMax {
		if want := sum[k] / w[k]; math.Abs(got2.AnswerMs[k]-want) > 1e-9*want {
			t.Errorf("O2 answer %d: %.6f ms, the counted transactions' mean is %.6f ms", k+1, got2.AnswerMs[k], want)
		}
	}
	// The weights are the counts': a search on them still finds an order
	// at least as good as O1.
	best, err := m.SuggestOverlay(c, [][]int{o1}, Options{Objective: Mean}, rand.New(rand.NewPCG(1, 2)))
	if err != nil {
		t.Fatal(err)
	}
	if best.Prediction.MeanMs > got.MeanMs+1e-9 {
		t.Errorf("suggested mean %.3f ms, worse than O1's %.3f", best.Prediction.MeanMs, got.MeanMs)
	}
}

func TestCountedSetsMerge(t *testing.T) {
	names := []string{"a", "b", "c"}
	d, err := CountedDist([]CountedSet{
		{Home: "a", Groups: []string{"b", "a"}, Count: 2},
		{Home: "a", Groups: []string{"a", "b"}, Count: 1},
		{Home: "a", Groups: []string{"a"}, Count: 1},
		{Home: "c", Groups: []string{"a", "c"}, Count: 4},
		{Home: "b", Groups: []string{"b"}, Count: 0},
	}, names)
	if err != nil {
		t.Fatal(err)
	}
	want := []Set{{Home: 0, Groups: []int{0, 1}, Prob: 0.75}, {Home: 0, Groups: []int{0}, Prob: 0.25}, {Home: 2, Groups: []int{0, 2}, Prob: 1}}
	if len(d.Sets) != len(want) {
		t.Fatalf("sets %+v, want %+v", d.Sets, want)
	}
	for i, s := range d.Sets {
		if s.Home != want[i].Home || !slices.Equal(s.Groups, want[i].Groups) || s.Prob != want[i].Prob {
			t.Errorf("set %d: %+v, want %+v", i, s, want[i])
		}
	}
	if d.Shares[0] != 0.5 || d.Shares[1] != 0 || d.Shares[2] != 0.5 {
		t.Errorf("shares %v, want [0.5 0 0.5]", d.Shares)
	}
}

func TestReadSetsErrors(t *testing.T) {
	names := []string{"a", "b", "c"}
	for _, tc := range []struct{ in, want string }{
		{`{"protocol":"flexcast"}`, `no "destination_sets" list`},
		{`{"destination_sets":[]}`, "no transaction counted"},
		{`{"destination_sets":[{"home":"x","groups":["a"],"count":1}]}`, `home "x" is not a group`},
		{`{"destination_sets":[{"home":"a","groups":["a","z"],"count":1}]}`, `group "z" is not a group`},
		{`{"destination_sets":[{"home":"a","groups":["a","a"],"count":1}]}`, `group "a" twice`},
		{`{"destination_sets":[{"home":"a","groups":[],"count":1}]}`, "0 groups, want 1..8"},
		{`{"destination_sets":[{"home":"a","groups":["a"],"count":-1}]}`, "count -1"},
		{`{"destination_sets":[`, "destination sets: unexpected EOF"},
	} {
		_, err := ReadSets(strings.NewReader(tc.in), names)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", tc.in, err, tc.want)
		}
	}
}
