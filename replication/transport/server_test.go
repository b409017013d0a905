package transport

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/flexkv/flexkv/multicast/channel"
	"github.com/flexkv/flexkv/partition"
	"github.com/flexkv/flexkv/replication/transport/transportpb"
)

// scriptedHandler answers every call with hint and err, and keeps what it
// was given.
type scriptedHandler struct {
	hint   string
	err    error
	from   partition.GroupID
	frames []channel.Frame
}

func (h *scriptedHandler) Deliver(_ context.Context, from partition.GroupID, frames []channel.Frame) (string, error) {
	h.from, h.frames = from, frames
	return h.hint, h.err
}

// serveOne serves one replica of group 1 of 3 with h, at most 4 frames
// and 200 bytes a request, and returns a client of it.
func serveOne(t *testing.T, h Handler) transportpb.GroupChannelClient {
	t.Helper()
	addr := serve(t, ServerConfig{Self: 1, Groups: 3, FramesMax: 4, BytesMax: 200}, h)
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := conn.Close(); err != nil {
			t.Error(err)
		}
	})
	return transportpb.NewGroupChannelClient(conn)
}

// serve serves h on 127.0.0.1 until the test ends and returns the address.
func serve(t testing.TB, cfg ServerConfig, h Handler) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	if err := Register(s, cfg, h); err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(lis) }()
	t.Cleanup(func() {
		s.Stop()
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return lis.Addr().String()
}

func encode(fs ...channel.Frame) [][]byte {
	raw := make([][]byte, len(fs))
	for i, f := range fs {
		raw[i] = channel.AppendFrame(nil, f)
	}
	return raw
}

func TestServerRejectsBadRequests(t *testing.T) {
	h := &scriptedHandler{}
	client := serveOne(t, h)
	ok := channel.Frame{From: 2, To: 1, Seq: 3, Ack: 1, Payload: []byte("x")}
	wrongFrom, wrongTo := ok, ok
	wrongFrom.From = 0
	wrongTo.To = 0
	tests := []struct {
		name     string
		from, to uint32
		frames   [][]byte
		code     codes.Code
		want     string
	}{
		{"wrong group", 2, 0, encode(wrongTo), codes.InvalidArgument, "request for group 0 reached group 1"},
		{"sender out of range", 3, 1, encode(ok), codes.InvalidArgument, "sender group 3 out of range [0,3)"},
		{"sender is receiver", 1, 1, encode(ok), codes.InvalidArgument, "sender group 1 is the receiving group"},
		{"no frames", 2, 1, nil, codes.InvalidArgument, "request carries no frames"},
		{"not a frame", 2, 1, [][]byte{channel.AppendFrame(nil, ok), {1, 2}}, codes.InvalidArgument, "frame 1 of 2: channel: decode frame"},
		{"frame of another sender", 2, 1, encode(ok, wrongFrom), codes.InvalidArgument, "frame 1 of 2 is 0->1 in a request 2->1"},
		{"frame to another group", 0, 1, encode(channel.Frame{From: 0, To: 2, Seq: 1}), codes.InvalidArgument, "frame 0 of 1 is 0->2 in a request 0->1"},
		{"too many frames", 2, 1, encode(ok, ok, ok, ok, ok), codes.ResourceExhausted, "5 frames in one request, at most 4"},
		{"too many bytes", 2, 1, [][]byte{make([]byte, 150), make([]byte, 51)}, codes.ResourceExhausted, "201 frame bytes in one request, at most 200"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h.frames = nil
			reply, err := client.Deliver(t.Context(), &transportpb.DeliverRequest{FromGroup: tt.from, ToGroup: tt.to, Frames: tt.frames})
			if got := status.Code(err); got != tt.code || !strings.Contains(status.Convert(err).Message(), tt.want) {
				t.Errorf("got reply %v, error %v; want code %v with %q", reply, err, tt.code, tt.want)
			}
			if h.frames != nil {
				t.Errorf("handler called with %v", h.frames)
			}
		})
	}
}

func TestServerAnswers(t *testing.T) {
	frames := []channel.Frame{
		{From: 2, To: 1, Seq: 3, Ack: 1, Payload: []byte("x")},
		{From: 2, To: 1, Ack: 2, Nack: 3},
	}
	tests := []struct {
		name      string
		hint      string
		err       error
		wantReply *transportpb.DeliverReply // nil: an error
		wantCode  codes.Code
	}{
		{"accepted", "", nil, &transportpb.DeliverReply{Accepted: true}, codes.OK},
		{"not leader", "10.0.0.7:7000", fmt.Errorf("raft: %w", ErrNotLeader), &transportpb.DeliverReply{LeaderHint: "10.0.0.7:7000"}, codes.OK},
		{"not leader, no hint", "", ErrNotLeader, &transportpb.DeliverReply{}, codes.OK},
		{"handler failure", "", errors.New("raft: shutdown"), nil, codes.Unavailable},
		{"handler status", "", status.Error(codes.FailedPrecondition, "busy"), nil, codes.FailedPrecondition},
		{"handler deadline", "", fmt.Errorf("propose: %w", context.DeadlineExceeded), nil, codes.DeadlineExceeded},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := &scriptedHandler{hint: tt.hint, err: tt.err}
			client := serveOne(t, h)
			reply, err := client.Deliver(t.Context(), &transportpb.DeliverRequest{FromGroup: 2, ToGroup: 1, Frames: encode(frames...)})
			if got := status.Code(err); got != tt.wantCode {
				t.Fatalf("got error %v, want code %v", err, tt.wantCode)
			}
			if tt.wantReply != nil && (reply.GetAccepted() != tt.wantReply.GetAccepted() || reply.GetLeaderHint() != tt.wantReply.GetLeaderHint()) {
				t.Errorf("got reply %v, want %v", reply, tt.wantReply)
			}
			if h.from != 2 || len(h.frames) != len(frames) {
				t.Fatalf("handler got %d frames from group %d, want %d from group 2", len(h.frames), h.from, len(frames))
			}
			for i, f := range h.frames {
				if f.String() != frames[i].String() || string(f.Payload) != string(frames[i].Payload) {
					t.Errorf("frame %d: got %s, want %s", i, f, frames[i])
				}
			}
		})
	}
}

func TestServerConfigValidate(t *testing.T) {
	good := ServerConfig{Self: 1, Groups: 3, FramesMax: 4, BytesMax: 200}
	if err := good.Validate(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	tests := []struct {
		name   string
		change func(c *ServerConfig)
		want   string
	}{
		{"one group", func(c *ServerConfig) { c.Groups = 1 }, "groups 1 out of range"},
		{"too many groups", func(c *ServerConfig) { c.Groups = partition.GroupsMax + 1 }, "groups 65 out of range"},
		{"self", func(c *ServerConfig) { c.Self = 3 }, "self 3 out of range [0,3)"},
		{"frames max", func(c *ServerConfig) { c.FramesMax = 0 }, "frames max 0"},
		{"bytes max", func(c *ServerConfig) { c.BytesMax = 0 }, "bytes max 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := good
			tt.change(&c)
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got error %v, want one containing %q", err, tt.want)
			}
			s := grpc.NewServer()
			defer s.Stop()
			if err := Register(s, c, &scriptedHandler{}); err == nil {
				t.Error("Register accepted the config")
			}
		})
	}
	s := grpc.NewServer()
	defer s.Stop()
	if err := Register(s, good, nil); err == nil {
		t.Error("Register accepted a nil handler")
	}
}

// FuzzDecodeRequest checks that the server's validation never panics,
// refuses only with InvalidArgument or ResourceExhausted, and lets through
// only frames of the request's link within the bounds.
func FuzzDecodeRequest(f *testing.F) {
	cfg := ServerConfig{Self: 1, Groups: 3, FramesMax: 4, BytesMax: 200}
	ok := channel.AppendFrame(nil, channel.Frame{From: 2, To: 1, Seq: 3, Ack: 1, Payload: []byte("x")})
	f.Add(uint32(2), uint32(1), ok, []byte(nil))
	f.Add(uint32(2), uint32(1), ok, ok)
	f.Add(uint32(0), uint32(1), ok, []byte{1, 0, 1, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, from, to uint32, a, b []byte) {
		raw := [][]byte{a}
		if b != nil {
			raw = append(raw, b)
		}
		g, frames, err := cfg.decodeRequest(&transportpb.DeliverRequest{FromGroup: from, ToGroup: to, Frames: raw})
		if err != nil {
			if c := status.Code(err); c != codes.InvalidArgument && c != codes.ResourceExhausted {
				t.Fatalf("error %v with code %v", err, c)
			}
			return
		}
		if g != partition.GroupID(from) || g == cfg.Self || int(g) >= cfg.Groups || to != uint32(cfg.Self) || len(frames) != len(raw) {
			t.Fatalf("accepted from %d to %d as from group %d with %d frames", from, to, g, len(frames))
		}
		for i, fr := range frames {
			if fr.From != g || fr.To != cfg.Self {
				t.Fatalf("frame %d accepted: %s", i, fr)
			}
		}
	})
}

// TestRequestBytesMax checks that the largest requests a sender within the
// bounds makes encode within RequestBytesMax, the peer service's limit on
// a received message: many frames, one large frame, the largest group
// numbers.
func TestRequestBytesMax(t *testing.T) {
	cfg := ServerConfig{Self: 0, Groups: 2, FramesMax: 4096, BytesMax: 1 << 20}
	limit := cfg.RequestBytesMax()
	if limit < cfg.BytesMax || limit > cfg.BytesMax+cfg.BytesMax/32 {
		t.Fatalf("RequestBytesMax = %d for %d bytes of frames: want a little more", limit, cfg.BytesMax)
	}
	many := make([][]byte, cfg.FramesMax)
	for i := range many {
		many[i] = make([]byte, cfg.BytesMax/cfg.FramesMax)
	}
	for _, tc := range []struct {
		name   string
		frames [][]byte
	}{
		{"FramesMax frames of BytesMax bytes", many},
		{"one frame of BytesMax bytes", [][]byte{make([]byte, cfg.BytesMax)}},
	} {
		req := &transportpb.DeliverRequest{FromGroup: math.MaxUint32, ToGroup: math.MaxUint32, Frames: tc.frames}
		if n := proto.Size(req); n > limit {
			t.Errorf("%s: %d bytes encoded, more than RequestBytesMax %d", tc.name, n, limit)
		}
	}
}
