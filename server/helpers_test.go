package server

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/flexkv/flexkv/internal/testaddr"
	"github.com/flexkv/flexkv/internal/testcluster"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, testcluster.RaftFutureLeaks()...)
}

// freeAddr returns a loopback address for a replica (testaddr.Server).
func freeAddr(t testing.TB) string { return testaddr.Free(t, testaddr.Server) }
