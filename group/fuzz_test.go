package group

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/flexkv/flexkv/internal/wire"
	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/multicast/protocol"
)

// fuzzHistory gives a group-1 machine some state: requests of its own and
// an inbound batch from group 0, the entries a real group-0 replica sent.
func fuzzHistory(t testing.TB, p multicast.Protocol) (entries [][]byte) {
	src, err := NewMachine(testConfig(t, p, 0), newRecorder(1))
	if err != nil {
		t.Fatal(err)
	}
	var frames []byte
	for i := range uint64(3) {
		out, _, err := src.Apply(i+1, EncodeRequest(reqMsg(anon(9), i+1, 0, 1)))
		if err != nil {
			t.Fatal(err)
		}
		if len(out.Frames) > 0 {
			frames = EncodeInbound(0, out.Frames)
		}
	}
	entries = append(entries, EncodeSession(), EncodeRequest(reqMsg(SessionID(1, 1), 1, 1)), EncodeRequest(reqMsg(anon(1), 1, 1)), EncodeTick(),
		EncodeRequests([]multicast.Message{reqMsg(SessionID(1, 1), 2, 1), reqMsg(anon(2), 1, 1), reqMsg(SessionID(1, 1), 2, 1)}))
	if frames != nil {
		entries = append(entries, frames)
	}
	return entries
}

// FuzzApply: any entry, after a short history, is applied or refused
// without a panic, alike on two replicas, and the state still encodes and
// restores to the same bytes.
func FuzzApply(f *testing.F) {
	for _, p := range protocol.Names() {
		for _, e := range fuzzHistory(f, p) {
			f.Add(string(p), e)
		}
	}
	f.Add(string(protocol.FlexCast), []byte{})
	// Epochs: a change (refused at group 1, which does not take them) and
	// requests of the epoch and of a later one.
	top := testTopology(f)
	f.Add(string(protocol.Skeen), EncodeChange(1, BootstrapEpoch(top)))
	// A change of members (DESIGN 14), and the change entry written
	// before members.
	members := BootstrapEpoch(top)
	members.Members = testMembers(top.Len(), 3)
	f.Add(string(protocol.FlexCast), EncodeChange(1, members))
	f.Add(string(protocol.FlexCast), appendOverlay(wire.AppendUvarint([]byte{entryChange}, 1), BootstrapEpoch(top)))
	f.Add(string(protocol.Tree), EncodeRequestsAt(1, []multicast.Message{reqMsg(anon(3), 1, 1)}))
	f.Add(string(protocol.FlexCast), EncodeRequestsAt(2, []multicast.Message{reqMsg(anon(3), 1, 1, 2)}))
	f.Add(string(protocol.Skeen), []byte{entryInbound, 0, 1, 3, 1, 2, 3})
	f.Fuzz(func(t *testing.T, name string, entry []byte) {
		pr, err := protocol.Lookup(multicast.Protocol(name))
		if err != nil {
			return
		}
		p := pr.Name()
		hist := fuzzHistory(t, p)
		var ms [2]*Machine
		var results [2]string
		for i := range ms {
			m, err := NewMachine(testConfig(t, p, 1), newRecorder(2))
			if err != nil {
				t.Fatal(err)
			}
			applyAll(t, m, 1, hist)
			_, result, err := m.Apply(uint64(len(hist))+1, entry)
			if err != nil {
				t.Fatalf("executor failure on entry %x: %v", entry, err)
			}
			ms[i], results[i] = m, fmt.Sprint(result)
		}
		if results[0] != results[1] {
			t.Fatalf("replicas disagree on entry %x: %s / %s", entry, results[0], results[1])
		}
		a, b := ms[0].State().AppendSnapshot(nil), ms[1].State().AppendSnapshot(nil)
		if !bytes.Equal(a, b) {
			t.Fatalf("replicas diverge on entry %x", entry)
		}
		st, err := RestoreState(testConfig(t, p, 1), a)
		if err != nil {
			t.Fatalf("the state after entry %x does not restore: %v", entry, err)
		}
		if !bytes.Equal(st.AppendSnapshot(nil), a) {
			t.Fatalf("the state after entry %x restores to other bytes", entry)
		}
	})
}

// FuzzRestoreState: any bytes either restore to a state that encodes to
// the same bytes (a version 1 snapshot: to bytes that restore to
// themselves), or are refused; never a panic.
func FuzzRestoreState(f *testing.F) {
	for _, p := range protocol.Names() {
		m, err := NewMachine(testConfig(f, p, 1), newRecorder(2))
		if err != nil {
			f.Fatal(err)
		}
		for i, e := range fuzzHistory(f, p) {
			if _, _, err := m.Apply(uint64(i)+1, e); err != nil {
				f.Fatal(err)
			}
		}
		f.Add(string(p), m.State().AppendSnapshot(nil))
	}
	f.Fuzz(func(t *testing.T, name string, b []byte) {
		pr, err := protocol.Lookup(multicast.Protocol(name))
		if err != nil {
			return
		}
		p := pr.Name()
		st, err := RestoreState(testConfig(t, p, 1), b)
		if err != nil {
			return
		}
		got := st.AppendSnapshot(nil)
		if len(b) > 0 && b[0] == stateSnapshotV1 {
			st2, err := RestoreState(testConfig(t, p, 1), got)
			if err != nil {
				t.Fatalf("%x restores to a state whose encoding %x does not restore: %v", b, got, err)
			}
			b = st2.AppendSnapshot(nil)
		}
		if !bytes.Equal(got, b) {
			t.Fatalf("%x restores to a state that encodes as %x", b, got)
		}
	})
}
