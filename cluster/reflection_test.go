package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/flexkv/flexkv/api/apipb"
	"github.com/flexkv/flexkv/certs"
	"github.com/flexkv/flexkv/internal/testaddr"
	"github.com/flexkv/flexkv/partition"
)

// The reflection service's methods: v1, and v1alpha, whose messages are
// v1's on the wire (grpcurl tries v1, then v1alpha).
const (
	reflectionV1      = "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo"
	reflectionV1Alpha = "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo"
)

// TestReflection asks a secure replica's client API, as a client with the
// root user's certificate, what it serves through gRPC server reflection
// (DESIGN 7), as grpcurl does with no .proto: both versions list the KV and
// health services, and the KV service's file descriptor resolves, with its
// methods. The peer port, reached with a node certificate, serves health
// and no reflection.
func TestReflection(t *testing.T) {
	dir := t.TempDir()
	l := startLocal(t, twoGroups(t), dir)
	ctx := ctxTimeout(t, 30*time.Second)
	addr := l.Endpoints()[0]
	cc, err := grpc.NewClient(addr, clientCreds(l))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()

	for _, method := range []string{reflectionV1, reflectionV1Alpha} {
		resp := askReflection(ctx, t, cc, method, &reflectionpb.ServerReflectionRequest{
			MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{},
		})
		var names []string
		for _, s := range resp.GetListServicesResponse().GetService() {
			names = append(names, s.GetName())
		}
		for _, want := range []string{apipb.KV_ServiceDesc.ServiceName, healthpb.Health_ServiceDesc.ServiceName} {
			if !slices.Contains(names, want) {
				t.Errorf("%s list services at %s: %q, want %s among them", method, addr, names, want)
			}
		}
	}

	resp := askReflection(ctx, t, cc, reflectionV1, &reflectionpb.ServerReflectionRequest{
		MessageRequest: &reflectionpb.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: apipb.KV_ServiceDesc.ServiceName},
	})
	kv := kvFile(t, resp.GetFileDescriptorResponse().GetFileDescriptorProto())
	if kv == nil {
		t.Fatalf("file containing %s: no flexkv/kv/v1/kv.proto in %v", apipb.KV_ServiceDesc.ServiceName, resp)
	}
	if kv.GetPackage() != "flexkv.kv.v1" || len(kv.GetService()) != 1 || kv.GetService()[0].GetName() != "KV" {
		t.Fatalf("kv.proto: package %q, services %v; want flexkv.kv.v1 with KV", kv.GetPackage(), kv.GetService())
	}
	methods := make(map[string]string)
	for _, m := range kv.GetService()[0].GetMethod() {
		methods[m.GetName()] = m.GetInputType()
	}
	for _, m := range apipb.KV_ServiceDesc.Methods {
		if want := ".flexkv.kv.v1." + m.MethodName + "Request"; methods[m.MethodName] != want {
			t.Errorf("KV.%s: input %q, want %s", m.MethodName, methods[m.MethodName], want)
		}
	}

	// The peer port: the node certificate of another group's replica (a
	// group that sends frames here) is let in (health answers), and
	// reflection is not there. A node of the replica's own group would be
	// refused before any method is looked up.
	g := l.cfg.Cluster.Groups[0]
	node, err := certs.LoadNode(CertsDir(dir), l.cfg.Cluster.Groups[1].Replicas[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	peer, err := grpc.NewClient(g.Replicas[0].PeerAddr(), grpc.WithTransportCredentials(credentials.NewTLS(certs.NodeConfig(node))))
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	if _, err := healthpb.NewHealthClient(peer).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("health at the peer port %s: %v", g.Replicas[0].PeerAddr(), err)
	}
	for _, method := range []string{reflectionV1, reflectionV1Alpha} {
		if _, err := reflectOnce(ctx, peer, method, &reflectionpb.ServerReflectionRequest{
			MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{},
		}); status.Code(err) != codes.Unimplemented {
			t.Errorf("%s at the peer port: %v, want Unimplemented", method, err)
		}
	}
}

// twoGroups is a cluster of two groups of one replica each: the least that
// serves a peer port.
func twoGroups(t *testing.T) *partition.ClusterConfig {
	t.Helper()
	cfg := &partition.ClusterConfig{Protocol: "flexcast"}
	free := func() string { return testaddr.Free(t, testaddr.Cluster) }
	for i, name := range []string{"g1", "g2"} {
		cfg.Groups = append(cfg.Groups, partition.GroupConfig{Name: name, Region: name, Replicas: []partition.ReplicaConfig{
			{ID: fmt.Sprintf("r%d", i+1), Raft: free(), GRPC: free(), Peer: free()},
		}})
		cfg.Partitions = append(cfg.Partitions, partition.PartitionConfig{
			Name: name, Start: fmt.Sprintf("w/%04d/", i+1), End: fmt.Sprintf("w/%04d/", i+2), Group: name,
		})
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// askReflection sends one request on a reflection stream of method and
// returns the answer, failing t on an error or an error answer.
func askReflection(ctx context.Context, t *testing.T, cc *grpc.ClientConn, method string, req *reflectionpb.ServerReflectionRequest) *reflectionpb.ServerReflectionResponse {
	t.Helper()
	resp, err := reflectOnce(ctx, cc, method, req)
	if err != nil {
		t.Fatalf("%s: %v", method, err)
	}
	if e := resp.GetErrorResponse(); e != nil {
		t.Fatalf("%s %v: error %d %s", method, req, e.GetErrorCode(), e.GetErrorMessage())
	}
	return resp
}

// reflectOnce opens a stream of method on cc (v1 with its generated
// client, v1alpha by name), sends req, and returns the answer.
func reflectOnce(ctx context.Context, cc *grpc.ClientConn, method string, req *reflectionpb.ServerReflectionRequest) (*reflectionpb.ServerReflectionResponse, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var st grpc.ClientStream
	var err error
	if method == reflectionV1 {
		st, err = reflectionpb.NewServerReflectionClient(cc).ServerReflectionInfo(ctx)
	} else {
		st, err = cc.NewStream(ctx, &grpc.StreamDesc{StreamName: "ServerReflectionInfo", ServerStreams: true, ClientStreams: true}, method)
	}
	if err != nil {
		return nil, err
	}
	// io.EOF from SendMsg: the server ended the stream first (an
	// Unimplemented method may); RecvMsg returns its status.
	if err := st.SendMsg(req); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	if err := st.CloseSend(); err != nil {
		return nil, err
	}
	resp := new(reflectionpb.ServerReflectionResponse)
	if err := st.RecvMsg(resp); err != nil {
		return nil, err
	}
	return resp, nil
}

// kvFile returns the descriptor of flexkv/kv/v1/kv.proto among the
// serialized file descriptors files, or nil.
func kvFile(t *testing.T, files [][]byte) *descriptorpb.FileDescriptorProto {
	t.Helper()
	for _, b := range files {
		fd := new(descriptorpb.FileDescriptorProto)
		if err := proto.Unmarshal(b, fd); err != nil {
			t.Fatalf("file descriptor: %v", err)
		}
		if fd.GetName() == "flexkv/kv/v1/kv.proto" {
			return fd
		}
	}
	return nil
}
