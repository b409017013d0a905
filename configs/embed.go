// Package configs ships FlexKV's reference configuration data inside the
// binary: the latency matrix of the 12 AWS regions of the FlexCast paper's
// evaluation (and, beside it, the cluster configuration files).
package configs

import (
	"bytes"
	_ "embed"
	"fmt"

	"github.com/flexkv/flexkv/partition"
)

//go:embed aws-12-regions-latency-ms.csv
var aws12LatencyCSV []byte

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
