package procs

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
)

// The stored form of rows, of procedure arguments and of the procedures'
// outputs (Encode, EncodeArgs, outputs.go):
// a binary encoding, which the procedures read and write on every replica
// far faster than JSON.
//
//	byte 0     FormatV1, the format's version
//	byte 1     the type's tag (tagWarehouse, ..., tagStockLevelOutput)
//	then       the type's fields in declaration order (an Address's
//	           fields in place): integers as zigzag varints
//	           (binary.AppendVarint), strings as a uvarint length and
//	           the bytes, booleans as one byte 0 or 1, lists as a
//	           uvarint count and their elements' fields in place
//
// A value must hold its fields exactly: truncated, with bytes after the
// last field, of another type or of another version, it is an error that
// says so. Every replica encodes the same row to the same bytes. The
// first byte is never '{', so that a row of the JSON format the
// population was stored in before (an older population, which must be
// reloaded) is told apart with an error that says so; RowJSON shows a
// stored row as JSON, for `flexkv kv get`.

// FormatV1 is the first byte of a row, of arguments or of an output in
// the current binary format.
const FormatV1 = 0xf1

// Type tags: byte 1 of an encoded value.
const (
	tagWarehouse = 1
	tagDistrict  = 2
	// tagCustomerInline was the customer row holding its C_DATA, and
	// tagScaleInline the scale row of such a population, before
	// CustomerData had a row of its own. Both are refused with an error
	// that says what to do. The scale row is what makes the refusal whole:
	// every piece of a call reads the scale of every warehouse it names,
	// from the replicated range, so every destination aborts alike,
	// where a customer row is read by its own group only.
	tagCustomerInline  = 3
	tagHistory         = 4
	tagOrder           = 5
	tagOrderLine       = 6
	tagStock           = 7
	tagItem            = 8
	tagScaleInline     = 9
	tagCustomerPayment = 10
	tagDeliveryCursor  = 11
	tagCustomer        = 12
	tagCustomerData    = 13
	tagScale           = 14

	tagNewOrderArgs    = 32
	tagPaymentArgs     = 33
	tagOrderStatusArgs = 34
	tagDeliveryArgs    = 35
	tagStockLevelArgs  = 36
	tagLoadArgs        = 37

	tagNewOrderOutput     = 64
	tagNewOrderLineOutput = 65
	tagPaymentOutput      = 66
	tagOrderStatusOutput  = 67
	tagDeliveryOutput     = 68
	tagStockLevelOutput   = 69
)

// tagNames name the tags in errors and RowJSON.
var tagNames = map[byte]string{
	tagWarehouse: "warehouse row", tagDistrict: "district row", tagCustomer: "customer row",
	tagHistory: "history row", tagOrder: "order row", tagOrderLine: "order line row",
	tagStock: "stock row", tagItem: "item row", tagScale: "scale row",
	tagCustomerPayment: "customer payment row", tagDeliveryCursor: "delivery cursor row",
	tagCustomerData:   "customer data row",
	tagCustomerInline: "customer row with its data inline, of a population loaded before customer data rows (start from an empty cluster and run flexkv gtpcc load)",
	tagScaleInline:    "scale row of a population loaded before customer data rows (start from an empty cluster and run flexkv gtpcc load)",
	tagNewOrderArgs:   "new-order arguments", tagPaymentArgs: "payment arguments",
	tagOrderStatusArgs: "order-status arguments", tagDeliveryArgs: "delivery arguments",
	tagStockLevelArgs: "stock-level arguments", tagLoadArgs: "load arguments",
	tagNewOrderOutput: "new-order output", tagNewOrderLineOutput: "new-order line output",
	tagPaymentOutput: "payment output", tagOrderStatusOutput: "order-status output",
	tagDeliveryOutput: "delivery output", tagStockLevelOutput: "stock-level output",
}

func tagName(tag byte) string {
	if n, ok := tagNames[tag]; ok {
		return n
	}
	return fmt.Sprintf("unknown type %d", tag)
}

// encoder appends a value's fields.
type encoder struct{ b []byte }

func newEncoder(tag byte, size int) encoder {
	return encoder{b: append(make([]byte, 0, size), FormatV1, tag)}
}

func (e *encoder) int(v int64) { e.b = binary.AppendVarint(e.b, v) }

func (e *encoder) str(s string) {
	e.b = binary.AppendUvarint(e.b, uint64(len(s)))
	e.b = append(e.b, s...)
}

func (e *encoder) bool(v bool) {
	if v {
		e.b = append(e.b, 1)
	} else {
		e.b = append(e.b, 0)
	}
}

func (e *encoder) address(a *Address) {
	e.str(a.Street1)
	e.str(a.Street2)
	e.str(a.City)
	e.str(a.State)
	e.str(a.Zip)
}

// decoder reads a value's fields; the first error stops it (every later
// read returns zero) and is kept in err.
type decoder struct {
	b   []byte
	off int
	err error
	// s is b as a string, made on the first string field read: the
	// strings of a row are its substrings, one allocation for all.
	s string
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf(format, args...)
	}
}

func (d *decoder) int64() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b[d.off:])
	if n <= 0 || overlong(d.b[d.off:], n) {
		d.fail("truncated or bad integer at byte %d", d.off)
		return 0
	}
	d.off += n
	return v
}

// overlong reports whether the varint of n bytes at the start of b has a
// shorter encoding (its last byte is 0): every value has one encoding, so
// that what decodes encodes back to the same bytes.
func overlong(b []byte, n int) bool { return n > 1 && b[n-1] == 0 }

func (d *decoder) int() int { return int(d.int64()) }

func (d *decoder) str() string {
	start, n := d.strSpan()
	if n == 0 {
		return ""
	}
	if d.s == "" {
		d.s = string(d.b)
	}
	return d.s[start : start+n]
}

// strSpan steps over a string field and returns where its bytes start and
// how many there are (0 when the field is truncated: the decoder failed).
// str makes the string; a reader that needs only what follows (an order
// line's item id, orderLineItem) steps over it without one.
func (d *decoder) strSpan() (start, n int) {
	if d.err != nil {
		return 0, 0
	}
	m, k := binary.Uvarint(d.b[d.off:])
	if k <= 0 || overlong(d.b[d.off:], k) || m > uint64(len(d.b)-d.off-k) {
		d.fail("truncated string at byte %d", d.off)
		return 0, 0
	}
	start, n = d.off+k, int(m)
	d.off = start + n
	return start, n
}

// count reads a list's length, at most most elements, each at least
// minBytes long: a longer list, or one the bytes left cannot hold, is an
// error, so that a bad length never allocates.
func (d *decoder) count(minBytes, most int) int {
	if d.err != nil {
		return 0
	}
	n, k := binary.Uvarint(d.b[d.off:])
	switch {
	case k <= 0 || overlong(d.b[d.off:], k) || n > uint64((len(d.b)-d.off-k)/minBytes):
		d.fail("truncated or bad list length at byte %d", d.off)
		return 0
	case n > uint64(most):
		d.fail("a list of %d at byte %d, at most %d", n, d.off, most)
		return 0
	}
	d.off += k
	return int(n)
}

func (e *encoder) count(n int) { e.b = binary.AppendUvarint(e.b, uint64(n)) }

func (d *decoder) bool() bool {
	if d.err != nil {
		return false
	}
	if d.off >= len(d.b) || d.b[d.off] > 1 {
		d.fail("truncated or bad boolean at byte %d", d.off)
		return false
	}
	d.off++
	return d.b[d.off-1] == 1
}

func (d *decoder) address(a *Address) {
	a.Street1 = d.str()
	a.Street2 = d.str()
	a.City = d.str()
	a.State = d.str()
	a.Zip = d.str()
}

// end checks that the value ends after its last field.
func (d *decoder) end() error {
	if d.err == nil && d.off != len(d.b) {
		d.fail("%d bytes after the last field", len(d.b)-d.off)
	}
	return d.err
}

// openValue checks the header of an encoded value of type tag and returns
// a decoder of its fields.
func openValue(b []byte, tag byte) (decoder, error) {
	switch {
	case len(b) == 0:
		return decoder{}, fmt.Errorf("empty, want %s", tagName(tag))
	case b[0] == '{' && isOutputTag(tag):
		return decoder{}, fmt.Errorf("JSON, the output format of older servers before binary version %#x", FormatV1)
	case b[0] == '{' && tag >= tagNewOrderArgs:
		return decoder{}, fmt.Errorf("JSON, the format of older clients before binary version %#x", FormatV1)
	case b[0] == '{':
		return decoder{}, fmt.Errorf("JSON, the format of populations loaded before binary version %#x: reload it (flexkv gtpcc load)", FormatV1)
	case b[0] != FormatV1:
		return decoder{}, fmt.Errorf("unknown format %#x, want binary version %#x", b[0], FormatV1)
	case len(b) < 2:
		return decoder{}, fmt.Errorf("truncated: no type, want %s", tagName(tag))
	case b[1] != tag:
		return decoder{}, fmt.Errorf("%s, want %s", tagName(b[1]), tagName(tag))
	}
	return decoder{b: b, off: 2}, nil
}

// Encode returns the stored form of a row (Warehouse, District, Customer,
// CustomerData, History, Order, OrderLine, Stock, Item, Scale,
// CustomerPayment or DeliveryCursor, or a pointer to one) in the binary
// format above. Any other type panics: it
// is a programming error.
func Encode(row any) []byte {
	switch r := row.(type) {
	case Warehouse:
		return encodeWarehouse(&r)
	case *Warehouse:
		return encodeWarehouse(r)
	case District:
		return encodeDistrict(&r)
	case *District:
		return encodeDistrict(r)
	case Customer:
		return encodeCustomer(&r)
	case *Customer:
		return encodeCustomer(r)
	case CustomerData:
		return encodeCustomerData(&r)
	case *CustomerData:
		return encodeCustomerData(r)
	case History:
		return encodeHistory(&r)
	case *History:
		return encodeHistory(r)
	case Order:
		return encodeOrder(&r)
	case *Order:
		return encodeOrder(r)
	case OrderLine:
		return encodeOrderLine(&r)
	case *OrderLine:
		return encodeOrderLine(r)
	case Stock:
		return encodeStock(&r)
	case *Stock:
		return encodeStock(r)
	case Item:
		return encodeItem(&r)
	case *Item:
		return encodeItem(r)
	case Scale:
		return encodeScale(&r)
	case *Scale:
		return encodeScale(r)
	case CustomerPayment:
		return encodeCustomerPayment(&r)
	case *CustomerPayment:
		return encodeCustomerPayment(r)
	case DeliveryCursor:
		return encodeDeliveryCursor(&r)
	case *DeliveryCursor:
		return encodeDeliveryCursor(r)
	}
	panic(fmt.Sprintf("gtpcc: encode %T: not a row type", row))
}

// Decode parses the stored form of a row of key into row, a pointer to one
// of the row types of Encode. A value of another format (a JSON row of an
// older population), of another type, truncated or longer than its fields
// is an error naming key.
func Decode(key, value []byte, row any) error {
	if err := decodeRow(value, row); err != nil {
		return fmt.Errorf("gtpcc: row %q: %w", key, err)
	}
	return nil
}

func decodeRow(b []byte, row any) error {
	switch r := row.(type) {
	case *Warehouse:
		return decodeWarehouse(b, r)
	case *District:
		return decodeDistrict(b, r)
	case *Customer:
		return decodeCustomer(b, r)
	case *CustomerData:
		return decodeCustomerData(b, r)
	case *History:
		return decodeHistory(b, r)
	case *Order:
		return decodeOrder(b, r)
	case *OrderLine:
		return decodeOrderLine(b, r)
	case *Stock:
		return decodeStock(b, r)
	case *Item:
		return decodeItem(b, r)
	case *Scale:
		return decodeScale(b, r)
	case *CustomerPayment:
		return decodeCustomerPayment(b, r)
	case *DeliveryCursor:
		return decodeDeliveryCursor(b, r)
	}
	return fmt.Errorf("decode into %T: not a row type", row)
}

// RowJSON returns the JSON of a row, arguments or an output in the binary
// format (value starts with FormatV1), ok false for any other value (not
// an error: a key outside gTPC-C holds what its client wrote). A value
// that starts with FormatV1 but does not decode is an error.
func RowJSON(value []byte) (js []byte, ok bool, err error) {
	if len(value) == 0 || value[0] != FormatV1 {
		return nil, false, nil
	}
	if len(value) < 2 {
		return nil, true, fmt.Errorf("gtpcc: value of format %#x: truncated: no type", FormatV1)
	}
	var v any
	switch value[1] {
	case tagWarehouse:
		v = new(Warehouse)
	case tagDistrict:
		v = new(District)
	case tagCustomer:
		v = new(Customer)
	case tagCustomerData:
		v = new(CustomerData)
	case tagHistory:
		v = new(History)
	case tagOrder:
		v = new(Order)
	case tagOrderLine:
		v = new(OrderLine)
	case tagStock:
		v = new(Stock)
	case tagItem:
		v = new(Item)
	case tagScale:
		v = new(Scale)
	case tagCustomerPayment:
		v = new(CustomerPayment)
	case tagDeliveryCursor:
		v = new(DeliveryCursor)
	case tagNewOrderArgs:
		v = new(NewOrderArgs)
	case tagPaymentArgs:
		v = new(PaymentArgs)
	case tagOrderStatusArgs:
		v = new(OrderStatusArgs)
	case tagDeliveryArgs:
		v = new(DeliveryArgs)
	case tagStockLevelArgs:
		v = new(StockLevelArgs)
	case tagLoadArgs:
		v = new(LoadArgs)
	case tagNewOrderOutput:
		v = new(NewOrderOutput)
	case tagNewOrderLineOutput:
		v = new(NewOrderLineOutput)
	case tagPaymentOutput:
		v = new(PaymentOutput)
	case tagOrderStatusOutput:
		v = new(OrderStatusOutput)
	case tagDeliveryOutput:
		v = new(DeliveryOutput)
	case tagStockLevelOutput:
		v = new(StockLevelOutput)
	default:
		return nil, true, fmt.Errorf("gtpcc: value of format %#x: %s", FormatV1, tagName(value[1]))
	}
	var derr error
	switch _, isRow := tagRowTypes[value[1]]; {
	case isRow:
		derr = decodeRow(value, v)
	case isOutputTag(value[1]):
		derr = decodeOutputValue(value, v)
	default:
		derr = decodeArgs(value, v)
	}
	if derr != nil {
		return nil, true, fmt.Errorf("gtpcc: value of format %#x: %w", FormatV1, derr)
	}
	js, err = json.Marshal(v)
	if err != nil {
		return nil, true, fmt.Errorf("gtpcc: %s as JSON: %w", tagName(value[1]), err)
	}
	return js, true, nil
}

// isOutputTag reports whether tag is an output's.
func isOutputTag(tag byte) bool { return tag >= tagNewOrderOutput && tag <= tagStockLevelOutput }

// tagRowTypes are the tags of rows (the others are arguments and outputs).
var tagRowTypes = map[byte]struct{}{
	tagWarehouse: {}, tagDistrict: {}, tagCustomer: {}, tagHistory: {}, tagOrder: {},
	tagOrderLine: {}, tagStock: {}, tagItem: {}, tagScale: {}, tagCustomerPayment: {},
	tagDeliveryCursor: {}, tagCustomerData: {},
}

func encodeWarehouse(r *Warehouse) []byte {
	e := newEncoder(tagWarehouse, 64)
	e.str(r.Name)
	e.address(&r.Address)
	e.int(r.Tax)
	e.int(r.YTD)
	return e.b
}

func decodeWarehouse(b []byte, r *Warehouse) error {
	d, err := openValue(b, tagWarehouse)
	if err != nil {
		return err
	}
	r.Name = d.str()
	d.address(&r.Address)
	r.Tax = d.int64()
	r.YTD = d.int64()
	return d.end()
}

func encodeDistrict(r *District) []byte {
	e := newEncoder(tagDistrict, 72)
	e.str(r.Name)
	e.address(&r.Address)
	e.int(r.Tax)
	e.int(r.YTD)
	e.int(int64(r.NextOID))
	return e.b
}

func decodeDistrict(b []byte, r *District) error {
	d, err := openValue(b, tagDistrict)
	if err != nil {
		return err
	}
	r.Name = d.str()
	d.address(&r.Address)
	r.Tax = d.int64()
	r.YTD = d.int64()
	r.NextOID = d.int()
	return d.end()
}

func encodeCustomer(r *Customer) []byte {
	e := newEncoder(tagCustomer, 128)
	e.str(r.First)
	e.str(r.Middle)
	e.str(r.Last)
	e.address(&r.Address)
	e.str(r.Phone)
	e.int(r.Since)
	e.str(r.Credit)
	e.int(r.CreditLimit)
	e.int(r.Discount)
	e.int(r.Balance)
	e.int(r.YTDPayment)
	e.int(int64(r.PaymentCnt))
	e.int(int64(r.DeliveryCnt))
	e.int(int64(r.LastOrder))
	return e.b
}

func encodeCustomerData(r *CustomerData) []byte {
	e := newEncoder(tagCustomerData, 4+len(r.Data))
	e.str(r.Data)
	return e.b
}

func decodeCustomerData(b []byte, r *CustomerData) error {
	d, err := openValue(b, tagCustomerData)
	if err != nil {
		return err
	}
	r.Data = d.str()
	return d.end()
}

func decodeCustomer(b []byte, r *Customer) error {
	d, err := openValue(b, tagCustomer)
	if err != nil {
		return err
	}
	r.First = d.str()
	r.Middle = d.str()
	r.Last = d.str()
	d.address(&r.Address)
	r.Phone = d.str()
	r.Since = d.int64()
	r.Credit = d.str()
	r.CreditLimit = d.int64()
	r.Discount = d.int64()
	r.Balance = d.int64()
	r.YTDPayment = d.int64()
	r.PaymentCnt = d.int()
	r.DeliveryCnt = d.int()
	r.LastOrder = d.int()
	return d.end()
}

func encodeHistory(r *History) []byte {
	e := newEncoder(tagHistory, 48+len(r.Data))
	e.int(int64(r.CID))
	e.str(r.CLast)
	e.int(int64(r.CD))
	e.int(int64(r.CW))
	e.int(int64(r.D))
	e.int(int64(r.W))
	e.int(r.Date)
	e.int(r.Amount)
	e.str(r.Data)
	return e.b
}

func decodeHistory(b []byte, r *History) error {
	d, err := openValue(b, tagHistory)
	if err != nil {
		return err
	}
	r.CID = d.int()
	r.CLast = d.str()
	r.CD = d.int()
	r.CW = d.int()
	r.D = d.int()
	r.W = d.int()
	r.Date = d.int64()
	r.Amount = d.int64()
	r.Data = d.str()
	return d.end()
}

func encodeOrder(r *Order) []byte {
	e := newEncoder(tagOrder, 24)
	e.int(int64(r.CID))
	e.int(r.EntryD)
	e.int(int64(r.Carrier))
	e.int(int64(r.OLCnt))
	e.bool(r.AllLocal)
	return e.b
}

func decodeOrder(b []byte, r *Order) error {
	d, err := openValue(b, tagOrder)
	if err != nil {
		return err
	}
	r.CID = d.int()
	r.EntryD = d.int64()
	r.Carrier = d.int()
	r.OLCnt = d.int()
	r.AllLocal = d.bool()
	return d.end()
}

func encodeOrderLine(r *OrderLine) []byte {
	e := newEncoder(tagOrderLine, 56)
	orderLineFields(&e, r)
	return e.b
}

// orderLineFields appends an order line's fields: its row, and each line
// of an order-status output.
func orderLineFields(e *encoder, r *OrderLine) {
	e.int(int64(r.Item))
	e.int(int64(r.SupplyW))
	e.int(r.DeliveryD)
	e.int(int64(r.Quantity))
	e.int(r.Amount)
	e.str(r.DistInfo)
}

// orderLineBytesMin is the fewest bytes an order line's fields take: five
// one-byte varints and an empty string's length.
const orderLineBytesMin = 6

func decodeOrderLine(b []byte, r *OrderLine) error {
	d, err := openValue(b, tagOrderLine)
	if err != nil {
		return err
	}
	readOrderLineFields(&d, r)
	return d.end()
}

func readOrderLineFields(d *decoder, r *OrderLine) {
	r.Item = d.int()
	r.SupplyW = d.int()
	r.DeliveryD = d.int64()
	r.Quantity = d.int()
	r.Amount = d.int64()
	r.DistInfo = d.str()
}

// orderLineItem returns the item id of an encoded order line, checking the
// whole value as decodeOrderLine does (the fields of orderLineFields),
// without making its string: what stock-level reads of the ~200 lines it
// scans.
func orderLineItem(b []byte) (int, error) {
	d, err := openValue(b, tagOrderLine)
	if err != nil {
		return 0, err
	}
	item := d.int()
	d.int()     // SupplyW
	d.int64()   // DeliveryD
	d.int()     // Quantity
	d.int64()   // Amount
	d.strSpan() // DistInfo
	return item, d.end()
}

func encodeStock(r *Stock) []byte {
	e := newEncoder(tagStock, 24+len(r.Data))
	e.int(int64(r.Quantity))
	e.int(int64(r.YTD))
	e.int(int64(r.OrderCnt))
	e.int(int64(r.RemoteCnt))
	e.str(r.Data)
	return e.b
}

func decodeStock(b []byte, r *Stock) error {
	d, err := openValue(b, tagStock)
	if err != nil {
		return err
	}
	r.Quantity = d.int()
	r.YTD = d.int()
	r.OrderCnt = d.int()
	r.RemoteCnt = d.int()
	r.Data = d.str()
	return d.end()
}

func encodeItem(r *Item) []byte {
	e := newEncoder(tagItem, 24+len(r.Name)+len(r.Data))
	e.int(int64(r.Image))
	e.str(r.Name)
	e.int(r.Price)
	e.str(r.Data)
	return e.b
}

func decodeItem(b []byte, r *Item) error {
	d, err := openValue(b, tagItem)
	if err != nil {
		return err
	}
	r.Image = d.int()
	r.Name = d.str()
	r.Price = d.int64()
	r.Data = d.str()
	return d.end()
}

func encodeScale(r *Scale) []byte {
	e := newEncoder(tagScale, 24)
	e.int(int64(r.Items))
	e.int(int64(r.CustomersPerDistrict))
	e.int(int64(r.OrdersPerDistrict))
	e.int(int64(r.NewOrdersPerDistrict))
	return e.b
}

func decodeScale(b []byte, r *Scale) error {
	d, err := openValue(b, tagScale)
	if err != nil {
		return err
	}
	r.Items = d.int()
	r.CustomersPerDistrict = d.int()
	r.OrdersPerDistrict = d.int()
	r.NewOrdersPerDistrict = d.int()
	return d.end()
}

func encodeCustomerPayment(r *CustomerPayment) []byte {
	e := newEncoder(tagCustomerPayment, 32)
	e.int(int64(r.CD))
	e.int(int64(r.CID))
	e.int(int64(r.W))
	e.int(int64(r.D))
	e.int(r.Amount)
	e.int(r.Date)
	return e.b
}

func encodeDeliveryCursor(r *DeliveryCursor) []byte {
	e := newEncoder(tagDeliveryCursor, 8)
	e.int(int64(r.NextOID))
	return e.b
}

func decodeDeliveryCursor(b []byte, r *DeliveryCursor) error {
	d, err := openValue(b, tagDeliveryCursor)
	if err != nil {
		return err
	}
	r.NextOID = d.int()
	return d.end()
}

func decodeCustomerPayment(b []byte, r *CustomerPayment) error {
	d, err := openValue(b, tagCustomerPayment)
	if err != nil {
		return err
	}
	r.CD = d.int()
	r.CID = d.int()
	r.W = d.int()
	r.D = d.int()
	r.Amount = d.int64()
	r.Date = d.int64()
	return d.end()
}
