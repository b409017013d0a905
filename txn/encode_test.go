package txn

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/flexkv/flexkv/internal/wire"
)

// sampleTxns cover every kind, both operands, negative and extreme ints,
// empty values and binary keys.
func sampleTxns(t testing.TB) []*Txn {
	t.Helper()
	txs := []*Txn{
		mustParse(t, designTransfer),
		mustParse(t, mixedTxn),
		mustParse(t, `{"if":[{"key":"w/0001/a","cmp":"!=","value":""}],"then":[{"op":"put","key":"w/0001/b","value":""},{"op":"delete","key":"w/0001/c"},`+
			`{"op":"scan","key":"w/0001/","end":"w/0002/","limit":1024}],"else":[{"op":"add","key":"w/0001/d","int":-9223372036854775808}]}`),
		mustParse(t, `{"then":[{"op":"add","key":"w/0001/a","int":-1,"wrap":true},{"op":"add","key":"w/0001/a","int":1,"wrap":false}]}`),
	}
	txs = append(txs, &Txn{
		If:   []Compare{{Key: []byte{0, 0xff, 1}, Cmp: CmpLess, Int: i64(9223372036854775807)}},
		Then: []Op{{Kind: OpPut, Key: []byte{0xff}, Value: []byte{0, 1, 2}}},
	})
	return txs
}

func TestEncodingRoundTrip(t *testing.T) {
	for _, tx := range sampleTxns(t) {
		b := AppendTxn(nil, tx)
		got, err := DecodeTxn(b)
		if err != nil {
			t.Fatalf("DecodeTxn(AppendTxn(%s)): %v", jsonOf(tx), err)
		}
		if !equalTxn(got, tx) {
			t.Errorf("round trip: got %s, want %s", jsonOf(got), jsonOf(tx))
		}
		// Deterministic, and appends after what b holds.
		if again := AppendTxn([]byte("prefix"), got); !bytes.Equal(again[len("prefix"):], b) || string(again[:len("prefix")]) != "prefix" {
			t.Errorf("re-encoding differs: %x, want %x", again, b)
		}
		// The decoded transaction does not alias the input.
		clear(b)
		if !equalTxn(got, tx) {
			t.Errorf("decoded transaction changed with its input")
		}
	}
}

// TestEncodingKnownBytes pins the format: a change is a new version.
func TestEncodingKnownBytes(t *testing.T) {
	tx := &Txn{
		If:   []Compare{{Key: []byte("k"), Cmp: CmpGreaterEqual, Int: i64(-3)}, {Key: []byte("k"), Cmp: CmpEqual, Value: []byte{}}},
		Then: []Op{{Kind: OpAdd, Key: []byte("k"), Int: 2}, {Kind: OpScan, Key: []byte("a"), End: []byte("b"), Limit: 300}, {Kind: OpAdd, Key: []byte("k"), Int: -1, Wrap: true}},
		Else: []Op{{Kind: OpPut, Key: []byte("k"), Value: []byte("v")}, {Kind: OpGet, Key: []byte("k")}, {Kind: OpDelete, Key: []byte("k")}},
	}
	want := []byte{
		1,               // version
		2,               // compares
		1, 'k', 6, 0, 5, // k >= int -3 (zigzag 5)
		1, 'k', 1, 1, 0, // k = value ""
		3,            // then
		4, 1, 'k', 4, // add k 2 (zigzag 4)
		5, 1, 'a', 1, 'b', 0xac, 0x02, // scan [a, b) limit 300
		0x84, 1, 'k', 1, // add k -1, wrapping (zigzag 1)
		3,                 // else
		2, 1, 'k', 1, 'v', // put k v
		1, 1, 'k', // get k
		3, 1, 'k', // delete k
	}
	if got := AppendTxn(nil, tx); !bytes.Equal(got, want) {
		t.Errorf("got  %v\nwant %v", got, want)
	}
}

func TestDecodeTxnRejects(t *testing.T) {
	valid := AppendTxn(nil, mustParse(t, designTransfer))
	tooMany := []byte{1, 0, OpsMax + 1}
	for range OpsMax + 1 {
		tooMany = append(tooMany, byte(OpGet), 1, 'k')
	}
	tooMany = append(tooMany, 0)
	tests := []struct {
		name    string
		b       []byte
		want    string
		corrupt bool // wraps wire.ErrCorrupt; else matches ErrInvalid
	}{
		{"empty", nil, "unexpected end of input", true},
		{"other version", append([]byte{2}, valid[1:]...), "txn encoding version 2, want 1", true},
		{"truncated", valid[:len(valid)-1], "txn: decode: wire: corrupt encoding", true},
		{"trailing byte", append(append([]byte{}, valid...), 0), "1 trailing bytes", true},
		{"count beyond input", []byte{1, 100}, "count 100 exceeds input", true},
		{"too many ops", tooMany, "more than OpsMax (64)", true},
		{"unknown kind", []byte{1, 0, 1, 9, 1, 'k', 0}, "op kind 9", true},
		{"wrap on a put", []byte{1, 0, 1, 0x82, 1, 'k', 1, 'v', 0}, "txn: then[0]: field wrap does not apply to op put", false},
		{"unknown operand tag", []byte{1, 1, 1, 'k', 1, 7, 0, 0, 0, 0}, "operand tag 7", true},
		{"limit too big", []byte{1, 0, 1, 5, 1, 'a', 1, 'b', 0x81, 0x08, 0}, "scan limit 1025", true},
		{"unknown cmp", []byte{1, 1, 1, 'k', 0, 0, 2, 0, 0}, "txn: if[0]: unknown cmp Cmp(0)", false},
		{"empty key", []byte{1, 0, 1, 1, 0, 0}, "txn: then[0].key: partition: invalid key", false},
		{"empty transaction", []byte{1, 0, 0, 0}, "txn: empty", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := DecodeTxn(tt.b)
			if err == nil {
				t.Fatal("accepted")
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q, want it to contain %q", err, tt.want)
			}
			if tt.corrupt && !errors.Is(err, wire.ErrCorrupt) {
				t.Errorf("error %q does not wrap wire.ErrCorrupt", err)
			}
			if !tt.corrupt && !errors.Is(err, ErrInvalid) {
				t.Errorf("error %q does not match ErrInvalid", err)
			}
		})
	}
}

// FuzzDecodeTxn: decoding never panics; what decodes re-encodes to bytes
// that decode to an equal transaction and encode identically, within the
// overhead that PayloadMax allows for.
func FuzzDecodeTxn(f *testing.F) {
	for _, tx := range sampleTxns(f) {
		f.Add(AppendTxn(nil, tx))
	}
	f.Add([]byte{1, 0, 1, 5, 1, 'a', 1, 'b', 0x81, 0x08, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		tx, err := DecodeTxn(b)
		if err != nil {
			return
		}
		e := AppendTxn(nil, tx)
		back, err := DecodeTxn(e)
		if err != nil {
			t.Fatalf("re-encoding of a decoded transaction does not decode: %v", err)
		}
		if !equalTxn(back, tx) {
			t.Fatalf("round trip: got %s, want %s", jsonOf(back), jsonOf(tx))
		}
		if e2 := AppendTxn(nil, back); !bytes.Equal(e2, e) {
			t.Fatalf("encoding not canonical: %x then %x", e, e2)
		}
		n := len(tx.If) + len(tx.Then) + len(tx.Else)
		if over := len(e) - len(AppendTxn(nil, &Txn{})) - keyBytes(tx); over > n*elementOverheadMax {
			t.Fatalf("%d elements encode with %d bytes of overhead, more than %d each", n, over, elementOverheadMax)
		}
	})
}

// FuzzParseJSON: parsing never panics; what parses marshals to JSON that
// parses to an equal transaction and marshals identically.
func FuzzParseJSON(f *testing.F) {
	f.Add([]byte(designTransfer))
	f.Add([]byte(mixedTxn))
	for _, tx := range sampleTxns(f) {
		f.Add([]byte(jsonOf(tx)))
	}
	f.Add([]byte(`{"then":[{"op":"scan","key":"a","end":"b","limit":3}],"if":[{"key":"k","cmp":"<","value":"\u00e9\ud800"}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		tx, err := ParseJSON(data)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %q does not match ErrInvalid", err)
			}
			return
		}
		out, err := tx.MarshalJSON()
		if err != nil {
			t.Fatalf("MarshalJSON of a parsed transaction: %v", err)
		}
		back, err := ParseJSON(out)
		if err != nil {
			t.Fatalf("ParseJSON(%s): %v", out, err)
		}
		if !equalTxn(back, tx) {
			t.Fatalf("round trip through %s changed the transaction", out)
		}
		if out2, _ := back.MarshalJSON(); !bytes.Equal(out2, out) {
			t.Fatalf("JSON not canonical: %s then %s", out, out2)
		}
	})
}
