package sim

import (
	"errors"
	"fmt"
	"slices"

	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/multicast/check"
	"github.com/flexkv/flexkv/multicast/flexcast"
	"github.com/flexkv/flexkv/multicast/rawnode"
	"github.com/flexkv/flexkv/partition"
)

// Epochs in the simulation (DESIGN 14). An operator submits Config.Changes
// control messages at the protocol's change entry of the latest epoch,
// each ending that epoch: half of them keep the overlay, half draw new
// ranks (and, with a tree, a new tree), so that FlexCast and the tree
// protocol start a new generation of their cores at the cut.
// Clients route with the topology of the epoch they know, 1 at first: a refusal for an
// ended epoch teaches them the new one and they resubmit at once; a refusal
// for an epoch not started yet is retried like a busy group. A message
// aborted at its destinations (of an epoch that ended before its delivery)
// is answered with the new epoch, and its client resubmits it as a new
// message, with a new id.
//
// Checked on top of every property of the checker, which sees the control
// messages as multicasts to every group:
//   - every destination of a message decides alike whether it ran or was
//     aborted;
//   - no group starts epoch e+1 with work of epoch e pending: at a group's
//     delivery of the change of e, every message of e that ran at some
//     destination and is addressed to this group was delivered here.

// resubmitClientBase starts the client ids of resubmitted messages: the
// client of index c resubmits as resubmitClientBase+c.
const resubmitClientBase = 1 << 32

// Verdicts of a message at its destinations.
const (
	verdictNone    int8 = iota
	verdictRan          // delivered in its epoch
	verdictAborted      // delivered after its epoch ended
)

// scheduleChanges schedules the operator's changes at uniform random times
// over [0, untilUs]. It draws nothing when there are none, so that the
// runs without changes stay what they were.
func (s *simulation) scheduleChanges(untilUs int64) error {
	for range s.cfg.Changes {
		if err := s.schedule(event{atUs: s.rng.Int64N(untilUs + 1), kind: evChange}); err != nil {
			return err
		}
	}
	return nil
}

// change submits a change of the epoch the change entry is in; a group
// that is busy or has a change under way makes the operator retry.
func (s *simulation) change() error {
	e := uint64(len(s.tops))
	top := s.tops[e-1]
	entry := s.proto.ChangeEntry(top)
	nd := s.nodes[entry]
	order, parent := s.drawOverlay(top)
	next, err := s.w.top.WithOverlay(order, parent)
	if err != nil {
		return fmt.Errorf("sim: drawn overlay: %w", err)
	}
	err = nd.Change(e, s.w.top.All(), encodeOverlay(order, parent))
	if errors.Is(err, multicast.ErrBusy) || errors.Is(err, rawnode.ErrChangePending) {
		// ErrEpochAhead wraps ErrBusy: the entry has not started e yet.
		return s.schedule(event{atUs: s.nowUs + msToUs(retryMs), kind: evChange})
	}
	if err != nil {
		return fmt.Errorf("sim: change of epoch %d at %s: %w", e, s.names[entry], err)
	}
	if !slices.Equal(next.Ranks().Order(), top.Ranks().Order()) || !slices.Equal(next.Parents(), top.Parents()) {
		s.res.Rebuilt++
	}
	s.tops = append(s.tops, next)
	s.res.Changes++
	if err := s.record(check.Record{Ev: check.EvMulticast, ID: rawnode.ControlID(e).String(), Dst: s.names}); err != nil {
		return err
	}
	return s.drain(entry)
}

// refused handles a request refused for its epoch: the client learns the
// group's epoch and resubmits at once.
func (s *simulation) refused(i int, ee *rawnode.EpochError) error {
	s.res.EpochRefusals++
	j := &s.jobs[i]
	j.epoch = ee.Epoch
	s.clientEpoch[j.client] = max(s.clientEpoch[j.client], ee.Epoch)
	return s.schedule(event{atUs: s.nowUs, kind: evSubmit, job: i})
}

// changed records a change delivered at g and checks that g holds no
// pending work of the epoch it ends.
func (s *simulation) changed(g partition.GroupID, c rawnode.Change) error {
	s.ctlDelivered++
	if err := s.record(check.Record{
		Ev: check.EvDeliver, Group: s.names[g], Replica: "r1", ID: rawnode.ControlID(c.Epoch).String(), Dst: s.names,
	}); err != nil {
		return err
	}
	for i := range s.jobs {
		j := &s.jobs[i]
		if s.accepted[i] && j.epoch == c.Epoch && s.verdict[i] == verdictRan && j.msg.Dst.Has(g) && !s.delivered[i].Has(g) {
			return fmt.Errorf("sim: %s started epoch %d with %s of epoch %d pending (it ran at %s)",
				s.names[g], c.Epoch+1, j.msg.ID, c.Epoch, s.dstNames(s.delivered[i]))
		}
	}
	return nil
}

// judge checks that group g decides for job i as the destinations before
// it did, and resubmits a message aborted at its first destination.
func (s *simulation) judge(g partition.GroupID, i int, aborted bool) error {
	v := verdictRan
	if aborted {
		v = verdictAborted
	}
	switch s.verdict[i] {
	case v:
		return nil
	case verdictNone:
		s.verdict[i] = v
	default:
		return fmt.Errorf("sim: %s %s %s, which other destinations %s", s.names[g], map[bool]string{true: "aborted", false: "ran"}[aborted],
			s.jobs[i].msg.ID, map[bool]string{true: "ran", false: "aborted"}[aborted])
	}
	if !aborted {
		return nil
	}
	s.res.Aborted++
	old := s.jobs[i]
	s.resubmits[old.client]++
	nj := old
	nj.msg.ID = multicast.MsgID{Client: resubmitClientBase + uint64(old.client), Seq: s.resubmits[old.client]}
	nj.epoch = s.nodes[g].Epoch()
	s.clientEpoch[old.client] = max(s.clientEpoch[old.client], nj.epoch)
	s.addJob(nj)
	return s.schedule(event{atUs: s.nowUs + msToUs(retryMs), kind: evSubmit, job: len(s.jobs) - 1})
}

// addJob appends a job and its bookkeeping.
func (s *simulation) addJob(j job) {
	s.jobOf[j.msg.ID] = len(s.jobs)
	s.jobs = append(s.jobs, j)
	s.accepted = append(s.accepted, false)
	s.delivered = append(s.delivered, 0)
	s.perJob = append(s.perJob, -1)
	s.verdict = append(s.verdict, verdictNone)
}

// drawOverlay draws the overlay of the next epoch: top's, or new ranks (and
// a new tree when top has one), by a coin.
func (s *simulation) drawOverlay(top *partition.Topology) (order, parent []partition.GroupID) {
	n := top.Len()
	order = make([]partition.GroupID, n)
	for k := range n {
		order[k] = top.Ranks().Group(partition.GroupID(k))
	}
	parent = top.Parents()
	if s.cfg.keepOverlay || s.rng.IntN(2) == 0 {
		return order, parent
	}
	for k, g := range s.rng.Perm(n) {
		order[k] = partition.GroupID(g)
	}
	if parent != nil {
		// A random tree: every group but the first of a random order
		// hangs under one drawn before it.
		perm := s.rng.Perm(n)
		parent[perm[0]] = partition.NoGroup
		for i := 1; i < n; i++ {
			parent[perm[i]] = partition.GroupID(perm[s.rng.IntN(i)])
		}
	}
	return order, parent
}

// encodeOverlay returns the configuration of a change: the number of
// groups, the order, then the parents (each plus one: the root's 0), none
// without a tree; a byte each (at most partition.GroupsMax groups).
func encodeOverlay(order, parent []partition.GroupID) []byte {
	b := []byte{byte(len(order))}
	for _, g := range order {
		b = append(b, byte(g))
	}
	b = append(b, byte(len(parent)))
	for _, g := range parent {
		b = append(b, byte(g+1))
	}
	return b
}

// decodeOverlay reads what encodeOverlay wrote.
func decodeOverlay(b []byte) (order, parent []partition.GroupID, err error) {
	if len(b) == 0 || len(b) < 2+int(b[0]) {
		return nil, nil, fmt.Errorf("sim: change configuration of %d bytes", len(b))
	}
	n := int(b[0])
	for _, g := range b[1 : 1+n] {
		order = append(order, partition.GroupID(g))
	}
	k := int(b[1+n])
	rest := b[2+n:]
	if len(rest) != k {
		return nil, nil, fmt.Errorf("sim: change configuration: %d parents, %d bytes", k, len(rest))
	}
	for _, g := range rest {
		parent = append(parent, partition.GroupID(g)-1)
	}
	return order, parent, nil
}

// newCore returns the core of group g (a GroupID) for an epoch of topology
// top, numbered by rank (protocol.New), with the run's settings.
func (s *simulation) newCore(g partition.GroupID, top *partition.Topology) (multicast.Core, error) {
	var core multicast.Core
	var err error
	if s.cfg.GCTicks > 0 {
		core, err = flexcast.New(flexcast.Config{Self: top.Ranks().Rank(g), Topology: top.RankSpace(), GCTicks: s.cfg.GCTicks})
	} else {
		core, err = s.proto.New(g, top)
	}
	if err != nil {
		return nil, err
	}
	if s.cfg.wrapCore != nil {
		core = s.cfg.wrapCore(top.Ranks().Rank(g), core)
	}
	return core, nil
}

// builder makes a group's cores of later generations (rawnode.Builder).
type builder struct {
	s    *simulation
	self partition.GroupID
}

// Begin starts the core of the epoch a change starts, when it alters the
// overlay under a protocol that orders by it.
func (b *builder) Begin(c rawnode.Change) (multicast.Core, partition.Ranks, error) {
	order, parent, err := decodeOverlay(c.Config)
	if err != nil {
		return nil, partition.Ranks{}, err
	}
	top, err := b.s.w.top.WithOverlay(order, parent)
	if err != nil {
		return nil, partition.Ranks{}, err
	}
	prev := b.s.tops[c.Epoch-1]
	if !b.s.proto.Rebuilds() || (slices.Equal(top.Ranks().Order(), prev.Ranks().Order()) && slices.Equal(top.Parents(), prev.Parents())) {
		return nil, partition.Ranks{}, nil
	}
	core, err := b.s.newCore(b.self, top)
	b.s.res.Generations++
	return core, top.Ranks(), err
}

// RestoreCore is not used: the simulation restores no node.
func (b *builder) RestoreCore(uint64, []byte) (multicast.Core, partition.Ranks, error) {
	return nil, partition.Ranks{}, errors.New("sim: no node is restored")
}
