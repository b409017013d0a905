package gtpcc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/flexkv/flexkv/api"
	"github.com/flexkv/flexkv/client"
	"github.com/flexkv/flexkv/kv/kvpb"
	"github.com/flexkv/flexkv/txn"
)

// loadTestScale loads in a moment; two customers of each district have no
// initial order.
var loadTestScale = Scale{Items: 50, CustomersPerDistrict: 12, OrdersPerDistrict: 10, NewOrdersPerDistrict: 4}

// loadTestDate is the load date of the tests.
const loadTestDate int64 = 1700000000000

// loadRecorder is a row writer that records the writes of a piece as the
// executor would: distinct keys, at most txn.ProcWritesMax of them.
type loadRecorder struct {
	keys   [][]byte
	values map[string][]byte
}

func newLoadRecorder() *loadRecorder { return &loadRecorder{values: map[string][]byte{}} }

func (r *loadRecorder) Put(key, value []byte) error {
	if _, ok := r.values[string(key)]; !ok {
		if len(r.keys) >= txn.ProcWritesMax {
			return fmt.Errorf("write %s: more than %d keys", key, txn.ProcWritesMax)
		}
		r.keys = append(r.keys, bytes.Clone(key))
	}
	r.values[string(key)] = bytes.Clone(value)
	return nil
}

func (r *loadRecorder) Delete([]byte) error { return errors.New("the loader never deletes") }

// piece returns a piece of a call of the load procedure with args at a
// group that owns every warehouse when owns is true, none otherwise.
func loadPiece(args []byte, rec *loadRecorder, owns bool) *txn.ProcPiece {
	return &txn.ProcPiece{Args: args, Writer: rec, Owns: func([]byte) bool { return owns }}
}

func TestLoadProcBadArgs(t *testing.T) {
	good := LoadArgs{W: 1, Table: TableCustomer, From: 1, To: 10, Scale: loadTestScale, Date: loadTestDate}
	for _, tc := range []struct {
		name string
		args []byte
		want string // in the error
	}{
		{"not json", []byte("{"), "arguments"},
		{"empty", nil, "arguments"},
		{"unknown field", []byte(`{"w":1,"tabel":"stock"}`), "unknown field"},
		{"data after", append(EncodeArgs(good), []byte(" {}")...), "data after"},
		{"warehouse 0", loadArgsWith(good, func(a *LoadArgs) { a.W = 0 }), "warehouse 0"},
		{"warehouse too large", loadArgsWith(good, func(a *LoadArgs) { a.W = WarehouseMax + 1 }), "warehouse 10000"},
		{"bad scale", loadArgsWith(good, func(a *LoadArgs) { a.Scale.OrdersPerDistrict = 13 }), "orders per district"},
		{"zero scale", loadArgsWith(good, func(a *LoadArgs) { a.Scale = Scale{} }), "items"},
		{"no date", loadArgsWith(good, func(a *LoadArgs) { a.Date = 0 }), "date 0"},
		{"unknown table", loadArgsWith(good, func(a *LoadArgs) { a.Table = "item" }), `table "item"`},
		{"from 0", loadArgsWith(good, func(a *LoadArgs) { a.From = 0 }), "rows 0..10"},
		{"to beyond", loadArgsWith(good, func(a *LoadArgs) { a.To = 13 }), "within 1..12"},
		{"from after to", loadArgsWith(good, func(a *LoadArgs) { a.From, a.To = 5, 4 }), "rows 5..4"},
		{"negative", loadArgsWith(good, func(a *LoadArgs) { a.From, a.To = -5, -1 }), "rows -5..-1"},
		{"order beyond orders", loadArgsWith(good, func(a *LoadArgs) { a.Table, a.From, a.To = TableOrder, 11, 11 }), "within 1..10"},
		{"stock chunk too large", loadArgsWith(good, func(a *LoadArgs) {
			a.Scale = Full
			a.Table, a.From, a.To = TableStock, 1, LoadStockChunkMax+1
		}), "more than a call may write"},
		{"customer chunk too large", loadArgsWith(good, func(a *LoadArgs) {
			a.Scale = Full
			a.From, a.To = 100, 100+LoadCustomerChunkMax
		}), "more than a call may write"},
		{"order chunk too large", loadArgsWith(good, func(a *LoadArgs) {
			a.Scale = Full
			a.Table, a.From, a.To = TableOrder, 1, LoadOrderChunkMax+1
		}), "more than a call may write"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			keys, err := loadProc{}.Keys(tc.args)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Keys: %v, %v; want an error with %q", keys, err, tc.want)
			}
			rec := newLoadRecorder()
			res, err := loadProc{}.Run(loadPiece(tc.args, rec, true))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Run: %+v, %v; want an error with %q", res, err, tc.want)
			}
			if len(rec.keys) > 0 {
				t.Errorf("Run wrote %d keys despite the error", len(rec.keys))
			}
		})
	}
	t.Run("not owned", func(t *testing.T) {
		rec := newLoadRecorder()
		_, err := loadProc{}.Run(loadPiece(EncodeArgs(good), rec, false))
		if err == nil || !strings.Contains(err.Error(), "does not own") || len(rec.keys) > 0 {
			t.Errorf("Run at a group that does not own warehouse 1: %v, %d writes; want an error and none", err, len(rec.keys))
		}
	})
	t.Run("good", func(t *testing.T) {
		keys, err := loadProc{}.Keys(EncodeArgs(good))
		if err != nil || len(keys) != 1 || !bytes.Equal(keys[0], WarehouseKey(1)) {
			t.Fatalf("Keys = %q, %v; want [%s]", keys, err, WarehouseKey(1))
		}
		rec := newLoadRecorder()
		res, err := loadProc{}.Run(loadPiece(EncodeArgs(good), rec, true))
		if err != nil || !res.Succeeded || res.Aborted {
			t.Fatalf("Run = %+v, %v", res, err)
		}
		if want := 10 * 3 * DistrictsPerWarehouse; len(rec.keys) != want {
			t.Errorf("customers 1..10 wrote %d keys, want %d", len(rec.keys), want)
		}
	})
}

// loadArgsWith returns the encoding of a copy of a changed by change.
func loadArgsWith(a LoadArgs, change func(*LoadArgs)) []byte {
	change(&a)
	return EncodeArgs(a)
}

// FuzzLoadProc runs the load procedure on any arguments: it must never
// panic, and must either refuse them or write only keys of its warehouse,
// at most txn.ProcWritesMax.
func FuzzLoadProc(f *testing.F) {
	f.Add(EncodeArgs(LoadArgs{W: 7, Table: TableOrder, From: 1, To: 6, Scale: loadTestScale, Date: 1}))
	f.Add(EncodeArgs(LoadArgs{W: 9999, Table: TableWarehouse, Scale: Small, Date: 5}))
	f.Add([]byte(`{"w":1,"table":"stock","from":1,"to":1,"scale":{"items":1,"customers_per_district":1},"date_ms":1}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var a LoadArgs
		if decodeArgs(ProcLoad, b, &a) == nil && a.Table == TableStock && validateLoadArgs(&a) == nil && a.Scale.Items > 5000 {
			t.Skip() // large but valid: slow, and covered by TestLoadChunkBound
		}
		rec := newLoadRecorder()
		res, err := loadProc{}.Run(loadPiece(b, rec, true))
		if err != nil {
			return
		}
		if !res.Succeeded {
			t.Fatalf("Run = %+v without an error", res)
		}
		for _, k := range rec.keys {
			if !bytes.HasPrefix(k, WarehousePrefix(a.W)) {
				t.Fatalf("wrote %s, outside warehouse %d", k, a.W)
			}
		}
	})
}

// TestLoadChunkBound loads chunks of the largest size at full scale,
// where orders have the most lines and new-order rows: every call writes
// at most txn.ProcWritesMax keys, all in its warehouse.
func TestLoadChunkBound(t *testing.T) {
	for _, tc := range []struct {
		table    string
		from, to int // of the chunk; to = from + LoadChunkMax - 1
	}{
		{TableWarehouse, 0, 0},
		{TableStock, 1, LoadStockChunkMax},
		{TableStock, Full.Items - LoadStockChunkMax + 1, Full.Items},
		{TableCustomer, 1, LoadCustomerChunkMax},
		{TableCustomer, 1001, 1000 + LoadCustomerChunkMax},
		{TableOrder, 1, LoadOrderChunkMax},
		{TableOrder, Full.OrdersPerDistrict - LoadOrderChunkMax + 1, Full.OrdersPerDistrict},
	} {
		t.Run(fmt.Sprintf("%s %d..%d", tc.table, tc.from, tc.to), func(t *testing.T) {
			a := LoadArgs{W: 42, Table: tc.table, From: tc.from, To: tc.to, Scale: Full, Date: loadTestDate}
			rec := newLoadRecorder()
			if _, err := (loadProc{}).Run(loadPiece(EncodeArgs(a), rec, true)); err != nil {
				t.Fatal(err)
			}
			if tc.table == TableWarehouse && len(rec.keys) != loadWarehouseWrites {
				t.Errorf("wrote %d keys, want %d", len(rec.keys), loadWarehouseWrites)
			}
			if len(rec.keys) > txn.ProcWritesMax || len(rec.keys) == 0 {
				t.Errorf("wrote %d keys, want 1..%d", len(rec.keys), txn.ProcWritesMax)
			}
			for _, k := range rec.keys {
				if !bytes.HasPrefix(k, WarehousePrefix(42)) {
					t.Errorf("wrote %s, outside warehouse 42", k)
				}
			}
			t.Logf("%d keys", len(rec.keys))
		})
	}
	// The bound holds for the worst case, whatever the draws: every order
	// with OrderLinesMax lines and a new-order row.
	if n := LoadOrderChunkMax * loadOrderWrites; n > txn.ProcWritesMax {
		t.Errorf("an order chunk may write %d keys, more than %d", n, txn.ProcWritesMax)
	}
	if n := LoadCustomerChunkMax * loadCustomerWrites; n > txn.ProcWritesMax {
		t.Errorf("a customer chunk writes %d keys, more than %d", n, txn.ProcWritesMax)
	}
}

// TestLoadRowsDeterministic: a call writes the same bytes every time,
// as every replica must.
func TestLoadRowsDeterministic(t *testing.T) {
	for _, table := range []string{TableWarehouse, TableStock, TableCustomer, TableOrder} {
		a := LoadArgs{W: 3, Table: table, From: 5, To: 10, Scale: loadTestScale, Date: loadTestDate}
		r1, r2 := newLoadRecorder(), newLoadRecorder()
		if err := writeLoadRows(&a, r1); err != nil {
			t.Fatal(err)
		}
		if err := writeLoadRows(&a, r2); err != nil {
			t.Fatal(err)
		}
		if len(r1.keys) == 0 || !slices.EqualFunc(r1.keys, r2.keys, bytes.Equal) {
			t.Fatalf("%s: keys differ between two runs (%d, %d)", table, len(r1.keys), len(r2.keys))
		}
		for _, k := range r1.keys {
			if !bytes.Equal(r1.values[string(k)], r2.values[string(k)]) {
				t.Errorf("%s: %s differs between two runs", table, k)
			}
		}
	}
	// Another warehouse gets other rows.
	a := LoadArgs{W: 3, Table: TableStock, From: 1, To: 1, Scale: loadTestScale, Date: loadTestDate}
	b := a
	b.W = 4
	ra, rb := newLoadRecorder(), newLoadRecorder()
	_ = writeLoadRows(&a, ra)
	_ = writeLoadRows(&b, rb)
	if bytes.Equal(ra.values[string(StockKey(3, 1))], rb.values[string(StockKey(4, 1))]) {
		t.Errorf("stock of item 1 is the same at warehouses 3 and 4")
	}
}

// TestCustomerOrdersPermutation: the initial orders' customers are
// distinct customers, and a prefix of the shuffle does not depend on how
// far it ran.
func TestCustomerOrdersPermutation(t *testing.T) {
	s := Scale{Items: 10, CustomersPerDistrict: 3000, OrdersPerDistrict: 2500, NewOrdersPerDistrict: 900}
	all := customerOrders(7, 3, s, s.OrdersPerDistrict)
	if len(all) != s.OrdersPerDistrict {
		t.Fatalf("%d customers, want %d", len(all), s.OrdersPerDistrict)
	}
	seen := map[int]bool{}
	for _, c := range all {
		if c < 1 || c > s.CustomersPerDistrict || seen[c] {
			t.Fatalf("customer %d out of range or twice", c)
		}
		seen[c] = true
	}
	if prefix := customerOrders(7, 3, s, 17); !slices.Equal(prefix, all[:17]) {
		t.Errorf("prefix of 17 = %v, want %v", prefix, all[:17])
	}
	if slices.Equal(all, customerOrders(7, 4, s, s.OrdersPerDistrict)) {
		t.Errorf("districts 3 and 4 have the same order customers")
	}
	last := customerLastOrders(7, 3, s)
	withOrder := 0
	for c, o := range last {
		if o != 0 {
			withOrder++
			if all[o-1] != c+1 {
				t.Fatalf("customer %d: last order %d, whose customer is %d", c+1, o, all[o-1])
			}
		}
	}
	if withOrder != s.OrdersPerDistrict {
		t.Errorf("%d customers with an order, want %d", withOrder, s.OrdersPerDistrict)
	}
	// Full permutation, one customer.
	one := Scale{Items: 1, CustomersPerDistrict: 1, OrdersPerDistrict: 1}
	if got := customerOrders(1, 1, one, 1); !slices.Equal(got, []int{1}) {
		t.Errorf("one customer: %v", got)
	}
}

// TestLoadJobs: the calls of a load cover every row exactly once, in
// chunks a call accepts.
func TestLoadJobs(t *testing.T) {
	cfg, err := checkLoadConfig(LoadConfig{Warehouses: []int{2, 9}, Scale: Scale{Items: 2050, CustomersPerDistrict: 70, OrdersPerDistrict: 70, NewOrdersPerDistrict: 21}})
	if err != nil {
		t.Fatal(err)
	}
	items, whs := loadJobs(cfg)
	next := 1
	for _, j := range items {
		if !j.items || j.args.From != next || j.args.To-j.args.From+1 > txn.OpsMax || j.args.To < j.args.From {
			t.Fatalf("item job %s after item %d", j, next-1)
		}
		next = j.args.To + 1
	}
	if next != 2051 {
		t.Errorf("items end at %d, want 2050", next-1)
	}
	type tw struct {
		w     int
		table string
	}
	covered := map[tw]int{} // next row expected
	for _, j := range whs {
		if err := validateLoadArgs(&j.args); err != nil || j.items {
			t.Fatalf("job %s: %v", j, err)
		}
		if j.args.Date != LoadDateDefault {
			t.Errorf("job %s: date %d, want the default %d", j, j.args.Date, LoadDateDefault)
		}
		k := tw{j.args.W, j.args.Table}
		if j.args.Table == TableWarehouse {
			covered[k]++
			continue
		}
		if covered[k] == 0 {
			covered[k] = 1
		}
		if j.args.From != covered[k] {
			t.Fatalf("job %s: want rows from %d", j, covered[k])
		}
		covered[k] = j.args.To + 1
	}
	for _, w := range []int{2, 9} {
		want := map[string]int{TableWarehouse: 1, TableStock: 2051, TableCustomer: 71, TableOrder: 71}
		for table, n := range want {
			if got := covered[tw{w, table}]; got != n {
				t.Errorf("warehouse %d %s: covered up to %d, want %d", w, table, got, n)
			}
		}
	}
}

func TestLoadConfigBad(t *testing.T) {
	good := LoadConfig{Warehouses: []int{1}, Scale: loadTestScale}
	for _, tc := range []struct {
		name   string
		change func(*LoadConfig)
		want   string
	}{
		{"no warehouses", func(c *LoadConfig) { c.Warehouses = nil }, "no warehouses"},
		{"warehouse 0", func(c *LoadConfig) { c.Warehouses = []int{1, 0} }, "warehouse 0"},
		{"twice", func(c *LoadConfig) { c.Warehouses = []int{3, 1, 3} }, "warehouse 3 listed twice"},
		{"scale", func(c *LoadConfig) { c.Scale.Items = 0 }, "0 items"},
		{"concurrency", func(c *LoadConfig) { c.Concurrency = -1 }, "concurrency -1"},
		{"date", func(c *LoadConfig) { c.Date = -1 }, "date -1"},
	} {
		cfg := good
		tc.change(&cfg)
		// A nil client: the configuration is refused before it is used.
		if err := Load(context.Background(), nil, cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Load = %v, want an error with %q", tc.name, err, tc.want)
		}
	}
}

// scanRows returns every row of [start, end) (one partition) as a map.
func scanRows(ctx context.Context, t *testing.T, c *client.Client, start, end []byte) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	for {
		kvs, err := c.Scan(ctx, start, end, txn.ScanLimitMax)
		if err != nil {
			t.Fatalf("scan %s: %v", start, err)
		}
		for _, kv := range kvs {
			out[string(kv.Key)] = kv.Value
		}
		if len(kvs) < txn.ScanLimitMax {
			return out
		}
		start = append(bytes.Clone(kvs[len(kvs)-1].Key), 0)
	}
}

// snapshotRows returns every row of the test warehouses and the items.
func snapshotRows(ctx context.Context, t *testing.T, c *client.Client) map[string][]byte {
	t.Helper()
	all := scanRows(ctx, t, c, []byte("item/"), []byte("item0"))
	for _, w := range testWarehouses {
		for k, v := range scanRows(ctx, t, c, WarehousePrefix(w), WarehouseEnd(w)) {
			all[k] = v
		}
	}
	return all
}

// loadTiny loads loadTestScale into the test warehouses.
func loadTiny(ctx context.Context, t *testing.T, c *client.Client, warehouses []int) {
	t.Helper()
	if err := Load(ctx, c, LoadConfig{Warehouses: warehouses, Scale: loadTestScale, Concurrency: 4, Date: loadTestDate}); err != nil {
		t.Fatal(err)
	}
}

func TestLoadCluster(t *testing.T) {
	c, _ := startCluster(t, "flexcast")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	var calls []int
	total := 0
	err := Load(ctx, c, LoadConfig{Warehouses: testWarehouses, Scale: loadTestScale, Concurrency: 4, Date: loadTestDate,
		Progress: func(done, n int) { calls = append(calls, done); total = n }})
	if err != nil {
		t.Fatal(err)
	}
	// 1 item transaction, and per warehouse: the warehouse, 1 stock
	// chunk, 1 customer chunk and 2 order chunks.
	if want := 1 + 6*5; total != want || len(calls) != want || calls[len(calls)-1] != want {
		t.Errorf("progress: %d calls reported, last %v, total %d; want %d", len(calls), calls[len(calls)-1:], total, want)
	}

	if s, err := ReadScale(ctx, c, testWarehouses); err != nil || s != loadTestScale {
		t.Errorf("ReadScale after load: %+v, %v; want %+v", s, err, loadTestScale)
	}
	if err := c.Delete(ctx, ScaleKey(3)); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadScale(ctx, c, testWarehouses); err == nil || !strings.Contains(err.Error(), "warehouse 3 is not loaded") {
		t.Errorf("ReadScale without warehouse 3's scale: %v", err)
	}
	if err := c.Put(ctx, ScaleKey(3), Encode(Small)); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadScale(ctx, c, testWarehouses); err == nil || !strings.Contains(err.Error(), "one scale") {
		t.Errorf("ReadScale with warehouse 3 at another scale: %v", err)
	}
	if err := c.Put(ctx, ScaleKey(3), Encode(loadTestScale)); err != nil {
		t.Fatal(err)
	}

	rep, err := Check(ctx, c, testWarehouses)
	if err != nil || !rep.Passed {
		t.Fatalf("Check after load: %+v, %v", rep, err)
	}
	want := CheckCounts{Warehouses: 6, Districts: 60, Orders: 600, NewOrders: 240, History: 720}
	if got := rep.Checked; got.Warehouses != want.Warehouses || got.Districts != want.Districts || got.Orders != want.Orders ||
		got.NewOrders != want.NewOrders || got.History != want.History || got.OrderLines < 5*600 || got.OrderLines > 15*600 {
		t.Errorf("checked %+v, want %+v with 3000..9000 order lines", got, want)
	}

	first := snapshotRows(ctx, t, c)
	checkRows(t, first)

	checkReplicasAgree(ctx, t, c, first)

	// The cluster holds exactly the rows the generator makes: the loader
	// is deterministic, and every call landed once.
	cfg, err := checkLoadConfig(LoadConfig{Warehouses: testWarehouses, Scale: loadTestScale, Date: loadTestDate})
	if err != nil {
		t.Fatal(err)
	}
	if diff := diffRows(first, generatedRows(t, cfg), nil); diff != "" {
		t.Errorf("the cluster after the load and the generator differ: %s", diff)
	}

	// Loading again is refused, before anything is written (not even the
	// items): warehouse 6 has lost its scale and would be loaded, but
	// warehouse 2 has its scale.
	if err := c.Put(ctx, ItemKey(1), []byte(`{"changed":1}`)); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, ScaleKey(6)); err != nil {
		t.Fatal(err)
	}
	updateRow(ctx, t, c, DistrictKey(6, 1), func(d *District) { d.NextOID = 77 })
	err = Load(ctx, c, LoadConfig{Warehouses: []int{6, 2}, Scale: loadTestScale, Concurrency: 4, Date: loadTestDate})
	if err == nil || !strings.Contains(err.Error(), "warehouse 2 is loaded already") || !strings.Contains(err.Error(), "empty cluster") {
		t.Errorf("Load of a loaded warehouse: %v, want a refusal naming warehouse 2", err)
	}
	if v, _, err := c.Get(ctx, ItemKey(1)); err != nil || string(v) != `{"changed":1}` {
		t.Errorf("item 1 after the refused load: %s, %v; want it untouched", v, err)
	}
	var d District
	if v, _, err := c.Get(ctx, DistrictKey(6, 1)); err != nil || Decode(DistrictKey(6, 1), v, &d) != nil || d.NextOID != 77 {
		t.Errorf("district 6/1 after the refused load: %s, %v; want it untouched", v, err)
	}
}

// generatedRows returns the rows a load of cfg (checked) writes, made by
// the generator directly: the items, every warehouse's tables and scale.
func generatedRows(t *testing.T, cfg LoadConfig) map[string][]byte {
	t.Helper()
	rows := mapWriter{}
	for i := 1; i <= cfg.Scale.Items; i++ {
		rows[string(ItemKey(i))] = Encode(itemRow(i))
	}
	_, jobs := loadJobs(cfg)
	for _, j := range jobs {
		if err := writeLoadRows(&j.args, rows); err != nil {
			t.Fatalf("%s: %v", j, err)
		}
	}
	for _, w := range cfg.Warehouses {
		rows[string(ScaleKey(w))] = Encode(cfg.Scale)
	}
	return rows
}

// mapWriter is a row writer into a map, without bounds.
type mapWriter map[string][]byte

func (m mapWriter) Put(key, value []byte) error {
	m[string(key)] = bytes.Clone(value)
	return nil
}

// checkRows spot-checks the loaded rows against clause 4.3.3.1 and the
// loader's promises.
func checkRows(t *testing.T, rows map[string][]byte) {
	t.Helper()
	decode := func(key []byte, row any) bool {
		t.Helper()
		v, ok := rows[string(key)]
		if !ok {
			t.Errorf("no row %s", key)
			return false
		}
		if err := Decode(key, v, row); err != nil {
			t.Error(err)
			return false
		}
		return true
	}
	s := loadTestScale
	for i := 1; i <= s.Items; i++ {
		var it Item
		if decode(ItemKey(i), &it) && (it.Price < 100 || it.Price > 10000 || len(it.Name) < 14 || len(it.Name) > 24 || it.Image < 1 || it.Image > 10000) {
			t.Errorf("item %d: %+v", i, it)
		}
	}
	if _, ok := rows[string(ItemKey(s.Items+1))]; ok {
		t.Errorf("item %d loaded, beyond the scale", s.Items+1)
	}
	for _, w := range testWarehouses {
		var wh Warehouse
		if decode(WarehouseKey(w), &wh) && (wh.YTD != 10*12*1000 || wh.Tax < 0 || wh.Tax > 2000) {
			t.Errorf("warehouse %d: %+v, want YTD %d", w, wh, 10*12*1000)
		}
		for i := 1; i <= s.Items; i++ {
			var st Stock
			if decode(StockKey(w, i), &st) && (st.Quantity < 10 || st.Quantity > 100 || len(st.Data) < 26 || len(st.Data) > 50) {
				t.Errorf("stock %d of warehouse %d: %+v", i, w, st)
			}
		}
		history := 0
		for k := range rows {
			if strings.HasPrefix(k, string(HistoryPrefix(w))) {
				history++
			}
		}
		if history != 10*s.CustomersPerDistrict {
			t.Errorf("warehouse %d: %d history rows, want %d", w, history, 10*s.CustomersPerDistrict)
		}
		for d := 1; d <= DistrictsPerWarehouse; d++ {
			checkDistrictRows(t, rows, decode, w, d)
		}
	}
}

func checkDistrictRows(t *testing.T, rows map[string][]byte, decode func([]byte, any) bool, w, d int) {
	t.Helper()
	s := loadTestScale
	var dist District
	if decode(DistrictKey(w, d), &dist) && (dist.NextOID != s.OrdersPerDistrict+1 || dist.YTD != 12*1000) {
		t.Errorf("district %d/%d: NextOID %d, YTD %d; want %d, %d", w, d, dist.NextOID, dist.YTD, s.OrdersPerDistrict+1, 12*1000)
	}
	orderOf := map[int]int{} // customer -> its order
	for o := 1; o <= s.OrdersPerDistrict; o++ {
		var ord Order
		if !decode(OrderKey(w, d, o), &ord) {
			continue
		}
		if prev, ok := orderOf[ord.CID]; ok {
			t.Errorf("district %d/%d: orders %d and %d of customer %d", w, d, prev, o, ord.CID)
		}
		orderOf[ord.CID] = o
		undelivered := o > s.OrdersPerDistrict-s.NewOrdersPerDistrict
		_, hasNO := rows[string(NewOrderKey(w, d, o))]
		if hasNO != undelivered || (ord.Carrier == 0) != undelivered || ord.OLCnt < 5 || ord.OLCnt > 15 || ord.EntryD != loadTestDate {
			t.Errorf("order %d/%d/%d: %+v, new-order row %v; want undelivered %v", w, d, o, ord, hasNO, undelivered)
		}
		for n := 1; n <= ord.OLCnt; n++ {
			var ol OrderLine
			if !decode(OrderLineKey(w, d, o, n), &ol) {
				continue
			}
			if ol.DistInfo != StockDist(w, ol.Item, d) || ol.SupplyW != w || ol.Quantity != 5 ||
				(undelivered && (ol.Amount < 1 || ol.DeliveryD != 0)) || (!undelivered && (ol.Amount != 0 || ol.DeliveryD != loadTestDate)) {
				t.Errorf("order line %d/%d/%d/%d: %+v", w, d, o, n, ol)
			}
		}
		if _, ok := rows[string(OrderLineKey(w, d, o, ord.OLCnt+1))]; ok {
			t.Errorf("order %d/%d/%d: a line beyond O_OL_CNT %d", w, d, o, ord.OLCnt)
		}
	}
	for c := 1; c <= s.CustomersPerDistrict; c++ {
		var cu Customer
		if !decode(CustomerKey(w, d, c), &cu) {
			continue
		}
		if cu.LastOrder != orderOf[c] {
			t.Errorf("customer %d/%d/%d: LastOrder %d, want %d", w, d, c, cu.LastOrder, orderOf[c])
		}
		if cu.Last != LastName(c-1) || cu.Middle != "OE" || cu.Balance != -1000 || cu.YTDPayment != 1000 || cu.PaymentCnt != 1 ||
			cu.CreditLimit != 5000000 || cu.Discount < 0 || cu.Discount > 5000 || len(cu.Data) < 300 || len(cu.Data) > 500 || cu.Since != loadTestDate {
			t.Errorf("customer %d/%d/%d: %+v", w, d, c, cu)
		}
		if v, ok := rows[string(CustomerNameKey(w, d, cu.Last, cu.First, c))]; !ok || len(v) != 0 {
			t.Errorf("customer %d/%d/%d: name index entry %q, found %v; want an empty value", w, d, c, v, ok)
		}
		var h History
		if decode(HistoryKey(w, loadHistoryID(d, c)), &h) && (h.CID != c || h.D != d || h.W != w || h.CD != d || h.CW != w || h.Amount != 1000) {
			t.Errorf("history of customer %d/%d/%d: %+v", w, d, c, h)
		}
	}
	if len(orderOf) != s.OrdersPerDistrict {
		t.Errorf("district %d/%d: %d customers with orders, want %d", w, d, len(orderOf), s.OrdersPerDistrict)
	}
}

// checkReplicasAgree checks that every replica of each warehouse's group
// holds the rows want holds for it, as the leaders do: the load procedure
// ran at each replica and must have written the same bytes. Followers
// apply a little after their leader, so it waits (up to 10 s) for them to
// catch up before it reports a difference.
func checkReplicasAgree(ctx context.Context, t *testing.T, c *client.Client, want map[string][]byte) {
	t.Helper()
	cfg := c.Topology().Config
	for _, w := range testWarehouses {
		owner := testGroups[(w-1)/2]
		for _, g := range cfg.Groups {
			if g.Name != owner {
				continue
			}
			for _, r := range g.Replicas {
				kv := dialReplica(t, r.GRPC)
				deadline := time.Now().Add(10 * time.Second)
				for {
					diff := diffRows(replicaRows(ctx, t, kv, WarehousePrefix(w), WarehouseEnd(w)), want, WarehousePrefix(w))
					if diff == "" {
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("replica %s of group %s, warehouse %d: %s", r.ID, g.Name, w, diff)
					}
					time.Sleep(20 * time.Millisecond)
				}
			}
		}
	}
}

// diffRows describes the first difference between got and the rows of
// want under prefix, or returns "".
func diffRows(got, want map[string][]byte, prefix []byte) string {
	n := 0
	for k, v := range want {
		if !strings.HasPrefix(k, string(prefix)) {
			continue
		}
		n++
		if g, ok := got[k]; !ok || !bytes.Equal(g, v) {
			return fmt.Sprintf("row %s is %q (found %v), want %q", k, g, ok, v)
		}
	}
	if len(got) != n {
		return fmt.Sprintf("%d rows, want %d", len(got), n)
	}
	return ""
}

// dialReplica returns a raw client of the replica at addr.
func dialReplica(t *testing.T, addr string) kvpb.KVClient {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return kvpb.NewKVClient(cc)
}

// replicaRows returns the rows of [start, end) as one replica holds them
// now (stale scans).
func replicaRows(ctx context.Context, t *testing.T, kv kvpb.KVClient, start, end []byte) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	for {
		resp, err := kv.Scan(ctx, &kvpb.ScanRequest{Start: start, End: end, Limit: txn.ScanLimitMax, Stale: true})
		if err != nil {
			t.Fatalf("stale scan %s: %v", start, err)
		}
		kvs := api.KVsFromProto(resp.GetKvs())
		for _, e := range kvs {
			out[string(e.Key)] = e.Value
		}
		if len(kvs) < txn.ScanLimitMax {
			return out
		}
		start = append(bytes.Clone(kvs[len(kvs)-1].Key), 0)
	}
}
