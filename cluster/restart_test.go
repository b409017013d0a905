package cluster

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/flexkv/flexkv/api/apipb"
	"github.com/flexkv/flexkv/client"
	"github.com/flexkv/flexkv/internal/testaddr"
	"github.com/flexkv/flexkv/internal/testcluster"
	"github.com/flexkv/flexkv/partition"
	"github.com/flexkv/flexkv/txn"
)

// TestRestartKeepsData stops the whole cluster and starts it again on the
// same data: every committed value is there, the client sessions too (a
// retry from before the restart is a duplicate, not run again), and the
// cluster takes new writes.
func TestRestartKeepsData(t *testing.T) {
	cfg := testcluster.Layout(t, "flexcast", testaddr.Cluster)
	dir := t.TempDir()
	l := startLocal(t, cfg, dir)
	ctx := ctxTimeout(t, time.Minute)
	c, err := client.New(ctx, client.Config{Endpoints: l.Endpoints(), TLS: l.ClientTLS()})
	if err != nil {
		t.Fatal(err)
	}
	want := writeBeforeRestart(ctx, t, c)
	// A transfer under a session of its own, to retry after the restart.
	sid := openSession(t, l, "eu-west-1")
	once := func(l *Local, seq uint64) (*apipb.TxnResponse, error) {
		var resp *apipb.TxnResponse
		err := callLeader(t, l, "eu-west-1", func(kv apipb.KVClient) (err error) {
			resp, err = kv.Txn(ctx, &apipb.TxnRequest{ClientId: sid, Seq: seq, Body: &apipb.TxnRequest_Txn{Txn: &apipb.Txn{Then: []*apipb.Op{
				{Kind: apipb.OpKind_OP_KIND_ADD, Key: []byte("w/0001/once"), Int: 1},
				{Kind: apipb.OpKind_OP_KIND_ADD, Key: []byte("w/0006/once"), Int: -1},
			}}}})
			return err
		})
		return resp, err
	}
	first, err := once(l, 1)
	if err != nil {
		t.Fatalf("txn under a session: %v", err)
	}
	want["w/0001/once"], want["w/0006/once"] = "1", "-1"
	c.Close()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}

	l2 := startLocal(t, cfg, dir)
	c2, err := client.New(ctx, client.Config{Endpoints: l2.Endpoints(), TLS: l2.ClientTLS()})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	retry, err := once(l2, 1)
	if err != nil {
		t.Fatalf("the retry after the restart: %v", err)
	}
	if got, want := retry.GetPiece().GetResults()[0].GetInt(), first.GetPiece().GetResults()[0].GetInt(); got != want {
		t.Errorf("the retry after the restart answers %d, the first run %d: want the first result", got, want)
	}
	if _, err := once(l2, 2); err != nil {
		t.Fatalf("the session's next request after the restart: %v", err)
	}
	want["w/0001/once"], want["w/0006/once"] = "2", "-2"
	for k, v := range want {
		got, found, err := c2.Get(ctx, []byte(k))
		if err != nil || !found || string(got) != v {
			t.Errorf("after restart %s = %q (found %v, err %v), want %q", k, got, found, err, v)
		}
	}
	checkReplicatedKey(ctx, t, l2, cfg)
	res, err := c2.Txn(ctx, &txn.Txn{Then: []txn.Op{{Kind: txn.OpAdd, Key: []byte("w/0001/sum"), Int: 1}}})
	if err != nil {
		t.Fatalf("write after restart: %v", err)
	}
	if got := strconv.FormatInt(res.Results[0].Int, 10); got != "56" {
		t.Errorf("add after restart = %s, want 56", got)
	}
}

// writeBeforeRestart writes 20 keys in each of the six warehouses, ten
// two-group transactions and a replicated key through c, and returns what
// each key must hold.
func writeBeforeRestart(ctx context.Context, t *testing.T, c *client.Client) map[string]string {
	t.Helper()
	want := map[string]string{}
	for w := 1; w <= 6; w++ {
		for i := range 20 {
			k := fmt.Sprintf("w/%04d/key/%02d", w, i)
			v := fmt.Sprintf("value %d.%d", w, i)
			if err := c.Put(ctx, []byte(k), []byte(v)); err != nil {
				t.Fatalf("put %s: %v", k, err)
			}
			want[k] = v
		}
	}
	// Two-group transactions too, and a replicated key.
	for i := range 10 {
		amount := int64(i + 1)
		tx := &txn.Txn{Then: []txn.Op{
			{Kind: txn.OpAdd, Key: []byte("w/0001/sum"), Int: amount},
			{Kind: txn.OpAdd, Key: []byte("w/0006/sum"), Int: -amount},
		}}
		if _, err := c.Txn(ctx, tx); err != nil {
			t.Fatalf("txn %d: %v", i, err)
		}
	}
	want["w/0001/sum"], want["w/0006/sum"] = "55", "-55"
	if err := c.Put(ctx, []byte("item/42"), []byte("widget")); err != nil {
		t.Fatalf("put item: %v", err)
	}
	want["item/42"] = "widget"
	return want
}

// checkReplicatedKey checks that the replicated key item/42 is in every
// group of cfg: it reads it at each as home.
func checkReplicatedKey(ctx context.Context, t *testing.T, l *Local, cfg *partition.ClusterConfig) {
	t.Helper()
	for _, g := range cfg.Groups {
		cg, err := client.New(ctx, client.Config{Endpoints: l.Endpoints(), TLS: l.ClientTLS(), Region: g.Region})
		if err != nil {
			t.Fatal(err)
		}
		got, found, err := cg.Get(ctx, []byte("item/42"))
		cg.Close()
		if err != nil || !found || string(got) != "widget" {
			t.Errorf("item/42 at %s = %q (found %v, err %v)", g.Name, got, found, err)
		}
	}
}
