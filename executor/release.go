package executor

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"maps"
	"slices"

	"github.com/flexkv/flexkv/internal/wire"
	"github.com/flexkv/flexkv/kv"
	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/multicast/rawnode"
	"github.com/flexkv/flexkv/partition"
	"github.com/flexkv/flexkv/txn"
)

// Real-time order (DESIGN 6 and 12: strict serializability), with
// Config.Strict.
//
// Delivery order makes the executions serializable: the union of the
// groups' orders is acyclic, and each group runs its pieces in an order
// conflict-equivalent to its own (conflict.go). It does not make them
// strictly serializable: a genuine multicast orders two transactions only
// where their destinations meet, and a transaction's pieces run at
// different moments at different groups. Say T goes to groups g and h, and
// runs at g first. A transaction U of g alone that reads T's write there
// runs and is answered; a transaction V of h alone, sent after U's answer,
// may run at h before T does. The only serial order of the three is V, T,
// U, and U ended before V began.
//
// So an answer waits. A piece of T is released at a group once it ran there
// and every job that ran there before it and conflicts with it (conflict.go,
// rule 2's relation: one writes what the other reads or writes) is
// complete; T is complete once its piece is released at every destination.
// A destination's answer (Result, Config.OnReleased) is given at release,
// not at the run; a destination that releases its piece of a transaction of
// several groups tells the others with a release note on the channel
// (txn.AppendRelease), and learns the others' from theirs.
//
// Why it is enough. Let A complete before B is invoked, and suppose a path
// B = X0 -> X1 -> ... -> Xk = A of conflicts, each Xi ordered before Xi+1
// at a group gi that both reach. Xk's piece at g(k-1) was released, so
// X(k-1) was complete before A completed; by the same step back along the
// path, every Xi, X1 included, was complete before A completed, so X1 ran
// at g0 before B was invoked, and B, delivered at g0 after its invocation,
// is ordered after X1 there: the edge X0 -> X1 cannot be. Real-time order
// adds no cycle to the conflict order. The waits cannot form a cycle
// either: a piece waits only for jobs ordered before it, and the union of
// the orders is acyclic.
//
// A job that aborted touched nothing: its footprint is empty, it waits for
// nothing and holds nothing up, but its destinations still note it. A job of
// one group that conflicts with no open job is released and complete at
// once, and leaves no trace. The open jobs (ran, not complete) are durable
// records beside the queue, as are the notes that arrive before their job
// runs here (earlyNotesMax bounds those; the oldest go first).

// earlyNotesMax bounds the notes kept for jobs that have not run here.
const earlyNotesMax = 1 << 16

// Record keys of the open jobs and the early notes (execstate.go).
const (
	auxOpen byte = 'o'
	auxNote byte = 'n'
)

func openKey(seq uint64) []byte { return binary.BigEndian.AppendUint64([]byte{auxOpen}, seq) }

func noteKey(id multicast.MsgID) []byte {
	k := binary.BigEndian.AppendUint64([]byte{auxNote}, id.Client)
	return binary.BigEndian.AppendUint64(k, id.Seq)
}

// openJob is a job that ran here and is not complete.
type openJob struct {
	seq  uint64 // its queue sequence: the open jobs' order is delivery order
	id   multicast.MsgID
	dst  partition.GroupSet // the groups that release it: its destinations
	fp   footprint          // what it touched here; empty if it aborted
	here bool               // released here
	from partition.GroupSet // the other destinations whose notes arrived
}

func (o *openJob) complete(self partition.GroupID) bool {
	return o.here && o.from == o.dst.Remove(self)
}

// earlyNote is what arrived of the notes on a job that has not run here.
type earlyNote struct {
	from    partition.GroupSet
	arrival uint64 // the entry that stored it
}

// releases is the executor's real-time state.
type releases struct {
	open    []*openJob // by seq
	byID    map[multicast.MsgID]*openJob
	held    *countSet // the footprints of the open jobs released here
	waiting *countSet // the footprints of the open jobs not released here
	early   map[multicast.MsgID]earlyNote
	// earlyOrder is the early notes by arrival, then id; stale entries
	// (a note consumed since) are skipped.
	earlyOrder []earlyArrival
}

type earlyArrival struct {
	arrival uint64
	id      multicast.MsgID
}

func newReleases() releases {
	return releases{byID: map[multicast.MsgID]*openJob{}, held: newCountSet(), waiting: newCountSet(), early: map[multicast.MsgID]earlyNote{}}
}

// blocks reports whether a job of footprint f, run after every open job,
// conflicts with one of them.
func (r *releases) blocks(f *footprint) bool { return r.held.blocks(f) || r.waiting.blocks(f) }

// ranJob is a job an execution ran, for settle.
type ranJob struct {
	q   *queued
	res txn.PieceResult
	fp  footprint // a call's: what its run touched
}

// settle applies what the execution changed to the open jobs: the notes
// that arrived complete some, the jobs that ran join them or are released
// at once, and the jobs that waited for the completed ones are released.
// It fills x.released, and writes the records.
func (x *execution) settle() error {
	e := x.e
	if !e.cfg.Strict {
		for _, rj := range x.runs {
			x.released = append(x.released, Executed{ID: rj.q.job.id, Result: rj.res})
		}
		return nil
	}
	r, self := &e.rel, e.cfg.Self
	completed := false
	if x.noted {
		var err error
		if completed, err = x.dropComplete(); err != nil {
			return err
		}
	}
	for i := range x.runs {
		if err := x.opened(&x.runs[i]); err != nil {
			return err
		}
	}
	if !completed || r.waiting.n == 0 {
		return nil
	}
	// Release the waiting jobs that no longer conflict with an open job
	// ahead of them, in order: the set holds the ones ahead still waiting.
	ahead := e.conflicts
	ahead.reset()
	done := false
	for _, o := range r.open {
		if o.here {
			continue
		}
		if r.held.blocks(&o.fp) || (ahead.jobs > 0 && ahead.blocksRun(&o.fp)) {
			ahead.add(&o.fp)
			continue
		}
		r.waiting.remove(&o.fp)
		o.here = true
		res, found, err := x.storedResultOf(o.id)
		if err != nil {
			return err
		}
		if found {
			x.released = append(x.released, Executed{ID: o.id, Result: res})
		}
		x.notify(o.id, o.dst)
		if o.complete(self) {
			// Never held: it holds up none of the jobs behind it.
			delete(r.byID, o.id)
			if err := x.b.DeleteAux(openKey(o.seq)); err != nil {
				return err
			}
			done = true
			continue
		}
		r.held.add(&o.fp)
		if err := x.b.PutAux(openKey(o.seq), appendOpenRecord(nil, o)); err != nil {
			return err
		}
	}
	if done {
		r.open = slices.DeleteFunc(r.open, func(o *openJob) bool { return o.complete(self) })
	}
	return nil
}

// dropComplete forgets the complete open jobs and deletes their records;
// it reports whether there was one.
func (x *execution) dropComplete() (bool, error) {
	r, self := &x.e.rel, x.e.cfg.Self
	kept := r.open[:0]
	dropped := false
	for _, o := range r.open {
		if !o.complete(self) {
			kept = append(kept, o)
			continue
		}
		dropped = true
		r.held.remove(&o.fp)
		delete(r.byID, o.id)
		if err := x.b.DeleteAux(openKey(o.seq)); err != nil {
			return false, err
		}
	}
	clear(r.open[len(kept):])
	r.open = kept
	return dropped, nil
}

// opened settles a job that ran in this execution: released at once when
// it conflicts with no open job, else open and waiting.
func (x *execution) opened(rj *ranJob) error {
	e := x.e
	r, self := &e.rel, e.cfg.Self
	j := rj.q.job
	dst := partition.SetOf(self)
	if j.dst.Has(self) {
		dst = j.dst
	}
	if j.marker || (dst == partition.SetOf(self) && len(r.open) == 0) {
		// A backup marker touches no user key: nobody waits for it. A job
		// of this group alone with no open job before it is released and
		// complete at once: the common case needs no footprint.
		x.released = append(x.released, Executed{ID: j.id, Result: rj.res})
		return nil
	}
	o := &openJob{seq: rj.q.seq, id: j.id, dst: dst}
	switch {
	case rj.res.Aborted:
	case j.call != nil:
		o.fp = rj.fp
	default:
		o.fp = *rj.q.footprint()
	}
	if n, ok := r.early[j.id]; ok {
		o.from = n.from & o.dst.Remove(self)
		delete(r.early, j.id)
		if err := x.b.DeleteAux(noteKey(j.id)); err != nil {
			return err
		}
	}
	if r.blocks(&o.fp) {
		r.waiting.add(&o.fp)
		x.waited = append(x.waited, j.id)
	} else {
		o.here = true
		x.released = append(x.released, Executed{ID: j.id, Result: rj.res})
		x.notify(j.id, o.dst)
		if o.complete(self) {
			return nil
		}
		r.held.add(&o.fp)
	}
	r.insert(o)
	return x.b.PutAux(openKey(o.seq), appendOpenRecord(nil, o))
}

// tracksCall reports whether a call j that runs now must record what it
// touches, for its release (opened): unless it is of this group alone and
// nothing may be open when its turn in settle comes. Open jobs are added
// only by settle, from the runs of the execution, so with none open now and
// none run before j in this execution, none is open at j's turn.
func (x *execution) tracksCall(j *job) bool {
	return x.e.cfg.Strict && (len(x.e.rel.open) > 0 || len(x.runs) > 0 || !j.dst.Remove(j.self).Empty())
}

// insert adds o to the open jobs, in seq order (usually last).
func (r *releases) insert(o *openJob) {
	i := len(r.open)
	for i > 0 && r.open[i-1].seq > o.seq {
		i--
	}
	r.open = slices.Insert(r.open, i, o)
	r.byID[o.id] = o
}

// notify sends the note that this group released its piece of id to the
// other destinations.
func (x *execution) notify(id multicast.MsgID, dst partition.GroupSet) {
	self := x.e.cfg.Self
	if !dst.Has(self) {
		return
	}
	others := dst.Remove(self)
	if others.Empty() {
		return
	}
	payload := txn.AppendRelease(nil, id, self)
	for _, g := range others.Slice() {
		x.sends = append(x.sends, rawnode.AppSend{To: g, About: id, Payload: payload})
	}
}

// noteSkipped answers, with Config.Strict, a delivery skipped because its
// id has a result here (an id used again, see Executor, Reused ids): a
// destination that runs it again waits for this group's note, which goes
// out again unless this group's piece under the id is still to be
// released (its release sends it).
func (x *execution) noteSkipped(m multicast.Message) {
	if !x.e.cfg.Strict {
		return
	}
	if o := x.e.rel.byID[m.ID]; o != nil && !o.here {
		return
	}
	x.notify(m.ID, m.Dst)
}

// storedResultOf reads the result of id from the batch.
func (x *execution) storedResultOf(id multicast.MsgID) (txn.PieceResult, bool, error) {
	rec, found, err := x.result(id)
	if err != nil || !found {
		return txn.PieceResult{}, false, err
	}
	res, err := decodeStoredResult(id, rec)
	if err != nil {
		return txn.PieceResult{}, false, err
	}
	return res, true, nil
}

// receiveNote takes a release note that arrived from another group: it
// completes an open job, or waits for its job to run here. A note that
// does not decode, whose group is not its sender, or that repeats one is
// junk (counted with the junk votes).
func (x *execution) receiveNote(in rawnode.AppInbound) error {
	e := x.e
	cfg, r := &e.cfg, &e.rel
	id, g, err := txn.DecodeRelease(in.Payload)
	if err != nil || g != in.From || !cfg.Topology.Valid(g) || g == cfg.Self || !cfg.Strict {
		x.meta.junkVotes++
		return nil
	}
	if o := r.byID[id]; o != nil {
		if !o.dst.Has(g) || o.from.Has(g) {
			x.meta.junkVotes++
			return nil
		}
		o.from = o.from.Add(g)
		x.noted = true
		return x.b.PutAux(openKey(o.seq), appendOpenRecord(nil, o))
	}
	if _, found, err := x.result(id); err != nil || found {
		// Ran here and complete, or about an id used before.
		x.meta.junkVotes++
		return err
	}
	n, ok := r.early[id]
	if n.from.Has(g) {
		x.meta.junkVotes++
		return nil
	}
	if !ok {
		n.arrival = x.index
		r.earlyOrder = append(r.earlyOrder, earlyArrival{arrival: n.arrival, id: id})
	}
	n.from = n.from.Add(g)
	r.early[id] = n
	if err := x.b.PutAux(noteKey(id), appendNoteRecord(nil, n)); err != nil {
		return err
	}
	return x.evictNotes()
}

// evictNotes drops the oldest early notes beyond earlyNotesMax.
func (x *execution) evictNotes() error {
	r := &x.e.rel
	for len(r.early) > earlyNotesMax && len(r.earlyOrder) > 0 {
		a := r.earlyOrder[0]
		r.earlyOrder = r.earlyOrder[1:]
		if n, ok := r.early[a.id]; !ok || n.arrival != a.arrival {
			continue
		}
		delete(r.early, a.id)
		x.meta.junkVotes++
		if err := x.b.DeleteAux(noteKey(a.id)); err != nil {
			return err
		}
	}
	// Drop the stale arrivals once they are most of them.
	if len(r.earlyOrder) > 64 && len(r.earlyOrder) > 2*len(r.early) {
		r.earlyOrder = slices.DeleteFunc(r.earlyOrder, func(a earlyArrival) bool {
			n, ok := r.early[a.id]
			return !ok || n.arrival != a.arrival
		})
	}
	return nil
}

// loadReleases reads the open jobs and the early notes back from s.
func loadReleases(s *kv.Store) (releases, error) {
	r := newReleases()
	err := scanAux(s, []byte{auxOpen}, []byte{auxOpen + 1}, func(rec kv.KV) error {
		if len(rec.Key) != 9 {
			return fmt.Errorf("%w: open job record key %x", kv.ErrCorrupt, rec.Key)
		}
		o, err := decodeOpenRecord(rec.Value)
		if err != nil {
			return fmt.Errorf("%w: open job %x: %w", kv.ErrCorrupt, rec.Key, err)
		}
		o.seq = binary.BigEndian.Uint64(rec.Key[1:])
		r.open = append(r.open, o)
		r.byID[o.id] = o
		if o.here {
			r.held.add(&o.fp)
		} else {
			r.waiting.add(&o.fp)
		}
		return nil
	})
	if err != nil {
		return releases{}, err
	}
	err = scanAux(s, []byte{auxNote}, []byte{auxNote + 1}, func(rec kv.KV) error {
		if len(rec.Key) != 17 {
			return fmt.Errorf("%w: release note record key %x", kv.ErrCorrupt, rec.Key)
		}
		id := multicast.MsgID{Client: binary.BigEndian.Uint64(rec.Key[1:9]), Seq: binary.BigEndian.Uint64(rec.Key[9:])}
		n, err := decodeNoteRecord(rec.Value)
		if err != nil {
			return fmt.Errorf("%w: release note of %s: %w", kv.ErrCorrupt, id, err)
		}
		r.early[id] = n
		r.earlyOrder = append(r.earlyOrder, earlyArrival{arrival: n.arrival, id: id})
		return nil
	})
	if err != nil {
		return releases{}, err
	}
	slices.SortFunc(r.earlyOrder, func(a, b earlyArrival) int {
		return cmp.Or(cmp.Compare(a.arrival, b.arrival), cmp.Compare(a.id.Client, b.id.Client), cmp.Compare(a.id.Seq, b.id.Seq))
	})
	return r, nil
}

// The open job record:
//
//	open = id:msgid dst:uvarint from:uvarint here:byte footprint
//	footprint = all:byte reads:keys writes:keys scans:count (start:bytes end:bytes)*
//	keys = count key:bytes*
func appendOpenRecord(b []byte, o *openJob) []byte {
	b = multicast.AppendMsgID(b, o.id)
	b = wire.AppendUvarint(b, uint64(o.dst))
	b = wire.AppendUvarint(b, uint64(o.from))
	b = append(b, boolByte(o.here), boolByte(o.fp.all))
	b = appendKeys(b, o.fp.reads)
	b = appendKeys(b, o.fp.writes)
	b = wire.AppendUvarint(b, uint64(len(o.fp.scans)))
	for _, sp := range o.fp.scans {
		b = wire.AppendBytes(b, []byte(sp.start))
		b = wire.AppendBytes(b, []byte(sp.end))
	}
	return b
}

func appendKeys(b []byte, keys []string) []byte {
	b = wire.AppendUvarint(b, uint64(len(keys)))
	for _, k := range keys {
		b = wire.AppendBytes(b, []byte(k))
	}
	return b
}

func boolByte(v bool) byte {
	if v {
		return 1
	}
	return 0
}

func decodeOpenRecord(b []byte) (*openJob, error) {
	d := wire.NewDecoder(b)
	o := &openJob{id: multicast.DecodeMsgID(d)}
	o.dst = d.GroupSet(partition.GroupsMax)
	o.from = d.GroupSet(partition.GroupsMax)
	o.here = d.Byte() == 1
	o.fp.all = d.Byte() == 1
	o.fp.reads = decodeKeys(d)
	o.fp.writes = decodeKeys(d)
	n := d.Count(2)
	for range n {
		o.fp.scans = append(o.fp.scans, span{start: string(d.Bytes()), end: string(d.Bytes())})
	}
	if err := d.Finish(); err != nil {
		return nil, err
	}
	return o, nil
}

func decodeKeys(d *wire.Decoder) []string {
	n := d.Count(1)
	var keys []string
	for range n {
		keys = append(keys, string(d.Bytes()))
	}
	return keys
}

// The early note record: arrival:8 bytes, big endian, from:uvarint.
func appendNoteRecord(b []byte, n earlyNote) []byte {
	b = binary.BigEndian.AppendUint64(b, n.arrival)
	return wire.AppendUvarint(b, uint64(n.from))
}

func decodeNoteRecord(b []byte) (earlyNote, error) {
	if len(b) < 8 {
		return earlyNote{}, fmt.Errorf("%d bytes", len(b))
	}
	n := earlyNote{arrival: binary.BigEndian.Uint64(b)}
	d := wire.NewDecoder(b[8:])
	n.from = d.GroupSet(partition.GroupsMax)
	return n, d.Finish()
}

// countSet is a multiset of footprints: the open jobs', which come and go
// (conflictSet only grows during a pass).
type countSet struct {
	n      int // footprints with a key
	all    int
	reads  map[string]int
	writes map[string]int
	scans  []span
}

func newCountSet() *countSet {
	return &countSet{reads: map[string]int{}, writes: map[string]int{}}
}

func (s *countSet) add(f *footprint) { s.change(f, 1) }

func (s *countSet) remove(f *footprint) { s.change(f, -1) }

func (s *countSet) change(f *footprint, by int) {
	if f.empty() {
		return
	}
	s.n += by
	if f.all {
		s.all += by
	}
	count := func(m map[string]int, k string) {
		if m[k] += by; m[k] == 0 {
			delete(m, k)
		}
	}
	for _, k := range f.reads {
		count(s.reads, k)
	}
	for _, k := range f.writes {
		count(s.writes, k)
	}
	for _, sp := range f.scans {
		if by > 0 {
			s.scans = append(s.scans, sp)
		} else if i := slices.Index(s.scans, sp); i >= 0 {
			s.scans = slices.Delete(s.scans, i, i+1)
		}
	}
}

// blocks reports whether a job of footprint f conflicts with one in s
// (conflictSet.blocksRun's relation).
func (s *countSet) blocks(f *footprint) bool {
	switch {
	case s.n == 0 || f.empty():
		return false
	case f.all || s.all > 0:
		return true
	}
	for _, k := range f.reads {
		if s.writes[k] > 0 {
			return true
		}
	}
	for _, k := range f.writes {
		if s.writes[k] > 0 || s.reads[k] > 0 {
			return true
		}
		for _, sp := range s.scans {
			if sp.has(k) {
				return true
			}
		}
	}
	for _, sp := range f.scans {
		//flexkv:unordered a membership test, whatever the order
		for k := range s.writes {
			if sp.has(k) {
				return true
			}
		}
	}
	return false
}

// check returns the first broken invariant of the real-time state: the
// open jobs in seq order, indexed by id, none complete, and the sets
// counting exactly their footprints. It takes O(open jobs).
func (r *releases) check(self partition.GroupID) error {
	held, waiting := newCountSet(), newCountSet()
	for i, o := range r.open {
		switch {
		case i > 0 && o.seq <= r.open[i-1].seq:
			return fmt.Errorf("executor: open job %d after %d", o.seq, r.open[i-1].seq)
		case r.byID[o.id] != o:
			return fmt.Errorf("executor: open job %s not indexed", o.id)
		case o.complete(self):
			return fmt.Errorf("executor: open job %s complete", o.id)
		case o.here:
			held.add(&o.fp)
		default:
			waiting.add(&o.fp)
		}
	}
	if len(r.byID) != len(r.open) {
		return fmt.Errorf("executor: %d open jobs indexed, %d open", len(r.byID), len(r.open))
	}
	if !held.equal(r.held) || !waiting.equal(r.waiting) {
		return fmt.Errorf("executor: the counted footprints of the open jobs are not theirs (held %d/%d, waiting %d/%d)", r.held.n, held.n, r.waiting.n, waiting.n)
	}
	return nil
}

func (s *countSet) equal(o *countSet) bool {
	return s.n == o.n && s.all == o.all && maps.Equal(s.reads, o.reads) && maps.Equal(s.writes, o.writes) && len(s.scans) == len(o.scans)
}
