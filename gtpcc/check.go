package gtpcc

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/flexkv/flexkv/client"
	"github.com/flexkv/flexkv/gtpcc/procs"
	"github.com/flexkv/flexkv/txn"
)

// CheckReport is the outcome of Check, the "check" object of the results
// JSON (DESIGN 10.3).
type CheckReport struct {
	// Passed is true when no condition failed.
	Passed bool `json:"passed"`
	// Failures names each violation: its condition (TPC-C clause 3.3.2.N
	// is "condition N", gTPC-C's own are "condition g1" and "condition
	// g2"), warehouse, district and the values that differ. At most
	// CheckFailuresMax; the rest are counted in FailuresOmitted.
	Failures        []string `json:"failures"`
	FailuresOmitted int      `json:"failures_omitted,omitempty"`
	// Skipped names the conditions not checked, and why.
	Skipped []string `json:"skipped,omitempty"`
	// Checked counts the rows read.
	Checked CheckCounts `json:"checked"`
}

// CheckCounts counts the rows a Check read, by table.
type CheckCounts struct {
	Warehouses       int `json:"warehouses"`
	Districts        int `json:"districts"`
	Customers        int `json:"customers"`
	Orders           int `json:"orders"`
	NewOrders        int `json:"new_orders"`
	OrderLines       int `json:"order_lines"`
	History          int `json:"history"`
	CustomerPayments int `json:"customer_payments"`
	Stock            int `json:"stock"`
}

// CheckFailuresMax bounds CheckReport.Failures: a broken run could
// otherwise list every order line.
const CheckFailuresMax = 100

// CheckedConditions names the conditions Check checks, for a person.
const CheckedConditions = "TPC-C 1-10 and 12, gTPC-C g1 and g2"

// Check checks TPC-C's consistency conditions (clause 3.3.2), and gTPC-C's
// conditions across groups, on the rows of warehouses, read through c. It
// is meant for a quiescent cluster (after a run, or after Load): it reads a
// warehouse table by table, not in one snapshot, so transactions running
// meanwhile can make it report violations that are not there.
//
// TPC-C's conditions, per warehouse W and district D:
//
//  1. W_YTD = sum(D_YTD) of W's districts.
//  2. D_NEXT_O_ID - 1 = max(O_ID) = max(NO_O_ID) (the latter when D has
//     new-order rows; with no order, max(O_ID) is 0).
//  3. max(NO_O_ID) - min(NO_O_ID) + 1 = the number of new-order rows of D;
//     and no new-order row is below D's delivery cursor
//     (procs.DeliveryCursor), which a delivery would never find.
//  4. sum(O_OL_CNT) = the number of order lines of D.
//  5. O_CARRIER_ID = 0 (null) iff the order has a new-order row.
//  6. O_OL_CNT = the number of lines of the order.
//  7. OL_DELIVERY_D = 0 (null) iff the line's order has carrier 0.
//  8. W_YTD = sum(H_AMOUNT) of W's history rows.
//  9. D_YTD = sum(H_AMOUNT) of W's history rows of district D (History.D).
//  10. C_BALANCE = sum(OL_AMOUNT) - sum(H_AMOUNT), per customer: the
//     amounts of the delivered lines (OL_DELIVERY_D not null) of the
//     customer's orders, less the customer's payments. These are its
//     loader history row (at its warehouse, naming it) and, for the
//     payments since, its CustomerPayment records: a run's history row is
//     at the home warehouse, which may be another group's, and lacks the
//     customer's id when the payment named the customer by last name at a
//     warehouse the home group does not own; condition g2 ties each
//     record to its history row. The loader's rows keep it: balance
//     -10.00, one history row of 10.00, delivered lines of amount 0.
//  12. C_BALANCE + C_YTD_PAYMENT = sum(OL_AMOUNT) of the delivered lines of
//     the customer's orders.
//
// Condition 11 is not checked.
//
// gTPC-C's conditions across groups, beyond TPC-C's: a transaction's
// pieces at different groups each keep their own group's conditions, so
// a piece lost or applied twice at one group breaks none of the above.
// These tie the pieces together:
//
//	g1. For every checked warehouse W and item I, S_YTD, S_ORDER_CNT and
//	    S_REMOTE_CNT equal their loaded values (procs.StockRow) plus, over the
//	    order lines of the orders new-order wrote (O_ID >
//	    Scale.OrdersPerDistrict) at every checked warehouse with
//	    OL_SUPPLY_W_ID = W and OL_I_ID = I: OL_QUANTITY, 1, and 1 when the
//	    order's warehouse is not W. Only the orders of the checked
//	    warehouses are summed, so the stock of W is exact only when every
//	    warehouse whose orders W supplied is checked: pass every warehouse
//	    of the run (flexkv gtpcc check and run do).
//	g2. Every history row a payment wrote (not the loader's, "load-...")
//	    at warehouse W with id X has exactly one CustomerPayment record,
//	    procs.CustomerPaymentKey(H_C_W_ID, X), with the same amount, date, W, D,
//	    C_D_ID and, when the history row names it, C_ID; every record has
//	    its history row. Checked for pairs whose two warehouses are both
//	    checked. And per customer: C_YTD_PAYMENT = 10.00 (loaded) + the sum
//	    of its records' amounts, C_PAYMENT_CNT = 1 + their number.
//
// Check returns an error, not a failure, when it cannot check: a row it
// cannot read or decode, a key it cannot parse, a warehouse that was never
// loaded whole (ReadScale), a warehouse listed twice.
func Check(ctx context.Context, c *client.Client, warehouses []int) (CheckReport, error) {
	rep := CheckReport{Passed: true, Failures: []string{}}
	// A warehouse listed twice would count its orders twice toward g1.
	checked, err := warehouseSet("check", warehouses)
	if err != nil {
		return rep, err
	}
	scale, err := ReadScale(ctx, c, warehouses)
	if err != nil {
		return rep, err // it names the warehouse
	}
	ck := &checker{
		c: c, rep: &rep, scale: scale, checked: checked,
		supplied: make(map[stockRef]stockSums),
		homes:    make(map[string]paymentHome),
		records:  make(map[string]paymentRecord),
	}
	for _, w := range warehouses {
		if err := ck.warehouse(ctx, w); err != nil {
			return rep, fmt.Errorf("gtpcc: check warehouse %d: %w", w, err)
		}
	}
	// g1 sums the lines of every order a stock row supplied: only exact
	// over every loaded warehouse of the cluster.
	missing, err := ck.loadedUnchecked(ctx)
	if err != nil {
		return rep, err
	}
	if len(missing) > 0 {
		rep.Skipped = append(rep.Skipped, fmt.Sprintf("g1: stock is checked over every loaded warehouse of the cluster only (%d not checked, e.g. %d)", len(missing), missing[0]))
	} else {
		for _, w := range warehouses {
			if err := ck.stock(ctx, w); err != nil {
				return rep, fmt.Errorf("gtpcc: check warehouse %d stock: %w", w, err)
			}
		}
	}
	ck.payments()
	return rep, nil
}

// loadedUnchecked returns the warehouses of the cluster that were loaded
// (they have their scale) and are not checked.
func (ck *checker) loadedUnchecked(ctx context.Context) ([]int, error) {
	var out []int
	for _, w := range ClusterWarehouses(ck.c.Topology()) {
		if ck.checked[w] {
			continue
		}
		_, found, err := ck.c.Get(ctx, procs.ScaleKey(w))
		if err != nil {
			return nil, fmt.Errorf("gtpcc: check: warehouse %d: scale: %w", w, err)
		}
		if found {
			out = append(out, w)
		}
	}
	return out, nil
}

// ClusterWarehouses returns the warehouses of a cluster, ascending: its
// partitions whose range is exactly one warehouse, w/NNNN/ to w/NNNN+1/.
func ClusterWarehouses(view *client.Topology) []int {
	var ws []int
	for _, p := range view.Config.Partitions {
		w, ok := procs.ParseWarehouse([]byte(p.Start))
		if ok && !p.Replicated && p.Start == string(procs.WarehousePrefix(w)) && p.End == string(procs.WarehouseEnd(w)) {
			ws = append(ws, w)
		}
	}
	slices.Sort(ws)
	return ws
}

// checker holds a Check's report as it is filled, and what the checks
// across warehouses gather from each.
type checker struct {
	c       *client.Client
	rep     *CheckReport
	scale   procs.Scale
	checked map[int]bool // the warehouses checked
	// supplied sums, per stock row of a checked warehouse, the order lines
	// of new-orders that it supplied (g1).
	supplied map[stockRef]stockSums
	// homes and records are the payments' history rows and
	// CustomerPayment records, by transaction id (g2).
	homes   map[string]paymentHome
	records map[string]paymentRecord
}

// stockRef names the stock of item i at warehouse w.
type stockRef struct{ w, i int }

// stockSums are the changes new-order lines make to a stock row.
type stockSums struct{ ytd, orders, remote int }

// paymentHome is a history row written by a payment, at warehouse w.
type paymentHome struct {
	w int
	h procs.History
}

// paymentRecord is a CustomerPayment record, at warehouse cw.
type paymentRecord struct {
	cw int
	p  procs.CustomerPayment
}

// customerRef names customer c of district d of a warehouse.
type customerRef struct{ d, c int }

// customerSums are what a warehouse's rows other than its customers say
// of a customer (conditions 10, 12 and g2).
type customerSums struct {
	delivered      int64 // OL_AMOUNT of the delivered lines of its orders
	deliveredLines int
	loaded         int64 // H_AMOUNT of its loader history rows
	loadedRows     int
	paid           int64 // amounts of its CustomerPayment records
	payments       int   // its CustomerPayment records
}

// fail records a violation of condition cond (TPC-C's "1".."12", gTPC-C's
// "g1", "g2") at warehouse w, district d (0: the warehouse as a whole).
func (ck *checker) fail(cond string, w, d int, format string, args ...any) {
	ck.rep.Passed = false
	if len(ck.rep.Failures) >= CheckFailuresMax {
		ck.rep.FailuresOmitted++
		return
	}
	where := fmt.Sprintf("condition %s: warehouse %d", cond, w)
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
	return procs.Decode(key, v, row)
}

// scan calls fn on every row whose key starts with prefix, reading pages
// of txn.ScanLimitMax rows.
func (ck *checker) scan(ctx context.Context, prefix []byte, fn func(kv txn.KV) error) error {
	start, end := prefix, procs.PrefixEnd(prefix)
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

// scanPrefix calls fn on every row whose key starts with prefix, with the
// rest of its key.
func (ck *checker) scanPrefix(ctx context.Context, prefix []byte, fn func(kv txn.KV, rest string) error) error {
	return ck.scan(ctx, prefix, func(kv txn.KV) error {
		return fn(kv, string(kv.Key[len(prefix):]))
	})
}

// warehouse checks the conditions of warehouse w and its districts and
// gathers what the checks across warehouses need.
func (ck *checker) warehouse(ctx context.Context, w int) error {
	var wh procs.Warehouse
	if err := ck.get(ctx, procs.WarehouseKey(w), &wh); err != nil {
		return err
	}
	ck.rep.Checked.Warehouses++
	var districts [procs.DistrictsPerWarehouse + 1]procs.District // by district number
	var sumD int64
	for d := 1; d <= procs.DistrictsPerWarehouse; d++ {
		if err := ck.get(ctx, procs.DistrictKey(w, d), &districts[d]); err != nil {
			return err
		}
		ck.rep.Checked.Districts++
		sumD += districts[d].YTD
	}
	if wh.YTD != sumD {
		ck.fail("1", w, 0, "W_YTD %d != sum(D_YTD) %d", wh.YTD, sumD)
	}

	customers := make(map[customerRef]*customerSums)
	hist, err := ck.history(ctx, w, customers)
	if err != nil {
		return err
	}
	if wh.YTD != hist.total {
		ck.fail("8", w, 0, "W_YTD %d != sum(H_AMOUNT) %d of %d history rows", wh.YTD, hist.total, hist.rows)
	}
	if err := ck.customerPayments(ctx, w, customers); err != nil {
		return err
	}
	for d := 1; d <= procs.DistrictsPerWarehouse; d++ {
		if districts[d].YTD != hist.byDistrict[d] {
			ck.fail("9", w, d, "D_YTD %d != sum(H_AMOUNT) %d of the district's history rows", districts[d].YTD, hist.byDistrict[d])
		}
		if err := ck.district(ctx, w, d, &districts[d], customers); err != nil {
			return fmt.Errorf("district %d: %w", d, err)
		}
	}
	ck.unknownCustomers(w, customers)
	return nil
}

// sumsOf returns the sums of customer ref, added to m if new.
func sumsOf(m map[customerRef]*customerSums, ref customerRef) *customerSums {
	s, ok := m[ref]
	if !ok {
		s = &customerSums{}
		m[ref] = s
	}
	return s
}

// historySums are the sums of a warehouse's history amounts.
type historySums struct {
	rows       int
	total      int64
	byDistrict [procs.DistrictsPerWarehouse + 1]int64
}

// history sums the amounts of warehouse w's history rows, adds the
// loader's to their customers' sums (condition 10) and gathers the
// payments' (g2). A row of another warehouse or district fails condition 8
// or 9, which it corrupts.
func (ck *checker) history(ctx context.Context, w int, customers map[customerRef]*customerSums) (historySums, error) {
	var s historySums
	err := ck.scanPrefix(ctx, procs.HistoryPrefix(w), func(kv txn.KV, id string) error {
		var h procs.History
		if err := procs.Decode(kv.Key, kv.Value, &h); err != nil {
			return err
		}
		ck.rep.Checked.History++
		s.rows++
		s.total += h.Amount
		switch {
		case h.W != w:
			ck.fail("8", w, 0, "history row %s has H_W_ID %d", kv.Key, h.W)
		case h.D < 1 || h.D > procs.DistrictsPerWarehouse:
			ck.fail("9", w, 0, "history row %s has H_D_ID %d, want 1..%d", kv.Key, h.D, procs.DistrictsPerWarehouse)
		default:
			s.byDistrict[h.D] += h.Amount
		}
		switch prev, dup := ck.homes[id]; {
		case strings.HasPrefix(id, procs.LoadHistoryIDPrefix):
			// The loader's row of a customer of w (procs.LoadHistoryID).
			if h.CW != w {
				ck.fail("10", w, 0, "the loader's history row %s names a customer of warehouse %d", kv.Key, h.CW)
				return nil
			}
			s := sumsOf(customers, customerRef{h.CD, h.CID})
			s.loaded += h.Amount
			s.loadedRows++
		case dup:
			ck.fail("g2", w, 0, "payment %s has history rows at warehouses %d and %d", id, prev.w, w)
		default:
			ck.homes[id] = paymentHome{w: w, h: h}
		}
		return nil
	})
	return s, err
}

// customerPayments gathers warehouse cw's CustomerPayment records (g2)
// and adds them to their customers' sums.
func (ck *checker) customerPayments(ctx context.Context, cw int, customers map[customerRef]*customerSums) error {
	return ck.scanPrefix(ctx, procs.CustomerPaymentPrefix(cw), func(kv txn.KV, id string) error {
		var p procs.CustomerPayment
		if err := procs.Decode(kv.Key, kv.Value, &p); err != nil {
			return err
		}
		ck.rep.Checked.CustomerPayments++
		if prev, dup := ck.records[id]; dup {
			ck.fail("g2", cw, 0, "payment %s has customer-side records at warehouses %d and %d", id, prev.cw, cw)
		} else {
			ck.records[id] = paymentRecord{cw: cw, p: p}
		}
		// A record stands for a charge of its customer, duplicate or
		// not: conditions 10, 12 and g2 compare it with the customer.
		s := sumsOf(customers, customerRef{p.CD, p.CID})
		s.paid += p.Amount
		s.payments++
		return nil
	})
}

// checkedOrder is an order as the district check sees it.
type checkedOrder struct {
	procs.Order
	lines int  // order lines found
	isNew bool // has a new-order row
}

// district checks conditions 2-7 of district d of warehouse w, whose row
// is dist, then 10, 12 and g2 of its customers.
func (ck *checker) district(ctx context.Context, w, d int, dist *procs.District, customers map[customerRef]*customerSums) error {
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
		ck.fail("2", w, d, "D_NEXT_O_ID-1 %d != max(O_ID) %d", dist.NextOID-1, maxO)
	}
	if len(newOrders) > 0 {
		minNO, maxNO := newOrders[0], newOrders[len(newOrders)-1]
		if dist.NextOID-1 != maxNO {
			ck.fail("2", w, d, "D_NEXT_O_ID-1 %d != max(NO_O_ID) %d", dist.NextOID-1, maxNO)
		}
		// Condition 3.
		if n := maxNO - minNO + 1; n != len(newOrders) {
			ck.fail("3", w, d, "max(NO_O_ID)-min(NO_O_ID)+1 = %d-%d+1 = %d != %d new-order rows", maxNO, minNO, n, len(newOrders))
		}
		cur, err := ck.deliveryCursor(ctx, w, d)
		if err != nil {
			return err
		}
		if minNO < cur.NextOID {
			ck.fail("3", w, d, "new-order row %d below the delivery cursor %d", minNO, cur.NextOID)
		}
	}
	for _, o := range newOrders {
		if ord, ok := orders[o]; ok {
			ord.isNew = true
		} else {
			ck.fail("5", w, d, "new-order row %d has no order", o)
		}
	}

	lines, err := ck.orderLines(ctx, w, d, orders, customers)
	if err != nil {
		return err
	}
	sumOL := 0
	for _, o := range ids {
		ord := orders[o]
		sumOL += ord.OLCnt
		// Condition 5.
		if (ord.Carrier == 0) != ord.isNew {
			ck.fail("5", w, d, "order %d has O_CARRIER_ID %d and %s", o, ord.Carrier, newOrderRow(ord.isNew))
		}
		// Condition 6.
		if ord.OLCnt != ord.lines {
			ck.fail("6", w, d, "order %d has O_OL_CNT %d and %d order lines", o, ord.OLCnt, ord.lines)
		}
	}
	// Condition 4.
	if sumOL != lines {
		ck.fail("4", w, d, "sum(O_OL_CNT) %d != %d order lines", sumOL, lines)
	}
	return ck.customers(ctx, w, d, customers)
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
	prefix := procs.OrderPrefix(w, d)
	err := ck.scan(ctx, prefix, func(kv txn.KV) error {
		o, err := parseIDs(kv.Key, prefix, 1)
		if err != nil {
			return err
		}
		ord := &checkedOrder{}
		if err := procs.Decode(kv.Key, kv.Value, &ord.Order); err != nil {
			return err
		}
		ck.rep.Checked.Orders++
		orders[o[0]] = ord
		ids = append(ids, o[0]) // keys sort as the ids do
		return nil
	})
	return orders, ids, err
}

// deliveryCursor returns district d's delivery cursor (zero without one).
func (ck *checker) deliveryCursor(ctx context.Context, w, d int) (procs.DeliveryCursor, error) {
	var cur procs.DeliveryCursor
	key := procs.DeliveryCursorKey(w, d)
	v, found, err := ck.c.Get(ctx, key)
	if err != nil || !found {
		return cur, err
	}
	return cur, procs.Decode(key, v, &cur)
}

// newOrders returns the order ids of district d's new-order rows, in
// ascending order.
func (ck *checker) newOrders(ctx context.Context, w, d int) ([]int, error) {
	var ids []int
	prefix := procs.NewOrderPrefix(w, d)
	err := ck.scan(ctx, prefix, func(kv txn.KV) error {
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
// orders, checks condition 7 of each and returns their number. It adds the
// delivered lines' amounts to their customers' sums (conditions 10 and
// 12), and the lines of new-orders to the sums of the stock that supplied
// them (g1). A line of no order counts toward condition 4 only.
func (ck *checker) orderLines(ctx context.Context, w, d int, orders map[int]*checkedOrder, customers map[customerRef]*customerSums) (int, error) {
	n := 0
	prefix := procs.OrderLinePrefix(w, d)
	err := ck.scan(ctx, prefix, func(kv txn.KV) error {
		ids, err := parseIDs(kv.Key, prefix, 2)
		if err != nil {
			return err
		}
		var line procs.OrderLine
		if err := procs.Decode(kv.Key, kv.Value, &line); err != nil {
			return err
		}
		ck.rep.Checked.OrderLines++
		n++
		ord, ok := orders[ids[0]]
		if !ok {
			ck.fail("4", w, d, "order line %d of order %d, which does not exist", ids[1], ids[0])
			return nil
		}
		ord.lines++
		if (line.DeliveryD == 0) != (ord.Carrier == 0) {
			ck.fail("7", w, d, "order %d line %d has OL_DELIVERY_D %d and the order O_CARRIER_ID %d", ids[0], ids[1], line.DeliveryD, ord.Carrier)
		}
		if line.DeliveryD != 0 {
			s := sumsOf(customers, customerRef{d, ord.CID})
			s.delivered += line.Amount
			s.deliveredLines++
		}
		// The loader's orders left the stock as it loaded it (S_YTD 0,
		// TPC-C clause 4.3.3.1); new-order's changed it.
		if ids[0] > ck.scale.OrdersPerDistrict && ck.checked[line.SupplyW] {
			ref := stockRef{line.SupplyW, line.Item}
			s := ck.supplied[ref]
			s.ytd += line.Quantity
			s.orders++
			if line.SupplyW != w {
				s.remote++
			}
			ck.supplied[ref] = s
		}
		return nil
	})
	return n, err
}

// customers checks conditions 10, 12 and g2 of the customers of district d
// of warehouse w against their sums, which it removes from customers.
func (ck *checker) customers(ctx context.Context, w, d int, customers map[customerRef]*customerSums) error {
	prefix := procs.CustomerPrefix(w, d)
	return ck.scan(ctx, prefix, func(kv txn.KV) error {
		id, err := parseIDs(kv.Key, prefix, 1)
		if err != nil {
			return err
		}
		var c procs.Customer
		if err := procs.Decode(kv.Key, kv.Value, &c); err != nil {
			return err
		}
		ck.rep.Checked.Customers++
		ref := customerRef{d, id[0]}
		var s customerSums
		if p, ok := customers[ref]; ok {
			s = *p
			delete(customers, ref)
		}
		ck.customer(w, ref, &c, &s)
		return nil
	})
}

// customer checks conditions 10, 12 and g2 of customer ref of warehouse w,
// whose row is c and sums s.
func (ck *checker) customer(w int, ref customerRef, c *procs.Customer, s *customerSums) {
	paid := s.loaded + s.paid
	if want := s.delivered - paid; c.Balance != want {
		ck.fail("10", w, ref.d, "customer %d: C_BALANCE %d != sum(OL_AMOUNT) %d of its delivered lines - sum(H_AMOUNT) %d (%d loaded, %d in %d payment records)",
			ref.c, c.Balance, s.delivered, paid, s.loaded, s.paid, s.payments)
	}
	if c.Balance+c.YTDPayment != s.delivered {
		ck.fail("12", w, ref.d, "customer %d: C_BALANCE %d + C_YTD_PAYMENT %d != sum(OL_AMOUNT) %d of its delivered lines",
			ref.c, c.Balance, c.YTDPayment, s.delivered)
	}
	if want := procs.LoadCustomerYTDPayment + s.paid; c.YTDPayment != want {
		ck.fail("g2", w, ref.d, "customer %d: C_YTD_PAYMENT %d != %d loaded + %d in its %d payment records",
			ref.c, c.YTDPayment, int64(procs.LoadCustomerYTDPayment), s.paid, s.payments)
	}
	if want := 1 + s.payments; c.PaymentCnt != want {
		ck.fail("g2", w, ref.d, "customer %d: C_PAYMENT_CNT %d != 1 loaded + %d payment records", ref.c, c.PaymentCnt, s.payments)
	}
}

// unknownCustomers reports the sums left in customers once every district
// of warehouse w is checked: rows that name a customer w does not have.
func (ck *checker) unknownCustomers(w int, customers map[customerRef]*customerSums) {
	refs := slices.SortedFunc(maps.Keys(customers), func(a, b customerRef) int {
		return cmp.Or(cmp.Compare(a.d, b.d), cmp.Compare(a.c, b.c))
	})
	for _, ref := range refs {
		s := customers[ref]
		if s.payments > 0 {
			ck.fail("g2", w, 0, "%d payment records of customer %d of district %d, which does not exist", s.payments, ref.c, ref.d)
		}
		if s.deliveredLines > 0 || s.loadedRows > 0 {
			ck.fail("10", w, 0, "%d delivered order lines and %d loader history rows of customer %d of district %d, which does not exist",
				s.deliveredLines, s.loadedRows, ref.c, ref.d)
		}
	}
}

// stock checks g1 on warehouse w's stock rows against the new-order lines
// they supplied (gathered by orderLines from every checked warehouse).
func (ck *checker) stock(ctx context.Context, w int) error {
	prefix := procs.StockPrefix(w)
	err := ck.scan(ctx, prefix, func(kv txn.KV) error {
		id, err := parseIDs(kv.Key, prefix, 1)
		if err != nil {
			return err
		}
		var s procs.Stock
		if err := procs.Decode(kv.Key, kv.Value, &s); err != nil {
			return err
		}
		ck.rep.Checked.Stock++
		ref := stockRef{w, id[0]}
		sum := ck.supplied[ref]
		delete(ck.supplied, ref)
		loaded := procs.StockRow(w, ref.i)
		for _, col := range []struct {
			name               string
			got, loaded, lines int
		}{
			{"S_YTD", s.YTD, loaded.YTD, sum.ytd},
			{"S_ORDER_CNT", s.OrderCnt, loaded.OrderCnt, sum.orders},
			{"S_REMOTE_CNT", s.RemoteCnt, loaded.RemoteCnt, sum.remote},
		} {
			if col.got != col.loaded+col.lines {
				ck.fail("g1", w, 0, "item %d: %s %d != %d loaded + %d from the new-order lines it supplied",
					ref.i, col.name, col.got, col.loaded, col.lines)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	// The lines left supplied stock rows w does not have.
	var missing []int
	for ref := range ck.supplied { //flexkv:unordered collects keys, sorted below
		if ref.w == w {
			missing = append(missing, ref.i)
		}
	}
	slices.Sort(missing)
	for _, i := range missing {
		ck.fail("g1", w, 0, "item %d: %d new-order lines supplied by a stock row that does not exist", i, ck.supplied[stockRef{w, i}].orders)
	}
	return nil
}

// payments checks g2 across warehouses: every payment's history row has
// its customer-side record, alike, and every record its history row, where
// both their warehouses are checked.
func (ck *checker) payments() {
	for _, id := range slices.Sorted(maps.Keys(ck.homes)) {
		home := ck.homes[id]
		h := &home.h
		if !ck.checked[h.CW] {
			continue
		}
		rec, ok := ck.records[id]
		switch {
		case !ok:
			ck.fail("g2", home.w, h.D, "payment %s: history row of %d cents from warehouse %d district %d, and no customer-side record %s",
				id, h.Amount, h.CW, h.CD, procs.CustomerPaymentKey(h.CW, id))
		case rec.cw != h.CW:
			ck.fail("g2", home.w, h.D, "payment %s: history row names customer warehouse %d, its customer-side record is at warehouse %d",
				id, h.CW, rec.cw)
		default:
			if diff := paymentDiff(home, &rec.p); diff != "" {
				ck.fail("g2", home.w, h.D, "payment %s: history row and customer-side record at warehouse %d differ: %s", id, rec.cw, diff)
			}
		}
	}
	for _, id := range slices.Sorted(maps.Keys(ck.records)) {
		rec := ck.records[id]
		if _, ok := ck.homes[id]; !ok && ck.checked[rec.p.W] {
			ck.fail("g2", rec.cw, rec.p.CD, "payment %s: customer-side record of customer %d, %d cents to warehouse %d district %d, and no history row %s",
				id, rec.p.CID, rec.p.Amount, rec.p.W, rec.p.D, procs.HistoryKey(rec.p.W, id))
		}
	}
}

// paymentDiff returns the fields in which a payment's history row and its
// customer-side record p differ ("" when alike). The history row's
// customer id is compared only when it has one (CID 0: named by last name
// at a warehouse the home group does not own).
func paymentDiff(home paymentHome, p *procs.CustomerPayment) string {
	h := &home.h
	var diffs []string
	for _, f := range []struct {
		name         string
		history, rec int64
	}{
		{"amount_cents", h.Amount, p.Amount},
		{"date_ms", h.Date, p.Date},
		{"w (the history row's warehouse)", int64(home.w), int64(p.W)},
		{"d", int64(h.D), int64(p.D)},
		{"c_d", int64(h.CD), int64(p.CD)},
	} {
		if f.history != f.rec {
			diffs = append(diffs, fmt.Sprintf("%s %d != %d", f.name, f.history, f.rec))
		}
	}
	if h.CID != 0 && h.CID != p.CID {
		diffs = append(diffs, fmt.Sprintf("c_id %d != %d", h.CID, p.CID))
	}
	return strings.Join(diffs, ", ")
}

// parseIDs returns the n '/'-separated numbers of key after prefix: the
// order id of an order or new-order key, the order id and line number of
// an order line's, the id of a customer or an item.
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
