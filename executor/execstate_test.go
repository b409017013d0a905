package executor

import (
	"bytes"
	"errors"
	"testing"

	"github.com/flexkv/flexkv/group"
	"github.com/flexkv/flexkv/internal/wire"
	"github.com/flexkv/flexkv/kv"
	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/multicast/rawnode"
	"github.com/flexkv/flexkv/partition"
	"github.com/flexkv/flexkv/txn"
)

// corrupt reports whether err says that the store holds something the
// executor did not write.
func corrupt(err error) bool { return errors.Is(err, kv.ErrCorrupt) || errors.Is(err, wire.ErrCorrupt) }

func FuzzDecodeMeta(f *testing.F) {
	f.Add((&execMeta{}).append(nil))
	f.Add((&execMeta{qNext: 9, queued: 3, votes: 2, executed: 1 << 40, aborted: 1, junkVotes: 5, votesEarly: 6, ranAhead: 7, duplicates: 8}).append(nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeMeta(b)
		if err != nil {
			if !corrupt(err) {
				t.Fatalf("error %v is not about corruption", err)
			}
			return
		}
		if m2, err := decodeMeta(m.append(nil)); err != nil || m2 != m {
			t.Fatalf("%+v encodes to a meta record that decodes to %+v, %v", m, m2, err)
		}
	})
}

func FuzzDecodeDelivery(f *testing.F) {
	for _, d := range []delivery{
		newDelivery(multicast.Message{ID: multicast.MsgID{Client: 1, Seq: 2}, Dst: partition.SetOf(0, 2), Payload: []byte{payloadTxn, 1}}),
		newDelivery(multicast.Message{ID: multicast.MsgID{Client: 1 << 60, Seq: 7}, Dst: partition.SetOf(63)}),
		newDelivery(multicast.Message{ID: multicast.MsgID{Seq: 1}, Dst: partition.SetOf(1), Payload: make([]byte, txn.PayloadMax+1)}),
	} {
		f.Add(d.append(nil))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := decodeDelivery(b)
		if err != nil {
			if !corrupt(err) {
				t.Fatalf("error %v is not about corruption", err)
			}
			return
		}
		d2, err := decodeDelivery(d.append(nil))
		if err != nil || d2.msg.ID != d.msg.ID || d2.msg.Dst != d.msg.Dst || d2.size != d.size ||
			!bytes.Equal(d2.msg.Payload, d.msg.Payload) || d2.digest != d.digest {
			t.Fatalf("%+v encodes to a record that decodes to %+v, %v", d, d2, err)
		}
	})
}

// FuzzQueueKey: the keys of queue records and voted marks.
func FuzzQueueKey(f *testing.F) {
	f.Add(queueKey(0))
	f.Add(votedKey(1 << 63))
	f.Add(append(queueKey(5), 'x'))
	f.Fuzz(func(t *testing.T, k []byte) {
		seq, mark, err := parseQueueKey(k)
		if err != nil {
			if !corrupt(err) {
				t.Fatalf("error %v is not about corruption", err)
			}
			return
		}
		want := queueKey(seq)
		if mark {
			want = votedKey(seq)
		}
		if !bytes.Equal(k, want) {
			t.Fatalf("key %x parses to sequence %d, mark %v, whose key is %x", k, seq, mark, want)
		}
	})
}

func FuzzParseVoteKey(f *testing.F) {
	f.Add(voteKey(multicast.MsgID{Client: 3, Seq: 4}, 2))
	f.Add(voteKey(multicast.MsgID{Client: 1<<64 - 1}, partition.GroupsMax-1))
	f.Fuzz(func(t *testing.T, k []byte) {
		id, g, err := parseVoteKey(k)
		if err != nil {
			if !corrupt(err) {
				t.Fatalf("error %v is not about corruption", err)
			}
			return
		}
		if want := voteKey(id, g); !bytes.Equal(k, want) {
			t.Fatalf("key %x parses to %s, group %d, whose key is %x", k, id, g, want)
		}
	})
}

func FuzzDecodeResultRecord(f *testing.F) {
	for i, r := range testPieceResults {
		f.Add(appendResultRecord(nil, uint64(i)<<59|uint64(i), &r))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		digest, r, err := decodeResultRecord(b)
		if err != nil {
			if !corrupt(err) {
				t.Fatalf("error %v is not about corruption", err)
			}
			return
		}
		if d, err := resultDigest(b); err != nil || d != digest {
			t.Fatalf("resultDigest: %x, %v; decodeResultRecord: %x", d, err, digest)
		}
		enc := appendResultRecord(nil, digest, &r)
		digest2, r2, err := decodeResultRecord(enc)
		if err != nil || digest2 != digest || describePieceResult(r2) != describePieceResult(r) {
			t.Fatalf("%x %s encodes to a record that decodes to %x %s, %v", digest, describePieceResult(r), digest2, describePieceResult(r2), err)
		}
	})
}

func FuzzDecodeSend(f *testing.F) {
	f.Add(appendSend(nil, rawnode.AppSend{To: 2, About: multicast.MsgID{Client: 1, Seq: 1}, Payload: []byte("vote")}))
	f.Add(appendSend(nil, rawnode.AppSend{To: partition.GroupsMax - 1}))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := decodeSend(b)
		if err != nil {
			if !corrupt(err) {
				t.Fatalf("error %v is not about corruption", err)
			}
			return
		}
		s2, err := decodeSend(appendSend(nil, s))
		if err != nil || !equalSends([]rawnode.AppSend{s}, []rawnode.AppSend{s2}) {
			t.Fatalf("%+v encodes to a record that decodes to %+v, %v", s, s2, err)
		}
	})
}

// appendRecords encodes aux records as FuzzExecutorState reads them:
// count, then key and value of each.
func appendRecords(b []byte, kvs []kv.KV) []byte {
	b = wire.AppendUvarint(b, uint64(len(kvs)))
	for _, r := range kvs {
		b = wire.AppendBytes(b, r.Key)
		b = wire.AppendBytes(b, r.Value)
	}
	return b
}

// executorStates returns the aux records of executors with queued
// deliveries, voted marks, stored votes and sends.
func executorStates(f *testing.F) [][]kv.KV {
	c := newCluster(f, nil)
	c.seed(2, map[string]string{"w/0004/flag": "on", "w/0004/x": "1"})
	head := c.msg(1, remoteCompare)
	next := c.msg(2, `{"then":[{"op":"get","key":"w/0001/x"}]}`)
	early := c.msg(3, `{"if":[{"key":"w/0004/flag","cmp":"=","value":"on"}],"then":[{"op":"put","key":"w/0002/z","value":"1"}]}`)
	voted := c.msg(4, reusedTxn)
	// A session's record and result, under the client id the fuzz
	// target's deliveries use.
	sess := c.sessionMsg(1<<40, 2, `{"then":[{"op":"put","key":"w/0001/s","value":"1"}]}`)
	c.deliver(0, head, next, sess)
	c.deliver(2, early, voted)
	c.execute(0, nil, c.take(0, nil))
	var states [][]kv.KV
	for _, g := range []partition.GroupID{0, 2} {
		kvs, err := c.reps[g].store.ScanAux(nil, nil, kv.ScanLimitMax)
		if err != nil {
			f.Fatal(err)
		}
		states = append(states, kvs)
	}
	return states
}

// FuzzExecutorState: an executor over a store whose records are corrupt
// refuses to start, or fails an Execute, with an error about corruption;
// it never panics. The records replace the executor's; result, when not
// empty, is stored as the result of the delivery the Execute brings.
func FuzzExecutorState(f *testing.F) {
	for _, kvs := range executorStates(f) {
		f.Add(appendRecords(nil, kvs), []byte(nil))
	}
	f.Add(appendRecords(nil, nil), appendResultRecord(nil, 1, &txn.PieceResult{Succeeded: true}))
	f.Add(appendRecords(nil, nil), []byte{resultRecordVersion, 1, 2})
	top := testTopology(f)
	pm := testPartitionMap(f, top)
	s, err := kv.Open(kv.Options{Dir: f.TempDir(), NoSync: true})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() {
		if err := s.Close(); err != nil {
			f.Error(err)
		}
	})
	probe := txn.AppendTxnPayload(nil, mustParse(f, remoteCompare))
	seq := uint64(0)
	f.Fuzz(func(t *testing.T, records, result []byte) {
		b := s.NewBatch()
		defer b.Close()
		if err := b.DeleteAuxRange(nil, nil); err != nil {
			t.Fatal(err)
		}
		d := wire.NewDecoder(records)
		for n := d.Count(2); n > 0 && d.Err() == nil; n-- {
			k, v := d.Bytes(), d.Bytes()
			if d.Err() == nil && len(k) > 0 && len(k) <= kv.AuxKeyMax && len(v) <= kv.AuxValueMax {
				if err := b.PutAux(k, v); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := s.CommitAux(b); err != nil {
			t.Fatal(err)
		}
		seq++
		id := multicast.MsgID{Client: 1 << 40, Seq: seq}
		if len(result) > 0 && len(result) <= kv.ValueMax {
			rb := s.NewBatch()
			defer rb.Close()
			if err := rb.SetResult(id.String(), result); err != nil {
				t.Fatal(err)
			}
			if err := s.Commit(rb, s.AppliedIndex()+1); err != nil {
				t.Fatal(err)
			}
		}
		ex, err := NewExecutor(Config{Store: s, Partitions: pm, Topology: top, Self: 0})
		if err != nil {
			if !corrupt(err) {
				t.Fatalf("NewExecutor: %v, not about corruption", err)
			}
			return
		}
		if _, _, err := ex.Result(id); err != nil && !corrupt(err) && !errors.Is(err, ErrAcknowledged) {
			t.Fatalf("Result: %v, not about corruption", err)
		}
		if _, err := ex.Sent(s.AppliedIndex()); err != nil && !corrupt(err) {
			t.Fatalf("Sent: %v, not about corruption", err)
		}
		m := multicast.Message{ID: id, Dst: partition.SetOf(0, 2), Payload: probe}
		in := []rawnode.AppInbound{{From: 2, Payload: txn.AppendVote(nil, id, txn.Vote{Group: 2, Holds: true})}}
		if _, err := ex.Execute(s.AppliedIndex()+1, group.Clock{}, []multicast.Message{m}, in); err != nil && !corrupt(err) {
			t.Fatalf("Execute: %v, not about corruption", err)
		}
	})
}
