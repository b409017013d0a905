package partition

import (
	"slices"
	"testing"
)

func aws12Regions(t *testing.T) []string {
	t.Helper()
	l, err := ReadLatencyFile("../configs/aws-12-regions-latency-ms.csv")
	if err != nil {
		t.Fatal(err)
	}
	return l.Regions()
}

func TestPaperOverlaysArePermutations(t *testing.T) {
	regions := aws12Regions(t)
	want := slices.Sorted(slices.Values(regions))
	for _, name := range PaperOverlayNames {
		t.Run(name, func(t *testing.T) {
			o, err := PaperOverlay(name)
			if err != nil {
				t.Fatal(err)
			}
			got := slices.Sorted(slices.Values(o))
			if !slices.Equal(got, want) {
				t.Fatalf("overlay %s sorted = %v, want the 12 regions %v", name, got, want)
			}
		})
	}
	// O2 is the paper's node numbering, which is the matrix's row order.
	o2, _ := PaperOverlay("O2")
	if !slices.Equal(o2, regions) {
		t.Fatalf("O2 = %v, want the matrix order %v", o2, regions)
	}
	o1, _ := PaperOverlay("O1")
	if o1[0] != "eu-north-1" || o1[11] != "ap-southeast-2" {
		t.Fatalf("O1 = %v, want eu-north-1 first and ap-southeast-2 last", o1)
	}
}

func TestPaperTrees(t *testing.T) {
	regions := aws12Regions(t)
	o1, err := PaperOverlay("O1")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		// children of the root and the tree's height
		rootChildren []string
		height       int
	}{
		{"T1", []string{"eu-west-1", "eu-central-1"}, 4},
		{"T2", []string{"eu-west-1", "eu-central-1"}, 2},
		{"T3", []string{"us-west-1", "ca-central-1", "us-east-1", "sa-east-1", "eu-west-1", "eu-central-1",
			"eu-north-1", "ap-south-1", "ap-southeast-1", "ap-northeast-1", "ap-southeast-2"}, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			parent, err := PaperTree(tc.name)
			if err != nil {
				t.Fatal(err)
			}
			for _, overlay := range [][]string{o1, regions} {
				groups := make([]Group, len(overlay))
				for i, r := range overlay {
					groups[i] = Group{Name: r}
				}
				top, err := NewTopology(Spec{Groups: groups, Parent: parent})
				if err != nil {
					t.Fatalf("NewTopology(%s): %v", tc.name, err)
				}
				root := top.TreeLCA(top.All())
				if got := top.Name(root); got != "eu-west-3" {
					t.Fatalf("root = %s, want eu-west-3", got)
				}
				if top.Subtree(root) != top.All() {
					t.Fatalf("root subtree = %s, want every group", top.Subtree(root))
				}
				var gotChildren []string
				for _, c := range top.Children(root) {
					gotChildren = append(gotChildren, top.Name(c))
				}
				if !slices.Equal(slices.Sorted(slices.Values(gotChildren)), slices.Sorted(slices.Values(tc.rootChildren))) {
					t.Fatalf("root children = %v, want %v", gotChildren, tc.rootChildren)
				}
				height := 0
				for g := range top.Len() {
					height = max(height, top.Depth(GroupID(g)))
				}
				if height != tc.height {
					t.Fatalf("height = %d, want %d", height, tc.height)
				}
			}
		})
	}
	// Spot checks of T1 against the README's listing.
	t1, _ := PaperTree("T1")
	for child, parent := range map[string]string{"ap-southeast-2": "ap-northeast-1", "sa-east-1": "us-east-1", "us-west-1": "ca-central-1"} {
		if t1[child] != parent {
			t.Errorf("T1 parent of %s = %q, want %q", child, t1[child], parent)
		}
	}
}

func TestPaperUnknownNames(t *testing.T) {
	if _, err := PaperOverlay("O3"); err == nil {
		t.Fatal("PaperOverlay(O3): got nil error, want an error")
	}
	if _, err := PaperTree("T4"); err == nil {
		t.Fatal("PaperTree(T4): got nil error, want an error")
	}
}

func TestPaperReturnsCopies(t *testing.T) {
	o, _ := PaperOverlay("O1")
	o[0] = "x"
	tr, _ := PaperTree("T1")
	tr["eu-west-1"] = "x"
	o2, _ := PaperOverlay("O1")
	tr2, _ := PaperTree("T1")
	if o2[0] != "eu-north-1" || tr2["eu-west-1"] != "eu-west-3" {
		t.Fatal("mutating a returned overlay or tree changed the package's copy")
	}
}
