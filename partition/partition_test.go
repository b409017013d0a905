package partition_test

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/flexkv/flexkv/partition"
)

// bit63 is the set holding only the highest group a GroupSet can hold.
const bit63 = partition.GroupSet(1) << 63

func TestSetOfAndAllGroups(t *testing.T) {
	tests := []struct {
		name string
		got  partition.GroupSet
		want partition.GroupSet
	}{
		{"SetOf()", partition.SetOf(), 0},
		{"SetOf(0)", partition.SetOf(0), 1},
		{"SetOf(0,3,5)", partition.SetOf(0, 3, 5), 0b101001},
		{"SetOf(5,0,5,3)", partition.SetOf(5, 0, 5, 3), 0b101001},
		{"SetOf(63)", partition.SetOf(63), bit63},
		{"AllGroups(0)", partition.AllGroups(0), 0},
		{"AllGroups(1)", partition.AllGroups(1), 1},
		{"AllGroups(5)", partition.AllGroups(5), 0b11111},
		{"AllGroups(63)", partition.AllGroups(63), ^bit63},
		{"AllGroups(64)", partition.AllGroups(64), ^partition.GroupSet(0)},
		{"AllGroups(65)", partition.AllGroups(65), ^partition.GroupSet(0)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.got != tt.want {
				t.Errorf("got %#x, want %#x", uint64(tt.got), uint64(tt.want))
			}
		})
	}
}

func TestGroupSetMembership(t *testing.T) {
	s := partition.SetOf(0, 3, 63)
	tests := []struct {
		g    partition.GroupID
		want bool
	}{
		{partition.NoGroup, false},
		{-2, false},
		{0, true},
		{1, false},
		{3, true},
		{62, false},
		{63, true},
		{64, false},
		{1000, false},
	}
	for _, tt := range tests {
		if got := s.Has(tt.g); got != tt.want {
			t.Errorf("%v.Has(%d) = %v, want %v", s, tt.g, got, tt.want)
		}
	}
}

func TestGroupSetAddRemove(t *testing.T) {
	tests := []struct {
		name string
		got  partition.GroupSet
		want partition.GroupSet
	}{
		{"add to empty", partition.SetOf().Add(4), partition.SetOf(4)},
		{"add present", partition.SetOf(4).Add(4), partition.SetOf(4)},
		{"add 0", partition.SetOf(4).Add(0), partition.SetOf(0, 4)},
		{"add 63", partition.SetOf(4).Add(63), partition.SetOf(4, 63)},
		{"remove present", partition.SetOf(1, 4).Remove(4), partition.SetOf(1)},
		{"remove absent", partition.SetOf(1, 4).Remove(2), partition.SetOf(1, 4)},
		{"remove 63", partition.SetOf(1, 63).Remove(63), partition.SetOf(1)},
		{"remove NoGroup", partition.SetOf(0, 63).Remove(partition.NoGroup), partition.SetOf(0, 63)},
		{"remove 64", partition.SetOf(0, 63).Remove(64), partition.SetOf(0, 63)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.got != tt.want {
				t.Errorf("got %v, want %v", tt.got, tt.want)
			}
		})
	}
}

func TestGroupSetAddOutOfRangePanics(t *testing.T) {
	for _, g := range []partition.GroupID{partition.NoGroup, 64, 100} {
		t.Run(fmt.Sprint(g), func(t *testing.T) {
			defer func() {
				r := recover()
				if r == nil {
					t.Fatalf("Add(%d) did not panic", g)
				}
				if msg := fmt.Sprint(r); !strings.HasPrefix(msg, "partition: ") {
					t.Errorf("panic %q, want a message with the package prefix", msg)
				}
			}()
			partition.SetOf().Add(g)
		})
	}
}

func TestGroupSetLenMinMax(t *testing.T) {
	tests := []struct {
		s        partition.GroupSet
		len      int
		min, max partition.GroupID
		empty    bool
	}{
		{0, 0, partition.NoGroup, partition.NoGroup, true},
		{partition.SetOf(0), 1, 0, 0, false},
		{partition.SetOf(63), 1, 63, 63, false},
		{partition.SetOf(2, 7, 40), 3, 2, 40, false},
		{partition.SetOf(0, 63), 2, 0, 63, false},
		{partition.AllGroups(64), 64, 0, 63, false},
	}
	for _, tt := range tests {
		t.Run(tt.s.String(), func(t *testing.T) {
			if got := tt.s.Len(); got != tt.len {
				t.Errorf("Len() = %d, want %d", got, tt.len)
			}
			if got := tt.s.Min(); got != tt.min {
				t.Errorf("Min() = %d, want %d", got, tt.min)
			}
			if got := tt.s.Max(); got != tt.max {
				t.Errorf("Max() = %d, want %d", got, tt.max)
			}
			if got := tt.s.Empty(); got != tt.empty {
				t.Errorf("Empty() = %v, want %v", got, tt.empty)
			}
		})
	}
}

func TestGroupSetAboveBelow(t *testing.T) {
	all := partition.AllGroups(64)
	s := partition.SetOf(0, 1, 5, 62, 63)
	tests := []struct {
		name string
		got  partition.GroupSet
		want partition.GroupSet
	}{
		{"s.Above(NoGroup)", s.Above(partition.NoGroup), s},
		{"s.Above(0)", s.Above(0), partition.SetOf(1, 5, 62, 63)},
		{"s.Above(1)", s.Above(1), partition.SetOf(5, 62, 63)},
		{"s.Above(2)", s.Above(2), partition.SetOf(5, 62, 63)},
		{"s.Above(61)", s.Above(61), partition.SetOf(62, 63)},
		{"s.Above(62)", s.Above(62), partition.SetOf(63)},
		{"s.Above(63)", s.Above(63), 0},
		{"s.Above(64)", s.Above(64), 0},
		{"all.Above(0)", all.Above(0), all.Remove(0)},
		{"all.Above(62)", all.Above(62), bit63},
		{"s.Below(NoGroup)", s.Below(partition.NoGroup), 0},
		{"s.Below(0)", s.Below(0), 0},
		{"s.Below(1)", s.Below(1), partition.SetOf(0)},
		{"s.Below(5)", s.Below(5), partition.SetOf(0, 1)},
		{"s.Below(6)", s.Below(6), partition.SetOf(0, 1, 5)},
		{"s.Below(63)", s.Below(63), partition.SetOf(0, 1, 5, 62)},
		{"s.Below(64)", s.Below(64), s},
		{"all.Below(1)", all.Below(1), partition.SetOf(0)},
		{"all.Below(63)", all.Below(63), ^bit63},
		{"empty.Above(NoGroup)", partition.GroupSet(0).Above(partition.NoGroup), 0},
		{"empty.Below(64)", partition.GroupSet(0).Below(64), 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.got != tt.want {
				t.Errorf("got %v, want %v", tt.got, tt.want)
			}
		})
	}
}

// TestGroupSetAboveBelowSplit checks, for every pivot, that Below, the pivot
// and Above partition a set: disjoint, and together the whole set.
func TestGroupSetAboveBelowSplit(t *testing.T) {
	sets := []partition.GroupSet{0, 1, bit63, partition.SetOf(0, 1, 5, 62, 63), partition.AllGroups(64), 0x5555_aaaa_0f0f_f0f0}
	for _, s := range sets {
		for g := partition.GroupID(-1); g <= 64; g++ {
			above, below := s.Above(g), s.Below(g)
			var at partition.GroupSet
			if s.Has(g) {
				at = partition.SetOf(g)
			}
			if above&below != 0 || above&at != 0 || below&at != 0 {
				t.Errorf("%v split at %d: Above %v, Below %v and the pivot overlap", s, g, above, below)
			}
			if got := above | below | at; got != s {
				t.Errorf("%v split at %d: Above|Below|pivot = %v, want the set back", s, g, got)
			}
			if g >= 0 && below.Max() >= g {
				t.Errorf("%v.Below(%d) = %v holds a group not below it", s, g, below)
			}
			if !above.Empty() && above.Min() <= g {
				t.Errorf("%v.Above(%d) = %v holds a group not above it", s, g, above)
			}
		}
	}
}

func TestGroupSetSliceString(t *testing.T) {
	tests := []struct {
		s     partition.GroupSet
		slice []partition.GroupID
		str   string
	}{
		{0, []partition.GroupID{}, "{}"},
		{partition.SetOf(0), []partition.GroupID{0}, "{0}"},
		{partition.SetOf(5, 0, 3), []partition.GroupID{0, 3, 5}, "{0,3,5}"},
		{partition.SetOf(63, 10), []partition.GroupID{10, 63}, "{10,63}"},
	}
	for _, tt := range tests {
		t.Run(tt.str, func(t *testing.T) {
			got := tt.s.Slice()
			if got == nil || !slices.Equal(got, tt.slice) {
				t.Errorf("Slice() = %#v, want %#v", got, tt.slice)
			}
			if got := tt.s.String(); got != tt.str {
				t.Errorf("String() = %q, want %q", got, tt.str)
			}
		})
	}
	if got := partition.AllGroups(64).Slice(); len(got) != 64 || got[0] != 0 || got[63] != 63 {
		t.Errorf("AllGroups(64).Slice() = %v, want 0..63", got)
	}
}

// groups returns a Spec's group list with the given names.
func groups(names ...string) []partition.Group {
	out := make([]partition.Group, len(names))
	for i, n := range names {
		out[i] = partition.Group{Name: n}
	}
	return out
}

func TestNewTopology(t *testing.T) {
	top, err := partition.NewTopology(partition.Spec{Groups: []partition.Group{
		{Name: "paris", Region: "eu-west-3"},
		{Name: "dublin"},
		{Name: "tokyo", Region: "ap-northeast-1"},
	}})
	if err != nil {
		t.Fatalf("NewTopology: %v", err)
	}
	if got, want := top.Len(), 3; got != want {
		t.Errorf("Len() = %d, want %d", got, want)
	}
	if got, want := top.All(), partition.SetOf(0, 1, 2); got != want {
		t.Errorf("All() = %v, want %v", got, want)
	}
	if got, want := top.Names(), []string{"paris", "dublin", "tokyo"}; !slices.Equal(got, want) {
		t.Errorf("Names() = %v, want %v", got, want)
	}
	if got, want := top.Group(1), (partition.Group{Name: "dublin", Region: "dublin"}); got != want {
		t.Errorf("Group(1) = %+v, want %+v (the region defaults to the name)", got, want)
	}
	if got, want := top.Group(2).Region, "ap-northeast-1"; got != want {
		t.Errorf("Group(2).Region = %q, want %q", got, want)
	}
	for i, name := range []string{"paris", "dublin", "tokyo"} {
		g, ok := top.Lookup(name)
		if !ok || g != partition.GroupID(i) {
			t.Errorf("Lookup(%q) = %d, %v, want %d, true", name, g, ok, i)
		}
		if got := top.Name(partition.GroupID(i)); got != name {
			t.Errorf("Name(%d) = %q, want %q", i, got, name)
		}
	}
	if g, ok := top.Lookup("madrid"); ok {
		t.Errorf("Lookup(madrid) = %d, true, want false", g)
	}
	for _, tt := range []struct {
		g    partition.GroupID
		want bool
	}{{partition.NoGroup, false}, {0, true}, {2, true}, {3, false}} {
		if got := top.Valid(tt.g); got != tt.want {
			t.Errorf("Valid(%d) = %v, want %v", tt.g, got, tt.want)
		}
	}
	for _, tt := range []struct {
		s    partition.GroupSet
		want bool
	}{{0, true}, {partition.SetOf(0, 2), true}, {partition.SetOf(3), false}, {partition.SetOf(1, 63), false}} {
		if got := top.ValidSet(tt.s); got != tt.want {
			t.Errorf("ValidSet(%v) = %v, want %v", tt.s, got, tt.want)
		}
	}
	if top.HasTree() {
		t.Errorf("HasTree() = true for a spec without Parent, want false")
	}
	if got := top.TreeLCA(partition.SetOf(0, 1)); got != partition.NoGroup {
		t.Errorf("TreeLCA without a tree = %d, want NoGroup", got)
	}
}

func TestNewTopologyGroupsMax(t *testing.T) {
	names := make([]string, partition.GroupsMax+1)
	for i := range names {
		names[i] = fmt.Sprintf("g%d", i)
	}
	top, err := partition.NewTopology(partition.Spec{Groups: groups(names[:partition.GroupsMax]...)})
	if err != nil {
		t.Fatalf("NewTopology with %d groups: %v", partition.GroupsMax, err)
	}
	if got, want := top.All(), ^partition.GroupSet(0); got != want {
		t.Errorf("All() of %d groups = %#x, want %#x", partition.GroupsMax, uint64(got), uint64(want))
	}
	if !top.Valid(63) || top.Valid(64) {
		t.Errorf("Valid(63), Valid(64) = %v, %v, want true, false", top.Valid(63), top.Valid(64))
	}
	_, err = partition.NewTopology(partition.Spec{Groups: groups(names...)})
	if err == nil || !strings.Contains(err.Error(), "65 groups, at most 64") {
		t.Errorf("NewTopology with 65 groups: got %v, want an error naming 65 groups and the bound 64", err)
	}
}

func TestNewTopologyErrors(t *testing.T) {
	abc := groups("a", "b", "c")
	tests := []struct {
		name string
		spec partition.Spec
		want string // substring of the error
	}{
		{"no groups", partition.Spec{}, "no groups"},
		{"empty name", partition.Spec{Groups: groups("a", "")}, "group 1 has no name"},
		{"duplicate name", partition.Spec{Groups: groups("a", "b", "a")}, `group "a" listed twice`},
		{"unknown child", partition.Spec{Groups: abc, Parent: map[string]string{"b": "a", "c": "a", "z": "a"}}, `unknown group "z"`},
		{"unknown parent", partition.Spec{Groups: abc, Parent: map[string]string{"b": "a", "c": "z"}}, `unknown parent "z" of "c"`},
		{"empty parent", partition.Spec{Groups: abc, Parent: map[string]string{"a": "", "b": "a", "c": "a"}}, `unknown parent "" of "a"`},
		{"own parent", partition.Spec{Groups: abc, Parent: map[string]string{"b": "a", "c": "c"}}, `"c" is its own parent`},
		{"two roots", partition.Spec{Groups: abc, Parent: map[string]string{"c": "a"}}, `two roots, "a" and "b"`},
		{"no parent at all", partition.Spec{Groups: abc, Parent: map[string]string{}}, "two roots"},
		{"cycle without root", partition.Spec{Groups: abc, Parent: map[string]string{"a": "c", "b": "a", "c": "b"}}, "no root"},
		{"cycle beside the root", partition.Spec{Groups: groups("a", "b", "c", "d"), Parent: map[string]string{"b": "c", "c": "b", "d": "a"}}, "cycle through"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			top, err := partition.NewTopology(tt.spec)
			if err == nil {
				t.Fatalf("NewTopology succeeded (%d groups), want an error containing %q", top.Len(), tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q, want it to contain %q", err, tt.want)
			}
			if !strings.HasPrefix(err.Error(), "partition: ") {
				t.Errorf("error %q lacks the package prefix", err)
			}
		})
	}
}

// handTree is a tree whose shape does not follow the ranks: the root has
// rank 2 and the two lowest ranks are leaves.
//
//	         a(2)
//	       /      \
//	    b(3)      c(4)
//	   /    \        \
//	d(0)   e(1)     f(5)
func handTree(t *testing.T) *partition.Topology {
	t.Helper()
	top, err := partition.NewTopology(partition.Spec{
		Groups: groups("d", "e", "a", "b", "c", "f"),
		Parent: map[string]string{"b": "a", "c": "a", "d": "b", "e": "b", "f": "c"},
	})
	if err != nil {
		t.Fatalf("NewTopology: %v", err)
	}
	return top
}

func TestTreeShape(t *testing.T) {
	top := handTree(t)
	if !top.HasTree() {
		t.Fatal("HasTree() = false, want true")
	}
	const d, e, a, b, c, f = 0, 1, 2, 3, 4, 5
	tests := []struct {
		g        partition.GroupID
		parent   partition.GroupID
		children []partition.GroupID
		depth    int
		subtree  partition.GroupSet
	}{
		{a, partition.NoGroup, []partition.GroupID{b, c}, 0, partition.AllGroups(6)},
		{b, a, []partition.GroupID{d, e}, 1, partition.SetOf(b, d, e)},
		{c, a, []partition.GroupID{f}, 1, partition.SetOf(c, f)},
		{d, b, nil, 2, partition.SetOf(d)},
		{e, b, nil, 2, partition.SetOf(e)},
		{f, c, nil, 2, partition.SetOf(f)},
	}
	for _, tt := range tests {
		t.Run(top.Name(tt.g), func(t *testing.T) {
			if got := top.Parent(tt.g); got != tt.parent {
				t.Errorf("Parent = %d, want %d", got, tt.parent)
			}
			if got := top.Children(tt.g); !slices.Equal(got, tt.children) {
				t.Errorf("Children = %v, want %v (rank order)", got, tt.children)
			}
			if got := top.Depth(tt.g); got != tt.depth {
				t.Errorf("Depth = %d, want %d", got, tt.depth)
			}
			if got := top.Subtree(tt.g); got != tt.subtree {
				t.Errorf("Subtree = %v, want %v", got, tt.subtree)
			}
		})
	}
}

func TestTreeLCA(t *testing.T) {
	top := handTree(t)
	const d, e, a, b, c, f = 0, 1, 2, 3, 4, 5
	tests := []struct {
		s    partition.GroupSet
		want partition.GroupID
	}{
		{0, partition.NoGroup},
		{partition.SetOf(d), d},
		{partition.SetOf(a), a},
		{partition.SetOf(d, e), b},
		{partition.SetOf(b, d), b},
		{partition.SetOf(b, d, e), b},
		{partition.SetOf(d, f), a},
		{partition.SetOf(e, c), a},
		{partition.SetOf(c, f), c},
		{partition.SetOf(f), f},
		{partition.SetOf(a, f), a},
		{partition.AllGroups(6), a},
	}
	for _, tt := range tests {
		if got := top.TreeLCA(tt.s); got != tt.want {
			t.Errorf("TreeLCA(%v) = %d, want %d", tt.s, got, tt.want)
		}
	}
}

// TestTreeLCAExhaustive checks the definition of the tree lca on every
// non-empty subset of the hand-made tree: its subtree holds the set and no
// child's subtree does.
func TestTreeLCAExhaustive(t *testing.T) {
	top := handTree(t)
	for s := partition.GroupSet(1); s <= top.All(); s++ {
		g := top.TreeLCA(s)
		if !top.Valid(g) {
			t.Fatalf("TreeLCA(%v) = %d, not a group", s, g)
		}
		if top.Subtree(g)&s != s {
			t.Errorf("TreeLCA(%v) = %d, whose subtree %v misses part of the set", s, g, top.Subtree(g))
		}
		for _, ch := range top.Children(g) {
			if top.Subtree(ch)&s == s {
				t.Errorf("TreeLCA(%v) = %d, but its child %d's subtree holds the whole set", s, g, ch)
			}
		}
	}
}

func awsPath() string { return filepath.Join("..", "configs", "aws-12-regions-latency-ms.csv") }

var awsRegions = []string{
	"us-west-1", "ca-central-1", "us-east-1", "sa-east-1", "eu-west-1", "eu-west-3",
	"eu-central-1", "eu-north-1", "ap-south-1", "ap-southeast-1", "ap-northeast-1", "ap-southeast-2",
}

func readAWS(t *testing.T) *partition.Latency {
	t.Helper()
	l, err := partition.ReadLatencyFile(awsPath())
	if err != nil {
		t.Fatalf("ReadLatencyFile: %v", err)
	}
	return l
}

// awsTopology returns a topology with one group per AWS region, in file order.
func awsTopology(t *testing.T) *partition.Topology {
	t.Helper()
	top, err := partition.NewTopology(partition.Spec{Groups: groups(awsRegions...)})
	if err != nil {
		t.Fatalf("NewTopology: %v", err)
	}
	return top
}

func TestReadLatencyFileAWS(t *testing.T) {
	l := readAWS(t)
	if got := l.Regions(); !slices.Equal(got, awsRegions) {
		t.Fatalf("Regions() = %v, want %v", got, awsRegions)
	}
	tests := []struct {
		from, to string
		want     float64
	}{
		{"eu-west-1", "eu-west-3", 19.51},
		{"eu-west-3", "eu-west-1", 19.64}, // the matrix is not symmetric
		{"us-west-1", "us-west-1", 2.18},
		{"us-west-1", "ap-southeast-2", 139.20},
		{"sa-east-1", "ap-southeast-1", 340.37},
		{"ap-southeast-2", "ap-southeast-2", 2.84},
		{"ap-southeast-2", "us-west-1", 138.66},
	}
	for _, tt := range tests {
		if got := l.RTTMs(tt.from, tt.to); got != tt.want {
			t.Errorf("RTTMs(%s, %s) = %v, want %v", tt.from, tt.to, got, tt.want)
		}
	}
	if !l.Has("eu-north-1") || l.Has("eu-south-1") || l.Has("") {
		t.Errorf("Has(eu-north-1), Has(eu-south-1), Has(\"\") = %v, %v, %v, want true, false, false",
			l.Has("eu-north-1"), l.Has("eu-south-1"), l.Has(""))
	}
	regions := l.Regions()
	regions[0] = "changed"
	if got := l.Regions()[0]; got != "us-west-1" {
		t.Errorf("Regions() shares its slice with the matrix: after a change, Regions()[0] = %q", got)
	}
}

func TestReadLatencyFileErrors(t *testing.T) {
	_, err := partition.ReadLatencyFile(filepath.Join(t.TempDir(), "missing.csv"))
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: got %v, want an error wrapping fs.ErrNotExist", err)
	}
	// A parse error names the file.
	bad := filepath.Join(t.TempDir(), "bad.csv")
	if err := os.WriteFile(bad, []byte("from\\to,a\na,x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = partition.ReadLatencyFile(bad)
	if err == nil || !strings.Contains(err.Error(), bad) || !strings.HasPrefix(err.Error(), "partition: ") {
		t.Errorf("malformed file: got %v, want a partition error naming %s", err, bad)
	}
}

func TestReadLatencySmall(t *testing.T) {
	in := "from\\to, a ,b\n a ,1, 20.5\nb,21,0\n"
	l, err := partition.ReadLatency(strings.NewReader(in))
	if err != nil {
		t.Fatalf("ReadLatency: %v", err)
	}
	if got, want := l.Regions(), []string{"a", "b"}; !slices.Equal(got, want) {
		t.Errorf("Regions() = %v, want %v (names trimmed)", got, want)
	}
	if got := l.RTTMs("a", "b"); got != 20.5 {
		t.Errorf("RTTMs(a, b) = %v, want 20.5", got)
	}
	if got := l.RTTMs("b", "b"); got != 0 {
		t.Errorf("RTTMs(b, b) = %v, want 0", got)
	}
}

func TestReadLatencyMalformed(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want string // substring of the error
	}{
		{"empty", "", "want a header row"},
		{"header only", "from\\to,a,b\n", "want a header row"},
		{"no region column", "from\\to\nx\n", "0 columns but 1 rows"},
		{"ragged row", "from\\to,a,b\na,1,2\nb,3\n", "wrong number of fields"},
		{"missing row", "from\\to,a,b,c\na,1,2,3\nb,4,5,6\n", "3 columns but 2 rows"},
		{"extra row", "from\\to,a\na,1\nb,2\n", "1 columns but 2 rows"},
		{"non-numeric", "from\\to,a,b\na,1,fast\nb,3,4\n", `row "a" column "b": "fast" is not a latency`},
		{"empty cell", "from\\to,a,b\na,1,2\nb,,4\n", `row "b" column "a": "" is not a latency`},
		{"negative", "from\\to,a,b\na,1,-2\nb,3,4\n", `"-2" is not a latency`},
		{"NaN", "from\\to,a,b\na,1,NaN\nb,3,4\n", `"NaN" is not a latency`},
		{"infinite", "from\\to,a,b\na,1,2\nb,+Inf,4\n", `"+Inf" is not a latency`},
		{"row order differs from columns", "from\\to,a,b\nb,1,2\na,3,4\n", `row 2 is "b", want "a"`},
		{"row names another region", "from\\to,a,b\na,1,2\nc,3,4\n", `row 3 is "c", want "b"`},
		{"duplicate region", "from\\to,a,a\na,1,2\na,3,4\n", `region "a" twice`},
		{"unnamed column", "from\\to,a, \na,1,2\nb,3,4\n", "column 2 has no region name"},
		{"bad quoting", "from\\to,\"a\na,1\n", "partition: latency matrix:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := partition.ReadLatency(strings.NewReader(tt.in))
			if err == nil {
				t.Fatalf("ReadLatency succeeded with regions %v, want an error containing %q", l.Regions(), tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q, want it to contain %q", err, tt.want)
			}
			if !strings.HasPrefix(err.Error(), "partition: latency matrix: ") {
				t.Errorf("error %q lacks the prefix %q", err, "partition: latency matrix: ")
			}
		})
	}
}

func TestReadLatencyRaggedWrapsCSVError(t *testing.T) {
	_, err := partition.ReadLatency(strings.NewReader("from\\to,a,b\na,1,2\nb,3\n"))
	if !errors.Is(err, csv.ErrFieldCount) {
		t.Errorf("got %v, want an error wrapping csv.ErrFieldCount", err)
	}
}

func TestNewLatency(t *testing.T) {
	rtt := [][]float64{{1, 10}, {11, 2}}
	l, err := partition.NewLatency([]string{"x", "y"}, rtt)
	if err != nil {
		t.Fatalf("NewLatency: %v", err)
	}
	rtt[0][1] = 99
	if got := l.RTTMs("x", "y"); got != 10 {
		t.Errorf("RTTMs(x, y) = %v after the caller changed its slice, want 10 (the matrix keeps a copy)", got)
	}
	if got := l.RTTMs("y", "x"); got != 11 {
		t.Errorf("RTTMs(y, x) = %v, want 11", got)
	}

	errTests := []struct {
		name    string
		regions []string
		rtt     [][]float64
		want    string
	}{
		{"empty", nil, nil, "not empty"},
		{"fewer rows", []string{"x", "y"}, [][]float64{{1, 2}}, "square"},
		{"short row", []string{"x", "y"}, [][]float64{{1, 2}, {3}}, "square"},
		{"duplicate region", []string{"x", "x"}, [][]float64{{1, 2}, {3, 4}}, `region "x" twice`},
	}
	for _, tt := range errTests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := partition.NewLatency(tt.regions, tt.rtt)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

func TestRTTMsUnknownRegionPanics(t *testing.T) {
	l := readAWS(t)
	defer func() {
		r := recover()
		if r == nil || !strings.Contains(fmt.Sprint(r), "eu-south-1") {
			t.Errorf("recovered %v, want a panic naming the unknown region eu-south-1", r)
		}
	}()
	l.RTTMs("eu-west-1", "eu-south-1")
}

func TestCheckTopologyAndGroupRTT(t *testing.T) {
	l := readAWS(t)
	top, err := partition.NewTopology(partition.Spec{Groups: []partition.Group{
		{Name: "dublin", Region: "eu-west-1"},
		{Name: "paris", Region: "eu-west-3"},
	}})
	if err != nil {
		t.Fatalf("NewTopology: %v", err)
	}
	if err := l.CheckTopology(top); err != nil {
		t.Errorf("CheckTopology: %v", err)
	}
	if got := l.GroupRTTMs(top, 0, 1); got != 19.51 {
		t.Errorf("GroupRTTMs(dublin, paris) = %v, want 19.51 (by region)", got)
	}
	if got := l.GroupRTTMs(top, 1, 1); got != 4.13 {
		t.Errorf("GroupRTTMs(paris, paris) = %v, want 4.13 (the diagonal)", got)
	}

	// Without Region, a group's name is its region; "madrid" is not in the matrix.
	top, err = partition.NewTopology(partition.Spec{Groups: groups("eu-west-1", "madrid")})
	if err != nil {
		t.Fatalf("NewTopology: %v", err)
	}
	err = l.CheckTopology(top)
	if err == nil || !strings.Contains(err.Error(), `group "madrid" is in region "madrid"`) {
		t.Errorf("CheckTopology: got %v, want an error naming group madrid", err)
	}
}

func TestNearestAWS(t *testing.T) {
	l := readAWS(t)
	top := awsTopology(t)
	name := func(gs []partition.GroupID) []string {
		out := make([]string, len(gs))
		for i, g := range gs {
			out[i] = top.Name(g)
		}
		return out
	}
	from, _ := top.Lookup("eu-west-1")

	got := name(l.Nearest(top, from, top.All()))
	want := []string{
		"eu-west-3", "eu-central-1", "eu-north-1", "ca-central-1", "us-east-1", "ap-south-1",
		"us-west-1", "ap-southeast-1", "sa-east-1", "ap-northeast-1", "ap-southeast-2",
	}
	if !slices.Equal(got, want) {
		t.Errorf("Nearest(eu-west-1, all) =\n %v\nwant\n %v", got, want)
	}

	sub := partition.SetOf(0, 3, 10) // us-west-1, sa-east-1, ap-northeast-1
	if got, want := name(l.Nearest(top, from, sub)), []string{"us-west-1", "sa-east-1", "ap-northeast-1"}; !slices.Equal(got, want) {
		t.Errorf("Nearest(eu-west-1, %v) = %v, want %v", sub, got, want)
	}
	if got := l.Nearest(top, from, partition.SetOf(from)); len(got) != 0 {
		t.Errorf("Nearest(eu-west-1, {eu-west-1}) = %v, want empty (from is excluded)", got)
	}
	if got := l.Nearest(top, from, 0); len(got) != 0 {
		t.Errorf("Nearest over no candidates = %v, want empty", got)
	}
}

func TestNearestTiesByRank(t *testing.T) {
	// From x: w and z tie at 5, y is nearest, v is farthest.
	regions := []string{"z", "x", "v", "w", "y"}
	rtt := [][]float64{
		{0, 5, 1, 1, 1},
		{5, 0, 9, 5, 2},
		{1, 9, 0, 1, 1},
		{1, 5, 1, 0, 1},
		{1, 2, 1, 1, 0},
	}
	l, err := partition.NewLatency(regions, rtt)
	if err != nil {
		t.Fatalf("NewLatency: %v", err)
	}
	top, err := partition.NewTopology(partition.Spec{Groups: groups(regions...)})
	if err != nil {
		t.Fatalf("NewTopology: %v", err)
	}
	got := l.Nearest(top, 1, top.All())
	want := []partition.GroupID{4, 0, 3, 2} // y, then z and w by rank, then v
	if !slices.Equal(got, want) {
		t.Errorf("Nearest(x) = %v, want %v", got, want)
	}
}

func TestValidationEdges(t *testing.T) {
	if got := partition.AllGroups(-1); got != 0 {
		t.Errorf("partition.AllGroups(-1) = %s, want {}", got)
	}
	if _, err := partition.NewLatency([]string{"a", "b"}, [][]float64{{1, -2}, {3, 4}}); err == nil {
		t.Error("NewLatency accepted a negative latency")
	}
	// Two errors in one tree: the same one is reported every time.
	spec := partition.Spec{Groups: []partition.Group{{Name: "a"}, {Name: "b"}, {Name: "c"}}, Parent: map[string]string{"x": "a", "y": "b", "b": "z"}}
	_, first := partition.NewTopology(spec)
	for range 20 {
		if _, err := partition.NewTopology(spec); err == nil || err.Error() != first.Error() {
			t.Fatalf("got %v, then %v", first, err)
		}
	}
}
