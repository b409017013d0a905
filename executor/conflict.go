package executor

import "github.com/flexkv/flexkv/txn"

// Pipelined execution: the two rules by which the executor lets a queued
// piece vote, and run, before the deliveries ahead of it have run.
//
// Every queued job has a footprint at this group (footprintOf): R, the keys
// it may read (the compares it evaluates itself, gets, adds, and the ranges
// [key, end) of its scans), W, the keys it may write in either branch (put,
// delete, add), and V ⊆ R, the keys its vote reads (the compares it owns,
// and the keys of its adds, which the vote's trial run reads to learn
// whether they abort). Which branch runs is not known before the votes, so
// both branches count. A stored-procedure call's footprint is everything:
// its Keys are for routing and do not cover what Run may scan. A call that
// votes, or waits for votes, takes a trial run at the head of the queue
// (execution.go, vote), and from then on its footprint is what the trial
// touched.
//
// Rule 1, early votes. A queued piece that has not voted computes and sends
// its vote (EvalVote) as soon as V is disjoint from the W of every job ahead
// of it that has not run, rather than when it reaches the head of the
// queue. The vote is then the one the piece would compute at its turn in
// delivery order: the jobs ahead that have not run cannot change the keys
// of V when they run; the jobs behind it that ran before it did so under
// rule 2, so they wrote nothing it reads; and neither can anything else
// write V before the piece runs, by the same two arguments. A piece votes
// exactly once (the durable voted mark of its queue record).
//
// Rule 2, execute ahead. A job that has every vote it waits for (and has
// sent its own) runs as soon as it conflicts with no job ahead of it that
// has not run: for each such P, (R_T ∪ W_T) ∩ W_P = ∅ and W_T ∩ R_P = ∅.
// Running T before P then gives the same state and the same results as
// running it after (the two commute: neither reads what the other writes,
// and they write different keys), so by induction the executor's order is
// conflict-equivalent to delivery order, and every result, vote and final
// value is the one serial execution in delivery order gives. A job with no
// keys (a delivery that cannot run and only reports why) conflicts with
// nothing; a call conflicts with every job with a key.
//
// The head of the queue always passes both checks, so the executor does at
// least what strict delivery order did, and the waits still cannot form a
// cycle (DESIGN 6); the rules only let pieces vote and run sooner.
//
// Cost. One pass over the queue, in order, applies both rules to every job:
// the footprints of the jobs that stay queued accumulate in a conflictSet,
// against which each later job is checked, and a job that runs is not
// added, so later jobs see it gone. A job's decision depends only on the
// jobs ahead of it (and on stored votes, which do not change during the
// pass), so one pass reaches the point where no rule applies. It costs
// O(Q·k) hash operations for Q queued jobs of at most k = OpsMax keys, plus,
// for each scan, one look at every key written ahead. The queue is bounded
// upstream (see Executor, Bounds).

// span is the key range [start, end) of a scan.
type span struct{ start, end string }

func (s span) has(k string) bool { return s.start <= k && k < s.end }

// footprint is what a queued job may touch at this group (see above).
type footprint struct {
	// all: the job conflicts with every job that has a key.
	all    bool
	reads  []string // R, point keys
	scans  []span   // R, ranges
	writes []string // W
	votes  []string // V: the keys the job's vote reads; empty without a vote
}

func (f *footprint) empty() bool {
	return !f.all && len(f.reads) == 0 && len(f.scans) == 0 && len(f.writes) == 0
}

// footprintOf returns the footprint of job j at this group.
func footprintOf(j *job) footprint {
	switch {
	case j.call != nil || j.marker:
		return footprint{all: true}
	case j.piece == nil:
		return footprint{}
	}
	p := j.piece
	votes := !p.VoteTo.Empty()
	var f footprint
	for i, pc := range p.If {
		if !pc.Local {
			continue
		}
		k := string(p.Txn.If[i].Key)
		f.reads = append(f.reads, k)
		// A replicated key has no owner: every group reads its own copy,
		// and no vote carries it.
		if votes && pc.Owner == p.Group {
			f.votes = append(f.votes, k)
		}
	}
	for o := range p.Ops() {
		k := string(o.Key)
		switch o.Kind {
		case txn.OpGet:
			f.reads = append(f.reads, k)
		case txn.OpPut, txn.OpDelete:
			f.writes = append(f.writes, k)
		case txn.OpAdd:
			f.reads = append(f.reads, k)
			f.writes = append(f.writes, k)
			if votes {
				f.votes = append(f.votes, k)
			}
		case txn.OpScan:
			f.scans = append(f.scans, span{start: k, end: string(o.End)})
		}
	}
	return f
}

// conflictSet is the union of the footprints of the queued jobs ahead of
// the one being considered that have not run. It is only ever asked
// whether some key is in it, never iterated in an order that matters: the
// answers do not depend on Go's map order.
type conflictSet struct {
	jobs      int  // footprints added
	all       bool // one of them conflicts with everything
	reads     map[string]struct{}
	writes    map[string]struct{}
	writeList []string // the keys of writes, to test against scan ranges
	scans     []span
}

func newConflictSet() *conflictSet {
	return &conflictSet{reads: map[string]struct{}{}, writes: map[string]struct{}{}}
}

func (s *conflictSet) reset() {
	s.jobs, s.all = 0, false
	clear(s.reads)
	clear(s.writes)
	s.writeList = s.writeList[:0]
	s.scans = s.scans[:0]
}

func (s *conflictSet) add(f *footprint) {
	s.jobs++
	if s.all {
		return // nothing more can be learned
	}
	if f.all {
		s.all = true
		return
	}
	for _, k := range f.reads {
		s.reads[k] = struct{}{}
	}
	for _, k := range f.writes {
		if _, ok := s.writes[k]; !ok {
			s.writes[k] = struct{}{}
			s.writeList = append(s.writeList, k)
		}
	}
	s.scans = append(s.scans, f.scans...)
}

// written reports whether a job in s may write k.
func (s *conflictSet) written(k string) bool {
	_, ok := s.writes[k]
	return ok
}

// read reports whether a job in s may read k.
func (s *conflictSet) read(k string) bool {
	if _, ok := s.reads[k]; ok {
		return true
	}
	for _, sp := range s.scans {
		if sp.has(k) {
			return true
		}
	}
	return false
}

// blocksVote reports whether rule 1 forbids a job of footprint f to vote:
// a job in s may write a key its vote reads.
func (s *conflictSet) blocksVote(f *footprint) bool {
	if f.all {
		// A call's vote is a trial run that may read anything: it waits
		// until nothing is ahead of it.
		return s.jobs > 0
	}
	if s.all {
		return len(f.votes) > 0
	}
	for _, k := range f.votes {
		if s.written(k) {
			return true
		}
	}
	return false
}

// blocksRun reports whether rule 2 forbids a job of footprint f to run: it
// conflicts with a job in s.
func (s *conflictSet) blocksRun(f *footprint) bool {
	switch {
	case f.all:
		return s.jobs > 0
	case s.all:
		return !f.empty()
	}
	// (R_T ∪ W_T) ∩ W_P
	for _, k := range f.reads {
		if s.written(k) {
			return true
		}
	}
	for _, k := range f.writes {
		if s.written(k) {
			return true
		}
	}
	for _, sp := range f.scans {
		for _, k := range s.writeList {
			if sp.has(k) {
				return true
			}
		}
	}
	// W_T ∩ R_P
	for _, k := range f.writes {
		if s.read(k) {
			return true
		}
	}
	return false
}
