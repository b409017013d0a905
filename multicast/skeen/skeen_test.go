package skeen

import (
	"bytes"
	"errors"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/flexkv/flexkv/internal/wire"
	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/partition"
)

func TestNew(t *testing.T) {
	top := testTopology(t, 3)
	tests := []struct {
		name    string
		cfg     Config
		wantErr bool
		wantMax int
	}{
		{name: "default bound", cfg: Config{Self: 2, Topology: top}, wantMax: PendingMaxDefault},
		{name: "explicit bound", cfg: Config{Self: 0, Topology: top, PendingMax: 7}, wantMax: 7},
		{name: "no topology", cfg: Config{Self: 0}, wantErr: true},
		{name: "self beyond the groups", cfg: Config{Self: 3, Topology: top}, wantErr: true},
		{name: "self negative", cfg: Config{Self: partition.NoGroup, Topology: top}, wantErr: true},
		{name: "negative bound", cfg: Config{Self: 0, Topology: top, PendingMax: -1}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := New(tt.cfg)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("New(%+v) succeeded, want an error", tt.cfg)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.pendingMax != tt.wantMax {
				t.Errorf("got PendingMax %d, want %d", c.pendingMax, tt.wantMax)
			}
			if got := c.Stats(); got != (Stats{}) {
				t.Errorf("new core: got %+v, want zero stats", got)
			}
		})
	}
}

// preparedCore returns core B of groups A, B, C (n = 3) holding one message
// of each kind, with its output undrained:
//   - c1.1 to {A,B,C}: relayed by A, A's proposal 1.A held, undecided;
//   - c5.5 to {A,B,C}: C's proposal 3.C buffered, the message not received;
//   - c2.2 to {B,C}: relayed by C with its proposal 5.C, decided (final 5.C),
//     held back by c1.1, whose proposal 1.B is smaller.
func preparedCore(t testing.TB) *Core {
	t.Helper()
	c, err := New(Config{Self: 1, Topology: testTopology(t, 3), PendingMax: 3})
	if err != nil {
		t.Fatal(err)
	}
	all := partition.SetOf(0, 1, 2)
	steps := []struct {
		from    partition.GroupID
		payload []byte
	}{
		{0, appendRelay(nil, msg(1, 1, 0, 1, 2))},
		{0, appendProposal(nil, multicast.MsgID{Client: 1, Seq: 1}, all, 1*3+0)},
		{2, appendProposal(nil, multicast.MsgID{Client: 5, Seq: 5}, all, 3*3+2)},
		{2, appendRelay(nil, msg(2, 2, 1, 2))},
		{2, appendProposal(nil, multicast.MsgID{Client: 2, Seq: 2}, partition.SetOf(1, 2), 5*3+2)},
	}
	for _, s := range steps {
		if err := c.Step(multicast.Envelope(s.from, s.payload)); err != nil {
			t.Fatal(err)
		}
	}
	// PendingBytes: the payloads of messages 1.1 and 2.2, 11 bytes each.
	want := Stats{Pending: 3, PendingBytes: 22, Undecided: 1, Decided: 1, Buffered: 1, PendingPeak: 3, Clock: 5}
	if got := c.Stats(); got != want {
		t.Fatalf("prepared core: got %+v, want %+v", got, want)
	}
	if err := c.checkInvariants(); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestRejectedInputsLeaveStateUntouched steps bad inputs, and two ignored
// ones, at a core holding undecided, decided and buffered messages and
// undrained output: the error is the documented one and nothing changes.
func TestRejectedInputsLeaveStateUntouched(t *testing.T) {
	all := partition.SetOf(0, 1, 2)
	id11 := multicast.MsgID{Client: 1, Seq: 1}
	id55 := multicast.MsgID{Client: 5, Seq: 5}
	flush := multicast.MsgID{Client: multicast.FlushClient, Seq: 1}
	relay := appendRelay(nil, msg(9, 9, 0, 1))
	tests := []struct {
		name string
		in   multicast.Input
		want error // nil: accepted and ignored
	}{
		{"tick", multicast.Tick(), nil},
		{"second relay of a held message", multicast.Envelope(0, appendRelay(nil, msg(1, 1, 0, 1, 2))), nil},
		{"second request of a held message", multicast.Request(msg(2, 2, 1, 2)), nil},

		{"input kind zero", multicast.Input{}, multicast.ErrInvalid},
		{"input kind unknown", multicast.Input{Kind: 9}, multicast.ErrInvalid},

		{"request without destination", multicast.Request(multicast.Message{ID: id11}), multicast.ErrInvalid},
		{"request to an unknown group", multicast.Request(msg(7, 7, 1, 5)), multicast.ErrInvalid},
		{"request with the flush id", multicast.Request(multicast.Message{ID: flush, Dst: all}), multicast.ErrInvalid},
		{"request at a non-destination", multicast.Request(msg(7, 7, 0, 2)), multicast.ErrNotEntry},
		{"request of a held message to other groups", multicast.Request(msg(1, 1, 0, 1)), multicast.ErrInvalid},
		{"request beyond PendingMax", multicast.Request(msg(7, 7, 1)), multicast.ErrBusy},
		{"global request beyond PendingMax", multicast.Request(msg(7, 7, 0, 1)), multicast.ErrBusy},
		{"request of a buffered id to other groups", multicast.Request(msg(5, 5, 1, 2)), multicast.ErrInvalid},

		{"envelope from self", multicast.Envelope(1, relay), multicast.ErrInvalid},
		{"envelope from an unknown group", multicast.Envelope(3, relay), multicast.ErrInvalid},
		{"envelope from no group", multicast.Envelope(partition.NoGroup, relay), multicast.ErrInvalid},
		{"empty envelope", multicast.Envelope(0, nil), multicast.ErrInvalid},
		{"unknown envelope kind", multicast.Envelope(0, append([]byte{byte(multicast.KindAck)}, relay[1:]...)), multicast.ErrInvalid},
		{"trailing bytes", multicast.Envelope(0, append(slices.Clone(relay), 0)), multicast.ErrInvalid},
		{"truncated relay", multicast.Envelope(0, relay[:len(relay)-1]), multicast.ErrInvalid},

		{"relay to a group not a destination", multicast.Envelope(0, appendRelay(nil, msg(7, 7, 0, 2))), multicast.ErrInvalid},
		{"relay from a non-destination", multicast.Envelope(2, appendRelay(nil, msg(7, 7, 0, 1))), multicast.ErrInvalid},
		{"relay of the flush id", multicast.Envelope(0, appendRelay(nil, multicast.Message{ID: flush, Dst: all})), multicast.ErrInvalid},
		{"relay of a held message to other groups", multicast.Envelope(0, appendRelay(nil, msg(1, 1, 0, 1))), multicast.ErrInvalid},
		{"relay of a buffered id to other groups", multicast.Envelope(2, appendRelay(nil, msg(5, 5, 1, 2))), multicast.ErrInvalid},

		{"proposal for a message of other groups", multicast.Envelope(0, appendProposal(nil, id11, partition.SetOf(0, 2), 3)), multicast.ErrInvalid},
		{"proposal from a non-destination", multicast.Envelope(2, appendProposal(nil, id11, partition.SetOf(0, 1), 5)), multicast.ErrInvalid},
		{"proposal with another group's residue", multicast.Envelope(2, appendProposal(nil, id11, all, 6)), multicast.ErrInvalid},
		{"proposal beyond proposalMax", multicast.Envelope(2, appendProposal(nil, id11, all, proposalMax+1)), multicast.ErrInvalid},
		{"second proposal from a group", multicast.Envelope(0, appendProposal(nil, id11, all, 9)), multicast.ErrInvalid},
		{"second buffered proposal from a group", multicast.Envelope(2, appendProposal(nil, id55, all, 14)), multicast.ErrInvalid},
		{"proposal for a held message to other groups", multicast.Envelope(2, appendProposal(nil, id11, partition.SetOf(1, 2), 5)), multicast.ErrInvalid},
		{"proposal for a buffered id to other groups", multicast.Envelope(0, appendProposal(nil, id55, partition.SetOf(0, 1), 6)), multicast.ErrInvalid},
		{"proposal for the flush id", multicast.Envelope(0, appendProposal(nil, flush, all, 6)), multicast.ErrInvalid},
		{"proposal without destination", multicast.Envelope(0, appendProposal(nil, id11, 0, 6)), multicast.ErrInvalid},
		{"proposal to an unknown group", multicast.Envelope(0, appendProposal(nil, id11, partition.SetOf(0, 1, 3), 6)), multicast.ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := preparedCore(t)
			before, stats := c.dumpState(), c.Stats()
			err := c.Step(tt.in)
			if tt.want == nil {
				if err != nil {
					t.Fatalf("got error %v, want the input ignored", err)
				}
			} else {
				mustBe(t, err, tt.want)
				for _, other := range []error{multicast.ErrInvalid, multicast.ErrNotEntry, multicast.ErrBusy} {
					if !errors.Is(other, tt.want) && errors.Is(err, other) {
						t.Errorf("error %v is also %v", err, other)
					}
				}
			}
			if got := c.Stats(); got != stats {
				t.Errorf("stats changed: got %+v, want %+v", got, stats)
			}
			if after := c.dumpState(); !bytes.Equal(after, before) {
				t.Errorf("state changed:\nbefore %x\nafter  %x", before, after)
			}
		})
	}
}

// TestRequestOfBufferedIDAtBound: a request for an id whose proposals are
// buffered adds no entry, so it is admitted at the bound; the core proposes
// and relays like any entry.
func TestRequestOfBufferedIDAtBound(t *testing.T) {
	c := preparedCore(t)
	_ = c.Ready()
	m := msg(5, 5, 0, 1, 2)
	if err := c.Step(multicast.Request(m)); err != nil {
		t.Fatalf("got %v, want the request admitted", err)
	}
	// PendingBytes: 1.1, 2.2 and 5.5, 11 bytes each.
	want := Stats{Pending: 3, PendingBytes: 33, Undecided: 2, Decided: 1, Buffered: 0, PendingPeak: 3, Clock: 6}
	if got := c.Stats(); got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
	var kinds []string
	for _, s := range c.Ready().Sends {
		kinds = append(kinds, s.Kind.String()+"->"+string(groupNames[s.To]))
	}
	if want := []string{"relay->A", "relay->C", "ts->A", "ts->C"}; !slices.Equal(kinds, want) {
		t.Errorf("got sends %v, want %v", kinds, want)
	}
	if err := c.checkInvariants(); err != nil {
		t.Fatal(err)
	}
}

// TestPayloadIsCopied: the core keeps no reference to the caller's buffers.
func TestPayloadIsCopied(t *testing.T) {
	cl := newCluster(t, 2, 0)
	m := msg(1, 1, 0, 1)
	m.Payload = []byte("original")
	if _, _, err := cl.Request(0, m); err != nil {
		t.Fatal(err)
	}
	copy(m.Payload, "mutated!")
	relay := cl.Net.Queued(0, 1)[0].Payload
	cl.Recv(0, 1)
	for i := range relay {
		relay[i] = 0xff
	}
	cl.Drain()
	for g := range cl.Orders {
		if len(cl.Orders[g]) != 1 || string(cl.Orders[g][0].Payload) != "original" {
			t.Errorf("group %d delivered %+v, want payload %q", g, cl.Orders[g], "original")
		}
	}
}

// TestLargeBacklog holds 10^5 decided messages behind one undecided
// message, then releases them: they come out in final timestamp order, in
// time linear in the backlog (a quadratic structure would time out).
func TestLargeBacklog(t *testing.T) {
	backlog := 100_000
	if testing.Short() {
		backlog = 10_000
	}
	cl := newCluster(t, 3, backlog+1)
	cl.Check = nil // the invariant check is linear per step
	A, B, C := partition.GroupID(0), partition.GroupID(1), partition.GroupID(2)
	if _, _, err := cl.Request(C, msg(0, 1, B, C)); err != nil {
		t.Fatal(err)
	}
	cl.Recv(C, B) // relay; C's proposal stays on the link
	size := len(msg(0, 1, B, C).Payload)
	for i := range backlog {
		m := msg(1, uint64(i), A, B)
		size += len(m.Payload)
		if _, _, err := cl.Request(A, m); err != nil {
			t.Fatal(err)
		}
	}
	for cl.Net.LinkLen(A, B) > 0 {
		cl.Recv(A, B)
	}
	if got, want := cl.Cores[B].Stats(), (Stats{Pending: backlog + 1, PendingBytes: size, Undecided: 1, Decided: backlog,
		PendingPeak: backlog + 1, Clock: uint64(backlog + 1)}); got != want {
		t.Fatalf("backlog at B: got %+v, want %+v", got, want)
	}
	if len(cl.Orders[B]) != 0 {
		t.Fatalf("B delivered %d messages behind an undecided one", len(cl.Orders[B]))
	}
	cl.Recv(C, B) // C's proposal decides c0.1 and releases everything
	if got := len(cl.Orders[B]); got != backlog+1 {
		t.Fatalf("B delivered %d messages, want %d", got, backlog+1)
	}
	cl.Drain()
	if err := cl.Verify(true); err != nil {
		t.Fatal(err)
	}
	for i, m := range cl.Orders[B][1:] {
		if m.ID.Seq != uint64(i) {
			t.Fatalf("B's delivery %d is %s, want c1.%d", i+1, m.ID, i)
		}
	}
	if err := cl.Cores[B].checkInvariants(); err != nil {
		t.Fatal(err)
	}
}

// TestDeterminism: two runs of the same inputs produce the same outputs,
// byte for byte, and the same state.
func TestDeterminism(t *testing.T) {
	run := func() ([]multicast.Output, [][]byte) {
		cl := newCluster(t, 4, 0)
		var outs []multicast.Output
		for i := range 20 {
			dst := partition.GroupSet(1 + i*7%15)
			at := dst.Slice()[i%dst.Len()]
			if err := cl.Cores[at].Step(multicast.Request(msg(uint64(i%3), uint64(i), dst.Slice()...))); err != nil {
				t.Fatal(err)
			}
			out := cl.Cores[at].Ready()
			outs = append(outs, out)
			for _, s := range out.Sends {
				cl.Net.Send(at, s.To, s)
			}
			if i%3 == 0 {
				for _, l := range cl.Busy() {
					cl.Recv(l[0], l[1])
				}
			}
		}
		var states [][]byte
		for _, c := range cl.Cores {
			states = append(states, c.dumpState())
		}
		return outs, states
	}
	outs1, states1 := run()
	outs2, states2 := run()
	if diff := cmp.Diff(outs1, outs2); diff != "" {
		t.Errorf("outputs differ between runs (-first +second):\n%s", diff)
	}
	if diff := cmp.Diff(states1, states2); diff != "" {
		t.Errorf("states differ between runs (-first +second):\n%s", diff)
	}
}

func TestDecodeRoundTrip(t *testing.T) {
	id := multicast.MsgID{Client: 300, Seq: 1 << 40}
	tests := []envelope{
		{kind: multicast.KindRelay, msg: multicast.Message{ID: id, Dst: partition.SetOf(0, 63), Payload: []byte("txn")}},
		{kind: multicast.KindRelay, msg: multicast.Message{ID: id, Dst: partition.SetOf(5), Payload: []byte{}}},
		{kind: multicast.KindTS, msg: multicast.Message{ID: id, Dst: partition.SetOf(1, 2)}, ts: 1<<63 + 5},
		{kind: multicast.KindTS, msg: multicast.Message{ID: id, Dst: partition.SetOf(0)}, ts: 0},
	}
	for _, want := range tests {
		b := want.append(nil)
		got, err := decode(b, 64)
		if err != nil {
			t.Fatalf("decode(%x): %v", b, err)
		}
		if diff := cmp.Diff(want, got, cmp.AllowUnexported(envelope{})); diff != "" {
			t.Errorf("round trip (-want +got):\n%s", diff)
		}
	}
}

// FuzzDecode: decode never panics, fails only with wire.ErrCorrupt, and
// what it accepts re-encodes to bytes that decode to the same envelope.
func FuzzDecode(f *testing.F) {
	all := partition.SetOf(0, 1, 2)
	f.Add(appendRelay(nil, msg(1, 2, 0, 1)), uint8(3))
	f.Add(appendRelay(nil, multicast.Message{ID: multicast.MsgID{Client: 1}, Dst: all}), uint8(3))
	f.Add(appendProposal(nil, multicast.MsgID{Client: 9, Seq: 9}, all, 42), uint8(3))
	f.Add([]byte{byte(multicast.KindTS), 1, 1, 0, 0}, uint8(2))
	f.Add([]byte{byte(multicast.KindRelay), 0xff, 0xff, 0xff}, uint8(64))
	f.Add([]byte{}, uint8(1))
	f.Fuzz(func(t *testing.T, b []byte, groups uint8) {
		n := 1 + int(groups)%partition.GroupsMax
		env, err := decode(b, n)
		if err != nil {
			if !errors.Is(err, wire.ErrCorrupt) {
				t.Fatalf("decode error %v does not wrap wire.ErrCorrupt", err)
			}
			return
		}
		if env.msg.Dst.Empty() || !partition.AllGroups(n).Has(env.msg.Dst.Max()) {
			t.Fatalf("decoded destinations %s for %d groups", env.msg.Dst, n)
		}
		enc := env.append(nil)
		again, err := decode(enc, n)
		if err != nil {
			t.Fatalf("re-encoding %x of %x does not decode: %v", enc, b, err)
		}
		if diff := cmp.Diff(env, again, cmp.AllowUnexported(envelope{})); diff != "" {
			t.Fatalf("round trip of %x (-first +second):\n%s", b, diff)
		}
		if enc2 := again.append(nil); !bytes.Equal(enc, enc2) {
			t.Fatalf("encoding is not stable: %x then %x", enc, enc2)
		}
	})
}

// FuzzStep steps arbitrary envelopes at a core that holds undecided,
// decided and buffered messages: no panic; an error leaves the state as it
// was; a success keeps the invariants.
func FuzzStep(f *testing.F) {
	all := partition.SetOf(0, 1, 2)
	f.Add(uint8(0), appendProposal(nil, multicast.MsgID{Client: 5, Seq: 5}, all, 6))
	f.Add(uint8(2), appendProposal(nil, multicast.MsgID{Client: 1, Seq: 1}, all, 8))
	f.Add(uint8(0), appendRelay(nil, msg(5, 5, 0, 1, 2)))
	f.Add(uint8(2), appendRelay(nil, msg(8, 8, 1, 2)))
	f.Fuzz(func(t *testing.T, from uint8, payload []byte) {
		c := preparedCore(t)
		before := c.dumpState()
		if err := c.Step(multicast.Envelope(partition.GroupID(from%4), payload)); err != nil {
			if !errors.Is(err, multicast.ErrInvalid) {
				t.Fatalf("envelope error %v is not multicast.ErrInvalid", err)
			}
			if after := c.dumpState(); !bytes.Equal(before, after) {
				t.Fatalf("rejected envelope %x changed the state", payload)
			}
			return
		}
		if err := c.checkInvariants(); err != nil {
			t.Fatalf("after envelope %x from %d: %v", payload, from%4, err)
		}
	})
}
