package flexcast

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"math/bits"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/flexkv/flexkv/internal/wire"
	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/multicast/check"
	"github.com/flexkv/flexkv/partition"
)

func lettersTopology(t testing.TB, n int) *partition.Topology {
	spec := partition.Spec{}
	for i := range n {
		spec.Groups = append(spec.Groups, partition.Group{Name: fmt.Sprintf("g%d", i)})
	}
	top, err := partition.NewTopology(spec)
	if err != nil {
		t.Fatal(err)
	}
	return top
}

// TestRandomInterleavings multicasts random messages among 3..12 groups over
// FIFO links served in random order, with garbage collection every few
// ticks (a tick at every group now and then between requests), and checks
// every property of DESIGN 3.1 on the result, and that once the links are
// drained and a few rounds have passed every history is empty: every entry
// became stable and was dropped everywhere. The simulator adds faults and
// latencies on top.
func TestRandomInterleavings(t *testing.T) {
	seeds := 300
	if testing.Short() {
		seeds = 50
	}
	for seed := range seeds {
		rng := rand.New(rand.NewPCG(uint64(seed), 7))
		n := 3 + rng.IntN(10)
		top := lettersTopology(t, n)
		net := newFifoNet(t, top, uint64(seed), Config{GCTicks: 1 + rng.IntN(3)})
		chk := check.New(check.Options{Complete: true, Genuine: true})
		names := func(s partition.GroupSet) []string {
			var out []string
			for _, g := range s.Slice() {
				out = append(out, top.Name(g))
			}
			return out
		}
		net.deliver = func(g partition.GroupID, m multicast.Message) {
			if err := chk.Add(check.Record{Ev: "deliver", Group: top.Name(g), Replica: "r1", ID: m.ID.String(), Dst: names(m.Dst)}); err != nil {
				t.Fatal(err)
			}
		}
		msgs := 20 + rng.IntN(100)
		for i := range msgs {
			var dst partition.GroupSet
			for range 1 + rng.IntN(4) {
				dst = dst.Add(partition.GroupID(rng.IntN(n)))
			}
			m := multicast.Message{ID: multicast.MsgID{Client: 1, Seq: uint64(i + 1)}, Dst: dst}
			if err := chk.Add(check.Record{Ev: "multicast", ID: m.ID.String(), Dst: names(dst)}); err != nil {
				t.Fatal(err)
			}
			if err := net.step(Entry(dst), multicast.Request(m)); err != nil {
				t.Fatal(err)
			}
			if rng.IntN(4) == 0 {
				for g := range net.cores {
					if err := net.step(partition.GroupID(g), multicast.Tick()); err != nil {
						t.Fatal(err)
					}
				}
			}
			// Serve a few envelopes between requests so that they overlap.
			for k := rng.IntN(8); k > 0; k-- {
				if ok, err := net.serve(rng); !ok || err != nil {
					if err != nil {
						t.Fatal(err)
					}
					break
				}
			}
		}
		if err := net.drain(); err != nil {
			t.Fatal(err)
		}
		if rep := chk.Report(); !rep.OK() {
			t.Fatalf("seed %d (%d groups, %d messages): %s", seed, n, msgs, rep.Summary())
		}
		for g, c := range net.cores {
			if s := c.Stats(); s.Pending != 0 || s.Open != 0 || s.NotifQueue != 0 {
				t.Fatalf("seed %d: group %d left pending=%d open=%d notifq=%d", seed, g, s.Pending, s.Open, s.NotifQueue)
			}
		}
		// Every entry is stable now: rounds ship the chains up, the top
		// group proves them, its cut goes down. 4 rounds at most.
		for range 4 * 3 {
			for g := range net.cores {
				if err := net.step(partition.GroupID(g), multicast.Tick()); err != nil {
					t.Fatal(err)
				}
			}
			if err := net.drain(); err != nil {
				t.Fatal(err)
			}
		}
		for g, c := range net.cores {
			if s := c.Stats(); s.HistoryLen != 0 || c.TimerRunning() {

				t.Fatalf("seed %d: group %d holds %d history entries (timer running %v) after every entry became stable", seed, g, s.HistoryLen, c.TimerRunning())
			}
		}
	}
}

func TestRequestErrors(t *testing.T) {
	top := lettersTopology(t, 4)
	c, err := New(Config{Self: 1, Topology: top, PendingMax: 1})
	if err != nil {
		t.Fatal(err)
	}
	id := multicast.MsgID{Client: 1, Seq: 1}
	for _, tc := range []struct {
		name string
		m    multicast.Message
		want error
	}{
		{"no destination", multicast.Message{ID: id}, multicast.ErrInvalid},
		{"unknown group", multicast.Message{ID: id, Dst: partition.SetOf(1, 9)}, multicast.ErrInvalid},
		{"not the lca", multicast.Message{ID: id, Dst: partition.SetOf(0, 1)}, multicast.ErrNotEntry},
		{"not a destination", multicast.Message{ID: id, Dst: partition.SetOf(2, 3)}, multicast.ErrNotEntry},
		{"reserved id", multicast.Message{ID: multicast.MsgID{Client: multicast.FlushClient}, Dst: partition.SetOf(1)}, multicast.ErrInvalid},
	} {
		if err := c.Step(multicast.Request(tc.m)); !errors.Is(err, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, err, tc.want)
		}
	}
	if out := c.Ready(); !out.Empty() {
		t.Fatalf("rejected requests produced output %+v", out)
	}
	// Delivered once; the same id again is refused.
	m := multicast.Message{ID: id, Dst: partition.SetOf(1, 2)}
	if err := c.Step(multicast.Request(m)); err != nil {
		t.Fatal(err)
	}
	if err := c.Step(multicast.Request(m)); !errors.Is(err, multicast.ErrInvalid) {
		t.Fatalf("repeated request: got %v, want ErrInvalid", err)
	}
}

// TestBusy fills PendingMax with messages waiting for an ack and checks that
// client requests are refused until they are delivered.
func TestBusy(t *testing.T) {
	top := lettersTopology(t, 3)
	net := newFifoNet(t, top, 1, Config{PendingMax: 2})
	// m1, m2 to {0,1,2}: at group 2 they wait for group 1's acks.
	for i := uint64(1); i <= 2; i++ {
		if err := net.step(0, multicast.Request(multicast.Message{ID: multicast.MsgID{Client: 1, Seq: i}, Dst: partition.SetOf(0, 1, 2)})); err != nil {
			t.Fatal(err)
		}
	}
	// Deliver only the MSGs to group 2 (link 0->2).
	for in, ok := net.net.Next(0, 2); ok; in, ok = net.net.Next(0, 2) {
		if err := net.step(2, in); err != nil {
			t.Fatal(err)
		}
	}
	c2 := net.cores[2]
	if got := c2.Stats().Pending; got != 2 {
		t.Fatalf("pending at group 2: got %d, want 2", got)
	}
	err := c2.Step(multicast.Request(multicast.Message{ID: multicast.MsgID{Client: 2, Seq: 1}, Dst: partition.SetOf(2)}))
	if !errors.Is(err, multicast.ErrBusy) {
		t.Fatalf("request over PendingMax: got %v, want ErrBusy", err)
	}
	if err := net.drain(); err != nil {
		t.Fatal(err)
	}
	if err := c2.Step(multicast.Request(multicast.Message{ID: multicast.MsgID{Client: 2, Seq: 1}, Dst: partition.SetOf(2)})); err != nil {
		t.Fatalf("request after draining: %v", err)
	}
}

// TestEnvelopeErrors feeds malformed and misdirected envelopes and checks
// that each is refused with ErrInvalid and changes nothing.
func TestEnvelopeErrors(t *testing.T) {
	top := lettersTopology(t, 4)
	mk := func(e envelope) []byte { return appendEnvelope(nil, &e, 4, &linkIDs{}) }
	id := multicast.MsgID{Client: 1, Seq: 1}
	msg := func(dst partition.GroupSet) multicast.Message { return multicast.Message{ID: id, Dst: dst} }
	for _, tc := range []struct {
		name    string
		self    partition.GroupID
		from    partition.GroupID
		payload []byte
	}{
		{"empty", 2, 0, nil},
		{"unknown kind", 2, 0, []byte{envFormat<<4 | 9}},
		{"format 1", 2, 0, []byte{byte(envMsg), 1, 1, 5, 0, 0, 0}},
		{"truncated", 2, 0, mk(envelope{kind: envMsg, msg: msg(partition.SetOf(0, 2))})[:3]},
		{"trailing bytes", 2, 0, append(mk(envelope{kind: envMsg, msg: msg(partition.SetOf(0, 2))}), 0)},
		{"from above", 1, 2, mk(envelope{kind: envMsg, msg: msg(partition.SetOf(1, 2))})},
		{"from self", 1, 1, mk(envelope{kind: envMsg, msg: msg(partition.SetOf(1, 2))})},
		{"msg not from lca", 2, 1, mk(envelope{kind: envMsg, msg: msg(partition.SetOf(0, 1, 2))})},
		{"msg to non-destination", 2, 0, mk(envelope{kind: envMsg, msg: msg(partition.SetOf(0, 3))})},
		{"ack from lca", 2, 0, mk(envelope{kind: envAck, msg: msg(partition.SetOf(0, 2))})},
		{"ack from non-destination", 2, 1, mk(envelope{kind: envAck, msg: msg(partition.SetOf(0, 2))})},
		{"history without a message", 2, 1, mk(envelope{kind: envHist})},
		{"history from above", 1, 2, mk(envelope{kind: envHist, history: []segment{{owner: 0, entries: []entry{{id: id, dst: partition.SetOf(0, 2)}}}}})},
		{"history past the chain's end", 2, 1, mk(envelope{kind: envHist, history: []segment{{owner: 0, start: 5, entries: []entry{{id: id, dst: partition.SetOf(0, 2)}}}}})},
		{"history repeating an entry", 2, 1, mk(envelope{kind: envHist, history: []segment{{owner: 0, entries: []entry{{id: id, dst: partition.SetOf(0, 2)}, {id: id, dst: partition.SetOf(0, 1)}}}}})},
		{"cut of another format", 2, 3, []byte{3<<4 | byte(envCut), 0, 0, 0, 0}},
		{"cut too short", 2, 3, appendCut(nil, []uint64{1, 2, 3})},
		{"cut too long", 2, 3, appendCut(nil, []uint64{1, 2, 3, 4, 5})},
		{"cut past any position", 2, 3, appendCut(nil, []uint64{1, 1 << 62, 3, 4})},
		{"notif to destination", 2, 0, mk(envelope{kind: envNotif, msg: msg(partition.SetOf(0, 2, 3))})},
		{"notif above destinations", 3, 0, mk(envelope{kind: envNotif, msg: msg(partition.SetOf(0, 2))})},
		{"history of a descendant", 2, 1, mk(envelope{kind: envMsg, msg: msg(partition.SetOf(1, 2)), history: []segment{{owner: 2, entries: []entry{{id: id, dst: partition.SetOf(1, 2)}}}}})},
		{"notif list names a destination", 2, 0, mk(envelope{kind: envMsg, msg: msg(partition.SetOf(0, 2, 3)), notifs: []notifRef{{group: 2, id: 1}}})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := New(Config{Self: tc.self, Topology: top})
			if err != nil {
				t.Fatal(err)
			}
			before := c.Stats()
			if err := c.Step(multicast.Envelope(tc.from, tc.payload)); !errors.Is(err, multicast.ErrInvalid) {
				t.Fatalf("got %v, want ErrInvalid", err)
			}
			if after := c.Stats(); after != before {
				t.Fatalf("state changed: %+v -> %+v", before, after)
			}
			if out := c.Ready(); !out.Empty() {
				t.Fatalf("output %+v", out)
			}
		})
	}
}

func FuzzDecodeEnvelope(f *testing.F) {
	id := multicast.MsgID{Client: 3, Seq: 17}
	enc := func(e envelope) []byte { return appendEnvelope(nil, &e, 8, &linkIDs{}) }
	f.Add(enc(envelope{kind: envMsg, msg: multicast.Message{ID: id, Dst: partition.SetOf(0, 2), Payload: []byte("x")},
		history: []segment{{owner: 0, entries: []entry{{id: id, dst: partition.SetOf(0, 2)}, {id: multicast.MsgID{Client: 3, Seq: 9}, dst: partition.SetOf(0, 1, 5)}}}}, notifs: []notifRef{{group: 1, id: 4}}}))
	f.Add(enc(envelope{kind: envAck, msg: multicast.Message{ID: id, Dst: partition.SetOf(0, 3)}, notified: true, notifier: 0, notifID: 2}))
	f.Add(enc(envelope{kind: envNotif, msg: multicast.Message{ID: id, Dst: partition.SetOf(0, 3)}, notifIDOut: 9}))
	f.Add(enc(envelope{kind: envHist, history: []segment{{owner: 1, start: 40, entries: []entry{{id: id, dst: partition.SetOf(1, 2)}}}}}))
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := decodeEnvelope(b, 8, &linkIDs{})
		if err != nil {
			return
		}
		again := appendEnvelope(nil, e, 8, &linkIDs{})
		e2, err := decodeEnvelope(again, 8, &linkIDs{})
		if err != nil {
			t.Fatalf("re-decoding %x: %v", again, err)
		}
		if !bytes.Equal(appendEnvelope(nil, e2, 8, &linkIDs{}), again) {
			t.Fatalf("encoding not stable for %x", b)
		}
	})
}

// TestLinkIDs sends ids over one link, more clients than it has slots, and
// checks that the receiving end decodes every one, that remembered clients
// travel in 12 bits or fewer, and that a snapshot of either end restores to the
// same memory.
func TestLinkIDs(t *testing.T) {
	var tx, rx linkIDs
	rng := rand.New(rand.NewPCG(7, 7))
	clients := make([]uint64, 2*linkSlots)
	seqs := make([]uint64, len(clients))
	for i := range clients {
		clients[i] = rng.Uint64()
	}
	clients[0] = multicast.FlushClient
	var short, all int
	for i := range 20000 {
		// Mostly a few hot clients, at times one of many.
		k := rng.IntN(24)
		if i%10 == 0 {
			k = rng.IntN(len(clients))
		}
		seqs[k] += uint64(rng.IntN(3))
		if rng.IntN(20) == 0 {
			seqs[k] -= min(seqs[k], 5) // an older id of the client
		}
		id := multicast.MsgID{Client: clients[k], Seq: seqs[k]}
		w := bitWriter{}
		tx.writeID(&w, id)
		bits := w.nacc + 8*uint(len(w.b))
		r := bitReader{b: w.flush()}
		if got := rx.readID(&r); got != id || !r.done() {
			t.Fatalf("id %d: sent %s, received %s", i, id, got)
		}
		all++
		if bits <= 12 {
			short++
		}
		if i%5000 == 0 {
			for _, end := range []struct {
				k      *linkIDs
				sender bool
			}{{&tx, true}, {&rx, false}} {
				var back linkIDs
				d := wire.NewDecoder(appendLinkIDs(nil, end.k, 4))
				restoreLinkIDs(d, &back, 4, end.sender)
				if err := d.Finish(); err != nil {
					t.Fatal(err)
				}
				if back.client != end.k.client || back.seq != end.k.seq || back.used != end.k.used || back.next != end.k.next || back.others != end.k.others || back.last != end.k.last || back.end != end.k.end {
					t.Fatalf("id %d: link memory changed through a snapshot", i)
				}
				if end.sender && !maps.Equal(back.slot, end.k.slot) {
					t.Fatalf("id %d: sender's slot map changed through a snapshot", i)
				}
			}
		}
	}
	if short < all*8/10 {
		t.Errorf("%d of %d ids took at most 12 bits, want 80%%", short, all)
	}
	// A sender's memory with a client in two slots is corrupt.
	dup := linkIDs{used: 2}
	dup.client[0], dup.client[1] = 5, 5
	dup.used = 2
	d := wire.NewDecoder(appendLinkIDs(nil, &dup, 4))
	restoreLinkIDs(d, &linkIDs{}, 4, true)
	if d.Finish() == nil {
		t.Error("restored a sender's link memory with a client in two slots")
	}
}

// TestEntryBits sends history segments of random entries over one link,
// from ids of a few clients to any id at all (flushes, sequences far
// apart), and checks that each decodes to what was sent, that a block cut
// short is refused, and that entries of a few hot clients take
// about two bytes.
func TestEntryBits(t *testing.T) {
	const n = 12
	var tx, rx linkIDs
	rng := rand.New(rand.NewPCG(8, 8))
	hot := make([]multicast.MsgID, 24)
	for i := range hot {
		hot[i] = multicast.MsgID{Client: rng.Uint64() >> 1, Seq: rng.Uint64N(1000)}
	}
	var entries, bytesHot int
	for round := range 3000 {
		owner := partition.GroupID(rng.IntN(n))
		es := make([]entry, rng.IntN(40))
		for i := range es {
			var id multicast.MsgID
			switch r := rng.IntN(100); {
			case round < 2000 || r < 90:
				k := rng.IntN(len(hot))
				hot[k].Seq += rng.Uint64N(8)
				id = hot[k]
			case r < 93:
				id = multicast.MsgID{Client: multicast.FlushClient, Seq: rng.Uint64()}
			default:
				id = multicast.MsgID{Client: rng.Uint64(), Seq: rng.Uint64()}
			}
			dst := partition.SetOf(owner, partition.GroupID(rng.IntN(n)))
			if rng.IntN(2) == 0 {
				dst = partition.SetOf(owner, (owner+1)%n) // an owner's usual peer
			}
			if rng.IntN(10) == 0 {
				dst = partition.AllGroups(n)
			}
			if dst.Len() == 1 {
				dst = dst.Add((owner + 1) % n)
			}
			es[i] = entry{id: id, dst: dst}
		}
		before := rx
		w := bitWriter{}
		appendEntryBits(&w, es, owner, n, &tx)
		block := w.flush()
		for cut := range len(block) {
			// A block cut short fails.
			trial := before
			r := bitReader{b: block[:cut]}
			if err := entryBits(&r, make([]entry, len(es)), owner, n, &trial); err == nil && r.done() {
				t.Fatalf("round %d: a block cut from %d to %d bytes decoded", round, len(block), cut)
			}
		}
		got := make([]entry, len(es))
		r := bitReader{b: block}
		if err := entryBits(&r, got, owner, n, &rx); err != nil || !r.done() {
			t.Fatalf("round %d: %v (done %v)", round, err, r.done())
		}
		b := block
		if !slices.Equal(got, es) {
			t.Fatalf("round %d: sent %v, received %v", round, es, got)
		}
		if round < 2000 && round >= 100 {
			entries += len(es)
			bytesHot += len(b)
		}
	}
	if per := float64(bytesHot) / float64(entries); per > 2.5 {
		t.Errorf("%.2f bytes per entry of 24 hot clients, want <= 2.5", per)
	}
}

// TestEnvelopeSegmentCountBound: a segment that claims more entries than
// its bits could hold at 5 bits an entry is refused before anything is
// allocated for them (here 100 entries in about 400 bits).
func TestEnvelopeSegmentCountBound(t *testing.T) {
	w := bitWriter{b: []byte{envFormat<<4 | byte(envAck)}}
	var k linkIDs
	k.writeID(&w, multicast.MsgID{Client: 7, Seq: 1})
	w.write(uint64(partition.SetOf(0, 3)), 4)
	w.write(1, uint(bits.Len(4))) // one segment
	w.golomb(0, 0)                // of group 0
	w.golomb(1, 0)                // at position 0 (the link carried none)
	w.golomb(100-1, 2)            // 100 entries
	for range 400 / 50 {
		w.write(0, 50)
	}
	_, err := decodeEnvelope(w.flush(), 4, &linkIDs{})
	if err == nil || !strings.Contains(err.Error(), "history segment of 100 entries in") {
		t.Fatalf("decode: %v, want the segment's count refused", err)
	}
}

// TestEnvelopeDenseEntries: a history segment of consecutive messages of
// one client to the same destinations takes 5 bits an entry on a link
// that knows that client only (its slot in 1 bit, a sequence delta of 1 in
// 3, the destinations of the entry before in 1); such an envelope decodes
// (the decoder's bound on the entries a segment may hold once took 6 bits
// an entry and refused it, which a simulator run found).
func TestEnvelopeDenseEntries(t *testing.T) {
	top := lettersTopology(t, 4)
	var es []entry
	for seq := range uint64(200) {
		es = append(es, entry{id: multicast.MsgID{Client: 9, Seq: seq + 1}, dst: top.All()})
	}
	e := envelope{kind: envMsg, msg: multicast.Message{ID: es[len(es)-1].id, Dst: top.All()}, history: []segment{{owner: 0, entries: es}}}
	var sent, recv linkIDs
	b := appendEnvelope(nil, &e, 4, &sent)
	if bitsPer := float64(8*len(b)) / float64(len(es)); bitsPer >= 6 {
		t.Fatalf("%d entries in %d bytes, %.2f bits each: want under 6 (the case of the test)", len(es), len(b), bitsPer)
	}
	got, err := decodeEnvelope(b, 4, &recv)
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	if len(got.history) != 1 || len(got.history[0].entries) != len(es) {
		t.Fatalf("decoded %d segments, want one of %d entries", len(got.history), len(es))
	}
	for i, x := range got.history[0].entries {
		if x != es[i] {
			t.Fatalf("entry %d: %v, want %v", i, x, es[i])
		}
	}
}

// TestSegmentPositions: segments travel with their positions, and what a
// receiver does with each: a segment that continues the link's last entry
// (the overlap, one bit), one that starts later after its sender cut its
// chain, entries the receiver dropped as stable already (stale, dropped
// and counted), one past the end of the chain held (refused: the entries
// in between would be lost), one that disagrees with the chain held
// (refused). Every state Step leaves restores.
func TestSegmentPositions(t *testing.T) {
	top := lettersTopology(t, 4)
	cfg := Config{Self: 3, Topology: top, GCTicks: -1}
	ids := make([]multicast.MsgID, 8)
	es := make([]entry, len(ids))
	for i := range ids {
		ids[i] = multicast.MsgID{Client: 1, Seq: uint64(i + 1)}
		es[i] = entry{id: ids[i], dst: partition.SetOf(0, 2)}
	}
	hist := func(k *linkIDs, start uint64, es []entry) []byte {
		return appendEnvelope(nil, &envelope{kind: envHist, history: []segment{{owner: 0, start: start, entries: es}}}, 4, k)
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var k linkIDs
	step := func(what string, from partition.GroupID, b []byte) error {
		t.Helper()
		err := c.Step(multicast.Envelope(from, b))
		c.Ready()
		r, rerr := Restore(cfg, c.AppendSnapshot(nil))
		if rerr != nil {
			t.Fatalf("%s: Restore: %v", what, rerr)
		}
		if !bytes.Equal(r.AppendSnapshot(nil), c.AppendSnapshot(nil)) {
			t.Fatalf("%s: the restored core encodes differently", what)
		}
		return err
	}
	if err := step("first", 0, hist(&k, 0, es[:3])); err != nil {
		t.Fatal(err)
	}
	// The overlap (entry 2) travels as one bit, and the chain grows by the
	// rest.
	if err := step("overlap", 0, hist(&k, 2, es[2:5])); err != nil {
		t.Fatal(err)
	}
	if got := c.chains[0].end(); got != 5 {
		t.Fatalf("chain 0 ends at %d, want 5", got)
	}
	// A cut from above, at 6, past the chain's end: the chain is empty,
	// based at 6. The sender, which has not learned it, ships from 4:
	// entries 4 and 5 are stale, 6 and 7 new.
	if err := step("cut", 2, appendCut(nil, []uint64{6, 0, 0, 0})); err != nil {
		t.Fatal(err)
	}
	if got := c.Stats().HistoryLen; got != 0 {
		t.Fatalf("history after the cut: %d entries, want 0", got)
	}
	if err := step("stale", 0, hist(&k, 4, es[4:8])); err != nil {
		t.Fatal(err)
	}
	if s := c.Stats(); s.StaleEntries != 2 || s.HistoryLen != 2 || c.chains[0].base != 6 {
		t.Fatalf("stale entries %d, history %d, chain based at %d; want 2, 2 and 6", s.StaleEntries, s.HistoryLen, c.chains[0].base)
	}
	before := c.AppendSnapshot(nil)
	// A gap: position 9 while the chain held ends at 8.
	gap := k
	if err := step("gap", 0, hist(&gap, 9, []entry{{id: multicast.MsgID{Client: 1, Seq: 99}, dst: partition.SetOf(0, 3)}})); !errors.Is(err, multicast.ErrInvalid) || !strings.Contains(err.Error(), "past the end") {
		t.Errorf("gap: got %v, want ErrInvalid naming it", err)
	}
	// Disagreeing, from another ancestor: position 6 holds ids[6] here.
	if err := step("disagreeing", 1, hist(&linkIDs{}, 6, []entry{{id: ids[7], dst: partition.SetOf(0, 2)}})); !errors.Is(err, multicast.ErrInvalid) || !strings.Contains(err.Error(), "where") {
		t.Errorf("disagreeing segment: got %v, want ErrInvalid naming it", err)
	}
	// A cut back is no news: the cut only grows.
	if err := step("older cut", 2, appendCut(nil, []uint64{1, 0, 0, 0})); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(c.AppendSnapshot(nil), before) {
		t.Error("refused envelopes changed the state")
	}
}

// TestGCSendsBackground: the envelopes of garbage collection, and only
// they, are marked Background (no work waits for them: the channel leaves
// them out of back-pressure), and named by a flush id for logs and metrics.
func TestGCSendsBackground(t *testing.T) {
	top := lettersTopology(t, 4)
	net := newFifoNet(t, top, 1, Config{GCTicks: 1})
	var gc, other int
	for i := range uint64(40) {
		dst := partition.SetOf(partition.GroupID(i%3), 3)
		c := net.cores[Entry(dst)]
		if err := c.Step(multicast.Request(multicast.Message{ID: multicast.MsgID{Client: 1, Seq: i + 1}, Dst: dst})); err != nil {
			t.Fatal(err)
		}
		for g := range net.cores {
			if err := net.cores[g].Step(multicast.Tick()); err != nil {
				t.Fatal(err)
			}
			out := net.cores[g].Ready()
			for _, s := range out.Sends {
				if s.Background != s.About.IsFlush() {
					t.Fatalf("send %s kind %v about %s: background %v", top.Name(partition.GroupID(g)), s.Kind, s.About, s.Background)
				}
				if s.Background {
					gc++
				} else {
					other++
				}
			}
			net.route(partition.GroupID(g), out)
		}
		out := c.Ready()
		for _, s := range out.Sends {
			if s.Background != s.About.IsFlush() {
				t.Fatalf("send about %s: background %v", s.About, s.Background)
			}
		}
		net.route(Entry(dst), out)
		if err := net.drain(); err != nil {
			t.Fatal(err)
		}
	}
	if gc == 0 || other == 0 {
		t.Fatalf("%d garbage-collection sends, %d others: the run does not show both", gc, other)
	}
}
