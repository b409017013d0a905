// Package sim is FlexKV's seeded simulator of its ordering protocols (DESIGN
// 12): the tool that looks for executions in which a protocol is wrong.
//
// A run builds a cluster of groups, each a protocol core (any
// multicast.Core) inside a node with its reliable channel layer, and drives
// them with a discrete-event loop in simulated time. Clients homed at the
// groups submit messages at random times to the protocol's entry group
// (a refused request is retried; requests themselves are never lost). The
// network under the channels delays every frame by the link's latency plus
// jitter (which reorders frames), loses and duplicates frames, and cuts links
// or isolates groups for a while; after the last submission and a second of
// faults, everything heals and the run continues until every message is
// delivered at every destination and every outbox is empty, or until a bound
// on simulated time passes. Every multicast, delivery and core send goes to
// a check.Checker (and, if asked, to a delivery log), whose report must show
// no violated property; a run that cannot finish is reported as a validity
// failure naming what is stuck.
//
// All randomness comes from one PCG generator seeded by Config.Seed, events
// happen in (time, scheduling order), and nothing reads the clock, starts a
// goroutine or iterates over a map where the order could matter, so a seed
// replays its run exactly; a failure's error carries the seed and the
// command that replays it.
package sim

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"

	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/multicast/channel"
	"github.com/flexkv/flexkv/multicast/check"
	"github.com/flexkv/flexkv/multicast/internal/interaction"
	"github.com/flexkv/flexkv/multicast/protocol"
	"github.com/flexkv/flexkv/multicast/rawnode"
	"github.com/flexkv/flexkv/partition"
)

// pcgStream is the second word of the generator's seed; the first is
// Config.Seed.
const pcgStream = 0x666c65786b76 // "flexkv"

// Channel bounds used when Config.OutboxMax and Config.HoldbackMax are zero.
const (
	OutboxMaxDefault   = 256
	HoldbackMaxDefault = 64
)

// stuckShown bounds the items a liveness failure lists per kind.
const stuckShown = 5

// GroupStats is what one group did in a run.
type GroupStats struct {
	Name       string
	Deliveries int // messages delivered
	// Received counts application payload messages: requests accepted at
	// this group and envelopes of kind msg or relay sent to it (flushes,
	// which are never delivered to the application, excluded).
	Received   int
	Sends      int   // envelopes its core sent
	SendBytes  int64 // their payload bytes
	Frames     int   // frames it transmitted: data, resends and control
	FrameBytes int64 // their encoded bytes
}

// Overhead is the share of the payload messages a group received that it
// did not deliver: 1 - delivered/received, the paper's Table 4 figure for
// the tree protocol. Zero when it received nothing.
func (g GroupStats) Overhead() float64 {
	if g.Received == 0 {
		return 0
	}
	return 1 - float64(g.Deliveries)/float64(g.Received)
}

// NetStats counts what happened to frames on the simulated network.
type NetStats struct {
	Frames     int   // frames transmitted by nodes
	Bytes      int64 // their encoded bytes
	Arrived    int   // frame copies that reached a node
	Dropped    int   // lost at random
	Duplicated int   // delivered twice
	Reordered  int   // data frames that arrived after a later one of their link
	Cut        int   // lost to a partition
	Partitions int   // cuts started (a group isolated or a link cut)
}

// MulticastStats counts the envelopes about one message.
type MulticastStats struct {
	ID     multicast.MsgID
	Dst    int // number of destinations
	Sends  int
	Acks   int
	Notifs int
}

// Result is the outcome of a run.
type Result struct {
	Config Config // normalized: defaults filled in
	Report check.Report
	Groups []GroupStats // by rank
	// Sends counts core sends by kind, flush traffic included; index with
	// a multicast.Kind.
	Sends      [multicast.KindVote + 1]int
	SendBytes  int64
	Multicasts int // messages accepted by their entry group
	Deliveries int // deliveries at destinations, each (message, group) once
	Busy       int // requests refused with ErrBusy and retried
	// Changes counts the changes of the epoch the operator submitted;
	// EpochRefusals, the requests refused for an ended epoch (and
	// resubmitted); Aborted, the messages aborted at their destinations
	// for an epoch that ended before their delivery (and resubmitted as
	// new messages).
	Changes       int
	EpochRefusals int
	Aborted       int
	// Rebuilt counts the changes that altered the overlay; Generations,
	// the cores of new generations the groups started (rawnode
	// generations: Rebuilt times the groups under FlexCast and the tree
	// protocol, none under Skeen).
	Rebuilt     int
	Generations int
	// PerMulticast holds one entry per accepted message, in acceptance order.
	PerMulticast []MulticastStats
	Net          NetStats
	SimTimeMs    float64
	Events       int
	// Complete: every message was accepted and delivered at every
	// destination, and every outbox emptied, before the time bound.
	Complete bool
}

// perMulticast returns the mean and the maximum of f over the multicasts.
func (r Result) perMulticast(f func(MulticastStats) int) (mean float64, most int) {
	if len(r.PerMulticast) == 0 {
		return 0, 0
	}
	total := 0
	for _, m := range r.PerMulticast {
		total += f(m)
		most = max(most, f(m))
	}
	return float64(total) / float64(len(r.PerMulticast)), most
}

// AcksPerMulticast returns the mean and maximum number of acks sent about
// one message.
func (r Result) AcksPerMulticast() (mean float64, most int) {
	return r.perMulticast(func(m MulticastStats) int { return m.Acks })
}

// NotifsPerMulticast returns the mean and maximum number of notifications
// sent about one message.
func (r Result) NotifsPerMulticast() (mean float64, most int) {
	return r.perMulticast(func(m MulticastStats) int { return m.Notifs })
}

// Summary returns two lines: the checker's summary, and the run's counts.
func (r Result) Summary() string {
	var b strings.Builder
	b.WriteString(r.Report.Summary())
	fmt.Fprintf(&b, "\n%s, %d groups: %d multicasts, %d deliveries, sends", r.Config.Protocol, len(r.Groups), r.Multicasts, r.Deliveries)
	for k := multicast.KindMsg; k <= multicast.KindVote; k++ {
		fmt.Fprintf(&b, " %s=%d", k, r.Sends[k])
	}
	acks, acksMax := r.AcksPerMulticast()
	notifs, notifsMax := r.NotifsPerMulticast()
	fmt.Fprintf(&b, ", acks/multicast %.2f (max %d), notifs/multicast %.2f (max %d)", acks, acksMax, notifs, notifsMax)
	fmt.Fprintf(&b, ", frames %d (dropped %d, duplicated %d, reordered %d, cut %d), busy %d, simulated %.3f s, %d events",
		r.Net.Frames, r.Net.Dropped, r.Net.Duplicated, r.Net.Reordered, r.Net.Cut, r.Busy, r.SimTimeMs/1000, r.Events)
	if r.Changes > 0 {
		fmt.Fprintf(&b, ", %d changes of the epoch (%d of the overlay, %d cores started; %d requests refused, %d messages aborted and resubmitted)",
			r.Changes, r.Rebuilt, r.Generations, r.EpochRefusals, r.Aborted)
	}
	return b.String()
}

// simulation is the state of one run.
type simulation struct {
	cfg   Config
	rng   *rand.Rand
	proto *protocol.Protocol
	w     *world
	names []string
	nodes []*rawnode.Node

	// Epochs (epochs.go): what each client knows, its resubmissions so
	// far, each job's verdict at its destinations, and the deliveries of
	// control messages.
	clientEpoch []uint64
	// tops: the topology of every epoch the operator started, epoch 1
	// first (epochs.go).
	tops         []*partition.Topology
	resubmits    []uint64
	verdict      []int8
	ctlDelivered int

	jobs      []job
	jobOf     map[multicast.MsgID]int
	accepted  []bool
	delivered []partition.GroupSet // per job: destinations that delivered it
	perJob    []int                // per job: index in res.PerMulticast, or -1
	nAccepted int
	copies    int // deliveries due at destinations of accepted messages

	checker *check.Checker
	log     *check.Writer

	queue      interaction.Queue[event]
	nowUs      int64
	faults     bool
	cut        [][]int    // cut[a][b] > 0: frames between a and b are lost
	seqMax     [][]uint64 // seqMax[a][b]: highest data seq arrived on link a->b
	faultEndUs int64
	deadlineUs int64

	res Result
}

// Run simulates the run cfg describes. It returns an error for an invalid
// configuration, and an error wrapping ErrFailed, with the seed, the
// checker's summary, what is stuck if anything, and the command that replays
// the run, when the run violates a property or cannot finish. The Result is
// filled in either way once the run started.
func Run(cfg Config) (Result, error) {
	replay := cfg.Command()
	ncfg, err := cfg.normalized()
	if err != nil {
		return Result{}, err
	}
	s, err := newSimulation(ncfg)
	if err != nil {
		return Result{}, err
	}
	runErr := s.run()
	s.res.SimTimeMs = float64(s.nowUs) / 1000
	if s.log != nil {
		if err := s.log.Flush(); err != nil && runErr == nil {
			runErr = fmt.Errorf("sim: delivery log: %w", err)
		}
	}
	s.res.Report = s.checker.Report()
	if runErr != nil {
		return s.res, fmt.Errorf("%w: seed %d: %w\nreplay: %s", ErrFailed, ncfg.Seed, runErr, replay)
	}
	if !s.res.Report.OK() || !s.res.Complete {
		stuck := ""
		if !s.res.Complete {
			stuck = "\n" + s.stuck()
		}
		return s.res, fmt.Errorf("%w: seed %d: %s%s\nreplay: %s", ErrFailed, ncfg.Seed, s.res.Report.Summary(), stuck, replay)
	}
	return s.res, nil
}

func newSimulation(cfg Config) (*simulation, error) {
	s := &simulation{
		cfg: cfg,
		rng: rand.New(rand.NewPCG(uint64(cfg.Seed), pcgStream)),
	}
	proto, err := protocol.Lookup(cfg.Protocol)
	if err != nil {
		return nil, err
	}
	s.proto = proto
	if s.w, err = buildWorld(cfg, s.rng); err != nil {
		return nil, err
	}
	n := s.w.top.Len()
	s.names = s.w.top.Names()
	s.jobs = makeWorkload(cfg, s.w, proto, s.rng)
	s.jobOf = make(map[multicast.MsgID]int, len(s.jobs))
	for i, j := range s.jobs {
		s.jobOf[j.msg.ID] = i
	}
	s.accepted = make([]bool, len(s.jobs))
	s.delivered = make([]partition.GroupSet, len(s.jobs))
	s.perJob = make([]int, len(s.jobs))
	for i := range s.perJob {
		s.perJob[i] = -1
	}
	s.verdict = make([]int8, len(s.jobs))
	s.clientEpoch = make([]uint64, n*clientsPerGroup)
	for i := range s.clientEpoch {
		s.clientEpoch[i] = 1
	}
	s.resubmits = make([]uint64, n*clientsPerGroup)

	// Resends must not start before an acknowledgement could come back:
	// wait longer than the largest round trip, jitter included.
	var rttMaxUs int64
	for a := range n {
		for b := range n {
			rttMaxUs = max(rttMaxUs, s.w.oneWayUs[a][b]+s.w.oneWayUs[b][a])
		}
	}
	rttMaxUs += 2 * msToUs(cfg.JitterMs)
	resendTicks := int(rttMaxUs/msToUs(tickMs)) + 2
	outboxMax, holdbackMax := cfg.OutboxMax, cfg.HoldbackMax
	if outboxMax == 0 {
		outboxMax = OutboxMaxDefault
	}
	if holdbackMax == 0 {
		holdbackMax = HoldbackMaxDefault
	}
	s.tops = []*partition.Topology{s.w.top}
	for g := range n {
		core, err := s.newCore(partition.GroupID(g), s.w.top)
		if err != nil {
			return nil, fmt.Errorf("sim: group %s: %w", s.names[g], err)
		}
		nd, err := rawnode.New(core, channel.Config{
			Self: partition.GroupID(g), Groups: n,
			ResendTicks: resendTicks, HoldbackMax: holdbackMax, OutboxMax: outboxMax,
		})
		if err != nil {
			return nil, fmt.Errorf("sim: group %s: %w", s.names[g], err)
		}
		nd.SetBuilder(&builder{s: s, self: partition.GroupID(g)})
		s.nodes = append(s.nodes, nd)
		s.res.Groups = append(s.res.Groups, GroupStats{Name: s.names[g]})
	}
	s.cut = make([][]int, n)
	s.seqMax = make([][]uint64, n)
	for g := range n {
		s.cut[g] = make([]int, n)
		s.seqMax[g] = make([]uint64, n)
	}

	s.checker = check.New(check.Options{Complete: true, Genuine: proto.Genuine()})
	if cfg.DeliveryLog != nil {
		s.log = check.NewWriter(cfg.DeliveryLog)
	}
	s.res.Config = cfg
	s.res.Config.DeliveryLog = nil
	s.res.Config.wrapCore = nil
	s.res.Config.keepOverlay = false
	return s, nil
}

func (s *simulation) schedule(e event) error {
	if s.queue.Len() >= s.cfg.queueMax {
		return fmt.Errorf("sim: %d events scheduled and not processed, the bound (at %.3f s)", s.queue.Len(), float64(s.nowUs)/1e6)
	}
	s.queue.Push(e.atUs, e)
	return nil
}

// run is the event loop. It returns an error for a bug the simulation
// cannot continue past (a node refusing valid input, a bound reached);
// property violations go to the checker and end the run normally.
func (s *simulation) run() error {
	var lastSubmitUs int64
	for i, j := range s.jobs {
		at := j.atUs + s.w.oneWayUs[j.home][j.entry]
		lastSubmitUs = max(lastSubmitUs, at)
		if err := s.schedule(event{atUs: at, kind: evSubmit, job: i}); err != nil {
			return err
		}
	}
	if err := s.scheduleChanges(lastSubmitUs); err != nil {
		return err
	}
	s.faults = true
	s.faultEndUs = lastSubmitUs + msToUs(faultTailMs)
	s.deadlineUs = s.faultEndUs + msToUs(s.cfg.LivenessMs)
	for _, e := range []event{
		{atUs: s.faultEndUs, kind: evHealAll},
		{atUs: msToUs(tickMs), kind: evTick},
		{atUs: 0, kind: evPartition},
	} {
		if err := s.schedule(e); err != nil {
			return err
		}
	}
	for s.queue.Len() > 0 {
		_, e := s.queue.Pop()
		s.nowUs = e.atUs
		s.res.Events++
		if s.res.Events > s.cfg.EventsMax {
			return fmt.Errorf("sim: %d events processed, the bound, at %.3f s", s.cfg.EventsMax, float64(s.nowUs)/1e6)
		}
		var err error
		switch e.kind {
		case evSubmit:
			err = s.submit(e.job)
		case evFrame:
			err = s.arrive(e.to, e.data)
		case evTick:
			if err = s.tick(); err == nil && s.complete() {
				s.res.Complete = true
				return nil
			}
			if s.nowUs >= s.deadlineUs {
				return nil // not complete: Run reports what is stuck
			}
			err = s.schedule(event{atUs: s.nowUs + msToUs(tickMs), kind: evTick})
		case evPartition:
			err = s.epoch()
		case evChange:
			err = s.change()
		case evHeal:
			s.heal(e.a, e.b)
		case evHealAll:
			s.faults = false
			for _, row := range s.cut {
				clear(row)
			}
		default:
			panic(fmt.Sprintf("sim: unknown event kind %d", e.kind))
		}
		if err != nil {
			return err
		}
	}
	panic("sim: the event queue ran dry, but a tick is always scheduled")
}

// submit hands job i to its entry group; a busy group makes the client
// retry later.
func (s *simulation) submit(i int) error {
	j := &s.jobs[i]
	if j.epoch == 0 {
		j.epoch = s.clientEpoch[j.client]
	}
	// The client routes with the topology of the epoch it knows.
	j.entry = s.proto.Entry(s.tops[j.epoch-1], s.w.lat, protocol.HomeOrigin(j.home), j.msg.Dst)
	err := s.nodes[j.entry].RequestAt(j.msg, j.epoch)
	if ee := (*rawnode.EpochError)(nil); errors.As(err, &ee) && errors.Is(err, rawnode.ErrEpochChanged) {
		return s.refused(i, ee)
	}
	if errors.Is(err, multicast.ErrBusy) {
		s.res.Busy++
		return s.schedule(event{atUs: s.nowUs + msToUs(retryMs), kind: evSubmit, job: i})
	}
	if err != nil {
		return fmt.Errorf("sim: request %s at %s: %w", j.msg.ID, s.names[j.entry], err)
	}
	s.accepted[i] = true
	s.nAccepted++
	s.copies += j.msg.Dst.Len()
	s.perJob[i] = len(s.res.PerMulticast)
	s.res.PerMulticast = append(s.res.PerMulticast, MulticastStats{ID: j.msg.ID, Dst: j.msg.Dst.Len()})
	s.res.Multicasts++
	s.res.Groups[j.entry].Received++
	if err := s.record(check.Record{Ev: check.EvMulticast, ID: j.msg.ID.String(), Dst: s.dstNames(j.msg.Dst)}); err != nil {
		return err
	}
	return s.drain(j.entry)
}

// arrive hands a frame to its receiver, unless a partition cut the link
// while it was in flight.
func (s *simulation) arrive(to partition.GroupID, data []byte) error {
	f, err := channel.DecodeFrame(data, len(s.nodes))
	if err != nil {
		return fmt.Errorf("sim: frame for %s: %w", s.names[to], err)
	}
	if f.To != to {
		panic(fmt.Sprintf("sim: frame %s scheduled for group %d", f, to))
	}
	if s.faults && s.cut[f.From][f.To] > 0 {
		s.res.Net.Cut++
		return nil
	}
	s.res.Net.Arrived++
	if f.Seq > 0 && f.Seq < s.seqMax[f.From][f.To] {
		s.res.Net.Reordered++
	}
	s.seqMax[f.From][f.To] = max(s.seqMax[f.From][f.To], f.Seq)
	if err := s.nodes[to].Receive(f); err != nil {
		return fmt.Errorf("sim: frame %s at %s: %w", f, s.names[to], err)
	}
	return s.drain(to)
}

func (s *simulation) tick() error {
	for g, nd := range s.nodes {
		nd.Tick()
		if err := s.drain(partition.GroupID(g)); err != nil {
			return err
		}
	}
	return nil
}

// drain takes a node's output: it logs the core's sends and deliveries and
// puts the channel's frames on the network.
func (s *simulation) drain(g partition.GroupID) error {
	out := s.nodes[g].Ready()
	for _, r := range out.Rejected {
		// Every group is honest and every frame well-formed: a core that
		// rejects an envelope disagrees with the core that sent it.
		return fmt.Errorf("sim: group %s rejected an envelope from %s: %w", s.names[g], s.names[r.From], r.Err)
	}
	for _, snd := range out.Sends {
		if err := s.logSend(g, snd); err != nil {
			return err
		}
	}
	aborted := make(map[multicast.MsgID]bool, len(out.Aborted))
	for _, id := range out.Aborted {
		aborted[id] = true
	}
	changes := out.Changes
	for k, m := range out.Deliveries {
		for ; len(changes) > 0 && changes[0].At == k; changes = changes[1:] {
			if err := s.changed(g, changes[0]); err != nil {
				return err
			}
		}
		if err := s.logDeliver(g, m, aborted[m.ID]); err != nil {
			return err
		}
	}
	for _, c := range changes {
		if err := s.changed(g, c); err != nil {
			return err
		}
	}
	for _, f := range out.Frames {
		if err := s.transmit(g, f); err != nil {
			return err
		}
	}
	return nil
}

func (s *simulation) logSend(g partition.GroupID, snd multicast.Send) error {
	if snd.Kind < multicast.KindMsg || snd.Kind > multicast.KindVote {
		return fmt.Errorf("sim: group %s sent an envelope of unknown kind %d", s.names[g], snd.Kind)
	}
	if !s.w.top.Valid(snd.To) || snd.To == g {
		return fmt.Errorf("sim: group %s sent %s about %s to group %d", s.names[g], snd.Kind, snd.About, snd.To)
	}
	s.res.Sends[snd.Kind]++
	s.res.SendBytes += int64(len(snd.Payload))
	gs := &s.res.Groups[g]
	gs.Sends++
	gs.SendBytes += int64(len(snd.Payload))
	if (snd.Kind == multicast.KindMsg || snd.Kind == multicast.KindRelay) && !snd.About.IsFlush() {
		s.res.Groups[snd.To].Received++
	}
	if i, ok := s.jobOf[snd.About]; ok && s.perJob[i] >= 0 {
		ms := &s.res.PerMulticast[s.perJob[i]]
		ms.Sends++
		switch snd.Kind {
		case multicast.KindAck:
			ms.Acks++
		case multicast.KindNotif:
			ms.Notifs++
		default: // counted in Sends only
		}
	}
	// Sends about flushes are logged too: the checker counts them and
	// checks them against nothing (package check).
	return s.record(check.Record{
		Ev: check.EvSend, From: s.names[g], To: s.names[snd.To],
		Kind: snd.Kind.String(), About: snd.About.String(), Bytes: len(snd.Payload),
	})
}

func (s *simulation) logDeliver(g partition.GroupID, m multicast.Message, aborted bool) error {
	if i, ok := s.jobOf[m.ID]; ok && s.accepted[i] && m.Dst == s.jobs[i].msg.Dst && m.Dst.Has(g) && !s.delivered[i].Has(g) {
		s.delivered[i] = s.delivered[i].Add(g)
		s.res.Deliveries++
		s.res.Groups[g].Deliveries++
		if err := s.judge(g, i, aborted); err != nil {
			return err
		}
	}
	// Anything else is logged as it is, for the checker to report.
	return s.record(check.Record{
		Ev: check.EvDeliver, Group: s.names[g], Replica: "r1", ID: m.ID.String(), Dst: s.dstNames(m.Dst),
	})
}

func (s *simulation) record(r check.Record) error {
	if err := s.checker.Add(r); err != nil {
		return fmt.Errorf("sim: checker: %w", err)
	}
	if s.log != nil {
		if err := s.log.Write(r); err != nil {
			return fmt.Errorf("sim: delivery log: %w", err)
		}
	}
	return nil
}

// dstNames names the groups of dst in rank order; names outside the
// topology (a core's bug) get their number.
func (s *simulation) dstNames(dst partition.GroupSet) []string {
	out := make([]string, 0, dst.Len())
	for _, g := range dst.Slice() {
		if s.w.top.Valid(g) {
			out = append(out, s.names[g])
		} else {
			out = append(out, fmt.Sprintf("group-%d", g))
		}
	}
	return out
}

// transmit puts a frame on the link from g: lost, cut, or delivered once
// or twice after the link's delay plus jitter.
func (s *simulation) transmit(g partition.GroupID, f channel.Frame) error {
	if f.From != g || !s.w.top.Valid(f.To) || f.To == g {
		return fmt.Errorf("sim: group %s made frame %s", s.names[g], f)
	}
	data := channel.AppendFrame(nil, f)
	s.res.Net.Frames++
	s.res.Net.Bytes += int64(len(data))
	s.res.Groups[g].Frames++
	s.res.Groups[g].FrameBytes += int64(len(data))
	copies := 1
	if s.faults {
		if s.cut[f.From][f.To] > 0 {
			s.res.Net.Cut++
			return nil
		}
		if s.rng.Float64() < s.cfg.Drop {
			s.res.Net.Dropped++
			return nil
		}
		if s.rng.Float64() < s.cfg.Dup {
			s.res.Net.Duplicated++
			copies = 2
		}
	}
	for range copies {
		delay := s.w.oneWayUs[f.From][f.To]
		if jitterUs := msToUs(s.cfg.JitterMs); jitterUs > 0 {
			delay += s.rng.Int64N(jitterUs)
		}
		if err := s.schedule(event{atUs: s.nowUs + delay, kind: evFrame, to: f.To, data: data}); err != nil {
			return err
		}
	}
	return nil
}

// epoch may start a partition: a group isolated or a link cut, for a random
// time that ends before the faults do.
func (s *simulation) epoch() error {
	if !s.faults {
		return nil
	}
	if s.cfg.Partition > 0 && s.rng.Float64() < s.cfg.Partition {
		n := len(s.nodes)
		a := partition.GroupID(s.rng.IntN(n))
		b := partition.NoGroup
		if s.rng.IntN(2) == 1 {
			b = partition.GroupID(s.rng.IntN(n - 1))
			if b >= a {
				b++
			}
		}
		durUs := msToUs(partitionMinMs + s.rng.Float64()*(partitionMaxMs-partitionMinMs))
		endUs := min(s.nowUs+durUs, s.faultEndUs)
		s.setCut(a, b, 1)
		s.res.Net.Partitions++
		if err := s.schedule(event{atUs: endUs, kind: evHeal, a: a, b: b}); err != nil {
			return err
		}
	}
	if next := s.nowUs + msToUs(partitionEpochMs); next < s.faultEndUs {
		return s.schedule(event{atUs: next, kind: evPartition})
	}
	return nil
}

func (s *simulation) heal(a, b partition.GroupID) {
	if s.faults { // after the faults end, every cut is gone already
		s.setCut(a, b, -1)
	}
}

// setCut adds delta to the cut count of the link a-b, both ways, or of
// every link of a when b is NoGroup.
func (s *simulation) setCut(a, b partition.GroupID, delta int) {
	for x := range s.cut {
		y := partition.GroupID(x)
		if y == a || (b != partition.NoGroup && y != b) {
			continue
		}
		s.cut[a][y] += delta
		s.cut[y][a] += delta
		if s.cut[a][y] < 0 {
			panic(fmt.Sprintf("sim: link %d-%d healed more often than cut", a, y))
		}
	}
}

// complete reports whether every message was accepted and delivered at
// every destination and every node's channel has nothing unacknowledged.
func (s *simulation) complete() bool {
	if s.nAccepted < len(s.jobs) || s.res.Deliveries < s.copies {
		return false
	}
	if s.res.Changes < s.cfg.Changes || s.ctlDelivered < s.res.Changes*len(s.nodes) {
		return false
	}
	for g, nd := range s.nodes {
		for h := range s.nodes {
			if h != g && nd.OutboxLen(partition.GroupID(h)) > 0 {
				return false
			}
		}
		// Every group told every other that it started the latest
		// generation: no older core is kept, nothing is held.
		if nd.Retiring() > 0 || nd.HeldLen() > 0 {
			return false
		}
	}
	return true
}

// stuck describes what kept a run from completing.
func (s *simulation) stuck() string {
	var parts []string
	for g, nd := range s.nodes {
		if nd.Retiring() > 0 || nd.HeldLen() > 0 {
			gen, _ := nd.Generation()
			parts = append(parts, fmt.Sprintf("%s at generation %d keeps %d older cores and holds %d envelopes", s.names[g], gen, nd.Retiring(), nd.HeldLen()))
		}
	}
	if n := len(s.jobs) - s.nAccepted; n > 0 {
		var ids []string
		for i, ok := range s.accepted {
			if !ok && len(ids) < stuckShown {
				j := s.jobs[i]
				ids = append(ids, fmt.Sprintf("%s at %s", j.msg.ID, s.names[j.entry]))
			}
		}
		parts = append(parts, fmt.Sprintf("%d messages never accepted (%s)", n, strings.Join(ids, ", ")))
	}
	if n := s.copies - s.res.Deliveries; n > 0 {
		var ids []string
		for i, j := range s.jobs {
			if missing := j.msg.Dst &^ s.delivered[i]; s.accepted[i] && missing != 0 && len(ids) < stuckShown {
				ids = append(ids, fmt.Sprintf("%s not at %s", j.msg.ID, strings.Join(s.dstNames(missing), ",")))
			}
		}
		parts = append(parts, fmt.Sprintf("%d deliveries missing (%s)", n, strings.Join(ids, "; ")))
	}
	var boxes []string
	for g, nd := range s.nodes {
		for h := range s.nodes {
			if h == g {
				continue
			}
			if n := nd.OutboxLen(partition.GroupID(h)); n > 0 && len(boxes) < stuckShown {
				boxes = append(boxes, fmt.Sprintf("%s->%s %d", s.names[g], s.names[h], n))
			}
		}
	}
	if len(boxes) > 0 {
		parts = append(parts, "unacknowledged envelopes "+strings.Join(boxes, ", "))
	}
	return fmt.Sprintf("liveness: not done %.3f s after the faults ended (bound %.3f s): %s",
		float64(s.nowUs-s.faultEndUs)/1e6, s.cfg.LivenessMs/1000, strings.Join(parts, "; "))
}
