package gtpcc

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/flexkv/flexkv/partition"
)

// Report is the outcome of a run. Its JSON form is the results JSON of
// DESIGN 10.3, read by tools outside the code: keep its names. Run fills
// everything but Traffic, Overhead and Check, which the caller fills from
// the servers' metrics and the consistency check.
type Report struct {
	Protocol string       `json:"protocol"`
	Config   ReportConfig `json:"config"`
	// DurationS is the length of the measured window (the run less its
	// warm-up and cool-down), in seconds; TxnPerS is TxnTotal over it.
	DurationS float64 `json:"duration_s"`
	// TxnTotal counts the transactions that completed in the window,
	// rolled-back new-orders included (TPC-C counts them); Errors the
	// calls that failed in it. RolledBack is the part of TxnTotal that
	// rolled back: an addition to DESIGN 10.3's fields.
	TxnTotal   int64         `json:"txn_total"`
	TxnPerS    float64       `json:"txn_per_s"`
	Errors     int64         `json:"errors"`
	RolledBack int64         `json:"rolled_back"`
	Latency    LatencyReport `json:"latency_ms"`
	// Traffic is per node (replica id), Overhead per group; empty when
	// the caller has no metrics.
	Traffic  map[string]NodeTraffic   `json:"traffic"`
	Overhead map[string]GroupOverhead `json:"overhead"`
	// BytesPerTxn and MsgsPerTxn are the bytes and messages the nodes
	// sent one another over the whole run (Traffic's, summed) per
	// transaction completed in it (warm-up and cool-down included): the
	// protocols' cost per transaction, comparable across protocols. Zero
	// when the caller has no metrics. Additions to DESIGN 10.3's fields.
	BytesPerTxn float64 `json:"bytes_per_txn,omitempty"`
	MsgsPerTxn  float64 `json:"msgs_per_txn,omitempty"`
	// BytesPerTxnByKind splits BytesPerTxn by send kind (server.Traffic's
	// BytesByKind: "msg", "ack", "notif", "ts", "relay", "vote", "flush"):
	// where a protocol's bytes go. An addition to DESIGN 10.3's fields.
	BytesPerTxnByKind map[string]float64 `json:"bytes_per_txn_by_kind,omitempty"`
	// Check is the consistency check's outcome, nil (JSON null) when none
	// ran.
	Check *CheckSummary `json:"check"`
	// Run names the run among the runs of a comparison ("flexcast O1",
	// "tree auto") in tables, legends and file names; "" names it by
	// Protocol. Overlay (group names, lowest FlexCast rank first) and Tree
	// (child: parent) are the cluster's the run went to, and PredictedMs
	// the latency model's mean 1st, 2nd and 3rd answer for the run
	// (package overlay), by destNames. All four are additions to DESIGN
	// 10.3's fields, left out when unknown.
	Run         string             `json:"run,omitempty"`
	Overlay     []string           `json:"overlay,omitempty"`
	Tree        map[string]string  `json:"tree,omitempty"`
	PredictedMs map[string]float64 `json:"predicted_ms,omitempty"`
	// Consistency is the cluster's (partition.ClusterConfig.Consistency,
	// resolved: strict-serializable or serializable) when the run started
	// it; an addition to DESIGN 10.3's fields, left out when unknown.
	Consistency string `json:"consistency,omitempty"`
	// StepMs is the mean time from proposing a client request to
	// delivering it at its entry group, measured over the run at the
	// servers (an in-process cluster's; 0: unknown, and under Skeen, whose
	// entry group waits for timestamps first): what one step of a group
	// cost at the servers. PredictedAtStepMs is the model's mean 1st, 2nd
	// and 3rd answer with ModelStepMs for its commit: EntryStepMs when
	// known, else StepMs. Additions to DESIGN 10.3's fields, left out when
	// unknown.
	StepMs float64 `json:"step_ms,omitempty"`
	// EntryStepMs is one step as the clients see it: the mean answer of a
	// global transaction's entry group where it delivers at once
	// (FlexCast's lca; the tree's, when it is a destination), which
	// answers after its own delivery and execution, less the client's
	// round trip to it (emulated, or none in one process; unknown, and 0,
	// against a cluster on a real network). It holds what StepMs leaves
	// out (the wait for a proposal, the execution, the answer's way back
	// through gRPC), and it is the commit of PredictedAtStepMs when known.
	// An addition to DESIGN 10.3's fields, left out when unknown.
	EntryStepMs       float64            `json:"entry_step_ms,omitempty"`
	PredictedAtStepMs map[string]float64 `json:"predicted_at_step_ms,omitempty"`
	// DestinationSets counts the window's completed transactions by the
	// group of their client's home warehouse and their destination groups
	// (most frequent first): what `flexkv overlay suggest --sets` reads.
	// An addition to DESIGN 10.3's fields.
	DestinationSets []DestinationSet `json:"destination_sets,omitempty"`

	// ErrorSamples are the first distinct error texts of the window, for
	// the table; Timeline counts completions per second of the whole
	// run, warm-up and cool-down included, for plots. Neither is in the
	// JSON.
	ErrorSamples []string        `json:"-"`
	Timeline     []TimelinePoint `json:"-"`
	hists        map[string]*hdrhistogram.Histogram
}

// DestinationSet is one home group and destination set of a run, with the
// number of its transactions (the fields of overlay.CountedSet).
type DestinationSet struct {
	Home   string   `json:"home"`   // the group of the clients' home warehouse
	Groups []string `json:"groups"` // the destination groups, ascending by group number
	Count  int64    `json:"count"`

	home   int // group numbers, for the order of the list
	groups []int
}

// ReportConfig is the configuration of a run, as its report records it.
type ReportConfig struct {
	Workload WorkloadConfig `json:"workload"`
	Clients  int            `json:"clients"`
	// Homes counts the clients of each home warehouse.
	Homes    map[int]int `json:"homes"`
	RunS     float64     `json:"run_s"` // the whole run, warm-up and cool-down included
	WarmUp   float64     `json:"warm_up"`
	CoolDown float64     `json:"cool_down"`
	Seed     uint64      `json:"seed"`
	// Extra is what the caller adds: the cluster's configuration file,
	// the latency mode, ...
	Extra map[string]string `json:"extra,omitempty"`
}

// TimelinePoint counts the calls that completed in one second of a run.
type TimelinePoint struct {
	Second int   // from the start of the run
	Txns   int64 // completed, rolled back included
	Errors int64
	// FirstMs is the sum of the 1st destination's latency of the global
	// transactions (two or more destinations) completed in the second,
	// Global their number: the 1st answer's mean over time, which shows
	// a change of the overlay while a run goes on.
	FirstMs float64
	Global  int64
}

// LatencyStats summarizes latencies, in milliseconds.
type LatencyStats struct {
	Count int64   `json:"count"`
	Mean  float64 `json:"mean"`
	P50   float64 `json:"p50"`
	P90   float64 `json:"p90"`
	P95   float64 `json:"p95"`
	P99   float64 `json:"p99"`
	Max   float64 `json:"max"`
}

// LatencyReport holds the latencies of a run: the total latency of each
// kind of transaction, and under ByDestination the latency of the 1st,
// 2nd and 3rd destination group to answer a global transaction (one of
// two or more destination groups).
type LatencyReport struct {
	NewOrder      LatencyStats       `json:"new_order"`
	Payment       LatencyStats       `json:"payment"`
	OrderStatus   LatencyStats       `json:"order_status"`
	Delivery      LatencyStats       `json:"delivery"`
	StockLevel    LatencyStats       `json:"stock_level"`
	ByDestination DestinationLatency `json:"by_destination"`
}

// DestinationLatency holds latencies by answer order.
type DestinationLatency struct {
	First  LatencyStats `json:"1st"`
	Second LatencyStats `json:"2nd"`
	Third  LatencyStats `json:"3rd"`
}

// destNames name the answer orders, in the JSON and the tables.
var destNames = [destOrders]string{"1st", "2nd", "3rd"}

// DestinationNames returns the names of the answer orders: "1st", "2nd",
// "3rd".
func DestinationNames() []string { return slices.Clone(destNames[:]) }

// Name returns the run's name: Run, or else Protocol.
func (r *Report) Name() string {
	if r.Run != "" {
		return r.Run
	}
	return orNone(r.Protocol)
}

// RowNames returns the names of the latency rows, in the order of the
// tables: the kinds of transaction, then "1st", "2nd", "3rd".
func RowNames() []string { return append(slices.Clone(kinds[:]), destNames[:]...) }

// stat returns a pointer to the stats of row name (a kind or a
// destination order), nil for another name.
func (l *LatencyReport) stat(name string) *LatencyStats {
	switch name {
	case KindNewOrder:
		return &l.NewOrder
	case KindPayment:
		return &l.Payment
	case KindOrderStatus:
		return &l.OrderStatus
	case KindDelivery:
		return &l.Delivery
	case KindStockLevel:
		return &l.StockLevel
	case destNames[0]:
		return &l.ByDestination.First
	case destNames[1]:
		return &l.ByDestination.Second
	case destNames[2]:
		return &l.ByDestination.Third
	}
	return nil
}

// Get returns the stats of row name: a kind (KindNewOrder, ...) or a
// destination order ("1st", "2nd", "3rd"). Another name gets zero stats.
func (l *LatencyReport) Get(name string) LatencyStats {
	if s := l.stat(name); s != nil {
		return *s
	}
	return LatencyStats{}
}

func (l *LatencyReport) set(name string, s LatencyStats) {
	p := l.stat(name)
	if p == nil {
		panic(fmt.Sprintf("gtpcc: report: unknown latency row %q", name)) // callers pass RowNames only
	}
	*p = s
}

// Histogram returns the latency histogram of row name (see Get), in
// microseconds, for plots; nil for a report read from JSON, or an unknown
// name. The caller may modify it: it is a copy.
func (r *Report) Histogram(name string) *hdrhistogram.Histogram {
	h := r.hists[name]
	if h == nil {
		return nil
	}
	return h.Clone()
}

// NodeTraffic is one node's traffic over the run.
type NodeTraffic struct {
	MsgsPerS    float64 `json:"msgs_per_s"`
	BytesPerS   float64 `json:"bytes_per_s"`
	AvgMsgBytes float64 `json:"avg_msg_bytes"`
}

// NewNodeTraffic returns the traffic of msgs messages of bytes bytes in
// all over seconds.
func NewNodeTraffic(msgs, bytes int64, seconds float64) NodeTraffic {
	var t NodeTraffic
	if seconds > 0 {
		t.MsgsPerS = float64(msgs) / seconds
		t.BytesPerS = float64(bytes) / seconds
	}
	if msgs > 0 {
		t.AvgMsgBytes = float64(bytes) / float64(msgs)
	}
	return t
}

// GroupOverhead is a group's overhead over a run (DESIGN 3.4, the FlexCast
// paper's Table 4): of the payload messages it received (client requests
// and messages from other groups), the fraction it did not deliver,
// 1 - Delivered/Received. A genuine protocol's groups receive only what they
// deliver; the tree protocol's inner groups forward what they do not.
type GroupOverhead struct {
	Overhead  float64 `json:"overhead"`
	Received  uint64  `json:"received"`
	Delivered uint64  `json:"delivered"`
}

// CheckSummary is the outcome of the consistency check: passed, and the
// failed conditions, at most CheckFailuresMax of them, with the number of
// the others.
type CheckSummary struct {
	Passed          bool     `json:"passed"`
	Failures        []string `json:"failures"`
	FailuresOmitted int      `json:"failures_omitted,omitempty"`
	Skipped         []string `json:"skipped,omitempty"`
}

// Summary returns the summary of r that a run's Report holds, failures
// (never nil) and omitted count included.
func (r CheckReport) Summary() *CheckSummary {
	failures := make([]string, len(r.Failures))
	copy(failures, r.Failures)
	return &CheckSummary{Passed: r.Passed, Failures: failures, FailuresOmitted: r.FailuresOmitted, Skipped: slices.Clone(r.Skipped)}
}

// MarshalJSON writes r with empty maps as {} and failures as a list, so
// that readers need not handle null, except for Check when no check ran.
func (r Report) MarshalJSON() ([]byte, error) {
	type plain Report // without the method
	out := plain(r)
	if out.Traffic == nil {
		out.Traffic = map[string]NodeTraffic{}
	}
	if out.Overhead == nil {
		out.Overhead = map[string]GroupOverhead{}
	}
	if out.Config.Homes == nil {
		out.Config.Homes = map[int]int{}
	}
	if out.Config.Workload.Warehouses == nil {
		out.Config.Workload.Warehouses = []int{}
	}
	if out.Check != nil && out.Check.Failures == nil {
		c := *out.Check
		c.Failures = []string{}
		out.Check = &c
	}
	return json.Marshal(out)
}

// WriteTable writes r as a table for people: the throughput, then a row
// per kind of transaction and per destination order with count, mean,
// p50, p90, p95, p99 and max in ms, then traffic, overhead, the check and
// sample errors when there are any.
func (r *Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	p := &printer{w: tw}
	p.printf("protocol %s: %d txn in %.1f s = %.1f txn/s; %d errors; %d rolled back\n\n",
		orNone(r.Protocol), r.TxnTotal, r.DurationS, r.TxnPerS, r.Errors, r.RolledBack)
	width := labelWidth(RowNames())
	p.printf("%-*s\tcount\tmean\tp50\tp90\tp95\tp99\tmax\t\n", width, "latency (ms)")
	for _, name := range RowNames() {
		s := r.Latency.Get(name)
		if s.Count == 0 {
			p.printf("%-*s\t0\t-\t-\t-\t-\t-\t-\t\n", width, rowLabel(name))
			continue
		}
		p.printf("%-*s\t%d\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t\n", width, rowLabel(name), s.Count, s.Mean, s.P50, s.P90, s.P95, s.P99, s.Max)
	}
	if len(r.Traffic) > 0 {
		nodes := sortedKeys(r.Traffic)
		width := max(labelWidth(nodes), len("traffic (node)"))
		p.printf("\n%-*s\tmsgs/s\tbytes/s\tavg msg bytes\t\n", width, "traffic (node)")
		for _, node := range nodes {
			t := r.Traffic[node]
			p.printf("%-*s\t%.1f\t%.0f\t%.1f\t\n", width, node, t.MsgsPerS, t.BytesPerS, t.AvgMsgBytes)
		}
	}
	if r.BytesPerTxn > 0 {
		p.printf("\ntraffic between nodes: %.0f bytes/txn, %.2f msgs/txn", r.BytesPerTxn, r.MsgsPerTxn)
		if len(r.BytesPerTxnByKind) > 0 {
			var parts []string
			for _, k := range sortedKeys(r.BytesPerTxnByKind) {
				parts = append(parts, fmt.Sprintf("%s %.0f", k, r.BytesPerTxnByKind[k]))
			}
			p.printf(" (bytes/txn by kind: %s)", strings.Join(parts, ", "))
		}
		p.printf("\n")
	}
	if len(r.Overhead) > 0 {
		p.printf("\n")
	}
	for _, g := range sortedKeys(r.Overhead) {
		o := r.Overhead[g]
		p.printf("overhead %s: %.1f%% (received %d, delivered %d)\n", g, 100*o.Overhead, o.Received, o.Delivered)
	}
	if c := r.Check; c != nil {
		if c.Passed {
			p.printf("\ncheck: passed\n")
		} else {
			p.printf("\ncheck: FAILED, %d failures\n", len(c.Failures)+c.FailuresOmitted)
			for _, f := range c.Failures {
				p.printf("  %s\n", f)
			}
			if c.FailuresOmitted > 0 {
				p.printf("  ... and %d more\n", c.FailuresOmitted)
			}
		}
		for _, s := range c.Skipped {
			p.printf("  not checked: %s\n", s)
		}
	}
	if len(r.ErrorSamples) > 0 {
		p.printf("\nfirst errors:\n")
	}
	for _, e := range r.ErrorSamples {
		p.printf("  %s\n", e)
	}
	p.flush()
	return p.err
}

// CompareTable writes reports side by side (the paper's Table 3 layout):
// a column per report, headed by its Name; a row for the throughput, one for
// the bytes sent between nodes per transaction when a report has them, then a row
// per kind of transaction and per destination order whose cells are the
// mean and p99 latency in ms ("-" where a report has none).
func CompareTable(w io.Writer, reports []*Report) error {
	for i, r := range reports {
		if r == nil {
			return fmt.Errorf("gtpcc: compare: report %d is nil", i)
		}
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	p := &printer{w: tw}
	width := max(labelWidth(RowNames()), len("mean / p99 ms"))
	p.printf("%-*s", width, "mean / p99 ms")
	for _, r := range reports {
		p.printf("\t%s", r.Name())
	}
	p.printf("\t\n")
	p.printf("%-*s", width, "txn/s")
	for _, r := range reports {
		p.printf("\t%.1f", r.TxnPerS)
	}
	p.printf("\t\n")
	if slices.ContainsFunc(reports, func(r *Report) bool { return r.BytesPerTxn > 0 }) {
		p.printf("%-*s", width, "bytes/txn")
		for _, r := range reports {
			p.printf("\t%.0f", r.BytesPerTxn)
		}
		p.printf("\t\n")
		kinds := map[string]bool{}
		for _, r := range reports {
			for k := range r.BytesPerTxnByKind {
				kinds[k] = true
			}
		}
		for _, k := range sortedKeys(kinds) {
			p.printf("%-*s", width, "  "+k)
			for _, r := range reports {
				p.printf("\t%.0f", r.BytesPerTxnByKind[k])
			}
			p.printf("\t\n")
		}
	}
	for _, name := range RowNames() {
		p.printf("%-*s", width, rowLabel(name))
		for _, r := range reports {
			if s := r.Latency.Get(name); s.Count > 0 {
				p.printf("\t%.1f / %.1f", s.Mean, s.P99)
			} else {
				p.printf("\t-")
			}
		}
		p.printf("\t\n")
	}
	p.flush()
	return p.err
}

// DestinationTable writes reports one row each in the FlexCast paper's
// Table 2 layout: for the 1st, 2nd and 3rd answer of a global
// transaction, the mean, p90, p95 and p99 latency in ms ("-" where a
// report has none).
func DestinationTable(w io.Writer, reports []*Report) error {
	names := make([]string, len(reports))
	for i, r := range reports {
		if r == nil {
			return fmt.Errorf("gtpcc: destination table: report %d is nil", i)
		}
		names[i] = r.Name()
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	p := &printer{w: tw}
	width := 0
	for _, n := range append(names, "latency (ms)") {
		width = max(width, len(n))
	}
	p.printf("%-*s", width, "latency (ms)")
	for _, d := range destNames {
		p.printf("\t%s mean\tp90\tp95\tp99", d)
	}
	p.printf("\t\n")
	for i, r := range reports {
		p.printf("%-*s", width, names[i])
		for _, d := range destNames {
			s := r.Latency.Get(d)
			if s.Count == 0 {
				p.printf("\t-\t-\t-\t-")
				continue
			}
			p.printf("\t%.1f\t%.1f\t%.1f\t%.1f", s.Mean, s.P90, s.P95, s.P99)
		}
		p.printf("\t\n")
	}
	p.flush()
	return p.err
}

// ModelStepMs is the step PredictedAtStepMs uses: EntryStepMs when the
// run measured it, else StepMs (0 when neither is known).
func (r *Report) ModelStepMs() float64 {
	if r.EntryStepMs > 0 {
		return r.EntryStepMs
	}
	return r.StepMs
}

// PredictionTable writes, for every report with a prediction, the mean
// 1st, 2nd and 3rd answer the model predicted beside the one measured,
// and how far the prediction is off the measure, in percent of it; under
// it, when the run measured its step (ModelStepMs), the model's answers
// with that step for its commit ("step measured 4.1"). It writes nothing when
// no report has a prediction.
func PredictionTable(w io.Writer, reports []*Report) error {
	var with []*Report
	width := len("model vs run (ms)")
	for _, r := range reports {
		if r != nil && len(r.PredictedMs) > 0 {
			with = append(with, r)
			width = max(width, len(r.Name()))
		}
	}
	if len(with) == 0 {
		return nil
	}
	type row struct {
		name string
		r    *Report
		pred map[string]float64
	}
	var rows []row
	for _, r := range with {
		rows = append(rows, row{r.Name(), r, r.PredictedMs})
		if len(r.PredictedAtStepMs) > 0 {
			name := fmt.Sprintf("  step measured %.1f", r.ModelStepMs())
			rows = append(rows, row{name, r, r.PredictedAtStepMs})
			width = max(width, len(name))
		}
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	p := &printer{w: tw}
	p.printf("%-*s", width, "model vs run (ms)")
	for _, d := range destNames {
		p.printf("\t%s predicted\tmeasured\toff", d)
	}
	p.printf("\t\n")
	for _, row := range rows {
		r := row.r
		p.printf("%-*s", width, row.name)
		for _, d := range destNames {
			pred, ok := row.pred[d]
			s := r.Latency.Get(d)
			switch {
			case !ok || pred == 0:
				p.printf("\t-")
			default:
				p.printf("\t%.1f", pred)
			}
			if s.Count == 0 {
				p.printf("\t-\t-")
				continue
			}
			p.printf("\t%.1f", s.Mean)
			if ok && pred > 0 && s.Mean > 0 {
				p.printf("\t%+.0f%%", 100*(pred-s.Mean)/s.Mean)
			} else {
				p.printf("\t-")
			}
		}
		p.printf("\t\n")
	}
	p.flush()
	if p.err == nil && slices.ContainsFunc(with, func(r *Report) bool { return r.Consistency == partition.ConsistencyStrict }) {
		// The model knows the order, not the release (docs/design.md 6.6).
		_, p.err = fmt.Fprintln(w, "  (strict serializability: answers also wait for conflicting transactions to complete, which the model leaves out; consistency: serializable measures the order alone)")
	}
	return p.err
}

// rowLabel names a latency row in tables.
func rowLabel(name string) string {
	if slices.Contains(destNames[:], name) {
		return name + " destination"
	}
	return name
}

// labelWidth returns the width of the widest row label of names: labels
// padded to it stay left-aligned in a right-aligned table.
func labelWidth(names []string) int {
	w := 0
	for _, n := range names {
		w = max(w, len(rowLabel(n)))
	}
	return w
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// printer writes to a tabwriter and keeps the first error.
type printer struct {
	w   *tabwriter.Writer
	err error
}

func (p *printer) printf(format string, a ...any) {
	if p.err == nil {
		_, p.err = fmt.Fprintf(p.w, format, a...)
	}
}

func (p *printer) flush() {
	if p.err == nil {
		p.err = p.w.Flush()
	}
}
