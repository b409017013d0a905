package checker

import (
	"fmt"
	"slices"
	"strings"

	"github.com/flexkv/flexkv/jepsen/history"
)

// tx is one list-append transaction of the history.
type tx struct {
	id      int // its number among the transactions
	inv     history.Op
	done    *history.Op // nil when never completed
	outcome history.Type
	mops    []history.Mop // the completion's when ok, else the invocation's
}

// name is how a cycle names t: its invocation's line and process.
func (t *tx) name() string {
	return fmt.Sprintf("T%d (line %d, process %d)", t.id, t.inv.Index+1, t.inv.Process)
}

// line is t's completion as a history line, or its invocation's.
func (t *tx) line() string {
	if t.done != nil {
		return opLine(*t.done)
	}
	return opLine(t.inv)
}

// writer names the append of one value: its transaction and the position
// of the micro-operation in it.
type writer struct {
	t   *tx
	mop int
}

// read is one ok read of a list.
type read struct {
	t    *tx
	mop  int
	key  string
	list []int64
}

// listChecker holds what the list-append checks share.
type listChecker struct {
	h   *history.History
	opt Options
	res *Result

	txns    []*tx
	appends map[string]map[int64]writer // key -> value -> its append
	reads   map[string][]read           // key -> its ok reads, in history order
	keys    []string                    // every key appended or read, sorted
	order   map[string][]int64          // key -> version order (the longest read)
	g       *graph
}

func (c *listChecker) run() {
	c.collect()
	for _, k := range c.keys {
		c.checkReads(k)
		c.versionOrder(k)
		c.lostAppends(k)
	}
	for _, t := range c.txns {
		if t.outcome == history.OK {
			c.internal(t)
		}
	}
	c.buildGraph()
	c.res.GraphTxns, c.res.Edges = len(c.g.nodes), c.g.edgeCount()
	c.findCycles()
}

// collect indexes the transactions, their appends and their ok reads.
func (c *listChecker) collect() {
	c.appends = map[string]map[int64]writer{}
	c.reads = map[string][]read{}
	c.order = map[string][]int64{}
	keys := map[string]bool{}
	for _, p := range c.h.Pairs {
		inv := c.h.Ops[p.Invoke]
		if inv.F != history.FTxn {
			continue
		}
		t := &tx{id: len(c.txns), inv: inv, outcome: c.h.Outcome(p), mops: inv.Mops}
		if p.Done >= 0 {
			t.done = &c.h.Ops[p.Done]
			if t.outcome == history.OK {
				t.mops = t.done.Mops
			}
		}
		c.txns = append(c.txns, t)
		for i, m := range t.mops {
			keys[m.Key] = true
			switch {
			case m.F == history.MopAppend:
				c.addAppend(t, i, m)
			case t.outcome == history.OK:
				c.reads[m.Key] = append(c.reads[m.Key], read{t: t, mop: i, key: m.Key, list: m.List})
			}
		}
	}
	for k := range keys { //flexkv:unordered sorted below
		c.keys = append(c.keys, k)
	}
	slices.Sort(c.keys)
}

func (c *listChecker) addAppend(t *tx, i int, m history.Mop) {
	byValue := c.appends[m.Key]
	if byValue == nil {
		byValue = map[int64]writer{}
		c.appends[m.Key] = byValue
	}
	if first, dup := byValue[m.Int]; dup {
		c.res.report(DuplicateAppend, c.opt.ExamplesMax, func() string {
			return fmt.Sprintf("%d appended to %q twice, so reads cannot name its writer: by %s and %s\n  %s\n  %s",
				m.Int, m.Key, first.t.name(), t.name(), first.t.line(), t.line())
		})
		return
	}
	byValue[m.Int] = writer{t: t, mop: i}
}

// checkReads checks each ok read of key k alone: duplicates, elements
// nobody appended (garbage), elements of failed appends (G1a), a read
// that ends inside a transaction's appends to k (G1b).
func (c *listChecker) checkReads(k string) {
	for _, r := range c.reads[k] {
		seen := map[int64]bool{}
		for _, v := range r.list {
			if seen[v] {
				c.res.report(DuplicateRead, c.opt.ExamplesMax, func() string {
					return fmt.Sprintf("%s read %q with %d twice: %v\n  %s", r.t.name(), k, v, r.list, r.t.line())
				})
			}
			seen[v] = true
			w, ok := c.appends[k][v]
			switch {
			case !ok:
				c.res.report(GarbageRead, c.opt.ExamplesMax, func() string {
					return fmt.Sprintf("%s read %q with %d, which no operation appended: %v\n  %s", r.t.name(), k, v, r.list, r.t.line())
				})
			case w.t.outcome == history.Fail:
				c.res.report(G1a, c.opt.ExamplesMax, func() string {
					return fmt.Sprintf("aborted read: %s read %q with %d, appended by %s, which failed\n  %s\n  %s",
						r.t.name(), k, v, w.t.name(), r.t.line(), w.t.line())
				})
			}
		}
		if len(r.list) > 0 {
			c.intermediate(r)
		}
	}
}

// intermediate reports a G1b: r's last element was appended by another
// transaction that appended to the same key again later.
func (c *listChecker) intermediate(r read) {
	last := r.list[len(r.list)-1]
	w, ok := c.appends[r.key][last]
	if !ok || w.t == r.t {
		return
	}
	for _, m := range w.t.mops[w.mop+1:] {
		if m.F == history.MopAppend && m.Key == r.key {
			c.res.report(G1b, c.opt.ExamplesMax, func() string {
				return fmt.Sprintf("intermediate read: %s read %q ending with %d, but %s appended %d after it in the same transaction\n  %s\n  %s",
					r.t.name(), r.key, last, w.t.name(), m.Int, r.t.line(), w.t.line())
			})
			return
		}
	}
}

// versionOrder sets key k's version order, the longest ok read of it, and
// reports every read that is not a prefix of it.
func (c *listChecker) versionOrder(k string) {
	var longest read
	for _, r := range c.reads[k] {
		if len(r.list) > len(longest.list) {
			longest = r
		}
	}
	c.order[k] = longest.list
	if len(c.reads[k]) > 0 {
		c.res.KeysChecked++
	}
	for _, r := range c.reads[k] {
		if isPrefix(r.list, longest.list) {
			continue
		}
		c.res.report(Incompatible, c.opt.ExamplesMax, func() string {
			return fmt.Sprintf("reads of %q disagree on its order: %s read %v, %s read %v: neither is a prefix of the other\n  %s\n  %s",
				k, r.t.name(), r.list, longest.t.name(), longest.list, r.t.line(), longest.t.line())
		})
	}
}

func isPrefix(a, b []int64) bool { return len(a) <= len(b) && slices.Equal(a, b[:len(a)]) }

// lostAppends reports each acknowledged append to k that an ok read
// invoked after the append completed does not hold.
func (c *listChecker) lostAppends(k string) {
	values := make([]int64, 0, len(c.appends[k]))
	for v := range c.appends[k] { //flexkv:unordered sorted below
		values = append(values, v)
	}
	slices.Sort(values)
	for _, v := range values {
		w := c.appends[k][v]
		if w.t.outcome != history.OK {
			continue
		}
		for _, r := range c.reads[k] {
			if r.t == w.t || r.t.inv.TimeNs <= w.t.done.TimeNs || slices.Contains(r.list, v) {
				continue
			}
			c.res.report(LostAppend, c.opt.ExamplesMax, func() string {
				return fmt.Sprintf("%s appended %d to %q and completed ok; %s, invoked after that, read %v without it\n  %s\n  %s",
					w.t.name(), v, k, r.t.name(), r.list, w.t.line(), r.t.line())
			})
			break
		}
	}
}

// internal checks that transaction t sees its own appends: a read of a key
// that t appended to before ends with those appends, and equals an earlier
// read of t's extended by them.
func (c *listChecker) internal(t *tx) {
	type state struct {
		known   bool
		prefix  []int64
		appends []int64
	}
	keys := map[string]*state{}
	for _, m := range t.mops {
		s := keys[m.Key]
		if s == nil {
			s = &state{}
			keys[m.Key] = s
		}
		if m.F == history.MopAppend {
			s.appends = append(s.appends, m.Int)
			continue
		}
		var ok bool
		if s.known {
			ok = slices.Equal(m.List, append(slices.Clone(s.prefix), s.appends...))
		} else {
			ok = len(m.List) >= len(s.appends) && slices.Equal(m.List[len(m.List)-len(s.appends):], s.appends)
		}
		if !ok {
			c.res.report(Internal, c.opt.ExamplesMax, func() string {
				return fmt.Sprintf("%s read %q as %v, which does not follow its own earlier reads and appends (%v then %v)\n  %s",
					t.name(), m.Key, m.List, s.prefix, s.appends, t.line())
			})
		}
		s.known, s.prefix, s.appends = true, m.List, nil
	}
}

// edgeText explains an edge of a cycle.
func (c *listChecker) edgeText(e edge) string {
	var parts []string
	for _, why := range c.g.why[[2]int{e.from, e.to}] {
		if why.kind&e.kinds != 0 {
			parts = append(parts, why.text)
		}
	}
	return strings.Join(parts, "; ")
}
