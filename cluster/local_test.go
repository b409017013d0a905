package cluster

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/flexkv/flexkv/api/apipb"
	"github.com/flexkv/flexkv/internal/testaddr"
	"github.com/flexkv/flexkv/internal/testcluster"
	"github.com/flexkv/flexkv/replication"
)

func TestPutGetThroughTheLog(t *testing.T) {
	l := startLocal(t, testcluster.Layout(t, "flexcast", testaddr.Cluster), t.TempDir())
	ctx := ctxTimeout(t, 20*time.Second)
	sid := openSession(t, l, "eu-west-1")
	err := callLeader(t, l, "eu-west-1", func(c apipb.KVClient) error {
		_, err := c.Put(ctx, &apipb.PutRequest{ClientId: sid, Seq: 1, Key: []byte("w/0001/x"), Value: []byte("5")})
		return err
	})
	if err != nil {
		t.Fatalf("put: %v", err)
	}
	var got *apipb.GetResponse
	err = callLeader(t, l, "eu-west-1", func(c apipb.KVClient) (err error) {
		got, err = c.Get(ctx, &apipb.GetRequest{ClientId: 7, Seq: 2, Key: []byte("w/0001/x")})
		return err
	})
	if err != nil {
		t.Fatalf("get: %v", err)
	}
	if !got.GetFound() || string(got.GetValue()) != "5" {
		t.Fatalf("get = %v %q, want found 5", got.GetFound(), got.GetValue())
	}
}

func TestTwoGroupTransfer(t *testing.T) {
	l := startLocal(t, testcluster.Layout(t, "flexcast", testaddr.Cluster), t.TempDir())
	ctx := ctxTimeout(t, 30*time.Second)
	sid := openSession(t, l, "eu-west-1")
	err := callLeader(t, l, "eu-west-1", func(c apipb.KVClient) error {
		_, err := c.Put(ctx, &apipb.PutRequest{ClientId: sid, Seq: 1, Key: []byte("w/0001/x"), Value: []byte("5")})
		return err
	})
	if err != nil {
		t.Fatalf("put: %v", err)
	}
	one := int64(5)
	tx := &apipb.Txn{
		If: []*apipb.Compare{{Key: []byte("w/0001/x"), Cmp: apipb.Cmp_CMP_GREATER_EQUAL, Operand: &apipb.Compare_Int{Int: one}}},
		Then: []*apipb.Op{
			{Kind: apipb.OpKind_OP_KIND_ADD, Key: []byte("w/0001/x"), Int: -one},
			{Kind: apipb.OpKind_OP_KIND_ADD, Key: []byte("w/0004/x"), Int: one},
		},
	}
	// A retry carries the same client id and seq: the transfer is applied
	// once however often it is sent.
	var resp *apipb.TxnResponse
	err = callLeader(t, l, "eu-west-1", func(c apipb.KVClient) (err error) {
		resp, err = c.Txn(ctx, &apipb.TxnRequest{ClientId: sid, Seq: 2, Body: &apipb.TxnRequest_Txn{Txn: tx}})
		return err
	})
	if err != nil {
		t.Fatalf("txn: %v", err)
	}
	if !resp.GetExecuted() || !resp.GetPiece().GetSucceeded() || resp.GetPiece().GetAborted() != "" {
		t.Fatalf("txn answer %v", resp)
	}
	// Awaited as an older client does, by the string id the answer carries:
	// the deprecated form keeps working.
	var aw *apipb.AwaitResponse
	err = callLeader(t, l, "eu-west-3", func(c apipb.KVClient) (err error) {
		aw, err = c.Await(ctx, &apipb.AwaitRequest{Id: resp.GetPiece().GetId()}) //nolint:staticcheck // the deprecated form, on purpose
		return err
	})
	if err != nil {
		t.Fatalf("await: %v", err)
	}
	if !aw.GetPiece().GetSucceeded() {
		t.Fatalf("await answer %v", aw)
	}
	for _, kv := range []struct {
		group, key, want string
	}{{"eu-west-1", "w/0001/x", "0"}, {"eu-west-3", "w/0004/x", "5"}} {
		var got *apipb.GetResponse
		err := callLeader(t, l, kv.group, func(c apipb.KVClient) (err error) {
			got, err = c.Get(ctx, &apipb.GetRequest{Key: []byte(kv.key)})
			return err
		})
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
//
// A 200ms election timeout: the cut-off replica learns it has no leader
// after about one, and gives up after max(4 election timeouts, 1s).
func TestAwaitAtCutOffReplica(t *testing.T) {
	l := startLocalConfig(t, Config{Cluster: testcluster.Layout(t, "flexcast", testaddr.Cluster), Dir: t.TempDir(),
		Replication: replication.Config{ElectionTimeout: 200 * time.Millisecond}})
	follower := followerOf(t, l, "eu-west-3")
	if err := l.SetCut(follower, true); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := l.SetCut(follower, false); err != nil {
			t.Error(err)
		}
	}()
	_, rc, _ := l.cfg.Cluster.Replica(follower)
	c := dial(t, l, rc.GRPC)
	ctx := ctxTimeout(t, 20*time.Second)
	start := time.Now()
	// While it still believes in the leader it sends the client there (a
	// follower without the result always does); once it knows it has
	// none, it says so.
	for {
		_, err := c.Await(ctx, &apipb.AwaitRequest{ClientId: 5, Seq: 1})
		st, _ := status.FromError(err)
		if st.Code() != codes.Unavailable {
			t.Fatalf("await at a cut-off replica: %v, want Unavailable", err)
		}
		if strings.Contains(st.Message(), "no leader") {
			break
		}
		if !strings.Contains(st.Message(), "not the leader") {
			t.Fatalf("await at a cut-off replica: %v, want Unavailable naming the leader, or the missing leader", err)
		}
		if time.Since(start) > 10*time.Second {
			t.Fatalf("the cut-off replica still names a leader after %s: %v", time.Since(start), err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("the answer took %s", d)
	}
}
