package gtpcc

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/flexkv/flexkv/txn"
)

// testReport returns the report of a few recorded calls, as Run makes it,
// with traffic, overhead and a check as the CLI adds them.
func testReport(t *testing.T, protocol string, scale float64) *Report {
	t.Helper()
	start := time.Unix(1000, 0)
	// newRecorder takes the fractions as they are: 0 trims nothing.
	cfg := RunConfig{Protocol: protocol, Workload: testWorkload(3), Duration: 10 * time.Second,
		Seed: 5, Extra: map[string]string{"latency_mode": "rtt"}}
	cfg.Clients = []ClientSpec{{Home: 1}, {Home: 2}}
	rec := newRecorder(start, cfg)
	at := start.Add(time.Second)
	for i, k := range kinds {
		ms := scale * float64(10*(i+1))
		res := &txn.Result{Succeeded: true, Destinations: []txn.DestLatency{{Ms: ms / 3}, {Ms: ms / 2}, {Ms: ms}}}
		rec.record(Op{Kind: k}, 0, at, at.Add(time.Duration(ms*float64(time.Millisecond))), res, nil)
	}
	rep := rec.report(cfg)
	rep.Traffic["r1"] = NewNodeTraffic(100, 25000, 10)
	rep.Overhead["g1"] = GroupOverhead{Overhead: 0.25, Received: 4, Delivered: 3}
	rep.Check = &CheckSummary{Passed: false, Failures: []string{"condition 1: warehouse 1"}}
	return rep
}

// keysOf returns the keys of a JSON object, sorted.
func keysOf(t *testing.T, v any, where string) []string {
	t.Helper()
	m, ok := v.(map[string]any)
	if !ok {
		t.Fatalf("%s is %T, want an object", where, v)
	}
	return slices.Sorted(maps.Keys(m))
}

func wantKeys(t *testing.T, v any, where string, want ...string) {
	t.Helper()
	slices.Sort(want)
	if got := keysOf(t, v, where); !slices.Equal(got, want) {
		t.Errorf("%s has keys %v, want %v", where, got, want)
	}
}

// TestReportJSONFields checks the results JSON against DESIGN 10.3.
func TestReportJSONFields(t *testing.T) {
	rep := testReport(t, "flexcast", 1)
	rep.BytesPerTxn, rep.MsgsPerTxn = 1180.5, 1.5
	rep.BytesPerTxnByKind = map[string]float64{"msg": 1000.5, "flush": 180}
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	// DESIGN 10.3's fields, rolled_back, bytes_per_txn, msgs_per_txn,
	// bytes_per_txn_by_kind and destination_sets.
	wantKeys(t, m, "results", "protocol", "config", "duration_s", "txn_total", "txn_per_s", "errors", "rolled_back",
		"latency_ms", "traffic", "bytes_per_txn", "msgs_per_txn", "bytes_per_txn_by_kind", "overhead", "check", "destination_sets")
	if bk := m["bytes_per_txn_by_kind"].(map[string]any); bk["msg"] != 1000.5 || bk["flush"] != 180.0 || len(bk) != 2 {
		t.Errorf("bytes_per_txn_by_kind %v, want msg 1000.5 and flush 180", bk)
	}
	if m["bytes_per_txn"] != 1180.5 || m["msgs_per_txn"] != 1.5 {
		t.Errorf("bytes_per_txn %v, msgs_per_txn %v, want 1180.5 and 1.5", m["bytes_per_txn"], m["msgs_per_txn"])
	}
	for _, ds := range m["destination_sets"].([]any) {
		wantKeys(t, ds, "destination_sets[]", "home", "groups", "count")
	}
	stats := []string{"count", "mean", "p50", "p90", "p95", "p99", "max"}
	lat := m["latency_ms"].(map[string]any)
	wantKeys(t, lat, "latency_ms", append(slices.Clone(kinds[:]), "by_destination")...)
	for _, k := range kinds {
		wantKeys(t, lat[k], "latency_ms."+k, stats...)
	}
	byDest := lat["by_destination"].(map[string]any)
	wantKeys(t, byDest, "latency_ms.by_destination", "1st", "2nd", "3rd")
	for _, d := range destNames {
		wantKeys(t, byDest[d], "latency_ms.by_destination."+d, stats...)
	}
	wantKeys(t, m["traffic"], "traffic", "r1")
	wantKeys(t, m["traffic"].(map[string]any)["r1"], "traffic.r1", "msgs_per_s", "bytes_per_s", "avg_msg_bytes")
	wantKeys(t, m["overhead"], "overhead", "g1")
	wantKeys(t, m["overhead"].(map[string]any)["g1"], "overhead.g1", "overhead", "received", "delivered")
	wantKeys(t, m["check"], "check", "passed", "failures")
	if m["protocol"] != "flexcast" || m["txn_total"] != 5.0 {
		t.Errorf("protocol %v, txn_total %v", m["protocol"], m["txn_total"])
	}
	if got := lat[KindPayment].(map[string]any)["mean"]; got != 20.0 {
		t.Errorf("payment mean %v, want 20", got)
	}
	if got := byDest["3rd"].(map[string]any)["count"]; got != 5.0 {
		t.Errorf("3rd destination count %v, want 5", got)
	}

	// A report read back is the same report.
	var back Report
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	b2, err := json.Marshal(&back)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, b2) {
		t.Errorf("JSON changed through a round trip:\n%s\n%s", b, b2)
	}
}

// TestReportJSONEmpty: a report without traffic, overhead or check has {}
// and null, not missing fields.
func TestReportJSONEmpty(t *testing.T) {
	b, err := json.Marshal(&Report{Protocol: "skeen"})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"traffic":{}`, `"overhead":{}`, `"check":null`, `"by_destination":{"1st":{"count":0`} {
		if !bytes.Contains(b, []byte(want)) {
			t.Errorf("%s lacks %s", b, want)
		}
	}
	b, err = json.Marshal(Report{Check: &CheckSummary{Passed: true}}) // a value, not a pointer
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte(`"check":{"passed":true,"failures":[]}`)) || !bytes.Contains(b, []byte(`"traffic":{}`)) {
		t.Errorf("%s: want failures as []", b)
	}
}

// TestCheckReportSummary: the summary keeps the failures and the count of
// those omitted, and writes the count only when there are some.
func TestCheckReportSummary(t *testing.T) {
	cr := CheckReport{Passed: false, Failures: []string{"condition 2: warehouse 1 district 3"}, FailuresOmitted: 2}
	s := cr.Summary()
	if s.Passed || !slices.Equal(s.Failures, cr.Failures) || s.FailuresOmitted != 2 {
		t.Errorf("Summary() = %+v, want the failures and 2 omitted", s)
	}
	b, err := json.Marshal(s)
	if err != nil || !bytes.Contains(b, []byte(`"failures_omitted":2`)) {
		t.Errorf("summary JSON %s, %v: want failures_omitted 2", b, err)
	}
	s.Failures[0] = "changed"
	if cr.Failures[0] == "changed" {
		t.Error("the summary shares the report's failures")
	}

	s = CheckReport{Passed: true}.Summary()
	if !s.Passed || s.Failures == nil || len(s.Failures) != 0 {
		t.Errorf("passed with nil failures: %+v, want [] failures", s)
	}
	if b, _ := json.Marshal(s); string(b) != `{"passed":true,"failures":[]}` {
		t.Errorf("passed summary JSON %s, want no failures_omitted", b)
	}
}

func TestNewNodeTraffic(t *testing.T) {
	if got, want := NewNodeTraffic(200, 50000, 10), (NodeTraffic{MsgsPerS: 20, BytesPerS: 5000, AvgMsgBytes: 250}); got != want {
		t.Errorf("NewNodeTraffic = %+v, want %+v", got, want)
	}
	if got := NewNodeTraffic(0, 0, 0); got != (NodeTraffic{}) {
		t.Errorf("NewNodeTraffic of nothing = %+v, want zeros", got)
	}
}

func TestWriteTable(t *testing.T) {
	rep := testReport(t, "flexcast", 1)
	rep.ErrorSamples = []string{"client: unavailable"}
	rep.BytesPerTxn, rep.MsgsPerTxn = 1180.4, 1.364
	rep.BytesPerTxnByKind = map[string]float64{"msg": 1000.2, "ack": 180.2}
	var buf bytes.Buffer
	if err := rep.WriteTable(&buf); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	t.Log("\n" + out)
	lines := strings.Split(out, "\n")
	row := func(label string) []string {
		t.Helper()
		for _, l := range lines {
			if f := strings.Fields(l); len(f) > 0 && strings.HasPrefix(strings.TrimSpace(l), label+" ") {
				return f
			}
		}
		t.Fatalf("no row %q in\n%s", label, out)
		return nil
	}
	if !strings.Contains(lines[0], "protocol flexcast: 5 txn in 10.0 s = 0.5 txn/s; 0 errors; 0 rolled back") {
		t.Errorf("first line %q", lines[0])
	}
	if h := row("latency (ms)"); !slices.Equal(h[2:], []string{"count", "mean", "p50", "p90", "p95", "p99", "max"}) {
		t.Errorf("header %q", h)
	}
	for i, k := range kinds {
		f := row(k)
		fig := fmt.Sprintf("%.1f", float64(10*(i+1)))
		if len(f) != 8 || f[1] != "1" || slices.ContainsFunc(f[2:], func(s string) bool { return s != fig }) {
			t.Errorf("row %q, want %s with count 1 and every figure %s", f, k, fig)
		}
	}
	for _, d := range destNames {
		if f := row(d + " destination"); len(f) != 9 || f[2] != "5" {
			t.Errorf("row %q, want the %s destination with count 5", f, d)
		}
	}
	for _, want := range []string{"traffic (node)", "r1", "10.0", "2500", "250.0", "overhead g1: 25.0% (received 4, delivered 3)",
		"check: FAILED, 1 failures", "condition 1: warehouse 1", "client: unavailable",
		"traffic between nodes: 1180 bytes/txn, 1.36 msgs/txn (bytes/txn by kind: ack 180, msg 1000)"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q", want)
		}
	}
}

func TestCompareTable(t *testing.T) {
	reports := []*Report{testReport(t, "flexcast", 1), testReport(t, "skeen", 2), testReport(t, "tree", 3)}
	reports[2].Latency.OrderStatus = LatencyStats{} // a row the tree run lacks
	var buf bytes.Buffer
	if err := CompareTable(&buf, reports); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	t.Log("\n" + out)
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if want := 2 + len(RowNames()); len(lines) != want {
		t.Fatalf("%d lines, want %d", len(lines), want)
	}
	// Right-aligned columns: every line equally long, and each column
	// ends at the same place on every line.
	for i, l := range lines {
		if len(l) != len(lines[0]) {
			t.Errorf("line %d %q is %d long, want %d like the header", i, l, len(l), len(lines[0]))
		}
	}
	header := strings.Fields(lines[0])
	if !slices.Equal(header[len(header)-3:], []string{"flexcast", "skeen", "tree"}) {
		t.Errorf("header %q, want the three protocols", lines[0])
	}
	// Cells are separated by two spaces or more; inside one, by one.
	cellEnds := func(l string) []int {
		var e []int
		for _, loc := range regexp.MustCompile(`\S+( \S+)*`).FindAllStringIndex(l, -1) {
			e = append(e, loc[1])
		}
		return e
	}
	for _, l := range lines[1:] {
		if got, want := cellEnds(l), cellEnds(lines[0]); !slices.Equal(got[1:], want[len(want)-3:]) {
			t.Errorf("line %q: cells end at %v, the header's at %v", l, got, want)
		}
	}
	for i := range lines {
		lines[i] = strings.TrimSpace(lines[i])
	}
	if !strings.HasPrefix(lines[1], "txn/s") || !strings.Contains(lines[1], "0.5") {
		t.Errorf("throughput line %q", lines[1])
	}
	for i, name := range RowNames() {
		l := lines[2+i]
		if !strings.HasPrefix(l, rowLabel(name)) {
			t.Errorf("line %q, want row %s", l, rowLabel(name))
		}
		cells := strings.Count(l, " / ")
		if name == KindOrderStatus {
			if cells != 2 || !strings.HasSuffix(l, " -") {
				t.Errorf("line %q, want two cells and a -", l)
			}
		} else if cells != 3 {
			t.Errorf("line %q, want three mean / p99 cells", l)
		}
	}
	if !strings.Contains(lines[2], "10.0 / 10.0") || !strings.Contains(lines[2], "20.0 / 20.0") || !strings.Contains(lines[2], "30.0 / 30.0") {
		t.Errorf("new-order line %q, want 10, 20 and 30 ms", lines[2])
	}

	// With traffic, a bytes/txn row follows the throughput.
	reports[0].BytesPerTxn, reports[2].BytesPerTxn = 1180.4, 338
	buf.Reset()
	if err := CompareTable(&buf, reports); err != nil {
		t.Fatal(err)
	}
	lines = strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if want := 3 + len(RowNames()); len(lines) != want {
		t.Fatalf("%d lines with traffic, want %d:\n%s", len(lines), want, buf.String())
	}
	if f := strings.Fields(lines[2]); !slices.Equal(f, []string{"bytes/txn", "1180", "0", "338"}) {
		t.Errorf("bytes line %q, want bytes/txn 1180 0 338", lines[2])
	}

	// With bytes by kind, a row per kind seen in any run follows it.
	reports[0].BytesPerTxnByKind = map[string]float64{"msg": 1000.2, "flush": 180.2}
	reports[2].BytesPerTxnByKind = map[string]float64{"msg": 338}
	buf.Reset()
	if err := CompareTable(&buf, reports); err != nil {
		t.Fatal(err)
	}
	lines = strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if want := 5 + len(RowNames()); len(lines) != want {
		t.Fatalf("%d lines with bytes by kind, want %d:\n%s", len(lines), want, buf.String())
	}
	for i, want := range [][]string{{"flush", "180", "0", "0"}, {"msg", "1000", "0", "338"}} {
		if f := strings.Fields(lines[3+i]); !slices.Equal(f, want) {
			t.Errorf("kind line %q, want %v", lines[3+i], want)
		}
	}
	if err := CompareTable(&buf, []*Report{nil}); err == nil {
		t.Error("CompareTable accepted a nil report")
	}
}

// TestDestinationAndPredictionTables: the Table 2 layout has a row per
// run, named by its Run, with mean, p90, p95 and p99 per destination; the
// model's table only the runs with a prediction, with how far off it is.
func TestDestinationAndPredictionTables(t *testing.T) {
	a, b := testReport(t, "flexcast", 1), testReport(t, "flexcast", 2)
	a.Run, b.Run = "flexcast-O1", "flexcast-auto"
	a.PredictedMs = map[string]float64{"1st": 2, "2nd": 4.5, "3rd": 9}
	a.StepMs, a.PredictedAtStepMs = 4.14, map[string]float64{"1st": 4.1, "2nd": 8.7, "3rd": 15}
	a.Latency.ByDestination.Third = LatencyStats{}
	var buf bytes.Buffer
	if err := DestinationTable(&buf, []*Report{a, b}); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + buf.String())
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d lines, want a header and two runs", len(lines))
	}
	if got := strings.Fields(lines[0]); !slices.Equal(got, strings.Fields("latency (ms) 1st mean p90 p95 p99 2nd mean p90 p95 p99 3rd mean p90 p95 p99")) {
		t.Errorf("header %q", lines[0])
	}
	for i, want := range [][]string{{"flexcast-O1", "-", "-", "-", "-"}, {"flexcast-auto"}} {
		f := strings.Fields(lines[1+i])
		if len(f) != 13 || f[0] != want[0] || (len(want) > 1 && !slices.Equal(f[9:], want[1:])) {
			t.Errorf("row %q, want %s with 12 cells", lines[1+i], want)
		}
	}
	buf.Reset()
	if err := PredictionTable(&buf, []*Report{a, b}); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + buf.String())
	lines = strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d lines, want a header, the one run with a prediction and its prediction at the measured step", len(lines))
	}
	first := a.Latency.ByDestination.First.Mean
	f := strings.Fields(lines[1])
	want := []string{"flexcast-O1", "2.0", fmt.Sprintf("%.1f", first), fmt.Sprintf("%+.0f%%", 100*(2-first)/first)}
	if !slices.Equal(f[:4], want) || !slices.Equal(f[len(f)-3:], []string{"9.0", "-", "-"}) {
		t.Errorf("row %q, want %v ... 9.0 - -", lines[1], want)
	}
	f = strings.Fields(lines[2])
	want = []string{"step", "measured", "4.1", "4.1", fmt.Sprintf("%.1f", first), fmt.Sprintf("%+.0f%%", 100*(4.1-first)/first)}
	if len(f) < len(want) || !slices.Equal(f[:len(want)], want) || !slices.Equal(f[len(f)-3:], []string{"15.0", "-", "-"}) {
		t.Errorf("row %q, want %v ... 15.0 - -", lines[2], want)
	}
	buf.Reset()
	if err := PredictionTable(&buf, []*Report{b}); err != nil || buf.Len() != 0 {
		t.Errorf("no prediction: %q, %v; want nothing", buf.String(), err)
	}
	// A strictly serializable run's answers wait for more than the order:
	// the table says so under it.
	a.Consistency = "strict-serializable"
	buf.Reset()
	if err := PredictionTable(&buf, []*Report{a}); err != nil {
		t.Fatal(err)
	}
	if lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n"); len(lines) != 4 || !strings.Contains(lines[3], "strict serializability") {
		t.Errorf("strict run's table %q: want a last line on what the model leaves out", buf.String())
	}
}
