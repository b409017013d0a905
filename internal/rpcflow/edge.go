package rpcflow

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
)

// Edge bounds what the callers of one gRPC server (one port) can make it
// hold, whatever they send.
//
// gRPC alone bounds a call's message (MessageBytesMax) and the calls of a
// connection (StreamsMax), but not what a connection holds: it reads each
// call's message as it arrives, whether or not the rest follows, and
// refills the connection's window as data arrives (so that a slow call
// does not starve the others). A caller that opens StreamsMax calls, each
// declaring a large message and sending most of it, would make the server
// hold StreamsMax times MessageBytesMax, for as long as it likes, and as
// many times over as it opens connections.
//
// So a Guard watches the HTTP/2 frames of every connection (below gRPC,
// above TLS) and counts the request bytes in flight: the DATA a caller sent
// on a call it has not finished sending, nor either end reset or ended.
// A connection whose bytes in flight would pass ConnBytesMax is closed
// before gRPC reads the frame that would pass it; when the port's would
// pass BytesMax, the connection that holds the most is closed. A call is
// refused at its start, before its body, with RESOURCE_EXHAUSTED, while
// its connection holds half of ConnBytesMax: a caller that sends large
// messages on many calls at once meets back-pressure before the bound.
// Closing is the only way to take back what a connection holds: gRPC
// keeps every call's partial message until the call ends, and a caller
// that stops sending never ends it.
type Edge struct {
	// Name names the port in logs and errors ("client API", "peer").
	Name string
	// StreamsMax bounds the calls in flight on one connection
	// (grpc.MaxConcurrentStreams); MessageBytesMax, a request message
	// (grpc.MaxRecvMsgSize).
	StreamsMax      uint32
	MessageBytesMax int
	// StreamWindow and ConnWindow are the fixed flow-control windows of a
	// call and of a connection (see the package comment). StreamWindow
	// should hold a message of MessageBytesMax and its 5-byte prefix.
	StreamWindow int32
	ConnWindow   int32
	// ConnBytesMax bounds the request bytes in flight on one connection;
	// BytesMax, on all the connections of the port.
	ConnBytesMax int64
	BytesMax     int64
	// Tap, when set, runs at the start of every call the guard lets
	// start, before its body is read: an error refuses the call with its
	// gRPC status (PermissionDenied if it carries none).
	Tap func(ctx context.Context, info *tap.Info) (context.Context, error)
	// Logger receives a warning for each connection closed (nil: none).
	Logger *slog.Logger
}

// Validate checks e.
func (e Edge) Validate() error {
	switch {
	case e.StreamsMax < 1:
		return fmt.Errorf("rpcflow: %s: streams max %d, want at least 1", e.Name, e.StreamsMax)
	case e.MessageBytesMax < 1:
		return fmt.Errorf("rpcflow: %s: message bytes max %d, want at least 1", e.Name, e.MessageBytesMax)
	case e.StreamWindow < windowMin || e.ConnWindow < windowMin:
		return fmt.Errorf("rpcflow: %s: windows %d and %d, want at least %d", e.Name, e.StreamWindow, e.ConnWindow, windowMin)
	case e.ConnBytesMax < int64(e.MessageBytesMax)+messagePrefix:
		return fmt.Errorf("rpcflow: %s: connection bytes max %d below one message (%d)", e.Name, e.ConnBytesMax, e.MessageBytesMax+messagePrefix)
	case e.BytesMax < e.ConnBytesMax:
		return fmt.Errorf("rpcflow: %s: bytes max %d below connection bytes max %d", e.Name, e.BytesMax, e.ConnBytesMax)
	}
	return nil
}

const (
	// windowMin is HTTP/2's initial window, below which gRPC ignores a
	// window setting.
	windowMin = 64 << 10
	// messagePrefix is the gRPC framing of a message: a flag byte and a
	// 4-byte length.
	messagePrefix = 5
	// streamsSlack is how many calls past StreamsMax a connection may have
	// opened that gRPC has not refused yet (it refuses them as it reads
	// their headers, and a client may open up to 100 before it learns the
	// bound); a connection with more is closed.
	streamsSlack = 256
)

// WindowFor returns the smallest window, a multiple of 64 KiB, that holds
// a message of n bytes and its prefix: such a message needs no window
// update, a round trip, in the middle.
func WindowFor(n int) int32 {
	w := (n + messagePrefix + windowMin - 1) / windowMin * windowMin
	return int32(w)
}

// Guard enforces an Edge on the connections of one gRPC server.
type Guard struct {
	e Edge

	mu     sync.Mutex
	conns  map[*guardConn]struct{}
	bytes  int64 // in flight on all connections
	peak   int64 // the most bytes ever in flight
	closed int64 // connections closed for their bytes
	refuse int64 // calls refused at their start for their connection's bytes
}

// NewGuard returns a guard of e, which must be valid.
func NewGuard(e Edge) (*Guard, error) {
	if err := e.Validate(); err != nil {
		return nil, err
	}
	return &Guard{e: e, conns: make(map[*guardConn]struct{})}, nil
}

// ServerOptions returns the options of a gRPC server that enforce the
// guard's Edge, serving with creds (TLS, or insecure). A server takes
// them once: gRPC allows one tap.
func (g *Guard) ServerOptions(creds credentials.TransportCredentials) []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.Creds(guardCreds{TransportCredentials: creds, g: g}),
		grpc.MaxConcurrentStreams(g.e.StreamsMax),
		grpc.MaxRecvMsgSize(g.e.MessageBytesMax),
		grpc.StaticStreamWindowSize(g.e.StreamWindow),
		grpc.StaticConnWindowSize(g.e.ConnWindow),
		grpc.InTapHandle(g.tap),
	}
}

// GuardStats counts what a guard did.
type GuardStats struct {
	Bytes   int64 // request bytes in flight now, on all connections
	Peak    int64 // the most request bytes ever in flight
	Conns   int   // connections open
	Closed  int64 // connections closed for their bytes in flight
	Refused int64 // calls refused at their start for their connection's bytes
}

// Stats returns the guard's counters.
func (g *Guard) Stats() GuardStats {
	g.mu.Lock()
	defer g.mu.Unlock()
	return GuardStats{Bytes: g.bytes, Peak: g.peak, Conns: len(g.conns), Closed: g.closed, Refused: g.refuse}
}

// tap refuses a call whose connection holds half its bound, then runs the
// Edge's own tap.
func (g *Guard) tap(ctx context.Context, info *tap.Info) (context.Context, error) {
	if p, ok := peer.FromContext(ctx); ok {
		if c, ok := p.Addr.(connAddr); ok {
			g.mu.Lock()
			held := c.c.bytes
			over := held >= g.e.ConnBytesMax/2
			if over {
				g.refuse++
			}
			g.mu.Unlock()
			if over {
				return nil, status.Errorf(codes.ResourceExhausted, "rpcflow: %s: the connection holds %d request bytes in flight, half its bound of %d: retry later", g.e.Name, held, g.e.ConnBytesMax)
			}
		}
	}
	if g.e.Tap != nil {
		return g.e.Tap(ctx, info)
	}
	return ctx, nil
}

// guardCreds wraps a server's transport credentials: every connection they
// hand gRPC is a guardConn.
type guardCreds struct {
	credentials.TransportCredentials
	g *Guard
}

func (c guardCreds) ServerHandshake(raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	conn, info, err := c.TransportCredentials.ServerHandshake(raw)
	if err != nil {
		return nil, nil, err
	}
	gc := &guardConn{Conn: conn, g: c.g, streams: make(map[uint32]int64), in: frameReader{preface: len(clientPreface)}}
	gc.addr = connAddr{Addr: conn.RemoteAddr(), c: gc}
	c.g.mu.Lock()
	c.g.conns[gc] = struct{}{}
	c.g.mu.Unlock()
	return gc, info, nil
}

func (c guardCreds) Clone() credentials.TransportCredentials {
	return guardCreds{TransportCredentials: c.TransportCredentials.Clone(), g: c.g}
}

// connAddr is a guarded connection's remote address, which gRPC passes to
// the tap (peer.Peer.Addr): it leads the tap to the connection.
type connAddr struct {
	net.Addr
	c *guardConn
}

// clientPreface is what an HTTP/2 client sends before its first frame.
const clientPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// guardConn counts the request bytes in flight on one connection. Its
// fields but Conn, g and addr are the guard's, under g.mu, except the two
// frame readers: in is Read's, out is Write's.
type guardConn struct {
	net.Conn
	g    *Guard
	addr connAddr

	in, out frameReader
	outMu   sync.Mutex       // out's: gRPC writes from one goroutine at a time, but several in turn
	streams map[uint32]int64 // calls the client is sending: their bytes so far
	bytes   int64            // their sum
	dead    error            // why the guard closed the connection
	gone    bool             // closed, and out of the guard's count
	// victims are other connections the guard chose to close for the
	// port's bound while reading this one: Read closes them once out of
	// g.mu (closing a TLS connection may wait for its writer). Only this
	// connection's Read touches them (fromClient runs inside its scan), so
	// they need no lock.
	victims []net.Conn
}

func (c *guardConn) RemoteAddr() net.Addr { return c.addr }

var errClosedByGuard = errors.New("rpcflow: connection closed")

func (c *guardConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		derr := c.in.scan(b[:n], c.fromClient)
		for _, v := range c.victims {
			_ = v.Close() // its reader returns, and gRPC drops its calls
		}
		clear(c.victims)
		c.victims = c.victims[:0]
		if derr != nil {
			_ = c.Close()
			return 0, derr
		}
	}
	return n, err
}

func (c *guardConn) Write(b []byte) (int, error) {
	// What the server sends is scanned first: it may end calls that the
	// bytes it answers with free. An error scanning it only means the
	// guard closed the connection, which the write then finds.
	c.outMu.Lock()
	_ = c.out.scan(b, c.fromServer)
	c.outMu.Unlock()
	return c.Conn.Write(b)
}

func (c *guardConn) Close() error {
	g := c.g
	g.mu.Lock()
	if !c.gone {
		c.gone = true
		delete(g.conns, c)
		g.bytes -= c.bytes
		c.bytes = 0
		clear(c.streams)
	}
	g.mu.Unlock()
	return c.Conn.Close()
}

// HTTP/2 frames the guard reads (RFC 9113, section 6).
const (
	frameData     = 0x0
	frameHeaders  = 0x1
	frameRSTStrm  = 0x3
	flagEndStream = 0x1
	frameHeader   = 9
)

// fromClient accounts one frame the client sent, at its header, before
// gRPC reads its payload. A non-nil error closes the connection.
func (c *guardConn) fromClient(typ, flags byte, stream uint32, length uint32) error {
	g := c.g
	g.mu.Lock()
	defer g.mu.Unlock()
	if c.dead != nil {
		return c.dead
	}
	if c.gone {
		return errClosedByGuard
	}
	switch typ {
	case frameHeaders:
		if _, ok := c.streams[stream]; !ok && flags&flagEndStream == 0 {
			if len(c.streams) >= int(g.e.StreamsMax)+streamsSlack {
				return c.kill(fmt.Errorf("rpcflow: %s: connection from %s closed: %d calls open, at most %d", g.e.Name, c.Conn.RemoteAddr(), len(c.streams), g.e.StreamsMax))
			}
			c.streams[stream] = 0
			return nil
		}
	case frameData:
		held, ok := c.streams[stream]
		if !ok {
			return nil // a call not open: gRPC drops what it carries
		}
		n := int64(length)
		if c.bytes+n > g.e.ConnBytesMax {
			return c.kill(fmt.Errorf("rpcflow: %s: connection from %s closed: %d request bytes in flight, at most %d", g.e.Name, c.Conn.RemoteAddr(), c.bytes+n, g.e.ConnBytesMax))
		}
		if g.bytes+n > g.e.BytesMax {
			if big := g.largest(); big != c && big.bytes > c.bytes+n {
				// big is closed; the error is the one its own reads return.
				_ = big.kill(fmt.Errorf("rpcflow: %s: connection from %s closed: the port holds %d request bytes in flight, at most %d, this connection the most (%d)", g.e.Name, big.Conn.RemoteAddr(), g.bytes+n, g.e.BytesMax, big.bytes))
				c.victims = append(c.victims, big.Conn)
			} else {
				return c.kill(fmt.Errorf("rpcflow: %s: connection from %s closed: the port holds %d request bytes in flight, at most %d, this connection the most (%d)", g.e.Name, c.Conn.RemoteAddr(), g.bytes+n, g.e.BytesMax, c.bytes+n))
			}
		}
		c.streams[stream] = held + n
		c.bytes += n
		g.bytes += n
		g.peak = max(g.peak, g.bytes)
	case frameRSTStrm:
		c.end(stream)
		return nil
	default:
		return nil
	}
	if flags&flagEndStream != 0 {
		c.end(stream)
	}
	return nil
}

// fromServer accounts one frame the server sent: its end of a call, or a
// reset, ends the call's bytes in flight.
func (c *guardConn) fromServer(typ, flags byte, stream uint32, _ uint32) error {
	if typ == frameRSTStrm || (typ == frameHeaders || typ == frameData) && flags&flagEndStream != 0 {
		c.g.mu.Lock()
		c.end(stream)
		c.g.mu.Unlock()
	}
	return nil
}

// end forgets a call: the client finished sending it, or an end reset or
// ended it. Called with g.mu held.
func (c *guardConn) end(stream uint32) {
	if held, ok := c.streams[stream]; ok {
		delete(c.streams, stream)
		c.bytes -= held
		c.g.bytes -= held
	}
}

// largest returns the connection with the most bytes in flight. Called
// with g.mu held.
func (g *Guard) largest() *guardConn {
	var big *guardConn
	//flexkv:unordered the maximum does not depend on the order (ties: any).
	for c := range g.conns {
		if big == nil || c.bytes > big.bytes {
			big = c
		}
	}
	return big
}

// kill marks c closed by the guard for err, takes its bytes out of the
// count and logs it; c's next Read returns err. Called with g.mu held.
func (c *guardConn) kill(err error) error {
	g := c.g
	c.dead = err
	c.gone = true
	delete(g.conns, c)
	g.bytes -= c.bytes
	c.bytes = 0
	clear(c.streams)
	g.closed++
	if g.e.Logger != nil {
		g.e.Logger.Warn("connection closed: over the bound on request bytes in flight", "port", g.e.Name, "err", err)
	}
	return err
}

// frameReader follows the HTTP/2 frames of one direction of a connection
// across the chunks it is given, calling back at each frame's header
// without keeping any payload.
type frameReader struct {
	preface int // bytes of the client preface still to skip
	head    [frameHeader]byte
	headLen int    // bytes of head gathered
	skip    uint32 // payload bytes of the current frame still to pass
}

// scan reads b, the next bytes of the connection, calling frame with the
// header of every frame that starts in it; it stops at frame's first
// error.
func (r *frameReader) scan(b []byte, frame func(typ, flags byte, stream, length uint32) error) error {
	for len(b) > 0 {
		switch {
		case r.preface > 0:
			n := min(r.preface, len(b))
			r.preface -= n
			b = b[n:]
		case r.skip > 0:
			n := min(int(r.skip), len(b))
			r.skip -= uint32(n)
			b = b[n:]
		default:
			n := copy(r.head[r.headLen:], b)
			r.headLen += n
			b = b[n:]
			if r.headLen < frameHeader {
				return nil
			}
			r.headLen = 0
			h := r.head
			length := uint32(h[0])<<16 | uint32(h[1])<<8 | uint32(h[2])
			stream := (uint32(h[5])<<24 | uint32(h[6])<<16 | uint32(h[7])<<8 | uint32(h[8])) & (1<<31 - 1)
			r.skip = length
			if err := frame(h[3], h[4], stream, length); err != nil {
				return err
			}
		}
	}
	return nil
}
