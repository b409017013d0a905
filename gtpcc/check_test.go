package gtpcc

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/flexkv/flexkv/client"
	"github.com/flexkv/flexkv/gtpcc/procs"
	"github.com/flexkv/flexkv/partition"
)

func TestCheckReportJSON(t *testing.T) {
	b, err := json.Marshal(CheckReport{Passed: true, Failures: []string{}})
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if m["passed"] != true {
		t.Errorf("passed = %v in %s", m["passed"], b)
	}
	if f, ok := m["failures"].([]any); !ok || len(f) != 0 {
		t.Errorf("failures = %v in %s, want []", m["failures"], b)
	}
	if _, ok := m["checked"].(map[string]any); !ok {
		t.Errorf("no checked counts in %s", b)
	}
}

func TestCheckFailuresBounded(t *testing.T) {
	rep := CheckReport{Passed: true, Failures: []string{}}
	ck := &checker{rep: &rep}
	for i := range CheckFailuresMax + 7 {
		ck.fail("7", 1, 2, "line %d", i)
	}
	if rep.Passed || len(rep.Failures) != CheckFailuresMax || rep.FailuresOmitted != 7 {
		t.Errorf("passed %v, %d failures, %d omitted; want false, %d, 7", rep.Passed, len(rep.Failures), rep.FailuresOmitted, CheckFailuresMax)
	}
	if want := "condition 7: warehouse 1 district 2: line 0"; rep.Failures[0] != want {
		t.Errorf("failure %q, want %q", rep.Failures[0], want)
	}
}

func TestParseIDs(t *testing.T) {
	ids, err := parseIDs(procs.OrderLineKey(3, 4, 1234, 15), procs.OrderLinePrefix(3, 4), 2)
	if err != nil || !slices.Equal(ids, []int{1234, 15}) {
		t.Errorf("order line key: %v, %v", ids, err)
	}
	for _, key := range []string{"w/0003/ol/04/12", "w/0003/ol/04/x/1", "w/0003/ol/04/1/2/3", "w/0003/o/04/1/2"} {
		if ids, err := parseIDs([]byte(key), procs.OrderLinePrefix(3, 4), 2); err == nil {
			t.Errorf("%s: %v, want an error", key, ids)
		}
	}
}

// checkCorruption is a change to rows and the conditions Check must then
// find violated.
type checkCorruption struct {
	name string
	// keys are the rows apply changes, written back after the case.
	keys  [][]byte
	apply func(ctx context.Context, t *testing.T, c *client.Client)
	conds []string
	// ws are the warehouses the failures may name; some failure must
	// contain where.
	ws    []int
	where string
}

// updateRow reads the row at key into a fresh T, changes it and writes it back.
func updateRow[T any](ctx context.Context, t *testing.T, c *client.Client, key []byte, change func(*T)) {
	t.Helper()
	v, found, err := c.Get(ctx, key)
	if err != nil || !found {
		t.Fatalf("get %s: found %v, %v", key, found, err)
	}
	var row T
	if err := procs.Decode(key, v, &row); err != nil {
		t.Fatal(err)
	}
	change(&row)
	if err := c.Put(ctx, key, procs.Encode(row)); err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
}

func deleteRow(ctx context.Context, t *testing.T, c *client.Client, key []byte) {
	t.Helper()
	if err := c.Delete(ctx, key); err != nil {
		t.Fatalf("delete %s: %v", key, err)
	}
}

func putRow(ctx context.Context, t *testing.T, c *client.Client, key []byte, row any) {
	t.Helper()
	if err := c.Put(ctx, key, procs.Encode(row)); err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
}

// saveRows reads the rows at keys and returns a function that writes them
// back (deleting those that were not there).
func saveRows(ctx context.Context, t *testing.T, c *client.Client, keys [][]byte) func() {
	t.Helper()
	type saved struct {
		value []byte
		found bool
	}
	rows := make([]saved, len(keys))
	for i, k := range keys {
		v, found, err := c.Get(ctx, k)
		if err != nil {
			t.Fatalf("get %s: %v", k, err)
		}
		rows[i] = saved{v, found}
	}
	return func() {
		t.Helper()
		for i, k := range keys {
			var err error
			if rows[i].found {
				err = c.Put(ctx, k, rows[i].value)
			} else {
				err = c.Delete(ctx, k)
			}
			if err != nil {
				t.Fatalf("restore %s: %v", k, err)
			}
		}
	}
}

// checkCorruptions applies each corruption in turn to the rows of the test
// warehouses, which pass Check, and expects Check of them all to name
// exactly the conditions it violates, at the right warehouses; then it
// writes the rows back, and Check passes again.
func checkCorruptions(ctx context.Context, t *testing.T, c *client.Client, cases []checkCorruption) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			restore := saveRows(ctx, t, c, tc.keys)
			tc.apply(ctx, t, c)
			rep, err := Check(ctx, c, testWarehouses)
			restore()
			if err != nil {
				t.Fatal(err)
			}
			if rep.Passed {
				t.Fatalf("Check passed after the change")
			}
			if got := failedConditions(rep.Failures); !slices.Equal(got, tc.conds) {
				t.Errorf("conditions %v violated, want %v: %q", got, tc.conds, rep.Failures)
			}
			named := false
			for _, f := range rep.Failures {
				named = named || strings.Contains(f, tc.where)
				if !slices.ContainsFunc(tc.ws, func(w int) bool { return strings.Contains(f, fmt.Sprintf("warehouse %d", w)) }) {
					t.Errorf("failure %q names none of warehouses %v", f, tc.ws)
				}
			}
			if !named {
				t.Errorf("no failure names %q: %q", tc.where, rep.Failures)
			}
		})
	}
	if rep, err := Check(ctx, c, testWarehouses); err != nil || !rep.Passed {
		t.Fatalf("Check after writing the rows back: %+v, %v", rep, err)
	}
}

// TestCheckFindsCorruption loads the test warehouses, corrupts one row (or
// two) at a time, and expects Check to name exactly the conditions the
// change violates, at the right warehouse and district.
func TestCheckFindsCorruption(t *testing.T) {
	c, _ := startCluster(t, "skeen")
	ctx, cancel := context.WithTimeout(context.Background(), 35*time.Second)
	defer cancel()
	loadTiny(ctx, t, c, testWarehouses)
	rep, err := Check(ctx, c, testWarehouses)
	if err != nil || !rep.Passed {
		t.Fatalf("Check after load: %+v, %v", rep, err)
	}
	if got, want := rep.Checked.Customers, 6*10*loadTestScale.CustomersPerDistrict; got != want {
		t.Errorf("checked %d customers, want %d", got, want)
	}
	if got, want := rep.Checked.Stock, 6*loadTestScale.Items; got != want {
		t.Errorf("checked %d stock rows, want %d", got, want)
	}

	// loadTestScale: orders 1..10 per district, 7..10 undelivered.
	checkCorruptions(ctx, t, c, []checkCorruption{
		{"district YTD", [][]byte{procs.DistrictKey(2, 3)}, func(ctx context.Context, t *testing.T, c *client.Client) {
			updateRow(ctx, t, c, procs.DistrictKey(2, 3), func(d *procs.District) { d.YTD += 100 })
		}, []string{"1", "9"}, []int{2}, "warehouse 2 district 3:"},
		{"warehouse YTD", [][]byte{procs.WarehouseKey(1)}, func(ctx context.Context, t *testing.T, c *client.Client) {
			updateRow(ctx, t, c, procs.WarehouseKey(1), func(w *procs.Warehouse) { w.YTD-- })
		}, []string{"1", "8"}, []int{1}, "warehouse 1:"},
		{"middle new-order deleted", [][]byte{procs.NewOrderKey(3, 5, 8)}, func(ctx context.Context, t *testing.T, c *client.Client) {
			deleteRow(ctx, t, c, procs.NewOrderKey(3, 5, 8))
		}, []string{"3", "5"}, []int{3}, "warehouse 3 district 5:"},
		{"last new-order deleted", [][]byte{procs.NewOrderKey(5, 2, 10)}, func(ctx context.Context, t *testing.T, c *client.Client) {
			deleteRow(ctx, t, c, procs.NewOrderKey(5, 2, 10))
		}, []string{"2", "5"}, []int{5}, "warehouse 5 district 2:"},
		{"delivery cursor past a new-order", [][]byte{procs.DeliveryCursorKey(4, 6)}, func(ctx context.Context, t *testing.T, c *client.Client) {
			putRow(ctx, t, c, procs.DeliveryCursorKey(4, 6), procs.DeliveryCursor{NextOID: 8})
		}, []string{"3"}, []int{4}, "warehouse 4 district 6: new-order row 7 below the delivery cursor 8"},
		{"next order id", [][]byte{procs.DistrictKey(6, 7)}, func(ctx context.Context, t *testing.T, c *client.Client) {
			updateRow(ctx, t, c, procs.DistrictKey(6, 7), func(d *procs.District) { d.NextOID++ })
		}, []string{"2"}, []int{6}, "warehouse 6 district 7:"},
		{"order OL_CNT", [][]byte{procs.OrderKey(4, 1, 2)}, func(ctx context.Context, t *testing.T, c *client.Client) {
			updateRow(ctx, t, c, procs.OrderKey(4, 1, 2), func(o *procs.Order) { o.OLCnt++ })
		}, []string{"4", "6"}, []int{4}, "warehouse 4 district 1:"},
		{"delivered order's carrier", [][]byte{procs.OrderKey(1, 10, 1)}, func(ctx context.Context, t *testing.T, c *client.Client) {
			updateRow(ctx, t, c, procs.OrderKey(1, 10, 1), func(o *procs.Order) { o.Carrier = 0 })
		}, []string{"5", "7"}, []int{1}, "warehouse 1 district 10:"},
		{"order line delivery date", [][]byte{procs.OrderLineKey(6, 9, 3, 2)}, func(ctx context.Context, t *testing.T, c *client.Client) {
			updateRow(ctx, t, c, procs.OrderLineKey(6, 9, 3, 2), func(l *procs.OrderLine) { l.DeliveryD = 0 })
		}, []string{"7"}, []int{6}, "warehouse 6 district 9:"},
		// Condition 10 sums the customer's loader history row too.
		{"history amount", [][]byte{procs.HistoryKey(2, procs.LoadHistoryID(4, 7))}, func(ctx context.Context, t *testing.T, c *client.Client) {
			updateRow(ctx, t, c, procs.HistoryKey(2, procs.LoadHistoryID(4, 7)), func(h *procs.History) { h.Amount += 5 })
		}, []string{"8", "9", "10"}, []int{2}, "warehouse 2 district 4: customer 7: C_BALANCE"},
		{"customer balance", [][]byte{procs.CustomerKey(3, 4, 5)}, func(ctx context.Context, t *testing.T, c *client.Client) {
			updateRow(ctx, t, c, procs.CustomerKey(3, 4, 5), func(c *procs.Customer) { c.Balance-- })
		}, []string{"10", "12"}, []int{3}, "warehouse 3 district 4: customer 5:"},
		{"stock order count", [][]byte{procs.StockKey(5, 50)}, func(ctx context.Context, t *testing.T, c *client.Client) {
			updateRow(ctx, t, c, procs.StockKey(5, 50), func(s *procs.Stock) { s.OrderCnt++ })
		}, []string{"g1"}, []int{5}, "warehouse 5: item 50: S_ORDER_CNT 1 != 0 loaded + 0"},
	})
}

// failedConditions returns the distinct conditions of failures, TPC-C's
// by number, then gTPC-C's.
func failedConditions(failures []string) []string {
	var out []string
	for _, f := range failures {
		rest, ok := strings.CutPrefix(f, "condition ")
		cond, _, found := strings.Cut(rest, ":")
		if ok && found && !slices.Contains(out, cond) {
			out = append(out, cond)
		}
	}
	// TPC-C's numbers sort before gTPC-C's names.
	rank := func(cond string) (int, int) {
		if n, err := strconv.Atoi(cond); err == nil {
			return 0, n
		}
		return 1, 0
	}
	slices.SortFunc(out, func(a, b string) int {
		ka, na := rank(a)
		kb, nb := rank(b)
		return cmp.Or(cmp.Compare(ka, kb), cmp.Compare(na, nb), strings.Compare(a, b))
	})
	return out
}

func TestCheckErrors(t *testing.T) {
	for _, tc := range []struct {
		ws   []int
		want string
	}{
		{nil, "no warehouses"},
		{[]int{1, 0}, "warehouse 0"},
		{[]int{1, 2, 1}, "warehouse 1 listed twice"},
	} {
		// A nil client: the warehouses are refused before it is used.
		if _, err := Check(context.Background(), nil, tc.ws); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Check(%v): %v, want an error with %q", tc.ws, err, tc.want)
		}
	}
}

// TestCheckPaging loads one warehouse with more history rows, and more
// order lines per district, than one scan returns, so that Load's chunks
// and Check's pages are both many; and checks the errors of a load and a
// check that cannot run.
func TestCheckPaging(t *testing.T) {
	c, _ := startCluster(t, "flexcast")
	ctx, cancel := context.WithTimeout(context.Background(), 35*time.Second)
	defer cancel()
	s := procs.Scale{Items: 1100, CustomersPerDistrict: 200, OrdersPerDistrict: 200, NewOrdersPerDistrict: 60}
	if err := Load(ctx, c, LoadConfig{Warehouses: []int{3}, Scale: s, Concurrency: 8}); err != nil {
		t.Fatal(err)
	}
	rep, err := Check(ctx, c, []int{3})
	if err != nil || !rep.Passed {
		t.Fatalf("Check: %+v, %v", rep, err)
	}
	got := rep.Checked
	if got.History != 2000 || got.Orders != 2000 || got.NewOrders != 600 || got.OrderLines < 5*2000 || got.Stock != 1100 {
		t.Errorf("checked %+v, want 2000 history rows, 2000 orders, 600 new orders, 10000+ order lines, 1100 stock rows", got)
	}

	err = Load(ctx, c, LoadConfig{Warehouses: []int{7}, Scale: loadTestScale})
	if !errors.Is(err, partition.ErrNoPartition) || !strings.Contains(err.Error(), "load warehouse 7") {
		t.Errorf("Load of warehouse 7, in no partition: %v", err)
	}
	if _, err := Check(ctx, c, []int{3, 2}); err == nil || !strings.Contains(err.Error(), "warehouse 2") || !strings.Contains(err.Error(), "not loaded") {
		t.Errorf("Check of warehouse 2, not loaded: %v", err)
	}
}

// procRun is what runProcedures did.
type procRun struct {
	newOrders, rolledBack, deliveries int
	// remoteLines are the stock rows that supplied a committed new-order
	// line of another group's warehouse.
	remoteLines []stockRef
	payments    []paidCall
}

// paidCall is a committed payment: its id, arguments and customer.
type paidCall struct {
	id   string
	args procs.PaymentArgs
	cid  int
}

// remote reports whether the payment's two warehouses are in different
// groups of the test cluster.
func (p paidCall) remote() bool { return testGroupOf(p.args.W) != testGroupOf(p.args.CW) }

// testGroupOf returns the index of the test group that owns warehouse w.
func testGroupOf(w int) int { return (w - 1) / 2 }

// testWarehouseIn returns a test warehouse other than w: of w's group
// when same, of another group otherwise.
func testWarehouseIn(r *rand.Rand, w int, same bool) int {
	for {
		x := testWarehouses[r.IntN(len(testWarehouses))]
		if x != w && (testGroupOf(x) == testGroupOf(w)) == same {
			return x
		}
	}
}

// runProcedures calls the procedures n times through c, one call at a
// time, with arguments drawn from seed over the test warehouses loaded at
// loadTestScale: new-orders whose lines are supplied by the home warehouse,
// another of its group or another group's, some with an unknown item;
// payments by id and by last name to customers of the home warehouse or of
// another one, of its group or not; deliveries; and the read-only
// transactions.
func runProcedures(ctx context.Context, t *testing.T, c *client.Client, seed uint64, n int) procRun {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 0))
	s := loadTestScale
	var run procRun
	call := func(name string, args any) bool {
		t.Helper()
		b := procs.EncodeArgs(args)
		keys, err := procs.ProcedureKeys(name, b)
		if err != nil {
			t.Fatalf("%s %s: %v", name, b, err)
		}
		res, err := c.Call(ctx, name, b, keys)
		if err != nil {
			t.Fatalf("%s %s: %v", name, b, err)
		}
		if p, ok := args.(procs.PaymentArgs); ok {
			out, err := procs.DecodePayment(res)
			if err != nil {
				t.Fatalf("%s %s: %v", name, b, err)
			}
			run.payments = append(run.payments, paidCall{id: res.ID, args: p, cid: out.CID})
		}
		return res.Succeeded
	}
	for i := range n {
		w := testWarehouses[r.IntN(len(testWarehouses))]
		d := 1 + r.IntN(procs.DistrictsPerWarehouse)
		date := loadTestDate + int64(i) + 1
		switch k := r.IntN(100); {
		case k < 45:
			a := procs.NewOrderArgs{W: w, D: d, C: 1 + r.IntN(s.CustomersPerDistrict), EntryD: date}
			unknown := r.IntN(20) == 0
			for range 1 + r.IntN(6) {
				l := procs.NewOrderLine{Item: 1 + r.IntN(s.Items), SupplyW: w, Quantity: 1 + r.IntN(procs.LineQuantityMax)}
				switch r.IntN(5) {
				case 0:
					l.SupplyW = testWarehouseIn(r, w, true)
				case 1:
					l.SupplyW = testWarehouseIn(r, w, false)
				}
				a.Lines = append(a.Lines, l)
			}
			if unknown {
				a.Lines[len(a.Lines)-1].Item = s.Items + 1
			}
			switch ok := call(procs.ProcNewOrder, a); {
			case ok == unknown:
				t.Fatalf("new-order %+v: succeeded %v with an unknown item %v", a, ok, unknown)
			case ok:
				run.newOrders++
				for _, l := range a.Lines {
					if testGroupOf(l.SupplyW) != testGroupOf(w) {
						run.remoteLines = append(run.remoteLines, stockRef{l.SupplyW, l.Item})
					}
				}
			default:
				run.rolledBack++
			}
		case k < 80:
			a := procs.PaymentArgs{W: w, D: d, CW: w, CD: 1 + r.IntN(procs.DistrictsPerWarehouse), Amount: int64(100 + r.IntN(500000)), Date: date}
			if r.IntN(3) > 0 {
				a.CW = testWarehouseIn(r, w, r.IntN(3) == 0)
			}
			if r.IntN(5) < 2 {
				// Customers 1..1000 have last names LastName(0..999).
				a.CLast = procs.LastName(r.IntN(s.CustomersPerDistrict))
			} else {
				a.CID = 1 + r.IntN(s.CustomersPerDistrict)
			}
			if !call(procs.ProcPayment, a) {
				t.Fatalf("payment %+v did not succeed", a)
			}
		case k < 92:
			if !call(procs.ProcDelivery, procs.DeliveryArgs{W: w, Carrier: 1 + r.IntN(procs.DeliveryCarrierMax), Date: date}) {
				t.Fatalf("delivery at warehouse %d did not succeed", w)
			}
			run.deliveries++
		case k < 96:
			call(procs.ProcOrderStatus, procs.OrderStatusArgs{W: w, D: d, CID: 1 + r.IntN(s.CustomersPerDistrict)})
		default:
			call(procs.ProcStockLevel, procs.StockLevelArgs{W: w, D: d, Threshold: 10 + r.IntN(11)})
		}
	}
	return run
}

// deliveredNewOrderLine returns the key of a delivered order line of an
// order new-order wrote (id > loadTestScale.OrdersPerDistrict), and its
// order's customer.
func deliveredNewOrderLine(ctx context.Context, t *testing.T, c *client.Client) (w, d, cid int, key []byte) {
	t.Helper()
	for _, w := range testWarehouses {
		for d := 1; d <= procs.DistrictsPerWarehouse; d++ {
			rows := scanRows(ctx, t, c, procs.OrderLinePrefix(w, d), procs.PrefixEnd(procs.OrderLinePrefix(w, d)))
			keys := make([]string, 0, len(rows))
			for k := range rows { //flexkv:unordered sorted below
				keys = append(keys, k)
			}
			slices.Sort(keys)
			for _, k := range keys {
				ids, err := parseIDs([]byte(k), procs.OrderLinePrefix(w, d), 2)
				if err != nil {
					t.Fatal(err)
				}
				var l procs.OrderLine
				if err := procs.Decode([]byte(k), rows[k], &l); err != nil {
					t.Fatal(err)
				}
				if ids[0] > loadTestScale.OrdersPerDistrict && l.DeliveryD != 0 && l.Amount > 0 {
					var o procs.Order
					v, _, err := c.Get(ctx, procs.OrderKey(w, d, ids[0]))
					if err != nil || procs.Decode(procs.OrderKey(w, d, ids[0]), v, &o) != nil {
						t.Fatalf("order of line %s: %s, %v", k, v, err)
					}
					return w, d, o.CID, []byte(k)
				}
			}
		}
	}
	t.Fatal("no delivered line of a new order")
	return 0, 0, 0, nil
}

// TestCheckAcrossGroups runs 600 calls of the procedures, many
// of them across groups, on a loaded cluster: Check passes, counting every
// payment's two pieces; then it corrupts the pieces that only the
// conditions across groups (g1, g2) and conditions 10 and 12 relate, and
// expects Check to name them.
func TestCheckAcrossGroups(t *testing.T) {
	c, _ := startCluster(t, "flexcast")
	ctx, cancel := context.WithTimeout(context.Background(), 35*time.Second)
	defer cancel()
	loadTiny(ctx, t, c, testWarehouses)
	run := runProcedures(ctx, t, c, 11, 600)
	remote := slices.IndexFunc(run.payments, func(p paidCall) bool { return p.remote() && p.args.CID == 0 })
	if run.newOrders < 50 || run.rolledBack == 0 || run.deliveries < 30 || len(run.remoteLines) < 20 || len(run.payments) < 50 || remote < 0 {
		t.Fatalf("the run proves little: %d new-orders, %d rolled back, %d deliveries, %d remote lines, %d payments (a remote one by name: %v)",
			run.newOrders, run.rolledBack, run.deliveries, len(run.remoteLines), len(run.payments), remote >= 0)
	}
	rep, err := Check(ctx, c, testWarehouses)
	if err != nil || !rep.Passed {
		t.Fatalf("Check after %d calls: %+v, %v", len(run.payments)+run.newOrders+run.rolledBack+run.deliveries, rep, err)
	}
	loaded := 6 * procs.DistrictsPerWarehouse * loadTestScale.CustomersPerDistrict
	if got := rep.Checked; got.CustomerPayments != len(run.payments) || got.History != loaded+len(run.payments) ||
		got.Orders != 6*procs.DistrictsPerWarehouse*loadTestScale.OrdersPerDistrict+run.newOrders {
		t.Errorf("checked %+v; want %d payment records, %d history rows and %d more orders than loaded",
			got, len(run.payments), loaded+len(run.payments), run.newOrders)
	}

	// p was paid to a warehouse of another group than its customer's,
	// named by last name: its history row has no customer id.
	p := run.payments[remote]
	recKey, histKey := procs.CustomerPaymentKey(p.args.CW, p.id), procs.HistoryKey(p.args.W, p.id)
	custKey := procs.CustomerKey(p.args.CW, p.args.CD, p.cid)
	var h procs.History
	if v, _, err := c.Get(ctx, histKey); err != nil || procs.Decode(histKey, v, &h) != nil || h.CID != 0 || h.CLast != p.args.CLast {
		t.Fatalf("history row %s: %s, %v; want one without the customer's id", histKey, v, err)
	}
	twin := testWarehouseIn(rand.New(rand.NewPCG(1, 2)), p.args.CW, true)
	supply := run.remoteLines[0]
	lw, ld, lcid, lineKey := deliveredNewOrderLine(ctx, t, c)
	pw := []int{p.args.W, p.args.CW}
	checkCorruptions(ctx, t, c, []checkCorruption{
		{"stock ytd", [][]byte{procs.StockKey(3, 7)}, func(ctx context.Context, t *testing.T, c *client.Client) {
			updateRow(ctx, t, c, procs.StockKey(3, 7), func(s *procs.Stock) { s.YTD += 2 })
		}, []string{"g1"}, []int{3}, "condition g1: warehouse 3: item 7: S_YTD"},
		// A remote stock piece of a new-order lost.
		{"lost remote stock piece", [][]byte{procs.StockKey(supply.w, supply.i)}, func(ctx context.Context, t *testing.T, c *client.Client) {
			updateRow(ctx, t, c, procs.StockKey(supply.w, supply.i), func(s *procs.Stock) { s.YTD--; s.OrderCnt--; s.RemoteCnt-- })
		}, []string{"g1"}, []int{supply.w}, fmt.Sprintf("condition g1: warehouse %d: item %d: S_REMOTE_CNT", supply.w, supply.i)},
		// The customer's piece of a payment lost.
		{"customer-side record deleted", [][]byte{recKey}, func(ctx context.Context, t *testing.T, c *client.Client) {
			deleteRow(ctx, t, c, recKey)
		}, []string{"10", "g2"}, pw, fmt.Sprintf("condition g2: warehouse %d district %d: payment %s: history row", p.args.W, p.args.D, p.id)},
		// The home piece of a payment lost.
		{"history row deleted", [][]byte{histKey}, func(ctx context.Context, t *testing.T, c *client.Client) {
			deleteRow(ctx, t, c, histKey)
		}, []string{"8", "9", "g2"}, pw, fmt.Sprintf("condition g2: warehouse %d district %d: payment %s: customer-side record", p.args.CW, p.args.CD, p.id)},
		{"extra customer-side record", [][]byte{procs.CustomerPaymentKey(4, "c999999.1")}, func(ctx context.Context, t *testing.T, c *client.Client) {
			putRow(ctx, t, c, procs.CustomerPaymentKey(4, "c999999.1"), procs.CustomerPayment{CD: 3, CID: 2, W: 1, D: 5, Amount: 77, Date: loadTestDate})
		}, []string{"10", "g2"}, []int{4}, "condition g2: warehouse 4 district 3: payment c999999.1: customer-side record of customer 2"},
		// The customer's piece of a payment applied at two warehouses.
		{"customer-side record duplicated", [][]byte{procs.CustomerPaymentKey(twin, p.id)}, func(ctx context.Context, t *testing.T, c *client.Client) {
			v, _, err := c.Get(ctx, recKey)
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Put(ctx, procs.CustomerPaymentKey(twin, p.id), v); err != nil {
				t.Fatal(err)
			}
		}, []string{"10", "g2"}, []int{p.args.CW, twin}, fmt.Sprintf("payment %s has customer-side records at warehouses", p.id)},
		{"customer-side record amount", [][]byte{recKey}, func(ctx context.Context, t *testing.T, c *client.Client) {
			updateRow(ctx, t, c, recKey, func(r *procs.CustomerPayment) { r.Amount++ })
		}, []string{"10", "g2"}, pw, fmt.Sprintf("history row and customer-side record at warehouse %d differ: amount_cents", p.args.CW)},
		{"payment count", [][]byte{custKey}, func(ctx context.Context, t *testing.T, c *client.Client) {
			updateRow(ctx, t, c, custKey, func(c *procs.Customer) { c.PaymentCnt++ })
		}, []string{"g2"}, []int{p.args.CW}, fmt.Sprintf("warehouse %d district %d: customer %d: C_PAYMENT_CNT", p.args.CW, p.args.CD, p.cid)},
		{"customer YTD payment", [][]byte{custKey}, func(ctx context.Context, t *testing.T, c *client.Client) {
			updateRow(ctx, t, c, custKey, func(c *procs.Customer) { c.YTDPayment += 3 })
		}, []string{"12", "g2"}, []int{p.args.CW}, fmt.Sprintf("warehouse %d district %d: customer %d: C_YTD_PAYMENT", p.args.CW, p.args.CD, p.cid)},
		{"delivered line amount", [][]byte{lineKey}, func(ctx context.Context, t *testing.T, c *client.Client) {
			updateRow(ctx, t, c, lineKey, func(l *procs.OrderLine) { l.Amount += 5 })
		}, []string{"10", "12"}, []int{lw}, fmt.Sprintf("condition 10: warehouse %d district %d: customer %d: C_BALANCE", lw, ld, lcid)},
	})
}
