package procs

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/flexkv/flexkv/txn"
)

// The gTPC-C stored procedures (TPC-C clauses 2.4-2.8) as txn.Procedures.
//
// A call goes to the owners of its Keys; every destination runs Run for
// the rows its group owns (ProcPiece.Owns) and may own several of the
// warehouses involved. Each group reports its outputs as txn.OpResults of
// kind OpGet whose Key names the row the output is about and whose Value is
// the output (one of the *Output types below) in the binary format of rows
// (outputs.go; procs.RowJSON shows it as JSON), at an Index that no
// other group uses, so that the client's merge (txn.MergeResults) keeps
// every group's outputs:
//
//	new-order     index 0: NewOrderOutput (home group)
//	              index n: NewOrderLineOutput of line n, 1..15 (the line's supply group)
//	payment       index 0: an OpPut of the history row (home group)
//	              index 1: PaymentOutput (the customer's group)
//	order-status  index 0: OrderStatusOutput
//	delivery      index 0: DeliveryOutput
//	stock-level   index 0: StockLevelOutput
//
// DecodeNewOrder, DecodePayment, DecodeOrderStatus, DecodeDelivery and
// DecodeStockLevel read them back from the merged txn.Result.
//
// # All or nothing, without votes
//
// New-order and payment, the procedures whose calls go to several groups,
// are all or nothing (txn.AllOrNothing): a call commits at every
// destination or at none. Their pieces take no votes (CanAbort is false
// for every piece, txn.PieceVotes), because every reason for one to abort
// is decided by every piece alike, from the arguments and the replicated
// keys, which every destination reads at the same point of the delivery
// order:
//
//   - new-order's 1% roll back (an item id not in the item table) is read
//     in the replicated item table: every piece rolls back (TPC-C clause
//     2.4.2.3), before any write;
//   - a row that should exist and does not: every row new-order and
//     payment read is one the loader writes, which no procedure deletes,
//     so it exists exactly when its warehouse was loaded (ScaleKey, in the
//     replicated range, written once the warehouse is loaded whole) and
//     its id is within the warehouse's scale: the customer ids, last names
//     (a last name is LastName(n) for an n below the district's customers,
//     at most 1000: customerNameLoaded) and stock items the call names.
//     Every piece checks all of them for every warehouse of the call
//     (checkLoaded) before its own rows and aborts with the same reason,
//     naming the warehouse, if one fails;
//   - the piece's keys are those of the warehouses its group owns and the
//     replicated ones, and it writes at most 34 keys, far below
//     txn.ProcWritesMax, so neither ownership nor the write bound can
//     abort it;
//   - payment never aborts by the spec, and the arithmetic cannot overflow
//     (the argument bounds of keys.go).
//
// A vote would cost a trip between regions before any destination
// answers, with the calls behind it on the same rows waiting too. What is
// left to abort one piece alone is a population changed outside the
// procedures, a row a client deleted or overwrote with plain writes (one
// that does not decode, or holds a number out of range), which the
// workload never writes; and a name index with txn.ScanLimitMax (1,024)
// entries for one name, which the loader's names make vanishingly unlikely
// (a district of 9,999 customers has some 232 of its most frequent name:
// 1 + 8,999 x 2.6%, NURand's largest odds). Then only the piece of the
// group that reads the row aborts, with an error naming its key.

// Indices of the outputs in a procedure's result (see above).
const (
	// IndexHome is the Index of the home group's output.
	IndexHome = 0
	// IndexCustomer is the Index of payment's output at the customer's
	// group.
	IndexCustomer = 1
)

// ErrRolledBack is matched by DecodeNewOrder's error for a new-order that
// rolled back (an unknown item, TPC-C's 1%): it ran, wrote nothing, and
// has no output.
var ErrRolledBack = errors.New("gtpcc: new-order rolled back: unknown item")

// NewOrderOutput is new-order's output at the home group (clause 2.4.3.3).
type NewOrderOutput struct {
	OID int `json:"o_id"`
	// TotalCents is sum(line amounts) * (1 - discount) * (1 + w_tax +
	// d_tax), rounded half up to a cent.
	TotalCents int64 `json:"total_cents"`
	// Lines are the lines' outputs, reported by their supply groups and
	// gathered by DecodeNewOrder; the home group leaves them out.
	Lines []NewOrderLineOutput `json:"lines,omitempty"`
}

// NewOrderLineOutput is one new-order line's output at its supply group.
type NewOrderLineOutput struct {
	Line          int `json:"line"` // 1-based
	Item          int `json:"i_id"`
	SupplyW       int `json:"supply_w_id"`
	StockQuantity int `json:"s_quantity"` // after this line's update
}

// PaymentOutput is payment's output at the customer's group (clause
// 2.5.3.4).
type PaymentOutput struct {
	CW           int    `json:"c_w_id"`
	CD           int    `json:"c_d_id"`
	CID          int    `json:"c_id"`
	Credit       string `json:"credit"`
	BalanceCents int64  `json:"balance_cents"` // after the payment
}

// OrderStatusOutput is order-status's output (clause 2.6.3.4): the
// customer and its last order, OID 0 when it has none.
type OrderStatusOutput struct {
	CID          int         `json:"c_id"`
	First        string      `json:"first"`
	Middle       string      `json:"middle"`
	Last         string      `json:"last"`
	BalanceCents int64       `json:"balance_cents"`
	OID          int         `json:"o_id"`
	EntryD       int64       `json:"entry_d_ms"`
	Carrier      int         `json:"carrier_id"`
	Lines        []OrderLine `json:"lines"`
}

// DeliveryOutput is delivery's output: the orders delivered, by district
// ascending; a district without an undelivered order is left out (clause
// 2.7.4.2).
type DeliveryOutput struct {
	Delivered []DeliveredOrder `json:"delivered"`
}

// DeliveredOrder is one order a delivery delivered.
type DeliveredOrder struct {
	D   int `json:"d_id"`
	OID int `json:"o_id"`
}

// StockLevelOutput is stock-level's output (clause 2.8.3.3).
type StockLevelOutput struct {
	// Count is how many distinct items of the district's last 20 orders
	// have less than the threshold in stock.
	Count int `json:"low_stock"`
	// Items is how many distinct items those orders have.
	Items int `json:"items"`
}

// DecodeNewOrder returns the output of a new-order call, with the lines of
// every supply group. A rolled-back call gives an error matching
// ErrRolledBack.
func DecodeNewOrder(res *txn.Result) (NewOrderOutput, error) {
	var out NewOrderOutput
	if res != nil && !res.Succeeded {
		return out, ErrRolledBack
	}
	if err := decodeOutput(res, ProcNewOrder, IndexHome, &out); err != nil {
		return out, err
	}
	out.Lines = nil
	for i := range res.Results {
		if o := &res.Results[i]; o.Index >= 1 && o.Index <= OrderLinesMax {
			var l NewOrderLineOutput
			if err := decodeOpResult(o, ProcNewOrder, &l); err != nil {
				return out, err
			}
			out.Lines = append(out.Lines, l)
		}
	}
	return out, nil
}

// DecodePayment returns the output of a payment call at the customer's
// group.
func DecodePayment(res *txn.Result) (PaymentOutput, error) {
	var out PaymentOutput
	return out, decodeOutput(res, ProcPayment, IndexCustomer, &out)
}

// DecodeOrderStatus returns the output of an order-status call.
func DecodeOrderStatus(res *txn.Result) (OrderStatusOutput, error) {
	var out OrderStatusOutput
	return out, decodeOutput(res, ProcOrderStatus, IndexHome, &out)
}

// DecodeDelivery returns the output of a delivery call.
func DecodeDelivery(res *txn.Result) (DeliveryOutput, error) {
	var out DeliveryOutput
	return out, decodeOutput(res, ProcDelivery, IndexHome, &out)
}

// DecodeStockLevel returns the output of a stock-level call.
func DecodeStockLevel(res *txn.Result) (StockLevelOutput, error) {
	var out StockLevelOutput
	return out, decodeOutput(res, ProcStockLevel, IndexHome, &out)
}

// decodeOutput decodes the output at index of res into out.
func decodeOutput(res *txn.Result, proc string, index int, out any) error {
	if res == nil {
		return fmt.Errorf("gtpcc: %s: no result", proc)
	}
	for i := range res.Results {
		if o := &res.Results[i]; o.Index == index {
			return decodeOpResult(o, proc, out)
		}
	}
	return fmt.Errorf("gtpcc: %s: result %s has no output at index %d", proc, res.ID, index)
}

// decodeOpResult decodes the output o reports into out.
func decodeOpResult(o *txn.OpResult, proc string, out any) error {
	if o.Kind != txn.OpGet || !o.Found {
		return fmt.Errorf("gtpcc: %s: result %d is a %s (found %t), want a found get", proc, o.Index, o.Kind, o.Found)
	}
	if err := decodeOutputValue(o.Value, out); err != nil {
		return fmt.Errorf("gtpcc: %s: result %d (%q): %w", proc, o.Index, o.Key, err)
	}
	return nil
}

// output returns the OpResult that reports out, about the row at key.
func output(index int, key []byte, out any) txn.OpResult {
	return txn.OpResult{Index: index, Kind: txn.OpGet, Key: key, Found: true, Value: encodeOutput(out)}
}

// procRows reads and writes the rows of one procedure piece, with errors
// that name the procedure and the key.
type procRows struct {
	p    *txn.ProcPiece
	proc string
}

// raw reads the value at key, reporting whether there is one.
func (r procRows) raw(key []byte) ([]byte, bool, error) {
	v, found, err := r.p.Reader.Get(key)
	if err != nil {
		return nil, false, fmt.Errorf("gtpcc: %s: get %q: %w", r.proc, key, err)
	}
	return v, found, nil
}

// get reads the row at key into row, reporting whether there is one.
func (r procRows) get(key []byte, row any) (bool, error) {
	v, found, err := r.raw(key)
	if err != nil || !found {
		return false, err
	}
	if err := Decode(key, v, row); err != nil {
		return false, fmt.Errorf("gtpcc: %s: %w", r.proc, err)
	}
	return true, nil
}

// must reads the row at key into row; a missing row is an error.
func (r procRows) must(key []byte, row any) error {
	found, err := r.get(key, row)
	if err == nil && !found {
		err = fmt.Errorf("gtpcc: %s: no row %q (warehouse not loaded?)", r.proc, key)
	}
	return err
}

// scan returns the rows of [start, end), at most limit.
func (r procRows) scan(start, end []byte, limit int) ([]txn.KV, error) {
	kvs, err := r.p.Reader.Scan(start, end, limit)
	if err != nil {
		return nil, fmt.Errorf("gtpcc: %s: scan [%q, %q): %w", r.proc, start, end, err)
	}
	return kvs, nil
}

// put writes row at key.
func (r procRows) put(key []byte, row any) error {
	return r.putRaw(key, Encode(row))
}

// putRaw writes value at key. Every caller's value is new (an encoded row)
// and its key one it built, or a scan returned, and leaves alone: the
// writer keeps both without copying them when it can (txn.OwnedWriter).
func (r procRows) putRaw(key, value []byte) error {
	var err error
	if w, ok := r.p.Writer.(txn.OwnedWriter); ok {
		err = w.PutOwned(key, value)
	} else {
		err = r.p.Writer.Put(key, value)
	}
	if err != nil {
		return fmt.Errorf("gtpcc: %s: put %q: %w", r.proc, key, err)
	}
	return nil
}

func (r procRows) del(key []byte) error {
	if err := r.p.Writer.Delete(key); err != nil {
		return fmt.Errorf("gtpcc: %s: delete %q: %w", r.proc, key, err)
	}
	return nil
}

// customer returns the customer of district d of warehouse w named by id
// (cid > 0) or by last name, with its key.
func (r procRows) customer(w, d, cid int, last string) (int, []byte, Customer, error) {
	var c Customer
	if cid == 0 {
		var err error
		if cid, err = r.customerByLastName(w, d, last); err != nil {
			return 0, nil, c, err
		}
	}
	key := CustomerKey(w, d, cid)
	return cid, key, c, r.must(key, &c)
}

// customerByLastName returns the id of the customer of district d of
// warehouse w named last that TPC-C picks (clause 2.5.2.2): of the n
// customers with that last name sorted by first name, the one at position
// ceil(n/2), counting from 1. The name index's keys sort by first name
// (then id), so the scan returns them in that order.
func (r procRows) customerByLastName(w, d int, last string) (int, error) {
	prefix := CustomerNamePrefix(w, d, last)
	kvs, err := r.scan(prefix, PrefixEnd(prefix), txn.ScanLimitMax)
	switch {
	case err != nil:
		return 0, err
	case len(kvs) == 0:
		return 0, fmt.Errorf("gtpcc: %s: no customer named %q in district %d of warehouse %d", r.proc, last, d, w)
	case len(kvs) == txn.ScanLimitMax:
		// Perhaps more than one scan holds: the middle one is unknown.
		return 0, fmt.Errorf("gtpcc: %s: %d or more customers named %q in district %d of warehouse %d, more than a scan returns",
			r.proc, len(kvs), last, d, w)
	}
	// ceil(n/2) counting from 1 is (n+1)/2 - 1 = (n-1)/2 counting from 0.
	key := kvs[(len(kvs)-1)/2].Key
	cid, ok := ParseLastNumber(key)
	if !ok || cid < 1 || cid > customerIDMax {
		return 0, fmt.Errorf("gtpcc: %s: name index key %q does not end in a customer id", r.proc, key)
	}
	return cid, nil
}

// scale returns the scale warehouse w was loaded at (ScaleKey), read from
// the replicated range, the same at every destination; a warehouse not
// loaded is an error naming it.
func (r procRows) scale(w int) (Scale, error) {
	var s Scale
	key := ScaleKey(w)
	found, err := r.get(key, &s)
	switch {
	case err != nil:
		return Scale{}, err
	case !found:
		return Scale{}, fmt.Errorf("gtpcc: %s: warehouse %d is not loaded (no %s)", r.proc, w, key)
	}
	if err := s.Validate(); err != nil {
		return Scale{}, fmt.Errorf("gtpcc: %s: warehouse %d: %w", r.proc, w, err)
	}
	return s, nil
}

// warehouseScales returns the scale of each of ws (scale), as a function
// of the warehouse; the first one not loaded is an error.
func (r procRows) warehouseScales(ws ...int) (func(w int) Scale, error) {
	type ws1 struct {
		w int
		s Scale
	}
	var got []ws1 // at most 1 + OrderLinesMax
	for _, w := range ws {
		if slices.ContainsFunc(got, func(x ws1) bool { return x.w == w }) {
			continue
		}
		s, err := r.scale(w)
		if err != nil {
			return nil, err
		}
		got = append(got, ws1{w, s})
	}
	return func(w int) Scale {
		i := slices.IndexFunc(got, func(x ws1) bool { return x.w == w })
		return got[i].s
	}, nil
}

// checkCustomerLoaded checks that customer cid (or, when cid is 0, one
// named last) of district d of warehouse w, loaded at s, exists: every
// district has customers 1..s.CustomersPerDistrict, which no procedure
// deletes.
func (r procRows) checkCustomerLoaded(w, d, cid int, last string, s Scale) error {
	switch {
	case cid > s.CustomersPerDistrict:
		return fmt.Errorf("gtpcc: %s: no customer %d in district %d of warehouse %d: it has %d",
			r.proc, cid, d, w, s.CustomersPerDistrict)
	case cid == 0 && !customerNameLoaded(last, s):
		return fmt.Errorf("gtpcc: %s: no customer named %q in district %d of warehouse %d", r.proc, last, d, w)
	}
	return nil
}

// customerNameLoaded reports whether the loader gives some customer of a
// district of scale s the last name last: customer c of the first 1000
// has LastName(c-1), and any beyond one of those 1000 names (customerRow),
// so the names of a district are LastName(n) for n below
// min(s.CustomersPerDistrict, 1000).
func customerNameLoaded(last string, s Scale) bool {
	limit := min(s.CustomersPerDistrict, 1000)
	var parse func(rest string, depth, n int) bool
	parse = func(rest string, depth, n int) bool {
		if depth == 3 {
			return rest == "" && n < limit
		}
		for i, syl := range syllables {
			if strings.HasPrefix(rest, syl) && parse(rest[len(syl):], depth+1, n*10+i) {
				return true
			}
		}
		return false
	}
	return parse(last, 0, 0)
}

// checkRowRange checks a number read from the row at key.
func checkRowRange(proc string, key []byte, field string, v, lo, hi int64) error {
	if v < lo || v > hi {
		return fmt.Errorf("gtpcc: %s: row %q: %s %d, want %d..%d", proc, key, field, v, lo, hi)
	}
	return nil
}

// truncateRunes returns the first n characters of s.
func truncateRunes(s string, n int) string {
	if len(s) <= n {
		return s // n bytes hold at most n characters
	}
	for i := range s {
		if n == 0 {
			return s[:i]
		}
		n--
	}
	return s
}
