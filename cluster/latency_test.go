package cluster

import (
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/flexkv/flexkv/api/apipb"
	"github.com/flexkv/flexkv/internal/testaddr"
	"github.com/flexkv/flexkv/internal/testcluster"
)

// TestTwoGroupTransferOverWAN: over an emulated round trip of 40 ms between
// two groups, a transaction to both is not executed at the second before a
// send from the first has crossed: 20 ms (real mode).
func TestTwoGroupTransferOverWAN(t *testing.T) {
	cfg := testcluster.Layout(t, "flexcast", testaddr.Cluster)
	l := startLocalConfig(t, Config{Cluster: cfg, Latency: testcluster.WANMatrix(t), Dir: t.TempDir()})
	ctx := ctxTimeout(t, 30*time.Second)
	one := int64(1)
	tx := &apipb.Txn{Then: []*apipb.Op{
		{Kind: apipb.OpKind_OP_KIND_ADD, Key: []byte("w/0001/x"), Int: -one},
		{Kind: apipb.OpKind_OP_KIND_ADD, Key: []byte("w/0004/x"), Int: one},
	}}
	// A retry (callLeader) only makes the elapsed time longer: the bound
	// below is a lower one.
	sid := openSession(t, l, "eu-west-1")
	start := time.Now()
	var resp *apipb.TxnResponse
	err := callLeader(t, l, "eu-west-1", func(c apipb.KVClient) (err error) {
		resp, err = c.Txn(ctx, &apipb.TxnRequest{ClientId: sid, Seq: 1, Body: &apipb.TxnRequest_Txn{Txn: tx}})
		return err
	})
	if err != nil {
		t.Fatalf("txn: %v", err)
	}
	var aw *apipb.AwaitResponse
	err = callLeader(t, l, "eu-west-3", func(c apipb.KVClient) (err error) {
		aw, err = c.Await(ctx, &apipb.AwaitRequest{ClientId: resp.GetPiece().GetClientId(), Seq: resp.GetPiece().GetSeq()})
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

// TestWrappingTransferAnswersAlone: a transfer whose adds wrap needs no vote
// (DESIGN 6), so its lca answers with the other group cut off; the same
// transfer with checked adds waits for the other group's vote, and both
// complete at the other group after the heal.
func TestWrappingTransferAnswersAlone(t *testing.T) {
	cfg := testcluster.Layout(t, "flexcast", testaddr.Cluster)
	l := startLocalConfig(t, Config{Cluster: cfg, Dir: t.TempDir(), WaitMax: 300 * time.Millisecond})
	lca, other := cfg.Groups[0].Name, cfg.Groups[1].Name // eu-west-1 (w/0001/), eu-west-3 (w/0003/)
	// Two sessions, one transfer each: a session's next request would
	// acknowledge (drop) its first result.
	wrapping, checked := openSession(t, l, lca), openSession(t, l, lca)
	transfer := func(session uint64, wrap bool) *apipb.TxnRequest {
		return &apipb.TxnRequest{ClientId: session, Seq: 1, Body: &apipb.TxnRequest_Txn{Txn: &apipb.Txn{Then: []*apipb.Op{
			{Kind: apipb.OpKind_OP_KIND_ADD, Key: []byte("w/0001/t"), Int: -1, Wrap: wrap},
			{Kind: apipb.OpKind_OP_KIND_ADD, Key: []byte("w/0003/t"), Int: 1, Wrap: wrap},
		}}}}
	}
	l.SetGroupCut(other, true)
	var resp *apipb.TxnResponse
	err := callLeader(t, l, lca, func(c apipb.KVClient) (err error) {
		resp, err = c.Txn(ctxTimeout(t, 10*time.Second), transfer(wrapping, true))
		return err
	})
	if err != nil || !resp.GetPiece().GetSucceeded() {
		t.Fatalf("wrapping transfer with %s cut off: %v, %v; want the lca's answer", other, resp, err)
	}
	err = callLeaderOnce(t, l, lca, func(c apipb.KVClient) error {
		_, err := c.Txn(ctxTimeout(t, 10*time.Second), transfer(checked, false))
		return err
	})
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("checked transfer with %s cut off: %v; want DeadlineExceeded (its lca waits for the vote)", other, err)
	}
	l.SetGroupCut(other, false)
	ctx := ctxTimeout(t, 30*time.Second)
	for _, sid := range []uint64{wrapping, checked} {
		for _, g := range []string{lca, other} {
			var aw *apipb.AwaitResponse
			var err error
			// The servers' wait bound is short here: ask again until the
			// healed link has carried the transfer (a resend away).
			for {
				err = callLeader(t, l, g, func(c apipb.KVClient) (err error) {
					aw, err = c.Await(ctx, &apipb.AwaitRequest{ClientId: sid, Seq: 1})
					return err
				})
				if status.Code(err) != codes.DeadlineExceeded || ctx.Err() != nil {
					break
				}
			}
			if err != nil || !aw.GetPiece().GetSucceeded() {
				t.Fatalf("await c%d.1 at %s after the heal: %v, %v", sid, g, aw, err)
			}
		}
	}
}

// TestAwaitAtFollower: a follower that lacks a result sends the Await to
// its leader (Unavailable, the leader in the trailer) rather than waiting
// for its own apply, which lags the leader's by up to a raft round; one
// that has the result answers it.
func TestAwaitAtFollower(t *testing.T) {
	cfg := testcluster.Layout(t, "flexcast", testaddr.Cluster)
	l := startLocalConfig(t, Config{Cluster: cfg, Dir: t.TempDir()})
	const g = "eu-west-3"
	sid := openSession(t, l, g)
	_, lr, _ := cfg.Replica(l.Leader(g))
	_, fr, _ := cfg.Replica(followerOf(t, l, g))
	leaderAddr, follower := lr.GRPC, fr.GRPC
	fc := dial(t, l, follower)
	await := &apipb.AwaitRequest{ClientId: sid, Seq: 1}
	var md metadata.MD
	_, err := fc.Await(ctxTimeout(t, 5*time.Second), await, grpc.Trailer(&md))
	if status.Code(err) != codes.Unavailable || len(md.Get(apipb.LeaderTrailer)) != 1 || md.Get(apipb.LeaderTrailer)[0] != leaderAddr {
		t.Fatalf("await of a result not there yet at follower %s: %v, trailer %v; want Unavailable naming the leader %s", follower, err, md, leaderAddr)
	}
	err = callLeader(t, l, g, func(c apipb.KVClient) error {
		_, err := c.Txn(ctxTimeout(t, 10*time.Second), &apipb.TxnRequest{ClientId: sid, Seq: 1, Body: &apipb.TxnRequest_Txn{Txn: &apipb.Txn{Then: []*apipb.Op{
			{Kind: apipb.OpKind_OP_KIND_PUT, Key: []byte("w/0003/a"), Value: []byte("1")},
		}}}})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	// Once the follower applied it, the follower answers.
	deadline := time.Now().Add(10 * time.Second)
	for {
		aw, err := fc.Await(ctxTimeout(t, 5*time.Second), await)
		if err == nil {
			if !aw.GetPiece().GetSucceeded() {
				t.Fatalf("await at the follower: %v", aw)
			}
			break
		}
		if status.Code(err) != codes.Unavailable || time.Now().After(deadline) {
			t.Fatalf("await at the follower after the write: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
