package group

import (
	"errors"
	"fmt"

	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/multicast/rawnode"
)

// Executor is the contract of what runs a group replica's deliveries, in
// delivery order (package executor implements it on Pebble; the
// replication shell's recorder keeps them in memory).
//
// Durability: Execute need not sync, but must store the entry's index
// atomically with its effects, so that AppliedIndex after a crash names the
// last entry whose effects survived.
//
// Votes. A transaction whose piece needs another group's vote (DESIGN 6)
// travels on the group's channels: Execute receives the application
// payloads (votes) the entry brought, and returns those to send, which the
// machine queues on its channels like the core's envelopes. Those sends are
// part of the replicated state, so a replica that replays an entry its
// executor ran before a restart must queue them again without executing:
// Sent returns what Execute returned for that entry, which the executor keeps
// with its effects until the shell says a durable snapshot covers it.
type Executor interface {
	// Execute runs the deliveries of entry index, in delivery order, and
	// the application payloads it brought, in channel order; it returns
	// the application payloads to send.
	Execute(index uint64, deliveries []multicast.Message, inbound []rawnode.AppInbound) ([]rawnode.AppSend, error)
	// Sent returns what Execute returned for entry index <= AppliedIndex.
	Sent(index uint64) ([]rawnode.AppSend, error)
	// AppliedIndex is the last entry whose effects are stored.
	AppliedIndex() uint64
}

// Clock is a group's log time at an entry (DESIGN 6: sessions expire by
// log time, never by count): Now is State.LogTime after the entry, and
// SessionTicks the group's Config.SessionTicks, how long a session lives
// idle. Every replica sees the same Clock at the same entry.
type Clock struct {
	Now          uint64
	SessionTicks uint64
}

// ClockedExecutor is an Executor that keeps per-session state of its own
// (executor keeps the results a session has not acknowledged) and
// expires it by the group's log time: the machine calls ExecuteAt, with the
// entry's Clock, in place of Execute.
type ClockedExecutor interface {
	Executor
	ExecuteAt(index uint64, clock Clock, deliveries []multicast.Message, inbound []rawnode.AppInbound) ([]rawnode.AppSend, error)
}

// ErrExecutor wraps a failure of the executor: the replica can no longer
// keep its state, and must stop rather than diverge from its group.
var ErrExecutor = errors.New("group: executor failed")

// Machine is the whole replicated state machine of a group replica: its
// State and the Executor of its deliveries. It is not safe for concurrent
// use.
type Machine struct {
	cfg   Config
	state *State
	exec  Executor
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

// Restore replaces the state with st, one rebuilt from a snapshot
// (RestoreState) of the same group. The executor's own state is the
// caller's to restore, before or after: the replay rule compares the two
// indexes at every entry.
func (m *Machine) Restore(st *State) {
	if st.cfg.Self != m.cfg.Self || st.cfg.Protocol != m.cfg.Protocol {
		panic(fmt.Sprintf("group: restoring group %d (%s) from a state of group %d (%s)", m.cfg.Self, m.cfg.Protocol, st.cfg.Self, st.cfg.Protocol))
	}
	m.state = st
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
	out, result = m.state.Apply(index, data)
	if len(out.Deliveries) == 0 && len(out.App) == 0 {
		return out, result, nil
	}
	replay := index <= m.exec.AppliedIndex()
	var sends []rawnode.AppSend
	if replay {
		sends, err = m.exec.Sent(index)
	} else if ce, ok := m.exec.(ClockedExecutor); ok {
		clock := Clock{Now: m.state.now, SessionTicks: uint64(m.state.cfg.SessionTicks)}
		sends, err = ce.ExecuteAt(index, clock, out.Deliveries, out.App)
	} else {
		sends, err = m.exec.Execute(index, out.Deliveries, out.App)
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
