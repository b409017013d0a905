package rawnode

import (
	"errors"
	"strings"
	"testing"

	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/partition"
)

// snapCore is an echoCore that can be snapshotted: its snapshot names its
// group, in the numbering it runs on.
type snapCore struct{ echoCore }

func (c *snapCore) AppendSnapshot(b []byte) []byte { return append(b, 'e', byte(c.self)) }

// reversed ranks the three groups 2, 1, 0.
var reversed = mustRanks([]partition.GroupID{2, 1, 0})

func mustRanks(order []partition.GroupID) partition.Ranks {
	r, err := partition.NewRanks(order)
	if err != nil {
		panic(err)
	}
	return r
}

// genBuilder starts a new core, on the reversed ranks, at a change whose
// configuration says "rebuild", and keeps the core at any other.
type genBuilder struct {
	self     partition.GroupID
	restored []uint64 // the generations RestoreCore was asked for
}

func (b *genBuilder) Begin(c Change) (multicast.Core, partition.Ranks, error) {
	if string(c.Config) != "rebuild" {
		return nil, partition.Ranks{}, nil
	}
	return &snapCore{echoCore{self: reversed.Rank(b.self)}}, reversed, nil
}

func (b *genBuilder) RestoreCore(from uint64, snap []byte) (multicast.Core, partition.Ranks, error) {
	b.restored = append(b.restored, from)
	if len(snap) != 2 || snap[0] != 'e' || partition.GroupID(snap[1]) != b.self {
		// Generation 1 runs on the bootstrap numbering.
		return nil, partition.Ranks{}, errors.New("not this group's core")
	}
	return &snapCore{echoCore{self: b.self}}, partition.Ranks{}, nil
}

func startGenNode(t *testing.T, g partition.GroupID) *Node {
	t.Helper()
	n, err := New(&snapCore{echoCore{self: g}}, config(g))
	if err != nil {
		t.Fatal(err)
	}
	n.SetBuilder(&genBuilder{self: g})
	return n
}

// TestGenerationsAcrossAChange: a change that says so starts a new core at
// each group at its delivery, on the reversed ranks. The node translates:
// the new core of group 0 runs as rank 2, its request's destinations and
// its sends are in ranks, the deliveries and frames in groups. An envelope
// of the new generation for a group that has not started it is held (also
// across a snapshot) until that group says it did. The old core retires
// until every other group said it started the new generation.
func TestGenerationsAcrossAChange(t *testing.T) {
	a, b, c := startGenNode(t, 0), startGenNode(t, 1), startGenNode(t, 2)
	if err := a.Change(1, all, []byte("rebuild")); err != nil {
		t.Fatal(err)
	}
	aOut := a.Ready()
	if gen, r := a.Generation(); gen != 2 || r.Rank(0) != 2 || a.Retiring() != 1 {
		t.Fatalf("a after the change: generation %d, rank %d, %d retiring; want 2, 2, 1", gen, r.Rank(0), a.Retiring())
	}
	m := msg(1, "new", 0, 1)
	request(t, a, m)
	aOut2 := a.Ready()
	wantDeliveries(t, aOut2.Deliveries, m)
	if len(aOut2.Sends) != 1 || aOut2.Sends[0].To != 1 {
		t.Errorf("a's send of m: %+v, want one to group 1", aOut2.Sends)
	}
	aFrames := append(aOut.Frames, aOut2.Frames...)

	// c delivers the change first, and has a message of the new
	// generation for b, which it holds until b says it started it.
	receive(t, c, framesTo(2, aFrames)...)
	if gen, _ := c.Generation(); gen != 2 {
		t.Fatalf("c at generation %d, want 2", gen)
	}
	m2 := msg(2, "from c", 1, 2)
	request(t, c, m2)
	if c.HeldLen() != 1 {
		t.Fatalf("c holds %d envelopes, want m2 for b", c.HeldLen())
	}
	// Only c's start of generation 2 reaches b: b sees nothing to step.
	receive(t, b, framesTo(1, c.Ready().Frames)...)
	if out := b.Ready(); len(out.Deliveries) != 0 || len(out.Rejected) != 0 {
		t.Errorf("b before the change: delivered %v, rejected %v", out.Deliveries, out.Rejected)
	}

	// A snapshot keeps what c holds.
	cb := &genBuilder{self: 2}
	c2, err := Restore(&snapCore{echoCore{self: reversed.Rank(2)}}, reversed, config(2), c.AppendSnapshot(nil), cb)
	if err != nil {
		t.Fatal(err)
	}
	if c2.HeldLen() != 1 || len(cb.restored) != 1 || cb.restored[0] != 1 {
		t.Fatalf("restored c: %d held, restored %v; want 1, [1]", c2.HeldLen(), cb.restored)
	}

	// a's frames to b: the change and a's start of generation 2; a holds
	// m for b.
	toB := framesTo(1, aFrames)
	if len(toB) != 2 || a.HeldLen() != 1 {
		t.Fatalf("a sent b %d frames and holds %d, want 2 (the change, its start) and m", len(toB), a.HeldLen())
	}
	receive(t, b, toB[0])
	out := b.Ready()
	if len(out.Changes) != 1 || b.Epoch() != 2 {
		t.Fatalf("b after the change: %+v at epoch %d", out.Changes, b.Epoch())
	}
	if b.Retiring() != 1 {
		t.Errorf("b after the change: %d retiring; want 1 (a has not said it started)", b.Retiring())
	}
	// b's start of generation 2 reaches c and a, which send it m2 and m.
	receive(t, c2, framesTo(2, out.Frames)...)
	receive(t, a, framesTo(0, out.Frames)...)
	if c2.HeldLen() != 0 || a.HeldLen() != 0 {
		t.Errorf("c holds %d and a %d envelopes after b started generation 2", c2.HeldLen(), a.HeldLen())
	}
	receive(t, b, framesTo(1, c2.Ready().Frames)...)
	wantDeliveries(t, b.Ready().Deliveries, m2)
	receive(t, b, toB[1:]...)
	receive(t, b, framesTo(1, a.Ready().Frames)...)
	out = b.Ready()
	wantDeliveries(t, out.Deliveries, m)
	if b.Retiring() != 0 {
		t.Errorf("b keeps %d retiring cores after every group started generation 2", b.Retiring())
	}
	// An envelope of the dropped generation is skipped and counted.
	if err := b.inbound(0, coreEnvelope(1, multicast.AppendMessage(nil, msg(9, "old", 0, 1)))); err != nil || b.Stats().EnvelopesStale != 1 {
		t.Errorf("an envelope of the dropped generation: %v, %d stale; want nil, 1", err, b.Stats().EnvelopesStale)
	}
	if out := b.Ready(); len(out.Deliveries) != 0 {
		t.Errorf("b delivered %v from a dropped generation", out.Deliveries)
	}
	// Every frame b sends from now on is of generation 2, tagged so.
	request(t, b, msg(3, "x", 1, 2))
	for _, f := range b.Ready().Frames {
		if f.To == 2 && len(f.Payload) > 0 && f.Payload[0] != tagCoreGen && f.Payload[0] != tagStarted {
			t.Errorf("b's frame to c after the change has tag %d", f.Payload[0])
		}
	}

}

// TestRestoreRetiringCore: a snapshot with a retiring core restores it
// through the builder, and is refused without one.
func TestRestoreRetiringCore(t *testing.T) {
	a := startGenNode(t, 0)
	if err := a.Change(1, all, []byte("rebuild")); err != nil {
		t.Fatal(err)
	}
	a.Ready()
	// A snapshot with a retiring core restores it through the builder.
	snap := a.AppendSnapshot(nil)
	ab := &genBuilder{self: 0}
	a2, err := Restore(&snapCore{echoCore{self: reversed.Rank(0)}}, reversed, config(0), snap, ab)
	if err != nil {
		t.Fatal(err)
	}
	if gen, _ := a2.Generation(); gen != 2 || a2.Retiring() != 1 || len(ab.restored) != 1 || ab.restored[0] != 1 {
		t.Errorf("restored a: generation %d, %d retiring, restored %v; want 2, 1, [1]", gen, a2.Retiring(), ab.restored)
	}
	if _, err := Restore(&snapCore{echoCore{self: 2}}, reversed, config(0), snap, nil); !strings.Contains(fmtErr(err), "no builder") {
		t.Errorf("restore of a retiring core without a builder: %v, want it refused", err)
	}
}

func fmtErr(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// TestRetiringCoreMustNotDeliver: a retiring core that delivers a message
// (a group that started the next generation with work of the old one
// pending: a broken core) makes the node panic rather than deliver out of
// the order.
func TestRetiringCoreMustNotDeliver(t *testing.T) {
	a, b, c := startGenNode(t, 0), startGenNode(t, 1), startGenNode(t, 2)
	if err := a.Change(1, all, []byte("rebuild")); err != nil {
		t.Fatal(err)
	}
	receive(t, b, framesTo(1, a.Ready().Frames)...)
	b.Ready()
	// c never saw the change: it still sends in generation 1, and b keeps
	// its old core for it.
	request(t, c, msg(1, "late", 1, 2))
	frames := framesTo(1, c.Ready().Frames)
	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(string), "after this group left it") {
			t.Errorf("recovered %v, want the node's panic about a retiring core's delivery", r)
		}
	}()
	for _, f := range frames {
		_ = b.Receive(f)
	}
}

// TestGenerationEnvelopesRefused: a malformed generation tag, or an
// envelope of a generation the group has not started (a correct sender
// holds it), is rejected like any malformed envelope, and skipped.
func TestGenerationEnvelopesRefused(t *testing.T) {
	b := startGenNode(t, 1)
	for _, payload := range [][]byte{{tagCoreGen}, {tagCoreGen, 1}, {tagStarted, 0x80}, {tagStarted, 2, 9}, {tagCoreGen, 2, 0}} {
		err := b.inbound(0, payload)
		if !errors.Is(err, multicast.ErrInvalid) {
			t.Errorf("envelope %v: %v, want ErrInvalid", payload, err)
		}
	}
}

// TestHeldIsABacklog: what a group holds for a group that has not started
// its generation counts like a backlog: past the channel's bound the node
// refuses requests, naming that group, and takes them again once the
// group started the generation and got what was held.
func TestHeldIsABacklog(t *testing.T) {
	a, b := startGenNode(t, 0), startGenNode(t, 1)
	if err := a.Change(1, all, []byte("rebuild")); err != nil {
		t.Fatal(err)
	}
	toB := framesTo(1, a.Ready().Frames)
	big := strings.Repeat("x", 1<<20)
	limit := a.ch.Config().BacklogBytesMax
	var err error
	for i := uint64(1); err == nil; i++ {
		if a.heldBytes(1) > 2*limit {
			t.Fatalf("held %d bytes for b and still taking requests (bound %d)", a.heldBytes(1), limit)
		}
		err = a.Request(msg(i, big, 0, 1))
	}
	// The channel's backlog (b acknowledges nothing) or what is held:
	// either bound names b.
	if !errors.Is(err, multicast.ErrBusy) || !strings.Contains(err.Error(), "group 1") {
		t.Fatalf("request past the bound: %v, want busy naming group 1", err)
	}
	if to, busy := a.BusyWith(); !busy || to != 1 {
		t.Errorf("BusyWith = %d, %v; want 1, true", to, busy)
	}
	// What is held alone: b acknowledged everything, but has not said it
	// started generation 2.
	if to, busy := a.heldBusy(); a.heldBytes(1) > limit && (!busy || to != 1) {
		t.Errorf("held %d bytes for b (bound %d): heldBusy = %d, %v", a.heldBytes(1), limit, to, busy)
	}
	a.held = append(a.held, heldEnvelope{to: 1, gen: 2, payload: make([]byte, limit+1)})
	if err := a.request(msg(99, "x", 0, 1), 2); !strings.Contains(fmtErr(err), "group 1") || (a.ch.Backlog(1) <= uint64(limit) && !strings.Contains(fmtErr(err), "has not started")) {
		t.Errorf("with more than the bound held for b: %v", err)
	}
	a.Ready()
	receive(t, b, toB...)
	receive(t, a, framesTo(0, b.Ready().Frames)...)
	// What was held goes to b, which acknowledges it.
	for range 64 {
		a.Tick()
		b.Tick()
		receive(t, b, framesTo(1, a.Ready().Frames)...)
		receive(t, a, framesTo(0, b.Ready().Frames)...)
	}
	// (Group 2, which never answers, keeps a busy on its own account.)
	if to, busy := a.BusyWith(); a.HeldLen() != 0 || (busy && to == 1) {
		t.Errorf("after b started generation 2: %d held, busy with %d: %v (outbox %d, backlog %d)", a.HeldLen(), to, busy, a.OutboxLen(1), a.Backlog(1))
	}
}
