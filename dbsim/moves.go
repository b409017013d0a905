package dbsim

import (
	"errors"
	"fmt"
	"slices"

	"github.com/flexkv/flexkv/group"
	"github.com/flexkv/flexkv/kv"
	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/multicast/rawnode"
	"github.com/flexkv/flexkv/partition"
)

// Partition moves under load and faults (DESIGN 14, Config.Moves), as the
// server makes them (server/moves.go): a change of the epoch lists the
// move of one group's partition to another group; the entry groups refuse,
// as busy, the requests that touch a moving partition in their epoch
// (clients retry); the new owner's leader copies the partition in chunks,
// each read from a replica of the old owner once that replica ran every
// delivery queued before it saw the move's epoch, and appended to its own
// log (a chunk sent twice now and then: it must be dropped), unless the
// network cuts the two groups apart; once every chunk is in, a second
// change gives the partition its new owner, at whose delivery the old
// owner deletes the range. Clients route with the owners of the epoch they
// know. Every check of the run applies, reading each account and list at
// its final owner; besides, every move completes, the final owners are
// every replica's, and no old owner keeps a key of a partition it gave
// away.

// moveCut names a replica of a move's old owner, for the queue sequence at
// which it first served the move (server.frozen).
type moveCut struct {
	g, r, part int
	since      uint64
}

// movesMax bounds the moves under way at once: as an operator would, the
// simulator leaves the clients room to finish between moves (each holds
// back every request on its partition until it completes).
const movesMax = 2

// moveNext returns cur with a move of a random partition that does not
// move to another group, and whether it drew one.
func (s *sim) moveNext(cur group.EpochConfig, e uint64) (group.EpochConfig, bool) {
	if len(cur.Moves) >= movesMax {
		return cur, false
	}
	owners := cur.Owners
	if owners == nil {
		owners = s.pm.Owners()
	}
	var free []int
	for i := range owners {
		if _, moving := cur.MoveOf(i); !moving && owners[i] != partition.NoGroup {
			free = append(free, i)
		}
	}
	if len(free) == 0 {
		return cur, false
	}
	p := free[s.rng.IntN(len(free))]
	to := partition.GroupID(s.rng.IntN(len(s.groups) - 1))
	if to >= owners[p] {
		to++
	}
	next := cur
	next.Overlay, next.Parent = slices.Clone(cur.Overlay), slices.Clone(cur.Parent)
	next.Owners = slices.Clone(owners)
	next.Moves = append(slices.Clone(cur.Moves), group.Move{Partition: p, To: to, Since: e + 1})
	return next, true
}

// pmOf returns the partition map of configuration c.
func (s *sim) pmOf(c group.EpochConfig) *partition.PartitionMap {
	if c.Owners == nil {
		return s.pm
	}
	pm, err := s.pm.WithOwners(s.top, c.Owners)
	if err != nil {
		panic(fmt.Sprintf("dbsim: owners of epoch %d: %v", c.Epoch, err))
	}
	return pm
}

// keysOf returns the keys request rq touches.
func keysOf(rq *request) []string {
	switch rq.kind {
	case kindTransfer:
		return []string{rq.from, rq.to}
	case kindAppend:
		return rq.lists
	case kindLoad, kindPressure:
	}
	return nil
}

// touchesMoving reports whether one of keys is in a partition moving in c.
func (s *sim) touchesMoving(c group.EpochConfig, keys []string) bool {
	for _, m := range c.Moves {
		p := s.pm.At(m.Partition)
		for _, k := range keys {
			if p.Contains([]byte(k)) {
				return true
			}
		}
	}
	return false
}

// route sets the destinations of rq, not sent yet, by the owners of epoch
// e, as a client that knows e routes.
func (s *sim) route(rq *request, e uint64) {
	pm := s.pmOf(s.cfgs[e-1])
	switch rq.kind {
	case kindTransfer:
		dst, err := transferTxn(rq.from, rq.to, rq.amount).Destinations(pm, s.top, 0)
		if err != nil {
			panic(fmt.Sprintf("dbsim: routing %s: %v", rq.msg.ID, err))
		}
		rq.msg.Dst = dst
	case kindAppend:
		dst, err := s.procs.Destinations(appendCall(rq.msg.ID, rq.lists), pm, s.top, 0)
		if err != nil {
			panic(fmt.Sprintf("dbsim: routing %s: %v", rq.msg.ID, err))
		}
		rq.msg.Dst = dst
	case kindLoad, kindPressure:
		// The load runs before any change; pressure is routed as sent.
	}
}

// movesUnderWay reports whether the latest configuration lists a move.
func (s *sim) movesUnderWay() bool { return len(s.cfgs[len(s.cfgs)-1].Moves) > 0 }

// moveStep takes one step of a move under way: the next chunk of a copy,
// or the change that completes a copy that is in.
func (s *sim) moveStep() error {
	for g, gs := range s.groups {
		lead := gs.replicas[gs.leader]
		for _, mp := range lead.m.State().MovesIn() {
			if mp.Done {
				return s.completeMove(g, mp)
			}
			return s.copyChunk(g, mp)
		}
	}
	return nil
}

// copyChunk appends the next chunk of copy mp to group g's log, read from
// a random replica of the old owner that is frozen, when the network joins
// the two groups.
func (s *sim) copyChunk(g int, mp group.MoveProgress) error {
	from := int(s.cfgs[mp.Since-1].Owners[mp.Partition])
	if s.cutUntil[from][g] > s.res.Steps || s.cutUntil[g][from] > s.res.Steps {
		return nil
	}
	src := s.groups[from]
	rp := src.replicas[s.rng.IntN(len(src.replicas))]
	if rp.m.State().Epoch() < mp.Since {
		return nil
	}
	p := s.pm.At(mp.Partition)
	key := moveCut{g: from, r: rp.r, part: mp.Partition, since: mp.Since}
	cut, ok := s.moveCuts[key]
	if !ok {
		cut = rp.exec.NextSeq()
		s.moveCuts[key] = cut
	}
	if rp.exec.QueuedTouch(cut, p.Start, p.End) {
		s.res.MoveWaits++
		return nil
	}
	start := mp.Next
	if start == nil {
		start = p.Start
	}
	limit := 1 + s.rng.IntN(4)
	kvs, next, err := rp.store.ScanChunk(start, p.End, limit, 48+s.rng.IntN(96))
	if err != nil {
		return fmt.Errorf("dbsim: chunk of %s at %s: %w", p.Name, rp.name(), err)
	}
	rows := make([]group.MoveRow, len(kvs))
	for i, r := range kvs {
		rows[i] = group.MoveRow{Key: r.Key, Value: r.Value}
	}
	entry := group.EncodeMoveChunk(mp.Move, mp.Next, next, rows)
	result, err := s.propose(partition.GroupID(g), entry)
	switch {
	case err != nil:
		return err
	case result == nil:
		s.res.Chunks++
	case errors.Is(result, group.ErrChunkStale):
	default:
		return fmt.Errorf("dbsim: chunk of %s at group %d: %w", p.Name, g, result)
	}
	if result == nil && s.rng.IntN(5) == 0 {
		// The chunk again, as a leader that did not learn the first took
		// does: dropped.
		again, err := s.propose(partition.GroupID(g), entry)
		if err != nil {
			return err
		}
		if !errors.Is(again, group.ErrChunkStale) {
			s.res.violate("moves: a chunk of %s taken twice by group %d: %v", p.Name, g, again)
		}
		s.res.ChunksAgain++
	}
	return nil
}

// completeMove asks the group that takes the changes for the change that
// gives mp's partition to group g.
func (s *sim) completeMove(g int, mp group.MoveProgress) error {
	e := uint64(len(s.tops))
	entry := s.proto.ChangeEntry(s.tops[e-1])
	es := s.groups[entry]
	st := es.replicas[es.leader].m.State()
	if st.Epoch() != e {
		return nil
	}
	cur := st.EpochConfig()
	if m, ok := cur.MoveOf(mp.Partition); !ok || m != mp.Move {
		return nil
	}
	next := cur
	next.Overlay, next.Parent = slices.Clone(cur.Overlay), slices.Clone(cur.Parent)
	next.Owners = slices.Clone(cur.Owners)
	next.Owners[mp.Partition] = partition.GroupID(g)
	next.Moves = slices.DeleteFunc(slices.Clone(cur.Moves), func(m group.Move) bool { return m.Partition == mp.Partition })
	result, err := s.propose(entry, group.EncodeChange(e, next))
	switch {
	case err != nil:
		return err
	case result == nil:
		s.res.Changes++
		s.res.MovesDone++
		s.moved = append(s.moved, movedAway{part: mp.Partition, from: int(cur.Owners[mp.Partition])})
		s.addEpoch(next)
	case errors.Is(result, rawnode.ErrChangePending), errors.Is(result, multicast.ErrBusy):
	default:
		return fmt.Errorf("dbsim: completing the move of %s at group %d: %w", s.pm.At(mp.Partition).Name, entry, result)
	}
	return nil
}

// movedAway is a partition a group gave away.
type movedAway struct{ part, from int }

// addEpoch records the configuration of the epoch a change taken starts.
func (s *sim) addEpoch(next group.EpochConfig) {
	top, err := s.top.WithOverlay(next.Overlay, next.Parent)
	if err != nil {
		panic(fmt.Sprintf("dbsim: overlay of a change taken: %v", err))
	}
	s.tops = append(s.tops, top)
	s.cfgs = append(s.cfgs, next)
}

// finalPM returns the partition map of the last epoch.
func (s *sim) finalPM() *partition.PartitionMap { return s.pmOf(s.cfgs[len(s.cfgs)-1]) }

// ownerStore returns the store of the leader of key's final owner.
func (s *sim) ownerStore(key string) *kv.Store {
	g, _, err := s.finalPM().Owner([]byte(key))
	if err != nil {
		panic(fmt.Sprintf("dbsim: owner of %s: %v", key, err))
	}
	gs := s.groups[g]
	return gs.replicas[gs.leader].store
}

// checkMoves checks, after the run, that every move completed, that every
// replica's epoch has the final owners, and that no group keeps a key of a
// partition it gave away and does not own again.
func (s *sim) checkMoves() error {
	last := s.cfgs[len(s.cfgs)-1]
	if len(last.Moves) > 0 {
		s.res.violate("moves: %d left under way at the end: %+v", len(last.Moves), last.Moves)
	}
	final := s.finalPM()
	for g, gs := range s.groups {
		for _, rp := range gs.replicas {
			if got := rp.m.State().Partitions(); !slices.Equal(got.Owners(), final.Owners()) {
				s.res.violate("moves: %s routes with owners %v, want %v", rp.name(), got.Owners(), final.Owners())
			}
			if got := rp.exec.Partitions(); !slices.Equal(got.Owners(), final.Owners()) {
				s.res.violate("moves: %s's executor routes with owners %v, want %v", rp.name(), got.Owners(), final.Owners())
			}
			if len(rp.m.State().MovesIn()) > 0 {
				s.res.violate("moves: %s still copies %+v", rp.name(), rp.m.State().MovesIn())
			}
		}
		for _, mv := range s.moved {
			p := final.At(mv.part)
			if mv.from != g || p.Group == partition.GroupID(g) {
				continue
			}
			for _, rp := range gs.replicas {
				rows, err := rp.store.Scan(p.Start, p.End, 1)
				if err != nil {
					return err
				}
				if len(rows) > 0 {
					s.res.violate("moves: %s keeps %q of %s, which it gave away", rp.name(), rows[0].Key, p.Name)
				}
			}
		}
	}
	return nil
}
