package procs

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// The stored procedures' names (DESIGN 9). Every replica registers them
// (Register); clients call them with the arguments below, encoded by
// EncodeArgs.
const (
	ProcNewOrder    = "gtpcc.new_order"
	ProcPayment     = "gtpcc.payment"
	ProcOrderStatus = "gtpcc.order_status"
	ProcDelivery    = "gtpcc.delivery"
	ProcStockLevel  = "gtpcc.stock_level"
	ProcLoad        = "gtpcc.load"
)

// NewOrderArgs are the arguments of new-order (TPC-C clause 2.4): an
// order of customer C of district D of home warehouse W. Each line's item
// is supplied by warehouse SupplyW, the home warehouse or a remote one. An
// item id that is not in the item table (TPC-C's 1% of unused ids) rolls
// the order back at every destination: the item table is replicated, so
// every group decides the same.
type NewOrderArgs struct {
	W     int            `json:"w"`
	D     int            `json:"d"`
	C     int            `json:"c"`
	Lines []NewOrderLine `json:"lines"`
	// EntryD is the order's entry date, in Unix milliseconds, chosen by
	// the client: procedures have no clock.
	EntryD int64 `json:"entry_d_ms"`
}

// NewOrderLine is one line of a new-order.
type NewOrderLine struct {
	Item     int `json:"i"`
	SupplyW  int `json:"supply_w"`
	Quantity int `json:"qty"`
}

// PaymentArgs are the arguments of payment (clause 2.5): customer CW/CD
// pays Amount to district D of warehouse W. The customer is named by id
// (CID > 0) or by last name (CID == 0, CLast set).
type PaymentArgs struct {
	W      int    `json:"w"`
	D      int    `json:"d"`
	CW     int    `json:"c_w"`
	CD     int    `json:"c_d"`
	CID    int    `json:"c_id,omitempty"`
	CLast  string `json:"c_last,omitempty"`
	Amount int64  `json:"amount_cents"`
	Date   int64  `json:"date_ms"`
}

// OrderStatusArgs are the arguments of order-status (clause 2.6), a
// read-only transaction of the home warehouse.
type OrderStatusArgs struct {
	W     int    `json:"w"`
	D     int    `json:"d"`
	CID   int    `json:"c_id,omitempty"`
	CLast string `json:"c_last,omitempty"`
}

// DeliveryArgs are the arguments of delivery (clause 2.7): the oldest
// undelivered order of every district of warehouse W is delivered by
// Carrier.
type DeliveryArgs struct {
	W       int   `json:"w"`
	Carrier int   `json:"carrier"`
	Date    int64 `json:"date_ms"`
}

// StockLevelArgs are the arguments of stock-level (clause 2.8): how many
// items of district D's last 20 orders have less than Threshold in stock.
type StockLevelArgs struct {
	W         int `json:"w"`
	D         int `json:"d"`
	Threshold int `json:"threshold"`
}

// LoadArgs are the arguments of the loader's procedure: it writes the rows
// of Table for warehouse W numbered From..To (inclusive), generated from
// the key alone, so that the arguments stay small and every replica writes
// the same rows. Table is "warehouse" (From, To ignored: the warehouse and
// its districts), "stock" (item ids), "customer" (customer ids, in every
// district, with their name index entries and one history row each) or
// "order" (order ids, in every district, with their lines and, for the
// last Scale.NewOrdersPerDistrict, their new-order rows).
type LoadArgs struct {
	W     int    `json:"w"`
	Table string `json:"table"`
	From  int    `json:"from"`
	To    int    `json:"to"`
	Scale Scale  `json:"scale"`
	// Date is the load's date, Unix milliseconds, for the date columns
	// (procedures have no clock).
	Date int64 `json:"date_ms"`
}

// EncodeArgs returns the encoded arguments of a procedure call: their
// JSON, as Encode writes rows (the argument structs, like the rows, are
// plain structs of strings and numbers).
func EncodeArgs(args any) []byte { return Encode(args) }

// DecodeArgs parses the arguments of a call to proc into args, strictly:
// unknown fields are an error.
func DecodeArgs(proc string, b []byte, args any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(args); err != nil {
		return fmt.Errorf("gtpcc: %s: arguments: %w", proc, err)
	}
	if dec.More() {
		return fmt.Errorf("gtpcc: %s: arguments: data after the object", proc)
	}
	return nil
}
