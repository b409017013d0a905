package procs

import (
	"fmt"
	"slices"

	"github.com/flexkv/flexkv/txn"
)

// The three transactions of one warehouse (TPC-C clauses 2.6-2.8): their
// only key is the home warehouse's, so their one destination is its group.

// stockLevelOrders is how many of a district's latest orders stock-level
// examines (clause 2.8.2.2).
const stockLevelOrders = 20

// homeOnly returns the keys of a call of warehouse w alone.
func homeOnly(w int) [][]byte { return [][]byte{WarehouseKey(w)} }

// checkHome checks that the running group owns warehouse w: the call's
// only destination is its owner, so any other group was sent it by
// mistake.
func (r procRows) checkHome(w int) error {
	if !r.p.Owns(WarehouseKey(w)) {
		return fmt.Errorf("gtpcc: %s: group %d does not own warehouse %d, the call's only warehouse", r.proc, r.p.Group, w)
	}
	return nil
}

// orderLines returns the order lines of order o of district d of
// warehouse w, by line number (at most OrderLinesMax: an order has no
// more).
func (r procRows) orderLines(w, d, o int) ([]txn.KV, []OrderLine, error) {
	prefix := orderLinePrefix(w, d, o)
	kvs, err := r.scan(prefix, PrefixEnd(prefix), OrderLinesMax)
	if err != nil {
		return nil, nil, err
	}
	lines := make([]OrderLine, len(kvs))
	for i, kv := range kvs {
		if err := Decode(kv.Key, kv.Value, &lines[i]); err != nil {
			return nil, nil, fmt.Errorf("gtpcc: %s: %w", r.proc, err)
		}
	}
	return kvs, lines, nil
}

// orderStatusProc is order-status (clause 2.6), read only.
type orderStatusProc struct{}

var _ txn.Procedure = orderStatusProc{}

// ReadOnly implements txn.ReadOnly: order-status reads its rows only.
func (orderStatusProc) ReadOnly() bool { return true }

// Keys returns the home warehouse's key.
func (orderStatusProc) Keys(args []byte) ([][]byte, error) {
	a, err := parseOrderStatus(args)
	if err != nil {
		return nil, err
	}
	return homeOnly(a.W), nil
}

// Run reports the customer, its last order (Customer.LastOrder, which
// new-order keeps) and that order's lines.
func (orderStatusProc) Run(p *txn.ProcPiece) (txn.PieceResult, error) {
	a, err := parseOrderStatus(p.Args)
	if err != nil {
		return txn.PieceResult{}, err
	}
	r := procRows{p: p, proc: ProcOrderStatus}
	if err := r.checkHome(a.W); err != nil {
		return txn.PieceResult{}, err
	}
	cid, custKey, c, err := r.customer(a.W, a.D, a.CID, a.CLast)
	if err != nil {
		return txn.PieceResult{}, err
	}
	out := OrderStatusOutput{
		CID: cid, First: c.First, Middle: c.Middle, Last: c.Last,
		BalanceCents: c.Balance, OID: c.LastOrder, Lines: []OrderLine{},
	}
	if err := checkRowRange(r.proc, custKey, "last_o_id", int64(c.LastOrder), 0, orderIDMax); err != nil {
		return txn.PieceResult{}, err
	}
	if c.LastOrder > 0 {
		var o Order
		if err := r.must(OrderKey(a.W, a.D, c.LastOrder), &o); err != nil {
			return txn.PieceResult{}, err
		}
		out.EntryD, out.Carrier = o.EntryD, o.Carrier
		if _, out.Lines, err = r.orderLines(a.W, a.D, c.LastOrder); err != nil {
			return txn.PieceResult{}, err
		}
	}
	return txn.PieceResult{Succeeded: true, Results: []txn.OpResult{output(IndexHome, custKey, &out)}}, nil
}

// deliveryProc is delivery (clause 2.7), run as one transaction over the
// ten districts, as TPC-C's deferred execution allows.
type deliveryProc struct{}

var _ txn.Procedure = deliveryProc{}

// Keys returns the home warehouse's key.
func (deliveryProc) Keys(args []byte) ([][]byte, error) {
	a, err := parseDelivery(args)
	if err != nil {
		return nil, err
	}
	return homeOnly(a.W), nil
}

// Run delivers the oldest undelivered order of every district.
func (deliveryProc) Run(p *txn.ProcPiece) (txn.PieceResult, error) {
	a, err := parseDelivery(p.Args)
	if err != nil {
		return txn.PieceResult{}, err
	}
	r := procRows{p: p, proc: ProcDelivery}
	if err := r.checkHome(a.W); err != nil {
		return txn.PieceResult{}, err
	}
	out := DeliveryOutput{Delivered: []DeliveredOrder{}}
	for d := 1; d <= DistrictsPerWarehouse; d++ {
		oid, ok, err := r.deliverDistrict(&a, d)
		if err != nil {
			return txn.PieceResult{}, err
		}
		if ok {
			out.Delivered = append(out.Delivered, DeliveredOrder{D: d, OID: oid})
		}
	}
	return txn.PieceResult{Succeeded: true, Results: []txn.OpResult{output(IndexHome, WarehouseKey(a.W), &out)}}, nil
}

// oldestNewOrder returns the key of the oldest new-order row of district
// d of warehouse w at or after order next (0: the district's first), nil if
// there is none. Order ids are given in sequence and delivered in order, so
// that row is nearly always order next's own: a point read finds it, which
// costs less than a scan (an iterator over every level of the store). A
// gap, or no new order since the last delivery, falls back to the scan.
func (r procRows) oldestNewOrder(w, d, next int) ([]byte, error) {
	prefix := NewOrderPrefix(w, d)
	start := prefix
	if next > 0 {
		start = NewOrderKey(w, d, next)
		_, found, err := r.raw(start)
		switch {
		case err != nil:
			return nil, err
		case found:
			return start, nil
		}
	}
	kvs, err := r.scan(start, PrefixEnd(prefix), 1)
	if err != nil || len(kvs) == 0 {
		return nil, err
	}
	return kvs[0].Key, nil
}

// deliverDistrict delivers the oldest new order of district d (the first
// new-order row at or past the district's delivery cursor: keys sort by
// order id) and returns its id; ok is false when the district has none
// (clause 2.7.4.2: it is skipped).
func (r procRows) deliverDistrict(a *DeliveryArgs, d int) (oid int, ok bool, err error) {
	var cur DeliveryCursor
	curKey := DeliveryCursorKey(a.W, d)
	if _, err := r.get(curKey, &cur); err != nil {
		return 0, false, err
	}
	noKey, err := r.oldestNewOrder(a.W, d, cur.NextOID)
	if err != nil || noKey == nil {
		return 0, false, err
	}
	oid, ok = ParseLastNumber(noKey)
	if !ok || oid < 1 || oid > orderIDMax {
		return 0, false, fmt.Errorf("gtpcc: %s: new-order key %q does not end in an order id", r.proc, noKey)
	}
	if err := r.del(noKey); err != nil {
		return 0, false, err
	}
	cur.NextOID = oid + 1
	if err := r.put(curKey, &cur); err != nil {
		return 0, false, err
	}
	var o Order
	orderKey := OrderKey(a.W, d, oid)
	if err := r.must(orderKey, &o); err != nil {
		return 0, false, err
	}
	if err := checkRowRange(r.proc, orderKey, "c_id", int64(o.CID), 1, customerIDMax); err != nil {
		return 0, false, err
	}
	o.Carrier = a.Carrier
	if err := r.put(orderKey, &o); err != nil {
		return 0, false, err
	}
	lineKVs, lines, err := r.orderLines(a.W, d, oid)
	if err != nil {
		return 0, false, err
	}
	var sum int64
	for i := range lines {
		l := &lines[i]
		if err := checkRowRange(r.proc, lineKVs[i].Key, "amount_cents", l.Amount, 0, lineAmountMax); err != nil {
			return 0, false, err
		}
		sum += l.Amount
		l.DeliveryD = a.Date
		if err := r.put(lineKVs[i].Key, l); err != nil {
			return 0, false, err
		}
	}
	var c Customer
	custKey := CustomerKey(a.W, d, o.CID)
	if err := r.must(custKey, &c); err != nil {
		return 0, false, err
	}
	c.Balance += sum
	c.DeliveryCnt++
	if err := r.put(custKey, &c); err != nil {
		return 0, false, err
	}
	return oid, true, nil
}

// stockLevelProc is stock-level (clause 2.8), read only.
type stockLevelProc struct{}

var _ txn.Procedure = stockLevelProc{}

// ReadOnly implements txn.ReadOnly: stock-level reads its rows only.
func (stockLevelProc) ReadOnly() bool { return true }

// Keys returns the home warehouse's key.
func (stockLevelProc) Keys(args []byte) ([][]byte, error) {
	a, err := parseStockLevel(args)
	if err != nil {
		return nil, err
	}
	return homeOnly(a.W), nil
}

// Run counts the distinct items of the district's last 20 orders whose
// stock at the home warehouse is below the threshold.
func (stockLevelProc) Run(p *txn.ProcPiece) (txn.PieceResult, error) {
	a, err := parseStockLevel(p.Args)
	if err != nil {
		return txn.PieceResult{}, err
	}
	r := procRows{p: p, proc: ProcStockLevel}
	if err := r.checkHome(a.W); err != nil {
		return txn.PieceResult{}, err
	}
	var dist District
	distKey := DistrictKey(a.W, a.D)
	if err := r.must(distKey, &dist); err != nil {
		return txn.PieceResult{}, err
	}
	next := dist.NextOID
	if err := checkRowRange(r.proc, distKey, "next_o_id", int64(next), 1, orderIDMax+1); err != nil {
		return txn.PieceResult{}, err
	}
	items, err := r.recentItems(a.W, a.D, max(1, next-stockLevelOrders), next)
	if err != nil {
		return txn.PieceResult{}, err
	}
	out := StockLevelOutput{Items: len(items)}
	for _, i := range items {
		var s Stock
		if err := r.must(StockKey(a.W, i), &s); err != nil {
			return txn.PieceResult{}, err
		}
		if s.Quantity < a.Threshold {
			out.Count++
		}
	}
	return txn.PieceResult{Succeeded: true, Results: []txn.OpResult{output(IndexHome, distKey, &out)}}, nil
}

// recentItems returns the distinct items, ascending, of the order lines of
// orders lo..hi-1 of district d of warehouse w.
func (r procRows) recentItems(w, d, lo, hi int) ([]int, error) {
	if lo >= hi {
		return nil, nil
	}
	// All lines of orders lo..hi-1 sort from lo's line prefix to hi's:
	// order ids have a fixed width. At most 20 orders of 15 lines each fit
	// one scan.
	end := orderLinePrefix(w, d, hi)
	if hi > orderIDMax { // hi has a digit more: the district's last lines
		end = PrefixEnd(OrderLinePrefix(w, d))
	}
	kvs, err := r.scan(orderLinePrefix(w, d, lo), end, stockLevelOrders*OrderLinesMax)
	if err != nil {
		return nil, err
	}
	items := make([]int, 0, len(kvs))
	for _, kv := range kvs {
		item, err := orderLineItem(kv.Value)
		if err != nil {
			return nil, fmt.Errorf("gtpcc: %s: row %q: %w", r.proc, kv.Key, err)
		}
		if err := checkRowRange(r.proc, kv.Key, "i_id", int64(item), 1, itemIDMax); err != nil {
			return nil, err
		}
		items = append(items, item)
	}
	slices.Sort(items)
	return slices.Compact(items), nil
}
