package dbsim

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/flexkv/flexkv/executor"
	"github.com/flexkv/flexkv/group"
	"github.com/flexkv/flexkv/kv"
	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/multicast/rawnode"
	"github.com/flexkv/flexkv/partition"
	"github.com/flexkv/flexkv/txn"
)

// storeDir is where every replica's store lives on its own file system.
const storeDir = "/store"

// A snapshot is what the replication shell persists as a raft snapshot
// (replication/fsm.go): the state machine's encoding at index, the
// executor's index at capture, and the executor's state, made durable by a
// Sync first. It survives crashes, like raft's snapshot store.
type snapshot struct {
	index     uint64
	state     []byte
	execIndex uint64
	exec      []byte
	// dlog is what the executor state ran (not part of raft's snapshot:
	// the checks' record of it).
	dlog []delivered
}

// A delivered is what a replica's executor ran at one log entry, for the
// ordering checks.
type delivered struct {
	index uint64
	ids   []multicast.MsgID
	dst   []partition.GroupSet
}

// A replica is one group replica: its state machine over a real executor on
// an in-memory, crashable Pebble store.
type replica struct {
	g, r int
	cfg  group.Config
	// resultsMax is the store's kv.Options.ResultsMax, sessionsMax the
	// executor's Config.ResultSessionsMax.
	resultsMax, sessionsMax int
	procs                   *txn.Registry
	pm                      *partition.PartitionMap
	fs                      *vfs.MemFS
	store                   *kv.Store
	exec                    *executor.Executor
	m                       *group.Machine
	applied                 uint64 // the last log entry applied (State.Applied)
	// learner: a member added and not promoted yet, which never leads
	// (members.go).
	learner bool
	// snaps are the persisted snapshots, newest last; raft keeps two.
	snaps []snapshot
	// dlog is what the executor ran, by entry, in log order: the replica's
	// delivery order.
	dlog []delivered
}

func openReplica(g, r int, cfg group.Config, pm *partition.PartitionMap, procs *txn.Registry, fs *vfs.MemFS, resultsMax, sessionsMax int) (*replica, error) {
	rp := &replica{g: g, r: r, cfg: cfg, procs: procs, pm: pm, fs: fs, resultsMax: resultsMax, sessionsMax: sessionsMax}
	if err := rp.open(); err != nil {
		return nil, err
	}
	m, err := group.NewMachine(cfg, rp.exec)
	if err != nil {
		return nil, errors.Join(err, rp.close())
	}
	rp.m = m
	return rp, nil
}

// open opens the store and the executor on rp.fs. The row cache has 16
// slots, so that the simulated workload's rows share them all the time.
func (rp *replica) open() error {
	st, err := kv.Open(kv.Options{Dir: storeDir, NoSync: true, NoWAL: true, ResultsMax: rp.resultsMax, FS: rp.fs, CacheBytes: 1 << 20, MemTableBytes: 256 << 10, RowCacheSlots: 16})
	if err != nil {
		return err
	}
	ex, err := executor.NewExecutor(executor.Config{Store: st, Partitions: rp.pm, Topology: rp.cfg.Topology, Self: rp.cfg.Self, Procedures: rp.procs, ResultSessionsMax: rp.sessionsMax, Strict: true})
	if err != nil {
		return errors.Join(err, st.Close())
	}
	rp.store, rp.exec = st, ex
	return nil
}

func (rp *replica) close() error {
	if rp.store == nil {
		return nil
	}
	err := rp.store.Close()
	rp.store, rp.exec = nil, nil
	return err
}

func (rp *replica) name() string { return fmt.Sprintf("g%d/r%d", rp.g, rp.r) }

// id is the replica's member id in the epochs' configurations.
func (rp *replica) id() string { return memberID(rp.g, rp.r) }

// apply applies log entry index, recording what the executor ran.
func (rp *replica) apply(index uint64, data []byte) (rawnode.Output, error, error) {
	out, result, err := rp.m.Apply(index, data)
	if err != nil {
		return out, result, fmt.Errorf("%s: %w", rp.name(), err)
	}
	rp.applied = index
	if len(out.Deliveries) > 0 {
		d := delivered{index: index}
		for _, m := range out.Deliveries {
			d.ids = append(d.ids, m.ID)
			d.dst = append(d.dst, m.Dst)
		}
		rp.dlog = append(rp.dlog, d)
	}
	return out, result, nil
}

// takeSnapshot persists a snapshot as fsm.Snapshot and Persist do, and
// lets the executor forget what the snapshot before it covers.
func (rp *replica) takeSnapshot() error {
	ms, err := rp.m.Snapshot()
	if err != nil {
		return err
	}
	defer ms.Exec.Release()
	var buf bytes.Buffer
	if _, err := ms.Exec.WriteTo(&buf); err != nil {
		return err
	}
	sn := snapshot{index: ms.Index, state: ms.State, execIndex: ms.ExecIndex, exec: buf.Bytes()}
	for _, d := range rp.dlog {
		if d.index <= sn.execIndex {
			sn.dlog = append(sn.dlog, d)
		}
	}
	if n := len(rp.snaps); n > 0 && rp.snaps[n-1].index == sn.index {
		return nil
	}
	rp.snaps = append(rp.snaps, sn)
	if len(rp.snaps) > 2 {
		rp.snaps = rp.snaps[1:]
	}
	if len(rp.snaps) == 2 {
		return rp.exec.ForgetSent(rp.snaps[0].index)
	}
	return nil
}

// crash loses everything the store did not sync and restarts the replica
// as hashicorp/raft restarts an FSM: from its latest snapshot, if any, with
// the entries after it to be applied again.
func (rp *replica) crash() error {
	crashed := rp.fs.CrashClone(vfs.CrashCloneCfg{})
	if err := rp.close(); err != nil {
		return err
	}
	rp.fs = crashed
	if err := rp.open(); err != nil {
		return fmt.Errorf("%s: reopen after a crash: %w", rp.name(), err)
	}
	m, err := group.NewMachine(rp.cfg, rp.exec)
	if err != nil {
		return err
	}
	rp.m, rp.applied = m, 0
	rp.truncateDeliveries(rp.exec.AppliedIndex())
	if n := len(rp.snaps); n > 0 {
		return rp.restore(rp.snaps[n-1])
	}
	return nil
}

// restore installs sn as fsm.Restore does (group.Machine.Restore): the
// state always, the executor's only if it is behind the executor state the
// snapshot carries.
func (rp *replica) restore(sn snapshot) error {
	st, err := group.RestoreState(rp.cfg, sn.state)
	if err != nil {
		return fmt.Errorf("%s: restore: %w", rp.name(), err)
	}
	restored, err := rp.m.Restore(st, sn.execIndex, bytes.NewReader(sn.exec))
	if err != nil {
		return fmt.Errorf("%s: %w", rp.name(), err)
	}
	if restored {
		rp.dlog = slices.Clone(sn.dlog)
	}
	rp.applied = st.Applied()
	return nil
}

// truncateDeliveries forgets what the executor ran above index: a crash
// lost it, and the replica runs it again.
func (rp *replica) truncateDeliveries(index uint64) {
	rp.dlog = slices.DeleteFunc(rp.dlog, func(d delivered) bool { return d.index > index })
}

// digest hashes what the replicas of a group must agree on: the state
// machine's encoding, every user key and value, the results of the given
// transactions, what their sessions keep and the executor's counters.
func (rp *replica) digest(ids []multicast.MsgID) ([32]byte, error) {
	h := sha256.New()
	h.Write(rp.m.State().AppendSnapshot(nil))
	kvs, err := rp.store.Scan(nil, nil, 4096)
	if err != nil {
		return [32]byte{}, err
	}
	for _, e := range kvs {
		fmt.Fprintf(h, "%q=%q\n", e.Key, e.Value)
	}
	for _, id := range ids {
		res, found, err := rp.exec.Result(id)
		switch {
		case errors.Is(err, executor.ErrAcknowledged):
			fmt.Fprintf(h, "%s acknowledged\n", id)
		case err != nil:
			return [32]byte{}, err
		case found:
			h.Write(txn.AppendPieceResult([]byte(id.String()), &res))
		}
		delivered, kept, ok, err := rp.exec.SessionState(id.Client)
		if err != nil {
			return [32]byte{}, err
		}
		fmt.Fprintf(h, "session %d: %d %d %v\n", id.Client, delivered, kept, ok)
	}
	fmt.Fprintf(h, "%+v", rp.exec.Stats())
	var sum [32]byte
	h.Sum(sum[:0])
	return sum, nil
}
