package executor

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math"

	"github.com/flexkv/flexkv/internal/invariants"
	"github.com/flexkv/flexkv/internal/wire"
	"github.com/flexkv/flexkv/kv"
	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/multicast/rawnode"
	"github.com/flexkv/flexkv/partition"
	"github.com/flexkv/flexkv/txn"
)

// The executor's records in the store's aux namespace:
//
//	'm'                                  -> meta: counters, the next queue seq
//	'q' seq (8 B BE)                     -> a queued delivery
//	'q' seq (8 B BE) 'v'                 -> (empty) the queued piece voted
//	's' index (8 B BE) n (4 B BE)        -> the n-th send of entry index
//	'v' client (8 B BE) seq (8 B BE) g   -> the vote of group g (1 byte) on
//	                                        transaction client.seq: its
//	                                        arrival (8 B BE), then the vote
//
//	'c' client (8 B BE)                  -> a session record (sessions.go)
//	'r' client (8 B BE) seq (8 B BE)     -> the result record of a session's
//	                                        transaction, kept until the
//	                                        session acknowledges it, when
//	                                        too large for the session
//	                                        record, which holds the others
//
// A vote's arrival numbers the stored votes in the order they were stored
// (execMeta.voteNext), for the bound on stored votes (Config.StoredVoteBytesMax),
// which drops the oldest first.
//
// The results of sessions' transactions are in their session records or
// 'r' records (sessions.go); the others' (and
// a session's acknowledged before it ran) are kv results
// (kv.Batch.SetResult), under the transaction id. Each is a result record: the digest of the delivery that
// ran (digestOf) beside its PieceResult, so that a later delivery
// under the same id tells a re-submission from another transaction.
//
// Big-endian numbers keep each kind's records in numeric order, so the
// queue comes out in delivery order, each voted mark right after its
// delivery, an entry's sends come out in order, and the votes on one
// transaction are one range. Deliveries leave the queue in any order
// (pipelined execution, conflict.go), so the queue is the set of its
// records, not a range of sequences.
const (
	auxMeta  byte = 'm'
	auxQueue byte = 'q'
	auxSent  byte = 's'
	auxVote  byte = 'v'
)

// votedMark is the suffix of a queue record's voted mark.
const votedMark byte = 'v'

var metaKey = []byte{auxMeta}

func queueKey(seq uint64) []byte {
	return binary.BigEndian.AppendUint64([]byte{auxQueue}, seq)
}

func votedKey(seq uint64) []byte {
	return append(queueKey(seq), votedMark)
}

func sentKey(index uint64, n uint32) []byte {
	k := binary.BigEndian.AppendUint64([]byte{auxSent}, index)
	return binary.BigEndian.AppendUint32(k, n)
}

// sentPrefixEnd is the first key after the sends of entry index.
func sentPrefixEnd(index uint64) []byte {
	if index == math.MaxUint64 {
		return []byte{auxSent + 1}
	}
	return binary.BigEndian.AppendUint64([]byte{auxSent}, index+1)
}

func votePrefix(id multicast.MsgID) []byte {
	k := binary.BigEndian.AppendUint64([]byte{auxVote}, id.Client)
	return binary.BigEndian.AppendUint64(k, id.Seq)
}

func voteKey(id multicast.MsgID, g partition.GroupID) []byte {
	return append(votePrefix(id), byte(g))
}

// voteRecordHead is the length of a vote record's value before the vote.
const voteRecordHead = 8

// voteRecordSize is what a stored vote of payload bytes counts against
// Config.StoredVoteBytesMax: its key and value.
func voteRecordSize(payload int) int64 { return int64(18 + voteRecordHead + payload) }

// voteRecordMax is the size of the largest vote record.
const voteRecordMax = 18 + voteRecordHead + txn.VoteBytesMax

func appendVoteRecord(b []byte, arrival uint64, payload []byte) []byte {
	b = binary.BigEndian.AppendUint64(b, arrival)
	return append(b, payload...)
}

// parseVoteRecord splits a vote record's value into its arrival and vote.
func parseVoteRecord(v []byte) (uint64, []byte, error) {
	if len(v) < voteRecordHead {
		return 0, nil, fmt.Errorf("%w: vote record of %d bytes", kv.ErrCorrupt, len(v))
	}
	return binary.BigEndian.Uint64(v), v[voteRecordHead:], nil
}

// parseQueueKey returns the sequence of a queue record's key, and whether
// the key is the voted mark of that record.
func parseQueueKey(k []byte) (seq uint64, mark bool, err error) {
	if len(k) < 9 || k[0] != auxQueue || len(k) > 10 || (len(k) == 10 && k[9] != votedMark) {
		return 0, false, fmt.Errorf("%w: queue record key %x", kv.ErrCorrupt, k)
	}
	return binary.BigEndian.Uint64(k[1:9]), len(k) == 10, nil
}

// parseVoteKey returns the transaction and the group of a vote record's
// key.
func parseVoteKey(k []byte) (multicast.MsgID, partition.GroupID, error) {
	if len(k) != 18 || k[0] != auxVote || k[17] >= partition.GroupsMax {
		return multicast.MsgID{}, 0, fmt.Errorf("%w: vote record key %x", kv.ErrCorrupt, k)
	}
	id := multicast.MsgID{Client: binary.BigEndian.Uint64(k[1:9]), Seq: binary.BigEndian.Uint64(k[9:17])}
	return id, partition.GroupID(k[17]), nil
}

// execMeta is the executor's meta record.
type execMeta struct {
	qNext      uint64 // the sequence of the next queued delivery
	queued     uint64 // deliveries queued
	votes      uint64 // votes stored
	executed   uint64
	aborted    uint64
	junkVotes  uint64
	votesEarly uint64
	ranAhead   uint64
	duplicates uint64
	// voteNext is the arrival of the next stored vote.
	voteNext     uint64
	votesSent    uint64
	votesEvicted uint64
	// now is the log time of the last entry executed (group.Clock),
	// touchNext the touch number of the next session use; sessions and
	// sessionResults count the session records and the results they keep
	// (sessions.go).
	now             uint64
	touchNext       uint64
	sessions        uint64
	sessionResults  uint64
	resultsAcked    uint64
	sessionsExpired uint64
	sessionsEvicted uint64
}

// metaVersion 5: sessions keep their results until acknowledged
// (sessions.go), and the meta record holds the log time, the next touch
// number and the session counters. Version 4: a stored vote starts with its arrival, and the meta
// record holds the next arrival and counts the votes sent and evicted.
// Version 3 stored bare votes; its results were already result records,
// with the digest of their delivery, and it counted duplicates. Version 2
// stored bare PieceResults; version 1 kept a queue that only ran from its
// head, with the head's voted flag in the meta record. A store of another
// version is refused (loadMeta), not converted.
const metaVersion = 5

func (m *execMeta) fields() []*uint64 {
	return []*uint64{&m.qNext, &m.queued, &m.votes, &m.executed, &m.aborted, &m.junkVotes, &m.votesEarly, &m.ranAhead, &m.duplicates,
		&m.voteNext, &m.votesSent, &m.votesEvicted,
		&m.now, &m.touchNext, &m.sessions, &m.sessionResults, &m.resultsAcked, &m.sessionsExpired, &m.sessionsEvicted}
}

func (m *execMeta) stats() Stats {
	return Stats{
		Executed: m.executed, Aborted: m.aborted, Queued: m.queued,
		VotesStored: m.votes, VotesJunk: m.junkVotes,
		VotesEarly: m.votesEarly, RanAhead: m.ranAhead,
		Duplicates: m.duplicates,
		VotesSent:  m.votesSent, VotesEvicted: m.votesEvicted,
		Sessions: m.sessions, SessionResults: m.sessionResults, ResultsAcked: m.resultsAcked,
		SessionsExpired: m.sessionsExpired, SessionsEvicted: m.sessionsEvicted,
	}
}

func (m *execMeta) append(b []byte) []byte {
	b = append(b, metaVersion)
	for _, p := range m.fields() {
		b = wire.AppendUvarint(b, *p)
	}
	return b
}

// checkMetaRecord asserts that the meta record rec reads back as m: what a
// restart resumes (loadMeta) is the state written.
func checkMetaRecord(m *execMeta, rec []byte) {
	if got, err := decodeMeta(rec); err != nil || got != *m {
		invariants.Violated("executor: meta record of %+v reads back as %+v (%v)", *m, got, err)
	}
}

func decodeMeta(b []byte) (execMeta, error) {
	d := wire.NewDecoder(b)
	if v := d.Byte(); d.Err() == nil && v != metaVersion {
		d.Fail("executor meta version %d, want %d (a store written by an older version is not converted: restore it from a snapshot of a current replica, or start it afresh)", v, metaVersion)
	}
	var m execMeta
	for _, p := range m.fields() {
		*p = d.Uvarint()
	}
	if err := d.Finish(); err != nil {
		return execMeta{}, err
	}
	if m.queued > m.qNext {
		return execMeta{}, fmt.Errorf("%w: %d deliveries queued, more than the %d ever queued", wire.ErrCorrupt, m.queued, m.qNext)
	}
	return m, nil
}

// loadMeta reads the committed meta record; a store without one is fresh.
func loadMeta(s *kv.Store) (execMeta, error) {
	b, ok, err := s.GetAux(metaKey)
	switch {
	case err != nil:
		return execMeta{}, fmt.Errorf("txn: executor state: %w", err)
	case !ok:
		return execMeta{}, nil
	}
	m, err := decodeMeta(b)
	if err != nil {
		return execMeta{}, fmt.Errorf("txn: executor state: %w", err)
	}
	return m, nil
}

// scanAux calls f with every committed aux record of [start, end), in key
// order.
func scanAux(s *kv.Store, start, end []byte, f func(kv.KV) error) error {
	for {
		kvs, err := s.ScanAux(start, end, kv.ScanLimitMax)
		if err != nil {
			return err
		}
		for _, r := range kvs {
			if err := f(r); err != nil {
				return err
			}
		}
		if len(kvs) < kv.ScanLimitMax {
			return nil
		}
		start = append(kvs[len(kvs)-1].Key, 0)
	}
}

// delivery is a delivered message as the executor keeps it. A payload over
// PayloadMax is not kept: size records its length, for the same abort
// reason wherever it is examined.
type delivery struct {
	msg    multicast.Message
	size   int
	digest uint64 // digestOf the kept delivery
}

func newDelivery(m multicast.Message) delivery {
	d := delivery{msg: m, size: len(m.Payload)}
	if d.size > txn.PayloadMax {
		d.msg.Payload = nil
	}
	d.digest = digestOf(&d)
	return d
}

// digestOf identifies the transaction d carries, by what the executor keeps
// of it: its destination set, payload size and payload (FNV-1a, 64 bits).
// Two deliveries under one id with the same digest are the same
// transaction, submitted twice; a collision only makes a reused id look
// like a re-submission, which the executor skips as well.
func digestOf(d *delivery) uint64 {
	h := fnv.New64a()
	var head [16]byte
	binary.BigEndian.PutUint64(head[:8], uint64(d.msg.Dst))
	binary.BigEndian.PutUint64(head[8:], uint64(d.size))
	_, _ = h.Write(head[:]) // a hash.Hash never fails to write
	_, _ = h.Write(d.msg.Payload)
	return h.Sum64()
}

// The result record of a transaction: version (byte), the digest of its
// delivery (8 bytes, big endian), then its PieceResult (AppendPieceResult).
const resultRecordVersion = 1

// resultRecordHead is the length of a result record before its PieceResult.
const resultRecordHead = 9

func appendResultRecord(b []byte, digest uint64, r *txn.PieceResult) []byte {
	b = append(b, resultRecordVersion)
	b = binary.BigEndian.AppendUint64(b, digest)
	return txn.AppendPieceResult(b, r)
}

// checkResultRecord asserts that the result record rec reads back as the
// digest and PieceResult it was made of: what Result returns, and what a
// duplicate's digest is compared with, is what ran.
func checkResultRecord(rec []byte, digest uint64, r *txn.PieceResult) {
	got, res, err := decodeResultRecord(rec)
	switch {
	case err != nil:
		invariants.Violated("executor: result record does not read back: %v", err)
	case got != digest:
		invariants.Violated("executor: result record of digest %#x reads back digest %#x", digest, got)
	case res.Succeeded != r.Succeeded || res.Aborted != r.Aborted || res.Truncated != r.Truncated || res.Reason != r.Reason ||
		len(res.Results) != len(r.Results) || !bytes.Equal(txn.AppendPieceResult(nil, &res), rec[resultRecordHead:]):
		invariants.Violated("executor: result record of %+v reads back as %+v", *r, res)
	}
}

// resultDigest returns the digest of a result record, without decoding its
// PieceResult.
func resultDigest(b []byte) (uint64, error) {
	switch {
	case len(b) < resultRecordHead:
		return 0, fmt.Errorf("txn: result record: %w: %d bytes", wire.ErrCorrupt, len(b))
	case b[0] != resultRecordVersion:
		return 0, fmt.Errorf("txn: result record: %w: version %d, want %d", wire.ErrCorrupt, b[0], resultRecordVersion)
	}
	return binary.BigEndian.Uint64(b[1:resultRecordHead]), nil
}

// decodeResultRecord reads what appendResultRecord wrote.
func decodeResultRecord(b []byte) (uint64, txn.PieceResult, error) {
	digest, err := resultDigest(b)
	if err != nil {
		return 0, txn.PieceResult{}, err
	}
	r, err := txn.DecodePieceResult(b[resultRecordHead:])
	if err != nil {
		return 0, txn.PieceResult{}, fmt.Errorf("txn: result record: %w", err)
	}
	return digest, r, nil
}

// The queue record of a delivery: id, dst (uvarint), size (uvarint),
// payload (bytes). The destination set is kept as delivered, unchecked:
// the delivery is judged when it runs.
func (d *delivery) append(b []byte) []byte {
	b = multicast.AppendMsgID(b, d.msg.ID)
	b = wire.AppendUvarint(b, uint64(d.msg.Dst))
	b = wire.AppendUvarint(b, uint64(d.size))
	return wire.AppendBytes(b, d.msg.Payload)
}

// checkQueueRecord asserts that the queue record rec reads back as d: a
// restarted replica runs the delivery it reads back (load), which must be
// the one that was queued, digest included.
func checkQueueRecord(d *delivery, rec []byte) {
	got, err := decodeDelivery(rec)
	if err != nil || got.msg.ID != d.msg.ID || got.msg.Dst != d.msg.Dst || got.size != d.size ||
		got.digest != d.digest || !bytes.Equal(got.msg.Payload, d.msg.Payload) {
		invariants.Violated("executor: queue record of %s (dst %s, %d bytes, digest %#x) reads back as %s (dst %s, %d bytes, digest %#x): %v",
			d.msg.ID, d.msg.Dst, d.size, d.digest, got.msg.ID, got.msg.Dst, got.size, got.digest, err)
	}
}

func decodeDelivery(b []byte) (delivery, error) {
	dec := wire.NewDecoder(b)
	var d delivery
	d.msg.ID = multicast.DecodeMsgID(dec)
	d.msg.Dst = partition.GroupSet(dec.Uvarint())
	size := dec.Uvarint()
	d.msg.Payload = dec.Bytes()
	switch {
	case dec.Err() != nil:
	case size > math.MaxInt32:
		dec.Fail("payload size %d", size)
	case size <= txn.PayloadMax && size != uint64(len(d.msg.Payload)):
		dec.Fail("payload of %d bytes, recorded as %d", len(d.msg.Payload), size)
	case size > txn.PayloadMax && len(d.msg.Payload) != 0:
		dec.Fail("oversized payload kept")
	}
	d.size = int(size)
	if err := dec.Finish(); err != nil {
		return delivery{}, fmt.Errorf("txn: queued delivery: %w", err)
	}
	d.digest = digestOf(&d)
	return d, nil
}

// The record of a send: to (uvarint), about (msgid), payload (bytes).
func appendSend(b []byte, s rawnode.AppSend) []byte {
	b = wire.AppendUvarint(b, uint64(s.To))
	b = multicast.AppendMsgID(b, s.About)
	return wire.AppendBytes(b, s.Payload)
}

// checkSentRecord asserts that the sent record rec reads back as s: Sent
// hands a replaying replica's channels what it reads back.
func checkSentRecord(s rawnode.AppSend, rec []byte) {
	got, err := decodeSend(rec)
	if err != nil || got.To != s.To || got.About != s.About || !bytes.Equal(got.Payload, s.Payload) {
		invariants.Violated("executor: sent record to group %d about %s reads back as to %d about %s: %v", s.To, s.About, got.To, got.About, err)
	}
}

func decodeSend(b []byte) (rawnode.AppSend, error) {
	d := wire.NewDecoder(b)
	s := rawnode.AppSend{To: d.Group(partition.GroupsMax), About: multicast.DecodeMsgID(d)}
	s.Payload = append([]byte{}, d.Bytes()...)
	if err := d.Finish(); err != nil {
		return rawnode.AppSend{}, fmt.Errorf("txn: sent record: %w", err)
	}
	return s, nil
}
