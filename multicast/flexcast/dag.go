package flexcast

import "github.com/flexkv/flexkv/multicast"

// dag is the precedence graph of a group: an edge x -> y says that some group
// delivered x immediately before y in its chain. Nodes are keyed by message
// id, never by entry object: the same message reaches a group through several
// chains, and all of them must meet at one node.
//
// The dag also holds the group's open dependencies (messages it knows are
// addressed to it and has not delivered) and, to answer "does an open
// dependency precede m?" without a search per question, the set of nodes
// behind an open node: reachable from one by at least one edge. That set only
// grows while edges and open nodes are added, so it is extended in place; it
// is recomputed only after a node leaves the open set (a delivery).
type dag struct {
	index map[multicast.MsgID]int32
	ids   []multicast.MsgID
	succ  [][]int32

	openPos  []int32 // position in openList, -1 when not open
	openList []int32 // open nodes, in the order they opened (swap-removed)

	behind      []bool
	behindValid bool

	work []int32
}

func newDAG() *dag {
	return &dag{index: make(map[multicast.MsgID]int32)}
}

// node returns the index of id, adding it if needed.
func (d *dag) node(id multicast.MsgID) int32 {
	if i, ok := d.index[id]; ok {
		return i
	}
	i := int32(len(d.succ))
	d.index[id] = i
	d.ids = append(d.ids, id)
	d.succ = append(d.succ, nil)
	d.openPos = append(d.openPos, -1)
	d.behind = append(d.behind, false)
	return i
}

// has reports whether id is a node.
func (d *dag) has(id multicast.MsgID) bool { _, ok := d.index[id]; return ok }

// edgeIdx adds the edge between nodes i and j unless present.
func (d *dag) edgeIdx(i, j int32) {
	if i == j {
		panic("flexcast: invariant violated: self edge in the precedence graph of " + d.ids[i].String())
	}
	for _, k := range d.succ[i] {
		if k == j {
			return
		}
	}
	d.succ[i] = append(d.succ[i], j)
	if d.behindValid && (d.openPos[i] >= 0 || d.behind[i]) {
		d.extend(j)
	}
}

// open marks id as an open dependency.
func (d *dag) open(id multicast.MsgID) {
	i := d.node(id)
	if d.openPos[i] >= 0 {
		return
	}
	d.openPos[i] = int32(len(d.openList))
	d.openList = append(d.openList, i)
	if d.behindValid {
		for _, s := range d.succ[i] {
			d.extend(s)
		}
	}
}

// close removes id from the open dependencies.
func (d *dag) close(id multicast.MsgID) {
	i, ok := d.index[id]
	if !ok || d.openPos[i] < 0 {
		return
	}
	p := d.openPos[i]
	last := d.openList[len(d.openList)-1]
	d.openList[p] = last
	d.openPos[last] = p
	d.openList = d.openList[:len(d.openList)-1]
	d.openPos[i] = -1
	d.behindValid = false
}

// openLen returns the number of open dependencies.
func (d *dag) openLen() int { return len(d.openList) }

// openIDs appends the open dependencies to ids.
func (d *dag) openIDs(ids []multicast.MsgID) []multicast.MsgID {
	for _, i := range d.openList {
		ids = append(ids, d.ids[i])
	}
	return ids
}

// blocked reports whether an open dependency precedes id.
func (d *dag) blocked(id multicast.MsgID) bool {
	i, ok := d.index[id]
	if !ok {
		return false
	}
	if !d.behindValid {
		clear(d.behind)
		d.behindValid = true
		for _, o := range d.openList {
			for _, s := range d.succ[o] {
				d.extend(s)
			}
		}
	}
	return d.behind[i]
}

// extend marks v and everything reachable from it as behind an open node.
func (d *dag) extend(v int32) {
	if d.behind[v] {
		return
	}
	d.behind[v] = true
	d.work = append(d.work[:0], v)
	for len(d.work) > 0 {
		n := d.work[len(d.work)-1]
		d.work = d.work[:len(d.work)-1]
		for _, s := range d.succ[n] {
			if !d.behind[s] {
				d.behind[s] = true
				d.work = append(d.work, s)
			}
		}
	}
}

// reaches reports whether y is reachable from x by a search; the invariants
// build checks blocked against it.
func (d *dag) reaches(x, y multicast.MsgID) bool {
	i, ok1 := d.index[x]
	j, ok2 := d.index[y]
	if !ok1 || !ok2 {
		return false
	}
	seen := make([]bool, len(d.succ))
	work := []int32{i}
	for len(work) > 0 {
		n := work[len(work)-1]
		work = work[:len(work)-1]
		for _, s := range d.succ[n] {
			if s == j {
				return true
			}
			if !seen[s] {
				seen[s] = true
				work = append(work, s)
			}
		}
	}
	return false
}

// len returns the number of nodes.
func (d *dag) len() int { return len(d.succ) }

// reset forgets every node, edge and open dependency.
func (d *dag) reset() {
	clear(d.index)
	d.ids = d.ids[:0]
	d.succ = d.succ[:0]
	d.openPos = d.openPos[:0]
	d.openList = d.openList[:0]
	d.behind = d.behind[:0]
	d.behindValid = false
}
