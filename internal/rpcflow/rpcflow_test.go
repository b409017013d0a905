package rpcflow

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// countingConn counts the writes to a connection.
type countingConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c countingConn) Write(b []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(b)
}

// countingListener counts the writes to every connection it accepts.
type countingListener struct {
	net.Listener
	writes atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return countingConn{Conn: c, writes: &l.writes}, nil
}

// writesPerCall makes calls one at a time on one connection, a pause
// between them as between a client's transactions, and returns the
// server's and the client's socket writes per call.
func writesPerCall(t *testing.T, calls int, sopts []grpc.ServerOption, dopts []grpc.DialOption) (server, client float64) {
	t.Helper()
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lis := &countingListener{Listener: inner}
	srv := grpc.NewServer(sopts...)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()

	var clientWrites atomic.Int64
	dial := grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		return countingConn{Conn: c, writes: &clientWrites}, nil
	})
	cc, err := grpc.NewClient(inner.Addr().String(), append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()), dial}, dopts...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	hc := healthpb.NewHealthClient(cc)
	ctx := t.Context()
	// The first call sets the connection up: count from the second.
	if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	s0, c0 := lis.writes.Load(), clientWrites.Load()
	for range calls {
		// Calls back to back would carry the PINGs of the defaults
		// in the same writes as the next call's data.
		time.Sleep(2 * time.Millisecond)
		if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	return float64(lis.writes.Load()-s0) / float64(calls), float64(clientWrites.Load()-c0) / float64(calls)
}

// TestFixedWindowsWriteOncePerMessage checks that with the package's
// options a unary call costs one write at each end, where gRPC's default
// (a bandwidth estimate, a PING for most messages) costs about two.
func TestFixedWindowsWriteOncePerMessage(t *testing.T) {
	const calls = 50
	srv, cl := writesPerCall(t, calls, ServerOptions(), DialOptions())
	if srv > 1.1 || cl > 1.1 {
		t.Errorf("fixed windows: %.2f server and %.2f client writes a call, want 1 each", srv, cl)
	}
	dsrv, dcl := writesPerCall(t, calls, nil, nil)
	if dsrv+dcl < srv+cl+0.5 {
		t.Errorf("gRPC's defaults: %.2f server and %.2f client writes a call, not more than fixed windows' %.2f and %.2f: "+
			"the estimator this package turns off is gone, and so is the reason for it", dsrv, dcl, srv, cl)
	}
	t.Logf("writes a call: fixed windows %.2f server, %.2f client; gRPC's defaults %.2f, %.2f", srv, cl, dsrv, dcl)
}
