package rpcflow

import (
	"bytes"
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"

	"github.com/flexkv/flexkv/internal/h2test"
)

const checkMethod = "/grpc.health.v1.Health/Check"

// testEdge is a small port: messages of 1 MiB, 4 MiB per connection, 6 MiB
// in all.
func testEdge() Edge {
	return Edge{
		Name: "test", StreamsMax: 16, MessageBytesMax: 1 << 20,
		StreamWindow: WindowFor(1 << 20), ConnWindow: ConnWindow,
		ConnBytesMax: 4 << 20, BytesMax: 6 << 20,
	}
}

// serveGuarded serves the health service on loopback behind a guard of e
// until the test ends, and returns its address and the guard.
func serveGuarded(t *testing.T, e Edge) (string, *Guard) {
	t.Helper()
	g, err := NewGuard(e)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(g.ServerOptions(insecure.NewCredentials())...)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(lis)
	}()
	t.Cleanup(func() {
		srv.Stop()
		<-done
	})
	return lis.Addr().String(), g
}

func dialRaw(t *testing.T, addr string) *h2test.Conn {
	t.Helper()
	c, err := h2test.Dial(t.Context(), addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// open starts n calls on c that send nothing yet.
func open(t *testing.T, c *h2test.Conn, n int) []uint32 {
	t.Helper()
	var ids []uint32
	for range n {
		id, err := c.Open(checkMethod, nil)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	return ids
}

// send sends size bytes of a message that declares 1 MiB - 1 on each call.
func send(t *testing.T, c *h2test.Conn, ids []uint32, size int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	for _, id := range ids {
		if n, err := c.Send(ctx, id, 1<<20-1, size); err != nil {
			t.Fatalf("call %d: sent %d of %d bytes: %v", id, n, size, err)
		}
	}
}

// waitFor polls cond until it holds, failing the test after 20 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited 20 s for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// check makes a normal call on a new gRPC connection.
func check(t *testing.T, addr string) error {
	t.Helper()
	cc, err := grpc.NewClient(addr, append(DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	_, err = healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{})
	return err
}

// TestGuardConnectionBound holds calls on one connection, each declaring
// a large message and sending part of it: from half the connection's bound
// a new call is refused before its body, and the frame that would pass the
// bound closes the connection, which gives back all it held; the port
// serves a normal call meanwhile and after.
func TestGuardConnectionBound(t *testing.T) {
	e := testEdge()
	addr, g := serveGuarded(t, e)
	c := dialRaw(t, addr)
	ids := open(t, c, 8)
	const part = 600 << 10
	send(t, c, ids[:4], part)
	waitFor(t, "the guard to count 4 partial messages", func() bool { return g.Stats().Bytes >= 4*part })
	if s := g.Stats(); s.Bytes > e.ConnBytesMax || s.Closed != 0 {
		t.Fatalf("after 4 x %d bytes: %+v, want at most %d in flight and nothing closed", part, s, e.ConnBytesMax)
	}

	// Over half the bound: a new call is refused at its start.
	late := open(t, c, 1)[0]
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	end, err := c.Wait(ctx, late)
	if err != nil || end.Status != int(codes.ResourceExhausted) {
		t.Fatalf("a call started on a connection holding %d bytes: %+v, %v; want RESOURCE_EXHAUSTED before its body", g.Stats().Bytes, end, err)
	}
	if err := check(t, addr); err != nil {
		t.Fatalf("a normal call while a connection holds partial messages: %v", err)
	}

	// The bound: the connection is closed, and what it held is forgotten.
	sendCtx, sendCancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer sendCancel()
	for _, id := range ids[4:] {
		// The client's sends fill the sockets' buffers beyond what the
		// server reads: the guard's count is what the server holds.
		if _, err := c.Send(sendCtx, id, 1<<20-1, part); err != nil {
			break
		}
	}
	waitFor(t, "the connection to be closed", func() bool { return c.Err() != nil })
	waitFor(t, "the guard to forget the connection", func() bool { s := g.Stats(); return s.Conns == 0 && s.Bytes == 0 })
	if s := g.Stats(); s.Closed != 1 || s.Refused != 1 || s.Peak > e.ConnBytesMax {
		t.Errorf("guard stats %+v, want 1 connection closed, 1 call refused and at most %d bytes in flight", s, e.ConnBytesMax)
	}
	if err := check(t, addr); err != nil {
		t.Fatalf("a normal call after the connection was closed: %v", err)
	}
}

// TestGuardPortBound holds partial messages on three connections, each
// below its own bound but together over the port's: the connection that
// holds the most is closed, the others go on, and a normal call is served.
func TestGuardPortBound(t *testing.T) {
	e := testEdge()
	addr, g := serveGuarded(t, e)
	var conns []*h2test.Conn
	var calls [][]uint32
	for range 3 {
		c := dialRaw(t, addr)
		conns = append(conns, c)
		calls = append(calls, open(t, c, 4))
	}
	const part = 550 << 10 // 2.2 MiB a connection, below its bound; 6.6 MiB in all
	for i, c := range conns {
		send(t, c, calls[i], part)
		if i < 2 {
			waitFor(t, "the guard to count the partial messages", func() bool { return g.Stats().Bytes >= int64(i+1)*4*part })
		}
	}
	// The first two hold as much: either goes.
	waitFor(t, "a connection to be closed", func() bool { return (conns[0].Err() != nil) != (conns[1].Err() != nil) })
	waitFor(t, "the third connection's messages to be counted", func() bool { return g.Stats().Bytes >= 2*4*part })
	if s := g.Stats(); s.Closed != 1 || s.Peak > e.BytesMax {
		t.Errorf("guard stats %+v, want 1 connection closed and at most %d bytes in flight", s, e.BytesMax)
	}
	if err := conns[2].Err(); err != nil {
		t.Errorf("the third connection, which held less: %v", err)
	}
	if err := check(t, addr); err != nil {
		t.Fatalf("a normal call with the port near its bound: %v", err)
	}
}

// TestGuardNormalCalls: concurrent normal calls meet no bound, and leave
// nothing counted; the Edge's tap refuses before the body.
func TestGuardNormalCalls(t *testing.T) {
	e := testEdge()
	e.Tap = func(ctx context.Context, info *tap.Info) (context.Context, error) {
		if info.FullMethodName == "/grpc.health.v1.Health/List" {
			return nil, errors.New("not here")
		}
		return ctx, nil
	}
	addr, g := serveGuarded(t, e)
	cc, err := grpc.NewClient(addr, append(DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	hc := healthpb.NewHealthClient(cc)
	var wg sync.WaitGroup
	errs := make(chan error, 200)
	for range 200 {
		wg.Go(func() {
			_, err := hc.Check(t.Context(), &healthpb.HealthCheckRequest{Service: string(bytes.Repeat([]byte("s"), 30<<10))})
			if status.Code(err) != codes.NotFound { // an unknown service: the call was served
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("a normal call: %v", err)
	}
	waitFor(t, "the calls' bytes to be forgotten", func() bool { return g.Stats().Bytes == 0 })
	if s := g.Stats(); s.Closed != 0 || s.Refused != 0 {
		t.Errorf("guard stats after normal calls: %+v, want nothing closed or refused", s)
	}
	if _, err := hc.List(t.Context(), &healthpb.HealthListRequest{}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("a call the tap refuses: %v, want PermissionDenied", err)
	}
}

func TestEdgeValidate(t *testing.T) {
	if err := testEdge().Validate(); err != nil {
		t.Fatalf("the test edge: %v", err)
	}
	for _, tc := range []struct {
		name string
		edit func(*Edge)
	}{
		{"no streams", func(e *Edge) { e.StreamsMax = 0 }},
		{"no message", func(e *Edge) { e.MessageBytesMax = 0 }},
		{"a window below 64 KiB", func(e *Edge) { e.StreamWindow = 1 << 10 }},
		{"a connection bound below a message", func(e *Edge) { e.ConnBytesMax = 1 << 20 }},
		{"a port bound below a connection's", func(e *Edge) { e.BytesMax = e.ConnBytesMax - 1 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := testEdge()
			tc.edit(&e)
			if err := e.Validate(); err == nil {
				t.Error("accepted")
			}
			if _, err := NewGuard(e); err == nil {
				t.Error("NewGuard accepted it")
			}
		})
	}
	for _, tc := range []struct{ n, want int }{{0, 64 << 10}, {64<<10 - 5, 64 << 10}, {64<<10 - 4, 128 << 10}, {1 << 20, 1<<20 + 64<<10}} {
		if got := WindowFor(tc.n); int(got) != tc.want {
			t.Errorf("WindowFor(%d) = %d, want %d", tc.n, got, tc.want)
		}
	}
}

// FuzzFrameReader checks that the frame reader sees the headers of the
// frames an HTTP/2 framer writes, however the bytes are cut into chunks.
func FuzzFrameReader(f *testing.F) {
	f.Add([]byte{3, 200, 1, 0, 40}, uint8(7))
	f.Add([]byte{0, 0, 0, 255, 255}, uint8(1))
	f.Fuzz(func(t *testing.T, sizes []byte, cut uint8) {
		var buf bytes.Buffer
		buf.WriteString(http2.ClientPreface)
		fr := http2.NewFramer(&buf, nil)
		type head struct {
			typ, flags byte
			stream     uint32
			length     uint32
		}
		var want []head
		if err := fr.WriteSettings(); err != nil {
			t.Fatal(err)
		}
		want = append(want, head{0x4, 0, 0, 0})
		for i, s := range sizes {
			stream := uint32(2*i + 1)
			switch i % 3 {
			case 0:
				if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: stream, BlockFragment: make([]byte, s), EndHeaders: true}); err != nil {
					t.Fatal(err)
				}
				want = append(want, head{frameHeaders, 0x4, stream, uint32(s)})
			case 1:
				n := int(s) * 61
				if err := fr.WriteData(stream, s%2 == 1, make([]byte, n)); err != nil {
					t.Fatal(err)
				}
				want = append(want, head{frameData, s % 2, stream, uint32(n)})
			case 2:
				if err := fr.WriteRSTStream(stream, http2.ErrCodeCancel); err != nil {
					t.Fatal(err)
				}
				want = append(want, head{frameRSTStrm, 0, stream, 4})
			}
		}
		b := buf.Bytes()
		step := int(cut)%97 + 1
		r := frameReader{preface: len(clientPreface)}
		var got []head
		for len(b) > 0 {
			n := min(step, len(b))
			if err := r.scan(b[:n], func(typ, flags byte, stream, length uint32) error {
				got = append(got, head{typ, flags, stream, length})
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			b = b[n:]
		}
		if len(got) != len(want) {
			t.Fatalf("%d frames seen, want %d", len(got), len(want))
		}
		for i := range want {
			if got[i] != want[i] {
				t.Errorf("frame %d: %+v, want %+v", i, got[i], want[i])
			}
		}
	})
}

// BenchmarkGuardedCalls measures what the guard adds to a call: unary
// calls with a request of 1 KiB over loopback, on a server behind a guard
// and on one without.
func BenchmarkGuardedCalls(b *testing.B) {
	for _, guarded := range []bool{false, true} {
		name := "plain"
		if guarded {
			name = "guarded"
		}
		b.Run(name, func(b *testing.B) {
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			opts := ServerOptions()
			if guarded {
				g, err := NewGuard(testEdge())
				if err != nil {
					b.Fatal(err)
				}
				opts = g.ServerOptions(insecure.NewCredentials())
			}
			srv := grpc.NewServer(opts...)
			healthpb.RegisterHealthServer(srv, health.NewServer())
			go func() { _ = srv.Serve(lis) }()
			defer srv.Stop()
			cc, err := grpc.NewClient(lis.Addr().String(), append(DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
			if err != nil {
				b.Fatal(err)
			}
			defer cc.Close()
			hc := healthpb.NewHealthClient(cc)
			req := &healthpb.HealthCheckRequest{Service: string(bytes.Repeat([]byte("s"), 1<<10))}
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := hc.Check(context.Background(), req); status.Code(err) != codes.NotFound {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
