// Package outage measures the blast radius of one group's fault on real
// processes (DESIGN 12, 15; docs/design.md's blast radius per protocol):
// loops of two-key transfers run between groups of a cluster of hosts
// (package hosts) while one group is cut off from the others, or loses its
// leader, and the transfers each loop completes are counted second by
// second before, during and after the fault.
//
// A fault is data (Scenario): what is done to which group, and which loops
// run meanwhile, each with what it should keep (Want). Run runs one
// scenario on a running cluster; Report writes what several runs measured
// as a table, JSON and CSV. `make outage` runs every protocol, fault and
// group it is given; the package's tests run the short version that holds
// the claims.
package outage

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/flexkv/flexkv/client"
	"github.com/flexkv/flexkv/jepsen/hosts"
	"github.com/flexkv/flexkv/txn"
)

// Fault is what a scenario does to its group.
type Fault string

const (
	// CutPeers drops the group's inter-group (peer) traffic for the hold,
	// both directions: its clients and its raft are untouched
	// (hosts.Cluster.CutRegionPeers).
	CutPeers Fault = "cut"
	// KillLeader sends SIGKILL to the group's leader and restarts it after
	// the hold.
	KillLeader Fault = "kill-leader"
)

// ParseFault returns the fault named s.
func ParseFault(s string) (Fault, error) {
	switch f := Fault(s); f {
	case CutPeers, KillLeader:
		return f, nil
	}
	return "", fmt.Errorf("outage: unknown fault %q (want %s or %s)", s, CutPeers, KillLeader)
}

// Want is what a loop should keep while the fault holds.
type Want string

const (
	// Any asserts nothing: the loop is measured only.
	Any Want = ""
	// Keeps is met if the loop's rate over the hold is at least half its rate
	// before (the claim of a genuine protocol for the traffic of groups
	// the fault leaves reachable).
	Keeps Want = "keeps"
	// KeepsEverySecond is met if every second of the hold is at least half the
	// rate before, so that a stop of a second or two is not averaged away
	// (a leader kill's election).
	KeepsEverySecond Want = "keeps-every-second"
	// Stops is met if the loop's rate over the hold, after its first second (what
	// was under way), is at most a tenth of its rate before (traffic that
	// needs the cut group, or travels through it).
	Stops Want = "stops"
)

// keepFraction and stopFraction are the bounds of Keeps and Stops.
const (
	keepFraction = 0.5
	stopFraction = 0.1
)

// Loop is a stream of two-key transfers, one key in group A and one in
// group B (groups from 0, by rank); A == B is the group's own traffic, two
// keys of its own.
type Loop struct {
	A, B int
	Want Want
}

// Name names the loop by its groups: "eu-west-1<->eu-central-1", or
// "eu-west-1 own".
func (l Loop) Name() string {
	if l.A == l.B {
		return hosts.GroupName(l.A) + " own"
	}
	return hosts.GroupName(l.A) + "<->" + hosts.GroupName(l.B)
}

// Scenario is one fault of one group with the loops that run meanwhile.
type Scenario struct {
	Fault Fault
	Group int // the group faulted, from 0
	Loops []Loop
	// Mix names the loops in the scenario's name, when they are a mix of
	// Loops.
	Mix string
}

// Name names the scenario: "cut eu-west-3", "cut eu-west-3 (both)".
func (s Scenario) Name() string {
	name := string(s.Fault) + " " + hosts.GroupName(s.Group)
	if s.Mix != "" {
		name += " (" + s.Mix + ")"
	}
	return name
}

// Mixes of loops for a fault of group g among n groups.
const (
	// MixOthers: transfers between every pair of the other groups, and
	// nothing that names g.
	MixOthers = "others"
	// MixBoth: MixOthers, and transfers between g and every other group
	// beside them.
	MixBoth = "both"
	// MixOwn: MixOthers, and every other group's own transfers.
	MixOwn = "own"
	// MixWith followed by a group's name (with-eu-central-1): MixOthers,
	// and transfers between g and that group beside them (issue 32's first
	// row: eu-west-1<->eu-central-1 beside eu-west-3<->eu-central-1 while
	// eu-west-3 is cut).
	MixWith = "with-"
)

// Loops returns the loops of mix for a fault of group g among n groups:
// those that do not name g want keep (Keeps, or KeepsEverySecond when
// everySecond), those that name g want Any. A mix with g itself has no
// loops.
func Loops(mix string, n, g int, everySecond bool) ([]Loop, error) {
	keep := Keeps
	if everySecond {
		keep = KeepsEverySecond
	}
	var loops []Loop
	for a := range n {
		for b := a + 1; b < n; b++ {
			if a != g && b != g {
				loops = append(loops, Loop{A: a, B: b, Want: keep})
			}
		}
	}
	if name, ok := strings.CutPrefix(mix, MixWith); ok {
		h := -1
		for i := range n {
			if hosts.GroupName(i) == name {
				h = i
			}
		}
		switch {
		case h < 0:
			return nil, fmt.Errorf("outage: mix %q: no group %q among the %d", mix, name, n)
		case h == g:
			return nil, nil // no traffic beside itself: the mix does not apply
		}
		return append(loops, Loop{A: min(g, h), B: max(g, h), Want: Any}), nil
	}
	switch mix {
	case MixOthers:
	case MixBoth:
		for h := range n {
			if h != g {
				loops = append(loops, Loop{A: min(g, h), B: max(g, h), Want: Any})
			}
		}
	case MixOwn:
		for h := range n {
			if h != g {
				loops = append(loops, Loop{A: h, B: h, Want: keep})
			}
		}
	default:
		return nil, fmt.Errorf("outage: unknown mix %q (want %s, %s, %s or %sGROUP)", mix, MixOthers, MixBoth, MixOwn, MixWith)
	}
	return loops, nil
}

// Windows are the lengths of a run's parts: Warmup (loops running, not
// counted; longer until every loop completes transfers), Before, Hold (the
// fault), After (healed). Each is counted in whole seconds.
type Windows struct {
	Warmup, Before, Hold, After time.Duration
}

// Config is what Run needs besides the scenario.
type Config struct {
	Cluster  *hosts.Cluster
	Protocol string // for the result only
	Windows  Windows
	// Workers is the transfers in flight per loop (0: 4), each its own
	// closed loop.
	Workers int
	// OpTimeout bounds one transfer (0: 2s): a transfer stuck behind the
	// fault gives way to a fresh one.
	OpTimeout time.Duration
	Logf      func(format string, args ...any)
}

// Result is what one run of a scenario measured.
type Result struct {
	Protocol string `json:"protocol"`
	Scenario string `json:"scenario"`
	Fault    Fault  `json:"fault"`
	Group    string `json:"group"`
	// Target is the replica killed (KillLeader), or the group cut.
	Target string       `json:"target"`
	Loops  []LoopResult `json:"loops"`
}

// LoopResult is one loop's transfers completed in each second of each
// window, and the rates they make.
type LoopResult struct {
	Loop   string `json:"loop"`
	Want   Want   `json:"want,omitempty"`
	Before []int  `json:"before"`
	During []int  `json:"during"`
	After  []int  `json:"after"`
	// Errors are the transfers that failed or timed out, over the run.
	Errors     int     `json:"errors"`
	BeforeRate float64 `json:"before_per_s"`
	DuringRate float64 `json:"during_per_s"`
	AfterRate  float64 `json:"after_per_s"`
	DuringMin  int     `json:"during_min_per_s"`
	// ResumedMs is the time from the heal to the first transfer completed
	// after it, in ms; -1 when none completed in the after window.
	ResumedMs int64 `json:"resumed_ms"`
}

// Ratio is the rate during the fault over the rate before (0 when nothing
// ran before).
func (l LoopResult) Ratio() float64 {
	if l.BeforeRate == 0 {
		return 0
	}
	return l.DuringRate / l.BeforeRate
}

// Check returns why the loop did not do what it wants, or "" if it did.
func (l LoopResult) Check() string {
	switch {
	case l.Want == Any:
		return ""
	case l.BeforeRate == 0:
		return fmt.Sprintf("%s: no transfer completed before the fault", l.Loop)
	}
	switch l.Want {
	case Keeps:
		if l.DuringRate < keepFraction*l.BeforeRate {
			return fmt.Sprintf("%s: %.0f transfers/s during the fault, want at least half of %.0f before (per second %v)",
				l.Loop, l.DuringRate, l.BeforeRate, l.During)
		}
	case KeepsEverySecond:
		if float64(l.DuringMin) < keepFraction*l.BeforeRate {
			return fmt.Sprintf("%s: %d transfers in the slowest second of the fault, want every second at least half of %.0f/s before (per second %v)",
				l.Loop, l.DuringMin, l.BeforeRate, l.During)
		}
	case Stops:
		// The first second finishes what was under way when the fault came.
		if r := mean(l.During[min(1, len(l.During)):]); r > stopFraction*l.BeforeRate {
			return fmt.Sprintf("%s: %.0f transfers/s during the fault after its first second, want at most a tenth of %.0f before (per second %v)",
				l.Loop, r, l.BeforeRate, l.During)
		}
	case Any:
	}
	// Traffic the fault stopped waits, after the heal, for the channels to
	// the faulted group to connect again (a second or two: a link cut for
	// 5 s is closed and reopened), so only traffic that kept on is held to
	// the after window.
	if l.Want != Stops && l.AfterRate == 0 {
		return fmt.Sprintf("%s: no transfer completed after the heal (per second %v)", l.Loop, l.After)
	}
	return ""
}

// Run runs scenario s on cfg.Cluster: the loops start, run Warmup and
// Before, the fault holds for Hold, is healed, and the loops run After
// more. A run heals its fault whatever happens.
func Run(ctx context.Context, cfg Config, s Scenario) (*Result, error) {
	if cfg.Workers <= 0 {
		cfg.Workers = 4
	}
	if cfg.OpTimeout <= 0 {
		cfg.OpTimeout = 2 * time.Second
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	if len(s.Loops) == 0 {
		return nil, errors.New("outage: a scenario without loops")
	}
	c := cfg.Cluster
	prefixes := c.Prefixes()
	if s.Group < 0 || s.Group >= len(prefixes) {
		return nil, fmt.Errorf("outage: no group %d", s.Group)
	}
	res := &Result{Protocol: cfg.Protocol, Scenario: s.Name(), Fault: s.Fault, Group: hosts.GroupName(s.Group)}

	// One client per loop, so that a loop stuck behind the fault holds
	// none of another's sessions or connections.
	clients := make([]*client.Client, len(s.Loops))
	defer func() {
		for _, cl := range clients {
			if cl != nil {
				cl.Close()
			}
		}
	}()
	for i, l := range s.Loops {
		if l.A < 0 || l.B < 0 || l.A >= len(prefixes) || l.B >= len(prefixes) {
			return nil, fmt.Errorf("outage: loop %d names a group out of 0..%d", i, len(prefixes)-1)
		}
		cl, err := client.New(ctx, client.Config{Endpoints: c.Endpoints(), CertsDir: c.CertsDir, AttemptTimeout: time.Second})
		if err != nil {
			return nil, err
		}
		clients[i] = cl
	}

	start := time.Now()
	counts := make([]*counter, len(s.Loops))
	loopCtx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	for i, l := range s.Loops {
		counts[i] = &counter{start: start}
		ka, kb := loopKeys(prefixes, i, l)
		for wk := range cfg.Workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				transfer(loopCtx, clients[i], counts[i], cfg.OpTimeout, ka(wk), kb(wk))
			}()
		}
	}

	// The windows start once every loop flows: a fault before this one may
	// leave channels that take seconds to connect again after its heal.
	w := cfg.Windows
	sleepUntil(ctx, start.Add(w.Warmup))
	if !flowing(ctx, counts, flowWaitMax) {
		cfg.Logf("outage: %s %s: not every loop completes transfers %v after the start; counting anyway", cfg.Protocol, s.Name(), time.Since(start).Round(time.Second))
	}
	beforeAt := time.Now()
	faultAt := beforeAt.Add(w.Before)
	healAt := faultAt.Add(w.Hold)
	endAt := healAt.Add(w.After)
	heal, err := runFault(ctx, cfg, s, res, beforeAt, faultAt, healAt)
	if heal != nil {
		err = errors.Join(err, heal())
	}
	if err == nil {
		sleepUntil(ctx, endAt)
	}
	stop()
	wg.Wait()
	if err != nil {
		return nil, err
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	for i, l := range s.Loops {
		res.Loops = append(res.Loops, counts[i].result(l, beforeAt, faultAt, healAt, endAt))
	}
	return res, nil
}

// flowWaitMax bounds the wait for every loop to flow before the windows.
const flowWaitMax = 60 * time.Second

// flowing waits until every counter completed a transfer in the last
// second, up to limit; it reports whether they did.
func flowing(ctx context.Context, counts []*counter, limit time.Duration) bool {
	deadline := time.Now().Add(limit)
	for ctx.Err() == nil && time.Now().Before(deadline) {
		if !slices.ContainsFunc(counts, func(c *counter) bool { return !c.since(time.Now().Add(-time.Second)) }) {
			return true
		}
		sleepUntil(ctx, time.Now().Add(100*time.Millisecond))
	}
	return false
}

// runFault waits until faultAt, makes the fault and holds it until healAt;
// it returns how to heal it (nil when nothing was made).
func runFault(ctx context.Context, cfg Config, s Scenario, res *Result, beforeAt, faultAt, healAt time.Time) (func() error, error) {
	c := cfg.Cluster
	sleepUntil(ctx, beforeAt)
	var heal func() error
	switch s.Fault {
	case CutPeers:
		res.Target = hosts.GroupName(s.Group)
		sleepUntil(ctx, faultAt)
		if err := c.CutRegionPeers(s.Group, true); err != nil {
			return func() error { return c.CutRegionPeers(s.Group, false) }, err
		}
		heal = func() error { return c.CutRegionPeers(s.Group, false) }
	case KillLeader:
		// Asked before the fault, while the before window is counted:
		// `flexkv status` takes a moment.
		id, err := c.Leader(s.Group)
		if err != nil {
			return nil, err
		}
		res.Target = id
		sleepUntil(ctx, faultAt)
		if err := c.Kill(id); err != nil {
			return nil, err
		}
		heal = func() error { return c.Restart(id) }
	default:
		return nil, fmt.Errorf("outage: unknown fault %q", s.Fault)
	}
	cfg.Logf("outage: %s %s: %s at %s", cfg.Protocol, s.Name(), res.Target, time.Now().Format("15:04:05.000"))
	sleepUntil(ctx, healAt)
	cfg.Logf("outage: %s %s: healed at %s", cfg.Protocol, s.Name(), time.Now().Format("15:04:05.000"))
	return heal, nil
}

// loopKeys returns the keys of loop i's worker w: an account in A's first
// partition and one in B's.
func loopKeys(prefixes []string, i int, l Loop) (ka, kb func(w int) []byte) {
	key := func(g int, side string) func(int) []byte {
		return func(w int) []byte {
			return []byte(prefixes[g] + "outage/" + strconv.Itoa(i) + "/" + strconv.Itoa(w) + "/" + side)
		}
	}
	return key(l.A, "a"), key(l.B, "b")
}

// errorPause is a worker's wait after a failed transfer: a group that
// refuses work (DESIGN 12's back-pressure) answers at once, and a worker
// that retried at once would spin.
const errorPause = 100 * time.Millisecond

// transfer runs transfers from ka to kb until ctx ends, counting each that
// completes. The adds wrap (no vote: DESIGN 6), as `flexkv bench txn`'s.
func transfer(ctx context.Context, cl *client.Client, n *counter, timeout time.Duration, ka, kb []byte) {
	t := &txn.Txn{Then: []txn.Op{
		{Kind: txn.OpAdd, Key: ka, Int: -1, Wrap: true},
		{Kind: txn.OpAdd, Key: kb, Int: 1, Wrap: true},
	}}
	for ctx.Err() == nil {
		opCtx, cancel := context.WithTimeout(ctx, timeout)
		_, err := cl.Txn(opCtx, t)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			n.fail()
			sleepUntil(ctx, time.Now().Add(errorPause))
			continue
		}
		n.done(time.Now())
	}
}

// counter holds one loop's completions, as offsets from its start.
type counter struct {
	start  time.Time
	mu     sync.Mutex
	at     []time.Duration
	errors int
}

func (c *counter) done(t time.Time) {
	c.mu.Lock()
	c.at = append(c.at, t.Sub(c.start))
	c.mu.Unlock()
}

// since reports whether a transfer completed at t or later.
func (c *counter) since(t time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.at) > 0 && c.at[len(c.at)-1] >= t.Sub(c.start)
}

func (c *counter) fail() {
	c.mu.Lock()
	c.errors++
	c.mu.Unlock()
}

// result counts the completions of each whole second of each window.
func (c *counter) result(l Loop, beforeAt, faultAt, healAt, endAt time.Time) LoopResult {
	c.mu.Lock()
	defer c.mu.Unlock()
	seconds := func(from, to time.Time) []int {
		lo, hi := from.Sub(c.start), to.Sub(c.start)
		out := make([]int, int(hi-lo)/int(time.Second))
		for _, at := range c.at {
			if at >= lo && at < hi {
				if k := int(at-lo) / int(time.Second); k < len(out) {
					out[k]++
				}
			}
		}
		return out
	}
	r := LoopResult{
		Loop: l.Name(), Want: l.Want, Errors: c.errors,
		Before: seconds(beforeAt, faultAt), During: seconds(faultAt, healAt), After: seconds(healAt, endAt),
	}
	r.BeforeRate, r.DuringRate, r.AfterRate = mean(r.Before), mean(r.During), mean(r.After)
	r.ResumedMs = -1
	heal, end := healAt.Sub(c.start), endAt.Sub(c.start)
	for _, at := range c.at { // in completion order
		if at >= heal && at < end {
			r.ResumedMs = (at - heal).Milliseconds()
			break
		}
	}
	if len(r.During) > 0 {
		r.DuringMin = slices.Min(r.During)
	}
	return r
}

func mean(xs []int) float64 {
	if len(xs) == 0 {
		return 0
	}
	sum := 0
	for _, x := range xs {
		sum += x
	}
	return float64(sum) / float64(len(xs))
}

// sleepUntil waits until t or until ctx ends.
func sleepUntil(ctx context.Context, t time.Time) {
	d := time.Until(t)
	if d <= 0 {
		return
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-ctx.Done():
	case <-tm.C:
	}
}
