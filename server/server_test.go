package server

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/flexkv/flexkv/kv/kvpb"
)

func TestPutGetThroughTheLog(t *testing.T) {
	l := startLocal(t, testCluster(t, "flexcast"), t.TempDir())
	c := leaderClient(t, l, "eu-west-1")
	ctx := ctxTimeout(t, 10*time.Second)
	if _, err := c.Put(ctx, &kvpb.PutRequest{ClientId: 7, Seq: 1, Key: []byte("w/0001/x"), Value: []byte("5")}); err != nil {
		t.Fatalf("put: %v", err)
	}
	got, err := c.Get(ctx, &kvpb.GetRequest{ClientId: 7, Seq: 2, Key: []byte("w/0001/x")})
	if err != nil {
		t.Fatalf("get: %v", err)
	}
	if !got.GetFound() || string(got.GetValue()) != "5" {
		t.Fatalf("get = %v %q, want found 5", got.GetFound(), got.GetValue())
	}
}

func TestTwoGroupTransfer(t *testing.T) {
	l := startLocal(t, testCluster(t, "flexcast"), t.TempDir())
	a := leaderClient(t, l, "eu-west-1")
	b := leaderClient(t, l, "eu-west-3")
	ctx := ctxTimeout(t, 10*time.Second)
	if _, err := a.Put(ctx, &kvpb.PutRequest{ClientId: 7, Seq: 1, Key: []byte("w/0001/x"), Value: []byte("5")}); err != nil {
		t.Fatalf("put: %v", err)
	}
	one := int64(5)
	tx := &kvpb.Txn{
		If: []*kvpb.Compare{{Key: []byte("w/0001/x"), Cmp: kvpb.Cmp_CMP_GREATER_EQUAL, Operand: &kvpb.Compare_Int{Int: one}}},
		Then: []*kvpb.Op{
			{Kind: kvpb.OpKind_OP_KIND_ADD, Key: []byte("w/0001/x"), Int: -one},
			{Kind: kvpb.OpKind_OP_KIND_ADD, Key: []byte("w/0004/x"), Int: one},
		},
	}
	resp, err := a.Txn(ctx, &kvpb.TxnRequest{ClientId: 7, Seq: 2, Body: &kvpb.TxnRequest_Txn{Txn: tx}})
	if err != nil {
		t.Fatalf("txn: %v", err)
	}
	if !resp.GetExecuted() || !resp.GetPiece().GetSucceeded() || resp.GetPiece().GetAborted() != "" {
		t.Fatalf("txn answer %v", resp)
	}
	aw, err := b.Await(ctx, &kvpb.AwaitRequest{Id: resp.GetPiece().GetId()})
	if err != nil {
		t.Fatalf("await: %v", err)
	}
	if !aw.GetPiece().GetSucceeded() {
		t.Fatalf("await answer %v", aw)
	}
	for _, kv := range []struct {
		c         kvpb.KVClient
		key, want string
	}{{a, "w/0001/x", "0"}, {b, "w/0004/x", "5"}} {
		got, err := kv.c.Get(ctx, &kvpb.GetRequest{Key: []byte(kv.key)})
		if err != nil {
			t.Fatalf("get %s: %v", kv.key, err)
		}
		if string(got.GetValue()) != kv.want {
			t.Errorf("%s = %q, want %q", kv.key, got.GetValue(), kv.want)
		}
	}
}

// TestAwaitAtCutOffReplica: a replica cut off from its group cannot make
// progress; a client waiting there is told so (Unavailable), and can ask
// another replica, instead of waiting for its deadline.
func TestAwaitAtCutOffReplica(t *testing.T) {
	l := startLocal(t, testCluster(t, "flexcast"), t.TempDir())
	leader := l.Leader("eu-west-3")
	var follower string
	for _, id := range l.Nodes() {
		if l.Group(id) == "eu-west-3" && id != leader {
			follower = id
			break
		}
	}
	if err := l.SetCut(follower, true); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := l.SetCut(follower, false); err != nil {
			t.Error(err)
		}
	}()
	_, rc, _ := l.cfg.Cluster.Replica(follower)
	c := dial(t, rc.GRPC)
	ctx := ctxTimeout(t, 20*time.Second)
	start := time.Now()
	_, err := c.Await(ctx, &kvpb.AwaitRequest{Id: "c5.1"})
	if st, _ := status.FromError(err); st.Code() != codes.Unavailable || !strings.Contains(st.Message(), "no leader") {
		t.Fatalf("await at a cut-off replica: %v, want Unavailable naming the missing leader", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("the answer took %s", d)
	}
}
