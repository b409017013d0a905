package cluster

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/flexkv/flexkv/kv/kvpb"
)

// families is a parsed scrape.
type families map[string]*dto.MetricFamily

func parseScrape(t testing.TB, r io.Reader) families {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		t.Fatalf("parse scrape: %v", err)
	}
	return fams
}

// series returns the series of family name whose labels include want.
func (f families) series(name string, want map[string]string) []*dto.Metric {
	fam := f[name]
	if fam == nil {
		return nil
	}
	var out []*dto.Metric
	for _, m := range fam.GetMetric() {
		ok := true
		for k, v := range want {
			if label(m, k) != v {
				ok = false
			}
		}
		if ok {
			out = append(out, m)
		}
	}
	return out
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func value(m *dto.Metric) float64 {
	switch {
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue()
	case m.GetGauge() != nil:
		return m.GetGauge().GetValue()
	case m.GetHistogram() != nil:
		return float64(m.GetHistogram().GetSampleCount())
	}
	return 0
}

// sum adds the values (histograms: the counts) of the series of name whose
// labels include want.
func (f families) sum(name string, want map[string]string) float64 {
	t := 0.0
	for _, m := range f.series(name, want) {
		t += value(m)
	}
	return t
}

func scrapeHTTP(t testing.TB, addr string) families {
	t.Helper()
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatalf("scrape: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("scrape: %s: %s", resp.Status, b)
	}
	return parseScrape(t, resp.Body)
}

func scrapeHandler(t testing.TB, h http.Handler) families {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("scrape: %d: %s", rec.Code, rec.Body)
	}
	return parseScrape(t, rec.Body)
}

// TestMetricsLocalCluster runs puts and a two-group transaction on a local
// cluster and checks what its metrics endpoint reports, replica by replica.
func TestMetricsLocalCluster(t *testing.T) {
	cfg := testCluster(t, "flexcast")
	l := startLocalConfig(t, Config{Cluster: cfg, Dir: t.TempDir(), MetricsAddr: "127.0.0.1:0"})

	ctx := ctxTimeout(t, 30*time.Second)
	// Each call goes to its group's leader, again if it answers Unavailable
	// (a leader deposed in a stall of the machine). A retried call adds
	// calls, errors and perhaps deliveries to the counts checked below:
	// retried says that happened, and those counts are then lower bounds.
	retried := false
	call := func(group string, f func(kvpb.KVClient) error) error {
		attempts := 0
		err := callLeader(t, l, group, func(c kvpb.KVClient) error {
			attempts++
			return f(c)
		})
		retried = retried || attempts > 1
		return err
	}
	err := call("eu-west-1", func(c kvpb.KVClient) error {
		_, err := c.Put(ctx, &kvpb.PutRequest{ClientId: 7, Seq: 1, Key: []byte("w/0001/x"), Value: []byte("5")})
		return err
	})
	if err != nil {
		t.Fatalf("put: %v", err)
	}
	err = call("eu-west-3", func(c kvpb.KVClient) error {
		_, err := c.Put(ctx, &kvpb.PutRequest{ClientId: 8, Seq: 1, Key: []byte("w/0003/y"), Value: []byte("1")})
		return err
	})
	if err != nil {
		t.Fatalf("put: %v", err)
	}
	tx := &kvpb.Txn{
		If: []*kvpb.Compare{{Key: []byte("w/0001/x"), Cmp: kvpb.Cmp_CMP_GREATER_EQUAL, Operand: &kvpb.Compare_Int{Int: 5}}},
		Then: []*kvpb.Op{
			{Kind: kvpb.OpKind_OP_KIND_ADD, Key: []byte("w/0001/x"), Int: -5},
			{Kind: kvpb.OpKind_OP_KIND_ADD, Key: []byte("w/0004/x"), Int: 5},
		},
	}
	var resp *kvpb.TxnResponse
	err = call("eu-west-1", func(c kvpb.KVClient) (err error) {
		resp, err = c.Txn(ctx, &kvpb.TxnRequest{ClientId: 7, Seq: 2, Body: &kvpb.TxnRequest_Txn{Txn: tx}})
		return err
	})
	if err != nil {
		t.Fatalf("txn: %v", err)
	}
	err = call("eu-west-3", func(c kvpb.KVClient) error {
		_, err := c.Await(ctx, &kvpb.AwaitRequest{Id: resp.GetPiece().GetId()})
		return err
	})
	if err != nil {
		t.Fatalf("await: %v", err)
	}
	err = call("eu-west-1", func(c kvpb.KVClient) error {
		_, err := c.Txn(ctx, &kvpb.TxnRequest{})
		return err
	})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("empty txn: %v, want InvalidArgument", err)
	}
	if retried {
		t.Logf("a call was retried at a new leader: the counts of calls, errors, sends and deliveries are checked as lower bounds")
	}

	// The followers execute in their own time: scrape until every replica
	// of the two groups has delivered and executed the transaction.
	const global, local = "global", "local"
	groupOf := map[string]string{}
	for _, g := range cfg.Groups {
		for _, r := range g.Replicas {
			groupOf[r.ID] = g.Name
		}
	}
	done := func(f families) bool {
		for id, g := range groupOf {
			if g == "eu-central-1" {
				continue
			}
			if f.sum("flexkv_deliveries_total", map[string]string{"replica": id, "scope": global}) < 1 ||
				f.sum("flexkv_txn_executions_total", map[string]string{"replica": id}) < 2 {
				return false
			}
		}
		return true
	}
	var f families
	deadline := time.Now().Add(10 * time.Second)
	for {
		f = scrapeHTTP(t, l.MetricsAddr())
		if done(f) || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}

	for id, g := range groupOf {
		r := map[string]string{"group": g, "replica": id}
		if len(f.series("flexkv_raft_leader", r)) != 1 {
			t.Errorf("%s: %d flexkv_raft_leader series, want 1", id, len(f.series("flexkv_raft_leader", r)))
		}
		if n := len(f.series("flexkv_outbox_envelopes", r)); n != 2 {
			t.Errorf("%s: %d outbox series, want one per other group (2)", id, n)
		}
		if len(f.series("flexkv_flexcast_history_entries", r)) != 1 {
			t.Errorf("%s: no flexkv_flexcast_history_entries", id)
		}
		if v := f.sum("flexkv_raft_applied_index", r); v < 1 {
			t.Errorf("%s: raft applied index %v, want > 0", id, v)
		}
		globals := f.sum("flexkv_deliveries_total", map[string]string{"replica": id, "scope": global})
		locals := f.sum("flexkv_deliveries_total", map[string]string{"replica": id, "scope": local})
		executed := f.sum("flexkv_txn_executions_total", r)
		if g == "eu-central-1" {
			if globals != 0 || locals != 0 || executed != 0 {
				t.Errorf("%s (not a destination): %v global and %v local deliveries, %v executions, want none", id, globals, locals, executed)
			}
			continue
		}
		if globals != 1 || locals != 1 || executed != 2 {
			t.Errorf("%s: %v global and %v local deliveries, %v executions, want 1, 1, 2", id, globals, locals, executed)
		}
		if v := f.sum("flexkv_pebble_wal_written_bytes_total", r); v <= 0 {
			t.Errorf("%s: pebble WAL bytes %v, want > 0", id, v)
		}
	}
	for _, g := range cfg.Groups {
		if n := f.sum("flexkv_raft_leader", map[string]string{"group": g.Name}); n != 1 {
			t.Errorf("group %s: %v leaders, want 1", g.Name, n)
		}
	}

	w1 := map[string]string{"group": "eu-west-1"}
	for _, tc := range []struct {
		what    string
		got     float64
		want    float64
		atLeast bool
		retries bool // a retried call adds to it: at least want if one was
	}{
		{"eu-west-1 msg sends", f.sum("flexkv_sends_total", map[string]string{"group": "eu-west-1", "kind": "msg"}), 1, false, true},
		{"eu-west-1 vote sends", f.sum("flexkv_sends_total", map[string]string{"group": "eu-west-1", "kind": "vote"}), 1, true, true},
		{"eu-west-3 msg sends", f.sum("flexkv_sends_total", map[string]string{"group": "eu-west-3", "kind": "msg"}), 0, false, false},
		{"eu-west-1 Put calls", f.sum("flexkv_request_seconds", map[string]string{"group": "eu-west-1", "method": "Put"}), 1, false, true},
		{"eu-west-1 Txn calls", f.sum("flexkv_request_seconds", map[string]string{"group": "eu-west-1", "method": "Txn"}), 2, false, true},
		{"eu-west-3 Await calls", f.sum("flexkv_request_seconds", map[string]string{"group": "eu-west-3", "method": "Await"}), 1, false, true},
		{"eu-west-1 Txn InvalidArgument", f.sum("flexkv_request_errors_total", map[string]string{"group": "eu-west-1", "method": "Txn", "code": codes.InvalidArgument.String()}), 1, false, false},
		{"eu-west-1 errors", f.sum("flexkv_request_errors_total", w1), 1, false, true},
		// The put and the transaction, each timed at the leader that
		// proposed it; the refused call proposed nothing.
		{"eu-west-1 delivery latencies", f.sum("flexkv_delivery_seconds", w1), 2, false, true},
		{"eu-west-1 aborts", f.sum("flexkv_txn_aborts_total", w1), 0, false, false},
	} {
		atLeast := tc.atLeast || (tc.retries && retried)
		switch {
		case atLeast && tc.got < tc.want:
			t.Errorf("%s = %v, want at least %v", tc.what, tc.got, tc.want)
		case !atLeast && tc.got != tc.want:
			t.Errorf("%s = %v, want %v", tc.what, tc.got, tc.want)
		}
	}
	for _, m := range f.series("flexkv_delivery_seconds", w1) {
		if h := m.GetHistogram(); h.GetSampleCount() > 0 && h.GetSampleSum() <= 0 {
			t.Errorf("%s: delivery latency sum %v for %d samples", label(m, "replica"), h.GetSampleSum(), h.GetSampleCount())
		}
	}

	// The collector of one server reports that server alone.
	id := l.Leader("eu-west-3")
	one := scrapeHandler(t, l.nodes[id].srv.Metrics().Handler())
	if got := one.series("flexkv_raft_leader", nil); len(got) != 1 || label(got[0], "replica") != id || value(got[0]) != 1 {
		t.Errorf("single server's flexkv_raft_leader = %v, want one series, replica %s, 1", got, id)
	}
}
