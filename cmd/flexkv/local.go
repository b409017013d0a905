package main

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/flexkv/flexkv/backup"
	"github.com/flexkv/flexkv/cluster"
	"github.com/flexkv/flexkv/gtpcc/bench"
	"github.com/flexkv/flexkv/gtpcc/procs"
	"github.com/flexkv/flexkv/partition"
)

// newLocalCmd returns `flexkv local`, which runs a whole cluster in this
// process.
func newLocalCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "local",
		Short: "Run a whole FlexKV cluster in this process",
		Long:  localHelp,
		Args:  noArgs,
	}
	cmd.Flags().String("config", "", "cluster configuration file (default: the embedded configs/local.yaml)")
	cmd.Flags().String("data-dir", "flexkv-data/local", "data directory; each replica uses a subdirectory named after its id")
	cmd.Flags().String("chaos", "", "faults to inject, e.g. leader-kill=5s,partition=10s")
	cmd.Flags().Uint64("seed", 1, "seed of the chaos choices")
	cmd.Flags().String("delivery-log", "", "write one delivery log per replica (JSON lines, DESIGN 10.1) into DIR")
	cmd.Flags().String("log-level", "warn", "debug, info, warn or error")
	cmd.Flags().String("metrics", "", "serve every replica's Prometheus metrics at http://ADDR/metrics (host:port, e.g. 127.0.0.1:9100; default off)")
	cmd.Flags().Bool("insecure", false, "run every link without TLS")
	cmd.Flags().String("restore-from", "", "start a new cluster from the backup in DIR (flexkv backup create), seeding every replica's empty data directory")
	addLatencyFlags(cmd)
	addProfileFlags(cmd, "the whole cluster, until it stops")
	cmd.RunE = runLocal
	return cmd
}

// runLocal runs flexkv local: it starts every replica of the configuration in
// this process, prints where they serve and runs until SIGINT or SIGTERM.
func runLocal(cmd *cobra.Command, _ []string) (err error) {
	v := settings(cmd)
	stopProfiles, err := startProfiles(v)
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	// The profiles are written while the cluster still runs (its heap in
	// use, for a look at where memory went), or on an early return.
	profiled := false
	writeProfiles := func() error {
		if profiled {
			return nil
		}
		profiled = true
		return stopProfiles()
	}
	defer func() { err = errors.Join(err, writeProfiles()) }()
	faults, err := cluster.ParseChaos(v.GetString("chaos"))
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	cfg, lat, err := loadCluster(v.GetString("config"))
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	mode, jitter, err := latencyFlags(v)
	if err != nil {
		return err
	}
	log, err := newLogger(cmd.ErrOrStderr(), v.GetString("log-level"))
	if err != nil {
		return err
	}
	procsInUse, restoreProcs := hostProcs(cfg)
	defer restoreProcs()
	defer hostGC(cfg, replicasOf(cfg))()
	ctx, stop := signalContext(cmd.Context())
	defer stop()
	start := time.Now()
	if from := v.GetString("restore-from"); from != "" {
		if err := restoreLocal(cmd, from, cfg, v.GetString("data-dir")); err != nil {
			return err
		}
	}
	l, err := cluster.Start(cluster.Config{
		Cluster: cfg, Latency: lat, LatencyMode: mode, LatencyJitter: jitter, Dir: v.GetString("data-dir"),
		DeliveryLogDir: v.GetString("delivery-log"), Logger: log, MetricsAddr: v.GetString("metrics"),
		Procedures: procs.Registry(), Insecure: v.GetBool("insecure"),
	})
	if err != nil {
		return err
	}
	defer l.Close()
	if err := bench.WaitLeaders(ctx, l, cfg); err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	fmt.Fprintf(out, "FlexKV local cluster (%s, %d groups, %d replicas, GOMAXPROCS %d, %s) ready in %s; data in %s\n",
		cfg.Protocol, len(cfg.Groups), len(l.Nodes()), procsInUse, memoryLimitText(), time.Since(start).Round(time.Millisecond), v.GetString("data-dir"))
	for _, g := range cfg.Groups {
		var addrs []string
		for _, r := range g.Replicas {
			addrs = append(addrs, r.GRPC)
		}
		fmt.Fprintf(out, "  %-14s %s\n", g.Name, strings.Join(addrs, " "))
	}
	fmt.Fprintf(out, "emulated WAN: %s\n", latencySummary(lat, mode, jitter))
	fmt.Fprintf(out, "endpoints: %s\n", strings.Join(l.Endpoints(), ","))
	if gw := httpGateways(cfg, l.CertsDir() != ""); len(gw) > 0 {
		fmt.Fprintf(out, "http gateway: %s\n", strings.Join(gw, " "))
	}
	if dir := l.CertsDir(); dir != "" {
		fmt.Fprintf(out, "TLS: mutual, certificates in %s (client user %s)\n", dir, cluster.RootUser)
	} else {
		fmt.Fprintln(out, "TLS: off (--insecure)")
	}
	if a := l.MetricsAddr(); a != "" {
		fmt.Fprintf(out, "metrics: http://%s/metrics\n", a)
	}
	if len(faults) > 0 {
		fmt.Fprintf(out, "chaos: %s (seed %d)\n", v.GetString("chaos"), v.GetUint64("seed"))
		c := &cluster.Chaos{Local: l, Faults: faults, Seed: v.GetUint64("seed"), Logger: log}
		n := c.Run(ctx)
		fmt.Fprintf(out, "chaos: %d faults injected\n", n)
	} else {
		<-ctx.Done()
	}
	fmt.Fprintln(out, "stopping")
	perr := writeProfiles()
	return errors.Join(l.Close(), perr)
}

// restoreLocal seeds the data directory of every replica of cfg under
// dataDir from the backup in from (backup.Restore): the local cluster then
// starts as a new cluster holding the backup's data.
func restoreLocal(cmd *cobra.Command, from string, cfg *partition.ClusterConfig, dataDir string) error {
	if _, err := backup.Verify(from); err != nil {
		return fmt.Errorf("local: --restore-from: %w", err)
	}
	var id string
	var m *backup.Manifest
	for _, node := range cfg.ReplicaIDs() {
		var err error
		if m, id, err = backup.Restore(backup.RestoreOptions{From: from, Config: cfg, Node: node, DataDir: filepath.Join(dataDir, node)}); err != nil {
			return fmt.Errorf("local: --restore-from: %w", err)
		}
	}
	fmt.Fprintf(cmd.OutOrStdout(), "restored backup %s of cluster %s into %s: new cluster %s\n", m.Marker, m.ClusterID, dataDir, id)
	return nil
}

// httpGateways returns the URL of every replica's HTTP gateway.
func httpGateways(cfg *partition.ClusterConfig, secure bool) []string {
	scheme := "http://"
	if secure {
		scheme = "https://"
	}
	var out []string
	for _, g := range cfg.Groups {
		for _, r := range g.Replicas {
			if r.HTTP != "" {
				out = append(out, scheme+r.HTTP)
			}
		}
	}
	return out
}

// localHelp is the long help of flexkv local.
const localHelp = `Run every replica of a cluster configuration in this process (by default the
embedded configs/local.yaml: 3 regions x 3 replicas on 127.0.0.1), each with its
data under --data-dir/<node>, so that a restart finds the data again. Prints
the client endpoints (host:port) once the cluster serves; SIGINT or SIGTERM
stops it.

--chaos injects faults, each KIND=DURATION (comma-separated) on its own period:
  leader-kill=D        stop the leader of a random group, restart it from disk
  follower-restart=D   the same to a follower
  partition=D          cut a random replica off from everyone for a while
  group-partition=D    cut every replica of a random group off from the other
                       groups for a while (raft inside it and its clients go on)
Every fault is logged. --seed fixes the random draws; which replica a draw
hits depends on who leads at that moment.

--restore-from DIR starts a new cluster from a backup (flexkv backup create):
every replica's data directory, which must be empty, is seeded from its
group's copy, with a new cluster id and fresh protocol state (DESIGN 14).

--metrics ADDR serves the Prometheus metrics of every replica at
http://ADDR/metrics, labelled by group and replica.

Each replica with an http address in the configuration (configs/local.yaml:
7400+N for rN) serves the HTTP/JSON gateway of the client API there
(DESIGN 7), with the cluster's TLS: curl --cacert DATA/certs/ca.crt --cert
DATA/certs/client.root.crt --key DATA/certs/client.root.key
https://127.0.0.1:7401/v1/kv/w/0001/x

Every link runs mutual TLS 1.3 (DESIGN 13) from a throwaway CA made on first
start: DATA/ca.key, and in DATA/certs the CA certificate, a node certificate
per replica and the client certificate of user root, which flexkv kv, gtpcc,
status and bench find there by default. --insecure runs without TLS.

Every flag may also come from the environment: FLEXKV_<FLAG>, e.g.
FLEXKV_LATENCY_MODE=paper.

` + latencyHelp
