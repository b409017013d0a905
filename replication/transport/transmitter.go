package transport

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/flexkv/flexkv/internal/rpcflow"
	"github.com/flexkv/flexkv/multicast/channel"
	"github.com/flexkv/flexkv/partition"
	"github.com/flexkv/flexkv/replication/transport/transportpb"
)

// ErrClosed is returned by Send after Close.
var ErrClosed = errors.New("transport: transmitter closed")

// connectAttemptTimeout is the least time given to one attempt at opening a
// connection, and linkUserTimeout how long data sent on one may go
// unacknowledged before the kernel closes it (TCP_USER_TIMEOUT, Linux).
// Both are long for a WAN handshake or round trip, and short against a
// partition: a link cut for a while is closed and reopened, with
// BackoffMax between attempts, rather than left open while TCP
// retransmits into the cut at a doubling interval, which delayed the
// first frame after a 15 s cut by 13-15 s.
const (
	connectAttemptTimeout = 5 * time.Second
	linkUserTimeout       = 5 * time.Second
)

// TransmitterConfig configures the sending end of the links of one group.
type TransmitterConfig struct {
	Self partition.GroupID // the group whose leader transmits
	// Peers lists, for every group Self sends to, the gRPC address
	// (host:port) of each of its replicas. A NotLeader hint naming an
	// address outside its group's list is not followed: the next replica of
	// the list is tried instead, so that connections stay those configured.
	Peers map[partition.GroupID][]string
	// BatchFrames and BatchBytes bound one call: its number of frames and
	// the sum of their encoded sizes. They must not exceed the receivers'
	// ServerConfig.FramesMax and BytesMax: a receiver refuses a larger
	// batch, and the transmitter drops a refused batch rather than retry it.
	// Send refuses a frame whose encoding exceeds BatchBytes.
	BatchFrames int
	BatchBytes  int
	// QueueFrames and QueueBytes bound the queue of each peer group, not
	// counting the batch in flight. Send drops the frames that do not fit.
	QueueFrames int
	QueueBytes  int
	// RPCTimeout bounds one call.
	RPCTimeout time.Duration
	// After a failed call, or after every replica of the peer group answered
	// NotLeader in turn, the transmitter waits before the next call: at
	// first BackoffMin, doubling after each failure up to BackoffMax, and
	// jittered within the upper half of that span. A delivered batch resets
	// it. BackoffMin and BackoffMax also bound gRPC's own waits between
	// connection attempts, unless DialOptions set other ones.
	BackoffMin time.Duration
	BackoffMax time.Duration
	// DialOptions are passed to grpc.NewClient for every replica; they must
	// choose the transport credentials (grpc.WithTransportCredentials).
	DialOptions []grpc.DialOption

	// Delays emulate a wide-area network (DESIGN 8): a frame queued for a
	// peer group listed here leaves no earlier than that one-way delay
	// after Send took it. Groups not listed, and a zero delay, are not
	// delayed. Frames waiting out their delay stay in the peer group's
	// queue: QueueFrames and QueueBytes then bound what is in flight on the
	// emulated link, as a window does on a real one, and must cover its
	// rate times its delay if nothing is to be dropped.
	Delays map[partition.GroupID]time.Duration
	// Jitter, from 0 to 1, draws each Send's delay uniformly from
	// [d(1-Jitter), d(1+Jitter)] around the configured d; the frames' due
	// time is then raised, where needed, to that of the frames queued
	// before them, so that they still leave in order (DESIGN 8). The draws
	// come from a generator seeded with the two groups of the link.
	Jitter float64
}

// Validate checks c.
func (c TransmitterConfig) Validate() error {
	switch {
	case c.Self < 0 || c.Self >= partition.GroupsMax:
		return fmt.Errorf("transport: transmitter config: self %d out of range [0,%d)", c.Self, partition.GroupsMax)
	case c.BatchFrames < 1:
		return fmt.Errorf("transport: transmitter config: batch frames %d, want at least 1", c.BatchFrames)
	case c.BatchBytes < 1:
		return fmt.Errorf("transport: transmitter config: batch bytes %d, want at least 1", c.BatchBytes)
	case c.QueueFrames < 1:
		return fmt.Errorf("transport: transmitter config: queue frames %d, want at least 1", c.QueueFrames)
	case c.QueueBytes < c.BatchBytes:
		return fmt.Errorf("transport: transmitter config: queue bytes %d below batch bytes %d", c.QueueBytes, c.BatchBytes)
	case c.RPCTimeout <= 0:
		return fmt.Errorf("transport: transmitter config: rpc timeout %v, want more than 0", c.RPCTimeout)
	case c.BackoffMin <= 0:
		return fmt.Errorf("transport: transmitter config: backoff min %v, want more than 0", c.BackoffMin)
	case c.BackoffMax < c.BackoffMin:
		return fmt.Errorf("transport: transmitter config: backoff max %v below backoff min %v", c.BackoffMax, c.BackoffMin)
	}
	for _, g := range sortedGroups(c.Peers) {
		addrs := c.Peers[g]
		switch {
		case g < 0 || g >= partition.GroupsMax:
			return fmt.Errorf("transport: transmitter config: peer group %d out of range [0,%d)", g, partition.GroupsMax)
		case g == c.Self:
			return fmt.Errorf("transport: transmitter config: peer group %d is self", g)
		case len(addrs) == 0:
			return fmt.Errorf("transport: transmitter config: peer group %d has no address", g)
		}
		if d := c.Delays[g]; d < 0 {
			return fmt.Errorf("transport: transmitter config: peer group %d: delay %v, want at least 0", g, d)
		}
		for i, a := range addrs {
			if a == "" {
				return fmt.Errorf("transport: transmitter config: peer group %d: empty address", g)
			}
			if slices.Contains(addrs[:i], a) {
				return fmt.Errorf("transport: transmitter config: peer group %d: address %q listed twice", g, a)
			}
		}
	}
	for _, g := range slices.Sorted(maps.Keys(c.Delays)) {
		if _, ok := c.Peers[g]; !ok {
			return fmt.Errorf("transport: transmitter config: delay for group %d, which is not a peer group", g)
		}
	}
	if !(c.Jitter >= 0 && c.Jitter <= 1) { // NaN fails too
		return fmt.Errorf("transport: transmitter config: jitter %v, want from 0 to 1", c.Jitter)
	}
	return nil
}

func sortedGroups(m map[partition.GroupID][]string) []partition.GroupID {
	gs := make([]partition.GroupID, 0, len(m))
	for g := range m {
		gs = append(gs, g)
	}
	slices.Sort(gs)
	return gs
}

// Stats counts what a transmitter did, over all its peer groups.
type Stats struct {
	Batches   uint64 // batches a leader accepted
	Frames    uint64 // frames in those batches
	Drops     uint64 // frames dropped by Send: the peer group's queue was full
	Refused   uint64 // frames dropped because a receiver refused their batch as invalid or too large
	Redirects uint64 // NotLeader answers
	Errors    uint64 // failed calls: transport errors, timeouts, errors of the receiver, refusals
	Abandoned uint64 // batches given up after a Reset, unsent or never accepted
}

// Transmitter sends frames to the leaders of other groups: one queue and
// one goroutine per peer group, from NewTransmitter to Close. Its methods
// are safe for concurrent use.
//
// Within a peer group, frames leave in the order Send queued them: a batch
// is retried until a leader accepts it (or refuses it, or it is abandoned at
// Close) before the next one is taken, and calls are made one at a time.
// The receiver may still see a frame twice, or after a later one, when a
// call that timed out is applied after its retry; the channel layer drops
// the duplicate or holds the later frame back (DESIGN 4.2).
//
// The emulated WAN (TransmitterConfig.Delays) is a delay line in front of
// the calls, not a wait inside them: Send stamps its frames with the time
// they are due at the receiver, and the peer's goroutine takes the frames
// that are due and calls at once. On the network under the emulation (one
// host, or one LAN) a call answers quickly, so batches queued a moment
// apart are delivered a moment apart, one delay after they were queued: the
// link carries many batches in flight, as a pipelined stream over a real
// WAN does, rather than one per round trip (which a wait before each call
// would give). The answer's own way back is not emulated where nothing
// waits for it: the channel layer's acknowledgements travel as frames of
// the other direction, delayed by the other group's transmitter. Where the
// transmitter does wait for an answer, before it retries a batch a leader
// did not accept, the retry waits a round trip (two delays) more: the
// answer's way back and the retry's way there.
type Transmitter struct {
	cfg    TransmitterConfig
	opts   []grpc.DialOption           // of every connection, SetPeers' too
	peers  map[partition.GroupID]*peer // read-only after NewTransmitter
	cancel context.CancelFunc
	wg     sync.WaitGroup
	closed atomic.Bool
	once   sync.Once
}

// NewTransmitter validates cfg, prepares a connection to every replica of
// every peer group (connecting on first use) and starts one goroutine per
// peer group. Close stops them.
func NewTransmitter(cfg TransmitterConfig) (*Transmitter, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	// The caller keeps its maps and slices; the transmitter reads its own.
	peers := make(map[partition.GroupID][]string, len(cfg.Peers))
	for _, g := range sortedGroups(cfg.Peers) {
		peers[g] = slices.Clone(cfg.Peers[g])
	}
	cfg.Peers = peers
	cfg.Delays = maps.Clone(cfg.Delays)
	t := &Transmitter{cfg: cfg, peers: make(map[partition.GroupID]*peer, len(cfg.Peers))}
	epoch := time.Now()
	opts := slices.Concat([]grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
		Backoff: backoff.Config{
			BaseDelay:  cfg.BackoffMin,
			Multiplier: 2,
			Jitter:     0.2,
			MaxDelay:   cfg.BackoffMax,
		},
		MinConnectTimeout: connectAttemptTimeout,
	}), grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
		d := net.Dialer{Control: userTimeoutControl(linkUserTimeout)}
		return d.DialContext(ctx, "tcp", addr)
	})}, rpcflow.DialOptions(), cfg.DialOptions)
	t.opts = opts
	groups := sortedGroups(cfg.Peers)
	for _, g := range groups {
		p := &peer{
			opts:  opts,
			cfg:   &t.cfg,
			group: g,
			addrs: cfg.Peers[g],
			queue: make([][]byte, cfg.QueueFrames),
			wake:  make(chan struct{}, 1),
			delay: cfg.Delays[g],
			epoch: epoch,
		}
		if p.delay > 0 {
			p.due = make([]time.Duration, cfg.QueueFrames)
			if cfg.Jitter > 0 {
				p.jitter = rand.New(rand.NewPCG(uint64(cfg.Self), uint64(g)))
			}
		}
		t.peers[g] = p
		for _, a := range p.addrs {
			conn, err := grpc.NewClient(a, opts...)
			if err != nil {
				err = fmt.Errorf("transport: peer group %d replica %s: %w", g, a, err)
				return nil, errors.Join(err, t.closeConns())
			}
			p.conns = append(p.conns, conn)
			p.clients = append(p.clients, transportpb.NewGroupChannelClient(conn))
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.cancel = cancel
	for _, g := range groups {
		p := t.peers[g]
		t.wg.Go(func() { p.run(ctx) })
	}
	return t, nil
}

// Send queues frames for the leader of group to, in order, without
// blocking. Every frame must be from Self to to, and encode within
// BatchBytes; otherwise Send returns an error and queues none of them.
// Frames that do not fit in the peer group's queue are dropped and counted
// in Stats.Drops, the first ones kept: the channel layer sends them again.
// Only the frames that fit are encoded, so that offering a whole outbox to
// a peer that is not draining its queue costs little. The transmitter
// keeps no reference to the frames.
func (t *Transmitter) Send(to partition.GroupID, frames []channel.Frame) error {
	if t.closed.Load() {
		return fmt.Errorf("transport: send to group %d: %w", to, ErrClosed)
	}
	p, ok := t.peers[to]
	if !ok {
		return fmt.Errorf("transport: send to group %d: not a peer group of group %d", to, t.cfg.Self)
	}
	for _, f := range frames {
		if f.From != t.cfg.Self || f.To != to {
			return fmt.Errorf("transport: send to group %d: frame %s is not from group %d to group %d", to, f, t.cfg.Self, to)
		}
		if n := channel.FrameSize(f); n > t.cfg.BatchBytes {
			return fmt.Errorf("transport: send to group %d: frame %s encodes to %d bytes, more than batch bytes %d", to, f, n, t.cfg.BatchBytes)
		}
	}
	// Meanwhile the queue can only drain, unless another Send fills it;
	// enqueue then drops what no longer fits.
	roomFrames, roomBytes := p.room()
	fit, size := 0, 0
	for fit < len(frames) && fit < roomFrames {
		n := channel.FrameSize(frames[fit])
		if size+n > roomBytes {
			break
		}
		size += n
		fit++
	}
	// One buffer for all the encodings: a frame costs no allocation of its own.
	buf := make([]byte, 0, size)
	encoded := make([][]byte, fit)
	for i, f := range frames[:fit] {
		start := len(buf)
		buf = channel.AppendFrame(buf, f)
		encoded[i] = buf[start:len(buf):len(buf)]
	}
	p.enqueue(encoded, len(frames)-fit)
	return nil
}

// Reset drops every frame queued for every peer group and abandons the
// batches in flight after their current call: a replica that stopped
// leading has nothing left to send (its successor resends the group's
// outbox), and frames it kept would only reach the other groups late, as
// duplicates. Frames sent after Reset go out as usual.
func (t *Transmitter) Reset() {
	//flexkv:unordered each peer is reset on its own.
	for _, p := range t.peers {
		p.reset()
	}
}

// SetPeers replaces the addresses of the replicas of peer group g: its
// members changed (DESIGN 14). The peer's goroutine takes them before its
// next call: it keeps the connections to the addresses still listed, dials
// the new ones (on first use) and closes the others. The batch in flight is
// not lost: it goes to the new replicas.
func (t *Transmitter) SetPeers(g partition.GroupID, addrs []string) error {
	p, ok := t.peers[g]
	if !ok {
		return fmt.Errorf("transport: set peers: group %d is not a peer group", g)
	}
	if len(addrs) == 0 {
		return fmt.Errorf("transport: set peers: group %d: no address", g)
	}
	for i, a := range addrs {
		if a == "" || slices.Contains(addrs[:i], a) {
			return fmt.Errorf("transport: set peers: group %d: address %q empty or listed twice", g, a)
		}
	}
	next := slices.Clone(addrs)
	p.next.Store(&next)
	return nil
}

// Peers returns the addresses the transmitter sends to group g's replicas
// at: the latest SetPeers gave, else the configured ones.
func (t *Transmitter) Peers(g partition.GroupID) []string {
	p, ok := t.peers[g]
	if !ok {
		return nil
	}
	if next := p.next.Load(); next != nil {
		return slices.Clone(*next)
	}
	return slices.Clone(t.cfg.Peers[g])
}

// Stats returns the counters summed over all peer groups.
func (t *Transmitter) Stats() Stats {
	var s Stats
	//flexkv:unordered sums of counters do not depend on the order.
	for _, p := range t.peers {
		s.Batches += p.batches.Load()
		s.Frames += p.frames.Load()
		s.Drops += p.drops.Load()
		s.Refused += p.refused.Load()
		s.Redirects += p.redirects.Load()
		s.Errors += p.errors.Load()
		s.Abandoned += p.abandoned.Load()
	}
	return s
}

// Close stops the goroutines, abandoning the frames still queued and the
// calls in flight, and closes the connections. Later calls do nothing.
func (t *Transmitter) Close() error {
	var err error
	t.once.Do(func() {
		t.closed.Store(true)
		t.cancel()
		t.wg.Wait()
		err = t.closeConns()
	})
	return err
}

func (t *Transmitter) closeConns() error {
	var errs []error
	for _, g := range sortedGroups(t.cfg.Peers) {
		p, ok := t.peers[g]
		if !ok {
			continue
		}
		for i, conn := range p.conns {
			if err := conn.Close(); err != nil {
				errs = append(errs, fmt.Errorf("transport: close connection to group %d replica %s: %w", g, p.addrs[i], err))
			}
		}
	}
	return errors.Join(errs...)
}

// peer is the sending state for one peer group.
type peer struct {
	cfg   *TransmitterConfig
	opts  []grpc.DialOption
	group partition.GroupID
	// next holds the addresses of SetPeers until the goroutine takes them
	// (refresh); addrs, conns and clients are the goroutine's.
	next    atomic.Pointer[[]string]
	addrs   []string
	conns   []*grpc.ClientConn
	clients []transportpb.GroupChannelClient
	wake    chan struct{} // capacity 1: something was queued
	delay   time.Duration // one-way delay of the emulated link; 0: none
	// epoch is the transmitter's start: due times are offsets from it, read
	// on the monotonic clock, so that a step of the wall clock moves none.
	epoch time.Time

	// resets counts Reset calls: a batch taken before the last one is
	// abandoned.
	resets atomic.Uint64

	mu         sync.Mutex
	queue      [][]byte // a ring of cfg.QueueFrames encoded frames
	head, n    int
	queueBytes int
	// With a delay: due[i] is when queue[i] may leave, never before the
	// due time of the frame ahead of it (dueLast, when queued); jitter
	// draws the spread of each Send's delay (nil without jitter).
	due     []time.Duration
	dueLast time.Duration
	jitter  *rand.Rand

	// Owned by the goroutine of run.
	leader   int // index in addrs of the replica believed to lead
	failures int // failed rounds since the last delivered batch; drives the backoff

	batches, frames, drops, refused, redirects, errors, abandoned atomic.Uint64
}

// room returns how many frames, and bytes, the queue has room for.
func (p *peer) room() (frames, bytes int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.queue) - p.n, p.cfg.QueueBytes - p.queueBytes
}

// enqueue appends what fits of frames to the queue and drops the rest,
// counting those and the skipped frames that were not even encoded.
func (p *peer) enqueue(frames [][]byte, skipped int) {
	p.mu.Lock()
	var due time.Duration
	if p.delay > 0 {
		// FIFO: never due before a frame queued earlier, whatever the
		// jitter drew.
		due = max(time.Since(p.epoch)+p.jittered(), p.dueLast)
	}
	kept := 0
	for _, f := range frames {
		if p.n == len(p.queue) || p.queueBytes+len(f) > p.cfg.QueueBytes {
			break
		}
		i := (p.head + p.n) % len(p.queue)
		p.queue[i] = f
		if p.due != nil {
			p.due[i] = due
		}
		p.n++
		p.queueBytes += len(f)
		kept++
	}
	if kept > 0 {
		p.dueLast = due
	}
	p.mu.Unlock()
	if dropped := len(frames) - kept + skipped; dropped > 0 {
		p.drops.Add(uint64(dropped))
	}
	if kept > 0 {
		select {
		case p.wake <- struct{}{}:
		default: // a wake-up is already pending
		}
	}
}

// reset empties the queue (see Transmitter.Reset).
func (p *peer) reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.resets.Add(1)
	clear(p.queue)
	p.head, p.n, p.queueBytes, p.dueLast = 0, 0, 0, 0
}

// jittered returns the delay of the frames of one Send (p.mu held).
func (p *peer) jittered() time.Duration {
	if p.jitter == nil {
		return p.delay
	}
	spread := p.cfg.Jitter * (2*p.jitter.Float64() - 1) // in [-Jitter, Jitter)
	return time.Duration(math.Round(float64(p.delay) * (1 + spread)))
}

// take moves the next batch from the head of the queue to batch: at least
// one frame, at most cfg.BatchFrames frames and cfg.BatchBytes bytes
// (Send refuses a frame larger than that), of the frames due at now. When
// frames are queued but none is due, it returns no batch and how long until
// the first is.
func (p *peer) take(batch [][]byte, now time.Duration) ([][]byte, time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	size := 0
	for p.n > 0 && len(batch) < p.cfg.BatchFrames {
		if p.due != nil && p.due[p.head] > now {
			if len(batch) == 0 {
				return batch, p.due[p.head] - now
			}
			break
		}
		f := p.queue[p.head]
		if len(batch) > 0 && size+len(f) > p.cfg.BatchBytes {
			break
		}
		batch = append(batch, f)
		size += len(f)
		p.queue[p.head] = nil
		p.head = (p.head + 1) % len(p.queue)
		p.n--
		p.queueBytes -= len(f)
	}
	return batch, 0
}

// run drains the queue until ctx ends.
func (p *peer) run(ctx context.Context) {
	batch := make([][]byte, 0, p.cfg.BatchFrames)
	for {
		var wait time.Duration
		gen := p.resets.Load()
		batch, wait = p.take(batch[:0], time.Since(p.epoch))
		if len(batch) == 0 {
			if wait > 0 {
				// Frames queued later are due later: only the head's due
				// time, or the end, needs waking for.
				if !sleep(ctx, wait) {
					return
				}
				continue
			}
			select {
			case <-p.wake:
				continue
			case <-ctx.Done():
				return
			}
		}
		if !p.transmit(ctx, batch, gen) {
			return
		}
		clear(batch)
	}
}

// transmit calls the peer group's leader with batch until one accepts it
// or refuses it, or a Reset since gen abandons it. It returns false when
// ctx ended first.
func (p *peer) transmit(ctx context.Context, batch [][]byte, gen uint64) bool {
	req := &transportpb.DeliverRequest{
		FromGroup: uint32(p.cfg.Self),
		ToGroup:   uint32(p.group),
		Frames:    batch,
	}
	redirects := 0 // NotLeader answers in a row
	for {
		if p.resets.Load() != gen {
			p.abandoned.Add(1)
			return true
		}
		reply, err := p.call(ctx, req)
		switch {
		case ctx.Err() != nil:
			return false
		case err == nil && reply.GetAccepted():
			p.batches.Add(1)
			p.frames.Add(uint64(len(batch)))
			p.failures = 0
			return true
		case err == nil:
			p.redirects.Add(1)
			p.follow(reply.GetLeaderHint())
			if redirects++; redirects < len(p.addrs) {
				// The emulated answer's way back and the retry's way there.
				if !sleep(ctx, 2*p.delay) {
					return false
				}
				continue
			}
			// Every replica in turn said it does not lead: an election is
			// under way, or the hints are stale. Wait for it to settle.
			redirects = 0
		case refused(err):
			// Retrying cannot succeed: the batch breaks the receiver's
			// bounds or rules. Drop it; the channel layer resends its
			// frames, and the receiver's error names the problem.
			p.errors.Add(1)
			p.refused.Add(uint64(len(batch)))
			return true
		default:
			p.errors.Add(1)
			p.leader = (p.leader + 1) % len(p.addrs)
		}
		if !p.backoff(ctx) {
			return false
		}
	}
}

// refresh takes the addresses of SetPeers, if new ones came: the
// connections to addresses kept stay, the others close, the new ones are
// made; the leader guess stays on its address if it is kept.
func (p *peer) refresh() {
	next := p.next.Load()
	if next == nil || slices.Equal(*next, p.addrs) {
		return
	}
	leader := p.addrs[p.leader]
	var addrs []string
	var conns []*grpc.ClientConn
	var clients []transportpb.GroupChannelClient
	for _, a := range *next {
		if i := slices.Index(p.addrs, a); i >= 0 {
			addrs, conns, clients = append(addrs, a), append(conns, p.conns[i]), append(clients, p.clients[i])
			continue
		}
		conn, err := grpc.NewClient(a, p.opts...)
		if err != nil {
			// SetPeers checked the address; a client that cannot even be
			// made is left out, and the others carry the group's frames.
			continue
		}
		addrs, conns, clients = append(addrs, a), append(conns, conn), append(clients, transportpb.NewGroupChannelClient(conn))
	}
	if len(conns) == 0 {
		return
	}
	for i, a := range p.addrs {
		if !slices.Contains(addrs, a) {
			_ = p.conns[i].Close()
		}
	}
	p.addrs, p.conns, p.clients = addrs, conns, clients
	p.leader = max(slices.Index(p.addrs, leader), 0)
}

func (p *peer) call(ctx context.Context, req *transportpb.DeliverRequest) (*transportpb.DeliverReply, error) {
	p.refresh()
	ctx, cancel := context.WithTimeout(ctx, p.cfg.RPCTimeout)
	defer cancel()
	return p.clients[p.leader].Deliver(ctx, req)
}

// follow moves the leader guess to hint when it names a replica of the
// group, and to the next replica otherwise.
func (p *peer) follow(hint string) {
	if i := slices.Index(p.addrs, hint); hint != "" && i >= 0 {
		p.leader = i
		return
	}
	p.leader = (p.leader + 1) % len(p.addrs)
}

// backoff waits before the next call, longer after each failure, plus a
// round trip of the emulated link (the failure's way back, the retry's way
// there), and returns false if ctx ended first.
func (p *peer) backoff(ctx context.Context) bool {
	d := p.cfg.BackoffMin
	for range p.failures {
		if d > p.cfg.BackoffMax/2 {
			d = p.cfg.BackoffMax
			break
		}
		d *= 2
	}
	p.failures++
	// Jitter, so that the transmitters of several groups that lost the same
	// leader do not call its successor in step.
	d = d/2 + rand.N(d/2+1)
	return sleep(ctx, d+2*p.delay)
}

// sleep waits for d and returns true, or returns false if ctx ends first.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// refused reports whether err is a receiver's refusal of the batch itself.
func refused(err error) bool {
	switch status.Code(err) {
	case codes.InvalidArgument, codes.ResourceExhausted:
		return true
	default:
		return false
	}
}
