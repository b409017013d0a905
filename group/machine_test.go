package group

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"testing"

	"github.com/flexkv/flexkv/internal/wire"
	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/multicast/channel"
	"github.com/flexkv/flexkv/multicast/protocol"
	"github.com/flexkv/flexkv/multicast/rawnode"
	"github.com/flexkv/flexkv/partition"
)

// testTopology has groups a, b, c: ranks 0, 1, 2.
func testTopology(t testing.TB) *partition.Topology {
	t.Helper()
	top, err := partition.NewTopology(partition.Spec{
		Groups: []partition.Group{{Name: "a"}, {Name: "b"}, {Name: "c"}},
		Parent: map[string]string{"b": "a", "c": "a"},
	})
	if err != nil {
		t.Fatal(err)
	}
	return top
}

func testConfig(t testing.TB, p multicast.Protocol, self partition.GroupID) Config {
	return Config{Protocol: p, Topology: testTopology(t), Self: self}
}

// anon returns the client id of an anonymous request.
func anon(c uint64) uint64 { return AnonymousBit | c }

func reqMsg(client, seq uint64, dst ...partition.GroupID) multicast.Message {
	return multicast.Message{ID: multicast.MsgID{Client: client, Seq: seq}, Dst: partition.SetOf(dst...), Payload: fmt.Appendf(nil, "m%d.%d", client, seq)}
}

// recorder is the Executor of this package's tests: it keeps what it ran in
// memory, with the Clock of every Execute. Every delivery it executes makes
// one vote-like send to group voteTo, none if voteTo is partition.NoGroup
// (the state of its group then holds nothing that names the entry a send
// came from). With fail set, Execute fails with it.
type recorder struct {
	voteTo   partition.GroupID
	applied  uint64
	executed []multicast.MsgID
	inbound  []rawnode.AppInbound // every inbound payload, in order
	clocks   []Clock              // of every Execute call, in order
	sent     map[uint64][]rawnode.AppSend
	fail     error
}

var _ Executor = (*recorder)(nil)

func newRecorder(voteTo partition.GroupID) *recorder {
	return &recorder{voteTo: voteTo, sent: map[uint64][]rawnode.AppSend{}}
}

func (r *recorder) Execute(index uint64, clock Clock, deliveries []multicast.Message, inbound []rawnode.AppInbound) ([]rawnode.AppSend, error) {
	if r.fail != nil {
		return nil, r.fail
	}
	if index <= r.applied {
		return nil, fmt.Errorf("recorder: entry %d executed twice (applied %d)", index, r.applied)
	}
	r.clocks = append(r.clocks, clock)
	r.inbound = append(r.inbound, inbound...)
	var sends []rawnode.AppSend
	for _, m := range deliveries {
		r.executed = append(r.executed, m.ID)
		if r.voteTo != partition.NoGroup {
			sends = append(sends, rawnode.AppSend{To: r.voteTo, About: m.ID, Payload: []byte("vote " + m.ID.String())})
		}
	}
	r.applied = index
	r.sent[index] = sends
	return sends, nil
}

// calls returns the number of Execute calls that ran.
func (r *recorder) calls() int { return len(r.clocks) }

func (r *recorder) Sent(index uint64) ([]rawnode.AppSend, error) {
	if index > r.applied {
		return nil, fmt.Errorf("recorder: Sent(%d) above applied %d", index, r.applied)
	}
	return r.sent[index], nil
}

func (r *recorder) ForgetSent(index uint64) error {
	for i := range r.sent { //flexkv:unordered deleting every match is order-free
		if i <= index {
			delete(r.sent, i)
		}
	}
	return nil
}

func (r *recorder) AppliedIndex() uint64 { return r.applied }

// Sync does nothing: the recorder keeps nothing on disk.
func (r *recorder) Sync() error { return nil }

// Snapshot captures the applied index, the ids executed and what Sent
// keeps, by index.
func (r *recorder) Snapshot() (ExecutorSnapshot, error) {
	b := wire.AppendUvarint(nil, r.applied)
	b = wire.AppendUvarint(b, uint64(len(r.executed)))
	for _, id := range r.executed {
		b = multicast.AppendMsgID(b, id)
	}
	indexes := slices.Sorted(maps.Keys(r.sent))
	b = wire.AppendUvarint(b, uint64(len(indexes)))
	for _, i := range indexes {
		b = wire.AppendUvarint(b, i)
		b = wire.AppendUvarint(b, uint64(len(r.sent[i])))
		for _, a := range r.sent[i] {
			b = wire.AppendUvarint(b, uint64(a.To))
			b = multicast.AppendMsgID(b, a.About)
			b = wire.AppendBytes(b, a.Payload)
		}
	}
	return recorderSnapshot(b), nil
}

// Restore replaces what the recorder ran and sent with a snapshot's.
func (r *recorder) Restore(rd io.Reader, index uint64) error {
	b, err := io.ReadAll(rd)
	if err != nil {
		return err
	}
	d := wire.NewDecoder(b)
	applied := d.Uvarint()
	n := d.Count(1)
	executed := make([]multicast.MsgID, 0, n)
	for range n {
		executed = append(executed, multicast.DecodeMsgID(d))
	}
	sent := map[uint64][]rawnode.AppSend{}
	for range d.Count(2) {
		i := d.Uvarint()
		var sends []rawnode.AppSend
		for range d.Count(3) {
			sends = append(sends, rawnode.AppSend{To: partition.GroupID(d.Uvarint()), About: multicast.DecodeMsgID(d), Payload: bytes.Clone(d.Bytes())})
		}
		sent[i] = sends
	}
	if err := d.Finish(); err != nil {
		return fmt.Errorf("recorder: snapshot: %w", err)
	}
	if applied != index {
		return fmt.Errorf("recorder: snapshot at %d restored as %d", applied, index)
	}
	r.applied, r.executed, r.sent = applied, executed, sent
	return nil
}

type recorderSnapshot []byte

func (s recorderSnapshot) WriteTo(w io.Writer) (int64, error) {
	n, err := w.Write(s)
	return int64(n), err
}

func (recorderSnapshot) Release() {}

// TestRecorderSnapshot: the test executor's snapshot restores what it ran,
// so that a test that restarts it from one sees an honest executor.
func TestRecorderSnapshot(t *testing.T) {
	r := newRecorder(1)
	m, err := NewMachine(testConfig(t, protocol.FlexCast, 0), r)
	if err != nil {
		t.Fatal(err)
	}
	applyAll(t, m, 1, testEntries())
	sn, err := r.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if _, err := sn.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	sn.Release()
	c := newRecorder(1)
	if err := c.Restore(bytes.NewReader(buf.Bytes()), r.AppliedIndex()); err != nil {
		t.Fatal(err)
	}
	if c.AppliedIndex() != r.AppliedIndex() || fmt.Sprint(c.executed) != fmt.Sprint(r.executed) || fmt.Sprint(c.sent) != fmt.Sprint(r.sent) {
		t.Errorf("restored recorder at %d ran %v and sent %v, want %d, %v and %v", c.AppliedIndex(), c.executed, c.sent, r.AppliedIndex(), r.executed, r.sent)
	}
	if err := c.Restore(bytes.NewReader(buf.Bytes()), r.AppliedIndex()+1); err == nil {
		t.Error("a snapshot restored at another index accepted")
	}
}

// applyAll applies entries from index first on, failing on an executor
// error, and returns every output.
func applyAll(t *testing.T, m *Machine, first uint64, entries [][]byte) []rawnode.Output {
	t.Helper()
	var outs []rawnode.Output
	for i, e := range entries {
		out, _, err := m.Apply(first+uint64(i), e)
		if err != nil {
			t.Fatalf("entry %d: %v", first+uint64(i), err)
		}
		outs = append(outs, out)
	}
	return outs
}

// testEntries, applied from index 1, open two sessions at group 0 (the
// lca under FlexCast, which delivers their requests at once), and make
// requests of both and anonymous ones, with ticks between them.
func testEntries() [][]byte {
	es := [][]byte{EncodeSession(), EncodeSession()}
	s1, s2 := SessionID(0, 1), SessionID(0, 2)
	for i := range uint64(6) {
		es = append(es, EncodeRequest(reqMsg(s1, i+1, 0, 1)), EncodeTick())
		if i%2 == 0 {
			es = append(es, EncodeRequest(reqMsg(s2, i+1, 0)), EncodeRequest(reqMsg(anon(7), i+1, 0)))
		}
	}
	return es
}

// machineSnapshot is a Machine.Snapshot written out, as a shell keeps it.
type machineSnapshot struct {
	state     []byte
	execIndex uint64
	exec      []byte
}

func takeSnapshot(t *testing.T, m *Machine) machineSnapshot {
	t.Helper()
	ms, err := m.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer ms.Exec.Release()
	var buf bytes.Buffer
	if _, err := ms.Exec.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	if ms.Index != m.State().Applied() || ms.ExecIndex != m.Executor().AppliedIndex() {
		t.Fatalf("snapshot at %d, executor at %d; the machine is at %d, its executor at %d", ms.Index, ms.ExecIndex, m.State().Applied(), m.Executor().AppliedIndex())
	}
	return machineSnapshot{state: ms.State, execIndex: ms.ExecIndex, exec: buf.Bytes()}
}

// restart returns a machine of cfg over exec restored from sn, and whether
// it restored the executor.
func restart(t *testing.T, cfg Config, exec Executor, sn machineSnapshot) (*Machine, bool) {
	t.Helper()
	st, err := RestoreState(cfg, sn.state)
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewMachine(cfg, exec)
	if err != nil {
		t.Fatal(err)
	}
	restored, err := m.Restore(st, sn.execIndex, bytes.NewReader(sn.exec))
	if err != nil {
		t.Fatal(err)
	}
	return m, restored
}

// TestReplayRule: a replica restarted from a snapshot older than its
// executor replays the entries in between: the executor, kept, runs none
// of them again, their sends are queued again, and the state ends
// byte-identical to the one that never restarted. A replica whose executor
// lost its state is restored whole from the snapshot, and runs the entries
// after it to the same state.
//
// Group 0 alone delivers these entries under FlexCast (the lca) and the tree
// (the root); Skeen needs the other destinations' proposals, so its replay
// is exercised with whole groups by the whole-database simulator.
func TestReplayRule(t *testing.T) {
	for _, p := range []multicast.Protocol{protocol.FlexCast, protocol.Tree} {
		t.Run(string(p), func(t *testing.T) {
			entries := testEntries()
			exec := newRecorder(1)
			a, err := NewMachine(testConfig(t, p, 0), exec)
			if err != nil {
				t.Fatal(err)
			}
			const cut = 5
			applyAll(t, a, 1, entries[:cut])
			snap := takeSnapshot(t, a)
			applyAll(t, a, cut+1, entries[cut:])
			ran, calls := len(exec.executed), exec.calls()
			if ran == 0 {
				t.Fatal("nothing executed: the test proves nothing")
			}

			// The restart: the executor kept its effects (all entries), the
			// state comes back from the snapshot at cut.
			b, restored := restart(t, testConfig(t, p, 0), exec, snap)
			if restored {
				t.Fatal("an executor ahead of the snapshot was restored from it")
			}
			outs := applyAll(t, b, cut+1, entries[cut:])
			if exec.calls() != calls || len(exec.executed) != ran {
				t.Fatalf("replay executed again: %d calls, %d deliveries; before the restart %d, %d", exec.calls(), len(exec.executed), calls, ran)
			}
			frames := 0
			for i, out := range outs {
				if len(out.Deliveries) > 0 || len(out.Sends) > 0 || len(out.Requests) > 0 {
					t.Errorf("replayed entry %d reports deliveries %v, sends %d, requests %d: observers saw them before the restart", cut+1+i, out.Deliveries, len(out.Sends), len(out.Requests))
				}
				frames += len(out.Frames)
			}
			if frames == 0 {
				t.Error("replay produced no frames: the re-queued sends were not transmitted")
			}
			if got, want := b.State().AppendSnapshot(nil), a.State().AppendSnapshot(nil); !bytes.Equal(got, want) {
				t.Errorf("the replayed state differs from the one that never restarted (%d and %d bytes)", len(got), len(want))
			}

			// The executor lost its state: the snapshot restores it, and it
			// runs every entry after the snapshot.
			lost := newRecorder(1)
			c, restored := restart(t, testConfig(t, p, 0), lost, snap)
			if !restored || lost.AppliedIndex() != snap.execIndex {
				t.Fatalf("an empty executor restored %v, at %d; want it restored at %d", restored, lost.AppliedIndex(), snap.execIndex)
			}
			applyAll(t, c, cut+1, entries[cut:])
			if fmt.Sprint(lost.executed) != fmt.Sprint(exec.executed) {
				t.Errorf("the restored executor ran %v, want %v", lost.executed, exec.executed)
			}
			if got, want := c.State().AppendSnapshot(nil), a.State().AppendSnapshot(nil); !bytes.Equal(got, want) {
				t.Errorf("the restored replica's state differs from the one that never restarted (%d and %d bytes)", len(got), len(want))
			}
		})
	}
}

// TestReplayNeedsSent: without the sends of a replayed entry, the state
// would diverge: the check above is not vacuous.
func TestReplayNeedsSent(t *testing.T) {
	entries := testEntries()
	exec := newRecorder(1)
	a, err := NewMachine(testConfig(t, protocol.FlexCast, 0), exec)
	if err != nil {
		t.Fatal(err)
	}
	applyAll(t, a, 1, entries[:1])
	snap := takeSnapshot(t, a)
	applyAll(t, a, 2, entries[1:])
	// An executor that forgot what it sent.
	if err := exec.ForgetSent(exec.AppliedIndex()); err != nil {
		t.Fatal(err)
	}
	b, _ := restart(t, testConfig(t, protocol.FlexCast, 0), exec, snap)
	applyAll(t, b, 2, entries[1:])
	if bytes.Equal(b.State().AppendSnapshot(nil), a.State().AppendSnapshot(nil)) {
		t.Fatal("states agree although the replay queued no votes")
	}
}

// A snapshot taken while a restarted replica replays, its executor ahead
// of its state, restores an executor that lost everything to the same
// state: the entries in between are replayed with the sends the restored
// executor keeps, and none runs twice.
func TestSnapshotDuringReplay(t *testing.T) {
	entries := testEntries()
	cfg := testConfig(t, protocol.FlexCast, 0)
	exec := newRecorder(1)
	a, err := NewMachine(cfg, exec)
	if err != nil {
		t.Fatal(err)
	}
	const cut = 5
	applyAll(t, a, 1, entries[:cut])
	early := takeSnapshot(t, a)
	applyAll(t, a, cut+1, entries[cut:])

	// b restarts from the early snapshot over the executor that ran
	// everything, and is snapshotted before it replays anything.
	b, _ := restart(t, cfg, exec, early)
	during := takeSnapshot(t, b)
	if during.execIndex <= b.State().Applied() {
		t.Fatalf("executor at %d, state at %d: the snapshot is not taken during a replay", during.execIndex, b.State().Applied())
	}
	lost := newRecorder(1)
	c, restored := restart(t, cfg, lost, during)
	if !restored {
		t.Fatal("an empty executor was not restored")
	}
	ran := len(lost.executed)
	applyAll(t, c, cut+1, entries[cut:])
	if len(lost.executed) != ran {
		t.Errorf("the restored executor ran %d deliveries again", len(lost.executed)-ran)
	}
	if got, want := c.State().AppendSnapshot(nil), a.State().AppendSnapshot(nil); !bytes.Equal(got, want) {
		t.Errorf("the replica restored during a replay differs from the one that never restarted (%d and %d bytes)", len(got), len(want))
	}
}

func TestExecutorFailure(t *testing.T) {
	exec := newRecorder(1)
	exec.fail = errors.New("disk on fire")
	m, err := NewMachine(testConfig(t, protocol.FlexCast, 0), exec)
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = m.Apply(1, EncodeRequest(reqMsg(anon(1), 1, 0)))
	if !errors.Is(err, ErrExecutor) || !errors.Is(err, exec.fail) {
		t.Fatalf("Apply with a failing executor: %v, want ErrExecutor wrapping the executor's error", err)
	}
}

// TestApplyOutcomes: what each kind of entry gives, in order on one
// machine ("retry" needs "request"), alike on a second replica; a refused or
// malformed entry changes nothing but the applied index (and the last use
// of the session it names, which stays the same here: no tick is applied
// before the refusals).
func TestApplyOutcomes(t *testing.T) {
	big := reqMsg(anon(3), 1, 0)
	sid := SessionID(0, 1) // opened by the first entry
	big.Payload = make([]byte, MessagePayloadMax+1)
	m, err := NewMachine(testConfig(t, protocol.FlexCast, 0), newRecorder(1))
	if err != nil {
		t.Fatal(err)
	}
	other, _ := NewMachine(testConfig(t, protocol.FlexCast, 0), newRecorder(1))
	index := uint64(0)
	for _, tc := range []struct {
		name  string
		entry []byte
		want  error // nil: accepted
	}{
		{"open a session", EncodeSession(), nil},
		{"request", EncodeRequest(reqMsg(sid, 1, 0, 2)), nil},
		{"retry", EncodeRequest(reqMsg(sid, 1, 0, 2)), ErrDuplicate},
		{"older", EncodeRequest(reqMsg(sid, 0, 0)), ErrDuplicate},
		{"next", EncodeRequest(reqMsg(sid, 2, 0)), nil},
		{"unknown session", EncodeRequest(reqMsg(SessionID(0, 99), 1, 0)), ErrSessionExpired},
		{"session of another group", EncodeRequest(reqMsg(SessionID(1, 1), 1, 0)), ErrSessionExpired},
		{"no session id", EncodeRequest(reqMsg(5, 1, 0)), ErrSessionExpired},
		{"anonymous", EncodeRequest(reqMsg(anon(4), 1, 0)), nil},
		{"anonymous again", EncodeRequest(reqMsg(anon(4), 1, 0)), nil},
		{"not the entry group", EncodeRequest(reqMsg(anon(4), 1, 1, 2)), multicast.ErrNotEntry},
		{"session with a tail", append(EncodeSession(), 0), multicast.ErrInvalid},
		{"oversized payload", EncodeRequest(big), multicast.ErrInvalid},
		{"tick", EncodeTick(), nil},
		{"empty", nil, multicast.ErrInvalid},
		{"unknown kind", []byte{99}, multicast.ErrInvalid},
		{"truncated request", EncodeRequest(reqMsg(sid, 3, 0))[:3], multicast.ErrInvalid},
		{"tick with a tail", append(EncodeTick(), 0), multicast.ErrInvalid},
		{"inbound from self", EncodeInbound(0, []channel.Frame{{From: 0, To: 0}}), multicast.ErrInvalid},
		{"inbound from an unknown group", EncodeInbound(7, nil), multicast.ErrInvalid},
	} {
		index++
		before := m.State().AppendSnapshot(nil)
		_, result, err := m.Apply(index, tc.entry)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if _, r2, _ := other.Apply(index, tc.entry); fmt.Sprint(r2) != fmt.Sprint(result) {
			t.Errorf("%s: two replicas disagree: %v and %v", tc.name, result, r2)
		}
		switch {
		case tc.want == nil && result != nil:
			t.Errorf("%s: %v, want accepted", tc.name, result)
		case tc.want != nil && !errors.Is(result, tc.want):
			t.Errorf("%s: %v, want %v", tc.name, result, tc.want)
		}
		if got := m.State().Applied(); got != index {
			t.Errorf("%s: applied %d, want %d", tc.name, got, index)
		}
		if tc.want != nil {
			prev, err := RestoreState(testConfig(t, protocol.FlexCast, 0), before)
			if err != nil {
				t.Fatal(err)
			}
			prev.applied = index
			if !bytes.Equal(prev.AppendSnapshot(nil), m.State().AppendSnapshot(nil)) {
				t.Errorf("%s: a refused entry changed the state", tc.name)
			}
		}
	}
	if _, result, _ := m.Apply(index, EncodeTick()); result == nil {
		t.Error("an entry at an index applied already was accepted")
	}
	if !bytes.Equal(m.State().AppendSnapshot(nil), other.State().AppendSnapshot(nil)) {
		t.Error("two replicas that applied the same entries differ")
	}
}

// TestSnapshotDeterministic: every protocol's state survives its encoding,
// and two replicas that applied the same entries encode alike.
func TestSnapshotDeterministic(t *testing.T) {
	for _, p := range protocol.Names() {
		t.Run(string(p), func(t *testing.T) {
			a, _ := NewMachine(testConfig(t, p, 0), newRecorder(1))
			b, _ := NewMachine(testConfig(t, p, 0), newRecorder(1))
			applyAll(t, a, 1, testEntries())
			applyAll(t, b, 1, testEntries())
			sa, sb := a.State().AppendSnapshot(nil), b.State().AppendSnapshot(nil)
			if !bytes.Equal(sa, sb) {
				t.Fatal("two replicas encode the same history differently")
			}
			st, err := RestoreState(testConfig(t, p, 0), sa)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(st.AppendSnapshot(nil), sa) {
				t.Error("a restored state encodes differently")
			}
			if st.Applied() != a.State().Applied() {
				t.Errorf("restored applied %d, want %d", st.Applied(), a.State().Applied())
			}
		})
	}
}

// The executor runs every entry with the log time after the entry and the
// group's session lifetime.
func TestMachineClock(t *testing.T) {
	cfg := testConfig(t, protocol.FlexCast, 0)
	cfg.SessionTicks = 7
	rec := newRecorder(1)
	m, err := NewMachine(cfg, rec)
	if err != nil {
		t.Fatal(err)
	}
	applyAll(t, m, 1, testEntries())
	if len(rec.clocks) == 0 {
		t.Fatal("no Execute call")
	}
	// testEntries: requests of s1 at seq i+1 come after i ticks.
	if got := rec.clocks[0]; got != (Clock{Now: 0, SessionTicks: 7}) {
		t.Errorf("first clock %+v", got)
	}
	last := rec.clocks[len(rec.clocks)-1]
	if last.Now != 5 || last.Now != m.State().LogTime()-1 {
		t.Errorf("last clock %+v, log time %d", last, m.State().LogTime())
	}
	for i := 1; i < len(rec.clocks); i++ {
		if rec.clocks[i].Now < rec.clocks[i-1].Now {
			t.Errorf("clock %d went back: %+v after %+v", i, rec.clocks[i], rec.clocks[i-1])
		}
	}
}
