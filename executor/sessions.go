package executor

import (
	"bytes"
	"cmp"
	"container/list"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/flexkv/flexkv/group"
	"github.com/flexkv/flexkv/internal/invariants"
	"github.com/flexkv/flexkv/internal/wire"
	"github.com/flexkv/flexkv/kv"
	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/txn"
)

// Session results (DESIGN 6, client sessions): the result of a session's
// transaction is kept at each of its destinations until the client
// acknowledges it or the session expires there, never pushed out by other
// clients' results.
//
// The acknowledgement travels with the requests themselves. A session has
// at most one request outstanding (the client contract, group.State's
// request), and a client sends its next request only once it has every
// answer of the previous one, or has given up on it; so a request with
// seq s says "every result of this session below s received". Its
// destinations learn it as they deliver it: the delivery of (session, s)
// deletes, in the batch of the entry that delivers it, the session's result
// kept here, which is of a seq below s. No message, field or log entry is
// added for it, and every replica of every destination sees the
// acknowledgement at the same point of its delivery order. The result of a
// session's last request here is acknowledged by its next request to this
// group, or by the session's expiry here. A client that breaks the
// contract (sends s+1 before it has every answer of s) only loses answers:
// Result then says ErrAcknowledged (also for a piece of s still waiting
// for its votes: its client moved on); nothing runs twice, as the entry
// group deduplicates by session, not by result.
//
// Each destination keeps a record per session it delivered from (keyed by
// the session id, unique in the cluster: group.SessionID): the highest seq
// delivered, the log time it was last used (a delivery, or a result
// stored), and the seq of the result kept, if any. Records expire by this
// group's log time (the group.Clock that the machine passes to Execute): one idle
// for SessionTicks or more is dropped at the next entry executed, so every
// replica drops the same ones at the same entry; between executions
// nothing is stored, so nothing grows. The table holds at most
// Config.ResultSessionsMax records: opening one past that drops the least
// recently used record (Stats.SessionsEvicted), a safety valve that a
// cluster sized as configured does not reach (every entry group keeps at
// most its SessionsMax sessions open, and an idle one expires here too,
// after SessionTicks of this group's log time). A dropped record's unacknowledged result leaves the
// session table for kv's count-bounded results (kv.Options.ResultsMax),
// where newer results push it out: its session is gone, so nothing will
// acknowledge it, and a client that still awaits it (one that waited out a
// partition longer than the session lifetime) may yet find it there, as
// before sessions kept results; memory stays bounded by ResultsMax.
//
// A session keeps at most one result here: the result of seq s is kept only
// if s is still the highest seq delivered when its piece runs. A piece can
// run after a later delivery of its session (it waited for votes, and the
// client gave up on it and moved on): its acknowledgement came first, and
// its result goes to the count-bounded table of kv (kv.Options.ResultsMax)
// with those of anonymous requests, where Await may still find it for a
// while. So memory is bounded by ResultSessionsMax records and as many
// results, plus ResultsMax others.
//
// A result record of at most sessionResultInlineMax bytes (every gTPC-C
// result, a put's, most transactions') is kept inside its session's record,
// which the entry writes anyway: keeping and acknowledging it write no key
// of their own. A larger one is an aux record of its own. The session
// table holds no result in memory between entries: an entry that rewrites
// a record keeping an inline result it did not make (a duplicate delivery)
// reads the result back from the record first.
//
// Records and results are aux records of the store, written in the batch
// of the entry that changes them: a restart resumes them with the applied
// index (entries at or below it are not executed again, so nothing is
// deleted twice or brought back), and a snapshot carries them in its aux
// section. Re-submission needs no result: a session's entry group refuses
// a request at or below the highest seq it accepted, so an acknowledged id
// is never delivered again.

// Defaults and bounds of Config.ResultSessionsMax.
const (
	// ResultSessionsDefault is four times group.SessionsMaxDefault: the
	// sessions of four entry groups' full tables.
	ResultSessionsDefault = 4 * group.SessionsMaxDefault
	// ResultSessionsMin is the least ResultSessionsMax.
	ResultSessionsMin = 1
)

// ErrAcknowledged says that a transaction's result is no longer kept:
// its session sent a later request to the group, which acknowledged every
// result below it (see Session results).
var ErrAcknowledged = errors.New("txn: result acknowledged")

// The aux records of sessions:
//
//	'c' client (8 B BE)               -> session record
//	'r' client (8 B BE) seq (8 B BE)  -> the result record kept for it,
//	                                     unless the session record holds it
const (
	auxSession       byte = 'c'
	auxSessionResult byte = 'r'
)

// sessionResultInlineMax is the largest result record a session record
// holds; a larger one is stored apart (see Session results). It is part of
// the stored format: every replica of a group must have the same.
const sessionResultInlineMax = 1024

func sessionKey(client uint64) []byte {
	return binary.BigEndian.AppendUint64([]byte{auxSession}, client)
}

func sessionResultKey(id multicast.MsgID) []byte {
	k := binary.BigEndian.AppendUint64([]byte{auxSessionResult}, id.Client)
	return binary.BigEndian.AppendUint64(k, id.Seq)
}

// isSession reports whether id belongs to a session, whose results are
// kept until acknowledged; anonymous (and flush) ids are not.
func isSession(id multicast.MsgID) bool {
	_, ok := group.SessionGroup(id.Client)
	return ok
}

// session is the record of one session at this group, a node of the
// table's list.
type session struct {
	client    uint64
	delivered uint64 // highest seq delivered here
	used      uint64 // log time of its last use
	touch     uint64 // order of its last use (execMeta.touchNext): the list's order
	kept      uint64 // seq of the result kept, 0 if none
	// inline: the session record holds the kept result (else it is
	// stored apart, if one is kept).
	inline bool
	// result is the inline result's record while the execution in
	// progress has it at hand (setResult made it), for storeSessions; nil
	// otherwise.
	result []byte
	elem   *list.Element // its place in the table's order
	// touched: changed by the execution in progress, which stores it
	// once, when it finishes (storeSessions).
	touched bool
}

// The session record: version (byte), then delivered, used, touch and kept
// (uvarints); since version 2, then the kept result's record if the
// session record holds it, length-prefixed (a uvarint), an empty one if it
// does not (no result kept, or it is stored apart: result records are never
// empty). A version 1 record (without it: a kept result is stored apart)
// is read as such.
const (
	sessionRecordVersion   = 2
	sessionRecordVersionV1 = 1
)

// append appends the record of s, whose inline result, if it keeps one,
// is result.
func (s *session) append(b []byte, result []byte) []byte {
	b = append(b, sessionRecordVersion)
	b = wire.AppendUvarint(b, s.delivered)
	b = wire.AppendUvarint(b, s.used)
	b = wire.AppendUvarint(b, s.touch)
	b = wire.AppendUvarint(b, s.kept)
	b = wire.AppendUvarint(b, uint64(len(result)))
	return append(b, result...)
}

// checkSessionRecord asserts that the session record rec reads back as s
// with its inline result result: what a restart, Result and SessionState
// read is the record as the table holds it.
func checkSessionRecord(s *session, result, rec []byte) {
	got, inline, err := decodeSession(s.client, rec)
	switch {
	case err != nil:
		invariants.Violated("executor: session record of client %d does not read back: %v", s.client, err)
	case got.delivered != s.delivered || got.used != s.used || got.touch != s.touch || got.kept != s.kept || got.inline != s.inline:
		invariants.Violated("executor: session record of client %d (delivered %d, used %d, touch %d, kept %d, inline %v) reads back as (%d, %d, %d, %d, %v)",
			s.client, s.delivered, s.used, s.touch, s.kept, s.inline, got.delivered, got.used, got.touch, got.kept, got.inline)
	case !bytes.Equal(inline, result):
		invariants.Violated("executor: session record of client %d: inline result of %d bytes reads back as %d bytes", s.client, len(result), len(inline))
	}
}

// decodeSession decodes the session record b of client, and returns its
// inline result too (nil if it holds none), which aliases b.
func decodeSession(client uint64, b []byte) (*session, []byte, error) {
	d := wire.NewDecoder(b)
	v := d.Byte()
	if d.Err() == nil && v != sessionRecordVersion && v != sessionRecordVersionV1 {
		d.Fail("session record version %d, want %d or %d", v, sessionRecordVersionV1, sessionRecordVersion)
	}
	s := &session{client: client, delivered: d.Uvarint(), used: d.Uvarint(), touch: d.Uvarint(), kept: d.Uvarint()}
	var result []byte
	if v == sessionRecordVersion {
		switch r := d.Bytes(); {
		case len(r) > sessionResultInlineMax:
			d.Fail("inline result of %d bytes, more than %d", len(r), sessionResultInlineMax)
		case len(r) > 0:
			if _, err := resultDigest(r); err != nil {
				d.Fail("inline result: %v", err)
			}
			result = r[:len(r):len(r)]
		}
	}
	if err := d.Finish(); err != nil {
		return nil, nil, fmt.Errorf("txn: session record of client %d: %w", client, err)
	}
	s.inline = result != nil
	switch {
	case s.kept != 0 && s.kept != s.delivered:
		return nil, nil, fmt.Errorf("txn: session record of client %d: %w: result of seq %d kept, the highest delivered is %d", client, kv.ErrCorrupt, s.kept, s.delivered)
	case s.kept == 0 && s.inline:
		return nil, nil, fmt.Errorf("txn: session record of client %d: %w: an inline result and no seq kept", client, kv.ErrCorrupt)
	}
	return s, result, nil
}

// sessionTable is the session records, by client, and in a list from the
// least recently used (head) to the most (tail). Each use takes the next
// touch number and moves its record to the tail, so the list is sorted by
// touch, and by used, since log time never decreases: it is rebuilt in the
// same order from the stored records (load).
type sessionTable struct {
	byID  map[uint64]*session
	order *list.List // of *session
}

func newSessionTable() *sessionTable {
	return &sessionTable{byID: map[uint64]*session{}, order: list.New()}
}

func (t *sessionTable) len() int { return len(t.byID) }

// check returns the first broken invariant of the table, nil if none: the
// list and the map hold the same records, the list in increasing touch
// and non-decreasing log time (so expiry from its head and a restart's
// rebuild by touch agree), each result kept its session's latest delivery,
// and no record touched outside an execution. It takes O(records).
func (t *sessionTable) check() error {
	if n := t.order.Len(); n != len(t.byID) {
		return fmt.Errorf("executor: session table: %d records listed, %d by id", n, len(t.byID))
	}
	var prev *session
	for e := t.order.Front(); e != nil; e = e.Next() {
		ss := e.Value.(*session)
		switch {
		case t.byID[ss.client] != ss:
			return fmt.Errorf("executor: session table: client %d listed, not found by id", ss.client)
		case ss.elem != e:
			return fmt.Errorf("executor: session table: client %d does not know its place in the list", ss.client)
		case prev != nil && (ss.touch <= prev.touch || ss.used < prev.used):
			return fmt.Errorf("executor: session table: client %d (touch %d, used %d) listed after client %d (touch %d, used %d)",
				ss.client, ss.touch, ss.used, prev.client, prev.touch, prev.used)
		case ss.kept != 0 && ss.kept != ss.delivered:
			return fmt.Errorf("executor: session table: client %d keeps the result of seq %d, delivered %d", ss.client, ss.kept, ss.delivered)
		case ss.kept == 0 && (ss.inline || ss.result != nil):
			return fmt.Errorf("executor: session table: client %d keeps no result, inline %v", ss.client, ss.inline)
		case ss.touched:
			return fmt.Errorf("executor: session table: client %d marked touched between executions", ss.client)
		}
		prev = ss
	}
	return nil
}

// add puts s, new, at the tail.
func (t *sessionTable) add(s *session) {
	t.byID[s.client] = s
	s.elem = t.order.PushBack(s)
}

// remove takes s out.
func (t *sessionTable) remove(s *session) {
	t.order.Remove(s.elem)
	delete(t.byID, s.client)
}

// oldest returns the least recently used record, nil when there is none.
func (t *sessionTable) oldest() *session {
	if e := t.order.Front(); e != nil {
		return e.Value.(*session)
	}
	return nil
}

// loadSessions reads the session records back from the store; the caller
// checks their number against the meta record.
func loadSessions(s *kv.Store) (*sessionTable, uint64, error) {
	var recs []*session
	kept := uint64(0)
	err := scanAux(s, []byte{auxSession}, []byte{auxSession + 1}, func(r kv.KV) error {
		if len(r.Key) != 9 {
			return fmt.Errorf("%w: session record key %x", kv.ErrCorrupt, r.Key)
		}
		ss, _, err := decodeSession(binary.BigEndian.Uint64(r.Key[1:]), r.Value)
		if err != nil {
			return err
		}
		if ss.kept != 0 {
			kept++
		}
		recs = append(recs, ss)
		return nil
	})
	if err != nil {
		return nil, 0, err
	}
	slices.SortFunc(recs, func(a, b *session) int { return cmp.Compare(a.touch, b.touch) })
	t := newSessionTable()
	for i, ss := range recs {
		if i > 0 && (ss.touch == recs[i-1].touch || ss.used < recs[i-1].used) {
			return nil, 0, fmt.Errorf("%w: session records of clients %d and %d out of order (touch %d, %d; used %d, %d)",
				kv.ErrCorrupt, recs[i-1].client, ss.client, recs[i-1].touch, ss.touch, recs[i-1].used, ss.used)
		}
		t.add(ss)
	}
	if invariants.Enabled {
		invariants.Hold(t.check())
	}
	return t, kept, nil
}

// touchSession marks ss used now, moving it to the tail; the execution
// stores it when it finishes. A delivery and the result of a session in
// one entry change its record twice: it is written once.
func (x *execution) touchSession(ss *session) {
	t := x.e.sessions
	ss.used, ss.touch = x.now, x.meta.touchNext
	x.meta.touchNext++
	t.order.MoveToBack(ss.elem)
	if !ss.touched {
		ss.touched = true
		x.touched = append(x.touched, ss)
	}
}

// storeSessions stores the records the execution touched and did not
// drop (dropSession deletes the record of one it drops), and lets go of
// the inline results they hold.
func (x *execution) storeSessions() error {
	t := x.e.sessions
	for _, ss := range x.touched {
		ss.touched = false
		if t.byID[ss.client] != ss {
			continue
		}
		result, err := x.inlineResult(ss)
		if err != nil {
			return err
		}
		x.record = ss.append(x.record[:0], result) // PutAux copies it
		if invariants.Enabled {
			checkSessionRecord(ss, result, x.record)
		}
		if err := x.b.PutAux(sessionKey(ss.client), x.record); err != nil {
			return err
		}
		ss.result = nil
	}
	x.touched = x.touched[:0]
	return nil
}

// dropSession deletes ss, and hands the result it keeps to kv's
// count-bounded results.
func (x *execution) dropSession(ss *session) error {
	t := x.e.sessions
	if ss.kept != 0 {
		id := multicast.MsgID{Client: ss.client, Seq: ss.kept}
		rec, found, err := x.keptResult(ss)
		switch {
		case err != nil:
			return err
		case !found:
			return fmt.Errorf("txn: %w: the result of %s kept by its session is missing", kv.ErrCorrupt, id)
		}
		if err := x.b.SetResult(id.String(), rec); err != nil {
			return err
		}
		if err := x.dropKept(ss); err != nil {
			return err
		}
	}
	t.remove(ss)
	x.meta.sessions--
	return x.b.DeleteAux(sessionKey(ss.client))
}

// dropKept deletes the result ss keeps, if any; the caller stores ss (or
// deletes it), which drops an inline result.
func (x *execution) dropKept(ss *session) error {
	if ss.kept == 0 {
		return nil
	}
	if !ss.inline {
		if err := x.b.DeleteAux(sessionResultKey(multicast.MsgID{Client: ss.client, Seq: ss.kept})); err != nil {
			return err
		}
	}
	ss.kept, ss.inline, ss.result = 0, false, nil
	x.meta.sessionResults--
	return nil
}

// expireSessions drops the sessions idle for SessionTicks or more at the
// entry's log time, oldest first (a clock of no SessionTicks expires
// none: Execute without a clock).
func (x *execution) expireSessions(ticks uint64) error {
	t := x.e.sessions
	for ss := t.oldest(); ticks > 0 && ss != nil && x.now-ss.used >= ticks; ss = t.oldest() {
		if err := x.dropSession(ss); err != nil {
			return err
		}
		x.meta.sessionsExpired++
	}
	return nil
}

// delivered records the delivery of session id here: a seq above the
// highest delivered acknowledges the result kept, which is deleted.
func (x *execution) delivered(id multicast.MsgID) error {
	e := x.e
	t := e.sessions
	ss := t.byID[id.Client]
	if ss == nil {
		if t.len() >= e.cfg.ResultSessionsMax {
			if err := x.dropSession(t.oldest()); err != nil {
				return err
			}
			x.meta.sessionsEvicted++
		}
		ss = &session{client: id.Client}
		t.add(ss)
		x.meta.sessions++
	}
	if id.Seq > ss.delivered {
		if ss.kept != 0 {
			if err := x.dropKept(ss); err != nil {
				return err
			}
			x.meta.resultsAcked++
		}
		ss.delivered = id.Seq
	}
	x.touchSession(ss)
	return nil
}

// setResult stores the result record of the job that ran, rec, which it
// keeps: with its session's record when the session's latest delivery here
// is that job's (inside the record if it is small enough), else
// (anonymous, acknowledged already, or its session expired here while it
// waited) in kv's count-bounded results.
func (x *execution) setResult(id multicast.MsgID, rec []byte) error {
	if isSession(id) {
		if ss := x.e.sessions.byID[id.Client]; ss != nil && ss.delivered == id.Seq {
			if ss.kept != 0 {
				// The dedupe of deliver found no result under id.
				return fmt.Errorf("txn: %w: the session record of %s says its result is kept, and none is stored", kv.ErrCorrupt, id)
			}
			// rec is never empty (resultRecordHead), which a record's
			// empty inline result means.
			if len(rec) <= sessionResultInlineMax {
				ss.inline, ss.result = true, rec
			} else if err := x.b.PutAux(sessionResultKey(id), rec); err != nil {
				return err
			}
			ss.kept = id.Seq
			x.meta.sessionResults++
			x.touchSession(ss)
			return nil
		}
	}
	return x.b.SetResult(id.String(), rec)
}

// inlineResult returns the result that ss keeps inline: the one the
// execution has at hand, else the one its record holds as the batch sees
// it (the record is stored only when the execution finishes, so that is
// the record of an earlier entry, which kept the same result). The caller
// must not modify it. Nil if ss keeps no inline result.
func (x *execution) inlineResult(ss *session) ([]byte, error) {
	if !ss.inline || ss.result != nil {
		return ss.result, nil
	}
	b, found, err := x.b.GetAux(sessionKey(ss.client))
	if err != nil {
		return nil, err
	}
	var stored *session
	var result []byte
	if found {
		if stored, result, err = decodeSession(ss.client, b); err != nil {
			return nil, err
		}
	}
	if !found || stored.kept != ss.kept || result == nil {
		return nil, fmt.Errorf("txn: %w: the result of c%d.%d kept in its session record is missing", kv.ErrCorrupt, ss.client, ss.kept)
	}
	return result, nil
}

// keptResult returns the result record ss keeps, inline or apart, as the
// batch sees it; found is false if none is kept or it is missing.
func (x *execution) keptResult(ss *session) ([]byte, bool, error) {
	switch {
	case ss.kept == 0:
		return nil, false, nil
	case ss.inline:
		rec, err := x.inlineResult(ss)
		return rec, err == nil, err
	}
	return x.b.GetAux(sessionResultKey(multicast.MsgID{Client: ss.client, Seq: ss.kept}))
}

// result returns the result record of id as the batch sees it, wherever it
// is kept. A session keeps at most one result, the one its record names
// (kept), and the record is in memory: any other seq of the session reads
// no Pebble there (most calls: the dedupe of a new delivery).
func (x *execution) result(id multicast.MsgID) ([]byte, bool, error) {
	if ss := x.e.sessions.byID[id.Client]; ss != nil && ss.kept == id.Seq && isSession(id) {
		rec, found, err := x.keptResult(ss)
		if err != nil || found {
			return rec, found, err
		}
	}
	return x.b.Result(id.String())
}

// storedResult returns the committed result record of id, wherever it is
// kept, or an error wrapping ErrAcknowledged when it is not because its
// session acknowledged it here.
func (e *Executor) storedResult(id multicast.MsgID) ([]byte, bool, error) {
	s := e.cfg.Store
	if !isSession(id) {
		return s.Result(id.String())
	}
	// The session record first: it holds most results. Each read sees the
	// store as committed then; between them the result can be stored (in
	// the session record, or apart when too large for it) or move to kv's
	// results (its session dropped), and leave all three places only when
	// acknowledged by a later request of the session. A record that had
	// delivered a later request already tells that a result found in
	// neither place after it was acknowledged (delivered only grows); one
	// stored or acknowledged after the first read is found, or said
	// acknowledged, by the caller's next look.
	ss, result, err := e.storedSession(id.Client)
	switch {
	case err != nil:
		return nil, false, err
	case ss != nil && ss.kept == id.Seq && ss.inline:
		return result, true, nil
	}
	if rec, found, err := s.GetAux(sessionResultKey(id)); err != nil || found {
		return rec, found, err
	}
	if rec, found, err := s.Result(id.String()); err != nil || found {
		return rec, found, err
	}
	if ss != nil && ss.delivered > id.Seq {
		return nil, false, fmt.Errorf("%w: %s: group %d delivered c%d.%d since, a later request of the session, which acknowledged every result below it: the result was dropped",
			ErrAcknowledged, id, e.cfg.Self, id.Client, ss.delivered)
	}
	return nil, false, nil
}

// storedSession returns the committed record of session client and its
// inline result, nil if there is none.
func (e *Executor) storedSession(client uint64) (*session, []byte, error) {
	b, found, err := e.cfg.Store.GetAux(sessionKey(client))
	if err != nil || !found {
		return nil, nil, err
	}
	return decodeSession(client, b)
}

// SessionState reports what this group keeps of session client: the
// highest seq delivered and the seq of the result kept (0: none); ok is
// false when it keeps no record (never delivered here, expired or
// evicted). Safe to call concurrently with Execute.
func (e *Executor) SessionState(client uint64) (delivered, kept uint64, ok bool, err error) {
	ss, _, err := e.storedSession(client)
	if err != nil || ss == nil {
		return 0, 0, false, err
	}
	return ss.delivered, ss.kept, true, nil
}

// decodeStoredResult decodes a result record of id.
func decodeStoredResult(id multicast.MsgID, b []byte) (txn.PieceResult, error) {
	_, r, err := decodeResultRecord(b)
	if err != nil {
		return txn.PieceResult{}, fmt.Errorf("txn: result of %s: %w", id, err)
	}
	return r, nil
}
