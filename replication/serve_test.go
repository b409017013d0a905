package replication

import (
	"fmt"
	"net"
	"time"

	"google.golang.org/grpc"
)

// peerServer serves a test replica's peer service, as package server does
// for a real one: the replica serves nothing itself.
type peerServer struct {
	grpc *grpc.Server
	done chan struct{}
}

// servePeer serves r's peer service on addr until stop.
func servePeer(r *Replica, addr string) (*peerServer, error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("serve peer: %w", err)
	}
	s := &peerServer{grpc: grpc.NewServer(), done: make(chan struct{})}
	if err := r.RegisterPeer(s.grpc); err != nil {
		lis.Close()
		return nil, err
	}
	go func() {
		defer close(s.done)
		_ = s.grpc.Serve(lis)
	}()
	return s, nil
}

// stop lets the calls in flight finish for a moment, then cuts the rest:
// before the replica closes, so that a batch in flight reaches raft.
func (s *peerServer) stop() {
	drained := make(chan struct{})
	go func() {
		s.grpc.GracefulStop()
		close(drained)
	}()
	select {
	case <-drained:
	case <-time.After(time.Second):
		s.grpc.Stop()
		<-drained
	}
	<-s.done
}
