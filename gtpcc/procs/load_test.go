package procs

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

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
		{"json", []byte(`{"w":1,"table":"stock"}`), "JSON, the format of older clients"},
		{"data after", append(EncodeArgs(good), []byte(" {}")...), "3 bytes after the last field"},
		{"truncated", EncodeArgs(good)[:5], "truncated"},
		{"other type", EncodeArgs(DeliveryArgs{W: 1, Carrier: 1, Date: 1}), "delivery arguments, want load arguments"},
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
		if want := 10 * 4 * DistrictsPerWarehouse; len(rec.keys) != want {
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
		if DecodeArgs(ProcLoad, b, &a) == nil && a.Table == TableStock && validateLoadArgs(&a) == nil && a.Scale.Items > 5000 {
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
