// Package protocol is the registry of FlexKV's ordering protocols: the one
// place that lists them (DESIGN 1) and says, for each, how to build and
// restore the core of a group, which group a client request enters at
// (DESIGN 2), whether the protocol is genuine, and which figures its core
// reports. The simulator, the group state machine, the server, the client,
// the metrics and the configuration check all ask it, so that adding a
// protocol means adding one entry here.
//
// It is pure, like the cores it names (DESIGN 3.1): it imports only the
// standard library, partition and the multicast packages.
package protocol

import (
	"fmt"
	"strings"

	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/multicast/flexcast"
	"github.com/flexkv/flexkv/multicast/skeen"
	"github.com/flexkv/flexkv/multicast/tree"
	"github.com/flexkv/flexkv/partition"
)

// The protocols FlexKV implements, by the names configurations, flags and
// reports use.
const (
	FlexCast multicast.Protocol = "flexcast"
	Skeen    multicast.Protocol = "skeen"
	Tree     multicast.Protocol = "tree"
)

// Protocol is one entry of the registry. The values All and Lookup return
// are shared and immutable.
type Protocol struct {
	name multicast.Protocol
	// genuine: only the entry group and the destinations of a message
	// exchange envelopes about it (DESIGN 3; the checker's genuineness).
	genuine bool
	// needsTree: the protocol routes along the configuration's tree.
	needsTree bool
	// waitsAtEntry: the entry group delivers a request it takes only after
	// hearing from the other destinations (Skeen's timestamps).
	waitsAtEntry bool
	// rebuilds: the order depends on the overlay (ranks, tree), so that a
	// change of the overlay starts a new core (DESIGN 14); Skeen keeps its
	// core across every change.
	rebuilds bool
	newCore  func(self partition.GroupID, top *partition.Topology) (multicast.Core, error)
	restore  func(self partition.GroupID, top *partition.Topology, b []byte) (multicast.Core, error)
	entry    func(top *partition.Topology, lat *partition.Latency, from Origin, dst partition.GroupSet) partition.GroupID
	// entries: the groups whose core takes a request for dst.
	entries func(top *partition.Topology, dst partition.GroupSet) partition.GroupSet
	stats   []Stat
	read    func(core multicast.Core, out []Reading) []Reading
}

// registry lists every protocol, in the order reports show them.
var registry = []*Protocol{flexCast, skeenProtocol, treeProtocol}

// All returns every protocol, in the order reports show them.
func All() []*Protocol { return append([]*Protocol(nil), registry...) }

// Names returns the names of every protocol, in the order of All.
func Names() []multicast.Protocol {
	out := make([]multicast.Protocol, len(registry))
	for i, p := range registry {
		out[i] = p.name
	}
	return out
}

// Lookup returns the protocol named name. Names are case-sensitive, as a
// configuration spells them.
func Lookup(name multicast.Protocol) (*Protocol, error) {
	for _, p := range registry {
		if p.name == name {
			return p, nil
		}
	}
	return nil, fmt.Errorf("protocol: unknown protocol %q (want %s)", name, namesText(" or "))
}

// namesText lists the names, the last two joined by last: "flexcast,
// skeen or tree".
func namesText(last string) string {
	names := make([]string, len(registry))
	for i, p := range registry {
		names[i] = string(p.name)
	}
	n := len(names)
	if n < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:n-1], ", ") + last + names[n-1]
}

// New returns the core of group self under the protocol named name: Lookup,
// then (*Protocol).New, for a caller that holds only the name (the group
// state machine's configuration).
func New(name multicast.Protocol, self partition.GroupID, top *partition.Topology) (multicast.Core, error) {
	p, err := Lookup(name)
	if err != nil {
		return nil, err
	}
	return p.New(self, top)
}

// Restore rebuilds the core of group self under the protocol named name
// from its AppendSnapshot encoding: Lookup, then (*Protocol).Restore.
func Restore(name multicast.Protocol, self partition.GroupID, top *partition.Topology, b []byte) (multicast.Core, error) {
	p, err := Lookup(name)
	if err != nil {
		return nil, err
	}
	return p.Restore(self, top, b)
}

// Name returns the protocol's name.
func (p *Protocol) Name() multicast.Protocol { return p.name }

// String returns the protocol's name.
func (p *Protocol) String() string { return string(p.name) }

// Genuine reports whether only the entry group and the destinations of a
// message exchange envelopes about it (FlexCast, Skeen; the tree protocol
// relays through inner groups). The checker verifies it when it holds
// (check-log --genuine, the simulator).
func (p *Protocol) Genuine() bool { return p.genuine }

// NeedsTree reports whether the protocol routes along the configuration's
// tree, which must then be given.
func (p *Protocol) NeedsTree() bool { return p.needsTree }

// DeliversAtEntry reports whether an entry group that is a destination
// delivers a request as soon as it takes it (FlexCast's lca, the tree's
// lca), so that the time from proposing to delivering there is one step of
// the group: Skeen's entry group waits for the other destinations'
// timestamps first.
func (p *Protocol) DeliversAtEntry() bool { return !p.waitsAtEntry }

// New returns the core of group self, with the protocol's default bounds.
// A core runs on the groups numbered by rank (partition.Topology.RankSpace):
// for a top whose ranks are not the identity (an epoch's overlay), self is
// a GroupID, and the core returned numbers every group by its rank in top,
// itself included; the node that drives it translates (rawnode.Generation).
// Use CoreTopology to know which.
func (p *Protocol) New(self partition.GroupID, top *partition.Topology) (multicast.Core, error) {
	return p.newCore(top.Ranks().Rank(self), top.RankSpace())
}

// Restore rebuilds the core of group self from its AppendSnapshot encoding,
// numbered as New numbers it.
func (p *Protocol) Restore(self partition.GroupID, top *partition.Topology, b []byte) (multicast.Core, error) {
	return p.restore(top.Ranks().Rank(self), top.RankSpace(), b)
}

// Rebuilds reports whether a change of the overlay (ranks or tree) starts a
// new core of this protocol at the cut (FlexCast, tree), rather than
// keeping the core (Skeen, whose order does not depend on the overlay).
func (p *Protocol) Rebuilds() bool { return p.rebuilds }

// CoreTopology returns the topology a core of an epoch whose topology is
// top runs on, as New takes it: top for a protocol that rebuilds its core
// at a change of the overlay; else the bootstrap numbering with top's
// groups (Skeen's core, kept across every change, keeps the identity).
func (p *Protocol) CoreTopology(top *partition.Topology) *partition.Topology {
	if p.rebuilds || top.Ranks().Identity() {
		return top
	}
	id, err := top.WithOverlay(nil, top.Parents())
	if err != nil {
		panic(fmt.Sprintf("protocol: the tree of a checked topology: %v", err))
	}
	return id
}

// Origin is where a client sends from, as the entry group's choice needs
// it.
type Origin struct {
	// Group is the client's home group, a group of its region (DESIGN 2):
	// under Skeen a request enters there when it is a destination.
	// partition.NoGroup: the client's region has no group.
	Group partition.GroupID
	// Region is the client's row of the latency matrix, for a client with
	// no Group; with a Group, the group's region is used.
	Region string
}

// HomeOrigin returns the origin of a client homed at group g.
func HomeOrigin(g partition.GroupID) Origin { return Origin{Group: g} }

// Entry returns the group a client at from sends a request for dst to
// (DESIGN 2): FlexCast, the lca (the lowest-ranked destination); Skeen, the
// destination nearest to the client by lat (the home group when it is a
// destination; the lowest-ranked destination without a matrix, or for a
// client whose region is not in it); tree, the tree-lca, which need not be
// a destination. It returns partition.NoGroup for an empty dst. A client
// computes it once per request; the server checks the choice with Accepts.
func (p *Protocol) Entry(top *partition.Topology, lat *partition.Latency, from Origin, dst partition.GroupSet) partition.GroupID {
	return p.entry(top, lat, from, dst)
}

// ChangeEntry returns the one group that takes every change of the cluster
// (DESIGN 14: a control message to every group): the entry of a message to
// every group, from no client (FlexCast's lca and Skeen's choice without a
// matrix, the lowest rank; the tree's root). Two changes of one epoch meet
// there, which orders the second after the first or refuses it: under Skeen,
// where any destination could take a message, another group taking a
// change of the same epoch would order two different control messages of
// one id.
func (p *Protocol) ChangeEntry(top *partition.Topology) partition.GroupID {
	return p.entry(top, nil, Origin{Group: partition.NoGroup}, top.All())
}

// Entries returns the groups whose core takes a request for dst: the one
// entry group under FlexCast and the tree protocol, any destination under
// Skeen (the nearest one is the client's choice, which the server cannot
// know). Entry's choice is always one of them.
func (p *Protocol) Entries(top *partition.Topology, dst partition.GroupSet) partition.GroupSet {
	return p.entries(top, dst)
}

var flexCast = &Protocol{
	name:    FlexCast,
	genuine: true,
	newCore: func(self partition.GroupID, top *partition.Topology) (multicast.Core, error) {
		return flexcast.New(flexcast.Config{Self: self, Topology: top})
	},
	restore: func(self partition.GroupID, top *partition.Topology, b []byte) (multicast.Core, error) {
		return flexcast.Restore(flexcast.Config{Self: self, Topology: top}, b)
	},
	rebuilds: true,
	// The lca by the epoch's ranks (top.Ranks).
	entry: func(top *partition.Topology, _ *partition.Latency, _ Origin, dst partition.GroupSet) partition.GroupID {
		r := top.Ranks()
		return r.Group(flexcast.Entry(r.ToRanks(dst)))
	},
	entries: func(top *partition.Topology, dst partition.GroupSet) partition.GroupSet {
		r := top.Ranks()
		return single(r.Group(flexcast.Entry(r.ToRanks(dst))))
	},
	stats: flexcastStats,
	read:  readFlexCast,
}

var skeenProtocol = &Protocol{
	name:         Skeen,
	genuine:      true,
	waitsAtEntry: true,
	newCore: func(self partition.GroupID, top *partition.Topology) (multicast.Core, error) {
		return skeen.New(skeen.Config{Self: self, Topology: top})
	},
	restore: func(self partition.GroupID, top *partition.Topology, b []byte) (multicast.Core, error) {
		return skeen.Restore(skeen.Config{Self: self, Topology: top}, b)
	},
	entry: func(top *partition.Topology, lat *partition.Latency, from Origin, dst partition.GroupSet) partition.GroupID {
		if top.Valid(from.Group) {
			return skeen.Entry(lat, top, from.Group, dst)
		}
		return skeen.EntryFromRegion(lat, top, from.Region, dst)
	},
	// Skeen's core takes a request at any destination (skeen.Core.Step).
	entries: func(_ *partition.Topology, dst partition.GroupSet) partition.GroupSet { return dst },
	stats:   skeenStats,
	read:    readSkeen,
}

var treeProtocol = &Protocol{
	name:      Tree,
	needsTree: true,
	rebuilds:  true,
	newCore: func(self partition.GroupID, top *partition.Topology) (multicast.Core, error) {
		return tree.New(tree.Config{Self: self, Topology: top})
	},
	restore: func(self partition.GroupID, top *partition.Topology, b []byte) (multicast.Core, error) {
		return tree.Restore(tree.Config{Self: self, Topology: top}, b)
	},
	entry: func(top *partition.Topology, _ *partition.Latency, _ Origin, dst partition.GroupSet) partition.GroupID {
		return tree.Entry(top, dst)
	},
	entries: func(top *partition.Topology, dst partition.GroupSet) partition.GroupSet {
		return single(tree.Entry(top, dst))
	},
	stats: treeStats,
	read:  readTree,
}

// single returns the set of g alone, or the empty set for NoGroup.
func single(g partition.GroupID) partition.GroupSet {
	if g == partition.NoGroup {
		return 0
	}
	return partition.SetOf(g)
}
