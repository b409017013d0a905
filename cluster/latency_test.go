package cluster

import (
	"testing"
	"time"

	"github.com/flexkv/flexkv/internal/testaddr"
	"github.com/flexkv/flexkv/internal/testcluster"
	"github.com/flexkv/flexkv/kv/kvpb"
)

// TestTwoGroupTransferOverWAN: over an emulated round trip of 40 ms between
// two groups, a transaction to both is not executed at the second before a
// send from the first has crossed: 20 ms (real mode).
func TestTwoGroupTransferOverWAN(t *testing.T) {
	cfg := testcluster.Layout(t, "flexcast", testaddr.Cluster)
	l := startLocalConfig(t, Config{Cluster: cfg, Latency: testcluster.WANMatrix(t), Dir: t.TempDir()})
	ctx := ctxTimeout(t, 30*time.Second)
	one := int64(1)
	tx := &kvpb.Txn{Then: []*kvpb.Op{
		{Kind: kvpb.OpKind_OP_KIND_ADD, Key: []byte("w/0001/x"), Int: -one},
		{Kind: kvpb.OpKind_OP_KIND_ADD, Key: []byte("w/0004/x"), Int: one},
	}}
	// A retry (callLeader) only makes the elapsed time longer: the bound
	// below is a lower one.
	sid := openSession(t, l, "eu-west-1")
	start := time.Now()
	var resp *kvpb.TxnResponse
	err := callLeader(t, l, "eu-west-1", func(c kvpb.KVClient) (err error) {
		resp, err = c.Txn(ctx, &kvpb.TxnRequest{ClientId: sid, Seq: 1, Body: &kvpb.TxnRequest_Txn{Txn: tx}})
		return err
	})
	if err != nil {
		t.Fatalf("txn: %v", err)
	}
	var aw *kvpb.AwaitResponse
	err = callLeader(t, l, "eu-west-3", func(c kvpb.KVClient) (err error) {
		aw, err = c.Await(ctx, &kvpb.AwaitRequest{Id: resp.GetPiece().GetId()})
		return err
	})
	if err != nil {
		t.Fatalf("await: %v", err)
	}
	elapsed := time.Since(start)
	if !aw.GetPiece().GetSucceeded() {
		t.Fatalf("await answer %v", aw)
	}
	if oneWay := 20 * time.Millisecond; elapsed < oneWay {
		t.Errorf("the transaction was executed at eu-west-3 %v after it was submitted at eu-west-1, want at least the one-way delay %v", elapsed, oneWay)
	}
}
