package gtpcc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/flexkv/flexkv/client"
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
		ck.fail(7, 1, 2, "line %d", i)
	}
	if rep.Passed || len(rep.Failures) != CheckFailuresMax || rep.FailuresOmitted != 7 {
		t.Errorf("passed %v, %d failures, %d omitted; want false, %d, 7", rep.Passed, len(rep.Failures), rep.FailuresOmitted, CheckFailuresMax)
	}
	if want := "condition 7: warehouse 1 district 2: line 0"; rep.Failures[0] != want {
		t.Errorf("failure %q, want %q", rep.Failures[0], want)
	}
}

func TestParseIDs(t *testing.T) {
	ids, err := parseIDs(OrderLineKey(3, 4, 1234, 15), OrderLinePrefix(3, 4), 2)
	if err != nil || !slices.Equal(ids, []int{1234, 15}) {
		t.Errorf("order line key: %v, %v", ids, err)
	}
	for _, key := range []string{"w/0003/ol/04/12", "w/0003/ol/04/x/1", "w/0003/ol/04/1/2/3", "w/0003/o/04/1/2"} {
		if ids, err := parseIDs([]byte(key), OrderLinePrefix(3, 4), 2); err == nil {
			t.Errorf("%s: %v, want an error", key, ids)
		}
	}
}

// checkCorruption is a change to loaded rows and the conditions Check must
// then find violated.
type checkCorruption struct {
	name  string
	w, d  int
	apply func(ctx context.Context, t *testing.T, c *client.Client)
	conds []int
}

// updateRow reads the row at key into a fresh T, changes it and writes it back.
func updateRow[T any](ctx context.Context, t *testing.T, c *client.Client, key []byte, change func(*T)) {
	t.Helper()
	v, found, err := c.Get(ctx, key)
	if err != nil || !found {
		t.Fatalf("get %s: found %v, %v", key, found, err)
	}
	var row T
	if err := Decode(key, v, &row); err != nil {
		t.Fatal(err)
	}
	change(&row)
	if err := c.Put(ctx, key, Encode(row)); err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
}

func deleteRow(ctx context.Context, t *testing.T, c *client.Client, key []byte) {
	t.Helper()
	if err := c.Delete(ctx, key); err != nil {
		t.Fatalf("delete %s: %v", key, err)
	}
}

// TestCheckFindsCorruption loads the test warehouses, corrupts one row (or
// two) at a time, and expects Check to name exactly the conditions the
// change violates, at the right warehouse and district; loading the
// warehouse again repairs it.
func TestCheckFindsCorruption(t *testing.T) {
	c, _ := startCluster(t, "skeen")
	ctx, cancel := context.WithTimeout(context.Background(), 35*time.Second)
	defer cancel()
	loadTiny(ctx, t, c, testWarehouses)
	if rep, err := Check(ctx, c, testWarehouses); err != nil || !rep.Passed {
		t.Fatalf("Check after load: %+v, %v", rep, err)
	}

	// loadTestScale: orders 1..10 per district, 7..10 undelivered.
	for _, tc := range []checkCorruption{
		{"district YTD", 2, 3, func(ctx context.Context, t *testing.T, c *client.Client) {
			updateRow(ctx, t, c, DistrictKey(2, 3), func(d *District) { d.YTD += 100 })
		}, []int{1, 9}},
		{"warehouse YTD", 1, 0, func(ctx context.Context, t *testing.T, c *client.Client) {
			updateRow(ctx, t, c, WarehouseKey(1), func(w *Warehouse) { w.YTD-- })
		}, []int{1, 8}},
		{"middle new-order deleted", 3, 5, func(ctx context.Context, t *testing.T, c *client.Client) {
			deleteRow(ctx, t, c, NewOrderKey(3, 5, 8))
		}, []int{3, 5}},
		{"last new-order deleted", 5, 2, func(ctx context.Context, t *testing.T, c *client.Client) {
			deleteRow(ctx, t, c, NewOrderKey(5, 2, 10))
		}, []int{2, 5}},
		{"next order id", 6, 7, func(ctx context.Context, t *testing.T, c *client.Client) {
			updateRow(ctx, t, c, DistrictKey(6, 7), func(d *District) { d.NextOID++ })
		}, []int{2}},
		{"order OL_CNT", 4, 1, func(ctx context.Context, t *testing.T, c *client.Client) {
			updateRow(ctx, t, c, OrderKey(4, 1, 2), func(o *Order) { o.OLCnt++ })
		}, []int{4, 6}},
		{"delivered order's carrier", 1, 10, func(ctx context.Context, t *testing.T, c *client.Client) {
			updateRow(ctx, t, c, OrderKey(1, 10, 1), func(o *Order) { o.Carrier = 0 })
		}, []int{5, 7}},
		{"order line delivery date", 6, 9, func(ctx context.Context, t *testing.T, c *client.Client) {
			updateRow(ctx, t, c, OrderLineKey(6, 9, 3, 2), func(l *OrderLine) { l.DeliveryD = 0 })
		}, []int{7}},
		{"history amount", 2, 4, func(ctx context.Context, t *testing.T, c *client.Client) {
			updateRow(ctx, t, c, HistoryKey(2, loadHistoryID(4, 7)), func(h *History) { h.Amount += 5 })
		}, []int{8, 9}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.apply(ctx, t, c)
			rep, err := Check(ctx, c, []int{tc.w})
			if err != nil {
				t.Fatal(err)
			}
			if rep.Passed {
				t.Fatalf("Check passed after the change")
			}
			if got := failedConditions(rep.Failures); !slices.Equal(got, tc.conds) {
				t.Errorf("conditions %v violated, want %v: %q", got, tc.conds, rep.Failures)
			}
			where := fmt.Sprintf("warehouse %d district %d:", tc.w, tc.d)
			if tc.d == 0 {
				where = fmt.Sprintf("warehouse %d:", tc.w)
			}
			named := false
			for _, f := range rep.Failures {
				named = named || strings.Contains(f, where)
				if !strings.Contains(f, fmt.Sprintf("warehouse %d", tc.w)) {
					t.Errorf("failure %q does not name warehouse %d", f, tc.w)
				}
			}
			if !named {
				t.Errorf("no failure names %q: %q", where, rep.Failures)
			}
			// The other warehouses are untouched.
			others := slices.DeleteFunc(slices.Clone(testWarehouses), func(w int) bool { return w == tc.w })
			if rep, err := Check(ctx, c, others); err != nil || !rep.Passed {
				t.Errorf("Check of the other warehouses: %+v, %v", rep, err)
			}
			// Loading again writes the initial rows back.
			loadTiny(ctx, t, c, []int{tc.w})
			if rep, err := Check(ctx, c, []int{tc.w}); err != nil || !rep.Passed {
				t.Fatalf("Check after loading warehouse %d again: %+v, %v", tc.w, rep, err)
			}
		})
	}
}

// failedConditions returns the sorted distinct condition numbers of failures.
func failedConditions(failures []string) []int {
	var out []int
	for _, f := range failures {
		var n int
		if _, err := fmt.Sscanf(f, "condition %d:", &n); err == nil && !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

func TestCheckErrors(t *testing.T) {
	if _, err := Check(context.Background(), nil, nil); err == nil || !strings.Contains(err.Error(), "no warehouses") {
		t.Errorf("Check of no warehouses: %v", err)
	}
	if _, err := Check(context.Background(), nil, []int{1, 0}); err == nil || !strings.Contains(err.Error(), "warehouse 0") {
		t.Errorf("Check of warehouse 0: %v", err)
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
	s := Scale{Items: 20, CustomersPerDistrict: 200, OrdersPerDistrict: 200, NewOrdersPerDistrict: 60}
	if err := Load(ctx, c, LoadConfig{Warehouses: []int{3}, Scale: s, Concurrency: 8}); err != nil {
		t.Fatal(err)
	}
	rep, err := Check(ctx, c, []int{3})
	if err != nil || !rep.Passed {
		t.Fatalf("Check: %+v, %v", rep, err)
	}
	got := rep.Checked
	if got.History != 2000 || got.Orders != 2000 || got.NewOrders != 600 || got.OrderLines < 5*2000 {
		t.Errorf("checked %+v, want 2000 history rows, 2000 orders, 600 new orders, 10000+ order lines", got)
	}

	err = Load(ctx, c, LoadConfig{Warehouses: []int{7}, Scale: loadTestScale})
	if !errors.Is(err, partition.ErrNoPartition) || !strings.Contains(err.Error(), "load warehouse 7 table ") {
		t.Errorf("Load of warehouse 7, in no partition: %v", err)
	}
	if _, err := Check(ctx, c, []int{3, 2}); err == nil || !strings.Contains(err.Error(), "warehouse 2") || !strings.Contains(err.Error(), "not loaded") {
		t.Errorf("Check of warehouse 2, not loaded: %v", err)
	}
}
