// Package partition describes the shape of a FlexKV cluster: its groups, their
// FlexCast ranks, the tree of the hierarchical protocol, the latencies
// between regions, the key ranges of the partitions and the groups that own
// them, and the cluster configuration that declares all of it.
//
// A GroupID is a group's FlexCast rank: groups are numbered 0..n-1 in the
// order of the overlay list of the configuration, so that the lowest-ranked
// destination of a message (its lca) is simply its smallest GroupID.
package partition

import (
	"fmt"
	"math/bits"
	"strings"
)

// GroupID identifies a group by its FlexCast rank (0 = lowest rank, the root
// of the C-DAG).
type GroupID int

// NoGroup is the GroupID of no group (the parent of the tree's root).
const NoGroup GroupID = -1

// GroupsMax is the largest number of groups a cluster may have: destination
// sets are 64-bit masks. Geo-distributed deployments have one group per
// region, far below this bound.
const GroupsMax = 64

// GroupSet is a set of groups, as a bit mask indexed by GroupID.
type GroupSet uint64

// SetOf returns the set of the given groups.
func SetOf(groups ...GroupID) GroupSet {
	var s GroupSet
	for _, g := range groups {
		s = s.Add(g)
	}
	return s
}

// AllGroups returns the set of groups 0..n-1.
func AllGroups(n int) GroupSet {
	if n <= 0 {
		return 0
	}
	if n >= GroupsMax {
		return ^GroupSet(0)
	}
	return GroupSet(1)<<uint(n) - 1
}

// Has reports whether g is in s.
func (s GroupSet) Has(g GroupID) bool {
	return g >= 0 && g < GroupsMax && s&(1<<uint(g)) != 0
}

// Add returns s with g added.
func (s GroupSet) Add(g GroupID) GroupSet {
	if g < 0 || g >= GroupsMax {
		panic(fmt.Sprintf("partition: group %d out of range", g))
	}
	return s | 1<<uint(g)
}

// Remove returns s without g.
func (s GroupSet) Remove(g GroupID) GroupSet {
	if g < 0 || g >= GroupsMax {
		return s
	}
	return s &^ (1 << uint(g))
}

// Len returns the number of groups in s.
func (s GroupSet) Len() int { return bits.OnesCount64(uint64(s)) }

// Empty reports whether s has no group.
func (s GroupSet) Empty() bool { return s == 0 }

// Min returns the lowest-ranked group of s (the FlexCast lca), or NoGroup.
func (s GroupSet) Min() GroupID {
	if s == 0 {
		return NoGroup
	}
	return GroupID(bits.TrailingZeros64(uint64(s)))
}

// Max returns the highest-ranked group of s, or NoGroup.
func (s GroupSet) Max() GroupID {
	if s == 0 {
		return NoGroup
	}
	return GroupID(63 - bits.LeadingZeros64(uint64(s)))
}

// Above returns the members of s ranked strictly above g.
func (s GroupSet) Above(g GroupID) GroupSet {
	if g < 0 {
		return s
	}
	if g >= GroupsMax-1 {
		return 0
	}
	return s &^ (GroupSet(1)<<uint(g+1) - 1)
}

// Below returns the members of s ranked strictly below g.
func (s GroupSet) Below(g GroupID) GroupSet {
	if g <= 0 {
		return 0
	}
	if g >= GroupsMax {
		return s
	}
	return s & (GroupSet(1)<<uint(g) - 1)
}

// Slice returns the members of s in rank order.
func (s GroupSet) Slice() []GroupID {
	out := make([]GroupID, 0, s.Len())
	for x := uint64(s); x != 0; x &= x - 1 {
		out = append(out, GroupID(bits.TrailingZeros64(x)))
	}
	return out
}

// String formats s as {0,3,5}.
func (s GroupSet) String() string {
	var b strings.Builder
	b.WriteByte('{')
	for i, g := range s.Slice() {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%d", g)
	}
	b.WriteByte('}')
	return b.String()
}
