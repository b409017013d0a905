package group

import (
	"fmt"

	"github.com/flexkv/flexkv/internal/wire"
	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/multicast/channel"
	"github.com/flexkv/flexkv/multicast/protocol"
	"github.com/flexkv/flexkv/multicast/rawnode"
	"github.com/flexkv/flexkv/partition"
)

// Config configures a group's State.
type Config struct {
	Protocol multicast.Protocol
	Topology *partition.Topology
	Self     partition.GroupID
	// Channel: ResendTicks, HoldbackMax, OutboxMax (Self and Groups are set
	// from the fields above).
	Channel channel.Config
	// SessionsMax bounds the open client sessions (0: SessionsMaxDefault);
	// SessionTicks is how long, in ticks of log time, a session lives idle
	// (0: SessionTicksDefault). Every replica of a group must use the same
	// values, or they expire different sessions.
	SessionsMax  int
	SessionTicks int
	// Partitions is the cluster's partition map at bootstrap; the owners
	// of each epoch replace its groups (moves.go). Nil: no partition can
	// move.
	Partitions *partition.PartitionMap
}

// Fill sets the defaults of the fields left zero and validates the
// configuration.
func (c *Config) Fill() error { return c.fill() }

func (c *Config) fill() error {
	if c.Topology == nil || !c.Topology.Valid(c.Self) {
		return fmt.Errorf("group: group %d is not in the topology", c.Self)
	}
	c.Channel.Self, c.Channel.Groups = c.Self, c.Topology.Len()
	// Defaults: resend after 50 ticks (1s at the default 20ms tick, above
	// any round trip between the aws-12 regions even under the emulated
	// WAN's paper mode, 2 x 341ms: a shorter timeout would resend a whole
	// outbox for nothing), hold back up to 1024 frames per peer, refuse new
	// requests past 4096 unacknowledged envelopes per peer. A gap is
	// repaired sooner, by the receiver's nack.
	if c.Channel.ResendTicks == 0 {
		c.Channel.ResendTicks = 50
	}
	if c.Channel.HoldbackMax == 0 {
		c.Channel.HoldbackMax = 1024
	}
	if c.Channel.OutboxMax == 0 {
		c.Channel.OutboxMax = 4096
	}
	if c.SessionsMax == 0 {
		c.SessionsMax = SessionsMaxDefault
	}
	if c.SessionsMax < 0 {
		return fmt.Errorf("group: SessionsMax %d, want > 0 (0: %d)", c.SessionsMax, SessionsMaxDefault)
	}
	if c.SessionTicks == 0 {
		c.SessionTicks = SessionTicksDefault
	}
	if c.SessionTicks < 0 {
		return fmt.Errorf("group: SessionTicks %d, want > 0 (0: %d)", c.SessionTicks, SessionTicksDefault)
	}
	return c.Channel.Validate()
}

// State is the replicated state of one group: the channel layer and the
// protocol core (a rawnode.Node), and the client sessions that admit each
// request once (see session.go). It is deterministic: the same entries at the same indexes give
// the same outputs and the same snapshot on every replica. It is not safe
// for concurrent use.
type State struct {
	cfg  Config
	node *rawnode.Node
	// top is the topology of the node's epoch: the groups ranked by its
	// overlay, with its tree (epoch.go).
	top *partition.Topology
	// sessions are the open client sessions; now is the log time, the
	// ticks applied, by which they expire.
	sessions sessionTable
	now      uint64
	applied  uint64 // index of the last entry applied
	// epochs: the configuration of every epoch, oldest first, the last
	// the node's (epoch.go).
	epochs []EpochConfig
	// dstCounts: the destination sets of the requests the group took in
	// its epoch; dstOther, those past DstCountsMax sets (counts.go).
	dstCounts map[dstKey]uint64
	dstOther  uint64
	// movesIn: the copies of the partitions moving to this group, by
	// partition (moves.go). pendingApp: what the entry being applied
	// hands the executor besides the node's output (chunks, drops).
	// pmCache holds the partition maps of a few epochs, built.
	movesIn    map[int]*MoveProgress
	pendingApp []rawnode.AppInbound
	pmCache    map[uint64]*partition.PartitionMap
	// idleTicks counts the ticks applied since the last other entry. It
	// steers only whether the leader proposes ticks (Quiet), not what an
	// entry does, so it is left out of snapshots.
	idleTicks int
}

// NewState returns the initial state of a group.
func NewState(cfg Config) (*State, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	core, err := protocol.New(cfg.Protocol, cfg.Self, cfg.Topology)
	if err != nil {
		return nil, err
	}
	n, err := rawnode.New(core, cfg.Channel)
	if err != nil {
		return nil, err
	}
	s := &State{cfg: cfg, node: n, top: cfg.Topology, sessions: newSessionTable(0), epochs: []EpochConfig{BootstrapEpoch(cfg.Topology)}}
	n.SetBuilder(s)
	return s, nil
}

// Config returns the state's configuration, defaults filled in.
func (s *State) Config() Config { return s.cfg }

// Applied returns the index of the last entry applied.
func (s *State) Applied() uint64 { return s.applied }

// Node returns the group's node, for reads (Unacked, OutboxLen, Stats).
func (s *State) Node() *rawnode.Node { return s.node }

// Core returns the group's protocol core, for reads (its Stats): stepping
// it would bypass the node and the log.
func (s *State) Core() multicast.Core { return s.node.Core() }

// Apply applies the log entry data at index and returns what it produced.
// For a request, the error says whether it was accepted (nil), refused
// (multicast.ErrBusy, multicast.ErrInvalid, ...) or a duplicate
// (ErrDuplicate); for several requests (EncodeRequests), a RequestErrors
// says it of each. A malformed entry is skipped with an error; state is then
// unchanged but for the applied index, the same way on every replica.
func (s *State) Apply(index uint64, data []byte) (rawnode.Output, error) {
	if index <= s.applied {
		return rawnode.Output{}, fmt.Errorf("group: entry %d applied already (at %d)", index, s.applied)
	}
	s.applied = index
	if len(data) > 0 && data[0] == entryTick {
		s.idleTicks++
	} else {
		s.idleTicks = 0
	}
	err := s.apply(index, data)
	out := s.node.Ready()
	if len(s.pendingApp) > 0 {
		out.App = append(out.App, s.pendingApp...)
		s.pendingApp = nil
	}
	return out, err
}

// Quiet reports whether the group may stop ticking: at least after ticks
// were applied since the last other entry, and a tick would change nothing
// (rawnode.Node.Quiet). The next request or frame wakes it.
func (s *State) Quiet(after int) bool {
	return s.idleTicks >= after && s.node.Quiet()
}

func (s *State) apply(index uint64, data []byte) error {
	if len(data) == 0 {
		return fmt.Errorf("%w: group: empty log entry %d", multicast.ErrInvalid, index)
	}
	d := wire.NewDecoder(data[1:])
	switch data[0] {
	case entryRequest:
		m := multicast.DecodeMessage(d, s.cfg.Topology.Len())
		if err := d.Finish(); err != nil {
			return fmt.Errorf("%w: group: request entry %d: %w", multicast.ErrInvalid, index, err)
		}
		return s.request(m, 1)
	case entryRequestsAt:
		return s.applyRequestsAt(index, d)
	case entryRequestsFrom:
		return s.applyRequestsFrom(index, d)
	case entryChange:
		return s.applyChange(index, d, false)
	case entryChangeMembers:
		return s.applyChange(index, d, true)
	case entryMoveChunk:
		return s.applyMoveChunk(index, d, func() []byte { return data[len(data)-d.Len():] })
	case entryRequests:
		// Written before epochs: every request routed at epoch 1.
		return s.applyRequests(index, 1, d)
	case entryInbound:
		from := d.Group(s.cfg.Topology.Len())
		n := d.Count(1)
		if n > InboundFramesMax {
			d.Fail("%d frames, at most %d", n, InboundFramesMax)
		}
		frames := make([]channel.Frame, 0, n)
		for range n {
			f, err := channel.DecodeFrame(d.Bytes(), s.cfg.Topology.Len())
			if d.Err() != nil {
				break
			}
			if err != nil || f.From != from || f.To != s.cfg.Self {
				d.Fail("bad frame from group %d", from)
				break
			}
			frames = append(frames, f)
		}
		if err := d.Finish(); err != nil {
			return fmt.Errorf("%w: group: inbound entry %d: %w", multicast.ErrInvalid, index, err)
		}
		for _, f := range frames {
			if err := s.node.Receive(f); err != nil {
				return fmt.Errorf("group: inbound entry %d: %w", index, err)
			}
		}
		return nil
	case entryTick:
		if err := d.Finish(); err != nil {
			return fmt.Errorf("%w: group: tick entry %d: %w", multicast.ErrInvalid, index, err)
		}
		s.now++
		s.sessions.expire(s.now, uint64(s.cfg.SessionTicks))
		s.node.Tick()
		return nil
	case entrySession:
		if err := d.Finish(); err != nil {
			return fmt.Errorf("%w: group: session entry %d: %w", multicast.ErrInvalid, index, err)
		}
		return s.openSession(index)
	default:
		return fmt.Errorf("%w: group: entry %d of unknown kind %d", multicast.ErrInvalid, index, data[0])
	}
}

// request admits a client request once: a session's requests carry
// increasing sequence numbers, and one at or below the highest accepted is
// a retry of something already ordered (ErrDuplicate). A request of no
// open session is refused (ErrSessionExpired); an anonymous one is admitted
// as it comes.
//
// The client contract: one request outstanding per session, retried with
// the same sequence number until it is accepted (a refused request, e.g.
// ErrBusy, is not recorded; a client that moved on to a later number would
// have its earlier one reported as a duplicate).
func (s *State) request(m multicast.Message, epoch uint64) error {
	return s.requestFrom(m, epoch, partition.NoGroup)
}

// requestFrom is request for a client whose home group is home (NoGroup:
// unknown), which the destination counts keep.
func (s *State) requestFrom(m multicast.Message, epoch uint64, home partition.GroupID) error {
	if len(m.Payload) > MessagePayloadMax {
		return fmt.Errorf("%w: group: request %s carries %d bytes, more than MessagePayloadMax (%d)", multicast.ErrInvalid, m.ID, len(m.Payload), MessagePayloadMax)
	}
	ss, err := s.admit(m.ID)
	if err != nil {
		return err
	}
	if err := s.node.RequestAt(m, epoch); err != nil {
		return err
	}
	s.countDst(home, m.Dst)
	if ss != nil {
		ss.seq = m.ID.Seq
	}
	return nil
}

// SendApp queues application payloads (votes the executor produced) on the
// group's channels and returns the frames to transmit, with one Send of kind
// vote each for logs and metrics. It is part of applying an entry: every
// replica calls it with the same payloads after the same entry.
func (s *State) SendApp(sends []rawnode.AppSend) rawnode.Output {
	s.node.SendApp(sends)
	out := s.node.Ready()
	for _, a := range sends {
		out.Sends = append(out.Sends, multicast.Send{To: a.To, Kind: multicast.KindVote, About: a.About, Payload: a.Payload})
	}
	return out
}

// snapshotter is implemented by every core.
type snapshotter interface {
	AppendSnapshot(b []byte) []byte
}

// The versions of the state's snapshot: 1 had a count-bounded client
// table, which is read as sessions last used at log time 0; 2 has the log
// time and the sessions, least recently used first; 3 adds the
// configuration of every epoch (epoch.go), 4 each with its members, 5 the
// destination sets counted in the epoch (counts.go), 6 the copies of the
// partitions moving in (moves.go), and owners in the epochs. 1 and 2
// restore at epoch 1, the bootstrap configuration; 3 with the bootstrap
// members.
const (
	stateSnapshotV1      = 1
	stateSnapshotV2      = 2
	stateSnapshotV3      = 3
	stateSnapshotV4      = 4
	stateSnapshotV5      = 5
	stateSnapshotVersion = 6
)

// AppendSnapshot appends the deterministic encoding of the state. The
// sessions are written in their list order, which every replica has built
// from the same entries.
func (s *State) AppendSnapshot(b []byte) []byte {
	sn, ok := s.node.Core().(snapshotter)
	if !ok {
		panic(fmt.Sprintf("group: the %s core cannot be snapshotted", s.cfg.Protocol))
	}
	b = append(b, stateSnapshotVersion)
	b = wire.AppendUvarint(b, s.applied)
	b = wire.AppendBytes(b, sn.AppendSnapshot(nil))
	b = wire.AppendBytes(b, s.node.AppendSnapshot(nil))
	b = wire.AppendUvarint(b, s.now)
	b = wire.AppendUvarint(b, uint64(s.sessions.len()))
	for e := s.sessions.order.Front(); e != nil; e = e.Next() {
		ss := e.Value.(*session)
		b = wire.AppendUvarint(b, ss.id)
		b = wire.AppendUvarint(b, ss.seq)
		b = wire.AppendUvarint(b, ss.used)
	}
	b = s.appendEpochs(b)
	b = s.appendDstCounts(b)
	return s.appendMovesIn(b)
}

// RestoreState rebuilds a state from AppendSnapshot's output (either
// version).
func RestoreState(cfg Config, b []byte) (*State, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	d := wire.NewDecoder(b)
	v := d.Byte()
	if d.Err() == nil && (v < stateSnapshotV1 || v > stateSnapshotVersion) {
		return nil, fmt.Errorf("group: snapshot version %d, want %d to %d", v, stateSnapshotV1, stateSnapshotVersion)
	}
	applied := d.Uvarint()
	coreSnap := d.Bytes()
	nodeSnap := d.Bytes()
	var now uint64
	if v >= stateSnapshotV2 {
		now = d.Uvarint()
	}
	n := d.Count(3)
	if n > cfg.SessionsMax {
		d.Fail("%d sessions, more than SessionsMax (%d)", n, cfg.SessionsMax)
	}
	sessions := newSessionTable(n)
	var last uint64
	for range n {
		ss := &session{id: d.Uvarint(), seq: d.Uvarint(), used: d.Uvarint()}
		if v == stateSnapshotV1 {
			ss.used = 0 // a log index, not a log time
		}
		if d.Err() != nil {
			break
		}
		if ss.used < last || ss.used > now {
			d.Fail("session %d last used at %d, out of order (previous %d, log time %d)", ss.id, ss.used, last, now)
			break
		}
		if sessions.get(ss.id) != nil {
			d.Fail("session %d twice", ss.id)
			break
		}
		last = ss.used
		sessions.push(ss)
	}
	epochs := []EpochConfig{BootstrapEpoch(cfg.Topology)}
	if v >= stateSnapshotV3 {
		epochs = decodeEpochs(d, cfg.Topology.Len(), v >= stateSnapshotV4)
	}
	var dstCounts map[dstKey]uint64
	var dstOther uint64
	if v >= stateSnapshotV5 {
		dstCounts, dstOther = decodeDstCounts(d, cfg.Topology.Len())
	}
	var movesIn map[int]*MoveProgress
	if v >= stateSnapshotVersion {
		movesIn = decodeMovesIn(d, cfg.Topology.Len())
		for i := range movesIn { //flexkv:unordered a check of each
			if cfg.Partitions == nil || i >= cfg.Partitions.Len() {
				d.Fail("copy of partition %d, not a partition of the map", i)
			}
		}
	}
	if err := d.Finish(); err != nil {
		return nil, fmt.Errorf("group: snapshot: %w", err)
	}
	s := &State{cfg: cfg, sessions: sessions, now: now, applied: applied, epochs: epochs, dstCounts: dstCounts, dstOther: dstOther, movesIn: movesIn}
	top, err := s.epochTopology(s.EpochConfig())
	if err != nil {
		return nil, fmt.Errorf("group: snapshot: %w: epoch %d: %w", wire.ErrCorrupt, s.EpochConfig().Epoch, err)
	}
	s.top = top
	core, ranks, err := s.restoreCore(top, coreSnap)
	if err != nil {
		return nil, fmt.Errorf("group: snapshot: %w", err)
	}
	nd, err := rawnode.Restore(core, ranks, cfg.Channel, nodeSnap, s)
	if err != nil {
		return nil, fmt.Errorf("group: snapshot: %w", err)
	}
	if last := epochs[len(epochs)-1].Epoch; last != nd.Epoch() {
		return nil, fmt.Errorf("group: snapshot: %w: the configurations end at epoch %d, the node is at epoch %d", wire.ErrCorrupt, last, nd.Epoch())
	}
	s.node = nd
	return s, nil
}
