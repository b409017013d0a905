package replication

import (
	"errors"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// CutLayer is raft's stream layer over TCP with a switch that cuts the
// replica off from its group (Config.RaftLayer), for tests and chaos runs:
// while cut, it refuses to dial, closes what it accepts, and the
// connections it had are closed.
type CutLayer struct {
	net.Listener
	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]struct{}
}

var _ raft.StreamLayer = (*CutLayer)(nil)

// ListenCut listens on addr. A replica restarted in the same process may
// find the previous listener's port not yet free: it retries for a second.
func ListenCut(addr string) (*CutLayer, error) {
	var err error
	for range 50 {
		var l net.Listener
		if l, err = net.Listen("tcp", addr); err == nil {
			return &CutLayer{Listener: l, conns: make(map[net.Conn]struct{})}, nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil, err
}

// trackedConn forgets itself when closed, so that a long run does not
// accumulate dead connections.
type trackedConn struct {
	net.Conn
	l *CutLayer
}

func (c trackedConn) Close() error {
	c.l.mu.Lock()
	delete(c.l.conns, c.Conn)
	c.l.mu.Unlock()
	return c.Conn.Close()
}

func (l *CutLayer) track(c net.Conn) (net.Conn, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cut {
		c.Close()
		return nil, errors.New("replication: cut off")
	}
	l.conns[c] = struct{}{}
	return trackedConn{Conn: c, l: l}, nil
}

// Accept implements net.Listener.
func (l *CutLayer) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if c, err := l.track(c); err == nil {
			return c, nil
		}
	}
}

// Dial implements raft.StreamLayer.
func (l *CutLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	l.mu.Lock()
	cut := l.cut
	l.mu.Unlock()
	if cut {
		return nil, errors.New("replication: cut off")
	}
	c, err := net.DialTimeout("tcp", string(addr), timeout)
	if err != nil {
		return nil, err
	}
	return l.track(c)
}

// SetCut cuts the replica off (true) or heals it (false).
func (l *CutLayer) SetCut(cut bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cut = cut
	if cut {
		for c := range l.conns { //flexkv:unordered closing every connection is order-free
			c.Close()
		}
		clear(l.conns)
	}
}
