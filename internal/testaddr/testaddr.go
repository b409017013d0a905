// Package testaddr hands out loopback addresses for tests that start
// servers on fixed ports, and start them again on the same port after a
// restart.
//
// The ports come from below the kernel's ephemeral range (32768 and up on
// Linux), from which outgoing connections take their source ports. A port
// inside that range can be taken by a connection while its server is down,
// so that the server cannot bind it again; worse, a client dialling such a
// port with nothing listening can be given that very port as its source and
// connect to itself (TCP simultaneous open), and then waits on an "answer"
// that is its own request until its deadline.
//
// Each test package gets a Range of its own: packages run concurrently, and
// one must not pick a port of another's server that is down for a moment.
package testaddr

import (
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
)

// Range is a half-open range of ports [Lo, Hi), below 32768.
type Range struct{ Lo, Hi int }

// The ranges of the test packages that use this one.
var (
	Replication = Range{20000, 26000}
	Server      = Range{26000, 32000}
	Command     = Range{14000, 20000}
	Gtpcc       = Range{10000, 14000}
)

var (
	mu   sync.Mutex
	used = map[int]bool{} // handed out in this process, each at most once
)

// Free returns "127.0.0.1:PORT" with a port of r that was free a moment ago
// and was never handed out before in this process.
func Free(t testing.TB, r Range) string {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	for range 4 * (r.Hi - r.Lo) {
		port := r.Lo + rand.IntN(r.Hi-r.Lo)
		if used[port] {
			continue
		}
		addr := fmt.Sprintf("127.0.0.1:%d", port)
		l, err := net.Listen("tcp", addr)
		if err != nil {
			continue
		}
		_ = l.Close()
		used[port] = true
		return addr
	}
	t.Fatalf("testaddr: no free port in %d-%d", r.Lo, r.Hi-1)
	return ""
}
