package executor

import (
	"errors"
	"fmt"
	"slices"

	"github.com/flexkv/flexkv/group"
	"github.com/flexkv/flexkv/internal/invariants"
	"github.com/flexkv/flexkv/kv"
	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/multicast/rawnode"
	"github.com/flexkv/flexkv/partition"
	"github.com/flexkv/flexkv/txn"
)

// execution is the work of one Execute call: everything goes into b, and
// meta is the executor's meta as b changes it. It changes the executor's
// queue and votes in place; Execute marks them stale if it fails.
type execution struct {
	e     *Executor
	b     *kv.Batch
	rw    batchRW
	meta  execMeta
	now   uint64 // the entry's log time (group.Clock)
	sends []rawnode.AppSend
	// runs are the jobs run, in the order they ran; released the results
	// released (release.go), waited the jobs that ran and wait for their
	// release; noted: a release note changed an open job.
	runs     []ranJob
	released []Executed
	waited   []multicast.MsgID
	noted    bool
	// callFP is what the last call run touched (runCall), with
	// Config.Strict.
	callFP footprint
	// ran are the queue entries run by this execution, to delete.
	ran []*queued
	// trialJob, trialRes and trialView are the call whose trial run the
	// pass just took, its outcome and view, for runCall if the call runs
	// next on the same state: it runs once, not twice.
	trialJob  *job
	trialRes  txn.PieceResult
	trialView *procView
	// touched are the session records changed, to store (storeSessions).
	touched []*session
	// record is room for a session record, reused by storeSessions.
	record []byte
	// index is the entry's; sentBase the number of sends of the entry's
	// earlier parts (backup.go), after the marker whose checkpoint the
	// earlier part left for this one (zero in a first part), and marker
	// the backup marker this part ran, after which it stopped.
	index    uint64
	sentBase uint32
	after    multicast.MsgID
	marker   *job
	// switches are the partition maps of the entry's deliveries still to
	// take (moves.go).
	switches []group.PartitionSwitch
}

// job is a delivery prepared to run at this group.
type job struct {
	id     multicast.MsgID
	self   partition.GroupID // the group running it
	dst    partition.GroupSet
	digest uint64 // the delivery's digest
	// Exactly one of the following describes the job.
	reason string     // the delivery cannot run: the abort it reports
	piece  *txn.Piece // this group's piece of a transaction
	call   *txn.Call  // a procedure call, with its procedure
	proc   txn.Procedure
	// callVoteTo and callVoters are, for an all-or-nothing call
	// (txn.AllOrNothing), the groups this piece sends its vote to (every
	// other destination, if the piece can abort) and the other
	// destinations whose pieces can abort, whose votes it waits for.
	callVoteTo, callVoters partition.GroupSet
	// marker: the delivery is a backup marker (backup.go), a barrier.
	marker bool
	// pm is the partition map the job was prepared with (moves.go): a
	// call's procedure sees what the group owns by it.
	pm *partition.PartitionMap
}

// queued is a delivery in the executor's queue.
type queued struct {
	seq uint64
	job *job
	// fp is the job's footprint, once a pass needed it (footprint): a job
	// with nothing queued ahead of it is checked against nothing.
	fp    footprint
	hasFP bool
	// voted: the piece took its vote step (voteStep), or takes none.
	voted bool
	// d is the delivery until its queue record is stored; its payload
	// is the caller's, valid during Execute only.
	d *delivery
	// stored, votedStored: the queue record and the voted mark are in the
	// store (committed, or written by this execution).
	stored, votedStored bool
}

func (e *Executor) newQueued(seq uint64, j *job) *queued {
	q := &queued{seq: seq, job: j}
	q.voted = !j.voteStep()
	return q
}

// footprint returns q's footprint, computing it on first use.
func (q *queued) footprint() *footprint {
	if !q.hasFP {
		q.fp, q.hasFP = footprintOf(q.job), true
	}
	return &q.fp
}

// voteTo returns the groups j's piece sends its vote to: those a
// transaction's piece names (txn.Piece.VoteTo), or, for an all-or-nothing
// call to several groups whose piece here can abort, every other
// destination (prepare).
func (j *job) voteTo() partition.GroupSet {
	if j.piece != nil {
		return j.piece.VoteTo
	}
	return j.callVoteTo
}

// voters returns the groups whose votes j waits for: those a transaction's
// piece names (txn.Piece.Voters), or, for an all-or-nothing call, the other
// destinations whose pieces can abort.
func (j *job) voters() partition.GroupSet {
	if j.piece != nil {
		return j.piece.Voters
	}
	return j.callVoters
}

// trial reports whether j is a call that takes a trial run at the head of
// the queue: one that sends a vote, or waits for one. A call that does
// neither runs at the head of the queue, once.
func (j *job) trial() bool {
	return j.call != nil && !(j.callVoteTo.Empty() && j.callVoters.Empty())
}

// voteStep reports whether j's piece has a step to take, once, before it
// can run, marked durably by its queue record's voted mark: a
// transaction's piece that votes evaluates and sends its vote; a call's
// trial run (trial) sends its vote if it has one, and records the call's
// footprint either way.
func (j *job) voteStep() bool {
	if j.piece != nil {
		return !j.piece.VoteTo.Empty()
	}
	return j.trial()
}

// apply runs the entry: deliveries, inbound votes, then a pass over the
// queue, and writes the state the entry leaves.
func (x *execution) apply(index, sessionTicks uint64, deliveries []multicast.Message, inbound []rawnode.AppInbound) error {
	x.index = index
	x.switches, x.e.pmNext = x.e.pmNext, nil
	if err := x.expireSessions(sessionTicks); err != nil {
		return err
	}
	changed := false
	for k, m := range deliveries {
		if err := x.switchesUpTo(k); err != nil {
			return err
		}
		ok, err := x.deliver(m)
		if err != nil {
			return err
		}
		changed = changed || ok
	}
	if err := x.switchesUpTo(len(deliveries)); err != nil {
		return err
	}
	for _, in := range inbound {
		ok, err := x.receive(in)
		if err != nil {
			return err
		}
		changed = changed || ok
	}
	if err := x.evictVotes(); err != nil {
		return err
	}
	if changed {
		if err := x.pass(); err != nil {
			return err
		}
	}
	return x.finish(index)
}

// deliver appends m to the queue, unless it is a duplicate; it reports
// whether it queued m.
func (x *execution) deliver(m multicast.Message) (bool, error) {
	e := x.e
	d := newDelivery(m)
	digest := d.digest
	// In delivery order, a delivery whose id is queued ahead would find
	// that one's result, as one whose id has a result does.
	for _, q := range e.queue {
		if q.job.id != m.ID {
			continue
		}
		// A re-submission whose queued piece has not voted: that piece's
		// vote is the one the other destinations wait for.
		if q.job.digest != digest || q.voted {
			x.sendUsed(d, q.job.digest != digest)
		}
		x.meta.duplicates++
		return false, nil
	}
	rec, found, err := x.result(m.ID)
	if err != nil {
		return false, err
	}
	if found {
		used, err := resultDigest(rec)
		if err != nil {
			return false, fmt.Errorf("%w: result of %s: %w", kv.ErrCorrupt, m.ID, err)
		}
		x.sendUsed(d, used != digest)
		x.noteSkipped(m)
		x.meta.duplicates++
		return false, nil
	}
	if isSession(m.ID) {
		if err := x.delivered(m.ID); err != nil {
			return false, err
		}
	}
	q := e.newQueued(x.meta.qNext, e.prepare(d, e.pmCur))
	q.d = &d
	x.meta.qNext++
	e.queue = append(e.queue, q)
	return true, nil
}

// sendUsed sends, for a duplicate d whose piece here would vote, a used
// vote in its place (see Executor, Reused ids); other: the id was used
// here by another transaction.
func (x *execution) sendUsed(d delivery, other bool) {
	j := x.e.prepare(d, x.e.pmCur)
	if j.voteTo().Empty() {
		return
	}
	v := txn.Vote{Group: x.e.cfg.Self, Used: true, Other: other, Digest: j.digest}
	x.send(j, txn.AppendVote(nil, j.id, v))
}

// pass goes through the queue in order, applying the two rules of
// conflict.go to each delivery against those ahead of it that stay
// queued. One pass leaves nothing that a rule lets vote or run: a
// delivery's rules look only at the deliveries ahead of it, which the pass
// has settled, and at stored votes, which it does not change.
func (x *execution) pass() error {
	e := x.e
	ahead := e.conflicts
	ahead.reset()
	kept := e.queue[:0]
	for i, q := range e.queue {
		x.trialJob, x.trialView = nil, nil
		early := ahead.jobs > 0
		if q.job.marker {
			// A barrier (backup.go): it runs with nothing ahead of it, and
			// the pass stops at it, run or not, so that nothing behind it
			// runs before the part of the entry that ran it is committed.
			if !early {
				if err := x.run(q, nil, ""); err != nil {
					return err
				}
				x.ran = append(x.ran, q)
				x.marker = q.job
				i++
			}
			kept = append(kept, e.queue[i:]...)
			break
		}
		// With nothing ahead, neither rule needs q's footprint.
		if q.job.trial() && q.voted && !q.hasFP {
			// A call that took its trial before this executor opened (a
			// restart): its footprint is its trial run's again. The jobs
			// that ran ahead of it since touched nothing it reads, so the
			// trial touches what it touched then, as on every replica.
			if err := x.callFootprint(q); err != nil {
				return err
			}
		}
		if !q.voted && !(early && ahead.blocksVote(q.footprint())) {
			if err := x.vote(q); err != nil {
				return err
			}
			q.voted = true
			if early {
				x.meta.votesEarly++
			}
		}
		if q.voted && !(early && ahead.blocksRun(q.footprint())) {
			votes, reason, ok, err := x.votes(q.job)
			if err != nil {
				return err
			}
			if ok {
				if err := x.run(q, votes, reason); err != nil {
					return err
				}
				if early {
					x.meta.ranAhead++
				}
				x.ran = append(x.ran, q)
				continue
			}
		}
		ahead.add(q.footprint())
		kept = append(kept, q)
	}
	clear(e.queue[len(kept):])
	e.queue = kept
	return nil
}

// vote takes the vote step of q's piece (voteStep) on the current state:
// it evaluates the piece's vote and sends it. A call's step is a trial run
// of its procedure, its writes dropped: it is taken only at the head of
// the queue (conflict.go: a call conflicts with everything), so the state
// it runs on later is the one its trial ran on, and its vote carries the
// abort reason (Vote.Then) that every destination reports alike. A call
// whose piece cannot abort takes the trial too, when it waits for votes,
// for its footprint, and sends nothing.
func (x *execution) vote(q *queued) error {
	j := q.job
	var v txn.Vote
	if j.call != nil {
		res, view, err := x.evalCall(j, true)
		if err != nil {
			return err
		}
		// From now on the call conflicts only with what its trial run
		// touched, not with everything: the deliveries behind it that
		// touch none of it run while it waits for the other votes.
		q.fp, q.hasFP = view.fp, true
		// If the call runs right away (it waits for no vote), it runs on
		// this state, so the trial's outcome is its run's (runCall).
		x.trialJob, x.trialRes, x.trialView = j, res, view
		if j.voteTo().Empty() {
			return nil
		}
		v = txn.Vote{Group: j.self, Holds: true}
		if res.Aborted {
			v.Then = txn.Abort{Reason: res.Reason}
		}
	} else {
		var err error
		if v, err = txn.EvalVote(x.rw, j.piece); err != nil {
			return err
		}
	}
	x.send(j, txn.AppendVote(nil, j.id, v))
	return nil
}

// send sends the vote payload about j to every group of j.voteTo.
func (x *execution) send(j *job, payload []byte) {
	for _, g := range j.voteTo().Slice() {
		x.sends = append(x.sends, rawnode.AppSend{To: g, About: j.id, Payload: payload})
		x.meta.votesSent++
	}
}

// callFootprint sets the footprint of call q, which voted: what a trial run
// of it touches now.
func (x *execution) callFootprint(q *queued) error {
	_, view, err := x.evalCall(q.job, true)
	if err != nil {
		return err
	}
	q.fp, q.hasFP = view.fp, true
	return nil
}

// prepare decides what d is at this group, by partition map pm (of its
// queue sequence: moves.go). A delivery that cannot run becomes a job that
// reports why.
func (e *Executor) prepare(d delivery, pm *partition.PartitionMap) *job {
	cfg := &e.cfg
	j := &job{id: d.msg.ID, self: cfg.Self, dst: d.msg.Dst, digest: d.digest, pm: pm}
	if !j.dst.Has(cfg.Self) {
		j.reason = fmt.Sprintf("txn: group %d is not a destination of %s (%s)", cfg.Self, j.id, j.dst)
		return j
	}
	if epoch, ok := group.EpochAborted(d.msg.Payload); ok {
		// DESIGN 14, the stop-sign: delivered after its epoch ended, at
		// every destination alike; its client resubmits it.
		j.reason = txn.EpochChangedResult(epoch).Reason
		return j
	}
	if d.size > txn.PayloadMax {
		j.reason = txn.PayloadSizeError(d.size).Error()
		return j
	}
	p, err := txn.DecodePayload(d.msg.Payload)
	if err != nil {
		j.reason = err.Error()
		return j
	}
	if p.Backup {
		if all := partition.AllGroups(cfg.Topology.Len()); j.dst != all {
			j.reason = fmt.Sprintf("txn: backup marker %s addressed to groups %s, not to every group (%s)", j.id, j.dst, all)
			return j
		}
		j.marker = true
		return j
	}
	if p.Call != nil {
		proc, ok := cfg.Procedures.Lookup(p.Call.Name)
		if !ok {
			j.reason = fmt.Sprintf("txn: unknown procedure %q", p.Call.Name)
			return j
		}
		if err := cfg.Procedures.CheckCallDestinations(*p.Call, pm, cfg.Topology, j.dst); err != nil {
			j.reason = err.Error()
			return j
		}
		j.call, j.proc = p.Call, proc
		if txn.IsAllOrNothing(proc) && j.dst.Len() > 1 {
			j.callVoteTo, j.callVoters = callVotes(proc, p.Call.Args, pm, j.dst, cfg.Self)
		}
		return j
	}
	// dst has Self (checked above).
	piece, err := p.Txn.PieceOf(pm, cfg.Topology, j.dst, cfg.Self)
	if err != nil {
		j.reason = err.Error()
		return j
	}
	j.piece = piece
	return j
}

// callVotes returns, for the piece of group self of an all-or-nothing call
// of proc with args to dst, the groups it sends its vote to (every other
// destination, if its piece can abort) and those it waits for (the other
// destinations whose pieces can abort). Every destination asks
// txn.PieceCanAbort the same questions and gets the same answers, so a
// group waits for a vote exactly when its sender sends it.
func callVotes(proc txn.Procedure, args []byte, pm *partition.PartitionMap, dst partition.GroupSet, self partition.GroupID) (voteTo, voters partition.GroupSet) {
	for _, g := range dst.Slice() {
		if !txn.PieceCanAbort(proc, &txn.CallPiece{Group: g, Dst: dst, Args: args, Partitions: pm}) {
			continue
		}
		if g == self {
			voteTo = dst.Remove(self)
		} else {
			voters = voters.Add(g)
		}
	}
	return voteTo, voters
}

// votes returns the stored votes j waits for, in group order, if all are
// there and j can use them; with a used vote for j among them (see
// Executor, Reused ids), the abort of j instead, which names the first
// such voter.
func (x *execution) votes(j *job) (votes []txn.Vote, reason string, ok bool, err error) {
	voters := j.voters()
	if voters.Empty() {
		return nil, "", true, nil
	}
	if x.e.votes[j.id]&voters != voters {
		return nil, "", false, nil
	}
	votes = make([]txn.Vote, 0, voters.Len())
	for _, g := range voters.Slice() {
		v, err := x.storedVote(j.id, g)
		if err != nil {
			return nil, "", false, err
		}
		switch {
		case !v.Used:
		case v.Digest != j.digest:
			// About another delivery under the id: the real vote
			// that j needs replaces it.
			return nil, "", false, nil
		case reason == "":
			reason = fmt.Sprintf("txn: id %s was already used at group %s", j.id, x.e.cfg.Topology.Name(g))
			if v.Other {
				reason += " by another transaction"
			}
		}
		votes = append(votes, v)
	}
	return votes, reason, true, nil
}

// storedVote returns the vote of group g on id, which must be stored.
func (x *execution) storedVote(id multicast.MsgID, g partition.GroupID) (txn.Vote, error) {
	rec, ok, err := x.b.GetAux(voteKey(id, g))
	switch {
	case err != nil:
		return txn.Vote{}, err
	case !ok:
		return txn.Vote{}, fmt.Errorf("txn: %w: stored vote of group %d on %s missing", kv.ErrCorrupt, g, id)
	}
	_, raw, err := parseVoteRecord(rec)
	if err != nil {
		return txn.Vote{}, err
	}
	about, v, err := txn.DecodeVote(raw)
	switch {
	case err != nil:
		return txn.Vote{}, fmt.Errorf("%w: stored vote: %w", kv.ErrCorrupt, err)
	case about != id || v.Group != g:
		return txn.Vote{}, fmt.Errorf("txn: %w: the vote stored as group %d's on %s is group %d's on %s", kv.ErrCorrupt, g, id, v.Group, about)
	}
	return v, nil
}

// receive stores an inbound vote; it reports whether it stored it. A
// payload that is not a vote, a vote whose group is not its sender (or is
// this group, or none of the topology), a vote on a transaction that has a
// result here already, and a second vote of a group on a transaction are
// junk: counted and dropped; except that a real vote replaces a used vote
// (see Executor, Reused ids), which counts as junk then.
func (x *execution) receive(in rawnode.AppInbound) (bool, error) {
	cfg := &x.e.cfg
	if txn.IsRelease(in.Payload) {
		return false, x.receiveNote(in)
	}
	if group.IsMovePayload(in.Payload) && in.From == cfg.Self {
		return false, x.receiveMove(in.Payload)
	}
	id, v, err := txn.DecodeVote(in.Payload)
	if err != nil || v.Group != in.From || !cfg.Topology.Valid(v.Group) || v.Group == cfg.Self {
		x.meta.junkVotes++
		return false, nil
	}
	got := x.e.votes[id]
	if got.Has(v.Group) {
		replace := false
		if !v.Used {
			old, err := x.storedVote(id, v.Group)
			if err != nil {
				return false, err
			}
			replace = old.Used
		}
		x.meta.junkVotes++
		if !replace {
			return false, nil
		}
		if err := x.putVote(id, v.Group, in.Payload); err != nil {
			return false, err
		}
		return true, nil
	}
	_, found, err := x.result(id)
	if err != nil {
		return false, err
	}
	if found {
		x.meta.junkVotes++
		return false, nil
	}
	if err := x.putVote(id, v.Group, in.Payload); err != nil {
		return false, err
	}
	x.e.votes[id] = got.Add(v.Group)
	x.meta.votes++
	return true, nil
}

// putVote stores the vote payload of group g on id, in place of the one
// stored, if any, as the latest arrival.
func (x *execution) putVote(id multicast.MsgID, g partition.GroupID, payload []byte) error {
	e := x.e
	seq := x.meta.voteNext
	if err := x.b.PutAux(voteKey(id, g), appendVoteRecord(nil, seq, payload)); err != nil {
		return err
	}
	x.meta.voteNext++
	slot := voteSlot{id, g}
	e.voteBytes -= e.stored[slot].size // 0 if none
	v := voteInfo{seq: seq, size: voteRecordSize(len(payload))}
	e.stored[slot] = v
	e.voteBytes += v.size
	e.arrivals = append(e.arrivals, arrival{seq: seq, slot: slot})
	return nil
}

// forgetVote forgets the stored vote of slot in memory; its record is
// deleted by the caller.
func (e *Executor) forgetVote(slot voteSlot) {
	e.voteBytes -= e.stored[slot].size
	delete(e.stored, slot)
	// Drop the stale arrivals once they are most of them: each arrival
	// is appended once and dropped once.
	if len(e.arrivals) > 64 && len(e.arrivals) > 2*len(e.stored) {
		e.arrivals = slices.DeleteFunc(e.arrivals, e.staleArrival)
	}
}

// staleArrival reports whether a is not the arrival of a stored vote.
func (e *Executor) staleArrival(a arrival) bool {
	v, ok := e.stored[a.slot]
	return !ok || v.seq != a.seq
}

// evictVotes drops the oldest stored votes, of transactions not queued
// here, until the stored votes take at most Config.StoredVoteBytesMax bytes
// or only votes of queued transactions remain (see Executor, Bounds). It
// depends only on the stored votes, their arrivals and the queue, which
// every replica has alike.
func (x *execution) evictVotes() error {
	e := x.e
	if e.voteBytes <= e.cfg.StoredVoteBytesMax {
		return nil
	}
	queued := make(map[multicast.MsgID]bool, len(e.queue))
	for _, q := range e.queue {
		queued[q.job.id] = true
	}
	kept := e.arrivals[:0]
	for i, a := range e.arrivals {
		if e.voteBytes <= e.cfg.StoredVoteBytesMax {
			kept = append(kept, e.arrivals[i:]...)
			break
		}
		switch {
		case e.staleArrival(a):
			continue
		case queued[a.slot.id]:
			kept = append(kept, a)
			continue
		}
		if err := x.b.DeleteAux(voteKey(a.slot.id, a.slot.g)); err != nil {
			return err
		}
		e.voteBytes -= e.stored[a.slot].size
		delete(e.stored, a.slot)
		if got := e.votes[a.slot.id].Remove(a.slot.g); got.Empty() {
			delete(e.votes, a.slot.id)
		} else {
			e.votes[a.slot.id] = got
		}
		x.meta.votes--
		x.meta.votesEvicted++
	}
	clear(e.arrivals[len(kept):])
	e.arrivals = kept
	return nil
}

// run runs queued job q with the votes it waited for, or aborts it for
// reason, stores its result, and drops the votes stored on its id.
func (x *execution) run(q *queued, votes []txn.Vote, reason string) error {
	j := q.job
	x.callFP = footprint{}
	var res txn.PieceResult
	var err error
	switch {
	case j.reason != "":
		res = abortResult(j.reason)
	case reason != "":
		res = abortResult(reason)
	case j.piece != nil:
		res, err = x.runPiece(j.piece, votes)
	case j.marker:
		res = markerResult(x.index)
	default:
		res, err = x.runCall(j, votes)
	}
	if err != nil {
		return err
	}
	if err := x.dropVotes(j.id, len(votes)); err != nil {
		return err
	}
	enc := appendResultRecord(nil, j.digest, &res)
	if len(enc) > kv.ValueMax {
		res = txn.PieceResult{Succeeded: res.Succeeded, Truncated: true}
		enc = appendResultRecord(nil, j.digest, &res)
	}
	if invariants.Enabled {
		checkResultRecord(enc, j.digest, &res)
	}
	if err := x.setResult(j.id, enc); err != nil {
		return err
	}
	x.meta.executed++
	if res.Aborted {
		x.meta.aborted++
	}
	if x.e.cfg.Strict || x.e.cfg.OnReleased != nil {
		x.runs = append(x.runs, ranJob{q: q, res: res, fp: x.callFP})
	}
	return nil
}

func abortResult(reason string) txn.PieceResult {
	if reason == "" {
		reason = "txn: aborted"
	}
	return txn.PieceResult{Aborted: true, Reason: txn.ClipReason(reason)}
}

func (x *execution) runPiece(p *txn.Piece, votes []txn.Vote) (txn.PieceResult, error) {
	holds, results, err := txn.Eval(x.rw, x.rw, p, votes...)
	switch {
	case errors.Is(err, txn.ErrAborted):
		return abortResult(err.Error()), nil
	case err != nil:
		return txn.PieceResult{}, err
	}
	return txn.PieceResult{Succeeded: holds, Results: results}, nil
}

// dropVotes deletes the votes stored on id, of which used were consumed;
// the others were junk.
func (x *execution) dropVotes(id multicast.MsgID, used int) error {
	got, ok := x.e.votes[id]
	if !ok {
		return nil
	}
	// Point deletes, not a range delete: every range tombstone stays in
	// Pebble's memtable until a flush and slows every later iterator.
	for _, g := range got.Slice() {
		if err := x.b.DeleteAux(voteKey(id, g)); err != nil {
			return err
		}
		x.e.forgetVote(voteSlot{id, g})
	}
	delete(x.e.votes, id)
	x.meta.votes -= uint64(got.Len())
	x.meta.junkVotes += uint64(got.Len() - used)
	return nil
}

// finish stores the queue as the entry leaves it, the meta record and the
// entry's sends.
func (x *execution) finish(index uint64) error {
	if err := x.settle(); err != nil {
		return err
	}
	for _, q := range x.ran {
		if q.stored {
			if err := x.b.DeleteAux(queueKey(q.seq)); err != nil {
				return err
			}
		}
		if q.votedStored {
			if err := x.b.DeleteAux(votedKey(q.seq)); err != nil {
				return err
			}
		}
	}
	for _, q := range x.e.queue {
		if !q.stored {
			rec := q.d.append(nil)
			if invariants.Enabled {
				checkQueueRecord(q.d, rec)
			}
			if err := x.b.PutAux(queueKey(q.seq), rec); err != nil {
				return err
			}
			q.stored, q.d = true, nil
		}
		if q.voted && !q.votedStored && q.job.voteStep() {
			if err := x.b.PutAux(votedKey(q.seq), nil); err != nil {
				return err
			}
			q.votedStored = true
		}
	}
	if err := x.storeSessions(); err != nil {
		return err
	}
	x.meta.queued = uint64(len(x.e.queue))
	rec := x.meta.append(nil)
	if invariants.Enabled {
		checkMetaRecord(&x.meta, rec)
	}
	if err := x.b.PutAux(metaKey, rec); err != nil {
		return err
	}
	for i, s := range x.sends {
		rec := appendSend(nil, s)
		if invariants.Enabled {
			checkSentRecord(s, rec)
		}
		if err := x.b.PutAux(sentKey(index, x.sentBase+uint32(i)), rec); err != nil {
			return err
		}
	}
	if err := x.putMarkerRecord(index); err != nil {
		return err
	}
	if invariants.Enabled {
		invariants.Hold(x.check())
	}
	return nil
}

// check returns the first broken invariant of the state the execution
// leaves, nil if none: what is in memory agrees with itself and with the
// meta record written beside it, which a restart checks its records
// against (load). It takes O(queue + stored votes + sessions).
func (x *execution) check() error {
	e, m := x.e, &x.meta
	if uint64(len(e.queue)) != m.queued {
		return fmt.Errorf("executor: %d deliveries queued, the meta record says %d", len(e.queue), m.queued)
	}
	for i, q := range e.queue {
		switch {
		case q.seq >= m.qNext || (i > 0 && q.seq <= e.queue[i-1].seq):
			return fmt.Errorf("executor: queued delivery %d at place %d, out of order or not below the next sequence %d", q.seq, i, m.qNext)
		case !q.stored || q.d != nil:
			return fmt.Errorf("executor: queued delivery %d not stored", q.seq)
		case q.votedStored != (q.voted && q.job.voteStep()):
			return fmt.Errorf("executor: queued delivery %d: voted %v, vote step %v, voted mark stored %v", q.seq, q.voted, q.job.voteStep(), q.votedStored)
		}
	}
	if uint64(len(e.stored)) != m.votes {
		return fmt.Errorf("executor: %d votes stored, the meta record says %d", len(e.stored), m.votes)
	}
	size, byTxn := int64(0), 0
	//flexkv:unordered a sum and membership tests, whatever the order
	for slot, v := range e.stored {
		switch {
		case !e.votes[slot.id].Has(slot.g):
			return fmt.Errorf("executor: vote of group %d on %s stored, not in the votes of its transaction", slot.g, slot.id)
		case v.seq >= m.voteNext:
			return fmt.Errorf("executor: vote of group %d on %s arrived %d, not before the next arrival %d", slot.g, slot.id, v.seq, m.voteNext)
		}
		size += v.size
	}
	//flexkv:unordered a sum, whatever the order
	for _, gs := range e.votes {
		byTxn += gs.Len()
	}
	if size != e.voteBytes || byTxn != len(e.stored) {
		return fmt.Errorf("executor: stored votes take %d bytes, counted %d; %d by transaction, %d stored", size, e.voteBytes, byTxn, len(e.stored))
	}
	live := 0
	for i, a := range e.arrivals {
		if i > 0 && a.seq <= e.arrivals[i-1].seq {
			return fmt.Errorf("executor: vote arrival %d after %d", a.seq, e.arrivals[i-1].seq)
		}
		if !e.staleArrival(a) {
			live++
		}
	}
	if live != len(e.stored) {
		return fmt.Errorf("executor: %d arrivals of stored votes, %d votes stored", live, len(e.stored))
	}
	if err := e.rel.check(e.cfg.Self); err != nil {
		return err
	}
	t := e.sessions
	if err := t.check(); err != nil {
		return err
	}
	kept := uint64(0)
	for el := t.order.Front(); el != nil; el = el.Next() {
		ss := el.Value.(*session)
		if ss.touch >= m.touchNext || ss.used > m.now {
			return fmt.Errorf("executor: session of client %d touched %d at log time %d, the next touch is %d, log time %d", ss.client, ss.touch, ss.used, m.touchNext, m.now)
		}
		if ss.kept != 0 {
			kept++
		}
	}
	if uint64(t.len()) != m.sessions || kept != m.sessionResults {
		return fmt.Errorf("executor: %d session records keeping %d results, the meta record says %d and %d", t.len(), kept, m.sessions, m.sessionResults)
	}
	return nil
}
