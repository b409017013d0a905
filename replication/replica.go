package replication

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/flexkv/flexkv/group"
	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/multicast/channel"
	"github.com/flexkv/flexkv/multicast/rawnode"
	"github.com/flexkv/flexkv/partition"
	"github.com/flexkv/flexkv/replication/raftstore"
	"github.com/flexkv/flexkv/replication/transport"
)

// Member is one replica of a group.
type Member struct {
	ID       string // raft server id, unique in its group
	RaftAddr string // host:port of its raft transport
	GRPCAddr string // host:port of its client API: the leader hint of NotLeaderError
	PeerAddr string // host:port of its service between groups: the leader hint other groups get
}

// Config configures a Replica.
type Config struct {
	State   group.Config
	ID      string   // this replica's Member.ID
	Members []Member // every replica of the group, this one included
	// Peers holds the addresses of every other group's replicas' peer
	// services (RegisterPeer).
	Peers map[partition.GroupID][]string
	Dir   string // data directory: raft log, raft snapshots
	// Bootstrap: on first start (no raft state in Dir), form the group from
	// Members. Give it to every member of a new group (or to one of them).
	Bootstrap bool
	// Existing: the replica joins a group that exists already (`flexkv
	// server --initial-cluster-state existing`, DESIGN 13). It bootstraps
	// nothing (Bootstrap is ignored), waits for the group's leader to send
	// it a snapshot or the log, and grants no vote while its log is empty
	// (voteGuard): a replica whose data was lost must not help elect a
	// leader that lacks committed entries.
	Existing bool
	// Executor runs the group's deliveries (group.Executor); the replica
	// snapshots and restores it with its raft snapshots.
	Executor group.Executor

	TickInterval      time.Duration // default TickIntervalDefault
	ElectionTimeout   time.Duration // default 300ms
	ApplyTimeout      time.Duration // how long a proposal may wait (default 5s)
	SnapshotThreshold uint64        // entries between raft snapshots (default 32768)
	TrailingLogs      uint64        // entries kept after a snapshot (default 10240)
	NoSync            bool          // raft log without fsync: tests only
	Logger            *slog.Logger  // default: discard
	// MembersInterval is how often the leader brings raft's configuration
	// to its epoch's members (members.go; default membersInterval).
	MembersInterval time.Duration
	// FS, when set, holds the raft log, the stable store and the raft
	// snapshots (raftstore.SnapshotStore) instead of the operating
	// system's file system: the power loss tests give a disk that crashes
	// (DESIGN 12). Nil in a server.
	FS vfs.FS

	// WANDelays emulates a wide-area network between the groups (DESIGN
	// 8): the one-way delay of every frame this group's leader sends to a
	// group listed (transport.TransmitterConfig.Delays). WANJitter spreads
	// each delay by up to that fraction, keeping FIFO order
	// (TransmitterConfig.Jitter). None: no delay.
	WANDelays map[partition.GroupID]time.Duration
	WANJitter float64

	// Fault injection, for tests and chaos runs. FrameFilter sees every
	// batch of frames the leader is about to transmit to a group and returns
	// what to transmit instead (fewer, duplicated, reordered). RaftCut,
	// when set, carries raft's traffic (on this member's RaftAddr) through
	// a switch that cuts it.
	FrameFilter func(to partition.GroupID, frames []channel.Frame) []channel.Frame
	RaftCut     *CutSwitch

	// PeerDialOptions configure the connections this group's leader opens
	// to the other groups' peer services (default: without TLS).
	PeerDialOptions []grpc.DialOption
	// AuthorizePeer, when set, decides whether the caller of the peer
	// service may speak for the group its frames name
	// (transport.ServerConfig.Authorize).
	AuthorizePeer func(ctx context.Context, from partition.GroupID) error
	// RaftTLS, when set, runs raft's connections inside the group over TLS
	// with this configuration, to listen and to dial (the dialled host is
	// the server name): it must authenticate both ends and accept only the
	// group's own replicas (DESIGN 13).
	RaftTLS *tls.Config
	// RaftListen, when set, is the host:port raft listens on, in place of
	// this member's RaftAddr (0.0.0.0:7100, say, where the address's host
	// resolves only once the replica runs, as a Kubernetes pod's name);
	// the group still dials and knows the member by its RaftAddr.
	RaftListen string
	// Observe sees what every applied entry produced (deliveries, the
	// core's and the executor's sends), with whether this replica led when
	// it applied it: for delivery logs and metrics. It runs with the state
	// locked, in log order: it must be quick and must not call the replica.
	Observe func(out rawnode.Output, leader bool)

	// wrapRaft, when set (tests), wraps raft's transport under the
	// replica's own wrappers: a test holds or drops what raft sends there.
	wrapRaft func(raft.Transport) raft.Transport
}

func (c *Config) fill() error {
	if err := c.State.Fill(); err != nil {
		return err
	}
	if c.Executor == nil {
		return errors.New("replication: no executor")
	}
	if c.Dir == "" {
		return errors.New("replication: no data directory")
	}
	if _, ok := c.member(c.ID); !ok {
		return fmt.Errorf("replication: replica %q is not a member of its group", c.ID)
	}
	if c.TickInterval <= 0 {
		c.TickInterval = TickIntervalDefault
	}
	if c.ElectionTimeout <= 0 {
		c.ElectionTimeout = 300 * time.Millisecond
	}
	if c.ApplyTimeout <= 0 {
		c.ApplyTimeout = 5 * time.Second
	}
	if c.MembersInterval <= 0 {
		c.MembersInterval = membersInterval
	}
	if c.SnapshotThreshold == 0 {
		// A snapshot writes the whole state (every key, every kept
		// result): taken often, it costs a large share of the CPU of a
		// write-heavy group. The log it truncates is on disk, and a
		// restart replays at most this many entries past the snapshot.
		c.SnapshotThreshold = 32768
	}
	if c.TrailingLogs == 0 {
		c.TrailingLogs = 10240
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return nil
}

func (c *Config) member(id string) (Member, bool) {
	for _, m := range c.Members {
		if m.ID == id {
			return m, true
		}
	}
	return Member{}, false
}

// NotLeaderError answers a request that reached a follower, or a leader
// that lost its leadership while proposing it.
type NotLeaderError struct {
	Leader string // gRPC address of the leader, if known
	// MayHaveRun is set when the request was proposed before the leadership
	// was lost: its entry may still commit under the next leader.
	MayHaveRun bool
}

func (e *NotLeaderError) Error() string {
	if e.Leader == "" {
		return "replication: not the leader (leader unknown)"
	}
	return "replication: not the leader; leader at " + e.Leader
}

// Replica is one replica of a group.
type Replica struct {
	cfg   Config
	self  Member
	log   *slog.Logger
	fsm   *fsm
	store *raftstore.Store
	trans *raft.NetworkTransport
	guard *voteGuard // with Config.Existing: raft's transport
	// progress: raft's transport as raft sees it (over guard, if any);
	// what each follower last answered the leader.
	progress *peerProgress
	raft     *raft.Raft
	tx       *transport.Transmitter

	// started is set once raft is running: the FSM may apply (and call
	// transmit) before NewRaft returns.
	started atomic.Bool
	closing atomic.Bool // set by the first shutdown
	quiet   atomic.Bool // raft's errors and warnings logged at debug level (Quiet)
	// termCommitted is the last term in which this replica saw, as
	// leader, an entry of that term committed (ReadBarrier).
	termCommitted atomic.Uint64
	// reads batches the read barriers (readindex.go).
	reads readRounds
	// deposed, while this replica leads (as leaderLoop learns it from
	// raft), is a channel closed when it stops; nil otherwise. A read
	// round that waits ends with it.
	deposedMu sync.Mutex
	deposed   chan struct{}
	stop      chan struct{}
	wg        sync.WaitGroup
	// proposals queues the client requests for proposeLoop.
	proposals chan *proposal
	// members are the group's members of the latest epoch this replica
	// applied (members.go): the leader hints name them.
	members atomic.Pointer[[]Member]
}

// Open starts a replica: it reopens its raft state from cfg.Dir if there is
// some (restoring the latest snapshot and replaying the log after it), or
// bootstraps the group.
func Open(cfg Config) (*Replica, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	self, _ := cfg.member(cfg.ID)
	r := &Replica{cfg: cfg, self: self, log: cfg.Logger.With("group", cfg.State.Topology.Name(cfg.State.Self), "replica", cfg.ID),
		stop: make(chan struct{}), proposals: make(chan *proposal, proposalsQueued)}
	members := slices.Clone(cfg.Members)
	r.members.Store(&members)
	var err error
	fail := func(e error) (*Replica, error) {
		return nil, errors.Join(e, r.shutdown())
	}
	r.fsm, err = newFSM(cfg.State, cfg.Executor, r.transmit)
	if err != nil {
		return nil, err
	}
	if cfg.FS == nil {
		if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
			return nil, fmt.Errorf("replication: %w", err)
		}
	}
	r.store, err = raftstore.Open(raftstore.Options{Dir: filepath.Join(cfg.Dir, "raft"), NoSync: cfg.NoSync, FS: cfg.FS})
	if err != nil {
		return nil, err
	}
	hlog := newRaftLogger(r.log, &r.quiet)
	snaps, err := openSnapshots(cfg, hlog)
	if err != nil {
		return fail(err)
	}
	if r.trans, err = openRaftTransport(self.RaftAddr, cfg, hlog); err != nil {
		return fail(err)
	}
	rc := raftConfig(cfg, hlog)
	var trans raft.Transport = r.trans
	if cfg.Existing {
		r.guard = newVoteGuard(r.trans, rc.LocalID, func() bool { return r.logEmpty(snaps) })
		trans = r.guard
	}
	if cfg.wrapRaft != nil {
		trans = cfg.wrapRaft(trans)
	}
	r.progress = newPeerProgress(trans)
	trans = r.progress
	if cfg.Bootstrap && !cfg.Existing {
		if err := r.bootstrap(rc, snaps); err != nil {
			return fail(err)
		}
	}
	// The transmitter exists before raft starts applying entries.
	if r.tx, err = newTransmitter(cfg); err != nil {
		return fail(err)
	}
	// Raft reads back every entry it stored: the leader to send it to each
	// follower, every replica to apply it. The cache answers those reads
	// for the latest entries from memory instead of Pebble.
	logs, err := raft.NewLogCache(logCacheEntries, r.store)
	if err != nil {
		return fail(fmt.Errorf("replication: %w", err))
	}
	r.raft, err = raft.NewRaft(rc, r.fsm, logs, r.store, snaps, trans)
	if err != nil {
		return fail(fmt.Errorf("replication: %w", err))
	}
	r.started.Store(true)
	r.wg.Add(4)
	go r.leaderLoop()
	go r.tickLoop()
	go r.proposeLoop()
	go r.membersLoop()
	return r, nil
}

// openSnapshots opens the store of the replica's raft snapshots: raft's
// own in a directory of the operating system's, or one on cfg.FS.
func openSnapshots(cfg Config, hlog hclog.Logger) (raft.SnapshotStore, error) {
	dir := filepath.Join(cfg.Dir, "snapshots")
	if cfg.FS != nil {
		return raftstore.NewSnapshotStore(cfg.FS, dir, snapshotsRetained)
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(dir, snapshotsRetained, hlog)
	if err != nil {
		return nil, fmt.Errorf("replication: %w", err)
	}
	return snaps, nil
}

// snapshotsRetained is how many raft snapshots a replica keeps: the latest,
// and the one before should the latest prove unreadable.
const snapshotsRetained = 2

// openRaftTransport opens raft's transport on addr: plain TCP, or a stream
// layer when raft's traffic runs over TLS or through a cut switch.
func openRaftTransport(addr string, cfg Config, hlog hclog.Logger) (*raft.NetworkTransport, error) {
	if cfg.RaftCut != nil || cfg.RaftTLS != nil || cfg.RaftListen != "" {
		bind := addr
		if cfg.RaftListen != "" {
			bind = cfg.RaftListen
		}
		layer, err := listenStream(bind, cfg.RaftCut, cfg.RaftTLS)
		if err != nil {
			return nil, fmt.Errorf("replication: raft transport: %w", err)
		}
		if cfg.RaftListen != "" {
			layer.advertise = advertisedAddr(addr)
		}
		return raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{Stream: layer, MaxPool: 3, Timeout: 2 * time.Second, Logger: hlog}), nil
	}
	t, err := raft.NewTCPTransportWithLogger(addr, nil, 3, 2*time.Second, hlog)
	if err != nil {
		return nil, fmt.Errorf("replication: raft transport: %w", err)
	}
	return t, nil
}

// raftConfig returns the configuration of the replica's raft instance.
func raftConfig(cfg Config, hlog hclog.Logger) *raft.Config {
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(cfg.ID)
	rc.HeartbeatTimeout = cfg.ElectionTimeout
	rc.ElectionTimeout = cfg.ElectionTimeout
	rc.LeaderLeaseTimeout = cfg.ElectionTimeout / 2
	rc.CommitTimeout = 5 * time.Millisecond
	rc.SnapshotThreshold = cfg.SnapshotThreshold
	rc.SnapshotInterval = 2 * time.Second
	rc.TrailingLogs = cfg.TrailingLogs
	// Group commit: the leader gathers every proposal ready (up to
	// MaxAppendEntries) into one log write and fsync. Not BatchApplyCh: it
	// buffers proposals where a shutdown never answers them, and a caller
	// waiting on such a future (the tick loop, a client) would wait forever.
	rc.MaxAppendEntries = 512
	rc.Logger = hlog
	return rc
}

// bootstrap forms the group from the configured members, unless the
// replica has raft state already.
func (r *Replica) bootstrap(rc *raft.Config, snaps raft.SnapshotStore) error {
	has, err := raft.HasExistingState(r.store, r.store, snaps)
	if err != nil {
		return fmt.Errorf("replication: %w", err)
	}
	if has {
		return nil
	}
	var servers []raft.Server
	for _, m := range r.cfg.Members {
		servers = append(servers, raft.Server{ID: raft.ServerID(m.ID), Address: raft.ServerAddress(m.RaftAddr)})
	}
	if err := raft.BootstrapCluster(rc, r.store, r.store, snaps, r.trans, raft.Configuration{Servers: servers}); err != nil {
		return fmt.Errorf("replication: bootstrap: %w", err)
	}
	return nil
}

// newTransmitter returns the transmitter of the frames this group's leader
// sends to the other groups.
func newTransmitter(cfg Config) (*transport.Transmitter, error) {
	dialOptions := cfg.PeerDialOptions
	if dialOptions == nil {
		dialOptions = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	return transport.NewTransmitter(transport.TransmitterConfig{
		Self: cfg.State.Self, Peers: cfg.Peers,
		BatchFrames: group.InboundFramesMax, BatchBytes: group.InboundBytesMax,
		QueueFrames: 4 * group.InboundFramesMax, QueueBytes: 4 * group.InboundBytesMax,
		RPCTimeout: cfg.ApplyTimeout,
		BackoffMin: 20 * time.Millisecond, BackoffMax: time.Second,
		DialOptions: dialOptions,
		Delays:      cfg.WANDelays, Jitter: cfg.WANJitter,
	})
}

// TickIntervalDefault is a replica's tick interval unless configured.
const TickIntervalDefault = 20 * time.Millisecond

// logCacheEntries is how many of the latest log entries raft's reads are
// answered from memory: several rounds of MaxAppendEntries, what followers
// and the state machine lag behind the last entry stored at most in a
// healthy group.
const logCacheEntries = 4096

// logEmpty reports whether the replica's raft log and snapshots hold
// nothing; an error reading them counts as empty (the guard keeps
// refusing votes rather than grant one it cannot justify).
func (r *Replica) logEmpty(snaps raft.SnapshotStore) bool {
	last, err := r.store.LastIndex()
	if err != nil || last > 0 {
		return err != nil
	}
	list, err := snaps.List()
	return err != nil || len(list) == 0
}

// VotesRefused returns how many vote and pre-vote requests the replica
// refused because it joined an existing group with an empty log
// (Config.Existing): 0 otherwise.
func (r *Replica) VotesRefused() int64 {
	if r.guard == nil {
		return 0
	}
	return r.guard.refused.Load()
}

// RegisterPeer registers on s the service that the other groups' leaders
// send their frames to (DESIGN 4), for the caller to serve on this
// replica's peer address. A group alone in its cluster has no peers and
// registers nothing. The caller stops serving before Close, so that the
// batches in flight reach raft while it still runs.
func (r *Replica) RegisterPeer(s grpc.ServiceRegistrar) error {
	n := r.cfg.State.Topology.Len()
	if n < 2 {
		return nil
	}
	scfg := transport.ServerConfig{Self: r.cfg.State.Self, Groups: n, FramesMax: group.InboundFramesMax, BytesMax: group.InboundBytesMax, Authorize: r.cfg.AuthorizePeer}
	if err := transport.Register(s, scfg, r); err != nil {
		return fmt.Errorf("replication: %w", err)
	}
	return nil
}

// transmit hands the frames an applied entry produced to the transmitter,
// when this replica leads (called by the FSM, with the state locked).
func (r *Replica) transmit(out rawnode.Output) {
	leader := r.started.Load() && r.raft.State() == raft.Leader
	if r.cfg.Observe != nil {
		r.cfg.Observe(out, leader)
	}
	if len(out.Frames) == 0 || !leader {
		return
	}
	r.sendFrames(out.Frames)
}

func (r *Replica) sendFrames(frames []channel.Frame) {
	for len(frames) > 0 {
		to := frames[0].To
		n := 1
		for n < len(frames) && frames[n].To == to {
			n++
		}
		batch := frames[:n]
		if r.cfg.FrameFilter != nil {
			batch = r.cfg.FrameFilter(to, batch)
		}
		if err := r.tx.Send(to, batch); err != nil {
			r.log.Warn("transmit", "to", to, "err", err)
		}
		frames = frames[n:]
	}
}

// leaderLoop resends every unacknowledged frame when this replica becomes
// leader, once every entry of earlier terms is applied (DESIGN 4.2: a new
// leader resends from the receivers' positions; the receivers drop what
// they have).
func (r *Replica) leaderLoop() {
	defer r.wg.Done()
	for {
		select {
		case <-r.stop:
			return
		case leader := <-r.raft.LeaderCh():
			r.setLeading(leader)
			if !leader {
				r.tx.Reset()
				continue
			}
			if !r.appliedUpTo(r.raft.LastIndex()) {
				continue
			}
			r.log.Info("leader")
			r.fsm.withState(func(s *group.State) {
				for h := range r.cfg.State.Topology.Len() {
					to := partition.GroupID(h)
					if to == r.cfg.State.Self {
						continue
					}
					frames := append(s.Node().Unacked(to), s.Node().AckFrame(to))
					r.sendFrames(frames)
				}
			})
		}
	}
}

// setLeading records whether this replica leads (deposed).
func (r *Replica) setLeading(leading bool) {
	r.deposedMu.Lock()
	defer r.deposedMu.Unlock()
	switch {
	case leading && r.deposed == nil:
		r.deposed = make(chan struct{})
	case !leading && r.deposed != nil:
		close(r.deposed)
		r.deposed = nil
	}
}

// deposedCh returns a channel closed once this replica stops leading, if
// it leads now as leaderLoop last learned; nil if not, or not yet.
func (r *Replica) deposedCh() <-chan struct{} {
	r.deposedMu.Lock()
	defer r.deposedMu.Unlock()
	return r.deposed
}

// tickLoop proposes a tick every TickInterval while this replica leads;
// protocol timeouts count ticks, so every replica agrees on them.
func (r *Replica) tickLoop() {
	defer r.wg.Done()
	t := time.NewTicker(r.cfg.TickInterval)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-t.C:
			// Apply returns once the leader took the tick (the apply channel
			// is unbuffered: back-pressure); its commit is not awaited, as
			// raft never answers a future whose entry it dropped at
			// shutdown.
			if r.raft.State() != raft.Leader {
				continue
			}
			// An idle group stops ticking once a tick would change
			// nothing (no resend, ack or nack due; no timer in its core):
			// an idle cluster then writes no log entries but rank 0's.
			var quiet bool
			r.fsm.withState(func(s *group.State) { quiet = s.Quiet(quietAfterTicks) })
			if !quiet {
				r.raft.Apply(group.EncodeTick(), r.cfg.ApplyTimeout)
			}
		}
	}
}

// quietAfterTicks is how many ticks a group applies after its last other
// entry before it may stop ticking.
const quietAfterTicks = 5

// appliedUpTo waits until the FSM applied index, or the replica stops or
// loses leadership. Polling, not a raft Barrier future: raft drops the futures
// of committed entries still queued for the FSM at shutdown, and a wait on one
// would keep Close from returning.
func (r *Replica) appliedUpTo(index uint64) bool {
	t := time.NewTicker(2 * time.Millisecond)
	defer t.Stop()
	for r.raft.AppliedIndex() < index {
		select {
		case <-r.stop:
			return false
		case <-t.C:
			if r.raft.State() != raft.Leader {
				return false
			}
		}
	}
	return true
}

// await waits for f, the replica's stop or ctx. A future that raft dropped at
// shutdown is never answered; the goroutine waiting on it then ends with the
// process, but the caller returns.
func (r *Replica) await(ctx context.Context, f raft.Future) error {
	select {
	case err := <-futureErr(f):
		return err
	case <-r.stop:
		return raft.ErrRaftShutdown
	case <-ctx.Done():
		return ctx.Err()
	}
}

// futureErr returns a channel that gets f's error once raft answers it.
// Its waiter stays blocked if raft never does: raft drops the futures still
// queued for its main loop when it shuts down (testcluster.RaftFutureLeaks).
func futureErr(f raft.Future) <-chan error {
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	return done
}

// peerHint returns the peer address of the leader, if known: the hint
// another group's transmitter follows.
func (r *Replica) peerHint() string {
	_, id := r.raft.LeaderWithID()
	if m, ok := r.member(string(id)); ok {
		return m.PeerAddr
	}
	return ""
}

// leaderHint returns the gRPC address of the leader, if known.
func (r *Replica) leaderHint() string {
	_, id := r.raft.LeaderWithID()
	if m, ok := r.member(string(id)); ok {
		return m.GRPCAddr
	}
	return ""
}

// ReadBarrier returns once this replica's state holds every entry committed
// before the call, having confirmed that it still leads: after it, a read
// of the state is linearizable (the raft paper's read index, §6.4, and
// DESIGN 5). It costs a heartbeat round, not a log write, and the calls
// waiting at one moment share one round (readindex.go). On a follower it
// returns a *NotLeaderError.
//
// A barrier waits at most ApplyTimeout, whatever ctx allows: past that it
// returns ErrReadTimeout, so that a client tries another replica rather
// than hang on one that cannot confirm its leadership (cut off from its
// group, say, before it notices).
func (r *Replica) ReadBarrier(ctx context.Context) error {
	if r.raft.State() != raft.Leader {
		return &NotLeaderError{Leader: r.leaderHint()}
	}
	rd := r.reads.join(r.progress.calls.Load(), r.runReadRounds)
	select {
	case <-rd.done:
		return rd.err
	case <-r.stop:
		return raft.ErrRaftShutdown
	case <-ctx.Done():
		return ctx.Err()
	}
}

// barrierRound confirms leadership and waits for the state, once, for
// every read of a round (readindex.go), within ApplyTimeout.
//
// The steps, and why each: the term is read first, and leadership must be
// confirmed in that same term afterwards, so that the commit index read in
// between is the leader's own (a replica deposed and re-elected meanwhile
// could have read a follower's lagging one). A leader knows the commit index
// only once an entry of its own term is committed (§5.4.2); until then it
// commits a barrier entry through the log instead. Leadership is confirmed
// by a majority's answers to calls made after the round's reads were
// invoked (confirmLeader), not by raft's VerifyLeader alone. The state is caught up
// when it has applied the last command at or below the commit index: the
// state machine sees commands only, not raft's no-op and barrier entries.
func (r *Replica) barrierRound(calls uint64) error {
	bctx, cancel := context.WithTimeout(context.Background(), r.cfg.ApplyTimeout)
	defer cancel()
	err := r.readBarrier(bctx, calls)
	// Only the round's own deadline (or raft's, queueing the barrier
	// entry): a NotLeaderError (with its hint) or a shutdown stays what it
	// is.
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, raft.ErrEnqueueTimeout) {
		rs := r.RaftStatus()
		r.log.Warn("read barrier timed out", "after", r.cfg.ApplyTimeout, "role", rs.Role, "term", rs.Term,
			"commit", rs.CommitIndex, "applied", rs.StateApplied, "applying", rs.Applying)
		return fmt.Errorf("%w (after %s)", ErrReadTimeout, r.cfg.ApplyTimeout)
	}
	return err
}

// ErrReadTimeout is the error of a read barrier that did not complete
// within ApplyTimeout.
var ErrReadTimeout = errors.New("replication: read barrier timed out: leadership not confirmed or state not caught up")

// readBarrier is ReadBarrier without its bound of ApplyTimeout, for reads
// invoked before the leader made calls numbered above calls.
func (r *Replica) readBarrier(ctx context.Context, calls uint64) error {
	term := r.raft.CurrentTerm()
	if r.raft.State() != raft.Leader {
		return &NotLeaderError{Leader: r.leaderHint()}
	}
	index := r.raft.CommitIndex()
	if r.termCommitted.Load() != term {
		var l raft.Log
		if err := r.store.GetLog(index, &l); err != nil || l.Term != term {
			// A barrier returns once the state machine applied every
			// entry before it: the read may go ahead.
			return r.leaderErr(r.await(ctx, r.raft.Barrier(r.cfg.ApplyTimeout)))
		}
		r.termCommitted.Store(term)
	}
	if err := r.confirmLeader(ctx, term, calls); err != nil {
		return err
	}
	if r.raft.CurrentTerm() != term {
		return &NotLeaderError{Leader: r.leaderHint()}
	}
	target, ok := r.lastCommandAtOrBelow(index)
	if !ok {
		return r.leaderErr(r.await(ctx, r.raft.Barrier(r.cfg.ApplyTimeout)))
	}
	return r.WaitApplied(ctx, target)
}

// confirmLeader returns once a majority of the group's voters (the leader
// with them, if it votes) answered in term to calls the leader numbered
// above calls (peerProgress), which it made after the round's reads were
// invoked: no other leader had been elected by then. VerifyLeader makes
// raft send a heartbeat to every follower at once, and tells when the
// replica no longer leads; its success alone does not do, for it may count
// answers to calls made before (the stale answers that design 6.5
// describes): the round then waits for the answers to the heartbeats it
// sent, or for leaderLoop to learn that the replica stepped down. Appends
// that carry entries confirm too, so that under writes a round may end
// before its heartbeats answer.
func (r *Replica) confirmLeader(ctx context.Context, term, calls uint64) error {
	deposed := r.deposedCh() // nil until leaderLoop learns it leads: then raft's answer alone tells
	voters, need := votersBesides(r.raft.GetConfiguration().Configuration(), raft.ServerID(r.cfg.ID))
	w := r.progress.watch(term, calls, voters, need)
	defer r.progress.unwatch(w)
	if r.raft.CurrentTerm() != term {
		// Deposed and elected again since the term was read: no answer
		// in that term will come.
		return &NotLeaderError{Leader: r.leaderHint()}
	}
	verified := futureErr(r.raft.VerifyLeader())
	for {
		select {
		case <-w.done:
			return nil
		case err := <-verified:
			if err != nil {
				return r.leaderErr(err)
			}
			select {
			case <-w.done: // the answers raft counted were fresh
				return nil
			default:
			}
			// Raft counted answers that may be stale (or a non-voter's:
			// it counts every follower's).
			r.reads.early.Add(1)
			verified = nil
		case <-deposed:
			return &NotLeaderError{Leader: r.leaderHint()}
		case <-r.stop:
			return raft.ErrRaftShutdown
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// votersBesides returns the voters of configuration c other than self,
// and how many of them make a majority of c's voters with self's vote, if
// it has one.
func votersBesides(c raft.Configuration, self raft.ServerID) (voters []raft.ServerID, need int) {
	all, votes := 0, 0
	for _, s := range c.Servers {
		if s.Suffrage != raft.Voter {
			continue
		}
		all++
		if s.ID == self {
			votes = 1
			continue
		}
		voters = append(voters, s.ID)
	}
	return voters, all/2 + 1 - votes
}

// lastCommandAtOrBelow returns the index of the last command entry at or
// below index, which the state machine's applied index reaches; 0 when the
// entries are gone into a snapshot (which the state holds). It looks back a
// few entries at most (runs of raft's own entries are short) and reports
// false past that.
func (r *Replica) lastCommandAtOrBelow(index uint64) (uint64, bool) {
	var l raft.Log
	for i := index; i > 0 && index-i < 64; i-- {
		if err := r.store.GetLog(i, &l); err != nil {
			return 0, true
		}
		if l.Type == raft.LogCommand {
			return i, true
		}
	}
	return 0, index < 64
}

// leaderErr turns raft's leadership errors into a *NotLeaderError.
func (r *Replica) leaderErr(err error) error {
	if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) || errors.Is(err, raft.ErrLeadershipTransferInProgress) {
		return &NotLeaderError{Leader: r.leaderHint()}
	}
	if err != nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("replication: %w", err)
	}
	return err
}

// InvalidEntries returns how many log entries this replica's state skipped
// as malformed since it opened (see State.Apply).
func (r *Replica) InvalidEntries() int64 { return r.fsm.invalid.Load() }

// ExecutorRestores returns how many times the executor's state was replaced
// by one from a raft snapshot since the replica opened: a replica that fell
// behind its group's log, or lost its data.
func (r *Replica) ExecutorRestores() int64 { return r.fsm.execRestores.Load() }

// Leader returns the gRPC address of the group's leader, if known.
func (r *Replica) Leader() string {
	if r.IsLeader() {
		return r.self.GRPCAddr
	}
	return r.leaderHint()
}

// IsLeader reports whether this replica leads its group now.
func (r *Replica) IsLeader() bool { return r.raft.State() == raft.Leader }

// Snapshot takes a raft snapshot now, as raft does every
// SnapshotThreshold entries: the log before it (but TrailingLogs entries)
// is dropped, and a follower that needs those entries catches up from the
// snapshot instead. For operators and tests.
func (r *Replica) Snapshot() error {
	if err := r.raft.Snapshot().Error(); err != nil {
		return fmt.Errorf("replication: snapshot: %w", err)
	}
	return nil
}

// Role is a replica's place in its raft group.
type Role uint8

// The roles of raft.
const (
	RoleFollower Role = iota
	RoleCandidate
	RoleLeader
	RoleShutdown
)

// Roles lists every role, for metrics that export one series a role.
var Roles = [...]Role{RoleFollower, RoleCandidate, RoleLeader, RoleShutdown}

var roleNames = [...]string{"follower", "candidate", "leader", "shutdown"}

func (r Role) String() string {
	if int(r) < len(roleNames) {
		return roleNames[r]
	}
	return fmt.Sprintf("role(%d)", uint8(r))
}

func roleOf(s raft.RaftState) Role {
	switch s {
	case raft.Follower:
		return RoleFollower
	case raft.Candidate:
		return RoleCandidate
	case raft.Leader:
		return RoleLeader
	default:
		return RoleShutdown
	}
}

// ErrShutdown is the error of a call on a replica that is shutting down.
var ErrShutdown = raft.ErrRaftShutdown

// RaftStatus is what a replica's raft reports, for monitoring.
type RaftStatus struct {
	Role         Role
	Term         uint64
	LastIndex    uint64 // last entry in the log
	CommitIndex  uint64
	AppliedIndex uint64 // last entry handed to the state machine
	// StateApplied is the last command entry the protocol state applied,
	// Applying the one it is applying now (0: none).
	StateApplied, Applying uint64
	Leader                 string // gRPC address of the leader, if known
}

// RaftLogWALBytes returns the bytes written to the raft log's write-ahead
// log since the replica started: the replica's one WAL, as its
// executor's store keeps none (DESIGN 6.4).
func (r *Replica) RaftLogWALBytes() uint64 { return r.store.WALBytesWritten() }

// RaftStatus returns the replica's raft state and indexes.
func (r *Replica) RaftStatus() RaftStatus {
	st := RaftStatus{
		Role: roleOf(r.raft.State()), Term: r.raft.CurrentTerm(),
		LastIndex: r.raft.LastIndex(), CommitIndex: r.raft.CommitIndex(), AppliedIndex: r.raft.AppliedIndex(),
		Leader: r.Leader(),
	}
	st.StateApplied, st.Applying = r.fsm.applied()
	return st
}

// Multicast proposes a client request for m at this group, its entry group,
// and waits until it is applied. It returns nil once the group accepted it
// (it will be delivered at every destination), a *NotLeaderError on a
// follower, or why the group refused it (multicast.ErrBusy,
// multicast.ErrNotEntry, group.ErrDuplicate, ...).
//
// epoch is the epoch the client routed m with (DESIGN 14); 0 means this
// replica's current epoch (Epoch). The group refuses a request of an epoch
// it ended (rawnode.ErrEpochChanged).
func (r *Replica) Multicast(ctx context.Context, m multicast.Message, epoch uint64) error {
	return r.MulticastFrom(ctx, m, epoch, partition.NoGroup)
}

// MulticastFrom is Multicast for a client whose home group is home
// (partition.NoGroup: unknown), which the group counts with m's
// destinations (group.State.DestinationCounts).
func (r *Replica) MulticastFrom(ctx context.Context, m multicast.Message, epoch uint64, home partition.GroupID) error {
	if err := multicast.ValidateRequest(r.cfg.State.Topology, m); err != nil {
		return err
	}
	if home != partition.NoGroup && !r.cfg.State.Topology.Valid(home) {
		return fmt.Errorf("%w: replication: home group %d of %d", multicast.ErrInvalid, home, r.cfg.State.Topology.Len())
	}
	if m.ID.Reserved() {
		return fmt.Errorf("%w: replication: client id %d is reserved", multicast.ErrInvalid, m.ID.Client)
	}
	if epoch == 0 {
		epoch = r.Epoch()
	}
	if r.raft.State() != raft.Leader {
		return &NotLeaderError{Leader: r.leaderHint()}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	p := &proposal{m: m, epoch: epoch, home: home, done: make(chan proposalResult, 1)}
	select {
	case r.proposals <- p:
	case <-r.stop:
		return raft.ErrRaftShutdown
	case <-ctx.Done():
		return ctx.Err()
	}
	var res proposalResult
	select {
	case res = <-p.done:
	case <-r.stop:
		return raft.ErrRaftShutdown
	case <-ctx.Done():
		return ctx.Err()
	}
	if err := res.raftErr; err != nil {
		if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) || errors.Is(err, raft.ErrLeadershipTransferInProgress) {
			return &NotLeaderError{Leader: r.leaderHint()}
		}
		return fmt.Errorf("replication: %w", err)
	}
	return res.result
}

// proposal is a client request waiting for proposeLoop to propose it.
type proposal struct {
	m     multicast.Message
	epoch uint64              // the epoch the client routed m with
	home  partition.GroupID   // the client's home group, or NoGroup
	done  chan proposalResult // buffered: the answer never waits
}

// proposalResult is the outcome of a proposal: raft's error, if the entry
// was not committed (or its fate is unknown), else the group's answer.
type proposalResult struct {
	raftErr, result error
}

// proposalsQueued bounds the requests waiting to be proposed; a caller
// past it waits.
const proposalsQueued = 4 * group.RequestsMax

// proposeLoop proposes the client requests queued by Multicast, as many
// as are waiting in one entry (group.EncodeRequests, within its bounds):
// while raft's leader writes and replicates an entry, the requests that
// arrive meanwhile queue up, and take one log entry, one write of the log
// at each replica and one execution, rather than one each.
func (r *Replica) proposeLoop() {
	defer r.wg.Done()
	var next *proposal // taken from the queue, for the next entry
	for {
		batch := make([]*proposal, 0, 8)
		if next == nil {
			select {
			case <-r.stop:
				return
			case next = <-r.proposals:
			}
		}
		batch = append(batch, next)
		size := encodedMax(next.m)
		next = nil
	gather:
		for len(batch) < group.RequestsMax {
			select {
			case p := <-r.proposals:
				// One entry holds requests of one epoch.
				if n := encodedMax(p.m); size+n > group.RequestsBytesMax || p.epoch != batch[0].epoch {
					next = p
					break gather
				} else {
					size += n
				}
				batch = append(batch, p)
			default:
				break gather
			}
		}
		ms := make([]multicast.Message, len(batch))
		homes := make([]partition.GroupID, len(batch))
		for i, p := range batch {
			ms[i], homes[i] = p.m, p.home
		}
		data := group.EncodeRequestsFrom(batch[0].epoch, ms, homes)
		// Apply returns once raft's leader took the entry; the answer
		// comes from another goroutine, so that the next entry gathers
		// meanwhile.
		f := r.raft.Apply(data, r.cfg.ApplyTimeout)
		go answer(f, batch)
	}
}

// encodedMax bounds the bytes of m in a log entry: its id, destinations, home
// and payload length as varints, and its payload.
func encodedMax(m multicast.Message) int { return 5*binary.MaxVarintLen64 + len(m.Payload) }

// answer hands each proposal of batch its outcome, once raft answers f. A
// future that raft dropped at shutdown is never answered: the callers
// return on the replica's stop, and this goroutine ends with the process.
func answer(f raft.ApplyFuture, batch []*proposal) {
	if err := f.Error(); err != nil {
		for _, p := range batch {
			p.done <- proposalResult{raftErr: err}
		}
		return
	}
	resp := f.Response()
	errs, ok := resp.(group.RequestErrors)
	if !ok || len(errs) != len(batch) {
		// The entry was skipped whole (malformed: it cannot be, as
		// encoded here), with one error for all.
		err, _ := resp.(error)
		if err == nil {
			err = fmt.Errorf("replication: %d requests in one entry answered %T", len(batch), resp)
		}
		for _, p := range batch {
			p.done <- proposalResult{result: err}
		}
		return
	}
	for i, p := range batch {
		p.done <- proposalResult{result: errs[i]}
	}
}

// Epoch returns the epoch of the replica's group as of the entries it
// applied (DESIGN 14).
func (r *Replica) Epoch() uint64 { return r.fsm.epoch.Load() }

// Reconfigure proposes the change that ends epoch e and starts e+1 with
// next (group.EncodeChange), and waits until it is applied: nil once the
// group took it (every group starts e+1 at its delivery). It returns a
// *NotLeaderError on a follower, or why the group refused it
// (rawnode.ErrEpochChanged, rawnode.ErrChangePending, group.ErrChangeRefused,
// multicast.ErrNotEntry, multicast.ErrBusy).
func (r *Replica) Reconfigure(ctx context.Context, e uint64, next group.EpochConfig) error {
	if r.raft.State() != raft.Leader {
		return &NotLeaderError{Leader: r.leaderHint()}
	}
	return r.propose(ctx, group.EncodeChange(e, next))
}

// TickInterval is how often the leader proposes a tick while the group is
// busy: the length of one tick of log time.
func (r *Replica) TickInterval() time.Duration { return r.cfg.TickInterval }

// OpenSession opens a client session at this group (group.EncodeSession)
// and returns its id, once applied: the entry's index makes it. It returns a
// *NotLeaderError on a follower, or why the group refused it
// (group.ErrSessionsFull when it keeps SessionsMax sessions).
func (r *Replica) OpenSession(ctx context.Context) (uint64, error) {
	if r.raft.State() != raft.Leader {
		return 0, &NotLeaderError{Leader: r.leaderHint()}
	}
	index, err := r.proposeAt(ctx, group.EncodeSession())
	if err != nil {
		return 0, err
	}
	return group.SessionID(r.cfg.State.Self, index), nil
}

func (r *Replica) propose(ctx context.Context, data []byte) error {
	_, err := r.proposeAt(ctx, data)
	return err
}

// proposeAt proposes data and waits until it is applied; it returns the
// entry's index and its outcome.
func (r *Replica) proposeAt(ctx context.Context, data []byte) (uint64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	timeout := r.cfg.ApplyTimeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(dl))
	}
	f := r.raft.Apply(data, timeout)
	if err := r.await(ctx, f); err != nil {
		if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) || errors.Is(err, raft.ErrLeadershipTransferInProgress) {
			// ErrNotLeader: raft refused the entry, as it does while it
			// hands its leadership over (a leader removed from its
			// group); ErrLeadershipLost: it was in the log, and a new
			// leader may commit it.
			return 0, &NotLeaderError{Leader: r.leaderHint(), MayHaveRun: errors.Is(err, raft.ErrLeadershipLost)}
		}
		return 0, fmt.Errorf("replication: %w", err)
	}
	if err, ok := f.Response().(error); ok && err != nil {
		return f.Index(), err
	}
	return f.Index(), nil
}

// ProposeChunk proposes, at the group's leader, a chunk of partition move
// m from key from up to next (group.EncodeMoveChunk), and waits until it is
// applied: group.ErrChunkStale when the copy does not end at from (taken
// already).
func (r *Replica) ProposeChunk(ctx context.Context, m group.Move, from, next []byte, rows []group.MoveRow) error {
	if r.raft.State() != raft.Leader {
		return &NotLeaderError{Leader: r.leaderHint()}
	}
	return r.propose(ctx, group.EncodeMoveChunk(m, from, next, rows))
}

// Deliver takes frames from another group's leader: the leader proposes them
// to the log (transport.Handler).
func (r *Replica) Deliver(ctx context.Context, from partition.GroupID, frames []channel.Frame) (string, error) {
	if r.raft.State() != raft.Leader {
		return r.peerHint(), transport.ErrNotLeader
	}
	err := r.propose(ctx, group.EncodeInbound(from, frames))
	var nl *NotLeaderError
	switch {
	case err == nil:
	case errors.As(err, &nl):
		return r.peerHint(), transport.ErrNotLeader
	case errors.Is(err, multicast.ErrInvalid):
		// Committed and applied: the state skipped what it could not take,
		// the same way on every replica. Sending it again would only
		// append it again, so it is acknowledged.
		r.log.Warn("inbound batch skipped", "from", from, "err", err)
	default:
		return "", err
	}
	return "", nil
}

// State runs fn on the replica's state, read only, between two applied
// entries.
func (r *Replica) State(fn func(*group.State)) { r.fsm.withState(fn) }

// Close stops the replica: raft stopped, stores closed. The caller stops
// serving its services first (RegisterPeer); the executor is the caller's
// to close.
func (r *Replica) Close() error { return r.shutdown() }

// Quiet says that the replica's whole cluster is about to stop: from now
// on raft's errors and warnings (peers that closed their connections, a
// lost quorum) are logged at debug level, not as errors, since they are
// what the stop does. Close does the same for the replica itself.
func (r *Replica) Quiet() { r.quiet.Store(true) }

func (r *Replica) shutdown() error {
	if !r.closing.CompareAndSwap(false, true) {
		return nil
	}
	r.quiet.Store(true)
	var errs []error
	close(r.stop)
	if r.raft != nil {
		errs = append(errs, r.raft.Shutdown().Error())
	}
	r.wg.Wait()
	if r.tx != nil {
		errs = append(errs, r.tx.Close())
	}
	if r.guard != nil {
		errs = append(errs, r.guard.Close())
	}
	if r.trans != nil {
		// Close the pooled outbound connections too, so that the other
		// replicas' handlers for them end.
		r.trans.CloseStreams()
		errs = append(errs, r.trans.Close())
	}
	if r.store != nil {
		errs = append(errs, r.store.Close())
	}
	return errors.Join(errs...)
}
