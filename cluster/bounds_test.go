package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/flexkv/flexkv/api/apipb"
	"github.com/flexkv/flexkv/client"
	"github.com/flexkv/flexkv/internal/testaddr"
	"github.com/flexkv/flexkv/internal/testcluster"
	"github.com/flexkv/flexkv/server"
	"github.com/flexkv/flexkv/txn"
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
	sid := openSession(t, l, cfg.Groups[0].Name)
	req := &apipb.TxnRequest{ClientId: sid, Seq: 1, Body: &apipb.TxnRequest_Txn{Txn: &apipb.Txn{
		If:   []*apipb.Compare{{Key: []byte("w/0003/a"), Cmp: apipb.Cmp_CMP_EQUAL, Operand: &apipb.Compare_Value{Value: []byte("x")}}},
		Then: []*apipb.Op{{Kind: apipb.OpKind_OP_KIND_PUT, Key: []byte("w/0001/a"), Value: []byte("y")}},
	}}}
	start := time.Now()
	var took time.Duration
	err := callLeader(t, l, cfg.Groups[0].Name, func(kv apipb.KVClient) error {
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
	err = callLeader(t, l, cfg.Groups[0].Name, func(kv apipb.KVClient) error {
		_, err := kv.Await(context.Background(), &apipb.AwaitRequest{ClientId: sid, Seq: 1})
		return err
	})
	if status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("Await of the stuck transaction = %v, want DeadlineExceeded", err)
	}
}

// A scan of more than a client may receive in one answer (4 MiB by
// default): each answer stays within the server's byte bound, says where
// the rest starts, and the Go client returns the whole range.
func TestScanBytesPaged(t *testing.T) {
	cfg := testcluster.Layout(t, "flexcast", testaddr.Cluster)
	l := startLocal(t, cfg, t.TempDir())
	ctx := ctxTimeout(t, time.Minute)
	c, err := client.New(ctx, client.Config{Endpoints: l.Endpoints(), TLS: l.ClientTLS()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const n = 80 // 80 x 60 KiB = 4.8 MiB
	value := bytes.Repeat([]byte("v"), 60<<10)
	for i := range n {
		if err := c.Put(ctx, fmt.Appendf(nil, "w/0001/%03d", i), value); err != nil {
			t.Fatal(err)
		}
	}
	var first *apipb.ScanResponse
	err = callLeader(t, l, cfg.Groups[0].Name, func(kv apipb.KVClient) error {
		var err error
		first, err = kv.Scan(ctx, &apipb.ScanRequest{Start: []byte("w/0001/"), End: []byte("w/0002/")})
		return err
	})
	if err != nil {
		t.Fatalf("raw Scan: %v", err)
	}
	size := 0
	for _, kv := range first.GetKvs() {
		size += len(kv.GetKey()) + len(kv.GetValue())
	}
	k := len(first.GetKvs())
	if size > server.ScanBytesMaxDefault || k == 0 || k == n || string(first.GetNextStart()) != fmt.Sprintf("w/0001/%03d", k) {
		t.Errorf("first page: %d keys, %d bytes, next %q; want 1..%d keys within %d bytes, next the key after the last", k, size, first.GetNextStart(), n-1, server.ScanBytesMaxDefault)
	}
	kvs, err := c.Scan(ctx, []byte("w/0001/"), []byte("w/0002/"), 0)
	if err != nil {
		t.Fatalf("client Scan: %v", err)
	}
	if len(kvs) != n {
		t.Fatalf("client Scan: %d keys, want %d", len(kvs), n)
	}
	for i, kv := range kvs {
		if string(kv.Key) != fmt.Sprintf("w/0001/%03d", i) || !bytes.Equal(kv.Value, value) {
			t.Fatalf("client Scan: key %d is %q (%d bytes)", i, kv.Key, len(kv.Value))
		}
	}
	if kvs, err := c.Scan(ctx, []byte("w/0001/"), []byte("w/0002/"), n/2+1); err != nil || len(kvs) != n/2+1 {
		t.Errorf("client Scan limit %d: %d keys, %v", n/2+1, len(kvs), err)
	}
	// A transaction's scan of the same range is bounded by its stored result
	// (kv.ValueMax): too large, it comes back truncated, its reads lost, and
	// the answer still fits what the client receives.
	_, err = c.Txn(ctx, &txn.Txn{Then: []txn.Op{{Kind: txn.OpScan, Key: []byte("w/0001/"), End: []byte("w/0002/"), Limit: n}}})
	if !errors.Is(err, txn.ErrTruncated) {
		t.Errorf("Txn scanning %d bytes = %v, want txn.ErrTruncated", n*len(value), err)
	}
}

// TestBusyNamesUnreachableGroup: with a group cut off from the others, its
// peers' outboxes to it fill up, and an entry group refuses new work with
// ResourceExhausted naming the group that does not acknowledge (DESIGN 12);
// after the heal the cut group catches up and the transactions commit.
func TestBusyNamesUnreachableGroup(t *testing.T) {
	cfg := testcluster.Layout(t, "flexcast", testaddr.Cluster)
	lc := Config{Cluster: cfg, Dir: t.TempDir(), WaitMax: 200 * time.Millisecond}
	lc.Replication.State.Channel.OutboxMax = 4
	l := startLocalConfig(t, lc)
	l.SetGroupCut(cfg.Groups[1].Name, true) // eu-west-3, which owns w/0003/
	var busy error
	sid := openSession(t, l, cfg.Groups[0].Name)
	for seq := uint64(1); seq <= 40 && busy == nil; seq++ {
		req := &apipb.TxnRequest{ClientId: sid, Seq: seq, Body: &apipb.TxnRequest_Txn{Txn: &apipb.Txn{
			Then: []*apipb.Op{{Kind: apipb.OpKind_OP_KIND_PUT, Key: []byte("w/0001/b"), Value: []byte("y")}, {Kind: apipb.OpKind_OP_KIND_PUT, Key: []byte("w/0003/b"), Value: []byte("y")}},
		}}}
		err := callLeader(t, l, cfg.Groups[0].Name, func(kv apipb.KVClient) error {
			_, err := kv.Txn(ctxTimeout(t, 10*time.Second), req)
			return err
		})
		switch status.Code(err) {
		case codes.OK, codes.DeadlineExceeded: // accepted: its piece at the cut group waits
		case codes.ResourceExhausted:
			busy = err
		default:
			t.Fatalf("transaction %d: %v", seq, err)
		}
	}
	if busy == nil {
		t.Fatal("40 transactions to a cut-off group were all accepted: no back-pressure")
	}
	if want := "group " + cfg.Groups[1].Name + " is unreachable or slow"; !strings.Contains(busy.Error(), want) {
		t.Errorf("refusal %q does not name the cut group (want %q)", busy, want)
	}
	l.SetGroupCut(cfg.Groups[1].Name, false)
	ctx := ctxTimeout(t, 30*time.Second)
	c, err := client.New(ctx, client.Config{Endpoints: l.Endpoints(), TLS: l.ClientTLS()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Put(ctx, []byte("w/0003/c"), []byte("healed")); err != nil {
		t.Fatalf("after the heal: %v", err)
	}
	// The frames held in eu-west-1's outbox go out again at its next
	// resend: the accepted transactions reach eu-west-3.
	for {
		v, _, err := c.Get(ctx, []byte("w/0003/b"))
		if err == nil && string(v) == "y" {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("w/0003/b after the heal = %q, %v; want the accepted transactions applied%s", v, err, describe(l))
		}
		time.Sleep(50 * time.Millisecond)
	}
}
