package checker

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/flexkv/flexkv/jepsen/history"
)

// The kinds of dependency, as bits.
const (
	ww = 1 << iota // write-write: the next version of a key
	wr             // write-read: a read of a version
	rw             // read-write: a version read, then the next one written
	rt             // real time: completed before invoked
)

var kindNames = map[uint8]string{ww: "ww", wr: "wr", rw: "rw", rt: "realtime"}

// reason is why an edge of one kind exists.
type reason struct {
	kind uint8
	text string
}

// graph is the dependency graph over the transactions that committed: ok,
// or info with an append some read observed.
type graph struct {
	nodes []int               // transaction ids, ascending
	kinds map[[2]int]uint8    // (from, to) -> kinds
	why   map[[2]int][]reason // one reason per kind
	out   map[int][]int       // from -> tos, ascending
	txns  []*tx
}

// edge is one step of a cycle, with the kind it is counted as.
type edge struct {
	from, to int
	kinds    uint8
}

func (g *graph) add(from, to *tx, kind uint8, text func() string) {
	if from == to {
		return
	}
	k := [2]int{from.id, to.id}
	if g.kinds[k]&kind != 0 {
		return
	}
	g.kinds[k] |= kind
	g.why[k] = append(g.why[k], reason{kind: kind, text: text()})
}

func (g *graph) edgeCount() int { return len(g.kinds) }

// buildGraph makes the dependency graph.
func (c *listChecker) buildGraph() {
	g := &graph{kinds: map[[2]int]uint8{}, why: map[[2]int][]reason{}, out: map[int][]int{}, txns: c.txns}
	c.g = g
	in := make([]bool, len(c.txns))
	for _, t := range c.txns {
		in[t.id] = t.outcome == history.OK
	}
	for _, k := range c.keys {
		for _, v := range c.order[k] {
			if w, ok := c.appends[k][v]; ok && w.t.outcome == history.Info {
				in[w.t.id] = true // observed: it committed
			}
		}
	}
	writerOf := func(k string, v int64) *tx {
		if w, ok := c.appends[k][v]; ok && in[w.t.id] {
			return w.t
		}
		return nil
	}
	for _, k := range c.keys {
		c.dataEdges(k, writerOf)
	}
	c.realtimeEdges(in)
	for id, ok := range in {
		if ok {
			g.nodes = append(g.nodes, id)
		}
	}
	for k := range g.kinds { //flexkv:unordered sorted below
		g.out[k[0]] = append(g.out[k[0]], k[1])
	}
	for _, tos := range g.out { //flexkv:unordered each list sorted alone
		slices.Sort(tos)
	}
}

// dataEdges adds key k's ww, wr and rw edges.
func (c *listChecker) dataEdges(k string, writerOf func(string, int64) *tx) {
	order := c.order[k]
	for i := 1; i < len(order); i++ {
		a, b := writerOf(k, order[i-1]), writerOf(k, order[i])
		if a != nil && b != nil {
			c.g.add(a, b, ww, func() string {
				return fmt.Sprintf("ww on %q: %d then %d", k, order[i-1], order[i])
			})
		}
	}
	for _, r := range c.reads[k] {
		if n := len(r.list); n > 0 {
			if w := writerOf(k, r.list[n-1]); w != nil {
				c.g.add(w, r.t, wr, func() string {
					return fmt.Sprintf("wr on %q: read %v, ending with the append of %d", k, r.list, r.list[n-1])
				})
			}
		}
		if len(r.list) < len(order) && isPrefix(r.list, order) {
			next := order[len(r.list)]
			if w := writerOf(k, next); w != nil {
				c.g.add(r.t, w, rw, func() string {
					return fmt.Sprintf("rw on %q: read %v, then %d appended next", k, r.list, next)
				})
			}
		}
	}
}

// realtimeEdges adds an edge from each transaction to those invoked after
// it completed, reduced: only from the frontier of completed transactions
// that no other completed one follows.
func (c *listChecker) realtimeEdges(in []bool) {
	byOp := map[int]*tx{}
	for _, t := range c.txns {
		if in[t.id] {
			byOp[int(t.inv.Index)] = t
			// Only an ok completion ends a transaction in real time: one
			// that ended info may take effect at any later time.
			if t.outcome == history.OK {
				byOp[int(t.done.Index)] = t
			}
		}
	}
	var frontier []*tx
	preds := map[int][]*tx{}
	for i, op := range c.h.Ops {
		t, ok := byOp[i]
		if !ok {
			continue
		}
		if op.Type == history.Invoke {
			preds[t.id] = slices.Clone(frontier)
			for _, p := range frontier {
				c.g.add(p, t, rt, func() string {
					return fmt.Sprintf("realtime: completed at line %d, before the invocation at line %d", p.done.Index+1, op.Index+1)
				})
			}
			continue
		}
		frontier = slices.DeleteFunc(frontier, func(f *tx) bool { return slices.Contains(preds[t.id], f) })
		frontier = append(frontier, t)
		delete(preds, t.id)
	}
}

// levels are the graphs searched for cycles, each with the kind of edge a
// cycle is first sought through and the kinds its path back may use.
var levels = []struct {
	mask    uint8
	through uint8
	back    uint8
}{
	{mask: ww, through: ww, back: ww},
	{mask: ww | wr, through: wr, back: ww | wr},
	{mask: ww | wr | rw, through: rw, back: ww | wr},
	{mask: ww | wr | rw | rt, through: rt, back: ww | wr | rw | rt},
}

// throughTries bounds the edges a cycle is sought through in one
// component before the shortest cycle is taken.
const throughTries = 256

// findCycles reports a cycle of each strongly connected component of each
// level's graph, unless a lower level reported the same component.
func (c *listChecker) findCycles() {
	seen := map[string]bool{}
	for _, lv := range levels {
		for _, scc := range c.g.components(lv.mask) {
			sig := signature(scc)
			if seen[sig] {
				continue
			}
			seen[sig] = true
			cycle := c.g.cycle(scc, lv.mask, lv.through, lv.back)
			if cycle == nil {
				panic("checker: a strongly connected component without a cycle")
			}
			kind := classify(cycle)
			c.res.report(kind, c.opt.CyclesMax, func() string { return c.cycleText(kind, cycle) })
		}
	}
}

func signature(scc []int) string {
	var b strings.Builder
	for _, n := range scc {
		b.WriteString(strconv.Itoa(n))
		b.WriteByte(',')
	}
	return b.String()
}

// classify names a cycle by the dependencies it needs (Adya's G0, G1c,
// G-single, G2; -realtime when it needs real-time order).
func classify(cycle []edge) string {
	var n [16]int
	for _, e := range cycle {
		n[e.kinds]++
	}
	kind := G0
	switch {
	case n[rw] > 1:
		kind = G2
	case n[rw] == 1:
		kind = GSingle
	case n[wr] > 0:
		kind = G1c
	}
	if n[rt] > 0 {
		kind += RealtimeSuffix
	}
	return kind
}

// cycleText prints a cycle: each transaction, the edge to the next with
// its reason, and the transactions' history lines.
func (c *listChecker) cycleText(kind string, cycle []edge) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: a cycle of %d transactions:\n", kind, len(cycle))
	for _, e := range cycle {
		fmt.Fprintf(&b, "  %s -%s-> T%d: %s\n", c.txns[e.from].name(), kindNames[e.kinds], e.to, c.edgeText(e))
	}
	b.WriteString("  the transactions:\n")
	for _, e := range cycle {
		fmt.Fprintf(&b, "    %s\n", c.txns[e.from].line())
	}
	return strings.TrimSuffix(b.String(), "\n")
}
