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
//
// On Linux, Free checks that its range lies outside the kernel's ephemeral
// range (/proc/sys/net/ipv4/ip_local_port_range), and fails the test with
// what to do if it does not: on such a machine the ports are no safer than
// port 0.
package testaddr

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"testing"
	"time"
)

// Range is a half-open range of ports [Lo, Hi), below 32768.
type Range struct{ Lo, Hi int }

// The ranges of the test packages that use this one.
var (
	Replication = Range{20000, 26000}
	Server      = Range{26000, 28000}
	Cluster     = Range{28000, 32000}
	Command     = Range{14000, 20000}
	Gtpcc       = Range{10000, 14000}
	Transport   = Range{8000, 10000}
	Client      = Range{32000, 32768}
	Backup      = Range{4000, 6000}
	Deploy      = Range{6000, 7000}
)

// ephemeralRangeFile holds Linux's ephemeral port range: "lo\thi\n", both
// inclusive.
const ephemeralRangeFile = "/proc/sys/net/ipv4/ip_local_port_range"

// ephemeral is the kernel's ephemeral port range as a Range, read once per
// process; ok is false where it cannot be read (not Linux), and then no
// check is made.
var ephemeral = sync.OnceValues(func() (Range, bool) {
	b, err := os.ReadFile(ephemeralRangeFile)
	if err != nil {
		return Range{}, false
	}
	var lo, hi int
	if _, err := fmt.Sscan(string(b), &lo, &hi); err != nil || lo > hi {
		return Range{}, false
	}
	return Range{lo, hi + 1}, true
})

// overlaps reports whether r and o share a port.
func (r Range) overlaps(o Range) bool { return r.Lo < o.Hi && o.Lo < r.Hi }

var (
	mu   sync.Mutex
	used = map[int]bool{} // handed out in this process, each at most once
)

// Free returns "127.0.0.1:PORT" with a port of r that was free a moment ago
// and was never handed out before in this process.
func Free(t testing.TB, r Range) string {
	t.Helper()
	addr, err := FreeAddr(r)
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// FreeAddr is Free for code without a testing.TB (an Example): an error
// where Free fails the test.
func FreeAddr(r Range) (string, error) {
	if eph, ok := ephemeral(); ok && r.overlaps(eph) {
		return "", fmt.Errorf("testaddr: the test ports %d-%d overlap the kernel's ephemeral port range %d-%d (%s), "+
			"from which outgoing connections take their source ports, so that a restarted test server can find its port taken: "+
			"run the tests on a machine whose ephemeral range starts above 32767, or set it so: "+
			"sysctl -w net.ipv4.ip_local_port_range=\"32768 60999\"",
			r.Lo, r.Hi-1, eph.Lo, eph.Hi-1, ephemeralRangeFile)
	}
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
		return addr, nil
	}
	return "", fmt.Errorf("testaddr: no free port in %d-%d", r.Lo, r.Hi-1)
}

// Refused returns "127.0.0.1:PORT" for a port below 1024 where nothing
// listens (a test's machine serves nothing there), for a test that needs an
// address that refuses connections: unlike a port freed a moment ago, no
// other test's server can take it meanwhile. It fails t if something
// accepts a connection there.
func Refused(t testing.TB, port int) string {
	t.Helper()
	addr, err := RefusedAddr(port)
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// RefusedAddr is Refused for code without a testing.TB: an error if port
// is not below 1024 or something accepts a connection there.
func RefusedAddr(port int) (string, error) {
	if port < 1 || port > 1023 {
		return "", fmt.Errorf("testaddr: refused port %d, want 1..1023", port)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	if c, err := net.DialTimeout("tcp", addr, 5*time.Second); err == nil {
		_ = c.Close()
		return "", fmt.Errorf("testaddr: something listens on %s: the test needs an address that refuses connections", addr)
	}
	return addr, nil
}
