package gtpcc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/flexkv/flexkv/client"
	"github.com/flexkv/flexkv/txn"
)

// CheckReport is the outcome of Check, the "check" object of the results
// JSON (DESIGN 10.3).
type CheckReport struct {
	// Passed is true when no condition failed.
	Passed bool `json:"passed"`
	// Failures names each violation: its condition (TPC-C clause 3.3.2.N
	// is "condition N"), warehouse, district and the values that differ.
	// At most CheckFailuresMax; the rest are counted in FailuresOmitted.
	Failures        []string `json:"failures"`
	FailuresOmitted int      `json:"failures_omitted,omitempty"`
	// Checked counts the rows read.
	Checked CheckCounts `json:"checked"`
}

// CheckCounts counts the rows a Check read, by table.
type CheckCounts struct {
	Warehouses int `json:"warehouses"`
	Districts  int `json:"districts"`
	Orders     int `json:"orders"`
	NewOrders  int `json:"new_orders"`
	OrderLines int `json:"order_lines"`
	History    int `json:"history"`
}

// CheckFailuresMax bounds CheckReport.Failures: a broken run could
// otherwise list every order line.
const CheckFailuresMax = 100

// Check checks TPC-C's consistency conditions (clause 3.3.2) on the rows
// of warehouses, read through c. It is meant for a quiescent cluster (after
// a run, or after Load): it reads a warehouse table by table, not in one
// snapshot, so transactions running meanwhile can make it report
// violations that are not there.
//
// The conditions, per warehouse W and district D:
//
//  1. W_YTD = sum(D_YTD) of W's districts.
//  2. D_NEXT_O_ID - 1 = max(O_ID) = max(NO_O_ID) (the latter when D has
//     new-order rows; with no order, max(O_ID) is 0).
//  3. max(NO_O_ID) - min(NO_O_ID) + 1 = the number of new-order rows of D.
//  4. sum(O_OL_CNT) = the number of order lines of D.
//  5. O_CARRIER_ID = 0 (null) iff the order has a new-order row.
//  6. O_OL_CNT = the number of lines of the order.
//  7. OL_DELIVERY_D = 0 (null) iff the line's order has carrier 0.
//  8. W_YTD = sum(H_AMOUNT) of W's history rows.
//  9. D_YTD = sum(H_AMOUNT) of W's history rows of district D (History.D).
//
// Conditions 10-12 (a customer's balance and payments against its
// history and delivered order lines) are left out: they need the customer
// of every history row, and a payment that names its customer by last name
// at a remote warehouse records only the name at the home warehouse
// (History.CID is 0 there), because the home group does not read the
// customer's warehouse.
//
// Check returns an error, not a failure, when it cannot check: a row it
// cannot read or decode, a key it cannot parse, a warehouse or district
// that was never loaded.
func Check(ctx context.Context, c *client.Client, warehouses []int) (CheckReport, error) {
	rep := CheckReport{Passed: true, Failures: []string{}}
	if len(warehouses) == 0 {
		return rep, errors.New("gtpcc: check: no warehouses")
	}
	for _, w := range warehouses {
		if w < 1 || w > WarehouseMax {
			return rep, fmt.Errorf("gtpcc: check: warehouse %d, want 1..%d", w, WarehouseMax)
		}
	}
	ck := &checker{c: c, rep: &rep}
	for _, w := range warehouses {
		if err := ck.warehouse(ctx, w); err != nil {
			return rep, fmt.Errorf("gtpcc: check warehouse %d: %w", w, err)
		}
	}
	return rep, nil
}

// checker holds a Check's report as it is filled.
type checker struct {
	c   *client.Client
	rep *CheckReport
}

// fail records a violation of condition cond at warehouse w, district d
// (0: the warehouse as a whole).
func (ck *checker) fail(cond, w, d int, format string, args ...any) {
	ck.rep.Passed = false
	if len(ck.rep.Failures) >= CheckFailuresMax {
		ck.rep.FailuresOmitted++
		return
	}
	where := fmt.Sprintf("condition %d: warehouse %d", cond, w)
	if d > 0 {
		where += fmt.Sprintf(" district %d", d)
	}
	ck.rep.Failures = append(ck.rep.Failures, where+": "+fmt.Sprintf(format, args...))
}

// get reads and decodes the row at key, which must exist.
func (ck *checker) get(ctx context.Context, key []byte, row any) error {
	v, found, err := ck.c.Get(ctx, key)
	switch {
	case err != nil:
		return err
	case !found:
		return fmt.Errorf("no row %s (not loaded?)", key)
	}
	return Decode(key, v, row)
}

// scan calls fn on every row of [start, end), reading pages of
// txn.ScanLimitMax rows.
func (ck *checker) scan(ctx context.Context, start, end []byte, fn func(kv txn.KV) error) error {
	for {
		kvs, err := ck.c.Scan(ctx, start, end, txn.ScanLimitMax)
		if err != nil {
			return err
		}
		for _, kv := range kvs {
			if err := fn(kv); err != nil {
				return err
			}
		}
		if len(kvs) < txn.ScanLimitMax {
			return nil
		}
		// The next page starts right after the last key.
		start = append(bytes.Clone(kvs[len(kvs)-1].Key), 0)
	}
}

// warehouse checks the conditions of warehouse w and its districts.
func (ck *checker) warehouse(ctx context.Context, w int) error {
	var wh Warehouse
	if err := ck.get(ctx, WarehouseKey(w), &wh); err != nil {
		return err
	}
	ck.rep.Checked.Warehouses++
	var districts [DistrictsPerWarehouse + 1]District // by district number
	var sumD int64
	for d := 1; d <= DistrictsPerWarehouse; d++ {
		if err := ck.get(ctx, DistrictKey(w, d), &districts[d]); err != nil {
			return err
		}
		ck.rep.Checked.Districts++
		sumD += districts[d].YTD
	}
	if wh.YTD != sumD {
		ck.fail(1, w, 0, "W_YTD %d != sum(D_YTD) %d", wh.YTD, sumD)
	}

	hist, err := ck.history(ctx, w)
	if err != nil {
		return err
	}
	if wh.YTD != hist.total {
		ck.fail(8, w, 0, "W_YTD %d != sum(H_AMOUNT) %d of %d history rows", wh.YTD, hist.total, hist.rows)
	}
	for d := 1; d <= DistrictsPerWarehouse; d++ {
		if districts[d].YTD != hist.byDistrict[d] {
			ck.fail(9, w, d, "D_YTD %d != sum(H_AMOUNT) %d of the district's history rows", districts[d].YTD, hist.byDistrict[d])
		}
		if err := ck.district(ctx, w, d, &districts[d]); err != nil {
			return fmt.Errorf("district %d: %w", d, err)
		}
	}
	return nil
}

// historySums are the sums of a warehouse's history amounts.
type historySums struct {
	rows       int
	total      int64
	byDistrict [DistrictsPerWarehouse + 1]int64
}

// history sums the amounts of warehouse w's history rows. A row of another
// warehouse or district fails condition 8 or 9, which it corrupts.
func (ck *checker) history(ctx context.Context, w int) (historySums, error) {
	var s historySums
	prefix := HistoryPrefix(w)
	err := ck.scan(ctx, prefix, PrefixEnd(prefix), func(kv txn.KV) error {
		var h History
		if err := Decode(kv.Key, kv.Value, &h); err != nil {
			return err
		}
		ck.rep.Checked.History++
		s.rows++
		s.total += h.Amount
		switch {
		case h.W != w:
			ck.fail(8, w, 0, "history row %s has H_W_ID %d", kv.Key, h.W)
		case h.D < 1 || h.D > DistrictsPerWarehouse:
			ck.fail(9, w, 0, "history row %s has H_D_ID %d, want 1..%d", kv.Key, h.D, DistrictsPerWarehouse)
		default:
			s.byDistrict[h.D] += h.Amount
		}
		return nil
	})
	return s, err
}

// checkedOrder is an order as the district check sees it.
type checkedOrder struct {
	Order
	lines int  // order lines found
	isNew bool // has a new-order row
}

// district checks conditions 2-7 of district d of warehouse w, whose row
// is dist.
func (ck *checker) district(ctx context.Context, w, d int, dist *District) error {
	orders, ids, err := ck.orders(ctx, w, d)
	if err != nil {
		return err
	}
	newOrders, err := ck.newOrders(ctx, w, d)
	if err != nil {
		return err
	}

	// Condition 2.
	maxO := 0
	if len(ids) > 0 {
		maxO = ids[len(ids)-1]
	}
	if dist.NextOID-1 != maxO {
		ck.fail(2, w, d, "D_NEXT_O_ID-1 %d != max(O_ID) %d", dist.NextOID-1, maxO)
	}
	if len(newOrders) > 0 {
		minNO, maxNO := newOrders[0], newOrders[len(newOrders)-1]
		if dist.NextOID-1 != maxNO {
			ck.fail(2, w, d, "D_NEXT_O_ID-1 %d != max(NO_O_ID) %d", dist.NextOID-1, maxNO)
		}
		// Condition 3.
		if n := maxNO - minNO + 1; n != len(newOrders) {
			ck.fail(3, w, d, "max(NO_O_ID)-min(NO_O_ID)+1 = %d-%d+1 = %d != %d new-order rows", maxNO, minNO, n, len(newOrders))
		}
	}
	for _, o := range newOrders {
		if ord, ok := orders[o]; ok {
			ord.isNew = true
		} else {
			ck.fail(5, w, d, "new-order row %d has no order", o)
		}
	}

	lines, err := ck.orderLines(ctx, w, d, orders)
	if err != nil {
		return err
	}
	sumOL := 0
	for _, o := range ids {
		ord := orders[o]
		sumOL += ord.OLCnt
		// Condition 5.
		if (ord.Carrier == 0) != ord.isNew {
			ck.fail(5, w, d, "order %d has O_CARRIER_ID %d and %s", o, ord.Carrier, newOrderRow(ord.isNew))
		}
		// Condition 6.
		if ord.OLCnt != ord.lines {
			ck.fail(6, w, d, "order %d has O_OL_CNT %d and %d order lines", o, ord.OLCnt, ord.lines)
		}
	}
	// Condition 4.
	if sumOL != lines {
		ck.fail(4, w, d, "sum(O_OL_CNT) %d != %d order lines", sumOL, lines)
	}
	return nil
}

func newOrderRow(has bool) string {
	if has {
		return "a new-order row"
	}
	return "no new-order row"
}

// orders reads the orders of district d, by id, with their ids in
// ascending order.
func (ck *checker) orders(ctx context.Context, w, d int) (map[int]*checkedOrder, []int, error) {
	orders := make(map[int]*checkedOrder)
	var ids []int
	prefix := OrderPrefix(w, d)
	err := ck.scan(ctx, prefix, PrefixEnd(prefix), func(kv txn.KV) error {
		o, err := parseIDs(kv.Key, prefix, 1)
		if err != nil {
			return err
		}
		ord := &checkedOrder{}
		if err := Decode(kv.Key, kv.Value, &ord.Order); err != nil {
			return err
		}
		ck.rep.Checked.Orders++
		orders[o[0]] = ord
		ids = append(ids, o[0]) // keys sort as the ids do
		return nil
	})
	return orders, ids, err
}

// newOrders returns the order ids of district d's new-order rows, in
// ascending order.
func (ck *checker) newOrders(ctx context.Context, w, d int) ([]int, error) {
	var ids []int
	prefix := NewOrderPrefix(w, d)
	err := ck.scan(ctx, prefix, PrefixEnd(prefix), func(kv txn.KV) error {
		o, err := parseIDs(kv.Key, prefix, 1)
		if err != nil {
			return err
		}
		ck.rep.Checked.NewOrders++
		ids = append(ids, o[0])
		return nil
	})
	return ids, err
}

// orderLines reads district d's order lines, counts them by order into
// orders, checks condition 7 of each and returns their number. A line of
// no order counts toward condition 4 only.
func (ck *checker) orderLines(ctx context.Context, w, d int, orders map[int]*checkedOrder) (int, error) {
	n := 0
	prefix := OrderLinePrefix(w, d)
	err := ck.scan(ctx, prefix, PrefixEnd(prefix), func(kv txn.KV) error {
		ids, err := parseIDs(kv.Key, prefix, 2)
		if err != nil {
			return err
		}
		var line OrderLine
		if err := Decode(kv.Key, kv.Value, &line); err != nil {
			return err
		}
		ck.rep.Checked.OrderLines++
		n++
		ord, ok := orders[ids[0]]
		if !ok {
			ck.fail(4, w, d, "order line %d of order %d, which does not exist", ids[1], ids[0])
			return nil
		}
		ord.lines++
		if (line.DeliveryD == 0) != (ord.Carrier == 0) {
			ck.fail(7, w, d, "order %d line %d has OL_DELIVERY_D %d and the order O_CARRIER_ID %d", ids[0], ids[1], line.DeliveryD, ord.Carrier)
		}
		return nil
	})
	return n, err
}

// parseIDs returns the n '/'-separated numbers of key after prefix: the
// order id of an order or new-order key, the order id and line number of
// an order line's.
func parseIDs(key, prefix []byte, n int) ([]int, error) {
	rest, ok := bytes.CutPrefix(key, prefix)
	parts := bytes.Split(rest, []byte("/"))
	if !ok || len(parts) != n {
		return nil, fmt.Errorf("key %q: want %s followed by %d numbers", key, prefix, n)
	}
	ids := make([]int, n)
	for i, p := range parts {
		v, err := strconv.Atoi(string(p))
		if err != nil || v < 0 {
			return nil, fmt.Errorf("key %q: %q is not a number", key, p)
		}
		ids[i] = v
	}
	return ids, nil
}
