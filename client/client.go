// Package client is FlexKV's Go client (DESIGN 2, 7).
//
// A Client fetches the cluster configuration from any server (Topology),
// and from it routes every request itself: it maps the keys of a
// transaction to their partitions and groups, validates the transaction
// locally (bad input never leaves the client), sends it to the entry group
// of the cluster's protocol, and waits for the answer of every destination
// group: the entry group's on the original call, the others' on Await
// calls made concurrently. A Result lists the destinations in the order
// their answers arrived, with the latency of each (DESIGN 2, step 6).
//
// # Connecting
//
// A cluster runs TLS unless it was started with --insecure (DESIGN 13):
// Config.CertsDir names the directory of the cluster CA's certificate and
// the user's client certificate, as `flexkv local` and `flexkv cert` write
// it (flexkv-data/local/certs for `flexkv local`), and Config.User the user
// (root by default); Config.TLS takes a *tls.Config instead, and
// Config.Insecure connects in plaintext. A client that disagrees with the
// cluster on TLS gets, from New, a TLSMismatchError saying which to set.
//
// # Retries and transaction ids
//
// Every write carries a transaction id (client id, seq). A Client holds a
// pool of sessions (Config.Sessions), each with its own increasing seq: a
// call takes a free session (waiting for one up to its context), uses the
// next seq, and retries that same id, on the group's other replicas and
// after leader redirects, until it gets an answer or its context ends. The
// servers deduplicate by id, so a retried request takes effect at most once
// and its retry returns the first result. A call whose context ended may
// still take effect. Reads (Get, Scan) carry no id.
//
// The client id is a server session (DESIGN 6): a pool session opens one at
// each group where its requests enter (OpenSession, the first time it sends
// there), and a group forgets a session idle for its session lifetime
// (counted in ticks of its log: minutes, by default). A request of a
// forgotten session is refused, "session expired", and never runs. The
// client then opens a new session at that group and resubmits the request
// under it, as a new transaction, when it knows the request never ran: when
// every attempt of it was refused outright, by a follower's redirect
// included (the usual case: the session expired while the pool session sat
// idle, and the group may have changed leaders meanwhile). When an earlier attempt may
// have been accepted (it timed out, or its replica lost its leadership),
// resubmitting could run it twice: the call fails with an error matching
// ErrSessionExpired, and the transaction may or may not have run.
//
// # Errors
//
//   - bad input: errors matching txn.ErrInvalid (and partition.ErrNoPartition
//     for a key in no partition, partition.ErrInvalidKey for an empty or
//     too long key); nothing is sent. A server's InvalidArgument also
//     matches txn.ErrInvalid.
//   - an aborted transaction: an error matching txn.ErrAborted whose text
//     ends with the reason.
//   - destinations that disagree, or answers that do not fit the request:
//     ErrInconsistent.
//   - the context's error (context.DeadlineExceeded, context.Canceled),
//     wrapped with the last error seen from the servers.
//   - a message larger than gRPC's limit (an answer above the client's
//     receive limit): ErrTooLarge, naming the sizes; not retried. A server's
//     ResourceExhausted of its own (admission control) is retried.
//   - a cluster and a client that disagree on TLS: New's error is a
//     *TLSMismatchError; a missing certificate: New's error names the file.
//   - ErrClosed after Close.
package client

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/flexkv/flexkv/api"
	"github.com/flexkv/flexkv/api/apipb"
	"github.com/flexkv/flexkv/internal/rpcflow"
	"github.com/flexkv/flexkv/multicast/protocol"
	"github.com/flexkv/flexkv/partition"
)

var (
	// ErrClosed is returned by calls on a closed Client.
	ErrClosed = errors.New("client: closed")
	// ErrInconsistent is matched by the error of a transaction whose
	// answers do not agree (destinations report different outcomes) or do
	// not fit the request (an answer for another id or group, missing
	// results), or whose entry group computed other destinations than the
	// client and refused it (it did not run). It points to a bug, or to
	// servers and client with different configurations.
	ErrInconsistent = errors.New("client: inconsistent answers")
	// ErrTooLarge is matched by the error of a call whose answer (or
	// request) was larger than gRPC lets a side receive: the error names the
	// sizes. It is not retried: the same call would be as large.
	ErrTooLarge = errors.New("client: message too large")
	// ErrScanTooLarge is matched by the error of a consistent scan
	// (ScanConsistent) whose answer would pass the server's scan byte
	// bound: it is answered whole or not at all, and the error names the
	// bound. A narrower range or a lower limit fits; Scan pages instead.
	ErrScanTooLarge = errors.New("client: consistent scan past the byte bound")
	// ErrSessionExpired is matched by the error of a write refused because
	// its session expired at the group after an earlier attempt whose
	// outcome the client cannot know: the write may have run once, or not
	// at all; it was not resubmitted (see the package comment).
	ErrSessionExpired = errors.New("client: session expired")
)

// SessionsDefault is the number of sessions, and so of concurrent
// requests, of a Client whose Config.Sessions is 0.
const SessionsDefault = 64

// AttemptTimeoutDefault is the AttemptTimeout of a Config that sets none:
// longer than a server's read barrier may wait (5s), so that a live leader
// answers a read within it, and shorter than a server's bound on a wait
// (server.WaitMaxDefault, 30s): a transaction that takes longer is asked
// for again, with the same id, at the group's next replica, which sends the
// client back to the leader, where the retry waits for the same result. A
// server that ends a wait at its own bound answers DeadlineExceeded, and the
// client asks the same replica again.
const AttemptTimeoutDefault = 10 * time.Second

// Connection backoff: a replica that was down is dialled again within
// reconnectLongest, give or take 20% (gRPC's default grows to 2 minutes,
// which would leave a restarted leader unreachable long after it serves
// again); one attempt at a connection gets connectAttempt at least.
const (
	reconnectFirst   = 20 * time.Millisecond
	reconnectLongest = time.Second
	connectAttempt   = 5 * time.Second
)

// SessionsMax bounds Config.Sessions: each session is one outstanding
// request, which the servers keep until it is answered.
const SessionsMax = 1 << 16

// Config configures a Client.
type Config struct {
	// Endpoints are gRPC addresses (host:port) of any servers of the
	// cluster; the first that answers gives the topology. At least one.
	Endpoints []string
	// Region is the client's region, a region of the cluster's latency
	// matrix: under Skeen a transaction enters at the destination nearest
	// to it, and the home group (which serves a transaction that reads only
	// replicated keys) is the lowest-ranked group in it. Empty, or a
	// region without a group: the lowest-ranked group is home, and Skeen
	// enters at the lowest-ranked destination.
	Region string
	// Sessions is the number of requests in flight at most (0:
	// SessionsDefault); a call waits, up to its context, for a free one.
	Sessions int
	// CertsDir is a certificates directory as `flexkv local` and `flexkv
	// cert` write it (DESIGN 13), for a cluster that runs TLS, as clusters
	// do unless started with --insecure: New loads the cluster CA's
	// ca.crt and User's client.USER.crt and client.USER.key from it, and
	// names the file that is missing. `flexkv local` writes its own to
	// flexkv-data/local/certs, under the directory it runs in.
	CertsDir string
	// User is the user whose client certificate CertsDir holds; empty:
	// UserDefault, root, whose certificate `flexkv local` makes. It needs
	// CertsDir.
	User string
	// TLS is the client's TLS configuration, instead of CertsDir, for a
	// program that builds its own (certs.ClientConfig: a client
	// certificate and the cluster CA).
	TLS *tls.Config
	// Insecure connects in plaintext, to a cluster started with
	// --insecure; it excludes CertsDir and TLS. A Config that gives none of
	// the three connects in plaintext too; set Insecure to say so. When the
	// cluster and the client disagree on TLS, New's error is a
	// TLSMismatchError that says which to set.
	Insecure bool
	// OneEndpoint sends every request to Endpoints[0], whatever group it
	// is for: that server forwards what it cannot serve to the right
	// group's leader (DESIGN 7: any server answers any request), at the
	// cost of one more hop for such a request. For a client that reaches
	// one address only (a load balancer, a tunnel). Without it the client
	// routes itself, to each group's leader, and tells the servers so
	// (apipb.DirectHeader): they answer a misrouted request with the
	// leader or group to send it to, instead of forwarding it.
	OneEndpoint bool
	// DialOptions are added to the options of every connection, after the
	// transport credentials and the fixed flow-control windows
	// (internal/rpcflow), so that they may replace them.
	DialOptions []grpc.DialOption
	// Logger receives retries and redirects at debug level; nil: none.
	Logger *slog.Logger
	// AttemptTimeout bounds one attempt at one replica (0:
	// AttemptTimeoutDefault): past it, while the call's context still
	// runs, the client tries the group's next replica, with the same
	// transaction id. A replica that accepted the connection but does not
	// answer (stalled, cut off from its group before it knows) then costs
	// one attempt, not the whole deadline.
	AttemptTimeout time.Duration
	// WANDelay, when set, emulates the wide-area network between this
	// client and the groups (DESIGN 8, client to group): every request to
	// group (by name) waits WANDelay(group) before it is sent and again
	// once its answer arrives, the one-way delay each way. Benchmarks set
	// it from the latency matrix and the client's region, so that a
	// protocol that makes clients send to a distant group pays for it. It
	// is called once per group, by New.
	WANDelay func(group string) time.Duration
}

// Topology is the cluster as a Client sees it: the configuration the
// servers loaded and what it builds. It is shared: do not modify it.
type Topology struct {
	Config     *partition.ClusterConfig
	Groups     *partition.Topology
	Partitions *partition.PartitionMap
	// Latency is the cluster's latency matrix, nil when it has none.
	Latency *partition.Latency
	// Region is Config.Region of the client; Home its home group.
	Region string
	Home   partition.GroupID
	// Epoch is the epoch of the configuration (DESIGN 14) when it was
	// fetched; 0 from a server older than epochs. Client.Epoch follows
	// the changes since.
	Epoch uint64
}

// Client is a FlexKV client. It is safe for concurrent use. Close it to
// release its connections.
type Client struct {
	log      *slog.Logger
	dialOpts []grpc.DialOption
	view     *Topology
	// epoch is the latest epoch the client knows of; epochRoute, the latest
	// epoch whose topology it has, with which requests are routed
	// (epoch.go).
	epoch      atomic.Uint64
	epochRoute atomic.Pointer[epochRoute]
	// resubmits counts the requests resubmitted for a changed epoch.
	resubmits atomic.Uint64
	// proto is the cluster's protocol, and origin where this client sends
	// from: together they choose each request's entry group (DESIGN 2).
	proto  *protocol.Protocol
	origin protocol.Origin
	// replicas are the gRPC addresses of each group's replicas, by
	// GroupID, in the latest epoch the client learned (epoch.go).
	replicas atomic.Pointer[[][]string]
	// membersEpoch is the epoch of replicas (takeMembers, under membersMu).
	membersMu    sync.Mutex
	membersEpoch uint64
	// membersRefreshed is when refreshMembers last fetched a topology
	// (Unix nanoseconds).
	membersRefreshed atomic.Int64
	// oneEndpoint: every call goes to the one endpoint (Config.OneEndpoint).
	oneEndpoint bool
	// sessions holds a token per free session, free the free sessions
	// themselves, the last released on top (freeMu): a client that makes
	// one call at a time reuses one session, and so opens one server
	// session per group, not one per pool session.
	sessions chan struct{}
	freeMu   sync.Mutex
	free     []*session
	done     chan struct{} // closed by Close

	mu      sync.Mutex
	closed  bool
	conns   map[string]*grpc.ClientConn
	leaders []string // the address that last served a group as leader, or ""
	// wan is the emulated one-way delay to each group, by GroupID (nil:
	// none; Config.WANDelay).
	wan []time.Duration

	// attempt bounds one attempt at one replica (Config.AttemptTimeout).
	attempt time.Duration
	// backoffMin and backoffMax bound the wait between two attempts that
	// must wait (see Client.invoke); tests shorten them.
	backoffMin, backoffMax time.Duration
	// answered, when not nil, is called with a destination's name once
	// its answer is recorded; tests use it to order answers.
	answered func(group string)
}

// session is a transaction id space: one request in flight at a time. Its
// client id at group g is ids[g], a server session opened there, or 0 until
// one is.
type session struct {
	ids []uint64
	seq uint64
}

// New connects to the cluster: it asks the endpoints, in order, for the
// topology, and builds the client's view of it. Connections are made
// lazily; New holds the endpoint's until Close.
func New(ctx context.Context, cfg Config) (*Client, error) {
	if len(cfg.Endpoints) == 0 {
		return nil, errors.New("client: no endpoints")
	}
	if cfg.AttemptTimeout < 0 {
		return nil, fmt.Errorf("client: attempt timeout %s, want > 0 (0: %s)", cfg.AttemptTimeout, AttemptTimeoutDefault)
	}
	n := cfg.Sessions
	switch {
	case n == 0:
		n = SessionsDefault
	case n < 0 || n > SessionsMax:
		return nil, fmt.Errorf("client: %d sessions, want 1..%d (0: %d)", cfg.Sessions, SessionsMax, SessionsDefault)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	creds, secure, err := transportCredentials(cfg)
	if err != nil {
		return nil, err
	}
	c := &Client{
		log: log,
		dialOpts: slices.Concat([]grpc.DialOption{
			grpc.WithTransportCredentials(creds),
			grpc.WithConnectParams(grpc.ConnectParams{
				Backoff:           backoff.Config{BaseDelay: reconnectFirst, Multiplier: 2, Jitter: 0.2, MaxDelay: reconnectLongest},
				MinConnectTimeout: connectAttempt,
			}),
		}, rpcflow.DialOptions(), directOption(cfg.OneEndpoint), cfg.DialOptions),
		sessions:   make(chan struct{}, n),
		done:       make(chan struct{}),
		conns:      make(map[string]*grpc.ClientConn),
		attempt:    cmp.Or(cfg.AttemptTimeout, AttemptTimeoutDefault),
		backoffMin: 10 * time.Millisecond,
		backoffMax: 500 * time.Millisecond,
	}
	view, proto, err := c.fetchTopology(ctx, cfg.Endpoints, secure, cfg.Insecure)
	if err != nil {
		return nil, errors.Join(err, c.Close())
	}
	view.Region = cfg.Region
	view.Home = homeGroup(view.Groups, cfg.Region)
	c.view, c.proto = view, proto
	c.epoch.Store(view.Epoch)
	c.epochRoute.Store(&epochRoute{epoch: view.Epoch, top: view.Groups, pm: view.Partitions})
	// The entry group is measured from the client's region; its home group
	// stands for it only when the region has one (Config.Region).
	c.origin = protocol.Origin{Group: partition.NoGroup, Region: cfg.Region}
	if cfg.Region != "" && view.Groups.Group(view.Home).Region == cfg.Region {
		c.origin.Group = view.Home
	}
	replicas := make([][]string, view.Groups.Len())
	for _, g := range view.Config.Groups {
		id, _ := view.Groups.Lookup(g.Name) // Build checked the names
		for _, r := range g.Replicas {
			replicas[id] = append(replicas[id], r.GRPC)
		}
	}
	if cfg.OneEndpoint {
		c.oneEndpoint = true
		for g := range replicas {
			replicas[g] = []string{cfg.Endpoints[0]}
		}
	}
	c.replicas.Store(&replicas)
	c.membersEpoch = view.Epoch
	c.leaders = make([]string, view.Groups.Len())
	if cfg.WANDelay != nil {
		c.wan = make([]time.Duration, view.Groups.Len())
		for g := range c.wan {
			d := cfg.WANDelay(view.Groups.Name(partition.GroupID(g)))
			if d < 0 {
				return nil, errors.Join(fmt.Errorf("client: WANDelay(%s) = %s, want >= 0", view.Groups.Name(partition.GroupID(g)), d), c.Close())
			}
			c.wan[g] = d
		}
	}
	for range n {
		c.free = append(c.free, &session{ids: make([]uint64, view.Groups.Len())})
		c.sessions <- struct{}{}
	}
	return c, nil
}

// directOption returns the dial option that marks every call of a client
// that routes itself (apipb.DirectHeader), or none for a client that sends
// everything to one endpoint.
func directOption(oneEndpoint bool) []grpc.DialOption {
	if oneEndpoint {
		return nil
	}
	return []grpc.DialOption{grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		return invoker(metadata.AppendToOutgoingContext(ctx, apipb.DirectHeader, "1"), method, req, reply, cc, opts...)
	})}
}

// fetchTopology asks each endpoint in turn for the topology and builds it.
// When none answers and one showed that it disagrees with the client on TLS
// (secure: the client speaks TLS; askedInsecure: Config.Insecure said it
// must not), the error is a TLSMismatchError: no other endpoint of the
// cluster could answer.
func (c *Client) fetchTopology(ctx context.Context, endpoints []string, secure, askedInsecure bool) (*Topology, *protocol.Protocol, error) {
	var errs []error
	var mismatch *TLSMismatchError
	for _, ep := range endpoints {
		conn, err := c.conn(ep)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		resp, err := apipb.NewKVClient(conn).Topology(ctx, &apipb.TopologyRequest{})
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", ep, err))
			if mismatch == nil && TLSMismatch(err, secure) {
				mismatch = &TLSMismatchError{ClusterTLS: !secure, Endpoint: ep, Err: err, insecure: askedInsecure}
			}
			if ctx.Err() != nil {
				break
			}
			continue
		}
		cfg, lat, err := api.ConfigFromProto(resp)
		if err != nil {
			return nil, nil, fmt.Errorf("client: topology from %s: %w", ep, err)
		}
		proto, top, pm, err := protocol.Build(cfg)
		if err == nil {
			// Ranked by the epoch's overlay, with its tree.
			top, err = api.EpochTopology(resp, top)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("client: topology from %s: %w", ep, err)
		}
		return &Topology{Config: cfg, Groups: top, Partitions: pm, Latency: lat, Epoch: resp.GetEpoch()}, proto, nil
	}
	if mismatch != nil {
		return nil, nil, mismatch
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, fmt.Errorf("client: topology: %w (%w)", err, errors.Join(errs...))
	}
	if len(errs) == 1 {
		return nil, nil, fmt.Errorf("client: topology: no endpoint answered: %w", errs[0])
	}
	// The first error is the one to read: the others are most often the
	// same refusal from the other servers of a cluster that is down.
	return nil, nil, fmt.Errorf("client: topology: no endpoint answered (%d tried; the first: %w)", len(errs), errs[0])
}

// homeGroup returns the lowest-ranked group in region, or group 0.
func homeGroup(top *partition.Topology, region string) partition.GroupID {
	for g := range top.Len() {
		if region != "" && top.Group(partition.GroupID(g)).Region == region {
			return partition.GroupID(g)
		}
	}
	return 0
}

// Topology returns the cluster as the client sees it.
func (c *Client) Topology() *Topology { return c.view }

// Close closes the client's connections. Calls in progress fail; later
// calls return ErrClosed. Close is idempotent.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	conns := c.conns
	c.conns = nil
	c.mu.Unlock()
	close(c.done)
	var errs []error
	for _, addr := range slices.Sorted(maps.Keys(conns)) {
		if err := conns[addr].Close(); err != nil {
			errs = append(errs, fmt.Errorf("client: close %s: %w", addr, err))
		}
	}
	return errors.Join(errs...)
}

// conn returns the connection to addr, made on first use.
func (c *Client) conn(addr string) (*grpc.ClientConn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrClosed
	}
	if cc, ok := c.conns[addr]; ok {
		return cc, nil
	}
	cc, err := grpc.NewClient(addr, c.dialOpts...)
	if err != nil {
		return nil, fmt.Errorf("client: connect to %s: %w", addr, err)
	}
	c.conns[addr] = cc
	return cc, nil
}

// acquire takes a free session, waiting up to ctx.
func (c *Client) acquire(ctx context.Context) (*session, error) {
	select {
	case <-c.sessions:
		return c.pop(), nil
	default:
	}
	select {
	case <-c.sessions:
		return c.pop(), nil
	case <-c.done:
		return nil, ErrClosed
	case <-ctx.Done():
		return nil, fmt.Errorf("client: waiting for a free session (%d in use): %w", cap(c.sessions), ctx.Err())
	}
}

// sessionAt returns s's client id at group g, opening a session there
// first if it has none.
func (c *Client) sessionAt(ctx context.Context, s *session, g partition.GroupID) (uint64, error) {
	if id := s.ids[g]; id != 0 {
		return id, nil
	}
	var id uint64
	err := c.invoke(ctx, g, true, "open session", func(ctx context.Context, kv apipb.KVClient, opts ...grpc.CallOption) error {
		r, err := kv.OpenSession(ctx, &apipb.OpenSessionRequest{Group: c.view.Groups.Name(g)}, opts...)
		id = r.GetClientId()
		return err
	})
	if err != nil {
		return 0, err
	}
	if id == 0 {
		return 0, fmt.Errorf("%w: group %s opened session 0", ErrInconsistent, c.view.Groups.Name(g))
	}
	s.ids[g] = id
	return id, nil
}

// outcome tracks whether any attempt of a write may have been accepted:
// only refusals that say the request did not run leave it certain that it
// never ran.
type outcome struct {
	mu    sync.Mutex
	maybe bool // an attempt may have been accepted
}

// attempt records the end of one attempt, with the trailer of its answer.
func (o *outcome) attempt(err error, trailer metadata.MD) {
	if err == nil || refused(err) || (status.Code(err) == codes.Unavailable && len(trailer.Get(apipb.NotRunTrailer)) > 0) {
		return
	}
	o.mu.Lock()
	o.maybe = true
	o.mu.Unlock()
}

func (o *outcome) mayHaveRun() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.maybe
}

// refused reports whether err is a server's refusal of a request that did
// not run: a wrong group or an expired session (FailedPrecondition), bad
// input (InvalidArgument), admission control (ResourceExhausted). A
// follower's Unavailable says so in its trailer (apipb.NotRunTrailer).
func refused(err error) bool {
	switch status.Code(err) {
	case codes.FailedPrecondition, codes.InvalidArgument, codes.ResourceExhausted:
		return true
	default:
		return false
	}
}

// sessionExpired reports whether err is a server's refusal of a request
// whose session it does not know.
func sessionExpired(err error) bool {
	st, ok := status.FromError(err)
	return ok && st.Code() == codes.FailedPrecondition && strings.Contains(st.Message(), apipb.SessionExpiredText)
}

// destinationsDiffer reports whether err is a server's refusal of a
// transaction whose destinations, as the client computed them, are not the
// server's (apipb.DestinationsDifferText): the two configurations differ.
func destinationsDiffer(err error) bool {
	st, ok := status.FromError(err)
	return ok && err != nil && st.Code() == codes.FailedPrecondition && strings.Contains(st.Message(), apipb.DestinationsDifferText)
}

// renewals bounds how often one write opens a new session after its
// session expired: once is enough unless sessions expire as fast as they
// are opened.
const renewals = 3

// release returns s to the pool; it never blocks, the pool having room for
// every session.
func (c *Client) release(s *session) {
	c.freeMu.Lock()
	c.free = append(c.free, s)
	c.freeMu.Unlock()
	c.sessions <- struct{}{}
}

// pop takes the free session on top; the caller holds its token.
func (c *Client) pop() *session {
	c.freeMu.Lock()
	defer c.freeMu.Unlock()
	s := c.free[len(c.free)-1]
	c.free = c.free[:len(c.free)-1]
	return s
}

// leaderOf returns the address to try first at group g: the last known
// leader, else the group's first replica.
func (c *Client) leaderOf(g partition.GroupID) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if a := c.leaders[g]; a != "" {
		return a
	}
	return (*c.replicas.Load())[g][0]
}

func (c *Client) setLeader(g partition.GroupID, addr string) {
	c.mu.Lock()
	c.leaders[g] = addr
	c.mu.Unlock()
}
