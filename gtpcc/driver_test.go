package gtpcc

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flexkv/flexkv/client"
	"github.com/flexkv/flexkv/gtpcc/procs"
	"github.com/flexkv/flexkv/txn"
)

// The client library's Client is what the CLI gives the driver.
var _ Caller = (*client.Client)(nil)

// fakeClock is a clock that moves only when told.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	return c.now
}

// fakeLatency is the latency of each kind of call under scriptedCaller.
var fakeLatency = map[string]time.Duration{
	procs.ProcNewOrder:    100 * time.Millisecond,
	procs.ProcPayment:     50 * time.Millisecond,
	procs.ProcOrderStatus: 20 * time.Millisecond,
	procs.ProcDelivery:    30 * time.Millisecond,
	procs.ProcStockLevel:  40 * time.Millisecond,
}

// scriptedCall is what scriptedCaller logs of a call.
type scriptedCall struct {
	proc       string
	end        time.Time
	keys       [][]byte
	dests      int
	failed     bool
	rolledBack bool
}

// scriptedCaller answers call i after advancing the clock by the call's
// fakeLatency: every 10th call fails, a new-order with an unused item
// (Small's) rolls back, the others succeed with 1 + i%3 destinations
// answering after 10, 20 and 30 ms.
type scriptedCaller struct {
	clock *fakeClock
	log   []scriptedCall
}

func (c *scriptedCaller) Call(_ context.Context, proc string, args []byte, keys [][]byte) (*txn.Result, error) {
	i := len(c.log)
	end := c.clock.Advance(fakeLatency[proc])
	call := scriptedCall{proc: proc, end: end, keys: keys}
	defer func() { c.log = append(c.log, call) }()
	if i%10 == 9 {
		call.failed = true
		return nil, fmt.Errorf("boom %d", i%3)
	}
	res := &txn.Result{ID: fmt.Sprint(i), Succeeded: true}
	if proc == procs.ProcNewOrder {
		var a procs.NewOrderArgs
		if err := procs.DecodeArgs(proc, args, &a); err != nil {
			return nil, err
		}
		if slices.ContainsFunc(a.Lines, func(l procs.NewOrderLine) bool { return l.Item > procs.Small.Items }) {
			res.Succeeded = false
			call.rolledBack = true
		}
	}
	call.dests = 1 + i%3
	for j := range call.dests {
		res.Destinations = append(res.Destinations, txn.DestLatency{Group: fmt.Sprint("g", j), Ms: float64(10 * (j + 1))})
	}
	return res, nil
}

// testKeys routes every call by the warehouse keys of its first argument.
func testKeys(name string, args []byte) ([][]byte, error) {
	return [][]byte{[]byte(name)}, nil
}

// near fails unless got is within the histogram's precision (0.1%) of
// want.
func near(t *testing.T, what string, got, want float64) {
	t.Helper()
	if math.Abs(got-want) > want*0.002+1e-9 {
		t.Errorf("%s = %v, want %v", what, got, want)
	}
}

// TestRunTrimsAndCounts runs one client against scriptedCaller on a fake
// clock and checks the report against the caller's log: only the calls
// that completed in [6 s, 54 s) of the 60 s run count.
func TestRunTrimsAndCounts(t *testing.T) {
	start := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := &fakeClock{now: start}
	caller := &scriptedCaller{clock: clock}
	cfg := RunConfig{
		Protocol:   "flexcast",
		Workload:   testWorkload(3),
		Clients:    []ClientSpec{{Home: 2, Caller: caller}},
		Duration:   60 * time.Second,
		Seed:       99,
		Keys:       testKeys,
		Clock:      clock.Now,
		ErrorPause: -1,
	}
	rep, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}

	w := countScripted(t, caller.log, start.Add(6*time.Second), start.Add(54*time.Second))
	txns, errs, rolled, trimmed := w.txns, w.errs, w.rolled, w.trimmed
	if trimmed < 100 || txns < 500 || errs == 0 || rolled == 0 {
		t.Fatalf("the script made %d trimmed, %d counted, %d failed, %d rolled-back calls: too few to test", trimmed, txns, errs, rolled)
	}
	if last := caller.log[len(caller.log)-1]; !last.end.After(start.Add(cfg.Duration - time.Second)) {
		t.Errorf("the last call ended at %v, long before the end of the run", last.end.Sub(start))
	}
	if rep.TxnTotal != txns || rep.Errors != errs || rep.RolledBack != rolled {
		t.Errorf("report: %d txn, %d errors, %d rolled back; want %d, %d, %d", rep.TxnTotal, rep.Errors, rep.RolledBack, txns, errs, rolled)
	}
	if rep.DurationS != 48 || rep.TxnPerS != math.Round(float64(txns)/48*1000)/1000 {
		t.Errorf("report: %v s, %v txn/s; want 48 s and %v txn/s", rep.DurationS, rep.TxnPerS, float64(txns)/48)
	}
	checkScriptedLatency(t, rep, w)
	// Every counted transaction is in one destination set of the home's
	// group (warehouse 2: group 2 without a Workload.Group).
	checkHomeSets(t, rep, "g2", txns)
	if samples := slices.Sorted(slices.Values(rep.ErrorSamples)); !slices.Equal(samples, []string{"boom 0", "boom 1", "boom 2"}) {
		t.Errorf("error samples %q, want the three distinct errors", rep.ErrorSamples)
	}
	// The timeline covers the whole run, trimmed calls included.
	var all int64
	for _, p := range rep.Timeline {
		all += p.Txns + p.Errors
	}
	if all != int64(len(caller.log)) {
		t.Errorf("timeline counts %d calls, want all %d", all, len(caller.log))
	}
	if rep.Protocol != "flexcast" || rep.Config.Clients != 1 || rep.Config.Homes[2] != 1 || rep.Config.WarmUp != TrimDefault || rep.Config.Seed != 99 {
		t.Errorf("report protocol %q, config %+v", rep.Protocol, rep.Config)
	}

	// The same seed makes the same calls.
	clock2 := &fakeClock{now: start}
	caller2 := &scriptedCaller{clock: clock2}
	cfg.Clients[0].Caller, cfg.Clock = caller2, clock2.Now
	if _, err := Run(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	if len(caller2.log) != len(caller.log) {
		t.Fatalf("second run made %d calls, want %d", len(caller2.log), len(caller.log))
	}
	for i := range caller.log {
		if caller.log[i].proc != caller2.log[i].proc {
			t.Fatalf("call %d: %s, then %s", i, caller.log[i].proc, caller2.log[i].proc)
		}
	}
}

// scriptedCounts are what a report must count of a scripted caller's log:
// the calls in its window by outcome, each kind's count and latency, the
// global transactions by destination count, and those trimmed.
type scriptedCounts struct {
	kinds                       map[string]*scriptedKind
	dests                       [3]int64
	txns, errs, rolled, trimmed int64
}

// scriptedKind is the count and the latency (fakeLatency) of one kind of
// transaction.
type scriptedKind struct {
	count int64
	ms    float64
}

// countScripted counts log's calls that completed in [from, to), and fails
// t on a call whose keys are not testKeys'.
func countScripted(t *testing.T, log []scriptedCall, from, to time.Time) scriptedCounts {
	t.Helper()
	w := scriptedCounts{kinds: map[string]*scriptedKind{}}
	for _, c := range log {
		if c.end.Before(from) || !c.end.Before(to) {
			w.trimmed++
			continue
		}
		if !bytes.Equal(c.keys[0], []byte(c.proc)) {
			t.Fatalf("call of %s with keys %q, want testKeys'", c.proc, c.keys)
		}
		if c.failed {
			w.errs++
			continue
		}
		w.txns++
		if c.rolledBack {
			w.rolled++
		}
		kind := strings.TrimPrefix(c.proc, "gtpcc.")
		if w.kinds[kind] == nil {
			w.kinds[kind] = &scriptedKind{ms: float64(fakeLatency[c.proc]) / float64(time.Millisecond)}
		}
		w.kinds[kind].count++
		if c.dests >= 2 {
			for j := range c.dests {
				w.dests[j]++
			}
		}
	}
	return w
}

// checkScriptedLatency checks rep's latency of every kind and destination
// count against w: the counts exactly, the figures within the histogram's
// precision.
func checkScriptedLatency(t *testing.T, rep *Report, w scriptedCounts) {
	t.Helper()
	for _, k := range kinds {
		s := rep.Latency.Get(k)
		kw := w.kinds[k]
		if kw == nil {
			t.Fatalf("the script made no %s call", k)
		}
		if s.Count != kw.count {
			t.Errorf("%s: count %d, want %d", k, s.Count, kw.count)
		}
		for name, got := range map[string]float64{"mean": s.Mean, "p50": s.P50, "p90": s.P90, "p95": s.P95, "p99": s.P99, "max": s.Max} {
			near(t, k+" "+name, got, kw.ms)
		}
	}
	for j, name := range destNames {
		s := rep.Latency.Get(name)
		if s.Count != w.dests[j] {
			t.Errorf("%s destination: count %d, want %d", name, s.Count, w.dests[j])
		}
		near(t, name+" destination mean", s.Mean, float64(10*(j+1)))
		near(t, name+" destination p99", s.P99, float64(10*(j+1)))
	}
}

// checkHomeSets checks that rep's destination sets, by count, each hold
// home, and count txns transactions in two sets or more.
func checkHomeSets(t *testing.T, rep *Report, home string, txns int64) {
	t.Helper()
	var counted int64
	for i, ds := range rep.DestinationSets {
		counted += ds.Count
		if ds.Home != home || !slices.Contains(ds.Groups, home) {
			t.Errorf("destination set %+v: want home %s among its groups", ds, home)
		}
		if i > 0 && ds.Count > rep.DestinationSets[i-1].Count {
			t.Errorf("destination sets not by count: %+v", rep.DestinationSets)
		}
	}
	if counted != txns || len(rep.DestinationSets) < 2 {
		t.Errorf("destination sets %+v count %d transactions, want %d in two sets or more", rep.DestinationSets, counted, txns)
	}
}

// TestRunTrimNone: without warm-up and cool-down every call that
// completes before the end counts.
func TestRunTrimNone(t *testing.T) {
	start := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := &fakeClock{now: start}
	caller := &scriptedCaller{clock: clock}
	rep, err := Run(context.Background(), RunConfig{
		Workload: testWorkload(3), Clients: []ClientSpec{{Home: 1, Caller: caller}},
		Duration: 10 * time.Second, WarmUp: TrimNone, CoolDown: TrimNone,
		Keys: testKeys, Clock: clock.Now, ErrorPause: -1,
	})
	if err != nil {
		t.Fatal(err)
	}
	var before int64
	for _, c := range caller.log {
		if c.end.Before(start.Add(10 * time.Second)) {
			before++
		}
	}
	if got := rep.TxnTotal + rep.Errors; got != before || rep.DurationS != 10 {
		t.Errorf("counted %d calls in %v s, want %d in 10 s", got, rep.DurationS, before)
	}
}

func TestOutcome(t *testing.T) {
	aborted := fmt.Errorf("client: %w: gtpcc: missing row", txn.ErrAborted)
	ok := &txn.Result{Succeeded: true}
	for _, tc := range []struct {
		name     string
		kind     string
		rollback bool
		res      *txn.Result
		err      error
		// wantFailure is the failure's text, "" for none.
		wantRolled  bool
		wantFailure string
	}{
		{"success", KindNewOrder, false, ok, nil, false, ""},
		{"payment success", KindPayment, false, ok, nil, false, ""},
		{"rolled back", KindNewOrder, true, &txn.Result{}, nil, true, ""},
		{"rollback succeeded", KindNewOrder, true, ok, nil, false, "new_order: expected a rollback (unused item), got success"},
		{"unexpected rollback", KindNewOrder, false, &txn.Result{}, nil, false, "new_order: expected success, got a rollback"},
		{"payment rolled back", KindPayment, false, &txn.Result{}, nil, false, "payment: expected success, got a rollback"},
		{"abort of a rollback", KindNewOrder, true, nil, aborted, false, "new_order: aborted: client: txn: aborted: gtpcc: missing row"},
		{"abort", KindDelivery, false, nil, aborted, false, "delivery: aborted: client: txn: aborted: gtpcc: missing row"},
		{"other error of a rollback", KindNewOrder, true, nil, errors.New("unavailable"), false, "unavailable"},
		{"no result", KindStockLevel, false, nil, nil, false, "stock_level: gtpcc.stock_level returned neither a result nor an error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			proc := map[string]string{KindNewOrder: procs.ProcNewOrder, KindPayment: procs.ProcPayment, KindDelivery: procs.ProcDelivery, KindStockLevel: procs.ProcStockLevel}[tc.kind]
			rolled, failure := outcome(Op{Kind: tc.kind, Proc: proc, Rollback: tc.rollback}, tc.res, tc.err)
			text := ""
			if failure != nil {
				text = failure.Error()
			}
			if rolled != tc.wantRolled || text != tc.wantFailure {
				t.Errorf("outcome = %v, %q; want rolled back %v, failure %q", rolled, text, tc.wantRolled, tc.wantFailure)
			}
			if tc.err != nil && !errors.Is(failure, tc.err) {
				t.Errorf("failure %v does not wrap the call's error %v", failure, tc.err)
			}
		})
	}
}

// TestRecorderOutcomes: a rolled-back new-order is a transaction, counted
// in rolled_back too; a wrong outcome or an abort is an error, its text
// sampled.
func TestRecorderOutcomes(t *testing.T) {
	start := time.Unix(1000, 0)
	rec := newRecorder(start, RunConfig{Duration: 10 * time.Second})
	at := start.Add(5 * time.Second)
	newOrder := Op{Kind: KindNewOrder, Proc: procs.ProcNewOrder}
	rollback := Op{Kind: KindNewOrder, Proc: procs.ProcNewOrder, Rollback: true}
	payment := Op{Kind: KindPayment, Proc: procs.ProcPayment}
	ok, rolled := &txn.Result{Succeeded: true}, &txn.Result{}
	for _, c := range []struct {
		op  Op
		res *txn.Result
		err error
	}{
		{newOrder, ok, nil},
		{rollback, rolled, nil},
		{rollback, rolled, nil},
		{payment, ok, nil},
		{rollback, ok, nil},
		{newOrder, rolled, nil},
		{payment, rolled, nil},
		{payment, nil, fmt.Errorf("%w: gtpcc: payment: no customer", txn.ErrAborted)},
	} {
		rec.record(c.op, 0, at, at.Add(10*time.Millisecond), c.res, c.err)
	}
	rep := rec.report(RunConfig{Duration: 10 * time.Second})
	if rep.TxnTotal != 4 || rep.RolledBack != 2 || rep.Errors != 4 {
		t.Errorf("report: %d txn, %d rolled back, %d errors; want 4, 2, 4", rep.TxnTotal, rep.RolledBack, rep.Errors)
	}
	if n := rep.Latency.Get(KindNewOrder).Count; n != 3 {
		t.Errorf("new-order latency count %d, want 3 (rolled back included)", n)
	}
	want := []string{
		"new_order: expected a rollback (unused item), got success",
		"new_order: expected success, got a rollback",
		"payment: expected success, got a rollback",
		"payment: aborted: txn: aborted: gtpcc: payment: no customer",
	}
	if !slices.Equal(rep.ErrorSamples, want) {
		t.Errorf("error samples %q, want %q", rep.ErrorSamples, want)
	}
}

// TestRecorderDestinations: by destination order counts global
// transactions only, and their first three answers.
func TestRecorderDestinations(t *testing.T) {
	start := time.Unix(1000, 0)
	rec := newRecorder(start, RunConfig{Duration: 10 * time.Second})
	op := Op{Kind: KindPayment, Proc: procs.ProcPayment}
	dl := func(ms ...float64) *txn.Result {
		r := &txn.Result{Succeeded: true}
		for _, m := range ms {
			r.Destinations = append(r.Destinations, txn.DestLatency{Ms: m})
		}
		return r
	}
	at := start.Add(5 * time.Second)
	one, two, three := op, op, op
	one.Groups, two.Groups, three.Groups = []int{1}, []int{0, 1}, []int{0, 1, 2}
	rec.record(one, 1, at, at.Add(7*time.Millisecond), dl(7), nil)
	rec.record(two, 0, at, at.Add(40*time.Millisecond), dl(5, 40), nil)
	rec.record(three, 1, at, at.Add(90*time.Millisecond), dl(6, 50, 80, 90), nil)
	rec.record(two, 0, at, at.Add(40*time.Millisecond), dl(5, 40), nil)
	rec.record(two, 0, at, at.Add(40*time.Millisecond), nil, errors.New("down"))
	rep := rec.report(RunConfig{Duration: 10 * time.Second, GroupNames: []string{"a", "b"}})
	wantSets := []DestinationSet{
		{Home: "a", Groups: []string{"a", "b"}, Count: 2},
		{Home: "b", Groups: []string{"a", "b", "g2"}, Count: 1},
		{Home: "b", Groups: []string{"b"}, Count: 1},
	}
	if len(rep.DestinationSets) != len(wantSets) {
		t.Fatalf("destination sets %+v, want %+v", rep.DestinationSets, wantSets)
	}
	for i, w := range wantSets {
		if g := rep.DestinationSets[i]; g.Home != w.Home || !slices.Equal(g.Groups, w.Groups) || g.Count != w.Count {
			t.Errorf("destination set %d: %+v, want %+v", i, g, w)
		}
	}
	for _, tc := range []struct {
		name      string
		count     int64
		mean, max float64
	}{
		{KindPayment, 4, (7 + 40 + 90 + 40) / 4.0, 90},
		{"1st", 3, (5 + 6 + 5) / 3.0, 6},
		{"2nd", 3, (40 + 50 + 40) / 3.0, 50},
		{"3rd", 1, 80, 80},
	} {
		s := rep.Latency.Get(tc.name)
		if s.Count != tc.count || math.Abs(s.Mean-tc.mean) > 1e-3 || s.Max != tc.max {
			t.Errorf("%s: %+v, want count %d, mean %v, max %v", tc.name, s, tc.count, tc.mean, tc.max)
		}
	}
	if h := rep.Histogram("2nd"); h == nil || h.TotalCount() != 3 {
		t.Errorf("2nd destination histogram %v, want 3 values", h)
	}
}

// TestRecorderEntryStep: EntryStepMs averages, over the global
// transactions, the answer of the group Entry names less the round trip it
// gives; a transaction without that group's answer, a local one, one
// outside the window and a failed one count nothing.
func TestRecorderEntryStep(t *testing.T) {
	start := time.Unix(1000, 0)
	names := []string{"a", "b", "c"}
	cfg := RunConfig{Duration: 10 * time.Second, GroupNames: names, WarmUp: 0.1,
		Entry: func(home int, groups []int) (int, float64) {
			// The lowest group; 4 ms away from a client of another group.
			e := slices.Min(groups)
			if e == home {
				return e, 0
			}
			return e, 4
		}}
	rec := newRecorder(start, cfg)
	op := Op{Kind: KindPayment, Proc: procs.ProcPayment}
	res := func(ds ...txn.DestLatency) *txn.Result { return &txn.Result{Succeeded: true, Destinations: ds} }
	at := start.Add(5 * time.Second)
	ab, bc, b := op, op, op
	ab.Groups, bc.Groups, b.Groups = []int{0, 1}, []int{1, 2}, []int{1}
	rec.record(ab, 0, at, at.Add(30*time.Millisecond), res(txn.DestLatency{Group: "a", Ms: 3}, txn.DestLatency{Group: "b", Ms: 30}), nil)   // 3
	rec.record(ab, 1, at, at.Add(30*time.Millisecond), res(txn.DestLatency{Group: "b", Ms: 6}, txn.DestLatency{Group: "a", Ms: 11}), nil)   // 11 - 4
	rec.record(bc, 2, at, at.Add(30*time.Millisecond), res(txn.DestLatency{Group: "c", Ms: 2}, txn.DestLatency{Group: "g9", Ms: 9}), nil)   // no answer of b
	rec.record(b, 1, at, at.Add(2*time.Millisecond), res(txn.DestLatency{Group: "b", Ms: 2}), nil)                                          // local
	rec.record(ab, 0, start, start.Add(time.Millisecond), res(txn.DestLatency{Group: "a", Ms: 1}, txn.DestLatency{Group: "b", Ms: 1}), nil) // warm-up
	rec.record(ab, 0, at, at.Add(30*time.Millisecond), nil, errors.New("down"))
	rep := rec.report(cfg)
	if want := (3 + 7) / 2.0; rep.EntryStepMs != want {
		t.Errorf("entry step %v ms, want %v", rep.EntryStepMs, want)
	}
	if rep.ModelStepMs() != rep.EntryStepMs {
		t.Errorf("model step %v, want the entry step %v", rep.ModelStepMs(), rep.EntryStepMs)
	}
	// Without Entry nothing is measured, and the model's step is the
	// servers' (StepMs).
	rec = newRecorder(start, RunConfig{Duration: 10 * time.Second, GroupNames: names})
	rec.record(ab, 0, at, at.Add(30*time.Millisecond), res(txn.DestLatency{Group: "a", Ms: 3}, txn.DestLatency{Group: "b", Ms: 30}), nil)
	if rep := rec.report(cfg); rep.EntryStepMs != 0 {
		t.Errorf("entry step %v without Entry, want 0", rep.EntryStepMs)
	} else if rep.StepMs = 2.5; rep.ModelStepMs() != 2.5 {
		t.Errorf("model step %v, want the servers' 2.5", rep.ModelStepMs())
	}
}

func TestProgressLine(t *testing.T) {
	start := time.Unix(1000, 0)
	rec := newRecorder(start, RunConfig{Duration: time.Minute})
	op := Op{Kind: KindDelivery, Proc: procs.ProcDelivery}
	for i := range 10 {
		at := start.Add(time.Duration(i) * 100 * time.Millisecond)
		rec.record(op, 0, at, at.Add(20*time.Millisecond), &txn.Result{Succeeded: true}, nil)
	}
	rec.record(op, 0, start, start.Add(time.Second), nil, errors.New("down"))
	line := rec.progressLine(start.Add(2 * time.Second))
	for _, want := range []string{"2.0s", "5.0 txn/s", "10 txn", "1 errors", "p50 20.0 ms", "p99 20.0 ms"} {
		if !strings.Contains(line, want) {
			t.Errorf("progress line %q lacks %q", line, want)
		}
	}
	if strings.Contains(line, "1st") {
		t.Errorf("progress line %q names a 1st answer without a global transaction", line)
	}
	// The rate is over the interval since the previous line, and so is
	// the 1st answer of the global transactions.
	global := &txn.Result{Succeeded: true, Destinations: []txn.DestLatency{{Group: "a", Ms: 12}, {Group: "b", Ms: 30}}}
	at := start.Add(2500 * time.Millisecond)
	rec.record(Op{Kind: KindPayment, Proc: procs.ProcPayment}, 0, at, at.Add(10*time.Millisecond), global, nil)
	global.Destinations[0].Ms = 18
	rec.record(Op{Kind: KindPayment, Proc: procs.ProcPayment}, 0, at, at.Add(10*time.Millisecond), global, nil)
	if line := rec.progressLine(start.Add(4 * time.Second)); !strings.Contains(line, " 1.0 txn/s") || !strings.Contains(line, "1st 15.0 ms") {
		t.Errorf("progress line %q, want 1.0 txn/s and 1st 15.0 ms", line)
	}
	if line := rec.progressLine(start.Add(6 * time.Second)); !strings.Contains(line, " 0.0 txn/s") || strings.Contains(line, "1st") {
		t.Errorf("progress line %q, want 0.0 txn/s and no 1st answer after an idle interval", line)
	}
}

// homeCaller counts calls by the home warehouse of their arguments; it
// rolls back the new-orders with an unused item (Small's).
type homeCaller struct {
	mu    sync.Mutex
	homes map[int]int
	calls atomic.Int64
}

func (c *homeCaller) Call(ctx context.Context, proc string, args []byte, _ [][]byte) (*txn.Result, error) {
	var a struct {
		W int `json:"w"`
	}
	js, _, err := procs.RowJSON(args) // every procedure's arguments have a "w"
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(js, &a); err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.homes[a.W]++
	c.mu.Unlock()
	c.calls.Add(1)
	pause(ctx, time.Millisecond) // not a busy loop
	succeeded := true
	if proc == procs.ProcNewOrder {
		var a procs.NewOrderArgs
		if err := procs.DecodeArgs(proc, args, &a); err != nil {
			return nil, err
		}
		succeeded = !slices.ContainsFunc(a.Lines, func(l procs.NewOrderLine) bool { return l.Item > procs.Small.Items })
	}
	return &txn.Result{Succeeded: succeeded, Destinations: []txn.DestLatency{{Ms: 1}, {Ms: 2}}}, nil
}

// syncBuffer is a bytes.Buffer safe for the progress writer and the test.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestRunConcurrentClients runs several clients on the wall clock, with
// procs.ProcedureKeys and progress lines.
func TestRunConcurrentClients(t *testing.T) {
	caller := &homeCaller{homes: map[int]int{}}
	specs, err := ClientsPerWarehouse([]int{1, 2}, 2, func(int, int) (Caller, error) { return caller, nil })
	if err != nil {
		t.Fatal(err)
	}
	var progress syncBuffer
	rep, err := Run(context.Background(), RunConfig{
		Workload: testWorkload(2), Clients: specs, Duration: 300 * time.Millisecond,
		WarmUp: TrimNone, CoolDown: TrimNone, Progress: &progress, ProgressEvery: 20 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if caller.homes[1] == 0 || caller.homes[2] == 0 || len(caller.homes) != 2 {
		t.Errorf("calls by home warehouse %v, want some of 1 and 2 only", caller.homes)
	}
	if rep.Errors != 0 || rep.TxnTotal == 0 || rep.TxnTotal > caller.calls.Load() {
		t.Errorf("report: %d txn, %d errors of %d calls", rep.TxnTotal, rep.Errors, caller.calls.Load())
	}
	if rep.Config.Clients != 4 || rep.Config.Homes[1] != 2 || rep.Config.Homes[2] != 2 {
		t.Errorf("report config %+v, want 2 clients at each of warehouses 1 and 2", rep.Config)
	}
	for line := range strings.Lines(progress.String()) {
		if !strings.HasPrefix(line, "gtpcc: ") || !strings.Contains(line, "txn/s") {
			t.Errorf("progress line %q", line)
		}
	}
}

func TestRunCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var calls atomic.Int64
	caller := callerFunc(func(ctx context.Context) (*txn.Result, error) {
		if calls.Add(1) == 5 {
			cancel()
		}
		return &txn.Result{Succeeded: true}, ctx.Err()
	})
	rep, err := Run(ctx, RunConfig{
		Workload: testWorkload(1), Clients: []ClientSpec{{Home: 1, Caller: caller}},
		Duration: time.Hour, Keys: testKeys, ErrorPause: -1,
	})
	if !errors.Is(err, context.Canceled) || rep == nil {
		t.Fatalf("Run = %v, %v; want a report and context.Canceled", rep, err)
	}
	// The calls the cancel cut short are no outcome: not errors. The
	// window ends where the run stopped, far before its hour.
	if rep.Errors != 0 || rep.DurationS > 60 {
		t.Errorf("report of the cancelled run: %d errors, window %.1f s; want 0 errors and the time it ran", rep.Errors, rep.DurationS)
	}
}

type callerFunc func(ctx context.Context) (*txn.Result, error)

func (f callerFunc) Call(ctx context.Context, _ string, _ []byte, _ [][]byte) (*txn.Result, error) {
	return f(ctx)
}

func TestRunConfigErrors(t *testing.T) {
	ok := callerFunc(func(context.Context) (*txn.Result, error) { return &txn.Result{}, nil })
	for _, tc := range []struct {
		name   string
		change func(*RunConfig)
		want   string
	}{
		{"no clients", func(c *RunConfig) { c.Clients = nil }, "0 clients"},
		{"no duration", func(c *RunConfig) { c.Duration = 0 }, "duration"},
		{"nil caller", func(c *RunConfig) { c.Clients[0].Caller = nil }, "no caller"},
		{"all trimmed", func(c *RunConfig) { c.WarmUp, c.CoolDown = 0.5, 0.5 }, "nothing to measure"},
		{"home elsewhere", func(c *RunConfig) { c.Clients[0].Home = 7 }, "home warehouse 7"},
		{"negative progress", func(c *RunConfig) { c.ProgressEvery = -time.Second }, "progress"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := RunConfig{Workload: testWorkload(2), Clients: []ClientSpec{{Home: 1, Caller: ok}}, Duration: time.Second}
			tc.change(&cfg)
			if _, err := Run(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Run: %v, want an error about %q", err, tc.want)
			}
		})
	}
}

func TestClientsPerWarehouse(t *testing.T) {
	specs, err := ClientsPerWarehouse([]int{3, 5}, 2, func(home, i int) (Caller, error) {
		return callerFunc(func(context.Context) (*txn.Result, error) { return nil, fmt.Errorf("%d.%d", home, i) }), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range specs {
		_, err := s.Caller.Call(context.Background(), "", nil, nil)
		got = append(got, fmt.Sprint(s.Home, ":", err))
	}
	if want := []string{"3:3.0", "3:3.1", "5:5.0", "5:5.1"}; !slices.Equal(got, want) {
		t.Errorf("clients %v, want %v", got, want)
	}
	if _, err := ClientsPerWarehouse([]int{1}, 1, func(int, int) (Caller, error) { return nil, errors.New("no dial") }); err == nil || !strings.Contains(err.Error(), "no dial") {
		t.Errorf("a failing caller constructor gave %v", err)
	}
	if _, err := ClientsPerWarehouse([]int{1}, 0, nil); err == nil {
		t.Error("0 clients per warehouse accepted")
	}
}
