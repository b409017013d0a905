package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/flexkv/flexkv/api"
	"github.com/flexkv/flexkv/api/apipb"
	"github.com/flexkv/flexkv/certs"
	"github.com/flexkv/flexkv/internal/rpcflow"
	"github.com/flexkv/flexkv/partition"
)

// joinTimeout bounds the fetch of the configuration of `flexkv server
// --join`.
const joinTimeout = 30 * time.Second

// joinCluster fetches, from the replica at endpoint, the configuration a
// replica that joins a running cluster runs with (DESIGN 14): the
// bootstrap one (epoch 1, the cluster's identity, DESIGN 13), its latency
// matrix, and the configuration of the current epoch, which must list
// node. With TLS it calls as the node, naming itself as the user.
func joinCluster(ctx context.Context, endpoint, node string, n *certs.Node) (boot, current *partition.ClusterConfig, lat *partition.Latency, err error) {
	creds := insecure.NewCredentials()
	if n != nil {
		creds = credentials.NewTLS(certs.NodeConfig(n))
	}
	cc, err := grpc.NewClient(endpoint, append(rpcflow.DialOptions(), grpc.WithTransportCredentials(creds))...)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("server: --join %s: %w", endpoint, err)
	}
	defer cc.Close()
	kv := apipb.NewKVClient(cc)
	ctx, cancel := context.WithTimeout(ctx, joinTimeout)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, apipb.UserHeader, node)
	var bootResp, curResp *apipb.TopologyResponse
	for {
		if bootResp, err = kv.Topology(ctx, &apipb.TopologyRequest{Bootstrap: true}, grpc.WaitForReady(true)); err == nil {
			curResp, err = kv.Topology(ctx, &apipb.TopologyRequest{})
		}
		if err == nil || ctx.Err() != nil {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil {
		return nil, nil, nil, fmt.Errorf("server: --join %s: the cluster's configuration: %w", endpoint, err)
	}
	if boot, lat, err = api.ConfigFromProto(bootResp); err != nil {
		return nil, nil, nil, fmt.Errorf("server: --join %s: bootstrap configuration: %w", endpoint, err)
	}
	if current, _, err = api.ConfigFromProto(curResp); err != nil {
		return nil, nil, nil, fmt.Errorf("server: --join %s: configuration of epoch %d: %w", endpoint, curResp.GetEpoch(), err)
	}
	if _, _, ok := current.Replica(node); !ok {
		return nil, nil, nil, fmt.Errorf("server: --join %s: %s is not a member of the cluster at epoch %d (members: %s): add it first with flexkv member add GROUP %s --raft ADDR --grpc ADDR",
			endpoint, node, curResp.GetEpoch(), strings.Join(current.ReplicaIDs(), ", "), node)
	}
	if !slices.Equal(configGroupNames(boot), configGroupNames(current)) {
		return nil, nil, nil, fmt.Errorf("server: --join %s: the groups of epoch %d differ from the bootstrap configuration's", endpoint, curResp.GetEpoch())
	}
	return boot, current, lat, nil
}
