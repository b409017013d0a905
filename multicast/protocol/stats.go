package protocol

import (
	"fmt"

	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/multicast/flexcast"
	"github.com/flexkv/flexkv/multicast/skeen"
	"github.com/flexkv/flexkv/multicast/tree"
)

// StatKind says how a figure moves: a counter only grows (from zero at
// each start), a gauge is a level now.
type StatKind uint8

// The kinds of figures.
const (
	Counter StatKind = iota + 1
	Gauge
)

// Stat describes one figure a protocol's core reports. The metrics
// exporter publishes it as flexkv_<Name> (DESIGN 11), with the group and
// replica labels and Label, when set.
type Stat struct {
	Name  string // "flexcast_pending": the protocol's name first
	Help  string
	Kind  StatKind
	Label string // the name of the figure's own label; "" for none
}

// Reading is one value of one Stat.
type Reading struct {
	Stat  int    // the index of the Stat in (*Protocol).Stats
	Label string // the value of the Stat's Label; "" when it has none
	Value float64
}

// Stats returns the figures the protocol's cores report, in the order
// Read reads them. The caller must not modify the slice.
func (p *Protocol) Stats() []Stat { return p.stats }

// Read appends to out the current figures of core, which New or Restore of
// this protocol built; it reads, and changes nothing. Like every method of a
// core, it must not run concurrently with Step.
func (p *Protocol) Read(core multicast.Core, out []Reading) []Reading {
	return p.read(core, out)
}

// mismatch panics: a core was read by the entry of another protocol, which
// the caller built it with (an internal invariant, DESIGN 3).
func mismatch(p multicast.Protocol, core multicast.Core) {
	panic(fmt.Sprintf("protocol: invariant: %s stats read from a %T", p, core))
}

// The indexes of flexcastStats.
const (
	fcHistory = iota
	fcHistoryMax
	fcDAG
	fcPending
	fcPendingBytes
	fcOpen
	fcNotifQueue
	fcTruncations
	fcEntriesSent
	fcLateAcks
	fcStaleEntries
	fcGCSent
)

var flexcastStats = []Stat{
	fcHistory:      {"flexcast_history_entries", "FlexCast: entries in the chains of the group's history now.", Gauge, ""},
	fcHistoryMax:   {"flexcast_history_entries_max", "FlexCast: the most history entries held at once.", Gauge, ""},
	fcDAG:          {"flexcast_dag_nodes", "FlexCast: nodes of the dependency graph.", Gauge, ""},
	fcPending:      {"flexcast_pending", "FlexCast: messages received or acked, not delivered.", Gauge, ""},
	fcPendingBytes: {"flexcast_pending_bytes", "FlexCast: payload bytes of the messages received and not delivered, and bytes of the envelopes held back.", Gauge, ""},
	fcOpen:         {"flexcast_open", "FlexCast: messages known to be addressed to the group, not delivered.", Gauge, ""},
	fcNotifQueue:   {"flexcast_notif_queue", "FlexCast: notifications waiting for open dependencies.", Gauge, ""},
	fcTruncations:  {"flexcast_truncations_total", "FlexCast: times the stable cut moved and the history was cut.", Counter, ""},
	fcEntriesSent:  {"flexcast_history_entries_sent_total", "FlexCast: history entries shipped in envelopes.", Counter, ""},
	fcLateAcks:     {"flexcast_late_acks_total", "FlexCast: acks about messages already delivered.", Counter, ""},
	fcStaleEntries: {"flexcast_stale_entries_total", "FlexCast: history entries that arrived after the group dropped them as stable (dropped).", Counter, ""},
	fcGCSent:       {"flexcast_gc_sent_total", "FlexCast: garbage-collection envelopes sent (histories shipped up the ranks, stable cuts).", Counter, ""},
}

func readFlexCast(core multicast.Core, out []Reading) []Reading {
	c, ok := core.(*flexcast.Core)
	if !ok {
		mismatch(FlexCast, core)
	}
	s := c.Stats()
	return append(out,
		Reading{Stat: fcHistory, Value: float64(s.HistoryLen)},
		Reading{Stat: fcHistoryMax, Value: float64(s.HistoryLenMax)},
		Reading{Stat: fcDAG, Value: float64(s.DAGNodes)},
		Reading{Stat: fcPending, Value: float64(s.Pending)},
		Reading{Stat: fcPendingBytes, Value: float64(s.PendingBytes)},
		Reading{Stat: fcOpen, Value: float64(s.Open)},
		Reading{Stat: fcNotifQueue, Value: float64(s.NotifQueue)},
		Reading{Stat: fcTruncations, Value: float64(s.Truncations)},
		Reading{Stat: fcEntriesSent, Value: float64(s.EntriesSent)},
		Reading{Stat: fcLateAcks, Value: float64(s.LateAcks)},
		Reading{Stat: fcStaleEntries, Value: float64(s.StaleEntries)},
		Reading{Stat: fcGCSent, Value: float64(s.GCSent)},
	)
}

// The indexes of skeenStats.
const (
	skPending = iota
	skPendingMax
	skPendingBytes
	skClock
)

var skeenStats = []Stat{
	skPending:      {"skeen_pending", "Skeen: messages held, by state (undecided, decided, buffered).", Gauge, "state"},
	skPendingMax:   {"skeen_pending_max", "Skeen: the most messages held at once.", Gauge, ""},
	skPendingBytes: {"skeen_pending_bytes", "Skeen: payload bytes of the messages held.", Gauge, ""},
	skClock:        {"skeen_clock", "Skeen: the logical clock.", Gauge, ""},
}

func readSkeen(core multicast.Core, out []Reading) []Reading {
	c, ok := core.(*skeen.Core)
	if !ok {
		mismatch(Skeen, core)
	}
	s := c.Stats()
	return append(out,
		Reading{Stat: skPending, Label: "undecided", Value: float64(s.Undecided)},
		Reading{Stat: skPending, Label: "decided", Value: float64(s.Decided)},
		Reading{Stat: skPending, Label: "buffered", Value: float64(s.Buffered)},
		Reading{Stat: skPendingMax, Value: float64(s.PendingPeak)},
		Reading{Stat: skPendingBytes, Value: float64(s.PendingBytes)},
		Reading{Stat: skClock, Value: float64(s.Clock)},
	)
}

// The indexes of treeStats.
const (
	trReceived = iota
	trForwarded
)

var treeStats = []Stat{
	trReceived:  {"tree_received_total", "Tree: messages received, from clients (at the tree-lca) or from the parent.", Counter, "from"},
	trForwarded: {"tree_forwarded_total", "Tree: messages forwarded to children.", Counter, ""},
}

func readTree(core multicast.Core, out []Reading) []Reading {
	c, ok := core.(*tree.Core)
	if !ok {
		mismatch(Tree, core)
	}
	s := c.Stats()
	return append(out,
		Reading{Stat: trReceived, Label: "client", Value: float64(s.Requests)},
		Reading{Stat: trReceived, Label: "parent", Value: float64(s.Envelopes)},
		Reading{Stat: trForwarded, Value: float64(s.Forwarded)},
	)
}
