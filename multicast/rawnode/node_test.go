package rawnode

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/flexkv/flexkv/internal/wire"
	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/multicast/channel"
	"github.com/flexkv/flexkv/partition"
)

const groups = 3

// echoCore is a tiny protocol core. A request is delivered at once and sent
// to the other destinations; an envelope is delivered, and if its payload is
// "echo" a reply goes back to its sender. A request with payload "corrupt"
// sends garbage instead of the message.
type echoCore struct {
	self    partition.GroupID
	inputs  []multicast.Input // every input accepted, in order
	out     multicast.Output
	busyEnv bool // refuse envelopes as busy (a broken core)
	// hold: requests are sent at once but delivered here only by release,
	// as Skeen's entry group waits.
	hold bool
	held []multicast.Message
}

// release delivers the held requests.
func (c *echoCore) release() {
	c.out.Deliveries = append(c.out.Deliveries, c.held...)
	c.held = nil
}

func (c *echoCore) Step(in multicast.Input) error {
	switch in.Kind {
	case multicast.InputRequest:
		m := in.Msg
		if !m.Dst.Has(c.self) {
			return fmt.Errorf("echo: %w: %s not addressed to %d", multicast.ErrInvalid, m.ID, c.self)
		}
		if c.hold {
			c.held = append(c.held, m)
		} else {
			c.out.Deliveries = append(c.out.Deliveries, m)
		}
		for _, d := range m.Dst.Remove(c.self).Slice() {
			payload := multicast.AppendMessage(nil, m)
			if string(body(m)) == "corrupt" {
				payload = []byte{0xff}
			}
			c.out.Sends = append(c.out.Sends, multicast.Send{To: d, Kind: multicast.KindMsg, About: m.ID, Payload: payload})
		}
	case multicast.InputEnvelope:
		if c.busyEnv {
			return fmt.Errorf("echo: %w", multicast.ErrBusy)
		}
		d := wire.NewDecoder(in.Payload)
		m := multicast.DecodeMessage(d, groups)
		if err := d.Finish(); err != nil {
			return fmt.Errorf("echo: envelope from %d: %w", in.From, err)
		}
		c.out.Deliveries = append(c.out.Deliveries, m)
		if string(body(m)) == "echo" {
			r := multicast.Message{ID: multicast.MsgID{Client: m.ID.Client, Seq: m.ID.Seq + 1000}, Dst: partition.SetOf(in.From), Payload: []byte("reply")}
			c.out.Sends = append(c.out.Sends, multicast.Send{To: in.From, Kind: multicast.KindAck, About: m.ID, Payload: multicast.AppendMessage(nil, r)})
		}
	case multicast.InputTick:
	default:
		return fmt.Errorf("echo: %w: input kind %d", multicast.ErrInvalid, in.Kind)
	}
	c.inputs = append(c.inputs, in)
	return nil
}

// atEpoch returns m as the core sees it: its payload behind the header of
// epoch e.
func atEpoch(e uint64, m multicast.Message) multicast.Message {
	m.Payload = appendEpochHeader(e, m.Payload)
	return m
}

// body returns m's payload without the node's epoch header.
func body(m multicast.Message) []byte {
	_, b := splitEpochHeader(m.ID, m.Payload)
	return b
}

func (c *echoCore) Ready() multicast.Output {
	out := c.out
	c.out = multicast.Output{}
	return out
}

func config(self partition.GroupID) channel.Config {
	return channel.Config{Self: self, Groups: groups, ResendTicks: 2, HoldbackMax: 8, OutboxMax: 4}
}

func startNode(t *testing.T, cfg channel.Config) (*Node, *echoCore) {
	t.Helper()
	core := &echoCore{self: cfg.Self}
	n, err := New(core, cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return n, core
}

func msg(seq uint64, payload string, dst ...partition.GroupID) multicast.Message {
	return multicast.Message{ID: multicast.MsgID{Client: 1, Seq: seq}, Dst: partition.SetOf(dst...), Payload: []byte(payload)}
}

func request(t *testing.T, n *Node, m multicast.Message) {
	t.Helper()
	if err := n.Request(m); err != nil {
		t.Fatalf("Request(%s): %v", m.ID, err)
	}
}

func receive(t *testing.T, n *Node, frames ...channel.Frame) {
	t.Helper()
	for _, f := range frames {
		if err := n.Receive(f); err != nil {
			t.Fatalf("Receive(%s): %v", f, err)
		}
	}
}

var equateEmpty = cmpopts.EquateEmpty()

func wantDeliveries(t *testing.T, got []multicast.Message, want ...multicast.Message) {
	t.Helper()
	if diff := cmp.Diff(want, got, equateEmpty); diff != "" {
		t.Errorf("deliveries (-want +got):\n%s", diff)
	}
}

func TestNewRejects(t *testing.T) {
	if _, err := New(nil, config(0)); err == nil {
		t.Errorf("New(nil core) succeeded")
	}
	bad := config(0)
	bad.ResendTicks = 0
	if _, err := New(&echoCore{}, bad); err == nil {
		t.Errorf("New with invalid config succeeded")
	}
	core := &echoCore{out: multicast.Output{Deliveries: []multicast.Message{msg(1, "x", 0)}}}
	if _, err := New(core, config(0)); err == nil {
		t.Errorf("New over a core with undrained output succeeded")
	}
}

func TestSendsReachChannel(t *testing.T) {
	a, _ := startNode(t, config(0))
	m := msg(1, "x", 0, 1, 2)
	request(t, a, m)
	out := a.Ready()
	wantDeliveries(t, out.Deliveries, m)
	if len(out.Requests) != 1 || out.Requests[0].ID != m.ID {
		t.Errorf("accepted requests %v, want [%s]", out.Requests, m.ID)
	}
	enc := multicast.AppendMessage(nil, atEpoch(1, m))
	wantSends := []multicast.Send{
		{To: 1, Kind: multicast.KindMsg, About: m.ID, Payload: enc},
		{To: 2, Kind: multicast.KindMsg, About: m.ID, Payload: enc},
	}
	if diff := cmp.Diff(wantSends, out.Sends); diff != "" {
		t.Errorf("sends (-want +got):\n%s", diff)
	}
	wantFrames := []channel.Frame{
		{From: 0, To: 1, Seq: 1, Payload: tagged(tagCore, enc)},
		{From: 0, To: 2, Seq: 1, Payload: tagged(tagCore, enc)},
	}
	if diff := cmp.Diff(wantFrames, out.Frames, equateEmpty); diff != "" {
		t.Errorf("frames (-want +got):\n%s", diff)
	}
	for _, g := range []partition.GroupID{1, 2} {
		if got := a.OutboxLen(g); got != 1 {
			t.Errorf("OutboxLen(%d) = %d, want 1", g, got)
		}
	}
	if out := a.Ready(); len(out.Frames)+len(out.Deliveries)+len(out.Sends) != 0 {
		t.Errorf("second Ready returned %+v, want nothing", out)
	}
}

func TestInboundReachesCoreInOrder(t *testing.T) {
	a, _ := startNode(t, config(0))
	b, bCore := startNode(t, config(1))
	ms := []multicast.Message{msg(1, "x", 0, 1), msg(2, "y", 0, 1), msg(3, "z", 0, 1)}
	for _, m := range ms {
		request(t, a, m)
	}
	frames := a.Ready().Frames
	// The network reverses them.
	receive(t, b, frames[2], frames[1])
	out := b.Ready()
	if len(out.Deliveries) != 0 {
		t.Fatalf("delivered %v before the first envelope arrived", out.Deliveries)
	}
	if diff := cmp.Diff([]channel.Frame{{From: 1, To: 0, Ack: 0, Nack: 1}}, out.Frames, equateEmpty); diff != "" {
		t.Errorf("frames (-want +got):\n%s", diff)
	}
	receive(t, b, frames[0])
	wantDeliveries(t, b.Ready().Deliveries, ms...)
	var envelopes []multicast.Input
	for _, in := range bCore.inputs {
		if in.Kind == multicast.InputEnvelope {
			envelopes = append(envelopes, in)
		}
	}
	for i, in := range envelopes {
		if want := multicast.AppendMessage(nil, atEpoch(1, ms[i])); in.From != 0 || !bytes.Equal(in.Payload, want) {
			t.Errorf("envelope %d stepped into the core: from %d payload %x, want from 0 payload %x", i, in.From, in.Payload, want)
		}
	}
	if len(envelopes) != len(ms) {
		t.Errorf("core stepped %d envelopes, want %d", len(envelopes), len(ms))
	}
	// Duplicates do not reach the core again.
	receive(t, b, frames...)
	if got := b.Ready().Deliveries; len(got) != 0 {
		t.Errorf("duplicates delivered %v", got)
	}
}

func TestReplyAndAckRoundTrip(t *testing.T) {
	a, _ := startNode(t, config(0))
	b, _ := startNode(t, config(1))
	m := msg(1, "echo", 0, 1)
	request(t, a, m)
	aOut := a.Ready()
	receive(t, b, aOut.Frames...)
	bOut := b.Ready()
	reply := multicast.Message{ID: multicast.MsgID{Client: 1, Seq: 1001}, Dst: partition.SetOf(0), Payload: []byte("reply")}
	wantDeliveries(t, bOut.Deliveries, m)
	// The reply carries b's ack of m.
	want := []channel.Frame{{From: 1, To: 0, Seq: 1, Ack: 1, Payload: tagged(tagCore, multicast.AppendMessage(nil, reply))}}
	if diff := cmp.Diff(want, bOut.Frames, equateEmpty); diff != "" {
		t.Fatalf("frames (-want +got):\n%s", diff)
	}
	receive(t, a, bOut.Frames...)
	wantDeliveries(t, a.Ready().Deliveries, reply)
	if got := a.OutboxLen(1); got != 0 {
		t.Errorf("a's outbox to 1 holds %d after the piggybacked ack, want 0", got)
	}
	// a owes b an ack for the reply: it goes out on a's tick.
	a.Tick()
	receive(t, b, a.Ready().Frames...)
	if got := b.OutboxLen(0); got != 0 {
		t.Errorf("b's outbox to 0 holds %d after a's tick, want 0", got)
	}
}

func TestBusyRefusesRequests(t *testing.T) {
	a, aCore := startNode(t, config(0)) // OutboxMax 4
	b, _ := startNode(t, config(1))
	for i := range 4 {
		request(t, a, msg(uint64(i+1), "x", 0, 1))
	}
	frames := a.Ready().Frames
	if !a.Busy() {
		t.Fatalf("not Busy with 4 unacked envelopes, OutboxMax 4")
	}
	inputs := len(aCore.inputs)
	err := a.Request(msg(5, "x", 0, 2))
	if !errors.Is(err, multicast.ErrBusy) {
		t.Fatalf("Request while busy = %v, want ErrBusy", err)
	}
	if len(aCore.inputs) != inputs {
		t.Errorf("the core was stepped while busy")
	}
	if out := a.Ready(); len(out.Frames)+len(out.Deliveries)+len(out.Sends) != 0 {
		t.Errorf("refused request produced %+v", out)
	}
	// While busy, the core's clock stands still.
	a.Tick()
	a.Ready()
	if len(aCore.inputs) != inputs {
		t.Errorf("the core was ticked while busy")
	}
	// b acknowledges: a admits requests again.
	receive(t, b, frames...)
	b.Tick()
	receive(t, a, b.Ready().Frames...)
	if a.Busy() {
		t.Fatalf("Busy after every envelope was acknowledged")
	}
	request(t, a, msg(5, "x", 0, 2))
	a.Tick()
	if last := aCore.inputs[len(aCore.inputs)-1]; last.Kind != multicast.InputTick {
		t.Errorf("the core was not ticked once the node was no longer busy")
	}
}

// TestBusyAtBacklog: a request's payload counts in the backlog behind a
// peer that has not acknowledged, and the refusal names that peer.
func TestBusyAtBacklog(t *testing.T) {
	cfg := config(0)
	cfg.OutboxMax = 100
	cfg.BacklogBytesMax, cfg.OutboxBytesMax = 50, 100
	a, _ := startNode(t, cfg)
	request(t, a, msg(1, "x", 0, 2)) // one envelope sent, 1 byte charged
	a.Ready()
	sent := a.OutboxBytes(2)
	if got, want := a.Backlog(2), uint64(sent+1); got != want {
		t.Fatalf("Backlog(2) = %d, want %d", got, want)
	}
	request(t, a, msg(2, strings.Repeat("p", 49-sent), 0)) // local: charged only
	err := a.Request(msg(3, "y", 0))
	if !errors.Is(err, multicast.ErrBusy) || !strings.Contains(err.Error(), "group 2 is unreachable or slow") {
		t.Fatalf("Request at backlog %d of 50 = %v, want ErrBusy naming group 2", a.Backlog(2), err)
	}
	if got := a.OutboxBytes(2); got != sent {
		t.Errorf("OutboxBytes(2) = %d, want %d", got, sent)
	}
}

func TestCorruptEnvelopeSkipped(t *testing.T) {
	a, _ := startNode(t, config(0))
	b, bCore := startNode(t, config(1))
	bad, good := msg(1, "corrupt", 0, 1), msg(2, "fine", 0, 1)
	request(t, a, bad)
	request(t, a, good)
	receive(t, b, a.Ready().Frames...)
	out := b.Ready()
	wantDeliveries(t, out.Deliveries, good)
	if len(out.Rejected) != 1 || out.Rejected[0].From != 0 || !errors.Is(out.Rejected[0].Err, wire.ErrCorrupt) {
		t.Errorf("Rejected = %+v, want one corrupt envelope from group 0", out.Rejected)
	}
	st := b.Stats()
	if st.EnvelopesRejected != 1 || st.Channel.Delivered != 2 {
		t.Errorf("Stats = %+v, want 1 envelope rejected of 2 handed up", st)
	}
	if got := len(bCore.inputs); got != 1 {
		t.Errorf("core accepted %d inputs, want 1", got)
	}
	// The corrupt envelope was sequenced: b acknowledges both.
	b.Tick()
	receive(t, a, b.Ready().Frames...)
	if got := a.OutboxLen(1); got != 0 {
		t.Errorf("a's outbox to 1 holds %d, want 0", got)
	}
}

func TestRequestErrorReturned(t *testing.T) {
	a, aCore := startNode(t, config(0))
	err := a.Request(msg(1, "x", 1, 2))
	if !errors.Is(err, multicast.ErrInvalid) {
		t.Fatalf("Request not addressed to the entry = %v, want ErrInvalid", err)
	}
	if len(aCore.inputs) != 0 {
		t.Errorf("core accepted the request")
	}
	if out := a.Ready(); len(out.Frames)+len(out.Deliveries)+len(out.Sends) != 0 {
		t.Errorf("rejected request produced %+v", out)
	}
}

func TestMalformedFrameRejected(t *testing.T) {
	b, bCore := startNode(t, config(1))
	before := b.AppendSnapshot(nil)
	err := b.Receive(channel.Frame{From: 0, To: 2, Seq: 1, Payload: []byte("x")})
	if !errors.Is(err, multicast.ErrInvalid) {
		t.Fatalf("Receive of a frame for group 2 = %v, want ErrInvalid", err)
	}
	if len(bCore.inputs) != 0 {
		t.Errorf("core stepped %v", bCore.inputs)
	}
	if out := b.Ready(); len(out.Frames) != 0 {
		t.Errorf("malformed frame produced frames %v", out.Frames)
	}
	if !bytes.Equal(before, b.AppendSnapshot(nil)) {
		t.Errorf("malformed frame changed the state")
	}
}

func TestTickReachesChannelAndCore(t *testing.T) {
	a, aCore := startNode(t, config(0)) // ResendTicks 2
	request(t, a, msg(1, "x", 0, 1))
	sent := a.Ready().Frames
	a.Tick()
	if out := a.Ready(); len(out.Frames) != 0 {
		t.Fatalf("resent %v after 1 tick, ResendTicks 2", out.Frames)
	}
	a.Tick()
	if diff := cmp.Diff(sent, a.Ready().Frames, equateEmpty); diff != "" {
		t.Errorf("resent frames (-want +got):\n%s", diff)
	}
	ticks := 0
	for _, in := range aCore.inputs {
		if in.Kind == multicast.InputTick {
			ticks++
		}
	}
	if ticks != 2 {
		t.Errorf("core stepped %d ticks, want 2", ticks)
	}
	if got := a.Stats().Channel.DataResent; got != 1 {
		t.Errorf("DataResent = %d, want 1", got)
	}
}

func TestCoreBusyOnEnvelopePanics(t *testing.T) {
	a, _ := startNode(t, config(0))
	b, bCore := startNode(t, config(1))
	bCore.busyEnv = true
	request(t, a, msg(1, "x", 0, 1))
	frames := a.Ready().Frames
	defer func() {
		if recover() == nil {
			t.Errorf("a core refusing an envelope as busy did not panic")
		}
	}()
	_ = b.Receive(frames[0])
}

// TestReplicasAgree feeds two replicas of a group, one of them restored from
// the other's snapshot midway, the same inputs, and checks that their
// outputs and states are identical.
func TestReplicasAgree(t *testing.T) {
	cfg := config(0)
	cfg.OutboxMax = 16
	a, _ := startNode(t, cfg)
	r1, _ := startNode(t, config(1))
	for i := range 6 {
		request(t, a, msg(uint64(i+1), "echo", 0, 1))
	}
	inputs := a.Ready().Frames
	// Out of order, with a duplicate, and a corrupt one.
	request(t, a, msg(7, "corrupt", 0, 1))
	inputs = append(inputs, a.Ready().Frames...)
	order := []int{1, 0, 3, 3, 2, 6, 5, 4}

	step := func(n *Node, i int) Output {
		if i%3 == 2 {
			n.Tick()
		}
		if err := n.Receive(inputs[order[i]]); err != nil {
			t.Fatalf("Receive(%s): %v", inputs[order[i]], err)
		}
		return n.Ready()
	}
	var r2 *Node
	delivered := 0
	for i := range order {
		if i == 3 {
			core := &echoCore{self: 1}
			var err error
			if r2, err = Restore(core, partition.Ranks{}, config(1), r1.AppendSnapshot(nil), nil); err != nil {
				t.Fatalf("Restore: %v", err)
			}
		}
		o1 := step(r1, i)
		delivered += len(o1.Deliveries)
		if r2 == nil {
			continue
		}
		o2 := step(r2, i)
		opts := []cmp.Option{equateEmpty, cmp.Comparer(func(x, y error) bool { return x.Error() == y.Error() })}
		if diff := cmp.Diff(o1, o2, opts...); diff != "" {
			t.Fatalf("step %d: outputs differ (-replica 1 +replica 2):\n%s", i, diff)
		}
	}
	if delivered != 6 {
		t.Errorf("replica 1 delivered %d messages, want 6", delivered)
	}
	if s1, s2 := r1.AppendSnapshot(nil), r2.AppendSnapshot(nil); !bytes.Equal(s1, s2) {
		t.Errorf("replica states differ")
	}
	if diff := cmp.Diff(r1.Stats(), r2.Stats()); diff != "" {
		t.Errorf("replica stats (-1 +2):\n%s", diff)
	}
	if got := r1.Stats().EnvelopesRejected; got != 1 {
		t.Errorf("EnvelopesRejected = %d, want 1", got)
	}
}

func TestRestoreRejects(t *testing.T) {
	b, _ := startNode(t, config(1))
	snap := b.AppendSnapshot(nil)
	for n := range len(snap) {
		if _, err := Restore(&echoCore{self: 1}, partition.Ranks{}, config(1), snap[:n], nil); !errors.Is(err, wire.ErrCorrupt) {
			t.Errorf("Restore of %d of %d bytes = %v, want ErrCorrupt", n, len(snap), err)
		}
	}
	if _, err := Restore(&echoCore{self: 2}, partition.Ranks{}, config(2), snap, nil); !errors.Is(err, wire.ErrCorrupt) {
		t.Errorf("Restore of group 1's snapshot as group 2 = %v, want ErrCorrupt", err)
	}
}

func TestAppPayloadsTravelBesideTheCore(t *testing.T) {
	a, _ := startNode(t, config(0))
	b, bCore := startNode(t, config(1))
	m := msg(1, "x", 0, 1)
	request(t, a, m)
	a.SendApp([]AppSend{{To: 1, About: m.ID, Payload: []byte("vote-1")}, {To: 1, Payload: []byte("vote-2")}})
	frames := a.Ready().Frames
	if len(frames) != 3 {
		t.Fatalf("a produced %d frames, want 3 (one envelope, two votes)", len(frames))
	}
	// The network reverses them: the channel restores FIFO order.
	receive(t, b, frames[2], frames[1], frames[0])
	out := b.Ready()
	wantDeliveries(t, out.Deliveries, m)
	want := []AppInbound{{From: 0, Payload: []byte("vote-1")}, {From: 0, Payload: []byte("vote-2")}}
	if diff := cmp.Diff(want, out.App); diff != "" {
		t.Errorf("app payloads (-want +got):\n%s", diff)
	}
	for _, in := range bCore.inputs {
		if in.Kind == multicast.InputEnvelope && bytes.HasPrefix(in.Payload, []byte("vote")) {
			t.Errorf("an application payload reached the core: %q", in.Payload)
		}
	}
	// Duplicates are not handed up again.
	receive(t, b, frames...)
	if got := b.Ready().App; len(got) != 0 {
		t.Errorf("duplicates handed up %v", got)
	}
	// An envelope without a known tag is rejected, not stepped.
	c, _ := startNode(t, config(2))
	if err := c.Receive(channel.Frame{From: 0, To: 2, Seq: 1, Payload: []byte{7, 1}}); err != nil {
		t.Fatalf("Receive: %v", err)
	}
	if out := c.Ready(); len(out.Rejected) != 1 || !errors.Is(out.Rejected[0].Err, multicast.ErrInvalid) {
		t.Errorf("untagged envelope: rejected %v, want one ErrInvalid", out.Rejected)
	}
}
