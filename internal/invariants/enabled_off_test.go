//go:build !invariants

package invariants

import "testing"

func TestEnabledWithoutTheTag(t *testing.T) {
	if Enabled {
		t.Error("Enabled is true in a build without the invariants tag")
	}
}
