package gtpcc

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/flexkv/flexkv/api"
	"github.com/flexkv/flexkv/api/apipb"
	"github.com/flexkv/flexkv/client"
	"github.com/flexkv/flexkv/gtpcc/procs"
	"github.com/flexkv/flexkv/txn"
)

// loadTestScale loads in a moment; two customers of each district have no
// initial order.
var loadTestScale = procs.Scale{Items: 50, CustomersPerDistrict: 12, OrdersPerDistrict: 10, NewOrdersPerDistrict: 4}

// loadTestDate is the load date of the tests.
const loadTestDate int64 = 1700000000000

// TestLoadJobs: the calls of a load cover every row exactly once, in
// chunks a call accepts.
func TestLoadJobs(t *testing.T) {
	cfg, err := checkLoadConfig(LoadConfig{Warehouses: []int{2, 9}, Scale: procs.Scale{Items: 2050, CustomersPerDistrict: 70, OrdersPerDistrict: 70, NewOrdersPerDistrict: 21}})
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
		// The load procedure's Keys check a call's arguments as its Run does.
		if _, err := procs.ProcedureKeys(procs.ProcLoad, procs.EncodeArgs(j.args)); err != nil || j.items {
			t.Fatalf("job %s: %v", j, err)
		}
		if j.args.Date != LoadDateDefault {
			t.Errorf("job %s: date %d, want the default %d", j, j.args.Date, LoadDateDefault)
		}
		k := tw{j.args.W, j.args.Table}
		if j.args.Table == procs.TableWarehouse {
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
		want := map[string]int{procs.TableWarehouse: 1, procs.TableStock: 2051, procs.TableCustomer: 71, procs.TableOrder: 71}
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
		for k, v := range scanRows(ctx, t, c, procs.WarehousePrefix(w), procs.WarehouseEnd(w)) {
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
	c, l := startCluster(t, "flexcast")
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
	if err := c.Delete(ctx, procs.ScaleKey(3)); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadScale(ctx, c, testWarehouses); err == nil || !strings.Contains(err.Error(), "warehouse 3 is not loaded") {
		t.Errorf("ReadScale without warehouse 3's scale: %v", err)
	}
	if err := c.Put(ctx, procs.ScaleKey(3), procs.Encode(procs.Small)); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadScale(ctx, c, testWarehouses); err == nil || !strings.Contains(err.Error(), "one scale") {
		t.Errorf("ReadScale with warehouse 3 at another scale: %v", err)
	}
	if err := c.Put(ctx, procs.ScaleKey(3), procs.Encode(loadTestScale)); err != nil {
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

	checkReplicasAgree(ctx, t, c, l.ClientTLS(), first)

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
	if err := c.Put(ctx, procs.ItemKey(1), []byte(`{"changed":1}`)); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, procs.ScaleKey(6)); err != nil {
		t.Fatal(err)
	}
	updateRow(ctx, t, c, procs.DistrictKey(6, 1), func(d *procs.District) { d.NextOID = 77 })
	err = Load(ctx, c, LoadConfig{Warehouses: []int{6, 2}, Scale: loadTestScale, Concurrency: 4, Date: loadTestDate})
	if err == nil || !strings.Contains(err.Error(), "warehouse 2 is loaded already") || !strings.Contains(err.Error(), "empty cluster") {
		t.Errorf("Load of a loaded warehouse: %v, want a refusal naming warehouse 2", err)
	}
	if v, _, err := c.Get(ctx, procs.ItemKey(1)); err != nil || string(v) != `{"changed":1}` {
		t.Errorf("item 1 after the refused load: %s, %v; want it untouched", v, err)
	}
	var d procs.District
	if v, _, err := c.Get(ctx, procs.DistrictKey(6, 1)); err != nil || procs.Decode(procs.DistrictKey(6, 1), v, &d) != nil || d.NextOID != 77 {
		t.Errorf("district 6/1 after the refused load: %s, %v; want it untouched", v, err)
	}
}

// generatedRows returns the rows a load of cfg (checked) writes, made by
// the generator directly: the items, every warehouse's tables and scale.
// The tables' rows are those of the load procedure run outside a cluster,
// at a group that owns every warehouse.
func generatedRows(t *testing.T, cfg LoadConfig) map[string][]byte {
	t.Helper()
	rows := mapWriter{}
	for i := 1; i <= cfg.Scale.Items; i++ {
		rows[string(procs.ItemKey(i))] = procs.Encode(procs.ItemRow(i))
	}
	load, ok := procs.Registry().Lookup(procs.ProcLoad)
	if !ok {
		t.Fatalf("no procedure %s", procs.ProcLoad)
	}
	_, jobs := loadJobs(cfg)
	for _, j := range jobs {
		piece := &txn.ProcPiece{Args: procs.EncodeArgs(j.args), Writer: rows, Owns: func([]byte) bool { return true }}
		if _, err := load.Run(piece); err != nil {
			t.Fatalf("%s: %v", j, err)
		}
	}
	for _, w := range cfg.Warehouses {
		rows[string(procs.ScaleKey(w))] = procs.Encode(cfg.Scale)
	}
	return rows
}

// mapWriter is a row writer into a map, without bounds.
type mapWriter map[string][]byte

func (m mapWriter) Put(key, value []byte) error {
	m[string(key)] = bytes.Clone(value)
	return nil
}

func (m mapWriter) Delete([]byte) error { return errors.New("the loader never deletes") }

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
		if err := procs.Decode(key, v, row); err != nil {
			t.Error(err)
			return false
		}
		return true
	}
	s := loadTestScale
	for i := 1; i <= s.Items; i++ {
		var it procs.Item
		if decode(procs.ItemKey(i), &it) && (it.Price < 100 || it.Price > 10000 || len(it.Name) < 14 || len(it.Name) > 24 || it.Image < 1 || it.Image > 10000) {
			t.Errorf("item %d: %+v", i, it)
		}
	}
	if _, ok := rows[string(procs.ItemKey(s.Items+1))]; ok {
		t.Errorf("item %d loaded, beyond the scale", s.Items+1)
	}
	for _, w := range testWarehouses {
		var wh procs.Warehouse
		if decode(procs.WarehouseKey(w), &wh) && (wh.YTD != 10*12*1000 || wh.Tax < 0 || wh.Tax > 2000) {
			t.Errorf("warehouse %d: %+v, want YTD %d", w, wh, 10*12*1000)
		}
		for i := 1; i <= s.Items; i++ {
			var st procs.Stock
			if decode(procs.StockKey(w, i), &st) && (st.Quantity < 10 || st.Quantity > 100 || len(st.Data) < 26 || len(st.Data) > 50) {
				t.Errorf("stock %d of warehouse %d: %+v", i, w, st)
			}
		}
		history := 0
		for k := range rows {
			if strings.HasPrefix(k, string(procs.HistoryPrefix(w))) {
				history++
			}
		}
		if history != 10*s.CustomersPerDistrict {
			t.Errorf("warehouse %d: %d history rows, want %d", w, history, 10*s.CustomersPerDistrict)
		}
		for d := 1; d <= procs.DistrictsPerWarehouse; d++ {
			checkDistrictRows(t, rows, decode, w, d)
		}
	}
}

func checkDistrictRows(t *testing.T, rows map[string][]byte, decode func([]byte, any) bool, w, d int) {
	t.Helper()
	s := loadTestScale
	var dist procs.District
	if decode(procs.DistrictKey(w, d), &dist) && (dist.NextOID != s.OrdersPerDistrict+1 || dist.YTD != 12*1000) {
		t.Errorf("district %d/%d: NextOID %d, YTD %d; want %d, %d", w, d, dist.NextOID, dist.YTD, s.OrdersPerDistrict+1, 12*1000)
	}
	orderOf := map[int]int{} // customer -> its order
	for o := 1; o <= s.OrdersPerDistrict; o++ {
		var ord procs.Order
		if !decode(procs.OrderKey(w, d, o), &ord) {
			continue
		}
		if prev, ok := orderOf[ord.CID]; ok {
			t.Errorf("district %d/%d: orders %d and %d of customer %d", w, d, prev, o, ord.CID)
		}
		orderOf[ord.CID] = o
		undelivered := o > s.OrdersPerDistrict-s.NewOrdersPerDistrict
		_, hasNO := rows[string(procs.NewOrderKey(w, d, o))]
		if hasNO != undelivered || (ord.Carrier == 0) != undelivered || ord.OLCnt < 5 || ord.OLCnt > 15 || ord.EntryD != loadTestDate {
			t.Errorf("order %d/%d/%d: %+v, new-order row %v; want undelivered %v", w, d, o, ord, hasNO, undelivered)
		}
		for n := 1; n <= ord.OLCnt; n++ {
			var ol procs.OrderLine
			if !decode(procs.OrderLineKey(w, d, o, n), &ol) {
				continue
			}
			if ol.DistInfo != procs.StockDist(w, ol.Item, d) || ol.SupplyW != w || ol.Quantity != 5 ||
				(undelivered && (ol.Amount < 1 || ol.DeliveryD != 0)) || (!undelivered && (ol.Amount != 0 || ol.DeliveryD != loadTestDate)) {
				t.Errorf("order line %d/%d/%d/%d: %+v", w, d, o, n, ol)
			}
		}
		if _, ok := rows[string(procs.OrderLineKey(w, d, o, ord.OLCnt+1))]; ok {
			t.Errorf("order %d/%d/%d: a line beyond O_OL_CNT %d", w, d, o, ord.OLCnt)
		}
	}
	for c := 1; c <= s.CustomersPerDistrict; c++ {
		var cu procs.Customer
		if !decode(procs.CustomerKey(w, d, c), &cu) {
			continue
		}
		if cu.LastOrder != orderOf[c] {
			t.Errorf("customer %d/%d/%d: LastOrder %d, want %d", w, d, c, cu.LastOrder, orderOf[c])
		}
		if cu.Last != procs.LastName(c-1) || cu.Middle != "OE" || cu.Balance != -1000 || cu.YTDPayment != 1000 || cu.PaymentCnt != 1 ||
			cu.CreditLimit != 5000000 || cu.Discount < 0 || cu.Discount > 5000 || cu.Since != loadTestDate {
			t.Errorf("customer %d/%d/%d: %+v", w, d, c, cu)
		}
		var data procs.CustomerData
		if decode(procs.CustomerDataKey(w, d, c), &data) && (len(data.Data) < 300 || len(data.Data) > 500) {
			t.Errorf("customer %d/%d/%d: data of %d characters, want 300-500", w, d, c, len(data.Data))
		}
		if v, ok := rows[string(procs.CustomerNameKey(w, d, cu.Last, cu.First, c))]; !ok || len(v) != 0 {
			t.Errorf("customer %d/%d/%d: name index entry %q, found %v; want an empty value", w, d, c, v, ok)
		}
		var h procs.History
		if decode(procs.HistoryKey(w, procs.LoadHistoryID(d, c)), &h) && (h.CID != c || h.D != d || h.W != w || h.CD != d || h.CW != w || h.Amount != 1000) {
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
func checkReplicasAgree(ctx context.Context, t *testing.T, c *client.Client, tlsCfg *tls.Config, want map[string][]byte) {
	t.Helper()
	cfg := c.Topology().Config
	for _, w := range testWarehouses {
		owner := testGroups[(w-1)/2]
		for _, g := range cfg.Groups {
			if g.Name != owner {
				continue
			}
			for _, r := range g.Replicas {
				kv := dialReplica(t, r.GRPC, tlsCfg)
				deadline := time.Now().Add(10 * time.Second)
				for {
					diff := diffRows(replicaRows(ctx, t, kv, procs.WarehousePrefix(w), procs.WarehouseEnd(w)), want, procs.WarehousePrefix(w))
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

// dialReplica returns a raw client of the replica at addr, over TLS with
// tlsCfg.
func dialReplica(t *testing.T, addr string, tlsCfg *tls.Config) apipb.KVClient {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(tlsCfg)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return apipb.NewKVClient(cc)
}

// replicaRows returns the rows of [start, end) as one replica holds them
// now (stale scans).
func replicaRows(ctx context.Context, t *testing.T, kv apipb.KVClient, start, end []byte) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	for {
		resp, err := kv.Scan(ctx, &apipb.ScanRequest{Start: start, End: end, Limit: txn.ScanLimitMax, Stale: true})
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
