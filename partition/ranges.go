package partition

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
)

// KeyMax is the length of the longest key, in bytes. Keys travel in every
// transaction and are stored in every replica's Pebble store; a bound keeps
// a single request from carrying an unbounded key (DESIGN 6).
const KeyMax = 4096

// PartitionsMax is the largest number of partitions of a cluster. A TPC-C
// run has one partition per warehouse plus the item table: thousands at most.
const PartitionsMax = 1 << 16

var (
	// ErrInvalidKey is wrapped by the errors about keys that are empty or
	// longer than KeyMax.
	ErrInvalidKey = errors.New("invalid key")
	// ErrNoPartition is wrapped by the error about a key that lies in no
	// partition's range, which is an error, not a default (DESIGN 6).
	ErrNoPartition = errors.New("no partition holds the key")
)

// CheckKey returns an error wrapping ErrInvalidKey unless key is a valid key:
// not empty and at most KeyMax bytes long.
func CheckKey(key []byte) error {
	if problem := keyProblem(key); problem != "" {
		return fmt.Errorf("partition: %w %s: %s", ErrInvalidKey, quoteKey(key), problem)
	}
	return nil
}

// keyProblem says what is wrong with key, or "".
func keyProblem(key []byte) string {
	switch {
	case len(key) == 0:
		return "empty"
	case len(key) > KeyMax:
		return fmt.Sprintf("%d bytes, more than KeyMax (%d)", len(key), KeyMax)
	}
	return ""
}

// keyQuoteMax is how many bytes of a key an error message shows.
const keyQuoteMax = 64

// quoteKey formats a key for an error message: Go-quoted, so that any byte
// shows, and cut after keyQuoteMax bytes, so that a long key does not drown
// the message.
func quoteKey(key []byte) string {
	if len(key) <= keyQuoteMax {
		return strconv.Quote(string(key))
	}
	return strconv.Quote(string(key[:keyQuoteMax])) + "..."
}

// Partition is a range of keys [Start, End) and its owner.
//
// A replicated partition (the TPC-C item table) is owned by every group:
// each group holds a full copy. Its Group must be NoGroup; NewPartitionMap
// rejects any other value rather than ignoring it, so that a reader of
// Group never takes a replicated range for one group's, and GroupID 0 (a
// real group, and Go's zero value) cannot slip in by omission.
//
// The Partitions a PartitionMap returns from Lookup and ByName share its key
// bytes: they must not be modified.
type Partition struct {
	Name  string // unique in the map when not empty; "w0001"
	Start []byte // first key of the range (inclusive); a valid key
	// End is the end of the range (exclusive). Empty (nil) means no upper
	// bound: no key sorts below the empty string, so an empty End has no
	// other sensible meaning.
	End        []byte
	Group      GroupID // the owner; NoGroup when Replicated
	Replicated bool    // owned by every group
}

// Contains reports whether key lies in p's range.
func (p Partition) Contains(key []byte) bool {
	return bytes.Compare(p.Start, key) <= 0 && (len(p.End) == 0 || bytes.Compare(key, p.End) < 0)
}

// String formats p as `w0001 ["w/0001/", "w/0002/") group 0` or
// `item ["item/", "item0") replicated`; an unbounded end shows as +inf.
func (p Partition) String() string {
	end := "+inf"
	if len(p.End) > 0 {
		end = quoteKey(p.End)
	}
	owner := "replicated"
	if !p.Replicated {
		owner = fmt.Sprintf("group %d", p.Group)
	}
	return fmt.Sprintf("%s [%s, %s) %s", p.Name, quoteKey(p.Start), end, owner)
}

// PartitionMap maps keys to partitions and partitions to groups. It is
// immutable and safe for concurrent use.
type PartitionMap struct { //nolint:revive // partition.Map would not say what it maps
	parts  []Partition // sorted by Start, ranges disjoint
	byName map[string]int
}

// NewPartitionMap validates parts against top and builds a PartitionMap.
// The ranges may be given in any order (a configuration may list the item
// table after the warehouses although "item/" sorts first); the map keeps
// them in key order. It rejects: no partitions or more than PartitionsMax;
// an invalid Start or End key (CheckKey); an empty range (End not after
// Start); two ranges that overlap, replicated ones included; a name given
// twice; a replicated partition whose Group is not NoGroup; a partition that
// is not replicated whose Group is not a group of top. Errors name the
// partition by its index in parts and its name. The map copies the key bytes
// of parts.
func NewPartitionMap(top *Topology, parts []Partition) (*PartitionMap, error) {
	if top == nil {
		return nil, errors.New("partition: partition map without a topology")
	}
	if len(parts) == 0 {
		return nil, errors.New("partition: no partitions")
	}
	if len(parts) > PartitionsMax {
		return nil, fmt.Errorf("partition: %d partitions, more than PartitionsMax (%d)", len(parts), PartitionsMax)
	}
	m := &PartitionMap{parts: make([]Partition, len(parts)), byName: make(map[string]int, len(parts))}
	for i, p := range parts {
		if p.Name != "" {
			if j, dup := m.byName[p.Name]; dup {
				return nil, fmt.Errorf("partition: %s: name listed twice (also %s)", label(i, p), label(j, parts[j]))
			}
			m.byName[p.Name] = i
		}
		if problem := keyProblem(p.Start); problem != "" {
			return nil, fmt.Errorf("partition: %s: start: %w %s: %s", label(i, p), ErrInvalidKey, quoteKey(p.Start), problem)
		}
		if len(p.End) > 0 {
			if problem := keyProblem(p.End); problem != "" {
				return nil, fmt.Errorf("partition: %s: end: %w %s: %s", label(i, p), ErrInvalidKey, quoteKey(p.End), problem)
			}
			if bytes.Compare(p.Start, p.End) >= 0 {
				return nil, fmt.Errorf("partition: %s: empty range: end %s is not after start %s",
					label(i, p), quoteKey(p.End), quoteKey(p.Start))
			}
		}
		switch {
		case p.Replicated && p.Group != NoGroup:
			return nil, fmt.Errorf("partition: %s: replicated, so owned by every group: its group must be NoGroup, not %d",
				label(i, p), p.Group)
		case !p.Replicated && !top.Valid(p.Group):
			return nil, fmt.Errorf("partition: %s: group %d is not a group of the topology (0..%d)",
				label(i, p), p.Group, top.Len()-1)
		}
		p.Start = slices.Clone(p.Start)
		p.End = nil
		if len(parts[i].End) > 0 {
			p.End = slices.Clone(parts[i].End)
		}
		m.parts[i] = p
	}
	// order[i] is the position in parts of the i-th range in key order; it
	// names the ranges in error messages.
	order := make([]int, len(parts))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return bytes.Compare(m.parts[a].Start, m.parts[b].Start) })
	sorted := make([]Partition, len(parts))
	for i, o := range order {
		sorted[i] = m.parts[o]
	}
	m.parts = sorted
	// Sorted by Start, the ranges are disjoint if and only if each one ends
	// at or before the start of the next.
	for i := 1; i < len(m.parts); i++ {
		prev, cur := m.parts[i-1], m.parts[i]
		if prev.End == nil || bytes.Compare(prev.End, cur.Start) > 0 {
			return nil, fmt.Errorf("partition: %s overlaps %s: it starts at %s, before the end of %s",
				label(order[i], cur), label(order[i-1], prev), quoteKey(cur.Start), prev)
		}
	}
	for i, p := range m.parts {
		if p.Name != "" {
			m.byName[p.Name] = i
		}
	}
	return m, nil
}

// label names parts[i] in an error message: partitions[3] "w0004".
func label(i int, p Partition) string {
	if p.Name == "" {
		return fmt.Sprintf("partitions[%d]", i)
	}
	return fmt.Sprintf("partitions[%d] %q", i, p.Name)
}

// find returns the index of the partition holding key, or -1 and the number
// of partitions that start at or below key (for the error message).
func (m *PartitionMap) find(key []byte) (int, int) {
	// Binary search: below is the number of ranges starting at or below
	// key; the only one that can hold key is the last of them.
	below := sort.Search(len(m.parts), func(i int) bool { return bytes.Compare(m.parts[i].Start, key) > 0 })
	if below == 0 {
		return -1, 0
	}
	if p := &m.parts[below-1]; p.End != nil && bytes.Compare(key, p.End) >= 0 {
		return -1, below
	}
	return below - 1, below
}

// Lookup returns the partition holding key. An invalid key returns an error
// wrapping ErrInvalidKey; a key in no range, an error wrapping
// ErrNoPartition that names the key and its neighbouring ranges.
func (m *PartitionMap) Lookup(key []byte) (Partition, error) {
	if problem := keyProblem(key); problem != "" {
		return Partition{}, fmt.Errorf("partition: %w %s: %s", ErrInvalidKey, quoteKey(key), problem)
	}
	i, below := m.find(key)
	if i >= 0 {
		return m.parts[i], nil
	}
	var where string
	switch {
	case below == 0:
		where = fmt.Sprintf("it sorts before the first partition, %s", m.parts[0])
	case below == len(m.parts):
		where = fmt.Sprintf("it sorts after the last partition, %s", m.parts[below-1])
	default:
		where = fmt.Sprintf("it sorts between %s and %s", m.parts[below-1], m.parts[below])
	}
	return Partition{}, fmt.Errorf("partition: key %s: %w (%s)", quoteKey(key), ErrNoPartition, where)
}

// Owner returns the group owning key, or (NoGroup, true) when key lies in a
// replicated partition. Errors are Lookup's.
func (m *PartitionMap) Owner(key []byte) (GroupID, bool, error) {
	p, err := m.Lookup(key)
	if err != nil {
		return NoGroup, false, err
	}
	return p.Group, p.Replicated, nil
}

// Destinations returns the groups owning the keys of a transaction: its
// destination set. It fails on the first invalid key or key in no
// partition, with Lookup's error.
//
// A key of a replicated partition adds no destination: every group holds a
// copy, so the groups the transaction reaches anyway can read it. A
// transaction whose keys are all replicated (or that has no keys) gets the
// empty set, and its sender routes it: a read-only one to a single group of
// its choice, its home group (the group of the client's region), where the
// read is local; one that writes a replicated key to every group
// (Topology.All), since every copy must apply the write in the same order
// as the other transactions of each group. Destinations does not take that
// decision because it does not know which keys are written.
func (m *PartitionMap) Destinations(keys [][]byte) (GroupSet, error) {
	var dst GroupSet
	for _, key := range keys {
		p, err := m.Lookup(key)
		if err != nil {
			return 0, err
		}
		if !p.Replicated {
			dst = dst.Add(p.Group)
		}
	}
	return dst, nil
}

// Partitions returns every partition in key order. The caller owns the
// slice and its keys.
func (m *PartitionMap) Partitions() []Partition {
	out := make([]Partition, len(m.parts))
	for i, p := range m.parts {
		p.Start = slices.Clone(p.Start)
		p.End = slices.Clone(p.End)
		out[i] = p
	}
	return out
}

// OwnedBy returns the partitions owned by group g alone (replicated ones
// left out), in key order: the warehouses of a region, for instance. The
// caller owns the slice but not the keys.
func (m *PartitionMap) OwnedBy(g GroupID) []Partition {
	var out []Partition
	for _, p := range m.parts {
		if !p.Replicated && p.Group == g {
			out = append(out, p)
		}
	}
	return out
}

// ByName returns the partition called name. The empty name names none.
func (m *PartitionMap) ByName(name string) (Partition, bool) {
	if name == "" {
		return Partition{}, false
	}
	i, ok := m.byName[name]
	if !ok {
		return Partition{}, false
	}
	return m.parts[i], true
}

// Len returns the number of partitions.
func (m *PartitionMap) Len() int { return len(m.parts) }

// Span is the part of a range of keys that one partition holds: [Start,
// End), inside Partition's range. Start and End may share the bytes of the
// range or of the partition: they must not be modified.
type Span struct {
	Start, End []byte
	Partition  Partition
}

// Spans returns the parts of the range [start, end) that partitions hold,
// one per partition the range overlaps, in key order: a scan of the range
// reads these and nothing else (no key lies outside every partition). start
// and end must be valid keys (CheckKey), end after start. A range that no
// partition overlaps returns an error wrapping ErrNoPartition that names the
// neighbouring ranges.
func (m *PartitionMap) Spans(start, end []byte) ([]Span, error) {
	if problem := keyProblem(start); problem != "" {
		return nil, fmt.Errorf("partition: start: %w %s: %s", ErrInvalidKey, quoteKey(start), problem)
	}
	if problem := keyProblem(end); problem != "" {
		return nil, fmt.Errorf("partition: end: %w %s: %s", ErrInvalidKey, quoteKey(end), problem)
	}
	if bytes.Compare(start, end) >= 0 {
		return nil, fmt.Errorf("partition: range [%s, %s): end is not after start", quoteKey(start), quoteKey(end))
	}
	i, below := m.find(start)
	if i < 0 {
		i = below // the first range that starts after start, if any
	}
	var out []Span
	for ; i < len(m.parts) && bytes.Compare(m.parts[i].Start, end) < 0; i++ {
		p := m.parts[i]
		sp := Span{Start: start, End: end, Partition: p}
		if bytes.Compare(p.Start, start) > 0 {
			sp.Start = p.Start
		}
		if p.End != nil && bytes.Compare(p.End, end) < 0 {
			sp.End = p.End
		}
		out = append(out, sp)
	}
	if len(out) > 0 {
		return out, nil
	}
	var where string
	switch {
	case below == 0:
		where = fmt.Sprintf("it ends at or before the first partition, %s", m.parts[0])
	case below == len(m.parts):
		where = fmt.Sprintf("it starts after the last partition, %s", m.parts[below-1])
	default:
		where = fmt.Sprintf("it lies between %s and %s", m.parts[below-1], m.parts[below])
	}
	return nil, &noSpanError{msg: fmt.Sprintf("partition: range [%s, %s): no partition overlaps it (%s)", quoteKey(start), quoteKey(end), where)}
}

// noSpanError is the error of a range that no partition overlaps: it
// matches ErrNoPartition, as a key in no partition does.
type noSpanError struct{ msg string }

func (e *noSpanError) Error() string { return e.msg }
func (e *noSpanError) Unwrap() error { return ErrNoPartition }

// WithOwners returns a copy of m in which the partition at index i of
// Partitions (key order) is owned by owners[i]: the partition map of an
// epoch in which partitions moved (DESIGN 14). A replicated partition's
// owner must be NoGroup; every other must be a group of top.
func (m *PartitionMap) WithOwners(top *Topology, owners []GroupID) (*PartitionMap, error) {
	if len(owners) != len(m.parts) {
		return nil, fmt.Errorf("partition: owners of %d partitions, the map has %d", len(owners), len(m.parts))
	}
	out := &PartitionMap{parts: slices.Clone(m.parts), byName: m.byName}
	for i, g := range owners {
		p := &out.parts[i]
		switch {
		case p.Replicated && g != NoGroup:
			return nil, fmt.Errorf("partition: %s is replicated: it has no owner, not group %d", p.Name, g)
		case !p.Replicated && !top.Valid(g):
			return nil, fmt.Errorf("partition: %s: group %d is not a group of the topology (0..%d)", p.Name, g, top.Len()-1)
		}
		p.Group = g
	}
	return out, nil
}

// Index returns the index of the partition named name in Partitions (key
// order), and false when there is none.
func (m *PartitionMap) Index(name string) (int, bool) {
	i, ok := m.byName[name]
	return i, ok
}

// Owners returns the owner of every partition, in key order (NoGroup for a
// replicated one).
func (m *PartitionMap) Owners() []GroupID {
	out := make([]GroupID, len(m.parts))
	for i, p := range m.parts {
		out[i] = p.Group
	}
	return out
}

// At returns the partition at index i of Partitions (key order); it shares
// the map's key bytes.
func (m *PartitionMap) At(i int) Partition { return m.parts[i] }

// SameOwners reports whether m and o give every partition the same owner
// (o a map of the same partitions).
func (m *PartitionMap) SameOwners(o *PartitionMap) bool {
	if m == o {
		return true
	}
	if len(m.parts) != len(o.parts) {
		return false
	}
	for i := range m.parts {
		if m.parts[i].Group != o.parts[i].Group {
			return false
		}
	}
	return true
}
