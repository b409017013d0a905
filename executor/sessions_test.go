package executor

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/flexkv/flexkv/api/apipb"
	"github.com/flexkv/flexkv/group"
	"github.com/flexkv/flexkv/kv"
	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/partition"
	"github.com/flexkv/flexkv/txn"
)

// sessionMsg is transaction seq of session client, in JSON (home group 0).
func (c *cluster) sessionMsg(client, seq uint64, js string) multicast.Message {
	c.t.Helper()
	m := c.msg(seq, js)
	m.ID.Client = client
	return m
}

// auxCount counts group g's committed aux records with the given kind.
func (c *cluster) auxCount(g partition.GroupID, kind byte) int {
	c.t.Helper()
	n := 0
	if err := scanAux(c.reps[g].store, []byte{kind}, []byte{kind + 1}, func(kv.KV) error { n++; return nil }); err != nil {
		c.t.Fatal(err)
	}
	return n
}

// keptResults counts the results group g's committed session records say
// they keep, and how many of them the records hold inline; it fails the
// test if one stored apart is missing, or one is stored apart that no
// record keeps.
func (c *cluster) keptResults(g partition.GroupID) (kept, inline int) {
	c.t.Helper()
	apart := 0
	err := scanAux(c.reps[g].store, []byte{auxSession}, []byte{auxSession + 1}, func(r kv.KV) error {
		ss, _, err := decodeSession(binary.BigEndian.Uint64(r.Key[1:]), r.Value)
		switch {
		case err != nil:
			return err
		case ss.kept == 0:
		case ss.inline:
			kept++
			inline++
		default:
			kept++
			apart++
			if _, found, err := c.reps[g].store.GetAux(sessionResultKey(multicast.MsgID{Client: ss.client, Seq: ss.kept})); err != nil || !found {
				c.t.Errorf("the result of c%d.%d, kept apart, is missing (%v)", ss.client, ss.kept, err)
			}
		}
		return nil
	})
	if err != nil {
		c.t.Fatal(err)
	}
	if n := c.auxCount(g, auxSessionResult); n != apart {
		c.t.Errorf("%d session results stored apart, %d kept apart by the records", n, apart)
	}
	return kept, inline
}

const addAcct = `{"then":[{"op":"add","key":"w/0001/acct","int":-5}]}`

// A session's result is kept until the session acknowledges it, however
// many other clients' results come after it; the count-bounded table of
// anonymous results drops its oldest meanwhile. A retry finds the first
// result; the session's next request deletes it, and Result then says it
// was acknowledged, also after a restart.
func TestSessionResultKeptUntilAcknowledged(t *testing.T) {
	c := newCluster(t, nil)
	c.resultsMax = 4
	c.restart(0)
	c.seed(0, map[string]string{"w/0001/acct": "100"})
	sid := group.SessionID(0, 5)
	first := c.sessionMsg(sid, 1, addAcct)
	c.deliver(0, first)
	const others = 200
	var anon []multicast.Message
	for i := range others {
		m := c.sessionMsg(group.SessionID(1, uint64(10+i)), 1, `{"then":[{"op":"add","key":"w/0001/other","int":1}]}`)
		a := c.sessionMsg(group.AnonymousBit|uint64(i), 1, `{"then":[{"op":"add","key":"w/0001/anon","int":1}]}`)
		anon = append(anon, a)
		c.deliver(0, m, a)
	}
	if c.hasResult(0, anon[0]) {
		t.Errorf("the first anonymous result is still kept, with ResultsMax 4 and %d after it", others)
	}
	if !c.hasResult(0, anon[others-1]) {
		t.Error("the last anonymous result is gone")
	}
	if got := describeResult(c.result(0, first)); got != "succeeded true: 0:add w/0001/acct=95" {
		t.Fatalf("session result after %d others: %s", 2*others, got)
	}
	// A retry is a duplicate: it finds the first result and runs nothing.
	before := c.reps[0].ex.Stats()
	c.deliver(0, first)
	if got := c.reps[0].ex.Stats().Duplicates; got != before.Duplicates+1 {
		t.Errorf("duplicates %d after a retry, want %d", got, before.Duplicates+1)
	}
	if got := describeResult(c.result(0, first)); got != "succeeded true: 0:add w/0001/acct=95" {
		t.Errorf("result after a retry: %s", got)
	}
	st := c.reps[0].ex.Stats()
	if st.Sessions != others+1 || st.SessionResults != others+1 || st.ResultsAcked != 0 {
		t.Errorf("stats %+v, want %d sessions keeping %d results, none acknowledged", st, others+1, others+1)
	}

	second := c.sessionMsg(sid, 2, addAcct)
	c.deliver(0, second)
	for range 2 {
		_, found, err := c.reps[0].ex.Result(first.ID)
		if found || !errors.Is(err, ErrAcknowledged) || !bytes.Contains([]byte(err.Error()), []byte("acknowledged")) {
			t.Errorf("result of %s after the session's next request: found %v, %v; want ErrAcknowledged", first.ID, found, err)
		}
		if got := describeResult(c.result(0, second)); got != "succeeded true: 0:add w/0001/acct=90" {
			t.Errorf("second result: %s", got)
		}
		st := c.reps[0].ex.Stats()
		if st.Sessions != others+1 || st.SessionResults != others+1 || st.ResultsAcked != 1 {
			t.Errorf("stats %+v, want %d sessions keeping %d results, 1 acknowledged", st, others+1, others+1)
		}
		if n, inline := c.keptResults(0); n != others+1 || inline != n {
			t.Errorf("%d session results stored, %d of them inline; want %d, all inline", n, inline, others+1)
		}
		c.restart(0)
	}
}

// Sessions expire by the group's log time: at the first entry executed at
// SessionTicks or more after their last use. Their results join the
// count-bounded table, where newer results push them out.
func TestSessionResultsExpire(t *testing.T) {
	c := newCluster(t, nil)
	c.resultsMax = 2
	c.restart(0)
	ex := c.reps[0].ex
	run := func(now uint64, ms ...multicast.Message) {
		t.Helper()
		r := c.reps[0]
		r.index++
		if _, err := ex.Execute(r.index, group.Clock{Now: now, SessionTicks: 10}, ms, nil); err != nil {
			t.Fatal(err)
		}
	}
	a := c.sessionMsg(group.SessionID(0, 1), 1, addAcct)
	b := c.sessionMsg(group.SessionID(0, 2), 1, addAcct)
	run(0, a)
	run(5, b)
	run(9)
	if !c.hasResult(0, a) || !c.hasResult(0, b) {
		t.Fatal("a result expired early")
	}
	run(10)
	if got := describeResult(c.result(0, a)); got != "succeeded true: 0:add w/0001/acct=-5" {
		t.Errorf("the result of an expired session, in the count-bounded table: %s", got)
	}
	if _, _, ok, err := ex.SessionState(a.ID.Client); ok || err != nil {
		t.Errorf("expired session's record: kept %v, %v", ok, err)
	}
	if !c.hasResult(0, b) {
		t.Error("the result of a session idle for less than SessionTicks is gone")
	}
	st := ex.Stats()
	if st.SessionsExpired != 1 || st.Sessions != 1 || st.SessionResults != 1 {
		t.Errorf("stats %+v, want 1 expired, 1 kept with its result", st)
	}
	// Anonymous results push it out.
	for i := range 2 {
		run(10, c.sessionMsg(group.AnonymousBit|uint64(i), 1, addAcct))
	}
	if c.hasResult(0, a) {
		t.Error("the expired session's result outlived ResultsMax newer results")
	}
	// An Execute without a clock keeps the log time: nothing expires.
	c.deliver(0)
	if !c.hasResult(0, b) {
		t.Error("Execute without a clock expired a session")
	}
	run(100)
	if n, _ := c.keptResults(0); c.auxCount(0, auxSession) != 0 || n != 0 {
		t.Error("records left after every session expired")
	}
}

// Churning sessions never keep more than ResultSessionsMax records, each
// with at most one result; the newest sessions' last results survive.
func TestSessionResultsBounded(t *testing.T) {
	c := newCluster(t, nil)
	r := c.reps[0]
	if err := r.store.Close(); err != nil {
		t.Fatal(err)
	}
	s, err := kv.Open(kv.Options{Dir: r.dir, NoSync: true, ResultsMax: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const bound = 8
	ex, err := NewExecutor(Config{Store: s, Partitions: c.pm, Topology: c.top, Self: 0, ResultSessionsMax: bound})
	if err != nil {
		t.Fatal(err)
	}
	r.store, r.ex = s, ex
	const sessions, seqs = 50, 3
	var last []multicast.Message
	for i := range sessions {
		sid := group.SessionID(1, uint64(i+1))
		for seq := uint64(1); seq <= seqs; seq++ {
			m := c.sessionMsg(sid, seq, addAcct)
			c.deliver(0, m)
			if seq == seqs {
				last = append(last, m)
			}
		}
		if n, k := c.auxCount(0, auxSession), c.auxCount(0, auxSessionResult); n > bound || k > 0 {
			t.Fatalf("after %d sessions: %d records, %d results stored apart; bound %d, none apart", i+1, n, k, bound)
		}
		k, _ := c.keptResults(0)
		if n := c.auxCount(0, auxSession); n > bound || k > n {
			t.Fatalf("after %d sessions: %d records, %d results stored; bound %d", i+1, n, k, bound)
		}
	}
	st := ex.Stats()
	if st.Sessions != bound || st.SessionResults != bound || st.SessionsEvicted != sessions-bound || st.ResultsAcked != sessions*(seqs-1) {
		t.Errorf("stats %+v, want %d sessions with their results, %d evicted, %d acknowledged", st, bound, sessions-bound, sessions*(seqs-1))
	}
	// The evicted sessions' last results went to the count-bounded
	// table, which keeps the 4 latest.
	for i, m := range last {
		if kept := c.hasResult(0, m); kept != (i >= sessions-bound-4) {
			t.Errorf("last result of session %d kept: %v", i, kept)
		}
	}
	if _, err := NewExecutor(Config{Store: s, Partitions: c.pm, Topology: c.top, ResultSessionsMax: -1}); err == nil {
		t.Error("a negative ResultSessionsMax was accepted")
	}
}

// A piece that runs after a later delivery of its session (it waited for a
// vote; its client moved on) was acknowledged before its result existed:
// the result goes to the count-bounded table, and the session keeps its
// latest result alone.
func TestSessionAckBeforeResult(t *testing.T) {
	c := newCluster(t, nil)
	c.seed(2, map[string]string{"w/0004/flag": "on"})
	sid := group.SessionID(0, 9)
	waits := c.sessionMsg(sid, 1, remoteCompare)
	later := c.sessionMsg(sid, 2, `{"then":[{"op":"put","key":"w/0002/y","value":"1"}]}`)
	c.deliver(0, waits)
	c.deliver(0, later)
	if !c.hasResult(0, later) {
		t.Fatal("want the later request run ahead of the one waiting for its vote")
	}
	// The client moved on: it acknowledged the one still waiting.
	if _, found, err := c.reps[0].ex.Result(waits.ID); found || !errors.Is(err, ErrAcknowledged) {
		t.Errorf("result of the waiting request: found %v, %v; want ErrAcknowledged", found, err)
	}
	c.deliver(2, waits)
	c.settle()
	if got := describeResult(c.result(0, waits)); got != "succeeded true: 0:put w/0001/x" {
		t.Errorf("late result: %s", got)
	}
	delivered, kept, ok, err := c.reps[0].ex.SessionState(sid)
	if err != nil || !ok || delivered != 2 || kept != 2 {
		t.Errorf("session state: delivered %d, kept %d, %v, %v; want 2, 2", delivered, kept, ok, err)
	}
	if st := c.reps[0].ex.Stats(); st.SessionResults != 1 {
		t.Errorf("%d session results, want 1", st.SessionResults)
	}
}

// A snapshot carries the session records and their results: the restored
// replica answers, acknowledges and writes the same bytes as the original.
func TestSessionResultsInSnapshot(t *testing.T) {
	c := newCluster(t, nil)
	sid := group.SessionID(0, 3)
	first := c.sessionMsg(sid, 1, addAcct)
	c.deliver(0, first, c.sessionMsg(group.SessionID(2, 4), 1, addAcct))
	stream := c.snapshot(0)
	index := c.reps[0].ex.AppliedIndex()
	twin := newCluster(t, nil)
	r := twin.reps[0]
	if err := r.ex.Restore(bytes.NewReader(stream), index); err != nil {
		t.Fatal(err)
	}
	r.index = index
	if got, want := r.ex.Stats(), c.reps[0].ex.Stats(); got != want {
		t.Errorf("restored stats %+v, want %+v", got, want)
	}
	if got := describeResult(twin.result(0, first)); got != "succeeded true: 0:add w/0001/acct=-5" {
		t.Errorf("restored result: %s", got)
	}
	second := c.sessionMsg(sid, 2, addAcct)
	for _, cl := range []*cluster{c, twin} {
		cl.deliver(0, second)
		if _, _, err := cl.reps[0].ex.Result(first.ID); !errors.Is(err, ErrAcknowledged) {
			t.Errorf("after the next request: %v, want ErrAcknowledged", err)
		}
	}
	if !bytes.Equal(twin.snapshot(0), c.snapshot(0)) {
		t.Error("the original and the restored replica differ after the same entry")
	}
}

// The session record's decoder reads what the executor writes, version 1
// records included, and refuses the rest.
func TestSessionRecordCorrupt(t *testing.T) {
	good := (&session{delivered: 3, used: 2, touch: 7, kept: 3}).append(nil, nil)
	if ss, r, err := decodeSession(9, good); err != nil || ss.delivered != 3 || ss.kept != 3 || ss.touch != 7 || ss.used != 2 || ss.inline || r != nil {
		t.Fatalf("decode: %+v, %x, %v", ss, r, err)
	}
	rec := appendResultRecord(nil, 42, &txn.PieceResult{Succeeded: true})
	withResult := (&session{delivered: 3, used: 2, touch: 7, kept: 3}).append(nil, rec)
	if ss, r, err := decodeSession(9, withResult); err != nil || ss.kept != 3 || !ss.inline || !bytes.Equal(r, rec) {
		t.Fatalf("decode with an inline result: %+v, %x, %v", ss, r, err)
	}
	// Version 1: the fields up to kept; a kept result is stored apart.
	v1 := append([]byte{sessionRecordVersionV1}, good[1:len(good)-1]...)
	if ss, r, err := decodeSession(9, v1); err != nil || ss.delivered != 3 || ss.kept != 3 || ss.touch != 7 || ss.used != 2 || ss.inline || r != nil {
		t.Fatalf("decode version 1: %+v, %x, %v", ss, r, err)
	}
	tooLong := (&session{delivered: 3, kept: 3}).append(nil, append(rec, make([]byte, sessionResultInlineMax)...))
	for _, b := range [][]byte{
		nil, {3, 0, 0, 0, 0, 0}, good[:len(good)-1], append(good, 0), withResult[:len(withResult)-1], append(v1, 0), tooLong,
		(&session{delivered: 3, kept: 2}).append(nil, nil),
		(&session{delivered: 3}).append(nil, rec),
		(&session{delivered: 3, kept: 3}).append(nil, []byte{9}), // not a result record
	} {
		if _, _, err := decodeSession(9, b); err == nil {
			t.Errorf("decoded %x", b)
		}
	}
}

// A result too large for its session's record is stored apart, found by
// a retry, acknowledged like one held inline and, when its session
// expires, handed to the count-bounded results; a version 1 record, whose
// kept result is always apart, is read, and handed over when it expires.
func TestSessionResultStoredApart(t *testing.T) {
	c := newCluster(t, nil)
	c.resultsMax = 4
	c.restart(0)
	big := strings.Repeat("v", 2*sessionResultInlineMax)
	c.seed(0, map[string]string{"w/0001/big": big, "w/0001/acct": "100"})
	const getBig = `{"then":[{"op":"get","key":"w/0001/big"}]}`
	wantBig := "succeeded true: 0:get w/0001/big=" + big
	ex := c.reps[0].ex
	now := uint64(0)
	run := func(ms ...multicast.Message) {
		t.Helper()
		r := c.reps[0]
		r.index++
		now++
		if _, err := ex.Execute(r.index, group.Clock{Now: now, SessionTicks: 10}, ms, nil); err != nil {
			t.Fatal(err)
		}
	}
	sid := group.SessionID(1, 7)
	first := c.sessionMsg(sid, 1, getBig)
	run(first)
	if n, inline := c.keptResults(0); n != 1 || inline != 0 {
		t.Fatalf("%d results kept, %d inline; want 1 stored apart", n, inline)
	}
	// A retry finds it (the dedupe reads the record apart).
	run(first)
	if st := ex.Stats(); st.Duplicates != 1 || st.Executed != 1 {
		t.Errorf("stats %+v after a retry, want 1 executed, 1 duplicate", st)
	}
	if got := describeResult(c.result(0, first)); got != wantBig {
		t.Fatalf("result: %.80s", got)
	}
	// The next request acknowledges it; its own result is small.
	second := c.sessionMsg(sid, 2, addAcct)
	run(second)
	if n, inline := c.keptResults(0); n != 1 || inline != 1 {
		t.Fatalf("after the next request: %d results kept, %d inline; want 1 inline", n, inline)
	}
	if _, _, err := ex.Result(first.ID); !errors.Is(err, ErrAcknowledged) {
		t.Errorf("result of the first request: %v, want ErrAcknowledged", err)
	}

	// A large result again, its session dropped at expiry: the result
	// joins the count-bounded table.
	// expire lets every session expire, and checks that m's result went
	// to the count-bounded table.
	expire := func(m multicast.Message, what string) {
		t.Helper()
		now += 10
		run()
		if n, _ := c.keptResults(0); n != 0 || c.auxCount(0, auxSession) != 0 {
			t.Fatalf("after %s expired: %d results kept, %d records", what, n, c.auxCount(0, auxSession))
		}
		if got := describeResult(c.result(0, m)); got != wantBig {
			t.Fatalf("the result of %s, expired: %.80s", what, got)
		}
	}
	third := c.sessionMsg(sid, 3, getBig)
	run(third)
	expire(third, "the session")

	// Version 1: a session whose record keeps a large result, rewritten
	// as version 1 wrote it; after a restart, the result is read through
	// it, and handed over when the session expires.
	sid2 := group.SessionID(1, 8)
	fourth := c.sessionMsg(sid2, 1, getBig)
	run(fourth)
	st := c.reps[0].store
	rec, found, err := st.GetAux(sessionKey(sid2))
	if err != nil || !found || rec[0] != sessionRecordVersion || rec[len(rec)-1] != 0 {
		t.Fatalf("session record %x, %v, %v; want a version %d record with no inline result", rec, found, err, sessionRecordVersion)
	}
	b := st.NewBatch()
	if err := b.PutAux(sessionKey(sid2), append([]byte{sessionRecordVersionV1}, rec[1:len(rec)-1]...)); err != nil {
		t.Fatal(err)
	}
	if err := st.CommitAux(b); err != nil {
		t.Fatal(err)
	}
	b.Close()
	c.restart(0)
	ex = c.reps[0].ex
	if got := describeResult(c.result(0, fourth)); got != wantBig {
		t.Fatalf("result kept by a version 1 record: %.80s", got)
	}
	run(fourth) // a retry: found through the version 1 record
	if st := ex.Stats(); st.Duplicates != 2 {
		t.Errorf("duplicates %d after a retry, want 2", st.Duplicates)
	}
	expire(fourth, "the version 1 session")
}

// An entry that rewrites a session record keeping an inline result it did
// not make (the delivery of an older request of the session, which the
// client gave up on) writes the result back into the record; the older
// request's result goes to the count-bounded results.
func TestSessionInlineResultKeptAcrossEntries(t *testing.T) {
	c := newCluster(t, nil)
	c.seed(0, map[string]string{"w/0001/acct": "100"})
	sid := group.SessionID(1, 9)
	second := c.sessionMsg(sid, 2, addAcct)
	c.deliver(0, second)
	first := c.sessionMsg(sid, 1, addAcct)
	c.deliver(0, first)
	for range 2 {
		if n, inline := c.keptResults(0); n != 1 || inline != 1 {
			t.Fatalf("%d results kept, %d inline; want 1 inline", n, inline)
		}
		if got := describeResult(c.result(0, second)); got != "succeeded true: 0:add w/0001/acct=95" {
			t.Errorf("the kept result: %s", got)
		}
		if got := describeResult(c.result(0, first)); got != "succeeded true: 0:add w/0001/acct=90" {
			t.Errorf("the older request's result: %s", got)
		}
		delivered, kept, ok, err := c.reps[0].ex.SessionState(sid)
		if err != nil || !ok || delivered != 2 || kept != 2 {
			t.Errorf("session state: delivered %d, kept %d, %v, %v; want 2, 2", delivered, kept, ok, err)
		}
		c.restart(0)
	}
	// The next request acknowledges it.
	c.deliver(0, c.sessionMsg(sid, 3, addAcct))
	if _, _, err := c.reps[0].ex.Result(second.ID); !errors.Is(err, ErrAcknowledged) {
		t.Errorf("result of the acknowledged request: %v, want ErrAcknowledged", err)
	}
}

func FuzzDecodeSession(f *testing.F) {
	f.Add((&session{delivered: 3, used: 2, touch: 7, kept: 3}).append(nil, nil))
	f.Add((&session{delivered: 1 << 60}).append(nil, nil))
	f.Add((&session{delivered: 3, kept: 3}).append(nil, appendResultRecord(nil, 7, &txn.PieceResult{Succeeded: true})))
	f.Add([]byte{sessionRecordVersionV1, 3, 2, 7, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		ss, r, err := decodeSession(5, b)
		if err != nil {
			if !corrupt(err) {
				t.Fatalf("error %v is not about corruption", err)
			}
			return
		}
		if ss.inline != (r != nil) {
			t.Fatalf("%+v decoded with inline result %x", ss, r)
		}
		if ss2, r2, err := decodeSession(5, ss.append(nil, r)); err != nil || !bytes.Equal(ss2.append(nil, r2), ss.append(nil, r)) {
			t.Fatalf("%+v encodes to a record that decodes to %+v, %v", ss, ss2, err)
		}
	})
}

// The server's status text for an acknowledged result is the executor's.
func TestAcknowledgedText(t *testing.T) {
	if !strings.Contains(ErrAcknowledged.Error(), apipb.ResultAcknowledgedText) {
		t.Errorf("ErrAcknowledged %q does not contain apipb.ResultAcknowledgedText %q", ErrAcknowledged, apipb.ResultAcknowledgedText)
	}
	if _, err := decodeMeta([]byte{4}); err == nil || !strings.Contains(err.Error(), "version 4, want 5") {
		t.Errorf("a version 4 meta record: %v, want an error naming the versions", err)
	}
}

// Sessions touched and evicted within one entry: each record changed in
// the entry is stored once, when it finishes, and an evicted one is not
// stored again after its delete (a restart checks the records against the
// meta record's count).
func TestSessionsEvictedInTheEntryThatTouchedThem(t *testing.T) {
	c := newCluster(t, nil)
	r := c.reps[0]
	if err := r.store.Close(); err != nil {
		t.Fatal(err)
	}
	s, err := kv.Open(kv.Options{Dir: r.dir, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	const bound = 4
	ex, err := NewExecutor(Config{Store: s, Partitions: c.pm, Topology: c.top, Self: 0, ResultSessionsMax: bound})
	if err != nil {
		t.Fatal(err)
	}
	r.store, r.ex = s, ex
	var entry []multicast.Message
	for i := range 3 * bound {
		entry = append(entry, c.sessionMsg(group.SessionID(1, uint64(i+1)), 1, addAcct))
	}
	c.deliver(0, entry...)
	k, _ := c.keptResults(0)
	if n := c.auxCount(0, auxSession); n != bound || k != bound {
		t.Fatalf("%d session records and %d results stored, want %d of each", n, k, bound)
	}
	if st := ex.Stats(); st.Sessions != bound || st.SessionsEvicted != 2*bound {
		t.Errorf("stats %+v, want %d sessions, %d evicted", st, bound, 2*bound)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err = kv.Open(kv.Options{Dir: r.dir, NoSync: true}); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := NewExecutor(Config{Store: s, Partitions: c.pm, Topology: c.top, Self: 0, ResultSessionsMax: bound}); err != nil {
		t.Fatalf("reopening after the entry: %v", err)
	}
}
