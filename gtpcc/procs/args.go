package procs

import (
	"fmt"
	"math"
)

// The stored procedures' names (DESIGN 9). Every replica registers them
// (Register); clients call them with the arguments below, encoded by
// EncodeArgs. The JSON tags name the fields in errors and in RowJSON.
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

// EncodeArgs returns the encoded arguments of a procedure call (one of the
// argument types above, or a pointer to one), in the binary format of rows
// (codec.go), which a replica reads far faster than JSON: every
// destination reads a call's arguments to route it and again to run it.
// Any other type panics: it is a programming error.
func EncodeArgs(args any) []byte {
	switch a := args.(type) {
	case NewOrderArgs:
		return encodeNewOrderArgs(&a)
	case *NewOrderArgs:
		return encodeNewOrderArgs(a)
	case PaymentArgs:
		return encodePaymentArgs(&a)
	case *PaymentArgs:
		return encodePaymentArgs(a)
	case OrderStatusArgs:
		return encodeOrderStatusArgs(&a)
	case *OrderStatusArgs:
		return encodeOrderStatusArgs(a)
	case DeliveryArgs:
		return encodeDeliveryArgs(&a)
	case *DeliveryArgs:
		return encodeDeliveryArgs(a)
	case StockLevelArgs:
		return encodeStockLevelArgs(&a)
	case *StockLevelArgs:
		return encodeStockLevelArgs(a)
	case LoadArgs:
		return encodeLoadArgs(&a)
	case *LoadArgs:
		return encodeLoadArgs(a)
	}
	panic(fmt.Sprintf("gtpcc: encode %T: not a procedure's arguments", args))
}

// DecodeArgs parses the arguments of a call to proc into args, a pointer to
// one of the argument types, strictly: another type, another format (the
// JSON of older clients), truncated arguments or bytes after them are an
// error.
func DecodeArgs(proc string, b []byte, args any) error {
	if err := decodeArgs(b, args); err != nil {
		return fmt.Errorf("gtpcc: %s: arguments: %w", proc, err)
	}
	return nil
}

func decodeArgs(b []byte, args any) error {
	switch a := args.(type) {
	case *NewOrderArgs:
		return decodeNewOrderArgs(b, a)
	case *PaymentArgs:
		return decodePaymentArgs(b, a)
	case *OrderStatusArgs:
		return decodeOrderStatusArgs(b, a)
	case *DeliveryArgs:
		return decodeDeliveryArgs(b, a)
	case *StockLevelArgs:
		return decodeStockLevelArgs(b, a)
	case *LoadArgs:
		return decodeLoadArgs(b, a)
	}
	return fmt.Errorf("decode into %T: not a procedure's arguments", args)
}

func encodeNewOrderArgs(a *NewOrderArgs) []byte {
	e := newEncoder(tagNewOrderArgs, 16+4*len(a.Lines))
	e.int(int64(a.W))
	e.int(int64(a.D))
	e.int(int64(a.C))
	e.count(len(a.Lines))
	for i := range a.Lines {
		l := &a.Lines[i]
		e.int(int64(l.Item))
		e.int(int64(l.SupplyW))
		e.int(int64(l.Quantity))
	}
	e.int(a.EntryD)
	return e.b
}

// newOrderLineBytesMin is the fewest bytes an encoded line takes: three
// one-byte varints.
const newOrderLineBytesMin = 3

func decodeNewOrderArgs(b []byte, a *NewOrderArgs) error {
	d, err := openValue(b, tagNewOrderArgs)
	if err != nil {
		return err
	}
	a.W = d.int()
	a.D = d.int()
	a.C = d.int()
	// The count is bounded by the bytes alone here: parseNewOrder refuses
	// more than OrderLinesMax lines with an error that names the bound.
	if n := d.count(newOrderLineBytesMin, math.MaxInt); d.err == nil {
		a.Lines = make([]NewOrderLine, n)
		for i := range a.Lines {
			l := &a.Lines[i]
			l.Item = d.int()
			l.SupplyW = d.int()
			l.Quantity = d.int()
		}
	}
	a.EntryD = d.int64()
	return d.end()
}

func encodePaymentArgs(a *PaymentArgs) []byte {
	e := newEncoder(tagPaymentArgs, 32+len(a.CLast))
	e.int(int64(a.W))
	e.int(int64(a.D))
	e.int(int64(a.CW))
	e.int(int64(a.CD))
	e.int(int64(a.CID))
	e.str(a.CLast)
	e.int(a.Amount)
	e.int(a.Date)
	return e.b
}

func decodePaymentArgs(b []byte, a *PaymentArgs) error {
	d, err := openValue(b, tagPaymentArgs)
	if err != nil {
		return err
	}
	a.W = d.int()
	a.D = d.int()
	a.CW = d.int()
	a.CD = d.int()
	a.CID = d.int()
	a.CLast = d.str()
	a.Amount = d.int64()
	a.Date = d.int64()
	return d.end()
}

func encodeOrderStatusArgs(a *OrderStatusArgs) []byte {
	e := newEncoder(tagOrderStatusArgs, 16+len(a.CLast))
	e.int(int64(a.W))
	e.int(int64(a.D))
	e.int(int64(a.CID))
	e.str(a.CLast)
	return e.b
}

func decodeOrderStatusArgs(b []byte, a *OrderStatusArgs) error {
	d, err := openValue(b, tagOrderStatusArgs)
	if err != nil {
		return err
	}
	a.W = d.int()
	a.D = d.int()
	a.CID = d.int()
	a.CLast = d.str()
	return d.end()
}

func encodeDeliveryArgs(a *DeliveryArgs) []byte {
	e := newEncoder(tagDeliveryArgs, 16)
	e.int(int64(a.W))
	e.int(int64(a.Carrier))
	e.int(a.Date)
	return e.b
}

func decodeDeliveryArgs(b []byte, a *DeliveryArgs) error {
	d, err := openValue(b, tagDeliveryArgs)
	if err != nil {
		return err
	}
	a.W = d.int()
	a.Carrier = d.int()
	a.Date = d.int64()
	return d.end()
}

func encodeStockLevelArgs(a *StockLevelArgs) []byte {
	e := newEncoder(tagStockLevelArgs, 16)
	e.int(int64(a.W))
	e.int(int64(a.D))
	e.int(int64(a.Threshold))
	return e.b
}

func decodeStockLevelArgs(b []byte, a *StockLevelArgs) error {
	d, err := openValue(b, tagStockLevelArgs)
	if err != nil {
		return err
	}
	a.W = d.int()
	a.D = d.int()
	a.Threshold = d.int()
	return d.end()
}

func encodeLoadArgs(a *LoadArgs) []byte {
	e := newEncoder(tagLoadArgs, 40+len(a.Table))
	e.int(int64(a.W))
	e.str(a.Table)
	e.int(int64(a.From))
	e.int(int64(a.To))
	e.int(int64(a.Scale.Items))
	e.int(int64(a.Scale.CustomersPerDistrict))
	e.int(int64(a.Scale.OrdersPerDistrict))
	e.int(int64(a.Scale.NewOrdersPerDistrict))
	e.int(a.Date)
	return e.b
}

func decodeLoadArgs(b []byte, a *LoadArgs) error {
	d, err := openValue(b, tagLoadArgs)
	if err != nil {
		return err
	}
	a.W = d.int()
	a.Table = d.str()
	a.From = d.int()
	a.To = d.int()
	a.Scale.Items = d.int()
	a.Scale.CustomersPerDistrict = d.int()
	a.Scale.OrdersPerDistrict = d.int()
	a.Scale.NewOrdersPerDistrict = d.int()
	a.Date = d.int64()
	return d.end()
}
