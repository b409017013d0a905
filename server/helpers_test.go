package server

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/flexkv/flexkv/internal/testaddr"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// raft drops the futures of entries still queued at shutdown; the
		// goroutine waiting on one ends with the process (replication.await).
		goleak.IgnoreAnyFunction("github.com/flexkv/flexkv/replication.(*Replica).await.func1"),
	)
}

// freeAddr returns a loopback address for a replica (testaddr.Server).
func freeAddr(t testing.TB) string { return testaddr.Free(t, testaddr.Server) }
