package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/viper"

	"github.com/flexkv/flexkv/gtpcc/procs"
	"github.com/flexkv/flexkv/multicast/check"
	"github.com/flexkv/flexkv/partition"
	"github.com/flexkv/flexkv/server"
)

// newLogger returns the slog logger of --log-level (debug, info, warn,
// error), writing text lines to w.
func newLogger(w io.Writer, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, &exitError{code: 2, err: fmt.Errorf("--log-level %q: want debug, info, warn or error", level)}
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l})), nil
}

// signalContext returns a context cancelled by SIGINT or SIGTERM.
func signalContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
}

// newServerCmd returns `flexkv server`, which runs one replica.
func newServerCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "server --config FILE --node ID",
		Short: "Run one replica of a FlexKV cluster",
		Long:  serverHelp,
		Args:  noArgs,
	}
	cmd.Flags().String("config", "", "cluster configuration file (YAML, DESIGN 8); default: the embedded configs/local.yaml")
	cmd.Flags().String("node", "", "this replica's id in the configuration (required)")
	cmd.Flags().String("data-dir", "", "data directory (default ./flexkv-data/<node>)")
	cmd.Flags().String("log-level", "info", "debug, info, warn or error")
	cmd.Flags().String("delivery-log", "", "append this replica's delivery log (JSON lines, DESIGN 10.1) to FILE; FILE.open marks it open, and after a kill the deliveries the restart repeats are left out")
	cmd.Flags().String("metrics", "", "serve Prometheus metrics at http://ADDR/metrics (host:port, e.g. :9100; default off)")
	cmd.Flags().String("http", "", "serve the HTTP/JSON gateway of the client API at ADDR (host:port; default: the replica's http address in the configuration, if any)")
	cmd.Flags().String("settings", "", "a YAML file of settings (node, data-dir, config, ...); flags and FLEXKV_* win over it")
	cmd.Flags().String("certs-dir", "", "directory of ca.crt and node.NODE.crt/.key: every link runs mutual TLS (required unless --insecure)")
	cmd.Flags().Bool("insecure", false, "run every link without TLS (a warning is logged)")
	cmd.Flags().String("listen-host", "", "listen on this host (0.0.0.0, ::) at each configured port, for configured hosts that resolve only once the replica runs (a Kubernetes pod's name); others still dial the configured addresses")
	cmd.Flags().String("initial-cluster-state", string(server.ClusterNew), "new: bootstrap the group on an empty data directory; existing: join the running group, voting in no election until the log holds something")
	cmd.Flags().String("join", "", "join a running cluster as a member added with flexkv member add: take the configuration of its current epoch from the replica at ENDPOINT (host:port of its client API) instead of --config; implies --initial-cluster-state existing")
	addLatencyFlags(cmd)
	addProfileFlags(cmd, "this replica, until it stops")
	cmd.RunE = runServer
	return cmd
}

// runServer runs flexkv server: it checks the settings, opens the replica and serves
// until SIGINT or SIGTERM.
func runServer(cmd *cobra.Command, _ []string) (err error) {
	v := settings(cmd)
	if err := readSettingsFile(cmd, v); err != nil {
		return &exitError{code: 2, err: err}
	}
	stopProfile, err := startProfiles(v)
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	defer func() { err = errors.Join(err, stopProfile()) }()
	node := v.GetString("node")
	if node == "" {
		return &exitError{code: 2, err: errors.New("server: --node is required (or FLEXKV_NODE)")}
	}
	join := v.GetString("join")
	var cfg, current *partition.ClusterConfig
	var lat *partition.Latency
	if join == "" {
		if cfg, lat, err = loadCluster(v.GetString("config")); err != nil {
			return &exitError{code: 2, err: err}
		}
		if _, _, ok := cfg.Replica(node); !ok {
			return &exitError{code: 2, err: fmt.Errorf("server: node %q is not a replica of the configuration (replicas: %s)", node, strings.Join(cfg.ReplicaIDs(), ", "))}
		}
	} else {
		switch {
		case v.GetString("config") != "":
			return &exitError{code: 2, err: errors.New("server: --join and --config: choose one (a replica that joins takes the configuration from the cluster)")}
		case (cmd.Flags().Changed("initial-cluster-state") || os.Getenv("FLEXKV_INITIAL_CLUSTER_STATE") != "") && v.GetString("initial-cluster-state") != string(server.ClusterExisting):
			return &exitError{code: 2, err: errors.New("server: --join joins a running group: --initial-cluster-state existing (the default with --join)")}
		}
		v.Set("initial-cluster-state", string(server.ClusterExisting))
	}
	mode, jitter, err := latencyFlags(v)
	if err != nil {
		return err
	}
	state, err := server.ParseClusterState(v.GetString("initial-cluster-state"))
	if err != nil {
		return &exitError{code: 2, err: fmt.Errorf("--initial-cluster-state: %w", err)}
	}
	log, err := newLogger(cmd.ErrOrStderr(), v.GetString("log-level"))
	if err != nil {
		return err
	}
	nodeCert, err := serverNode(v, node)
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	if join != "" {
		if cfg, current, lat, err = joinCluster(cmd.Context(), join, node, nodeCert); err != nil {
			return err
		}
		log.Info("joined", "node", node, "from", join, "members", strings.Join(current.ReplicaIDs(), ","))
	}
	if nodeCert == nil {
		log.Warn("running without TLS (--insecure): clients and peers are not authenticated and traffic is plaintext", "node", node)
	}
	dir := v.GetString("data-dir")
	if dir == "" {
		dir = filepath.Join("flexkv-data", node)
	}
	dlog, closeLog, err := openDeliveryLog(v.GetString("delivery-log"), log)
	if err != nil {
		return err
	}
	defer closeLog()
	defer hostGC(cfg, 1)()
	ctx, stop := signalContext(cmd.Context())
	defer stop()
	srv, err := server.Open(server.Config{
		Cluster: cfg, Current: current, Latency: lat, LatencyMode: mode, LatencyJitter: jitter,
		NodeID: node, Dir: dir, DeliveryLog: dlog, Logger: log,
		MetricsAddr: v.GetString("metrics"), HTTPAddr: v.GetString("http"), Procedures: procs.Registry(), Node: nodeCert,
		InitialClusterState: state, ListenHost: v.GetString("listen-host"),
	})
	if err != nil {
		return err
	}
	log.Info("serving", "node", node, "group", srv.Group(), "grpc", srv.Addr(), "peer", srv.PeerAddr(), "tls", nodeCert != nil, "data", dir,
		"cluster_id", srv.Identity().ClusterID, "fingerprint", srv.Identity().Fingerprint, "initial_cluster_state", state, "metrics", v.GetString("metrics"), "http", srv.HTTPAddr(),
		"latency", latencySummary(lat, mode, jitter))
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	for {
		select {
		case <-hup:
			// Certificates rotate without a restart (DESIGN 13).
			_ = srv.ReloadCerts() // logged; the old ones stay
		case <-ctx.Done():
			log.Info("stopping", "node", node)
			return srv.Close()
		}
	}
}

// serverHelp is the long help of flexkv server.
const serverHelp = `Run one replica: the node ID of the cluster configuration FILE, with its data
in --data-dir. Every flag may also come from the environment (FLEXKV_CONFIG,
FLEXKV_NODE, FLEXKV_DATA_DIR, FLEXKV_LOG_LEVEL, FLEXKV_DELIVERY_LOG,
FLEXKV_METRICS, FLEXKV_LATENCY_MODE, FLEXKV_LATENCY_JITTER, FLEXKV_CERTS_DIR,
FLEXKV_INSECURE, FLEXKV_INITIAL_CLUSTER_STATE, FLEXKV_LISTEN_HOST, FLEXKV_JOIN) or from a
settings file, --settings FILE (FLEXKV_SETTINGS): a YAML map of the same
names, e.g.

  node: r1
  data-dir: /var/lib/flexkv
  config: /etc/flexkv/cluster.yaml

A flag wins over the environment, which wins over the file.

Every link runs mutual TLS 1.3 from the cluster CA (DESIGN 13): the client
API on the replica's grpc address requires a client certificate; the service
between groups listens on the replica's peer address (default: the grpc port
+ 100) and takes frames from a group only from that group's nodes; raft
accepts only the replicas of this group. --certs-dir DIR holds ca.crt and
node.NODE.crt/.key (flexkv cert). Without it the server refuses to start,
unless --insecure is given. Relative paths
in the file are taken from the working directory, like those of flags. With --metrics
ADDR it serves Prometheus metrics at http://ADDR/metrics. SIGTERM or SIGINT
stops it gracefully. SIGHUP makes it re-read its certificate, key and
ca.crt (it also does when they change, checked at new connections): new
connections use them, open ones keep theirs.

Any replica answers any request (DESIGN 7): one it cannot serve (another
group's keys, another entry group, a follower's write) it forwards, once, to
the right group's leader, for the same user. The HTTP/JSON gateway of the
client API (POST /v1/txn, GET|PUT|DELETE /v1/kv/{key}, GET /v1/scan, ...)
listens on the replica's http address in the configuration, or on --http
ADDR; with neither, there is none. It runs the client API's TLS: a request
presents a user's client certificate (curl --cacert ca.crt --cert
client.USER.crt --key client.USER.key).

Cluster identity (DESIGN 13): at its first start the replica records in its
data directory the cluster id and the fingerprint of the configuration; it
refuses to start later with a configuration that differs, naming the fields,
and the peer services of replicas that run different configurations refuse
each other's calls. --initial-cluster-state new (the default) bootstraps the
group on an empty data directory; existing, for a replica that lost its data,
bootstraps nothing, waits for its group's leader to send it the data, and
votes in no election until its log holds something. A directory with data is
reopened either way.

A member added to a running cluster (flexkv member add, DESIGN 14) starts
with --join ENDPOINT in place of --config: it takes from the replica at
ENDPOINT the cluster's bootstrap configuration (its identity) and the
members of the current epoch, which must list --node, and joins its group
as a learner (--initial-cluster-state existing), catching up from its
leader's snapshot; promote it then with flexkv member promote. Restart it
with the same --join.

The process runs Go's garbage collector at GOGC=400 (the heap may grow to
five times what is live between collections: less CPU for more memory)
unless the GOGC or GOMEMLIMIT environment variable is set.

` + latencyHelp

// latencyHelp describes the emulated WAN, for the help of the commands that
// run replicas.
const latencyHelp = `The emulated WAN (DESIGN 8): when the cluster configuration names a latency
matrix (latency:, round trips in ms between regions), every send from one
group's leader to another group is delayed by the one-way latency between
their regions; two groups of one region get the matrix's diagonal.
--latency-mode real (the default) delays a send by half the matrix value, so
that a round trip takes the value; paper by the full value, as the FlexCast
paper's emulation did; off delays nothing. --latency-jitter F spreads each
delay uniformly by up to the fraction F either way, keeping every link's FIFO
order. Only traffic between groups is delayed: the way between a client and
the servers (a client is another process) and raft's traffic inside a group
are not emulated.`

func addLatencyFlags(cmd *cobra.Command) {
	cmd.Flags().String("latency-mode", string(server.LatencyReal), "emulated WAN between groups, from the configuration's latency matrix: real (one-way = value/2), paper (one-way = value) or off; clients are not delayed")
	cmd.Flags().Float64("latency-jitter", 0, "spread each emulated delay by up to this fraction (0 to 1) either way, keeping FIFO order")
}

// latencyFlags reads --latency-mode and --latency-jitter.
func latencyFlags(v *viper.Viper) (server.LatencyMode, float64, error) {
	mode, err := server.ParseLatencyMode(v.GetString("latency-mode"))
	if err != nil {
		return "", 0, &exitError{code: 2, err: fmt.Errorf("--latency-mode: %w", err)}
	}
	s := v.GetString("latency-jitter")
	jitter, err := strconv.ParseFloat(s, 64)
	if err != nil || !(jitter >= 0 && jitter <= 1) {
		return "", 0, &exitError{code: 2, err: fmt.Errorf("--latency-jitter %q: want a fraction from 0 to 1", s)}
	}
	return mode, jitter, nil
}

// latencySummary says, for the logs, what the emulated WAN does.
func latencySummary(lat *partition.Latency, mode server.LatencyMode, jitter float64) string {
	switch {
	case lat == nil:
		return "off (no latency matrix)"
	case mode == server.LatencyOff:
		return "off"
	case jitter > 0:
		return fmt.Sprintf("%s, jitter %g", mode, jitter)
	default:
		return string(mode)
	}
}

// openDeliveryLog opens the server's --delivery-log at path (none when path
// is empty) and returns it with the function that closes it, which logs how
// many deliveries a restart after a kill repeated and the log left out.
func openDeliveryLog(path string, log *slog.Logger) (*check.Writer, func(), error) {
	if path == "" {
		return nil, func() {}, nil
	}
	w, err := check.AppendFile(path)
	if err != nil {
		return nil, nil, err
	}
	return w, func() {
		if n := w.Skipped(); n > 0 {
			log.Info("delivery log: left out the deliveries the restart repeated", "path", path, "deliveries", n)
		}
		_ = w.Close()
	}, nil
}
