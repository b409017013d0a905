//go:build !linux

package transport

import (
	"syscall"
	"time"
)

// userTimeoutControl is Linux's only: elsewhere the kernel's own
// retransmission timeouts apply.
func userTimeoutControl(time.Duration) func(network, address string, c syscall.RawConn) error {
	return nil
}
