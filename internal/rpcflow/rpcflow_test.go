package rpcflow

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"testing"

	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// recordingConn keeps a copy of what is written to a connection.
type recordingConn struct {
	net.Conn
	mu  *sync.Mutex
	out *bytes.Buffer
}

func (c recordingConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	c.out.Write(b)
	c.mu.Unlock()
	return c.Conn.Write(b)
}

// recordingListener records what is written to every connection it
// accepts.
type recordingListener struct {
	net.Listener
	mu  sync.Mutex
	out bytes.Buffer
}

func (l *recordingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return recordingConn{Conn: c, mu: &l.mu, out: &l.out}, nil
}

// pings counts the PING frames (acknowledgements excluded) in an HTTP/2
// byte stream, after the client's preface when client is set.
func pings(t *testing.T, b []byte, client bool) int {
	t.Helper()
	if client {
		if !bytes.HasPrefix(b, []byte(http2.ClientPreface)) {
			t.Fatalf("the client's bytes do not start with the HTTP/2 preface")
		}
		b = b[len(http2.ClientPreface):]
	}
	fr := http2.NewFramer(io.Discard, bytes.NewReader(b))
	fr.SetMaxReadFrameSize(1 << 24)
	n := 0
	for {
		f, err := fr.ReadFrame()
		if errors.Is(err, io.EOF) {
			return n
		}
		if err != nil {
			t.Fatalf("reading the recorded frames: %v", err)
		}
		if p, ok := f.(*http2.PingFrame); ok && !p.IsAck() {
			n++
		}
	}
}

// pingsSent makes calls one at a time on one connection and returns the
// PING frames the server and the client sent.
func pingsSent(t *testing.T, calls int, sopts []grpc.ServerOption, dopts []grpc.DialOption) (server, client int) {
	t.Helper()
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lis := &recordingListener{Listener: inner}
	srv := grpc.NewServer(sopts...)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(lis) }()

	var mu sync.Mutex
	var out bytes.Buffer
	dial := grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		return recordingConn{Conn: c, mu: &mu, out: &out}, nil
	})
	cc, err := grpc.NewClient(inner.Addr().String(), append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()), dial}, dopts...)...)
	if err != nil {
		t.Fatal(err)
	}
	hc := healthpb.NewHealthClient(cc)
	for range calls {
		if _, err := hc.Check(t.Context(), &healthpb.HealthCheckRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := cc.Close(); err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	lis.mu.Lock()
	defer lis.mu.Unlock()
	mu.Lock()
	defer mu.Unlock()
	return pings(t, lis.out.Bytes(), false), pings(t, out.Bytes(), true)
}

// TestFixedWindowsSendNoPings checks that with the package's options
// neither end sends a PING, where gRPC's defaults (a bandwidth estimate)
// send them as messages arrive.
func TestFixedWindowsSendNoPings(t *testing.T) {
	const calls = 50
	if srv, cl := pingsSent(t, calls, ServerOptions(), DialOptions()); srv != 0 || cl != 0 {
		t.Errorf("fixed windows: %d calls, the server sent %d PINGs and the client %d, want none", calls, srv, cl)
	}
	if srv, cl := pingsSent(t, calls, nil, nil); srv+cl == 0 {
		t.Errorf("gRPC's defaults: %d calls and no PING: the estimator this package turns off is gone, and so is the reason for it", calls)
	}
}
