package group

import (
	"cmp"
	"slices"

	"github.com/flexkv/flexkv/internal/wire"
	"github.com/flexkv/flexkv/partition"
)

// Destination sets counted per epoch (DESIGN 14, `flexkv overlay apply
// auto`). An entry group counts, in its replicated state, the destination
// set of every request it takes, from the start of its epoch: what the
// overlay search needs to rank the groups for the workload that runs. A
// change of the epoch starts the counts again. Every replica counts alike
// (the counts are part of the state and its snapshots), so a new leader
// answers with what its predecessor counted.

// DstCountsMax bounds the distinct sets a group counts in an epoch;
// requests of further sets are counted together (DstCounts.Other).
const DstCountsMax = 4096

// DstCount is a destination set, the home group of the clients that sent
// them (partition.NoGroup: unknown), and the requests of both a group took.
type DstCount struct {
	Home  partition.GroupID
	Dst   partition.GroupSet
	Count uint64
}

// dstKey is what the counts count by.
type dstKey struct {
	home partition.GroupID
	dst  partition.GroupSet
}

func (k dstKey) compare(o dstKey) int {
	return cmp.Or(cmp.Compare(k.dst, o.dst), cmp.Compare(k.home, o.home))
}

// DstCounts are the sets a group counted in its epoch, most counted first
// (ties by set), and the requests of sets past DstCountsMax.
type DstCounts struct {
	Epoch uint64
	Sets  []DstCount
	Other uint64
}

// countDst counts a request of dst from a client of home that the group
// took.
func (s *State) countDst(home partition.GroupID, dst partition.GroupSet) {
	if s.dstCounts == nil {
		s.dstCounts = make(map[dstKey]uint64)
	}
	k := dstKey{home: home, dst: dst}
	if _, ok := s.dstCounts[k]; !ok && len(s.dstCounts) >= DstCountsMax {
		s.dstOther++
		return
	}
	s.dstCounts[k]++
}

// resetDst forgets the counts: a new epoch starts.
func (s *State) resetDst() {
	clear(s.dstCounts)
	s.dstOther = 0
}

// DestinationCounts returns the destination sets the group counted in its
// epoch.
func (s *State) DestinationCounts() DstCounts {
	out := DstCounts{Epoch: s.Epoch(), Other: s.dstOther, Sets: make([]DstCount, 0, len(s.dstCounts))}
	for k, n := range s.dstCounts { //flexkv:unordered sorted below
		out.Sets = append(out.Sets, DstCount{Home: k.home, Dst: k.dst, Count: n})
	}
	slices.SortFunc(out.Sets, func(a, b DstCount) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), dstKey{a.Home, a.Dst}.compare(dstKey{b.Home, b.Dst}))
	})
	return out
}

// appendDstCounts appends the counts to a snapshot, by set.
func (s *State) appendDstCounts(b []byte) []byte {
	keys := make([]dstKey, 0, len(s.dstCounts))
	for k := range s.dstCounts { //flexkv:unordered sorted below
		keys = append(keys, k)
	}
	slices.SortFunc(keys, dstKey.compare)
	b = wire.AppendUvarint(b, uint64(len(keys)))
	for _, k := range keys {
		b = wire.AppendUvarint(b, uint64(k.dst))
		b = wire.AppendUvarint(b, uint64(k.home+1))
		b = wire.AppendUvarint(b, s.dstCounts[k])
	}
	return wire.AppendUvarint(b, s.dstOther)
}

// decodeDstCounts reads what appendDstCounts wrote, for n groups.
func decodeDstCounts(d *wire.Decoder, n int) (map[dstKey]uint64, uint64) {
	k := d.Count(3)
	if k > DstCountsMax {
		d.Fail("%d destination sets counted, at most %d", k, DstCountsMax)
		return nil, 0
	}
	all := partition.AllGroups(n)
	out := make(map[dstKey]uint64, k)
	var last dstKey
	for i := range k {
		dst := partition.GroupSet(d.Uvarint())
		h := d.Uvarint()
		c := d.Uvarint()
		if d.Err() != nil {
			return nil, 0
		}
		key := dstKey{home: partition.GroupID(h) - 1, dst: dst}
		if dst == 0 || dst&^all != 0 || h > uint64(n) || (i > 0 && key.compare(last) <= 0) || c == 0 {
			d.Fail("destination set %v of home %d counted %d times", dst, int64(h)-1, c)
			return nil, 0
		}
		last = key
		out[key] = c
	}
	return out, d.Uvarint()
}
