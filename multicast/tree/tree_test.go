package tree

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/multicast/internal/simnet"
	"github.com/flexkv/flexkv/partition"
)

// paperT1 returns the 12 regions ranked by overlay O1 with the paper's tree T1:
//
//	eu-west-3 -> eu-west-1, eu-central-1
//	eu-west-1 -> ca-central-1, us-east-1
//	ca-central-1 -> us-west-1;  us-east-1 -> sa-east-1
//	eu-central-1 -> eu-north-1, ap-south-1
//	ap-south-1 -> ap-northeast-1, ap-southeast-1;  ap-northeast-1 -> ap-southeast-2
func paperT1(t testing.TB) *partition.Topology {
	t.Helper()
	overlay, err := partition.PaperOverlay("O1")
	if err != nil {
		t.Fatal(err)
	}
	parent, err := partition.PaperTree("T1")
	if err != nil {
		t.Fatal(err)
	}
	groups := make([]partition.Group, len(overlay))
	for i, r := range overlay {
		groups[i] = partition.Group{Name: r}
	}
	top, err := partition.NewTopology(partition.Spec{Groups: groups, Parent: parent})
	if err != nil {
		t.Fatal(err)
	}
	return top
}

func gid(t testing.TB, top *partition.Topology, name string) partition.GroupID {
	t.Helper()
	g, ok := top.Lookup(name)
	if !ok {
		t.Fatalf("no group %q", name)
	}
	return g
}

func set(t testing.TB, top *partition.Topology, names ...string) partition.GroupSet {
	t.Helper()
	var s partition.GroupSet
	for _, n := range names {
		s = s.Add(gid(t, top, n))
	}
	return s
}

// harness runs one core per group over FIFO links (simnet.Cores); every
// send must be a msg whose envelope decodes.
type harness = simnet.Cores[*Core]

func newHarness(t testing.TB, top *partition.Topology) *harness {
	h := simnet.NewCores(t, top, func(g partition.GroupID) (*Core, error) {
		return New(Config{Self: g, Topology: top})
	})
	h.Check = func(g partition.GroupID, _ *Core, out multicast.Output) error {
		for _, s := range out.Sends {
			if s.Kind != multicast.KindMsg {
				return fmt.Errorf("sent kind %s, want msg", s.Kind)
			}
			if _, err := Decode(s.Payload, top.Len()); err != nil {
				return err
			}
		}
		return nil
	}
	return h
}

// submit hands m to its entry group.
func submit(h *harness, m multicast.Message) {
	h.TB.Helper()
	e := Entry(h.Top, m.Dst)
	if _, _, err := h.Request(e, m); err != nil {
		h.TB.Fatalf("request %s at entry %s: %v", m.ID, h.Top.Name(e), err)
	}
}

// deliveredIDs returns each group's delivery order as ids.
func deliveredIDs(h *harness) [][]multicast.MsgID {
	out := make([][]multicast.MsgID, len(h.Cores))
	for g := range out {
		out[g] = h.OrderIDs(partition.GroupID(g))
	}
	return out
}

func TestEntry(t *testing.T) {
	top := paperT1(t)
	tests := []struct {
		dst  []string
		want string
	}{
		{[]string{"sa-east-1"}, "sa-east-1"},
		{[]string{"us-west-1", "sa-east-1"}, "eu-west-1"},
		{[]string{"us-west-1", "ca-central-1"}, "ca-central-1"},
		{[]string{"ap-southeast-2", "ap-southeast-1"}, "ap-south-1"},
		{[]string{"eu-north-1", "ap-southeast-2"}, "eu-central-1"},
		{[]string{"us-east-1", "eu-north-1"}, "eu-west-3"},
		{[]string{"eu-west-3", "ap-southeast-2"}, "eu-west-3"},
	}
	for _, tc := range tests {
		if got := Entry(top, set(t, top, tc.dst...)); top.Name(got) != tc.want {
			t.Errorf("Entry(%v) = %s, want %s", tc.dst, top.Name(got), tc.want)
		}
	}
	if got := Entry(top, 0); got != partition.NoGroup {
		t.Errorf("Entry(empty) = %d, want NoGroup", got)
	}
	if got := Entry(top, partition.SetOf(40)); got != partition.NoGroup {
		t.Errorf("Entry({40}) = %d, want NoGroup", got)
	}
}

func TestStepErrorsLeaveStateUntouched(t *testing.T) {
	top := paperT1(t)
	euWest1 := gid(t, top, "eu-west-1")
	caCentral1 := gid(t, top, "ca-central-1")
	good := multicast.Message{ID: multicast.MsgID{Client: 1, Seq: 1}, Dst: set(t, top, "us-west-1", "sa-east-1")}
	tests := []struct {
		name string
		self partition.GroupID
		in   multicast.Input
		want error
	}{
		{"request at a non-entry group", caCentral1, multicast.Request(good), multicast.ErrNotEntry},
		{"request at a destination that is not the tree-lca", gid(t, top, "us-west-1"), multicast.Request(good), multicast.ErrNotEntry},
		{"request without destinations", euWest1, multicast.Request(multicast.Message{ID: good.ID}), multicast.ErrInvalid},
		{"request to unknown groups", euWest1, multicast.Request(multicast.Message{ID: good.ID, Dst: partition.SetOf(20)}), multicast.ErrInvalid},
		{"request with a flush id", euWest1, multicast.Request(multicast.Message{ID: multicast.MsgID{Client: multicast.FlushClient}, Dst: good.Dst}), multicast.ErrInvalid},
		{"envelope from a child", euWest1, multicast.Envelope(caCentral1, Encode(nil, good)), multicast.ErrInvalid},
		{"envelope at the root", gid(t, top, "eu-west-3"), multicast.Envelope(euWest1, Encode(nil, good)), multicast.ErrInvalid},
		{"envelope from a sibling", caCentral1, multicast.Envelope(gid(t, top, "us-east-1"), Encode(nil, good)), multicast.ErrInvalid},
		{"undecodable envelope", caCentral1, multicast.Envelope(euWest1, []byte{1, 0x80}), multicast.ErrInvalid},
		{"envelope with trailing bytes", caCentral1, multicast.Envelope(euWest1, append(Encode(nil, good), 0)), multicast.ErrInvalid},
		{"envelope with an unknown tag", caCentral1, multicast.Envelope(euWest1, Encode(nil, good)[1:]), multicast.ErrInvalid},
		{"envelope with a flush id", caCentral1,
			multicast.Envelope(euWest1, Encode(nil, multicast.Message{ID: multicast.MsgID{Client: multicast.FlushClient}, Dst: good.Dst})),
			multicast.ErrInvalid},
		{"envelope not for this subtree", caCentral1,
			multicast.Envelope(euWest1, Encode(nil, multicast.Message{ID: good.ID, Dst: set(t, top, "sa-east-1", "eu-west-1")})),
			multicast.ErrInvalid},
		{"envelope whose tree-lca is this group", caCentral1,
			multicast.Envelope(euWest1, Encode(nil, multicast.Message{ID: good.ID, Dst: set(t, top, "ca-central-1", "us-west-1")})),
			multicast.ErrInvalid},
		{"unknown input kind", euWest1, multicast.Input{Kind: 9}, multicast.ErrInvalid},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := New(Config{Self: tc.self, Topology: top})
			if err != nil {
				t.Fatal(err)
			}
			err = c.Step(tc.in)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Step: got error %v, want %v", err, tc.want)
			}
			if !strings.HasPrefix(err.Error(), "tree: ") {
				t.Errorf("error %q lacks the package prefix", err)
			}
			if out := c.Ready(); !out.Empty() {
				t.Errorf("Ready after a failed step = %+v, want nothing", out)
			}
			if m := c.Stats(); m != (Stats{}) {
				t.Errorf("Stats after a failed step = %+v, want zero", m)
			}
		})
	}
}

func TestTickDoesNothing(t *testing.T) {
	top := paperT1(t)
	c, err := New(Config{Self: 0, Topology: top})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Step(multicast.Tick()); err != nil {
		t.Fatalf("Step(tick): %v", err)
	}
	if out := c.Ready(); !out.Empty() {
		t.Fatalf("Ready after a tick = %+v, want nothing", out)
	}
}

func TestNewErrors(t *testing.T) {
	top := paperT1(t)
	flat, err := partition.NewTopology(partition.Spec{Groups: []partition.Group{{Name: "a"}, {Name: "b"}}})
	if err != nil {
		t.Fatal(err)
	}
	root := gid(t, top, "eu-west-3") // two children: one message yields up to 3 outputs
	tests := []struct {
		name string
		cfg  Config
	}{
		{"no topology", Config{}},
		{"no tree", Config{Topology: flat}},
		{"self out of range", Config{Self: 12, Topology: top}},
		{"negative self", Config{Self: -1, Topology: top}},
		{"negative PendingMax", Config{Self: root, Topology: top, PendingMax: -1}},
		{"PendingMax below one message's outputs", Config{Self: root, Topology: top, PendingMax: 2}},
	}
	for _, tc := range tests {
		if _, err := New(tc.cfg); err == nil || !strings.HasPrefix(err.Error(), "tree: ") {
			t.Errorf("%s: New error = %v, want a tree: error", tc.name, err)
		}
	}
	if _, err := New(Config{Self: root, Topology: top, PendingMax: 3}); err != nil {
		t.Errorf("New with PendingMax 3 at the root: %v", err)
	}
}

// TestPendingMax: admission stops at the bound on undrained outputs (ErrBusy,
// without effect) and resumes after Ready; envelopes are never refused.
func TestPendingMax(t *testing.T) {
	top := paperT1(t)
	root := gid(t, top, "eu-west-3")
	c, err := New(Config{Self: root, Topology: top, PendingMax: 7})
	if err != nil {
		t.Fatal(err)
	}
	// Each message yields 3 outputs: two sends and one delivery.
	dst := set(t, top, "eu-west-3", "us-west-1", "eu-north-1")
	msg := func(seq uint64) multicast.Message {
		return multicast.Message{ID: multicast.MsgID{Client: 1, Seq: seq}, Dst: dst}
	}
	for seq := uint64(1); seq <= 2; seq++ {
		if err := c.Step(multicast.Request(msg(seq))); err != nil {
			t.Fatalf("request %d: %v", seq, err)
		}
	}
	err = c.Step(multicast.Request(msg(3)))
	if !errors.Is(err, multicast.ErrBusy) {
		t.Fatalf("third request with 6 of 7 outputs held: got %v, want ErrBusy", err)
	}
	if got := c.Stats().Requests; got != 2 {
		t.Fatalf("requests counted = %d, want 2 (the refused one is not)", got)
	}
	// An envelope is never refused: the channel cannot offer it again.
	child := gid(t, top, "eu-west-1")
	cc, err := New(Config{Self: child, Topology: top, PendingMax: 3})
	if err != nil {
		t.Fatal(err)
	}
	env := multicast.Envelope(root, Encode(nil, msg(1)))
	for i := range 3 {
		if err := cc.Step(env); err != nil {
			t.Fatalf("envelope %d over the bound: %v, want it accepted", i+1, err)
		}
	}
	// Each envelope goes on to ca-central-1 only (toward us-west-1).
	if got := len(cc.Ready().Sends); got != 3 {
		t.Fatalf("sends after three envelopes = %d, want 3", got)
	}
	// Admission at the child counts what envelopes left undrained: with one
	// output held, a request that may add three would pass the bound of 3.
	local := multicast.Message{ID: multicast.MsgID{Client: 2, Seq: 1}, Dst: set(t, top, "eu-west-1", "us-west-1")}
	if err := cc.Step(env); err != nil {
		t.Fatal(err)
	}
	if err := cc.Step(multicast.Request(local)); !errors.Is(err, multicast.ErrBusy) {
		t.Fatalf("request at the child with 1 output held: got %v, want ErrBusy", err)
	}

	out := c.Ready()
	if len(out.Sends) != 4 || len(out.Deliveries) != 2 {
		t.Fatalf("Ready = %d sends, %d deliveries; want 4 and 2", len(out.Sends), len(out.Deliveries))
	}
	if err := c.Step(multicast.Request(msg(3))); err != nil {
		t.Fatalf("request after Ready: %v", err)
	}
	if out := c.Ready(); len(out.Deliveries) != 1 || out.Deliveries[0].ID != msg(3).ID {
		t.Fatalf("deliveries after retry = %+v, want message 3", out.Deliveries)
	}
}

// TestPayloadIsCopied: the core keeps no alias of the caller's buffers.
func TestPayloadIsCopied(t *testing.T) {
	top := paperT1(t)
	root := gid(t, top, "eu-west-3")
	c, err := New(Config{Self: root, Topology: top})
	if err != nil {
		t.Fatal(err)
	}
	payload := []byte("abc")
	m := multicast.Message{ID: multicast.MsgID{Client: 1, Seq: 1}, Dst: set(t, top, "eu-west-3", "us-west-1"), Payload: payload}
	if err := c.Step(multicast.Request(m)); err != nil {
		t.Fatal(err)
	}
	payload[0] = 'X'
	out := c.Ready()
	if got := string(out.Deliveries[0].Payload); got != "abc" {
		t.Fatalf("delivered payload = %q, want %q", got, "abc")
	}
	sent, err := Decode(out.Sends[0].Payload, top.Len())
	if err != nil {
		t.Fatal(err)
	}
	if got := string(sent.Payload); got != "abc" {
		t.Fatalf("forwarded payload = %q, want %q", got, "abc")
	}

	child := gid(t, top, "eu-west-1")
	cc, err := New(Config{Self: child, Topology: top})
	if err != nil {
		t.Fatal(err)
	}
	env := Encode(nil, multicast.Message{ID: m.ID, Dst: set(t, top, "eu-west-1", "eu-north-1"), Payload: []byte("abc")})
	if err := cc.Step(multicast.Envelope(root, env)); err != nil {
		t.Fatal(err)
	}
	clear(env)
	if got := string(cc.Ready().Deliveries[0].Payload); got != "abc" {
		t.Fatalf("delivered payload after the envelope was cleared = %q, want %q", got, "abc")
	}
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	m := multicast.Message{ID: multicast.MsgID{Client: 300, Seq: 1 << 40}, Dst: partition.SetOf(0, 5, 11), Payload: []byte("payload")}
	b := Encode([]byte("prefix"), m)
	got, err := Decode(b[len("prefix"):], 12)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != m.ID || got.Dst != m.Dst || string(got.Payload) != string(m.Payload) {
		t.Fatalf("Decode(Encode(m)) = %+v, want %+v", got, m)
	}
	if _, err := Decode(b[len("prefix"):], 11); err == nil {
		t.Fatal("Decode with a destination beyond n: got nil error, want an error")
	}
}

func FuzzDecode(f *testing.F) {
	f.Add(Encode(nil, multicast.Message{ID: multicast.MsgID{Client: 1, Seq: 2}, Dst: partition.SetOf(3, 4), Payload: []byte("x")}))
	f.Add([]byte{1})
	f.Add([]byte{2, 0, 0, 1, 0})
	f.Add([]byte{1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	top := paperT1(f)
	euWest1 := gid(f, top, "eu-west-1")
	caCentral1 := gid(f, top, "ca-central-1")
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Decode(b, top.Len())
		if err == nil {
			again, err := Decode(Encode(nil, m), top.Len())
			if err != nil {
				t.Fatalf("re-decoding %+v: %v", m, err)
			}
			if again.ID != m.ID || again.Dst != m.Dst || string(again.Payload) != string(m.Payload) {
				t.Fatalf("round trip = %+v, want %+v", again, m)
			}
		}
		c, err := New(Config{Self: caCentral1, Topology: top})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Step(multicast.Envelope(euWest1, b)); err != nil {
			if !errors.Is(err, multicast.ErrInvalid) {
				t.Fatalf("Step error %v does not wrap ErrInvalid", err)
			}
			if !c.Ready().Empty() {
				t.Fatal("failed step produced output")
			}
		}
	})
}
