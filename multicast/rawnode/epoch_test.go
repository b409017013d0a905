package rawnode

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/flexkv/flexkv/internal/wire"
	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/multicast/channel"
	"github.com/flexkv/flexkv/partition"
)

var all = partition.SetOf(0, 1, 2)

// framesTo returns the frames of fs addressed to group g.
func framesTo(g partition.GroupID, fs []channel.Frame) []channel.Frame {
	var out []channel.Frame
	for _, f := range fs {
		if f.To == g {
			out = append(out, f)
		}
	}
	return out
}

// wantEpochError checks that err is an *EpochError of sentinel with the
// epochs got and epoch.
func wantEpochError(t *testing.T, err, sentinel error, got, epoch uint64) {
	t.Helper()
	var ee *EpochError
	if !errors.Is(err, sentinel) || !errors.As(err, &ee) || ee.Got != got || ee.Epoch != epoch {
		t.Errorf("error %v, want %v naming epochs %d and %d", err, sentinel, got, epoch)
	}
}

// TestChangeStartsEpoch: the entry group that delivered the change of
// epoch 1 refuses further requests of epoch 1, naming epoch 2, and takes
// those of epoch 2; a request of epoch 3 waits (busy). The change reaches
// the other groups' outputs, in its place, and never their deliveries.
func TestChangeStartsEpoch(t *testing.T) {
	a, _ := startNode(t, config(0))
	b, _ := startNode(t, config(1))
	m1 := msg(1, "before", 0, 1)
	request(t, a, m1)
	if err := a.Change(1, all, []byte("cfg-2")); err != nil {
		t.Fatalf("Change: %v", err)
	}
	out := a.Ready()
	frames := out.Frames
	wantDeliveries(t, out.Deliveries, m1)
	if diff := cmp.Diff([]Change{{Epoch: 1, Config: []byte("cfg-2"), At: 1}}, out.Changes); diff != "" {
		t.Errorf("changes (-want +got):\n%s", diff)
	}
	if a.Epoch() != 2 || a.Changing() {
		t.Errorf("after the change: epoch %d changing %v, want 2 false", a.Epoch(), a.Changing())
	}
	m2 := msg(2, "late", 0, 1)
	wantEpochError(t, a.RequestAt(m2, 1), ErrEpochChanged, 1, 2)
	err := a.RequestAt(m2, 3)
	wantEpochError(t, err, ErrEpochAhead, 3, 2)
	if !errors.Is(err, multicast.ErrBusy) {
		t.Errorf("a request of a newer epoch: %v, want it to wrap ErrBusy (retry)", err)
	}
	if err := a.RequestAt(m2, 2); err != nil {
		t.Fatalf("RequestAt(epoch 2): %v", err)
	}
	receive(t, b, framesTo(1, append(frames, a.Ready().Frames...))...)
	out = b.Ready()
	wantDeliveries(t, out.Deliveries, m1, m2)
	if len(out.Changes) != 1 || out.Changes[0].At != 1 || out.Changes[0].Epoch != 1 || len(out.Aborted) != 0 {
		t.Errorf("at b: changes %+v aborted %v, want the change after m1 and nothing aborted", out.Changes, out.Aborted)
	}
	if b.Epoch() != 2 {
		t.Errorf("b at epoch %d, want 2", b.Epoch())
	}
}

// TestOlderEpochAbortedAfterChange: a message of epoch 1 taken by another
// entry group before it heard of the change, and delivered after it, is
// delivered in its place and listed as aborted.
func TestOlderEpochAbortedAfterChange(t *testing.T) {
	a, _ := startNode(t, config(0))
	b, _ := startNode(t, config(1))
	c, _ := startNode(t, config(2))
	if err := a.Change(1, all, nil); err != nil {
		t.Fatalf("Change: %v", err)
	}
	fromA := a.Ready().Frames
	m := msg(1, "old", 1, 2)
	request(t, c, m) // c is still at epoch 1
	fromC := c.Ready().Frames
	receive(t, b, framesTo(1, fromA)...)
	receive(t, b, framesTo(1, fromC)...)
	out := b.Ready()
	wantDeliveries(t, out.Deliveries, m)
	if diff := cmp.Diff([]multicast.MsgID{m.ID}, out.Aborted); diff != "" {
		t.Errorf("aborted (-want +got):\n%s", diff)
	}
	if len(out.Changes) != 1 || out.Changes[0].At != 0 {
		t.Errorf("changes %+v, want the change before m", out.Changes)
	}
}

// TestSecondChangeRefused: while a change of the epoch is under way at the
// entry group, another is refused naming the epoch; once it is delivered, a
// change that names the ended epoch is refused as changed, and the next
// epoch's is taken.
func TestSecondChangeRefused(t *testing.T) {
	a, core := startNode(t, config(0))
	core.hold = true
	if err := a.Change(1, all, nil); err != nil {
		t.Fatalf("Change: %v", err)
	}
	if !a.Changing() {
		t.Fatalf("Changing() = false with a change taken and not delivered")
	}
	wantEpochError(t, a.Change(1, all, nil), ErrChangePending, 1, 1)
	m := msg(1, "x", 0, 1)
	if err := a.RequestAt(m, 1); err != nil {
		t.Fatalf("a request of the epoch under change: %v", err)
	}
	core.release()
	request(t, a, msg(2, "y", 0)) // drains the core
	out := a.Ready()
	if len(out.Changes) != 1 || len(out.Aborted) != 1 || out.Aborted[0] != m.ID {
		t.Errorf("changes %+v aborted %v, want one change and %s aborted (taken in epoch 1, delivered after the change)", out.Changes, out.Aborted, m.ID)
	}
	wantEpochError(t, a.Change(1, all, nil), ErrEpochChanged, 1, 2)
	if err := a.Change(2, all, nil); err != nil {
		t.Errorf("Change(2): %v", err)
	}
}

func TestReservedIDsRefused(t *testing.T) {
	a, _ := startNode(t, config(0))
	for _, id := range []multicast.MsgID{ControlID(1), {Client: multicast.FlushClient, Seq: 1}} {
		m := multicast.Message{ID: id, Dst: partition.SetOf(0), Payload: []byte("x")}
		if err := a.RequestAt(m, 1); !errors.Is(err, multicast.ErrInvalid) {
			t.Errorf("request %s: %v, want ErrInvalid", id, err)
		}
	}
}

// TestEpochSnapshot: a snapshot keeps the epoch and a change under way; a
// snapshot of the version before epochs restores at epoch 1.
func TestEpochSnapshot(t *testing.T) {
	a, core := startNode(t, config(0))
	if err := a.Change(1, all, nil); err != nil {
		t.Fatal(err)
	}
	core.hold = true
	if err := a.Change(2, all, nil); err != nil {
		t.Fatal(err)
	}
	a.Ready()
	r, err := Restore(&echoCore{self: 0}, partition.Ranks{}, config(0), a.AppendSnapshot(nil), nil)
	if err != nil {
		t.Fatalf("Restore: %v", err)
	}
	if r.Epoch() != 2 || !r.Changing() {
		t.Errorf("restored epoch %d changing %v, want 2 true", r.Epoch(), r.Changing())
	}
	ch, err := channel.New(config(0))
	if err != nil {
		t.Fatal(err)
	}
	v1 := wire.AppendUvarint(wire.AppendBytes(nil, ch.AppendSnapshot(nil)), 0)
	old, err := Restore(&echoCore{self: 0}, partition.Ranks{}, config(0), v1, nil)
	if err != nil {
		t.Fatalf("Restore of a version-1 snapshot: %v", err)
	}
	if old.Epoch() != 1 || old.Changing() {
		t.Errorf("version-1 snapshot restored at epoch %d changing %v, want 1 false", old.Epoch(), old.Changing())
	}
}

// TestPayloadWithoutHeaderIsEpochOne: what a core ordered before epochs
// existed carries no header, and is of epoch 1.
func TestPayloadWithoutHeaderIsEpochOne(t *testing.T) {
	id := multicast.MsgID{Client: 1, Seq: 1}
	if e, b := splitEpochHeader(id, []byte{1, 2}); e != 1 || string(b) != "\x01\x02" {
		t.Errorf("split of a bare payload: epoch %d payload %x", e, b)
	}
	if e, b := splitEpochHeader(id, appendEpochHeader(7, []byte{1})); e != 7 || string(b) != "\x01" {
		t.Errorf("split of a payload of epoch 7: epoch %d payload %x", e, b)
	}
}
