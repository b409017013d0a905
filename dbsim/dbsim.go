// Package dbsim is FlexKV's whole-database simulator (DESIGN 12): every
// replica of every group runs the real group state machine (package group)
// over the real executor (executor) on an in-memory, crashable Pebble
// store, stepped by one seeded scheduler instead of raft, gRPC and clocks.
//
// What stands in for the shell: each group has one log, the committed
// entries in order; its leader applies an entry as soon as it is appended
// and transmits the frames it produced, and its followers apply at their
// own pace. A network between the groups' leaders drops, duplicates,
// reorders and cuts batches of frames; a receiving leader appends what
// arrives as an inbound entry. Faults: leader changes (the new leader sends
// its whole outbox again, as the transmitter does), replica crashes that
// lose what the store did not sync (restart from the latest persisted
// snapshot, replaying the log after it), snapshots installed on lagging
// followers, and a whole group cut off from the others for a long while.
// Changes of the epoch (epochs.go) alter the overlay or the members: a
// replica of a group replaced, a learner added that catches up from a
// snapshot, promoted, then an older member removed (members.go).
//
// Clients run conditional transfers between bank accounts of any groups,
// and list appends (the stored procedure "append") over lists of any
// groups, one transaction at a time each, retrying refused requests and
// sometimes re-sending accepted ones. After the workload, faults stop, the
// network heals and the run drains; then Run checks every ordering property
// of DESIGN 3.1 on every replica's delivery order (multicast/check), that
// the replicas of each group are byte-identical, that the bank total is
// conserved, that every replica's epoch names the replicas running as each
// group's members, and every account holds exactly what the acknowledged
// transfers left there (each applied exactly once), that every list holds
// each acknowledged append once, and that the list-append history is
// serializable (what each call read is a prefix of the final lists, and the
// lists' orders have no cycle).
package dbsim

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/flexkv/flexkv/group"
	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/multicast/channel"
	"github.com/flexkv/flexkv/multicast/protocol"
	"github.com/flexkv/flexkv/multicast/rawnode"
	"github.com/flexkv/flexkv/partition"
	"github.com/flexkv/flexkv/txn"
)

// Config is one run.
type Config struct {
	Protocol multicast.Protocol
	Seed     uint64
	Groups   int // 2..4; 0: 3
	Replicas int // per group, 1..5; 0: 3
	Clients  int // 0: 3
	Txns     int // per client; 0: 8
	// Drop and Dup are the odds that the network drops or duplicates a
	// batch of frames; Faults the odds that a step injects a fault.
	Drop, Dup, Faults float64
	// CutGroup cuts one group off from all others for a long stretch of
	// the run.
	CutGroup bool
	// LongCut > 0 cuts group LongCutGroup off from all others for LongCut
	// steps once the accounts are loaded, and offers, meanwhile, one
	// request in four steps that no client waits for (a transfer of
	// nothing, to a random set of groups, at its entry group): the
	// back-pressure scenario of DESIGN 12. Result.Cut then reports the
	// memory of the other groups and the refusals.
	LongCut      int
	LongCutGroup int
	// BacklogBytesMax sets channel.Config.BacklogBytesMax of every group;
	// 0: the default.
	BacklogBytesMax int
	// StepsMax bounds the run, the drain included; 0: 200,000.
	StepsMax int
	// OpenLists leaves all lists but the first of each group without a
	// cap (AppendProc.Open): the pieces of an append that own no capped
	// list cannot abort, and send no vote.
	OpenLists bool
	// SessionTicks is how long a client session lives idle, in ticks
	// (group.Config.SessionTicks; 0: its default). A short one makes the
	// clients' sessions expire while they wait or retry.
	SessionTicks int
	// ResultsMax is kv.Options.ResultsMax of every replica, the bound on
	// anonymous results (0: its default); Anonymous the odds that a step
	// offers an anonymous request that no client waits for (a transfer of
	// nothing, as in the long cut). With a small ResultsMax they push
	// each other's results out at once, while the clients' sessions keep
	// theirs until acknowledged (executor, Session results).
	ResultsMax int
	Anonymous  float64
	// ResultSessionsMax is executor.Config.ResultSessionsMax of every
	// replica (0: its default); a small one drops session records, whose
	// results then join the count-bounded table.
	ResultSessionsMax int
	// Backups is the odds that a step, once the accounts are loaded,
	// offers a backup marker (DESIGN 14) to every group; checkBackups
	// compares every checkpoint with a replay of the history up to it.
	Backups float64
	// Changes is the odds that a step, once the accounts are loaded and
	// while the faults last, asks the group that takes the changes to end
	// its epoch (DESIGN 14): a change that keeps the overlay or, by a
	// coin, redraws it, or one of the members (Members).
	Changes float64
	// Members is the share of those changes that change a group's members
	// (members.go): one replica replaced at a time, by a change that adds
	// a learner, its promotion once caught up, and a change that removes
	// an older member.
	Members float64
	// Moves is the share of those changes, among those that do not change
	// members, that start the move of a partition to another group
	// (moves.go).
	Moves float64
}

func (c *Config) fill() error {
	if _, err := protocol.Lookup(c.Protocol); err != nil {
		return err
	}
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.Groups, 3)
	def(&c.Replicas, 3)
	def(&c.Clients, 3)
	def(&c.Txns, 8)
	def(&c.StepsMax, 200_000)
	switch {
	case c.Groups < 2 || c.Groups > 4:
		return fmt.Errorf("dbsim: %d groups, want 2..4", c.Groups)
	case c.Replicas < 1 || c.Replicas > 5:
		return fmt.Errorf("dbsim: %d replicas per group, want 1..5", c.Replicas)
	case c.Clients < 1 || c.Txns < 1:
		return fmt.Errorf("dbsim: %d clients of %d transactions", c.Clients, c.Txns)
	case c.LongCut < 0 || c.LongCutGroup < 0 || c.LongCutGroup >= c.Groups:
		return fmt.Errorf("dbsim: long cut of %d steps of group %d of %d", c.LongCut, c.LongCutGroup, c.Groups)
	}
	return nil
}

// Replay returns the command that runs c again.
func (c Config) Replay() string {
	return fmt.Sprintf("go test ./dbsim -run 'TestSeeds$' -dbsim.protocol=%s -dbsim.seed=%d -dbsim.seeds=1", c.Protocol, c.Seed)
}

// Result is what a run did and found.
type Result struct {
	Config     Config
	Steps      int
	Entries    int // log entries, all groups
	Committed  int // transactions acknowledged as committed
	Aborted    int // acknowledged as aborted (a transfer without the funds)
	Busy       int // requests refused for a full outbox, then retried
	Duplicates int // re-sent requests refused as duplicates
	Expired    int // requests refused for an expired session (then resubmitted under a new one when never accepted)
	Sessions   int // sessions opened
	Crashes    int
	Installs   int // snapshots installed on lagging followers
	Leaders    int // leader changes
	Anonymous  int // anonymous requests accepted (Config.Anonymous)
	// Backups counts the backup markers accepted (Config.Backups),
	// Checkpoints the replicas' checkpoints of them checked.
	Backups, Checkpoints int
	// Changes counts the changes of the epoch taken (Config.Changes);
	// EpochRefusals the requests refused for an epoch that had ended,
	// then sent again with the new one; EpochAborts the transactions their
	// destinations aborted, delivered after their epoch ended.
	Changes, EpochRefusals, EpochAborts int
	// OverlayChanges counts the changes taken that altered the overlay.
	OverlayChanges int
	// MemberChanges counts the changes taken that altered the members
	// (Config.Members), adds and removes; Learners the replicas added,
	// Promotions those promoted, Replaced the members removed, of which
	// LeadersReplaced were their group's leader (which handed over first).
	MemberChanges, Learners, Promotions, Replaced, LeadersReplaced int
	// Moves counts the partition moves started (Config.Moves), MovesDone
	// those completed; Chunks the chunks copied, ChunksAgain those sent a
	// second time (and dropped); MoveWaits the chunks put off because the
	// replica read had not run what came before the move's cut;
	// MoveRefusals the requests refused for touching a moving partition.
	Moves, MovesDone, Chunks, ChunksAgain, MoveWaits, MoveRefusals int
	// Acked counts the results the checks found acknowledged (a later
	// request of their session delivered at the group), Unacked those
	// found kept, each at every replica of a destination.
	Acked, Unacked int
	Cut            *CutResult // with Config.LongCut
	Violations     []string
}

// CutResult is what the long cut of Config.LongCut left at the leaders of
// the groups that were not cut: the largest figures seen during the cut
// (Peak), and those at its middle (Mid) and at its end (End), which stay
// level when the memory is flat.
type CutResult struct {
	Peak, Mid, End CutMemory
	Offered        int // requests offered during the cut
	Accepted       int
	Refused        int // refused as busy at a group that was not cut
	// RefusedElse lists refusals at groups that were not cut that did
	// not name the cut group (at most a few).
	RefusedElse []string
}

// CutMemory is the memory of the groups that were not cut, summed over
// their links or taken at the worst group, as each field says.
type CutMemory struct {
	OutboxBytes   int    // the largest outbox to one group, in payload bytes
	Backlog       uint64 // the largest backlog behind one group
	HoldbackBytes int    // the largest hold-back queue of one link
	PendingBytes  int    // the largest core pending bytes of one group
	VotesStored   uint64 // the most votes stored at one group
	Queued        uint64 // the most deliveries waiting for votes at one group
}

func (m *CutMemory) raise(o CutMemory) {
	m.OutboxBytes = max(m.OutboxBytes, o.OutboxBytes)
	m.Backlog = max(m.Backlog, o.Backlog)
	m.HoldbackBytes = max(m.HoldbackBytes, o.HoldbackBytes)
	m.PendingBytes = max(m.PendingBytes, o.PendingBytes)
	m.VotesStored = max(m.VotesStored, o.VotesStored)
	m.Queued = max(m.Queued, o.Queued)
}

// OK reports whether the run found nothing wrong.
func (r *Result) OK() bool { return len(r.Violations) == 0 }

// violationsMax bounds the violations a Result describes; one is enough to
// fail a run, and a broken invariant tends to repeat.
const violationsMax = 10

func (r *Result) violate(format string, args ...any) {
	if len(r.Violations) < violationsMax {
		r.Violations = append(r.Violations, fmt.Sprintf(format, args...))
	}
}

// A packet is a batch of frames between two groups' leaders.
type packet struct {
	from, to partition.GroupID
	frames   []channel.Frame
}

// A client runs its requests one at a time. id names it in the workload;
// its requests carry the ids of its sessions, one per entry group (opened
// before its first request there), given to a request when it is first
// sent.
type client struct {
	id       uint64
	sessions map[partition.GroupID]uint64
	home     partition.GroupID
	reqs     []*request
	next     int // index of the request in flight, or of the next one
	sent     bool
	waited   int    // steps since sent
	epoch    uint64 // the epoch it routes with: 1, then what refusals told
}

type groupState struct {
	log      [][]byte // entry i+1 is log[i]
	replicas []*replica
	leader   int
	nextR    int // the number of the next replica added (members.go)
}

type sim struct {
	cfg   Config
	proto *protocol.Protocol
	rng   *rand.Rand
	top   *partition.Topology
	// tops: the topology of every epoch a change taken started, epoch 1
	// (top) first (epochs.go).
	tops   []*partition.Topology
	cfgs   []group.EpochConfig
	pm     *partition.PartitionMap
	procs  *txn.Registry
	groups []*groupState
	net    []packet
	// cutUntil[a][b]: the link from a to b drops everything until this
	// step. Every cut heals by itself: a cut that outlived the workload
	// would keep the clients waiting, and the faults on, for ever.
	cutUntil [][]int
	// groupCuts counts the times a whole group was cut off, at most
	// groupCutsMax a run.
	groupCuts int
	// The long cut of Config.LongCut: the step it ends at (0: not begun).
	longCutUntil int
	pressureSeq  uint64
	// backupSeq numbers the backup markers, markers lists those accepted.
	backupSeq uint64
	markers   []multicast.MsgID
	// repl is the replacement of a replica under way (members.go), nil
	// when none; removed lists the replicas dropped.
	repl    *replacement
	removed []*replica
	// moveCuts and moved: the partition moves (moves.go).
	moveCuts map[moveCut]uint64
	moved    []movedAway
	clients  []*client
	loaded   bool
	faults   bool
	res      Result
	// accepted lists every request accepted by its entry group, in order.
	accepted []*request
	acked    map[multicast.MsgID]bool
}

// Run runs one simulation. Its error is a failure of the simulator or of a
// component that cannot go on (an executor error, a store that does not
// reopen); what the checks find is in Result.Violations.
func Run(cfg Config) (*Result, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	s := &sim{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, 0x6462_7369_6d)), acked: map[multicast.MsgID]bool{}, moveCuts: map[moveCut]uint64{}}
	s.res.Config = cfg
	var err error
	if s.proto, err = protocol.Lookup(cfg.Protocol); err != nil {
		return nil, err
	}
	if s.top, s.pm, err = newWorld(cfg.Groups); err != nil {
		return nil, err
	}
	s.tops = []*partition.Topology{s.top}
	s.cfgs = []group.EpochConfig{group.BootstrapEpoch(s.top)}
	s.procs = txn.NewRegistry()
	if err := s.procs.Register(ProcName, AppendProc{Open: s.cfg.OpenLists}); err != nil {
		return nil, err
	}
	defer s.close()
	for g := range cfg.Groups {
		gs := &groupState{nextR: cfg.Replicas}
		gcfg := group.Config{Protocol: cfg.Protocol, Topology: s.top, Self: partition.GroupID(g), SessionTicks: cfg.SessionTicks, Partitions: s.pm}
		gcfg.Channel.BacklogBytesMax = cfg.BacklogBytesMax
		for r := range cfg.Replicas {
			rp, err := openReplica(g, r, gcfg, s.pm, s.procs, vfs.NewCrashableMem(), cfg.ResultsMax, cfg.ResultSessionsMax)
			if err != nil {
				return nil, err
			}
			gs.replicas = append(gs.replicas, rp)
		}
		s.groups = append(s.groups, gs)
	}
	s.cutUntil = make([][]int, cfg.Groups)
	for g := range s.cutUntil {
		s.cutUntil[g] = make([]int, cfg.Groups)
	}
	s.makeWorkload()
	if err := s.run(); err != nil {
		return &s.res, fmt.Errorf("%w (replay: %s)", err, cfg.Replay())
	}
	if err := s.check(); err != nil {
		return &s.res, fmt.Errorf("%w (replay: %s)", err, cfg.Replay())
	}
	return &s.res, nil
}

func (s *sim) close() {
	for _, gs := range s.groups {
		for _, rp := range gs.replicas {
			_ = rp.close()
		}
	}
}

// loaderID is the client id of the loader, which adds every account's
// initial balance before the workload starts.
const loaderID = 1000

func (s *sim) makeWorkload() {
	loader := &client{id: loaderID, epoch: 1}
	for g := range s.cfg.Groups {
		t := loadTxn(g)
		loader.reqs = append(loader.reqs, &request{kind: kindLoad, msg: s.txnMsg(loaderID, uint64(g+1), t, 0)})
	}
	s.clients = append(s.clients, loader)
	for c := range s.cfg.Clients {
		cl := &client{id: uint64(c + 1), home: partition.GroupID(c % s.cfg.Groups), epoch: 1}
		for i := range s.cfg.Txns {
			seq := uint64(i + 1)
			var rq *request
			if s.rng.IntN(2) == 0 {
				from := accountKey(s.rng.IntN(s.cfg.Groups), s.rng.IntN(AccountsPerGroup))
				to := accountKey(s.rng.IntN(s.cfg.Groups), s.rng.IntN(AccountsPerGroup))
				amount := int64(1 + s.rng.IntN(80))
				rq = &request{kind: kindTransfer, from: from, to: to, amount: amount, msg: s.txnMsg(cl.id, seq, transferTxn(from, to, amount), cl.home)}
			} else {
				n := 1 + s.rng.IntN(3)
				var lists []string
				for range n {
					k := listKey(s.rng.IntN(s.cfg.Groups), s.rng.IntN(ListsPerGroup))
					if !slices.Contains(lists, k) {
						lists = append(lists, k)
					}
				}
				id := multicast.MsgID{Client: cl.id, Seq: seq}
				call := appendCall(id, lists)
				dst, err := s.procs.Destinations(call, s.pm, s.top, cl.home)
				if err != nil {
					panic(fmt.Sprintf("dbsim: routing %s: %v", id, err))
				}
				rq = &request{kind: kindAppend, lists: lists, msg: multicast.Message{ID: id, Dst: dst, Payload: txn.AppendCallPayload(nil, call)}}
			}
			cl.reqs = append(cl.reqs, rq)
		}
		s.clients = append(s.clients, cl)
	}
}

func (s *sim) txnMsg(clientID, seq uint64, t *txn.Txn, home partition.GroupID) multicast.Message {
	dst, err := t.Destinations(s.pm, s.top, home)
	if err != nil {
		panic(fmt.Sprintf("dbsim: routing c%d.%d: %v", clientID, seq, err))
	}
	return multicast.Message{ID: multicast.MsgID{Client: clientID, Seq: seq}, Dst: dst, Payload: txn.AppendTxnPayload(nil, t)}
}

// entry returns the group a client at home sends a message to dst to, as
// the client library does (the registry's Entry; no latency matrix, so
// Skeen's nearest destination is home when it is one).
func (s *sim) entry(home partition.GroupID, dst partition.GroupSet) partition.GroupID {
	return s.entryAt(uint64(len(s.tops)), home, dst)
}

// entryAt is entry by the topology of epoch e (its overlay's ranks and
// tree), as a client that knows e routes.
func (s *sim) entryAt(e uint64, home partition.GroupID, dst partition.GroupSet) partition.GroupID {
	return s.proto.Entry(s.tops[e-1], nil, protocol.HomeOrigin(home), dst)
}

// propose appends an entry to group g's log and has its leader apply it,
// transmitting what it produced. It returns the request's outcome.
func (s *sim) propose(g partition.GroupID, data []byte) (error, error) {
	gs := s.groups[g]
	gs.log = append(gs.log, data)
	s.res.Entries++
	lead := gs.replicas[gs.leader]
	var result error
	for lead.applied < uint64(len(gs.log)) {
		index := lead.applied + 1
		out, r, err := lead.apply(index, gs.log[index-1])
		if err != nil {
			return nil, err
		}
		if err := s.output(g, out); err != nil {
			return nil, err
		}
		result = r
	}
	return result, nil
}

// output checks a leader's output and puts its frames on the network, one
// packet per destination group.
func (s *sim) output(g partition.GroupID, out rawnode.Output) error {
	for _, r := range out.Rejected {
		return fmt.Errorf("dbsim: group %d rejected an envelope from group %d: %w", g, r.From, r.Err)
	}
	return s.transmit(g, out.Frames)
}

func (s *sim) transmit(g partition.GroupID, frames []channel.Frame) error {
	for len(frames) > 0 {
		to := frames[0].To
		n := 1
		for n < len(frames) && frames[n].To == to {
			n++
		}
		s.net = append(s.net, packet{from: g, to: to, frames: slices.Clone(frames[:n])})
		frames = frames[n:]
	}
	if len(s.net) > 1<<16 {
		return fmt.Errorf("dbsim: %d packets in flight", len(s.net))
	}
	return nil
}

// groupCutsMax bounds the times a run cuts a whole group off: each cut
// lasts thousands of steps, and the clients wait through it.
const groupCutsMax = 2

// quietAfterTicks is the replication shell's rule (replica.go): a leader
// stops proposing ticks once this many were applied with nothing else and
// a tick would change nothing.
const quietAfterTicks = 4

func (s *sim) run() error {
	s.faults = true
	workloadDone := false
	for s.res.Steps = 0; s.res.Steps < s.cfg.StepsMax; s.res.Steps++ {
		if s.cfg.LongCut > 0 {
			s.longCut()
		}
		if !workloadDone && s.clientsDone() && (s.cfg.LongCut == 0 || s.longCutOver()) {
			workloadDone = true
			s.faults = false
			s.healAll()
		}
		if workloadDone && s.quiescent() {
			return nil
		}
		if err := s.step(); err != nil {
			return err
		}
	}
	s.res.violate("liveness: not quiescent after %d steps: %s", s.cfg.StepsMax, s.stuck())
	return nil
}

func (s *sim) step() error {
	if err := s.advanceMembers(); err != nil {
		return err
	}
	// Drawn only while a move is under way, so that the runs without
	// stay what they were.
	if s.movesUnderWay() && s.rng.IntN(3) == 0 {
		return s.moveStep()
	}
	if s.faults && s.rng.Float64() < s.cfg.Faults {
		return s.fault()
	}
	if s.inLongCut() && s.rng.IntN(4) == 0 {
		return s.pressure()
	}
	if s.faults && s.loaded && s.rng.Float64() < s.cfg.Anonymous {
		return s.anonymous()
	}
	if s.cfg.Backups > 0 && s.faults && s.loaded && s.rng.Float64() < s.cfg.Backups {
		return s.backup()
	}
	// Drawn only with changes, so that the runs without stay what they
	// were.
	if s.cfg.Changes > 0 && s.faults && s.loaded && s.rng.Float64() < s.cfg.Changes {
		return s.change()
	}
	switch n := s.rng.IntN(100); {
	case n < 40 && len(s.net) > 0:
		return s.deliverPacket()
	case n < 55:
		return s.clientStep(s.clients[s.rng.IntN(len(s.clients))])
	case n < 75:
		g := partition.GroupID(s.rng.IntN(len(s.groups)))
		if s.groups[g].replicas[s.groups[g].leader].m.State().Quiet(quietAfterTicks) {
			return nil
		}
		_, err := s.propose(g, group.EncodeTick())
		return err
	default:
		return s.followerStep()
	}
}

func (s *sim) deliverPacket() error {
	i := s.rng.IntN(len(s.net))
	p := s.net[i]
	// A duplicated packet is delivered now and stays in flight for later.
	if dup := s.faults && s.rng.Float64() < s.cfg.Dup; !dup {
		s.net = slices.Delete(s.net, i, i+1)
	}
	if s.cutUntil[p.from][p.to] > s.res.Steps || (s.faults && s.rng.Float64() < s.cfg.Drop) {
		return nil
	}
	result, err := s.propose(p.to, group.EncodeInbound(p.from, p.frames))
	if result != nil {
		// Every group is honest: a batch refused as malformed means the
		// channels of two groups disagree.
		s.res.violate("channel: group %d refused a batch from group %d: %v", p.to, p.from, result)
	}
	return err
}

func (s *sim) followerStep() error {
	gs := s.groups[s.rng.IntN(len(s.groups))]
	rp := gs.replicas[s.rng.IntN(len(gs.replicas))]
	if rp.applied >= uint64(len(gs.log)) {
		return nil
	}
	n := 1 + s.rng.IntN(8)
	if !s.faults {
		n = len(gs.log) // the drain: followers catch up
	}
	for range n {
		if rp.applied >= uint64(len(gs.log)) {
			break
		}
		index := rp.applied + 1
		if _, _, err := rp.apply(index, gs.log[index-1]); err != nil {
			return err
		}
	}
	return nil
}

// clientStep moves a client on: it sends its request, polls the
// destinations' leaders for its results, re-sends a request refused or
// waited on long, and goes to the next once every destination answered.
func (s *sim) clientStep(c *client) error {
	if c.next >= len(c.reqs) {
		return nil
	}
	if c.id != loaderID && !s.loaded {
		return nil
	}
	rq := c.reqs[c.next]
	if c.sent {
		c.waited++
		if s.answered(c, rq) {
			return nil
		}
		if c.waited < 50 || s.rng.IntN(4) != 0 {
			return nil
		}
	}
	if !c.sent && len(s.cfgs) > 1 {
		// Routed by the owners of the epoch the client knows: a
		// partition may have moved.
		s.route(rq, c.epoch)
	}
	entry := s.entryAt(c.epoch, c.home, rq.msg.Dst)
	if rq.invoked == 0 {
		rq.invoked = s.res.Steps + 1
	}
	if es := s.groups[entry]; c.id != loaderID {
		// The entry group's server refuses, as busy, what touches a
		// partition moving in its epoch (server.checkMoving).
		if st := es.replicas[es.leader].m.State(); st.Epoch() == c.epoch && s.touchesMoving(st.EpochConfig(), keysOf(rq)) {
			s.res.MoveRefusals++
			return nil
		}
	}
	if !c.sent {
		ok, err := s.sessionID(c, rq, entry)
		if err != nil || !ok {
			return err
		}
	}
	result, err := s.propose(entry, group.EncodeRequestsAt(c.epoch, []multicast.Message{rq.msg}))
	if err != nil {
		return err
	}
	result = only(result)
	var ee *rawnode.EpochError
	switch {
	case errors.As(result, &ee) && errors.Is(result, rawnode.ErrEpochChanged):
		// Never ordered: again, with the epoch the group names.
		s.res.EpochRefusals++
		c.epoch = ee.Epoch
		return nil
	case result == nil:
		if c.sent {
			s.res.violate("exactly once: request %s accepted twice by group %d", rq.msg.ID, entry)
		}
		s.accepted = append(s.accepted, rq)
	case errors.Is(result, group.ErrDuplicate) && c.sent:
		s.res.Duplicates++
	case errors.Is(result, group.ErrSessionExpired):
		// Never executed. A request the group never accepted goes again
		// under a new session; one it accepted must not run twice: the
		// client waits for its results, which its destinations deliver
		// whatever became of the session.
		s.res.Expired++
		if !c.sent {
			delete(c.sessions, entry)
		}
		c.waited = 0
		return nil
	case errors.Is(result, multicast.ErrBusy):
		s.res.Busy++
		s.refused(entry, result)
		return nil
	default:
		return fmt.Errorf("dbsim: request %s at group %d: %w", rq.msg.ID, entry, result)
	}
	c.sent, c.waited = true, 0
	return nil
}

// sessionID gives rq, not sent yet, the id of c's session at group entry,
// opening the session first if c has none there; ok is false when the
// group refused the open (it is tried again at a later step).
func (s *sim) sessionID(c *client, rq *request, entry partition.GroupID) (ok bool, err error) {
	sid, open := c.sessions[entry]
	if !open {
		index := uint64(len(s.groups[entry].log)) + 1
		result, err := s.propose(entry, group.EncodeSession())
		switch {
		case err != nil:
			return false, err
		case errors.Is(result, multicast.ErrBusy):
			s.res.Busy++
			return false, nil
		case result != nil:
			return false, fmt.Errorf("dbsim: client %d opens a session at group %d: %w", c.id, entry, result)
		}
		s.res.Sessions++
		sid = group.SessionID(entry, index)
		if c.sessions == nil {
			c.sessions = map[partition.GroupID]uint64{}
		}
		c.sessions[entry] = sid
	}
	if rq.msg.ID.Client != sid {
		rq.msg.ID.Client = sid
		if rq.kind == kindAppend {
			// The procedure appends its own id to the lists.
			rq.msg.Payload = txn.AppendCallPayload(nil, appendCall(rq.msg.ID, rq.lists))
		}
	}
	return true, nil
}

// answered collects the results of c's request from its destinations'
// leaders; once all answered it records the outcome and moves c on.
func (s *sim) answered(c *client, rq *request) bool {
	var pieces []txn.PieceResult
	for _, g := range rq.msg.Dst.Slice() {
		gs := s.groups[g]
		res, found, err := gs.replicas[gs.leader].exec.Result(rq.msg.ID)
		if err != nil {
			s.res.violate("results: %s at group %d: %v", rq.msg.ID, g, err)
			return false
		}
		if !found {
			return false
		}
		pieces = append(pieces, res)
	}
	if _, err := txn.MergeResults(rq.msg.ID.String(), pieces); err != nil && !errors.Is(err, txn.ErrAborted) {
		s.res.violate("atomicity: %s: the destinations disagree: %v", rq.msg.ID, err)
	}
	s.epochAborted(pieces)
	switch {
	case pieces[0].Aborted || !pieces[0].Succeeded:
		s.res.Aborted++
	default:
		s.res.Committed++
	}
	s.acked[rq.msg.ID] = true
	rq.pieces, rq.done = pieces, s.res.Steps+1
	c.next++
	c.sent = false
	if c.id == loaderID && c.next == len(c.reqs) {
		s.loaded = true
	}
	return true
}

func (s *sim) clientsDone() bool {
	for _, c := range s.clients {
		if c.next < len(c.reqs) {
			return false
		}
	}
	return true
}

// quiescent: nothing in flight, every replica applied its whole log, and
// no leader's channel holds an unacknowledged envelope. (Quiet would be too
// strong: FlexCast's rank-0 group keeps its flush timer running.)
func (s *sim) quiescent() bool {
	if len(s.net) > 0 || !s.membersSettled() || s.movesUnderWay() {
		return false
	}
	for _, gs := range s.groups {
		for _, rp := range gs.replicas {
			if rp.applied < uint64(len(gs.log)) {
				return false
			}
		}
		lead := gs.replicas[gs.leader]
		for h := range s.groups {
			if h := partition.GroupID(h); h != lead.cfg.Self && lead.m.State().Node().OutboxLen(h) > 0 {
				return false
			}
		}
	}
	return true
}

func (s *sim) stuck() string {
	out := fmt.Sprintf("%d packets in flight", len(s.net))
	if s.movesUnderWay() {
		out += fmt.Sprintf("; moves under way %+v", s.cfgs[len(s.cfgs)-1].Moves)
		for g, gs := range s.groups {
			st := gs.replicas[gs.leader].m.State()
			out += fmt.Sprintf(" g%d at epoch %d (changing %v, queued %d) copies %+v", g, st.Epoch(), st.Node().Changing(), gs.replicas[gs.leader].exec.Stats().Queued, st.MovesIn())
		}
	}
	if s.repl != nil {
		out += fmt.Sprintf("; replacement in group %d at stage %d (add %s, remove %s)", s.repl.g, s.repl.stage, s.repl.add, s.repl.remove)
	}
	for _, c := range s.clients {
		if c.next < len(c.reqs) {
			rq := c.reqs[c.next]
			out += fmt.Sprintf("; client %d waits on %s to %s (kind %d, sent %v):", c.id, rq.msg.ID, rq.msg.Dst, rq.kind, c.sent)
			for _, g := range rq.msg.Dst.Slice() {
				lead := s.groups[g].replicas[s.groups[g].leader]
				_, found, _ := lead.exec.Result(rq.msg.ID)
				out += fmt.Sprintf(" g%d result %v %+v", g, found, lead.exec.Stats())
				for _, rp := range s.groups[g].replicas {
					_, f, _ := rp.exec.Result(rq.msg.ID)
					delivered := false
					for _, d := range rp.dlog {
						for _, id := range d.ids {
							if id == rq.msg.ID {
								delivered = true
							}
						}
					}
					out += fmt.Sprintf(" [r%d applied %d exec %d result %v delivered %v]", rp.r, rp.applied, rp.exec.AppliedIndex(), f, delivered)
				}
			}
		}
	}
	for g, gs := range s.groups {
		st := gs.replicas[gs.leader].m.State()
		out += fmt.Sprintf("; g%d log %d, leader r%d quiet %v outbox", g, len(gs.log), gs.leader, st.Quiet(quietAfterTicks))
		for h := range s.groups {
			if h != g {
				out += fmt.Sprintf(" ->g%d:%d", h, st.Node().OutboxLen(partition.GroupID(h)))
			}
		}
		for h := range s.groups {
			if h != g {
				var seqs []uint64
				for _, f := range st.Node().Unacked(partition.GroupID(h)) {
					seqs = append(seqs, f.Seq)
				}
				hst := s.groups[h].replicas[s.groups[h].leader].m.State()
				out += fmt.Sprintf(" unacked->g%d %v (g%d has up to %d)", h, seqs, h, hst.Node().AckFrame(partition.GroupID(g)).Ack)
			}
		}
	}
	return out
}

func (s *sim) healAll() {
	for _, row := range s.cutUntil {
		clear(row)
	}
}

// fault injects one fault.
func (s *sim) fault() error {
	gs := s.groups[s.rng.IntN(len(s.groups))]
	switch n := s.rng.IntN(100); {
	case n < 20 && len(gs.replicas) > 1:
		return s.changeLeader(gs)
	case n < 32:
		return s.crash(gs, s.rng.IntN(len(gs.replicas)))
	case n < 55:
		return gs.replicas[s.rng.IntN(len(gs.replicas))].takeSnapshot()
	case n < 65:
		// The store's writes become durable without a snapshot (the OS
		// wrote its pages back): a crash then leaves the executor ahead of
		// the latest snapshot, and the replay rule must not run again what
		// it ran.
		return gs.replicas[s.rng.IntN(len(gs.replicas))].exec.Sync()
	case n < 75:
		return s.install(gs)
	case n < 78 && s.cfg.CutGroup && s.groupCuts < groupCutsMax:
		// A whole group cut off from the others for a long while.
		s.groupCuts++
		g, until := s.rng.IntN(len(s.groups)), s.res.Steps+5000+s.rng.IntN(20000)
		for h := range s.groups {
			if h != g {
				s.cutUntil[g][h], s.cutUntil[h][g] = until, until
			}
		}
	case n < 90:
		if a, b := s.rng.IntN(len(s.groups)), s.rng.IntN(len(s.groups)); a != b {
			until := s.res.Steps + 100 + s.rng.IntN(3000)
			if s.inLongCut() && (a == s.cfg.LongCutGroup || b == s.cfg.LongCutGroup) {
				break // the long cut lasts its length
			}
			s.cutUntil[a][b] = until
		}
	}
	return nil
}

// changeLeader makes another replica of gs that may lead (a voter) the
// leader, if there is one.
func (s *sim) changeLeader(gs *groupState) error {
	vs := voters(gs)
	if len(vs) == 0 {
		return nil
	}
	return s.changeLeaderTo(gs, vs[s.rng.IntN(len(vs))])
}

// crash crashes replica r of gs and restarts it; a crashed leader first
// hands over to another replica.
func (s *sim) crash(gs *groupState, r int) error {
	if r == gs.leader && len(gs.replicas) > 1 {
		if err := s.changeLeader(gs); err != nil {
			return err
		}
	}
	s.res.Crashes++
	rp := gs.replicas[r]
	if err := rp.crash(); err != nil {
		return err
	}
	if r == gs.leader {
		// A lone replica leads again once it caught up.
		return s.changeLeaderTo(gs, r)
	}
	return nil
}

// changeLeaderTo makes replica r of gs the leader: it applies the log to
// its end, then sends every other group its whole outbox and its receive
// positions, as a new leader's transmitter does (replication/replica.go).
func (s *sim) changeLeaderTo(gs *groupState, r int) error {
	if r != gs.leader {
		s.res.Leaders++
	}
	gs.leader = r
	lead := gs.replicas[r]
	for lead.applied < uint64(len(gs.log)) {
		index := lead.applied + 1
		if _, _, err := lead.apply(index, gs.log[index-1]); err != nil {
			return err
		}
	}
	g, nd := lead.cfg.Self, lead.m.State().Node()
	for h := range s.groups {
		if h := partition.GroupID(h); h != g {
			if err := s.transmit(g, append(nd.Unacked(h), nd.AckFrame(h))); err != nil {
				return err
			}
		}
	}
	return nil
}

// install has the leader's latest snapshot installed on the follower that
// lags most, as raft does for a follower behind the leader's log.
func (s *sim) install(gs *groupState) error {
	lead := gs.replicas[gs.leader]
	if len(lead.snaps) == 0 {
		return nil
	}
	sn := lead.snaps[len(lead.snaps)-1]
	var lag *replica
	for i, rp := range gs.replicas {
		if i != gs.leader && rp.applied < sn.index && (lag == nil || rp.applied < lag.applied) {
			lag = rp
		}
	}
	if lag == nil {
		return nil
	}
	return s.installOn(lead, lag)
}

// installOn installs the latest snapshot of lead on rp.
func (s *sim) installOn(lead, rp *replica) error {
	sn := lead.snaps[len(lead.snaps)-1]
	s.res.Installs++
	if err := rp.restore(sn); err != nil {
		return err
	}
	rp.snaps = append(rp.snaps, sn)
	if len(rp.snaps) > 2 {
		rp.snaps = rp.snaps[1:]
	}
	return nil
}

// longCut begins the long cut of Config.LongCut once the accounts are
// loaded, and measures the other groups while it lasts.
func (s *sim) longCut() {
	g := s.cfg.LongCutGroup
	switch {
	case s.longCutUntil == 0 && s.loaded:
		s.longCutUntil = s.res.Steps + s.cfg.LongCut
		s.res.Cut = &CutResult{}
		for h := range s.groups {
			if h != g {
				s.cutUntil[g][h], s.cutUntil[h][g] = s.longCutUntil, s.longCutUntil
			}
		}
	case s.inLongCut():
		now := s.memory()
		s.res.Cut.Peak.raise(now)
		switch s.res.Steps {
		case s.longCutUntil - s.cfg.LongCut/2:
			s.res.Cut.Mid = now
		case s.longCutUntil - 1:
			s.res.Cut.End = now
		}
	}
}

func (s *sim) inLongCut() bool { return s.longCutUntil != 0 && s.res.Steps < s.longCutUntil }

func (s *sim) longCutOver() bool { return s.longCutUntil != 0 && s.res.Steps >= s.longCutUntil }

// memory measures the leaders of the groups that are not cut.
func (s *sim) memory() CutMemory {
	var m CutMemory
	for g, gs := range s.groups {
		if g == s.cfg.LongCutGroup {
			continue
		}
		lead := gs.replicas[gs.leader]
		st := lead.m.State()
		nd := st.Node()
		for h := range s.groups {
			if h == g {
				continue
			}
			h := partition.GroupID(h)
			m.OutboxBytes = max(m.OutboxBytes, nd.OutboxBytes(h))
			m.Backlog = max(m.Backlog, nd.Backlog(h))
			m.HoldbackBytes = max(m.HoldbackBytes, nd.HoldbackBytes(h))
		}
		for _, r := range s.proto.Read(st.Core(), nil) {
			if strings.HasSuffix(s.proto.Stats()[r.Stat].Name, "_pending_bytes") {
				m.PendingBytes = max(m.PendingBytes, int(r.Value))
			}
		}
		es := lead.exec.Stats()
		m.VotesStored = max(m.VotesStored, es.VotesStored)
		m.Queued = max(m.Queued, es.Queued)
	}
	return m
}

// pressure offers a request that no client waits for, during the long
// cut: a transfer of nothing to the first account of each of a random,
// non-empty set of groups, at the entry group of a random home.
func (s *sim) pressure() error {
	m, t, home := s.nothing()
	entry, data, ok := s.requestNow(home, &m, t)
	cut := s.res.Cut
	cut.Offered++
	if !ok {
		return nil
	}
	result, err := s.propose(entry, data)
	if err != nil {
		return err
	}
	result = only(result)
	switch {
	case result == nil:
		cut.Accepted++
		s.accepted = append(s.accepted, &request{kind: kindPressure, msg: m})
	case errors.Is(result, multicast.ErrBusy):
		s.refused(entry, result)
	default:
		return fmt.Errorf("dbsim: request %s at group %d: %w", m.ID, entry, result)
	}
	return nil
}

// nothing returns an anonymous transfer of nothing to a random non-empty
// set of groups, and a random home to send it from.
func (s *sim) nothing() (multicast.Message, *txn.Txn, partition.GroupID) {
	var dst []int
	for len(dst) == 0 {
		for g := range s.groups {
			if s.rng.IntN(2) == 0 {
				dst = append(dst, g)
			}
		}
	}
	t := &txn.Txn{}
	for _, g := range dst {
		t.Then = append(t.Then, txn.Op{Kind: txn.OpAdd, Key: []byte(accountKey(g, 0)), Int: 0})
	}
	s.pressureSeq++
	home := partition.GroupID(s.rng.IntN(len(s.groups)))
	m := s.txnMsg(pressureID, s.pressureSeq, t, home)
	return m, t, home
}

// anonymous offers an anonymous request outside the long cut
// (Config.Anonymous): a put of one group's noise key, which sends no vote;
// a refused one is dropped.
func (s *sim) anonymous() error {
	g := s.rng.IntN(len(s.groups))
	s.pressureSeq++
	t := &txn.Txn{Then: []txn.Op{{Kind: txn.OpPut, Key: []byte(noiseKey(g)), Value: []byte(strconv.FormatUint(s.pressureSeq, 10))}}}
	m := s.txnMsg(pressureID, s.pressureSeq, t, partition.GroupID(g))
	entry, data, ok := s.requestNow(partition.GroupID(g), &m, t)
	if !ok {
		return nil
	}
	result, err := s.propose(entry, data)
	result = only(result)
	switch {
	case err != nil:
		return err
	case result == nil:
		s.res.Anonymous++
		s.accepted = append(s.accepted, &request{kind: kindPressure, msg: m})
	case errors.Is(result, multicast.ErrBusy):
	default:
		return fmt.Errorf("dbsim: request %s at group %d: %w", m.ID, entry, result)
	}
	return nil
}

// pressureID is the client id of the requests pressure offers: anonymous
// (group.AnonymousBit), as no client retries them and so none needs a
// session.
const pressureID = group.AnonymousBit | 2000

// refused records a refusal as busy at entry during the long cut, which
// must name the cut group.
func (s *sim) refused(entry partition.GroupID, err error) {
	cut := s.res.Cut
	if !s.inLongCut() || int(entry) == s.cfg.LongCutGroup {
		return
	}
	cut.Refused++
	if !strings.Contains(err.Error(), fmt.Sprintf("group %d is unreachable", s.cfg.LongCutGroup)) && len(cut.RefusedElse) < 3 {
		cut.RefusedElse = append(cut.RefusedElse, fmt.Sprintf("at group %d: %v", entry, err))
	}
}
