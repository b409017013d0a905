package dbsim

import (
	"errors"
	"fmt"
	"slices"

	"github.com/flexkv/flexkv/group"
	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/multicast/rawnode"
	"github.com/flexkv/flexkv/partition"
	"github.com/flexkv/flexkv/txn"
)

// Changes of the epoch under load and faults (DESIGN 14, Config.Changes):
// the group that takes the changes ends its epoch with a change that keeps
// the overlay or, by a coin, draws new ranks (and a new tree, under the
// tree protocol), so that FlexCast and tree cores start a new generation at
// the cut; clients route with the topology of the epoch they know and learn the new one
// from a refusal; a transaction delivered after its epoch ended is aborted
// at every destination alike, which the atomicity check of answered and
// the checks at the end verify with every other check. At the end every
// replica of every group is at the last epoch.

// change asks the group that takes the changes to end the epoch its leader
// is at, with a change of the members (Config.Members) or else one that
// keeps or redraws the overlay; a change under way or a busy group makes it
// a no-op.
func (s *sim) change() error {
	e := uint64(len(s.tops))
	entry := s.proto.ChangeEntry(s.tops[e-1])
	gs := s.groups[entry]
	st := gs.replicas[gs.leader].m.State()
	next := st.EpochConfig()
	if st.Epoch() != e {
		// The entry of the latest epoch has not started it yet: the
		// group refuses the change as ahead (busy).
		next = s.cfgs[e-1]
	}
	var repl *replacement
	members := false
	if s.cfg.Members > 0 && s.rng.Float64() < s.cfg.Members {
		next, repl, members = s.memberNext(next)
	}
	moved := false
	if !members && s.cfg.Moves > 0 && s.rng.Float64() < s.cfg.Moves {
		next, moved = s.moveNext(next, e)
	}
	if !members && !moved {
		next = s.drawOverlay(next)
	}
	top, err := s.top.WithOverlay(next.Overlay, next.Parent)
	if err != nil {
		return fmt.Errorf("dbsim: drawn overlay: %w", err)
	}
	result, err := s.propose(entry, group.EncodeChange(e, next))
	switch {
	case err != nil:
		return err
	case result == nil:
		s.res.Changes++
		if !next.SameOverlay(s.cfgs[e-1]) {
			s.res.OverlayChanges++
		}
		if members {
			s.res.MemberChanges++
			s.repl = repl
		}
		if moved {
			s.res.Moves++
		}
		s.tops = append(s.tops, top)
		s.cfgs = append(s.cfgs, next)
	case errors.Is(result, rawnode.ErrChangePending), errors.Is(result, multicast.ErrBusy):
	default:
		return fmt.Errorf("dbsim: change of epoch %d at group %d: %w", e, entry, result)
	}
	return nil
}

// requestNow returns the entry group of m, the transaction t, from home and
// the log entry of m routed with the epoch of that group's leader, by that
// epoch's topology and owners (m.Dst set by them): a request no client
// retries, so it never routes with an old epoch. The latest epoch whose
// entry group's leader is at it; none (a change on its way): the latest,
// which the group refuses as not started yet (busy). ok is false when the
// entry group's server refuses it for touching a moving partition.
func (s *sim) requestNow(home partition.GroupID, m *multicast.Message, t *txn.Txn) (entry partition.GroupID, data []byte, ok bool) {
	for e := uint64(len(s.tops)); e >= 1; e-- {
		s.routeTxn(m, t, e)
		entry := s.entryAt(e, home, m.Dst)
		gs := s.groups[entry]
		if st := gs.replicas[gs.leader].m.State(); st.Epoch() == e {
			var keys []string
			for _, op := range thenOf(t) {
				keys = append(keys, string(op.Key))
			}
			if s.touchesMoving(st.EpochConfig(), keys) {
				s.res.MoveRefusals++
				return entry, nil, false
			}
			return entry, group.EncodeRequestsAt(e, []multicast.Message{*m}), true
		}
	}
	e := uint64(len(s.tops))
	s.routeTxn(m, t, e)
	return s.entry(home, m.Dst), group.EncodeRequestsAt(e, []multicast.Message{*m}), true
}

// routeTxn sets the destinations of m, transaction t, by the owners of
// epoch e.
func (s *sim) routeTxn(m *multicast.Message, t *txn.Txn, e uint64) {
	if t == nil {
		return // a backup marker: every group
	}
	dst, err := t.Destinations(s.pmOf(s.cfgs[e-1]), s.top, 0)
	if err != nil {
		panic(fmt.Sprintf("dbsim: routing %s: %v", m.ID, err))
	}
	m.Dst = dst
}

// only returns the outcome of the one request of an entry of requests.
func only(result error) error {
	if errs := group.RequestErrors(nil); errors.As(result, &errs) && len(errs) == 1 {
		return errs[0]
	}
	return result
}

// epochAborted counts a transaction whose destinations aborted it for its
// epoch.
func (s *sim) epochAborted(pieces []txn.PieceResult) {
	if len(pieces) > 0 && pieces[0].Aborted {
		if _, err := txn.MergeResults("", pieces); errors.Is(err, txn.ErrEpochChanged) {
			s.res.EpochAborts++
		}
	}
}

// checkEpochs checks that every replica of every group is at the epoch the
// changes taken lead to, with the configuration of each.
func (s *sim) checkEpochs() {
	want := uint64(1 + s.res.Changes)
	for g, gs := range s.groups {
		for r, rp := range gs.replicas {
			st := rp.m.State()
			if st.Epoch() != want || st.EpochConfig().Epoch != want || len(st.Epochs()) != int(min(want, group.EpochsKept)) {
				s.res.violate("epochs: group %d replica %d at epoch %d with %d configurations, want %d after %d changes",
					g, r, st.Epoch(), len(st.Epochs()), want, s.res.Changes)
			}
		}
	}
}

// drawOverlay returns cur with its overlay kept, or new ranks (and, with a
// tree, a new tree), by a coin.
func (s *sim) drawOverlay(cur group.EpochConfig) group.EpochConfig {
	next := cur
	next.Overlay = slices.Clone(cur.Overlay)
	next.Parent = slices.Clone(cur.Parent)
	if s.rng.IntN(2) == 0 {
		return next
	}
	n := len(next.Overlay)
	for k, g := range s.rng.Perm(n) {
		next.Overlay[k] = partition.GroupID(g)
	}
	if next.Parent != nil {
		perm := s.rng.Perm(n)
		next.Parent[perm[0]] = partition.NoGroup
		for i := 1; i < n; i++ {
			next.Parent[perm[i]] = partition.GroupID(perm[s.rng.IntN(i)])
		}
	}
	return next
}

// thenOf returns t's Then branch; none for no transaction.
func thenOf(t *txn.Txn) []txn.Op {
	if t == nil {
		return nil
	}
	return t.Then
}
