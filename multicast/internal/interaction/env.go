package interaction

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/cockroachdb/datadriven"

	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/multicast/channel"
	"github.com/flexkv/flexkv/multicast/check"
	"github.com/flexkv/flexkv/multicast/rawnode"
	"github.com/flexkv/flexkv/partition"
)

// groupLetters name the groups of a cluster given by size: A, B, C... by rank.
const groupLetters = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"

// Args are the arguments of the new command that the environment does not
// read itself: the protocol's options (FlexCast's off=..., Skeen's
// pending-max=...).
type Args []datadriven.CmdArg

// Protocol tells the environment how to build, restore and show one
// protocol's cores. Only New is required. A core package's own tests fill in
// the hooks that need its unexported parts (decoding an envelope, checking
// invariants), which is why the environment imports no core.
type Protocol struct {
	Name string
	// New builds the core of group self. It must reject arguments it does
	// not know.
	New func(self partition.GroupID, top *partition.Topology, args Args) (multicast.Core, error)
	// Restore rebuilds a core from its AppendSnapshot encoding; nil: the
	// snapshot-restore command is refused.
	Restore func(self partition.GroupID, top *partition.Topology, args Args, snap []byte) (multicast.Core, error)
	// Entry returns the group a client sends a message for dst to; nil:
	// the lowest-ranked destination (FlexCast's lca, Skeen's entry without
	// latencies).
	Entry func(top *partition.Topology, dst partition.GroupSet) partition.GroupID
	// Describe shows a core's send, name shows a message id; nil: its kind
	// and the message it is about.
	Describe func(top *partition.Topology, s multicast.Send, name func(multicast.MsgID) string) string
	// Stats shows a core's counters for the stats command; nil: refused.
	Stats func(c multicast.Core) string
	// Invariants checks a core after each of its steps; nil: nothing.
	Invariants func(c multicast.Core) error
}

// Snapshotter is a core that encodes its state (every core here does).
type Snapshotter interface {
	AppendSnapshot(b []byte) []byte
}

// Channel bounds of the environment, unless the new command sets them. The
// resend interval is long enough that a script's ticks resend only what it
// means to lose.
const (
	ResendTicksDefault = 4
	HoldbackMaxDefault = 8
	OutboxMaxDefault   = 64
)

type eventKind uint8

const (
	evRequest eventKind = iota + 1 // a client's request reaches its entry group
	evFrame                        // a frame reaches its receiver
)

type event struct {
	kind  eventKind
	to    partition.GroupID
	msg   multicast.Message // evRequest
	frame channel.Frame     // evFrame
}

type frameKey struct {
	from, to partition.GroupID
	seq      uint64
}

// Env is a cluster of groups, each a protocol core inside a rawnode.Node (the
// core over its reliable channels), joined by a scripted network: every link
// is FIFO and takes its delay (1 unless set) per frame; a held link keeps its
// frames until released; a script may also move, drop or duplicate the
// frames of one link by hand. Everything a group multicasts, sends and
// delivers is recorded for multicast/check.
type Env struct {
	proto Protocol
	args  Args
	top   *partition.Topology
	chcfg channel.Config
	cores []multicast.Core
	nodes []*rawnode.Node

	queue Queue[event]
	now   int64
	delay [][]int64 // per link; 0 means 1
	held  [][]bool
	last  [][]int64 // last arrival time scheduled per link, for FIFO

	// What the frames carry: the core send of each data frame, for display.
	sendOf  map[frameKey]multicast.Send
	nextSeq [][]uint64

	names    map[multicast.MsgID]string
	ids      map[string]multicast.MsgID
	accepted map[multicast.MsgID]bool
	orders   [][]string
	kinds    map[multicast.Kind]int
	recs     []check.Record

	// trace, when set, receives one line per send, delivery and rejection.
	trace *strings.Builder
}

// NewEnv builds a cluster on top with one core per group under p, over
// channels configured as chcfg (Self and Groups are filled in).
func NewEnv(p Protocol, top *partition.Topology, args Args, chcfg channel.Config) (*Env, error) {
	n := top.Len()
	chcfg.Groups = n
	e := &Env{
		proto: p, args: args, top: top, chcfg: chcfg,
		cores: make([]multicast.Core, n), nodes: make([]*rawnode.Node, n),
		delay: square[int64](n), held: square[bool](n), last: square[int64](n),
		sendOf: map[frameKey]multicast.Send{}, nextSeq: square[uint64](n),
		names: map[multicast.MsgID]string{}, ids: map[string]multicast.MsgID{},
		accepted: map[multicast.MsgID]bool{}, orders: make([][]string, n), kinds: map[multicast.Kind]int{},
	}
	for g := range n {
		c, err := p.New(partition.GroupID(g), top, args)
		if err != nil {
			return nil, fmt.Errorf("interaction: group %s: %w", top.Name(partition.GroupID(g)), err)
		}
		node, err := rawnode.New(c, e.channelConfig(partition.GroupID(g)))
		if err != nil {
			return nil, fmt.Errorf("interaction: group %s: %w", top.Name(partition.GroupID(g)), err)
		}
		e.cores[g], e.nodes[g] = c, node
	}
	return e, nil
}

func square[T any](n int) [][]T {
	m := make([][]T, n)
	for i := range m {
		m[i] = make([]T, n)
	}
	return m
}

func (e *Env) channelConfig(g partition.GroupID) channel.Config {
	c := e.chcfg
	c.Self = g
	return c
}

// Topology returns the cluster's topology.
func (e *Env) Topology() *partition.Topology { return e.top }

// Core returns the core of group g.
func (e *Env) Core(g partition.GroupID) multicast.Core { return e.cores[g] }

// Node returns the node of group g.
func (e *Env) Node(g partition.GroupID) *rawnode.Node { return e.nodes[g] }

// SetDelay sets the time one frame takes on the link from -> to.
func (e *Env) SetDelay(from, to partition.GroupID, d int64) { e.delay[from][to] = d }

// SetHeld holds or releases the link from -> to.
func (e *Env) SetHeld(from, to partition.GroupID, held bool) { e.held[from][to] = held }

// Name returns the script's name for id.
func (e *Env) Name(id multicast.MsgID) string {
	if n, ok := e.names[id]; ok {
		return n
	}
	return id.String()
}

// ID returns the message id a script names: a name in id form (c1.2) is that
// id; any other name gets the next id of client 1 the first time.
func (e *Env) ID(name string) (multicast.MsgID, error) {
	if id, ok := e.ids[name]; ok {
		return id, nil
	}
	id, err := multicast.ParseMsgID(name)
	if err != nil {
		id = multicast.MsgID{Client: 1, Seq: uint64(len(e.ids) + 1)}
	}
	if other, ok := e.names[id]; ok {
		return id, fmt.Errorf("interaction: message %q has the id of %q", name, other)
	}
	e.ids[name], e.names[id] = id, name
	return id, nil
}

// Entry returns the group a message for dst enters at.
func (e *Env) Entry(dst partition.GroupSet) partition.GroupID {
	if e.proto.Entry != nil {
		return e.proto.Entry(e.top, dst)
	}
	return dst.Min()
}

// Multicast steps m into group at now, or schedules it for time at when
// that is later.
func (e *Env) Multicast(entry partition.GroupID, m multicast.Message, at int64) error {
	if at > e.now {
		e.queue.Push(at, event{kind: evRequest, to: entry, msg: m})
		return nil
	}
	return e.request(entry, m)
}

func (e *Env) request(g partition.GroupID, m multicast.Message) error {
	err := e.nodes[g].Request(m)
	if err != nil && e.trace != nil {
		fmt.Fprintf(e.trace, "%s refuses %s: %v\n", e.top.Name(g), e.Name(m.ID), err)
	}
	if derr := e.drain(g); derr != nil {
		return derr
	}
	return nil
}

// drain routes what group g's node produced: frames onto the network, the
// rest into the records.
func (e *Env) drain(g partition.GroupID) error {
	out := e.nodes[g].Ready()
	for _, m := range out.Requests {
		if e.accepted[m.ID] {
			continue
		}
		e.accepted[m.ID] = true
		e.recs = append(e.recs, check.Record{Ev: check.EvMulticast, ID: e.Name(m.ID), Dst: e.dstNames(m.Dst)})
	}
	for _, s := range out.Sends {
		e.nextSeq[g][s.To]++
		e.sendOf[frameKey{g, s.To, e.nextSeq[g][s.To]}] = s
		e.kinds[s.Kind]++
		e.recs = append(e.recs, check.Record{Ev: check.EvSend, From: e.top.Name(g), To: e.top.Name(s.To),
			Kind: s.Kind.String(), About: e.Name(s.About), Bytes: len(s.Payload)})
		if e.trace != nil {
			fmt.Fprintf(e.trace, "%s->%s %s\n", e.top.Name(g), e.top.Name(s.To), e.describe(s))
		}
	}
	for _, m := range out.Deliveries {
		e.orders[g] = append(e.orders[g], e.Name(m.ID))
		e.recs = append(e.recs, check.Record{Ev: check.EvDeliver, Group: e.top.Name(g), Replica: "r1",
			ID: e.Name(m.ID), Dst: e.dstNames(m.Dst)})
		if e.trace != nil {
			fmt.Fprintf(e.trace, "%s delivers %s\n", e.top.Name(g), e.Name(m.ID))
		}
	}
	for _, r := range out.Rejected {
		if e.trace != nil {
			fmt.Fprintf(e.trace, "%s rejects an envelope from %s: %v\n", e.top.Name(g), e.top.Name(r.From), r.Err)
		}
	}
	for _, f := range out.Frames {
		e.transmit(f)
	}
	if e.proto.Invariants != nil {
		if err := e.proto.Invariants(e.cores[g]); err != nil {
			return fmt.Errorf("interaction: group %s: %w", e.top.Name(g), err)
		}
	}
	return nil
}

func (e *Env) transmit(f channel.Frame) {
	d := e.delay[f.From][f.To]
	if d == 0 {
		d = 1
	}
	at := max(e.now+d, e.last[f.From][f.To])
	e.last[f.From][f.To] = at
	e.queue.Push(at, event{kind: evFrame, to: f.To, frame: f})
}

func (e *Env) dstNames(dst partition.GroupSet) []string {
	var out []string
	for _, g := range dst.Slice() {
		out = append(out, e.top.Name(g))
	}
	return out
}

func (e *Env) describe(s multicast.Send) string {
	if e.proto.Describe != nil {
		return e.proto.Describe(e.top, s, e.Name)
	}
	return fmt.Sprintf("%s %s", s.Kind, e.Name(s.About))
}

// describeFrame shows a frame in flight: its seq and the send it carries,
// its nack, or the ack of a control-only frame.
func (e *Env) describeFrame(f channel.Frame) string {
	var parts []string
	if f.Seq != 0 {
		s, ok := e.sendOf[frameKey{f.From, f.To, f.Seq}]
		if ok {
			parts = append(parts, fmt.Sprintf("#%d %s", f.Seq, e.describe(s)))
		} else {
			parts = append(parts, fmt.Sprintf("#%d", f.Seq))
		}
	}
	if f.Nack != 0 {
		parts = append(parts, fmt.Sprintf("nack %d", f.Nack))
	}
	if f.Seq == 0 && f.Nack == 0 {
		parts = append(parts, fmt.Sprintf("ack %d", f.Ack))
	}
	return strings.Join(parts, " ")
}

// runnable reports whether step may take ev: frames of held links wait.
func (e *Env) runnable(ev event) bool {
	return ev.kind != evFrame || !e.held[ev.frame.From][ev.frame.To]
}

// Step takes the next event that is not on a held link, in (time,
// scheduling order), and applies it. It reports false if there is none.
func (e *Env) Step() (bool, error) {
	at, ev, ok := e.queue.Remove(e.runnable, 0)
	if !ok {
		return false, nil
	}
	e.now = max(e.now, at)
	return true, e.apply(ev)
}

func (e *Env) apply(ev event) error {
	switch ev.kind {
	case evRequest:
		return e.request(ev.to, ev.msg)
	default:
		if err := e.nodes[ev.to].Receive(ev.frame); err != nil {
			return fmt.Errorf("interaction: group %s: %w", e.top.Name(ev.to), err)
		}
		return e.drain(ev.to)
	}
}

// stepsMax bounds a Stabilize: a script that never settles is a bug.
const stepsMax = 1_000_000

// Stabilize steps until only frames of held links are left.
func (e *Env) Stabilize() error {
	for range stepsMax {
		ok, err := e.Step()
		if err != nil || !ok {
			return err
		}
	}
	return fmt.Errorf("interaction: not stable after %d steps", stepsMax)
}

func onLink(from, to partition.GroupID) func(event) bool {
	return func(ev event) bool { return ev.kind == evFrame && ev.frame.From == from && ev.frame.To == to }
}

// Deliver applies the frame of the link from -> to that comes after skip
// others, held or not: a script reorders a link by skipping.
func (e *Env) Deliver(from, to partition.GroupID, skip int) error {
	_, ev, ok := e.queue.Remove(onLink(from, to), skip)
	if !ok {
		return fmt.Errorf("interaction: link %s->%s holds no frame #%d", e.top.Name(from), e.top.Name(to), skip+1)
	}
	return e.apply(ev)
}

// Drop loses the frame of the link from -> to that comes after skip others.
func (e *Env) Drop(from, to partition.GroupID, skip int) (channel.Frame, error) {
	_, ev, ok := e.queue.Remove(onLink(from, to), skip)
	if !ok {
		return channel.Frame{}, fmt.Errorf("interaction: link %s->%s holds no frame #%d", e.top.Name(from), e.top.Name(to), skip+1)
	}
	return ev.frame, nil
}

// Duplicate sends a copy of the first frame of the link from -> to after the
// frames in flight.
func (e *Env) Duplicate(from, to partition.GroupID) (channel.Frame, error) {
	var f channel.Frame
	found := false
	e.queue.Each(func(_ int64, ev event) {
		if !found && onLink(from, to)(ev) {
			f, found = ev.frame, true
		}
	})
	if !found {
		return f, fmt.Errorf("interaction: link %s->%s is empty", e.top.Name(from), e.top.Name(to))
	}
	e.transmit(f)
	return f, nil
}

// Tick ticks the nodes of groups gs, in rank order.
func (e *Env) Tick(gs partition.GroupSet) error {
	for _, g := range gs.Slice() {
		e.nodes[g].Tick()
		if err := e.drain(g); err != nil {
			return err
		}
	}
	return nil
}

// SnapshotRestore replaces group g's core and node by copies restored from
// their snapshots, and checks that the copies encode to the same bytes.
func (e *Env) SnapshotRestore(g partition.GroupID) error {
	if e.proto.Restore == nil {
		return errors.New("interaction: the protocol has no Restore")
	}
	sn, ok := e.cores[g].(Snapshotter)
	if !ok {
		return fmt.Errorf("interaction: %T has no AppendSnapshot", e.cores[g])
	}
	coreSnap := sn.AppendSnapshot(nil)
	nodeSnap := e.nodes[g].AppendSnapshot(nil)
	c, err := e.proto.Restore(g, e.top, e.args, coreSnap)
	if err != nil {
		return fmt.Errorf("interaction: restore %s: %w", e.top.Name(g), err)
	}
	n, err := rawnode.Restore(c, partition.Ranks{}, e.channelConfig(g), nodeSnap, nil)
	if err != nil {
		return fmt.Errorf("interaction: restore %s: %w", e.top.Name(g), err)
	}
	if again := c.(Snapshotter).AppendSnapshot(nil); !bytes.Equal(again, coreSnap) {
		return fmt.Errorf("interaction: %s: the restored core encodes to other bytes", e.top.Name(g))
	}
	if again := n.AppendSnapshot(nil); !bytes.Equal(again, nodeSnap) {
		return fmt.Errorf("interaction: %s: the restored node encodes to other bytes", e.top.Name(g))
	}
	e.cores[g], e.nodes[g] = c, n
	return nil
}

// Deliveries returns each group's delivery order, by script name.
func (e *Env) Deliveries() [][]string { return e.orders }

// Records returns what was multicast, sent and delivered, for
// multicast/check.
func (e *Env) Records() []check.Record { return e.recs }

// Check runs multicast/check over everything recorded.
func (e *Env) Check(opt check.Options) check.Report { return check.Check(e.recs, opt) }

// links returns the links with frames in flight, in (from, to) order, and
// their frames in order.
func (e *Env) links() ([][2]partition.GroupID, map[[2]partition.GroupID][]channel.Frame) {
	frames := map[[2]partition.GroupID][]channel.Frame{}
	var keys [][2]partition.GroupID
	e.queue.Each(func(_ int64, ev event) {
		if ev.kind != evFrame {
			return
		}
		k := [2]partition.GroupID{ev.frame.From, ev.frame.To}
		if _, ok := frames[k]; !ok {
			keys = append(keys, k)
		}
		frames[k] = append(frames[k], ev.frame)
	})
	slices.SortFunc(keys, func(a, b [2]partition.GroupID) int {
		if a[0] != b[0] {
			return int(a[0]) - int(b[0])
		}
		return int(a[1]) - int(b[1])
	})
	return keys, frames
}
