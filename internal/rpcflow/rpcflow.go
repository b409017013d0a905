// Package rpcflow sets the HTTP/2 flow-control windows of FlexKV's gRPC
// connections: clients to servers, the channels between groups, and the
// operator's tools; and bounds, at a server, the request bytes its
// connections hold in flight whatever their callers send (Edge, Guard).
//
// By default gRPC sizes its windows from an estimate of the link's
// bandwidth-delay product: whenever data arrives and no estimate is under
// way, the receiver sends a PING (with a window update) and the sender
// answers it. For FlexKV's traffic, a small request and a small answer at
// a time on each connection, that is nearly every message: two more
// writes (and two more wake-ups) for each one, a TLS record and a system
// call each, some 40% of the socket writes of a 12-region run on one
// machine. Fixed windows turn the estimator off.
//
// StreamWindow is gRPC's default limit on a received message (4 MiB), so
// that every message a peer accepts goes in one window, with no round trip
// for a window update in the middle: FlexKV's largest (an inter-group batch
// of 1 MiB of frames, a scan page of up to 3 MiB) are below it. ConnWindow
// bounds the bytes in flight on a connection, across its calls: across a
// 300 ms round trip it still lets a connection carry some 50 MiB/s, as
// gRPC's estimator would at most (16 MiB). A server's port may set its own
// windows (Edge): the peer service, whose largest message is a batch of
// about 1 MiB, takes smaller ones.
package rpcflow

import "google.golang.org/grpc"

const (
	// StreamWindow is the flow-control window of one call.
	StreamWindow = 4 << 20
	// ConnWindow is the flow-control window of a connection, shared by
	// its calls.
	ConnWindow = 16 << 20
)

// DialOptions are the window options of a client connection.
func DialOptions() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithStaticStreamWindowSize(StreamWindow), grpc.WithStaticConnWindowSize(ConnWindow)}
}

// ServerOptions are the window options of a server.
func ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.StaticStreamWindowSize(StreamWindow), grpc.StaticConnWindowSize(ConnWindow)}
}
