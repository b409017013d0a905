package overlay

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
)

// Workload is what Destinations needs of a gTPC-C run (gtpcc.WorkloadConfig).
type Workload struct {
	Locality      float64 // in 0..1
	RemoteItem    float64 // in 0..1
	RemotePayment float64 // in 0..1
	// GlobalOnly keeps only transactions of two or three groups, as the
	// paper's latency runs (and `gtpcc run --global-only`) did.
	GlobalOnly bool
}

// The gTPC-C generator's constants (gtpcc/workload.go, DESIGN 9).
const (
	mixNewOrder   = 45
	mixPayment    = 43
	mixLocal      = 12 // order-status, delivery and stock-level
	linesMin      = 5
	linesMax      = 15
	globalGroups  = 3
	remoteSetsMax = 2 // remote warehouses of a set the model keeps
)

// SetProbMin is the smallest probability, for its client, of a destination
// set that Destinations keeps.
const SetProbMin = 1e-5

// Set is one destination set of one client, with its probability among
// that client's transactions.
type Set struct {
	Home   int   // the client's group: an index of the matrix
	Groups []int // the destinations, ascending, Home among them
	Prob   float64
}

// SetGroupsMax bounds the groups of one destination set.
const SetGroupsMax = 8

// Dist is the distribution of destination sets of every client.
type Dist struct {
	N    int   // groups
	Sets []Set // by home, then as generated; each home's Probs sum to 1
	// Shares, when not nil, is each home's share of all transactions
	// (summing to 1), as counted in a run (ReadSets): the counts already
	// hold the closed loop, so the model weighs each home by its share
	// instead of by its rate 1/E[last answer].
	Shares []float64
}

// Validate returns an error unless w's probabilities are in 0..1 and a
// GlobalOnly workload can draw a global transaction.
func (w Workload) Validate() error {
	for _, p := range []struct {
		name string
		v    float64
	}{{"locality", w.Locality}, {"remote-item", w.RemoteItem}, {"remote-payment", w.RemotePayment}} {
		if !(p.v >= 0 && p.v <= 1) {
			return fmt.Errorf("overlay: %s %v, want 0..1", p.name, p.v)
		}
	}
	if w.GlobalOnly && (w.RemoteItem == 0 || w.RemotePayment == 0) {
		return errors.New("overlay: a global-only workload needs remote-item and remote-payment above 0")
	}
	return nil
}

// Destinations returns the distribution of destination sets of w over the
// groups of rttMs (round trips in ms, square), one client per group (see
// the package comment for the rules).
func Destinations(rttMs [][]float64, w Workload) (*Dist, error) {
	if err := w.Validate(); err != nil {
		return nil, err
	}
	n := len(rttMs)
	if err := checkMatrix(rttMs); err != nil {
		return nil, err
	}
	if n < 2 {
		return nil, errors.New("overlay: want two groups or more")
	}
	d := &Dist{N: n}
	for h := range n {
		d.Sets = append(d.Sets, homeSets(rttMs, h, w)...)
	}
	return d, nil
}

func checkMatrix(rttMs [][]float64) error {
	n := len(rttMs)
	if n == 0 || n > 64 {
		return fmt.Errorf("overlay: %d groups, want 1..64", n)
	}
	for i, row := range rttMs {
		if len(row) != n {
			return fmt.Errorf("overlay: latency matrix row %d has %d columns, want %d", i, len(row), n)
		}
		for j, v := range row {
			if !(v >= 0) || math.IsInf(v, 0) {
				return fmt.Errorf("overlay: latency %d to %d is %v, want a finite value >= 0", i, j, v)
			}
		}
	}
	return nil
}

// homeSets returns the sets of the client of group h.
func homeSets(rttMs [][]float64, h int, w Workload) []Set {
	remotes := nearestRemotes(rttMs, h)
	q := nearestProbs(len(remotes), w.Locality)
	lines := remoteLinesProbs(w.RemoteItem)
	// Weights, before normalising, of: a local transaction, a payment to
	// each remote, a new-order to each remote and to each pair of remotes.
	local, payRemote, newOrder := 0.0, mixPayment*w.RemotePayment, mixNewOrder*(1-lines[0])
	if w.GlobalOnly {
		payRemote, newOrder = mixPayment, mixNewOrder
	} else {
		local = mixLocal + mixPayment*(1-w.RemotePayment) + mixNewOrder*lines[0]
	}
	order, weights := remoteWeights(q, &lines, payRemote, newOrder)
	sum := local
	for _, v := range weights {
		sum += v
	}
	var out []Set
	if local > 0 && local/sum >= SetProbMin {
		out = append(out, Set{Home: h, Groups: []int{h}, Prob: local})
	}
	for i, k := range order {
		v := weights[i]
		if v/sum < SetProbMin {
			continue
		}
		gs := []int{h, remotes[k.a]}
		if k.b >= 0 {
			gs = append(gs, remotes[k.b])
		}
		slices.Sort(gs)
		out = append(out, Set{Home: h, Groups: gs, Prob: v})
	}
	kept := 0.0
	for _, s := range out {
		kept += s.Prob
	}
	for i := range out {
		out[i].Prob /= kept
	}
	return out
}

// nearestRemotes returns every group but h, nearest to h first (ties in
// group order).
func nearestRemotes(rttMs [][]float64, h int) []int {
	n := len(rttMs)
	remotes := make([]int, 0, n-1)
	for g := range n {
		if g != h {
			remotes = append(remotes, g)
		}
	}
	slices.SortStableFunc(remotes, func(a, b int) int { return cmp.Compare(rttMs[h][a], rttMs[h][b]) })
	return remotes
}

// nearestProbs returns q, q[k] the probability that a remote access goes to
// the k-th nearest of n remotes: uniform without locality, else geometric
// in locality, normalised over the n.
func nearestProbs(n int, locality float64) []float64 {
	q := make([]float64, n)
	total := 0.0
	for k := range q {
		q[k] = 1
		if locality > 0 {
			q[k] = locality * math.Pow(1-locality, float64(k))
		}
		total += q[k]
	}
	for k := range q {
		q[k] /= total
	}
	return q
}

// remoteLinesProbs returns lines, lines[m] the probability that a new-order
// has m remote lines when each line is remote with probability p.
func remoteLinesProbs(p float64) [linesMax + 1]float64 {
	var lines [linesMax + 1]float64
	for k := linesMin; k <= linesMax; k++ {
		for m := 0; m <= k; m++ {
			lines[m] += binom(k, m) * math.Pow(p, float64(m)) * math.Pow(1-p, float64(k-m)) / (linesMax - linesMin + 1)
		}
	}
	return lines
}

// remotePair names a destination set of homeSets by indexes into its
// remotes, a < b; b = -1: a alone.
type remotePair struct{ a, b int }

// remoteWeights returns the weight, before normalising, of every set of
// one or two remotes: each single remote's first, then each pair. A payment
// goes to remote a with weight payRemote*q[a]. A new-order with m remote
// lines goes to exactly {a} with probability q_a^m and to exactly {a,b}
// with (q_a+q_b)^m - q_a^m - q_b^m; those of more remotes are left out, and
// the new-orders' weight newOrder renormalised over the rest, as
// GlobalOnly's drawing again does.
func remoteWeights(q []float64, lines *[linesMax + 1]float64, payRemote, newOrder float64) ([]remotePair, []float64) {
	var order []remotePair
	var pay, no []float64
	for a := range q {
		s := 0.0
		for m := 1; m <= linesMax; m++ {
			s += lines[m] * math.Pow(q[a], float64(m))
		}
		order, pay, no = append(order, remotePair{a, -1}), append(pay, payRemote*q[a]), append(no, s)
	}
	for a := range q {
		for b := a + 1; b < len(q); b++ {
			s := 0.0
			for m := 2; m <= linesMax; m++ {
				s += lines[m] * (math.Pow(q[a]+q[b], float64(m)) - math.Pow(q[a], float64(m)) - math.Pow(q[b], float64(m)))
			}
			order, pay, no = append(order, remotePair{a, b}), append(pay, 0), append(no, s)
		}
	}
	noSum := 0.0
	for _, v := range no {
		noSum += v
	}
	weights := make([]float64, len(order))
	for i := range order {
		weights[i] = pay[i]
		if noSum > 0 {
			weights[i] += newOrder * no[i] / noSum
		}
	}
	return order, weights
}

// binom is the binomial coefficient n choose k.
func binom(n, k int) float64 {
	r := 1.0
	for i := 1; i <= k; i++ {
		r = r * float64(n-k+i) / float64(i)
	}
	return r
}
