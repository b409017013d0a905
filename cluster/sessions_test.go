package cluster

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/flexkv/flexkv/api/apipb"
	"github.com/flexkv/flexkv/client"
	"github.com/flexkv/flexkv/internal/testaddr"
	"github.com/flexkv/flexkv/internal/testcluster"
	"github.com/flexkv/flexkv/partition"
)

// TestSessionExpiry, end to end over TLS: a transfer between two groups
// runs once under a session; its retry is a duplicate while the session
// lives; once the session has been idle for its lifetime of log time (other
// clients keep the group busy, so that its log time runs), the retry is
// refused with FailedPrecondition "session expired" and does not run
// again. The Go client, whose session at the group expired the same way,
// opens a new one and its next write succeeds.
func TestSessionExpiry(t *testing.T) {
	cfg := testcluster.Layout(t, "flexcast", testaddr.Cluster)
	lc := Config{Cluster: cfg, Dir: t.TempDir(), MetricsAddr: "127.0.0.1:0"}
	// A second of a busy group: enough for the first run and its retry
	// on a loaded machine (25 ticks expired before the first run once).
	const sessionTicks = 50
	lc.Replication.State.SessionTicks = sessionTicks
	l := startLocalConfig(t, lc)
	ctx := ctxTimeout(t, time.Minute)
	c, err := client.New(ctx, client.Config{Endpoints: l.Endpoints(), TLS: l.ClientTLS(), Sessions: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if err := c.Put(ctx, []byte("w/0001/s"), []byte("go")); err != nil {
		t.Fatalf("client put: %v", err)
	}

	sid := openSession(t, l, "eu-west-1")
	req := &apipb.TxnRequest{ClientId: sid, Seq: 1, Body: &apipb.TxnRequest_Txn{Txn: &apipb.Txn{Then: []*apipb.Op{
		{Kind: apipb.OpKind_OP_KIND_ADD, Key: []byte("w/0001/n"), Int: -1},
		{Kind: apipb.OpKind_OP_KIND_ADD, Key: []byte("w/0004/n"), Int: 1},
	}}}}
	txn := func() error {
		return callLeader(t, l, "eu-west-1", func(c apipb.KVClient) error {
			_, err := c.Txn(ctx, req)
			return err
		})
	}
	checkFollowerRefuses(ctx, t, l, cfg.Groups[0], req)
	for i := range 2 { // the first run, and a retry within the session's life
		if err := txn(); err != nil {
			t.Fatalf("txn %d: %v", i, err)
		}
	}

	refused := idleUntilRefused(ctx, t, l, txn)
	if status.Code(refused) != codes.FailedPrecondition || !strings.Contains(refused.Error(), apipb.SessionExpiredText) {
		t.Fatalf("the retry after the session expired: %v, want FailedPrecondition %q", refused, apipb.SessionExpiredText)
	}
	for _, kv := range []struct{ key, want string }{{"w/0001/n", "-1"}, {"w/0004/n", "1"}} {
		v, found, err := c.Get(ctx, []byte(kv.key))
		if err != nil || !found || string(v) != kv.want {
			t.Errorf("%s = %q (found %v, %v), want %s: the transfer ran once", kv.key, v, found, err, kv.want)
		}
	}
	// The client's own session at eu-west-1 expired too: its write opens a
	// new one.
	if err := c.Put(ctx, []byte("w/0001/s"), []byte("again")); err != nil {
		t.Fatalf("client put after its session expired: %v", err)
	}
	if v, _, err := c.Get(ctx, []byte("w/0001/s")); err != nil || string(v) != "again" {
		t.Errorf("w/0001/s = %q (%v), want again", v, err)
	}
	checkSessionRenewed(t, l, cfg.Groups[0], sessionTicks)
}

// checkFollowerRefuses checks that a follower of group g refuses req before
// proposing it, with Unavailable and a trailer that says it did not run.
func checkFollowerRefuses(ctx context.Context, t *testing.T, l *Local, g partition.GroupConfig, req *apipb.TxnRequest) {
	t.Helper()
	// A follower refuses before proposing, and says the write did not run.
	for _, r := range g.Replicas {
		if r.ID == l.Leader(g.Name) {
			continue
		}
		cc, err := grpc.NewClient(r.GRPC, clientCreds(l), directCalls)
		if err != nil {
			t.Fatal(err)
		}
		var md metadata.MD
		_, err = apipb.NewKVClient(cc).Txn(ctx, req, grpc.Trailer(&md))
		cc.Close()
		if status.Code(err) != codes.Unavailable || len(md.Get(apipb.NotRunTrailer)) == 0 {
			t.Errorf("txn at follower %s: %v, trailer %v: want Unavailable with %s", r.ID, err, md, apipb.NotRunTrailer)
		}
		break
	}
}

// idleUntilRefused keeps eu-west-1 busy with anonymous puts, calling txn
// now and then, until txn fails, and returns its error.
func idleUntilRefused(ctx context.Context, t *testing.T, l *Local, txn func() error) error {
	t.Helper()
	// Other clients keep eu-west-1 busy (anonymous puts: no session)
	// while the session stays idle; then the retry is refused. A retry
	// that comes too soon is a use that keeps the session alive: the
	// stretch starts again.
	// The retry comes every retryEvery puts (20 ms apart and more): about
	// twice the session's life, so that it is refused at the first or
	// second try.
	const retryEvery = 80
	var refused error
	for i := 0; refused == nil; i++ {
		if i == 10*retryEvery {
			t.Fatalf("the session was never refused after %d puts of other clients%s", i, describe(l))
		}
		err := callLeader(t, l, "eu-west-1", func(c apipb.KVClient) error {
			_, err := c.Put(ctx, &apipb.PutRequest{Key: []byte(fmt.Sprintf("w/0001/other%d", i%10)), Value: []byte("x")})
			return err
		})
		if err != nil {
			t.Fatalf("anonymous put %d: %v", i, err)
		}
		time.Sleep(20 * time.Millisecond)
		if i%retryEvery == retryEvery-1 {
			if err := txn(); err != nil {
				refused = err
			}
		}
	}
	return refused
}

// checkSessionRenewed checks in the metrics of l that group g refused a
// Put (the client's, after its session expired), opened the sessions of
// the test and ran its log time past sessionTicks.
func checkSessionRenewed(t *testing.T, l *Local, g partition.GroupConfig, sessionTicks int) {
	t.Helper()
	// It did so after a refusal, which the server counted: the renewal
	// was exercised, not skipped by a session that happened to live.
	f := testcluster.ScrapeHTTP(t, l.MetricsAddr())
	if n := f.Sum("flexkv_request_errors_total", map[string]string{"group": "eu-west-1", "method": "Put", "code": codes.FailedPrecondition.String()}); n < 1 {
		t.Errorf("%v Put calls refused at eu-west-1, want the client's first attempt after its session expired", n)
	}
	if n := f.Sum("flexkv_request_seconds", map[string]string{"group": "eu-west-1", "method": "OpenSession"}); n < 3 {
		t.Errorf("%v OpenSession calls at eu-west-1, want 3 at least: the client's two and the raw one", n)
	}
	for _, r := range g.Replicas {
		if tk := f.Sum("flexkv_log_time_ticks", map[string]string{"replica": r.ID}); tk < float64(sessionTicks) {
			t.Errorf("replica %s: log time %v ticks, want %d at least (a session expired)", r.ID, tk, sessionTicks)
		}
	}
}

// TestSessionResultsAcknowledged, end to end: with room for two anonymous
// results per replica and anonymous traffic at both destinations, a
// session's transfer is still answered by Await and by a retry with its
// first result; once the session's next request ran, both say
// FailedPrecondition "acknowledged", and nothing ran twice.
func TestSessionResultsAcknowledged(t *testing.T) {
	cfg := testcluster.Layout(t, "flexcast", testaddr.Cluster)
	l := startLocalConfig(t, Config{Cluster: cfg, Dir: t.TempDir(), ResultsMax: 2})
	ctx := ctxTimeout(t, time.Minute)
	sid := openSession(t, l, "eu-west-1")
	transfer := func(seq uint64) *apipb.TxnRequest {
		return &apipb.TxnRequest{ClientId: sid, Seq: seq, Body: &apipb.TxnRequest_Txn{Txn: &apipb.Txn{Then: []*apipb.Op{
			{Kind: apipb.OpKind_OP_KIND_ADD, Key: []byte("w/0001/n"), Int: -1},
			{Kind: apipb.OpKind_OP_KIND_ADD, Key: []byte("w/0004/n"), Int: 1},
		}}}}
	}
	txn := func(seq uint64) (*apipb.PieceResult, error) {
		var piece *apipb.PieceResult
		err := callLeader(t, l, "eu-west-1", func(c apipb.KVClient) error {
			r, err := c.Txn(ctx, transfer(seq))
			piece = r.GetPiece()
			return err
		})
		return piece, err
	}
	await := func(group string, seq uint64) (*apipb.PieceResult, error) {
		var piece *apipb.PieceResult
		err := callLeader(t, l, group, func(c apipb.KVClient) error {
			r, err := c.Await(ctx, &apipb.AwaitRequest{ClientId: sid, Seq: seq})
			piece = r.GetPiece()
			return err
		})
		return piece, err
	}
	first, err := txn(1)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		for _, k := range []string{"w/0001/other", "w/0004/other"} {
			group := map[string]string{"w/0001/other": "eu-west-1", "w/0004/other": "eu-west-3"}[k]
			err := callLeader(t, l, group, func(c apipb.KVClient) error {
				_, err := c.Put(ctx, &apipb.PutRequest{Key: []byte(k), Value: []byte(fmt.Sprint(i))})
				return err
			})
			if err != nil {
				t.Fatalf("anonymous put %d: %v", i, err)
			}
		}
	}
	again, err := txn(1)
	if err != nil || again.String() != first.String() {
		t.Errorf("retry after 40 anonymous results: %v, %v; want the first result %v", again, err, first)
	}
	remote, err := await("eu-west-3", 1)
	if err != nil || len(remote.GetResults()) != 1 || remote.GetResults()[0].GetInt() != 1 {
		t.Errorf("await at eu-west-3 after 40 anonymous results: %v, %v", remote, err)
	}

	if _, err := txn(2); err != nil {
		t.Fatal(err)
	}
	if _, err := await("eu-west-3", 2); err != nil {
		t.Fatal(err)
	}
	for _, g := range []string{"eu-west-1", "eu-west-3"} {
		if _, err := await(g, 1); status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), apipb.ResultAcknowledgedText) {
			t.Errorf("await of the acknowledged result at %s: %v, want FailedPrecondition %q", g, err, apipb.ResultAcknowledgedText)
		}
	}
	if _, err := txn(1); status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), apipb.ResultAcknowledgedText) {
		t.Errorf("retry of the acknowledged request: %v, want FailedPrecondition %q", err, apipb.ResultAcknowledgedText)
	}
	for _, kv := range []struct{ group, key, want string }{{"eu-west-1", "w/0001/n", "-2"}, {"eu-west-3", "w/0004/n", "2"}} {
		var got string
		err := callLeader(t, l, kv.group, func(c apipb.KVClient) error {
			r, err := c.Get(ctx, &apipb.GetRequest{Key: []byte(kv.key)})
			got = string(r.GetValue())
			return err
		})
		if err != nil || got != kv.want {
			t.Errorf("%s = %q (%v), want %s: each transfer ran once", kv.key, got, err, kv.want)
		}
	}
}
