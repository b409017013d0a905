package transport

import (
	"context"
	"fmt"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/flexkv/flexkv/internal/testaddr"
	"github.com/flexkv/flexkv/multicast/channel"
	"github.com/flexkv/flexkv/partition"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const (
	testGroups = 3
	testFrom   = partition.GroupID(0) // the transmitting group
	testTo     = partition.GroupID(2) // the fake peer group
)

// waitFor polls cond until it holds, failing the test after a deadline far
// beyond what any of these tests needs on a loaded machine.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// closeSoon closes tr, failing the test with stuck if Close has not
// returned within a bound far beyond what it needs on a loaded machine.
func closeSoon(t testing.TB, tr *Transmitter, stuck string) {
	t.Helper()
	closed := make(chan error, 1)
	go func() { closed <- tr.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Errorf("close: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal(stuck)
	}
}

// dataFrames returns n data frames from testFrom to testTo with seqs
// first, first+1, ..., each with a payload naming its seq; all encode to
// the same size while seqs stay below 128.
func dataFrames(first uint64, n int) []channel.Frame {
	fs := make([]channel.Frame, n)
	for i := range fs {
		seq := first + uint64(i)
		fs[i] = channel.Frame{From: testFrom, To: testTo, Seq: seq, Ack: 7, Payload: fmt.Appendf(nil, "payload %06d", seq)}
	}
	return fs
}

// hintMode says what a follower of a fakeGroup answers.
type hintMode int

const (
	hintLeader  hintMode = iota // the leader's address
	hintNone                    // no hint
	hintForeign                 // an address outside the group
)

// fakeGroup is a peer group of replicas served on 127.0.0.1, one of which
// leads: it accepts frames, which are appended to log. The others answer
// NotLeader.
type fakeGroup struct {
	t     *testing.T
	cfg   ServerConfig
	addrs []string

	mu        sync.Mutex
	leader    int // index of the leading replica
	hint      hintMode
	log       []channel.Frame // frames accepted, over all replicas, in order
	byReplica []int           // frames accepted per replica
	// afterAccept, when set, runs under mu after the leader appended a
	// batch to log.
	afterAccept func(g *fakeGroup)
	// block, when set, is called by the leader before it accepts, outside mu.
	block func(ctx context.Context) error

	servers []*grpc.Server
	serving sync.WaitGroup
}

// newFakeGroup serves n replicas of group testTo; replica leader leads.
func newFakeGroup(t *testing.T, n, leader int, cfg ServerConfig) *fakeGroup {
	t.Helper()
	g := &fakeGroup{t: t, cfg: cfg, leader: leader, byReplica: make([]int, n), servers: make([]*grpc.Server, n)}
	for i := range n {
		// A port of testaddr.Transport, not port 0: restart binds it again,
		// and a port of the ephemeral range can meanwhile be taken as the
		// source port of a connection (testaddr).
		lis, err := net.Listen("tcp", testaddr.Free(t, testaddr.Transport))
		if err != nil {
			t.Fatal(err)
		}
		g.addrs = append(g.addrs, lis.Addr().String())
		g.serve(i, lis)
	}
	t.Cleanup(func() {
		for i := range g.servers {
			g.stop(i)
		}
		g.serving.Wait()
	})
	return g
}

func (g *fakeGroup) serve(i int, lis net.Listener) {
	s := grpc.NewServer()
	if err := Register(s, g.cfg, &fakeReplica{g: g, i: i}); err != nil {
		g.t.Fatal(err)
	}
	g.mu.Lock()
	g.servers[i] = s
	g.mu.Unlock()
	g.serving.Go(func() {
		if err := s.Serve(lis); err != nil {
			g.t.Errorf("replica %d: serve: %v", i, err)
		}
	})
}

// stop stops replica i's server, closing its connections.
func (g *fakeGroup) stop(i int) {
	g.mu.Lock()
	s := g.servers[i]
	g.servers[i] = nil
	g.mu.Unlock()
	if s != nil {
		s.Stop()
	}
}

// restart serves replica i again, on its address.
func (g *fakeGroup) restart(i int) {
	lis, err := net.Listen("tcp", g.addrs[i])
	if err != nil {
		g.t.Fatalf("replica %d: listen again on %s: %v", i, g.addrs[i], err)
	}
	g.serve(i, lis)
}

func (g *fakeGroup) logLen() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.log)
}

func (g *fakeGroup) seqs() []uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	seqs := make([]uint64, len(g.log))
	for i, f := range g.log {
		seqs[i] = f.Seq
	}
	return seqs
}

func (g *fakeGroup) accepted(i int) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.byReplica[i]
}

type fakeReplica struct {
	g *fakeGroup
	i int
}

func (r *fakeReplica) Deliver(ctx context.Context, from partition.GroupID, frames []channel.Frame) (string, error) {
	g := r.g
	if from != testFrom {
		g.t.Errorf("replica %d: frames from group %d, want %d", r.i, from, testFrom)
	}
	g.mu.Lock()
	leader, block := g.leader == r.i, g.block
	g.mu.Unlock()
	if !leader {
		return g.followerHint(), ErrNotLeader
	}
	if block != nil {
		if err := block(ctx); err != nil {
			return "", err
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.leader != r.i { // deposed while blocked
		return g.hintLocked(), ErrNotLeader
	}
	g.log = append(g.log, frames...)
	g.byReplica[r.i] += len(frames)
	if g.afterAccept != nil {
		g.afterAccept(g)
	}
	return "", nil
}

func (g *fakeGroup) followerHint() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.hintLocked()
}

func (g *fakeGroup) hintLocked() string {
	switch g.hint {
	case hintLeader:
		return g.addrs[g.leader]
	case hintNone:
		return ""
	case hintForeign:
		return "192.0.2.1:1" // TEST-NET-1: never a replica of the group
	default:
		panic(fmt.Sprintf("fake group: hint mode %d", g.hint))
	}
}

// serverConfig is the receiving end's configuration of the fake group.
func serverConfig() ServerConfig {
	return ServerConfig{Self: testTo, Groups: testGroups, FramesMax: 1024, BytesMax: 1 << 20}
}

// transmitterConfig sends from testFrom to the replicas addrs of testTo.
func transmitterConfig(addrs []string) TransmitterConfig {
	return TransmitterConfig{
		Self:        testFrom,
		Peers:       map[partition.GroupID][]string{testTo: addrs},
		BatchFrames: 16,
		BatchBytes:  64 << 10,
		QueueFrames: 4096,
		QueueBytes:  1 << 20,
		RPCTimeout:  10 * time.Second,
		BackoffMin:  time.Millisecond,
		BackoffMax:  20 * time.Millisecond,
		DialOptions: []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())},
	}
}

func newTransmitter(t testing.TB, cfg TransmitterConfig) *Transmitter {
	t.Helper()
	tr, err := NewTransmitter(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := tr.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return tr
}

// sendAll sends frames in chunks of chunk frames.
func sendAll(t testing.TB, tr *Transmitter, frames []channel.Frame, chunk int) {
	t.Helper()
	for len(frames) > 0 {
		n := min(chunk, len(frames))
		if err := tr.Send(testTo, frames[:n]); err != nil {
			t.Fatalf("send: %v", err)
		}
		frames = frames[n:]
	}
}

// seqRange returns first, first+1, ..., last.
func seqRange(first, last uint64) []uint64 {
	var s []uint64
	for q := first; q <= last; q++ {
		s = append(s, q)
	}
	return s
}

// waitSent waits until tr counts n frames as delivered: the receiver has
// them before the transmitter reads the reply.
func waitSent(t testing.TB, tr *Transmitter, n uint64) {
	t.Helper()
	waitFor(t, "the transmitter's count of delivered frames", func() bool { return tr.Stats().Frames >= n })
}

func checkSeqs(t *testing.T, got, want []uint64) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Errorf("seqs received, in order:\n got %v\nwant %v", got, want)
	}
}
