package group

import (
	"container/list"
	"errors"
	"fmt"

	"github.com/flexkv/flexkv/internal/invariants"
	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/partition"
)

// Client sessions (DESIGN 6; the Raft dissertation, section 6.3).
//
// A client's requests are admitted once at their entry group: the group
// that proposes them to its log (FlexCast: the lca of the destinations;
// Skeen: the destination the client picked; tree: the tree-lca). That is
// where a retry must be recognised, so that is where sessions live: a
// client opens a session at each entry group it uses, before its first
// request there, with an entrySession log entry. The session's id is made
// from the group and the entry's index (SessionID), so it is unique in the
// cluster and never reused: a transaction id (session id, seq) names one
// transaction at every destination, and a session opened again, or a stale
// open replayed late, gets a new id rather than resurrecting an old one.
//
// A session records the highest seq the group accepted from it; a request at
// or below it is a retry (ErrDuplicate, answered with the first result). A
// request whose client id names no open session (never opened, opened at
// another group, or expired) is refused with ErrSessionExpired and never
// executed: the group cannot tell a retry of a request it ran from a new
// one. The client then opens a new session, and resubmits under it only a
// request it knows the group never accepted.
//
// Expiry is by log time, never by count: every tick entry advances the
// group's clock by one, and a session idle (no open, request, retry or
// refusal naming it) for Config.SessionTicks ticks expires at the tick that
// reaches that age. So a retrying client is never pushed out by others,
// however many come and go, and every replica expires the same sessions at
// the same entry. The table holds at most Config.SessionsMax sessions: an
// open past that is refused (ErrSessionsFull, a kind of multicast.ErrBusy)
// until one expires, never by evicting a live one. The leader stops ticking
// while the group is quiet (State.Quiet): log time then stands still, and
// sessions live on; the next entry wakes the ticks.
//
// Work per entry is O(1): the sessions form a list in the order they were
// last used, oldest first (each use moves one to the back), so a tick
// expires from the front and stops at the first live one.
//
// Anonymous requests (a client id with AnonymousBit set: the server gives
// one to a request that names no client) belong to no session: they are
// admitted without deduplication and take no room in the table, so a
// resubmitted anonymous request runs again. Their results are kept
// within the store's results bound (kv.Options.ResultsMax), newest first.
//
// A session's results are kept at each destination until the session
// acknowledges them: as one request is outstanding per session, a request
// with seq s says that its client received every result of the session
// below s, and each destination deletes the earlier one as it delivers
// it. The executor keeps that per destination and expires it by the
// destination's log time, the Clock the Machine hands Executor.Execute;
// package executor, Session results.

// AnonymousBit marks the client id of an anonymous request. Session ids
// never have it (SessionIndexMax).
const AnonymousBit = uint64(1) << 63

// sessionGroupBits is the part of a session id that names its group:
// enough for partition.GroupsMax groups.
const sessionGroupBits = 6

// SessionIndexMax is the highest log index whose entry can open a session:
// its id must leave AnonymousBit clear.
const SessionIndexMax = AnonymousBit>>sessionGroupBits - 1

// Defaults of the Config fields.
const (
	// SessionsMaxDefault bounds the sessions a group keeps open.
	SessionsMaxDefault = 1 << 16
	// SessionTicksDefault is how long a session lives idle: 15,000 ticks,
	// 5 minutes at the default 20 ms tick, well beyond any retry of a
	// client that is still there (a leader election, a WAN round trip).
	SessionTicksDefault = 15000
)

var (
	// ErrSessionExpired says that a request names no open session of the
	// group: it was not admitted, and never will be under that id.
	ErrSessionExpired = errors.New("group: session expired")
	// ErrSessionsFull says that a session open was refused because the
	// group keeps SessionsMax sessions already: open again later, once one
	// has expired. It wraps multicast.ErrBusy.
	ErrSessionsFull = fmt.Errorf("%w: group: sessions full", multicast.ErrBusy)
)

// SessionID returns the id of the session opened by the entry at index of
// group g's log. It panics for an index above SessionIndexMax.
func SessionID(g partition.GroupID, index uint64) uint64 {
	if index == 0 || index > SessionIndexMax || g < 0 || g >= partition.GroupsMax {
		invariants.Violated("group: session of group %d at index %d", g, index)
	}
	return index<<sessionGroupBits | uint64(g)
}

// SessionGroup returns the group a session id was opened at, and whether
// client is a session id at all (not anonymous, not reserved).
func SessionGroup(client uint64) (partition.GroupID, bool) {
	if client&AnonymousBit != 0 || client>>sessionGroupBits == 0 {
		return partition.NoGroup, false
	}
	return partition.GroupID(client & (1<<sessionGroupBits - 1)), true
}

// IsAnonymous reports whether client is the id of an anonymous request.
func IsAnonymous(client uint64) bool {
	return client&AnonymousBit != 0 && client != multicast.FlushClient
}

// session is one open session, a node of the table's list.
type session struct {
	id   uint64
	seq  uint64        // highest seq accepted
	used uint64        // log time (ticks) of its last use
	elem *list.Element // its place in the table's order
}

// sessionTable is the sessions of a group, by id, and in a list from the
// least recently used (head) to the most (tail). Since a use sets used to
// the current log time, which never decreases, the list is sorted by used.
type sessionTable struct {
	byID  map[uint64]*session
	order *list.List // of *session
}

func newSessionTable(n int) sessionTable {
	return sessionTable{byID: make(map[uint64]*session, n), order: list.New()}
}

func (t *sessionTable) len() int { return len(t.byID) }

func (t *sessionTable) get(id uint64) *session { return t.byID[id] }

// push adds s at the tail; its id must be new.
func (t *sessionTable) push(s *session) {
	if _, dup := t.byID[s.id]; dup {
		invariants.Violated("group: session %d opened twice", s.id)
	}
	t.byID[s.id] = s
	s.elem = t.order.PushBack(s)
}

// oldest returns the least recently used session, nil when there is none.
func (t *sessionTable) oldest() *session {
	if e := t.order.Front(); e != nil {
		return e.Value.(*session)
	}
	return nil
}

// touch marks s used at log time now, moving it to the tail.
func (t *sessionTable) touch(s *session, now uint64) {
	s.used = now
	t.order.MoveToBack(s.elem)
}

// expire removes the sessions idle for ticks or more at log time now, and
// returns how many.
func (t *sessionTable) expire(now, ticks uint64) int {
	n := 0
	for s := t.oldest(); s != nil && now-s.used >= ticks; s = t.oldest() {
		t.order.Remove(s.elem)
		delete(t.byID, s.id)
		n++
	}
	if invariants.Enabled {
		invariants.Hold(t.check(now))
	}
	return n
}

// check returns the first broken invariant of the table at log time now,
// nil if none: the list and the map hold the same sessions, the list
// ordered by last use, none used after now (so expiry from the head finds
// every idle one). It takes O(sessions).
func (t *sessionTable) check(now uint64) error {
	if n := t.order.Len(); n != len(t.byID) {
		return fmt.Errorf("group: session table: %d sessions listed, %d by id", n, len(t.byID))
	}
	var last uint64
	for e := t.order.Front(); e != nil; e = e.Next() {
		s := e.Value.(*session)
		switch {
		case t.byID[s.id] != s || s.elem != e:
			return fmt.Errorf("group: session table: session %d listed, not found by id or out of its place", s.id)
		case s.used < last || s.used > now:
			return fmt.Errorf("group: session table: session %d last used at %d, after one used at %d, at log time %d", s.id, s.used, last, now)
		}
		last = s.used
	}
	return nil
}

// checkSessions returns the first broken invariant of the sessions, nil
// if none: the table's own, and its bound, SessionsMax.
func (s *State) checkSessions() error {
	if n := s.sessions.len(); n > s.cfg.SessionsMax {
		return fmt.Errorf("group: %d sessions open, more than SessionsMax (%d)", n, s.cfg.SessionsMax)
	}
	return s.sessions.check(s.now)
}

// openSession opens the session of the entry at index.
func (s *State) openSession(index uint64) error {
	if s.sessions.len() >= s.cfg.SessionsMax {
		return fmt.Errorf("%w: %d sessions open at group %d (SessionsMax); one expires after %d ticks idle: open again later",
			ErrSessionsFull, s.sessions.len(), s.cfg.Self, s.cfg.SessionTicks)
	}
	if index > SessionIndexMax {
		return fmt.Errorf("%w: group: log index %d is past SessionIndexMax (%d): no session can be opened", multicast.ErrInvalid, index, SessionIndexMax)
	}
	s.sessions.push(&session{id: SessionID(s.cfg.Self, index), used: s.now})
	if invariants.Enabled {
		invariants.Hold(s.checkSessions())
	}
	return nil
}

// admit checks the session of request id and marks it used; it returns
// the session, or nil for an anonymous request.
func (s *State) admit(id multicast.MsgID) (*session, error) {
	if IsAnonymous(id.Client) {
		return nil, nil
	}
	ss := s.sessions.get(id.Client)
	if ss == nil {
		at := "never opened, or idle for " + fmt.Sprint(s.cfg.SessionTicks) + " ticks or more"
		if g, ok := SessionGroup(id.Client); !ok {
			at = "not a session id"
		} else if g != s.cfg.Self {
			at = fmt.Sprintf("opened at group %d", g)
		}
		return nil, fmt.Errorf("%w: %s: client %d has no open session at group %d (%s): not run; open a new session",
			ErrSessionExpired, id, id.Client, s.cfg.Self, at)
	}
	s.sessions.touch(ss, s.now)
	if invariants.Enabled {
		invariants.Hold(s.checkSessions())
	}
	if id.Seq <= ss.seq {
		return nil, fmt.Errorf("%w: %s (session's last accepted is %d)", ErrDuplicate, id, ss.seq)
	}
	return ss, nil
}

// Sessions returns the number of open sessions.
func (s *State) Sessions() int { return s.sessions.len() }

// LogTime returns the group's log time: the ticks applied.
func (s *State) LogTime() uint64 { return s.now }
