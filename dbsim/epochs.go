package dbsim

import (
	"errors"
	"fmt"

	"github.com/flexkv/flexkv/group"
	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/multicast/rawnode"
	"github.com/flexkv/flexkv/partition"
	"github.com/flexkv/flexkv/txn"
)

// Changes of the epoch under load and faults (DESIGN 14, Config.Changes):
// the group that takes the changes ends its epoch with a change that keeps
// the overlay; clients route with the epoch they know and learn the new one
// from a refusal; a transaction delivered after its epoch ended is aborted
// at every destination alike, which the atomicity check of answered and
// the checks at the end verify with every other check. At the end every
// replica of every group is at the last epoch.

// change asks the group that takes the changes to end the epoch its leader
// is at; a change under way or a busy group makes it a no-op.
func (s *sim) change() error {
	entry := s.proto.ChangeEntry(s.top)
	gs := s.groups[entry]
	e := gs.replicas[gs.leader].m.State().Epoch()
	result, err := s.propose(entry, group.EncodeChange(e, group.BootstrapEpoch(s.top)))
	switch {
	case err != nil:
		return err
	case result == nil:
		s.res.Changes++
	case errors.Is(result, rawnode.ErrChangePending), errors.Is(result, multicast.ErrBusy):
	default:
		return fmt.Errorf("dbsim: change of epoch %d at group %d: %w", e, entry, result)
	}
	return nil
}

// requestNow returns the log entry of m routed with the epoch of entry's
// leader: a request no client retries, so it never routes with an old one.
func (s *sim) requestNow(entry partition.GroupID, m multicast.Message) []byte {
	gs := s.groups[entry]
	return group.EncodeRequestsAt(gs.replicas[gs.leader].m.State().Epoch(), []multicast.Message{m})
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
