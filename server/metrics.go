package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	grpcpeer "google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/flexkv/flexkv/api/apipb"
	"github.com/flexkv/flexkv/certs"
	"github.com/flexkv/flexkv/executor"
	"github.com/flexkv/flexkv/group"
	"github.com/flexkv/flexkv/internal/buildinfo"
	"github.com/flexkv/flexkv/internal/rpcflow"
	"github.com/flexkv/flexkv/kv"
	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/multicast/protocol"
	"github.com/flexkv/flexkv/multicast/rawnode"
	"github.com/flexkv/flexkv/partition"
	"github.com/flexkv/flexkv/replication"
)

// Metrics (DESIGN 11). A server keeps no Prometheus state: it counts what
// only it sees as it happens (deliveries and sends in the raft FSM's
// observer, request latencies in a gRPC interceptor) with atomic adds, and
// everything else is read from the components' plain stats (the node and
// its core, raft, the executor, Pebble) when Prometheus scrapes. Metrics
// turns both into Prometheus series, labelled by group and replica, for one
// server or for every replica of a local cluster.

// latencyBounds are the upper bounds, in seconds, of the latency
// histograms' buckets: from a raft commit on one machine (sub-millisecond)
// to WAN round trips and queueing (seconds).
var latencyBounds = [...]float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}

// histogram is a latency histogram updated with atomic adds.
type histogram struct {
	counts   [len(latencyBounds) + 1]atomic.Uint64 // the last: above every bound
	sumNanos atomic.Int64
}

func (h *histogram) observe(d time.Duration) {
	i, _ := slices.BinarySearch(latencyBounds[:], d.Seconds())
	h.counts[i].Add(1)
	h.sumNanos.Add(int64(d))
}

// total returns the number of observations and their sum.
func (h *histogram) total() (n uint64, sum time.Duration) {
	for i := range h.counts {
		n += h.counts[i].Load()
	}
	return n, time.Duration(h.sumNanos.Load())
}

// metric returns the histogram as a constant metric. The count is the sum
// of the buckets read, so that the two agree while observations go on.
func (h *histogram) metric(desc *prometheus.Desc, labels ...string) prometheus.Metric {
	buckets := make(map[float64]uint64, len(latencyBounds))
	var n uint64
	for i, b := range latencyBounds {
		n += h.counts[i].Load()
		buckets[b] = n
	}
	n += h.counts[len(latencyBounds)].Load()
	return prometheus.MustNewConstHistogram(desc, n, time.Duration(h.sumNanos.Load()).Seconds(), buckets, labels...)
}

// requestMethods are the client API's methods that the request metrics
// follow.
var requestMethods = [...]string{"Txn", "Await", "Get", "Put", "Delete", "Scan", "OpenSession", "Topology"}

// requestCodes is the number of gRPC status codes (OK to Unauthenticated).
const requestCodes = int(codes.Unauthenticated) + 1

// sendKinds are the kinds of sends that the send metrics follow.
var sendKinds = [...]multicast.Kind{multicast.KindMsg, multicast.KindAck, multicast.KindNotif, multicast.KindTS, multicast.KindRelay, multicast.KindVote}

// sendKindLabel names the sends counted at index k of counters.sends: the
// kind, or "flush" for index 0 (see counters).
func sendKindLabel(k multicast.Kind) string {
	if k == 0 {
		return "flush"
	}
	return k.String()
}

// counters are what a server counts as it runs. They start from zero with
// every Open: Prometheus reads a counter that goes down as a restart.
type counters struct {
	deliveriesLocal  atomic.Uint64
	deliveriesGlobal atomic.Uint64
	// sends and sendBytes, by multicast.Kind, count the sends of the group
	// while this replica led it: every replica computes them, only the
	// leader transmits. Index 0 (no kind) counts the sends about flushes,
	// whatever their kind: the protocol's own traffic, whose rate depends
	// on time and load rather than on the clients' messages.
	sends     [256]atomic.Uint64
	sendBytes [256]atomic.Uint64
	// accepted counts the client requests the group accepted (every
	// replica applies them); payloadTo, by destination GroupID, the sends
	// that carry a message's payload (msg, relay) while this replica led:
	// what the other groups receive, for the overhead of DESIGN 3.4.
	accepted  atomic.Uint64
	payloadTo []atomic.Uint64

	// delivery: from proposing a client request to delivering it here, at
	// the replica that proposed it (the entry group's leader, when the
	// group is a destination).
	delivery  histogram
	proposals proposals

	requests      [len(requestMethods)]histogram
	requestErrors [len(requestMethods)][requestCodes]atomic.Uint64
}

// observe counts what an applied entry produced. It runs in the raft FSM,
// with the group's state locked: it only adds, and looks up a proposal
// time when some call waits for one.
func (c *counters) observe(out rawnode.Output, leader bool) {
	for _, m := range out.Deliveries {
		if m.ID.IsFlush() {
			continue
		}
		if m.Dst.Len() == 1 {
			c.deliveriesLocal.Add(1)
		} else {
			c.deliveriesGlobal.Add(1)
		}
		if start, ok := c.proposals.delivered(m.ID); ok {
			c.delivery.observe(time.Since(start))
		}
	}
	for _, m := range out.Requests {
		if !m.ID.IsFlush() {
			c.accepted.Add(1)
		}
	}
	if !leader {
		return
	}
	for _, snd := range out.Sends {
		k := snd.Kind
		if snd.About.IsFlush() {
			k = 0
		}
		c.sends[k].Add(1)
		c.sendBytes[k].Add(uint64(len(snd.Payload)))
		if (k == multicast.KindMsg || k == multicast.KindRelay) && int(snd.To) < len(c.payloadTo) {
			c.payloadTo[snd.To].Add(1)
		}
	}
}

// proposals holds when the calls in flight proposed their requests, for the
// delivery latency. It holds at most one entry per call in flight.
type proposals struct {
	n  atomic.Int64 // len(m): the observer skips the lock when no call waits
	mu sync.Mutex
	m  map[multicast.MsgID]time.Time
}

// add records that id is proposed now; the function it returns forgets it
// (a request refused, or answered without its delivery being observed).
// A retry of an id in flight keeps the first call's time.
func (p *proposals) add(id multicast.MsgID) func() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.m[id]; ok {
		return func() {}
	}
	if p.m == nil {
		p.m = make(map[multicast.MsgID]time.Time)
	}
	start := time.Now()
	p.m[id] = start
	p.n.Add(1)
	return func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if t, ok := p.m[id]; ok && t.Equal(start) {
			delete(p.m, id)
			p.n.Add(-1)
		}
	}
}

// delivered returns and forgets the proposal time of id, if a call waits
// for it.
func (p *proposals) delivered(id multicast.MsgID) (time.Time, bool) {
	if p.n.Load() == 0 {
		return time.Time{}, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	t, ok := p.m[id]
	if ok {
		delete(p.m, id)
		p.n.Add(-1)
	}
	return t, ok
}

// intercept is the unary interceptor of the replica's gRPC server: it times
// the client API's calls.
func (s *Server) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	i := requestMethod(info.FullMethod)
	if i < 0 {
		return handler(ctx, req)
	}
	if !s.ready.Load() {
		// The gRPC server serves a moment before Open has published the
		// replica: the client API waits for it.
		return nil, status.Errorf(codes.Unavailable, "server: replica %s is starting", s.cfg.NodeID)
	}
	start := time.Now()
	// Whom the call is for: its client certificate's user, or the user a
	// node of the cluster calls for (forward.go).
	var resp any
	ictx, err := s.identify(ctx)
	if err == nil {
		ctx = ictx
		resp, err = handler(ctx, req)
	}
	s.counts.requests[i].observe(time.Since(start))
	code := status.Code(err)
	if code != codes.OK && int(code) < requestCodes {
		s.counts.requestErrors[i][code].Add(1)
	}
	switch code {
	case codes.InvalidArgument, codes.PermissionDenied, codes.FailedPrecondition, codes.ResourceExhausted:
		s.log.Info("request refused", "method", requestMethods[i], "user", userOf(ctx), "code", code.String(), "err", status.Convert(err).Message())
	default:
	}
	return resp, err
}

// userOf names the user of a client API call: the CN of its client
// certificate (DESIGN 13), or "-" on a connection without TLS.
func userOf(ctx context.Context) string {
	if c, ok := ctx.Value(callerKey{}).(caller); ok {
		return c.user
	}
	p, ok := grpcpeer.FromContext(ctx)
	if !ok {
		return "-"
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok {
		return "-"
	}
	user, err := certs.PeerUser(info.State)
	if err != nil {
		return "-"
	}
	return user
}

// requestMethod returns the index in requestMethods of a full gRPC method
// name of the client API, or -1.
func requestMethod(full string) int {
	name, ok := strings.CutPrefix(full, "/"+apipb.KV_ServiceDesc.ServiceName+"/")
	if !ok {
		return -1
	}
	return slices.Index(requestMethods[:], name)
}

// Metrics exports the metrics of servers to Prometheus: it is a
// prometheus.Collector that reads the servers' counters and stats when it
// is collected. Register it with a registry of your own, or serve it with
// Handler or ServeMetrics.
type Metrics struct {
	servers func() []*Server
	descs   []*prometheus.Desc

	// buildInfo is 1, labelled with build, the labels of the binary's
	// build: version, revision, go_version.
	buildInfo *prometheus.Desc
	build     []string

	edgeBytes, edgeConns, edgeClosed, edgeRefused *prometheus.Desc

	// certExpiry is the seconds until each certificate the replica
	// presents or trusts expires, labelled by its file.
	certExpiry *prometheus.Desc

	deliveries, sends, sendBytes, delivery, requests, requestErrors, peerRefusals *prometheus.Desc

	outbox, outboxBytes, backlog, holdbackBytes, busy, busyWith, rejected  *prometheus.Desc
	sessions, logTime, epoch                                               *prometheus.Desc
	coreGeneration, retiringCores, heldEnvelopes, staleEnvelopes           *prometheus.Desc
	chHoldbackByteDrops, chOutboxOverflows                                 *prometheus.Desc
	chSent, chResent, chReceived, chDuplicates, chHeldBack, chHoldbackDrop *prometheus.Desc
	chNacksSent, chNacksServed, chAcksSent                                 *prometheus.Desc

	// core holds, by protocol name, the series of the figures its cores
	// report, in the order of (*protocol.Protocol).Stats.
	core map[multicast.Protocol][]*prometheus.Desc

	raftLeader, raftState, raftTerm, raftLast, raftCommit, raftApplied *prometheus.Desc
	readBarriers, readBarrierReads, readBarriersEarly, reads           *prometheus.Desc
	moveBytes, movesRefused                                            *prometheus.Desc

	txnExecuted, txnAborted, txnQueued, txnVotes, txnVotesJunk *prometheus.Desc
	txnOpen, txnUnreleased, txnEarlyNotes                      *prometheus.Desc
	txnVotesEarly, txnRanAhead                                 *prometheus.Desc
	txnVotesSent, txnVotesEvicted                              *prometheus.Desc
	txnSessions, txnSessionResults, txnResultsAcked            *prometheus.Desc
	txnSessionsExpired, txnSessionsEvicted                     *prometheus.Desc

	pbDisk, pbMemtable, pbTables, pbReadAmp, pbFlushes, pbCompactions, pbDebt, raftWAL *prometheus.Desc
	pbCache, pbCacheHits, pbCacheMisses                                                *prometheus.Desc
	rowCacheHits, rowCacheMisses                                                       *prometheus.Desc
	rowCacheViewHits, rowCacheViewMisses                                               *prometheus.Desc
}

// NewMetrics returns the collector of the servers that servers returns at
// each collection (the running replicas of a local cluster, say).
func NewMetrics(servers func() []*Server) *Metrics {
	m := &Metrics{servers: servers}
	d := func(name, help string, labels ...string) *prometheus.Desc {
		desc := prometheus.NewDesc("flexkv_"+name, help, append([]string{"group", "replica"}, labels...), nil)
		m.descs = append(m.descs, desc)
		return desc
	}
	m.edgeBytes = d("edge_request_bytes", "Request bytes of calls not yet fully received that a port's connections hold, by port (client or peer): what the edge bounds.", "port")
	m.edgeConns = d("edge_connections", "Connections open on a port, by port.", "port")
	m.edgeClosed = d("edge_connections_closed_total", "Connections a port closed for the request bytes they held in flight, by port.", "port")
	m.edgeRefused = d("edge_calls_refused_total", "Calls a port refused at their start for their connection's request bytes in flight, by port.", "port")
	m.buildInfo = d("build_info", "Always 1, labelled with the build the replica runs: its module version, VCS revision and Go version (a cluster whose replicas differ is being upgraded).", "version", "revision", "go_version")
	m.build = buildLabels(buildinfo.Read())
	m.certExpiry = d("cert_expiry_seconds", "Seconds until a certificate the replica presents (its node certificate) or trusts (the cluster CA) expires, by file; negative once expired. Absent without TLS.", "cert")
	m.deliveries = d("deliveries_total", "Application messages delivered by this replica, by scope: local (one destination group) or global.", "scope")
	m.sends = d("sends_total", "Envelopes the group sent to other groups while this replica led it, by kind (msg, ack, notif, ts, relay, vote; flush: any envelope about a flush).", "kind")
	m.sendBytes = d("send_bytes_total", "Payload bytes of the envelopes counted by flexkv_sends_total, by kind.", "kind")
	m.delivery = d("delivery_seconds", "From proposing a client request to delivering it, at the replica that proposed it (entry groups that are destinations).")
	m.requests = d("request_seconds", "Duration of client API calls served by this replica, by method.", "method")
	m.requestErrors = d("request_errors_total", "Client API calls that failed, by method and gRPC status code.", "method", "code")

	m.peerRefusals = d("peer_refusals_total", "Calls from other groups refused, by reason: certificate (it names no node of the group the frames claim), fingerprint (the caller runs another cluster configuration; DESIGN 13).", "reason")

	m.outbox = d("outbox_envelopes", "Envelopes to a group not acknowledged yet.", "to")
	m.outboxBytes = d("outbox_bytes", "Payload bytes of the envelopes to a group not acknowledged yet.", "to")
	m.backlog = d("backlog_bytes", "Bytes the group sent to any group, or took on as requests, since the oldest envelope a group has not acknowledged: the work that may wait for it. The group refuses new requests at the channel's backlog bound.", "to")
	m.holdbackBytes = d("holdback_bytes", "Payload bytes of out-of-order frames from a group held back.", "from")
	m.busy = d("busy", "1 while the group refuses new requests because an outbox is full or a backlog reached its bound.")
	m.busyWith = d("busy_with", "1 for the group that makes this group refuse new requests (the lowest-ranked one), 0 for the others.", "to")
	m.sessions = d("sessions", "Client sessions the group keeps open (at most its SessionsMax).")
	m.logTime = d("log_time_ticks", "The group's log time: the ticks its log has applied, by which sessions expire.")
	m.epoch = d("epoch", "The group's epoch (DESIGN 14): 1 at bootstrap, one more per change of the cluster it delivered.")
	m.coreGeneration = d("core_generation", "The epoch the group's protocol core started at (DESIGN 14): 1 until a change of the overlay starts a new core under FlexCast or the tree protocol.")
	m.retiringCores = d("retiring_cores", "Older cores the group keeps to answer the other groups about an ended epoch, until every group started the next.")
	m.staleEnvelopes = d("envelopes_stale_total", "Envelopes of a retired protocol core that no group needs any more (every group started a later one), skipped.")
	m.heldEnvelopes = d("held_envelopes", "Envelopes of a core generation held for groups that have not started it yet (counted like a backlog).")
	m.rejected = d("envelopes_rejected_total", "Envelopes from other groups that the protocol core rejected as malformed.")
	m.chHoldbackByteDrops = d("channel_holdback_byte_drops_total", "Out-of-order frames dropped for the hold-back byte bound.")
	m.chOutboxOverflows = d("channel_outbox_overflows_total", "Envelopes queued while an outbox was beyond its byte bound (admission control should prevent it).")
	m.chSent = d("channel_frames_sent_total", "Data frames sent to other groups for the first time.")
	m.chResent = d("channel_resends_total", "Data frames sent again, after a timeout or a negative ack.")
	m.chReceived = d("channel_envelopes_received_total", "Envelopes received from other groups and handed up, in order.")
	m.chDuplicates = d("channel_duplicates_total", "Data frames dropped as duplicates.")
	m.chHeldBack = d("channel_held_back_total", "Data frames that arrived early and were held back.")
	m.chHoldbackDrop = d("channel_holdback_drops_total", "Early data frames dropped beyond the hold-back window.")
	m.chNacksSent = d("channel_nacks_sent_total", "Negative acks sent for gaps.")
	m.chNacksServed = d("channel_nacks_served_total", "Negative acks answered with resends.")
	m.chAcksSent = d("channel_acks_sent_total", "Control-only frames sent to acknowledge.")

	m.core = make(map[multicast.Protocol][]*prometheus.Desc)
	for _, p := range protocol.All() {
		for _, st := range p.Stats() {
			var labels []string
			if st.Label != "" {
				labels = []string{st.Label}
			}
			m.core[p.Name()] = append(m.core[p.Name()], d(st.Name, st.Help, labels...))
		}
	}

	m.raftLeader = d("raft_leader", "1 while this replica leads its group.")
	m.raftState = d("raft_state", "1 for the raft state the replica is in.", "state")
	m.raftTerm = d("raft_term", "The replica's raft term.")
	m.raftLast = d("raft_last_index", "Index of the last entry in the replica's raft log.")
	m.raftCommit = d("raft_commit_index", "Index of the last entry known committed.")
	m.raftApplied = d("raft_applied_index", "Index of the last entry handed to the state machine.")

	m.readBarriers = d("read_barriers_total", "Read barriers run at this replica as leader (DESIGN 5): a heartbeat round each, shared by every linearizable read waiting when it starts.")
	m.readBarrierReads = d("read_barrier_reads_total", "Linearizable reads served by the read barriers: divided by flexkv_read_barriers_total, the reads per barrier.")
	m.readBarriersEarly = d("read_barriers_early_total", "Read barriers in which raft's own leadership check passed on answers that may predate the barrier, and which waited for answers to calls made after it began (design 6.5).")
	m.reads = d("reads_total", "Linearizable reads (Get, read-only transactions and calls of one group), by path: leader (on the applied state after a barrier, DESIGN 6.5) or log (held up by queued deliveries, or a call that wrote, they went through the log).", "path")
	m.moveBytes = d("partition_move_bytes", "Bytes of keys and values of moving partitions this replica copied in, as its group's leader (DESIGN 14).")
	m.movesRefused = d("partition_move_refusals_total", "Requests refused as busy for touching a partition moving in their epoch (the client retries).")
	m.describeExecutor(d)

	m.pbDisk = d("pebble_disk_bytes", "Pebble: bytes on disk.")
	m.pbMemtable = d("pebble_memtable_bytes", "Pebble: bytes allocated by memtables.")
	m.pbTables = d("pebble_tables", "Pebble: sstables in the LSM.")
	m.pbReadAmp = d("pebble_read_amplification", "Pebble: files a read may visit (L0 sublevels plus non-empty levels).")
	m.pbFlushes = d("pebble_flushes_total", "Pebble: memtable flushes.")
	m.pbCompactions = d("pebble_compactions_total", "Pebble: compactions.")
	m.pbDebt = d("pebble_compaction_debt_bytes", "Pebble: estimated bytes compactions must rewrite.")
	m.raftWAL = d("raft_log_wal_written_bytes_total", "Bytes written to the raft log's write-ahead log, framing included: the replica's one WAL (its data store keeps none).")
	m.pbCache = d("pebble_block_cache_bytes", "Pebble: bytes in the block cache.")
	m.pbCacheHits = d("pebble_block_cache_hits_total", "Pebble: block cache hits.")
	m.pbCacheMisses = d("pebble_block_cache_misses_total", "Pebble: block cache misses.")
	m.rowCacheHits = d("row_cache_hits_total", "Reads of rows by the executor that the row cache served.")
	m.rowCacheMisses = d("row_cache_misses_total", "Reads of rows by the executor that the row cache did not serve (read from Pebble).")
	m.rowCacheViewHits = d("row_cache_view_hits_total", "Point reads of views at the leader (reads and read-only calls, DESIGN 6.5) that the row cache served.")
	m.rowCacheViewMisses = d("row_cache_view_misses_total", "Point reads of views at the leader that the row cache did not serve (read from Pebble).")
	return m
}

// describeExecutor makes the descriptions of the executor's figures with d.
func (m *Metrics) describeExecutor(d func(name, help string, labels ...string) *prometheus.Desc) {
	m.txnExecuted = d("txn_executions_total", "Transaction pieces executed (results stored).")
	m.txnAborted = d("txn_aborts_total", "Executed transaction pieces that aborted.")
	m.txnQueued = d("txn_queued", "Deliveries waiting in the executor: for votes, or behind a conflicting one that waits.")
	m.txnVotes = d("txn_votes_stored", "Votes from other groups stored, waiting for their transaction.")
	m.txnOpen = d("txn_open", "Transactions executed here and not yet complete at every destination (strict serializability): what conflicts with them waits.")
	m.txnUnreleased = d("txn_unreleased", "Pieces executed here whose answers wait for a conflicting transaction to complete.")
	m.txnEarlyNotes = d("txn_release_notes_early", "Release notes from other groups kept for transactions not executed here yet.")
	m.txnVotesJunk = d("txn_votes_junk_total", "Votes ignored: undecodable, misdirected, late or repeated.")
	m.txnVotesEarly = d("txn_votes_early_total", "Votes sent while a delivery ahead had not run (pipelining).")
	m.txnRanAhead = d("txn_ran_ahead_total", "Deliveries run before one ahead of them that waited (pipelining).")
	m.txnVotesSent = d("txn_votes_sent_total", "Votes sent, one per group sent to: pieces that can abort vote, the others send none.")
	m.txnVotesEvicted = d("txn_votes_evicted_total", "Stored votes dropped to stay within the stored-vote byte bound (oldest of transactions not queued first).")
	m.txnSessions = d("txn_sessions", "Client sessions whose results this group keeps until acknowledged.")
	m.txnSessionResults = d("txn_session_results", "Results kept for client sessions, not yet acknowledged (at most one per session).")
	m.txnResultsAcked = d("txn_results_acknowledged_total", "Session results deleted because the session's next request acknowledged them.")
	m.txnSessionsExpired = d("txn_sessions_expired_total", "Session records dropped after their session was idle for its lifetime of log time.")
	m.txnSessionsEvicted = d("txn_sessions_evicted_total", "Session records dropped to stay within the executor's bound on sessions (least recently used first).")
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range m.descs {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	for _, s := range m.servers() {
		m.collect(ch, s)
	}
}

// snapshot is what Collect reads from a server's replicated state, copied
// with the state locked so that the lock is held briefly.
type snapshot struct {
	node     rawnode.Stats
	busy     bool
	busyWith partition.GroupID
	sessions int
	logTime  uint64
	epoch    uint64
	// gen: the current core's generation; retiring and held, the older
	// cores kept and the envelopes held for groups behind.
	gen, retiring, held uint64
	// By group id; this group's own entries are unused.
	outbox, outboxBytes, holdbackBytes []int
	backlog                            []uint64
	core                               []protocol.Reading // of the server's protocol
}

// collect sends every metric of server s on ch, labelled by its group and
// replica.
func (m *Metrics) collect(ch chan<- prometheus.Metric, s *Server) {
	e := emitter{ch: ch, labels: []string{s.group.Name, s.cfg.NodeID}}
	e.gauge(m.buildInfo, 1, m.build...)
	m.collectCerts(e, s)
	m.collectCounts(e, s)
	sn := readSnapshot(s)
	m.collectNode(e, s, &sn)
	m.collectCore(e, s, sn.core)
	m.collectRaft(e, s.replica.RaftStatus())
	e.counter(m.raftWAL, s.replica.RaftLogWALBytes())
	rs := s.replica.ReadStats()
	e.counter(m.readBarriers, rs.Rounds)
	e.counter(m.readBarrierReads, rs.Reads)
	e.counter(m.readBarriersEarly, rs.Early)
	e.counter(m.reads, s.reads.leader.Load(), "leader")
	e.counter(m.reads, s.reads.log.Load(), "log")
	m.collectExecutor(e, s.exec.Stats())
	// A store closed under a scrape (the server stopping) has no figures.
	if ps, err := s.store.Metrics(); err == nil {
		m.collectStore(e, ps)
	}
}

// emitter sends constant metrics on ch, each with labels (the group and the
// replica) before its own.
type emitter struct {
	ch     chan<- prometheus.Metric
	labels []string
}

// metric sends the value v of d, of type vt.
func (e emitter) metric(d *prometheus.Desc, vt prometheus.ValueType, v float64, labels ...string) {
	e.ch <- prometheus.MustNewConstMetric(d, vt, v, append(slices.Clip(e.labels), labels...)...)
}

// counter sends the counter d at v.
func (e emitter) counter(d *prometheus.Desc, v uint64, labels ...string) {
	e.metric(d, prometheus.CounterValue, float64(v), labels...)
}

// gauge sends the gauge d at v.
func (e emitter) gauge(d *prometheus.Desc, v float64, labels ...string) {
	e.metric(d, prometheus.GaugeValue, v, labels...)
}

// collectCounts sends what the server counts itself: deliveries, sends,
// requests and their errors, and refused peers.
func (m *Metrics) collectCounts(e emitter, s *Server) {
	c := &s.counts
	e.counter(m.deliveries, c.deliveriesLocal.Load(), "local")
	e.counter(m.deliveries, c.deliveriesGlobal.Load(), "global")
	for _, k := range append([]multicast.Kind{0}, sendKinds[:]...) {
		e.counter(m.sends, c.sends[k].Load(), sendKindLabel(k))
		e.counter(m.sendBytes, c.sendBytes[k].Load(), sendKindLabel(k))
	}
	e.ch <- c.delivery.metric(m.delivery, e.labels...)
	for i, name := range requestMethods {
		e.ch <- c.requests[i].metric(m.requests, append(slices.Clip(e.labels), name)...)
		for code := range requestCodes {
			if n := c.requestErrors[i][code].Load(); n > 0 {
				e.counter(m.requestErrors, n, name, codes.Code(code).String())
			}
		}
	}

	e.counter(m.moveBytes, uint64(s.moveBytes.Load()))
	e.counter(m.movesRefused, uint64(s.movesRefused.Load()))
	e.counter(m.peerRefusals, uint64(s.peerRefusals.Load()), "certificate")
	e.counter(m.peerRefusals, uint64(s.fingerprintRefusals.Load()), "fingerprint")
	m.collectEdge(e, "client", s.apiGuard.Load())
	m.collectEdge(e, "peer", s.peerGuard.Load())
}

// collectCerts reports how long the certificates that s loaded have left.
func (m *Metrics) collectCerts(e emitter, s *Server) {
	if s.cfg.Node == nil {
		return
	}
	now := time.Now()
	for _, x := range s.cfg.Node.Expiries() {
		e.gauge(m.certExpiry, x.NotAfter.Sub(now).Seconds(), x.File)
	}
}

// collectEdge reports what one port's guard holds and did; nothing before
// the port serves.
func (m *Metrics) collectEdge(e emitter, port string, g *rpcflow.Guard) {
	if g == nil {
		return
	}
	st := g.Stats()
	e.gauge(m.edgeBytes, float64(st.Bytes), port)
	e.gauge(m.edgeConns, float64(st.Conns), port)
	e.counter(m.edgeClosed, uint64(st.Closed), port)
	e.counter(m.edgeRefused, uint64(st.Refused), port)
}

// readSnapshot copies what collect reads of s's replicated state, with the
// state locked.
func readSnapshot(s *Server) snapshot {
	var sn snapshot
	s.replica.State(func(st *group.State) {
		nd := st.Node()
		sn.node = nd.Stats()
		sn.busyWith, sn.busy = nd.BusyWith()
		sn.sessions, sn.logTime, sn.epoch = st.Sessions(), st.LogTime(), st.Epoch()
		sn.gen, _ = nd.Generation()
		sn.retiring, sn.held = uint64(nd.Retiring()), uint64(nd.HeldLen())
		n := s.top.Len()
		sn.outbox, sn.outboxBytes, sn.holdbackBytes, sn.backlog = make([]int, n), make([]int, n), make([]int, n), make([]uint64, n)
		for g := range n {
			if id := partition.GroupID(g); id != s.self {
				sn.outbox[g], sn.outboxBytes[g] = nd.OutboxLen(id), nd.OutboxBytes(id)
				sn.holdbackBytes[g], sn.backlog[g] = nd.HoldbackBytes(id), nd.Backlog(id)
			}
		}
		sn.core = s.proto.Read(st.Core(), nil)
	})
	return sn
}

// collectNode sends the multicast node's figures of sn: per other group,
// then the node's and its channel layer's.
func (m *Metrics) collectNode(e emitter, s *Server, sn *snapshot) {
	for g, n := range sn.outbox {
		if id := partition.GroupID(g); id != s.self {
			name := s.top.Name(id)
			e.gauge(m.outbox, float64(n), name)
			e.gauge(m.outboxBytes, float64(sn.outboxBytes[g]), name)
			e.gauge(m.backlog, float64(sn.backlog[g]), name)
			e.gauge(m.holdbackBytes, float64(sn.holdbackBytes[g]), name)
			e.gauge(m.busyWith, boolValue(sn.busy && sn.busyWith == id), name)
		}
	}
	e.gauge(m.busy, boolValue(sn.busy))
	e.gauge(m.sessions, float64(sn.sessions))
	e.gauge(m.logTime, float64(sn.logTime))
	e.gauge(m.epoch, float64(sn.epoch))
	e.gauge(m.coreGeneration, float64(sn.gen))
	e.gauge(m.retiringCores, float64(sn.retiring))
	e.gauge(m.heldEnvelopes, float64(sn.held))
	e.counter(m.rejected, sn.node.EnvelopesRejected)
	e.counter(m.staleEnvelopes, sn.node.EnvelopesStale)
	cs := sn.node.Channel
	e.counter(m.chSent, cs.DataSent)
	e.counter(m.chResent, cs.DataResent)
	e.counter(m.chReceived, cs.Delivered)
	e.counter(m.chDuplicates, cs.DuplicatesDropped)
	e.counter(m.chHeldBack, cs.HeldBack)
	e.counter(m.chHoldbackDrop, cs.HoldbackDrops)
	e.counter(m.chHoldbackByteDrops, cs.HoldbackByteDrops)
	e.counter(m.chOutboxOverflows, cs.OutboxOverflows)
	e.counter(m.chNacksSent, cs.NacksSent)
	e.counter(m.chNacksServed, cs.NacksServed)
	e.counter(m.chAcksSent, cs.AcksSent)
}

// collectCore sends the readings of s's protocol core, each a counter or a
// gauge as the protocol's stats say.
func (m *Metrics) collectCore(e emitter, s *Server, readings []protocol.Reading) {
	stats, descs := s.proto.Stats(), m.core[s.proto.Name()]
	for _, r := range readings {
		var labels []string
		if r.Label != "" {
			labels = []string{r.Label}
		}
		vt := prometheus.GaugeValue
		if stats[r.Stat].Kind == protocol.Counter {
			vt = prometheus.CounterValue
		}
		e.metric(descs[r.Stat], vt, r.Value, labels...)
	}
}

// collectRaft sends the replica's raft status rs.
func (m *Metrics) collectRaft(e emitter, rs replication.RaftStatus) {
	e.gauge(m.raftLeader, boolValue(rs.Role == replication.RoleLeader))
	for _, role := range replication.Roles {
		e.gauge(m.raftState, boolValue(rs.Role == role), role.String())
	}
	e.gauge(m.raftTerm, float64(rs.Term))
	e.gauge(m.raftLast, float64(rs.LastIndex))
	e.gauge(m.raftCommit, float64(rs.CommitIndex))
	e.gauge(m.raftApplied, float64(rs.AppliedIndex))
}

// collectExecutor sends the executor's figures xs.
func (m *Metrics) collectExecutor(e emitter, xs executor.Stats) {
	e.counter(m.txnExecuted, xs.Executed)
	e.counter(m.txnAborted, xs.Aborted)
	e.gauge(m.txnQueued, float64(xs.Queued))
	e.gauge(m.txnVotes, float64(xs.VotesStored))
	e.gauge(m.txnOpen, float64(xs.Open))
	e.gauge(m.txnUnreleased, float64(xs.Unreleased))
	e.gauge(m.txnEarlyNotes, float64(xs.EarlyNotes))
	e.counter(m.txnVotesJunk, xs.VotesJunk)
	e.counter(m.txnVotesEarly, xs.VotesEarly)
	e.counter(m.txnRanAhead, xs.RanAhead)
	e.counter(m.txnVotesSent, xs.VotesSent)
	e.counter(m.txnVotesEvicted, xs.VotesEvicted)
	e.gauge(m.txnSessions, float64(xs.Sessions))
	e.gauge(m.txnSessionResults, float64(xs.SessionResults))
	e.counter(m.txnResultsAcked, xs.ResultsAcked)
	e.counter(m.txnSessionsExpired, xs.SessionsExpired)
	e.counter(m.txnSessionsEvicted, xs.SessionsEvicted)
}

// collectStore sends the store's figures ps.
func (m *Metrics) collectStore(e emitter, ps kv.Metrics) {
	e.gauge(m.pbDisk, float64(ps.DiskBytes))
	e.gauge(m.pbMemtable, float64(ps.MemtableBytes))
	e.gauge(m.pbTables, float64(ps.Tables))
	e.gauge(m.pbReadAmp, float64(ps.ReadAmp))
	e.counter(m.pbFlushes, uint64(ps.Flushes))
	e.counter(m.pbCompactions, uint64(ps.Compactions))
	e.gauge(m.pbDebt, float64(ps.CompactionDebtBytes))
	e.gauge(m.pbCache, float64(ps.BlockCacheBytes))
	e.counter(m.pbCacheHits, uint64(ps.BlockCacheHits))
	e.counter(m.pbCacheMisses, uint64(ps.BlockCacheMisses))
	e.counter(m.rowCacheHits, uint64(ps.RowCacheHits))
	e.counter(m.rowCacheMisses, uint64(ps.RowCacheMisses))
	e.counter(m.rowCacheViewHits, uint64(ps.RowCacheViewHits))
	e.counter(m.rowCacheViewMisses, uint64(ps.RowCacheViewMisses))
}

// buildLabels are the labels of flexkv_build_info for the build bi: its
// version, its full revision ("unknown" when the build recorded none) and
// its Go version.
func buildLabels(bi buildinfo.Info) []string {
	rev := bi.Revision
	if rev == "" {
		rev = "unknown"
	}
	return []string{bi.Version, rev, bi.GoVersion}
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// Handler returns an HTTP handler that serves m, with the Go runtime's and
// the process's metrics, in Prometheus' exposition format. It uses a
// registry of its own.
func (m *Metrics) Handler() http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(m, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
}

// Metrics returns the collector of this server alone.
func (s *Server) Metrics() *Metrics {
	return NewMetrics(func() []*Server { return []*Server{s} })
}

// MetricsServer serves a collector at /metrics over HTTP.
type MetricsServer struct {
	http *http.Server
	addr string
	done chan struct{}
	err  error // of Serve, once done is closed
}

// ServeMetrics serves m at http://addr/metrics until Close.
func ServeMetrics(addr string, m *Metrics) (*MetricsServer, error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("server: metrics: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", m.Handler())
	ms := &MetricsServer{
		http: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second},
		addr: lis.Addr().String(),
		done: make(chan struct{}),
	}
	go func() {
		defer close(ms.done)
		if err := ms.http.Serve(lis); !errors.Is(err, http.ErrServerClosed) {
			ms.err = err
		}
	}()
	return ms, nil
}

// Addr returns the address the server listens on (its port, when addr
// named port 0).
func (ms *MetricsServer) Addr() string { return ms.addr }

// Close stops serving: scrapes in progress get a moment to finish.
func (ms *MetricsServer) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err := ms.http.Shutdown(ctx)
	if err != nil {
		err = errors.Join(err, ms.http.Close())
	}
	<-ms.done
	if err = errors.Join(err, ms.err); err != nil {
		return fmt.Errorf("server: metrics: %w", err)
	}
	return nil
}
