package procs

import "fmt"

// The procedures' outputs (the *Output types of procs.go) travel in the
// binary format of rows (codec.go), under tags of their own: every replica
// of a destination encodes its piece's outputs and keeps them in the
// client's session until the client acknowledges them, so their size is
// written to the store, and sent to the client, once per piece at each
// replica. A list is a uvarint count and its elements' fields in place.
// RowJSON shows an encoded output as the JSON of its type.

// encodeOutput returns the encoded form of out, a pointer to one of the
// output types. Any other type panics: it is a programming error.
func encodeOutput(out any) []byte {
	switch o := out.(type) {
	case *NewOrderOutput:
		return encodeNewOrderOutput(o)
	case *NewOrderLineOutput:
		return encodeNewOrderLineOutput(o)
	case *PaymentOutput:
		return encodePaymentOutput(o)
	case *OrderStatusOutput:
		return encodeOrderStatusOutput(o)
	case *DeliveryOutput:
		return encodeDeliveryOutput(o)
	case *StockLevelOutput:
		return encodeStockLevelOutput(o)
	}
	panic(fmt.Sprintf("gtpcc: encode %T: not a procedure's output", out))
}

// decodeOutputValue parses an encoded output into out, a pointer to one
// of the output types, strictly, as rows are parsed.
func decodeOutputValue(b []byte, out any) error {
	switch o := out.(type) {
	case *NewOrderOutput:
		return decodeNewOrderOutput(b, o)
	case *NewOrderLineOutput:
		return decodeNewOrderLineOutput(b, o)
	case *PaymentOutput:
		return decodePaymentOutput(b, o)
	case *OrderStatusOutput:
		return decodeOrderStatusOutput(b, o)
	case *DeliveryOutput:
		return decodeDeliveryOutput(b, o)
	case *StockLevelOutput:
		return decodeStockLevelOutput(b, o)
	}
	return fmt.Errorf("decode into %T: not a procedure's output", out)
}

func encodeNewOrderOutput(o *NewOrderOutput) []byte {
	e := newEncoder(tagNewOrderOutput, 16+6*len(o.Lines))
	e.int(int64(o.OID))
	e.int(o.TotalCents)
	e.count(len(o.Lines))
	for i := range o.Lines {
		newOrderLineFields(&e, &o.Lines[i])
	}
	return e.b
}

// newOrderLineOutputBytesMin is the fewest bytes an encoded
// NewOrderLineOutput's fields take: four one-byte varints.
const newOrderLineOutputBytesMin = 4

func newOrderLineFields(e *encoder, l *NewOrderLineOutput) {
	e.int(int64(l.Line))
	e.int(int64(l.Item))
	e.int(int64(l.SupplyW))
	e.int(int64(l.StockQuantity))
}

func readNewOrderLineFields(d *decoder, l *NewOrderLineOutput) {
	l.Line = d.int()
	l.Item = d.int()
	l.SupplyW = d.int()
	l.StockQuantity = d.int()
}

func decodeNewOrderOutput(b []byte, o *NewOrderOutput) error {
	d, err := openValue(b, tagNewOrderOutput)
	if err != nil {
		return err
	}
	o.OID = d.int()
	o.TotalCents = d.int64()
	o.Lines = nil
	if n := d.count(newOrderLineOutputBytesMin, OrderLinesMax); n > 0 {
		o.Lines = make([]NewOrderLineOutput, n)
		for i := range o.Lines {
			readNewOrderLineFields(&d, &o.Lines[i])
		}
	}
	return d.end()
}

func encodeNewOrderLineOutput(l *NewOrderLineOutput) []byte {
	e := newEncoder(tagNewOrderLineOutput, 16)
	newOrderLineFields(&e, l)
	return e.b
}

func decodeNewOrderLineOutput(b []byte, l *NewOrderLineOutput) error {
	d, err := openValue(b, tagNewOrderLineOutput)
	if err != nil {
		return err
	}
	readNewOrderLineFields(&d, l)
	return d.end()
}

func encodePaymentOutput(o *PaymentOutput) []byte {
	e := newEncoder(tagPaymentOutput, 24+len(o.Credit))
	e.int(int64(o.CW))
	e.int(int64(o.CD))
	e.int(int64(o.CID))
	e.str(o.Credit)
	e.int(o.BalanceCents)
	return e.b
}

func decodePaymentOutput(b []byte, o *PaymentOutput) error {
	d, err := openValue(b, tagPaymentOutput)
	if err != nil {
		return err
	}
	o.CW = d.int()
	o.CD = d.int()
	o.CID = d.int()
	o.Credit = d.str()
	o.BalanceCents = d.int64()
	return d.end()
}

func encodeOrderStatusOutput(o *OrderStatusOutput) []byte {
	e := newEncoder(tagOrderStatusOutput, 64+len(o.First)+len(o.Middle)+len(o.Last)+40*len(o.Lines))
	e.int(int64(o.CID))
	e.str(o.First)
	e.str(o.Middle)
	e.str(o.Last)
	e.int(o.BalanceCents)
	e.int(int64(o.OID))
	e.int(o.EntryD)
	e.int(int64(o.Carrier))
	e.count(len(o.Lines))
	for i := range o.Lines {
		orderLineFields(&e, &o.Lines[i])
	}
	return e.b
}

func decodeOrderStatusOutput(b []byte, o *OrderStatusOutput) error {
	d, err := openValue(b, tagOrderStatusOutput)
	if err != nil {
		return err
	}
	o.CID = d.int()
	o.First = d.str()
	o.Middle = d.str()
	o.Last = d.str()
	o.BalanceCents = d.int64()
	o.OID = d.int()
	o.EntryD = d.int64()
	o.Carrier = d.int()
	// Lines is a list even when empty, as the procedure reports it.
	o.Lines = make([]OrderLine, d.count(orderLineBytesMin, OrderLinesMax))
	for i := range o.Lines {
		readOrderLineFields(&d, &o.Lines[i])
	}
	return d.end()
}

// deliveredOrderBytesMin is the fewest bytes a DeliveredOrder's fields
// take: two one-byte varints.
const deliveredOrderBytesMin = 2

func encodeDeliveryOutput(o *DeliveryOutput) []byte {
	e := newEncoder(tagDeliveryOutput, 4+8*len(o.Delivered))
	e.count(len(o.Delivered))
	for _, x := range o.Delivered {
		e.int(int64(x.D))
		e.int(int64(x.OID))
	}
	return e.b
}

func decodeDeliveryOutput(b []byte, o *DeliveryOutput) error {
	d, err := openValue(b, tagDeliveryOutput)
	if err != nil {
		return err
	}
	o.Delivered = make([]DeliveredOrder, d.count(deliveredOrderBytesMin, DistrictsPerWarehouse))
	for i := range o.Delivered {
		o.Delivered[i].D = d.int()
		o.Delivered[i].OID = d.int()
	}
	return d.end()
}

func encodeStockLevelOutput(o *StockLevelOutput) []byte {
	e := newEncoder(tagStockLevelOutput, 8)
	e.int(int64(o.Count))
	e.int(int64(o.Items))
	return e.b
}

func decodeStockLevelOutput(b []byte, o *StockLevelOutput) error {
	d, err := openValue(b, tagStockLevelOutput)
	if err != nil {
		return err
	}
	o.Count = d.int()
	o.Items = d.int()
	return d.end()
}
