package procs

import (
	"bytes"
	"fmt"
)

// The checks of the procedures' arguments and the keys that route a call.
// A procedure checks its arguments twice, in Keys (so that a bad call is
// refused before it is multicast) and in Run (so that a replica never
// trusts what it was sent): both call the same parse functions below.

// Bounds of argument values. Beyond TPC-C's own ranges, each keeps the
// numbers in the fixed-width fields of the keys (schema.go) and the money
// arithmetic of the procedures far from int64 overflow.
const (
	customerIDMax = 9999     // CustomerKey's four digits
	itemIDMax     = 999999   // ItemKey's and StockKey's six digits
	orderIDMax    = 99999999 // OrderKey's eight digits
	// LineQuantityMax is the most units of one order line (clause 2.4.1.5).
	LineQuantityMax = 10
	// DeliveryCarrierMax is the largest carrier id (clause 2.7.1.2).
	DeliveryCarrierMax = 10
	// lastNameMax is the length of C_LAST (clause 1.3.1).
	lastNameMax = 16
	// paymentAmountMax bounds a payment, in cents ($10^9; TPC-C's are at
	// most $5,000): a balance moves by at most this much per call, so
	// int64 balances do not overflow in any run.
	paymentAmountMax = 100_000_000_000
	// rateMax is the largest tax or discount, in basis points (100%).
	rateMax = 10000
	// itemPriceMax bounds an item's price in cents ($10^6; TPC-C's are at
	// most $100), so that a new-order's total cannot overflow: 15 lines *
	// 10 units * itemPriceMax * (rateMax) * (rateMax + 2*rateMax) < 2^63.
	itemPriceMax = 100_000_000
	// lineAmountMax is the largest amount of one order line.
	lineAmountMax = LineQuantityMax * itemPriceMax
)

// ProcedureKeys returns the keys that route a call to the gTPC-C procedure
// name with args, the keys a client passes to client.Call: the procedure's
// Keys. For ProcLoad they are the loaded warehouse's WarehouseKey. Bad
// arguments (loadProc checks all of a load call's, as its Run does), or a
// name that is not a gTPC-C procedure, are an error.
func ProcedureKeys(name string, args []byte) ([][]byte, error) {
	for _, p := range procedures {
		if p.name == name {
			return p.proc.Keys(args)
		}
	}
	return nil, fmt.Errorf("gtpcc: unknown procedure %q", name)
}

// appendKey appends key to keys unless it is there already.
func appendKey(keys [][]byte, key []byte) [][]byte {
	for _, k := range keys {
		if bytes.Equal(k, key) {
			return keys
		}
	}
	return append(keys, key)
}

func checkRange(proc, field string, v, lo, hi int) error {
	if v < lo || v > hi {
		return fmt.Errorf("gtpcc: %s: %s %d, want %d..%d", proc, field, v, lo, hi)
	}
	return nil
}

func checkWarehouse(proc, field string, w int) error {
	return checkRange(proc, field, w, 1, WarehouseMax)
}

func checkDistrict(proc, field string, d int) error {
	return checkRange(proc, field, d, 1, DistrictsPerWarehouse)
}

// checkCustomerRef checks a customer named by id (cid > 0, last empty) or
// by last name (cid == 0, last set): one of the two, not both.
func checkCustomerRef(proc string, cid int, last string) error {
	switch {
	case cid != 0 && last != "":
		return fmt.Errorf("gtpcc: %s: customer named by both id %d and last name %q, want one", proc, cid, last)
	case cid == 0 && last == "":
		return fmt.Errorf("gtpcc: %s: customer named by neither id nor last name, want one", proc)
	case cid != 0:
		return checkRange(proc, "c_id", cid, 1, customerIDMax)
	}
	return checkLastName(proc, last)
}

// checkLastName checks a last name to look up: 1..lastNameMax printable
// ASCII bytes without '/', which would make CustomerNamePrefix the prefix
// of other names' entries.
func checkLastName(proc, last string) error {
	if len(last) > lastNameMax {
		return fmt.Errorf("gtpcc: %s: last name of %d bytes, want 1..%d", proc, len(last), lastNameMax)
	}
	for i := 0; i < len(last); i++ {
		if b := last[i]; b <= ' ' || b > '~' || b == '/' {
			return fmt.Errorf("gtpcc: %s: last name %q: byte %q is not printable ASCII other than '/'", proc, last, b)
		}
	}
	return nil
}

// checkDate checks a date argument: a Unix time in ms, at least 1,
// because 0 is the null of the date columns (OrderLine.DeliveryD 0 is "not
// delivered": a delivery dated 0 would set the carrier and leave its lines
// undelivered, breaking condition 7).
func checkDate(proc, field string, ms int64) error {
	if ms < 1 {
		return fmt.Errorf("gtpcc: %s: %s %d, want a Unix time in ms of at least 1 (0 is the null date)", proc, field, ms)
	}
	return nil
}

// decodeHome decodes the arguments of proc from b into a (a pointer) and
// checks its home warehouse *w and, unless d is nil, its district *d,
// fields of *a read after the decoding: the opening every parse function
// shares.
func decodeHome(proc string, b []byte, a any, w, d *int) error {
	if err := DecodeArgs(proc, b, a); err != nil {
		return err
	}
	if err := checkWarehouse(proc, "w", *w); err != nil {
		return err
	}
	if d == nil {
		return nil
	}
	return checkDistrict(proc, "d", *d)
}

// parseNewOrder decodes and checks new-order arguments.
func parseNewOrder(b []byte) (NewOrderArgs, error) {
	const proc = ProcNewOrder
	var a NewOrderArgs
	if err := decodeHome(proc, b, &a, &a.W, &a.D); err != nil {
		return a, err
	}
	if err := checkRange(proc, "c", a.C, 1, customerIDMax); err != nil {
		return a, err
	}
	if err := checkDate(proc, "entry_d_ms", a.EntryD); err != nil {
		return a, err
	}
	// TPC-C orders 5..15 lines; fewer are accepted for tests and small runs.
	if n := len(a.Lines); n < 1 || n > OrderLinesMax {
		return a, fmt.Errorf("gtpcc: %s: %d order lines, want 1..%d", proc, n, OrderLinesMax)
	}
	for i, l := range a.Lines {
		// The field's name only for an error: it costs an allocation.
		field := func(name string) string { return fmt.Sprintf("lines[%d].%s", i, name) }
		switch {
		case l.Item < 1 || l.Item > itemIDMax:
			return a, checkRange(proc, field("i"), l.Item, 1, itemIDMax)
		case l.SupplyW < 1 || l.SupplyW > WarehouseMax:
			return a, checkWarehouse(proc, field("supply_w"), l.SupplyW)
		case l.Quantity < 1 || l.Quantity > LineQuantityMax:
			return a, checkRange(proc, field("qty"), l.Quantity, 1, LineQuantityMax)
		}
	}
	return a, nil
}

// parsePayment decodes and checks payment arguments.
func parsePayment(b []byte) (PaymentArgs, error) {
	const proc = ProcPayment
	var a PaymentArgs
	if err := decodeHome(proc, b, &a, &a.W, &a.D); err != nil {
		return a, err
	}
	if err := checkWarehouse(proc, "c_w", a.CW); err != nil {
		return a, err
	}
	if err := checkDistrict(proc, "c_d", a.CD); err != nil {
		return a, err
	}
	if err := checkCustomerRef(proc, a.CID, a.CLast); err != nil {
		return a, err
	}
	if a.Amount < 1 || a.Amount > paymentAmountMax {
		return a, fmt.Errorf("gtpcc: %s: amount_cents %d, want 1..%d", proc, a.Amount, int64(paymentAmountMax))
	}
	return a, checkDate(proc, "date_ms", a.Date)
}

// parseOrderStatus decodes and checks order-status arguments.
func parseOrderStatus(b []byte) (OrderStatusArgs, error) {
	const proc = ProcOrderStatus
	var a OrderStatusArgs
	if err := decodeHome(proc, b, &a, &a.W, &a.D); err != nil {
		return a, err
	}
	return a, checkCustomerRef(proc, a.CID, a.CLast)
}

// parseDelivery decodes and checks delivery arguments.
func parseDelivery(b []byte) (DeliveryArgs, error) {
	const proc = ProcDelivery
	var a DeliveryArgs
	if err := decodeHome(proc, b, &a, &a.W, nil); err != nil {
		return a, err
	}
	if err := checkRange(proc, "carrier", a.Carrier, 1, DeliveryCarrierMax); err != nil {
		return a, err
	}
	return a, checkDate(proc, "date_ms", a.Date)
}

// parseStockLevel decodes and checks stock-level arguments. TPC-C's
// threshold is 10..20; any positive one is accepted.
func parseStockLevel(b []byte) (StockLevelArgs, error) {
	const proc = ProcStockLevel
	var a StockLevelArgs
	if err := decodeHome(proc, b, &a, &a.W, &a.D); err != nil {
		return a, err
	}
	if a.Threshold < 1 {
		return a, fmt.Errorf("gtpcc: %s: threshold %d, want at least 1", proc, a.Threshold)
	}
	return a, nil
}

// orderLinePrefix is the prefix of the order-line keys of order o of
// district d: OrderLineKey(w, d, o, n) without the line number.
func orderLinePrefix(w, d, o int) []byte {
	return append(orderKey(warehouseTable(23, w, "ol/"), d, o), '/')
}
