package executor

import (
	"fmt"
	"slices"

	"github.com/flexkv/flexkv/internal/wire"
	"github.com/flexkv/flexkv/kv"
	"github.com/flexkv/flexkv/partition"
	"github.com/flexkv/flexkv/txn"
)

// Partition moves (DESIGN 14; group/moves.go). The executor routes each
// delivery with the partition map of the epoch it was ordered in: the
// machine gives it the map of its group's epoch before each entry
// (SetPartitions), and the executor keeps the owners in its store
// (auxOwners), written in the batch of the first entry that runs under
// them, so that a restart prepares its queued deliveries with the map they
// were prepared with. A move never leaves a delivery that touches the
// partition queued across the change that gives it its new owner (the old
// owner ran them before the copy began; the new owner had none), so the
// two maps agree on every queued delivery.
//
// Its state hands the executor, as payloads from the group itself, the
// rows of each chunk of a partition moving in (written as they are) and
// the deletion of a partition's range once another group owns it.

// auxOwners is the key of the owners record:
//
//	'w' -> count:uvarint (owner+1:uvarint)*count
//
// absent: the configuration's owners.
const auxOwners byte = 'w'

var ownersKey = []byte{auxOwners}

// Partitions returns the partition map the executor routes with now.
func (e *Executor) Partitions() *partition.PartitionMap { return e.pm.Load() }

// SetPartitions gives the executor the partition map of the epoch of the
// entry it executes next: the configuration's with the epoch's owners. It
// takes effect at that entry.
func (e *Executor) SetPartitions(pm *partition.PartitionMap) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.pmNext = pm
}

// switchPartitions makes the map given by SetPartitions the executor's,
// writing its owners in the entry's batch when they changed.
func (x *execution) switchPartitions() error {
	e := x.e
	next := e.pmNext
	if next == nil {
		return nil
	}
	e.pmNext = nil
	owners := next.Owners()
	if slices.Equal(owners, e.pm.Load().Owners()) {
		return nil
	}
	b := wire.AppendUvarint(nil, uint64(len(owners)))
	for _, g := range owners {
		b = wire.AppendUvarint(b, uint64(g+1))
	}
	if err := x.b.PutAux(ownersKey, b); err != nil {
		return err
	}
	e.pm.Store(next)
	return nil
}

// loadPartitions reads the owners record: the map the executor routes
// with.
func (e *Executor) loadPartitions() error {
	v, found, err := e.cfg.Store.GetAux(ownersKey)
	if err != nil {
		return err
	}
	if !found {
		e.pm.Store(e.cfg.Partitions)
		return nil
	}
	d := wire.NewDecoder(v)
	n := d.Count(1)
	owners := make([]partition.GroupID, 0, n)
	for range n {
		owners = append(owners, partition.GroupID(d.Uvarint())-1)
	}
	if err := d.Finish(); err != nil {
		return fmt.Errorf("%w: owners record: %w", kv.ErrCorrupt, err)
	}
	pm, err := e.cfg.Partitions.WithOwners(e.cfg.Topology, owners)
	if err != nil {
		return fmt.Errorf("%w: owners record: %w", kv.ErrCorrupt, err)
	}
	e.pm.Store(pm)
	return nil
}

// receiveMove writes a chunk's rows, or deletes a partition's range.
func (x *execution) receiveMove(payload []byte) error {
	rows, drop, err := txn.DecodeMovePayload(payload)
	if err != nil {
		// The group's own state made it from an entry it checked.
		return fmt.Errorf("%w: %w", kv.ErrCorrupt, err)
	}
	if drop >= 0 {
		pm := x.e.pm.Load()
		if drop >= pm.Len() {
			return fmt.Errorf("%w: drop of partition %d of %d", kv.ErrCorrupt, drop, pm.Len())
		}
		p := pm.At(drop)
		return x.b.DeleteRange(p.Start, p.End)
	}
	for _, r := range rows {
		if err := x.b.Put(r.Key, r.Value); err != nil {
			return err
		}
	}
	return nil
}

// NextSeq returns the queue sequence of the next delivery: every delivery
// queued so far has a lower one.
func (e *Executor) NextSeq() uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.meta.qNext
}

// QueuedTouch reports whether a delivery queued here with a sequence below
// before may touch a key in [start, end) (an empty end has no upper bound):
// one whose footprint has such a key, or a stored-procedure call, which may
// touch any key of the group. The partition of a move is frozen at its old
// owner once none of the deliveries before the move's cut may (moves.go).
func (e *Executor) QueuedTouch(before uint64, start, end []byte) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	r := span{start: string(start), end: string(end)}
	in := func(k string) bool { return k >= r.start && (r.end == "" || k < r.end) }
	for _, q := range e.queue {
		if q.seq >= before {
			break
		}
		fp := footprintOf(q.job)
		if fp.all {
			return true
		}
		for _, k := range slices.Concat(fp.reads, fp.writes) {
			if in(k) {
				return true
			}
		}
		for _, sc := range fp.scans {
			if (r.end == "" || sc.start < r.end) && (sc.end == "" || sc.end > r.start) {
				return true
			}
		}
	}
	return false
}
