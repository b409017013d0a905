package partition

import (
	"fmt"
	"math/bits"
)

// Ranks and epochs (DESIGN 14). A GroupID is a group's rank in the overlay
// of the bootstrap configuration, and stays its number for the cluster's
// whole life: in destination sets, on the wire, in logs. A later epoch may
// rank the groups otherwise. Ranks maps between the two numberings: a
// group's GroupID and its rank in the epoch. The cores of an epoch whose
// overlay differs from the bootstrap one run on the groups renumbered by
// rank (RankSpace), where the lowest-ranked destination is again the
// smallest number, and the node that drives them translates at its edges.

// Ranks is a permutation of the groups: the overlay of an epoch, lowest
// rank first. The zero value is the identity: every group's rank is its
// GroupID. It is immutable.
type Ranks struct {
	order []GroupID // rank -> group
	rank  []GroupID // group -> rank
}

// NewRanks returns the ranks of order, which lists every group of 0..n-1
// once, lowest rank first. The identity order gives the zero Ranks.
func NewRanks(order []GroupID) (Ranks, error) {
	n := len(order)
	if n > GroupsMax {
		return Ranks{}, fmt.Errorf("partition: overlay of %d groups, at most %d", n, GroupsMax)
	}
	rank := make([]GroupID, n)
	var seen GroupSet
	identity := true
	for r, g := range order {
		switch {
		case g < 0 || int(g) >= n:
			return Ranks{}, fmt.Errorf("partition: overlay names group %d of %d", g, n)
		case seen.Has(g):
			return Ranks{}, fmt.Errorf("partition: overlay names group %d twice", g)
		}
		seen = seen.Add(g)
		rank[g] = GroupID(r)
		identity = identity && g == GroupID(r)
	}
	if identity {
		return Ranks{}, nil
	}
	return Ranks{order: append([]GroupID(nil), order...), rank: rank}, nil
}

// Identity reports whether every group's rank is its GroupID.
func (r Ranks) Identity() bool { return r.order == nil }

// Order returns the groups lowest rank first, n of them; nil for the
// identity. The caller must not modify it.
func (r Ranks) Order() []GroupID { return r.order }

// Group returns the group of rank k.
func (r Ranks) Group(k GroupID) GroupID {
	if r.order == nil || k == NoGroup {
		return k
	}
	return r.order[k]
}

// Rank returns group g's rank.
func (r Ranks) Rank(g GroupID) GroupID {
	if r.order == nil || g == NoGroup {
		return g
	}
	return r.rank[g]
}

// ToRanks returns the ranks of the groups of s.
func (r Ranks) ToRanks(s GroupSet) GroupSet { return r.mapSet(s, r.rank) }

// ToGroups returns the groups of the ranks of s.
func (r Ranks) ToGroups(s GroupSet) GroupSet { return r.mapSet(s, r.order) }

func (r Ranks) mapSet(s GroupSet, to []GroupID) GroupSet {
	if r.order == nil {
		return s
	}
	var out GroupSet
	for v := uint64(s); v != 0; v &= v - 1 {
		out = out.Add(to[bits.TrailingZeros64(v)])
	}
	return out
}

// WithOverlay returns t with the ranks of order (lowest rank first; nil:
// the GroupIDs') and the tree of parent (each group's parent by GroupID,
// NoGroup for the root; nil: no tree), checked to be a tree over every
// group. The groups, their numbers and names are t's: only Ranks and the
// tree differ.
func (t *Topology) WithOverlay(order, parent []GroupID) (*Topology, error) {
	n := len(t.groups)
	if order == nil {
		order = make([]GroupID, n)
		for g := range order {
			order[g] = GroupID(g)
		}
	}
	if len(order) != n {
		return nil, fmt.Errorf("partition: overlay of %d groups, want %d", len(order), n)
	}
	r, err := NewRanks(order)
	if err != nil {
		return nil, err
	}
	out := &Topology{groups: t.groups, index: t.index, ranks: r}
	if parent == nil {
		return out, nil
	}
	if len(parent) != n {
		return nil, fmt.Errorf("partition: tree of %d groups, want %d", len(parent), n)
	}
	names := make(map[string]string, n)
	for g, p := range parent {
		switch {
		case p == NoGroup:
			continue
		case p < 0 || int(p) >= n:
			return nil, fmt.Errorf("partition: tree: parent %d of group %q is not a group", p, t.groups[g].Name)
		}
		names[t.groups[g].Name] = t.groups[p].Name
	}
	if err := out.buildTree(names); err != nil {
		return nil, err
	}
	return out, nil
}

// Ranks returns t's ranks: the identity unless WithOverlay gave others.
func (t *Topology) Ranks() Ranks { return t.ranks }

// RankSpace returns t with the groups renumbered by rank: group k of the
// result is the group of rank k, and so is its tree. Its ranks are the
// identity. It returns t itself when t's ranks are.
func (t *Topology) RankSpace() *Topology {
	if t.ranks.Identity() {
		return t
	}
	n := len(t.groups)
	out := &Topology{groups: make([]Group, n), index: make(map[string]GroupID, n)}
	for k := range n {
		g := t.ranks.Group(GroupID(k))
		out.groups[k] = t.groups[g]
		out.index[t.groups[g].Name] = GroupID(k)
	}
	if t.parent != nil {
		names := make(map[string]string, n)
		for g, p := range t.parent {
			if p != NoGroup {
				names[t.groups[g].Name] = t.groups[p].Name
			}
		}
		if err := out.buildTree(names); err != nil {
			// The same tree, renamed: buildTree accepted it for t.
			panic(fmt.Sprintf("partition: rank space of a checked tree: %v", err))
		}
	}
	return out
}

// Parents returns each group's parent in the tree (NoGroup for the root),
// by GroupID; nil without a tree.
func (t *Topology) Parents() []GroupID {
	if t.parent == nil {
		return nil
	}
	return append([]GroupID(nil), t.parent...)
}
