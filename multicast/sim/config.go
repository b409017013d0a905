package sim

import (
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/multicast/protocol"
	"github.com/flexkv/flexkv/partition"
)

// LatencyMode says where the one-way delays of the simulated network come
// from.
type LatencyMode string

// The latency modes.
const (
	// LatencyAuto is LatencyHalf with 12 groups, LatencyRandom otherwise.
	LatencyAuto LatencyMode = ""
	// LatencyHalf: the aws-12 matrix, one-way delay = value / 2 (a real round
	// trip, DESIGN 8). Needs 12 groups.
	LatencyHalf LatencyMode = "half"
	// LatencyPaper: the aws-12 matrix, one-way delay = value, as the
	// FlexCast paper's emulation applied it. Needs 12 groups.
	LatencyPaper LatencyMode = "paper"
	// LatencyRandom: a seeded random symmetric matrix of one-way delays in
	// [1, 100] ms, groups named g0, g1, ...
	LatencyRandom LatencyMode = "random"
)

// ParseLatencyMode checks that s names a latency mode ("" is LatencyAuto).
func ParseLatencyMode(s string) (LatencyMode, error) {
	switch m := LatencyMode(s); m {
	case LatencyAuto, LatencyHalf, LatencyPaper, LatencyRandom:
		return m, nil
	}
	return "", fmt.Errorf("sim: unknown latency mode %q (want half, paper or random)", s)
}

// Bounds on the configuration. Each keeps one run's memory and time bounded.
const (
	GroupsMin      = 3
	GroupsMax      = 12
	MessagesMax    = 100_000
	DstMaxLimit    = 4
	DropMax        = 0.5 // a higher loss rate only slows the run down
	DupMax         = 0.5
	JitterMsMax    = 1000.0
	GapMsMax       = 10_000.0
	LivenessMsMax  = 3_600_000.0
	EventsMaxLimit = 1 << 31
	ChangesMax     = 100
)

// Defaults of zero Config fields.
const (
	DstMaxDefault     = 3
	GapMsDefault      = 5.0
	LivenessMsDefault = 120_000.0
	EventsMaxDefault  = 50_000_000
	// QueueMaxDefault bounds the events scheduled and not yet processed
	// (frames in flight, submissions, timers).
	QueueMaxDefault = 1_000_000
)

// Timing of the simulated world, in simulated milliseconds.
const (
	tickMs           = 10.0   // every node gets a tick this often
	faultTailMs      = 1000.0 // faults stay on this long after the last submission
	partitionEpochMs = 250.0  // a partition may start at each epoch
	partitionMinMs   = 50.0
	partitionMaxMs   = 1000.0
	retryMs          = 20.0 // a client refused with ErrBusy retries after this
	payloadMax       = 16   // bytes of random payload per message
)

// Config describes one simulated run. The zero value of a field means its
// default where one is given; Protocol, Groups and Messages must be set.
type Config struct {
	Protocol multicast.Protocol
	// Groups: 3..12. With 12 groups and LatencyAuto, LatencyHalf or
	// LatencyPaper the groups are the aws-12 regions ranked by Overlay with
	// the tree Tree; otherwise they are g0..g(n-1) with a random tree.
	Groups      int
	Overlay     string // "O1" (default) or "O2"; only with the aws-12 matrix
	Tree        string // "T1" (default), "T2" or "T3"; only with the aws-12 matrix
	LatencyMode LatencyMode

	// Messages multicast in the run, 1..MessagesMax.
	Messages int
	Seed     int64
	// DstMax: destination sets have 1..DstMax groups, uniformly (default 3,
	// at most DstMaxLimit, capped at Groups). The client's home group is one.
	DstMax int
	// Locality: each further destination is the nearest remaining group to
	// the home group with this probability, else a random remaining one.
	Locality float64
	// GapMs: mean simulated time between two submissions (default 5 ms).
	GapMs float64

	// Faults, active while messages are submitted and for a second after.
	Drop      float64 // probability that a frame is lost
	Dup       float64 // probability that a frame is delivered twice
	Partition float64 // probability, per 250 ms epoch, that a group is isolated or a link cut
	JitterMs  float64 // extra one-way delay, uniform in [0, JitterMs): reorders frames; always on

	// Channel bounds passed to every node; zero: the channel's defaults.
	OutboxMax   int
	HoldbackMax int

	// GCTicks (FlexCast only): a garbage-collection round every this many
	// ticks of 10 ms (0: flexcast.GCTicksFor the number of groups). A round every tick or
	// two keeps cuts and shipped histories in flight most of the time, the
	// case of the rules about them.
	GCTicks int

	// Changes: control messages that end an epoch (DESIGN 14), keeping the
	// overlay, submitted at uniform random times over the submissions by
	// an operator at the protocol's change entry (0..ChangesMax).
	Changes int

	// LivenessMs: simulated time after the faults end within which every
	// message must be delivered everywhere (default 120 s).
	LivenessMs float64
	// EventsMax bounds the events one run processes (default 50 million).
	EventsMax int

	// DeliveryLog receives the run's delivery log (DESIGN 10.1); nil: none.
	DeliveryLog io.Writer

	// wrapCore, when set, wraps every core: tests use it to break a
	// protocol on purpose and show that the run fails.
	wrapCore func(self partition.GroupID, c multicast.Core) multicast.Core
	// keepOverlay, when set, makes every change keep the overlay, so that
	// the cores live through every change: a test that breaks a core's
	// deliveries at a change reaches the simulator's epoch checks, not
	// the node's assertion that a retiring core delivers nothing.
	keepOverlay bool
	// queueMax overrides QueueMaxDefault (tests of the bound).
	queueMax int
}

// Validate returns the error Run would return for an invalid c, without
// running anything.
func (c Config) Validate() error {
	_, err := c.normalized()
	return err
}

// normalized returns c with defaults filled in, or an error naming the first
// invalid field.
func (c Config) normalized() (Config, error) {
	bad := func(format string, args ...any) (Config, error) {
		return Config{}, fmt.Errorf("sim: "+format, args...)
	}
	if _, err := protocol.Lookup(c.Protocol); err != nil {
		return bad("protocol: %w", err)
	}
	if c.Groups < GroupsMin || c.Groups > GroupsMax {
		return bad("groups %d out of range [%d, %d]", c.Groups, GroupsMin, GroupsMax)
	}
	mode, err := ParseLatencyMode(string(c.LatencyMode))
	if err != nil {
		return Config{}, err
	}
	if mode == LatencyAuto {
		mode = LatencyRandom
		if c.Groups == 12 {
			mode = LatencyHalf
		}
	}
	c.LatencyMode = mode
	if mode == LatencyRandom {
		if c.Overlay != "" || c.Tree != "" {
			return bad("overlay %q and tree %q need the aws-12 matrix (12 groups, latency mode half or paper)", c.Overlay, c.Tree)
		}
	} else {
		if c.Groups != 12 {
			return bad("latency mode %s uses the aws-12 matrix and needs 12 groups, not %d", mode, c.Groups)
		}
		if c.Overlay == "" {
			c.Overlay = "O1"
		}
		if c.Tree == "" {
			c.Tree = "T1"
		}
		if _, err := partition.PaperOverlay(c.Overlay); err != nil {
			return bad("%w", err)
		}
		if _, err := partition.PaperTree(c.Tree); err != nil {
			return bad("%w", err)
		}
	}
	if c.Messages < 1 || c.Messages > MessagesMax {
		return bad("messages %d out of range [1, %d]", c.Messages, MessagesMax)
	}
	if c.DstMax == 0 {
		c.DstMax = DstMaxDefault
	}
	if c.DstMax < 1 || c.DstMax > DstMaxLimit {
		return bad("dst-max %d out of range [1, %d]", c.DstMax, DstMaxLimit)
	}
	if c.GapMs == 0 {
		c.GapMs = GapMsDefault
	}
	if c.LivenessMs == 0 {
		c.LivenessMs = LivenessMsDefault
	}
	if c.EventsMax == 0 {
		c.EventsMax = EventsMaxDefault
	}
	if c.queueMax == 0 {
		c.queueMax = QueueMaxDefault
	}
	for _, f := range []struct {
		name     string
		v, lo, h float64
	}{
		{"locality", c.Locality, 0, 1},
		{"drop", c.Drop, 0, DropMax},
		{"dup", c.Dup, 0, DupMax},
		{"partition", c.Partition, 0, 1},
		{"jitter-ms", c.JitterMs, 0, JitterMsMax},
		{"gap-ms", c.GapMs, 0.001, GapMsMax},
		{"liveness-ms", c.LivenessMs, 1, LivenessMsMax},
	} {
		if math.IsNaN(f.v) || f.v < f.lo || f.v > f.h {
			return bad("%s %v out of range [%v, %v]", f.name, f.v, f.lo, f.h)
		}
	}
	if c.GCTicks < 0 || (c.GCTicks > 0 && c.Protocol != protocol.FlexCast) {
		return bad("gc-ticks %d: want 0, or a positive count with protocol flexcast", c.GCTicks)
	}
	if c.Changes < 0 || c.Changes > ChangesMax {
		return bad("changes %d out of range [0, %d]", c.Changes, ChangesMax)
	}
	if c.OutboxMax < 0 || c.HoldbackMax < 0 {
		return bad("outbox-max %d and holdback-max %d may not be negative", c.OutboxMax, c.HoldbackMax)
	}
	if c.EventsMax < 1 || c.EventsMax > EventsMaxLimit {
		return bad("events-max %d out of range [1, %d]", c.EventsMax, EventsMaxLimit)
	}
	return c, nil
}

// Command returns the flexkv command line that replays the run c describes.
// Every field that changes the run is on it; the delivery log is not.
func (c Config) Command() string {
	var b strings.Builder
	b.WriteString("go run ./cmd/flexkv sim")
	add := func(flag, v string) { b.WriteString(" --" + flag + " " + v) }
	num := func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
	add("protocol", string(c.Protocol))
	add("groups", strconv.Itoa(c.Groups))
	add("messages", strconv.Itoa(c.Messages))
	add("seed", strconv.FormatInt(c.Seed, 10))
	if c.DstMax != 0 {
		add("dst-max", strconv.Itoa(c.DstMax))
	}
	if c.LatencyMode != LatencyAuto {
		add("latency-mode", string(c.LatencyMode))
	}
	if c.Overlay != "" {
		add("overlay", c.Overlay)
	}
	if c.Tree != "" {
		add("tree", c.Tree)
	}
	for _, f := range []struct {
		name string
		v    float64
	}{
		{"locality", c.Locality}, {"gap-ms", c.GapMs}, {"drop", c.Drop}, {"dup", c.Dup},
		{"partition", c.Partition}, {"jitter-ms", c.JitterMs}, {"liveness-ms", c.LivenessMs},
	} {
		if f.v != 0 {
			add(f.name, num(f.v))
		}
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"outbox-max", c.OutboxMax}, {"holdback-max", c.HoldbackMax}, {"events-max", c.EventsMax}, {"gc-ticks", c.GCTicks}, {"changes", c.Changes}} {
		if f.v != 0 {
			add(f.name, strconv.Itoa(f.v))
		}
	}
	return b.String()
}

// ErrFailed is wrapped by the error Run returns when a run violates a
// property (as opposed to an invalid configuration).
var ErrFailed = errors.New("sim: run failed")
