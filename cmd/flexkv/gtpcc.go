package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/viper"

	"github.com/flexkv/flexkv/client"
	"github.com/flexkv/flexkv/cluster"
	"github.com/flexkv/flexkv/configs"
	"github.com/flexkv/flexkv/gtpcc"
	"github.com/flexkv/flexkv/gtpcc/bench"
	"github.com/flexkv/flexkv/gtpcc/procs"
	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/multicast/protocol"
	"github.com/flexkv/flexkv/partition"
	"github.com/flexkv/flexkv/server"
)

// The gTPC-C commands (DESIGN 9): load, run and check a cluster that is
// already running (--endpoints, or the addresses of --config), or, with
// --local, start a fresh cluster in this process for each protocol, load
// it, run, check and compare. `flexkv demo` is the last with defaults that
// show FlexCast on the emulated WAN in under a minute.
//
// This file holds their flags, parsing and output; package gtpcc/bench
// runs them.

// newGtpccCmd returns `flexkv gtpcc`, the parent of load, run and check.
func newGtpccCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "gtpcc load|run|check",
		Short: "Geo TPC-C: load a cluster, run the workload, check consistency",
		Long: `Geo TPC-C on FlexKV (DESIGN 9). Every partition w/NNNN/ of the cluster
configuration is warehouse NNNN; the item table is the replicated range item/.

  flexkv gtpcc load    load the TPC-C population (--scale small|full|...)
  flexkv gtpcc run     closed-loop clients for --duration, then a report
  flexkv gtpcc check   the TPC-C consistency conditions, and gTPC-C's across groups

Against a running cluster: --endpoints host:port,... (default: the gRPC
addresses of --config, itself by default the embedded configs/local.yaml).
'gtpcc run --local' starts a fresh cluster in this process for each protocol
of --protocols instead, loads it, runs, checks and prints the protocols side
by side; 'flexkv demo' is that with demo defaults.

Exit codes: 0 done; 1 the consistency check failed, or the run or load
failed; 2 bad usage (nothing was started); 3 cluster unreachable; 130
interrupted (the report so far is printed).`,
	}
	needSubcommand(cmd, "load, run or check")
	setUsageErrors(cmd)
	cmd.AddCommand(newGtpccLoadCmd(), newGtpccRunCmd(), newGtpccCheckCmd())
	return cmd
}

// setUsageErrors makes cobra's own errors on cmd and its subcommands (an
// unknown flag, a bad flag value) usage errors: exit code 2.
func setUsageErrors(cmd *cobra.Command) {
	cmd.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return usageError(fmt.Errorf("%s: %w", c.CommandPath(), err))
	})
}

// noArgs refuses positional arguments with a usage error.
func noArgs(c *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageError(fmt.Errorf("%s: unexpected argument %q (every setting is a flag: see --help)", c.CommandPath(), args[0]))
	}
	return nil
}

// addClusterFlags adds the flags that name a running cluster.
func addClusterFlags(cmd *cobra.Command) {
	cmd.Flags().String("endpoints", "", "gRPC addresses host:port,... of cluster servers (default: those of --config)")
	cmd.Flags().String("config", "", "cluster configuration YAML (default: embedded "+defaultConfigName+")")
	cmd.Flags().String("warehouses", "all", warehousesHelp)
	addClientTLSFlags(cmd.Flags())
}

const warehousesHelp = "warehouses: all (every w/NNNN/ partition of the cluster), or a list such as 1-3,5"

// newGtpccLoadCmd returns `flexkv gtpcc load`.
func newGtpccLoadCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "load",
		Short: "Load the TPC-C population into a running cluster",
		Long: `Load the TPC-C population of --scale into the warehouses of a running cluster:
the replicated items, then each warehouse's rows, written by a stored
procedure that generates them from their keys. Each warehouse records its
scale last, so that run and check know it. A warehouse loaded already is
refused (loading again would reset counters that transactions moved on since):
load an empty cluster.

--scale: small (1000 items, 100 customers and orders per district: loads in
seconds), full (TPC-C's 100000 items, 3000 customers), or
items=N,customers=N,orders=N,new-orders=N.`,
		Args: noArgs,
	}
	addClusterFlags(cmd)
	cmd.Flags().String("scale", "small", "population: small, full or items=N,customers=N,orders=N,new-orders=N")
	cmd.Flags().Int("concurrency", gtpcc.LoadConcurrencyDefault, "load calls in flight")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		v := settings(cmd)
		scale, err := parseScale(v.GetString("scale"))
		if err != nil {
			return usageError(err)
		}
		return withCluster(cmd, v, func(ctx context.Context, c *client.Client, ws []int) error {
			start := time.Now()
			err := gtpcc.Load(ctx, c, gtpcc.LoadConfig{
				Warehouses: ws, Scale: scale, Concurrency: v.GetInt("concurrency"), Date: start.UnixMilli(),
				Progress: loadProgress(cmd.ErrOrStderr()),
			})
			if err != nil {
				return interrupted(ctx, err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "loaded warehouses %s at scale %s in %s\n", formatWarehouses(ws), formatScale(scale), time.Since(start).Round(time.Millisecond))
			return nil
		})
	}
	return cmd
}

// newGtpccCheckCmd returns `flexkv gtpcc check`.
func newGtpccCheckCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "check",
		Short: "Check the TPC-C consistency conditions on a quiescent cluster",
		Long: `Check TPC-C's consistency conditions (clause 3.3.2: 1-10 and 12) on every
warehouse: warehouse and district year-to-date sums against each other and
against the history, order ids against new-order rows, order-line counts,
carriers and delivery dates, customers' balances against their delivered
orders and payments. And gTPC-C's conditions across groups, which tie the
pieces of one transaction at different groups together: g1, every stock row
against the new-order lines it supplied, in every warehouse; g2, every
payment's history row at the home warehouse against its record at the
customer's warehouse. Check every warehouse of a run (the default), when no
transaction is in flight. Prints one line (--json: the check object of DESIGN
10.3); exits 1 when a condition fails.`,
		Args: noArgs,
	}
	addClusterFlags(cmd)
	cmd.Flags().Bool("json", false, "print the result as JSON")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		v := settings(cmd)
		return withCluster(cmd, v, func(ctx context.Context, c *client.Client, ws []int) error {
			// A warehouse not loaded whole is not checked: it would only
			// list the rows it lacks.
			if _, err := gtpcc.ReadScale(ctx, c, ws); err != nil {
				return interrupted(ctx, err)
			}
			rep, err := gtpcc.Check(ctx, c, ws)
			if err != nil {
				return interrupted(ctx, err)
			}
			out := cmd.OutOrStdout()
			if v.GetBool("json") {
				if err := writeJSON(out, rep); err != nil {
					return err
				}
			} else {
				printCheck(out, ws, rep)
			}
			if !rep.Passed {
				return &exitError{code: 1, err: fmt.Errorf("gtpcc check: %d condition failures", len(rep.Failures)+rep.FailuresOmitted)}
			}
			return nil
		})
	}
	return cmd
}

// printCheck prints a check's outcome for a person.
func printCheck(w io.Writer, ws []int, rep gtpcc.CheckReport) {
	defer func() {
		for _, s := range rep.Skipped {
			fmt.Fprintf(w, "  not checked: %s\n", s)
		}
	}()
	if rep.Passed {
		fmt.Fprintf(w, "check passed: warehouses %s, %s (%d districts, %d customers, %d orders, %d order lines, %d new orders, %d history rows, %d payment records, %d stock rows)\n",
			formatWarehouses(ws), gtpcc.CheckedConditions, rep.Checked.Districts, rep.Checked.Customers, rep.Checked.Orders, rep.Checked.OrderLines,
			rep.Checked.NewOrders, rep.Checked.History, rep.Checked.CustomerPayments, rep.Checked.Stock)
		return
	}
	fmt.Fprintf(w, "check FAILED: %d failures\n", len(rep.Failures)+rep.FailuresOmitted)
	for _, f := range rep.Failures {
		fmt.Fprintf(w, "  %s\n", f)
	}
	if rep.FailuresOmitted > 0 {
		fmt.Fprintf(w, "  ... and %d more\n", rep.FailuresOmitted)
	}
}

// addRunFlags adds the workload and report flags of gtpcc run and demo,
// with the given defaults.
func addRunFlags(cmd *cobra.Command, d runDefaults) {
	f := cmd.Flags()
	f.String("warehouses", d.warehouses, warehousesHelp)
	f.Duration("duration", d.duration, "how long the clients run")
	f.Int("clients", d.clients, "closed-loop clients per warehouse, each in its warehouse's region")
	f.Float64("warm-up", gtpcc.TrimDefault, "fraction of the run at its start whose results are dropped")
	f.Float64("cool-down", gtpcc.TrimDefault, "fraction of the run at its end whose results are dropped")
	f.Float64("locality", gtpcc.LocalityDefault, "probability that a remote warehouse is the nearest one (else the next nearest, and so on)")
	f.Float64("remote-item", d.remoteItem, "probability that a new-order line is supplied by a remote warehouse (TPC-C 0.01, the FlexCast paper 0.02)")
	f.Float64("remote-payment", gtpcc.RemotePaymentDefault, "probability that a payment's customer belongs to a remote warehouse")
	f.Bool("global-only", d.globalOnly, "only transactions with 2 or 3 warehouses (the paper's latency runs)")
	f.Uint64("seed", 1, "seed of the workload: the same seed draws the same transactions")
	f.String("json", "", "write the results JSON (DESIGN 10.3) to FILE; with several protocols, one file each, FILE with -<protocol> before its extension")
	f.String("plots", "", "write PNG plots (latency CDF by destination order, throughput and the 1st answer over time) into DIR")
	f.Duration("progress", gtpcc.ProgressEveryDefault, "print a progress line every interval on stderr (0: none)")
	f.Bool("check", true, "check the consistency conditions after the run")
	f.String("latency-mode", string(server.LatencyReal), "emulated WAN from the latency matrix: real (one-way = value/2), paper (one-way = value) or off; delays clients' requests to groups too")
}

// runDefaults are the defaults that differ between gtpcc run and demo.
type runDefaults struct {
	warehouses string
	duration   time.Duration
	clients    int
	remoteItem float64
	globalOnly bool
}

// newGtpccRunCmd returns `flexkv gtpcc run`.
func newGtpccRunCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run the gTPC-C workload and report throughput and latency",
		Long: `Run closed-loop gTPC-C clients (--clients per warehouse, each in its
warehouse's region) for --duration: new-order 45%, payment 43%, order-status,
delivery and stock-level 4% each. Prints progress, then a table of throughput
and latency (mean, p50, p90, p95, p99, max) by transaction type and, for
transactions with several destinations, by destination order (1st, 2nd, 3rd
answer); checks consistency afterwards (--check). --json FILE writes the
results JSON of DESIGN 10.3.

Against a running, loaded cluster: --endpoints or --config. Every client's
request to a group waits the emulated one-way latency from its region there
and back (--latency-mode, from the cluster's latency matrix). That sets only
the driver's delays: the servers' own, between groups, are set when they
start (flexkv server --latency-mode).

--local starts a fresh cluster of --config in this process for each protocol
of --protocols, one after the other, loads it at --scale, runs the same
seeded workload, checks it, reports traffic per node, and prints the
protocols side by side.
` + layoutHelp,
		Args: noArgs,
	}
	addRunFlags(cmd, runDefaults{warehouses: "all", duration: 30 * time.Second, clients: 2, remoteItem: gtpcc.RemoteItemTPCC})
	f := cmd.Flags()
	f.String("endpoints", "", "gRPC addresses host:port,... of a running cluster (default: those of --config)")
	f.String("config", "", "cluster configuration YAML (default: embedded "+defaultConfigName+")")
	f.String("certs-dir", "", "directory of ca.crt and client.USER.crt/.key of the running cluster (also FLEXKV_CERTS_DIR; default: "+localCertsDir+" when it exists)")
	f.String("user", "root", "the user whose client certificate to present to the running cluster")
	addLocalRunFlags(cmd, "flexcast", "flexkv-data/gtpcc", "with --local: ")
	addProfileFlags(cmd, "the clients and, with --local, the whole cluster; loading included")
	cmd.RunE = func(cmd *cobra.Command, _ []string) (err error) {
		v := settings(cmd)
		stop, err := startProfiles(v)
		if err != nil {
			return usageError(err)
		}
		defer func() { err = errors.Join(err, stop()) }()
		if v.GetBool("local") {
			return runLocalBench(cmd, v)
		}
		return runRemoteBench(cmd, v)
	}
	return cmd
}

// addLocalRunFlags adds the flags of a run on clusters started in this
// process; with is the prefix of their help ("with --local: " where they
// need that flag).
func addLocalRunFlags(cmd *cobra.Command, protocols, dataDir, with string) {
	f := cmd.Flags()
	f.Bool("local", false, "start a fresh cluster of --config in this process for each of --protocols")
	f.String("protocols", protocols, with+"the protocols to run and compare, e.g. flexcast,skeen,tree")
	f.String("scale", "small", with+"population to load (small, full or items=N,customers=N,orders=N,new-orders=N)")
	dirHelp := "data directory: a subdirectory per run (its protocol, or e.g. flexcast-O1), removed first (a fresh cluster each run)"
	if dataDir == "" {
		dirHelp += " (default: a temporary directory, removed at the end)"
	}
	f.String("data-dir", dataDir, with+dirHelp)
	f.String("delivery-log", "", with+"write each replica's delivery log (DESIGN 10.1) into DIR/<run>, removed first")
	f.Float64("latency-jitter", 0, with+"spread each emulated delay by up to this fraction either way")
	f.String("log-level", "error", with+"servers' log level: debug, info, warn or error")
	f.Bool("insecure", false, "without TLS: a cluster started here runs every link in plaintext, or the running cluster was started so")
	addLayoutFlags(cmd, with)
}

// newDemoCmd returns `flexkv demo`: gtpcc run --local with the demo's
// defaults.
func newDemoCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run gTPC-C on a local 3-region cluster with an emulated WAN",
		Long: `Start the embedded 3-region cluster (configs/local.yaml: eu-west-1, eu-west-3,
eu-central-1, 3 replicas each) in this process, with the AWS latencies between
the regions emulated, load a small TPC-C population, run closed-loop clients
for --duration, check the TPC-C consistency conditions, and print throughput
and latency by transaction type and by destination order.

As the FlexCast paper's latency runs, the demo keeps only global transactions
(--global-only: new-orders with lines from remote warehouses, payments by
remote customers, a remote warehouse being one of another region's group), so
that every transaction is atomically multicast to two or three groups.
--global-only=false runs TPC-C's whole mix instead.

--protocols flexcast,skeen,tree runs the same seeded workload on a fresh
cluster for each protocol and prints them side by side. Every flag of
'flexkv gtpcc run' applies; the data goes to a temporary directory unless
--data-dir is given.
` + layoutHelp,
		Args: noArgs,
	}
	addRunFlags(cmd, runDefaults{warehouses: "all", duration: 20 * time.Second, clients: 4, remoteItem: gtpcc.RemoteItemPaper, globalOnly: true})
	cmd.Flags().String("config", "", "cluster configuration YAML (default: embedded "+defaultConfigName+" with the AWS latencies of its regions)")
	addLocalRunFlags(cmd, "flexcast", "", "")
	_ = cmd.Flags().MarkHidden("local")
	setUsageErrors(cmd)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		v := settings(cmd)
		return runLocalBench(cmd, v)
	}
	return cmd
}

// withCluster runs do with a client of the running cluster the flags name
// and the warehouses of --warehouses, under a context that SIGINT and
// SIGTERM end.
func withCluster(cmd *cobra.Command, v *viper.Viper, do func(ctx context.Context, c *client.Client, ws []int) error) error {
	ctx, stop := signalContext(cmd.Context())
	defer stop()
	c, ws, err := connectBench(ctx, v)
	if err != nil {
		return err
	}
	defer func() { _ = c.Close() }()
	return do(ctx, c, ws)
}

// interrupted gives err exit code 130 when ctx ended because of SIGINT or
// SIGTERM (the shell's code for an interrupted command).
func interrupted(ctx context.Context, err error) error {
	if ctx.Err() != nil && errors.Is(err, context.Canceled) {
		return &exitError{code: 130, err: fmt.Errorf("interrupted: %w", err)}
	}
	return err
}

// connectBench connects to the running cluster the flags name and returns
// the warehouses of --warehouses.
func connectBench(ctx context.Context, v *viper.Viper) (*client.Client, []int, error) {
	endpoints, err := benchEndpoints(v)
	if err != nil {
		return nil, nil, err
	}
	tlsCfg, err := clientTLS(v)
	if err != nil {
		return nil, nil, usageError(err)
	}
	c, err := client.New(ctx, client.Config{Endpoints: endpoints, TLS: tlsCfg, Sessions: 256, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return nil, nil, &exitError{code: kvExitUnreachable, err: oneLine{fmt.Errorf("cannot reach the cluster at %s: %w", strings.Join(endpoints, ","), err)}}
	}
	ws, err := selectWarehouses(c.Topology(), v.GetString("warehouses"))
	if err != nil {
		_ = c.Close()
		return nil, nil, usageError(err)
	}
	return c, ws, nil
}

// benchEndpoints returns --endpoints, or the gRPC addresses of --config.
func benchEndpoints(v *viper.Viper) ([]string, error) {
	if s := v.GetString("endpoints"); s != "" {
		eps, err := parseEndpoints(s)
		if err != nil {
			return nil, usageError(err)
		}
		return eps, nil
	}
	cfg, _, err := loadCluster(v.GetString("config"))
	if err != nil {
		return nil, usageError(err)
	}
	return cfg.Endpoints(), nil
}

// runRemoteBench runs the workload against a running, loaded cluster.
func runRemoteBench(cmd *cobra.Command, v *viper.Viper) error {
	if err := rejectLocalOnly(cmd); err != nil {
		return err
	}
	opts, err := readRunOptions(v)
	if err != nil {
		return err
	}
	return withCluster(cmd, v, func(ctx context.Context, c *client.Client, ws []int) error {
		scale, err := gtpcc.ReadScale(ctx, c, ws)
		if err != nil {
			return interrupted(ctx, err)
		}
		endpoints, _ := benchEndpoints(v)
		opts.Extra = reportExtra(v, opts.LatencyMode, scale)
		tlsCfg, err := clientTLS(v)
		if err != nil {
			return usageError(err)
		}
		t := bench.Target{Endpoints: endpoints, TLS: tlsCfg, Loader: c, Warehouses: ws, Scale: scale}
		rep, err := bench.Run(ctx, t, opts.Options, cmd.ErrOrStderr())
		if rep != nil {
			if werr := rep.WriteTable(cmd.OutOrStdout()); werr != nil && err == nil {
				err = werr
			}
		}
		if err != nil {
			return interrupted(ctx, err)
		}
		return finishBench(cmd, opts, []*gtpcc.Report{rep})
	})
}

// rejectLocalOnly refuses flags that only a --local run uses.
func rejectLocalOnly(cmd *cobra.Command) error {
	for _, name := range append([]string{"protocols", "scale", "data-dir", "delivery-log", "latency-jitter", "log-level"}, layoutFlags...) {
		if cmd.Flags().Changed(name) {
			return usageError(fmt.Errorf("--%s needs --local (a run against a running cluster uses it as it is)", name))
		}
	}
	return nil
}

// runOptions are the flags of a run, read and checked: the run's settings
// and what the CLI does with its results.
type runOptions struct {
	bench.Options
	jsonPath, plotDir string
	warehouses        string
}

// readRunOptions reads the run flags of v and checks them: usage errors
// name the flag.
func readRunOptions(v *viper.Viper) (runOptions, error) {
	o := runOptions{
		Options: bench.Options{
			Duration: v.GetDuration("duration"), ProgressEvery: v.GetDuration("progress"), Clients: v.GetInt("clients"),
			WarmUp: v.GetFloat64("warm-up"), CoolDown: v.GetFloat64("cool-down"),
			Locality: v.GetFloat64("locality"), RemoteItem: v.GetFloat64("remote-item"), RemotePayment: v.GetFloat64("remote-payment"),
			GlobalOnly: v.GetBool("global-only"), Check: v.GetBool("check"), Seed: v.GetUint64("seed"),
		},
		jsonPath: v.GetString("json"), plotDir: v.GetString("plots"), warehouses: v.GetString("warehouses"),
	}
	mode, err := server.ParseLatencyMode(v.GetString("latency-mode"))
	if err != nil {
		return o, usageError(fmt.Errorf("--latency-mode: %w", err))
	}
	o.LatencyMode = mode
	for _, p := range []struct {
		name string
		v    float64
	}{{"locality", o.Locality}, {"remote-item", o.RemoteItem}, {"remote-payment", o.RemotePayment}} {
		if !(p.v >= 0 && p.v <= 1) {
			return o, usageError(fmt.Errorf("--%s %v: want a probability from 0 to 1", p.name, p.v))
		}
	}
	switch {
	case o.Duration <= 0:
		return o, usageError(fmt.Errorf("--duration %s: want more than 0", o.Duration))
	case o.Clients < 1:
		return o, usageError(fmt.Errorf("--clients %d: want at least 1 per warehouse", o.Clients))
	case o.ProgressEvery < 0:
		return o, usageError(fmt.Errorf("--progress %s: want 0 (none) or more", o.ProgressEvery))
	case !(o.WarmUp >= 0 && o.CoolDown >= 0 && o.WarmUp+o.CoolDown < 1):
		return o, usageError(fmt.Errorf("--warm-up %v and --cool-down %v: want fractions that leave some of the run", o.WarmUp, o.CoolDown))
	}
	return o, nil
}

// reportExtra returns what a report's config records of the cluster, for
// a run at scale.
func reportExtra(v *viper.Viper, mode server.LatencyMode, scale procs.Scale) map[string]string {
	return map[string]string{"cluster_config": configName(v), "latency_mode": string(mode), "scale": formatScale(scale)}
}

// configName names the cluster configuration of --config for reports.
func configName(v *viper.Viper) string {
	if p := v.GetString("config"); p != "" {
		return p
	}
	if v.GetString("endpoints") != "" {
		return ""
	}
	return defaultConfigName
}

// runLocalBench runs the workload on a fresh local cluster for each
// protocol of --protocols.
func runLocalBench(cmd *cobra.Command, v *viper.Viper) error {
	b, runs, err := planLocalBench(cmd, v)
	if err != nil {
		return err
	}
	var restoreProcs func()
	b.procsInUse, restoreProcs = hostProcs(b.cfg)
	defer restoreProcs()
	defer hostGC(b.cfg, replicasOf(b.cfg))()
	if b.dataDir == "" {
		if b.dataDir, err = os.MkdirTemp("", "flexkv-demo-"); err != nil {
			return err
		}
		defer os.RemoveAll(b.dataDir)
	}
	ctx, stop := signalContext(cmd.Context())
	defer stop()
	b.opts.Extra = reportExtra(v, b.opts.LatencyMode, b.scale)
	var reports []*gtpcc.Report
	for _, run := range runs {
		rep, err := b.run(ctx, run)
		if err != nil {
			return err
		}
		reports = append(reports, rep)
	}
	return finishBench(cmd, b.opts, reports)
}

// localBench is what every run of runLocalBench shares: the flags, read and
// checked, and where the runs print.
type localBench struct {
	opts        runOptions
	cfg         *partition.ClusterConfig
	lat         *partition.Latency
	jitter      float64
	scale       procs.Scale
	res         *layoutResolver
	logger      *slog.Logger
	dataDir     string // empty: a temporary directory, made by runLocalBench
	deliveryLog string
	insecure    bool
	procsInUse  int // GOMAXPROCS while the runs last, set by runLocalBench
	out, errOut io.Writer
}

// planLocalBench reads and checks the flags of a local run, and plans its
// runs, before any cluster starts: every error here is a usage error but
// the logger's and the embedded latency matrix's.
func planLocalBench(cmd *cobra.Command, v *viper.Viper) (*localBench, []localRun, error) {
	opts, err := readRunOptions(v)
	if err != nil {
		return nil, nil, err
	}
	if cmd.Flags().Changed("endpoints") {
		return nil, nil, usageError(errors.New("--endpoints names a running cluster; --local starts its own"))
	}
	protocols, err := parseProtocols(v.GetString("protocols"))
	if err != nil {
		return nil, nil, usageError(err)
	}
	scale, err := parseScale(v.GetString("scale"))
	if err != nil {
		return nil, nil, usageError(err)
	}
	cfg, lat, err := loadCluster(v.GetString("config"))
	if err != nil {
		return nil, nil, usageError(err)
	}
	// The warehouses are checked before any cluster starts.
	_, top, pm, err := protocol.Build(cfg)
	if err != nil {
		return nil, nil, usageError(err)
	}
	if _, err := selectWarehouses(&client.Topology{Config: cfg, Groups: top, Partitions: pm}, opts.warehouses); err != nil {
		return nil, nil, usageError(err)
	}
	if lat == nil && v.GetString("config") == "" {
		// The embedded configuration's regions are AWS regions: the demo
		// emulates their latencies.
		if lat, err = configs.AWS12Latency(); err != nil {
			return nil, nil, err
		}
	}
	res := newLayoutResolver(cfg, lat, opts.LatencyMode, opts)
	runs, err := planRuns(v, cfg, protocols, cmd.Flags().Changed("protocols"), res)
	if err != nil {
		return nil, nil, usageError(err)
	}
	jitter := v.GetFloat64("latency-jitter")
	if !(jitter >= 0 && jitter <= 1) {
		return nil, nil, usageError(fmt.Errorf("--latency-jitter %v: want a fraction from 0 to 1", jitter))
	}
	logger, err := newLogger(cmd.ErrOrStderr(), v.GetString("log-level"))
	if err != nil {
		return nil, nil, err
	}
	return &localBench{
		opts: opts, cfg: cfg, lat: lat, jitter: jitter, scale: scale, res: res, logger: logger,
		dataDir: v.GetString("data-dir"), deliveryLog: v.GetString("delivery-log"), insecure: v.GetBool("insecure"),
		out: cmd.OutOrStdout(), errOut: cmd.ErrOrStderr(),
	}, runs, nil
}

// run runs the workload on a fresh local cluster laid out as run says, prints
// its table and returns its report; an error names the run.
func (b *localBench) run(ctx context.Context, run localRun) (*gtpcc.Report, error) {
	label := run.protocol
	if run.name != "" {
		label = run.name
	}
	rep, err := bench.RunLocal(ctx, b.localConfig(run, label), b.opts.Options, b.errOut)
	if rep != nil {
		rep.Run = run.name
		rep.Consistency = partition.ConsistencySerializable
		if run.cfg.Strict() {
			rep.Consistency = partition.ConsistencyStrict
		}
		rep.PredictedMs = b.res.predict(run)
		if step := rep.ModelStepMs(); step > 0 && rep.PredictedMs != nil {
			rep.PredictedAtStepMs = b.res.predictAt(run, step)
		}
		fmt.Fprintln(b.out)
		if werr := rep.WriteTable(b.out); werr != nil && err == nil {
			err = werr
		}
	}
	if err != nil {
		return nil, interrupted(ctx, fmt.Errorf("%s: %w", label, err))
	}
	return rep, nil
}

// localConfig is the local cluster of run, with the callbacks that print its
// progress under label.
func (b *localBench) localConfig(run localRun, label string) bench.LocalConfig {
	cfg, lat, opts := b.cfg, b.lat, b.opts
	return bench.LocalConfig{
		Cluster: run.cfg, Protocol: run.protocol, Name: run.name, Latency: lat, LatencyMode: opts.LatencyMode, LatencyJitter: b.jitter,
		Dir: b.dataDir, DeliveryLog: b.deliveryLog, Logger: b.logger, Scale: b.scale, Insecure: b.insecure,
		Warehouses: func(top *client.Topology) ([]int, error) {
			ws, err := selectWarehouses(top, opts.warehouses)
			if err != nil {
				return nil, usageError(err)
			}
			return ws, nil
		},
		Ready: func(l *cluster.Local, took time.Duration) {
			fmt.Fprintf(b.out, "%s: %d groups x %d replicas ready in %s (GOMAXPROCS %d); emulated WAN: %s\n", label, len(cfg.Groups), len(l.Nodes())/len(cfg.Groups),
				took.Round(time.Millisecond), b.procsInUse, latencySummary(lat, opts.LatencyMode, b.jitter))
			printLayout(b.out, label, run)
		},
		LoadProgress: loadProgress(b.errOut),
		Loaded: func(ws []int, took time.Duration) {
			fmt.Fprintf(b.out, "%s: loaded warehouses %s at scale %s in %s; running %d clients for %s\n", label, formatWarehouses(ws),
				formatScale(b.scale), took.Round(time.Millisecond), opts.Clients*len(ws), opts.Duration)
		},
	}
}

// finishBench prints the comparison of several protocols, writes the JSON
// and the plots, and turns a failed check into exit code 1.
func finishBench(cmd *cobra.Command, opts runOptions, reports []*gtpcc.Report) error {
	out := cmd.OutOrStdout()
	if len(reports) > 1 {
		fmt.Fprintln(out)
		if err := gtpcc.CompareTable(out, reports); err != nil {
			return err
		}
		fmt.Fprintln(out)
		if err := gtpcc.DestinationTable(out, reports); err != nil {
			return err
		}
	}
	for _, r := range reports {
		if len(r.PredictedMs) > 0 {
			fmt.Fprintln(out)
			if err := gtpcc.PredictionTable(out, reports); err != nil {
				return err
			}
			break
		}
	}
	if opts.jsonPath != "" {
		for _, r := range reports {
			path := opts.jsonPath
			if len(reports) > 1 {
				path = protocolPath(path, r.Name())
			}
			b, err := json.MarshalIndent(r, "", "  ")
			if err != nil {
				return err
			}
			if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
				return err
			}
			fmt.Fprintf(out, "results: %s\n", path)
		}
	}
	if opts.plotDir != "" {
		paths, err := gtpcc.WritePlots(opts.plotDir, reports)
		if err != nil {
			return err
		}
		for _, p := range paths {
			fmt.Fprintf(out, "plot: %s\n", p)
		}
	}
	var failed []string
	for _, r := range reports {
		if r.Check != nil && !r.Check.Passed {
			failed = append(failed, r.Name())
		}
	}
	if len(failed) > 0 {
		return &exitError{code: 1, err: fmt.Errorf("consistency check failed under %s", strings.Join(failed, ", "))}
	}
	return nil
}

// protocolPath returns the results file of one run of several: FILE with
// the run's name (its protocol, or e.g. flexcast-O1 in a comparison of
// overlays) before its extension (results-skeen.json), so that each file
// holds one results object of DESIGN 10.3.
func protocolPath(path, protocol string) string {
	ext := filepath.Ext(path)
	return strings.TrimSuffix(path, ext) + "-" + protocol + ext
}

// loadProgress reports a load's progress on w at every quarter.
func loadProgress(w io.Writer) func(done, total int) {
	last := 0
	return func(done, total int) {
		if q := done * 4 / max(total, 1); q != last {
			last = q
			fmt.Fprintf(w, "loading: %d/%d calls\n", done, total)
		}
	}
}

// parseProtocols parses --protocols.
func parseProtocols(s string) ([]string, error) {
	var out []string
	for _, p := range strings.Split(s, ",") {
		p = strings.TrimSpace(p)
		if _, err := protocol.Lookup(multicast.Protocol(p)); err != nil {
			return nil, fmt.Errorf("--protocols %q: unknown protocol %q (want %s)", s, p, protocolNames())
		}
		if slices.Contains(out, p) {
			return nil, fmt.Errorf("--protocols %q: %s twice", s, p)
		}
		out = append(out, p)
	}
	return out, nil
}

// protocolNames lists the registry's protocols: "flexcast, skeen, tree".
func protocolNames() string {
	var names []string
	for _, p := range protocol.Names() {
		names = append(names, string(p))
	}
	return strings.Join(names, ", ")
}

// parseScale parses --scale.
func parseScale(s string) (procs.Scale, error) {
	var sc procs.Scale
	switch s {
	case "small":
		sc = procs.Small
	case "full":
		sc = procs.Full
	default:
		fields := map[string]*int{
			"items": &sc.Items, "customers": &sc.CustomersPerDistrict,
			"orders": &sc.OrdersPerDistrict, "new-orders": &sc.NewOrdersPerDistrict,
		}
		seen := map[string]bool{}
		for _, kv := range strings.Split(s, ",") {
			k, val, ok := strings.Cut(strings.TrimSpace(kv), "=")
			p, known := fields[k]
			if !ok || !known {
				return sc, fmt.Errorf("--scale %q: want small, full or items=N,customers=N,orders=N,new-orders=N", s)
			}
			n, err := strconv.Atoi(val)
			if err != nil {
				return sc, fmt.Errorf("--scale %q: %s=%q is not a number", s, k, val)
			}
			*p, seen[k] = n, true
		}
		if len(seen) != len(fields) {
			return sc, fmt.Errorf("--scale %q: give all of items, customers, orders and new-orders", s)
		}
	}
	if err := sc.Validate(); err != nil {
		return sc, fmt.Errorf("--scale %q: %w", s, err)
	}
	return sc, nil
}

// formatScale writes s as --scale takes it.
func formatScale(s procs.Scale) string {
	switch s {
	case procs.Small:
		return "small"
	case procs.Full:
		return "full"
	}
	return fmt.Sprintf("items=%d,customers=%d,orders=%d,new-orders=%d", s.Items, s.CustomersPerDistrict, s.OrdersPerDistrict, s.NewOrdersPerDistrict)
}

// selectWarehouses parses --warehouses against the cluster's warehouses.
func selectWarehouses(view *client.Topology, s string) ([]int, error) {
	all := gtpcc.ClusterWarehouses(view)
	if len(all) == 0 {
		return nil, errors.New("the cluster has no warehouse partitions (partitions w/NNNN/ to w/NNNN+1/)")
	}
	switch s {
	case "", "all":
		return all, nil
	}
	var ws []int
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(strings.TrimSpace(part), "-")
		a, err1 := strconv.Atoi(lo)
		b := a
		var err2 error
		if isRange {
			b, err2 = strconv.Atoi(hi)
		}
		if err1 != nil || err2 != nil || a < 1 || b < a {
			return nil, fmt.Errorf("--warehouses %q: want all, or numbers and ranges such as 1-3,5", s)
		}
		for w := a; w <= b; w++ {
			if !slices.Contains(all, w) {
				return nil, fmt.Errorf("--warehouses %q: warehouse %d is not a partition of the cluster (it has %s)", s, w, formatWarehouses(all))
			}
			if !slices.Contains(ws, w) {
				ws = append(ws, w)
			}
		}
	}
	slices.Sort(ws)
	return ws, nil
}

// formatWarehouses writes warehouses as ranges: 1-6,9.
func formatWarehouses(ws []int) string {
	var parts []string
	for i := 0; i < len(ws); {
		j := i
		for j+1 < len(ws) && ws[j+1] == ws[j]+1 {
			j++
		}
		if j > i {
			parts = append(parts, fmt.Sprintf("%d-%d", ws[i], ws[j]))
		} else {
			parts = append(parts, strconv.Itoa(ws[i]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}
