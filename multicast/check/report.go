package check

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode"

	"github.com/flexkv/flexkv/multicast"
)

// Report checks the records added so far. It leaves the Checker unchanged,
// so it may be called at any time; each call costs time and memory linear in
// the records (plus a sort of the group pairs that share messages).
func (c *Checker) Report() Report {
	a := &analysis{c: c, counts: map[string]int{}, details: map[string][]Violation{}}
	a.integrity()
	a.replicaAgreement()
	a.groupOrders()
	a.prefixOrder()
	a.acyclicOrder()
	if c.opt.Complete {
		a.completeness()
		a.unknownSends()
	}
	if c.opt.Genuine {
		a.genuineness()
	}

	rep := Report{
		Deliveries:      c.deliveries,
		Sends:           c.sendsTotal,
		Groups:          len(c.groups.list),
		Replicas:        len(c.replicas),
		SendsByKind:     map[string]int{},
		BytesTotal:      c.bytesTotal,
		ViolationCounts: a.counts,
	}
	for _, m := range c.msgs {
		if m.dst >= 0 {
			rep.Messages++
		}
	}
	for k, n := range c.sendsByKind {
		if n > 0 {
			rep.SendsByKind[multicast.Kind(k).String()] = n
		}
	}
	for _, p := range Properties {
		rep.Violations = append(rep.Violations, a.details[p]...)
	}
	return rep
}

// analysis holds what one Report computes.
type analysis struct {
	c       *Checker
	counts  map[string]int
	details map[string][]Violation

	groupReplicas [][]int32 // per group: its replicas, in index order
	longest       []int32   // per group: its longest replica, or -1
	order         [][]int32 // per group: its delivery order (see the package comment)
	delivered     []int32   // per message: destination replicas that delivered it
}

// violation counts one violation of prop and reports whether it is among
// the ones to describe, so that costly details are computed only for those.
func (a *analysis) violation(prop string) bool {
	a.counts[prop]++
	return a.counts[prop] <= a.c.opt.DetailsMax
}

func (a *analysis) describe(prop, detail string, ids ...string) {
	a.details[prop] = append(a.details[prop], Violation{Property: prop, Detail: detail, IDs: ids})
}

// show quotes a name that would not read as one word.
func show(s string) string {
	if s == "" || strings.IndexFunc(s, func(r rune) bool { return unicode.IsSpace(r) || !unicode.IsPrint(r) }) >= 0 {
		return strconv.Quote(s)
	}
	return s
}

func (a *analysis) msg(m int32) string   { return show(a.c.msgs[m].name) }
func (a *analysis) group(g int32) string { return show(a.c.groups.list[g]) }
func (a *analysis) replica(r int32) string {
	rp := &a.c.replicas[r]
	return a.group(rp.group) + "/" + show(rp.name)
}

// dst shows a destination set with its names sorted.
func (a *analysis) dst(d int32) string {
	names := make([]string, len(a.c.dsts[d]))
	for i, g := range a.c.dsts[d] {
		names[i] = a.group(g)
	}
	slices.Sort(names)
	return "[" + strings.Join(names, " ") + "]"
}

func (a *analysis) hasGroup(d, g int32) bool {
	_, ok := slices.BinarySearch(a.c.dsts[d], g)
	return ok
}

// integrity: at most once, only if multicast, only at a destination, with
// the multicast's dst; and one dst per multicast id.
func (a *analysis) integrity() {
	c := a.c
	last := make([]int32, len(c.msgs)) // 1 + the last replica that delivered the message
	at := make([]int32, len(c.msgs))   // its position in that replica's sequence
	a.delivered = make([]int32, len(c.msgs))
	for ri := range c.replicas {
		r := int32(ri)
		rp := &c.replicas[ri]
		for p, d := range rp.seq {
			if last[d.msg] == r+1 {
				if a.violation(Integrity) {
					a.describe(Integrity, fmt.Sprintf("%s delivered %s twice (deliveries #%d and #%d)",
						a.replica(r), a.msg(d.msg), at[d.msg]+1, p+1), c.msgs[d.msg].name)
				}
				continue
			}
			last[d.msg], at[d.msg] = r+1, int32(p)
			m := &c.msgs[d.msg]
			if m.dst < 0 {
				if a.violation(Integrity) {
					what := "which was never multicast"
					if IsFlush(m.name) {
						what = "a protocol-internal message"
					}
					a.describe(Integrity, fmt.Sprintf("%s delivered %s (delivery #%d), %s",
						a.replica(r), a.msg(d.msg), p+1, what), m.name)
				}
				continue
			}
			if a.hasGroup(m.dst, rp.group) {
				a.delivered[d.msg]++
			} else if a.violation(Integrity) {
				a.describe(Integrity, fmt.Sprintf("%s delivered %s (delivery #%d), which was multicast to %s only",
					a.replica(r), a.msg(d.msg), p+1, a.dst(m.dst)), m.name)
			}
			if d.dst != m.dst && a.violation(Integrity) {
				a.describe(Integrity, fmt.Sprintf("%s delivered %s (delivery #%d) with dst %s, but it was multicast to %s",
					a.replica(r), a.msg(d.msg), p+1, a.dst(d.dst), a.dst(m.dst)), m.name)
			}
		}
	}
	for _, cf := range c.conflicts {
		if a.violation(Integrity) {
			a.describe(Integrity, fmt.Sprintf("%s multicast to %s and again to %s",
				a.msg(cf.msg), a.dst(c.msgs[cf.msg].dst), a.dst(cf.dst)), c.msgs[cf.msg].name)
		}
	}
}

// replicaAgreement: each replica's sequence is a prefix of its group's
// longest (the first replica of the greatest length).
func (a *analysis) replicaAgreement() {
	c := a.c
	a.groupReplicas = make([][]int32, len(c.groups.list))
	for ri, rp := range c.replicas {
		a.groupReplicas[rp.group] = append(a.groupReplicas[rp.group], int32(ri))
	}
	a.longest = make([]int32, len(c.groups.list))
	for g, rs := range a.groupReplicas {
		a.longest[g] = -1
		if len(rs) == 0 {
			continue
		}
		best := rs[0]
		for _, r := range rs[1:] {
			if len(c.replicas[r].seq) > len(c.replicas[best].seq) {
				best = r
			}
		}
		a.longest[g] = best
		want := c.replicas[best].seq
		for _, r := range rs {
			got := c.replicas[r].seq
			i := 0
			for i < len(got) && got[i].msg == want[i].msg {
				i++
			}
			if i == len(got) || r == best {
				continue
			}
			if a.violation(ReplicaAgreement) {
				a.describe(ReplicaAgreement, fmt.Sprintf("group %s: delivery #%d is %s at %s but %s at %s",
					a.group(int32(g)), i+1, a.msg(got[i].msg), a.replica(r), a.msg(want[i].msg), a.replica(best)),
					c.msgs[got[i].msg].name, c.msgs[want[i].msg].name)
			}
		}
	}
}

// groupOrders derives each group's order from its longest replica: first
// deliveries of messages multicast to the group, in sequence.
func (a *analysis) groupOrders() {
	c := a.c
	seen := make([]int32, len(c.msgs)) // 1 + the last group whose order holds the message
	a.order = make([][]int32, len(c.groups.list))
	for g, best := range a.longest {
		if best < 0 {
			continue
		}
		for _, d := range c.replicas[best].seq {
			m := c.msgs[d.msg]
			if seen[d.msg] == int32(g+1) || m.dst < 0 || !a.hasGroup(m.dst, int32(g)) {
				continue
			}
			seen[d.msg] = int32(g + 1)
			a.order[g] = append(a.order[g], d.msg)
		}
	}
}

// prefixOrder: for every pair of groups, the sequences of the messages
// multicast to both, in each group's order, are one a prefix of the other.
// Each pair is compared once, in time linear in the shared deliveries.
func (a *analysis) prefixOrder() {
	c := a.c
	pair := func(g, h int32) uint64 { return uint64(g)<<32 | uint64(h) }
	shared := map[uint64][]int32{} // (g, h): g's order restricted to messages also addressed to h
	for g, ord := range a.order {
		for _, m := range ord {
			for _, h := range c.dsts[c.msgs[m].dst] {
				if h != int32(g) {
					k := pair(int32(g), h)
					shared[k] = append(shared[k], m)
				}
			}
		}
	}
	var keys []uint64
	//flexkv:unordered the keys are sorted below
	for k := range shared {
		if k>>32 < k&low32 { // each unordered pair once; a pair one side of which is empty agrees
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		g, h := int32(k>>32), int32(k&low32)
		x, y := shared[k], shared[pair(h, g)]
		n := min(len(x), len(y))
		i := 0
		for i < n && x[i] == y[i] {
			i++
		}
		if i == n || !a.violation(PrefixOrder) {
			continue
		}
		mx, my := x[i], y[i]
		how := func(seq []int32, first, other int32) string {
			if slices.Contains(seq[i+1:], other) {
				return a.msg(first) + " then " + a.msg(other)
			}
			return a.msg(first) + " and not " + a.msg(other)
		}
		a.describe(PrefixOrder, fmt.Sprintf("groups %s and %s differ at their common delivery #%d: %s delivers %s, %s delivers %s",
			a.group(g), a.group(h), i+1, a.group(g), how(x, mx, my), a.group(h), how(y, my, mx)),
			c.msgs[mx].name, c.msgs[my].name)
	}
}

const low32 = 1<<32 - 1 // the low half of a pair key

// acyclicOrder: the graph whose edges join consecutive messages of every
// group's order has no cycle. An iterative Tarjan finds its strongly
// connected components in linear time; each one of more than one message is
// a violation, described by the shortest cycle through its first message.
func (a *analysis) acyclicOrder() {
	g := a.orderGraph()
	if g.edges() == 0 {
		return
	}
	comp, cycles := g.cyclicComponents()
	var s cycleSearch
	for _, cc := range cycles {
		if !a.violation(AcyclicOrder) {
			continue
		}
		cycle, groups := s.shortest(g, comp, cc)
		a.describeCycle(cycle, groups, int(cc.size))
	}
}

// orderGraph is acyclicOrder's graph in compressed adjacency form: the edges
// of message v are adj[off[v]:off[v+1]], and via[e] is the group whose order
// gives edge e.
type orderGraph struct {
	off, adj, via []int32
}

// orderGraph builds the graph with an edge from each message to the next one
// in every group's order, grouped by their first message.
func (a *analysis) orderGraph() orderGraph {
	n := int32(len(a.c.msgs))
	off := make([]int32, n+1)
	for _, ord := range a.order {
		for i := 1; i < len(ord); i++ {
			off[ord[i-1]+1]++
		}
	}
	for v := int32(0); v < n; v++ {
		off[v+1] += off[v]
	}
	adj := make([]int32, off[n])
	via := make([]int32, off[n])
	next := slices.Clone(off[:n])
	for g, ord := range a.order {
		for i := 1; i < len(ord); i++ {
			v := ord[i-1]
			adj[next[v]], via[next[v]] = ord[i], int32(g)
			next[v]++
		}
	}
	return orderGraph{off: off, adj: adj, via: via}
}

// nodes is the number of messages of g.
func (g orderGraph) nodes() int32 { return int32(len(g.off) - 1) }

// edges is the number of edges of g.
func (g orderGraph) edges() int32 { return g.off[len(g.off)-1] }

// component is a strongly connected component of an orderGraph: its lowest
// message, its number of messages and its index in the comp slice.
type component struct{ first, size, id int32 }

// cyclicComponents runs an iterative Tarjan over g. comp[v] is the id of
// v's strongly connected component; cycles are the components of more than
// one message, in the order of their first message.
func (g orderGraph) cyclicComponents() (comp []int32, cycles []component) {
	type frame struct{ v, e int32 }
	n := g.nodes()
	off, adj := g.off, g.adj
	index := make([]int32, n) // 0: not visited yet
	low := make([]int32, n)
	comp = make([]int32, n)
	onStack := make([]bool, n)
	var stack []int32
	var calls []frame
	var counter, comps int32
	visit := func(v int32) {
		counter++
		index[v], low[v] = counter, counter
		stack = append(stack, v)
		onStack[v] = true
		calls = append(calls, frame{v: v, e: off[v]})
	}
	// popComponent pops the component whose root is v off the stack.
	popComponent := func(v int32) component {
		cc := component{first: v, id: comps}
		comps++
		for {
			w := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			onStack[w] = false
			comp[w] = cc.id
			cc.size++
			cc.first = min(cc.first, w)
			if w == v {
				return cc
			}
		}
	}
	for root := int32(0); root < n; root++ {
		if index[root] != 0 || off[root] == off[root+1] {
			continue
		}
		visit(root)
		for len(calls) > 0 {
			f := &calls[len(calls)-1]
			v := f.v
			if f.e < off[v+1] {
				w := adj[f.e]
				f.e++
				if index[w] == 0 {
					visit(w)
				} else if onStack[w] {
					low[v] = min(low[v], index[w])
				}
				continue
			}
			calls = calls[:len(calls)-1]
			if len(calls) > 0 {
				u := calls[len(calls)-1].v
				low[u] = min(low[u], low[v])
			}
			if low[v] != index[v] {
				continue
			}
			if cc := popComponent(v); cc.size > 1 {
				cycles = append(cycles, cc)
			}
		}
	}
	slices.SortFunc(cycles, func(x, y component) int { return cmp.Compare(x.first, y.first) })
	return comp, cycles
}

// cycleSearch is the scratch space of shortest, kept from one component to
// the next: parent[v] is 1 + v's predecessor once v is visited, and 0 again
// for every node after a search.
type cycleSearch struct {
	parent, parentEdge, queue []int32
}

// shortest searches breadth first from cc.first within its component until an
// edge leads back to it, and returns that cycle (message indices, starting at
// cc.first) with the group whose order gives each of its edges.
func (s *cycleSearch) shortest(g orderGraph, comp []int32, cc component) (cycle, groups []int32) {
	if s.parent == nil {
		s.parent = make([]int32, g.nodes())
		s.parentEdge = make([]int32, g.nodes())
	}
	parent, parentEdge := s.parent, s.parentEdge
	start := cc.first
	queue := append(s.queue[:0], start)
	for qi := 0; cycle == nil; qi++ {
		v := queue[qi]
		for e := g.off[v]; e < g.off[v+1]; e++ {
			w := g.adj[e]
			if comp[w] != cc.id {
				continue
			}
			if w == start {
				groups = append(groups, g.via[e])
				for u := v; u != start; u = parent[u] - 1 {
					cycle = append(cycle, u)
					groups = append(groups, g.via[parentEdge[u]])
				}
				cycle = append(cycle, start)
				slices.Reverse(cycle)
				slices.Reverse(groups)
				break
			}
			if parent[w] == 0 && w != start {
				parent[w], parentEdge[w] = v+1, e
				queue = append(queue, w)
			}
		}
	}
	for _, v := range queue {
		parent[v] = 0
	}
	s.queue = queue
	return cycle, groups
}

// describeCycle reports cycle (message indices) whose edge i (from cycle[i]
// to the next) comes from the order of groups[i].
func (a *analysis) describeCycle(cycle, groups []int32, size int) {
	ids := make([]string, len(cycle))
	shown := make([]string, 0, len(cycle)+1)
	for i, m := range cycle {
		ids[i] = a.c.msgs[m].name
		shown = append(shown, a.msg(m))
	}
	shown = append(shown, shown[0])
	via := make([]string, len(groups))
	for i, g := range groups {
		via[i] = a.group(g)
	}
	var b strings.Builder
	b.WriteString("cycle ")
	if len(cycle) > shownMax {
		fmt.Fprintf(&b, "of %d messages ", len(cycle))
	}
	fmt.Fprintf(&b, "%s (orders of %s)", shorten(shown, " -> "), shorten(via, ", "))
	if size > len(cycle) {
		fmt.Fprintf(&b, ", within %d messages that all precede each other", size)
	}
	a.describe(AcyclicOrder, b.String(), ids...)
}

const shownMax = 12

// shorten joins items, eliding the middle of long lists.
func shorten(items []string, sep string) string {
	if len(items) <= shownMax {
		return strings.Join(items, sep)
	}
	head, tail := items[:shownMax-3], items[len(items)-3:]
	return strings.Join(head, sep) + sep + fmt.Sprintf("... %d more ...", len(items)-len(head)-len(tail)) + sep + strings.Join(tail, sep)
}

// completeness (Options.Complete): validity and agreement.
func (a *analysis) completeness() {
	c := a.c
	for mi, m := range c.msgs {
		if m.dst < 0 {
			continue
		}
		want := int32(0)
		for _, g := range c.dsts[m.dst] {
			want += max(1, int32(len(a.groupReplicas[g])))
		}
		got := a.delivered[mi]
		if got >= want {
			continue
		}
		prop := Agreement
		if got == 0 {
			prop = Validity
		}
		if !a.violation(prop) {
			continue
		}
		var missing []string
		for _, g := range c.dsts[m.dst] {
			if len(a.groupReplicas[g]) == 0 {
				missing = append(missing, a.group(g)+" (no deliveries at all)")
			}
			for _, r := range a.groupReplicas[g] {
				if !slices.ContainsFunc(c.replicas[r].seq, func(d delivery) bool { return d.msg == int32(mi) }) {
					missing = append(missing, a.replica(r))
				}
			}
		}
		a.describe(prop, fmt.Sprintf("%s, multicast to %s, delivered by %d of %d destination replicas; missing at %s",
			a.msg(int32(mi)), a.dst(m.dst), got, want, shorten(missing, ", ")), m.name)
	}
}

// unknownSends (Options.Complete): every send is about a multicast message
// (flush traffic is not recorded). One violation per unknown id.
func (a *analysis) unknownSends() {
	c := a.c
	count := make([]int32, len(c.msgs))
	var first []int
	for i, s := range c.sends {
		if c.msgs[s.msg].dst >= 0 {
			continue
		}
		if count[s.msg] == 0 {
			first = append(first, i)
		}
		count[s.msg]++
	}
	for _, i := range first {
		s := c.sends[i]
		if a.violation(Integrity) {
			a.describe(Integrity, fmt.Sprintf("%d sends about %s, which was never multicast (the first: %s from %s to %s)",
				count[s.msg], a.msg(s.msg), s.kind, a.group(s.from), a.group(s.to)), c.msgs[s.msg].name)
		}
	}
}

// genuineness (Options.Genuine). The groups entitled to talk about m are its
// destinations and, transitively, the receivers of notifs about m sent by
// entitled groups (a breadth-first search over m's notifs, so the order of
// the lines does not matter). Every send whose ends are not both entitled is
// a violation, and so is a notif to a group that no earlier multicast
// addressed: FlexCast notifies only groups it knows a message to.
func (a *analysis) genuineness() {
	c := a.c
	n := len(c.msgs)
	// A stable counting sort of the sends by message.
	start := make([]int32, n+1)
	for _, s := range c.sends {
		start[s.msg+1]++
	}
	for m := range n {
		start[m+1] += start[m]
	}
	bySend := make([]int32, len(c.sends))
	next := slices.Clone(start[:n])
	for i, s := range c.sends {
		bySend[next[s.msg]] = int32(i)
		next[s.msg]++
	}

	type notif struct{ from, to int32 }
	entitled := make([]int32, len(c.groups.list)) // 1 + the message the group is entitled to talk about
	var notifs []notif
	var queue []int32
	for mi := range n {
		sends := bySend[start[mi]:start[mi+1]]
		m := c.msgs[mi]
		if len(sends) == 0 || m.dst < 0 {
			continue
		}
		stamp := int32(mi + 1)
		queue = queue[:0]
		for _, g := range c.dsts[m.dst] {
			entitled[g] = stamp
			queue = append(queue, g)
		}
		notifs = notifs[:0]
		for _, i := range sends {
			if s := c.sends[i]; s.kind == multicast.KindNotif {
				notifs = append(notifs, notif{s.from, s.to})
			}
		}
		slices.SortFunc(notifs, func(x, y notif) int { return cmp.Compare(x.from, y.from) })
		for qi := 0; qi < len(queue) && len(notifs) > 0; qi++ {
			g := queue[qi]
			j, _ := slices.BinarySearchFunc(notifs, g, func(x notif, g int32) int { return cmp.Compare(x.from, g) })
			for ; j < len(notifs) && notifs[j].from == g; j++ {
				if to := notifs[j].to; entitled[to] != stamp {
					entitled[to] = stamp
					queue = append(queue, to)
				}
			}
		}
		for _, i := range sends {
			s := c.sends[i]
			var why []string
			for _, g := range []int32{s.from, s.to} {
				if entitled[g] != stamp && !(s.kind == multicast.KindNotif && g == s.to) {
					why = append(why, a.group(g)+" is neither a destination nor notified")
				}
			}
			if s.kind == multicast.KindNotif && !s.notifOK {
				why = append(why, "no message multicast before it was addressed to "+a.group(s.to))
			}
			if len(why) == 0 || !a.violation(Genuineness) {
				continue
			}
			a.describe(Genuineness, fmt.Sprintf("%s from %s to %s about %s (multicast to %s): %s",
				s.kind, a.group(s.from), a.group(s.to), a.msg(int32(mi)), a.dst(m.dst), strings.Join(why, "; ")), m.name)
		}
	}
}
