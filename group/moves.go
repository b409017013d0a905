package group

import (
	"bytes"
	"errors"
	"fmt"
	"slices"

	"github.com/flexkv/flexkv/internal/wire"
	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/multicast/rawnode"
	"github.com/flexkv/flexkv/partition"
)

// Partition moves (DESIGN 14). A move of partition P from group A to group
// B takes two changes of the epoch, each a cut:
//
//   - The first (epoch e+1) lists the move (EpochConfig.Moves) and keeps A
//     as P's owner. From the cut on, no entry group takes a request that
//     touches P (the server refuses it as busy: the client retries), and a
//     request of an older epoch delivered after the cut is aborted at
//     every destination (the stop-sign): once A ran what it delivered
//     before the cut, nothing writes P any more, on any replica.
//   - B's leader then reads P from a replica of A in key order, in chunks,
//     and commits each through its own log (EncodeMoveChunk) with the key
//     it starts at; B's state takes a chunk only at the key the last one
//     ended at, so a chunk sent twice is dropped, and a new leader on
//     either side resumes where B's state says.
//   - Once B's state holds the last chunk, B's leader asks for the second
//     change (epoch e+2), which makes B P's owner. Clients, servers and
//     executors route with the owners of the epoch; B's replicas applied
//     every chunk before their delivery of the change, so every piece of P
//     they run sees the whole partition. At its delivery of the change, A
//     deletes P's range, on every replica at the same entry.

// Move is a partition on its way to another group.
type Move struct {
	Partition int               // its index in the cluster's partition map (key order)
	To        partition.GroupID // the new owner
	Since     uint64            // the epoch the move started
}

// MoveChunkRowsMax bounds the rows of one chunk; its bytes are bounded by
// the log entry's (InboundBytesMax).
const MoveChunkRowsMax = 1 << 16

// ErrChunkStale says a chunk does not start where the move's copy ends (a
// chunk sent twice, or of a move that ended): it is dropped.
var ErrChunkStale = errors.New("group: move chunk does not continue the copy")

// appendOwners appends c's owners and moves.
func appendOwners(b []byte, c EpochConfig) []byte {
	b = wire.AppendUvarint(b, uint64(len(c.Owners)))
	for _, g := range c.Owners {
		b = wire.AppendUvarint(b, uint64(g+1)) // NoGroup as 0
	}
	b = wire.AppendUvarint(b, uint64(len(c.Moves)))
	for _, m := range c.Moves {
		b = wire.AppendUvarint(b, uint64(m.Partition))
		b = wire.AppendUvarint(b, uint64(m.To))
		b = wire.AppendUvarint(b, m.Since)
	}
	return b
}

// decodeOwners reads what appendOwners wrote into c, for n groups, and
// checks it (CheckOwners).
func decodeOwners(d *wire.Decoder, n int, c *EpochConfig) {
	k := d.Count(1)
	if k > partition.PartitionsMax {
		d.Fail("owners of %d partitions, at most %d", k, partition.PartitionsMax)
		return
	}
	c.Owners = make([]partition.GroupID, 0, k)
	for range k {
		g := d.Uvarint()
		if d.Err() == nil && g > uint64(n) {
			d.Fail("owner %d of %d groups", g-1, n)
		}
		c.Owners = append(c.Owners, partition.GroupID(g)-1)
	}
	k = d.Count(3)
	for range k {
		m := Move{Partition: int(min(d.Uvarint(), 1<<31)), To: d.Group(n), Since: d.Uvarint()}
		if d.Err() != nil {
			return
		}
		c.Moves = append(c.Moves, m)
	}
	if d.Err() != nil {
		return
	}
	if err := CheckOwners(*c, n); err != nil {
		d.Fail("%v", err)
	}
}

// CheckOwners checks the owners and moves of c over n groups: every owner
// is a group or none (a replicated partition); a move names a partition
// with an owner, once, and another group; moves need owners.
func CheckOwners(c EpochConfig, n int) error {
	if c.Owners == nil {
		if len(c.Moves) > 0 {
			return errors.New("moves without owners")
		}
		return nil
	}
	for i, g := range c.Owners {
		if g != partition.NoGroup && (g < 0 || int(g) >= n) {
			return fmt.Errorf("partition %d: owner %d of %d groups", i, g, n)
		}
	}
	seen := make(map[int]bool, len(c.Moves))
	for _, m := range c.Moves {
		switch {
		case m.Partition < 0 || m.Partition >= len(c.Owners):
			return fmt.Errorf("move of partition %d, of %d", m.Partition, len(c.Owners))
		case c.Owners[m.Partition] == partition.NoGroup:
			return fmt.Errorf("move of partition %d, which has no owner", m.Partition)
		case m.To < 0 || int(m.To) >= n || m.To == c.Owners[m.Partition]:
			return fmt.Errorf("move of partition %d to group %d, its owner or none of %d", m.Partition, m.To, n)
		case seen[m.Partition]:
			return fmt.Errorf("partition %d moves twice", m.Partition)
		case m.Since == 0:
			return fmt.Errorf("move of partition %d since epoch 0", m.Partition)
		}
		seen[m.Partition] = true
	}
	return nil
}

// keepFrom sets c's members, owners and moves to copies of cur's: a change
// written before them keeps them.
func (c *EpochConfig) keepFrom(cur EpochConfig) {
	c.Members = cloneMembers(cur.Members)
	c.Owners = slices.Clone(cur.Owners)
	c.Moves = slices.Clone(cur.Moves)
}

// MoveOf returns the move of partition i in c, if any.
func (c EpochConfig) MoveOf(i int) (Move, bool) {
	for _, m := range c.Moves {
		if m.Partition == i {
			return m, true
		}
	}
	return Move{}, false
}

// owner returns the owner of partition i in c, whose map without moves is
// pm.
func (c EpochConfig) owner(pm *partition.PartitionMap, i int) partition.GroupID {
	if c.Owners != nil {
		return c.Owners[i]
	}
	return pm.At(i).Group
}

// MoveProgress is the copy of a partition moving to this group, as the
// group's state holds it.
type MoveProgress struct {
	Move
	// Next is the key the next chunk starts at; nil before the first.
	Next []byte
	// Done: the last chunk is in.
	Done        bool
	Keys, Bytes uint64
}

// MovesIn returns the moves to this group that its state follows, in
// partition order.
func (s *State) MovesIn() []MoveProgress {
	out := make([]MoveProgress, 0, len(s.movesIn))
	for _, p := range s.movesIn { //flexkv:unordered sorted below
		c := *p
		c.Next = slices.Clone(p.Next)
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b MoveProgress) int { return a.Partition - b.Partition })
	return out
}

// Partitions returns the partition map of the group's epoch: the
// configuration's (Config.Partitions) with the epoch's owners; nil without
// a configured map.
func (s *State) Partitions() *partition.PartitionMap {
	return s.partitionsOf(s.EpochConfig())
}

func (s *State) partitionsOf(c EpochConfig) *partition.PartitionMap {
	pm := s.cfg.Partitions
	if pm == nil || c.Owners == nil {
		return pm
	}
	if m, ok := s.pmCache[c.Epoch]; ok {
		return m
	}
	m, err := pm.WithOwners(s.cfg.Topology, c.Owners)
	if err != nil {
		// The change was checked at the group that took it
		// (checkMoveChange).
		panic(fmt.Sprintf("group: owners of epoch %d: %v", c.Epoch, err))
	}
	if s.pmCache == nil || len(s.pmCache) >= pmCacheMax {
		s.pmCache = make(map[uint64]*partition.PartitionMap, pmCacheMax)
	}
	s.pmCache[c.Epoch] = m
	return m
}

// pmCacheMax bounds the partition maps a state keeps built: those of the
// last few epochs, which an entry's deliveries need.
const pmCacheMax = 4

// partitionsAt returns the partition map of epoch e, which the state
// keeps (the current one's if it does not).
func (s *State) partitionsAt(e uint64) *partition.PartitionMap {
	for i := len(s.epochs) - 1; i >= 0; i-- {
		if s.epochs[i].Epoch == e {
			return s.partitionsOf(s.epochs[i])
		}
	}
	return s.Partitions()
}

// ownersChangedSince reports whether the group's epoch is past epoch and
// its owners differ from epoch's: the machine then runs the executor at
// the entry that started it, even with nothing delivered, so that the
// executor routes (and checks ownership for reads at the leader) by the
// new owners from that entry on, on every replica alike.
func (s *State) ownersChangedSince(epoch uint64) bool {
	if s.Epoch() == epoch || s.cfg.Partitions == nil {
		return false
	}
	for _, c := range s.epochs {
		if c.Epoch == epoch {
			return !slices.Equal(c.Owners, s.EpochConfig().Owners)
		}
	}
	return true
}

// checkMoveChange checks the owners and moves of a change against the
// configuration's partition map: the partitions listed are the map's, and
// a move to a group from its owner keeps the owner (a move completes by
// giving the partition its new owner and dropping the move).
func (s *State) checkMoveChange(cur, next EpochConfig) error {
	if cur.Owners != nil && next.Owners == nil {
		return fmt.Errorf("the change drops the owners of epoch %d", cur.Epoch)
	}
	if next.Owners == nil {
		return nil
	}
	pm := s.cfg.Partitions
	if pm == nil {
		return errors.New("the group has no partition map: no partition can move")
	}
	if len(next.Owners) != pm.Len() {
		return fmt.Errorf("owners of %d partitions, the map has %d", len(next.Owners), pm.Len())
	}
	if _, err := pm.WithOwners(s.cfg.Topology, next.Owners); err != nil {
		return err
	}
	for _, m := range next.Moves {
		if old, ok := cur.MoveOf(m.Partition); ok && old != m {
			return fmt.Errorf("partition %s moves to group %d since epoch %d: one move at a time",
				pm.At(m.Partition).Name, old.To, old.Since)
		}
		if next.Owners[m.Partition] != cur.owner(pm, m.Partition) {
			return fmt.Errorf("partition %s changes owner while it moves", pm.At(m.Partition).Name)
		}
	}
	for i := range pm.Len() {
		if next.Owners[i] == cur.owner(pm, i) {
			continue
		}
		if old, ok := cur.MoveOf(i); !ok || old.To != next.Owners[i] {
			return fmt.Errorf("partition %s changes owner without a move to that group", pm.At(i).Name)
		}
		if _, still := next.MoveOf(i); still {
			return fmt.Errorf("partition %s changes owner and still moves", pm.At(i).Name)
		}
	}
	return nil
}

// beginMoves follows the moves at the delivery of the change from cur to
// next: a move to this group starts its copy; a copy whose move ended is
// dropped; a partition this group gave away has its range deleted by the
// executor (a drop payload, at this entry).
func (s *State) beginMoves(cur, next EpochConfig) {
	for _, m := range next.Moves {
		if m.To != s.cfg.Self {
			continue
		}
		if p, ok := s.movesIn[m.Partition]; !ok || p.Since != m.Since {
			if s.movesIn == nil {
				s.movesIn = make(map[int]*MoveProgress)
			}
			s.movesIn[m.Partition] = &MoveProgress{Move: m}
		}
	}
	for i, p := range s.movesIn { //flexkv:unordered each entry kept or deleted on its own
		if m, ok := next.MoveOf(i); !ok || m != p.Move {
			delete(s.movesIn, i)
		}
	}
	pm := s.cfg.Partitions
	if pm == nil || next.Owners == nil {
		return
	}
	for i := range pm.Len() {
		if cur.owner(pm, i) == s.cfg.Self && next.Owners[i] != s.cfg.Self {
			s.pendingApp = append(s.pendingApp, rawnode.AppInbound{From: s.cfg.Self, Payload: AppendMoveDrop(nil, i)})
		}
	}
}

// EncodeMoveChunk returns the log entry of a chunk of the move m to this
// group: the rows of the partition from key from (nil: its start) up to
// next (nil: the partition's end, the last chunk), in key order.
func EncodeMoveChunk(m Move, from, next []byte, rows []MoveRow) []byte {
	b := wire.AppendUvarint([]byte{entryMoveChunk}, uint64(m.Partition))
	b = wire.AppendUvarint(b, m.Since)
	b = wire.AppendBytes(b, from)
	b = wire.AppendBytes(b, next)
	return AppendMoveChunk(b, rows)
}

// applyMoveChunk applies a chunk entry: taken when it continues the copy of
// a move to this group (ErrChunkStale otherwise, nothing changed); its
// rows go to the executor.
func (s *State) applyMoveChunk(index uint64, d *wire.Decoder, rest func() []byte) error {
	i := int(min(d.Uvarint(), 1<<31))
	since := d.Uvarint()
	from, next := d.Bytes(), d.Bytes()
	if d.Err() != nil {
		return fmt.Errorf("%w: group: move chunk entry %d: %w", multicast.ErrInvalid, index, d.Err())
	}
	payload := rest()
	rows, drop, err := DecodeMovePayload(payload)
	switch {
	case err != nil:
		return fmt.Errorf("%w: group: move chunk entry %d: %w", multicast.ErrInvalid, index, err)
	case drop >= 0 || len(rows) > MoveChunkRowsMax:
		return fmt.Errorf("%w: group: move chunk entry %d: %d rows (at most %d), or a drop", multicast.ErrInvalid, index, len(rows), MoveChunkRowsMax)
	}
	p, ok := s.movesIn[i]
	if !ok || p.Since != since || p.Done || !bytes.Equal(from, p.Next) {
		return ErrChunkStale
	}
	if pm := s.cfg.Partitions; pm != nil {
		part := pm.At(i)
		if len(next) > 0 && (!part.Contains(next) || bytes.Compare(next, from) <= 0) {
			return fmt.Errorf("%w: group: move chunk entry %d: next key %q not after %q in %s", multicast.ErrInvalid, index, next, from, part.Name)
		}
		for _, r := range rows {
			if !part.Contains(r.Key) || (len(next) > 0 && bytes.Compare(r.Key, next) >= 0) || bytes.Compare(r.Key, from) < 0 {
				return fmt.Errorf("%w: group: move chunk entry %d: key %q outside the chunk of %s", multicast.ErrInvalid, index, r.Key, part.Name)
			}
		}
	}
	if p.Next == nil && p.Keys == 0 {
		// The first chunk: whatever this group's store holds in the range
		// (a copy restored from a backup taken during an earlier move) goes
		// first, so that the copy is exactly the old owner's.
		s.pendingApp = append(s.pendingApp, rawnode.AppInbound{From: s.cfg.Self, Payload: AppendMoveDrop(nil, i)})
	}
	p.Next = slices.Clone(next)
	p.Done = len(next) == 0
	p.Keys += uint64(len(rows))
	for _, r := range rows {
		p.Bytes += uint64(len(r.Key) + len(r.Value))
	}
	s.pendingApp = append(s.pendingApp, rawnode.AppInbound{From: s.cfg.Self, Payload: payload})
	return nil
}

// appendMovesIn appends the copies under way to a snapshot, by partition.
func (s *State) appendMovesIn(b []byte) []byte {
	keys := make([]int, 0, len(s.movesIn))
	for i := range s.movesIn { //flexkv:unordered the keys are sorted below
		keys = append(keys, i)
	}
	slices.Sort(keys)
	b = wire.AppendUvarint(b, uint64(len(keys)))
	for _, i := range keys {
		p := s.movesIn[i]
		b = wire.AppendUvarint(b, uint64(i))
		b = wire.AppendUvarint(b, uint64(p.To))
		b = wire.AppendUvarint(b, p.Since)
		b = wire.AppendBytes(b, p.Next)
		done := uint64(0)
		if p.Done {
			done = 1
		}
		b = wire.AppendUvarint(b, done)
		b = wire.AppendUvarint(b, p.Keys)
		b = wire.AppendUvarint(b, p.Bytes)
	}
	return b
}

// decodeMovesIn reads what appendMovesIn wrote.
func decodeMovesIn(d *wire.Decoder, n int) map[int]*MoveProgress {
	k := d.Count(7)
	if k == 0 {
		return nil
	}
	out := make(map[int]*MoveProgress, k)
	for range k {
		i := int(min(d.Uvarint(), 1<<31))
		p := &MoveProgress{Move: Move{Partition: i, To: d.Group(n), Since: d.Uvarint()}}
		if next := d.Bytes(); len(next) > 0 {
			p.Next = slices.Clone(next)
		}
		done := d.Uvarint()
		p.Done = done == 1
		p.Keys, p.Bytes = d.Uvarint(), d.Uvarint()
		if d.Err() != nil {
			return nil
		}
		if done > 1 || out[i] != nil {
			d.Fail("move of partition %d: done %d, or twice", i, done)
			return nil
		}
		out[i] = p
	}
	return out
}
