package checker

import (
	"math/bits"
	"slices"
)

// components returns the strongly connected components of more than one
// transaction of the graph of the edges of kinds mask, each sorted
// (Tarjan's algorithm, iterative: a history's chains can be long).
func (g *graph) components(mask uint8) [][]int {
	index := map[int]int{}
	low := map[int]int{}
	onStack := map[int]bool{}
	var stack []int
	var out [][]int
	next := 0
	type frame struct {
		n    int
		edge int // the next successor of n to visit
	}
	for _, root := range g.nodes {
		if _, done := index[root]; done {
			continue
		}
		calls := []frame{{n: root}}
		index[root], low[root] = next, next
		next++
		stack = append(stack, root)
		onStack[root] = true
		for len(calls) > 0 {
			f := &calls[len(calls)-1]
			succ := g.out[f.n]
			if f.edge < len(succ) {
				m := succ[f.edge]
				f.edge++
				if g.kinds[[2]int{f.n, m}]&mask == 0 {
					continue
				}
				if _, seen := index[m]; !seen {
					index[m], low[m] = next, next
					next++
					stack = append(stack, m)
					onStack[m] = true
					calls = append(calls, frame{n: m})
				} else if onStack[m] {
					low[f.n] = min(low[f.n], index[m])
				}
				continue
			}
			n := f.n
			calls = calls[:len(calls)-1]
			if len(calls) > 0 {
				p := calls[len(calls)-1].n
				low[p] = min(low[p], low[n])
			}
			if low[n] != index[n] {
				continue
			}
			var scc []int
			for {
				m := stack[len(stack)-1]
				stack = stack[:len(stack)-1]
				onStack[m] = false
				scc = append(scc, m)
				if m == n {
					break
				}
			}
			if len(scc) > 1 {
				slices.Sort(scc)
				out = append(out, scc)
			}
		}
	}
	slices.SortFunc(out, func(a, b []int) int { return a[0] - b[0] })
	return out
}

// label is the kind an edge of kinds is counted as among allowed: the
// strongest dependency (ww before wr before rw before real time).
func label(kinds, allowed uint8) uint8 {
	k := kinds & allowed
	if k == 0 {
		return 0
	}
	return 1 << bits.TrailingZeros8(k)
}

// cycle returns a cycle within scc on the edges of mask: first one that
// takes an edge of kind through and comes back on edges of kinds back,
// else the shortest through the component's first transaction.
func (g *graph) cycle(scc []int, mask, through, back uint8) []edge {
	in := map[int]bool{}
	for _, n := range scc {
		in[n] = true
	}
	tries := 0
	for _, a := range scc {
		for _, b := range g.out[a] {
			k := g.kinds[[2]int{a, b}]
			if !in[b] || k&through == 0 || k&mask == 0 {
				continue
			}
			if tries++; tries > throughTries {
				break
			}
			if path := g.path(b, a, back, in); path != nil {
				return append([]edge{{from: a, to: b, kinds: label(k, mask)}}, path...)
			}
		}
	}
	return g.path(scc[0], scc[0], mask, in)
}

// path returns a shortest path from one transaction to another (a cycle
// when they are the same) on edges of kinds allowed within in, or nil.
func (g *graph) path(from, to int, allowed uint8, in map[int]bool) []edge {
	prev := map[int]int{}
	queue := []int{from}
	visited := map[int]bool{from: true}
	for len(queue) > 0 {
		u := queue[0]
		queue = queue[1:]
		for _, v := range g.out[u] {
			if !in[v] || g.kinds[[2]int{u, v}]&allowed == 0 {
				continue
			}
			if v == to {
				var rev []edge
				for x, y := u, v; ; {
					rev = append(rev, edge{from: x, to: y, kinds: label(g.kinds[[2]int{x, y}], allowed)})
					if x == from {
						break
					}
					x, y = prev[x], x
				}
				slices.Reverse(rev)
				return rev
			}
			if !visited[v] {
				visited[v] = true
				prev[v] = u
				queue = append(queue, v)
			}
		}
	}
	return nil
}
