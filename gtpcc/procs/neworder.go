package procs

import (
	"bytes"
	"fmt"

	"github.com/flexkv/flexkv/txn"
)

// newOrderProc is new-order (TPC-C clause 2.4): the home group writes the
// order, and every group that owns a line's stock row updates it.
type newOrderProc struct{}

var (
	_ txn.Procedure  = newOrderProc{}
	_ txn.PieceVotes = newOrderProc{}
)

// AllOrNothing makes a call commit at every destination or at none.
func (newOrderProc) AllOrNothing() bool { return true }

// CanAbort is false: every piece decides alike whether the call aborts
// (see procs.go, All or nothing, without votes), and none votes.
func (newOrderProc) CanAbort(*txn.CallPiece) bool { return false }

// Keys returns the home warehouse's key and the stock key of every line:
// the call goes to the home group and to every supply group. The item keys
// are replicated and route nowhere.
func (newOrderProc) Keys(args []byte) ([][]byte, error) {
	a, err := parseNewOrder(args)
	if err != nil {
		return nil, err
	}
	keys := [][]byte{WarehouseKey(a.W)}
	for _, l := range a.Lines {
		keys = appendKey(keys, StockKey(l.SupplyW, l.Item))
	}
	return keys, nil
}

// Run runs one group's piece. Every group first checks, in the replicated
// range, that the rows the call needs exist at every warehouse it names
// (newOrderLoaded), then reads the items of every line from the
// replicated item table: an unknown item rolls the order back (Succeeded
// false, nothing written). Both are decided alike at every destination,
// since every group reads the same replicated rows at this point of the
// order.
func (newOrderProc) Run(p *txn.ProcPiece) (txn.PieceResult, error) {
	a, err := parseNewOrder(p.Args)
	if err != nil {
		return txn.PieceResult{}, err
	}
	r := procRows{p: p, proc: ProcNewOrder}
	scales, err := r.newOrderLoaded(&a)
	if err != nil {
		return txn.PieceResult{}, err
	}
	items, known, err := r.newOrderItems(a.Lines)
	if err != nil || !known {
		return txn.PieceResult{}, err
	}
	// A known item beyond the supply warehouse's stock (a warehouse
	// loaded at a smaller scale than the items) has no stock row.
	for _, l := range a.Lines {
		if s := scales(l.SupplyW); l.Item > s.Items {
			return txn.PieceResult{}, fmt.Errorf("gtpcc: %s: no stock of item %d at warehouse %d: it stocks items 1..%d",
				r.proc, l.Item, l.SupplyW, s.Items)
		}
	}
	res := txn.PieceResult{Succeeded: true}
	if p.Owns(WarehouseKey(a.W)) {
		o, err := r.newOrderHome(&a, items)
		if err != nil {
			return txn.PieceResult{}, err
		}
		res.Results = append(res.Results, o)
	}
	lines, err := r.newOrderStock(&a)
	if err != nil {
		return txn.PieceResult{}, err
	}
	res.Results = append(res.Results, lines...)
	return res, nil
}

// newOrderLoaded checks that the home warehouse and every supply
// warehouse are loaded and that the home district has the customer, and
// returns their scales (warehouseScales).
func (r procRows) newOrderLoaded(a *NewOrderArgs) (func(w int) Scale, error) {
	ws := make([]int, 0, 1+len(a.Lines))
	ws = append(ws, a.W)
	for _, l := range a.Lines {
		ws = append(ws, l.SupplyW)
	}
	scales, err := r.warehouseScales(ws...)
	if err != nil {
		return nil, err
	}
	return scales, r.checkCustomerLoaded(a.W, a.D, a.C, "", scales(a.W))
}

// newOrderItems reads the item of every line; known is false when one is
// not in the item table.
func (r procRows) newOrderItems(lines []NewOrderLine) (items []Item, known bool, err error) {
	items = make([]Item, len(lines))
	for i, l := range lines {
		key := ItemKey(l.Item)
		found, err := r.get(key, &items[i])
		switch {
		case err != nil:
			return nil, false, err
		case !found:
			return nil, false, nil
		}
		if err := checkRowRange(r.proc, key, "price_cents", items[i].Price, 0, itemPriceMax); err != nil {
			return nil, false, err
		}
	}
	return items, true, nil
}

// newOrderHome writes the order at the home group: the district's next
// order id, the order, new-order and order-line rows and the customer's
// last order. It returns the NewOrderOutput.
func (r procRows) newOrderHome(a *NewOrderArgs, items []Item) (txn.OpResult, error) {
	var (
		wh   Warehouse
		dist District
		cust Customer
	)
	whKey, distKey, custKey := WarehouseKey(a.W), DistrictKey(a.W, a.D), CustomerKey(a.W, a.D, a.C)
	if err := r.must(whKey, &wh); err != nil {
		return txn.OpResult{}, err
	}
	if err := r.must(distKey, &dist); err != nil {
		return txn.OpResult{}, err
	}
	if err := r.must(custKey, &cust); err != nil {
		return txn.OpResult{}, err
	}
	// The ranges that keep newOrderTotal exact and the order id within
	// OrderKey's digits.
	for _, err := range []error{
		checkRowRange(r.proc, whKey, "tax_bp", wh.Tax, 0, rateMax),
		checkRowRange(r.proc, distKey, "tax_bp", dist.Tax, 0, rateMax),
		checkRowRange(r.proc, distKey, "next_o_id", int64(dist.NextOID), 1, orderIDMax),
		checkRowRange(r.proc, custKey, "discount_bp", cust.Discount, 0, rateMax),
	} {
		if err != nil {
			return txn.OpResult{}, err
		}
	}

	oid := dist.NextOID
	dist.NextOID++
	if err := r.put(distKey, &dist); err != nil {
		return txn.OpResult{}, err
	}
	order := Order{CID: a.C, EntryD: a.EntryD, OLCnt: len(a.Lines), AllLocal: true}
	for _, l := range a.Lines {
		order.AllLocal = order.AllLocal && l.SupplyW == a.W
	}
	orderKey := OrderKey(a.W, a.D, oid)
	if err := r.put(orderKey, &order); err != nil {
		return txn.OpResult{}, err
	}
	if err := r.putRaw(NewOrderKey(a.W, a.D, oid), []byte{}); err != nil {
		return txn.OpResult{}, err
	}
	var sum int64
	for i, l := range a.Lines {
		line := OrderLine{
			Item:     l.Item,
			SupplyW:  l.SupplyW,
			Quantity: l.Quantity,
			Amount:   int64(l.Quantity) * items[i].Price,
			DistInfo: StockDist(l.SupplyW, l.Item, a.D),
		}
		sum += line.Amount
		if err := r.put(OrderLineKey(a.W, a.D, oid, i+1), &line); err != nil {
			return txn.OpResult{}, err
		}
	}
	cust.LastOrder = oid
	if err := r.put(custKey, &cust); err != nil {
		return txn.OpResult{}, err
	}
	out := NewOrderOutput{OID: oid, TotalCents: newOrderTotal(sum, cust.Discount, wh.Tax, dist.Tax)}
	return output(IndexHome, orderKey, &out), nil
}

// newOrderTotal is clause 2.4.2.2's total: sum * (1 - discount) * (1 +
// w_tax + d_tax), with the rates in basis points, rounded half up to a
// cent (the exact value is a multiple of 1/10^8 cent; adding half of 10^8
// before the integer division rounds it). The arguments are in the ranges
// Run checks, so that no product overflows (see itemPriceMax).
func newOrderTotal(sum, discount, wTax, dTax int64) int64 {
	const scale = rateMax * rateMax
	return (sum*(rateMax-discount)*(rateMax+wTax+dTax) + scale/2) / scale
}

// newOrderStock updates the stock rows this group owns, line by line
// (clause 2.4.2.2), and returns each such line's NewOrderLineOutput at
// Index = line number. Lines of the same stock row apply one after the
// other: the rows are kept here and written once at the end.
func (r procRows) newOrderStock(a *NewOrderArgs) ([]txn.OpResult, error) {
	type stockRow struct {
		key []byte
		row Stock
	}
	rows := make([]stockRow, 0, len(a.Lines)) // in order of first use
	out := make([]txn.OpResult, 0, len(a.Lines))
	for i, l := range a.Lines {
		key := StockKey(l.SupplyW, l.Item)
		if !r.p.Owns(key) {
			continue
		}
		j := 0
		for j < len(rows) && !bytes.Equal(rows[j].key, key) {
			j++
		}
		if j == len(rows) {
			rows = append(rows, stockRow{key: key})
			if err := r.must(key, &rows[j].row); err != nil {
				return nil, err
			}
		}
		s := &rows[j].row
		if s.Quantity >= l.Quantity+10 {
			s.Quantity -= l.Quantity
		} else {
			s.Quantity = s.Quantity - l.Quantity + 91
		}
		s.YTD += l.Quantity
		s.OrderCnt++
		if l.SupplyW != a.W {
			s.RemoteCnt++
		}
		line := NewOrderLineOutput{Line: i + 1, Item: l.Item, SupplyW: l.SupplyW, StockQuantity: s.Quantity}
		out = append(out, output(i+1, key, &line))
	}
	for _, s := range rows {
		if err := r.put(s.key, &s.row); err != nil {
			return nil, err
		}
	}
	return out, nil
}
