package loadgen

import (
	"testing"

	"go.uber.org/goleak"
)

// A run's workers end with it: a leak means Run returned with one alive.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
