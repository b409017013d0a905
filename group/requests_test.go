package group

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/multicast/protocol"
	"github.com/flexkv/flexkv/partition"
)

// An entry of several requests (EncodeRequests) applies each as its own
// entry would: the same outcome per request (a retry within the entry a
// duplicate, a refused one refused alone), the same deliveries in the same
// order, and the same state as replicas that took them one entry each,
// but for the applied index.
func TestRequestsEntry(t *testing.T) {
	sid := SessionID(0, 1)
	big := reqMsg(anon(3), 1, 0)
	big.Payload = make([]byte, MessagePayloadMax+1)
	ms := []multicast.Message{
		reqMsg(sid, 1, 0, 2),
		reqMsg(sid, 1, 0, 2), // a retry
		reqMsg(anon(4), 1, 0),
		reqMsg(anon(4), 1, 1, 2), // not the entry group
		big,
		reqMsg(SessionID(0, 99), 1, 0), // no such session
		reqMsg(sid, 2, 0),
	}
	want := []error{nil, ErrDuplicate, nil, multicast.ErrNotEntry, multicast.ErrInvalid, ErrSessionExpired, nil}

	batched, err := NewMachine(testConfig(t, protocol.FlexCast, 0), newRecorder(partition.NoGroup))
	if err != nil {
		t.Fatal(err)
	}
	single, _ := NewMachine(testConfig(t, protocol.FlexCast, 0), newRecorder(partition.NoGroup))
	applyAll(t, batched, 1, [][]byte{EncodeSession()})
	applyAll(t, single, 1, [][]byte{EncodeSession()})

	out, result, err := batched.Apply(2, EncodeRequests(ms))
	if err != nil {
		t.Fatal(err)
	}
	var errs RequestErrors
	if ok := errors.As(result, &errs); !ok || len(errs) != len(ms) {
		t.Fatalf("result %T %v, want RequestErrors of %d", result, result, len(ms))
	}
	var delivered []multicast.MsgID
	for i, m := range ms {
		o, r, err := single.Apply(uint64(2+i), EncodeRequest(m))
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(r) != fmt.Sprint(errs[i]) {
			t.Errorf("request %d (%s): %v in one entry, %v alone", i, m.ID, errs[i], r)
		}
		if w := want[i]; (w == nil) != (errs[i] == nil) || (w != nil && !errors.Is(errs[i], w)) {
			t.Errorf("request %d (%s): %v, want %v", i, m.ID, errs[i], w)
		}
		for _, d := range o.Deliveries {
			delivered = append(delivered, d.ID)
		}
	}
	var got []multicast.MsgID
	for _, d := range out.Deliveries {
		got = append(got, d.ID)
	}
	if fmt.Sprint(got) != fmt.Sprint(delivered) {
		t.Errorf("deliveries %v in one entry, %v one entry each", got, delivered)
	}
	if !errors.Is(result, ErrDuplicate) || !errors.Is(result, multicast.ErrInvalid) {
		t.Errorf("errors.Is does not reach the requests' errors: %v", result)
	}
	// Same state, once the applied indexes agree.
	s1, err := RestoreState(testConfig(t, protocol.FlexCast, 0), batched.State().AppendSnapshot(nil))
	if err != nil {
		t.Fatal(err)
	}
	s1.applied = single.State().Applied()
	if !bytes.Equal(s1.AppendSnapshot(nil), single.State().AppendSnapshot(nil)) {
		t.Error("the state after one entry of requests differs from the state after one entry each")
	}

	// Malformed: skipped whole, the state unchanged but for the index.
	for _, tc := range []struct {
		name  string
		entry []byte
	}{
		{"truncated", EncodeRequests(ms[:2])[:5]},
		{"with a tail", append(EncodeRequests(ms[:2]), 0)},
		{"more than RequestsMax", EncodeRequests(make([]multicast.Message, RequestsMax+1))},
		{"a count beyond its bytes", []byte{entryRequests, 9}},
	} {
		before := batched.State().AppendSnapshot(nil)
		index := batched.State().Applied() + 1
		_, result, err := batched.Apply(index, tc.entry)
		if err != nil {
			t.Fatal(err)
		}
		if !errors.Is(result, multicast.ErrInvalid) {
			t.Errorf("%s: %v, want %v", tc.name, result, multicast.ErrInvalid)
		}
		if many := (RequestErrors)(nil); errors.As(result, &many) {
			t.Errorf("%s: answered per request: %v", tc.name, result)
		}
		prev, err := RestoreState(testConfig(t, protocol.FlexCast, 0), before)
		if err != nil {
			t.Fatal(err)
		}
		prev.applied = index
		if !bytes.Equal(prev.AppendSnapshot(nil), batched.State().AppendSnapshot(nil)) {
			t.Errorf("%s: a malformed entry changed the state", tc.name)
		}
	}
}
