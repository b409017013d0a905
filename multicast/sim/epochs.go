package sim

import (
	"errors"
	"fmt"

	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/multicast/check"
	"github.com/flexkv/flexkv/multicast/rawnode"
	"github.com/flexkv/flexkv/partition"
)

// Epochs in the simulation (DESIGN 14). An operator submits Config.Changes
// control messages at the protocol's change entry, each ending the epoch
// that group is in (the configuration is kept: same ranks, same tree).
// Clients route with the epoch they know, 1 at first: a refusal for an
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
	entry := s.proto.ChangeEntry(s.w.top)
	nd := s.nodes[entry]
	e := nd.Epoch()
	err := nd.Change(e, s.w.top.All(), fmt.Appendf(nil, "epoch %d", e+1))
	if errors.Is(err, multicast.ErrBusy) || errors.Is(err, rawnode.ErrChangePending) {
		return s.schedule(event{atUs: s.nowUs + msToUs(retryMs), kind: evChange})
	}
	if err != nil {
		return fmt.Errorf("sim: change of epoch %d at %s: %w", e, s.names[entry], err)
	}
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
