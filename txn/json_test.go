package txn

import (
	"encoding/json"
	"testing"
)

// designTransfer is the transaction of DESIGN 7, on one line.
const designTransfer = `{"if":[{"key":"w/0001/acct","cmp":">=","int":5}],` +
	`"then":[{"op":"add","key":"w/0001/acct","int":-5},{"op":"add","key":"w/0002/acct","int":5}],` +
	`"else":[]}`

func TestParseJSONDesignExample(t *testing.T) {
	tx := mustParse(t, designTransfer)
	want := &Txn{
		If: []Compare{{Key: []byte("w/0001/acct"), Cmp: CmpGreaterEqual, Int: i64(5)}},
		Then: []Op{
			{Kind: OpAdd, Key: []byte("w/0001/acct"), Int: -5},
			{Kind: OpAdd, Key: []byte("w/0002/acct"), Int: 5},
		},
	}
	if !equalTxn(tx, want) {
		t.Fatalf("got %s, want %s", jsonOf(tx), jsonOf(want))
	}
	if got := jsonOf(tx); got != designTransfer {
		t.Errorf("MarshalJSON:\n got %s\nwant %s", got, designTransfer)
	}
	if err := tx.Validate(testPartitionMap(t, testTopology(t))); err != nil {
		t.Errorf("Validate: %v", err)
	}
	// json.Marshal of a Txn value uses MarshalJSON too (with its
	// HTML escaping of '>').
	b, err := json.Marshal(*tx)
	if err != nil {
		t.Fatal(err)
	}
	if back := mustParse(t, string(b)); !equalTxn(back, tx) {
		t.Errorf("json.Marshal(Txn) = %s, which parses to %s", b, jsonOf(back))
	}
}

// TestJSONCanonical: the canonical form of every field of every kind reads
// back equal and writes the same bytes; lenient forms (missing lists, other
// member order, spaces) read to the same transaction.
func TestJSONCanonical(t *testing.T) {
	canonical := `{"if":[{"key":"w/0001/a","cmp":"!=","value":""},{"key":"item/7","cmp":"<","int":-3}],` +
		`"then":[{"op":"get","key":"w/0001/a"},{"op":"put","key":"w/0001/b","value":"<&>"},{"op":"delete","key":"w/0001/c"},` +
		`{"op":"add","key":"w/0001/d","int":0},{"op":"add","key":"w/0001/d","int":-1,"wrap":true},{"op":"scan","key":"w/0001/","end":"w/0002/","limit":10}],` +
		`"else":[{"op":"put","key":"w/0001/é","value":""}]}`
	tx := mustParse(t, canonical)
	if got := jsonOf(tx); got != canonical {
		t.Errorf("MarshalJSON:\n got %s\nwant %s", got, canonical)
	}
	if tx.If[0].Value == nil || len(tx.If[0].Value) != 0 {
		t.Errorf(`compare "value":"" parsed to %#v, want a non-nil empty value`, tx.If[0].Value)
	}
	// encoding/json goes through MarshalJSON and UnmarshalJSON.
	var back Txn
	b, err := json.Marshal(tx)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !equalTxn(&back, tx) {
		t.Errorf("json round trip: got %s, want %s", jsonOf(&back), canonical)
	}

	lenient := " {\n \"then\" : [ {\"key\":\"w/0001/a\", \"op\":\"get\"} ] } \n"
	if got, want := jsonOf(mustParse(t, lenient)), `{"if":[],"then":[{"op":"get","key":"w/0001/a"}],"else":[]}`; got != want {
		t.Errorf("got %s, want %s", got, want)
	}
}

func TestUnmarshalJSONKeepsTxnOnError(t *testing.T) {
	tx := mustParse(t, designTransfer)
	if err := json.Unmarshal([]byte(`{"then":[{"op":"ad","key":"k"}]}`), tx); err == nil {
		t.Fatal("bad JSON accepted")
	}
	if got := jsonOf(tx); got != designTransfer {
		t.Errorf("after a failed Unmarshal: %s, want %s", got, designTransfer)
	}
}

func TestResultJSON(t *testing.T) {
	r := Result{
		ID:        "c3.17",
		Succeeded: true,
		Results: []OpResult{
			{Index: 0, Kind: OpGet, Key: []byte("k1"), Found: true, Value: []byte("v1")},
			{Index: 1, Kind: OpGet, Key: []byte("k2")},
			{Index: 2, Kind: OpPut, Key: []byte("k3")},
			{Index: 3, Kind: OpDelete, Key: []byte("k4")},
			{Index: 4, Kind: OpAdd, Key: []byte("k5"), Int: -7},
			{Index: 5, Kind: OpScan, Key: []byte("a"), KVs: []KV{{Key: []byte("a1"), Value: []byte("x")}, {Key: []byte("a2"), Value: []byte("")}}},
			{Index: 6, Kind: OpScan, Key: []byte("b")},
		},
		Destinations: []DestLatency{{Group: "eu-west-1", Ms: 12.3}, {Group: "us-east-1", Ms: 80}},
	}
	want := `{"id":"c3.17","succeeded":true,"results":[` +
		`{"op":"get","key":"k1","found":true,"value":"v1"},` +
		`{"op":"get","key":"k2","found":false},` +
		`{"op":"put","key":"k3"},` +
		`{"op":"delete","key":"k4"},` +
		`{"op":"add","key":"k5","int":-7},` +
		`{"op":"scan","key":"a","kvs":[{"key":"a1","value":"x"},{"key":"a2","value":""}]},` +
		`{"op":"scan","key":"b","kvs":[]}],` +
		`"destinations":[{"group":"eu-west-1","ms":12.3},{"group":"us-east-1","ms":80}]}`
	got, err := r.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	empty, err := json.Marshal(Result{ID: "c1.1"})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"id":"c1.1","succeeded":false,"results":[],"destinations":[]}`; string(empty) != want {
		t.Errorf("got  %s\nwant %s", empty, want)
	}
	if _, err := json.Marshal(OpResult{Kind: 0}); err == nil {
		t.Error("result of an invalid kind marshalled")
	}
}
