package rawnode

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/multicast/channel"
	"github.com/flexkv/flexkv/multicast/check"
	"github.com/flexkv/flexkv/multicast/flexcast"
	"github.com/flexkv/flexkv/multicast/internal/simnet"
	"github.com/flexkv/flexkv/multicast/protocol"
	"github.com/flexkv/flexkv/multicast/skeen"
	"github.com/flexkv/flexkv/partition"
)

// cutConfig are the bounds of TestCutGroupBoundsMemory: small, so that a
// short run reaches them.
const (
	cutBacklogBytes = 16 << 10
	cutOutboxBytes  = 64 << 10
	cutHoldbackMax  = 8
	cutHoldbackByte = 2 << 10
	cutPayloadBytes = 100
)

// cutNet drives three nodes (a < b < c) round by round over a simnet
// network: in each, the entry groups are offered requests, the frames sent
// in the previous round arrive, and every node is ticked. The network loses
// the frames sent to or from a cut group and every 13th one on the other
// links (the channel repairs those).
type cutNet struct {
	t       *testing.T
	top     *partition.Topology
	cores   []multicast.Core
	nodes   []*Node
	net     *simnet.Net[channel.Frame]
	checker *check.Checker
	cut     partition.GroupID // -1: none
	sent    int               // frames offered to the network
	seq     uint64

	accepted, refused int
	refusedOther      []error // refusals that do not name the cut group
	peak              cutPeak
}

// cutPeak is the largest memory seen, in bytes, at the groups other than
// the cut one.
type cutPeak struct {
	outbox, holdback, pending int
	backlog                   uint64
}

func (p cutPeak) String() string {
	return fmt.Sprintf("outbox %d B, backlog %d B, hold-back %d B, pending %d B", p.outbox, p.backlog, p.holdback, p.pending)
}

func newCutNet(t *testing.T, p multicast.Protocol, backlogBytes, outboxBytes int) *cutNet {
	n := &cutNet{t: t, top: testTopology(t), cut: -1, checker: check.New(check.Options{Complete: true, Genuine: true})}
	n.net = simnet.New[channel.Frame](groups, simnet.Faults{Lose: func(from, to partition.GroupID) bool {
		n.sent++
		return from == n.cut || to == n.cut || n.sent%13 == 0
	}})
	for g := range partition.GroupID(groups) {
		core, err := protocol.New(p, g, n.top)
		if err != nil {
			t.Fatal(err)
		}
		nd, err := New(core, channel.Config{
			Self: g, Groups: groups, ResendTicks: 10, HoldbackMax: cutHoldbackMax, OutboxMax: 1 << 20,
			HoldbackBytesMax: cutHoldbackByte, BacklogBytesMax: backlogBytes, OutboxBytesMax: outboxBytes,
			ResendFramesMax: 16,
		})
		if err != nil {
			t.Fatal(err)
		}
		n.cores, n.nodes = append(n.cores, core), append(n.nodes, nd)
	}
	return n
}

func (n *cutNet) names(dst partition.GroupSet) []string {
	var out []string
	for _, g := range dst.Slice() {
		out = append(out, n.top.Name(g))
	}
	return out
}

func (n *cutNet) record(r check.Record) {
	n.t.Helper()
	if err := n.checker.Add(r); err != nil {
		n.t.Fatal(err)
	}
}

// request offers a request to {at} plus others at group at.
func (n *cutNet) request(at partition.GroupID, others ...partition.GroupID) {
	n.t.Helper()
	n.seq++
	m := multicast.Message{
		ID:      multicast.MsgID{Client: uint64(at) + 1, Seq: n.seq},
		Dst:     partition.SetOf(others...).Add(at),
		Payload: make([]byte, cutPayloadBytes),
	}
	err := n.nodes[at].Request(m)
	switch {
	case err == nil:
		n.accepted++
		n.record(check.Record{Ev: check.EvMulticast, ID: m.ID.String(), Dst: n.names(m.Dst)})
	case errors.Is(err, multicast.ErrBusy):
		n.refused++
		if n.cut < 0 || at == n.cut || !strings.Contains(err.Error(), fmt.Sprintf("group %d is unreachable", n.cut)) {
			n.refusedOther = append(n.refusedOther, err)
		}
	default:
		n.t.Fatalf("request %s at %d: %v", m.ID, at, err)
	}
	n.drain(at)
}

// drain collects a node's output: its frames for the next round, its
// deliveries for the checker.
func (n *cutNet) drain(g partition.GroupID) {
	n.t.Helper()
	out := n.nodes[g].Ready()
	if len(out.Rejected) != 0 {
		n.t.Fatalf("group %d rejected envelopes: %+v", g, out.Rejected)
	}
	for _, f := range out.Frames {
		n.net.Send(f.From, f.To, f)
	}
	for _, m := range out.Deliveries {
		n.record(check.Record{Ev: check.EvDeliver, Group: n.top.Name(g), Replica: "r1", ID: m.ID.String(), Dst: n.names(m.Dst)})
	}
}

// round delivers the frames of the previous round and ticks every node.
func (n *cutNet) round() {
	n.t.Helper()
	n.net.Advance()
	for _, p := range n.net.Due() {
		if err := n.nodes[p.To].Receive(p.Msg); err != nil {
			n.t.Fatalf("Receive(%s): %v", p.Msg, err)
		}
		n.drain(p.To)
	}
	for g := range partition.GroupID(groups) {
		n.nodes[g].Tick()
		n.drain(g)
	}
	n.measure()
}

// measure raises the peaks with the memory of every group but the cut one.
func (n *cutNet) measure() {
	for g := range partition.GroupID(groups) {
		if g == n.cut {
			continue
		}
		nd := n.nodes[g]
		for h := range partition.GroupID(groups) {
			if h == g {
				continue
			}
			n.peak.outbox = max(n.peak.outbox, nd.OutboxBytes(h))
			n.peak.backlog = max(n.peak.backlog, nd.Backlog(h))
			n.peak.holdback = max(n.peak.holdback, nd.HoldbackBytes(h))
		}
		n.peak.pending = max(n.peak.pending, pendingBytes(n.cores[g]))
	}
}

func pendingBytes(c multicast.Core) int {
	switch c := c.(type) {
	case *flexcast.Core:
		return c.Stats().PendingBytes
	case *skeen.Core:
		return c.Stats().PendingBytes
	}
	panic(fmt.Sprintf("no pending bytes for core %T", c))
}

// drained reports whether nothing is left to move: no frame in flight, no
// envelope unacknowledged, no message pending. (FlexCast's idle flush timer
// keeps rank 0 from being Quiet.)
func (n *cutNet) drained() bool {
	if n.net.Len() != 0 {
		return false
	}
	for g, nd := range n.nodes {
		for h := range partition.GroupID(groups) {
			if h != partition.GroupID(g) && nd.OutboxLen(h) != 0 {
				return false
			}
		}
		if pendingBytes(n.cores[g]) != 0 {
			return false
		}
	}
	return true
}

// TestCutGroupBoundsMemory: groups a < b < c, b cut off for a long time
// while a keeps being offered requests to {a,c}, {a,b} and {a,b,c} (c waits
// for b's acks of the ones that involve b, and, FlexCast, of the flushes;
// Skeen, for b's proposals). The memory of a and c stays within the bounds
// (a's backlog behind b within BacklogBytesMax plus one request, c's
// pending within that of each entry group), a refuses naming b, and after the heal everything
// drains and the checker passes. The same run with a backlog bound too
// large to reach shows the growth the bound prevents.
func TestCutGroupBoundsMemory(t *testing.T) {
	const healRoundsMax = 20_000
	// What one admitted request may add beyond the busy limit: its
	// envelopes, one per destination, with the protocol's framing.
	const slack = groups * (cutPayloadBytes + 100)
	for _, p := range []multicast.Protocol{protocol.FlexCast, protocol.Skeen} {
		t.Run(string(p), func(t *testing.T) {
			run := func(backlogBytes, outboxBytes, cutRounds int) *cutNet {
				n := newCutNet(t, p, backlogBytes, outboxBytes)
				a, b, c := partition.GroupID(0), partition.GroupID(1), partition.GroupID(2)
				offer := func(i int) {
					switch i % 3 {
					case 0:
						n.request(a, c)
					case 1:
						n.request(a, b)
					default:
						n.request(a, b, c)
					}
					if i%5 == 0 {
						n.request(c) // local work at c goes on
					}
				}
				for i := range 200 {
					offer(i)
					n.round()
				}
				n.cut = b
				for i := range cutRounds {
					offer(i)
					n.round()
				}
				t.Logf("%s, backlog bound %d B: after %d rounds cut: peaks %s; accepted %d, refused %d",
					p, backlogBytes, cutRounds, n.peak, n.accepted, n.refused)
				n.cut = -1
				rounds := 0
				for ; !n.drained() && rounds < healRoundsMax; rounds++ {
					n.round()
				}
				if !n.drained() {
					t.Fatalf("not drained %d rounds after the heal", healRoundsMax)
				}
				for g, nd := range n.nodes {
					if st := nd.Stats().Channel; st.OutboxOverflows != 0 {
						t.Errorf("group %d: %d sends beyond OutboxBytesMax", g, st.OutboxOverflows)
					}
				}
				if rep := n.checker.Report(); !rep.OK() {
					t.Fatalf("checker: %s", rep.Summary())
				}
				t.Logf("drained %d rounds after the heal", rounds)
				return n
			}

			n := run(cutBacklogBytes, cutOutboxBytes, 20_000)
			if n.refused == 0 {
				t.Errorf("no request refused during the cut")
			}
			for _, err := range n.refusedOther[:min(3, len(n.refusedOther))] {
				t.Errorf("refusal that does not name group 1: %v", err)
			}
			if n.peak.backlog > cutBacklogBytes+slack {
				t.Errorf("backlog peak %d B, want at most %d + %d", n.peak.backlog, cutBacklogBytes, slack)
			}
			if n.peak.outbox > cutBacklogBytes+slack {
				t.Errorf("outbox peak %d B, want at most %d + %d", n.peak.outbox, cutBacklogBytes, slack)
			}
			// A group holds the work of each entry group that waits for b
			// (a's, and c's own local messages behind a's under Skeen):
			// each share within that entry's backlog bound.
			if want := (groups-1)*cutBacklogBytes + slack; n.peak.pending > want {
				t.Errorf("pending peak %d B, want at most %d", n.peak.pending, want)
			}
			if n.peak.holdback > cutHoldbackByte {
				t.Errorf("hold-back peak %d B, want at most %d", n.peak.holdback, cutHoldbackByte)
			}

			// Without a reachable bound, c's pending grows with the cut.
			loose := run(1<<30, 1<<31, 5_000)
			if loose.peak.pending < 10*cutBacklogBytes {
				t.Errorf("without the bound, pending peak %d B: the run does not show the growth", loose.peak.pending)
			}
		})
	}
}

// testTopology is three groups a < b < c, the tree rooted at a.
func testTopology(t testing.TB) *partition.Topology {
	t.Helper()
	top, err := partition.NewTopology(partition.Spec{
		Groups: []partition.Group{{Name: "a"}, {Name: "b"}, {Name: "c"}},
		Parent: map[string]string{"b": "a", "c": "a"},
	})
	if err != nil {
		t.Fatal(err)
	}
	return top
}
