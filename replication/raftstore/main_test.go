package raftstore

import (
	"testing"

	"go.uber.org/goleak"
)

// Pebble and raft start goroutines; every test must leave none behind.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
