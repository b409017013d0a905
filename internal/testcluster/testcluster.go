// Package testcluster holds the fixtures that the tests of several packages
// share: the layout of configs/local.yaml on free ports, and the parsing of
// a Prometheus scrape. It is test support; no production code imports it.
package testcluster

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.uber.org/goleak"

	"github.com/flexkv/flexkv/internal/testaddr"
	"github.com/flexkv/flexkv/partition"
)

// Layout returns the layout of configs/local.yaml (3 groups x 3 replicas,
// six partitions w/0001/..w/0006/, item/ replicated) with protocol proto,
// every address free in ports of r.
func Layout(t testing.TB, proto string, r testaddr.Range) *partition.ClusterConfig {
	t.Helper()
	cfg := &partition.ClusterConfig{
		Protocol: proto,
		Tree:     map[string]string{"eu-west-3": "eu-west-1", "eu-central-1": "eu-west-1"},
	}
	free := func() string { return testaddr.Free(t, r) }
	n := 0
	for _, g := range []string{"eu-west-1", "eu-west-3", "eu-central-1"} {
		gc := partition.GroupConfig{Name: g, Region: g}
		for range 3 {
			n++
			gc.Replicas = append(gc.Replicas, partition.ReplicaConfig{ID: fmt.Sprintf("r%d", n), Raft: free(), GRPC: free(), Peer: free()})
		}
		cfg.Groups = append(cfg.Groups, gc)
	}
	for w := 1; w <= 6; w++ {
		cfg.Partitions = append(cfg.Partitions, partition.PartitionConfig{
			Name: fmt.Sprintf("w%04d", w), Start: fmt.Sprintf("w/%04d/", w), End: fmt.Sprintf("w/%04d/", w+1),
			Group: cfg.Groups[(w-1)/2].Name,
		})
	}
	cfg.Partitions = append(cfg.Partitions, partition.PartitionConfig{Name: "item", Start: "item/", End: "item0", Replicated: true})
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// WANMatrix is the round trips between the three regions of Layout: 40 ms
// between eu-west-1 and eu-west-3, 30 and 20 ms to eu-central-1, 4 ms inside
// a region.
func WANMatrix(t testing.TB) *partition.Latency {
	t.Helper()
	lat, err := partition.NewLatency([]string{"eu-west-1", "eu-west-3", "eu-central-1"}, [][]float64{
		{4, 40, 30},
		{40, 4, 20},
		{30, 20, 4},
	})
	if err != nil {
		t.Fatal(err)
	}
	return lat
}

// Families is a parsed scrape.
type Families map[string]*dto.MetricFamily

// ParseScrape parses a scrape in the text format.
func ParseScrape(t testing.TB, r io.Reader) Families {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		t.Fatalf("parse scrape: %v", err)
	}
	return fams
}

// ScrapeHTTP scrapes http://addr/metrics.
func ScrapeHTTP(t testing.TB, addr string) Families {
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
	return ParseScrape(t, resp.Body)
}

// ScrapeHandler scrapes h.
func ScrapeHandler(t testing.TB, h http.Handler) Families {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("scrape: %d: %s", rec.Code, rec.Body)
	}
	return ParseScrape(t, rec.Body)
}

// Series returns the series of family name whose labels include want.
func (f Families) Series(name string, want map[string]string) []*dto.Metric {
	fam := f[name]
	if fam == nil {
		return nil
	}
	var out []*dto.Metric
	for _, m := range fam.GetMetric() {
		ok := true
		for k, v := range want { //flexkv:unordered every label must match
			if Label(m, k) != v {
				ok = false
			}
		}
		if ok {
			out = append(out, m)
		}
	}
	return out
}

// Label returns the value of m's label name, or "".
func Label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// Value returns m's value: a counter's or gauge's, a histogram's count.
func Value(m *dto.Metric) float64 {
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

// Sum adds the values (histograms: the counts) of the series of name whose
// labels include want.
func (f Families) Sum(name string, want map[string]string) float64 {
	t := 0.0
	for _, m := range f.Series(name, want) {
		t += Value(m)
	}
	return t
}

// RaftFutureLeaks are the goleak options for the goroutines a replica
// leaves behind when it shuts down with proposals or reads in flight: raft
// drops the futures of committed entries still queued for its FSM, and of
// leadership verifications still queued for its main loop, without
// answering them, so the goroutine waiting on such a future (futureErr's
// waiter, for Replica.await and a read round's VerifyLeader; the propose
// loop's answer of a batched entry) stays blocked until the process ends,
// one per dropped future. Their callers return on the replica's stop (a
// read round also on its answers or its deadline). Ignoring them hides
// nothing else: answer can block only in the future's Error, since a
// proposal's done channel has room for its one result, and futureErr's
// waiter sends to a channel of its own with room.
func RaftFutureLeaks() []goleak.Option {
	return []goleak.Option{
		goleak.IgnoreAnyFunction("github.com/flexkv/flexkv/replication.futureErr.func1"),
		goleak.IgnoreAnyFunction("github.com/flexkv/flexkv/replication.answer"),
	}
}
