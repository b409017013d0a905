package gtpcc

import (
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/flexkv/flexkv/partition"
)

// testNow is the date of every generated op in these tests.
var testNow = time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)

// lineDistance ranks warehouses by how far apart their numbers are.
func lineDistance(a, b int) float64 { return math.Abs(float64(a - b)) }

// testWorkload is DefaultWorkload on warehouses 1..n of a small
// population, with lineDistance.
func testWorkload(n int) WorkloadConfig {
	var ws []int
	for w := 1; w <= n; w++ {
		ws = append(ws, w)
	}
	cfg := DefaultWorkload(ws, Small)
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

func warehousesOf(a NewOrderArgs) []int {
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
			var a NewOrderArgs
			if err := decodeArgs(op.Proc, op.Args, &a); err != nil {
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

// remoteChoices returns the remote warehouses drawn by n global-only
// payments of home.
func remoteChoices(t *testing.T, cfg WorkloadConfig, home, n int) []int {
	cfg.GlobalOnly = true
	cfg.Mix = Mix{Payment: 1}
	var out []int
	for _, op := range drawOps(mustGenerator(t, cfg, home, 5), n) {
		var a PaymentArgs
		if err := decodeArgs(op.Proc, op.Args, &a); err != nil {
			t.Fatal(err)
		}
		if a.CW == home {
			t.Fatalf("global-only payment of a home customer: %+v", a)
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
	far := map[int]float64{1: 0, 2: 30, 3: 10, 4: 10, 5: 5}
	got, err := rankRemotes([]int{5, 4, 3, 2, 1}, 1, func(a, b int) float64 { return far[b] - far[a] })
	if err != nil {
		t.Fatal(err)
	}
	if want := []int{5, 3, 4, 2}; !slices.Equal(got, want) {
		t.Errorf("rankRemotes = %v, want %v (by distance, ties by number)", got, want)
	}
	if got, _ := rankRemotes([]int{3, 1, 2}, 2, nil); !slices.Equal(got, []int{1, 3}) {
		t.Errorf("rankRemotes without distance = %v, want [1 3]", got)
	}
	if _, err := rankRemotes([]int{1, 2}, 1, func(int, int) float64 { return math.NaN() }); err == nil {
		t.Error("rankRemotes accepted a NaN distance")
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
// and the procedures' own checks (ProcedureKeys) accept them.
func checkOp(t *testing.T, cfg WorkloadConfig, home int, op Op) {
	t.Helper()
	s := cfg.Scale
	lastMax := min(999, s.CustomersPerDistrict-1)
	bad := func(format string, a ...any) {
		t.Helper()
		t.Fatalf("%s %s: "+format, append([]any{op.Kind, op.Args}, a...)...)
	}
	inRange := func(what string, v, lo, hi int) {
		t.Helper()
		if v < lo || v > hi {
			bad("%s %d, want %d..%d", what, v, lo, hi)
		}
	}
	customer := func(cid int, last string) {
		t.Helper()
		if cid == 0 {
			if !slices.ContainsFunc(makeRange(0, lastMax), func(n int) bool { return LastName(n) == last }) {
				bad("last name %q is none of customers 1..%d's", last, lastMax+1)
			}
			return
		}
		if last != "" {
			bad("customer named by id and by name")
		}
		inRange("customer", cid, 1, s.CustomersPerDistrict)
	}
	if _, err := ProcedureKeys(op.Proc, op.Args); err != nil {
		bad("ProcedureKeys: %v", err)
	}
	touched := []int{home}
	var proc string
	switch op.Kind {
	case KindNewOrder:
		proc = ProcNewOrder
		var a NewOrderArgs
		if err := decodeArgs(op.Proc, op.Args, &a); err != nil {
			bad("%v", err)
		}
		inRange("district", a.D, 1, DistrictsPerWarehouse)
		inRange("customer", a.C, 1, s.CustomersPerDistrict)
		inRange("lines", len(a.Lines), OrderLinesMin, OrderLinesMax)
		if a.W != home || a.EntryD < testNow.UnixMilli() {
			bad("warehouse %d or entry date %d, want %d and a test date", a.W, a.EntryD, home)
		}
		for i, l := range a.Lines {
			if op.Rollback && i == len(a.Lines)-1 {
				if l.Item != s.Items+1 {
					bad("rollback's last item %d, want the unused %d", l.Item, s.Items+1)
				}
			} else {
				inRange("item", l.Item, 1, s.Items)
			}
			inRange("quantity", l.Quantity, 1, quantityMax)
			if !slices.Contains(cfg.Warehouses, l.SupplyW) {
				bad("supply warehouse %d not in the cluster", l.SupplyW)
			}
			touched = append(touched, l.SupplyW)
		}
	case KindPayment:
		proc = ProcPayment
		var a PaymentArgs
		if err := decodeArgs(op.Proc, op.Args, &a); err != nil {
			bad("%v", err)
		}
		inRange("district", a.D, 1, DistrictsPerWarehouse)
		inRange("customer district", a.CD, 1, DistrictsPerWarehouse)
		inRange("amount", int(a.Amount), amountCentsMin, amountCentsMax)
		if a.W != home || !slices.Contains(cfg.Warehouses, a.CW) {
			bad("warehouses %d, %d", a.W, a.CW)
		}
		if a.CW == a.W && a.CD != a.D {
			bad("a home customer of district %d paying at district %d", a.CD, a.D)
		}
		customer(a.CID, a.CLast)
		touched = append(touched, a.CW)
	case KindOrderStatus:
		proc = ProcOrderStatus
		var a OrderStatusArgs
		if err := decodeArgs(op.Proc, op.Args, &a); err != nil {
			bad("%v", err)
		}
		inRange("district", a.D, 1, DistrictsPerWarehouse)
		customer(a.CID, a.CLast)
	case KindDelivery:
		proc = ProcDelivery
		var a DeliveryArgs
		if err := decodeArgs(op.Proc, op.Args, &a); err != nil {
			bad("%v", err)
		}
		inRange("carrier", a.Carrier, 1, carrierMax)
	case KindStockLevel:
		proc = ProcStockLevel
		var a StockLevelArgs
		if err := decodeArgs(op.Proc, op.Args, &a); err != nil {
			bad("%v", err)
		}
		inRange("district", a.D, 1, DistrictsPerWarehouse)
		inRange("threshold", a.Threshold, thresholdMin, thresholdMax)
	default:
		bad("unknown kind")
	}
	if op.Proc != proc {
		bad("procedure %q, want %q", op.Proc, proc)
	}
	slices.Sort(touched)
	if touched = slices.Compact(touched); !slices.Equal(touched, op.Warehouses) {
		bad("Warehouses %v, want %v", op.Warehouses, touched)
	}
	if op.Rollback && op.Kind != KindNewOrder {
		bad("a rollback that is not a new-order")
	}
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
		scale Scale
		n     int
	}{
		{"small", Small, 3},
		{"tiny", Scale{Items: 20, CustomersPerDistrict: 3, OrdersPerDistrict: 3, NewOrdersPerDistrict: 1}, 2},
		{"one warehouse", Small, 1},
		{"full", Full, 4},
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
					if strings.Contains(string(op.Args), `"c_last"`) {
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
			var a NewOrderArgs
			if err := decodeArgs(op.Proc, op.Args, &a); err != nil {
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
		var a NewOrderArgs
		if err := decodeArgs(op.Proc, op.Args, &a); err != nil {
			t.Fatal(err)
		}
		unused := slices.IndexFunc(a.Lines, func(l NewOrderLine) bool { return l.Item > cfg.Scale.Items })
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
		{"global one warehouse", 1, func(c *WorkloadConfig) { c.Warehouses = []int{1}; c.GlobalOnly = true }, "two or more"},
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

func TestLatencyDistance(t *testing.T) {
	top, err := partition.NewTopology(partition.Spec{Groups: []partition.Group{
		{Name: "g0", Region: "eu"}, {Name: "g1", Region: "us"}, {Name: "g2", Region: "ap"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	parts := []partition.Partition{{Name: "item", Start: []byte("item/"), End: []byte("item0"), Group: partition.NoGroup, Replicated: true}}
	for w, g := range map[int]partition.GroupID{1: 0, 2: 1, 3: 2, 4: 0} {
		parts = append(parts, partition.Partition{Start: WarehousePrefix(w), End: WarehouseEnd(w), Group: g})
	}
	pm, err := partition.NewPartitionMap(top, parts)
	if err != nil {
		t.Fatal(err)
	}
	lat, err := partition.NewLatency([]string{"eu", "us", "ap"}, [][]float64{{1, 80, 200}, {80, 2, 150}, {200, 150, 3}})
	if err != nil {
		t.Fatal(err)
	}
	dist, err := LatencyDistance(pm, top, lat, []int{1, 2, 3, 4})
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
	// Warehouse 1's client: 4 (same region) first, then 2, then 3.
	got, err := rankRemotes([]int{1, 2, 3, 4}, 1, dist)
	if err != nil || !slices.Equal(got, []int{4, 2, 3}) {
		t.Errorf("ranked %v, %v; want [4 2 3]", got, err)
	}
	if _, err := LatencyDistance(pm, top, lat, []int{1, 5}); err == nil {
		t.Error("LatencyDistance accepted warehouse 5, which is in no partition")
	}
	if d, err := LatencyDistance(pm, top, nil, []int{1, 2}); err != nil || d(1, 2) != 0 {
		t.Errorf("without a matrix: %v, want distance 0", err)
	}
}
