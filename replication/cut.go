package replication

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
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

// streamLayer is raft's stream layer over TCP, optionally through a
// CutSwitch and optionally over TLS (Config.RaftCut, Config.RaftTLS). The
// switch tracks the TCP connections under TLS, so that cutting closes them
// whatever state their handshake is in.
type streamLayer struct {
	net.Listener
	sw  *CutSwitch  // nil: never cut
	tls *tls.Config // nil: plaintext
	// advertise is the member's RaftAddr, which raft tells the group as
	// this replica's address: it may differ from where it listens.
	advertise net.Addr
}

// advertisedAddr is a host:port as a net.Addr, unresolved.
type advertisedAddr string

func (a advertisedAddr) Network() string { return "tcp" }
func (a advertisedAddr) String() string  { return string(a) }

// Addr implements raft.StreamLayer: the address the group knows this
// replica by.
func (l *streamLayer) Addr() net.Addr {
	if l.advertise != nil {
		return l.advertise
	}
	return l.Listener.Addr()
}

var _ raft.StreamLayer = (*streamLayer)(nil)

// listenStream listens on addr. A replica restarted in the same process may
// find the previous listener's port not yet free: it retries for a second.
func listenStream(addr string, sw *CutSwitch, cfg *tls.Config) (*streamLayer, error) {
	var err error
	for range 50 {
		var l net.Listener
		if l, err = net.Listen("tcp", addr); err == nil {
			return &streamLayer{Listener: l, sw: sw, tls: cfg}, nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil, err
}

func (l *streamLayer) track(c net.Conn) (net.Conn, error) {
	if l.sw == nil {
		return c, nil
	}
	return l.sw.track(c)
}

// Accept implements net.Listener. The TLS handshake runs on the
// connection's first read, in raft's handler, so that a slow or hostile
// peer holds up only its own connection; one that fails it (no
// certificate, another CA, a node of another group) is closed there.
func (l *streamLayer) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		c, err = l.track(c)
		if err != nil {
			continue
		}
		if l.tls != nil {
			c = tls.Server(c, l.tls)
		}
		return c, nil
	}
}

// Dial implements raft.StreamLayer.
func (l *streamLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	if l.sw != nil && l.sw.Cut() {
		return nil, errors.New("replication: cut off")
	}
	c, err := net.DialTimeout("tcp", string(addr), timeout)
	if err != nil {
		return nil, err
	}
	if c, err = l.track(c); err != nil {
		return nil, err
	}
	if l.tls == nil {
		return c, nil
	}
	host, _, err := net.SplitHostPort(string(addr))
	if err != nil {
		c.Close()
		return nil, err
	}
	cfg := l.tls.Clone()
	cfg.ServerName = host
	tc := tls.Client(c, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := tc.HandshakeContext(ctx); err != nil {
		tc.Close()
		return nil, fmt.Errorf("replication: raft TLS handshake with %s: %w", addr, err)
	}
	return tc, nil
}
