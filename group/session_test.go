package group

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/flexkv/flexkv/internal/wire"
	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/multicast/protocol"
)

// sessionRig is one machine of group 0 under FlexCast (the lca, which
// delivers its local requests at once) and a second replica applying the
// same entries, with the index of the last entry.
type sessionRig struct {
	t     *testing.T
	cfg   Config
	m     *Machine
	exec  *recorder
	twin  *Machine
	index uint64
}

func newSessionRig(t *testing.T, sessionsMax, ticks int) *sessionRig {
	cfg := testConfig(t, protocol.FlexCast, 0)
	cfg.SessionsMax, cfg.SessionTicks = sessionsMax, ticks
	exec := newRecorder(1)
	m, err := NewMachine(cfg, exec)
	if err != nil {
		t.Fatal(err)
	}
	twin, _ := NewMachine(cfg, newRecorder(1))
	return &sessionRig{t: t, cfg: cfg, m: m, exec: exec, twin: twin}
}

// apply applies e at the next index on both replicas and returns the
// outcome.
func (r *sessionRig) apply(e []byte) error {
	r.t.Helper()
	r.index++
	_, result, err := r.m.Apply(r.index, e)
	if err != nil {
		r.t.Fatal(err)
	}
	if _, r2, err := r.twin.Apply(r.index, e); err != nil || fmt.Sprint(r2) != fmt.Sprint(result) {
		r.t.Fatalf("entry %d: replicas disagree: %v and %v (%v)", r.index, result, r2, err)
	}
	return result
}

// open opens a session and returns its id.
func (r *sessionRig) open() uint64 {
	r.t.Helper()
	if err := r.apply(EncodeSession()); err != nil {
		r.t.Fatalf("open a session at entry %d: %v", r.index, err)
	}
	return SessionID(0, r.index)
}

func (r *sessionRig) request(client, seq uint64) error {
	return r.apply(EncodeRequest(reqMsg(client, seq, 0)))
}

// ran counts the executions of id.
func (r *sessionRig) ran(id multicast.MsgID) int {
	n := 0
	for _, e := range r.exec.executed {
		if e == id {
			n++
		}
	}
	return n
}

// TestSessionExpiredRetry: with small bounds, a retry from a session that
// expired is refused with ErrSessionExpired, and its transaction ran once.
func TestSessionExpiredRetry(t *testing.T) {
	r := newSessionRig(t, 4, 3)
	a := r.open()
	if err := r.request(a, 1); err != nil {
		t.Fatalf("first request: %v", err)
	}
	if err := r.request(a, 1); !errors.Is(err, ErrDuplicate) {
		t.Fatalf("retry of a live session: %v, want ErrDuplicate", err)
	}
	for range 2 {
		if err := r.apply(EncodeTick()); err != nil {
			t.Fatal(err)
		}
	}
	if r.m.State().Sessions() != 1 {
		t.Fatalf("%d sessions after 2 idle ticks of 3, want 1", r.m.State().Sessions())
	}
	if err := r.apply(EncodeTick()); err != nil {
		t.Fatal(err)
	}
	if n := r.m.State().Sessions(); n != 0 {
		t.Fatalf("%d sessions after 3 idle ticks, want 0 (expired)", n)
	}
	for _, seq := range []uint64{1, 2} { // the retry, and a new request
		err := r.request(a, seq)
		if !errors.Is(err, ErrSessionExpired) || !bytes.Contains([]byte(err.Error()), []byte("session expired")) {
			t.Fatalf("seq %d of an expired session: %v, want ErrSessionExpired", seq, err)
		}
	}
	id := multicast.MsgID{Client: a, Seq: 1}
	if n := r.ran(id); n != 1 {
		t.Fatalf("%s ran %d times, want once", id, n)
	}
	// A new session is a new id: the old one is not resurrected.
	b := r.open()
	if b == a {
		t.Fatalf("the new session reuses id %d", a)
	}
	if err := r.request(a, 1); !errors.Is(err, ErrSessionExpired) {
		t.Fatalf("the old session after a new one opened: %v, want ErrSessionExpired", err)
	}
	if err := r.request(b, 1); err != nil {
		t.Fatalf("the new session's first request: %v", err)
	}
}

// TestSessionChurn: many sessions come and go while one retries: it is
// never pushed out (expiry is by log time, not by count), and the table
// never holds more than SessionsMax; an open past it is refused, evicting
// none.
func TestSessionChurn(t *testing.T) {
	const ticks = 3
	r := newSessionRig(t, 2, ticks)
	a := r.open()
	if err := r.request(a, 1); err != nil {
		t.Fatal(err)
	}
	opened := 0
	for i := range 300 {
		c := r.open()
		opened++
		if err := r.request(c, 1); err != nil {
			t.Fatalf("churn %d: %v", i, err)
		}
		if err := r.apply(EncodeSession()); !errors.Is(err, ErrSessionsFull) || !errors.Is(err, multicast.ErrBusy) {
			t.Fatalf("churn %d: a third open with SessionsMax 2: %v, want ErrSessionsFull", i, err)
		}
		for range ticks {
			if err := r.apply(EncodeTick()); err != nil {
				t.Fatal(err)
			}
			if err := r.request(a, 1); !errors.Is(err, ErrDuplicate) {
				t.Fatalf("churn %d: the retrying session: %v, want ErrDuplicate", i, err)
			}
		}
		if n := r.m.State().Sessions(); n != 1 {
			t.Fatalf("churn %d: %d sessions, want 1: the idle one expired, the retrying one stays", i, n)
		}
	}
	if n := r.ran(multicast.MsgID{Client: a, Seq: 1}); n != 1 {
		t.Fatalf("the retried request ran %d times, want once", n)
	}
	if opened != 300 {
		t.Fatal("churn did not run")
	}
	if !bytes.Equal(r.m.State().AppendSnapshot(nil), r.twin.State().AppendSnapshot(nil)) {
		t.Fatal("two replicas that applied the same entries differ")
	}
}

// TestSessionSnapshot: sessions, their seqs and their ages survive a
// snapshot: a restored replica refuses the same retries, expires the same
// sessions at the same tick, and encodes as the one that never restarted.
func TestSessionSnapshot(t *testing.T) {
	r := newSessionRig(t, 8, 4)
	a, b := r.open(), r.open()
	for _, e := range [][]byte{EncodeRequest(reqMsg(a, 1, 0)), EncodeTick(), EncodeRequest(reqMsg(b, 1, 0)), EncodeTick(), EncodeRequest(reqMsg(a, 2, 0))} {
		if err := r.apply(e); err != nil {
			t.Fatal(err)
		}
	}
	snap := r.m.State().AppendSnapshot(nil)
	st, err := RestoreState(r.cfg, snap)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(st.AppendSnapshot(nil), snap) {
		t.Fatal("a restored state encodes differently")
	}
	if st.Sessions() != 2 || st.LogTime() != 2 {
		t.Fatalf("restored %d sessions at log time %d, want 2 at 2", st.Sessions(), st.LogTime())
	}
	restored, _ := NewMachine(r.cfg, r.exec)
	// The executor is kept: it is not behind the snapshot's, at 0.
	if _, err := restored.Restore(st, 0, nil); err != nil {
		t.Fatal(err)
	}
	r.twin = restored // the rig now checks the restored replica against the original
	if err := r.request(a, 2); !errors.Is(err, ErrDuplicate) {
		t.Fatalf("a's retry after the restore: %v, want ErrDuplicate", err)
	}
	if err := r.request(b, 1); !errors.Is(err, ErrDuplicate) {
		t.Fatalf("b's retry after the restore: %v, want ErrDuplicate", err)
	}
	// b was last used at log time 2 (its retry); a at 2 too. Four ticks
	// expire both, on both replicas alike.
	for range 4 {
		if err := r.apply(EncodeTick()); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.request(a, 3); !errors.Is(err, ErrSessionExpired) {
		t.Fatalf("a after 4 idle ticks: %v, want ErrSessionExpired", err)
	}
	if !bytes.Equal(r.m.State().AppendSnapshot(nil), restored.State().AppendSnapshot(nil)) {
		t.Fatal("the restored replica differs from the original")
	}
	small := r.cfg
	small.SessionsMax = 1
	if _, err := RestoreState(small, snap); err == nil {
		t.Error("a snapshot of 2 sessions restored with SessionsMax 1")
	}
}

// TestSnapshotV1: a snapshot of the count-bounded client table (version
// 1) restores, its clients as sessions last used at log time 0.
func TestSnapshotV1(t *testing.T) {
	r := newSessionRig(t, 8, 5)
	st := r.m.State()
	b := []byte{stateSnapshotV1}
	b = wire.AppendUvarint(b, 7)
	b = wire.AppendBytes(b, st.Core().(snapshotter).AppendSnapshot(nil))
	b = wire.AppendBytes(b, st.node.AppendSnapshot(nil))
	b = wire.AppendUvarint(b, 1)
	b = wire.AppendUvarint(wire.AppendUvarint(wire.AppendUvarint(b, 42), 3), 6)
	v1, err := RestoreState(r.cfg, b)
	if err != nil {
		t.Fatal(err)
	}
	if v1.Applied() != 7 || v1.Sessions() != 1 || v1.sessions.get(42) == nil || v1.sessions.get(42).seq != 3 {
		t.Fatalf("restored applied %d, %d sessions, want 7 and session 42 at seq 3", v1.Applied(), v1.Sessions())
	}
}

func TestConfigSessions(t *testing.T) {
	for _, tc := range []struct {
		max, ticks int
		want       string
	}{
		{-1, 0, "group: SessionsMax -1, want > 0 (0: 65536)"},
		{0, -1, "group: SessionTicks -1, want > 0 (0: 15000)"},
	} {
		cfg := testConfig(t, protocol.FlexCast, 0)
		cfg.SessionsMax, cfg.SessionTicks = tc.max, tc.ticks
		if err := cfg.Fill(); err == nil || err.Error() != tc.want {
			t.Errorf("SessionsMax %d, SessionTicks %d: %v, want %q", tc.max, tc.ticks, err, tc.want)
		}
	}
	cfg := testConfig(t, protocol.FlexCast, 0)
	if err := cfg.Fill(); err != nil || cfg.SessionsMax != SessionsMaxDefault || cfg.SessionTicks != SessionTicksDefault {
		t.Errorf("defaults: %v, SessionsMax %d, SessionTicks %d", err, cfg.SessionsMax, cfg.SessionTicks)
	}
}

func TestSessionIDs(t *testing.T) {
	id := SessionID(5, SessionIndexMax)
	if g, ok := SessionGroup(id); !ok || g != 5 || IsAnonymous(id) || id&AnonymousBit != 0 {
		t.Errorf("SessionID(5, max) = %#x: group %d %v, anonymous %v", id, g, ok, IsAnonymous(id))
	}
	if _, ok := SessionGroup(AnonymousBit | 9); ok || !IsAnonymous(AnonymousBit|9) {
		t.Error("an anonymous id taken for a session")
	}
	if IsAnonymous(multicast.FlushClient) {
		t.Error("the flush client is anonymous")
	}
	if _, ok := SessionGroup(3); ok {
		t.Error("client id 3 (index 0) taken for a session")
	}
}

// BenchmarkSessionRequest: one request of one of n open sessions, round
// robin, with a tick every 64 requests: the work does not grow with n.
func BenchmarkSessionRequest(b *testing.B) {
	for _, n := range []int{1 << 10, 1 << 16} {
		b.Run(fmt.Sprintf("sessions=%d", n), func(b *testing.B) {
			cfg := testConfig(b, protocol.FlexCast, 0)
			cfg.SessionsMax = n
			st, err := NewState(cfg)
			if err != nil {
				b.Fatal(err)
			}
			index := uint64(0)
			ids := make([]uint64, n)
			for i := range ids {
				index++
				if _, err := st.Apply(index, EncodeSession()); err != nil {
					b.Fatal(err)
				}
				ids[i] = SessionID(0, index)
			}
			entries := make([][]byte, n)
			for i, id := range ids {
				entries[i] = EncodeRequest(multicast.Message{ID: multicast.MsgID{Client: id, Seq: 1}, Dst: 1})
			}
			tick := EncodeTick()
			b.ResetTimer()
			for i := range b.N {
				index++
				e := entries[i%n]
				if i%64 == 63 {
					e = tick
				}
				if _, err := st.Apply(index, e); err != nil && !errors.Is(err, ErrDuplicate) {
					b.Fatal(err)
				}
			}
		})
	}
}
