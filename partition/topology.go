package partition

import (
	"errors"
	"fmt"
	"maps"
	"slices"
)

// Group describes one group of the cluster.
type Group struct {
	Name   string // unique, used in logs and configuration
	Region string // key into the latency matrix; defaults to Name
}

// Spec is the input of NewTopology.
type Spec struct {
	// Groups in overlay order: Groups[i] gets GroupID i (FlexCast rank i).
	Groups []Group
	// Parent maps a group's name to its parent's name in the tree of the
	// hierarchical protocol. Exactly one group (the root) has no entry.
	// May be nil when the tree protocol is not used.
	Parent map[string]string
}

// Topology is the immutable shape of a cluster: groups by rank and the tree.
// It is safe for concurrent use.
type Topology struct {
	groups   []Group
	index    map[string]GroupID
	parent   []GroupID // NoGroup for the root; nil without a tree
	children [][]GroupID
	depth    []int
	subtree  []GroupSet // groups in the subtree rooted at each group
	// ranks: an epoch's ranks of the groups (ranks.go); the identity for
	// a topology of NewTopology.
	ranks Ranks
}

// NewTopology validates spec and builds a Topology.
func NewTopology(spec Spec) (*Topology, error) {
	n := len(spec.Groups)
	if n == 0 {
		return nil, errors.New("partition: no groups")
	}
	if n > GroupsMax {
		return nil, fmt.Errorf("partition: %d groups, at most %d are supported", n, GroupsMax)
	}
	t := &Topology{
		groups: make([]Group, n),
		index:  make(map[string]GroupID, n),
	}
	for i, g := range spec.Groups {
		if g.Name == "" {
			return nil, fmt.Errorf("partition: group %d has no name", i)
		}
		if _, dup := t.index[g.Name]; dup {
			return nil, fmt.Errorf("partition: group %q listed twice", g.Name)
		}
		if g.Region == "" {
			g.Region = g.Name
		}
		t.groups[i] = g
		t.index[g.Name] = GroupID(i)
	}
	if spec.Parent != nil {
		if err := t.buildTree(spec.Parent); err != nil {
			return nil, err
		}
	}
	return t, nil
}

func (t *Topology) buildTree(parentOf map[string]string) error {
	n := len(t.groups)
	t.parent = make([]GroupID, n)
	t.children = make([][]GroupID, n)
	for i := range t.parent {
		t.parent[i] = NoGroup
	}
	// In sorted order, so that a spec with several errors always reports
	// the same one.
	for _, child := range slices.Sorted(maps.Keys(parentOf)) {
		parent := parentOf[child]
		c, ok := t.index[child]
		if !ok {
			return fmt.Errorf("partition: tree names unknown group %q", child)
		}
		p, ok := t.index[parent]
		if !ok {
			return fmt.Errorf("partition: tree names unknown parent %q of %q", parent, child)
		}
		if c == p {
			return fmt.Errorf("partition: tree: group %q is its own parent", child)
		}
		t.parent[c] = p
	}
	root := NoGroup
	for g := range n {
		if t.parent[g] == NoGroup {
			if root != NoGroup {
				return fmt.Errorf("partition: tree has two roots, %q and %q (every group but the root needs a parent)",
					t.groups[root].Name, t.groups[g].Name)
			}
			root = GroupID(g)
		}
	}
	if root == NoGroup {
		return errors.New("partition: tree has no root (it has a cycle)")
	}
	// Children in rank order, so that every iteration over them is deterministic.
	for g := range n {
		if p := t.parent[g]; p != NoGroup {
			t.children[p] = append(t.children[p], GroupID(g))
		}
	}
	t.depth = make([]int, n)
	t.subtree = make([]GroupSet, n)
	for g := range n {
		d := 0
		for x := GroupID(g); t.parent[x] != NoGroup; x = t.parent[x] {
			d++
			if d > n {
				return fmt.Errorf("partition: tree has a cycle through %q", t.groups[g].Name)
			}
			t.subtree[t.parent[x]] = t.subtree[t.parent[x]].Add(GroupID(g))
		}
		t.depth[g] = d
		t.subtree[g] = t.subtree[g].Add(GroupID(g))
	}
	return nil
}

// Len returns the number of groups.
func (t *Topology) Len() int { return len(t.groups) }

// All returns the set of every group.
func (t *Topology) All() GroupSet { return AllGroups(len(t.groups)) }

// Group returns the description of g.
func (t *Topology) Group(g GroupID) Group { return t.groups[g] }

// Name returns the name of g.
func (t *Topology) Name(g GroupID) string { return t.groups[g].Name }

// Names returns every group's name in rank order.
func (t *Topology) Names() []string {
	out := make([]string, len(t.groups))
	for i, g := range t.groups {
		out[i] = g.Name
	}
	return out
}

// Lookup returns the GroupID of the group called name.
func (t *Topology) Lookup(name string) (GroupID, bool) {
	g, ok := t.index[name]
	return g, ok
}

// Valid reports whether g is a group of t.
func (t *Topology) Valid(g GroupID) bool { return g >= 0 && int(g) < len(t.groups) }

// ValidSet reports whether every member of s is a group of t.
func (t *Topology) ValidSet(s GroupSet) bool { return s&^t.All() == 0 }

// HasTree reports whether the topology has a tree.
func (t *Topology) HasTree() bool { return t.parent != nil }

// Parent returns g's parent in the tree, or NoGroup for the root.
func (t *Topology) Parent(g GroupID) GroupID { return t.parent[g] }

// Children returns g's children in the tree, in rank order. The slice must
// not be modified.
func (t *Topology) Children(g GroupID) []GroupID { return t.children[g] }

// Subtree returns the groups of the subtree rooted at g, g included.
func (t *Topology) Subtree(g GroupID) GroupSet { return t.subtree[g] }

// Depth returns g's depth in the tree (0 for the root).
func (t *Topology) Depth(g GroupID) int { return t.depth[g] }

// TreeLCA returns the lowest common ancestor in the tree of the groups of s:
// the group whose subtree holds all of s and none of whose children's does.
func (t *Topology) TreeLCA(s GroupSet) GroupID {
	if s.Empty() || t.parent == nil {
		return NoGroup
	}
	g := s.Min()
	for t.subtree[g]&s != s {
		g = t.parent[g]
	}
	return g
}
