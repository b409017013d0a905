package dbsim

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/flexkv/flexkv/executor"
	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/multicast/check"
	"github.com/flexkv/flexkv/partition"
	"github.com/flexkv/flexkv/txn"
)

// check runs every check of the package comment on a quiescent run.
func (s *sim) check() error {
	if !s.res.OK() {
		return nil // not quiescent: the state proves nothing more
	}
	s.checkOrder()
	s.checkEpochs()
	s.checkMembers()
	if err := s.checkReplicas(); err != nil {
		return err
	}
	if err := s.checkSessions(); err != nil {
		return err
	}
	if err := s.checkBank(); err != nil {
		return err
	}
	if err := s.checkBackups(); err != nil {
		return err
	}
	if err := s.checkMoves(); err != nil {
		return err
	}
	return s.checkLists()
}

func (s *sim) groupNames(dst partition.GroupSet) []string {
	var out []string
	for _, g := range dst.Slice() {
		out = append(out, s.top.Name(g))
	}
	return out
}

// checkOrder checks DESIGN 3.1's properties on what every replica's
// executor ran, in the order it ran it; the replicas removed (members.go)
// once more with the others, without validity and agreement, as they
// stopped short.
func (s *sim) checkOrder() {
	var live []*replica
	for _, gs := range s.groups {
		live = append(live, gs.replicas...)
	}
	s.checkOrderOf(live, true)
	if len(s.removed) > 0 {
		s.checkOrderOf(append(live, s.removed...), false)
	}
}

func (s *sim) checkOrderOf(replicas []*replica, complete bool) {
	c := check.New(check.Options{Complete: complete})
	add := func(r check.Record) {
		if err := c.Add(r); err != nil {
			s.res.violate("order: record %+v: %v", r, err)
		}
	}
	for _, rq := range s.accepted {
		add(check.Record{Ev: check.EvMulticast, ID: rq.msg.ID.String(), Dst: s.groupNames(rq.msg.Dst)})
	}
	for _, rp := range replicas {
		for _, d := range rp.dlog {
			for i, id := range d.ids {
				if id.IsFlush() {
					continue
				}
				add(check.Record{Ev: check.EvDeliver, Group: s.top.Name(rp.cfg.Self), Replica: "r" + strconv.Itoa(rp.r), ID: id.String(), Dst: s.groupNames(d.dst[i])})
			}
		}
	}
	rep := c.Report()
	if !rep.OK() {
		s.res.violate("order: %s", rep.Summary())
	}
}

// checkReplicas checks that the replicas of each group hold the same
// state, byte for byte.
func (s *sim) checkReplicas() error {
	ids := make([]multicast.MsgID, 0, len(s.accepted))
	for _, rq := range s.accepted {
		ids = append(ids, rq.msg.ID)
	}
	for _, gs := range s.groups {
		var first [32]byte
		for i, rp := range gs.replicas {
			d, err := rp.digest(ids)
			if err != nil {
				return fmt.Errorf("dbsim: %s: digest: %w", rp.name(), err)
			}
			if i == 0 {
				first = d
			} else if d != first {
				s.res.violate("replicas: %s differs from %s at applied index %d", rp.name(), gs.replicas[0].name(), rp.applied)
			}
		}
	}
	return nil
}

// balances reads every account at the leader of its group (its owner at
// the end: partitions may have moved).
func (s *sim) balances() (map[string]int64, error) {
	out := map[string]int64{}
	for g := range s.groups {
		for i := range AccountsPerGroup {
			k := accountKey(g, i)
			v, found, err := s.ownerStore(k).Get([]byte(k))
			if err != nil {
				return nil, err
			}
			var n int64
			if found {
				if n, err = strconv.ParseInt(string(v), 10, 64); err != nil {
					s.res.violate("bank: %s holds %q", k, v)
				}
			}
			out[k] = n
		}
	}
	return out, nil
}

// checkBank checks that every account holds its initial balance plus what
// the committed transfers moved, each once, and that none is negative.
func (s *sim) checkBank() error {
	want := map[string]int64{}
	for g := range s.groups {
		for i := range AccountsPerGroup {
			want[accountKey(g, i)] = initialBalance
		}
	}
	for _, c := range s.clients {
		for _, rq := range c.reqs {
			if rq.kind != kindTransfer || rq.pieces == nil {
				continue
			}
			if !rq.pieces[0].Aborted && rq.pieces[0].Succeeded {
				want[rq.from] -= rq.amount
				want[rq.to] += rq.amount
			}
		}
	}
	got, err := s.balances()
	if err != nil {
		return fmt.Errorf("dbsim: bank: %w", err)
	}
	var total int64
	for g := range s.groups {
		for i := range AccountsPerGroup {
			k := accountKey(g, i)
			total += got[k]
			if got[k] != want[k] {
				s.res.violate("bank: %s holds %d, want %d from the acknowledged transfers", k, got[k], want[k])
			}
			if got[k] < 0 {
				s.res.violate("bank: %s holds %d < 0", k, got[k])
			}
		}
	}
	if n := int64(len(s.groups) * AccountsPerGroup * initialBalance); total != n {
		s.res.violate("bank: total %d, want %d", total, n)
	}
	return nil
}

// checkLists checks the list-append history: each acknowledged append is
// in every list it named exactly once, nothing else is, what each append
// read is the list's prefix before it, and the lists' orders have no cycle
// (the history is serializable).
func (s *sim) checkLists() error {
	final := map[string][]string{}
	for g := range s.groups {
		for i := range ListsPerGroup {
			k := listKey(g, i)
			v, found, err := s.ownerStore(k).Get([]byte(k))
			if err != nil {
				return fmt.Errorf("dbsim: lists: %w", err)
			}
			if found && len(v) > 0 {
				final[k] = strings.Split(string(v), ",")
			}
		}
	}
	appends := map[string]*request{}
	for _, c := range s.clients {
		for _, rq := range c.reqs {
			if rq.kind == kindAppend {
				appends[rq.msg.ID.String()] = rq
			}
		}
	}
	// pos[list][id]: the position of id in the final list.
	pos := map[string]map[string]int{}
	for k, ids := range final { //flexkv:unordered each list on its own
		pos[k] = map[string]int{}
		for i, id := range ids {
			if _, dup := pos[k][id]; dup {
				s.res.violate("lists: %s holds %s twice: %v", k, id, ids)
			}
			pos[k][id] = i
			rq, ok := appends[id]
			switch {
			case !ok:
				s.res.violate("lists: %s holds %s, which no client appended", k, id)
			case !slices.Contains(rq.lists, k):
				s.res.violate("lists: %s holds %s, which appended to %v only", k, id, rq.lists)
			}
		}
	}
	for _, c := range s.clients {
		for _, rq := range c.reqs {
			if rq.kind != kindAppend || rq.pieces == nil {
				continue
			}
			id := rq.msg.ID.String()
			if rq.pieces[0].Aborted {
				// All or nothing: an aborted append is in no list.
				for _, k := range rq.lists {
					if _, ok := pos[k][id]; ok {
						s.res.violate("lists: aborted append %s (%s) is in %s", id, rq.pieces[0].Reason, k)
					}
				}
				continue
			}
			for _, k := range rq.lists {
				i, ok := pos[k][id]
				if !ok {
					s.res.violate("lists: acknowledged append %s is missing from %s", id, k)
					continue
				}
				read, found := readOf(rq.pieces, k)
				if !found {
					s.res.violate("lists: append %s reports no read of %s", id, k)
					continue
				}
				if prefix := strings.Join(final[k][:i], ","); read != prefix {
					s.res.violate("lists: append %s read %s as %q, but the list before it is %q", id, k, read, prefix)
				}
			}
		}
	}
	if cycle := listCycle(final, nil); cycle != nil {
		s.res.violate("lists: not serializable: the lists order %s in a cycle", strings.Join(cycle, " < "))
	} else if cycle := listCycle(final, s.committedAppends()); cycle != nil {
		s.res.violate("lists: not strictly serializable: the lists and real time order %s in a cycle", strings.Join(cycle, " < "))
	}
	return nil
}

// committedAppends returns the appends every destination answered as
// committed, by the step of their last answer.
func (s *sim) committedAppends() []*request {
	var out []*request
	for _, c := range s.clients {
		for _, rq := range c.reqs {
			if rq.kind == kindAppend && rq.pieces != nil && !rq.pieces[0].Aborted {
				out = append(out, rq)
			}
		}
	}
	slices.SortStableFunc(out, func(a, b *request) int { return a.done - b.done })
	return out
}

// realTime adds to next the edges of real-time order among appends, sorted
// by their done step: A before B when A was answered before B was first
// sent. Time nodes keep it linear: the i-th answered append leads to the
// node of its place, each such node to the next, and the node of the last
// append answered before B was sent leads to B.
func realTime(next map[string][]string, appends []*request) {
	node := func(i int) string { return fmt.Sprintf("(the %d-th answer, step %d)", i+1, appends[i].done-1) }
	for i, rq := range appends {
		next[rq.msg.ID.String()] = append(next[rq.msg.ID.String()], node(i))
		if i > 0 {
			next[node(i-1)] = append(next[node(i-1)], node(i))
		}
	}
	for _, rq := range appends {
		// The appends answered before rq was invoked: done < invoked.
		n := sort.Search(len(appends), func(i int) bool { return appends[i].done >= rq.invoked })
		if n > 0 {
			next[node(n-1)] = append(next[node(n-1)], rq.msg.ID.String())
		}
	}
}

// readOf returns what the append with results pieces read of list k.
func readOf(pieces []txn.PieceResult, k string) (string, bool) {
	for _, p := range pieces {
		for _, r := range p.Results {
			if string(r.Key) == k {
				return string(r.Value), true
			}
		}
	}
	return "", false
}

// listCycle returns a cycle of the union of the lists' orders (an edge from
// each id to the next in a list), or nil: every list is an order of the
// appends to it, and the history is serializable exactly when their union
// has no cycle.
func listCycle(final map[string][]string, appends []*request) []string {
	next := map[string][]string{}
	var nodes []string
	seen := map[string]bool{}
	keys := make([]string, 0, len(final))
	for k := range final { //flexkv:unordered sorted below
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		ids := final[k]
		for i, id := range ids {
			if !seen[id] {
				seen[id] = true
				nodes = append(nodes, id)
			}
			if i+1 < len(ids) {
				next[id] = append(next[id], ids[i+1])
			}
		}
	}
	if appends != nil {
		realTime(next, appends)
	}
	const (
		white = iota
		grey
		black
	)
	color := map[string]int{}
	var stack []string
	var found []string
	var visit func(id string) bool
	visit = func(id string) bool {
		color[id] = grey
		stack = append(stack, id)
		for _, n := range next[id] {
			switch color[n] {
			case grey:
				for i, x := range stack {
					if x == n {
						found = append(append([]string{}, stack[i:]...), n)
					}
				}
				return true
			case white:
				if visit(n) {
					return true
				}
			}
		}
		stack = stack[:len(stack)-1]
		color[id] = black
		return false
	}
	for _, id := range nodes {
		if color[id] == white && visit(id) {
			return found
		}
	}
	return nil
}

// checkSessions checks, at every replica of every destination, what
// became of each session request's result (executor, Session
// results): one followed there by a later request of its session is
// acknowledged, gone; the last of its session there is kept, the very
// result its client received (also after retries); unless the session's
// record there expired since (then either may be among the count-bounded
// results, which must hold what the client received). Each replica keeps
// exactly the results found kept.
func (s *sim) checkSessions() error {
	// last[g][client] is the highest seq of the session's requests to g.
	last := make([]map[uint64]uint64, len(s.groups))
	for g := range last {
		last[g] = map[uint64]uint64{}
	}
	for _, rq := range s.accepted {
		if rq.kind == kindPressure {
			continue
		}
		for _, g := range rq.msg.Dst.Slice() {
			last[g][rq.msg.ID.Client] = max(last[g][rq.msg.ID.Client], rq.msg.ID.Seq)
		}
	}
	for g, gs := range s.groups {
		for _, rp := range gs.replicas {
			kept := uint64(0)
			for _, rq := range s.accepted {
				if rq.kind == kindPressure || !rq.msg.Dst.Has(partition.GroupID(g)) {
					continue
				}
				id := rq.msg.ID
				res, found, err := rp.exec.Result(id)
				acked := errors.Is(err, executor.ErrAcknowledged)
				if err != nil && !acked {
					return fmt.Errorf("dbsim: %s: result of %s: %w", rp.name(), id, err)
				}
				_, keptSeq, open, err := rp.exec.SessionState(id.Client)
				if err != nil {
					return fmt.Errorf("dbsim: %s: session of %s: %w", rp.name(), id, err)
				}
				switch {
				case id.Seq < last[g][id.Client]:
					// Found: among the count-bounded results, where an
					// expired record or a piece that ran after its
					// acknowledgement leaves it.
					if open && !found && !acked {
						s.res.violate("sessions: %s: %s, followed there by c%d.%d, is not acknowledged (found %v, %v)", rp.name(), id, id.Client, last[g][id.Client], found, err)
					}
					if acked {
						s.res.Acked++
					}
				case open && keptSeq != id.Seq:
					s.res.violate("sessions: %s: the session of %s keeps the result of seq %d", rp.name(), id, keptSeq)
				case open && !found:
					s.res.violate("sessions: %s: the unacknowledged result of %s is lost", rp.name(), id)
				case open:
					kept++
					s.res.Unacked++
				}
				if found && rq.pieces != nil {
					want := rq.pieces[slices.Index(rq.msg.Dst.Slice(), partition.GroupID(g))]
					if a, b := txn.AppendPieceResult(nil, &res), txn.AppendPieceResult(nil, &want); string(a) != string(b) {
						s.res.violate("exactly once: %s: the result of %s is %+v, its client received %+v", rp.name(), id, res, want)
					}
				}
			}
			if st := rp.exec.Stats(); st.SessionResults != kept || st.SessionResults > st.Sessions {
				s.res.violate("sessions: %s keeps %d session results in %d sessions; the requests account for %d", rp.name(), st.SessionResults, st.Sessions, kept)
			}
		}
	}
	return nil
}
