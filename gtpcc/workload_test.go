package gtpcc

import (
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/flexkv/flexkv/gtpcc/procs"
	"github.com/flexkv/flexkv/partition"
)

// testNow is the date of every generated op in these tests.
var testNow = time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)

// itoa2 writes d (0..99) in two digits.
func itoa2(d int) string { return fmt.Sprintf("%02d", d) }

// lineDistance ranks warehouses by how far apart their numbers are.
func lineDistance(a, b int) float64 { return math.Abs(float64(a - b)) }

// testWorkload is DefaultWorkload on warehouses 1..n of a small
// population, with lineDistance.
func testWorkload(n int) WorkloadConfig {
	var ws []int
	for w := 1; w <= n; w++ {
		ws = append(ws, w)
	}
	cfg := DefaultWorkload(ws, procs.Small)
	cfg.Distance = lineDistance
	return cfg
}

func mustGenerator(t *testing.T, cfg WorkloadConfig, home int, seed uint64) *Generator {
	t.Helper()
	g, err := NewGenerator(cfg, home, seed)
	if err != nil {
		t.Fatalf("NewGenerator: %v", err)
	}
	return g
}

func drawOps(g *Generator, n int) []Op {
	ops := make([]Op, n)
	for i := range ops {
		ops[i] = g.Next(testNow.Add(time.Duration(i) * time.Millisecond))
	}
	return ops
}

func TestGeneratorDeterministic(t *testing.T) {
	cfg := testWorkload(5)
	a := drawOps(mustGenerator(t, cfg, 3, 42), 2000)
	b := drawOps(mustGenerator(t, cfg, 3, 42), 2000)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("two generators of the same seed drew different ops")
	}
	c := drawOps(mustGenerator(t, cfg, 3, 43), 2000)
	if reflect.DeepEqual(a, c) {
		t.Fatal("generators of seeds 42 and 43 drew the same ops")
	}
	d := drawOps(mustGenerator(t, cfg, 4, 42), 2000)
	if reflect.DeepEqual(a, d) {
		t.Fatal("generators of homes 3 and 4 drew the same ops")
	}
}

// within fails unless got is within tol of want.
func within(t *testing.T, what string, got, want, tol float64) {
	t.Helper()
	if math.Abs(got-want) > tol {
		t.Errorf("%s = %.4f, want %.4f ± %.4f", what, got, want, tol)
	}
}

// binomialTol is a tolerance of 5 standard deviations of the share of
// successes of probability p in n draws.
func binomialTol(p float64, n int) float64 { return 5 * math.Sqrt(p*(1-p)/float64(n)) }

func TestGeneratorMix(t *testing.T) {
	const n = 20000
	for _, tc := range []struct {
		name string
		mix  Mix
	}{
		{"default", Mix{}},
		{"custom", Mix{NewOrder: 10, Payment: 10, OrderStatus: 30, Delivery: 20, StockLevel: 30}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testWorkload(4)
			cfg.Mix = tc.mix
			counts := map[string]int{}
			for _, op := range drawOps(mustGenerator(t, cfg, 2, 7), n) {
				counts[op.Kind]++
			}
			mix := cfg.mix()
			weights := mix.weights()
			total := 0
			for _, w := range weights {
				total += w
			}
			for i, k := range kinds {
				p := float64(weights[i]) / float64(total)
				within(t, k+" share", float64(counts[k])/n, p, binomialTol(p, n))
			}
		})
	}
}

func TestGeneratorGlobalOnly(t *testing.T) {
	for _, tc := range []struct {
		name       string
		warehouses int
		locality   float64
		remoteItem float64
	}{
		{"tpcc", 6, LocalityDefault, RemoteItemTPCC},
		{"paper", 12, 0.5, RemoteItemPaper},
		// Uniform remote warehouses and half the lines remote: most
		// new-orders touch more than three warehouses, so the generator
		// must leave them out, and sometimes reach its attempt bound.
		{"wide", 40, 0, 0.5},
		{"two warehouses", 2, 1, 0.01},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testWorkload(tc.warehouses)
			cfg.GlobalOnly = true
			cfg.Locality = tc.locality
			cfg.RemoteItem = tc.remoteItem
			const n = 4000
			counts := map[string]int{}
			for _, op := range drawOps(mustGenerator(t, cfg, 1, 9), n) {
				counts[op.Kind]++
				if len(op.Warehouses) < 2 || len(op.Warehouses) > 3 {
					t.Fatalf("%s op touches warehouses %v, want 2..3", op.Kind, op.Warehouses)
				}
				if op.Kind != KindNewOrder && op.Kind != KindPayment {
					t.Fatalf("global-only drew a %s", op.Kind)
				}
				checkOp(t, cfg, 1, op)
			}
			p := 45.0 / 88
			within(t, "new-order share", float64(counts[KindNewOrder])/n, p, binomialTol(p, n))
		})
	}
}

// TestGeneratorGlobalOnlyLimit checks the last attempt's draw, which
// reuses a remote warehouse rather than add a third.
func TestGeneratorGlobalOnlyLimit(t *testing.T) {
	cfg := testWorkload(40)
	cfg.GlobalOnly, cfg.Locality, cfg.RemoteItem = true, 0, 0.9
	g := mustGenerator(t, cfg, 7, 3)
	wide := 0
	for range 2000 {
		args, _ := g.drawNewOrder(0, false)
		if len(warehousesOf(args)) > 3 {
			wide++
		}
		args, _ = g.drawNewOrder(0, true)
		if ws := warehousesOf(args); len(ws) < 2 || len(ws) > 3 {
			t.Fatalf("limited draw touches %v, want 2..3 warehouses", ws)
		}
	}
	if wide == 0 {
		t.Fatal("no unlimited draw had more than three warehouses: the test proves nothing")
	}
}

func warehousesOf(a procs.NewOrderArgs) []int {
	ws := []int{a.W}
	for _, l := range a.Lines {
		ws = append(ws, l.SupplyW)
	}
	slices.Sort(ws)
	return slices.Compact(ws)
}

// TestGeneratorGlobalOnlyConditioned checks that GlobalOnly's direct draw
// of new-orders with a remote line has the distribution of drawing
// new-orders and keeping those with 2..3 warehouses: the same mean line
// count and remote line count.
func TestGeneratorGlobalOnlyConditioned(t *testing.T) {
	cfg := testWorkload(6)
	cfg.Mix = Mix{NewOrder: 1}
	cfg.RemoteItem = 0.1
	cfg.Locality = 0.7
	stats := func(ops []Op, keep func(Op) bool) (lines, remote float64, kept int) {
		for _, op := range ops {
			if !keep(op) {
				continue
			}
			var a procs.NewOrderArgs
			if err := procs.DecodeArgs(op.Proc, op.Args, &a); err != nil {
				t.Fatal(err)
			}
			kept++
			lines += float64(len(a.Lines))
			for _, l := range a.Lines {
				if l.SupplyW != a.W {
					remote++
				}
			}
		}
		return lines / float64(kept), remote / float64(kept), kept
	}
	all := drawOps(mustGenerator(t, cfg, 3, 1), 30000)
	wantLines, wantRemote, kept := stats(all, func(op Op) bool { return len(op.Warehouses) >= 2 && len(op.Warehouses) <= 3 })
	cfg.GlobalOnly = true
	gotLines, gotRemote, _ := stats(drawOps(mustGenerator(t, cfg, 3, 1), 10000), func(Op) bool { return true })
	t.Logf("filtered %d: %.3f lines, %.3f remote; global-only: %.3f lines, %.3f remote", kept, wantLines, wantRemote, gotLines, gotRemote)
	within(t, "mean lines", gotLines, wantLines, 0.15)
	within(t, "mean remote lines", gotRemote, wantRemote, 0.05)
}

// remoteChoices returns the remote warehouses drawn by n payments of
// home, all by remote customers.
func remoteChoices(t *testing.T, cfg WorkloadConfig, home, n int) []int {
	cfg.GlobalOnly = false
	cfg.Mix = Mix{Payment: 1}
	cfg.RemotePayment = 1
	var out []int
	for _, op := range drawOps(mustGenerator(t, cfg, home, 5), n) {
		var a procs.PaymentArgs
		if err := procs.DecodeArgs(op.Proc, op.Args, &a); err != nil {
			t.Fatal(err)
		}
		if a.CW == home {
			t.Fatalf("remote payment of a home customer: %+v", a)
		}
		out = append(out, a.CW)
	}
	return out
}

func TestGeneratorLocality(t *testing.T) {
	cfg := testWorkload(9)
	t.Run("nearest always", func(t *testing.T) {
		cfg := cfg
		cfg.Locality = 1
		// Home 5: 4 and 6 are both at distance 1; the tie goes to 4.
		for _, w := range remoteChoices(t, cfg, 5, 500) {
			if w != 4 {
				t.Fatalf("locality 1 picked warehouse %d, want the nearest, 4", w)
			}
		}
		// New-order lines too.
		cfg.Mix = Mix{NewOrder: 1}
		cfg.RemoteItem = 0.5
		for _, op := range drawOps(mustGenerator(t, cfg, 5, 3), 300) {
			if !slices.Equal(op.Warehouses, []int{5}) && !slices.Equal(op.Warehouses, []int{4, 5}) {
				t.Fatalf("locality 1 new-order touches %v, want [5] or [4 5]", op.Warehouses)
			}
		}
	})
	t.Run("half", func(t *testing.T) {
		cfg := cfg
		cfg.Locality = 0.5
		const n = 8000
		counts := map[int]int{}
		for _, w := range remoteChoices(t, cfg, 5, n) {
			counts[w]++
		}
		// 8 others ranked 4, 6, 3, 7, 2, 8, 1, 9: the k-th with
		// probability 0.5^(k+1) / (1 - 0.5^8).
		for k, w := range []int{4, 6, 3, 7} {
			p := math.Pow(0.5, float64(k+1)) / (1 - math.Pow(0.5, 8))
			within(t, "share of warehouse "+itoa2(w), float64(counts[w])/n, p, binomialTol(p, n))
		}
	})
	t.Run("uniform", func(t *testing.T) {
		cfg := cfg
		cfg.Locality = 0
		const n = 8000
		counts := map[int]int{}
		for _, w := range remoteChoices(t, cfg, 1, n) {
			counts[w]++
		}
		for w := 2; w <= 9; w++ {
			within(t, "share of warehouse "+itoa2(w), float64(counts[w])/n, 1.0/8, binomialTol(1.0/8, n))
		}
	})
}

func TestRankRemotes(t *testing.T) {
	own := func(w int) int { return w }
	far := map[int]float64{1: 0, 2: 30, 3: 10, 4: 10, 5: 5}
	dist := func(a, b int) float64 { return far[b] - far[a] }
	got, err := rankRemotes([]int{5, 4, 3, 2, 1}, 1, dist, own)
	if err != nil {
		t.Fatal(err)
	}
	if want := []int{5, 3, 4, 2}; !slices.Equal(got, want) {
		t.Errorf("rankRemotes = %v, want %v (by distance, ties by number)", got, want)
	}
	if got, _ := rankRemotes([]int{3, 1, 2}, 2, nil, own); !slices.Equal(got, []int{1, 3}) {
		t.Errorf("rankRemotes without distance = %v, want [1 3]", got)
	}
	if _, err := rankRemotes([]int{1, 2}, 1, func(int, int) float64 { return math.NaN() }, own); err == nil {
		t.Error("rankRemotes accepted a NaN distance")
	}
	// Warehouse 5 shares group 1 with home 1: though nearest, it is no
	// candidate while other groups exist.
	groupOf := map[int]int{1: 1, 5: 1, 2: 2, 3: 3, 4: 3}
	pairs := func(w int) int { return groupOf[w] }
	if got, _ := rankRemotes([]int{5, 4, 3, 2, 1}, 1, dist, pairs); !slices.Equal(got, []int{3, 4, 2}) {
		t.Errorf("rankRemotes by group = %v, want [3 4 2] (group 1's 5 left out)", got)
	}
	// One group: the other warehouses of it.
	one := func(int) int { return 0 }
	if got, _ := rankRemotes([]int{5, 4, 3, 2, 1}, 1, dist, one); !slices.Equal(got, []int{5, 3, 4, 2}) {
		t.Errorf("rankRemotes in one group = %v, want [5 3 4 2]", got)
	}
}

func TestLocalityCumulative(t *testing.T) {
	for _, tc := range []struct {
		n        int
		locality float64
		want     []float64
	}{
		{3, 1, []float64{1, 1, 1}},
		{4, 0, []float64{0.25, 0.5, 0.75, 1}},
		{2, 0.5, []float64{2.0 / 3, 1}},
		{0, 0.5, []float64{}},
	} {
		got := localityCumulative(tc.n, tc.locality)
		if len(got) != len(tc.want) {
			t.Fatalf("localityCumulative(%d, %v) = %v, want %v", tc.n, tc.locality, got, tc.want)
		}
		for i := range got {
			if math.Abs(got[i]-tc.want[i]) > 1e-12 {
				t.Errorf("localityCumulative(%d, %v) = %v, want %v", tc.n, tc.locality, got, tc.want)
			}
		}
	}
}

func TestScaledA(t *testing.T) {
	for _, tc := range []struct{ a, n, nFull, want int }{
		{1023, 3000, 3000, 1023},
		{8191, 100000, 100000, 8191},
		{1023, 100, 3000, 31},
		{8191, 1000, 100000, 63},
		{255, 100, 1000, 15},
		{255, 3, 1000, 0},
	} {
		if got := scaledA(tc.a, tc.n, tc.nFull); got != tc.want {
			t.Errorf("scaledA(%d, %d, %d) = %d, want %d", tc.a, tc.n, tc.nFull, got, tc.want)
		}
	}
}

// checkOp fails unless op's arguments decode strictly, are those of a
// client of home under cfg, and name the warehouses op.Warehouses lists,
// and the procedures' own checks (procs.ProcedureKeys) accept them.
func checkOp(t *testing.T, cfg WorkloadConfig, home int, op Op) {
	t.Helper()
	c := newOpCheck(t, cfg, home, op)
	if _, err := procs.ProcedureKeys(op.Proc, op.Args); err != nil {
		c.bad("ProcedureKeys: %v", err)
	}
	proc, touched := c.args()
	if op.Proc != proc {
		c.bad("procedure %q, want %q", op.Proc, proc)
	}
	touched = append(touched, home)
	slices.Sort(touched)
	if touched = slices.Compact(touched); !slices.Equal(touched, op.Warehouses) {
		c.bad("Warehouses %v, want %v", op.Warehouses, touched)
	}
	var groups []int
	for _, w := range touched {
		groups = append(groups, cfg.groupOf(w))
	}
	slices.Sort(groups)
	if groups = slices.Compact(groups); !slices.Equal(groups, op.Groups) {
		c.bad("Groups %v, want %v", op.Groups, groups)
	}
	if op.Rollback && op.Kind != KindNewOrder {
		c.bad("a rollback that is not a new-order")
	}
}

// opCheck is checkOp's check of one op of a client of home under cfg.
type opCheck struct {
	t    *testing.T
	cfg  WorkloadConfig
	home int
	op   Op
	// A remote warehouse is of another group than home's, unless the
	// cluster has one group.
	homeGroup   int
	otherGroups bool
}

// newOpCheck prepares the check of op, a client of home's.
func newOpCheck(t *testing.T, cfg WorkloadConfig, home int, op Op) *opCheck {
	homeGroup := cfg.groupOf(home)
	return &opCheck{
		t: t, cfg: cfg, home: home, op: op, homeGroup: homeGroup,
		otherGroups: slices.ContainsFunc(cfg.Warehouses, func(w int) bool { return cfg.groupOf(w) != homeGroup }),
	}
}

// bad fails the test, naming the op.
func (c *opCheck) bad(format string, a ...any) {
	c.t.Helper()
	c.t.Fatalf("%s %s: "+format, append([]any{c.op.Kind, c.op.Args}, a...)...)
}

// inRange fails unless lo <= v <= hi.
func (c *opCheck) inRange(what string, v, lo, hi int) {
	c.t.Helper()
	if v < lo || v > hi {
		c.bad("%s %d, want %d..%d", what, v, lo, hi)
	}
}

// customer fails unless a customer is named either by an id in range or,
// with cid 0, by a last name of the scale's.
func (c *opCheck) customer(cid int, last string) {
	c.t.Helper()
	s := c.cfg.Scale
	if cid == 0 {
		lastMax := min(999, s.CustomersPerDistrict-1)
		if !slices.ContainsFunc(makeRange(0, lastMax), func(n int) bool { return procs.LastName(n) == last }) {
			c.bad("last name %q is none of customers 1..%d's", last, lastMax+1)
		}
		return
	}
	if last != "" {
		c.bad("customer named by id and by name")
	}
	c.inRange("customer", cid, 1, s.CustomersPerDistrict)
}

// remoteOK fails if w, not home, is in home's group while the cluster has
// other groups.
func (c *opCheck) remoteOK(w int) {
	c.t.Helper()
	if w != c.home && c.otherGroups && c.cfg.groupOf(w) == c.homeGroup {
		c.bad("remote warehouse %d is in home's group %d", w, c.homeGroup)
	}
}

// decode decodes the op's arguments strictly into a.
func (c *opCheck) decode(a any) {
	c.t.Helper()
	if err := procs.DecodeArgs(c.op.Proc, c.op.Args, a); err != nil {
		c.bad("%v", err)
	}
}

// args checks the op's arguments by its kind, and returns the procedure
// the kind calls and the warehouses other than home that the op touches.
func (c *opCheck) args() (proc string, touched []int) {
	c.t.Helper()
	switch c.op.Kind {
	case KindNewOrder:
		return procs.ProcNewOrder, c.newOrder()
	case KindPayment:
		return procs.ProcPayment, c.payment()
	case KindOrderStatus:
		var a procs.OrderStatusArgs
		c.decode(&a)
		c.inRange("district", a.D, 1, procs.DistrictsPerWarehouse)
		c.customer(a.CID, a.CLast)
		return procs.ProcOrderStatus, nil
	case KindDelivery:
		var a procs.DeliveryArgs
		c.decode(&a)
		c.inRange("carrier", a.Carrier, 1, carrierMax)
		return procs.ProcDelivery, nil
	case KindStockLevel:
		var a procs.StockLevelArgs
		c.decode(&a)
		c.inRange("district", a.D, 1, procs.DistrictsPerWarehouse)
		c.inRange("threshold", a.Threshold, thresholdMin, thresholdMax)
		return procs.ProcStockLevel, nil
	default:
		c.bad("unknown kind")
		return "", nil
	}
}

// newOrder checks a new-order's arguments and returns its supply
// warehouses.
func (c *opCheck) newOrder() (supply []int) {
	c.t.Helper()
	s := c.cfg.Scale
	var a procs.NewOrderArgs
	c.decode(&a)
	c.inRange("district", a.D, 1, procs.DistrictsPerWarehouse)
	c.inRange("customer", a.C, 1, s.CustomersPerDistrict)
	c.inRange("lines", len(a.Lines), procs.OrderLinesMin, procs.OrderLinesMax)
	if a.W != c.home || a.EntryD < testNow.UnixMilli() {
		c.bad("warehouse %d or entry date %d, want %d and a test date", a.W, a.EntryD, c.home)
	}
	for i, l := range a.Lines {
		if c.op.Rollback && i == len(a.Lines)-1 {
			if l.Item != s.Items+1 {
				c.bad("rollback's last item %d, want the unused %d", l.Item, s.Items+1)
			}
		} else {
			c.inRange("item", l.Item, 1, s.Items)
		}
		c.inRange("quantity", l.Quantity, 1, quantityMax)
		if !slices.Contains(c.cfg.Warehouses, l.SupplyW) {
			c.bad("supply warehouse %d not in the cluster", l.SupplyW)
		}
		c.remoteOK(l.SupplyW)
		supply = append(supply, l.SupplyW)
	}
	return supply
}

// payment checks a payment's arguments and returns its customer's
// warehouse.
func (c *opCheck) payment() []int {
	c.t.Helper()
	var a procs.PaymentArgs
	c.decode(&a)
	c.inRange("district", a.D, 1, procs.DistrictsPerWarehouse)
	c.inRange("customer district", a.CD, 1, procs.DistrictsPerWarehouse)
	c.inRange("amount", int(a.Amount), amountCentsMin, amountCentsMax)
	if a.W != c.home || !slices.Contains(c.cfg.Warehouses, a.CW) {
		c.bad("warehouses %d, %d", a.W, a.CW)
	}
	if a.CW == a.W && a.CD != a.D {
		c.bad("a home customer of district %d paying at district %d", a.CD, a.D)
	}
	c.remoteOK(a.CW)
	c.customer(a.CID, a.CLast)
	return []int{a.CW}
}

func makeRange(lo, hi int) []int {
	var out []int
	for i := lo; i <= hi; i++ {
		out = append(out, i)
	}
	return out
}

func TestGeneratorArgs(t *testing.T) {
	for _, tc := range []struct {
		name  string
		scale procs.Scale
		n     int
	}{
		{"small", procs.Small, 3},
		{"tiny", procs.Scale{Items: 20, CustomersPerDistrict: 3, OrdersPerDistrict: 3, NewOrdersPerDistrict: 1}, 2},
		{"one warehouse", procs.Small, 1},
		{"full", procs.Full, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testWorkload(tc.n)
			cfg.Scale = tc.scale
			cfg.RemoteItem = 0.1
			home := tc.n
			byName, customers := 0, 0
			for _, op := range drawOps(mustGenerator(t, cfg, home, 11), 5000) {
				checkOp(t, cfg, home, op)
				if tc.n == 1 && !slices.Equal(op.Warehouses, []int{1}) {
					t.Fatalf("one warehouse, yet op touches %v", op.Warehouses)
				}
				if op.Kind == KindPayment || op.Kind == KindOrderStatus {
					customers++
					js, _, err := procs.RowJSON(op.Args)
					if err != nil {
						t.Fatal(err)
					}
					if strings.Contains(string(js), `"c_last"`) {
						byName++
					}
				}
			}
			within(t, "share by last name", float64(byName)/float64(customers), 0.6, binomialTol(0.6, customers))
		})
	}
}

func TestGeneratorRemoteRates(t *testing.T) {
	cfg := testWorkload(5)
	cfg.RemoteItem = 0.05
	var lines, remoteLines, payments, remotePayments int
	for _, op := range drawOps(mustGenerator(t, cfg, 2, 17), 20000) {
		switch op.Kind {
		case KindNewOrder:
			var a procs.NewOrderArgs
			if err := procs.DecodeArgs(op.Proc, op.Args, &a); err != nil {
				t.Fatal(err)
			}
			for _, l := range a.Lines {
				lines++
				if l.SupplyW != a.W {
					remoteLines++
				}
			}
		case KindPayment:
			payments++
			if len(op.Warehouses) == 2 {
				remotePayments++
			}
		}
	}
	within(t, "remote line share", float64(remoteLines)/float64(lines), 0.05, binomialTol(0.05, lines))
	within(t, "remote payment share", float64(remotePayments)/float64(payments), RemotePaymentDefault, binomialTol(RemotePaymentDefault, payments))
}

func TestGeneratorRollbackRate(t *testing.T) {
	cfg := testWorkload(3)
	cfg.Mix = Mix{NewOrder: 1}
	const n = 20000
	rollbacks := 0
	for _, op := range drawOps(mustGenerator(t, cfg, 1, 23), n) {
		var a procs.NewOrderArgs
		if err := procs.DecodeArgs(op.Proc, op.Args, &a); err != nil {
			t.Fatal(err)
		}
		unused := slices.IndexFunc(a.Lines, func(l procs.NewOrderLine) bool { return l.Item > cfg.Scale.Items })
		switch {
		case op.Rollback && unused != len(a.Lines)-1:
			t.Fatalf("rollback whose unused item is on line %d of %d", unused, len(a.Lines))
		case !op.Rollback && unused >= 0:
			t.Fatalf("new-order with an unused item on line %d not marked Rollback", unused)
		}
		if op.Rollback {
			rollbacks++
		}
	}
	within(t, "rollback share", float64(rollbacks)/n, 0.01, binomialTol(0.01, n))

	cfg.Scale.Items = 999999 // no unused six-digit id
	for _, op := range drawOps(mustGenerator(t, cfg, 1, 23), 2000) {
		if op.Rollback {
			t.Fatal("a rollback with 999999 items")
		}
	}
}

func TestNewGeneratorErrors(t *testing.T) {
	for _, tc := range []struct {
		name   string
		home   int
		change func(*WorkloadConfig)
		want   string
	}{
		{"no warehouses", 1, func(c *WorkloadConfig) { c.Warehouses = nil }, "no warehouses"},
		{"warehouse 0", 1, func(c *WorkloadConfig) { c.Warehouses = []int{1, 0} }, "warehouse 0"},
		{"twice", 1, func(c *WorkloadConfig) { c.Warehouses = []int{1, 2, 1} }, "twice"},
		{"home elsewhere", 9, func(*WorkloadConfig) {}, "home warehouse 9"},
		{"scale", 1, func(c *WorkloadConfig) { c.Scale.Items = 0 }, "items"},
		{"locality", 1, func(c *WorkloadConfig) { c.Locality = 1.5 }, "locality"},
		{"remote NaN", 1, func(c *WorkloadConfig) { c.RemoteItem = math.NaN() }, "remote item"},
		{"negative weight", 1, func(c *WorkloadConfig) { c.Mix = Mix{NewOrder: 5, Delivery: -1} }, "delivery"},
		{"global one warehouse", 1, func(c *WorkloadConfig) { c.Warehouses = []int{1}; c.GlobalOnly = true }, "two or more groups"},
		{"global one group", 1, func(c *WorkloadConfig) { c.Group = func(int) int { return 4 }; c.GlobalOnly = true }, "two or more groups"},
		{"negative group", 1, func(c *WorkloadConfig) { c.Group = func(w int) int { return 1 - w } }, "warehouse 2 is in group -1"},
		{"global local mix", 1, func(c *WorkloadConfig) { c.GlobalOnly = true; c.Mix = Mix{Delivery: 1} }, "new-orders or payments"},
		{"global no remote item", 1, func(c *WorkloadConfig) { c.GlobalOnly = true; c.RemoteItem = 0 }, "remote item"},
		{"global no remote payment", 1, func(c *WorkloadConfig) { c.GlobalOnly = true; c.RemotePayment = 0 }, "remote payment"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testWorkload(3)
			tc.change(&cfg)
			_, err := NewGenerator(cfg, tc.home, 1)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("NewGenerator: %v, want an error about %q", err, tc.want)
			}
		})
	}
	// Global-only payments alone need no remote item probability.
	cfg := testWorkload(3)
	cfg.GlobalOnly, cfg.RemoteItem, cfg.Mix = true, 0, Mix{Payment: 1}
	if _, err := NewGenerator(cfg, 1, 1); err != nil {
		t.Errorf("global-only payments: %v", err)
	}
}

// testCluster returns the partitions, topology and latency matrix of a
// cluster of groups g0, g1, ... in regions r0, r1, ..., group i owning
// the warehouses of members[i], with round trips rtt between regions.
func testCluster(t *testing.T, members [][]int, rtt [][]float64) (*partition.PartitionMap, *partition.Topology, *partition.Latency) {
	t.Helper()
	var spec partition.Spec
	var regions []string
	parts := []partition.Partition{{Name: "item", Start: []byte("item/"), End: []byte("item0"), Group: partition.NoGroup, Replicated: true}}
	for g, ws := range members {
		region := "r" + itoa2(g)
		regions = append(regions, region)
		spec.Groups = append(spec.Groups, partition.Group{Name: "g" + itoa2(g), Region: region})
		for _, w := range ws {
			parts = append(parts, partition.Partition{Start: procs.WarehousePrefix(w), End: procs.WarehouseEnd(w), Group: partition.GroupID(g)})
		}
	}
	top, err := partition.NewTopology(spec)
	if err != nil {
		t.Fatal(err)
	}
	pm, err := partition.NewPartitionMap(top, parts)
	if err != nil {
		t.Fatal(err)
	}
	lat, err := partition.NewLatency(regions, rtt)
	if err != nil {
		t.Fatal(err)
	}
	return pm, top, lat
}

func TestClusterLayout(t *testing.T) {
	pm, top, lat := testCluster(t, [][]int{{1, 4}, {2}, {3}}, [][]float64{{1, 80, 200}, {80, 2, 150}, {200, 150, 3}})
	dist, group, err := ClusterLayout(pm, top, lat, []int{1, 2, 3, 4})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		a, b int
		want float64
	}{{1, 2, 80}, {1, 3, 200}, {2, 3, 150}, {1, 4, 1}, {3, 3, 3}, {1, 9, math.Inf(1)}} {
		if got := dist(tc.a, tc.b); got != tc.want {
			t.Errorf("distance(%d, %d) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
	for w, want := range map[int]int{1: 0, 4: 0, 2: 1, 3: 2, 9: -1} {
		if got := group(w); got != want {
			t.Errorf("group(%d) = %d, want %d", w, got, want)
		}
	}
	// Warehouse 1's client: 4 is nearest but in its own group, so
	// 2, then 3.
	got, err := rankRemotes([]int{1, 2, 3, 4}, 1, dist, group)
	if err != nil || !slices.Equal(got, []int{2, 3}) {
		t.Errorf("ranked %v, %v; want [2 3]", got, err)
	}
	if _, _, err := ClusterLayout(pm, top, lat, []int{1, 5}); err == nil {
		t.Error("ClusterLayout accepted warehouse 5, which is in no partition")
	}
	if d, g, err := ClusterLayout(pm, top, nil, []int{1, 2}); err != nil || d(1, 2) != 0 || g(2) != 1 {
		t.Errorf("without a matrix: %v, want distance 0 and groups still", err)
	}
}

// TestGeneratorGroups: with several warehouses per group, remote
// warehouses are in other groups, ranked by their groups' latency; in a
// cluster of one group they are the home group's other warehouses.
func TestGeneratorGroups(t *testing.T) {
	// Groups 0, 1, 2 own warehouses 1-2, 3-4 and 5-6; group 0 sees
	// group 1 at 10 ms and group 2 at 20 ms, the diagonal at 1 ms.
	pm, top, lat := testCluster(t, [][]int{{1, 2}, {3, 4}, {5, 6}}, [][]float64{{1, 10, 20}, {10, 1, 15}, {20, 15, 1}})
	ws := []int{1, 2, 3, 4, 5, 6}
	dist, group, err := ClusterLayout(pm, top, lat, ws)
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultWorkload(ws, procs.Small)
	cfg.Distance, cfg.Group = dist, group

	t.Run("nearest other group", func(t *testing.T) {
		cfg := cfg
		cfg.Locality = 1
		// The nearest other group's lowest warehouse, never the home
		// group's other one (at the diagonal's 1 ms).
		for home, want := range map[int]int{1: 3, 2: 3, 4: 1, 6: 3} {
			for _, w := range remoteChoices(t, cfg, home, 300) {
				if w != want {
					t.Fatalf("locality 1 from warehouse %d picked %d, want %d", home, w, want)
				}
			}
		}
		cfg.Mix, cfg.RemoteItem = Mix{NewOrder: 1}, 0.5
		for _, op := range drawOps(mustGenerator(t, cfg, 2, 3), 300) {
			if !slices.Equal(op.Warehouses, []int{2}) && !slices.Equal(op.Warehouses, []int{2, 3}) {
				t.Fatalf("locality 1 new-order of warehouse 2 touches %v, want [2] or [2 3]", op.Warehouses)
			}
		}
	})
	t.Run("locality", func(t *testing.T) {
		cfg := cfg
		const n = 8000
		counts := map[int]int{}
		for _, w := range remoteChoices(t, cfg, 1, n) {
			counts[w]++
		}
		if counts[2] != 0 {
			t.Fatalf("home group's warehouse 2 drawn %d times of %d", counts[2], n)
		}
		// Ranked 3, 4 (10 ms), 5, 6 (20 ms): the k-th with probability
		// 0.9 * 0.1^k / (1 - 0.1^4).
		for k, w := range []int{3, 4, 5} {
			p := 0.9 * math.Pow(0.1, float64(k)) / (1 - math.Pow(0.1, 4))
			within(t, "share of warehouse "+itoa2(w), float64(counts[w])/n, p, binomialTol(p, n))
		}
	})
	t.Run("global only", func(t *testing.T) {
		cfg := cfg
		cfg.GlobalOnly = true
		cfg.Locality, cfg.RemoteItem = 0, 0.5
		counts := map[string]int{}
		for _, op := range drawOps(mustGenerator(t, cfg, 5, 8), 3000) {
			counts[op.Kind]++
			checkOp(t, cfg, 5, op)
			if len(op.Groups) < 2 || len(op.Groups) > 3 {
				t.Fatalf("global-only %s touches groups %v, want 2..3", op.Kind, op.Groups)
			}
		}
		if counts[KindNewOrder] == 0 || counts[KindPayment] == 0 {
			t.Fatalf("global-only drew %v, want new-orders and payments", counts)
		}
	})
	t.Run("one group", func(t *testing.T) {
		cfg := cfg
		cfg.Group = func(int) int { return 0 }
		cfg.Distance = lineDistance
		cfg.Locality = 1
		// Home 3: 2 and 4 are both at distance 1; the tie goes to 2.
		for _, w := range remoteChoices(t, cfg, 3, 300) {
			if w != 2 {
				t.Fatalf("locality 1 in one group picked %d, want 2", w)
			}
		}
		cfg.Locality = 0
		seen := map[int]bool{}
		for _, op := range drawOps(mustGenerator(t, cfg, 3, 4), 3000) {
			checkOp(t, cfg, 3, op)
			if !slices.Equal(op.Groups, []int{0}) {
				t.Fatalf("op of one group touches groups %v", op.Groups)
			}
			for _, w := range op.Warehouses {
				seen[w] = true
			}
		}
		if len(seen) != len(ws) {
			t.Errorf("ops of one group touched warehouses %v, want all of %v", seen, ws)
		}
	})
}

// TestGeneratorGlobalOnlyGroups: global-only bounds groups, not
// warehouses: with two warehouses per group a new-order may touch more
// than three warehouses, never more than three groups.
func TestGeneratorGlobalOnlyGroups(t *testing.T) {
	ws := makeRange(1, 12)
	cfg := DefaultWorkload(ws, procs.Small)
	cfg.Group = func(w int) int { return (w - 1) / 2 } // six groups of two
	cfg.Distance = lineDistance
	cfg.GlobalOnly, cfg.Locality, cfg.RemoteItem = true, 0, 0.5
	cfg.Mix = Mix{NewOrder: 1}
	wide := 0
	for _, op := range drawOps(mustGenerator(t, cfg, 6, 2), 2000) {
		checkOp(t, cfg, 6, op)
		if len(op.Groups) < 2 || len(op.Groups) > 3 {
			t.Fatalf("global-only new-order touches groups %v, want 2..3", op.Groups)
		}
		if len(op.Warehouses) > 3 {
			wide++
		}
	}
	if wide == 0 {
		t.Error("no new-order touched more than three warehouses: the test proves nothing")
	}
}
