package procs

import (
	"fmt"

	"github.com/flexkv/flexkv/txn"
)

// The loader's replica side (DESIGN 9): TPC-C's initial population
// (clause 4.3.3.1) at a Scale. A warehouse's rows are written by a stored
// procedure, ProcLoad (loadProc), at the group that owns the warehouse: a
// call names a table and a range of row numbers, and every replica
// generates the rows from their keys alone (keyRand and the text functions
// of gen.go), so that the call stays small and every replica writes the
// same bytes. Items live in a replicated range, which a procedure may not
// write: the client side (gtpcc.Load) writes ItemRow with ordinary
// transactions, and ScaleKey last, once a warehouse is loaded whole.

// Tables of LoadArgs.Table.
const (
	TableWarehouse = "warehouse" // the warehouse row and its districts
	TableStock     = "stock"     // stock rows, by item id
	TableCustomer  = "customer"  // customers of every district, by customer id
	TableOrder     = "order"     // orders of every district, by order id
)

// Keys one call of the load procedure writes per row number, so that a
// chunk stays within txn.ProcWritesMax.
const (
	// loadWarehouseWrites: the warehouse row and its districts.
	loadWarehouseWrites = 1 + DistrictsPerWarehouse
	// loadCustomerWrites: per customer id, in each district, the row, its
	// data row, its name index entry and its history row.
	loadCustomerWrites = 4 * DistrictsPerWarehouse
	// loadOrderWrites: per order id, in each district, the order, at most
	// OrderLinesMax lines and a new-order row.
	loadOrderWrites = (1 + OrderLinesMax + 1) * DistrictsPerWarehouse
)

// The largest chunk (To-From+1) of one load call, per table.
const (
	LoadStockChunkMax    = txn.ProcWritesMax                      // 1024 stock rows
	LoadCustomerChunkMax = txn.ProcWritesMax / loadCustomerWrites // 25 customer ids (250 customers)
	LoadOrderChunkMax    = txn.ProcWritesMax / loadOrderWrites    // 6 order ids (60 orders)
)

// LoadChunkMax returns the largest chunk of table that one load call may
// write (the warehouse table is always one call: 1), or 0 for an unknown
// table.
func LoadChunkMax(table string) int {
	switch table {
	case TableWarehouse:
		return 1
	case TableStock:
		return LoadStockChunkMax
	case TableCustomer:
		return LoadCustomerChunkMax
	case TableOrder:
		return LoadOrderChunkMax
	}
	return 0
}

// Fixed values of the initial population (clause 4.3.3.1), in cents.
const (
	customerCreditLimit    = 5000000 // C_CREDIT_LIM 50,000.00
	customerBalance        = -1000   // C_BALANCE -10.00
	LoadCustomerYTDPayment = 1000    // C_YTD_PAYMENT 10.00
	historyAmount          = 1000    // H_AMOUNT 10.00
)

// LoadCLastConstant is the constant C of NURand(255, 0, 999) that picks the
// last names of customers beyond the 1000th at load (clause 2.1.6: C_LOAD).
// A workload choosing C_RUN for last names must keep the distance clause
// 2.1.6.1 asks for from this value.
const LoadCLastConstant = 157

// districtYTD returns D_YTD of a loaded district: the sum of its
// customers' initial history rows. TPC-C fixes 30,000.00 (3000 customers
// of 10.00); a scaled population has fewer customers, and this keeps
// consistency conditions 8 and 9 (D_YTD = sum(H_AMOUNT)) true at every
// scale.
func districtYTD(s Scale) int64 { return int64(s.CustomersPerDistrict) * historyAmount }

// warehouseYTD returns W_YTD of a loaded warehouse: the sum of its
// districts' (TPC-C: 300,000.00 at full scale), for condition 1.
func warehouseYTD(s Scale) int64 { return DistrictsPerWarehouse * districtYTD(s) }

// delivered reports whether initial order o of a district is delivered:
// all but the last NewOrdersPerDistrict (TPC-C: orders 1..2100 of 3000).
func delivered(s Scale, o int) bool { return o <= s.OrdersPerDistrict-s.NewOrdersPerDistrict }

// validateLoadArgs checks a's fields as every replica must: the warehouse,
// the scale, the table and a range of row numbers within the scale, small
// enough for one call.
func validateLoadArgs(a *LoadArgs) error {
	if a.W < 1 || a.W > WarehouseMax {
		return fmt.Errorf("gtpcc: load: warehouse %d, want 1..%d", a.W, WarehouseMax)
	}
	if err := a.Scale.Validate(); err != nil {
		return fmt.Errorf("gtpcc: load warehouse %d: %w", a.W, err)
	}
	if a.Date < 1 {
		return fmt.Errorf("gtpcc: load warehouse %d: date %d, want a positive Unix time in ms (delivered orders carry it)", a.W, a.Date)
	}
	var rows int
	switch a.Table {
	case TableWarehouse:
		return nil
	case TableStock:
		rows = a.Scale.Items
	case TableCustomer:
		rows = a.Scale.CustomersPerDistrict
	case TableOrder:
		rows = a.Scale.OrdersPerDistrict
	default:
		return fmt.Errorf("gtpcc: load warehouse %d: table %q, want %s, %s, %s or %s",
			a.W, a.Table, TableWarehouse, TableStock, TableCustomer, TableOrder)
	}
	switch chunk := LoadChunkMax(a.Table); {
	case a.From < 1 || a.To > rows || a.From > a.To:
		return fmt.Errorf("gtpcc: load warehouse %d %s: rows %d..%d, want within 1..%d", a.W, a.Table, a.From, a.To, rows)
	case a.To-a.From+1 > chunk:
		return fmt.Errorf("gtpcc: load warehouse %d %s: %d rows (%d..%d), more than a call may write (%d)",
			a.W, a.Table, a.To-a.From+1, a.From, a.To, chunk)
	}
	return nil
}

// loadProc is the procedure ProcLoad: it writes rows of one warehouse,
// described by LoadArgs. Its one key is the warehouse row's, so a call goes
// to the warehouse's group alone.
type loadProc struct{}

// parse decodes and validates the arguments of a call.
func (loadProc) parse(b []byte) (LoadArgs, error) {
	var a LoadArgs
	if err := DecodeArgs(ProcLoad, b, &a); err != nil {
		return LoadArgs{}, err
	}
	return a, validateLoadArgs(&a)
}

// Keys returns the warehouse row's key.
func (p loadProc) Keys(args []byte) ([][]byte, error) {
	a, err := p.parse(args)
	if err != nil {
		return nil, err
	}
	return [][]byte{WarehouseKey(a.W)}, nil
}

// Run writes the rows of the call.
func (p loadProc) Run(piece *txn.ProcPiece) (txn.PieceResult, error) {
	a, err := p.parse(piece.Args)
	if err != nil {
		return txn.PieceResult{}, err
	}
	if !piece.Owns(WarehouseKey(a.W)) {
		return txn.PieceResult{}, fmt.Errorf("gtpcc: load warehouse %d: group %d does not own it", a.W, piece.Group)
	}
	if err := writeLoadRows(&a, piece.Writer); err != nil {
		return txn.PieceResult{}, fmt.Errorf("gtpcc: load warehouse %d %s %d..%d: %w", a.W, a.Table, a.From, a.To, err)
	}
	return txn.PieceResult{Succeeded: true}, nil
}

// rowWriter is what the row generators write to: txn.Writer, or a test's
// recorder.
type rowWriter interface {
	Put(key, value []byte) error
}

// writeLoadRows writes the rows a (validated) describes to w.
func writeLoadRows(a *LoadArgs, w rowWriter) error {
	switch a.Table {
	case TableWarehouse:
		return writeWarehouse(a, w)
	case TableStock:
		for i := a.From; i <= a.To; i++ {
			if err := w.Put(StockKey(a.W, i), Encode(StockRow(a.W, i))); err != nil {
				return err
			}
		}
		return nil
	case TableCustomer:
		return writeCustomers(a, w)
	case TableOrder:
		return writeOrders(a, w)
	}
	// Unreachable after validateLoadArgs; an error, not a panic: this
	// runs in every replica's apply loop.
	return fmt.Errorf("unknown table %q", a.Table)
}

// address returns the address columns, drawn from r (clause 4.3.3.1:
// streets and city of 10..20 characters, a 2-character state, a zip of 4
// digits and "11111").
func address(r *keyRand) Address {
	return Address{
		Street1: astring(r, 10, 20),
		Street2: astring(r, 10, 20),
		City:    astring(r, 10, 20),
		State:   astring(r, 2, 2),
		Zip:     nstring(r, 4) + "11111",
	}
}

// dataOriginal returns 26..50 characters of data, 10% of them containing
// "ORIGINAL" at a random position (I_DATA, S_DATA).
func dataOriginal(r *keyRand) string {
	s := astring(r, 26, 50)
	if r.IntN(10) == 0 {
		pos := r.IntN(len(s) - len("ORIGINAL") + 1)
		s = s[:pos] + "ORIGINAL" + s[pos+len("ORIGINAL"):]
	}
	return s
}

// writeWarehouse writes the warehouse row and its districts.
func writeWarehouse(a *LoadArgs, w rowWriter) error {
	key := WarehouseKey(a.W)
	r := newKeyRand(string(key))
	wh := Warehouse{Name: astring(r, 6, 10), Address: address(r), Tax: int64(r.IntN(2001)), YTD: warehouseYTD(a.Scale)}
	if err := w.Put(key, Encode(wh)); err != nil {
		return err
	}
	for d := 1; d <= DistrictsPerWarehouse; d++ {
		key := DistrictKey(a.W, d)
		r := newKeyRand(string(key))
		row := District{
			Name: astring(r, 6, 10), Address: address(r), Tax: int64(r.IntN(2001)),
			YTD: districtYTD(a.Scale), NextOID: a.Scale.OrdersPerDistrict + 1,
		}
		if err := w.Put(key, Encode(row)); err != nil {
			return err
		}
	}
	return nil
}

// StockRow returns the initial stock row of item i at warehouse w.
func StockRow(w, i int) Stock {
	r := newKeyRand(string(StockKey(w, i)))
	return Stock{Quantity: 10 + r.IntN(91), Data: dataOriginal(r)}
}

// ItemRow returns item i's row, as the loader writes it in every run.
func ItemRow(i int) Item {
	r := newKeyRand(string(ItemKey(i)))
	return Item{Image: 1 + r.IntN(10000), Name: astring(r, 14, 24), Price: int64(100 + r.IntN(9901)), Data: dataOriginal(r)}
}

// customerOrders returns, for district d of warehouse w, the customer of
// each initial order: perm[o-1] is order o's customer, for the first k
// orders. TPC-C draws O_C_ID from a random permutation of the customer
// ids; this one is a Fisher-Yates shuffle seeded by the district key. Each
// step fixes one more position, so a prefix is the same however many
// steps run: the order and customer loaders agree.
func customerOrders(w, d int, s Scale, k int) []int {
	n := s.CustomersPerDistrict
	perm := make([]int, n)
	for i := range perm {
		perm[i] = i + 1
	}
	r := newKeyRand(string(DistrictKey(w, d)) + "/o_c_id")
	for i := 0; i < k && i < n-1; i++ {
		j := i + r.IntN(n-i)
		perm[i], perm[j] = perm[j], perm[i]
	}
	return perm[:min(k, n)]
}

// customerLastOrders returns the initial order of each customer of
// district d (index c-1; 0: none).
func customerLastOrders(w, d int, s Scale) []int {
	last := make([]int, s.CustomersPerDistrict)
	for i, c := range customerOrders(w, d, s, s.OrdersPerDistrict) {
		last[c-1] = i + 1
	}
	return last
}

// customerRow returns customer c of district d's row and its C_DATA; the
// caller sets LastOrder.
func customerRow(a *LoadArgs, d, c int) (Customer, CustomerData) {
	r := newKeyRand(string(CustomerKey(a.W, d, c)))
	row := Customer{First: astring(r, 8, 16), Middle: "OE"}
	// Clause 4.3.3.1: the first 1000 customers get each last name once,
	// the others one drawn with NURand.
	if c <= 1000 {
		row.Last = LastName(c - 1)
	} else {
		row.Last = LastName(NURand(r, 255, 0, 999, LoadCLastConstant))
	}
	row.Address = address(r)
	row.Phone = nstring(r, 16)
	row.Since = a.Date
	row.Credit = "GC"
	if r.IntN(10) == 0 {
		row.Credit = "BC"
	}
	row.CreditLimit = customerCreditLimit
	row.Discount = int64(r.IntN(5001))
	row.Balance = customerBalance
	row.YTDPayment = LoadCustomerYTDPayment
	row.PaymentCnt = 1
	return row, CustomerData{Data: astring(r, 300, 500)}
}

// LoadHistoryIDPrefix starts the ids of the loader's history rows, which
// no transaction id ("c...") starts with.
const LoadHistoryIDPrefix = "load-"

// LoadHistoryID returns the history id of customer c of district d's
// initial payment: "load-DD-CCCC".
func LoadHistoryID(d, c int) string { return fmt.Sprintf(LoadHistoryIDPrefix+"%02d-%04d", d, c) }

// writeCustomers writes customers From..To of every district, with their
// name index entries and initial history rows.
func writeCustomers(a *LoadArgs, w rowWriter) error {
	for d := 1; d <= DistrictsPerWarehouse; d++ {
		last := customerLastOrders(a.W, d, a.Scale)
		for c := a.From; c <= a.To; c++ {
			row, data := customerRow(a, d, c)
			row.LastOrder = last[c-1]
			if err := w.Put(CustomerKey(a.W, d, c), Encode(row)); err != nil {
				return err
			}
			if err := w.Put(CustomerDataKey(a.W, d, c), Encode(data)); err != nil {
				return err
			}
			if err := w.Put(CustomerNameKey(a.W, d, row.Last, row.First, c), []byte{}); err != nil {
				return err
			}
			id := LoadHistoryID(d, c)
			hr := newKeyRand(string(HistoryKey(a.W, id)))
			h := History{CID: c, CD: d, CW: a.W, D: d, W: a.W, Date: a.Date, Amount: historyAmount, Data: astring(hr, 12, 24)}
			if err := w.Put(HistoryKey(a.W, id), Encode(h)); err != nil {
				return err
			}
		}
	}
	return nil
}

// writeOrders writes orders From..To of every district with their lines
// and, for the undelivered, their new-order rows.
func writeOrders(a *LoadArgs, w rowWriter) error {
	for d := 1; d <= DistrictsPerWarehouse; d++ {
		cust := customerOrders(a.W, d, a.Scale, a.To)
		for o := a.From; o <= a.To; o++ {
			if err := writeOrder(a, w, d, o, cust[o-1]); err != nil {
				return err
			}
		}
	}
	return nil
}

// writeOrder writes order o of district d, of customer c.
func writeOrder(a *LoadArgs, w rowWriter, d, o, c int) error {
	key := OrderKey(a.W, d, o)
	r := newKeyRand(string(key))
	done := delivered(a.Scale, o)
	row := Order{CID: c, EntryD: a.Date, AllLocal: true}
	if done {
		row.Carrier = 1 + r.IntN(10)
	}
	row.OLCnt = OrderLinesMin + r.IntN(OrderLinesMax-OrderLinesMin+1)
	if err := w.Put(key, Encode(row)); err != nil {
		return err
	}
	for n := 1; n <= row.OLCnt; n++ {
		line := OrderLine{Item: 1 + r.IntN(a.Scale.Items), SupplyW: a.W, Quantity: 5}
		if done {
			line.DeliveryD = a.Date
		} else {
			line.Amount = int64(1 + r.IntN(999999))
		}
		line.DistInfo = StockDist(a.W, line.Item, d)
		if err := w.Put(OrderLineKey(a.W, d, o, n), Encode(line)); err != nil {
			return err
		}
	}
	if done {
		return nil
	}
	return w.Put(NewOrderKey(a.W, d, o), []byte{})
}
