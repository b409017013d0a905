// Package bench runs gTPC-C benchmarks end to end (DESIGN 9): the workload
// against a running, loaded cluster (Run), or a fresh in-process cluster
// per protocol that it starts, loads, runs, checks and stops (RunLocal),
// with the traffic per node and the overhead per group that only an
// in-process cluster can count. The CLI (flexkv gtpcc run, flexkv demo)
// parses the flags into Options, prints what the runs report, and writes
// the results.
//
// gtpcc itself talks to a cluster through the client only; this package
// may start servers, and sits above both.
package bench

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/flexkv/flexkv/client"
	"github.com/flexkv/flexkv/cluster"
	"github.com/flexkv/flexkv/gtpcc"
	"github.com/flexkv/flexkv/gtpcc/procs"
	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/multicast/protocol"
	"github.com/flexkv/flexkv/partition"
	"github.com/flexkv/flexkv/server"
)

// Options are the settings of a run of the workload, the same for every
// cluster and protocol of a comparison.
type Options struct {
	// Duration is how long the clients run.
	Duration time.Duration
	// ProgressEvery is the interval of the progress lines (0: none).
	ProgressEvery time.Duration
	// Clients is the number of closed-loop clients per warehouse.
	Clients int
	// WarmUp and CoolDown are the fractions of the run, at its start and
	// its end, whose results are dropped (0: none).
	WarmUp, CoolDown float64
	// Locality, RemoteItem, RemotePayment and GlobalOnly set the workload
	// (gtpcc.WorkloadConfig).
	Locality, RemoteItem, RemotePayment float64
	GlobalOnly                          bool
	// Check runs the consistency check after the run.
	Check bool
	// Seed seeds the workload: the same seed draws the same transactions.
	Seed uint64
	// LatencyMode sets the clients' emulated delays to each group, from
	// the cluster's latency matrix.
	LatencyMode server.LatencyMode
	// Extra is copied to each report's config (gtpcc.RunConfig.Extra).
	Extra map[string]string
}

// Target is a cluster a run goes to.
type Target struct {
	// Endpoints are the gRPC addresses the run's clients connect to, with
	// TLS (nil: plaintext, a cluster started with --insecure).
	Endpoints []string
	TLS       *tls.Config
	// Loader is a client without emulated delays, for the topology and
	// the check.
	Loader *client.Client
	// Warehouses are the warehouses the clients run on, loaded at Scale.
	Warehouses []int
	Scale      procs.Scale
	// Protocol names the cluster's ordering protocol in the report (""
	// the cluster configuration's).
	Protocol string
	// Local is the in-process cluster whose traffic the report counts; nil
	// against a running cluster.
	Local *cluster.Local
}

// Run runs the workload on t and, with opts.Check, the check, and returns
// the report. Interrupted, it returns the report so far (without traffic
// or check) with the error.
func Run(ctx context.Context, t Target, opts Options, progress io.Writer) (*gtpcc.Report, error) {
	view := t.Loader.Topology()
	proto := t.Protocol
	if proto == "" {
		proto = view.Config.Protocol
	}
	wl := gtpcc.DefaultWorkload(t.Warehouses, t.Scale)
	wl.Locality, wl.RemoteItem, wl.RemotePayment, wl.GlobalOnly = opts.Locality, opts.RemoteItem, opts.RemotePayment, opts.GlobalOnly
	var err error
	if wl.Distance, wl.Group, err = gtpcc.ClusterLayout(view.Partitions, view.Groups, view.Latency, t.Warehouses); err != nil {
		return nil, err
	}

	// One client per region, shared by the clients of the warehouses
	// whose groups are there: its requests wait the emulated latency from
	// that region to each group.
	callers := make(map[string]*client.Client)
	defer func() {
		for _, c := range callers {
			_ = c.Close()
		}
	}()
	perRegion := make(map[string]int)
	regionOf := func(w int) (string, error) {
		g, _, err := view.Partitions.Owner(procs.WarehouseKey(w))
		if err != nil {
			return "", err
		}
		return view.Groups.Group(g).Region, nil
	}
	for _, w := range t.Warehouses {
		r, err := regionOf(w)
		if err != nil {
			return nil, err
		}
		perRegion[r] += opts.Clients
	}
	specs, err := gtpcc.ClientsPerWarehouse(t.Warehouses, opts.Clients, func(home, _ int) (gtpcc.Caller, error) {
		region, err := regionOf(home)
		if err != nil {
			return nil, err
		}
		if c, ok := callers[region]; ok {
			return c, nil
		}
		c, err := client.New(ctx, client.Config{
			Endpoints: t.Endpoints, TLS: t.TLS, Region: region, Sessions: perRegion[region],
			Logger:   slog.New(slog.DiscardHandler),
			WANDelay: wanDelay(view, region, opts.LatencyMode),
		})
		if err != nil {
			return nil, err
		}
		callers[region] = c
		return c, nil
	})
	if err != nil {
		return nil, err
	}
	var before map[string]server.Traffic
	if t.Local != nil {
		before = t.Local.Traffic()
	}
	cfg := gtpcc.RunConfig{
		Protocol: proto, Workload: wl, Clients: specs, Duration: opts.Duration,
		WarmUp: trim(opts.WarmUp), CoolDown: trim(opts.CoolDown), Seed: opts.Seed,
		Extra: opts.Extra, GroupNames: view.Groups.Names(),
	}
	if opts.ProgressEvery > 0 {
		cfg.Progress, cfg.ProgressEvery = progress, opts.ProgressEvery
	}
	if p, err := protocol.Lookup(multicast.Protocol(proto)); err == nil {
		cfg.Entry = stepEntry(p, view, opts.LatencyMode, t.Local != nil)
	}
	rep, err := gtpcc.Run(ctx, cfg)
	if err != nil {
		// Interrupted: the report so far, without traffic or check.
		return rep, err
	}
	if t.Local != nil {
		traffic(rep, t.Local, before, t.Local.Traffic())
	}
	layout(rep, view)
	if opts.Check {
		cr, err := gtpcc.Check(ctx, t.Loader, t.Warehouses)
		if err != nil {
			return nil, fmt.Errorf("gtpcc: check after the run: %w", err)
		}
		rep.Check = cr.Summary()
	}
	return rep, nil
}

// layout records in rep the overlay and the tree of the cluster the run
// went to: its groups in rank order, and the tree of its configuration.
func layout(rep *gtpcc.Report, view *client.Topology) {
	rep.Overlay = view.Groups.Names()
	if view.Config != nil && len(view.Config.Tree) > 0 {
		rep.Tree = maps.Clone(view.Config.Tree)
	}
}

// trim turns a warm-up or cool-down fraction into RunConfig's form, where
// 0 means the default.
func trim(f float64) float64 {
	if f == 0 {
		return gtpcc.TrimNone
	}
	return f
}

// wanDelay returns the emulated one-way delay from region to each group.
func wanDelay(view *client.Topology, region string, mode server.LatencyMode) func(string) time.Duration {
	lat := view.Latency
	if lat == nil || mode == server.LatencyOff || !lat.Has(region) {
		return nil
	}
	return func(group string) time.Duration {
		g, ok := view.Groups.Lookup(group)
		if !ok {
			return 0
		}
		return mode.OneWay(lat.RTTMs(region, view.Groups.Group(g).Region))
	}
}

// stepEntry returns gtpcc.RunConfig.Entry for a cluster under p, or nil
// when the clients' step cannot be measured: p's entry group must deliver
// at once (protocol.DeliversAtEntry), and the round trip to it must be
// known: the clients' emulated one (wanDelay, which they wait out) or,
// without emulation, an in-process cluster's (local: none to speak of).
// Against a cluster on a real network the round trip is not known, and
// nothing is measured; nor for a client whose region the matrix lacks. An
// entry group that is not a destination (the tree's lca may not be) gives
// no answer: the recorder skips the transaction.
func stepEntry(p *protocol.Protocol, view *client.Topology, mode server.LatencyMode, local bool) func(home int, groups []int) (int, float64) {
	if !p.DeliversAtEntry() {
		return nil
	}
	n := view.Groups.Len()
	delays := make([]func(string) time.Duration, n) // by home group
	emulated := false
	for h := range n {
		delays[h] = wanDelay(view, view.Groups.Group(partition.GroupID(h)).Region, mode)
		emulated = emulated || delays[h] != nil
	}
	if !emulated && !local {
		return nil
	}
	return func(home int, groups []int) (int, float64) {
		if home < 0 || home >= n {
			return -1, 0
		}
		var dst partition.GroupSet
		for _, g := range groups {
			if g < 0 || g >= n {
				return -1, 0
			}
			dst = dst.Add(partition.GroupID(g))
		}
		e := p.Entry(view.Groups, view.Latency, protocol.HomeOrigin(partition.GroupID(home)), dst)
		switch {
		case e == partition.NoGroup, emulated && delays[home] == nil:
			return -1, 0
		case !emulated:
			return int(e), 0
		}
		return int(e), 2 * float64(delays[home](view.Groups.Name(e))) / float64(time.Millisecond)
	}
}

// traffic fills the report's traffic per node and overhead per group from
// the servers' counts before and after the run (its whole length, warm-up,
// cool-down and the wait for the last calls included; rates are over the
// run's duration), and the bytes and messages per transaction: the sums of
// those counts over the transactions completed in the whole run. A group's overhead is DESIGN 3.4's: 1 - delivered /
// received payload messages, where a group receives the client requests it
// accepts and the payloads other groups send it (every replica applies the
// same requests and deliveries: the group's count is its replicas'
// largest; each payload send is counted once, by the replica that led).
func traffic(rep *gtpcc.Report, l *cluster.Local, before, after map[string]server.Traffic) {
	secs := rep.Config.RunS
	diff := func(a, p uint64) uint64 { return a - min(a, p) } // a node restarted counts from 0
	rep.Traffic = make(map[string]gtpcc.NodeTraffic)
	received := make(map[string]uint64)
	delivered := make(map[string]uint64)
	var sends, bytes, steps, stepNanos uint64
	byKind := make(map[string]uint64)
	for id, a := range after {
		p := before[id]
		sends += diff(a.Sends, p.Sends)
		steps += diff(a.Steps, p.Steps)
		stepNanos += diff(a.StepNanos, p.StepNanos)
		bytes += diff(a.SendBytes, p.SendBytes)
		for k, b := range a.BytesByKind {
			byKind[k] += diff(b, p.BytesByKind[k])
		}
		rep.Traffic[id] = gtpcc.NewNodeTraffic(int64(diff(a.Sends, p.Sends)), int64(diff(a.SendBytes, p.SendBytes)), secs)
		g := l.Group(id)
		received[g] = max(received[g], diff(a.Requests, p.Requests))
		delivered[g] = max(delivered[g], diff(a.Deliveries, p.Deliveries))
	}
	// The time to delivery at the entry group is one step only where it
	// delivers at once (not Skeen's, which waits for timestamps).
	if p, err := protocol.Lookup(multicast.Protocol(rep.Protocol)); err == nil && p.DeliversAtEntry() && steps > 0 {
		rep.StepMs = float64(stepNanos) / float64(steps) / 1e6
	}
	for id, a := range after {
		for to, n := range a.PayloadTo {
			received[to] += diff(n, before[id].PayloadTo[to])
		}
	}
	var txns int64
	for _, pt := range rep.Timeline {
		txns += pt.Txns
	}
	if txns > 0 {
		rep.BytesPerTxn = float64(bytes) / float64(txns)
		rep.MsgsPerTxn = float64(sends) / float64(txns)
		for k, b := range byKind {
			if b == 0 {
				continue
			}
			if rep.BytesPerTxnByKind == nil {
				rep.BytesPerTxnByKind = make(map[string]float64)
			}
			rep.BytesPerTxnByKind[k] = float64(b) / float64(txns)
		}
	}
	rep.Overhead = make(map[string]gtpcc.GroupOverhead)
	for g, r := range received {
		o := gtpcc.GroupOverhead{Received: r, Delivered: delivered[g]}
		if r > 0 && delivered[g] < r {
			o.Overhead = 1 - float64(delivered[g])/float64(r)
		}
		rep.Overhead[g] = o
	}
}

// LocalConfig is one protocol's run on a fresh cluster in this process.
type LocalConfig struct {
	// Cluster is the cluster configuration; Protocol replaces its
	// protocol.
	Cluster  *partition.ClusterConfig
	Protocol string
	// Name names the run's subdirectories of Dir and DeliveryLog, so that
	// runs of one protocol on different overlays or trees keep theirs
	// apart; "" is Protocol.
	Name string
	// Latency, LatencyMode and LatencyJitter emulate the WAN between the
	// servers (cluster.Config); LatencyMode also sets the clients'
	// delays (Options.LatencyMode).
	Latency       *partition.Latency
	LatencyMode   server.LatencyMode
	LatencyJitter float64
	// Dir holds the cluster's data in Dir/<name>, removed first.
	Dir string
	// DeliveryLog, when set, holds each replica's delivery log (DESIGN
	// 10.1) in DeliveryLog/<name>, removed first.
	DeliveryLog string
	Logger      *slog.Logger
	// Insecure runs the cluster without TLS (cluster.Config.Insecure).
	Insecure bool
	// Scale is the population loaded.
	Scale procs.Scale
	// Warehouses chooses the warehouses to load and run on, from the
	// cluster's topology; its error is returned as it is.
	Warehouses func(*client.Topology) ([]int, error)
	// Ready, when set, is told that the cluster is up, a leader in every
	// group, and how long that took.
	Ready func(l *cluster.Local, took time.Duration)
	// LoadProgress is the loader's progress (gtpcc.LoadConfig.Progress).
	LoadProgress func(done, total int)
	// Loaded, when set, is told that the warehouses are loaded, and how
	// long that took.
	Loaded func(warehouses []int, took time.Duration)
}

// RunLocal starts a fresh cluster for cfg.Protocol, loads it, runs the
// workload with opts, checks it and stops the cluster. Interrupted, it
// returns the report so far with the error.
func RunLocal(ctx context.Context, cfg LocalConfig, opts Options, progress io.Writer) (*gtpcc.Report, error) {
	cc := *cfg.Cluster
	cc.Protocol = cfg.Protocol
	if err := protocol.Validate(&cc); err != nil {
		return nil, err
	}
	name := cfg.Name
	if name == "" {
		name = cfg.Protocol
	}
	dir := filepath.Join(cfg.Dir, name)
	if err := os.RemoveAll(dir); err != nil {
		return nil, err
	}
	dlog := ""
	if cfg.DeliveryLog != "" {
		// The logs append: a fresh cluster gets fresh logs.
		dlog = filepath.Join(cfg.DeliveryLog, name)
		if err := os.RemoveAll(dlog); err != nil {
			return nil, err
		}
	}
	start := time.Now()
	l, err := cluster.Start(cluster.Config{
		Cluster: &cc, Latency: cfg.Latency, LatencyMode: cfg.LatencyMode, LatencyJitter: cfg.LatencyJitter, Dir: dir,
		DeliveryLogDir: dlog, Logger: cfg.Logger, Procedures: procs.Registry(), Insecure: cfg.Insecure,
	})
	if errors.Is(err, syscall.EADDRINUSE) {
		return nil, fmt.Errorf("%w (is a flexkv local or demo using the addresses of the configuration?)", err)
	}
	if err != nil {
		return nil, err
	}
	defer l.Close()
	if err := WaitLeaders(ctx, l, &cc); err != nil {
		return nil, err
	}
	loader, err := client.New(ctx, client.Config{Endpoints: l.Endpoints(), TLS: l.ClientTLS(), Sessions: 256, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return nil, err
	}
	defer func() { _ = loader.Close() }()
	ws, err := cfg.Warehouses(loader.Topology())
	if err != nil {
		return nil, err
	}
	if cfg.Ready != nil {
		cfg.Ready(l, time.Since(start))
	}
	start = time.Now()
	err = gtpcc.Load(ctx, loader, gtpcc.LoadConfig{
		Warehouses: ws, Scale: cfg.Scale, Date: start.UnixMilli(), Progress: cfg.LoadProgress,
	})
	if err != nil {
		return nil, err
	}
	if cfg.Loaded != nil {
		cfg.Loaded(ws, time.Since(start))
	}
	t := Target{Endpoints: l.Endpoints(), TLS: l.ClientTLS(), Loader: loader, Warehouses: ws, Scale: cfg.Scale, Protocol: cfg.Protocol, Local: l}
	rep, err := Run(ctx, t, opts, progress)
	if err != nil {
		return rep, err
	}
	if err := l.Close(); err != nil {
		return nil, err
	}
	return rep, nil
}

// WaitLeaders waits until every group of cfg has a leader in l, so that
// its endpoints are ready to serve, for at most 30 seconds.
func WaitLeaders(ctx context.Context, l *cluster.Local, cfg *partition.ClusterConfig) error {
	deadline := time.Now().Add(30 * time.Second)
	for _, g := range cfg.Groups {
		for l.Leader(g.Name) == "" {
			if time.Now().After(deadline) {
				return fmt.Errorf("local: group %s elected no leader in 30s", g.Name)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	return nil
}
