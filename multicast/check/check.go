// Package check reads and writes FlexKV's delivery log (DESIGN 10.1) and
// checks it against the properties of atomic multicast (DESIGN 3.1).
//
// The log is JSON Lines: a "multicast" line when a client multicasts a
// message, a "deliver" line each time a replica of a group delivers one (the
// order of one replica's deliver lines is its delivery order), and a "send"
// line for each envelope between groups. Writer writes it; ReadLog and
// ScanLog read it from a file or a directory of *.jsonl files.
//
// A Checker takes the records one by one (Add costs amortized constant time,
// so a simulator feeds it as events happen) and Report checks them all in
// time and memory linear in the log:
//
//   - integrity: a replica delivers a message at most once, only at a
//     destination group, only if it was multicast, with the multicast's dst;
//   - replica-agreement: the replicas of a group deliver the same sequence
//     (each a prefix of the longest);
//   - prefix-order: for any two groups, the sequences of the messages
//     addressed to both, as each delivered them, are one a prefix of the
//     other; this is the usual definition (if p delivers m and q delivers m',
//     both addressed to p and q, then p delivers m' before m or q delivers m
//     before m') and implies that two groups that deliver m and m' deliver
//     them in the same order;
//   - acyclic-order: the union of all groups' delivery orders has no cycle,
//     found with an iterative Tarjan over the graph of consecutive
//     deliveries; every strongly connected component is one violation,
//     reported with one explicit cycle;
//   - with Options.Complete, validity and agreement: every multicast message
//     is delivered by every replica of every destination group;
//   - with Options.Genuine, genuineness: only the destinations of m, and the
//     groups notified about m, exchange sends about m.
//
// Deliveries are grouped by (group, replica) name; the order of a group is
// the sequence of its longest replica, restricted to the first delivery of
// each message that was multicast to the group, so that an integrity
// violation is reported once and does not reappear as an ordering one.
package check

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/flexkv/flexkv/multicast"
)

// The properties a Violation names.
const (
	Malformed        = "malformed" // only from Check: a record Add rejected
	Integrity        = "integrity"
	ReplicaAgreement = "replica-agreement"
	PrefixOrder      = "prefix-order"
	AcyclicOrder     = "acyclic-order"
	Validity         = "validity"
	Agreement        = "agreement"
	Genuineness      = "genuineness"
)

// Properties lists the properties in the order a Report lists violations.
var Properties = []string{Malformed, Integrity, ReplicaAgreement, PrefixOrder, AcyclicOrder, Validity, Agreement, Genuineness}

// Defaults of Options.
const (
	RecordsMaxDefault = 1 << 24
	DetailsMaxDefault = 5
)

// ErrLimit is returned by Add when Options.RecordsMax records were added.
var ErrLimit = errors.New("check: record limit reached")

// Options selects the properties to check beyond the safety ones and bounds
// the checker.
type Options struct {
	// Complete: the run ended quiescent, so validity and agreement apply:
	// every multicast message is delivered by every replica of every
	// destination group (the replicas of a group are the replica names seen
	// in its deliver lines; a destination without any deliver line counts as
	// one replica that delivered nothing). Sends about ids that were never
	// multicast become integrity violations.
	Complete bool
	// Genuine: the protocol is genuine (FlexCast, Skeen): both ends of every
	// send about m are destinations of m or groups notified about m, where a
	// "notif" send about m notifies its receiver, may come from a destination
	// or a notified group only, and may go only to a group that some message
	// multicast earlier in the log (earlier record) was addressed to.
	Genuine bool
	// RecordsMax bounds the records a Checker accepts, and so its memory
	// (which is linear in them); 0 or less means RecordsMaxDefault, and more
	// than math.MaxInt32 means math.MaxInt32.
	RecordsMax int
	// DetailsMax bounds the violations of each property that a Report
	// describes; all of them are counted. 0 or less means DetailsMaxDefault.
	DetailsMax int
}

func (o Options) normalized() Options {
	if o.RecordsMax <= 0 {
		o.RecordsMax = RecordsMaxDefault
	}
	o.RecordsMax = min(o.RecordsMax, math.MaxInt32)
	if o.DetailsMax <= 0 {
		o.DetailsMax = DetailsMaxDefault
	}
	return o
}

// Violation is one broken property.
type Violation struct {
	Property string
	Detail   string
	// IDs holds the message ids involved; for acyclic-order, the ids along
	// the cycle, each once, in order.
	IDs []string
}

func (v Violation) String() string { return v.Property + ": " + v.Detail }

// Report is the outcome of a check.
type Report struct {
	Messages   int // distinct ids multicast
	Deliveries int // deliver records
	Sends      int // send records, flush traffic included
	Groups     int // distinct group names, in any field
	Replicas   int // distinct (group, replica) pairs in deliver records
	// SendsByKind counts the send records of each kind present.
	SendsByKind map[string]int
	// BytesTotal sums the bytes of the send records.
	BytesTotal int64
	// Violations describes the first Options.DetailsMax violations of each
	// property, in the order of Properties.
	Violations []Violation
	// ViolationCounts counts every violation, by property.
	ViolationCounts map[string]int
}

// ViolationsTotal returns the number of violations, described or not.
func (r Report) ViolationsTotal() int {
	n := 0
	//flexkv:unordered a sum
	for _, c := range r.ViolationCounts {
		n += c
	}
	return max(n, len(r.Violations)) // a hand-made Report may list without counting
}

// OK reports whether no property is violated.
func (r Report) OK() bool { return r.ViolationsTotal() == 0 }

// Summary returns one line: "ok: ..." with the statistics, or "FAIL: ..."
// with the number of violations and the first one.
func (r Report) Summary() string {
	if r.OK() {
		return fmt.Sprintf("ok: %d messages, %d groups, %d replicas, %d deliveries, %d sends",
			r.Messages, r.Groups, r.Replicas, r.Deliveries, r.Sends)
	}
	total := r.ViolationsTotal()
	var b strings.Builder
	fmt.Fprintf(&b, "FAIL: %d violation", total)
	if total != 1 {
		b.WriteString("s")
	}
	var parts []string
	for _, p := range Properties {
		if n := r.ViolationCounts[p]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", p, n))
		}
	}
	if len(parts) > 1 {
		fmt.Fprintf(&b, " (%s)", strings.Join(parts, ", "))
	}
	if len(r.Violations) > 0 {
		v := r.Violations[0]
		fmt.Fprintf(&b, ": %s: %s", v.Property, oneLine(v.Detail))
		if n := r.ViolationCounts[v.Property]; n > 1 {
			fmt.Fprintf(&b, " (first of %d)", n)
		}
	}
	return b.String()
}

// oneLine replaces line breaks, which ids and names may hold, with spaces.
func oneLine(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '\n' || r == '\r' {
			return ' '
		}
		return r
	}, s)
}

// Check checks recs at once. A record that Add rejects is counted as a
// "malformed" violation (ReadLog never returns one).
func Check(recs []Record, opt Options) Report {
	c := New(opt)
	var bad []Violation
	badCount := 0
	for i, r := range recs {
		if err := c.Add(r); err != nil {
			badCount++
			if len(bad) < c.opt.DetailsMax {
				bad = append(bad, Violation{Property: Malformed, Detail: fmt.Sprintf("record %d: %v", i+1, err)})
			}
		}
	}
	rep := c.Report()
	if badCount > 0 {
		rep.Violations = append(bad, rep.Violations...)
		rep.ViolationCounts[Malformed] = badCount
	}
	return rep
}

// Checker accumulates log records; Report checks them. Ids, groups, replicas
// and destination sets are interned as int32 indices in order of first
// appearance, which makes every report deterministic for a given record
// order. A Checker is not safe for concurrent use.
type Checker struct {
	opt     Options
	records int

	groups    names
	addressed []bool // per group: some multicast so far had it in dst

	dsts     [][]int32 // interned destination sets, sorted group indices
	dstIndex map[string]int32
	scratch  []int32
	key      []byte

	msgs     []message
	msgIndex map[string]int32

	replicas     []replica
	replicaIndex map[replicaKey]int32

	conflicts []conflict // a second multicast of an id with another dst
	sends     []send     // kept when Genuine or Complete; flush excluded

	deliveries  int
	sendsTotal  int
	sendsByKind [multicast.KindVote + 1]int
	bytesTotal  int64
}

type names struct {
	list  []string
	index map[string]int32
}

func (n *names) intern(s string) int32 {
	if i, ok := n.index[s]; ok {
		return i
	}
	i := int32(len(n.list))
	n.list = append(n.list, s)
	n.index[s] = i
	return i
}

type message struct {
	name string
	dst  int32 // interned dst of its multicast; -1 when never multicast
}

type replicaKey struct {
	group int32
	name  string
}

type replica struct {
	group int32
	name  string
	seq   []delivery
}

type delivery struct {
	msg int32
	dst int32 // the dst the deliver line named
}

type conflict struct {
	msg, dst int32
}

type send struct {
	msg, from, to int32
	kind          multicast.Kind
	notifOK       bool // notif: its receiver was a destination of an earlier multicast
}

// New returns an empty Checker.
func New(opt Options) *Checker {
	return &Checker{
		opt:          opt.normalized(),
		groups:       names{index: map[string]int32{}},
		dstIndex:     map[string]int32{},
		msgIndex:     map[string]int32{},
		replicaIndex: map[replicaKey]int32{},
	}
}

// Add takes the next record. A malformed record is an error wrapping
// ErrMalformed, and a record beyond Options.RecordsMax one wrapping ErrLimit;
// either leaves the Checker as it was.
func (c *Checker) Add(r Record) error {
	kind, err := r.validate()
	if err != nil {
		return fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	if c.records >= c.opt.RecordsMax {
		return fmt.Errorf("%w: %d records", ErrLimit, c.opt.RecordsMax)
	}
	c.records++
	switch r.Ev {
	case EvMulticast:
		dst := c.internDst(r.Dst)
		m := c.internMsg(r.ID)
		switch prev := c.msgs[m].dst; {
		case prev < 0:
			c.msgs[m].dst = dst
			for _, g := range c.dsts[dst] {
				c.addressed[g] = true
			}
		case prev != dst:
			c.conflicts = append(c.conflicts, conflict{msg: m, dst: dst})
		}
		// The same id with the same dst again is a client's re-submission,
		// which the store answers with the first result (DESIGN 6).
	case EvDeliver:
		g := c.internGroup(r.Group)
		dst := c.internDst(r.Dst)
		m := c.internMsg(r.ID)
		key := replicaKey{group: g, name: r.Replica}
		rp, ok := c.replicaIndex[key]
		if !ok {
			rp = int32(len(c.replicas))
			c.replicas = append(c.replicas, replica{group: g, name: r.Replica})
			c.replicaIndex[key] = rp
		}
		c.replicas[rp].seq = append(c.replicas[rp].seq, delivery{msg: m, dst: dst})
		c.deliveries++
	case EvSend:
		from, to := c.internGroup(r.From), c.internGroup(r.To)
		c.sendsTotal++
		c.sendsByKind[kind]++
		c.bytesTotal += int64(r.Bytes)
		if IsFlush(r.About) || !(c.opt.Genuine || c.opt.Complete) {
			return nil
		}
		c.sends = append(c.sends, send{
			msg: c.internMsg(r.About), from: from, to: to, kind: kind,
			notifOK: kind == multicast.KindNotif && c.addressed[to],
		})
	}
	return nil
}

func (c *Checker) internGroup(name string) int32 {
	g := c.groups.intern(name)
	if int(g) == len(c.addressed) {
		c.addressed = append(c.addressed, false)
	}
	return g
}

func (c *Checker) internMsg(id string) int32 {
	if i, ok := c.msgIndex[id]; ok {
		return i
	}
	i := int32(len(c.msgs))
	c.msgs = append(c.msgs, message{name: id, dst: -1})
	c.msgIndex[id] = i
	return i
}

// internDst returns the index of the set of names, in any order.
func (c *Checker) internDst(names []string) int32 {
	c.scratch = c.scratch[:0]
	for _, n := range names {
		c.scratch = append(c.scratch, c.internGroup(n))
	}
	slices.Sort(c.scratch)
	c.key = c.key[:0]
	for _, g := range c.scratch {
		c.key = binary.LittleEndian.AppendUint32(c.key, uint32(g))
	}
	if i, ok := c.dstIndex[string(c.key)]; ok {
		return i
	}
	i := int32(len(c.dsts))
	c.dsts = append(c.dsts, slices.Clone(c.scratch))
	c.dstIndex[string(c.key)] = i
	return i
}
