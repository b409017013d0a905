// Package procs is the replica side of geo TPC-C (DESIGN 9): the stored
// procedures every server registers (new-order, payment, order-status,
// delivery, stock-level and the loader's), the schema on keys and the row
// codecs they share with the client side (package gtpcc), and the
// generation of the initial rows from their keys.
//
// Every replica of a group runs a procedure on the same rows in the same
// order and must write the same bytes, so this package is deterministic
// like the protocol cores: no clock, no randomness but the seeded
// generator of its keys (gen.go), no goroutine, no I/O, no map order.
// internal/lint holds it to those rules; it imports only the standard
// library, partition and txn.
//
// # Schema
//
// Every row of a warehouse lives under the warehouse's partition prefix
// "w/NNNN/" (WarehousePrefix), so that a warehouse is one partition of the
// cluster configuration; items live under "item/", a range the
// configuration replicates at every group. Numbers in keys are fixed-width
// decimal so that keys sort as the numbers do:
//
//	w/0001/wh                      warehouse
//	w/0001/d/01                    district 1 of warehouse 1
//	w/0001/c/01/0042               customer 42 of district 1
//	w/0001/cd/01/0042              customer 42's C_DATA (CustomerData)
//	w/0001/cl/01/LAST/FIRST/0042   customer name index (value empty): by last name, then first
//	w/0001/h/ID                    history row of payment ID (the transaction id)
//	w/0001/cp/ID                   customer-side record of payment ID, at the customer's warehouse
//	w/0001/o/01/00000007           order 7 of district 1
//	w/0001/no/01/00000007          new-order row of order 7 (value empty)
//	w/0001/dq/01                   delivery cursor of district 1: no new-order row below its order id
//	w/0001/ol/01/00000007/03       order line 3 of order 7
//	w/0001/s/000123                stock of item 123 in warehouse 1
//	item/000123                    item 123 (replicated)
//	item/scale/0001                the scale warehouse 1 was loaded at (replicated)
//
// A payment writes its history row at the home warehouse and its
// customer-side record (CustomerPayment) at the customer's, each group the
// row of its own warehouse, so that a check can match the two pieces of
// every payment across groups (Check's condition g2).
//
// Rows are stored in a versioned binary format (codec.go: Encode, Decode),
// which the procedures read and write far faster than JSON; RowJSON shows
// one as JSON, as `flexkv kv get` does. A population stored in an older
// format must be reloaded: its rows are refused with an error that says
// so. Money is in cents and rates (tax, discount) in basis points,
// all int64: the executors of every replica must compute the same values,
// and integer arithmetic, unlike floating point (fused multiply-add differs
// between architectures), is exact everywhere.
//
// The columns TPC-C fills with random text (addresses, stock district
// strings, item data) come from deterministic functions of the row's key
// (text, StockDist), so that a new-order's home group can compute a remote
// stock row's district string without reading it.
package procs

import (
	"bytes"
	"fmt"
	"strconv"
)

// Fixed sizes of TPC-C (clause 1.2 and 4.3).
const (
	DistrictsPerWarehouse = 10
	// WarehouseMax is the largest warehouse number keys can hold.
	WarehouseMax = 9999
	// OrderLinesMin and OrderLinesMax bound the lines of a new-order.
	OrderLinesMin = 5
	OrderLinesMax = 15
)

// Scale sizes a population. TPC-C's is Full; smaller ones make runs that
// load in seconds, keeping every rule that does not depend on the counts.
type Scale struct {
	Items                int `json:"items"`                  // items (and stock rows per warehouse)
	CustomersPerDistrict int `json:"customers_per_district"` // customers per district
	OrdersPerDistrict    int `json:"orders_per_district"`    // initial orders per district (one per customer, OrdersPerDistrict <= CustomersPerDistrict)
	// NewOrdersPerDistrict is how many of the last initial orders are
	// undelivered (have a new-order row).
	NewOrdersPerDistrict int `json:"new_orders_per_district"`
}

// Full is TPC-C's population (clause 4.3.3.1).
var Full = Scale{Items: 100000, CustomersPerDistrict: 3000, OrdersPerDistrict: 3000, NewOrdersPerDistrict: 900}

// Small is a population that loads in seconds on a laptop: the demo's.
var Small = Scale{Items: 1000, CustomersPerDistrict: 100, OrdersPerDistrict: 100, NewOrdersPerDistrict: 30}

// Validate reports whether s is a population the workload can run on.
func (s Scale) Validate() error {
	switch {
	case s.Items < 1 || s.Items > 999999:
		return fmt.Errorf("gtpcc: scale: %d items, want 1..999999", s.Items)
	case s.CustomersPerDistrict < 1 || s.CustomersPerDistrict > 9999:
		return fmt.Errorf("gtpcc: scale: %d customers per district, want 1..9999", s.CustomersPerDistrict)
	case s.OrdersPerDistrict < 0 || s.OrdersPerDistrict > s.CustomersPerDistrict:
		return fmt.Errorf("gtpcc: scale: %d orders per district, want 0..customers per district (%d)", s.OrdersPerDistrict, s.CustomersPerDistrict)
	case s.NewOrdersPerDistrict < 0 || s.NewOrdersPerDistrict > s.OrdersPerDistrict:
		return fmt.Errorf("gtpcc: scale: %d new orders per district, want 0..orders per district (%d)", s.NewOrdersPerDistrict, s.OrdersPerDistrict)
	}
	return nil
}

// WarehousePrefix returns "w/NNNN/", the key prefix (and partition start)
// of warehouse w.
func WarehousePrefix(w int) []byte { return warehousePrefix(make([]byte, 0, 7), w) }

// warehousePrefix appends WarehousePrefix(w) to b. The key functions
// write their numbers as fmt.Appendf's %0Nd does (keyNumber), without its
// cost: a procedure builds dozens of keys per call.
func warehousePrefix(b []byte, w int) []byte {
	b = append(b, "w/"...)
	return append(keyNumber(b, w, 4), '/')
}

// keyNumber appends n as fmt's %0*d does with width: zero-padded to
// width digits, more if it has more.
func keyNumber(b []byte, n, width int) []byte {
	if n < 0 {
		return fmt.Appendf(b, "%0*d", width, n)
	}
	var buf [20]byte
	d := strconv.AppendInt(buf[:0], int64(n), 10)
	for i := len(d); i < width; i++ {
		b = append(b, '0')
	}
	return append(b, d...)
}

// WarehouseEnd returns the end of warehouse w's key range: the next
// warehouse's prefix.
func WarehouseEnd(w int) []byte { return WarehousePrefix(w + 1) }

// ParseWarehouse returns the warehouse of a key under some WarehousePrefix.
func ParseWarehouse(key []byte) (int, bool) {
	if len(key) < 7 || !bytes.HasPrefix(key, []byte("w/")) || key[6] != '/' {
		return 0, false
	}
	w, err := strconv.Atoi(string(key[2:6]))
	if err != nil || w < 1 {
		return 0, false
	}
	return w, true
}

// WarehouseKey is the key of warehouse w's row.
func WarehouseKey(w int) []byte { return append(warehousePrefix(make([]byte, 0, 9), w), "wh"...) }

// DistrictKey is the key of district d of warehouse w.
func DistrictKey(w, d int) []byte { return keyNumber(warehouseTable(12, w, "d/"), d, 2) }

// warehouseTable returns a buffer of capacity size holding warehouse w's
// prefix and then table.
func warehouseTable(size, w int, table string) []byte {
	return append(warehousePrefix(make([]byte, 0, size), w), table...)
}

// CustomerKey is the key of customer c of district d of warehouse w.
func CustomerKey(w, d, c int) []byte {
	b := keyNumber(warehouseTable(17, w, "c/"), d, 2)
	return keyNumber(append(b, '/'), c, 4)
}

// CustomerDataKey is the key of the C_DATA row of customer c of district d
// of warehouse w.
func CustomerDataKey(w, d, c int) []byte {
	b := keyNumber(warehouseTable(18, w, "cd/"), d, 2)
	return keyNumber(append(b, '/'), c, 4)
}

// HistoryKey is the key of the history row of payment id at warehouse w.
func HistoryKey(w int, id string) []byte { return append(warehouseTable(9+len(id), w, "h/"), id...) }

// CustomerPaymentKey is the key of the customer-side record of payment id
// (the transaction id) at the customer's warehouse cw.
func CustomerPaymentKey(cw int, id string) []byte {
	return append(warehouseTable(10+len(id), cw, "cp/"), id...)
}

// OrderKey is the key of order o of district d of warehouse w.
func OrderKey(w, d, o int) []byte { return orderKey(warehouseTable(21, w, "o/"), d, o) }

// orderKey appends "DD/OOOOOOOO" to b.
func orderKey(b []byte, d, o int) []byte {
	b = keyNumber(b, d, 2)
	return keyNumber(append(b, '/'), o, 8)
}

// DeliveryCursorKey is the key of district d's delivery cursor.
func DeliveryCursorKey(w, d int) []byte { return keyNumber(warehouseTable(13, w, "dq/"), d, 2) }

// NewOrderKey is the key of the new-order row of order o.
func NewOrderKey(w, d, o int) []byte { return orderKey(warehouseTable(22, w, "no/"), d, o) }

// OrderLineKey is the key of line n of order o.
func OrderLineKey(w, d, o, n int) []byte {
	b := orderKey(warehouseTable(25, w, "ol/"), d, o)
	return keyNumber(append(b, '/'), n, 2)
}

// StockKey is the key of the stock of item i at warehouse w.
func StockKey(w, i int) []byte { return keyNumber(warehouseTable(15, w, "s/"), i, 6) }

// ItemKey is the key of item i, in the replicated item range.
func ItemKey(i int) []byte { return keyNumber(append(make([]byte, 0, 11), "item/"...), i, 6) }

// CustomerNameKey is the index entry of customer c of district d, found by
// its last and first names.
func CustomerNameKey(w, d int, last, first string, c int) []byte {
	return fmt.Appendf(nil, "w/%04d/cl/%02d/%s/%s/%04d", w, d, last, first, c)
}

// CustomerNamePrefix is the prefix of the index entries of district d's
// customers named last; CustomerNameKey entries under it sort by first
// name.
func CustomerNamePrefix(w, d int, last string) []byte {
	return fmt.Appendf(nil, "w/%04d/cl/%02d/%s/", w, d, last)
}

// OrderPrefix is the prefix of district d's order keys.
func OrderPrefix(w, d int) []byte { return fmt.Appendf(nil, "w/%04d/o/%02d/", w, d) }

// NewOrderPrefix is the prefix of district d's new-order keys.
func NewOrderPrefix(w, d int) []byte { return fmt.Appendf(nil, "w/%04d/no/%02d/", w, d) }

// OrderLinePrefix is the prefix of district d's order-line keys.
func OrderLinePrefix(w, d int) []byte { return fmt.Appendf(nil, "w/%04d/ol/%02d/", w, d) }

// CustomerPrefix is the prefix of district d's customer keys.
func CustomerPrefix(w, d int) []byte { return fmt.Appendf(nil, "w/%04d/c/%02d/", w, d) }

// CustomerPaymentPrefix is the prefix of warehouse cw's customer-side
// payment records.
func CustomerPaymentPrefix(cw int) []byte { return fmt.Appendf(nil, "w/%04d/cp/", cw) }

// StockPrefix is the prefix of warehouse w's stock keys.
func StockPrefix(w int) []byte { return fmt.Appendf(nil, "w/%04d/s/", w) }

// HistoryPrefix is the prefix of warehouse w's history keys.
func HistoryPrefix(w int) []byte { return fmt.Appendf(nil, "w/%04d/h/", w) }

// ScaleKey is the key of warehouse w's population scale, which the loader
// (gtpcc.Load) writes once the warehouse is loaded whole: a warehouse
// without it was never loaded, or its load did not finish. It lives in the
// replicated range with the items, not under the warehouse's prefix, so
// that every group holds it: every piece of a call reads the same scale of
// every warehouse the call names, and knows alike which of their rows
// exist (see procs.go).
func ScaleKey(w int) []byte { return fmt.Appendf(nil, "item/scale/%04d", w) }

// PrefixEnd returns the first key after every key that starts with prefix
// (prefix with its last byte incremented; the prefixes here end in '/').
func PrefixEnd(prefix []byte) []byte {
	end := bytes.Clone(prefix)
	end[len(end)-1]++
	return end
}

// ParseLastNumber returns the number after the last '/' of key (the order
// id of an order or new-order key, the line number of an order line).
func ParseLastNumber(key []byte) (int, bool) {
	i := bytes.LastIndexByte(key, '/')
	if i < 0 {
		return 0, false
	}
	n, err := strconv.Atoi(string(key[i+1:]))
	return n, err == nil
}

// Warehouse is a warehouse row.
type Warehouse struct {
	Name    string  `json:"name"`
	Address Address `json:"address"`
	Tax     int64   `json:"tax_bp"`    // basis points
	YTD     int64   `json:"ytd_cents"` // year to date payments
}

// Address is the street address columns of a row.
type Address struct {
	Street1 string `json:"street_1"`
	Street2 string `json:"street_2"`
	City    string `json:"city"`
	State   string `json:"state"`
	Zip     string `json:"zip"`
}

// District is a district row.
type District struct {
	Name    string  `json:"name"`
	Address Address `json:"address"`
	Tax     int64   `json:"tax_bp"`
	YTD     int64   `json:"ytd_cents"`
	NextOID int     `json:"next_o_id"` // the id the next order gets
}

// Customer is a customer row.
type Customer struct {
	First       string  `json:"first"`
	Middle      string  `json:"middle"`
	Last        string  `json:"last"`
	Address     Address `json:"address"`
	Phone       string  `json:"phone"`
	Since       int64   `json:"since_ms"`
	Credit      string  `json:"credit"` // "GC" or "BC"
	CreditLimit int64   `json:"credit_lim_cents"`
	Discount    int64   `json:"discount_bp"`
	Balance     int64   `json:"balance_cents"`
	YTDPayment  int64   `json:"ytd_payment_cents"`
	PaymentCnt  int     `json:"payment_cnt"`
	DeliveryCnt int     `json:"delivery_cnt"`
	// LastOrder is the id of the customer's latest order in its district
	// (0: none), for order-status.
	LastOrder int `json:"last_o_id"`
}

// CustomerData is a customer's C_DATA (300 to 500 characters), in a row of
// its own at CustomerDataKey: only a payment of a bad-credit customer reads
// or changes it, while new-order (LastOrder), payment and delivery write
// the customer's row, which without it is about a third of the size.
type CustomerData struct {
	Data string `json:"data"`
}

// DeliveryCursor is where a district's next delivery starts looking for
// its oldest new-order row: past every order delivered so far (a
// district's new-order rows are inserted in order id order and delivered
// oldest first). Without it, a delivery's seek steps over the deleted rows
// of every earlier delivery that compactions have not dropped yet. A
// district without one starts at its first new-order row.
type DeliveryCursor struct {
	NextOID int `json:"next_o_id"`
}

// History is a history row, written by payment at the warehouse paid to
// (the home warehouse). CID is 0 when the payment named the customer by
// last name at another warehouse: the home group does not read the
// customer's warehouse, so it records the name (CLast) instead.
type History struct {
	CID    int    `json:"c_id"`
	CLast  string `json:"c_last,omitempty"`
	CD     int    `json:"c_d_id"`
	CW     int    `json:"c_w_id"`
	D      int    `json:"d_id"`
	W      int    `json:"w_id"`
	Date   int64  `json:"date_ms"`
	Amount int64  `json:"amount_cents"`
	Data   string `json:"data"`
}

// Order is an order row.
type Order struct {
	CID      int   `json:"c_id"`
	EntryD   int64 `json:"entry_d_ms"`
	Carrier  int   `json:"carrier_id"` // 0: not delivered
	OLCnt    int   `json:"ol_cnt"`
	AllLocal bool  `json:"all_local"`
}

// OrderLine is an order-line row.
type OrderLine struct {
	Item      int    `json:"i_id"`
	SupplyW   int    `json:"supply_w_id"`
	DeliveryD int64  `json:"delivery_d_ms"` // 0: not delivered
	Quantity  int    `json:"quantity"`
	Amount    int64  `json:"amount_cents"`
	DistInfo  string `json:"dist_info"`
}

// Stock is a stock row. Its district strings are StockDist(w, i, d).
type Stock struct {
	Quantity  int    `json:"quantity"`
	YTD       int    `json:"ytd"`
	OrderCnt  int    `json:"order_cnt"`
	RemoteCnt int    `json:"remote_cnt"`
	Data      string `json:"data"`
}

// Item is an item row.
type Item struct {
	Image int    `json:"im_id"`
	Name  string `json:"name"`
	Price int64  `json:"price_cents"`
	Data  string `json:"data"`
}
