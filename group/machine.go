package group

import (
	"fmt"
	"github.com/flexkv/flexkv/partition"
	"io"

	"github.com/flexkv/flexkv/multicast/rawnode"
)

// Machine is the whole replicated state machine of a group replica: its
// State and the Executor of its deliveries. It is not safe for concurrent
// use.
type Machine struct {
	cfg   Config
	state *State
	exec  Executor
	// given is the partition map the executor was last given at an
	// entry's start (givePartitions), switches the room for the next.
	given    *partition.PartitionMap
	switches []PartitionSwitch
}

// PartitionSetter is implemented by an executor that runs each delivery
// with the partition map of the epoch it was delivered in (moves.go): the
// machine gives it, before each entry it executes, the map at the entry's
// start and the map after each change the entry delivers, at the change's
// place among the deliveries.
type PartitionSetter interface {
	// SetPartitions gives the maps of the next Execute's entry; switches
	// is the machine's, valid until that Execute returns. An entry that
	// starts no epoch and starts with the map last given gets no call.
	SetPartitions(switches []PartitionSwitch)
}

// PartitionSwitch says that the deliveries of an entry from position At on
// run with partition map PM.
type PartitionSwitch struct {
	At int
	PM *partition.PartitionMap
}

// NewMachine returns the initial machine of a group replica over exec.
func NewMachine(cfg Config, exec Executor) (*Machine, error) {
	st, err := NewState(cfg)
	if err != nil {
		return nil, err
	}
	return &Machine{cfg: st.cfg, state: st, exec: exec}, nil
}

// State returns the machine's state, for reads and snapshots: stepping it
// directly would bypass the executor.
func (m *Machine) State() *State { return m.state }

// Executor returns the machine's executor.
func (m *Machine) Executor() Executor { return m.exec }

// Snapshot is a machine captured for a snapshot of the shell (DESIGN 5):
// the state's encoding at Index, and the executor's state, Exec, captured
// when the executor was at ExecIndex. The caller writes Exec out (its
// WriteTo may run concurrently with later entries) and releases it.
type Snapshot struct {
	Index     uint64
	State     []byte
	ExecIndex uint64
	Exec      ExecutorSnapshot
}

// Snapshot captures the machine between two entries. It makes the
// executor durable first (Executor.Sync), so that after a crash the
// executor is never behind the snapshot that a replay starts from.
func (m *Machine) Snapshot() (Snapshot, error) {
	if err := m.exec.Sync(); err != nil {
		return Snapshot{}, fmt.Errorf("%w: group %d: sync: %w", ErrExecutor, m.cfg.Self, err)
	}
	es, err := m.exec.Snapshot()
	if err != nil {
		return Snapshot{}, fmt.Errorf("%w: group %d: snapshot: %w", ErrExecutor, m.cfg.Self, err)
	}
	return Snapshot{Index: m.state.Applied(), State: m.state.AppendSnapshot(nil), ExecIndex: m.exec.AppliedIndex(), Exec: es}, nil
}

// Restore replaces the machine with a snapshot of the same group: the
// state always, by st (RestoreState of the snapshot's State); the
// executor's, by the stream exec that the snapshot's Exec wrote at
// execIndex, only if the executor is behind it. It reports whether it
// restored the executor.
//
// The executor's index moves only on entries that deliver something, so it
// is compared with the executor's index at capture, not with the state's
// (usually a tick's): otherwise nearly every restart would rewrite the
// executor from the snapshot. An executor already ahead is kept: the
// replay rule (Apply) runs it only on the entries above its index. The
// snapshot's executor may be ahead of its state too: one taken while a
// restarted replica replays the entries its executor ran already. That is
// sound for the same reason: the entries in between are in the log after
// the snapshot, and the executor's Sent answers for them. The executor's
// Restore is atomic (a crash leaves the old state or the new one); exec is
// not read when the executor is kept.
func (m *Machine) Restore(st *State, execIndex uint64, exec io.Reader) (restored bool, err error) {
	if st.cfg.Self != m.cfg.Self || st.cfg.Protocol != m.cfg.Protocol {
		panic(fmt.Sprintf("group: restoring group %d (%s) from a state of group %d (%s)", m.cfg.Self, m.cfg.Protocol, st.cfg.Self, st.cfg.Protocol))
	}
	if m.exec.AppliedIndex() < execIndex {
		if err := m.exec.Restore(exec, execIndex); err != nil {
			return false, fmt.Errorf("%w: group %d: restore: %w", ErrExecutor, m.cfg.Self, err)
		}
		restored = true
	}
	m.state = st
	m.given = nil
	return restored, nil
}

// givePartitions gives the executor the partition maps of the entry whose
// output is out, which the state applied from epoch before.
func (m *Machine) givePartitions(before uint64, out rawnode.Output) {
	ps, ok := m.exec.(PartitionSetter)
	if !ok || m.cfg.Partitions == nil {
		return
	}
	start := m.state.partitionsAt(before)
	if len(out.Changes) == 0 && start == m.given {
		return // nothing new: most entries
	}
	sw := append(m.switches[:0], PartitionSwitch{At: 0, PM: start})
	for _, c := range out.Changes {
		sw = append(sw, PartitionSwitch{At: c.At, PM: m.state.partitionsAt(c.Epoch + 1)})
	}
	m.switches, m.given = sw, sw[len(sw)-1].PM
	ps.SetPartitions(sw)
}

// Apply applies the log entry data at index (above State.Applied) and
// returns what it produced, and the outcome of a client request: nil when
// the group accepted it, or why not (see State.Apply). err is not nil only
// when the executor failed (it wraps ErrExecutor): the machine is then
// unusable.
//
// The replay rule, the one place that decides what a restarted replica
// runs again: the state steps every entry, since it was rebuilt from a
// snapshot older than the log; the executor runs an entry's deliveries only
// if the entry is above its AppliedIndex. At or below, the executor ran it
// before the restart: its sends (Executor.Sent) are queued on the channels
// again, because the channels were rebuilt too, and the output loses its
// deliveries, sends and requests, since observers (delivery logs, waiting
// clients) saw them before the restart: only its frames are new.
func (m *Machine) Apply(index uint64, data []byte) (out rawnode.Output, result error, err error) {
	before := m.state.Epoch()
	out, result = m.state.Apply(index, data)
	if len(out.Deliveries) == 0 && len(out.App) == 0 && !m.state.ownersChangedSince(before) {
		return out, result, nil
	}
	replay := index <= m.exec.AppliedIndex()
	var sends []rawnode.AppSend
	if replay {
		sends, err = m.exec.Sent(index)
	} else {
		m.givePartitions(before, out)
		sends, err = m.exec.Execute(index, m.clock(), forExecutor(out, m.state.Epoch()), out.App)
	}
	if err != nil {
		return rawnode.Output{}, result, fmt.Errorf("%w: group %d, entry %d: %w", ErrExecutor, m.cfg.Self, index, err)
	}
	if len(sends) > 0 {
		more := m.state.SendApp(sends)
		out.Frames = append(out.Frames, more.Frames...)
		out.Sends = append(out.Sends, more.Sends...)
	}
	if replay {
		out.Deliveries, out.Sends, out.Requests = nil, nil, nil
	}
	return out, result, nil
}

// clock returns the group's log time after the entry being applied.
func (m *Machine) clock() Clock {
	return Clock{Now: m.state.now, SessionTicks: uint64(m.state.cfg.SessionTicks)}
}
