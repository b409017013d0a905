package api

import (
	"errors"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/flexkv/flexkv/api/apipb"
	"github.com/flexkv/flexkv/txn"
)

// FuzzTxnFromProto: any wire message either converts to a transaction that
// validates (and converts back to an equal message) or is rejected with an
// error matching txn.ErrInvalid; it never panics.
func FuzzTxnFromProto(f *testing.F) {
	for _, tx := range sampleTxns() {
		b, err := proto.Marshal(TxnToProto(tx))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		var p apipb.Txn
		if err := (proto.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(data, &p); err != nil {
			return
		}
		tx, err := TxnFromProto(&p)
		if err != nil {
			if !errors.Is(err, txn.ErrInvalid) {
				t.Fatalf("error %q does not match txn.ErrInvalid", err)
			}
			return
		}
		if err := tx.Validate(catchAll); err != nil {
			t.Fatalf("accepted a transaction that does not validate: %v", err)
		}
		back := TxnToProto(tx)
		if !proto.Equal(back, &p) {
			t.Fatalf("TxnToProto(TxnFromProto(p)) = %v, want %v", back, &p)
		}
		// The conversion is a bijection on accepted messages: a second
		// trip changes nothing.
		again, err := TxnFromProto(back)
		if err != nil {
			t.Fatalf("second trip: %v", err)
		}
		if !proto.Equal(TxnToProto(again), back) {
			t.Fatal("second trip changed the transaction")
		}
	})
}
