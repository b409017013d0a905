package configs

import (
	"testing"

	"github.com/flexkv/flexkv/partition"
)

func TestAWS12Latency(t *testing.T) {
	l, err := AWS12Latency()
	if err != nil {
		t.Fatal(err)
	}
	regions := l.Regions()
	if len(regions) != 12 {
		t.Fatalf("got %d regions, want 12", len(regions))
	}
	if regions[0] != "us-west-1" || regions[11] != "ap-southeast-2" {
		t.Fatalf("regions = %v, want us-west-1 first and ap-southeast-2 last", regions)
	}
	if got, want := l.RTTMs("us-west-1", "ca-central-1"), 79.22; got != want {
		t.Fatalf("RTT us-west-1 -> ca-central-1 = %v, want %v", got, want)
	}
	for _, name := range partition.PaperOverlayNames {
		o, err := partition.PaperOverlay(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range o {
			if !l.Has(r) {
				t.Errorf("overlay %s region %q is not in the matrix", name, r)
			}
		}
	}
}
