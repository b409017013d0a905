package server

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/flexkv/flexkv/api/apipb"
	"github.com/flexkv/flexkv/internal/buildinfo"
	"github.com/flexkv/flexkv/internal/testcluster"
	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/multicast/rawnode"
	"github.com/flexkv/flexkv/partition"
	"github.com/flexkv/flexkv/replication"
)

func TestHistogramBuckets(t *testing.T) {
	var h histogram
	for _, d := range []time.Duration{100 * time.Microsecond, time.Millisecond, 3 * time.Millisecond, time.Second, time.Minute} {
		h.observe(d)
	}
	m := NewMetrics(func() []*Server { return nil })
	var pb dto.Metric
	if err := h.metric(m.delivery, "g", "r").Write(&pb); err != nil {
		t.Fatal(err)
	}
	hist := pb.GetHistogram()
	if hist.GetSampleCount() != 5 {
		t.Errorf("count = %d, want 5", hist.GetSampleCount())
	}
	if got, want := hist.GetSampleSum(), 61.0041; got < want-1e-9 || got > want+1e-9 {
		t.Errorf("sum = %v, want %v", got, want)
	}
	// Cumulative, with upper bounds inclusive: 1ms falls in le=0.001.
	want := map[float64]uint64{.0005: 1, .001: 2, .0025: 2, .005: 3, .5: 3, 1: 4, 10: 4}
	for _, b := range hist.GetBucket() {
		if w, ok := want[b.GetUpperBound()]; ok && b.GetCumulativeCount() != w {
			t.Errorf("bucket le=%v: %d, want %d", b.GetUpperBound(), b.GetCumulativeCount(), w)
		}
	}
}

func TestRequestMethod(t *testing.T) {
	for _, tc := range []struct {
		full string
		want string
	}{
		{"/" + apipb.KV_ServiceDesc.ServiceName + "/Txn", "Txn"},
		{"/" + apipb.KV_ServiceDesc.ServiceName + "/Await", "Await"},
		{"/" + apipb.KV_ServiceDesc.ServiceName + "/Nope", ""},
		{"/grpc.health.v1.Health/Check", ""},
	} {
		got := ""
		if i := requestMethod(tc.full); i >= 0 {
			got = requestMethods[i]
		}
		if got != tc.want {
			t.Errorf("requestMethod(%q) = %q, want %q", tc.full, got, tc.want)
		}
	}
}

// A build's full revision labels flexkv_build_info; a build that recorded
// none (-buildvcs=false, a test binary) says unknown.
func TestBuildLabels(t *testing.T) {
	for _, tc := range []struct {
		bi   buildinfo.Info
		want []string
	}{
		{buildinfo.Info{Version: "v0.4.0", Revision: "19c832a0123456789abcdef0123456789abcdef0", GoVersion: "go1.26.8"},
			[]string{"v0.4.0", "19c832a0123456789abcdef0123456789abcdef0", "go1.26.8"}},
		{buildinfo.Info{Version: "(devel)", GoVersion: "go1.26.8"}, []string{"(devel)", "unknown", "go1.26.8"}},
	} {
		if got := buildLabels(tc.bi); !slices.Equal(got, tc.want) {
			t.Errorf("buildLabels(%+v) = %q, want %q", tc.bi, got, tc.want)
		}
	}
}

func TestCountersObserve(t *testing.T) {
	var c counters
	id := func(seq uint64) multicast.MsgID { return multicast.MsgID{Client: 1, Seq: seq} }
	forget := c.proposals.add(id(2))
	defer forget()
	out := rawnode.Output{
		Deliveries: []multicast.Message{
			{ID: id(1), Dst: partition.SetOf(0)},
			{ID: id(2), Dst: partition.SetOf(0, 1)},
			{ID: multicast.MsgID{Client: multicast.FlushClient, Seq: 1}, Dst: partition.SetOf(0, 1, 2)},
		},
		Sends: []multicast.Send{
			{To: 1, Kind: multicast.KindMsg, About: id(2), Payload: make([]byte, 10)},
			{To: 1, Kind: multicast.KindVote, About: id(2), Payload: make([]byte, 3)},
			{To: 2, Kind: multicast.KindMsg, About: multicast.MsgID{Client: multicast.FlushClient, Seq: 1}, Payload: make([]byte, 5)},
		},
	}
	c.observe(out, false)
	c.observe(rawnode.Output{Sends: out.Sends}, true)
	for _, tc := range []struct {
		name      string
		got, want uint64
	}{
		{"local deliveries", c.deliveriesLocal.Load(), 1},
		{"global deliveries (flush left out)", c.deliveriesGlobal.Load(), 1},
		{"msg sends (leader only)", c.sends[multicast.KindMsg].Load(), 1},
		{"msg bytes", c.sendBytes[multicast.KindMsg].Load(), 10},
		{"vote sends", c.sends[multicast.KindVote].Load(), 1},
		{"flush sends", c.sends[0].Load(), 1},
		{"ack sends", c.sends[multicast.KindAck].Load(), 0},
		{"delivery latencies (proposed here)", sampleCount(&c.delivery), 1},
		{"proposals left", uint64(c.proposals.n.Load()), 0},
	} {
		if tc.got != tc.want {
			t.Errorf("%s = %d, want %d", tc.name, tc.got, tc.want)
		}
	}
}

func sampleCount(h *histogram) uint64 {
	n := uint64(0)
	for i := range h.counts {
		n += h.counts[i].Load()
	}
	return n
}

func TestProposalsForget(t *testing.T) {
	var p proposals
	id := multicast.MsgID{Client: 3, Seq: 1}
	forget := p.add(id)
	retry := p.add(id) // the same id in flight twice: the first call's time stays
	retry()
	if _, ok := p.m[id]; !ok {
		t.Fatal("a retry's forget dropped the first call's proposal")
	}
	forget()
	if len(p.m) != 0 || p.n.Load() != 0 {
		t.Fatalf("after forget: %d entries, n = %d, want none", len(p.m), p.n.Load())
	}
	if _, ok := p.delivered(id); ok {
		t.Fatal("delivered found a forgotten proposal")
	}
}

// TestMetricsServeClose serves a collector of no server over HTTP, scrapes
// it and stops it: the listener is gone afterwards.
func TestMetricsServeClose(t *testing.T) {
	ms, err := ServeMetrics("127.0.0.1:0", NewMetrics(func() []*Server { return nil }))
	if err != nil {
		t.Fatal(err)
	}
	fams := testcluster.ScrapeHTTP(t, ms.Addr())
	if fams["go_goroutines"] == nil {
		t.Errorf("no go_goroutines in the scrape")
	}
	if err := ms.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 2 * time.Second}
	if resp, err := c.Get("http://" + ms.Addr() + "/metrics"); err == nil {
		resp.Body.Close()
		t.Fatal("metrics still served after Close")
	}
}

// TestServerMetricsAddr opens one replica with Config.MetricsAddr: it
// serves its metrics until Close.
func TestServerMetricsAddr(t *testing.T) {
	cfg := &partition.ClusterConfig{
		Protocol: "skeen",
		Groups: []partition.GroupConfig{{Name: "g1", Region: "g1", Replicas: []partition.ReplicaConfig{
			{ID: "r1", Raft: freeAddr(t), GRPC: freeAddr(t), Peer: freeAddr(t)},
		}}},
		Partitions: []partition.PartitionConfig{{Name: "all", Start: "a", End: "z", Group: "g1"}},
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	srv, err := Open(Config{Cluster: cfg, NodeID: "r1", Dir: t.TempDir(), NoSync: true, MetricsAddr: addr,
		Replication: replication.Config{ElectionTimeout: 100 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	f := testcluster.ScrapeHTTP(t, addr)
	r := map[string]string{"group": "g1", "replica": "r1"}
	for _, name := range []string{"flexkv_skeen_clock", "flexkv_raft_term", "flexkv_txn_executions_total", "flexkv_txn_votes_sent_total", "flexkv_txn_votes_evicted_total", "flexkv_txn_session_results", "flexkv_txn_results_acknowledged_total", "flexkv_pebble_disk_bytes", "flexkv_row_cache_view_hits_total", "flexkv_read_barriers_early_total"} {
		if len(f.Series(name, r)) != 1 {
			t.Errorf("no %s{group=g1,replica=r1} in %s", name, strings.Join(names(f), " "))
		}
	}
	// flexkv_build_info: 1, with the labels of the running binary's build.
	bi := buildinfo.Read()
	rev := bi.Revision
	if rev == "" {
		rev = "unknown"
	}
	build := map[string]string{"group": "g1", "replica": "r1", "version": bi.Version, "revision": rev, "go_version": bi.GoVersion}
	if s := f.Series("flexkv_build_info", build); len(s) != 1 || testcluster.Value(s[0]) != 1 {
		t.Errorf("flexkv_build_info%v: %v, want one series at 1; the family: %v", build, s, f["flexkv_build_info"])
	}
	// The client port's guard: its series are there, nothing refused or
	// closed, and the scrape's own connection is not the API's.
	for _, name := range []string{"flexkv_edge_request_bytes", "flexkv_edge_connections", "flexkv_edge_connections_closed_total", "flexkv_edge_calls_refused_total"} {
		s := f.Series(name, map[string]string{"group": "g1", "replica": "r1", "port": "client"})
		if len(s) != 1 {
			t.Errorf("%s{port=client}: %v, want one series", name, s)
			continue
		}
		if strings.HasSuffix(name, "_total") && testcluster.Value(s[0]) != 0 {
			t.Errorf("%s{port=client} = %v on an idle replica, want 0", name, testcluster.Value(s[0]))
		}
	}
	if len(f.Series("flexkv_flexcast_history_entries", nil)) != 0 {
		t.Errorf("a skeen replica reports flexcast series")
	}
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 2 * time.Second}
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, fmt.Sprintf("http://%s/metrics", addr), nil)
	if resp, err := c.Do(req); err == nil {
		resp.Body.Close()
		t.Fatal("metrics still served after Close")
	}
}

func names(f testcluster.Families) []string {
	var out []string
	for n := range f {
		out = append(out, n)
	}
	return out
}
