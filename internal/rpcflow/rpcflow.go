// Package rpcflow sets the HTTP/2 flow-control windows of FlexKV's gRPC
// connections: clients to servers, and the channels between groups.
//
// By default gRPC sizes its windows from an estimate of the link's
// bandwidth-delay product: whenever data arrives and no estimate is under
// way, the receiver sends a PING (with a window update) and the sender
// answers it. For FlexKV's traffic, a small request and a small answer at
// a time on each connection, that is nearly every message: two more
// writes (and two more wake-ups) for each one, a TLS record and a system
// call each, which a 12-region run on one machine measured as the larger
// part of its socket writes. Fixed windows turn the estimator off.
//
// The windows are large enough for FlexKV's largest messages (a scan page
// or an inter-group batch of 1 MiB, a request of up to 512 KiB) to go in
// one window, and bound what one connection can hold unread: StreamWindow
// a call, ConnWindow all of a connection's calls (the estimator would let
// a connection grow to 16 MiB). Across a 300 ms round trip ConnWindow
// still lets a connection carry some 25 MiB/s, far above what a group's
// channel or a client sends.
package rpcflow

import "google.golang.org/grpc"

const (
	// StreamWindow is the flow-control window of one call.
	StreamWindow = 1 << 20
	// ConnWindow is the flow-control window of a connection, shared by
	// its calls.
	ConnWindow = 8 << 20
)

// DialOptions are the window options of a client connection.
func DialOptions() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithStaticStreamWindowSize(StreamWindow), grpc.WithStaticConnWindowSize(ConnWindow)}
}

// ServerOptions are the window options of a server.
func ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.StaticStreamWindowSize(StreamWindow), grpc.StaticConnWindowSize(ConnWindow)}
}
