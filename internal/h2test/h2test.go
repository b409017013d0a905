// Package h2test is a raw HTTP/2 client for the tests of the servers'
// bounds at the edge: it opens gRPC calls that declare a message and send
// only part of it, and never finish them, which no gRPC client does. It
// keeps to HTTP/2's flow control, as a caller that means to be served
// would.
package h2test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// frameMax is the largest DATA frame sent: HTTP/2's default, which gRPC
// servers keep.
const frameMax = 16 << 10

// End is how the server ended a call.
type End struct {
	Status  int    // grpc-status, or -1 when the call was reset without one
	Message string // grpc-message
	Reset   bool   // by RST_STREAM
}

// Conn is one HTTP/2 connection to a gRPC server.
type Conn struct {
	conn      net.Conn
	authority string

	wmu  sync.Mutex // writes: fr's writing half, enc, hbuf, next
	fr   *http2.Framer
	enc  *hpack.Encoder
	hbuf bytes.Buffer
	next uint32

	mu      sync.Mutex
	changed *sync.Cond
	window  int64            // the connection's send window
	initial int64            // a new call's send window
	windows map[uint32]int64 // each call's
	ends    map[uint32]End
	err     error // the reader's: the connection is gone
	done    chan struct{}
}

// Dial opens a connection to addr, over TLS with cfg unless cfg is nil.
func Dial(ctx context.Context, addr string, cfg *tls.Config) (*Conn, error) {
	raw, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	conn := raw
	if cfg != nil {
		cfg = cfg.Clone()
		cfg.NextProtos = []string{"h2"}
		if cfg.ServerName == "" {
			cfg.ServerName, _, _ = net.SplitHostPort(addr)
		}
		tc := tls.Client(raw, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			raw.Close()
			return nil, err
		}
		conn = tc
	}
	c := &Conn{
		conn: conn, authority: addr, next: 1,
		window: 65535, initial: 65535, windows: make(map[uint32]int64), ends: make(map[uint32]End),
		done: make(chan struct{}),
	}
	c.changed = sync.NewCond(&c.mu)
	c.fr = http2.NewFramer(conn, conn)
	c.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	c.fr.MaxHeaderListSize = 1 << 20
	c.enc = hpack.NewEncoder(&c.hbuf)
	if _, err := conn.Write([]byte(http2.ClientPreface)); err != nil {
		conn.Close()
		return nil, err
	}
	if err := c.fr.WriteSettings(); err != nil {
		conn.Close()
		return nil, err
	}
	go c.read()
	return c, nil
}

// Close closes the connection.
func (c *Conn) Close() error {
	err := c.conn.Close()
	<-c.done
	return err
}

// Err returns why the connection is gone, or nil while it is up.
func (c *Conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Open starts a call of method (its full name, "/pkg.Service/Method")
// with metadata md, and sends nothing of its body. It returns the call's
// stream id.
func (c *Conn) Open(method string, md map[string]string) (uint32, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.hbuf.Reset()
	fields := [][2]string{{":method", "POST"}, {":scheme", "https"}, {":path", method}, {":authority", c.authority},
		{"content-type", "application/grpc"}, {"te", "trailers"}}
	for k, v := range md {
		fields = append(fields, [2]string{k, v})
	}
	for _, f := range fields {
		if err := c.enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]}); err != nil {
			return 0, err
		}
	}
	id := c.next
	c.next += 2
	c.mu.Lock()
	c.windows[id] = c.initial
	c.mu.Unlock()
	if err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.hbuf.Bytes(), EndHeaders: true}); err != nil {
		return 0, err
	}
	return id, nil
}

// Send sends the first n bytes of a message of declared bytes on the call
// stream (its 5-byte gRPC prefix, then zeros), without ending the call,
// as the windows allow. It returns how many bytes of the message it sent
// (the prefix not counted): fewer than n when ctx ended, the call ended or
// the connection went, with the reason.
func (c *Conn) Send(ctx context.Context, stream uint32, declared, n int) (int, error) {
	stop := context.AfterFunc(ctx, func() {
		c.mu.Lock()
		c.changed.Broadcast()
		c.mu.Unlock()
	})
	defer stop()
	var prefix [5]byte
	binary.BigEndian.PutUint32(prefix[1:], uint32(declared))
	zeros := make([]byte, frameMax)
	body := append(prefix[:], zeros[:min(n, frameMax-len(prefix))]...)
	sent := 0
	for first := true; first || sent < n; first = false {
		chunk := body
		if !first {
			chunk = zeros[:min(n-sent, frameMax)]
		}
		size, err := c.take(ctx, stream, len(chunk))
		if err != nil {
			return sent, err
		}
		chunk = chunk[:size]
		c.wmu.Lock()
		err = c.fr.WriteData(stream, false, chunk)
		c.wmu.Unlock()
		if err != nil {
			return sent, err
		}
		if first {
			size -= len(prefix)
			if size < 0 { // part of the prefix only: the rest next time
				return 0, errors.New("h2test: window below a message prefix")
			}
			body = nil
		}
		sent += size
	}
	return sent, nil
}

// take waits until the windows let up to want bytes go on stream and
// takes them from both.
func (c *Conn) take(ctx context.Context, stream uint32, want int) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		if c.err != nil {
			return 0, c.err
		}
		if e, ok := c.ends[stream]; ok {
			return 0, fmt.Errorf("h2test: call %d ended: %+v", stream, e)
		}
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		if n := min(int64(want), c.window, c.windows[stream]); n >= 5 || n == int64(want) {
			c.window -= n
			c.windows[stream] -= n
			return int(n), nil
		}
		c.changed.Wait()
	}
}

// Wait waits until the server ends call stream, ctx ends or the connection
// goes.
func (c *Conn) Wait(ctx context.Context, stream uint32) (End, error) {
	stop := context.AfterFunc(ctx, func() {
		c.mu.Lock()
		c.changed.Broadcast()
		c.mu.Unlock()
	})
	defer stop()
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		if e, ok := c.ends[stream]; ok {
			return e, nil
		}
		if c.err != nil {
			return End{}, c.err
		}
		if err := ctx.Err(); err != nil {
			return End{}, err
		}
		c.changed.Wait()
	}
}

// read reads the server's frames until the connection goes: settings,
// window updates and pings are answered, and the ends of calls noted.
func (c *Conn) read() {
	defer close(c.done)
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			c.mu.Lock()
			c.err = fmt.Errorf("h2test: connection gone: %w", err)
			c.changed.Broadcast()
			c.mu.Unlock()
			return
		}
		c.mu.Lock()
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				if v, ok := f.Value(http2.SettingInitialWindowSize); ok {
					for id := range c.windows {
						c.windows[id] += int64(v) - c.initial
					}
					c.initial = int64(v)
				}
				c.mu.Unlock()
				c.wmu.Lock()
				_ = c.fr.WriteSettingsAck()
				c.wmu.Unlock()
				c.mu.Lock()
			}
		case *http2.WindowUpdateFrame:
			if f.StreamID == 0 {
				c.window += int64(f.Increment)
			} else {
				c.windows[f.StreamID] += int64(f.Increment)
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				c.mu.Unlock()
				c.wmu.Lock()
				_ = c.fr.WritePing(true, f.Data)
				c.wmu.Unlock()
				c.mu.Lock()
			}
		case *http2.MetaHeadersFrame:
			if f.StreamEnded() {
				e := End{Status: -1}
				if v := f.PseudoValue("status"); v != "" && v != "200" {
					e.Message = "http status " + v
				}
				for _, h := range f.Fields {
					switch h.Name {
					case "grpc-status":
						e.Status, _ = strconv.Atoi(h.Value)
					case "grpc-message":
						e.Message = h.Value
					}
				}
				c.ends[f.StreamID] = e
			}
		case *http2.RSTStreamFrame:
			if _, ok := c.ends[f.StreamID]; !ok {
				c.ends[f.StreamID] = End{Status: -1, Reset: true, Message: f.ErrCode.String()}
			}
		case *http2.GoAwayFrame:
		}
		c.changed.Broadcast()
		c.mu.Unlock()
	}
}
