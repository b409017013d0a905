package procs

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/partition"
	"github.com/flexkv/flexkv/txn"
)

// procGroup is one group's store for the procedure tests: a map-backed
// txn.Reader and txn.Writer that, as the executor's view does, refuses to
// read a key the group neither owns nor holds a copy of (the item table)
// and to write a key it does not own, and records those attempts.
type procGroup struct {
	id     partition.GroupID
	owned  []int // warehouses
	kv     map[string]string
	writes []string // the keys written or deleted, in call order
	denied []string
}

func newProcGroup(id partition.GroupID, owned ...int) *procGroup {
	return &procGroup{id: id, owned: owned, kv: map[string]string{}}
}

func (g *procGroup) owns(key []byte) bool {
	w, ok := ParseWarehouse(key)
	return ok && slices.Contains(g.owned, w)
}

func (g *procGroup) readable(key []byte) bool {
	return g.owns(key) || bytes.HasPrefix(key, []byte("item/"))
}

func (g *procGroup) deny(format string, args ...any) error {
	err := fmt.Errorf(format, args...)
	g.denied = append(g.denied, err.Error())
	return err
}

func (g *procGroup) Get(key []byte) ([]byte, bool, error) {
	if !g.readable(key) {
		return nil, false, g.deny("get %q: not held by group %d", key, g.id)
	}
	v, ok := g.kv[string(key)]
	if !ok {
		return nil, false, nil
	}
	return []byte(v), true, nil
}

func (g *procGroup) Scan(start, end []byte, limit int) ([]txn.KV, error) {
	if !g.readable(start) || bytes.Compare(start, end) >= 0 || limit < 1 || limit > txn.ScanLimitMax {
		return nil, g.deny("scan [%q, %q) limit %d: not allowed at group %d", start, end, limit, g.id)
	}
	if w, _ := ParseWarehouse(start); !bytes.HasPrefix(start, []byte("item/")) && bytes.Compare(end, WarehouseEnd(w)) > 0 {
		return nil, g.deny("scan [%q, %q) leaves warehouse %d", start, end, w)
	}
	var out []txn.KV
	for _, k := range g.keys() {
		if k >= string(start) && k < string(end) && len(out) < limit {
			out = append(out, txn.KV{Key: []byte(k), Value: []byte(g.kv[k])})
		}
	}
	return out, nil
}

func (g *procGroup) Put(key, value []byte) error {
	if !g.owns(key) {
		return g.deny("put %q: not owned by group %d", key, g.id)
	}
	g.kv[string(key)] = string(value)
	g.writes = append(g.writes, string(key))
	return nil
}

func (g *procGroup) Delete(key []byte) error {
	if !g.owns(key) {
		return g.deny("delete %q: not owned by group %d", key, g.id)
	}
	delete(g.kv, string(key))
	g.writes = append(g.writes, string(key))
	return nil
}

// keys returns the stored keys in order.
func (g *procGroup) keys() []string {
	keys := make([]string, 0, len(g.kv))
	for k := range g.kv { //flexkv:unordered sorted below
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// clone returns a copy of g's rows under another group with other
// warehouses.
func (g *procGroup) clone(id partition.GroupID, owned ...int) *procGroup {
	c := newProcGroup(id, owned...)
	for k, v := range g.kv { //flexkv:unordered copying into a map
		c.kv[k] = v
	}
	return c
}

// set stores row at key (a string value is stored as it is).
func (g *procGroup) set(key []byte, row any) {
	if s, ok := row.(string); ok {
		g.kv[string(key)] = s
		return
	}
	g.kv[string(key)] = string(Encode(row))
}

// row decodes the row at key into row, failing the test when there is none.
func (g *procGroup) row(t *testing.T, key []byte, row any) {
	t.Helper()
	v, ok := g.kv[string(key)]
	if !ok {
		t.Fatalf("group %d: no row %q", g.id, key)
	}
	if err := Decode(key, []byte(v), row); err != nil {
		t.Fatal(err)
	}
}

// testCallID is the id of every call of these tests.
var testCallID = multicast.MsgID{Client: 7, Seq: 3}

// run runs g's piece of a call of proc with args, and checks what a
// piece must do whatever its outcome: read and write only what the group
// holds, and report a result the executor accepts (it round-trips through
// the stored form, whose decoder applies PieceResult's checks).
func (g *procGroup) run(t *testing.T, proc txn.Procedure, args []byte, dst partition.GroupSet) (txn.PieceResult, error) {
	t.Helper()
	p := &txn.ProcPiece{ID: testCallID, Group: g.id, Dst: dst, Args: args, Reader: g, Writer: g, Owns: g.owns}
	res, err := proc.Run(p)
	if len(g.denied) > 0 {
		t.Fatalf("group %d: the piece made accesses the executor refuses: %q", g.id, g.denied)
	}
	if err != nil {
		return res, err
	}
	got, derr := txn.DecodePieceResult(txn.AppendPieceResult(nil, &res))
	if derr != nil {
		t.Fatalf("group %d: result %+v is not one the executor stores: %v", g.id, res, derr)
	}
	if !cmp.Equal(got.Results, res.Results, cmp.Comparer(func(a, b []byte) bool { return bytes.Equal(a, b) })) {
		t.Fatalf("group %d: result %+v reads back as %+v", g.id, res, got)
	}
	return res, nil
}

// Fixture: warehouses 1 and 2, each with 10 districts (tax 5%, next order
// 3001), customers 1..3 of every district (discount 10%, named
// BARBARBAR), stock of items 1..5 (quantity 20); items 1..5 priced
// 100*i+1 cents. Warehouse tax 10%. Their scale (fixtureScale) has 1000
// customers per district, so that tests may add customers of any loaded
// name.
const (
	fixtureNextOID = 3001
	fixtureItems   = 5
	fixtureLast    = "BARBARBAR"
)

// fixtureScale is the fixture's scale, in its warehouses' ScaleKey.
var fixtureScale = Scale{Items: fixtureItems, CustomersPerDistrict: 1000}

func itemPrice(i int) int64 { return int64(100*i + 1) }

func fixture(owned ...int) *procGroup {
	g := newProcGroup(0, owned...)
	for i := 1; i <= fixtureItems; i++ {
		g.set(ItemKey(i), Item{Image: i, Name: fmt.Sprintf("item%d", i), Price: itemPrice(i), Data: "data"})
	}
	for _, w := range []int{1, 2} {
		g.set(ScaleKey(w), fixtureScale)
		g.set(WarehouseKey(w), Warehouse{Name: fmt.Sprintf("wh%d", w), Tax: 1000, YTD: 30000000})
		for d := 1; d <= DistrictsPerWarehouse; d++ {
			g.set(DistrictKey(w, d), District{Name: fmt.Sprintf("dist%d", d), Tax: 500, YTD: 3000000, NextOID: fixtureNextOID})
			for c := 1; c <= 3; c++ {
				first := fmt.Sprintf("F%d", c)
				g.set(CustomerKey(w, d, c), Customer{First: first, Last: fixtureLast, Credit: "GC", Discount: 1000, Balance: -1000})
				g.set(CustomerDataKey(w, d, c), CustomerData{Data: "cdata"})
				g.set(CustomerNameKey(w, d, fixtureLast, first, c), "")
			}
		}
		for i := 1; i <= fixtureItems; i++ {
			g.set(StockKey(w, i), Stock{Quantity: 20, Data: "sdata"})
		}
	}
	return g
}

// split returns two groups, 0 owning warehouse 1 and 1 owning warehouse
// 2, with the fixture's rows of both (a group holds only what it owns;
// the others are never read, which procGroup checks).
func split() (*procGroup, *procGroup) {
	f := fixture()
	return f.clone(0, 1), f.clone(1, 2)
}

// merge merges the pieces as the client does.
func merge(t *testing.T, pieces ...txn.PieceResult) *txn.Result {
	t.Helper()
	res, err := txn.MergeResults(testCallID.String(), pieces)
	if err != nil {
		t.Fatalf("MergeResults: %v", err)
	}
	return &res
}

// owner returns the group of gs that owns key.
func owner(t *testing.T, key []byte, gs ...*procGroup) *procGroup {
	t.Helper()
	for _, g := range gs {
		if g.owns(key) {
			return g
		}
	}
	t.Fatalf("no group owns %q", key)
	return nil
}

func TestNewOrder(t *testing.T) {
	args := NewOrderArgs{W: 1, D: 4, C: 2, EntryD: 1234, Lines: []NewOrderLine{
		{Item: 1, SupplyW: 1, Quantity: 3},  // 20 >= 13: 17
		{Item: 2, SupplyW: 2, Quantity: 5},  // 20 >= 15: 15, remote
		{Item: 2, SupplyW: 2, Quantity: 4},  // same stock: 15 >= 14: 11, remote
		{Item: 3, SupplyW: 1, Quantity: 10}, // 20 >= 20: 10
		{Item: 3, SupplyW: 1, Quantity: 7},  // same stock, 10 < 17: 10 - 7 + 91 = 94
	}}
	wantQty := []int{17, 15, 11, 10, 94}
	wantStock := map[string]Stock{
		string(StockKey(1, 1)): {Quantity: 17, YTD: 3, OrderCnt: 1, Data: "sdata"},
		string(StockKey(2, 2)): {Quantity: 11, YTD: 9, OrderCnt: 2, RemoteCnt: 2, Data: "sdata"},
		string(StockKey(1, 3)): {Quantity: 94, YTD: 17, OrderCnt: 2, Data: "sdata"},
	}
	// 3*101 + 5*201 + 4*201 + 10*301 + 7*301 = 303 + 1809 + 5117 = 7229;
	// * 0.9 * 1.15 = 7482.015 cents, rounded: 7482.
	var sum int64
	for _, l := range args.Lines {
		sum += int64(l.Quantity) * itemPrice(l.Item)
	}
	if sum != 7229 {
		t.Fatalf("fixture: sum %d, want 7229", sum)
	}
	const wantTotal = 7482
	b := EncodeArgs(args)
	keys, err := ProcedureKeys(ProcNewOrder, b)
	if err != nil {
		t.Fatal(err)
	}
	wantKeys := []string{"w/0001/wh", "w/0001/s/000001", "w/0002/s/000002", "w/0001/s/000003"}
	if got := keyStrings(keys); !slices.Equal(got, wantKeys) {
		t.Fatalf("Keys = %q, want %q", got, wantKeys)
	}

	a0, a1 := split()
	for _, tc := range []struct {
		name   string
		groups []*procGroup
	}{
		{"one group owns both", []*procGroup{fixture(1, 2)}},
		{"home and supply groups", []*procGroup{a0, a1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dst := partition.SetOf()
			for _, g := range tc.groups {
				dst = dst.Add(g.id)
			}
			pieces := runAll(t, tc.groups, newOrderProc{}, b, dst)
			out, err := DecodeNewOrder(merge(t, pieces...))
			if err != nil {
				t.Fatal(err)
			}
			if out.OID != fixtureNextOID || out.TotalCents != wantTotal || len(out.Lines) != len(args.Lines) {
				t.Fatalf("output %+v, want o_id %d, total %d, %d lines", out, fixtureNextOID, wantTotal, len(args.Lines))
			}
			for i, l := range out.Lines {
				want := NewOrderLineOutput{Line: i + 1, Item: args.Lines[i].Item, SupplyW: args.Lines[i].SupplyW, StockQuantity: wantQty[i]}
				if l != want {
					t.Errorf("line output %d = %+v, want %+v", i, l, want)
				}
			}

			checkNewOrderHome(t, owner(t, WarehouseKey(1), tc.groups...), args)
			for key, want := range wantStock { //flexkv:unordered each key checked alone
				var s Stock
				owner(t, []byte(key), tc.groups...).row(t, []byte(key), &s)
				if s != want {
					t.Errorf("stock %s = %+v, want %+v", key, s, want)
				}
			}
			if len(tc.groups) == 2 {
				// The supply group wrote its stock row and nothing else.
				if want := []string{string(StockKey(2, 2))}; !slices.Equal(tc.groups[1].writes, want) {
					t.Errorf("supply group wrote %q, want %q", tc.groups[1].writes, want)
				}
			}
		})
	}
}

// runAll runs proc with args b at each of groups, for destinations dst, and
// returns their pieces; each must succeed.
func runAll(t *testing.T, groups []*procGroup, proc txn.Procedure, b []byte, dst partition.GroupSet) []txn.PieceResult {
	t.Helper()
	var pieces []txn.PieceResult
	for _, g := range groups {
		res, err := g.run(t, proc, b, dst)
		if err != nil || !res.Succeeded {
			t.Fatalf("group %d: %+v, %v", g.id, res, err)
		}
		pieces = append(pieces, res)
	}
	return pieces
}

// checkNewOrderHome checks the rows the new-order args wrote at its home
// group (warehouse 1, district 4, customer 2 of the fixture): the
// district's next order id, the order, its new-order row and its lines,
// and the customer's last order.
func checkNewOrderHome(t *testing.T, home *procGroup, args NewOrderArgs) {
	t.Helper()
	var dist District
	home.row(t, DistrictKey(1, 4), &dist)
	if dist.NextOID != fixtureNextOID+1 {
		t.Errorf("district next_o_id %d, want %d", dist.NextOID, fixtureNextOID+1)
	}
	var order Order
	home.row(t, OrderKey(1, 4, fixtureNextOID), &order)
	if want := (Order{CID: 2, EntryD: 1234, OLCnt: 5, AllLocal: false}); order != want {
		t.Errorf("order %+v, want %+v", order, want)
	}
	if v, ok := home.kv[string(NewOrderKey(1, 4, fixtureNextOID))]; !ok || v != "" {
		t.Errorf("new-order row %q, %t, want an empty value", v, ok)
	}
	for i, l := range args.Lines {
		var got OrderLine
		home.row(t, OrderLineKey(1, 4, fixtureNextOID, i+1), &got)
		want := OrderLine{Item: l.Item, SupplyW: l.SupplyW, Quantity: l.Quantity,
			Amount: int64(l.Quantity) * itemPrice(l.Item), DistInfo: StockDist(l.SupplyW, l.Item, 4)}
		if got != want {
			t.Errorf("order line %d = %+v, want %+v", i+1, got, want)
		}
	}
	var c Customer
	home.row(t, CustomerKey(1, 4, 2), &c)
	if c.LastOrder != fixtureNextOID {
		t.Errorf("customer last order %d, want %d", c.LastOrder, fixtureNextOID)
	}
}

func TestNewOrderRollsBackEverywhere(t *testing.T) {
	a0, a1 := split()
	before0, before1 := a0.clone(0, 1), a1.clone(1, 2)
	b := EncodeArgs(NewOrderArgs{EntryD: 1, W: 1, D: 1, C: 1, Lines: []NewOrderLine{
		{Item: 1, SupplyW: 1, Quantity: 1},
		{Item: 2, SupplyW: 2, Quantity: 1},
		{Item: fixtureItems + 1, SupplyW: 1, Quantity: 1}, // not in the item table
	}})
	var pieces []txn.PieceResult
	for _, g := range []*procGroup{a0, a1} {
		res, err := g.run(t, newOrderProc{}, b, partition.SetOf(0, 1))
		if err != nil || res.Succeeded || res.Aborted || len(res.Results) != 0 {
			t.Fatalf("group %d: %+v, %v; want a roll back (not succeeded, no results)", g.id, res, err)
		}
		if len(g.writes) != 0 {
			t.Errorf("group %d wrote %q", g.id, g.writes)
		}
		pieces = append(pieces, res)
	}
	if !cmp.Equal(a0.kv, before0.kv) || !cmp.Equal(a1.kv, before1.kv) {
		t.Error("a rolled-back new-order changed the stores")
	}
	if _, err := DecodeNewOrder(merge(t, pieces...)); !errors.Is(err, ErrRolledBack) {
		t.Errorf("DecodeNewOrder: %v, want ErrRolledBack", err)
	}
}

func TestNewOrderMissingRow(t *testing.T) {
	a0, a1 := split()
	delete(a1.kv, string(StockKey(2, 4)))
	delete(a0.kv, string(DistrictKey(1, 1)))
	b := EncodeArgs(NewOrderArgs{EntryD: 1, W: 1, D: 1, C: 1, Lines: []NewOrderLine{{Item: 4, SupplyW: 2, Quantity: 1}}})
	for _, tc := range []struct {
		g    *procGroup
		want string
	}{{a0, "w/0001/d/01"}, {a1, "w/0002/s/000004"}} {
		_, err := tc.g.run(t, newOrderProc{}, b, partition.SetOf(0, 1))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("group %d: %v, want an error naming %s", tc.g.id, err, tc.want)
		}
	}
}

// TestNotLoadedAbortsEverywhere: a call naming a warehouse that is not
// loaded, a customer or an item beyond its scale, aborts every piece with
// the same reason, decided on the replicated scales, before any write, so
// that the call is all or nothing without votes.
func TestNotLoadedAbortsEverywhere(t *testing.T) {
	line := func(i, w int) NewOrderLine { return NewOrderLine{Item: i, SupplyW: w, Quantity: 1} }
	for _, tc := range []struct {
		name   string
		proc   txn.Procedure
		args   any
		unload int // a warehouse whose ScaleKey is deleted
		want   string
	}{
		{"new-order, remote supply warehouse not loaded", newOrderProc{},
			NewOrderArgs{EntryD: 1, W: 1, D: 1, C: 1, Lines: []NewOrderLine{line(1, 1), line(2, 2)}}, 2,
			"gtpcc.new_order: warehouse 2 is not loaded (no item/scale/0002)"},
		{"new-order, home warehouse not loaded", newOrderProc{},
			NewOrderArgs{EntryD: 1, W: 1, D: 1, C: 1, Lines: []NewOrderLine{line(2, 2)}}, 1,
			"gtpcc.new_order: warehouse 1 is not loaded (no item/scale/0001)"},
		{"new-order, customer beyond the scale", newOrderProc{},
			NewOrderArgs{EntryD: 1, W: 1, D: 1, C: 1001, Lines: []NewOrderLine{line(2, 2)}}, 0,
			"gtpcc.new_order: no customer 1001 in district 1 of warehouse 1: it has 1000"},
		{"payment, remote customer's warehouse not loaded", paymentProc{},
			PaymentArgs{Date: 1, W: 1, D: 1, CW: 2, CD: 1, CID: 1, Amount: 1}, 2,
			"gtpcc.payment: warehouse 2 is not loaded (no item/scale/0002)"},
		{"payment, remote customer beyond the scale", paymentProc{},
			PaymentArgs{Date: 1, W: 1, D: 1, CW: 2, CD: 1, CID: 1001, Amount: 1}, 0,
			"gtpcc.payment: no customer 1001 in district 1 of warehouse 2: it has 1000"},
		{"payment, remote customer's name not loaded", paymentProc{},
			PaymentArgs{Date: 1, W: 1, D: 1, CW: 2, CD: 1, CLast: "NOBODY", Amount: 1}, 0,
			`gtpcc.payment: no customer named "NOBODY" in district 1 of warehouse 2`},
	} {
		a0, a1 := split()
		if tc.unload != 0 {
			delete(a0.kv, string(ScaleKey(tc.unload)))
			delete(a1.kv, string(ScaleKey(tc.unload)))
		}
		b := EncodeArgs(tc.args)
		for _, g := range []*procGroup{a0, a1} {
			_, err := g.run(t, tc.proc, b, partition.SetOf(0, 1))
			if err == nil || err.Error() != "gtpcc: "+tc.want {
				t.Errorf("%s: group %d: %v, want gtpcc: %s", tc.name, g.id, err, tc.want)
			}
			if len(g.writes) != 0 {
				t.Errorf("%s: group %d wrote %q", tc.name, g.id, g.writes)
			}
		}
	}
	// A known item beyond a supply warehouse's stock.
	a0, a1 := split()
	small := fixtureScale
	small.Items = 3
	for _, g := range []*procGroup{a0, a1} {
		g.set(ScaleKey(2), small)
	}
	b := EncodeArgs(NewOrderArgs{EntryD: 1, W: 1, D: 1, C: 1, Lines: []NewOrderLine{line(4, 1), line(4, 2)}})
	for _, g := range []*procGroup{a0, a1} {
		if _, err := g.run(t, newOrderProc{}, b, partition.SetOf(0, 1)); err == nil ||
			err.Error() != "gtpcc: gtpcc.new_order: no stock of item 4 at warehouse 2: it stocks items 1..3" {
			t.Errorf("group %d: %v, want the abort of warehouse 2's missing stock", g.id, err)
		}
	}
}

// TestInlinePopulationAbortsEverywhere: a population loaded before
// customer data rows had rows of their own (its scale rows and customer
// rows of the old tags) is refused by every piece of a call alike, before
// any write: a remote payment and a new-order with a remote line would
// otherwise commit at the group that does not read the old customer row.
func TestInlinePopulationAbortsEverywhere(t *testing.T) {
	retag := func(v []byte, tag byte) string { v[1] = tag; return string(v) }
	line := func(i, w int) NewOrderLine { return NewOrderLine{Item: i, SupplyW: w, Quantity: 1} }
	for _, tc := range []struct {
		name string
		proc txn.Procedure
		args any
		want string
	}{
		{"remote payment", paymentProc{}, PaymentArgs{Date: 1, W: 1, D: 1, CW: 2, CD: 2, CID: 3, Amount: 1}, "gtpcc.payment"},
		{"new-order with a remote line", newOrderProc{}, NewOrderArgs{EntryD: 1, W: 1, D: 1, C: 1, Lines: []NewOrderLine{line(1, 1), line(2, 2)}}, "gtpcc.new_order"},
	} {
		a0, a1 := split()
		for _, g := range []*procGroup{a0, a1} {
			for _, w := range []int{1, 2} {
				g.set(ScaleKey(w), retag(Encode(fixtureScale), tagScaleInline))
			}
			g.set(CustomerKey(2, 2, 3), retag(Encode(Customer{First: "F3", Last: fixtureLast, Credit: "GC"}), tagCustomerInline))
		}
		b := EncodeArgs(tc.args)
		var reasons []string
		for _, g := range []*procGroup{a0, a1} {
			_, err := g.run(t, tc.proc, b, partition.SetOf(0, 1))
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "start from an empty cluster and run flexkv gtpcc load") {
				t.Errorf("%s: group %d: %v, want the refusal of the old population", tc.name, g.id, err)
				continue
			}
			reasons = append(reasons, err.Error())
			if len(g.writes) != 0 {
				t.Errorf("%s: group %d wrote %q", tc.name, g.id, g.writes)
			}
		}
		if len(reasons) == 2 && reasons[0] != reasons[1] {
			t.Errorf("%s: the pieces abort with different reasons: %q and %q", tc.name, reasons[0], reasons[1])
		}
	}
}

// TestAllOrNothingWithoutVotes: the procedures of several groups are all
// or nothing, and none of their pieces votes.
func TestAllOrNothingWithoutVotes(t *testing.T) {
	for _, p := range procedures {
		if p.name != ProcNewOrder && p.name != ProcPayment {
			continue
		}
		if !txn.IsAllOrNothing(p.proc) {
			t.Errorf("%s is not all or nothing", p.name)
		}
		if txn.PieceCanAbort(p.proc, &txn.CallPiece{Group: 1, Dst: partition.SetOf(0, 1)}) {
			t.Errorf("%s: a piece can abort, and votes", p.name)
		}
	}
}

// TestCustomerNameLoaded: the last names of a loaded district are those
// its customers get (customerRow).
func TestCustomerNameLoaded(t *testing.T) {
	for _, n := range []int{1, 7, 100, 999, 1000, 1001, 3000} {
		s := Scale{Items: 1, CustomersPerDistrict: n}
		names := map[string]bool{}
		a := LoadArgs{W: 1, Scale: s, Date: 1}
		for c := 1; c <= n; c++ {
			row, _ := customerRow(&a, 1, c)
			names[row.Last] = true
		}
		for i := range 1000 {
			if got, want := customerNameLoaded(LastName(i), s), names[LastName(i)]; got != want {
				t.Errorf("%d customers: customerNameLoaded(%s) = %v, want %v", n, LastName(i), got, want)
			}
		}
		for _, bad := range []string{"", "BAR", "BARBAR", "BARBARBARBAR", "NOBODY", "barbarbar"} {
			if customerNameLoaded(bad, s) {
				t.Errorf("%d customers: customerNameLoaded(%q) = true", n, bad)
			}
		}
	}
}

func TestNewOrderTotal(t *testing.T) {
	for _, tc := range []struct {
		sum, discount, wTax, dTax, want int64
	}{
		{1, 5000, 0, 0, 1}, // 0.5 rounds up
		{1, 5001, 0, 0, 0}, // 0.4999
		{7229, 1000, 1000, 500, 7482},
		{7230, 1000, 1000, 500, 7483}, // 7483.05
		{100, 0, 0, 0, 100},
		// The largest total the checked ranges allow does not overflow.
		{OrderLinesMax * lineAmountMax, 0, rateMax, rateMax, 3 * OrderLinesMax * lineAmountMax},
	} {
		if got := newOrderTotal(tc.sum, tc.discount, tc.wTax, tc.dTax); got != tc.want {
			t.Errorf("newOrderTotal(%d, %d, %d, %d) = %d, want %d", tc.sum, tc.discount, tc.wTax, tc.dTax, got, tc.want)
		}
	}
}

// setNamed adds customers of district d of warehouse w named last with the
// given first names, ids from cid on.
func setNamed(g *procGroup, w, d, cid int, last string, firsts ...string) {
	for i, first := range firsts {
		c := cid + i
		g.set(CustomerKey(w, d, c), Customer{First: first, Last: last, Credit: "GC", Balance: -1000})
		g.set(CustomerDataKey(w, d, c), CustomerData{Data: "cdata"})
		g.set(CustomerNameKey(w, d, last, first, c), "")
	}
}

// paymentAmount is the amount, in cents, of TestPayment's payments.
const paymentAmount = 12345

// TestPayment runs payments by customer id and by last name, at home and
// at a remote warehouse, and checks the output and every row each group
// wrote.
func TestPayment(t *testing.T) {
	const amount = paymentAmount
	type want struct {
		cw, cd, cid int
		histCID     int
		histLast    string
	}
	for _, tc := range []struct {
		name   string
		args   PaymentArgs
		setup  func(g *procGroup)
		remote bool // the customer's warehouse is another group's
		want   want
	}{
		{"local by id", PaymentArgs{Date: 1, W: 1, D: 1, CW: 1, CD: 2, CID: 3}, nil, false, want{1, 2, 3, 3, ""}},
		{"remote by id", PaymentArgs{Date: 1, W: 1, D: 1, CW: 2, CD: 2, CID: 3}, nil, true, want{2, 2, 3, 3, ""}},
		{"remote by name of 3", PaymentArgs{Date: 1, W: 1, D: 5, CW: 2, CD: 2, CLast: "PRESESEABLE"}, func(g *procGroup) {
			// Sorted by first name: AAA(6) BBB(7) CCC(5); ceil(3/2) = 2: BBB.
			setNamed(g, 2, 2, 5, "PRESESEABLE", "CCC", "AAA", "BBB")
			setNamed(g, 2, 2, 8, "PRESESEABLEX", "AAB") // a longer name is not a match
			setNamed(g, 2, 3, 9, "PRESESEABLE", "AAC")  // nor another district
		}, true, want{2, 2, 7, 0, "PRESESEABLE"}},
		{"local by name of 4", PaymentArgs{Date: 1, W: 2, D: 1, CW: 2, CD: 3, CLast: "BAROUGHTABLE"}, func(g *procGroup) {
			// Sorted: AAA(9) BBB(11) CCC(10) DDD(8); ceil(4/2) = 2: BBB.
			setNamed(g, 2, 3, 8, "BAROUGHTABLE", "DDD", "AAA", "CCC", "BBB")
		}, false, want{2, 3, 11, 11, ""}},
		{"by name of 1", PaymentArgs{Date: 1, W: 1, D: 1, CW: 1, CD: 1, CLast: "BARBARABLE"}, func(g *procGroup) {
			setNamed(g, 1, 1, 20, "BARBARABLE", "ZED")
		}, false, want{1, 1, 20, 20, ""}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.args.Amount, tc.args.Date = amount, 99
			f := fixture()
			if tc.setup != nil {
				tc.setup(f)
			}
			groups := []*procGroup{f.clone(0, tc.args.W)}
			if tc.remote {
				groups = append(groups, f.clone(1, tc.args.CW))
			}
			dst := partition.SetOf(0)
			if tc.remote {
				dst = partition.SetOf(0, 1)
			}
			b := EncodeArgs(tc.args)
			keys, err := ProcedureKeys(ProcPayment, b)
			if err != nil || len(keys) != len(groups) {
				t.Fatalf("Keys = %q, %v; want %d", keyStrings(keys), err, len(groups))
			}
			pieces := runAll(t, groups, paymentProc{}, b, dst)
			if tc.remote && (len(pieces[0].Results) != 1 || len(pieces[1].Results) != 1) {
				t.Fatalf("pieces report %d and %d results, want one each", len(pieces[0].Results), len(pieces[1].Results))
			}
			out, err := DecodePayment(merge(t, pieces...))
			if err != nil {
				t.Fatal(err)
			}
			var before, c Customer
			f.row(t, CustomerKey(tc.want.cw, tc.want.cd, tc.want.cid), &before)
			cg := owner(t, WarehouseKey(tc.args.CW), groups...)
			cg.row(t, CustomerKey(tc.want.cw, tc.want.cd, tc.want.cid), &c)
			if c.Balance != before.Balance-amount || c.YTDPayment != before.YTDPayment+amount || c.PaymentCnt != before.PaymentCnt+1 {
				t.Errorf("customer %d after payment %+v, before %+v", tc.want.cid, c, before)
			}
			var data CustomerData
			cg.row(t, CustomerDataKey(tc.want.cw, tc.want.cd, tc.want.cid), &data)
			if data.Data != "cdata" {
				t.Errorf("customer %d's data after a good-credit payment %q, want it unchanged (cdata)", tc.want.cid, data.Data)
			}
			wantOut := PaymentOutput{CW: tc.want.cw, CD: tc.want.cd, CID: tc.want.cid, Credit: "GC", BalanceCents: before.Balance - amount}
			if out != wantOut {
				t.Errorf("output %+v, want %+v", out, wantOut)
			}

			home := groups[0]
			checkPaymentHome(t, home, tc.args, tc.want.histCID, tc.want.histLast)

			// The customer's group records its piece under the same id.
			var rec CustomerPayment
			cg.row(t, CustomerPaymentKey(tc.args.CW, "c7.3"), &rec)
			wantRec := CustomerPayment{CD: tc.want.cd, CID: tc.want.cid, W: tc.args.W, D: tc.args.D, Amount: amount, Date: 99}
			if rec != wantRec {
				t.Errorf("customer-side record %+v, want %+v", rec, wantRec)
			}
			if tc.remote {
				if _, ok := home.kv[string(CustomerPaymentKey(tc.args.CW, "c7.3"))]; ok {
					t.Error("the home group wrote the customer-side record")
				}
			}
		})
	}
}

// checkPaymentHome checks the rows a payment with args (paymentAmount,
// Date 99, id c7.3) wrote at its home group: the warehouse's and the district's
// year-to-date and the history row, which names the customer histCID or,
// by name, histLast.
func checkPaymentHome(t *testing.T, home *procGroup, args PaymentArgs, histCID int, histLast string) {
	t.Helper()
	const amount = paymentAmount
	var wh Warehouse
	var dist District
	home.row(t, WarehouseKey(args.W), &wh)
	home.row(t, DistrictKey(args.W, args.D), &dist)
	if wh.YTD != 30000000+amount || dist.YTD != 3000000+amount {
		t.Errorf("ytd: warehouse %d, district %d; want +%d", wh.YTD, dist.YTD, amount)
	}
	var h History
	home.row(t, HistoryKey(args.W, "c7.3"), &h)
	wantH := History{CID: histCID, CLast: histLast, CD: args.CD, CW: args.CW, D: args.D, W: args.W,
		Date: 99, Amount: amount, Data: fmt.Sprintf("wh%d    dist%d", args.W, args.D)}
	if h != wantH {
		t.Errorf("history %+v, want %+v", h, wantH)
	}
}

func TestPaymentBadCredit(t *testing.T) {
	for _, tc := range []struct {
		name, data, want string
	}{
		{"short", "old", "3 2 2 1 1 12345|old"},
		{"cut to 500", strings.Repeat("x", 499), "3 2 2 1 1 12345|" + strings.Repeat("x", 500-len("3 2 2 1 1 12345|"))},
		{"cut by characters", strings.Repeat("é", 499), "3 2 2 1 1 12345|" + strings.Repeat("é", 500-len("3 2 2 1 1 12345|"))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := fixture(1, 2)
			g.set(CustomerKey(2, 2, 3), Customer{First: "F3", Last: fixtureLast, Credit: "BC", Balance: 50})
			g.set(CustomerDataKey(2, 2, 3), CustomerData{Data: tc.data})
			res, err := g.run(t, paymentProc{}, EncodeArgs(PaymentArgs{Date: 1, W: 1, D: 1, CW: 2, CD: 2, CID: 3, Amount: 12345}), partition.SetOf(0))
			if err != nil {
				t.Fatal(err)
			}
			out, err := DecodePayment(merge(t, res))
			if err != nil || out.Credit != "BC" || out.BalanceCents != 50-12345 {
				t.Fatalf("output %+v, %v", out, err)
			}
			var c Customer
			g.row(t, CustomerKey(2, 2, 3), &c)
			if c.Balance != 50-12345 || c.PaymentCnt != 1 {
				t.Errorf("customer %+v, want the payment charged", c)
			}
			var data CustomerData
			g.row(t, CustomerDataKey(2, 2, 3), &data)
			if data.Data != tc.want {
				t.Errorf("data %q (%d characters), want %q", data.Data, len([]rune(data.Data)), tc.want)
			}
		})
	}
}

// A bad-credit customer of another group's warehouse: that group updates
// the customer's data row, the home group reads and writes none of it.
func TestPaymentBadCreditRemote(t *testing.T) {
	a0, a1 := split()
	for _, g := range []*procGroup{a0, a1} {
		g.set(CustomerKey(2, 2, 3), Customer{First: "F3", Last: fixtureLast, Credit: "BC", Balance: 50})
		g.set(CustomerDataKey(2, 2, 3), CustomerData{Data: "old"})
	}
	b := EncodeArgs(PaymentArgs{Date: 1, W: 1, D: 1, CW: 2, CD: 2, CID: 3, Amount: 12345})
	var pieces []txn.PieceResult
	for _, g := range []*procGroup{a0, a1} {
		res, err := g.run(t, paymentProc{}, b, partition.SetOf(0, 1))
		if err != nil || !res.Succeeded {
			t.Fatalf("group %d: %+v, %v", g.id, res, err)
		}
		pieces = append(pieces, res)
	}
	if out, err := DecodePayment(merge(t, pieces...)); err != nil || out.Credit != "BC" || out.BalanceCents != 50-12345 {
		t.Fatalf("output %+v, %v", out, err)
	}
	var data CustomerData
	a1.row(t, CustomerDataKey(2, 2, 3), &data)
	if want := "3 2 2 1 1 12345|old"; data.Data != want {
		t.Errorf("data at the customer's group %q, want %q", data.Data, want)
	}
	for _, k := range a0.writes {
		if strings.HasPrefix(k, string(WarehousePrefix(2))) {
			t.Errorf("the home group wrote %q, of the customer's warehouse", k)
		}
	}
}

func TestPaymentUnknownName(t *testing.T) {
	g := fixture(1)
	_, err := g.run(t, paymentProc{}, EncodeArgs(PaymentArgs{Date: 1, W: 1, D: 1, CW: 1, CD: 1, CLast: "NOBODY", Amount: 1}), partition.SetOf(0))
	if err == nil || !strings.Contains(err.Error(), `"NOBODY"`) {
		t.Errorf("payment to an unknown name: %v, want an error naming it", err)
	}
	if len(g.writes) != 0 {
		t.Errorf("wrote %q", g.writes)
	}
}

// setOrder stores order o of district d of warehouse w for customer cid,
// its lines (item, quantity, amount each) and, if undelivered, its
// new-order row.
func setOrder(g *procGroup, w, d, o, cid int, undelivered bool, lines ...OrderLine) {
	g.set(OrderKey(w, d, o), Order{CID: cid, EntryD: int64(o), OLCnt: len(lines), AllLocal: true})
	for i, l := range lines {
		l.SupplyW = w
		g.set(OrderLineKey(w, d, o, i+1), l)
	}
	if undelivered {
		g.set(NewOrderKey(w, d, o), "")
	}
}

func TestDelivery(t *testing.T) {
	// A delivery dated 0 (the null date) would leave its lines undelivered
	// under a carrier: refused, nothing written.
	g0 := fixture(1)
	setOrder(g0, 1, 2, 5, 1, true, OrderLine{Item: 1, Quantity: 1, Amount: 1})
	if _, err := g0.run(t, deliveryProc{}, EncodeArgs(DeliveryArgs{W: 1, Carrier: 4}), partition.SetOf(0)); err == nil ||
		!strings.Contains(err.Error(), "date_ms 0") || len(g0.writes) != 0 {
		t.Fatalf("delivery dated 0: %v, wrote %q; want an error naming date_ms", err, g0.writes)
	}

	g := fixture(1)
	// District 1: orders 9 and 10 undelivered (10 sorts after 9 as a
	// number; as text "10" < "9"); 9 is the oldest.
	setOrder(g, 1, 1, 8, 1, false, OrderLine{Item: 1, Quantity: 1, Amount: 1})
	setOrder(g, 1, 1, 9, 2, true, OrderLine{Item: 1, Quantity: 1, Amount: 101}, OrderLine{Item: 2, Quantity: 2, Amount: 404})
	setOrder(g, 1, 1, 10, 3, true, OrderLine{Item: 3, Quantity: 1, Amount: 303})
	// District 2: none. District 3: order 7.
	setOrder(g, 1, 3, 7, 1, true, OrderLine{Item: 4, Quantity: 1, Amount: 404})
	// deliver runs a delivery of warehouse 1 and checks the orders it
	// delivered.
	deliver := func(what string, carrier int, date int64, want ...DeliveredOrder) {
		t.Helper()
		res, err := g.run(t, deliveryProc{}, EncodeArgs(DeliveryArgs{W: 1, Carrier: carrier, Date: date}), partition.SetOf(0))
		if err != nil {
			t.Fatal(err)
		}
		out, err := DecodeDelivery(merge(t, res))
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(out.Delivered, want) {
			t.Fatalf("%s: delivered %+v, want %+v", what, out.Delivered, want)
		}
	}
	deliver("first delivery", 4, 555, DeliveredOrder{D: 1, OID: 9}, DeliveredOrder{D: 3, OID: 7})
	for _, k := range [][]byte{NewOrderKey(1, 1, 9), NewOrderKey(1, 3, 7)} {
		if _, ok := g.kv[string(k)]; ok {
			t.Errorf("new-order row %s not deleted", k)
		}
	}
	if _, ok := g.kv[string(NewOrderKey(1, 1, 10))]; !ok {
		t.Error("new-order row of order 10 deleted")
	}
	for _, tc := range []struct {
		d, o, lines, cid int
		sum              int64
	}{{1, 9, 2, 2, 505}, {3, 7, 1, 1, 404}} {
		var o Order
		g.row(t, OrderKey(1, tc.d, tc.o), &o)
		if o.Carrier != 4 {
			t.Errorf("order %d/%d carrier %d, want 4", tc.d, tc.o, o.Carrier)
		}
		for n := 1; n <= tc.lines; n++ {
			var l OrderLine
			g.row(t, OrderLineKey(1, tc.d, tc.o, n), &l)
			if l.DeliveryD != 555 {
				t.Errorf("line %d/%d/%d delivery date %d, want 555", tc.d, tc.o, n, l.DeliveryD)
			}
		}
		var c Customer
		g.row(t, CustomerKey(1, tc.d, tc.cid), &c)
		if c.Balance != -1000+tc.sum || c.DeliveryCnt != 1 {
			t.Errorf("customer %d/%d: balance %d, deliveries %d; want %d, 1", tc.d, tc.cid, c.Balance, c.DeliveryCnt, -1000+tc.sum)
		}
	}
	var o Order
	g.row(t, OrderKey(1, 1, 10), &o)
	if o.Carrier != 0 {
		t.Errorf("order 10 carrier %d, want undelivered", o.Carrier)
	}

	// The delivery left each district's cursor past the order it
	// delivered; none where it delivered nothing.
	for _, tc := range []struct{ d, next int }{{1, 10}, {3, 8}} {
		var cur DeliveryCursor
		g.row(t, DeliveryCursorKey(1, tc.d), &cur)
		if cur.NextOID != tc.next {
			t.Errorf("district %d: delivery cursor %d, want %d", tc.d, cur.NextOID, tc.next)
		}
	}
	if _, ok := g.kv[string(DeliveryCursorKey(1, 2))]; ok {
		t.Error("district 2 (nothing delivered) has a delivery cursor")
	}
	// The next delivery starts at the cursor: order 10 in district 1, and
	// in district 3 a new-order row of order 5, below its cursor (which a
	// real run never leaves: new orders take the next order id), is not
	// found.
	setOrder(g, 1, 3, 5, 1, true, OrderLine{Item: 4, Quantity: 1, Amount: 1})
	deliver("second delivery", 5, 666, DeliveredOrder{D: 1, OID: 10})
	// A gap at the cursor: district 3's cursor is 8, its oldest new-order
	// row order 12 (and order 5, below the cursor, still not found).
	setOrder(g, 1, 3, 12, 1, true, OrderLine{Item: 4, Quantity: 1, Amount: 1})
	deliver("delivery past a gap", 6, 777, DeliveredOrder{D: 3, OID: 12})
	var cur DeliveryCursor
	if g.row(t, DeliveryCursorKey(1, 3), &cur); cur.NextOID != 13 {
		t.Errorf("district 3's cursor after the gap: %d, want 13", cur.NextOID)
	}
}

func TestStockLevel(t *testing.T) {
	g := fixture(1)
	g.set(DistrictKey(1, 4), District{Name: "d4", NextOID: 25})
	// Orders 5..24 are the last 20; order 4 is not.
	setOrder(g, 1, 4, 4, 1, false, OrderLine{Item: 5})
	for o := 5; o <= 24; o++ {
		setOrder(g, 1, 4, o, 1, false, OrderLine{Item: 1 + o%3})
	}
	setOrder(g, 1, 4, 24, 1, false, OrderLine{Item: 3}, OrderLine{Item: 4})
	// Another district's lines are not counted.
	setOrder(g, 1, 5, 10, 1, false, OrderLine{Item: 5})
	for i, q := range []int{1: 10, 2: 15, 3: 3, 4: 50, 5: 1} {
		if i > 0 {
			g.set(StockKey(1, i), Stock{Quantity: q})
		}
	}
	// Items 1..4; below 15: items 1 and 3.
	res, err := g.run(t, stockLevelProc{}, EncodeArgs(StockLevelArgs{W: 1, D: 4, Threshold: 15}), partition.SetOf(0))
	if err != nil {
		t.Fatal(err)
	}
	out, err := DecodeStockLevel(merge(t, res))
	if err != nil {
		t.Fatal(err)
	}
	if want := (StockLevelOutput{Count: 2, Items: 4}); out != want {
		t.Errorf("stock level %+v, want %+v", out, want)
	}
	if len(g.writes) != 0 {
		t.Errorf("stock-level wrote %q", g.writes)
	}

	// A district with no orders yet.
	res, err = g.run(t, stockLevelProc{}, EncodeArgs(StockLevelArgs{W: 1, D: 6, Threshold: 15}), partition.SetOf(0))
	if err != nil {
		t.Fatal(err)
	}
	if out, err := DecodeStockLevel(merge(t, res)); err != nil || out != (StockLevelOutput{}) {
		t.Errorf("stock level of a district without lines: %+v, %v", out, err)
	}
}

func TestOrderStatus(t *testing.T) {
	g := fixture(1)
	setOrder(g, 1, 2, 7, 2, false, OrderLine{Item: 1, Quantity: 2, Amount: 202}, OrderLine{Item: 3, Quantity: 1, Amount: 303})
	setOrder(g, 1, 2, 70, 2, false, OrderLine{Item: 4}) // not its last order
	c := Customer{First: "F2", Last: fixtureLast, Balance: 77, LastOrder: 7}
	g.set(CustomerKey(1, 2, 2), c)
	wantLines := []OrderLine{
		{Item: 1, SupplyW: 1, Quantity: 2, Amount: 202},
		{Item: 3, SupplyW: 1, Quantity: 1, Amount: 303},
	}
	for _, tc := range []struct {
		name string
		args OrderStatusArgs
		want OrderStatusOutput
	}{
		{"by id", OrderStatusArgs{W: 1, D: 2, CID: 2},
			OrderStatusOutput{CID: 2, First: "F2", Last: fixtureLast, BalanceCents: 77, OID: 7, EntryD: 7, Lines: wantLines}},
		// F1, F2, F3: the second.
		{"by name", OrderStatusArgs{W: 1, D: 2, CLast: fixtureLast},
			OrderStatusOutput{CID: 2, First: "F2", Last: fixtureLast, BalanceCents: 77, OID: 7, EntryD: 7, Lines: wantLines}},
		{"no order", OrderStatusArgs{W: 1, D: 2, CID: 3},
			OrderStatusOutput{CID: 3, First: "F3", Last: fixtureLast, BalanceCents: -1000, Lines: []OrderLine{}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := g.run(t, orderStatusProc{}, EncodeArgs(tc.args), partition.SetOf(0))
			if err != nil {
				t.Fatal(err)
			}
			out, err := DecodeOrderStatus(merge(t, res))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, out); diff != "" {
				t.Errorf("output (-want +got):\n%s", diff)
			}
		})
	}
	if len(g.writes) != 0 {
		t.Errorf("order-status wrote %q", g.writes)
	}
}

func keyStrings(keys [][]byte) []string {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = string(k)
	}
	return out
}

func TestProcedureKeys(t *testing.T) {
	for _, tc := range []struct {
		name string
		args any
		want []string
	}{
		{ProcNewOrder, NewOrderArgs{EntryD: 1, W: 3, D: 1, C: 1, Lines: []NewOrderLine{{Item: 9, SupplyW: 3, Quantity: 1}, {Item: 9, SupplyW: 3, Quantity: 2}}},
			[]string{"w/0003/wh", "w/0003/s/000009"}},
		{ProcPayment, PaymentArgs{Date: 1, W: 3, D: 1, CW: 4, CD: 2, CID: 1, Amount: 1}, []string{"w/0003/wh", "w/0004/wh"}},
		{ProcPayment, PaymentArgs{Date: 1, W: 3, D: 1, CW: 3, CD: 2, CLast: "ABLE", Amount: 1}, []string{"w/0003/wh"}},
		{ProcOrderStatus, OrderStatusArgs{W: 5, D: 1, CLast: "ABLE"}, []string{"w/0005/wh"}},
		{ProcDelivery, DeliveryArgs{Date: 1, W: 6, Carrier: 1}, []string{"w/0006/wh"}},
		{ProcStockLevel, StockLevelArgs{W: 7, D: 10, Threshold: 10}, []string{"w/0007/wh"}},
		{ProcLoad, LoadArgs{W: 8, Table: "stock", From: 1, To: 10, Scale: Small, Date: 1}, []string{"w/0008/wh"}},
	} {
		keys, err := ProcedureKeys(tc.name, EncodeArgs(tc.args))
		if err != nil || !slices.Equal(keyStrings(keys), tc.want) {
			t.Errorf("ProcedureKeys(%s, %+v) = %q, %v; want %q", tc.name, tc.args, keyStrings(keys), err, tc.want)
		}
	}
}

func TestProcedureKeysErrors(t *testing.T) {
	line := func(i, w, q int) NewOrderLine { return NewOrderLine{Item: i, SupplyW: w, Quantity: q} }
	ok := []NewOrderLine{line(1, 1, 1)}
	for _, tc := range []struct {
		name string
		args any // a string is sent as it is
		want string
	}{
		{"gtpcc.nope", "{}", `unknown procedure "gtpcc.nope"`},
		{ProcNewOrder, "{", "arguments"},
		{ProcNewOrder, string(EncodeArgs(NewOrderArgs{EntryD: 1, W: 1, D: 1, C: 1, Lines: ok})) + "x", "1 bytes after the last field"},
		{ProcNewOrder, string(EncodeArgs(NewOrderArgs{EntryD: 1, W: 1, D: 1, C: 1, Lines: ok}))[:7], "truncated"},
		{ProcNewOrder, string(EncodeArgs(PaymentArgs{Date: 1, W: 1, D: 1, CW: 1, CD: 1, CID: 1, Amount: 1})), "payment arguments, want new-order arguments"},
		{ProcNewOrder, `{"w":1,"d":1,"c":1,"lines":[{"i":1,"supply_w":1,"qty":1}],"entry_d_ms":1}`, "JSON, the format of older clients"},
		{ProcNewOrder, "\xf2\x20", "unknown format 0xf2"},
		{ProcNewOrder, NewOrderArgs{EntryD: 1, W: 0, D: 1, C: 1, Lines: ok}, "w 0"},
		{ProcNewOrder, NewOrderArgs{EntryD: 1, W: WarehouseMax + 1, D: 1, C: 1, Lines: ok}, "w 10000"},
		{ProcNewOrder, NewOrderArgs{EntryD: 1, W: 1, D: 11, C: 1, Lines: ok}, "d 11"},
		{ProcNewOrder, NewOrderArgs{EntryD: 1, W: 1, D: 1, C: 0, Lines: ok}, "c 0"},
		{ProcNewOrder, NewOrderArgs{EntryD: 1, W: 1, D: 1, C: 1}, "0 order lines"},
		{ProcNewOrder, NewOrderArgs{EntryD: 1, W: 1, D: 1, C: 1, Lines: make([]NewOrderLine, 16)}, "16 order lines"},
		{ProcNewOrder, NewOrderArgs{EntryD: 1, W: 1, D: 1, C: 1, Lines: []NewOrderLine{line(1, 1, 1), line(0, 1, 1)}}, "lines[1].i 0"},
		{ProcNewOrder, NewOrderArgs{EntryD: 1, W: 1, D: 1, C: 1, Lines: []NewOrderLine{line(1, 0, 1)}}, "lines[0].supply_w 0"},
		{ProcNewOrder, NewOrderArgs{EntryD: 1, W: 1, D: 1, C: 1, Lines: []NewOrderLine{line(1, 1, 11)}}, "lines[0].qty 11"},
		{ProcNewOrder, NewOrderArgs{EntryD: 1, W: 1, D: 1, C: 1, Lines: []NewOrderLine{line(1, 1, 0)}}, "lines[0].qty 0"},
		{ProcPayment, PaymentArgs{Date: 1, W: 1, D: 1, CW: 1, CD: 1, CID: 1}, "amount_cents 0"},
		{ProcPayment, PaymentArgs{Date: 1, W: 1, D: 1, CW: 1, CD: 1, CID: 1, Amount: -5}, "amount_cents -5"},
		{ProcPayment, PaymentArgs{Date: 1, W: 1, D: 1, CW: 0, CD: 1, CID: 1, Amount: 1}, "c_w 0"},
		{ProcPayment, PaymentArgs{Date: 1, W: 1, D: 1, CW: 1, CD: 0, CID: 1, Amount: 1}, "c_d 0"},
		{ProcPayment, PaymentArgs{Date: 1, W: 1, D: 1, CW: 1, CD: 1, Amount: 1}, "neither"},
		{ProcPayment, PaymentArgs{Date: 1, W: 1, D: 1, CW: 1, CD: 1, CID: 1, CLast: "ABLE", Amount: 1}, "both"},
		{ProcPayment, PaymentArgs{Date: 1, W: 1, D: 1, CW: 1, CD: 1, CID: -1, Amount: 1}, "c_id -1"},
		{ProcPayment, PaymentArgs{Date: 1, W: 1, D: 1, CW: 1, CD: 1, CLast: "A/B", Amount: 1}, "last name"},
		{ProcPayment, PaymentArgs{Date: 1, W: 1, D: 1, CW: 1, CD: 1, CLast: strings.Repeat("A", 17), Amount: 1}, "17 bytes"},
		{ProcOrderStatus, OrderStatusArgs{W: 1, D: 0, CID: 1}, "d 0"},
		{ProcOrderStatus, OrderStatusArgs{W: 1, D: 1}, "neither"},
		{ProcDelivery, DeliveryArgs{Date: 1, W: 1, Carrier: 0}, "carrier 0"},
		{ProcDelivery, DeliveryArgs{Date: 1, W: 1, Carrier: 11}, "carrier 11"},
		{ProcDelivery, DeliveryArgs{Date: 1, W: -1, Carrier: 1}, "w -1"},
		// Dates are at least 1: 0 is the null of the date columns.
		{ProcNewOrder, NewOrderArgs{W: 1, D: 1, C: 1, Lines: ok}, "entry_d_ms 0"},
		{ProcNewOrder, NewOrderArgs{W: 1, D: 1, C: 1, Lines: ok, EntryD: -7}, "entry_d_ms -7"},
		{ProcPayment, PaymentArgs{W: 1, D: 1, CW: 1, CD: 1, CID: 1, Amount: 1}, "date_ms 0"},
		{ProcPayment, PaymentArgs{W: 1, D: 1, CW: 1, CD: 1, CID: 1, Amount: 1, Date: -3}, "date_ms -3"},
		{ProcDelivery, DeliveryArgs{W: 1, Carrier: 1}, "date_ms 0"},
		{ProcDelivery, DeliveryArgs{W: 1, Carrier: 1, Date: -1}, "date_ms -1"},
		{ProcStockLevel, StockLevelArgs{W: 1, D: 1}, "threshold 0"},
		{ProcStockLevel, StockLevelArgs{W: 1, D: 0, Threshold: 10}, "d 0"},
		{ProcLoad, LoadArgs{W: 0, Table: "stock"}, "warehouse 0"},
		// The keys of a load call are its procedure's: every argument
		// is checked, not only the warehouse.
		{ProcLoad, LoadArgs{W: 1, Table: "nope", Scale: Small, Date: 1}, `table "nope"`},
		{ProcLoad, LoadArgs{W: 1, Table: TableStock, From: 1, To: Small.Items + 1, Scale: Small, Date: 1}, "rows 1..1001"},
		{ProcLoad, `{"w":1,"table":"stock"}`, "JSON"},
	} {
		b, isString := tc.args.(string)
		if !isString {
			b = string(EncodeArgs(tc.args))
		}
		_, err := ProcedureKeys(tc.name, []byte(b))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ProcedureKeys(%s, %s) = %v, want an error containing %q", tc.name, b, err, tc.want)
		}
	}
}

// TestRouting routes calls with the procedures' Keys through a txn.Registry
// and a partition map: warehouses 1 and 2 in group 0, 3 in group 1, items
// replicated.
func TestRouting(t *testing.T) {
	top, err := partition.NewTopology(partition.Spec{Groups: []partition.Group{{Name: "a"}, {Name: "b"}}})
	if err != nil {
		t.Fatal(err)
	}
	item := partition.Partition{Name: "item", Start: []byte("item/"), End: []byte("item0"), Group: partition.NoGroup, Replicated: true}
	parts := []partition.Partition{item}
	for w, g := range []partition.GroupID{1: 0, 2: 0, 3: 1} {
		if w > 0 {
			parts = append(parts, partition.Partition{Name: fmt.Sprintf("w%04d", w), Start: WarehousePrefix(w), End: WarehouseEnd(w), Group: g})
		}
	}
	pm, err := partition.NewPartitionMap(top, parts)
	if err != nil {
		t.Fatal(err)
	}
	reg := txn.NewRegistry()
	for name, p := range map[string]txn.Procedure{ //flexkv:unordered registering each alone
		ProcNewOrder: newOrderProc{}, ProcPayment: paymentProc{}, ProcOrderStatus: orderStatusProc{},
		ProcDelivery: deliveryProc{}, ProcStockLevel: stockLevelProc{},
	} {
		if err := reg.Register(name, p); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name string
		args any
		want partition.GroupSet
	}{
		{ProcNewOrder, NewOrderArgs{EntryD: 1, W: 1, D: 1, C: 1, Lines: []NewOrderLine{{Item: 1, SupplyW: 2, Quantity: 1}}}, partition.SetOf(0)},
		{ProcNewOrder, NewOrderArgs{EntryD: 1, W: 1, D: 1, C: 1, Lines: []NewOrderLine{{Item: 1, SupplyW: 1, Quantity: 1}, {Item: 2, SupplyW: 3, Quantity: 1}}}, partition.SetOf(0, 1)},
		{ProcPayment, PaymentArgs{Date: 1, W: 3, D: 1, CW: 1, CD: 1, CID: 1, Amount: 1}, partition.SetOf(0, 1)},
		{ProcDelivery, DeliveryArgs{Date: 1, W: 3, Carrier: 1}, partition.SetOf(1)},
	} {
		got, err := reg.Destinations(txn.Call{Name: tc.name, Args: EncodeArgs(tc.args)}, pm, top, 0)
		if err != nil || got != tc.want {
			t.Errorf("Destinations(%s %+v) = %s, %v; want %s", tc.name, tc.args, got, err, tc.want)
		}
	}
}

// junkProcs are the procedures of Register but the loader (tested in
// load_test.go), for the junk tests.
var junkProcs = slices.DeleteFunc(slices.Clone(procedures), func(p namedProc) bool { return p.name == ProcLoad })

// junkArgs are arguments that every procedure must refuse or run without
// panicking: bytes that are not arguments, arguments of every type (a
// procedure is sent another's too) and values beyond their bounds.
var junkArgs = func() []string {
	const maxInt, minInt = int(^uint(0) >> 1), -int(^uint(0)>>1) - 1
	out := []string{
		"", "null", "{}", "[]", "{", `"x"`, "1", `{"w":1}`,
		`{"w":1,"d":1,"c":1,"lines":[{"i":1,"supply_w":1,"qty":1}],"entry_d_ms":1}`,
		"\xf1", "\xf1\x20", "\xf1\x21", "\xf1\x20\x02\x02\x02\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01",
		"\xf1\x20\x02\x02\x02\x0f", "\xf1\x21\x02\x02\x02\x02\x00\x7f", "\xf1\x07\x02",
	}
	for _, a := range []any{
		NewOrderArgs{W: 1, D: 1, C: 1},
		NewOrderArgs{W: 1, D: 1, C: 1, Lines: []NewOrderLine{{}}},
		NewOrderArgs{W: 1, D: 1, C: 1, EntryD: 1, Lines: []NewOrderLine{{Item: 1, SupplyW: 1, Quantity: 1}}},
		NewOrderArgs{W: 1, D: 1, C: 1, EntryD: 1, Lines: []NewOrderLine{{Item: 999999, SupplyW: 9999, Quantity: 10}}},
		NewOrderArgs{W: 1, D: 1, C: 1, EntryD: 1, Lines: []NewOrderLine{{Item: maxInt, SupplyW: 1, Quantity: 1}}},
		NewOrderArgs{W: maxInt, D: 1, C: 1, EntryD: 1, Lines: []NewOrderLine{{Item: 1, SupplyW: 1, Quantity: 1}}},
		NewOrderArgs{W: 1, D: 1, C: 1, EntryD: 1, Lines: make([]NewOrderLine, 16)},
		PaymentArgs{W: 1, D: 1, CW: 1, CD: 1, CID: 1, Amount: 1},
		PaymentArgs{W: 1, D: 1, CW: 2, CD: 1, CLast: "BARBARBAR", Amount: 100000000000, Date: 1},
		PaymentArgs{W: 1, D: 1, CW: 1, CD: 1, CLast: "\x00", Amount: 1, Date: 1},
		PaymentArgs{W: 1, D: 1, CW: 1, CD: 1, CID: minInt, Amount: -1 << 63, Date: 1},
		OrderStatusArgs{W: 1, D: 1, CLast: "BARBARBAR"},
		OrderStatusArgs{W: 1, D: 1, CID: 3},
		DeliveryArgs{W: 1, Carrier: 1, Date: -1},
		StockLevelArgs{W: 1, D: 1, Threshold: maxInt},
		StockLevelArgs{W: 2, D: 10, Threshold: 1},
		LoadArgs{W: 1, Table: TableStock, From: 1, To: 1, Scale: Scale{Items: 1, CustomersPerDistrict: 1}, Date: 1},
	} {
		out = append(out, string(EncodeArgs(a)))
	}
	return out
}()

// junkValues are stored values no procedure may panic on: bytes that are
// not rows, rows of every type (a key may hold another's) and rows with
// numbers beyond their bounds.
var junkValues = func() []string {
	const maxInt, minInt = int(^uint(0) >> 1), -int(^uint(0)>>1) - 1
	out := []string{"", "{", "null", `{"next_o_id":5}`, "\xf1", "\xf1\x02", "\xf1\x03\x05", "\xf1\x7f\x00", "\xf2\x02"}
	for _, r := range []any{
		District{NextOID: -5}, District{NextOID: 99999999}, District{NextOID: 100000000}, District{Tax: 99999999999},
		Warehouse{Tax: 99999999999}, Warehouse{YTD: 1<<63 - 1},
		Customer{Discount: -1}, Customer{LastOrder: -1}, Customer{LastOrder: 1},
		Customer{Balance: -1 << 63, Credit: "BC"}, CustomerData{Data: strings.Repeat("x", 600)},
		Item{Price: 1<<63 - 1}, Item{Price: -1},
		Stock{Quantity: maxInt, YTD: maxInt}, Stock{Quantity: minInt},
		Order{CID: 0}, Order{CID: 99999, OLCnt: -1}, Order{Carrier: 1, OLCnt: 99},
		OrderLine{Item: 0}, OrderLine{Item: 1, Amount: -1}, OrderLine{Amount: 1<<63 - 1},
		History{Amount: -1}, CustomerPayment{Amount: 1<<63 - 1},
		Scale{}, Scale{Items: -1, CustomersPerDistrict: maxInt},
	} {
		out = append(out, string(Encode(r)))
	}
	return out
}()

// junkValueFor returns a junk value to replace old: mostly one of old's
// row type, which its reader decodes and must check, else any.
func junkValueFor(r *rand.Rand, old string) string {
	var same []string
	for _, v := range junkValues {
		if len(old) > 1 && len(v) > 1 && v[0] == old[0] && v[1] == old[1] {
			same = append(same, v)
		}
	}
	if len(same) > 0 && r.IntN(4) != 0 {
		return same[r.IntN(len(same))]
	}
	return junkValues[r.IntN(len(junkValues))]
}

// junkKeys are keys a scan may meet that no procedure may panic on.
var junkKeys = []string{
	"w/0001/no/01/abc", "w/0001/no/01/00000000", "w/0001/no/02/-0000001",
	"w/0001/cl/01/BARBARBAR/A/xyz", "w/0001/cl/01/BARBARBAR/A/00000",
	"w/0001/ol/01/00003000/01", "w/0001/ol/01/00003000/99", "w/0001/o/01/00003000",
}

// TestJunkNeverPanics runs every procedure with junk arguments, and with
// valid ones over stores whose rows are replaced by junk: each call must
// fail with an error or give a result the executor accepts (run checks
// it), never panic.
func TestJunkNeverPanics(t *testing.T) {
	for _, p := range junkProcs {
		for _, a := range junkArgs {
			_, _ = ProcedureKeys(p.name, []byte(a))
			g := fixture(1)
			_, _ = g.run(t, p.proc, []byte(a), partition.SetOf(0))
		}
	}
	valid := []struct {
		proc txn.Procedure
		args any
	}{
		{newOrderProc{}, NewOrderArgs{EntryD: 1, W: 1, D: 1, C: 1, Lines: []NewOrderLine{{Item: 1, SupplyW: 1, Quantity: 5}, {Item: 2, SupplyW: 2, Quantity: 5}}}},
		{paymentProc{}, PaymentArgs{Date: 1, W: 1, D: 1, CW: 1, CD: 1, CLast: fixtureLast, Amount: 5}},
		{paymentProc{}, PaymentArgs{Date: 1, W: 1, D: 1, CW: 2, CD: 1, CID: 1, Amount: 5}},
		{orderStatusProc{}, OrderStatusArgs{W: 1, D: 1, CLast: fixtureLast}},
		{deliveryProc{}, DeliveryArgs{Date: 1, W: 1, Carrier: 1}},
		{stockLevelProc{}, StockLevelArgs{W: 1, D: 1, Threshold: 10}},
	}
	base := fixture()
	setOrder(base, 1, 1, 3000, 1, true, OrderLine{Item: 1, Amount: 5}, OrderLine{Item: 2, Amount: 5})
	c := Customer{First: "F1", Last: fixtureLast, LastOrder: 3000}
	base.set(CustomerKey(1, 1, 1), c)
	keys := base.keys()
	for seed := uint64(1); seed <= 300; seed++ {
		r := rand.New(rand.NewPCG(seed, 0))
		g := base.clone(0, 1)
		for range 1 + r.IntN(20) {
			if r.IntN(4) == 0 {
				g.kv[junkKeys[r.IntN(len(junkKeys))]] = junkValues[r.IntN(len(junkValues))]
			} else {
				k := keys[r.IntN(len(keys))]
				g.kv[k] = junkValueFor(r, g.kv[k])
			}
		}
		v := valid[r.IntN(len(valid))]
		_, _ = g.run(t, v.proc, EncodeArgs(v.args), partition.SetOf(0, 1))
	}
}

// FuzzProcedures runs every procedure on the fixture with fuzzed
// arguments: no panic, and any result is one the executor accepts.
func FuzzProcedures(f *testing.F) {
	for _, a := range junkArgs {
		f.Add(uint8(0), []byte(a))
	}
	f.Fuzz(func(t *testing.T, which uint8, args []byte) {
		p := junkProcs[int(which)%len(junkProcs)]
		_, _ = ProcedureKeys(p.name, args)
		g := fixture(1)
		_, _ = g.run(t, p.proc, args, partition.SetOf(0))
	})
}
