// Package cluster runs whole FlexKV clusters in one process, for
// `flexkv local` and `flexkv demo`, the benchmark runs and the tests: every
// replica a server of package server, each with its own data directory,
// which can be stopped, restarted from its data and cut off from its group
// (Local); and the faults of a chaos run (Chaos). These are rigs for
// demonstrations and tests, kept out of the packages a production replica
// runs (DESIGN 1).
package cluster

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/flexkv/flexkv/certs"
	"github.com/flexkv/flexkv/multicast/channel"
	"github.com/flexkv/flexkv/multicast/check"
	"github.com/flexkv/flexkv/multicast/protocol"
	"github.com/flexkv/flexkv/partition"
	"github.com/flexkv/flexkv/replication"
	"github.com/flexkv/flexkv/server"
	"github.com/flexkv/flexkv/txn"
)

// Config configures a whole cluster in one process (flexkv local,
// tests): every replica of Cluster, each with its data under Dir/<node id>.
type Config struct {
	Cluster *partition.ClusterConfig
	// Latency, LatencyMode and LatencyJitter emulate the WAN between the
	// groups, as in server.Config.
	Latency       *partition.Latency
	LatencyMode   server.LatencyMode
	LatencyJitter float64
	Dir           string
	Procedures    *txn.Registry
	NoSync        bool
	// DeliveryLogDir, when set, receives one delivery log per replica,
	// <node id>.jsonl, appended to across restarts.
	DeliveryLogDir string
	Logger         *slog.Logger
	// MetricsAddr, when set, is the host:port where the cluster serves the
	// Prometheus metrics of all its running replicas, at /metrics, until
	// Close.
	MetricsAddr string
	// Replication tunes every replica (see server.Config.Replication).
	Replication replication.Config
	// InitialClusterState is how every replica starts on an empty data
	// directory (server.Config.InitialClusterState; "": new).
	InitialClusterState server.ClusterState
	// WaitMax and ScanBytesMax are every server's bounds (see
	// server.Config; 0: the defaults).
	WaitMax      time.Duration
	ScanBytesMax int
	// ResultsMax is every server's bound on anonymous results
	// (server.Config.ResultsMax; 0: the default).
	ResultsMax int
	// Insecure runs every link without TLS. Otherwise (the default, as for
	// a real cluster: DESIGN 13) the cluster runs mutual TLS from a
	// throwaway CA that Start creates under Dir: ca.key beside the
	// directory certs/, which holds ca.crt, every replica's node
	// certificate and the client certificate of user root (kept across
	// restarts, so that `flexkv kv` finds them).
	Insecure bool
}

// CertsDir returns the certificates directory of a cluster with data
// directory dir (DESIGN 13: DATA/certs).
func CertsDir(dir string) string { return filepath.Join(dir, "certs") }

// RootUser is the user whose client certificate a secure cluster creates.
const RootUser = "root"

// Local is a cluster running in one process. Its replicas can be stopped,
// restarted from their data and cut off from their groups, for chaos runs
// and tests. It is safe for concurrent use.
type Local struct {
	cfg Config

	mu      sync.Mutex
	nodes   map[string]*localNode
	order   []string // node ids, in configuration order
	closed  bool
	logs    map[string]*check.Writer
	metrics *server.MetricsServer // nil unless cfg.MetricsAddr
	// restored counts, by node, the snapshot restores of its servers
	// stopped so far.
	restored map[string]int64
	// groupCut holds the groups cut off from the others (SetGroupCut), by
	// GroupID; names maps a node to its group's GroupID.
	groupMu  sync.Mutex
	groupCut partition.GroupSet
	groupOf  map[string]partition.GroupID
	// certs are the replicas' node certificates, clientTLS the root
	// user's client configuration; nil when Insecure.
	certs     map[string]*certs.Node
	clientTLS *tls.Config
}

type localNode struct {
	id    string
	srv   *server.Server         // nil while stopped
	cutSw *replication.CutSwitch // raft's links of srv
	cutMu sync.Mutex
	cut   bool
}

// Start starts every replica of cfg.Cluster.
func Start(cfg Config) (*Local, error) {
	if cfg.Cluster == nil {
		return nil, errors.New("cluster: no cluster configuration")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	_, top, _, err := protocol.Build(cfg.Cluster)
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	l := &Local{cfg: cfg, nodes: make(map[string]*localNode), logs: make(map[string]*check.Writer), restored: make(map[string]int64), groupOf: make(map[string]partition.GroupID)}
	if cfg.DeliveryLogDir != "" {
		if err := os.MkdirAll(cfg.DeliveryLogDir, 0o755); err != nil {
			return nil, fmt.Errorf("cluster: %w", err)
		}
	}
	for _, g := range cfg.Cluster.Groups {
		gid, _ := top.Lookup(g.Name)
		for _, r := range g.Replicas {
			l.order = append(l.order, r.ID)
			l.nodes[r.ID] = &localNode{id: r.ID}
			l.groupOf[r.ID] = gid
		}
	}
	if !cfg.Insecure {
		if err := l.loadCerts(); err != nil {
			return nil, err
		}
	}
	for _, id := range l.order {
		if err := l.Start(id); err != nil {
			return nil, errors.Join(err, l.Close())
		}
	}
	if cfg.MetricsAddr != "" {
		ms, err := server.ServeMetrics(cfg.MetricsAddr, l.Metrics())
		if err != nil {
			return nil, errors.Join(err, l.Close())
		}
		l.mu.Lock()
		l.metrics = ms
		l.mu.Unlock()
	}
	return l, nil
}

// Metrics returns the collector of the cluster's running replicas.
func (l *Local) Metrics() *server.Metrics { return server.NewMetrics(l.running) }

// MetricsAddr returns the address of the cluster's metrics endpoint, or ""
// without one.
func (l *Local) MetricsAddr() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.metrics == nil {
		return ""
	}
	return l.metrics.Addr()
}

// running returns the running replicas, in configuration order.
func (l *Local) running() []*server.Server {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []*server.Server
	for _, id := range l.order {
		if n := l.nodes[id]; n.srv != nil {
			out = append(out, n.srv)
		}
	}
	return out
}

// Nodes returns the node ids, in configuration order.
func (l *Local) Nodes() []string { return append([]string(nil), l.order...) }

// Endpoints returns the gRPC address of every replica, in configuration
// order.
func (l *Local) Endpoints() []string {
	return l.cfg.Cluster.Endpoints()
}

func (l *Local) deliveryLog(id string) (*check.Writer, error) {
	if l.cfg.DeliveryLogDir == "" {
		return nil, nil
	}
	if w := l.logs[id]; w != nil {
		return w, nil
	}
	w, err := check.AppendFile(filepath.Join(l.cfg.DeliveryLogDir, id+".jsonl"))
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	l.logs[id] = w
	return w, nil
}

// node returns node id (with l.mu held).
func (l *Local) node(id string) (*localNode, error) {
	n, ok := l.nodes[id]
	if !ok {
		return nil, fmt.Errorf("cluster: no node %q", id)
	}
	return n, nil
}

// Start starts node id (again), on its data.
func (l *Local) Start(id string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	n, err := l.node(id)
	switch {
	case err != nil:
		return err
	case l.closed:
		return errors.New("cluster: closed")
	case n.srv != nil:
		return nil
	}
	dlog, err := l.deliveryLog(id)
	if err != nil {
		return err
	}
	n.cutSw = new(replication.CutSwitch)
	n.cutMu.Lock()
	n.cut = false
	n.cutMu.Unlock()
	srv, err := server.Open(server.Config{
		Cluster: l.cfg.Cluster, Latency: l.cfg.Latency, LatencyMode: l.cfg.LatencyMode, LatencyJitter: l.cfg.LatencyJitter, NodeID: id,
		Dir: filepath.Join(l.cfg.Dir, id), Procedures: l.cfg.Procedures, NoSync: l.cfg.NoSync,
		DeliveryLog: dlog, Logger: l.cfg.Logger, RaftCut: n.cutSw, Replication: l.cfg.Replication, Node: l.certs[id],
		InitialClusterState: l.cfg.InitialClusterState,
		WaitMax:             l.cfg.WaitMax, ScanBytesMax: l.cfg.ScanBytesMax, ResultsMax: l.cfg.ResultsMax,
		FrameFilter: func(to partition.GroupID, frames []channel.Frame) []channel.Frame {
			if l.groupsCut(l.groupOf[id], to) {
				return nil
			}
			n.cutMu.Lock()
			defer n.cutMu.Unlock()
			if n.cut {
				return nil
			}
			return frames
		},
	})
	if err != nil {
		return fmt.Errorf("cluster: node %s: %w", id, err)
	}
	n.srv = srv
	return nil
}

// Stop stops node id (its data stays).
func (l *Local) Stop(id string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	n, err := l.node(id)
	if err != nil || n.srv == nil {
		return err
	}
	err = n.srv.Close()
	l.restored[id] += n.srv.SnapshotsRestored()
	n.srv = nil
	return err
}

// SnapshotsRestored returns how many times the executor state of node id
// (all nodes: id "") was replaced by one from a raft snapshot, over the
// cluster's life. Such a replica's delivery log lacks the deliveries the
// snapshot covered.
func (l *Local) SnapshotsRestored(id string) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var n int64
	for _, node := range l.order {
		if id != "" && node != id {
			continue
		}
		n += l.restored[node]
		if srv := l.nodes[node].srv; srv != nil {
			n += srv.SnapshotsRestored()
		}
	}
	return n
}

// SetCut cuts node id off from its group and the other groups (true), or
// heals it (false).
func (l *Local) SetCut(id string, cut bool) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	n, err := l.node(id)
	if err != nil {
		return err
	}
	n.cutMu.Lock()
	n.cut = cut
	n.cutMu.Unlock()
	if n.srv != nil {
		n.cutSw.SetCut(cut)
	}
	return nil
}

// SetGroupCut cuts group off from the other groups (true) or heals it:
// every frame its leader sends to another group, and every frame another
// group sends to it, is dropped. Raft inside the group and its clients are
// not cut.
func (l *Local) SetGroupCut(group string, cut bool) {
	l.groupMu.Lock()
	defer l.groupMu.Unlock()
	for _, g := range l.cfg.Cluster.Groups {
		if g.Name != group {
			continue
		}
		gid := l.groupOf[g.Replicas[0].ID]
		if cut {
			l.groupCut = l.groupCut.Add(gid)
		} else {
			l.groupCut = l.groupCut.Remove(gid)
		}
	}
}

// groupsCut reports whether the link from group from to group to is cut.
func (l *Local) groupsCut(from, to partition.GroupID) bool {
	l.groupMu.Lock()
	defer l.groupMu.Unlock()
	return l.groupCut.Has(from) || l.groupCut.Has(to)
}

// Running reports whether node id runs.
func (l *Local) Running(id string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	n, ok := l.nodes[id]
	return ok && n.srv != nil
}

// Leader returns the node id of the running replica that leads group, or "".
func (l *Local) Leader(group string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, id := range l.order {
		n := l.nodes[id]
		if n.srv != nil && n.srv.Group() == group && n.srv.IsLeader() {
			return id
		}
	}
	return ""
}

// InvalidEntries returns, for each running node, how many log entries it
// skipped as malformed since it (re)started.
func (l *Local) InvalidEntries() map[string]int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string]int64)
	for _, id := range l.order {
		if srv := l.nodes[id].srv; srv != nil {
			out[id] = srv.InvalidEntries()
		}
	}
	return out
}

// Snapshot makes node id take a raft snapshot now (Server.Snapshot).
func (l *Local) Snapshot(id string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	n, err := l.node(id)
	switch {
	case err != nil:
		return err
	case n.srv == nil:
		return fmt.Errorf("cluster: node %s is stopped", id)
	}
	return n.srv.Snapshot()
}

// Describe returns a line on each node (server.Server.Describe, or that it is
// stopped), for a person debugging the cluster.
func (l *Local) Describe() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, id := range l.order {
		n := l.nodes[id]
		if n.srv == nil {
			out = append(out, id+": stopped")
			continue
		}
		line := n.srv.Describe()
		n.cutMu.Lock()
		if n.cut {
			line += " (cut off)"
		}
		n.cutMu.Unlock()
		out = append(out, line)
	}
	return out
}

// Group returns the group of node id.
func (l *Local) Group(id string) string {
	g, _, _ := l.cfg.Cluster.Replica(id)
	return g.Name
}

// FlushLogs writes the buffered lines of every delivery log to its file.
func (l *Local) FlushLogs() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	var errs []error
	for _, id := range l.order {
		if w := l.logs[id]; w != nil {
			errs = append(errs, w.Flush())
		}
	}
	return errors.Join(errs...)
}

// Close stops every replica and closes the delivery logs.
func (l *Local) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	ms := l.metrics
	l.mu.Unlock()
	var errs []error
	// The metrics endpoint stops first, unlocked: a scrape in progress
	// takes the lock to list the replicas.
	if ms != nil {
		errs = append(errs, ms.Close())
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	// Every replica stops: what raft says of the peers that stop before
	// it is no error.
	for _, id := range l.order {
		if n := l.nodes[id]; n.srv != nil {
			n.srv.Quiet()
		}
	}
	for _, id := range l.order {
		if n := l.nodes[id]; n.srv != nil {
			errs = append(errs, n.srv.Close())
			n.srv = nil
		}
	}
	for _, id := range l.order {
		if w := l.logs[id]; w != nil {
			errs = append(errs, w.Close())
		}
	}
	return errors.Join(errs...)
}

// Traffic returns the counts of every running node, by node id. A node
// restarted since counts from its restart.
func (l *Local) Traffic() map[string]server.Traffic {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string]server.Traffic)
	for _, id := range l.order {
		if srv := l.nodes[id].srv; srv != nil {
			out[id] = srv.Traffic()
		}
	}
	return out
}

// loadCerts creates what the certificates directory lacks (a CA, a node
// certificate for every replica, the root user's client certificate) and
// loads them.
func (l *Local) loadCerts() error {
	dir := CertsDir(l.cfg.Dir)
	nodes, err := NodeSpecs(l.cfg.Cluster)
	if err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	if _, err := certs.EnsureCluster(dir, filepath.Join(l.cfg.Dir, "ca.key"), nodes, []string{RootUser}); err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	l.certs = make(map[string]*certs.Node, len(nodes))
	for _, n := range nodes {
		nc, err := certs.LoadNode(dir, n.ID.Replica)
		if err != nil {
			return fmt.Errorf("cluster: %w", err)
		}
		l.certs[n.ID.Replica] = nc
	}
	c, err := certs.LoadClient(dir, RootUser)
	if err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	l.clientTLS = certs.ClientConfig(c)
	return nil
}

// NodeSpecs returns the node certificate of every replica of cfg: its group
// and id, and the hosts of its raft, gRPC and peer addresses.
func NodeSpecs(cfg *partition.ClusterConfig) ([]certs.NodeSpec, error) {
	var out []certs.NodeSpec
	for _, g := range cfg.Groups {
		for _, r := range g.Replicas {
			hosts, err := certs.HostsOf(r.Hosts()...)
			if err != nil {
				return nil, fmt.Errorf("node %s: %w", r.ID, err)
			}
			out = append(out, certs.NodeSpec{ID: certs.NodeID{Group: g.Name, Replica: r.ID}, Hosts: hosts})
		}
	}
	return out, nil
}

// ReloadCerts makes every running replica re-read its certificate files,
// as `flexkv server` does on SIGHUP.
func (l *Local) ReloadCerts() error {
	var errs []error
	for _, s := range l.running() {
		errs = append(errs, s.ReloadCerts())
	}
	return errors.Join(errs...)
}

// ClientTLS returns the TLS configuration of the root user for the
// cluster's client API (client.Config.TLS), or nil when it runs Insecure.
func (l *Local) ClientTLS() *tls.Config {
	if l.clientTLS == nil {
		return nil
	}
	return l.clientTLS.Clone()
}

// CertsDir returns the cluster's certificates directory, or "" when it runs
// Insecure.
func (l *Local) CertsDir() string {
	if l.cfg.Insecure {
		return ""
	}
	return CertsDir(l.cfg.Dir)
}
