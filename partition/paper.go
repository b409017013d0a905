package partition

import (
	"fmt"
	"maps"
	"slices"
)

// The overlays and trees of the FlexCast paper's evaluation over the 12 AWS
// regions of configs/aws-12-regions-latency-ms.csv (shared/data/README.md).
// Overlays list regions lowest rank first; trees map a child to its parent,
// and all three are rooted at eu-west-3.
var (
	paperOverlays = map[string][]string{
		"O1": {
			"eu-north-1", "eu-central-1", "eu-west-3", "eu-west-1", "ca-central-1", "us-west-1",
			"us-east-1", "sa-east-1", "ap-south-1", "ap-southeast-1", "ap-northeast-1", "ap-southeast-2",
		},
		// O2 is the paper's node numbering 1..12, which is also the row order
		// of the latency matrix.
		"O2": {
			"us-west-1", "ca-central-1", "us-east-1", "sa-east-1", "eu-west-1", "eu-west-3",
			"eu-central-1", "eu-north-1", "ap-south-1", "ap-southeast-1", "ap-northeast-1", "ap-southeast-2",
		},
	}
	paperTrees = map[string]map[string]string{
		"T1": {
			"eu-west-1":      "eu-west-3",
			"eu-central-1":   "eu-west-3",
			"ca-central-1":   "eu-west-1",
			"us-east-1":      "eu-west-1",
			"us-west-1":      "ca-central-1",
			"sa-east-1":      "us-east-1",
			"eu-north-1":     "eu-central-1",
			"ap-south-1":     "eu-central-1",
			"ap-northeast-1": "ap-south-1",
			"ap-southeast-1": "ap-south-1",
			"ap-southeast-2": "ap-northeast-1",
		},
		"T2": {
			"eu-west-1":      "eu-west-3",
			"eu-central-1":   "eu-west-3",
			"us-west-1":      "eu-west-1",
			"ca-central-1":   "eu-west-1",
			"us-east-1":      "eu-west-1",
			"sa-east-1":      "eu-west-1",
			"eu-north-1":     "eu-central-1",
			"ap-south-1":     "eu-central-1",
			"ap-southeast-1": "eu-central-1",
			"ap-northeast-1": "eu-central-1",
			"ap-southeast-2": "eu-central-1",
		},
		"T3": {
			"us-west-1":      "eu-west-3",
			"ca-central-1":   "eu-west-3",
			"us-east-1":      "eu-west-3",
			"sa-east-1":      "eu-west-3",
			"eu-west-1":      "eu-west-3",
			"eu-central-1":   "eu-west-3",
			"eu-north-1":     "eu-west-3",
			"ap-south-1":     "eu-west-3",
			"ap-southeast-1": "eu-west-3",
			"ap-northeast-1": "eu-west-3",
			"ap-southeast-2": "eu-west-3",
		},
	}
)

// PaperOverlayNames and PaperTreeNames list the names PaperOverlay and
// PaperTree accept.
var (
	PaperOverlayNames = []string{"O1", "O2"}
	PaperTreeNames    = []string{"T1", "T2", "T3"}
)

// PaperOverlay returns the regions of the paper's overlay name ("O1" or
// "O2"), lowest FlexCast rank first. The caller owns the slice.
func PaperOverlay(name string) ([]string, error) {
	o, ok := paperOverlays[name]
	if !ok {
		return nil, fmt.Errorf("partition: unknown overlay %q (want one of %v)", name, PaperOverlayNames)
	}
	return slices.Clone(o), nil
}

// PaperTree returns the paper's tree name ("T1", "T2" or "T3") as a map from
// each region to its parent, ready for Spec.Parent. The caller owns the map.
func PaperTree(name string) (map[string]string, error) {
	t, ok := paperTrees[name]
	if !ok {
		return nil, fmt.Errorf("partition: unknown tree %q (want one of %v)", name, PaperTreeNames)
	}
	return maps.Clone(t), nil
}
