package procs

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/flexkv/flexkv/txn"
)

// The gTPC-C stored procedures (TPC-C clauses 2.4-2.8) as txn.Procedures.
//
// A call goes to the owners of its Keys; every destination runs Run for
// the rows its group owns (ProcPiece.Owns) and may own several of the
// warehouses involved. Each group reports its outputs as txn.OpResults of
// kind OpGet whose Key names the row the output is about and whose Value is
// the output's JSON (one of the *Output types below), at an Index that no
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
// A row a procedure needs that is not there (a warehouse that was not
// loaded) or does not decode is an error naming its key: it aborts the
// piece of the group that reads it, and only that piece. Such a call is not
// atomic: the other destinations cannot know of the missing row (procedures
// take no votes, txn/proc.go), so they commit their pieces. Only a
// decision taken on replicated rows (new-order's unknown item) is taken
// alike everywhere. A loaded population never has missing rows.

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
	if err := json.Unmarshal(o.Value, out); err != nil {
		return fmt.Errorf("gtpcc: %s: result %d (%q): %w", proc, o.Index, o.Key, err)
	}
	return nil
}

// output returns the OpResult that reports out, about the row at key.
func output(index int, key []byte, out any) txn.OpResult {
	return txn.OpResult{Index: index, Kind: txn.OpGet, Key: key, Found: true, Value: Encode(out)}
}

// procRows reads and writes the rows of one procedure piece, with errors
// that name the procedure and the key.
type procRows struct {
	p    *txn.ProcPiece
	proc string
}

// get reads the row at key into row, reporting whether there is one.
func (r procRows) get(key []byte, row any) (bool, error) {
	v, found, err := r.p.Reader.Get(key)
	switch {
	case err != nil:
		return false, fmt.Errorf("gtpcc: %s: get %q: %w", r.proc, key, err)
	case !found:
		return false, nil
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

func (r procRows) putRaw(key, value []byte) error {
	if err := r.p.Writer.Put(key, value); err != nil {
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
