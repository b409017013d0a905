package cluster

import (
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/flexkv/flexkv/api/apipb"
	"github.com/flexkv/flexkv/internal/testaddr"
	"github.com/flexkv/flexkv/internal/testcluster"
)

// TestMetricsLocalCluster runs puts and a two-group transaction on a local
// cluster and checks what its metrics endpoint reports, replica by replica.
func TestMetricsLocalCluster(t *testing.T) {
	cfg := testcluster.Layout(t, "flexcast", testaddr.Cluster)
	l := startLocalConfig(t, Config{Cluster: cfg, Dir: t.TempDir(), MetricsAddr: "127.0.0.1:0"})
	retried := makeMetricsCalls(t, l)

	// The followers execute in their own time: scrape until every replica
	// of the two groups has delivered and executed the transaction.
	groupOf := map[string]string{}
	for _, g := range cfg.Groups {
		for _, r := range g.Replicas {
			groupOf[r.ID] = g.Name
		}
	}
	f := scrapeUntilExecuted(t, l, groupOf)
	checkReplicaMetrics(t, f, groupOf)
	for _, g := range cfg.Groups {
		if n := f.Sum("flexkv_raft_leader", map[string]string{"group": g.Name}); n != 1 {
			t.Errorf("group %s: %v leaders, want 1", g.Name, n)
		}
	}
	checkCallCounts(t, f, retried)

	// The collector of one server reports that server alone.
	id := l.Leader("eu-west-3")
	one := testcluster.ScrapeHandler(t, l.nodes[id].srv.Metrics().Handler())
	if got := one.Series("flexkv_raft_leader", nil); len(got) != 1 || testcluster.Label(got[0], "replica") != id || testcluster.Value(got[0]) != 1 {
		t.Errorf("single server's flexkv_raft_leader = %v, want one series, replica %s, 1", got, id)
	}
}

// makeMetricsCalls makes TestMetricsLocalCluster's calls: a put in
// eu-west-1 and one in eu-west-3, a transaction of both groups and its
// await, and a refused empty transaction. It returns whether a call was
// retried at a new leader.
func makeMetricsCalls(t *testing.T, l *Local) (retried bool) {
	t.Helper()
	ctx := ctxTimeout(t, 30*time.Second)
	// Each call goes to its group's leader, again if it answers Unavailable
	// (a leader deposed in a stall of the machine). A retried call adds
	// calls, errors and perhaps deliveries to the counts checked below:
	// retried says that happened, and those counts are then lower bounds.
	call := func(group string, f func(apipb.KVClient) error) error {
		attempts := 0
		err := callLeader(t, l, group, func(c apipb.KVClient) error {
			attempts++
			return f(c)
		})
		retried = retried || attempts > 1
		return err
	}
	s1, s3 := openSession(t, l, "eu-west-1"), openSession(t, l, "eu-west-3")
	err := call("eu-west-1", func(c apipb.KVClient) error {
		_, err := c.Put(ctx, &apipb.PutRequest{ClientId: s1, Seq: 1, Key: []byte("w/0001/x"), Value: []byte("5")})
		return err
	})
	if err != nil {
		t.Fatalf("put: %v", err)
	}
	err = call("eu-west-3", func(c apipb.KVClient) error {
		_, err := c.Put(ctx, &apipb.PutRequest{ClientId: s3, Seq: 1, Key: []byte("w/0003/y"), Value: []byte("1")})
		return err
	})
	if err != nil {
		t.Fatalf("put: %v", err)
	}
	tx := &apipb.Txn{
		If: []*apipb.Compare{{Key: []byte("w/0001/x"), Cmp: apipb.Cmp_CMP_GREATER_EQUAL, Operand: &apipb.Compare_Int{Int: 5}}},
		Then: []*apipb.Op{
			{Kind: apipb.OpKind_OP_KIND_ADD, Key: []byte("w/0001/x"), Int: -5},
			{Kind: apipb.OpKind_OP_KIND_ADD, Key: []byte("w/0004/x"), Int: 5},
		},
	}
	var resp *apipb.TxnResponse
	err = call("eu-west-1", func(c apipb.KVClient) (err error) {
		resp, err = c.Txn(ctx, &apipb.TxnRequest{ClientId: s1, Seq: 2, Body: &apipb.TxnRequest_Txn{Txn: tx}})
		return err
	})
	if err != nil {
		t.Fatalf("txn: %v", err)
	}
	err = call("eu-west-3", func(c apipb.KVClient) error {
		_, err := c.Await(ctx, &apipb.AwaitRequest{ClientId: resp.GetPiece().GetClientId(), Seq: resp.GetPiece().GetSeq()})
		return err
	})
	if err != nil {
		t.Fatalf("await: %v", err)
	}
	err = call("eu-west-1", func(c apipb.KVClient) error {
		_, err := c.Txn(ctx, &apipb.TxnRequest{})
		return err
	})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("empty txn: %v, want InvalidArgument", err)
	}
	if retried {
		t.Logf("a call was retried at a new leader: the counts of calls, errors, sends and deliveries are checked as lower bounds")
	}
	return retried
}

// Scopes of flexkv_deliveries_total.
const scopeGlobal, scopeLocal = "global", "local"

// scrapeUntilExecuted scrapes l's metrics until every replica of groupOf
// but eu-central-1's has delivered the global transaction and executed
// two, or 10s passed, and returns the last scrape.
func scrapeUntilExecuted(t *testing.T, l *Local, groupOf map[string]string) testcluster.Families {
	t.Helper()
	done := func(f testcluster.Families) bool {
		for id, g := range groupOf {
			if g == "eu-central-1" {
				continue
			}
			if f.Sum("flexkv_deliveries_total", map[string]string{"replica": id, "scope": scopeGlobal}) < 1 ||
				f.Sum("flexkv_txn_executions_total", map[string]string{"replica": id}) < 2 {
				return false
			}
		}
		return true
	}
	var f testcluster.Families
	deadline := time.Now().Add(10 * time.Second)
	for {
		f = testcluster.ScrapeHTTP(t, l.MetricsAddr())
		if done(f) || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	return f
}

// checkReplicaMetrics checks each replica's series in f: one per other
// group where they are per group, no delivery at eu-central-1, and at the
// others the deliveries and executions of the calls.
func checkReplicaMetrics(t *testing.T, f testcluster.Families, groupOf map[string]string) {
	t.Helper()
	for id, g := range groupOf {
		r := map[string]string{"group": g, "replica": id}
		if len(f.Series("flexkv_raft_leader", r)) != 1 {
			t.Errorf("%s: %d flexkv_raft_leader series, want 1", id, len(f.Series("flexkv_raft_leader", r)))
		}
		for _, name := range []string{"flexkv_outbox_envelopes", "flexkv_outbox_bytes", "flexkv_backlog_bytes", "flexkv_holdback_bytes", "flexkv_busy_with"} {
			if n := len(f.Series(name, r)); n != 2 {
				t.Errorf("%s: %d %s series, want one per other group (2)", id, n, name)
			}
		}
		if v := f.Sum("flexkv_busy_with", r); v != 0 {
			t.Errorf("%s: flexkv_busy_with sums to %v in a healthy cluster, want 0", id, v)
		}
		if len(f.Series("flexkv_flexcast_history_entries", r)) != 1 {
			t.Errorf("%s: no flexkv_flexcast_history_entries", id)
		}
		if v := f.Sum("flexkv_raft_applied_index", r); v < 1 {
			t.Errorf("%s: raft applied index %v, want > 0", id, v)
		}
		globals := f.Sum("flexkv_deliveries_total", map[string]string{"replica": id, "scope": scopeGlobal})
		locals := f.Sum("flexkv_deliveries_total", map[string]string{"replica": id, "scope": scopeLocal})
		executed := f.Sum("flexkv_txn_executions_total", r)
		if g == "eu-central-1" {
			if globals != 0 || locals != 0 || executed != 0 {
				t.Errorf("%s (not a destination): %v global and %v local deliveries, %v executions, want none", id, globals, locals, executed)
			}
			continue
		}
		if globals != 1 || locals != 1 || executed != 2 {
			t.Errorf("%s: %v global and %v local deliveries, %v executions, want 1, 1, 2", id, globals, locals, executed)
		}
		if v := f.Sum("flexkv_raft_log_wal_written_bytes_total", r); v <= 0 {
			t.Errorf("%s: raft log WAL bytes %v, want > 0", id, v)
		}
		// The transaction's add reads its key: through the row cache.
		if v := f.Sum("flexkv_row_cache_hits_total", r) + f.Sum("flexkv_row_cache_misses_total", r); v < 1 {
			t.Errorf("%s: %v row cache reads, want at least the add's", id, v)
		}
	}
}

// checkCallCounts checks the counts of sends, calls, errors, deliveries and
// aborts in f, as lower bounds where retried adds to them.
func checkCallCounts(t *testing.T, f testcluster.Families, retried bool) {
	t.Helper()
	w1 := map[string]string{"group": "eu-west-1"}
	for _, tc := range []struct {
		what    string
		got     float64
		want    float64
		atLeast bool
		retries bool // a retried call adds to it: at least want if one was
	}{
		{"eu-west-1 msg sends", f.Sum("flexkv_sends_total", map[string]string{"group": "eu-west-1", "kind": "msg"}), 1, false, true},
		{"eu-west-1 vote sends", f.Sum("flexkv_sends_total", map[string]string{"group": "eu-west-1", "kind": "vote"}), 1, true, true},
		{"eu-west-3 msg sends", f.Sum("flexkv_sends_total", map[string]string{"group": "eu-west-3", "kind": "msg"}), 0, false, false},
		{"eu-west-1 Put calls", f.Sum("flexkv_request_seconds", map[string]string{"group": "eu-west-1", "method": "Put"}), 1, false, true},
		{"eu-west-1 Txn calls", f.Sum("flexkv_request_seconds", map[string]string{"group": "eu-west-1", "method": "Txn"}), 2, false, true},
		{"eu-west-3 Await calls", f.Sum("flexkv_request_seconds", map[string]string{"group": "eu-west-3", "method": "Await"}), 1, false, true},
		{"eu-west-1 Txn InvalidArgument", f.Sum("flexkv_request_errors_total", map[string]string{"group": "eu-west-1", "method": "Txn", "code": codes.InvalidArgument.String()}), 1, false, false},
		{"eu-west-1 errors", f.Sum("flexkv_request_errors_total", w1), 1, false, true},
		// The put and the transaction, each timed at the leader that
		// proposed it; the refused call proposed nothing.
		{"eu-west-1 delivery latencies", f.Sum("flexkv_delivery_seconds", w1), 2, false, true},
		{"eu-west-1 aborts", f.Sum("flexkv_txn_aborts_total", w1), 0, false, false},
	} {
		atLeast := tc.atLeast || (tc.retries && retried)
		switch {
		case atLeast && tc.got < tc.want:
			t.Errorf("%s = %v, want at least %v", tc.what, tc.got, tc.want)
		case !atLeast && tc.got != tc.want:
			t.Errorf("%s = %v, want %v", tc.what, tc.got, tc.want)
		}
	}
	for _, m := range f.Series("flexkv_delivery_seconds", w1) {
		if h := m.GetHistogram(); h.GetSampleCount() > 0 && h.GetSampleSum() <= 0 {
			t.Errorf("%s: delivery latency sum %v for %d samples", testcluster.Label(m, "replica"), h.GetSampleSum(), h.GetSampleCount())
		}
	}

}
