package partition_test

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/flexkv/flexkv/partition"
)

// threeGroups returns a topology of groups a, b, c (GroupIDs 0, 1, 2).
func threeGroups(t *testing.T) *partition.Topology {
	t.Helper()
	top, err := partition.NewTopology(partition.Spec{Groups: []partition.Group{{Name: "a"}, {Name: "b"}, {Name: "c"}}})
	if err != nil {
		t.Fatal(err)
	}
	return top
}

func part(name, start, end string, g partition.GroupID) partition.Partition {
	p := partition.Partition{Name: name, Start: []byte(start), Group: g}
	if end != "" {
		p.End = []byte(end)
	}
	return p
}

func replicated(name, start, end string) partition.Partition {
	p := part(name, start, end, partition.NoGroup)
	p.Replicated = true
	return p
}

// testParts has a replicated range, two adjacent ranges, a gap, and an
// unbounded last range; listed out of key order on purpose.
func testParts() []partition.Partition {
	return []partition.Partition{
		part("w1", "w/1/", "w/2/", 0),
		part("w2", "w/2/", "w/3/", 1),
		part("z", "z", "", 2),
		replicated("item", "item/", "item0"),
	}
}

func testMap(t *testing.T) *partition.PartitionMap {
	t.Helper()
	m, err := partition.NewPartitionMap(threeGroups(t), testParts())
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestLookup(t *testing.T) {
	m := testMap(t)
	tests := []struct {
		key  string
		want string // partition name; "" = ErrNoPartition
	}{
		{"w/1/", "w1"},                // start is inclusive
		{"w/1/x", "w1"},               // inside
		{"w/1/\xff\xff\xff", "w1"},    // just below the end
		{"w/2/", "w2"},                // the end of w1 is exclusive: next range
		{"w/2/\x00", "w2"},            // inside
		{"w/3/", ""},                  // end of w2, start of a gap
		{"w/3/x", ""},                 // in the gap
		{"w/1", ""},                   // just below the start of w1
		{"item/", "item"},             // replicated range, inclusive start
		{"item/0042", "item"},         // inside
		{"item0", ""},                 // exclusive end
		{"item", ""},                  // a prefix of the start sorts below it
		{"a", ""},                     // before the first range
		{"\x00", ""},                  // the smallest key
		{"z", "z"},                    // start of the unbounded range
		{"zzzz\xff\xff\xff\xff", "z"}, // no upper bound
		{"y\xff", ""},                 // the gap below z
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%q", tt.key), func(t *testing.T) {
			p, err := m.Lookup([]byte(tt.key))
			if tt.want == "" {
				if !errors.Is(err, partition.ErrNoPartition) {
					t.Fatalf("Lookup = %v, %v; want an error wrapping ErrNoPartition", p, err)
				}
				if errors.Is(err, partition.ErrInvalidKey) {
					t.Errorf("error %q also wraps ErrInvalidKey", err)
				}
				if want := fmt.Sprintf("%q", tt.key); !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not name the key %s", err, want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p.Name != tt.want {
				t.Fatalf("got partition %v, want %s", p, tt.want)
			}
			if !p.Contains([]byte(tt.key)) {
				t.Errorf("%v.Contains(%q) = false for the partition Lookup returned", p, tt.key)
			}
		})
	}
}

// The no-partition error says where the key falls, so that a gap in the
// configuration is easy to find.
func TestLookupErrorNamesNeighbours(t *testing.T) {
	m := testMap(t)
	tests := []struct {
		key  string
		want []string
	}{
		{"a", []string{`partition: key "a": no partition holds the key`, "before the first partition, item"}},
		{"w/5/", []string{"between w2", "and z"}},
		{"item1", []string{"between item", "and w1"}},
	}
	for _, tt := range tests {
		_, err := m.Lookup([]byte(tt.key))
		if err == nil {
			t.Fatalf("Lookup(%q) succeeded", tt.key)
		}
		for _, w := range tt.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("Lookup(%q) error %q does not contain %q", tt.key, err, w)
			}
		}
	}
	// Without an unbounded range, a key can fall after the last one.
	m2, err := partition.NewPartitionMap(threeGroups(t), []partition.Partition{part("only", "b", "c", 0)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m2.Lookup([]byte("d")); err == nil || !strings.Contains(err.Error(), "after the last partition, only") {
		t.Errorf("Lookup(d) = %v, want an error saying it sorts after the last partition", err)
	}
}

func TestInvalidKeys(t *testing.T) {
	m := testMap(t)
	longest := append([]byte("z"), bytes.Repeat([]byte{'k'}, partition.KeyMax-1)...)
	tooLong := append(bytes.Clone(longest), 'k')
	tests := []struct {
		name    string
		key     []byte
		wantErr string // "" = valid
	}{
		{"nil", nil, "empty"},
		{"empty", []byte{}, "empty"},
		{"KeyMax bytes", longest, ""},
		{"KeyMax+1 bytes", tooLong, fmt.Sprintf("%d bytes, more than KeyMax (%d)", partition.KeyMax+1, partition.KeyMax)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			errs := map[string]error{"CheckKey": partition.CheckKey(tt.key)}
			_, errs["Lookup"] = m.Lookup(tt.key)
			_, _, errs["Owner"] = m.Owner(tt.key)
			_, errs["Destinations"] = m.Destinations([][]byte{[]byte("w/1/"), tt.key})
			for _, fn := range []string{"CheckKey", "Lookup", "Owner", "Destinations"} {
				err := errs[fn]
				if tt.wantErr == "" {
					if err != nil {
						t.Errorf("%s: %v", fn, err)
					}
					continue
				}
				if !errors.Is(err, partition.ErrInvalidKey) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("%s: got %v, want an error wrapping ErrInvalidKey containing %q", fn, err, tt.wantErr)
				}
			}
		})
	}
	// A long key shows cut in the message, not whole.
	err := partition.CheckKey(tooLong)
	if len(err.Error()) > 200 {
		t.Errorf("error message is %d bytes long, want the key cut: %.300s", len(err.Error()), err)
	}
}

func TestOwner(t *testing.T) {
	m := testMap(t)
	tests := []struct {
		key            string
		wantGroup      partition.GroupID
		wantReplicated bool
	}{
		{"w/1/x", 0, false},
		{"w/2/x", 1, false},
		{"zebra", 2, false},
		{"item/7", partition.NoGroup, true},
	}
	for _, tt := range tests {
		g, rep, err := m.Owner([]byte(tt.key))
		if err != nil {
			t.Fatal(err)
		}
		if g != tt.wantGroup || rep != tt.wantReplicated {
			t.Errorf("Owner(%q) = %d, %v; want %d, %v", tt.key, g, rep, tt.wantGroup, tt.wantReplicated)
		}
	}
	g, rep, err := m.Owner([]byte("w/3/"))
	if !errors.Is(err, partition.ErrNoPartition) || g != partition.NoGroup || rep {
		t.Errorf("Owner(w/3/) = %d, %v, %v; want NoGroup, false, ErrNoPartition", g, rep, err)
	}
}

func TestDestinations(t *testing.T) {
	m := testMap(t)
	tests := []struct {
		name    string
		keys    []string
		want    partition.GroupSet
		wantErr error
	}{
		{"no keys", nil, 0, nil},
		{"one group", []string{"w/1/a", "w/1/b"}, partition.SetOf(0), nil},
		{"two groups", []string{"w/1/a", "w/2/b"}, partition.SetOf(0, 1), nil},
		{"three groups", []string{"zz", "w/2/b", "w/1/a"}, partition.SetOf(0, 1, 2), nil},
		{"replicated adds nothing", []string{"w/2/b", "item/1", "item/2"}, partition.SetOf(1), nil},
		{"only replicated", []string{"item/1", "item/2"}, 0, nil},
		{"key in no partition", []string{"w/1/a", "w/9/"}, 0, partition.ErrNoPartition},
		{"empty key", []string{"w/1/a", ""}, 0, partition.ErrInvalidKey},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			keys := make([][]byte, len(tt.keys))
			for i, k := range tt.keys {
				keys[i] = []byte(k)
			}
			got, err := m.Destinations(keys)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("error = %v, want %v", err, tt.wantErr)
			}
			if got != tt.want {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestNewPartitionMapRejects(t *testing.T) {
	top := threeGroups(t)
	long := string(bytes.Repeat([]byte{'k'}, partition.KeyMax+1))
	tests := []struct {
		name  string
		top   *partition.Topology
		parts []partition.Partition
		want  string
	}{
		{"nil topology", nil, testParts(), "without a topology"},
		{"no partitions", top, nil, "no partitions"},
		{"empty start", top, []partition.Partition{part("a", "", "b", 0)}, `partitions[0] "a": start: invalid key "": empty`},
		{"start too long", top, []partition.Partition{part("a", long, "", 0)}, "start: invalid key"},
		{"end too long", top, []partition.Partition{part("a", "a", long, 0)}, "end: invalid key"},
		{"end equals start", top, []partition.Partition{part("a", "b", "b", 0)}, `empty range: end "b" is not after start "b"`},
		{"end below start", top, []partition.Partition{part("a", "c", "b", 0)}, `empty range: end "b" is not after start "c"`},
		{"unsorted bounds, unnamed", top, []partition.Partition{part("", "c", "b", 0)}, `partitions[0]: empty range`},
		{"overlap", top, []partition.Partition{part("a", "a", "c", 0), part("b", "b", "d", 1)},
			`partitions[1] "b" overlaps partitions[0] "a": it starts at "b", before the end of a ["a", "c") group 0`},
		{"overlap listed backwards", top, []partition.Partition{part("b", "b", "d", 1), part("a", "a", "c", 0)},
			`partitions[0] "b" overlaps partitions[1] "a"`},
		{"inside another", top, []partition.Partition{part("a", "a", "z", 0), part("b", "m", "n", 1)}, `partitions[1] "b" overlaps partitions[0] "a"`},
		{"after an unbounded range", top, []partition.Partition{part("a", "a", "", 0), part("b", "x", "y", 1)},
			`overlaps partitions[0] "a": it starts at "x", before the end of a ["a", +inf)`},
		{"same start", top, []partition.Partition{part("a", "a", "b", 0), part("b", "a", "c", 1)}, "overlaps"},
		{"same range", top, []partition.Partition{part("a", "a", "b", 0), part("b", "a", "b", 0)}, "overlaps"},
		{"replicated overlaps owned", top, []partition.Partition{part("w", "w/", "w0", 0), replicated("wi", "w/i", "w/j")},
			`partitions[1] "wi" overlaps partitions[0] "w"`},
		{"two replicated overlap", top, []partition.Partition{replicated("i", "i/", "i0"), replicated("j", "i/x", "i/y")}, "overlaps"},
		{"duplicate name", top, []partition.Partition{part("a", "a", "b", 0), part("a", "c", "d", 1)},
			`partitions[1] "a": name listed twice (also partitions[0] "a")`},
		{"replicated with a group", top, []partition.Partition{{Name: "i", Start: []byte("i"), Replicated: true}},
			"replicated, so owned by every group: its group must be NoGroup, not 0"},
		{"owned by no group", top, []partition.Partition{part("a", "a", "b", partition.NoGroup)}, "group -1 is not a group of the topology (0..2)"},
		{"owned by an unknown group", top, []partition.Partition{part("a", "a", "b", 3)}, "group 3 is not a group of the topology"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := partition.NewPartitionMap(tt.top, tt.parts)
			if err == nil {
				t.Fatalf("accepted: %v", m.Partitions())
			}
			if !strings.HasPrefix(err.Error(), "partition: ") || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got error %q, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestNewPartitionMapAccepts(t *testing.T) {
	top := threeGroups(t)
	// Input order does not matter; Partitions returns key order.
	m := testMap(t)
	var names []string
	for _, p := range m.Partitions() {
		names = append(names, p.Name)
	}
	if got, want := strings.Join(names, " "), "item w1 w2 z"; got != want {
		t.Errorf("Partitions in order %s, want %s", got, want)
	}
	// Adjacent ranges, several unnamed, and an empty but non-nil End
	// meaning no upper bound.
	m, err := partition.NewPartitionMap(top, []partition.Partition{
		part("", "a", "b", 0),
		part("", "b", "c", 1),
		{Start: []byte("c"), End: []byte{}, Group: 2},
	})
	if err != nil {
		t.Fatal(err)
	}
	if p, err := m.Lookup([]byte("zzz")); err != nil || p.End != nil || p.Group != 2 {
		t.Errorf("Lookup(zzz) = %v, %v; want the unbounded partition of group 2 with a nil End", p, err)
	}
	if _, ok := m.ByName(""); ok {
		t.Error(`ByName("") found a partition`)
	}
}

// Reaching PartitionsMax is accepted; one more is an error.
func TestPartitionsMax(t *testing.T) {
	top := threeGroups(t)
	parts := make([]partition.Partition, partition.PartitionsMax+1)
	for i := range parts {
		parts[i] = part("", fmt.Sprintf("k%06d", i), fmt.Sprintf("k%06d", i+1), partition.GroupID(i%3))
	}
	m, err := partition.NewPartitionMap(top, parts[:partition.PartitionsMax])
	if err != nil {
		t.Fatal(err)
	}
	if m.Len() != partition.PartitionsMax {
		t.Fatalf("Len = %d, want %d", m.Len(), partition.PartitionsMax)
	}
	last := fmt.Sprintf("k%06d", partition.PartitionsMax-1)
	if g, _, err := m.Owner([]byte(last + "x")); err != nil || g != partition.GroupID((partition.PartitionsMax-1)%3) {
		t.Errorf("Owner(%sx) = %d, %v", last, g, err)
	}
	_, err = partition.NewPartitionMap(top, parts)
	if want := fmt.Sprintf("%d partitions, more than PartitionsMax", partition.PartitionsMax+1); err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("got %v, want an error containing %q", err, want)
	}
}

// The map owns its keys: changing the input after building it, or the
// output of Partitions, changes nothing.
func TestPartitionMapCopiesKeys(t *testing.T) {
	parts := testParts()
	m, err := partition.NewPartitionMap(threeGroups(t), parts)
	if err != nil {
		t.Fatal(err)
	}
	parts[0].Start[0] = 'x'
	parts[0].End[0] = 'x'
	out := m.Partitions()
	for i := range out {
		out[i].Start[0] = '!'
		out[i].Name = "changed"
	}
	p, err := m.Lookup([]byte("w/1/a"))
	if err != nil || p.Name != "w1" || string(p.Start) != "w/1/" || string(p.End) != "w/2/" {
		t.Fatalf("Lookup(w/1/a) = %v, %v; want w1 [w/1/, w/2/)", p, err)
	}
}

func TestByNameAndOwnedBy(t *testing.T) {
	m := testMap(t)
	p, ok := m.ByName("w2")
	if !ok || string(p.Start) != "w/2/" || p.Group != 1 {
		t.Errorf("ByName(w2) = %v, %v", p, ok)
	}
	if p, ok := m.ByName("item"); !ok || !p.Replicated || p.Group != partition.NoGroup {
		t.Errorf("ByName(item) = %v, %v; want the replicated partition", p, ok)
	}
	if _, ok := m.ByName("w3"); ok {
		t.Error("ByName(w3) found a partition")
	}
	for g, want := range []string{"w1", "w2", "z"} {
		got := m.OwnedBy(partition.GroupID(g))
		if len(got) != 1 || got[0].Name != want {
			t.Errorf("OwnedBy(%d) = %v, want only %s", g, got, want)
		}
	}
	if got := m.OwnedBy(partition.NoGroup); len(got) != 0 {
		t.Errorf("OwnedBy(NoGroup) = %v, want none (replicated partitions are left out)", got)
	}
}

func TestPartitionString(t *testing.T) {
	tests := []struct {
		p    partition.Partition
		want string
	}{
		{part("w0001", "w/0001/", "w/0002/", 0), `w0001 ["w/0001/", "w/0002/") group 0`},
		{replicated("item", "item/", "item0"), `item ["item/", "item0") replicated`},
		{part("last", "z\x00", "", 2), `last ["z\x00", +inf) group 2`},
	}
	for _, tt := range tests {
		if got := tt.p.String(); got != tt.want {
			t.Errorf("got %s, want %s", got, tt.want)
		}
	}
}

// Spans cuts a range at the partitions it overlaps, skipping gaps, and
// refuses one that overlaps none.
func TestSpans(t *testing.T) {
	m := testMap(t)
	tests := []struct {
		start, end string
		want       string // "name[start,end) ..."; "" = ErrNoPartition
	}{
		{"w/1/a", "w/1/b", "w1[w/1/a,w/1/b)"},
		{"w/1/a", "w/2/", "w1[w/1/a,w/2/)"}, // ends where w1 ends
		{"w/1/a", "w/2/b", "w1[w/1/a,w/2/) w2[w/2/,w/2/b)"},
		{"w/", "zz", "w1[w/1/,w/2/) w2[w/2/,w/3/) z[z,zz)"}, // starts in a gap, crosses another
		{"a", "w/1/", "item[item/,item0)"},
		{"item/5", "w/1/\x00", "item[item/5,item0) w1[w/1/,w/1/\x00)"},
		{"w/3/", "y", ""}, // the gap between w2 and z
		{"a", "b", ""},    // before every partition
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%q-%q", tt.start, tt.end), func(t *testing.T) {
			spans, err := m.Spans([]byte(tt.start), []byte(tt.end))
			if tt.want == "" {
				if !errors.Is(err, partition.ErrNoPartition) || !strings.Contains(err.Error(), "no partition overlaps it") {
					t.Fatalf("Spans = %v, %v; want an error matching ErrNoPartition saying no partition overlaps it", spans, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, sp := range spans {
				got = append(got, fmt.Sprintf("%s[%s,%s)", sp.Partition.Name, sp.Start, sp.End))
			}
			if g := strings.Join(got, " "); g != tt.want {
				t.Errorf("got %s, want %s", g, tt.want)
			}
		})
	}
	for _, bad := range [][2]string{{"b", "a"}, {"a", "a"}, {"", "a"}, {"a", ""}} {
		if _, err := m.Spans([]byte(bad[0]), []byte(bad[1])); err == nil {
			t.Errorf("Spans(%q, %q) succeeded", bad[0], bad[1])
		}
	}
}
