package cluster

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/flexkv/flexkv/internal/testaddr"
	"github.com/flexkv/flexkv/internal/testcluster"
	"github.com/flexkv/flexkv/kv/kvpb"
)

// A transaction that cannot complete (it waits for the vote of a group
// that is down) ends at the server's wait bound, although the caller would
// wait much longer: DeadlineExceeded, saying so.
func TestTxnWaitBound(t *testing.T) {
	const bound = time.Second
	cfg := testcluster.Layout(t, "flexcast", testaddr.Cluster)
	l := startLocalConfig(t, Config{Cluster: cfg, Dir: t.TempDir(), WaitMax: bound})
	for _, r := range cfg.Groups[1].Replicas { // eu-west-3, which owns w/0003/
		if err := l.Stop(r.ID); err != nil {
			t.Fatal(err)
		}
	}
	req := &kvpb.TxnRequest{ClientId: 9, Seq: 1, Body: &kvpb.TxnRequest_Txn{Txn: &kvpb.Txn{
		If:   []*kvpb.Compare{{Key: []byte("w/0003/a"), Cmp: kvpb.Cmp_CMP_EQUAL, Operand: &kvpb.Compare_Value{Value: []byte("x")}}},
		Then: []*kvpb.Op{{Kind: kvpb.OpKind_OP_KIND_PUT, Key: []byte("w/0001/a"), Value: []byte("y")}},
	}}}
	start := time.Now()
	var took time.Duration
	err := callLeader(t, l, cfg.Groups[0].Name, func(kv kvpb.KVClient) error {
		start = time.Now()
		_, err := kv.Txn(ctxTimeout(t, time.Minute), req)
		took = time.Since(start)
		return err
	})
	if status.Code(err) != codes.DeadlineExceeded || !strings.Contains(err.Error(), "bound on a wait") {
		t.Fatalf("Txn with its other destination down = %v, want DeadlineExceeded from the server's bound%s", err, describe(l))
	}
	if took < bound || took > bound+5*time.Second {
		t.Errorf("Txn returned after %s, want about %s", took, bound)
	}
	// The same id again waits for the same outcome, bounded again.
	err = callLeader(t, l, cfg.Groups[0].Name, func(kv kvpb.KVClient) error {
		_, err := kv.Await(context.Background(), &kvpb.AwaitRequest{Id: "c9.1"})
		return err
	})
	if status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("Await of the stuck transaction = %v, want DeadlineExceeded", err)
	}
}
