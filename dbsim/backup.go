package dbsim

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/flexkv/flexkv/executor"
	"github.com/flexkv/flexkv/group"
	"github.com/flexkv/flexkv/kv"
	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/partition"
	"github.com/flexkv/flexkv/txn"
)

// backupID is the client id of the backup markers the simulator offers
// (Config.Backups): anonymous, as a server's are.
const backupID = group.AnonymousBit | 3000

// backup offers a backup marker to every group at the entry group of all
// groups (DESIGN 14); a refused one is dropped.
func (s *sim) backup() error {
	s.backupSeq++
	m := multicast.Message{ID: multicast.MsgID{Client: backupID, Seq: s.backupSeq}, Dst: partition.AllGroups(len(s.groups)), Payload: txn.AppendBackupPayload(nil)}
	entry, data, _ := s.requestNow(0, &m, nil)
	result, err := s.propose(entry, data)
	result = only(result)
	switch {
	case err != nil:
		return err
	case result == nil:
		s.res.Backups++
		s.accepted = append(s.accepted, &request{kind: kindPressure, msg: m})
		s.markers = append(s.markers, m.ID)
	case errors.Is(result, multicast.ErrBusy):
	default:
		return fmt.Errorf("dbsim: backup marker %s at group %d: %w", m.ID, entry, result)
	}
	return nil
}

// checkBackups checks every checkpoint that a replica holds of every
// marker against a replay of the replica's delivery order up to the
// marker: each account holds what the load and the committed transfers
// delivered before the marker put there (an account a transfer of unknown
// outcome touched is not checked), the applied index is the entry that ran
// the marker, and the groups' checkpoints of one marker sum to the bank's
// total, a cut that no transfer crosses halfway.
func (s *sim) checkBackups() error {
	byID := map[multicast.MsgID]*request{}
	for _, c := range s.clients {
		for _, rq := range c.reqs {
			byID[rq.msg.ID] = rq
		}
	}
	for _, id := range s.markers {
		total, groups := int64(0), 0
		for g, gs := range s.groups {
			var held []int64
			for _, rp := range gs.replicas {
				sum, ok, err := s.checkCheckpoint(rp, g, id, byID)
				if err != nil {
					return err
				}
				if ok {
					held = append(held, sum)
				}
			}
			s.res.Checkpoints += len(held)
			if len(held) > 0 {
				total += held[0]
				groups++
			}
		}
		if want := int64(len(s.groups) * AccountsPerGroup * initialBalance); groups == len(s.groups) && total != want {
			s.res.violate("backup %s: the groups' checkpoints sum to %d, want %d: not a cut", id, total, want)
		}
	}
	return nil
}

// checkCheckpoint checks rp's checkpoint of marker id, if it has one, and
// returns the sum of its accounts.
func (s *sim) checkCheckpoint(rp *replica, g int, id multicast.MsgID, byID map[multicast.MsgID]*request) (int64, bool, error) {
	got := map[string]int64{}
	_, applied, err := rp.store.ScanCheckpoint(executor.CheckpointName(id), func(p kv.KV) error {
		n, err := strconv.ParseInt(string(p.Value), 10, 64)
		if err == nil {
			got[string(p.Key)] = n
		}
		return nil
	})
	if errors.Is(err, kv.ErrNoCheckpoint) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("dbsim: %s: %w", rp.name(), err)
	}
	want, unknown, at, found := s.replayTo(rp, g, id, byID)
	if !found {
		s.res.violate("backup %s: %s holds a checkpoint of a marker it never delivered", id, rp.name())
		return 0, false, nil
	}
	// The marker runs at its delivery's entry or, queued behind a piece
	// that waits for a vote, at a later one: its result names which.
	ran := uint64(0)
	if r, ok, err := rp.exec.Result(id); err == nil && ok {
		ran, _ = executor.MarkerIndex(r)
	}
	if applied < at || (ran != 0 && applied != ran) {
		s.res.violate("backup %s: %s's checkpoint is at applied index %d, the marker was delivered at entry %d and ran at %d (0: result not kept)", id, rp.name(), applied, at, ran)
	}
	sum := int64(0)
	for i := range AccountsPerGroup {
		k := accountKey(g, i)
		sum += got[k]
		if !unknown[k] && got[k] != want[k] {
			s.res.violate("backup %s: %s's checkpoint has %s = %d, the deliveries before the marker give %d", id, rp.name(), k, got[k], want[k])
		}
	}
	return sum, true, nil
}

// replayTo replays rp's delivery order up to marker id on the accounts of
// group g: the balances it gives, the accounts it cannot tell (a transfer
// whose outcome no client learnt), and the entry of the marker.
func (s *sim) replayTo(rp *replica, g int, id multicast.MsgID, byID map[multicast.MsgID]*request) (map[string]int64, map[string]bool, uint64, bool) {
	want, unknown := map[string]int64{}, map[string]bool{}
	seen := map[multicast.MsgID]bool{}
	ours := func(k string) bool { return strings.HasPrefix(k, partitionStart(g)) }
	for _, d := range rp.dlog {
		for _, mid := range d.ids {
			if mid == id {
				return want, unknown, d.index, true
			}
			if seen[mid] {
				continue
			}
			seen[mid] = true
			rq := byID[mid]
			switch {
			case rq == nil:
			case rq.kind == kindLoad:
				p, err := txn.DecodePayload(rq.msg.Payload)
				if err != nil || p.Txn == nil {
					continue
				}
				for _, op := range p.Txn.Then {
					if k := string(op.Key); ours(k) {
						want[k] += op.Int
					}
				}
			case rq.kind != kindTransfer:
			case rq.pieces == nil:
				unknown[rq.from], unknown[rq.to] = true, true
			case !rq.pieces[0].Aborted && rq.pieces[0].Succeeded:
				if ours(rq.from) {
					want[rq.from] -= rq.amount
				}
				if ours(rq.to) {
					want[rq.to] += rq.amount
				}
			}
		}
	}
	return nil, nil, 0, false
}
