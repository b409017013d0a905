package channel

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/partition"
)

// testConfig is the configuration of group self in a cluster of three groups.
func testConfig(self partition.GroupID) Config {
	return Config{Self: self, Groups: 3, ResendTicks: 3, HoldbackMax: 4, OutboxMax: 8}
}

func newChannel(t *testing.T, cfg Config) *Channel {
	t.Helper()
	c, err := New(cfg)
	if err != nil {
		t.Fatalf("New(%+v): %v", cfg, err)
	}
	return c
}

// data returns a data frame; ctl a control-only one.
func data(from, to partition.GroupID, seq, ack uint64, payload string) Frame {
	return Frame{From: from, To: to, Seq: seq, Ack: ack, Payload: []byte(payload)}
}

func ctl(from, to partition.GroupID, ack, nack uint64) Frame {
	return Frame{From: from, To: to, Ack: ack, Nack: nack}
}

func receive(t *testing.T, c *Channel, frames ...Frame) {
	t.Helper()
	for _, f := range frames {
		if err := c.Receive(f); err != nil {
			t.Fatalf("Receive(%s): %v", f, err)
		}
	}
	if err := c.check(); err != nil {
		t.Fatalf("after Receive: %v", err)
	}
}

var equateEmpty = cmpopts.EquateEmpty()

func wantFrames(t *testing.T, got, want []Frame) {
	t.Helper()
	if diff := cmp.Diff(want, got, equateEmpty); diff != "" {
		t.Fatalf("frames (-want +got):\n%s", diff)
	}
}

func inboundOf(from partition.GroupID, payloads ...string) []Inbound {
	out := make([]Inbound, len(payloads))
	for i, p := range payloads {
		out[i] = Inbound{From: from, Payload: []byte(p)}
	}
	return out
}

func wantReady(t *testing.T, c *Channel, frames []Frame, inbound []Inbound) {
	t.Helper()
	out := c.Ready()
	if diff := cmp.Diff(frames, out.Frames, equateEmpty); diff != "" {
		t.Errorf("Ready frames (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(inbound, out.Inbound, equateEmpty); diff != "" {
		t.Errorf("Ready inbound (-want +got):\n%s", diff)
	}
}

func TestConfigValidate(t *testing.T) {
	ok := testConfig(1)
	tests := []struct {
		name   string
		modify func(*Config)
		want   string // substring of the error; "" for none
	}{
		{"valid", func(*Config) {}, ""},
		{"single group", func(c *Config) { c.Groups, c.Self = 1, 0 }, ""},
		{"no holdback", func(c *Config) { c.HoldbackMax = 0 }, ""},
		{"no groups", func(c *Config) { c.Groups = 0 }, "groups 0 out of range"},
		{"too many groups", func(c *Config) { c.Groups = partition.GroupsMax + 1 }, "out of range"},
		{"self negative", func(c *Config) { c.Self = -1 }, "self -1 out of range"},
		{"self too large", func(c *Config) { c.Self = 3 }, "self 3 out of range"},
		{"resend ticks", func(c *Config) { c.ResendTicks = 0 }, "resend ticks 0"},
		{"holdback negative", func(c *Config) { c.HoldbackMax = -1 }, "holdback max -1"},
		{"outbox max", func(c *Config) { c.OutboxMax = 0 }, "outbox max 0"},
		{"byte bounds", func(c *Config) { c.BacklogBytesMax, c.OutboxBytesMax, c.HoldbackBytesMax = 100, 200, 50 }, ""},
		{"backlog alone", func(c *Config) { c.BacklogBytesMax = 1 << 30 }, ""},
		{"holdback bytes", func(c *Config) { c.HoldbackBytesMax = -1 }, "holdback bytes max -1"},
		{"backlog bytes", func(c *Config) { c.BacklogBytesMax = -2 }, "backlog bytes max -2"},
		{"outbox bytes", func(c *Config) { c.OutboxBytesMax = -3 }, "outbox bytes max -3"},
		{"outbox below backlog", func(c *Config) { c.BacklogBytesMax, c.OutboxBytesMax = 100, 199 }, "below twice backlog bytes max 100"},
		{"resend frames", func(c *Config) { c.ResendFramesMax = -1 }, "resend frames max -1"},
		{"resend bytes", func(c *Config) { c.ResendBytesMax = -1 }, "resend bytes max -1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := ok
			tt.modify(&cfg)
			err := cfg.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.HasPrefix(err.Error(), "channel: ") {
				t.Fatalf("Validate() = %v, want an error containing %q", err, tt.want)
			}
			if _, err := New(cfg); err == nil {
				t.Fatalf("New accepted invalid config %+v", cfg)
			}
		})
	}
}

func TestInOrderAndAckTrimming(t *testing.T) {
	a, b := newChannel(t, testConfig(0)), newChannel(t, testConfig(1))
	a.Send(1, []byte("x"))
	a.Send(1, []byte("y"))
	a.Send(2, []byte("z"))
	sent := a.Ready().Frames
	wantFrames(t, sent, []Frame{data(0, 1, 1, 0, "x"), data(0, 1, 2, 0, "y"), data(0, 2, 1, 0, "z")})
	if got := a.Stats().DataSent; got != 3 {
		t.Errorf("DataSent = %d, want 3", got)
	}

	receive(t, b, sent[0], sent[1])
	wantReady(t, b, nil, inboundOf(0, "x", "y"))

	// b owes a an ack, sent on the tick as a control-only frame, once.
	b.Tick()
	wantReady(t, b, []Frame{ctl(1, 0, 2, 0)}, nil)
	b.Tick()
	wantReady(t, b, nil, nil)
	if got := b.Stats().AcksSent; got != 1 {
		t.Errorf("AcksSent = %d, want 1", got)
	}

	// The ack trims a's outbox to 1, and only that one.
	if got := a.OutboxLen(1); got != 2 {
		t.Fatalf("OutboxLen(1) before ack = %d, want 2", got)
	}
	receive(t, a, ctl(1, 0, 1, 0))
	if got := a.OutboxLen(1); got != 1 {
		t.Errorf("OutboxLen(1) after ack 1 = %d, want 1", got)
	}
	receive(t, a, ctl(1, 0, 2, 0))
	if got := a.OutboxLen(1); got != 0 {
		t.Errorf("OutboxLen(1) after ack 2 = %d, want 0", got)
	}
	// A stale ack (reordered) changes nothing.
	receive(t, a, ctl(1, 0, 1, 0))
	if got, want := a.OutboxLen(1), 0; got != want {
		t.Errorf("OutboxLen(1) after stale ack = %d, want %d", got, want)
	}
	if got := a.OutboxLen(2); got != 1 {
		t.Errorf("OutboxLen(2) = %d, want 1 (group 2 acked nothing)", got)
	}
	wantReady(t, a, nil, nil)

	// An ack piggybacked on data: b sends to a with its position, a's data
	// frame to b afterwards carries a's position for b.
	b.Send(0, []byte("back"))
	wantReady(t, b, []Frame{data(1, 0, 1, 2, "back")}, nil)
	receive(t, a, data(1, 0, 1, 2, "back"))
	a.Send(1, []byte("w"))
	wantReady(t, a, []Frame{data(0, 1, 3, 1, "w")}, inboundOf(1, "back"))
	// The data frame carried the ack: no control frame is due on the tick.
	a.Tick()
	if out := a.Ready(); len(out.Frames) != 0 {
		t.Errorf("tick after piggybacked ack sent %v, want nothing", out.Frames)
	}
}

func TestDuplicate(t *testing.T) {
	b := newChannel(t, testConfig(1))
	receive(t, b, data(0, 1, 1, 0, "x"))
	b.Tick()
	wantReady(t, b, []Frame{ctl(1, 0, 1, 0)}, inboundOf(0, "x"))

	// The sender resent x: it is dropped, and an ack becomes due again so
	// that the sender learns it arrived.
	receive(t, b, data(0, 1, 1, 0, "x"), data(0, 1, 1, 0, "x"))
	wantReady(t, b, nil, nil)
	b.Tick()
	wantReady(t, b, []Frame{ctl(1, 0, 1, 0)}, nil)
	if got, want := b.Stats().DuplicatesDropped, uint64(2); got != want {
		t.Errorf("DuplicatesDropped = %d, want %d", got, want)
	}
	if got, want := b.Stats().Delivered, uint64(1); got != want {
		t.Errorf("Delivered = %d, want %d", got, want)
	}
}

func TestGapHoldbackNack(t *testing.T) {
	b := newChannel(t, testConfig(1))
	// 3 and 4 arrive before 1 and 2: held back, one nack for 1.
	receive(t, b, data(0, 1, 3, 0, "c"), data(0, 1, 4, 0, "d"))
	wantReady(t, b, []Frame{ctl(1, 0, 0, 1)}, nil)
	// A held-back frame again is a duplicate.
	receive(t, b, data(0, 1, 4, 0, "d"))
	receive(t, b, data(0, 1, 1, 0, "a"))
	wantReady(t, b, nil, inboundOf(0, "a"))
	receive(t, b, data(0, 1, 2, 0, "b"))
	wantReady(t, b, nil, inboundOf(0, "b", "c", "d"))
	if got := len(b.links[0].holdback); got != 0 {
		t.Errorf("hold-back queue holds %d frames after the gap filled, want 0", got)
	}
	want := Stats{Delivered: 4, HeldBack: 2, DuplicatesDropped: 1, NacksSent: 1}
	if diff := cmp.Diff(want, b.Stats()); diff != "" {
		t.Errorf("Stats (-want +got):\n%s", diff)
	}
}

func TestNackStormLimit(t *testing.T) {
	b := newChannel(t, testConfig(1))
	// A burst of out-of-order frames, some of them duplicated: one nack.
	receive(t, b,
		data(0, 1, 2, 0, "b"), data(0, 1, 3, 0, "c"), data(0, 1, 5, 0, "e"),
		data(0, 1, 3, 0, "c"), data(0, 1, 4, 0, "d"), data(0, 1, 9, 0, "i"))
	wantReady(t, b, []Frame{ctl(1, 0, 0, 1)}, nil)
	// Another group's gap has its own budget in the same tick.
	receive(t, b, data(2, 1, 2, 0, "B"))
	wantReady(t, b, []Frame{ctl(1, 2, 0, 1)}, nil)
	// The gap is still open on the next tick: the next out-of-order frame
	// nacks again; the tick itself sends no nack (the sender's timer covers
	// a lost nack).
	b.Tick()
	wantReady(t, b, nil, nil)
	receive(t, b, data(0, 1, 3, 0, "c"))
	wantReady(t, b, []Frame{ctl(1, 0, 0, 1)}, nil)
	if got, want := b.Stats().NacksSent, uint64(3); got != want {
		t.Errorf("NacksSent = %d, want %d", got, want)
	}
}

func TestHoldbackWindow(t *testing.T) {
	cfg := testConfig(1)
	cfg.HoldbackMax = 2
	b := newChannel(t, cfg)
	// recv = 0: the window is seqs 2 and 3. 4 and 5 are dropped.
	receive(t, b, data(0, 1, 4, 0, "d"), data(0, 1, 2, 0, "b"), data(0, 1, 5, 0, "e"), data(0, 1, 3, 0, "c"))
	if got, want := len(b.links[0].holdback), cfg.HoldbackMax; got != want {
		t.Fatalf("hold-back queue holds %d frames, want %d", got, want)
	}
	if got, want := b.Stats().HoldbackDrops, uint64(2); got != want {
		t.Errorf("HoldbackDrops = %d, want %d", got, want)
	}
	b.Ready()
	receive(t, b, data(0, 1, 1, 0, "a"))
	wantReady(t, b, nil, inboundOf(0, "a", "b", "c"))
	// The window moved: the sender's resend of 4 and 5 gets through. (The
	// next tick acknowledges 3 and lets a new nack go out.)
	b.Tick()
	wantReady(t, b, []Frame{ctl(1, 0, 3, 0)}, nil)
	receive(t, b, data(0, 1, 5, 0, "e"))
	receive(t, b, data(0, 1, 4, 0, "d"))
	wantReady(t, b, []Frame{ctl(1, 0, 3, 4)}, inboundOf(0, "d", "e"))

	// With no hold-back at all every out-of-order frame is dropped, and the
	// nack still goes out.
	cfg.HoldbackMax = 0
	z := newChannel(t, cfg)
	receive(t, z, data(0, 1, 2, 0, "b"))
	wantReady(t, z, []Frame{ctl(1, 0, 0, 1)}, nil)
	if got := z.Stats().HoldbackDrops; got != 1 {
		t.Errorf("HoldbackMax 0: HoldbackDrops = %d, want 1", got)
	}
}

func TestResendAfterResendTicks(t *testing.T) {
	a := newChannel(t, testConfig(0)) // ResendTicks 3
	a.Send(1, []byte("x"))
	a.Send(1, []byte("y"))
	a.Ready()
	for i := 1; i < 3; i++ {
		a.Tick()
		if out := a.Ready(); len(out.Frames) != 0 {
			t.Fatalf("tick %d: sent %v before ResendTicks", i, out.Frames)
		}
	}
	a.Tick()
	wantReady(t, a, []Frame{data(0, 1, 1, 0, "x"), data(0, 1, 2, 0, "y")}, nil)
	if got := a.Stats().DataResent; got != 2 {
		t.Errorf("DataResent = %d, want 2", got)
	}

	// The timer restarted: two ticks, then an ack of x (progress) restarts
	// it again, so y goes out again only three ticks after the ack.
	a.Tick()
	a.Tick()
	receive(t, a, ctl(1, 0, 1, 0))
	a.Tick()
	a.Tick()
	if out := a.Ready(); len(out.Frames) != 0 {
		t.Fatalf("resent %v although the ack progressed", out.Frames)
	}
	a.Tick()
	wantReady(t, a, []Frame{data(0, 1, 2, 0, "y")}, nil)

	// Nothing unacknowledged: ticks send nothing.
	receive(t, a, ctl(1, 0, 2, 0))
	for range 10 {
		a.Tick()
	}
	wantReady(t, a, nil, nil)
}

func TestNackServed(t *testing.T) {
	a := newChannel(t, testConfig(0))
	for _, p := range []string{"a", "b", "c"} {
		a.Send(1, []byte(p))
	}
	a.Ready()
	// 1 has the first frame and misses the second.
	receive(t, a, ctl(1, 0, 1, 2))
	wantReady(t, a, []Frame{data(0, 1, 2, 0, "b"), data(0, 1, 3, 0, "c")}, nil)
	// The same nack again in this tick (duplicated by the network) is not
	// served again.
	receive(t, a, ctl(1, 0, 1, 2))
	wantReady(t, a, nil, nil)
	a.Tick()
	receive(t, a, ctl(1, 0, 1, 2))
	wantReady(t, a, []Frame{data(0, 1, 2, 0, "b"), data(0, 1, 3, 0, "c")}, nil)
	// A stale nack: 1 acknowledged 2 since.
	a.Tick()
	receive(t, a, ctl(1, 0, 2, 0), ctl(1, 0, 1, 2))
	wantReady(t, a, nil, nil)
	want := Stats{DataSent: 3, DataResent: 4, NacksServed: 2}
	if diff := cmp.Diff(want, a.Stats()); diff != "" {
		t.Errorf("Stats (-want +got):\n%s", diff)
	}
}

func TestBusyAtOutboxMax(t *testing.T) {
	cfg := testConfig(0)
	cfg.OutboxMax = 2
	a := newChannel(t, cfg)
	a.Send(1, []byte("x"))
	a.Send(2, []byte("x"))
	if a.Busy() {
		t.Fatalf("Busy with one envelope per outbox, OutboxMax 2")
	}
	a.Send(1, []byte("y"))
	if !a.Busy() {
		t.Fatalf("not Busy with 2 envelopes to group 1, OutboxMax 2")
	}
	// Send does not refuse: back-pressure is the caller's admission control.
	a.Send(1, []byte("z"))
	if got := a.OutboxLen(1); got != 3 {
		t.Fatalf("OutboxLen(1) = %d, want 3", got)
	}
	receive(t, a, ctl(1, 0, 1, 0))
	if !a.Busy() {
		t.Fatalf("not Busy with 2 unacked envelopes to group 1")
	}
	receive(t, a, ctl(1, 0, 2, 0))
	if a.Busy() {
		t.Fatalf("Busy with 1 unacked envelope to group 1, OutboxMax 2")
	}
}

func TestReceiveMalformed(t *testing.T) {
	// b has received 1 from group 0 and sent 2 frames to it.
	setup := func(t *testing.T) *Channel {
		b := newChannel(t, testConfig(1))
		b.Send(0, []byte("p"))
		b.Send(0, []byte("q"))
		receive(t, b, data(0, 1, 1, 0, "x"), data(0, 1, 3, 0, "z"))
		b.Ready()
		return b
	}
	tests := []struct {
		name string
		f    Frame
	}{
		{"to another group", data(0, 2, 2, 0, "y")},
		{"to a group out of range", data(0, 7, 2, 0, "y")},
		{"from itself", data(1, 1, 2, 0, "y")},
		{"from a negative group", data(-1, 1, 2, 0, "y")},
		{"from a group out of range", data(3, 1, 2, 0, "y")},
		{"control frame with payload", Frame{From: 0, To: 1, Payload: []byte("y")}},
		{"nack that does not follow its ack", ctl(0, 1, 0, 2)},
		{"ack beyond what was sent", data(0, 1, 2, 3, "y")},
		{"ack beyond what was sent, control", ctl(0, 1, 3, 4)},
		{"ack overflow in nack", Frame{From: 0, To: 1, Ack: ^uint64(0), Nack: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := setup(t)
			before := b.AppendSnapshot(nil)
			err := b.Receive(tt.f)
			if !errors.Is(err, multicast.ErrInvalid) {
				t.Fatalf("Receive(%s) = %v, want an error wrapping ErrInvalid", tt.f, err)
			}
			if !strings.HasPrefix(err.Error(), "channel: ") {
				t.Errorf("error %q lacks the package prefix", err)
			}
			if out := b.Ready(); len(out.Frames) != 0 || len(out.Inbound) != 0 {
				t.Errorf("Receive(%s) produced output %+v", tt.f, out)
			}
			if after := b.AppendSnapshot(nil); !bytes.Equal(before, after) {
				t.Errorf("Receive(%s) changed the state", tt.f)
			}
		})
	}
}

func TestUnackedAndAckFrame(t *testing.T) {
	a := newChannel(t, testConfig(0))
	a.Send(2, []byte("a"))
	a.Send(2, []byte("b"))
	a.Send(2, []byte("c"))
	receive(t, a, data(2, 0, 1, 1, "r"))
	a.Ready()
	before := a.AppendSnapshot(nil)
	want := []Frame{data(0, 2, 2, 1, "b"), data(0, 2, 3, 1, "c")}
	wantFrames(t, a.Unacked(2), want)
	if got := a.Unacked(1); len(got) != 0 {
		t.Errorf("Unacked(1) = %v, want none", got)
	}
	if diff := cmp.Diff(ctl(0, 2, 1, 0), a.AckFrame(2), equateEmpty); diff != "" {
		t.Errorf("AckFrame(2) (-want +got):\n%s", diff)
	}
	if after := a.AppendSnapshot(nil); !bytes.Equal(before, after) {
		t.Errorf("Unacked or AckFrame changed the state")
	}
	// The resent frames are accepted by a fresh copy of the receiver's state.
	b := newChannel(t, testConfig(2))
	b.Send(0, []byte("r"))
	receive(t, b, data(0, 2, 1, 0, "a"))
	receive(t, b, a.Unacked(2)...)
	wantReady(t, b, []Frame{data(2, 0, 1, 0, "r")}, inboundOf(0, "a", "b", "c"))
}

func TestSendToNonPeerPanics(t *testing.T) {
	for _, to := range []partition.GroupID{0, -1, 3} {
		a := newChannel(t, testConfig(0))
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Send(%d) from group 0 of 3 did not panic", to)
				}
			}()
			a.Send(to, []byte("x"))
		}()
	}
}

func TestSingleGroup(t *testing.T) {
	c := newChannel(t, Config{Self: 0, Groups: 1, ResendTicks: 1, OutboxMax: 1})
	c.Tick()
	if c.Busy() {
		t.Errorf("a channel with no peers is Busy")
	}
	wantReady(t, c, nil, nil)
}

// TestResendWindow: a resend covers ResendFramesMax frames from the oldest
// unacknowledged; the repair goes on as each window is acknowledged, up to
// what was sent when it began.
func TestResendWindow(t *testing.T) {
	cfg := testConfig(0) // ResendTicks 3
	cfg.ResendFramesMax = 2
	a := newChannel(t, cfg)
	for _, p := range []string{"a", "b", "c", "d", "e"} {
		a.Send(1, []byte(p))
	}
	a.Ready() // all lost
	for range 3 {
		a.Tick()
	}
	wantReady(t, a, []Frame{data(0, 1, 1, 0, "a"), data(0, 1, 2, 0, "b")}, nil)
	a.Send(1, []byte("f")) // after the repair began: not part of it
	a.Ready()
	receive(t, a, ctl(1, 0, 1, 0)) // half the window: wait
	wantReady(t, a, nil, nil)
	receive(t, a, ctl(1, 0, 2, 0))
	wantReady(t, a, []Frame{data(0, 1, 3, 0, "c"), data(0, 1, 4, 0, "d")}, nil)
	receive(t, a, ctl(1, 0, 4, 0))
	wantReady(t, a, []Frame{data(0, 1, 5, 0, "e")}, nil)
	receive(t, a, ctl(1, 0, 5, 0)) // the repair is over; f waits for its timer
	wantReady(t, a, nil, nil)
	if err := a.check(); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		a.Tick()
	}
	wantReady(t, a, []Frame{data(0, 1, 6, 0, "f")}, nil)
	receive(t, a, ctl(1, 0, 6, 0))
	if got := a.Stats().DataResent; got != 6 {
		t.Errorf("DataResent = %d, want 6", got)
	}

	// A nack starts a repair too; the window is bounded in bytes as well.
	cfg.ResendFramesMax, cfg.ResendBytesMax = 100, 5
	b := newChannel(t, cfg)
	for _, p := range []string{"xxx", "yy", "z", "wwwwwwww"} {
		b.Send(1, []byte(p))
	}
	b.Ready()
	receive(t, b, ctl(1, 0, 0, 1))
	wantReady(t, b, []Frame{data(0, 1, 1, 0, "xxx"), data(0, 1, 2, 0, "yy")}, nil)
	receive(t, b, ctl(1, 0, 2, 0))
	wantReady(t, b, []Frame{data(0, 1, 3, 0, "z")}, nil) // z+w is 9 bytes
	receive(t, b, ctl(1, 0, 3, 0))
	wantReady(t, b, []Frame{data(0, 1, 4, 0, "wwwwwwww")}, nil) // one frame, whatever its size
}

// TestHoldbackBytes: the hold-back queue keeps at most HoldbackBytesMax
// bytes, dropping the frames farthest from the gap first.
func TestHoldbackBytes(t *testing.T) {
	cfg := testConfig(1) // HoldbackMax 4
	cfg.HoldbackBytesMax = 4
	b := newChannel(t, cfg)
	receive(t, b, data(0, 1, 4, 0, "dd"), data(0, 1, 5, 0, "ee"))
	if got := b.HoldbackBytes(0); got != 4 {
		t.Fatalf("HoldbackBytes = %d, want 4", got)
	}
	receive(t, b, data(0, 1, 3, 0, "c")) // 5 goes
	if got := b.HoldbackBytes(0); got != 3 {
		t.Fatalf("HoldbackBytes = %d, want 3", got)
	}
	receive(t, b, data(0, 1, 5, 0, "eeeee")) // does not fit: dropped itself
	receive(t, b, data(0, 1, 1, 0, "a"))
	out := b.Ready()
	if diff := cmp.Diff(inboundOf(0, "a"), out.Inbound, equateEmpty); diff != "" {
		t.Fatalf("inbound (-want +got):\n%s", diff)
	}
	receive(t, b, data(0, 1, 2, 0, "b"))
	out = b.Ready()
	if diff := cmp.Diff(inboundOf(0, "b", "c", "dd"), out.Inbound, equateEmpty); diff != "" {
		t.Fatalf("inbound (-want +got):\n%s", diff)
	}
	if got, want := b.Stats().HoldbackByteDrops, uint64(2); got != want {
		t.Errorf("HoldbackByteDrops = %d, want %d", got, want)
	}
	if got := b.HoldbackBytes(0); got != 0 {
		t.Errorf("HoldbackBytes = %d after the gap closed, want 0", got)
	}
}

// TestBusyAtBacklog: the backlog behind a peer counts what was sent to
// every peer since its oldest unacknowledged envelope; Busy names it once
// the backlog reaches BacklogBytesMax, and a Send past OutboxBytesMax is
// counted.
func TestBusyAtBacklog(t *testing.T) {
	cfg := testConfig(0)
	cfg.OutboxMax = 1000
	cfg.BacklogBytesMax, cfg.OutboxBytesMax = 10, 20
	a := newChannel(t, cfg)
	a.Send(2, []byte("0123"))    // acknowledged below: not in 1's backlog
	a.Send(1, []byte("ab"))      // 1 never acknowledges
	a.Send(2, []byte("0123456")) // 9 bytes behind 1
	receive(t, a, ctl(2, 0, 2, 0))
	if got := a.Backlog(1); got != 9 {
		t.Fatalf("Backlog(1) = %d, want 9", got)
	}
	if got := a.Backlog(2); got != 0 {
		t.Fatalf("Backlog(2) = %d, want 0", got)
	}
	if a.Busy() {
		t.Fatalf("Busy at backlog 9 of 10")
	}
	a.Charge(1) // work taken on outside the channel counts as well
	if g, busy := a.BusyWith(); !busy || g != 1 {
		t.Fatalf("BusyWith() = %d, %v at backlog 10 of 10, want 1, true", g, busy)
	}
	if got := a.OutboxBytes(1); got != 2 {
		t.Errorf("OutboxBytes(1) = %d, want 2", got)
	}
	for range 9 {
		a.Send(1, []byte("yy"))
	}
	if got := a.Stats().OutboxOverflows; got != 0 {
		t.Errorf("OutboxOverflows = %d at 20 bytes of 20", got)
	}
	a.Send(1, []byte("z"))
	if got := a.Stats().OutboxOverflows; got != 1 {
		t.Errorf("OutboxOverflows = %d at 21 bytes of 20, want 1", got)
	}
	receive(t, a, ctl(1, 0, 10, 0))
	if got := a.Backlog(1); got != 1 {
		t.Fatalf("Backlog(1) = %d with one byte unacknowledged, want 1", got)
	}
	if a.Busy() {
		t.Fatalf("Busy at backlog 1")
	}
	if err := a.check(); err != nil {
		t.Fatal(err)
	}
}

// TestBackgroundNotBacklog: envelopes sent in the background to a peer that
// never acknowledges neither start its backlog nor fill its outbox as far as
// Busy counts, however much goes to others after them; a foreground
// envelope behind them starts the backlog at itself; they are resent and
// acknowledged like any other, and the state restores.
func TestBackgroundNotBacklog(t *testing.T) {
	cfg := testConfig(0)
	cfg.OutboxMax = 3
	cfg.BacklogBytesMax, cfg.OutboxBytesMax = 10, 20
	a := newChannel(t, cfg)
	for range 5 {
		a.SendBackground(1, []byte("gc"))
	}
	for range 20 {
		a.Send(2, []byte("0123456789"))
		receive(t, a, ctl(2, 0, a.links[2].sent(), 0))
	}
	if got := a.Backlog(1); got != 0 {
		t.Fatalf("Backlog(1) = %d behind background envelopes only, want 0", got)
	}
	if g, busy := a.BusyWith(); busy {
		t.Fatalf("Busy with %d: 5 background envelopes to 1 (OutboxMax 3) and 200 bytes to 2 after them", g)
	}
	a.Send(1, []byte("ab")) // foreground: 1's backlog starts here
	a.Send(2, []byte("0123456"))
	if got := a.Backlog(1); got != 9 {
		t.Fatalf("Backlog(1) = %d, want 9 (from the foreground envelope on)", got)
	}
	a.Ready()
	snap := a.AppendSnapshot(nil)
	r, err := RestoreChannel(snap, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if r.Backlog(1) != 9 || r.links[1].background != 5 {
		t.Fatalf("restored: Backlog(1) %d, %d background, want 9 and 5", r.Backlog(1), r.links[1].background)
	}
	receive(t, a, ctl(1, 0, 6, 0))
	if got := a.links[1].background; got != 0 || a.Backlog(1) != 0 {
		t.Fatalf("after the ack: %d background envelopes, backlog %d, want 0 and 0", got, a.Backlog(1))
	}
	if err := a.check(); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkBusyBehindBackground: Busy, which a group asks before every
// request, while 5,000 background envelopes wait for a peer that does not
// acknowledge them (a long cut under FlexCast's garbage collection) ahead
// of a foreground one.
func BenchmarkBusyBehindBackground(b *testing.B) {
	cfg := testConfig(0)
	cfg.OutboxMax = 1 << 20
	c, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	for range 5000 {
		c.SendBackground(1, []byte("gc"))
	}
	c.Send(1, []byte("work"))
	c.Ready()
	b.ResetTimer()
	for range b.N {
		if c.Busy() {
			b.Fatal("busy")
		}
	}
}
