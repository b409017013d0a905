// Package configs ships FlexKV's reference configuration data inside the
// binary: the latency matrix of the 12 AWS regions of the FlexCast paper's
// evaluation and the cluster configuration files local.yaml and aws-12.yaml
// (DESIGN 8).
package configs

import (
	"bytes"
	_ "embed"
	"fmt"
	"slices"

	"github.com/flexkv/flexkv/partition"
)

var (
	//go:embed aws-12-regions-latency-ms.csv
	aws12LatencyCSV []byte
	//go:embed local.yaml
	localYAML []byte
	//go:embed aws-12.yaml
	aws12YAML []byte
)

// AWS12Latency returns the round-trip latency matrix of the 12 AWS regions
// (rows and columns in the paper's node order 1..12). Each call returns a
// fresh matrix.
func AWS12Latency() (*partition.Latency, error) {
	l, err := partition.ReadLatency(bytes.NewReader(aws12LatencyCSV))
	if err != nil {
		return nil, fmt.Errorf("configs: embedded aws-12 matrix: %w", err)
	}
	return l, nil
}

// LocalYAML returns the text of local.yaml: 3 regions x 3 replicas on
// 127.0.0.1, FlexCast. Each call returns a fresh copy.
func LocalYAML() []byte { return slices.Clone(localYAML) }

// AWS12YAML returns the text of aws-12.yaml: the 12 regions of the latency
// matrix, one replica each on 127.0.0.1, overlay O1, tree T1. Its latency
// field names the matrix file beside it, which AWS12Latency also returns.
// Each call returns a fresh copy.
func AWS12YAML() []byte { return slices.Clone(aws12YAML) }
