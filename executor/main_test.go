package executor

import (
	"testing"

	"go.uber.org/goleak"
)

// Pebble starts goroutines per open store: a leak means a store left open
// by an executor test.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
