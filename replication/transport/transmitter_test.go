package transport

import (
	"context"
	"errors"
	"math"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/flexkv/flexkv/multicast/channel"
	"github.com/flexkv/flexkv/partition"
)

func TestTransmitterDeliversInOrder(t *testing.T) {
	// Replica 1 leads; the transmitter first calls replica 0, which
	// redirects it once.
	g := newFakeGroup(t, 3, 1, serverConfig())
	tr := newTransmitter(t, transmitterConfig(g.addrs))
	const n = 1000
	sendAll(t, tr, dataFrames(1, n), 20)
	waitFor(t, "every frame at the leader", func() bool { return g.logLen() >= n })

	waitSent(t, tr, n)
	checkSeqs(t, g.seqs(), seqRange(1, n))
	g.mu.Lock()
	for i, f := range g.log {
		if want := dataFrames(f.Seq, 1)[0]; f.From != want.From || f.To != want.To || f.Ack != want.Ack || string(f.Payload) != string(want.Payload) {
			t.Errorf("frame %d received as %s %q, want %s %q", i, f, f.Payload, want, want.Payload)
			break
		}
	}
	g.mu.Unlock()
	if got := g.accepted(1); got != n {
		t.Errorf("leader accepted %d frames, want %d", got, n)
	}
	s := tr.Stats()
	if s.Frames != n || s.Drops != 0 || s.Refused != 0 || s.Errors != 0 || s.Redirects != 1 {
		t.Errorf("stats %+v, want %d frames, 1 redirect, no drop, refusal or error", s, n)
	}
	if s.Batches < n/16 {
		t.Errorf("%d batches for %d frames of at most 16 a batch", s.Batches, n)
	}
}

func TestTransmitterFollowsLeaderChange(t *testing.T) {
	tests := []struct {
		name          string
		hint          hintMode
		wantRedirects uint64 // the first replica leads at first
	}{
		// Replica 0 names replica 2 at once.
		{"hint", hintLeader, 1},
		// Replica 0, then 1, say they do not lead; 2 is tried next.
		{"no hint", hintNone, 2},
		// A hint outside the group is not followed.
		{"foreign hint", hintForeign, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newFakeGroup(t, 3, 0, serverConfig())
			g.hint = tt.hint
			// Mid-stream, once 300 frames are in, replica 2 takes over.
			g.afterAccept = func(g *fakeGroup) {
				if len(g.log) >= 300 {
					g.leader = 2
				}
			}
			tr := newTransmitter(t, transmitterConfig(g.addrs))
			const n = 1000
			sendAll(t, tr, dataFrames(1, n), 10)
			waitFor(t, "every frame at a leader", func() bool { return g.logLen() >= n })

			waitSent(t, tr, n)
			checkSeqs(t, g.seqs(), seqRange(1, n))
			if got := g.accepted(0); got < 300 || got >= n {
				t.Errorf("first leader accepted %d frames, want [300,%d)", got, n)
			}
			if got, want := g.accepted(2), n-g.accepted(0); got != want {
				t.Errorf("second leader accepted %d frames, want the other %d", got, want)
			}
			s := tr.Stats()
			if s.Redirects != tt.wantRedirects || s.Errors != 0 || s.Frames != n {
				t.Errorf("stats %+v, want %d redirects, no error, %d frames", s, tt.wantRedirects, n)
			}
		})
	}
}

func TestTransmitterBacksOffWithoutLeader(t *testing.T) {
	// No replica leads for a while (an election): the transmitter goes
	// round the replicas, backs off, and delivers once one leads.
	g := newFakeGroup(t, 3, 0, serverConfig())
	g.hint = hintNone
	g.leader = -1
	tr := newTransmitter(t, transmitterConfig(g.addrs))
	sendAll(t, tr, dataFrames(1, 5), 5)
	waitFor(t, "two rounds of NotLeader answers", func() bool { return tr.Stats().Redirects >= 6 })
	g.mu.Lock()
	g.leader = 1
	g.mu.Unlock()
	waitFor(t, "the frames at the new leader", func() bool { return g.logLen() >= 5 })
	checkSeqs(t, g.seqs(), seqRange(1, 5))
	if got := g.accepted(1); got != 5 {
		t.Errorf("replica 1 accepted %d frames, want 5", got)
	}
	if s := tr.Stats(); s.Errors != 0 {
		t.Errorf("stats %+v, want no error: NotLeader answers are not failures", s)
	}
}

// TestTransmitterReset: a replica that stops leading resets its
// transmitter: what it had queued or in flight is dropped, not delivered
// late, and what is sent afterwards goes out.
func TestTransmitterReset(t *testing.T) {
	g := newFakeGroup(t, 3, 0, serverConfig())
	g.hint = hintNone
	g.leader = -1
	tr := newTransmitter(t, transmitterConfig(g.addrs))
	sendAll(t, tr, dataFrames(1, 5), 5)
	waitFor(t, "the batch retried without a leader", func() bool { return tr.Stats().Redirects >= 3 })
	tr.Reset()
	// Reset abandons the batch after its current call: that call must end
	// (refused: no leader yet) before there is a leader, or it would carry
	// frames 1-5 there.
	waitFor(t, "the batch abandoned", func() bool { return tr.Stats().Abandoned == 1 })
	g.mu.Lock()
	g.leader = 1
	g.mu.Unlock()
	sendAll(t, tr, dataFrames(6, 2), 2)
	waitFor(t, "the frames sent after the reset", func() bool { return g.logLen() >= 2 })
	checkSeqs(t, g.seqs(), seqRange(6, 7))
}

func TestTransmitterReconnectsAfterRestart(t *testing.T) {
	g := newFakeGroup(t, 3, 0, serverConfig())
	tr := newTransmitter(t, transmitterConfig(g.addrs))
	sendAll(t, tr, dataFrames(1, 100), 10)
	// Wait for the transmitter to see the replies too: a batch whose reply
	// the stop cuts off is sent again, and arrives twice.
	waitSent(t, tr, 100)

	// The leader's server goes away; the others keep naming it. The
	// transmitter keeps trying, with errors, until it is back.
	g.stop(0)
	sendAll(t, tr, dataFrames(101, 100), 10)
	waitFor(t, "calls failing on the stopped leader", func() bool { return tr.Stats().Errors >= 3 })
	if got := g.logLen(); got != 100 {
		t.Fatalf("%d frames received while the leader was down, want 100", got)
	}
	g.restart(0)
	waitFor(t, "every frame at the restarted leader", func() bool { return g.logLen() >= 200 })

	waitSent(t, tr, 200)
	checkSeqs(t, g.seqs(), seqRange(1, 200))
	if s := tr.Stats(); s.Frames != 200 || s.Drops != 0 {
		t.Errorf("stats %+v, want 200 frames, no drop", s)
	}
}

// blockFirst makes g's leader wait for release before accepting its first
// batch, and returns a channel closed when that batch arrived.
func blockFirst(g *fakeGroup, release <-chan struct{}) <-chan struct{} {
	entered := make(chan struct{})
	first := true
	g.block = func(ctx context.Context) error {
		g.mu.Lock()
		wait := first
		first = false
		g.mu.Unlock()
		if !wait {
			return nil
		}
		close(entered)
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return entered
}

func TestTransmitterQueueBound(t *testing.T) {
	frameBytes := len(channel.AppendFrame(nil, dataFrames(2, 1)[0]))
	tests := []struct {
		name        string
		queueFrames int
		queueBytes  int
		wantKept    int
	}{
		{"frames", 8, 1 << 20, 8},
		{"bytes", 100, 5 * frameBytes, 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newFakeGroup(t, 1, 0, serverConfig())
			release := make(chan struct{})
			entered := blockFirst(g, release)
			cfg := transmitterConfig(g.addrs)
			cfg.QueueFrames, cfg.QueueBytes, cfg.BatchBytes = tt.queueFrames, tt.queueBytes, frameBytes
			tr := newTransmitter(t, cfg)

			// Frame 1 is in flight, held by the leader; the queue is empty.
			sendAll(t, tr, dataFrames(1, 1), 1)
			<-entered
			const burst = 12
			sendAll(t, tr, dataFrames(2, burst), burst)
			if got, want := tr.Stats().Drops, uint64(burst-tt.wantKept); got != want {
				t.Errorf("drops %d, want %d", got, want)
			}
			close(release)
			last := uint64(1 + tt.wantKept)
			waitFor(t, "the kept frames", func() bool { return g.logLen() >= int(last) })
			// What fits is queued and sent again after the first frame;
			// the rest, which the channel layer would resend, is gone.
			sendAll(t, tr, dataFrames(last+1, 1), 1)
			waitFor(t, "a frame sent after the drops", func() bool { return g.logLen() >= int(last+1) })
			checkSeqs(t, g.seqs(), seqRange(1, last+1))
		})
	}
}

// TestTransmitterEncodesWhatFits: offered a whole outbox while its queue
// is full, the transmitter encodes only what fits (here nothing): 10,000
// frames of 60 KiB would take 600 MiB to encode.
func TestTransmitterEncodesWhatFits(t *testing.T) {
	g := newFakeGroup(t, 1, 0, serverConfig())
	release := make(chan struct{})
	entered := blockFirst(g, release)
	cfg := transmitterConfig(g.addrs)
	cfg.QueueFrames = 4
	tr := newTransmitter(t, cfg)
	sendAll(t, tr, dataFrames(1, 1), 1)
	<-entered
	sendAll(t, tr, dataFrames(2, 4), 4) // the queue is full
	payload := make([]byte, 60<<10)
	frames := make([]channel.Frame, 10_000)
	for i := range frames {
		frames[i] = channel.Frame{From: testFrom, To: testTo, Seq: uint64(6 + i), Payload: payload}
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	if err := tr.Send(testTo, frames); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	if got := after.TotalAlloc - before.TotalAlloc; got > 16<<20 {
		t.Errorf("Send into a full queue allocated %d bytes, want under 16 MiB", got)
	}
	if got, want := tr.Stats().Drops, uint64(len(frames)); got != want {
		t.Errorf("drops %d, want %d", got, want)
	}
	close(release)
	waitFor(t, "the queued frames", func() bool { return g.logLen() >= 5 })
	checkSeqs(t, g.seqs(), seqRange(1, 5))
}

func TestTransmitterDropsRefusedBatch(t *testing.T) {
	// The receiver takes at most 4 frames a request; the transmitter is
	// misconfigured to send 8. The batch is refused and dropped rather
	// than retried forever, and later traffic still flows.
	scfg := serverConfig()
	scfg.FramesMax = 4
	g := newFakeGroup(t, 1, 0, scfg)
	release := make(chan struct{})
	entered := blockFirst(g, release)
	cfg := transmitterConfig(g.addrs)
	cfg.BatchFrames = 8
	tr := newTransmitter(t, cfg)

	sendAll(t, tr, dataFrames(1, 1), 1)
	<-entered
	sendAll(t, tr, dataFrames(2, 8), 8) // one batch of 8, refused
	close(release)
	waitFor(t, "the refusal", func() bool { return tr.Stats().Refused >= 8 })
	sendAll(t, tr, dataFrames(10, 2), 2)
	waitFor(t, "frames after the refusal", func() bool { return g.logLen() >= 3 })

	waitSent(t, tr, 3)
	checkSeqs(t, g.seqs(), []uint64{1, 10, 11})
	if s := tr.Stats(); s.Refused != 8 || s.Errors != 1 || s.Frames != 3 {
		t.Errorf("stats %+v, want 8 refused, 1 error, 3 frames", s)
	}
}

func TestTransmitterSendRejects(t *testing.T) {
	g := newFakeGroup(t, 1, 0, serverConfig())
	cfg := transmitterConfig(g.addrs)
	cfg.BatchBytes = 64
	tr := newTransmitter(t, cfg)
	good := dataFrames(1, 1)[0]
	big := good
	big.Payload = make([]byte, 100)
	wrongFrom, wrongTo := good, good
	wrongFrom.From = 1
	wrongTo.To = 1
	tests := []struct {
		name   string
		to     partition.GroupID
		frames []channel.Frame
		want   string
	}{
		{"not a peer", 1, []channel.Frame{{From: testFrom, To: 1, Seq: 1}}, "not a peer group of group 0"},
		{"self", testFrom, nil, "not a peer group of group 0"},
		{"wrong sender", testTo, []channel.Frame{good, wrongFrom}, "is not from group 0 to group 2"},
		{"wrong receiver", testTo, []channel.Frame{good, wrongTo}, "is not from group 0 to group 2"},
		{"too large", testTo, []channel.Frame{good, big}, "more than batch bytes 64"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tr.Send(tt.to, tt.frames)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("send: got error %v, want one containing %q", err, tt.want)
			}
		})
	}
	// None of the refused calls queued anything: the next frame is the
	// first to arrive.
	next := dataFrames(5, 1)
	sendAll(t, tr, next, 1)
	waitFor(t, "a good frame", func() bool { return g.logLen() >= 1 })
	checkSeqs(t, g.seqs(), []uint64{5})

	if err := tr.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if err := tr.Send(testTo, next); !errors.Is(err, ErrClosed) {
		t.Errorf("send after close: got %v, want ErrClosed", err)
	}
}

func TestTransmitterCloseAbandonsCall(t *testing.T) {
	// The leader never answers; Close must not wait for the RPC timeout.
	g := newFakeGroup(t, 1, 0, serverConfig())
	entered := blockFirst(g, make(chan struct{}))
	cfg := transmitterConfig(g.addrs)
	cfg.RPCTimeout = time.Hour
	tr, err := NewTransmitter(cfg)
	if err != nil {
		t.Fatal(err)
	}
	sendAll(t, tr, dataFrames(1, 1), 1)
	<-entered
	sendAll(t, tr, dataFrames(2, 3), 3)

	closeSoon(t, tr, "close did not return while a call was in flight")
	if err := tr.Close(); err != nil {
		t.Errorf("second close: %v", err)
	}
	if got := tr.Stats().Frames; got != 0 {
		t.Errorf("%d frames counted as sent, want 0", got)
	}
}

func TestTransmitterConfigValidate(t *testing.T) {
	good := transmitterConfig([]string{"127.0.0.1:1", "127.0.0.1:2"})
	if err := good.Validate(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	tests := []struct {
		name   string
		change func(c *TransmitterConfig)
		want   string
	}{
		{"self negative", func(c *TransmitterConfig) { c.Self = -1 }, "self -1 out of range"},
		{"batch frames", func(c *TransmitterConfig) { c.BatchFrames = 0 }, "batch frames 0"},
		{"batch bytes", func(c *TransmitterConfig) { c.BatchBytes = 0 }, "batch bytes 0"},
		{"queue frames", func(c *TransmitterConfig) { c.QueueFrames = 0 }, "queue frames 0"},
		{"queue bytes", func(c *TransmitterConfig) { c.QueueBytes = c.BatchBytes - 1 }, "below batch bytes"},
		{"rpc timeout", func(c *TransmitterConfig) { c.RPCTimeout = 0 }, "rpc timeout 0s"},
		{"backoff min", func(c *TransmitterConfig) { c.BackoffMin = 0 }, "backoff min 0s"},
		{"backoff max", func(c *TransmitterConfig) { c.BackoffMax = c.BackoffMin / 2 }, "below backoff min"},
		{"peer is self", func(c *TransmitterConfig) { c.Peers[testFrom] = []string{"x:1"} }, "peer group 0 is self"},
		{"peer out of range", func(c *TransmitterConfig) { c.Peers[partition.GroupsMax] = []string{"x:1"} }, "peer group 64 out of range"},
		{"no address", func(c *TransmitterConfig) { c.Peers[1] = nil }, "peer group 1 has no address"},
		{"empty address", func(c *TransmitterConfig) { c.Peers[1] = []string{""} }, "empty address"},
		{"twice", func(c *TransmitterConfig) { c.Peers[1] = []string{"a:1", "a:1"} }, `address "a:1" listed twice`},
		{"negative delay", func(c *TransmitterConfig) { c.Delays = map[partition.GroupID]time.Duration{testTo: -time.Millisecond} }, "peer group 2: delay -1ms"},
		{"delay to a stranger", func(c *TransmitterConfig) { c.Delays = map[partition.GroupID]time.Duration{1: time.Millisecond} }, "delay for group 1, which is not a peer group"},
		{"jitter above 1", func(c *TransmitterConfig) { c.Jitter = 1.5 }, "jitter 1.5"},
		{"jitter negative", func(c *TransmitterConfig) { c.Jitter = -0.1 }, "jitter -0.1"},
		{"jitter NaN", func(c *TransmitterConfig) { c.Jitter = math.NaN() }, "jitter NaN"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := good
			c.Peers = map[partition.GroupID][]string{testTo: good.Peers[testTo]}
			tt.change(&c)
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got error %v, want one containing %q", err, tt.want)
			}
			if _, err := NewTransmitter(c); err == nil {
				t.Error("NewTransmitter accepted the config")
			}
		})
	}
}

func TestNewTransmitterNeedsCredentials(t *testing.T) {
	cfg := transmitterConfig([]string{"127.0.0.1:1"})
	cfg.DialOptions = nil
	tr, err := NewTransmitter(cfg)
	if err == nil {
		_ = tr.Close()
		t.Fatal("NewTransmitter without transport credentials: no error")
	}
	if !strings.Contains(err.Error(), "peer group 2 replica 127.0.0.1:1") {
		t.Errorf("error %q does not name the replica", err)
	}
}

// TestTransmitterSetPeers: a group whose leader is a replica the
// transmitter does not know gets nothing; once SetPeers names the new
// members (a change of members, DESIGN 14), the frames reach its leader in
// order, and a bad list is refused.
func TestTransmitterSetPeers(t *testing.T) {
	g := newFakeGroup(t, 3, 2, serverConfig())
	tr := newTransmitter(t, transmitterConfig(g.addrs[:2]))
	const n = 200
	sendAll(t, tr, dataFrames(1, n), 10)
	time.Sleep(50 * time.Millisecond)
	if got := g.logLen(); got != 0 {
		t.Fatalf("%d frames reached a leader the transmitter does not know", got)
	}
	if err := tr.SetPeers(testTo, []string{g.addrs[1], g.addrs[1]}); err == nil {
		t.Errorf("SetPeers with an address twice: nil error")
	}
	if err := tr.SetPeers(testFrom, g.addrs); err == nil {
		t.Errorf("SetPeers of a group that is not a peer: nil error")
	}
	if err := tr.SetPeers(testTo, []string{g.addrs[1], g.addrs[2]}); err != nil {
		t.Fatal(err)
	}
	if got := tr.Peers(testTo); len(got) != 2 || got[1] != g.addrs[2] {
		t.Errorf("Peers = %v, want the new list", got)
	}
	waitFor(t, "every frame at the new leader", func() bool { return g.logLen() >= n })
	waitSent(t, tr, n)
	checkSeqs(t, g.seqs(), seqRange(1, n))
}
