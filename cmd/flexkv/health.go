package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/flexkv/flexkv/certs"
	"github.com/flexkv/flexkv/internal/rpcflow"
)

// newHealthCmd returns `flexkv health`, a replica's probe: what a
// Kubernetes readiness or liveness probe runs inside the replica's own
// container (DESIGN 15), as grpc-health-probe does for servers without TLS.
func newHealthCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "health --node ID",
		Short: "Ask a replica's gRPC health service whether it serves (a probe)",
		Long: `Ask replica ID's standard gRPC health service whether it serves, with the
replica's own node certificate (DESIGN 13): on its peer port, which takes node
certificates (its client port, which admits the nodes that forward requests
there, answers too). Prints SERVING
and exits 0, or prints the status or error on stderr and exits 1 (3 when the
replica does not answer within --timeout). With --insecure it asks the client
port without TLS.

--addr dials another address than the configuration's (127.0.0.1:7300 inside
the replica's container, say) while the TLS server name stays the configured
host. Every flag may come from the environment as for flexkv server
(FLEXKV_NODE, FLEXKV_CONFIG, FLEXKV_CERTS_DIR, FLEXKV_INSECURE), so that a probe
needs no arguments but the address.`,
		Args: noArgs,
		RunE: runHealth,
	}
	cmd.Flags().String("config", "", "cluster configuration file (YAML); default: the embedded configs/local.yaml")
	cmd.Flags().String("node", "", "the replica's id in the configuration (required)")
	cmd.Flags().String("certs-dir", "", "directory of ca.crt and node.NODE.crt/.key (required unless --insecure)")
	cmd.Flags().Bool("insecure", false, "ask the client port without TLS (a replica run with --insecure)")
	cmd.Flags().String("addr", "", "dial this host:port instead of the configuration's address (the TLS name stays the configured host)")
	cmd.Flags().Duration("timeout", 2*time.Second, "how long to wait for the answer")
	return cmd
}

// runHealth runs flexkv health.
func runHealth(cmd *cobra.Command, _ []string) error {
	v := settings(cmd)
	node := v.GetString("node")
	if node == "" {
		return &exitError{code: 2, err: errors.New("health: --node is required (or FLEXKV_NODE)")}
	}
	cfg, _, err := loadCluster(v.GetString("config"))
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	_, r, ok := cfg.Replica(node)
	if !ok {
		return &exitError{code: 2, err: fmt.Errorf("health: node %q is not a replica of the configuration (replicas: %s)", node, strings.Join(cfg.ReplicaIDs(), ", "))}
	}
	addr, creds := r.GRPC, insecure.NewCredentials()
	n, err := serverNode(v, node)
	if err != nil {
		return &exitError{code: 2, err: errors.New(strings.Replace(err.Error(), "server:", "health:", 1))}
	}
	if n != nil {
		if len(cfg.Groups) < 2 {
			return &exitError{code: 2, err: errors.New("health: a one-group cluster serves no peer port, where a node certificate is taken: probe it with --insecure, or over TLS with a client's tool")}
		}
		addr = r.PeerAddr()
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			return &exitError{code: 2, err: fmt.Errorf("health: peer address %q: %w", addr, err)}
		}
		tc := certs.NodeConfig(n)
		tc.ServerName = host
		creds = credentials.NewTLS(tc)
	}
	if a := v.GetString("addr"); a != "" {
		addr = a
	}
	status, err := askHealth(cmd.Context(), addr, creds, v.GetDuration("timeout"))
	if err != nil {
		code := 1
		if errors.Is(err, context.DeadlineExceeded) {
			code = 3
		}
		return &exitError{code: code, err: fmt.Errorf("health: %s: %w", addr, err)}
	}
	if status != healthpb.HealthCheckResponse_SERVING {
		return &exitError{code: 1, err: fmt.Errorf("health: %s: %s", addr, status)}
	}
	fmt.Fprintln(cmd.OutOrStdout(), status)
	return nil
}

// askHealth asks the health service at addr for the server's overall
// status.
func askHealth(ctx context.Context, addr string, creds credentials.TransportCredentials, timeout time.Duration) (healthpb.HealthCheckResponse_ServingStatus, error) {
	cc, err := grpc.NewClient(addr, append(rpcflow.DialOptions(), grpc.WithTransportCredentials(creds))...)
	if err != nil {
		return 0, err
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	resp, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
	if err != nil {
		if ctx.Err() != nil {
			return 0, fmt.Errorf("%w: %w", context.DeadlineExceeded, err)
		}
		return 0, err
	}
	return resp.GetStatus(), nil
}
