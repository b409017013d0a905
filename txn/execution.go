package txn

import (
	"errors"
	"fmt"

	"github.com/flexkv/flexkv/kv"
	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/multicast/node"
	"github.com/flexkv/flexkv/partition"
)

// execution is the work of one Execute call: everything goes into b, and
// meta is the executor's meta as b changes it.
type execution struct {
	e     *Executor
	b     *kv.Batch
	rw    batchRW
	meta  execMeta
	sends []node.AppSend
	ids   []multicast.MsgID // results stored, in order
}

// job is a delivery prepared to run at this group.
type job struct {
	id  multicast.MsgID
	dst partition.GroupSet
	// Exactly one of the following describes the job.
	skip   bool   // the id has a result already
	reason string // the delivery cannot run: the abort it reports
	piece  *Piece // this group's piece of a transaction
	call   *Call  // a procedure call, with its procedure
	proc   Procedure
}

// deliver runs m, or queues it behind the queue's head.
func (x *execution) deliver(m multicast.Message) error {
	d := newDelivery(m)
	if x.meta.queued() > 0 {
		return x.enqueue(d)
	}
	j, err := x.prepare(d)
	if err != nil {
		return err
	}
	done, err := x.advance(j, false)
	if err != nil || done {
		return err
	}
	if err := x.enqueue(d); err != nil {
		return err
	}
	x.meta.headVoted = true
	return nil
}

func (x *execution) enqueue(d delivery) error {
	if err := x.b.PutAux(queueKey(x.meta.qNext), d.append(nil)); err != nil {
		return err
	}
	x.meta.qNext++
	return nil
}

// drain runs the queue from its head as far as the stored votes allow.
func (x *execution) drain() error {
	for x.meta.queued() > 0 {
		k := queueKey(x.meta.qFirst)
		raw, ok, err := x.b.GetAux(k)
		switch {
		case err != nil:
			return err
		case !ok:
			return fmt.Errorf("txn: %w: queued delivery %d missing", kv.ErrCorrupt, x.meta.qFirst)
		}
		d, err := decodeDelivery(raw)
		if err != nil {
			return fmt.Errorf("%w: %w", kv.ErrCorrupt, err)
		}
		j, err := x.prepare(d)
		if err != nil {
			return err
		}
		done, err := x.advance(j, x.meta.headVoted)
		if err != nil {
			return err
		}
		if !done {
			x.meta.headVoted = true
			return nil
		}
		if err := x.b.DeleteAux(k); err != nil {
			return err
		}
		x.meta.qFirst++
		x.meta.headVoted = false
	}
	return nil
}

// prepare decides what d is at this group. Only a store error is an error:
// a delivery that cannot run becomes a job that reports why.
func (x *execution) prepare(d delivery) (*job, error) {
	cfg := &x.e.cfg
	j := &job{id: d.msg.ID, dst: d.msg.Dst}
	_, found, err := x.b.Result(j.id.String())
	if err != nil {
		return nil, err
	}
	if found {
		j.skip = true
		return j, nil
	}
	if !j.dst.Has(cfg.Self) {
		j.reason = fmt.Sprintf("txn: group %d is not a destination of %s (%s)", cfg.Self, j.id, j.dst)
		return j, nil
	}
	if d.size > PayloadMax {
		j.reason = errPayloadSize(d.size).Error()
		return j, nil
	}
	p, err := DecodePayload(d.msg.Payload)
	if err != nil {
		j.reason = err.Error()
		return j, nil
	}
	if p.Call != nil {
		proc, ok := cfg.Procedures.Lookup(p.Call.Name)
		if !ok {
			j.reason = fmt.Sprintf("txn: unknown procedure %q", p.Call.Name)
			return j, nil
		}
		if err := cfg.Procedures.checkCallDestinations(*p.Call, cfg.Partitions, cfg.Topology, j.dst); err != nil {
			j.reason = err.Error()
			return j, nil
		}
		j.call, j.proc = p.Call, proc
		return j, nil
	}
	pieces, err := p.Txn.Pieces(cfg.Partitions, cfg.Topology, j.dst)
	if err != nil {
		j.reason = err.Error()
		return j, nil
	}
	for i := range pieces {
		if pieces[i].Group == cfg.Self {
			j.piece = &pieces[i]
			return j, nil
		}
	}
	panic(fmt.Sprintf("txn: invariant violated: no piece of destination %d among the pieces of %s", cfg.Self, j.dst))
}

// advance takes job j, at the head of the queue (or delivered to an empty
// queue), as far as it can: it sends the group's vote unless voted says it
// was sent, then runs the job if it has every vote it waits for. It
// reports whether the job ran (or was skipped).
func (x *execution) advance(j *job, voted bool) (bool, error) {
	p := j.piece
	if p == nil {
		return true, x.run(j, nil)
	}
	if !voted && !p.VoteTo.Empty() {
		// The piece is at the head: the state now is the state it runs on.
		v, err := EvalVote(x.rw, p)
		if err != nil {
			return false, err
		}
		payload := AppendVote(nil, j.id, v)
		for _, g := range p.VoteTo.Slice() {
			x.sends = append(x.sends, node.AppSend{To: g, About: j.id, Payload: payload})
		}
	}
	var votes []Vote
	if !p.Voters.Empty() {
		var ok bool
		var err error
		if votes, ok, err = x.votes(j.id, p.Voters); err != nil || !ok {
			return false, err
		}
	}
	return true, x.run(j, votes)
}

// votes returns the stored votes on id of the groups of voters, in group
// order, if all are there.
func (x *execution) votes(id multicast.MsgID, voters partition.GroupSet) ([]Vote, bool, error) {
	if x.meta.votes < uint64(voters.Len()) {
		return nil, false, nil
	}
	kvs, err := x.b.ScanAux(votePrefix(id), votePrefixEnd(id), partition.GroupsMax)
	if err != nil {
		return nil, false, err
	}
	var got partition.GroupSet
	votes := make([]Vote, 0, voters.Len())
	for _, r := range kvs {
		g := partition.GroupID(r.Key[len(r.Key)-1])
		if !voters.Has(g) {
			continue
		}
		_, v, err := DecodeVote(r.Value)
		if err != nil {
			return nil, false, fmt.Errorf("%w: stored vote: %w", kv.ErrCorrupt, err)
		}
		got = got.Add(g)
		votes = append(votes, v)
	}
	if got != voters {
		return nil, false, nil
	}
	return votes, true, nil
}

// receive stores an inbound vote; it reports whether it stored it. A
// payload that is not a vote, a vote whose group is not its sender (or is
// this group, or none of the topology), a vote on a transaction that has a
// result here already, and a second vote of a group on a transaction are
// junk: counted and dropped.
func (x *execution) receive(in node.AppInbound) (bool, error) {
	cfg := &x.e.cfg
	id, v, err := DecodeVote(in.Payload)
	if err != nil || v.Group != in.From || !cfg.Topology.Valid(v.Group) || v.Group == cfg.Self {
		x.meta.junkVotes++
		return false, nil
	}
	_, found, err := x.b.Result(id.String())
	if err != nil {
		return false, err
	}
	k := voteKey(id, v.Group)
	if !found {
		_, found, err = x.b.GetAux(k)
		if err != nil {
			return false, err
		}
	}
	if found {
		x.meta.junkVotes++
		return false, nil
	}
	if err := x.b.PutAux(k, in.Payload); err != nil {
		return false, err
	}
	x.meta.votes++
	return true, nil
}

// run runs job j with the votes it waited for, stores its result, and drops
// the votes stored on its id.
func (x *execution) run(j *job, votes []Vote) error {
	if j.skip {
		return nil
	}
	var res PieceResult
	var err error
	switch {
	case j.reason != "":
		res = abortResult(j.reason)
	case j.piece != nil:
		res, err = x.runPiece(j.piece, votes)
	default:
		res, err = x.runCall(j)
	}
	if err != nil {
		return err
	}
	if x.meta.votes > 0 {
		if err := x.dropVotes(j.id, len(votes)); err != nil {
			return err
		}
	}
	enc := AppendPieceResult(nil, &res)
	if len(enc) > kv.ValueMax {
		res = PieceResult{Succeeded: res.Succeeded, Truncated: true}
		enc = AppendPieceResult(nil, &res)
	}
	if err := x.b.SetResult(j.id.String(), enc); err != nil {
		return err
	}
	x.meta.executed++
	if res.Aborted {
		x.meta.aborted++
	}
	x.ids = append(x.ids, j.id)
	return nil
}

func abortResult(reason string) PieceResult {
	if reason == "" {
		reason = "txn: aborted"
	}
	return PieceResult{Aborted: true, Reason: clipReason(reason)}
}

func (x *execution) runPiece(p *Piece, votes []Vote) (PieceResult, error) {
	holds, results, err := Eval(x.rw, x.rw, p, votes...)
	switch {
	case errors.Is(err, ErrAborted):
		return abortResult(err.Error()), nil
	case err != nil:
		return PieceResult{}, err
	}
	return PieceResult{Succeeded: holds, Results: results}, nil
}

// dropVotes deletes the votes stored on id, of which used were consumed;
// the others were junk.
func (x *execution) dropVotes(id multicast.MsgID, used int) error {
	start, end := votePrefix(id), votePrefixEnd(id)
	kvs, err := x.b.ScanAux(start, end, partition.GroupsMax)
	if err != nil || len(kvs) == 0 {
		return err
	}
	// Point deletes, not a range delete: every range tombstone stays in
	// Pebble's memtable until a flush and slows every later iterator.
	for _, r := range kvs {
		if err := x.b.DeleteAux(r.Key); err != nil {
			return err
		}
	}
	x.meta.votes -= uint64(len(kvs))
	x.meta.junkVotes += uint64(len(kvs) - used)
	return nil
}

// finish stores the meta record and the entry's sends.
func (x *execution) finish(index uint64) error {
	if err := x.b.PutAux(metaKey, x.meta.append(nil)); err != nil {
		return err
	}
	for i, s := range x.sends {
		if err := x.b.PutAux(sentKey(index, uint32(i)), appendSend(nil, s)); err != nil {
			return err
		}
	}
	return nil
}
