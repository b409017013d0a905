package group

import (
	"fmt"

	"github.com/flexkv/flexkv/multicast/rawnode"
)

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
	} else {
		sends, err = m.exec.Execute(index, m.clock(), out.Deliveries, out.App)
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
