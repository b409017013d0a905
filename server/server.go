// Package server runs one FlexKV replica as a network service: its group's
// raft replica (package replication), the transaction executor on Pebble
// (packages executor and kv) and the client API of api/apipb, with the gRPC health
// service and the peer service between groups that the replica registers,
// on the replica's gRPC address (DESIGN 2, 5, 7, 11). The server owns the
// gRPC servers and their listeners; the replica serves nothing itself.
//
// A request reaches the replica that leads the transaction's entry group. It
// is validated (bad input: InvalidArgument, nothing proposed), proposed to the
// group's raft log and, once the group accepted it, answered with the group's
// own piece when the group is a destination. The other destinations answer
// the client's Await calls with theirs. A follower answers Unavailable with
// the leader's address in the `flexkv-leader` trailer.
package server

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	grpcpeer "google.golang.org/grpc/peer"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"

	"github.com/flexkv/flexkv/api/apipb"
	"github.com/flexkv/flexkv/certs"
	"github.com/flexkv/flexkv/executor"
	"github.com/flexkv/flexkv/internal/rpcflow"
	"github.com/flexkv/flexkv/kv"
	"github.com/flexkv/flexkv/multicast/channel"
	"github.com/flexkv/flexkv/multicast/check"
	"github.com/flexkv/flexkv/multicast/protocol"
	"github.com/flexkv/flexkv/partition"
	"github.com/flexkv/flexkv/replication"
	"github.com/flexkv/flexkv/txn"
)

// Config configures one replica's server.
type Config struct {
	// Cluster is the cluster configuration (validated by Open), the
	// bootstrap configuration of epoch 1 (DESIGN 14: the members of later
	// epochs are in the replicated state; members.go); Latency its
	// latency matrix, if any: served to clients by Topology, and the delays
	// of the emulated WAN between groups (DESIGN 8).
	Cluster *partition.ClusterConfig
	Latency *partition.Latency
	// Current, when set, is the configuration of the cluster's current
	// epoch, for a replica that joins a running cluster (`flexkv server
	// --join`): NodeID is among its members, and they are the replica's
	// group and peers until its state names those of a later epoch.
	Current *partition.ClusterConfig
	// LatencyMode turns Latency's round trips into one-way delays of the
	// sends from this replica's group, while it leads, to the other groups
	// ("": LatencyReal). LatencyJitter, from 0 to 1, spreads each delay by
	// up to that fraction either way, keeping every link's FIFO order.
	LatencyMode   LatencyMode
	LatencyJitter float64
	// NodeID is this replica's id in Cluster.
	NodeID string
	// Dir is this replica's data directory: raft log and snapshots, Pebble.
	Dir string
	// Procedures are the stored procedures the replica can run (may be nil).
	Procedures *txn.Registry
	// ResultsMax bounds the anonymous results kept for Await (0:
	// kv.ResultsMaxDefault): a session's results are kept until it
	// acknowledges them (executor, Session results).
	ResultsMax int
	// ResultSessionsMax bounds the client sessions whose unacknowledged
	// result this replica keeps, one each (0: the executor's default,
	// executor.ResultSessionsDefault; see executor.Config).
	ResultSessionsMax int
	// StoredVoteBytesMax bounds the bytes of the votes from other groups
	// stored for transactions not yet run here (0: the executor's
	// default; see executor.Config).
	StoredVoteBytesMax int64
	// SessionsMax bounds the client sessions this replica's group keeps
	// open (0: group.SessionsMaxDefault); SessionTicks is how long one
	// lives idle, in ticks of the group's log (0:
	// group.SessionTicksDefault; a tick is Replication.TickInterval, 20 ms
	// by default, while the group is busy). Every replica of a group must
	// use the same values. They set Replication.State's fields when not 0.
	SessionsMax  int
	SessionTicks int
	// WaitMax bounds how long one Txn, Await, Put or Delete call waits at
	// this server for its result, whatever the caller's deadline, or with
	// none (0: WaitMaxDefault): past it the call answers DeadlineExceeded,
	// and the client asks again with the same id. A wait holds a stream and
	// a waiter: without a bound, callers without deadlines on transactions
	// that cannot complete (a destination group cut off) pile them up.
	WaitMax time.Duration
	// ScanBytesMax bounds the keys and values of one Scan response, in
	// bytes (0: ScanBytesMaxDefault); the rest of the range is paged
	// (ScanResponse.next_start). It must leave room, below the clients'
	// receive limit (4 MiB by default), for the protobuf framing.
	ScanBytesMax int
	// NoSync turns off fsync of the raft log and Pebble: tests only.
	NoSync bool
	// DeliveryLog, when set, receives the DESIGN 10.1 events of this
	// replica: its deliveries, and the multicasts and sends of its group
	// while it leads.
	DeliveryLog *check.Writer
	Logger      *slog.Logger
	// HTTPAddr, when set, is the host:port of the replica's HTTP/JSON
	// gateway of the client API (DESIGN 7; http.go), in place of its
	// configuration's http address; with neither, it serves none.
	HTTPAddr string
	// ListenHost, when set, is the host every port of the replica listens
	// on (raft, client API, peer service), each at its configured port: an
	// address such as 0.0.0.0, where the configured hosts resolve only
	// once the replica runs (a Kubernetes pod's DNS name). Clients, peers
	// and the group still dial the configured addresses.
	ListenHost string
	// MetricsAddr, when set, is the host:port where the server serves its
	// Prometheus metrics, at /metrics (DESIGN 11), until Close.
	MetricsAddr string
	// Node is this replica's certificate and the cluster CA (certs.LoadNode;
	// its identity must be NodeID of its group): every link runs mutual TLS
	// 1.3 with it (DESIGN 13): the client API requires a client
	// certificate, the peer service a node of the group a frame claims to
	// come from, raft a replica of this group. Nil: no TLS on any link
	// (`flexkv server --insecure`).
	Node *certs.Node
	// InitialClusterState is how the replica starts on an empty data
	// directory (DESIGN 13): ClusterNew (the default, ""), bootstrapping
	// its group, or ClusterExisting, joining its running group without
	// voting until its log holds something.
	InitialClusterState ClusterState

	// Fault injection (chaos runs, tests): see replication.Config.
	FrameFilter func(to partition.GroupID, frames []channel.Frame) []channel.Frame
	RaftCut     *replication.CutSwitch
	// Replication tunes the replica; its State, ID, Members, Peers, Dir,
	// Bootstrap, Executor, Observe, WANDelays and WANJitter are set by
	// Open.
	Replication replication.Config
}

// Server is one running replica.
type Server struct {
	cfg   Config
	log   *slog.Logger
	proto *protocol.Protocol // the cluster's: its entry groups, its core's stats
	top   *partition.Topology
	pm    *partition.PartitionMap
	self  partition.GroupID
	group partition.GroupConfig
	me    partition.ReplicaConfig // this replica's addresses
	// current caches the configuration of the current epoch (config).
	current atomic.Pointer[epochConfig]
	replica *replication.Replica
	store   *kv.Store
	exec    *executor.Executor
	health  *health.Server
	waiters *waiters
	logs    *logRing // the recent log lines (Debug)
	counts  counters
	reads   readCounts     // reads at the leader (reads.go)
	metrics *MetricsServer // nil unless cfg.MetricsAddr
	// grpcs are the gRPC servers of the replica, serving until Close;
	// serving ends their goroutines.
	grpcs   []*grpc.Server
	serving sync.WaitGroup

	// ready is set once replica is: the client API's handlers read it
	// first (intercept).
	ready atomic.Bool
	// peerRefusals counts peer calls refused for their claimed group,
	// fingerprintRefusals those refused for their configuration
	// fingerprint (DESIGN 13).
	peerRefusals        atomic.Int64
	fingerprintRefusals atomic.Int64
	// apiGuard and peerGuard bound each port's request bytes in flight
	// (edge.go); set once serve built them, read by the metrics.
	apiGuard, peerGuard atomic.Pointer[rpcflow.Guard]
	identity            Identity
	refusalsLogged      refusalLog
	// fwd forwards the requests this replica cannot serve (forward.go);
	// forwarded counts them.
	fwd       *forwarder
	forwarded atomic.Int64
	// Partition moves (moves.go): requests refused for touching a moving
	// partition, bytes copied in, and the queue sequence at which this
	// replica first served each move (its cut here, for frozen).
	movesRefused atomic.Int64
	moveBytes    atomic.Int64
	moveCutsMu   sync.Mutex
	moveCuts     map[moveKey]uint64
	moverStop    chan struct{}
	moverWG      sync.WaitGroup
	http         *gateway // nil without an HTTP address
	stop         chan struct{}
	closeOnce    sync.Once
	closeErr     error
}

// Open starts the replica cfg.NodeID: it opens (or creates) its data in
// cfg.Dir, joins its group and serves on its gRPC address.
func Open(cfg Config) (*Server, error) {
	s, err := newServer(cfg)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	// The identity first: a replica given another configuration opens
	// nothing of its data (DESIGN 13).
	if s.identity, err = loadIdentity(cfg.Dir, s.group.Name, cfg.NodeID, cfg.Cluster); err != nil {
		return nil, err
	}
	if err := s.openExecutor(); err != nil {
		return nil, err
	}
	rc := s.replicationConfig()
	s.health = health.NewServer()
	// NOT_SERVING until the replica is published: the client API answers
	// Unavailable until then (intercept).
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	s.replica, err = replication.Open(rc)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("server: %w", err), s.store.Close())
	}
	if err := s.serve(); err != nil {
		s.stopServing()
		return nil, errors.Join(err, s.replica.Close(), s.store.Close())
	}
	s.ready.Store(true)
	if cfg.MetricsAddr != "" {
		if s.metrics, err = ServeMetrics(cfg.MetricsAddr, s.Metrics()); err != nil {
			s.stopServing()
			return nil, errors.Join(err, s.replica.Close(), s.store.Close())
		}
	}
	if err := s.serveHTTP(); err != nil {
		if s.metrics != nil {
			err = errors.Join(err, s.metrics.Close())
		}
		s.stopServing()
		return nil, errors.Join(err, s.replica.Close(), s.store.Close())
	}
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	s.health.SetServingStatus(apipb.KV_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	s.moverWG.Add(1)
	go s.mover(s.moverStop, &s.moverWG)
	return s, nil
}

// newServer checks cfg against its cluster configuration and returns the
// server it describes, with nothing opened yet.
func newServer(cfg Config) (*Server, error) {
	if cfg.Cluster == nil {
		return nil, errors.New("server: no cluster configuration")
	}
	proto, top, pm, err := protocol.Build(cfg.Cluster)
	if err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	start := cmp.Or(cfg.Current, cfg.Cluster)
	if cfg.Current != nil {
		if err := protocol.Validate(cfg.Current); err != nil {
			return nil, fmt.Errorf("server: the current epoch's configuration: %w", err)
		}
	}
	gc, me, ok := start.Replica(cfg.NodeID)
	if !ok {
		return nil, fmt.Errorf("server: node %q is not a replica of the configuration (replicas: %s)", cfg.NodeID, strings.Join(start.ReplicaIDs(), ", "))
	}
	self, ok := top.Lookup(gc.Name)
	if !ok {
		return nil, fmt.Errorf("server: group %q of node %q is not in the topology", gc.Name, cfg.NodeID)
	}
	if cfg.Dir == "" {
		return nil, errors.New("server: no data directory")
	}
	if n := cfg.Node; n != nil && (n.ID.Group != gc.Name || n.ID.Replica != cfg.NodeID) {
		return nil, fmt.Errorf("server: the node certificate names %s, but this replica is %s/%s", n.ID, gc.Name, cfg.NodeID)
	}
	// Both with their defaults filled in, for replicationConfig.
	if cfg.LatencyMode, err = ParseLatencyMode(string(cfg.LatencyMode)); err != nil {
		return nil, err
	}
	if cfg.InitialClusterState, err = ParseClusterState(string(cfg.InitialClusterState)); err != nil {
		return nil, err
	}
	if !(cfg.LatencyJitter >= 0 && cfg.LatencyJitter <= 1) { // NaN fails too
		return nil, fmt.Errorf("server: latency jitter %v, want from 0 to 1", cfg.LatencyJitter)
	}
	if cfg.Latency != nil {
		if err := cfg.Latency.CheckTopology(top); err != nil {
			return nil, fmt.Errorf("server: %w", err)
		}
	}
	if err := checkBounds(cfg); err != nil {
		return nil, err
	}
	if _, _, err := net.SplitHostPort(cfg.ListenHost); err == nil || strings.ContainsAny(cfg.ListenHost, "[]/ ") {
		return nil, fmt.Errorf("server: listen host %q: want a host or an IP address alone (0.0.0.0, ::), each port is the configured one", cfg.ListenHost)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	// The recent lines, for Debug, whatever the logger keeps.
	logs := &logRing{}
	cfg.Logger = withRing(cfg.Logger, logs)
	s := &Server{
		logs: logs,
		cfg:  cfg, proto: proto, top: top, pm: pm, self: self, group: gc, me: me,
		log:     cfg.Logger.With("group", gc.Name, "replica", cfg.NodeID),
		waiters: newWaiters(),
		stop:    make(chan struct{}),

		moveCuts:  make(map[moveKey]uint64),
		moverStop: make(chan struct{}),
	}
	s.counts.payloadTo = make([]atomic.Uint64, top.Len())
	s.fwd = newForwarder(s)
	return s, nil
}

// openExecutor opens the replica's Pebble store and its executor.
func (s *Server) openExecutor() error {
	var err error
	s.store, err = kv.Open(kv.Options{Dir: filepath.Join(s.cfg.Dir, "kv"), ResultsMax: s.cfg.ResultsMax, NoSync: true, NoWAL: true, Logger: s.log})
	if err != nil {
		return fmt.Errorf("server: %w", err)
	}
	s.exec, err = executor.NewExecutor(executor.Config{
		Store: s.store, Partitions: s.pm, Topology: s.top, Self: s.self,
		Procedures: s.cfg.Procedures, OnReleased: s.waiters.done, Strict: s.cfg.Cluster.Strict(),
		StoredVoteBytesMax: s.cfg.StoredVoteBytesMax, ResultSessionsMax: s.cfg.ResultSessionsMax,
	})
	if err != nil {
		return errors.Join(fmt.Errorf("server: %w", err), s.store.Close())
	}
	return nil
}

// replicationConfig returns the configuration of the server's raft
// replica: cfg.Replication with the group, its members and peers, the
// emulated WAN, the executor, TLS and the hooks of the server filled in.
func (s *Server) replicationConfig() replication.Config {
	cfg := s.cfg
	rc := cfg.Replication
	rc.State.Protocol = s.proto.Name()
	rc.State.Topology = s.top
	rc.State.Self = s.self
	rc.State.Partitions = s.pm
	if cfg.SessionsMax != 0 {
		rc.State.SessionsMax = cfg.SessionsMax
	}
	if cfg.SessionTicks != 0 {
		rc.State.SessionTicks = cfg.SessionTicks
	}
	rc.ID = cfg.NodeID
	rc.Members = nil
	for _, r := range s.group.Replicas {
		rc.Members = append(rc.Members, replication.Member{ID: r.ID, RaftAddr: r.Raft, GRPCAddr: r.GRPC, PeerAddr: r.PeerAddr()})
	}
	rc.Peers = make(map[partition.GroupID][]string)
	for _, g := range s.startConfig().Groups {
		id, _ := s.top.Lookup(g.Name)
		if id == s.self {
			continue
		}
		for _, r := range g.Replicas {
			rc.Peers[id] = append(rc.Peers[id], r.PeerAddr())
		}
	}
	rc.WANDelays = wanDelays(s.top, cfg.Latency, s.self, cfg.LatencyMode)
	rc.WANJitter = cfg.LatencyJitter
	rc.Dir = filepath.Join(cfg.Dir, "raft")
	rc.Bootstrap = cfg.InitialClusterState == ClusterNew
	rc.Existing = cfg.InitialClusterState == ClusterExisting
	rc.Executor = s.exec
	rc.NoSync = cfg.NoSync
	rc.Logger = cfg.Logger
	rc.FrameFilter = cfg.FrameFilter
	rc.RaftCut = cfg.RaftCut
	rc.RaftListen = s.listenAddr(s.memberRaftAddr())
	// Every call to another group carries this replica's configuration
	// fingerprint, which the receiver compares with its own (DESIGN 13).
	creds := insecure.NewCredentials()
	if n := cfg.Node; n != nil {
		creds = credentials.NewTLS(certs.NodeConfig(n))
		rc.RaftTLS = certs.GroupConfig(n)
	}
	rc.PeerDialOptions = []grpc.DialOption{grpc.WithTransportCredentials(creds), grpc.WithChainUnaryInterceptor(s.sendFingerprint)}
	rc.AuthorizePeer = s.authorizePeer
	rc.Observe = s.observe
	return rc
}

// serve starts the replica's gRPC servers: the client API and health on
// the replica's gRPC address, the peer service between groups on its peer
// address (DESIGN 13: clients never reach it), each with its own TLS
// configuration, and bounds on what one connection may hold open.
func (s *Server) serve() error {
	opts := []grpc.ServerOption{
		// Calls run on long-lived workers, whose stacks have grown to what
		// a call needs (Pebble's reads are deep), rather than each on a
		// new goroutine that grows its stack by copying, call after call.
		// Calls beyond the workers still get a goroutine each.
		grpc.NumStreamWorkers(streamWorkers),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: keepaliveMinTime, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: keepaliveTime, Timeout: keepaliveTimeout}),
	}
	// Each port bounds its calls, their messages and windows, and the
	// request bytes its connections hold in flight (edge.go).
	apiCreds, peerCreds := insecure.NewCredentials(), insecure.NewCredentials()
	if n := s.cfg.Node; n != nil {
		apiCreds = credentials.NewTLS(certs.APIServerConfig(n))
		peerCreds = credentials.NewTLS(certs.NodeConfig(n))
	}
	apiEdge, peerEdge := edges(s.top.Len())
	apiEdge.Logger, peerEdge.Logger, peerEdge.Tap = s.log, s.log, s.tapPeer
	apiGuard, err := rpcflow.NewGuard(apiEdge)
	if err != nil {
		return fmt.Errorf("server: %w", err)
	}
	peerGuard, err := rpcflow.NewGuard(peerEdge)
	if err != nil {
		return fmt.Errorf("server: %w", err)
	}
	s.apiGuard.Store(apiGuard)
	s.peerGuard.Store(peerGuard)
	apiOpts := slices.Concat(opts, apiGuard.ServerOptions(apiCreds), []grpc.ServerOption{grpc.ChainUnaryInterceptor(s.intercept)})
	peerOpts := slices.Concat(opts, peerGuard.ServerOptions(peerCreds))
	api := s.newGRPC(apiOpts)
	apipb.RegisterKVServer(api, &service{s: s})
	healthpb.RegisterHealthServer(api, s.health)
	// Server reflection (v1 and v1alpha), so that grpcurl and other tools
	// call the API without its .proto (DESIGN 7); never on the peer port.
	reflection.Register(api)
	if err := s.listen(s.Addr(), api); err != nil {
		return err
	}
	if s.top.Len() < 2 {
		return nil
	}
	peer := s.newGRPC(peerOpts)
	if err := s.replica.RegisterPeer(peer); err != nil {
		return fmt.Errorf("server: %w", err)
	}
	healthpb.RegisterHealthServer(peer, s.health)
	return s.listen(s.PeerAddr(), peer)
}

// Bounds of the gRPC servers: streams (calls in flight) per connection of
// the client API (the peer service's are in edge.go), and the keepalive
// policy: a client may ping no more often than keepaliveMinTime
// (more often closes its connection), and the server pings an idle
// connection after keepaliveTime, closing it when no answer comes within
// keepaliveTimeout. streamWorkers is how many goroutines run the calls of
// a server, reused from call to call.
const (
	streamsMax       = 1024
	streamWorkers    = 256
	keepaliveMinTime = 5 * time.Second
	keepaliveTime    = time.Minute
	keepaliveTimeout = 20 * time.Second
)

// authorizePeer lets a call to the peer service deliver frames as group
// from only if the caller's node certificate names a replica of from (with
// TLS), and then only if the caller runs this replica's configuration: its
// fingerprint is this one's (DESIGN 13). A refusal for the certificate is
// logged each time; one for the fingerprint, answered FailedPrecondition
// naming both fingerprints, once per peer (the peer's transmitter retries
// every second or so until an operator fixes the configuration).
func (s *Server) authorizePeer(ctx context.Context, from partition.GroupID) error {
	name := s.top.Name(from)
	p, ok := grpcpeer.FromContext(ctx)
	if !ok {
		return errors.New("no peer")
	}
	// Without TLS a peer is its claimed group and host (its port changes
	// with each connection); with TLS, its certificate's node.
	who := name + "@" + p.Addr.String()
	if host, _, err := net.SplitHostPort(p.Addr.String()); err == nil {
		who = name + "@" + host
	}
	if s.cfg.Node != nil {
		info, ok := p.AuthInfo.(credentials.TLSInfo)
		if !ok {
			return errors.New("not a TLS connection")
		}
		id, err := certs.RequireGroup(info.State, name)
		if err != nil {
			s.peerRefusals.Add(1)
			s.log.Warn("peer frames refused", "claimed_group", name, "addr", p.Addr.String(), "err", err)
			return err
		}
		who = id.String()
	}
	theirs := "none"
	if v := metadata.ValueFromIncomingContext(ctx, fingerprintHeader); len(v) > 0 {
		theirs = v[0]
	}
	if theirs == s.identity.Fingerprint {
		return nil
	}
	s.fingerprintRefusals.Add(1)
	if s.refusalsLogged.first(who + " " + theirs) {
		s.log.Warn("peer refused: configuration fingerprints differ (logged once per peer)", "peer", who, "claimed_group", name, "addr", p.Addr.String(),
			"peer_fingerprint", theirs, "fingerprint", s.identity.Fingerprint)
	}
	return status.Errorf(codes.FailedPrecondition, "configuration fingerprint %s of the caller (group %s) differs from %s of replica %s/%s: the two run different cluster configurations",
		theirs, name, s.identity.Fingerprint, s.group.Name, s.cfg.NodeID)
}

// fingerprintHeader is the gRPC metadata key of the caller's configuration
// fingerprint on the calls between groups.
const fingerprintHeader = "flexkv-config-fingerprint"

// sendFingerprint adds this replica's configuration fingerprint to every
// call to another group's peer service.
func (s *Server) sendFingerprint(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	ctx = metadata.AppendToOutgoingContext(ctx, fingerprintHeader, s.identity.Fingerprint)
	return invoker(ctx, method, req, reply, cc, opts...)
}

// refusalLog remembers the peers whose refusal was logged, up to
// refusalLogMax of them; past that, refusals are counted, not logged.
type refusalLog struct {
	mu   sync.Mutex
	seen map[string]struct{}
}

const refusalLogMax = 1024

func (l *refusalLog) first(key string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.seen[key]; ok || len(l.seen) >= refusalLogMax {
		return false
	}
	if l.seen == nil {
		l.seen = make(map[string]struct{})
	}
	l.seen[key] = struct{}{}
	return true
}

// newGRPC returns a gRPC server that stopServing stops, served or not: its
// stream workers start with it.
func (s *Server) newGRPC(opts []grpc.ServerOption) *grpc.Server {
	g := grpc.NewServer(opts...)
	s.grpcs = append(s.grpcs, g)
	return g
}

// listenAddr is where the replica listens for its configured address addr
// when cfg.ListenHost is set: addr's port on that host; "" without
// ListenHost (the replica listens on addr).
func (s *Server) listenAddr(addr string) string {
	if s.cfg.ListenHost == "" {
		return ""
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr // validated with the configuration: not reached
	}
	return net.JoinHostPort(s.cfg.ListenHost, port)
}

// memberRaftAddr is the replica's raft address in the configuration.
func (s *Server) memberRaftAddr() string { return s.me.Raft }

// listen serves g, from newGRPC, on addr (or its port on cfg.ListenHost)
// until Close.
func (s *Server) listen(addr string, g *grpc.Server) error {
	if a := s.listenAddr(addr); a != "" {
		addr = a
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("server: %w", err)
	}
	s.serving.Add(1)
	go func() {
		defer s.serving.Done()
		_ = g.Serve(lis)
	}()
	return nil
}

// stopServing lets the calls in flight finish (a client's answer, a batch
// from another group, a read barrier) for a moment, raft still running,
// then cuts the rest.
func (s *Server) stopServing() {
	var drained sync.WaitGroup
	for _, g := range s.grpcs {
		drained.Add(1)
		go func() {
			defer drained.Done()
			done := make(chan struct{})
			go func() {
				g.GracefulStop()
				close(done)
			}()
			select {
			case <-done:
			case <-time.After(time.Second):
				g.Stop()
				<-done
			}
		}()
	}
	drained.Wait()
	s.serving.Wait()
}

// Group returns the name of the server's group.
func (s *Server) Group() string { return s.group.Name }

// Addr returns the server's gRPC address: the client API.
func (s *Server) Addr() string { return s.me.GRPC }

// PeerAddr returns the address of the server's peer service: other groups.
func (s *Server) PeerAddr() string { return s.me.PeerAddr() }

// PeerRefusals returns how many calls to the peer service were refused for
// claiming a group their certificate does not name.
func (s *Server) PeerRefusals() int64 { return s.peerRefusals.Load() }

// Forwarded returns how many requests this replica forwarded to another
// replica (DESIGN 7: any server answers any request).
func (s *Server) Forwarded() int64 { return s.forwarded.Load() }

// FingerprintRefusals returns how many calls to the peer service were
// refused because the caller's configuration fingerprint differs from this
// replica's (DESIGN 13).
func (s *Server) FingerprintRefusals() int64 { return s.fingerprintRefusals.Load() }

// Identity returns the replica's cluster identity (DESIGN 13).
func (s *Server) Identity() Identity { return s.identity }

// VotesRefused returns how many raft votes the replica refused because it
// joined its group (ClusterExisting) with an empty log.
func (s *Server) VotesRefused() int64 { return s.replica.VotesRefused() }

// SnapshotsRestored returns how many times this server's executor state was
// replaced by one from a raft snapshot.
func (s *Server) SnapshotsRestored() int64 { return s.replica.ExecutorRestores() }

// InvalidEntries returns how many log entries the replica skipped as
// malformed since it opened: none on a healthy cluster.
func (s *Server) InvalidEntries() int64 { return s.replica.InvalidEntries() }

// Describe returns one line on the server's state for a person debugging a
// cluster: raft's state and indexes, how far the protocol state and the
// executor got, and what the executor holds.
func (s *Server) Describe() string {
	rs := s.replica.RaftStatus()
	xs := s.exec.Stats()
	return fmt.Sprintf("%s/%s %s term %d log %d commit %d raft-applied %d state-applied %d applying %d executed-index %d queued %d votes %d leader %q",
		s.group.Name, s.cfg.NodeID, rs.Role, rs.Term, rs.LastIndex, rs.CommitIndex, rs.AppliedIndex, rs.StateApplied, rs.Applying,
		s.exec.AppliedIndex(), xs.Queued, xs.VotesStored, rs.Leader)
}

// ReloadCerts re-reads the replica's certificate, key and CA files now
// (`flexkv server` on SIGHUP; DESIGN 13): the handshakes that follow use
// them. On an error, logged and returned, it keeps what it had. The files
// are also re-read when they change, checked at handshakes.
func (s *Server) ReloadCerts() error {
	if s.cfg.Node == nil {
		return nil
	}
	if err := s.cfg.Node.Reload(); err != nil {
		s.log.Warn("certificates not reloaded: keeping those loaded before", "err", err)
		return fmt.Errorf("server: %w", err)
	}
	for _, x := range s.cfg.Node.Expiries() {
		s.log.Info("certificate loaded", "file", x.File, "not_after", x.NotAfter.UTC().Format(time.RFC3339))
	}
	return nil
}

// Snapshot makes the replica take a raft snapshot now
// (replication.Replica.Snapshot): for operators and tests.
func (s *Server) Snapshot() error { return s.replica.Snapshot() }

// IsLeader reports whether the server leads its group now.
func (s *Server) IsLeader() bool { return s.replica.IsLeader() }

// Quiet says that the server's whole cluster is about to stop (a local
// cluster closing): its raft's complaints about the peers that stop are
// logged at debug level (replication.Replica.Quiet).
func (s *Server) Quiet() { s.replica.Quiet() }

// Close stops the server gracefully: health reports NOT_SERVING, calls in
// flight get a moment to finish, raft stops, Pebble closes.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		close(s.moverStop)
		s.moverWG.Wait()
		var errs []error
		if s.metrics != nil {
			errs = append(errs, s.metrics.Close())
		}
		s.health.Shutdown()
		if s.http != nil {
			// Before the gRPC servers: its requests in flight are calls
			// of this replica's client API.
			errs = append(errs, s.http.close())
		}
		// The calls in flight drain first, while raft still runs, so that
		// a call about to be answered is; then the replica's waits still
		// open end.
		s.stopServing()
		errs = append(errs, s.fwd.close(), s.replica.Close())
		close(s.stop)
		s.closeErr = errors.Join(append(errs, s.store.Close())...)
	})
	return s.closeErr
}
