package replication

import (
	"errors"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// CutSwitch cuts a replica off from the rest of its group and heals it, for
// tests and chaos runs (Config.RaftCut): while cut, the replica's raft
// transport refuses to dial, closes what it accepts, and the connections it
// had are closed. It keeps raft's types inside this package: the rigs that
// flip it import no raft. Its zero value is healed.
type CutSwitch struct {
	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]struct{}
}

// SetCut cuts the replica off (true) or heals it (false).
func (s *CutSwitch) SetCut(cut bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cut = cut
	if cut {
		for c := range s.conns { //flexkv:unordered closing every connection is order-free
			c.Close()
		}
		clear(s.conns)
	}
}

// Cut reports whether the replica is cut off.
func (s *CutSwitch) Cut() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cut
}

func (s *CutSwitch) track(c net.Conn) (net.Conn, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cut {
		c.Close()
		return nil, errors.New("replication: cut off")
	}
	if s.conns == nil {
		s.conns = make(map[net.Conn]struct{})
	}
	s.conns[c] = struct{}{}
	return trackedConn{Conn: c, s: s}, nil
}

// trackedConn forgets itself when closed, so that a long run does not
// accumulate dead connections.
type trackedConn struct {
	net.Conn
	s *CutSwitch
}

func (c trackedConn) Close() error {
	c.s.mu.Lock()
	delete(c.s.conns, c.Conn)
	c.s.mu.Unlock()
	return c.Conn.Close()
}

// cutLayer is raft's stream layer over TCP, through a CutSwitch.
type cutLayer struct {
	net.Listener
	sw *CutSwitch
}

var _ raft.StreamLayer = (*cutLayer)(nil)

// listenCut listens on addr. A replica restarted in the same process may
// find the previous listener's port not yet free: it retries for a second.
func listenCut(addr string, sw *CutSwitch) (*cutLayer, error) {
	var err error
	for range 50 {
		var l net.Listener
		if l, err = net.Listen("tcp", addr); err == nil {
			return &cutLayer{Listener: l, sw: sw}, nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil, err
}

// Accept implements net.Listener.
func (l *cutLayer) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if c, err := l.sw.track(c); err == nil {
			return c, nil
		}
	}
}

// Dial implements raft.StreamLayer.
func (l *cutLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	if l.sw.Cut() {
		return nil, errors.New("replication: cut off")
	}
	c, err := net.DialTimeout("tcp", string(addr), timeout)
	if err != nil {
		return nil, err
	}
	return l.sw.track(c)
}
