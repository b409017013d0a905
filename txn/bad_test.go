package txn

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/flexkv/flexkv/partition"
)

// TestBadJSON: every transaction here is rejected, by ParseJSON or by
// Validate, with an error that names the problem and its position.
func TestBadJSON(t *testing.T) {
	pm := testPartitionMap(t, testTopology(t))
	big := strings.Repeat("v", ValueMax+1)
	longKey := "w/0001/" + strings.Repeat("k", partition.KeyMax)
	manyOps := `{"then":[` + strings.Repeat(`{"op":"get","key":"w/0001/a"},`, OpsMax) + `{"op":"get","key":"w/0001/a"}]}`
	// 8 puts of ValueMax bytes: within OpsMax, beyond BytesMax.
	var heavy []string
	for range BytesMax/ValueMax + 1 {
		heavy = append(heavy, fmt.Sprintf(`{"op":"put","key":"w/0001/a","value":"%s"}`, strings.Repeat("v", ValueMax)))
	}
	tests := []struct {
		name, json, want string
		noPartition      bool // the error wraps partition.ErrNoPartition
	}{
		{"not JSON", `{"if":[`, `txn: if: invalid JSON: unexpected EOF`, false},
		{"not an object", `[]`, `txn: got array, want object`, false},
		{"null", `null`, `txn: got null, want object`, false},
		{"trailing data", `{"then":[{"op":"get","key":"w/0001/a"}]} {}`, `txn: trailing data after the transaction: object`, false},
		{"unknown top field", `{"iff":[]}`, `txn: unknown field "iff"`, false},
		{"field case differs", `{"Then":[]}`, `txn: unknown field "Then"`, false},
		{"field twice", `{"then":[],"then":[]}`, `txn: field "then" given twice`, false},
		{"then is null", `{"then":null}`, `txn: then: got null, want array`, false},
		{"then is an object", `{"then":{}}`, `txn: then: got object, want array`, false},
		{"op is not an object", `{"then":["get"]}`, `txn: then[0]: got string, want object`, false},
		{"empty transaction", `{"if":[],"then":[],"else":[]}`, `txn: empty: no compare and no operation`, false},
		{"unknown op", `{"then":[{"op":"get","key":"w/0001/a"},{"op":"ad","key":"w/0001/a","int":1}]}`, `txn: then[1]: unknown op "ad"`, false},
		{"missing op", `{"else":[{"key":"w/0001/a"}]}`, `txn: else[0]: missing op`, false},
		{"missing key", `{"then":[{"op":"get"}]}`, `txn: then[0]: missing key`, false},
		{"unknown op field", `{"then":[{"op":"get","key":"w/0001/a","vaule":"x"}]}`, `txn: then[0]: unknown field "vaule"`, false},
		{"op field twice", `{"then":[{"op":"get","key":"w/0001/a","key":"w/0001/b"}]}`, `txn: then[0]: field "key" given twice`, false},
		{"key is a number", `{"then":[{"op":"get","key":7}]}`, `txn: then[0].key: got number 7, want string`, false},
		{"int is a string", `{"then":[{"op":"add","key":"w/0001/a","int":"5"}]}`, `txn: then[0].int: got string, want integer`, false},
		{"int is a fraction", `{"then":[{"op":"add","key":"w/0001/a","int":5.5}]}`, `txn: then[0].int: 5.5 is not an integer in the int64 range`, false},
		{"int in exponent form", `{"then":[{"op":"add","key":"w/0001/a","int":1e3}]}`, `txn: then[0].int: 1e3 is not an integer`, false},
		{"int overflows", `{"then":[{"op":"add","key":"w/0001/a","int":9223372036854775808}]}`, `txn: then[0].int: 9223372036854775808 is not an integer in the int64 range`, false},
		{"put without value", `{"then":[{"op":"put","key":"w/0001/a"}]}`, `txn: then[0]: op put without value`, false},
		{"add without int", `{"then":[{"op":"add","key":"w/0001/a"}]}`, `txn: then[0]: op add without int`, false},
		{"get with value", `{"then":[{"op":"get","key":"w/0001/a","value":"x"}]}`, `txn: then[0]: field value does not apply to op get`, false},
		{"delete with int", `{"then":[{"op":"delete","key":"w/0001/a","int":0}]}`, `txn: then[0]: field int does not apply to op delete`, false},
		{"put with limit", `{"then":[{"op":"put","key":"w/0001/a","value":"x","limit":1}]}`, `txn: then[0]: field limit does not apply to op put`, false},
		{"put with wrap", `{"then":[{"op":"put","key":"w/0001/a","value":"x","wrap":true}]}`, `txn: then[0]: field wrap does not apply to op put`, false},
		{"wrap not a boolean", `{"then":[{"op":"add","key":"w/0001/a","int":1,"wrap":1}]}`, `txn: then[0].wrap: got number 1, want boolean`, false},
		{"scan without end", `{"then":[{"op":"scan","key":"w/0001/a","limit":5}]}`, `txn: then[0]: op scan without end`, false},
		{"scan without limit", `{"then":[{"op":"scan","key":"w/0001/a","end":"w/0001/b"}]}`, `txn: then[0]: op scan without limit`, false},
		{"scan limit 0", `{"then":[{"op":"scan","key":"w/0001/a","end":"w/0001/b","limit":0}]}`, `txn: then[0].limit: 0, want 1..ScanLimitMax (1024)`, false},
		{"scan limit too big", `{"then":[{"op":"scan","key":"w/0001/a","end":"w/0001/b","limit":1025}]}`, `txn: then[0].limit: 1025, want 1..ScanLimitMax (1024)`, false},
		{"scan end before key", `{"then":[{"op":"scan","key":"w/0001/b","end":"w/0001/a","limit":5}]}`, `txn: then[0]: scan end "w/0001/a" is not after key "w/0001/b"`, false},
		{"scan empty range", `{"then":[{"op":"scan","key":"w/0001/a","end":"w/0001/a","limit":5}]}`, `is not after key`, false},
		{"scan of no partition", `{"then":[{"op":"scan","key":"x/1","end":"x/9","limit":5}]}`, `txn: then[0]: scan: partition: range ["x/1", "x/9"): no partition overlaps it (it starts after the last partition, w0004 ["w/0004/", "w/0005/") group 2)`, true},
		{"scan of a gap", `{"then":[{"op":"scan","key":"j","end":"w/0001/","limit":5}]}`, `txn: then[0]: scan: partition: range ["j", "w/0001/"): no partition overlaps it (it lies between item`, true},
		{"empty key", `{"then":[{"op":"get","key":""}]}`, `txn: then[0].key: partition: invalid key "": empty`, false},
		{"key too long", `{"then":[{"op":"get","key":"` + longKey + `"}]}`, `txn: then[0].key: partition: invalid key "w/0001/kkk`, false},
		{"value too long", `{"then":[{"op":"put","key":"w/0001/a","value":"` + big + `"}]}`, `txn: then[0].value: 65537 bytes, more than ValueMax (65536)`, false},
		{"too many ops", manyOps, `txn: more than OpsMax (64) compares and operations`, false},
		{"too many bytes", `{"then":[` + strings.Join(heavy, ",") + `]}`, `txn: 524352 bytes of keys and values, more than BytesMax (458752)`, false},
		{"key in no partition", `{"then":[{"op":"get","key":"w/0001/a"},{"op":"put","key":"x/1","value":"v"}]}`, `txn: then[1].key: partition: key "x/1": no partition holds the key`, true},
		{"compare key in no partition", `{"if":[{"key":"a","cmp":"=","value":""}]}`, `txn: if[0].key: partition: key "a": no partition holds the key`, true},
		{"unknown cmp", `{"if":[{"key":"w/0001/a","cmp":"==","int":1}]}`, `txn: if[0]: unknown cmp "=="`, false},
		{"compare without cmp", `{"if":[{"key":"w/0001/a","int":1}]}`, `txn: if[0]: missing cmp`, false},
		{"compare without key", `{"if":[{"cmp":"=","int":1}]}`, `txn: if[0]: missing key`, false},
		{"compare with int and value", `{"if":[{"key":"w/0001/a","cmp":"=","int":1,"value":"1"}]}`, `txn: if[0]: both int and value given, want one`, false},
		{"compare with neither", `{"if":[{"key":"w/0001/a","cmp":"<"}]}`, `txn: if[0]: neither int nor value given, want one`, false},
		{"compare with op field", `{"if":[{"key":"w/0001/a","cmp":"<","int":1,"op":"get"}]}`, `txn: if[0]: unknown field "op"`, false},
		{"compare value too long", `{"if":[{"key":"w/0001/a","cmp":"=","value":"` + big + `"}]}`, `txn: if[0].value: 65537 bytes`, false},
		{"cmp is a number", `{"if":[{"key":"w/0001/a","cmp":1,"int":1}]}`, `txn: if[0].cmp: got number 1, want string`, false},
	}
	if len(tests) < 30 {
		t.Fatalf("%d cases, want at least 30", len(tests))
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tx, err := ParseJSON([]byte(tt.json))
			if err == nil {
				if err = tx.Validate(pm); err == nil {
					t.Fatalf("accepted: %s", jsonOf(tx))
				}
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q\nwant it to contain %q", err, tt.want)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("error %q does not match ErrInvalid", err)
			}
			if got := errors.Is(err, partition.ErrNoPartition); got != tt.noPartition {
				t.Errorf("errors.Is(%q, partition.ErrNoPartition) = %v, want %v", err, got, tt.noPartition)
			}
		})
	}
}

// TestBadGoTxn: transactions built in Go reach Validate without the
// parser's checks; Validate catches what the JSON form cannot express.
func TestBadGoTxn(t *testing.T) {
	pm := testPartitionMap(t, testTopology(t))
	key := []byte("w/0001/a")
	tests := []struct {
		name string
		tx   *Txn
		want string
	}{
		{"nil", nil, "txn: nil transaction"},
		{"zero op kind", &Txn{Then: []Op{{Key: key}}}, "txn: then[0]: unknown op OpKind(0)"},
		{"op kind out of range", &Txn{Else: []Op{{Kind: 9, Key: key}}}, "txn: else[0]: unknown op OpKind(9)"},
		{"zero cmp", &Txn{If: []Compare{{Key: key, Int: i64(1)}}}, "txn: if[0]: unknown cmp Cmp(0)"},
		{"get with end", &Txn{Then: []Op{{Kind: OpGet, Key: key, End: key}}}, "txn: then[0]: field end does not apply to op get"},
		{"add with value", &Txn{Then: []Op{{Kind: OpAdd, Key: key, Value: []byte("1")}}}, "txn: then[0]: field value does not apply to op add"},
		{"get with wrap", &Txn{Then: []Op{{Kind: OpGet, Key: key, Wrap: true}}}, "txn: then[0]: field wrap does not apply to op get"},
		{"scan with int", &Txn{Then: []Op{{Kind: OpScan, Key: key, End: []byte("w/0001/b"), Limit: 1, Int: 2}}}, "txn: then[0]: field int does not apply to op scan"},
		{"negative limit", &Txn{Then: []Op{{Kind: OpScan, Key: key, End: []byte("w/0001/b"), Limit: -1}}}, "txn: then[0].limit: -1, want 1..ScanLimitMax"},
		{"too many compares", &Txn{If: make([]Compare, OpsMax+1)}, "txn: 65 compares and operations, more than OpsMax (64)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.tx.Validate(pm)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Validate: %v\nwant an error containing %q", err, tt.want)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("error %q does not match ErrInvalid", err)
			}
		})
	}
	if err := (&Txn{Then: []Op{{Kind: OpGet, Key: key}}}).Validate(nil); err == nil {
		t.Error("Validate(nil partition map) accepted")
	}
}

// TestValidateDoesNotMutate: Validate leaves a transaction as it was, valid
// or not.
func TestValidateDoesNotMutate(t *testing.T) {
	pm := testPartitionMap(t, testTopology(t))
	for _, s := range []string{
		`{"if":[{"key":"w/0001/a","cmp":">=","int":5}],"then":[{"op":"scan","key":"w/0001/a","end":"w/0001/z","limit":3}],"else":[{"op":"put","key":"w/0001/a","value":""}]}`,
		`{"then":[{"op":"get","key":"w/0001/a"},{"op":"put","key":"x/1","value":"v"}]}`,
	} {
		tx := mustParse(t, s)
		before := mustParse(t, s)
		_ = tx.Validate(pm)
		if !equalTxn(tx, before) {
			t.Errorf("Validate changed %s into %s", s, jsonOf(tx))
		}
	}
}
