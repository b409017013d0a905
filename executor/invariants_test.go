//go:build invariants

package executor

import (
	"strings"
	"testing"

	"github.com/flexkv/flexkv/group"
	"github.com/flexkv/flexkv/internal/invariants"
	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/multicast/rawnode"
	"github.com/flexkv/flexkv/partition"
	"github.com/flexkv/flexkv/txn"
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

// Each record the executor writes is read back under the invariants tag;
// a record that would not read back as what was written panics, naming
// the record.
func TestInvariantRecordsReadBack(t *testing.T) {
	good := &execMeta{qNext: 3, queued: 1, now: 7}
	checkMetaRecord(good, good.append(nil))
	res := &txn.PieceResult{Aborted: true, Reason: "txn: no"}
	checkResultRecord(appendResultRecord(nil, 5, res), 5, res)
	d := newDelivery(multicast.Message{ID: multicast.MsgID{Client: 1, Seq: 2}, Dst: partition.GroupSet(3), Payload: []byte("abc")})
	checkQueueRecord(&d, d.append(nil))
	send := rawnode.AppSend{To: 1, About: multicast.MsgID{Client: 1, Seq: 2}, Payload: []byte("v")}
	checkSentRecord(send, appendSend(nil, send))
	ss := &session{client: 9, delivered: 3, used: 2, touch: 7}
	checkSessionRecord(ss, nil, ss.append(nil, nil))

	for _, tt := range []struct {
		name, want string
		f          func()
	}{
		{"meta that its decoder refuses", "meta record", func() {
			m := &execMeta{qNext: 1, queued: 2}
			checkMetaRecord(m, m.append(nil))
		}},
		{"meta of another state", "meta record", func() {
			checkMetaRecord(good, (&execMeta{qNext: 3}).append(nil))
		}},
		{"result whose reason is lost", "result record", func() {
			r := &txn.PieceResult{Succeeded: true, Reason: "kept nowhere"}
			checkResultRecord(appendResultRecord(nil, 5, r), 5, r)
		}},
		{"result of another digest", "digest", func() {
			checkResultRecord(appendResultRecord(nil, 6, res), 5, res)
		}},
		{"queued delivery of a wrong size", "queue record", func() {
			bad := d
			bad.size = 5
			checkQueueRecord(&bad, bad.append(nil))
		}},
		{"queued delivery of another digest", "queue record", func() {
			bad := d
			bad.digest++
			checkQueueRecord(&bad, bad.append(nil))
		}},
		{"send to no group", "sent record", func() {
			bad := send
			bad.To = partition.GroupsMax
			checkSentRecord(bad, appendSend(nil, bad))
		}},
		{"session keeping an older seq", "session record", func() {
			bad := &session{client: 9, delivered: 3, kept: 2}
			checkSessionRecord(bad, nil, bad.append(nil, nil))
		}},
		{"session whose inline result is left out", "session record", func() {
			bad := &session{client: 9, delivered: 3, kept: 3, inline: true}
			checkSessionRecord(bad, nil, bad.append(nil, nil))
		}},
	} {
		t.Run(tt.name, func(t *testing.T) { mustViolate(t, tt.want, tt.f) })
	}
}

// The state an execution leaves is checked against itself and the meta
// record under the invariants tag: a state broken in memory panics at the
// next entry, naming what disagrees.
func TestInvariantExecutionState(t *testing.T) {
	for _, tt := range []struct {
		name, want string
		breakIt    func(e *Executor)
	}{
		{"session results miscounted", "session records keeping", func(e *Executor) { e.meta.sessionResults++ }},
		{"sessions miscounted", "session records keeping", func(e *Executor) { e.meta.sessions-- }},
		{"stored vote bytes miscounted", "stored votes take", func(e *Executor) { e.voteBytes++ }},
		{"votes miscounted", "votes stored", func(e *Executor) { e.meta.votes++ }},
		{"sessions out of order", "listed after", func(e *Executor) {
			first, second := e.sessions.order.Front().Value.(*session), e.sessions.order.Back().Value.(*session)
			first.touch, second.touch = second.touch, first.touch
		}},
		{"session keeping a result of an older seq", "keeps the result of seq", func(e *Executor) {
			e.sessions.order.Front().Value.(*session).delivered++
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := newCluster(t, nil)
			c.seed(0, map[string]string{"w/0001/acct": "100"})
			c.deliver(0, c.sessionMsg(group.SessionID(0, 5), 1, addAcct), c.sessionMsg(group.SessionID(0, 6), 1, addAcct))
			c.deliver(0) // a correct state passes
			tt.breakIt(c.reps[0].ex)
			mustViolate(t, tt.want, func() { c.deliver(0, c.sessionMsg(group.SessionID(0, 7), 1, addAcct)) })
		})
	}
}

// A queued delivery is checked against the meta record too: one at or
// past the next sequence panics at the next entry.
func TestInvariantQueue(t *testing.T) {
	c := newCluster(t, nil)
	c.deliver(1, c.msg(1, mixedTxn)) // group 1's piece waits for the votes of 0 and 2
	c.deliver(1)                     // a correct state passes
	e := c.reps[1].ex
	if len(e.queue) != 1 {
		t.Fatalf("%d deliveries queued at group 1, want 1", len(e.queue))
	}
	e.queue[0].seq = e.meta.qNext
	mustViolate(t, "not below the next sequence", func() { c.deliver(1) })
}
