package gtpcc

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/flexkv/flexkv/gtpcc/procs"
	"github.com/flexkv/flexkv/txn"
)

// The driver (DESIGN 9): closed-loop clients, each submitting its
// generator's transactions one after another for a duration; the results
// that complete in the first and last fractions of the run (warm-up and
// cool-down) are dropped, the others make the Report.

// Caller runs a stored procedure on the cluster. *client.Client satisfies
// it; tests give fakes.
type Caller interface {
	// Call runs procedure with args, routed by keys, and returns when
	// every destination answered; the Result lists the destinations in
	// answer order with their latencies.
	Call(ctx context.Context, procedure string, args []byte, keys [][]byte) (*txn.Result, error)
}

// ClientSpec is one closed-loop client: its home warehouse and what it
// calls through. Clients may share a Caller (a client.Client is safe for
// concurrent use).
type ClientSpec struct {
	Home   int
	Caller Caller
}

// ClientsPerWarehouse returns perWarehouse clients for each warehouse,
// with callers made by newCaller(home, i), i counting the warehouse's
// clients from 0.
func ClientsPerWarehouse(warehouses []int, perWarehouse int, newCaller func(home, i int) (Caller, error)) ([]ClientSpec, error) {
	if perWarehouse < 1 || perWarehouse*len(warehouses) > ClientsMax {
		return nil, fmt.Errorf("gtpcc: %d clients per warehouse for %d warehouses, want 1..%d in all", perWarehouse, len(warehouses), ClientsMax)
	}
	specs := make([]ClientSpec, 0, perWarehouse*len(warehouses))
	for _, w := range warehouses {
		for i := range perWarehouse {
			c, err := newCaller(w, i)
			if err != nil {
				return nil, fmt.Errorf("gtpcc: caller %d of warehouse %d: %w", i, w, err)
			}
			specs = append(specs, ClientSpec{Home: w, Caller: c})
		}
	}
	return specs, nil
}

// Driver defaults and bounds.
const (
	// TrimDefault is the fraction of the run dropped at each end when
	// RunConfig.WarmUp or CoolDown is 0; TrimNone drops nothing.
	TrimDefault = 0.1
	TrimNone    = -1.0
	// ProgressEveryDefault is the interval of progress lines when
	// RunConfig.ProgressEvery is 0, and the CLI's default.
	ProgressEveryDefault = 5 * time.Second
	// ErrorPauseDefault is how long a client waits after a failed call
	// when RunConfig.ErrorPause is 0, so that a cluster that fails at
	// once does not make the clients spin.
	ErrorPauseDefault = 10 * time.Millisecond
	// ClientsMax bounds the clients of a run.
	ClientsMax = 1 << 16
	// DrainMax bounds the wait, after a run's deadline, for the calls
	// still in flight; past it they are cancelled (and may still take
	// effect).
	DrainMax = time.Minute
	// DurationMax bounds a run: the timeline holds a point per second.
	DurationMax = 7 * 24 * time.Hour
	// errorSamplesMax bounds the distinct error texts a report keeps;
	// errorTextMax the length of each.
	errorSamplesMax = 5
	errorTextMax    = 300
	// Histograms hold latencies in microseconds from 1 µs to an hour,
	// to 3 significant digits; longer ones count as an hour.
	histMinUs, histMaxUs, histDigits = 1, int64(time.Hour / time.Microsecond), 3
)

// RunConfig configures a run.
type RunConfig struct {
	// Protocol names the cluster's ordering protocol in the report.
	Protocol string
	Workload WorkloadConfig
	// Clients are the closed-loop clients: 1..ClientsMax, each with a
	// home among Workload.Warehouses.
	Clients []ClientSpec
	// Duration is how long the clients submit transactions (at most
	// DurationMax). Calls still running at its end are awaited, up to
	// DrainMax.
	Duration time.Duration
	// WarmUp and CoolDown are the fractions of Duration at the start and
	// at the end whose results are dropped: a result counts when its
	// call completes within [start+WarmUp*Duration, end-CoolDown*Duration).
	// 0: TrimDefault; negative (TrimNone): none. Together below 1.
	WarmUp, CoolDown float64
	// Seed seeds the generators: client i gets a seed derived from Seed
	// and i, so the same Seed and clients draw the same transactions.
	Seed uint64
	// Progress, when set, gets a line every ProgressEvery (0:
	// ProgressEveryDefault) of wall clock: elapsed time, txn/s over the
	// interval, errors, p50 and p99 so far.
	Progress      io.Writer
	ProgressEvery time.Duration
	// ErrorPause is how long a client waits after a failed call (0:
	// ErrorPauseDefault; negative: no wait).
	ErrorPause time.Duration
	// Keys returns the keys a call touches, for routing; nil:
	// procs.ProcedureKeys.
	Keys func(name string, args []byte) ([][]byte, error)
	// Clock reads the time for the generators' dates, the latencies and
	// the trimming; nil: time.Now. Tests give a fake clock.
	Clock func() time.Time
	// Extra is copied to the report's config (the cluster's
	// configuration file, latency mode, ...).
	Extra map[string]string
	// GroupNames names the groups of Workload.Group (a partition.GroupID
	// each) in the report's destination sets; nil: "g<number>".
	GroupNames []string
	// Entry, when set, names the group of a global transaction of a
	// client of group home to groups that answers after one step of its
	// group, if it is a destination (FlexCast's lca; the tree's), and the
	// round trip, in ms, that the client's network adds to reaching it:
	// the report's EntryStepMs is that answer's mean less the round trip.
	// A negative group: unknown, not counted. It needs GroupNames to
	// match the answers' groups.
	Entry func(home int, groups []int) (entry int, rttMs float64)
}

// withDefaults returns cfg with the defaults in place, or an error naming
// what is wrong.
func (cfg RunConfig) withDefaults() (RunConfig, error) {
	switch {
	case len(cfg.Clients) == 0 || len(cfg.Clients) > ClientsMax:
		return cfg, fmt.Errorf("gtpcc: run: %d clients, want 1..%d", len(cfg.Clients), ClientsMax)
	case cfg.Duration <= 0 || cfg.Duration > DurationMax:
		return cfg, fmt.Errorf("gtpcc: run: duration %v, want above 0 and at most %v", cfg.Duration, DurationMax)
	case cfg.ProgressEvery < 0:
		return cfg, fmt.Errorf("gtpcc: run: progress interval %v, want >= 0", cfg.ProgressEvery)
	}
	for i, c := range cfg.Clients {
		if c.Caller == nil {
			return cfg, fmt.Errorf("gtpcc: run: client %d (warehouse %d) has no caller", i, c.Home)
		}
	}
	for _, f := range []*float64{&cfg.WarmUp, &cfg.CoolDown} {
		switch {
		case *f == 0:
			*f = TrimDefault
		case *f < 0:
			*f = 0
		}
	}
	if !(cfg.WarmUp+cfg.CoolDown < 1) {
		return cfg, fmt.Errorf("gtpcc: run: warm-up %v and cool-down %v leave nothing to measure", cfg.WarmUp, cfg.CoolDown)
	}
	if cfg.ProgressEvery == 0 {
		cfg.ProgressEvery = ProgressEveryDefault
	}
	if cfg.ErrorPause == 0 {
		cfg.ErrorPause = ErrorPauseDefault
	}
	if cfg.Keys == nil {
		cfg.Keys = procs.ProcedureKeys
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	return cfg, nil
}

// clientSeed derives client i's seed from the run's (splitmix64), so that
// neighbouring seeds and clients give unrelated streams.
func clientSeed(seed uint64, i int) uint64 {
	z := seed + uint64(i+1)*0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// Run runs the clients of cfg for cfg.Duration and returns the report of
// the measured window. It returns when every client has stopped. When ctx
// ends first, it returns the report so far with ctx's error.
func Run(ctx context.Context, cfg RunConfig) (*Report, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	gens := make([]*Generator, len(cfg.Clients))
	for i, c := range cfg.Clients {
		if gens[i], err = NewGenerator(cfg.Workload, c.Home, clientSeed(cfg.Seed, i)); err != nil {
			return nil, fmt.Errorf("gtpcc: run: client %d: %w", i, err)
		}
	}
	start := cfg.Clock()
	deadline := start.Add(cfg.Duration)
	rec := newRecorder(start, cfg)

	// No call starts after the deadline, and the calls in flight then
	// are awaited (up to DrainMax): their results fall after the measured
	// window and are dropped, but a run that returns has nothing in
	// flight, so that a consistency check after it sees every transaction
	// it submitted applied everywhere (a call cancelled at the deadline
	// would still be delivered and executed, during the check).
	runCtx, cancel := context.WithTimeout(ctx, cfg.Duration+DrainMax)
	defer cancel()
	var wg sync.WaitGroup
	for i, c := range cfg.Clients {
		wg.Go(func() { runClient(runCtx, cfg, gens[i], c.Caller, deadline, rec) })
	}
	stopProgress := func() {}
	if cfg.Progress != nil {
		stopProgress = startProgress(cfg, rec)
	}
	wg.Wait()
	stopProgress()
	if err := ctx.Err(); err != nil {
		// The measured window ends where the run stopped.
		rec.cut(cfg.Clock())
		return rec.report(cfg), fmt.Errorf("gtpcc: run stopped early: %w", err)
	}
	return rec.report(cfg), nil
}

// runClient is one closed-loop client: it submits a transaction, waits for
// its outcome, records it, and starts the next, until the deadline.
func runClient(ctx context.Context, cfg RunConfig, gen *Generator, caller Caller, deadline time.Time, rec *recorder) {
	for ctx.Err() == nil {
		begin := cfg.Clock()
		if !begin.Before(deadline) {
			return
		}
		op := gen.Next(begin)
		var res *txn.Result
		keys, err := cfg.Keys(op.Proc, op.Args)
		if err != nil {
			err = fmt.Errorf("gtpcc: keys of %s: %w", op.Proc, err)
		} else {
			res, err = caller.Call(ctx, op.Proc, op.Args, keys)
		}
		if err != nil && ctx.Err() != nil {
			// Cut short by the run's end or the caller's: not an
			// outcome of the transaction, which may still take effect.
			return
		}
		rec.record(op, cfg.Workload.groupOf(gen.home), begin, cfg.Clock(), res, err)
		if err != nil && cfg.ErrorPause > 0 && cfg.Clock().Before(deadline) {
			pause(ctx, cfg.ErrorPause)
		}
	}
}

// pause waits for d or until ctx ends.
func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// startProgress writes a progress line every cfg.ProgressEvery until the
// function it returns is called; that function returns once the writer
// has stopped.
func startProgress(cfg RunConfig, rec *recorder) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(cfg.ProgressEvery)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				// A progress line is advice: a failed write must not
				// stop the run.
				_, _ = io.WriteString(cfg.Progress, rec.progressLine(cfg.Clock())+"\n")
			}
		}
	})
	return func() {
		close(done)
		wg.Wait()
	}
}

// latencyStat accumulates latencies: a histogram for the percentiles, the
// exact sum and maximum for the mean and max.
type latencyStat struct {
	hist  *hdrhistogram.Histogram // microseconds
	count int64
	sumMs float64
	maxMs float64
}

func newLatencyStat() latencyStat {
	return latencyStat{hist: hdrhistogram.New(histMinUs, histMaxUs, histDigits)}
}

// add records a latency of ms milliseconds (negative ones as 0).
func (s *latencyStat) add(ms float64) {
	ms = max(ms, 0)
	if math.IsNaN(ms) {
		ms = 0
	}
	us := int64(math.Round(ms * 1000))
	us = min(max(us, histMinUs), histMaxUs)
	// In range by the clamp: RecordValue cannot fail.
	_ = s.hist.RecordValue(us)
	s.count++
	s.sumMs += ms
	s.maxMs = max(s.maxMs, ms)
}

// percentileMs returns percentile p (0..100) in milliseconds. The
// histogram answers with the highest value equivalent to the percentile's
// (within its precision), which may lie above every latency recorded: it
// is capped at the exact maximum.
func (s *latencyStat) percentileMs(p float64) float64 {
	if s.count == 0 {
		return 0
	}
	return min(float64(s.hist.ValueAtPercentile(p))/1000, s.maxMs)
}

// stats summarizes s, in milliseconds rounded to microseconds.
func (s *latencyStat) stats() LatencyStats {
	if s.count == 0 {
		return LatencyStats{}
	}
	return LatencyStats{
		Count: s.count,
		Mean:  roundUs(s.sumMs / float64(s.count)),
		P50:   roundUs(s.percentileMs(50)),
		P90:   roundUs(s.percentileMs(90)),
		P95:   roundUs(s.percentileMs(95)),
		P99:   roundUs(s.percentileMs(99)),
		Max:   roundUs(s.maxMs),
	}
}

func roundUs(ms float64) float64 { return math.Round(ms*1000) / 1000 }

// destOrders is the number of answer orders the report keeps: 1st, 2nd
// and 3rd destination (DESIGN 10.3).
const destOrders = 3

// recorder collects the outcomes of the clients' calls. It is safe for
// concurrent use.
type recorder struct {
	mu       sync.Mutex
	start    time.Time
	from, to time.Time // the measured window: completions in [from, to)

	// Of the measured window.
	kinds        [len(kinds)]latencyStat
	dests        [destOrders]latencyStat
	txns, errs   int64
	rolledBack   int64
	errorSamples []string
	// sets counts the completed transactions by home group and
	// destination groups (Op.Groups), keyed by setKey.
	sets map[string]*setCount
	// entry and names are RunConfig's Entry and GroupNames; entrySum sums
	// the entry group's answers less the round trip to it, over entryN
	// transactions.
	entry    func(home int, groups []int) (int, float64)
	names    []string
	entrySum float64
	entryN   int64

	// Of the whole run, for progress lines and the timeline.
	all      latencyStat
	allTxns  int64
	allErrs  int64
	timeline []TimelinePoint
	// lastSecond: the first second of the timeline the next progress
	// line covers.
	lastSecond int
	lastAt     time.Time // the previous progress line's time and count
	lastTxns   int64
}

func newRecorder(start time.Time, cfg RunConfig) *recorder {
	d := cfg.Duration
	r := &recorder{
		start:  start,
		from:   start.Add(time.Duration(cfg.WarmUp * float64(d))),
		to:     start.Add(d - time.Duration(cfg.CoolDown*float64(d))),
		all:    newLatencyStat(),
		lastAt: start,
		sets:   map[string]*setCount{},
		entry:  cfg.Entry,
		names:  cfg.GroupNames,
		// A point per second of the run, and one for calls that end
		// after it.
		timeline: make([]TimelinePoint, int((d+time.Second-1)/time.Second)+1),
	}
	for i := range r.timeline {
		r.timeline[i].Second = i
	}
	for i := range r.kinds {
		r.kinds[i] = newLatencyStat()
	}
	for i := range r.dests {
		r.dests[i] = newLatencyStat()
	}
	return r
}

// outcome classifies a call: failed (an error), or completed, rolled back
// or not. Only a new-order marked Rollback may roll back, and it must: the
// procedures report the unknown item as Succeeded false (ErrRolledBack),
// taken alike at every destination from the replicated item table. So a
// marked new-order that succeeds (an item table that has the unused item),
// an unmarked call that rolls back, and an abort of any call (a missing
// or corrupt row, a bad argument) are failures: hiding them would hide
// the only sign that the groups' tables differ.
func outcome(op Op, res *txn.Result, err error) (rolledBack bool, failure error) {
	switch {
	case err != nil && errors.Is(err, txn.ErrAborted):
		return false, fmt.Errorf("%s: aborted: %w", op.Kind, err)
	case err != nil:
		return false, err
	case res == nil:
		return false, fmt.Errorf("%s: %s returned neither a result nor an error", op.Kind, op.Proc)
	case op.Rollback && res.Succeeded:
		return false, fmt.Errorf("%s: expected a rollback (unused item), got success", op.Kind)
	case !op.Rollback && !res.Succeeded:
		return false, fmt.Errorf("%s: expected success, got a rollback", op.Kind)
	}
	return op.Rollback, nil
}

// setCount counts the transactions of one home group and destination set.
type setCount struct {
	home   int
	groups []int
	count  int64
}

// setsMax bounds the distinct destination sets a report counts: with
// three groups at most per transaction under the paper's workloads, a few
// thousand at 64 groups; beyond the bound, new sets are not counted.
const setsMax = 1 << 16

// record records a call of op, by a client of group home, that ran from
// begin to end.
func (r *recorder) record(op Op, home int, begin, end time.Time, res *txn.Result, err error) {
	rolledBack, failure := outcome(op, res, err)
	ms := float64(end.Sub(begin)) / float64(time.Millisecond)
	k := kindIndex(op.Kind)
	if k < 0 {
		panic(fmt.Sprintf("gtpcc: driver: op of unknown kind %q", op.Kind)) // the generator's kinds only
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	second := min(max(int(end.Sub(r.start)/time.Second), 0), len(r.timeline)-1)
	if failure != nil {
		r.allErrs++
		r.timeline[second].Errors++
	} else {
		r.allTxns++
		r.timeline[second].Txns++
		r.all.add(ms)
		if res != nil && len(res.Destinations) >= 2 {
			r.timeline[second].FirstMs += res.Destinations[0].Ms
			r.timeline[second].Global++
		}
	}
	if end.Before(r.from) || !end.Before(r.to) {
		return
	}
	if failure != nil {
		r.errs++
		r.sampleError(failure)
		return
	}
	r.txns++
	if rolledBack {
		r.rolledBack++
	}
	r.kinds[k].add(ms)
	r.countSet(home, op.Groups)
	// By destination order: global transactions only, as the paper
	// reports them; a local one's single answer is its latency by kind.
	if res == nil || len(res.Destinations) < 2 {
		return
	}
	for i, d := range res.Destinations[:min(len(res.Destinations), destOrders)] {
		r.dests[i].add(d.Ms)
	}
	if r.entry == nil {
		return
	}
	if e, rtt := r.entry(home, op.Groups); e >= 0 && e < len(r.names) {
		for _, d := range res.Destinations {
			if d.Group == r.names[e] {
				r.entrySum += d.Ms - rtt
				r.entryN++
				break
			}
		}
	}
}

// countSet counts a completed transaction of a client of group home to
// groups.
func (r *recorder) countSet(home int, groups []int) {
	key := fmt.Sprint(home, groups)
	if c, ok := r.sets[key]; ok {
		c.count++
		return
	}
	if len(r.sets) < setsMax {
		r.sets[key] = &setCount{home: home, groups: slices.Clone(groups), count: 1}
	}
}

// destinationSets returns the counted sets, most frequent first (then by
// home and groups), named by names.
func (r *recorder) destinationSets(names []string) []DestinationSet {
	name := func(g int) string {
		if g >= 0 && g < len(names) {
			return names[g]
		}
		return fmt.Sprint("g", g)
	}
	out := make([]DestinationSet, 0, len(r.sets))
	for _, c := range r.sets {
		ds := DestinationSet{Home: name(c.home), Count: c.count, home: c.home, groups: c.groups}
		for _, g := range c.groups {
			ds.Groups = append(ds.Groups, name(g))
		}
		out = append(out, ds)
	}
	slices.SortFunc(out, func(a, b DestinationSet) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.home, b.home), slices.Compare(a.groups, b.groups))
	})
	return out
}

// sampleError keeps the first errorSamplesMax distinct error texts.
func (r *recorder) sampleError(err error) {
	if len(r.errorSamples) >= errorSamplesMax {
		return
	}
	text := err.Error()
	if len(text) > errorTextMax {
		text = text[:errorTextMax] + "..."
	}
	if !slices.Contains(r.errorSamples, text) {
		r.errorSamples = append(r.errorSamples, text)
	}
}

// progressLine returns a progress line at time now: the time since the
// start, txn/s since the previous line, the errors and the p50 and p99
// latencies of the whole run so far, and the mean 1st answer of the
// global transactions of the whole seconds since the previous line.
func (r *recorder) progressLine(now time.Time) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	rate := 0.0
	if dt := now.Sub(r.lastAt).Seconds(); dt > 0 {
		rate = float64(r.allTxns-r.lastTxns) / dt
	}
	r.lastAt, r.lastTxns = now, r.allTxns
	line := fmt.Sprintf("gtpcc: %6.1fs  %8.1f txn/s  %d txn  %d errors  p50 %.1f ms  p99 %.1f ms",
		now.Sub(r.start).Seconds(), rate, r.allTxns, r.allErrs, r.all.percentileMs(50), r.all.percentileMs(99))
	// The mean 1st answer of the global transactions since the previous
	// line: what a change of the overlay moves.
	var sum float64
	var n int64
	for i := r.lastSecond; i < len(r.timeline) && r.timeline[i].Second < int(now.Sub(r.start)/time.Second); i++ {
		sum += r.timeline[i].FirstMs
		n += r.timeline[i].Global
		r.lastSecond = i + 1
	}
	if n > 0 {
		line += fmt.Sprintf("  1st %.1f ms", sum/float64(n))
	}
	return line
}

// cut ends the measured window at now, if it ends later: a run stopped
// early reports the rate over the time it ran.
func (r *recorder) cut(now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if now.Before(r.to) {
		r.to = now
	}
	if r.to.Before(r.from) {
		r.to = r.from
	}
}

// report returns the report of the measured window.
func (r *recorder) report(cfg RunConfig) *Report {
	r.mu.Lock()
	defer r.mu.Unlock()
	window := r.to.Sub(r.from).Seconds()
	rep := &Report{
		Protocol:   cfg.Protocol,
		Config:     newReportConfig(cfg),
		DurationS:  window,
		TxnTotal:   r.txns,
		Errors:     r.errs,
		RolledBack: r.rolledBack,
		Traffic:    map[string]NodeTraffic{},
		Overhead:   map[string]GroupOverhead{},

		ErrorSamples:    slices.Clone(r.errorSamples),
		DestinationSets: r.destinationSets(cfg.GroupNames),
		Timeline:        slices.Clone(r.timeline),
		hists:           map[string]*hdrhistogram.Histogram{},
	}
	if window > 0 {
		rep.TxnPerS = math.Round(float64(r.txns)/window*1000) / 1000
	}
	if r.entryN > 0 {
		rep.EntryStepMs = r.entrySum / float64(r.entryN)
	}
	for i := range r.kinds {
		rep.Latency.set(kinds[i], r.kinds[i].stats())
		rep.hists[kinds[i]] = r.kinds[i].hist.Clone()
	}
	for i := range r.dests {
		rep.Latency.set(destNames[i], r.dests[i].stats())
		rep.hists[destNames[i]] = r.dests[i].hist.Clone()
	}
	return rep
}

// newReportConfig returns the configuration a report records.
func newReportConfig(cfg RunConfig) ReportConfig {
	w := cfg.Workload
	w.Warehouses = slices.Clone(w.Warehouses)
	w.Mix = w.mix()
	homes := map[int]int{}
	for _, c := range cfg.Clients {
		homes[c.Home]++
	}
	return ReportConfig{
		Workload: w,
		Clients:  len(cfg.Clients),
		Homes:    homes,
		RunS:     cfg.Duration.Seconds(),
		WarmUp:   cfg.WarmUp,
		CoolDown: cfg.CoolDown,
		Seed:     cfg.Seed,
		Extra:    maps.Clone(cfg.Extra),
	}
}
