//go:build invariants

package invariants

import "testing"

func TestEnabledWithTheTag(t *testing.T) {
	if !Enabled {
		t.Error("Enabled is false in a build with the invariants tag")
	}
}
