// Package transport carries the reliable channel layer's frames between the
// leaders of groups over gRPC (DESIGN 4.1). It is part of the shell: the
// channel layer (package multicast/channel) decides what is sent and
// resends what is lost; this package only moves encoded frames, once, in
// order, to whichever replica of the peer group leads it.
//
// Receiving end: Register serves the GroupChannel service on a gRPC server.
// It checks each request (addressed to this group, from another group of
// the cluster, frames that decode and belong to that link, within the
// configured bounds) and hands the frames to a Handler, which proposes them
// to the group's raft log. A replica that does not lead its group answers
// ErrNotLeader with the leader's address, which the reply carries back as a
// hint.
//
// Sending end: a Transmitter keeps one bounded queue and one goroutine per
// peer group. Send enqueues without blocking; the goroutine drains the queue
// in order, in batches, calling the replica it believes leads the peer
// group, following NotLeader hints and backing off on errors. Frames that do
// not fit in a full queue are dropped and counted: the channel layer sends
// them again after its resend timeout or on the peer's nack, so the
// transmitter may lose frames but never reorders the ones it sends.
//
// DESIGN 4.1 sketches a gRPC stream per link; a link here is one unary
// call per batch, one call at a time per peer group. Each batch gets its
// own answer (taken, or the address of the leader to go to), which a
// stream would have to correlate with its batch, and a call that fails
// fails alone, where a broken stream would have to be reopened and its
// unanswered batches found. The cost is a round trip per batch on a real
// WAN under load, which a stream with several batches in flight would
// save; the emulated WAN does not pay it (see Transmitter: its delay line
// keeps many batches in flight).
package transport

import (
	"context"
	"errors"
	"fmt"
	"math"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/flexkv/flexkv/multicast/channel"
	"github.com/flexkv/flexkv/partition"
	"github.com/flexkv/flexkv/replication/transport/transportpb"
)

// ErrNotLeader is returned by a Handler whose replica does not lead its
// group; the request is then answered as not accepted, with the handler's
// leader hint.
var ErrNotLeader = errors.New("transport: not the leader")

// Handler takes the frames that another group's leader sent to this group.
//
// Deliver is called with the frames of one request, decoded and checked: all
// from group from to this group, in the order the sender made them. The
// handler keeps the frames (their payloads are not reused). It returns nil
// once the frames are proposed to the group's log, or an error wrapping
// ErrNotLeader and the gRPC address of the leader, or "" when it knows none.
// Any other error is answered with its gRPC status when it carries one,
// codes.Canceled or codes.DeadlineExceeded for context errors, and
// codes.Unavailable otherwise; the sender retries the same frames later.
//
// Deliver is called concurrently, from gRPC's goroutines.
type Handler interface {
	Deliver(ctx context.Context, from partition.GroupID, frames []channel.Frame) (leaderHint string, err error)
}

// ServerConfig configures the receiving end of the links of one group.
type ServerConfig struct {
	Self   partition.GroupID // the group whose replica serves
	Groups int               // groups in the cluster
	// FramesMax and BytesMax bound one request: its number of frames and the
	// sum of their encoded sizes. A request beyond either is refused with
	// codes.ResourceExhausted. The senders' TransmitterConfig.BatchFrames and
	// BatchBytes must not exceed them, and the gRPC server's
	// grpc.MaxRecvMsgSize (4 MiB unless set) must leave room for BytesMax
	// plus a few bytes per frame of protobuf framing.
	FramesMax int
	BytesMax  int
	// Authorize, when set, decides whether the caller of a request may
	// speak for the sending group the request names (DESIGN 13: a frame only
	// from a node of the group it claims to come from); a refusal is
	// answered with its own gRPC status when it carries one (a caller that
	// runs another configuration: codes.FailedPrecondition), with
	// codes.PermissionDenied otherwise, and nothing is delivered.
	Authorize func(ctx context.Context, from partition.GroupID) error
}

// RequestBytesMax returns the largest encoded request (a DeliverRequest)
// that a sender within c's bounds makes: FramesMax frames of BytesMax bytes
// together, each with its field tag and length, and the two group numbers.
// It is what the peer service's gRPC server may receive in one message.
func (c ServerConfig) RequestBytesMax() int {
	frameField := 1 + protowire.SizeVarint(uint64(c.BytesMax))
	groupField := 1 + protowire.SizeVarint(math.MaxUint32)
	return c.BytesMax + c.FramesMax*frameField + 2*groupField
}

// Validate checks c.
func (c ServerConfig) Validate() error {
	switch {
	case c.Groups < 2 || c.Groups > partition.GroupsMax:
		return fmt.Errorf("transport: server config: groups %d out of range [2,%d]", c.Groups, partition.GroupsMax)
	case c.Self < 0 || int(c.Self) >= c.Groups:
		return fmt.Errorf("transport: server config: self %d out of range [0,%d)", c.Self, c.Groups)
	case c.FramesMax < 1:
		return fmt.Errorf("transport: server config: frames max %d, want at least 1", c.FramesMax)
	case c.BytesMax < 1:
		return fmt.Errorf("transport: server config: bytes max %d, want at least 1", c.BytesMax)
	}
	return nil
}

// Register serves the GroupChannel service on s, for the group of cfg.Self,
// handing what it receives to h. Call it before s.Serve.
func Register(s grpc.ServiceRegistrar, cfg ServerConfig, h Handler) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	if h == nil {
		return errors.New("transport: register: nil handler")
	}
	transportpb.RegisterGroupChannelServer(s, &server{cfg: cfg, h: h})
	return nil
}

type server struct {
	transportpb.UnimplementedGroupChannelServer
	cfg ServerConfig
	h   Handler
}

func (s *server) Deliver(ctx context.Context, req *transportpb.DeliverRequest) (*transportpb.DeliverReply, error) {
	// The caller's right to speak for the group it names comes first: a
	// node of another group learns nothing more of the request's fate.
	if s.cfg.Authorize != nil && req.GetFromGroup() < uint32(s.cfg.Groups) {
		if err := s.cfg.Authorize(ctx, partition.GroupID(req.GetFromGroup())); err != nil {
			if _, ok := status.FromError(err); ok {
				return nil, err
			}
			return nil, status.Errorf(codes.PermissionDenied, "transport: frames from group %d refused: %v", req.GetFromGroup(), err)
		}
	}
	from, frames, err := s.cfg.decodeRequest(req)
	if err != nil {
		return nil, err
	}
	hint, err := s.h.Deliver(ctx, from, frames)
	switch {
	case err == nil:
		return &transportpb.DeliverReply{Accepted: true}, nil
	case errors.Is(err, ErrNotLeader):
		return &transportpb.DeliverReply{LeaderHint: hint}, nil
	}
	return nil, handlerStatus(from, err)
}

// handlerStatus turns a handler's error into the status the sender sees.
func handlerStatus(from partition.GroupID, err error) error {
	if _, ok := status.FromError(err); ok {
		return err
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return status.FromContextError(err).Err()
	}
	return status.Errorf(codes.Unavailable, "transport: deliver from group %d: %v", from, err)
}

// decodeRequest checks req and decodes its frames. Its errors are gRPC
// statuses: InvalidArgument for a request that no sender should make, and
// ResourceExhausted for one over the bounds, checked before any decoding.
func (c ServerConfig) decodeRequest(req *transportpb.DeliverRequest) (partition.GroupID, []channel.Frame, error) {
	fromGroup, toGroup, raw := req.GetFromGroup(), req.GetToGroup(), req.GetFrames()
	switch {
	case toGroup != uint32(c.Self):
		return 0, nil, status.Errorf(codes.InvalidArgument, "transport: request for group %d reached group %d", toGroup, c.Self)
	case fromGroup >= uint32(c.Groups):
		return 0, nil, status.Errorf(codes.InvalidArgument, "transport: sender group %d out of range [0,%d)", fromGroup, c.Groups)
	case fromGroup == toGroup:
		return 0, nil, status.Errorf(codes.InvalidArgument, "transport: sender group %d is the receiving group", fromGroup)
	case len(raw) == 0:
		return 0, nil, status.Error(codes.InvalidArgument, "transport: request carries no frames")
	case len(raw) > c.FramesMax:
		return 0, nil, status.Errorf(codes.ResourceExhausted, "transport: %d frames in one request, at most %d", len(raw), c.FramesMax)
	}
	size := 0
	for _, b := range raw {
		size += len(b)
	}
	if size > c.BytesMax {
		return 0, nil, status.Errorf(codes.ResourceExhausted, "transport: %d frame bytes in one request, at most %d", size, c.BytesMax)
	}
	from := partition.GroupID(fromGroup)
	frames := make([]channel.Frame, len(raw))
	for i, b := range raw {
		f, err := channel.DecodeFrame(b, c.Groups)
		if err != nil {
			return 0, nil, status.Errorf(codes.InvalidArgument, "transport: frame %d of %d: %v", i, len(raw), err)
		}
		if f.From != from || f.To != c.Self {
			return 0, nil, status.Errorf(codes.InvalidArgument, "transport: frame %d of %d is %d->%d in a request %d->%d", i, len(raw), f.From, f.To, from, c.Self)
		}
		frames[i] = f
	}
	return from, frames, nil
}
