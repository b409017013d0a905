package client_test

import (
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/flexkv/flexkv/cluster"
	"github.com/flexkv/flexkv/internal/testaddr"
	"github.com/flexkv/flexkv/partition"
)

// startCluster starts a real cluster in a temporary directory, for the
// examples and the TLS tests: one group of one replica, owning warehouses
// w/0001 and w/0002. Unless insecure, it runs TLS as `flexkv local` does,
// from a throwaway CA, and writes the certificates of user root to its
// CertsDir. stop closes it and removes the directory.
func startCluster(insecure bool) (l *cluster.Local, stop func() error, err error) {
	addr := func() string {
		a, e := testaddr.FreeAddr(testaddr.Client)
		err = errors.Join(err, e)
		return a
	}
	cfg := &partition.ClusterConfig{
		Protocol: "flexcast",
		Groups: []partition.GroupConfig{{Name: "eu-west-1", Region: "eu-west-1", Replicas: []partition.ReplicaConfig{
			{ID: "r1", Raft: addr(), GRPC: addr(), Peer: addr()},
		}}},
		Partitions: []partition.PartitionConfig{
			{Name: "w0001", Start: "w/0001/", End: "w/0002/", Group: "eu-west-1"},
			{Name: "w0002", Start: "w/0002/", End: "w/0003/", Group: "eu-west-1"},
		},
	}
	if err != nil {
		return nil, nil, err
	}
	dir, err := os.MkdirTemp("", "flexkv-client")
	if err != nil {
		return nil, nil, err
	}
	l, err = cluster.Start(cluster.Config{
		Cluster: cfg, Dir: dir, NoSync: true, Insecure: insecure,
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		return nil, nil, errors.Join(fmt.Errorf("start cluster: %w", err), os.RemoveAll(dir))
	}
	return l, func() error { return errors.Join(l.Close(), os.RemoveAll(dir)) }, nil
}
