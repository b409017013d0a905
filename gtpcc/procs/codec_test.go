package procs

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// codecRows are a row of every type, every field set.
var codecRows = []any{
	&Warehouse{Name: "W1", Address: Address{"s1", "s2", "c", "st", "zip"}, Tax: 1234, YTD: -300000},
	&District{Name: "D1", Address: Address{"a", "", "ç", "XY", "123451111"}, Tax: 9, YTD: 1 << 40, NextOID: 3001},
	&Customer{First: "F", Middle: "OE", Last: "BARBARBAR", Address: Address{"1", "2", "3", "4", "5"}, Phone: "0123",
		Since: 1700000000000, Credit: "BC", CreditLimit: 5000000, Discount: 5000, Balance: -1000, YTDPayment: 10,
		PaymentCnt: 1, DeliveryCnt: 2, LastOrder: 77},
	&CustomerData{Data: strings.Repeat("d", 500)},
	&History{CID: 0, CLast: "ABLE", CD: 2, CW: 3, D: 4, W: 5, Date: 6, Amount: 7, Data: "x    y"},
	&Order{CID: 42, EntryD: 1, Carrier: 3, OLCnt: 15, AllLocal: true},
	&OrderLine{Item: 999999, SupplyW: 9999, DeliveryD: 0, Quantity: 10, Amount: 1 << 62, DistInfo: "dist"},
	&Stock{Quantity: 91, YTD: 3, OrderCnt: 2, RemoteCnt: 1, Data: "ORIGINAL"},
	&Item{Image: 5, Name: "item", Price: 10000, Data: "data"},
	&Scale{Items: 1000, CustomersPerDistrict: 100, OrdersPerDistrict: 100, NewOrdersPerDistrict: 30},
	&CustomerPayment{CD: 1, CID: 2, W: 3, D: 4, Amount: 5, Date: 6},
	&DeliveryCursor{NextOID: 3001},
}

// codecArgs are arguments of every procedure, every field set.
var codecArgs = []any{
	&NewOrderArgs{W: 1, D: 2, C: 3, EntryD: 4, Lines: []NewOrderLine{{1, 2, 3}, {999999, 9999, 10}}},
	&PaymentArgs{W: 1, D: 2, CW: 3, CD: 4, CID: 5, CLast: "PRI", Amount: 6, Date: 7},
	&OrderStatusArgs{W: 1, D: 2, CID: 3, CLast: "x"},
	&DeliveryArgs{W: 1, Carrier: 2, Date: 3},
	&StockLevelArgs{W: 1, D: 2, Threshold: 15},
	&LoadArgs{W: 9999, Table: TableOrder, From: 1, To: 6, Scale: Full, Date: 8},
}

// codecOutputs are outputs of every procedure, every field set, lists
// with several elements and empty ones.
var codecOutputs = []any{
	&NewOrderOutput{OID: 3001, TotalCents: 1 << 40},
	&NewOrderOutput{OID: 1, TotalCents: -5, Lines: []NewOrderLineOutput{{1, 100000, 3, 91}, {15, 7, 9999, 0}}},
	&NewOrderLineOutput{Line: 15, Item: 100000, SupplyW: 9999, StockQuantity: -3},
	&PaymentOutput{CW: 1, CD: 2, CID: 3, Credit: "BC", BalanceCents: -1000},
	&OrderStatusOutput{CID: 3, First: "F", Middle: "OE", Last: "ABLE", BalanceCents: -1, OID: 9, EntryD: 1 << 41,
		Carrier: 4, Lines: []OrderLine{{Item: 1, SupplyW: 2, DeliveryD: 3, Quantity: 4, Amount: 5, DistInfo: "dist"}, {}}},
	&OrderStatusOutput{CID: 1, Lines: []OrderLine{}},
	&DeliveryOutput{Delivered: []DeliveredOrder{{1, 3001}, {10, 2}}},
	&DeliveryOutput{Delivered: []DeliveredOrder{}},
	&StockLevelOutput{Count: 7, Items: 190},
}

// encodeOutputOf encodes out, an output or a pointer to one.
func encodeOutputOf(out any) []byte {
	if v := reflect.ValueOf(out); v.Kind() != reflect.Pointer {
		p := reflect.New(v.Type())
		p.Elem().Set(v)
		out = p.Interface()
	}
	return encodeOutput(out)
}

// TestCodecRoundTrip encodes a value of every type, decodes it back
// equal, shows it as JSON as encoding/json does, and refuses every
// truncation of it, a byte after it and another type.
func TestCodecRoundTrip(t *testing.T) {
	type codec struct {
		encode func(any) []byte
		decode func([]byte, any) error
	}
	rows := codec{Encode, func(b []byte, v any) error { return Decode([]byte("k"), b, v) }}
	args := codec{EncodeArgs, func(b []byte, v any) error { return DecodeArgs("p", b, v) }}
	outputs := codec{encodeOutputOf, decodeOutputValue}
	for _, tc := range slices.Concat(
		sliceWith(codecRows, rows),
		sliceWith(codecArgs, args),
		sliceWith(codecOutputs, outputs),
	) {
		c := tc.c.(codec)
		want := tc.v
		b := c.encode(want)
		if b[0] != FormatV1 {
			t.Errorf("%T: first byte %#x, want %#x", want, b[0], FormatV1)
		}
		if v := reflect.ValueOf(want).Elem().Interface(); string(c.encode(v)) != string(b) {
			t.Errorf("%T: a value and a pointer encode differently", want)
		}
		got := reflect.New(reflect.TypeOf(want).Elem()).Interface()
		if err := c.decode(b, got); err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("%T: decoded %+v, %v; want %+v", want, got, err, want)
		}
		js, ok, err := RowJSON(b)
		if wantJS, _ := json.Marshal(want); !ok || err != nil || string(js) != string(wantJS) {
			t.Errorf("%T: RowJSON = %s, %v, %v; want %s", want, js, ok, err, wantJS)
		}
		for n := range len(b) {
			got := reflect.New(reflect.TypeOf(want).Elem()).Interface()
			if err := c.decode(b[:n], got); err == nil {
				t.Errorf("%T: the first %d of %d bytes decode: %+v", want, n, len(b), got)
			}
		}
		if err := c.decode(append(b[:len(b):len(b)], 0), reflect.New(reflect.TypeOf(want).Elem()).Interface()); err == nil ||
			!strings.Contains(err.Error(), "1 bytes after the last field") {
			t.Errorf("%T with a byte after it: %v, want an error", want, err)
		}
	}
}

// TestCodecRefusals checks that Decode, decodeOutputValue, orderLineItem
// and RowJSON refuse a value of another type or format, a value cut short
// or too long, and say what they found.
func TestCodecRefusals(t *testing.T) {
	var d District
	for _, tc := range []struct {
		value []byte
		want  string
	}{
		{Encode(Stock{}), "stock row, want district row"},
		{[]byte(`{"name":"d","next_o_id":5}`), "JSON, the format of populations loaded before binary version 0xf1: reload it"},
		{[]byte{0xf2, tagDistrict}, "unknown format 0xf2"},
		{[]byte{FormatV1, 99}, "unknown type 99, want district row"},
		{nil, "empty"},
	} {
		if err := Decode([]byte("w/0001/d/01"), tc.value, &d); err == nil || !strings.Contains(err.Error(), tc.want) ||
			!strings.Contains(err.Error(), `"w/0001/d/01"`) {
			t.Errorf("Decode(%q) = %v, want an error naming the key with %q", tc.value, err, tc.want)
		}
	}
	// A customer row of the format that held C_DATA inline (tag 3).
	inline := []byte{FormatV1, tagCustomerInline, 2, 'F', 2, 'O', 'E'}
	var cu Customer
	if err := Decode([]byte("w/0001/c/01/0001"), inline, &cu); err == nil || !strings.Contains(err.Error(), "start from an empty cluster and run flexkv gtpcc load") {
		t.Errorf("Decode of a customer row with its data inline = %v, want an error saying to start from an empty cluster", err)
	}
	if _, ok, err := RowJSON(inline); !ok || err == nil || !strings.Contains(err.Error(), "start from an empty cluster and run flexkv gtpcc load") {
		t.Errorf("RowJSON of a customer row with its data inline = %v, %v; want an error saying to start from an empty cluster", ok, err)
	}
	var out PaymentOutput
	for _, tc := range []struct {
		value []byte
		want  string
	}{
		{[]byte(`{"c_w_id":1}`), "JSON, the output format of older servers"},
		{encodeOutput(&StockLevelOutput{}), "stock-level output, want payment output"},
		{[]byte{FormatV1, tagPaymentOutput, 2, 4, 6, 0x7f}, "truncated string at byte 5"},
	} {
		if err := decodeOutputValue(tc.value, &out); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("decodeOutputValue(%q) = %v, want an error with %q", tc.value, err, tc.want)
		}
	}
	line := Encode(&OrderLine{Item: 999999, SupplyW: 2, Quantity: 5, Amount: 10, DistInfo: "dist"})
	for n := range len(line) + 1 {
		var l OrderLine
		lerr := decodeOrderLine(line[:n], &l)
		if item, err := orderLineItem(line[:n]); (err == nil) != (lerr == nil) || (err == nil && item != 999999) {
			t.Errorf("the first %d bytes of an order line: orderLineItem = %d, %v; decodeOrderLine: %v", n, item, err, lerr)
		}
	}
	if _, err := orderLineItem(append(line[:len(line):len(line)], 0)); err == nil {
		t.Errorf("orderLineItem of an order line with a byte after it: no error")
	}
	var delivery DeliveryOutput
	if err := decodeOutputValue([]byte{FormatV1, tagDeliveryOutput, 0x7f, 2, 4}, &delivery); err == nil ||
		!strings.Contains(err.Error(), "truncated or bad list length at byte 2") {
		t.Errorf("a delivery output of 127 orders in 2 bytes: %v, want an error", err)
	}
	eleven := []byte{FormatV1, tagDeliveryOutput, 11}
	for range 11 {
		eleven = append(eleven, 2, 2)
	}
	if err := decodeOutputValue(eleven, &delivery); err == nil || !strings.Contains(err.Error(), "a list of 11 at byte 2, at most 10") {
		t.Errorf("a delivery output of 11 districts: %v, want an error", err)
	}
	for _, v := range [][]byte{nil, []byte("plain"), []byte(`{"a":1}`)} {
		if js, ok, err := RowJSON(v); ok || err != nil || js != nil {
			t.Errorf("RowJSON(%q) = %s, %v, %v; want not a row", v, js, ok, err)
		}
	}
	for _, v := range [][]byte{{FormatV1}, {FormatV1, 99}, {FormatV1, tagOrder, 1}} {
		if _, ok, err := RowJSON(v); !ok || err == nil {
			t.Errorf("RowJSON(%q) = %v, %v; want an error", v, ok, err)
		}
	}
}

type valueCodec struct{ v, c any }

func sliceWith(vs []any, c any) []valueCodec {
	out := make([]valueCodec, len(vs))
	for i, v := range vs {
		out[i] = valueCodec{v, c}
	}
	return out
}

// FuzzDecode decodes any bytes as every row, argument and output type: no panic,
// and what decodes encodes back to the same bytes.
func FuzzDecode(f *testing.F) {
	for _, v := range codecRows {
		f.Add(Encode(v))
	}
	for _, v := range codecArgs {
		f.Add(EncodeArgs(v))
	}
	for _, v := range codecOutputs {
		f.Add(encodeOutput(v))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, v := range codecRows {
			got := reflect.New(reflect.TypeOf(v).Elem()).Interface()
			if decodeRow(b, got) == nil && string(Encode(got)) != string(b) {
				t.Errorf("%T %q decodes to %+v, which encodes to %q", got, b, got, Encode(got))
			}
		}
		for _, v := range codecArgs {
			got := reflect.New(reflect.TypeOf(v).Elem()).Interface()
			if decodeArgs(b, got) == nil && string(EncodeArgs(got)) != string(b) {
				t.Errorf("%T %q decodes to %+v, which encodes to %q", got, b, got, EncodeArgs(got))
			}
		}
		for _, v := range codecOutputs {
			got := reflect.New(reflect.TypeOf(v).Elem()).Interface()
			if decodeOutputValue(b, got) == nil && string(encodeOutput(got)) != string(b) {
				t.Errorf("%T %q decodes to %+v, which encodes to %q", got, b, got, encodeOutput(got))
			}
		}
		var l OrderLine
		lerr := decodeOrderLine(b, &l)
		if item, err := orderLineItem(b); (err == nil) != (lerr == nil) || (err == nil && item != l.Item) {
			t.Errorf("order line %q: orderLineItem = %d, %v; decodeOrderLine = %+v, %v", b, item, err, l, lerr)
		}
		_, _, _ = RowJSON(b)
	})
}

// TestKeysAsFmt checks the key functions against the fmt formats they
// replace, for numbers within and beyond their widths and negative ones.
func TestKeysAsFmt(t *testing.T) {
	for _, n := range []int{-12345, -1, 0, 1, 7, 42, 99, 123, 9999, 10000, 999999, 12345678, 123456789, 1<<62 + 5} {
		m := n/3 + 1
		for _, tc := range []struct{ got, want []byte }{
			{WarehousePrefix(n), fmt.Appendf(nil, "w/%04d/", n)},
			{WarehouseKey(n), fmt.Appendf(nil, "w/%04d/wh", n)},
			{DistrictKey(n, m), fmt.Appendf(nil, "w/%04d/d/%02d", n, m)},
			{DeliveryCursorKey(n, m), fmt.Appendf(nil, "w/%04d/dq/%02d", n, m)},
			{CustomerKey(m, n, n), fmt.Appendf(nil, "w/%04d/c/%02d/%04d", m, n, n)},
			{CustomerDataKey(m, n, n), fmt.Appendf(nil, "w/%04d/cd/%02d/%04d", m, n, n)},
			{HistoryKey(n, "c1.2"), fmt.Appendf(nil, "w/%04d/h/%s", n, "c1.2")},
			{CustomerPaymentKey(n, "c3.4"), fmt.Appendf(nil, "w/%04d/cp/%s", n, "c3.4")},
			{OrderKey(n, m, n), fmt.Appendf(nil, "w/%04d/o/%02d/%08d", n, m, n)},
			{NewOrderKey(m, n, m), fmt.Appendf(nil, "w/%04d/no/%02d/%08d", m, n, m)},
			{OrderLineKey(n, m, n, m), fmt.Appendf(nil, "w/%04d/ol/%02d/%08d/%02d", n, m, n, m)},
			{orderLinePrefix(m, n, m), fmt.Appendf(nil, "w/%04d/ol/%02d/%08d/", m, n, m)},
			{StockKey(m, n), fmt.Appendf(nil, "w/%04d/s/%06d", m, n)},
			{ItemKey(n), fmt.Appendf(nil, "item/%06d", n)},
		} {
			if string(tc.got) != string(tc.want) {
				t.Errorf("key %q, want %q", tc.got, tc.want)
			}
		}
	}
}
