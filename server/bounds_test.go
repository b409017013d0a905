package server

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/flexkv/flexkv/api"
	"github.com/flexkv/flexkv/api/apipb"
	"github.com/flexkv/flexkv/group"
	"github.com/flexkv/flexkv/internal/rpcflow"
	"github.com/flexkv/flexkv/kv"
	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/partition"
	"github.com/flexkv/flexkv/replication"
	"github.com/flexkv/flexkv/txn"
)

// openSingle starts a one-replica, one-group cluster owning [a, z) with
// cfg's bounds, and returns a client API connection to it.
func openSingle(t *testing.T, cfg Config) apipb.KVClient {
	t.Helper()
	cc := &partition.ClusterConfig{
		Protocol: "skeen",
		Groups: []partition.GroupConfig{{Name: "g1", Region: "g1", Replicas: []partition.ReplicaConfig{
			{ID: "r1", Raft: freeAddr(t), GRPC: freeAddr(t), Peer: freeAddr(t)},
		}}},
		Partitions: []partition.PartitionConfig{{Name: "all", Start: "a", End: "z", Group: "g1"}},
	}
	if err := cc.Validate(); err != nil {
		t.Fatal(err)
	}
	cfg.Cluster, cfg.NodeID, cfg.Dir, cfg.NoSync = cc, "r1", t.TempDir(), true
	cfg.Replication = replication.Config{ElectionTimeout: 100 * time.Millisecond}
	srv, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Close(); err != nil {
			t.Error(err)
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for !srv.IsLeader() {
		if time.Now().After(deadline) {
			t.Fatal("no leader")
		}
		time.Sleep(10 * time.Millisecond)
	}
	conn, err := grpc.NewClient(srv.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return apipb.NewKVClient(conn)
}

// Open on a gRPC address already taken fails naming it and stops what it
// started (the package's goleak check fails on the stream workers of a
// gRPC server built and never stopped).
func TestOpenOnTakenAddress(t *testing.T) {
	taken, err := net.Listen("tcp", freeAddr(t))
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	cc := &partition.ClusterConfig{
		Protocol: "skeen",
		Groups: []partition.GroupConfig{{Name: "g1", Region: "g1", Replicas: []partition.ReplicaConfig{
			{ID: "r1", Raft: freeAddr(t), GRPC: taken.Addr().String(), Peer: freeAddr(t)},
		}}},
		Partitions: []partition.PartitionConfig{{Name: "all", Start: "a", End: "z", Group: "g1"}},
	}
	if err := cc.Validate(); err != nil {
		t.Fatal(err)
	}
	srv, err := Open(Config{Cluster: cc, NodeID: "r1", Dir: t.TempDir(), NoSync: true})
	if err == nil {
		srv.Close()
		t.Fatal("Open on a taken gRPC address succeeded")
	}
	if !strings.Contains(err.Error(), taken.Addr().String()) {
		t.Errorf("Open on a taken address: %v, want the address named", err)
	}
}

func TestOpenRejectsBounds(t *testing.T) {
	for _, cfg := range []Config{{WaitMax: -time.Second}, {ScanBytesMax: -1}, {ScanBytesMax: ScanBytesMaxMax + 1}, {SessionsMax: -1}, {SessionTicks: -1}} {
		if err := checkBounds(cfg); err == nil {
			t.Errorf("checkBounds(wait %s, scan bytes %d, sessions %d, session ticks %d) = nil, want an error", cfg.WaitMax, cfg.ScanBytesMax, cfg.SessionsMax, cfg.SessionTicks)
		}
	}
	if err := checkBounds(Config{SessionTicks: -2}); err == nil || !strings.Contains(err.Error(), "session lifetime -2 ticks") {
		t.Errorf("checkBounds(session ticks -2) = %v, want the lifetime named", err)
	}
	if err := checkBounds(Config{}); err != nil {
		t.Errorf("checkBounds(defaults) = %v", err)
	}
}

// An Await for a result that never comes ends at the server's bound, with
// a message that says so, however long the caller would wait.
func TestAwaitWaitBound(t *testing.T) {
	const bound = 500 * time.Millisecond
	kv := openSingle(t, Config{WaitMax: bound})
	for _, ctxd := range []time.Duration{time.Minute, 0} { // a long deadline, and none
		ctx := context.Background()
		if ctxd > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, ctxd)
			defer cancel()
		}
		start := time.Now()
		_, err := kv.Await(ctx, &apipb.AwaitRequest{ClientId: 77, Seq: 1})
		took := time.Since(start)
		if status.Code(err) != codes.DeadlineExceeded || !strings.Contains(err.Error(), "bound on a wait") || !strings.Contains(err.Error(), "c77.1") {
			t.Errorf("caller deadline %s: Await = %v, want DeadlineExceeded naming the id and the server's bound", ctxd, err)
		}
		if took < bound || took > bound+5*time.Second {
			t.Errorf("caller deadline %s: Await returned after %s, want about %s", ctxd, took, bound)
		}
	}
}

// A transaction's answer needs no paging: the executor keeps a piece's
// results only if they encode within kv.ValueMax (else Truncated), and the
// protobuf form of the largest such result, with the most entries
// (txn.OpsMax scans of txn.ScanLimitMax keys), stays well within a client's
// default receive limit.
func TestTxnAnswerWithinReceiveLimit(t *testing.T) {
	const receiveMax = 4 << 20 // gRPC's default
	for _, keyLen := range []int{1, partition.KeyMax} {
		res := txn.PieceResult{Succeeded: true}
		n := txn.OpsMax * txn.ScanLimitMax
		// Values that fill the stored result to its bound, given n keys.
		valueLen := max(0, (kv.ValueMax-n*(keyLen+4))/n)
		if keyLen == partition.KeyMax {
			n, valueLen = kv.ValueMax/(keyLen+4), 0
		}
		for i := range txn.OpsMax {
			o := txn.OpResult{Index: i, Kind: txn.OpScan, Key: []byte("k"), KVs: []txn.KV{}}
			for j := 0; j < txn.ScanLimitMax && i*txn.ScanLimitMax+j < n; j++ {
				o.KVs = append(o.KVs, txn.KV{Key: make([]byte, keyLen), Value: make([]byte, valueLen)})
			}
			res.Results = append(res.Results, o)
		}
		if b := txn.AppendPieceResult(nil, &res); len(b) > kv.ValueMax {
			t.Fatalf("key length %d: the sample result encodes to %d bytes, more than kv.ValueMax (%d): fix the sample", keyLen, len(b), kv.ValueMax)
		}
		resp := &apipb.TxnResponse{Piece: api.PieceResultToProto(multicast.MsgID{Client: 1<<64 - 2, Seq: 1<<64 - 1}, "a-group-name", &res), Executed: true}
		if size := proto.Size(resp); size > receiveMax/2 {
			t.Errorf("key length %d: an answer of %d bytes, want at most half the receive limit (%d)", keyLen, size, receiveMax/2)
		}
	}
}

// TestWindowsHoldTheLargestMessages checks that the largest messages a
// replica sends or receives fit in one flow-control window of a call
// (rpcflow.StreamWindow): a bigger one waits a round trip for a window
// update, between regions a hundred milliseconds or more. The slack is
// for the messages' own encoding around their bytes.
func TestWindowsHoldTheLargestMessages(t *testing.T) {
	const slack = 256 << 10
	for _, m := range []struct {
		what  string
		bytes int
	}{
		{"a scan page at its largest bound (ScanBytesMaxMax)", ScanBytesMaxMax},
		{"an inter-group batch (group.InboundBytesMax)", group.InboundBytesMax},
		{"a client request's payload (group.MessagePayloadMax)", group.MessagePayloadMax},
	} {
		if m.bytes+slack > rpcflow.StreamWindow {
			t.Errorf("%s: %d bytes and %d of slack, more than a call's window of %d", m.what, m.bytes, slack, rpcflow.StreamWindow)
		}
	}
}
