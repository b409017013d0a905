package configs

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/flexkv/flexkv/multicast/protocol"
	"github.com/flexkv/flexkv/partition"
)

// scaleRegions are the regions of each scale/scale-N.yaml but the 24-group
// one (every region twice), in the latency matrix's row order: each size
// holds the smaller ones' regions.
var scaleRegions = map[int][]string{
	3:  {"eu-west-1", "eu-west-3", "eu-central-1"},
	6:  {"ca-central-1", "us-east-1", "eu-west-1", "eu-west-3", "eu-central-1", "eu-north-1"},
	12: nil, // every region of the matrix
	24: nil, // every region twice: <region>a and <region>b
}

// scaleGroup is a group a scale configuration must have, in its order.
type scaleGroup struct{ name, region string }

// wantScaleGroups returns the groups of scale-N.yaml, in file order, from
// the matrix's regions.
func wantScaleGroups(t *testing.T, n int, regions []string) []scaleGroup {
	t.Helper()
	var out []scaleGroup
	switch n {
	case 12:
		for _, r := range regions {
			out = append(out, scaleGroup{r, r})
		}
	case 24:
		for _, r := range regions {
			out = append(out, scaleGroup{r + "a", r}, scaleGroup{r + "b", r})
		}
	default:
		for _, r := range regions {
			if slices.Contains(scaleRegions[n], r) {
				out = append(out, scaleGroup{r, r})
			}
		}
	}
	if len(out) != n {
		t.Fatalf("scale-%d: %d groups expected from the matrix, want %d", n, len(out), n)
	}
	return out
}

// wantScaleOrder returns the overlay and tree of scale-N.yaml: the paper's
// O1 and T1 restricted to its regions; at 24 groups each region's two
// groups side by side in O1's order, T1 on the a groups and each b group
// below its a group.
func wantScaleOrder(t *testing.T, n int, groups []scaleGroup) (overlay []string, tree map[string]string) {
	t.Helper()
	o1, err := partition.PaperOverlay("O1")
	if err != nil {
		t.Fatal(err)
	}
	t1, err := partition.PaperTree("T1")
	if err != nil {
		t.Fatal(err)
	}
	tree = map[string]string{}
	if n == 24 {
		for _, r := range o1 {
			overlay = append(overlay, r+"a", r+"b")
			tree[r+"b"] = r + "a"
			if p, ok := t1[r]; ok {
				tree[r+"a"] = p + "a"
			}
		}
		return overlay, tree
	}
	in := func(r string) bool {
		return slices.ContainsFunc(groups, func(g scaleGroup) bool { return g.name == r })
	}
	for _, r := range o1 {
		if in(r) {
			overlay = append(overlay, r)
		}
	}
	for c, p := range t1 {
		if in(c) {
			if !in(p) {
				t.Fatalf("scale-%d: T1's parent %s of %s is not a group: the tree does not restrict", n, p, c)
			}
			tree[c] = p
		}
	}
	return overlay, tree
}

// referenceAddrs returns every address of local.yaml and aws-12.yaml (raft,
// gRPC, peer, HTTP), which a scale configuration must leave free.
func referenceAddrs(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for name, text := range map[string][]byte{"local.yaml": LocalYAML(), "aws-12.yaml": AWS12YAML()} {
		for _, g := range decode(t, text).Groups {
			for _, r := range g.Replicas {
				for _, a := range []string{r.Raft, r.GRPC, r.PeerAddr(), r.HTTP} {
					if a != "" {
						out[a] = name
					}
				}
			}
		}
	}
	return out
}

// TestScaleYAML: scale/scale-{3,6,12,24}.yaml, the configurations of the
// benchmark of cost as the cluster grows (scripts/scale-bench.sh), validate;
// each has N groups of one replica on the matrix's regions (nested from 3
// up), O1 and T1 restricted to them, one warehouse per group, and ports of
// their own range, unique and clear of local.yaml and aws-12.yaml.
func TestScaleYAML(t *testing.T) {
	l, err := AWS12Latency()
	if err != nil {
		t.Fatal(err)
	}
	regions := l.Regions()
	taken := referenceAddrs(t)
	sizes := slices.Sorted(maps.Keys(scaleRegions))
	for i, n := range sizes {
		if i > 0 && scaleRegions[n] != nil {
			for _, r := range scaleRegions[sizes[i-1]] {
				if !slices.Contains(scaleRegions[n], r) {
					t.Errorf("scale-%d lacks region %s of scale-%d", n, r, sizes[i-1])
				}
			}
		}
		t.Run(fmt.Sprint(n), func(t *testing.T) { checkScaleYAML(t, n, regions, taken) })
	}
}

func checkScaleYAML(t *testing.T, n int, regions []string, taken map[string]string) {
	path := filepath.Join("scale", fmt.Sprintf("scale-%d.yaml", n))
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	c := decode(t, b)
	if err := protocol.Validate(c); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	_, top, pm, err := protocol.Build(c)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.LoadLatency("scale"); err != nil || c.Latency == "" {
		t.Errorf("latency %q: %v; want the matrix beside configs/", c.Latency, err)
	}
	groups := wantScaleGroups(t, n, regions)
	if len(c.Groups) != n {
		t.Fatalf("%d groups, want %d", len(c.Groups), n)
	}
	seen := map[string]bool{}
	wantParts := []string{"item item/ item0 replicated"}
	for i, g := range c.Groups {
		if g.Name != groups[i].name || g.Region != groups[i].region {
			t.Errorf("groups[%d] = %s in %s, want %s in %s", i, g.Name, g.Region, groups[i].name, groups[i].region)
		}
		if len(g.Replicas) != 1 {
			t.Fatalf("group %s has %d replicas, want 1", g.Name, len(g.Replicas))
		}
		r := g.Replicas[0]
		want := partition.ReplicaConfig{
			ID:   fmt.Sprintf("r%d", i+1),
			Raft: fmt.Sprintf("127.0.0.1:%d", 17101+i),
			GRPC: fmt.Sprintf("127.0.0.1:%d", 17201+i),
		}
		if r != want {
			t.Errorf("group %s replica %+v, want %+v", g.Name, r, want)
		}
		for _, a := range []string{r.Raft, r.GRPC, r.PeerAddr()} {
			if seen[a] {
				t.Errorf("address %s used twice", a)
			}
			seen[a] = true
			if f, ok := taken[a]; ok {
				t.Errorf("address %s of %s is also in %s", a, g.Name, f)
			}
		}
		wantParts = append(wantParts, fmt.Sprintf("w%04d w/%04d/ w/%04d/ %s", i+1, i+1, i+2, g.Name))
	}
	if got := owners(top, pm); !slices.Equal(got, wantParts) {
		t.Errorf("partitions:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(wantParts, "\n"))
	}
	overlay, tree := wantScaleOrder(t, n, groups)
	if !slices.Equal(c.Overlay, overlay) {
		t.Errorf("overlay %v, want %v", c.Overlay, overlay)
	}
	if !maps.Equal(c.Tree, tree) {
		t.Errorf("tree %v, want %v", c.Tree, tree)
	}
}
