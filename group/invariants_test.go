//go:build invariants

package group

import (
	"strings"
	"testing"

	"github.com/flexkv/flexkv/internal/invariants"
	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/multicast/channel"
	"github.com/flexkv/flexkv/multicast/protocol"
)

// mustViolate runs f and fails unless it panics with a broken invariant
// whose detail holds want.
func mustViolate(t *testing.T, want string, f func()) {
	t.Helper()
	v := invariants.Catch(f)
	switch {
	case v == nil:
		t.Fatalf("no invariant fired, want one about %q", want)
	case !strings.Contains(v.Detail, want):
		t.Fatalf("%v fired, want one about %q", v, want)
	}
}

// Under the invariants tag an entry is read back as it was encoded; one
// that reads back as other requests or frames panics.
func TestInvariantEntriesReadBack(t *testing.T) {
	m1, m2 := reqMsg(SessionID(0, 1), 1, 0), reqMsg(SessionID(0, 1), 2, 0, 1)
	frames := []channel.Frame{{From: 1, To: 0, Seq: 1, Payload: []byte("x")}}
	checkRequestsEntry(EncodeRequest(m1), []multicast.Message{m1})
	checkRequestsEntry(EncodeRequests([]multicast.Message{m1, m2}), []multicast.Message{m1, m2})
	checkInboundEntry(EncodeInbound(1, frames), 1, frames)

	mustViolate(t, "reads back as", func() { checkRequestsEntry(EncodeRequest(m1), []multicast.Message{m2}) })
	mustViolate(t, "reads back 1", func() { checkRequestsEntry(EncodeRequests([]multicast.Message{m1}), []multicast.Message{m1, m2}) })
	mustViolate(t, "does not read back", func() {
		checkRequestsEntry(append(EncodeRequest(m1), 0), []multicast.Message{m1})
	})
	mustViolate(t, "inbound entry", func() { checkInboundEntry(EncodeInbound(1, frames), 2, frames) })
	other := []channel.Frame{{From: 1, To: 0, Seq: 2, Payload: []byte("x")}}
	mustViolate(t, "reads back as", func() { checkInboundEntry(EncodeInbound(1, frames), 1, other) })
}

// Under the invariants tag the session table is checked after each open,
// request and tick: sessions past SessionsMax, or listed out of the order
// of their use, panic.
func TestInvariantSessionTable(t *testing.T) {
	for _, tt := range []struct {
		name, want string
		breakIt    func(s *State)
		entry      []byte
	}{
		{"past SessionsMax", "more than SessionsMax", func(s *State) { s.cfg.SessionsMax = 1 },
			EncodeRequest(reqMsg(SessionID(0, 1), 1, 0))},
		{"used after the log time", "last used at", func(s *State) { s.sessions.order.Back().Value.(*session).used = s.now + 5 },
			EncodeTick()},
		{"listed out of order", "last used at", func(s *State) {
			s.sessions.order.Back().Value.(*session).used = 0
			s.sessions.oldest().used = 1
		}, EncodeSession()},
		{"another session in the index", "listed, not found", func(s *State) {
			old := s.sessions.oldest()
			other := *old
			s.sessions.byID[old.id] = &other
		},
			EncodeTick()},
	} {
		t.Run(tt.name, func(t *testing.T) {
			st, err := NewState(testConfig(t, protocol.FlexCast, 0))
			if err != nil {
				t.Fatal(err)
			}
			index := uint64(0)
			apply := func(e []byte) {
				index++
				if _, err := st.Apply(index, e); err != nil {
					t.Fatalf("entry %d: %v", index, err)
				}
			}
			apply(EncodeSession())
			apply(EncodeTick())
			apply(EncodeSession())
			apply(EncodeRequest(reqMsg(SessionID(0, 1), 1, 0))) // a correct table passes
			tt.breakIt(st)
			mustViolate(t, tt.want, func() {
				index++
				_, _ = st.Apply(index, tt.entry)
			})
		})
	}
	mustViolate(t, "session of group", func() { SessionID(0, 0) })
}
