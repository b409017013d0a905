package server

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/flexkv/flexkv/api/apipb"
)

// inproc is the HTTP gateway's connection to its replica's client API: a
// grpc.ClientConnInterface that calls the service's handlers in this
// process, through the same interceptor as a call over the network
// (intercept: the replica ready, metrics, logs), with the caller set from
// the HTTP request's client certificate (gatewayUser) instead of read from
// a TLS connection. A loopback gRPC call with TLS cost as much again as the
// HTTP request itself. What the client API's edge bounds for its callers
// (bytes in flight, rpcflow.Guard), the gateway bounds for its requests
// (http.go, budget).
type inproc struct {
	s   *Server
	svc *service
}

// Invoke calls method's handler with args, and fills reply with its answer.
func (c inproc) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	name, ok := strings.CutPrefix(method, "/"+apipb.KV_ServiceDesc.ServiceName+"/")
	var desc *grpc.MethodDesc
	for i := range apipb.KV_ServiceDesc.Methods {
		if ok && apipb.KV_ServiceDesc.Methods[i].MethodName == name {
			desc = &apipb.KV_ServiceDesc.Methods[i]
		}
	}
	if desc == nil {
		return status.Errorf(codes.Unimplemented, "server: gateway: no method %s", method)
	}
	in, _ := args.(proto.Message)
	out, _ := reply.(proto.Message)
	if in == nil || out == nil {
		return status.Errorf(codes.Internal, "server: gateway: %s: %T and %T are not protobuf messages", method, args, reply)
	}
	// The user the gateway names (package api puts it in the outgoing
	// metadata, as for a call over the network); nothing else of the
	// metadata is taken.
	c2 := caller{user: "-"}
	if md, ok := metadata.FromOutgoingContext(ctx); ok {
		switch u := md.Get(apipb.UserHeader); len(u) {
		case 0:
		case 1:
			c2.user = u[0]
		default:
			return status.Errorf(codes.PermissionDenied, "server: gateway: %d users named for one request", len(u))
		}
	}
	st := &inprocStream{method: method}
	sctx := grpc.NewContextWithServerTransportStream(context.WithValue(ctx, callerKey{}, c2), st)
	resp, err := desc.Handler(c.svc, sctx, func(v any) error {
		proto.Merge(v.(proto.Message), in)
		return nil
	}, c.s.intercept)
	for _, o := range opts {
		switch o := o.(type) {
		case grpc.HeaderCallOption:
			*o.HeaderAddr = st.header()
		case grpc.TrailerCallOption:
			*o.TrailerAddr = st.trailer()
		}
	}
	if err != nil {
		return err
	}
	m, ok := resp.(proto.Message)
	if !ok {
		return status.Errorf(codes.Internal, "server: gateway: %s answered %T", method, resp)
	}
	proto.Reset(out)
	proto.Merge(out, m)
	return nil
}

// NewStream is never called: the client API has no streaming method.
func (c inproc) NewStream(context.Context, *grpc.StreamDesc, string, ...grpc.CallOption) (grpc.ClientStream, error) {
	return nil, status.Error(codes.Unimplemented, "server: gateway: no streams")
}

// inprocStream collects the header and trailer a handler sets
// (grpc.SetTrailer), as a transport stream would.
type inprocStream struct {
	method string
	mu     sync.Mutex
	hdr    metadata.MD
	trl    metadata.MD
}

func (s *inprocStream) Method() string { return s.method }

func (s *inprocStream) SetHeader(md metadata.MD) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hdr = metadata.Join(s.hdr, md)
	return nil
}

func (s *inprocStream) SendHeader(md metadata.MD) error { return s.SetHeader(md) }

func (s *inprocStream) SetTrailer(md metadata.MD) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.trl = metadata.Join(s.trl, md)
	return nil
}

func (s *inprocStream) header() metadata.MD {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hdr.Copy()
}

func (s *inprocStream) trailer() metadata.MD {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.trl.Copy()
}

// budget bounds the request bytes the gateway holds in flight: a request
// takes its body's size (the bound of one when unknown) before it is read,
// and is refused, ResourceExhausted, when the budget has not that much left.
type budget struct {
	mu   sync.Mutex
	used int64
	max  int64
}

func (b *budget) take(n int64) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used+n > b.max {
		return fmt.Errorf("server: the HTTP gateway holds %d bytes of requests in flight, its bound is %d: retry later", b.used, b.max)
	}
	b.used += n
	return nil
}

func (b *budget) give(n int64) {
	b.mu.Lock()
	b.used -= n
	b.mu.Unlock()
}
