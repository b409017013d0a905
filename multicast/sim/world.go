package sim

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/flexkv/flexkv/configs"
	"github.com/flexkv/flexkv/partition"
)

// world is the simulated cluster: its topology and the one-way delay of
// every link (client to home group included, on the diagonal).
type world struct {
	top      *partition.Topology
	lat      *partition.Latency // round trips, for nearest-group choices
	oneWayUs [][]int64
}

// nearest lists the members of among by increasing latency from g (g
// excluded; ties by rank).
func (w *world) nearest(g partition.GroupID, among partition.GroupSet) []partition.GroupID {
	return w.lat.Nearest(w.top, g, among)
}

func msToUs(ms float64) int64 { return int64(math.Round(ms * 1000)) }

// buildWorld builds the cluster of a normalized cfg. A random world draws
// from rng; the aws-12 world does not.
func buildWorld(cfg Config, rng *rand.Rand) (*world, error) {
	if cfg.LatencyMode == LatencyRandom {
		return randomWorld(cfg.Groups, rng)
	}
	overlay, err := partition.PaperOverlay(cfg.Overlay)
	if err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	parent, err := partition.PaperTree(cfg.Tree)
	if err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	lat, err := configs.AWS12Latency()
	if err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	groups := make([]partition.Group, len(overlay))
	for i, r := range overlay {
		groups[i] = partition.Group{Name: r}
	}
	top, err := partition.NewTopology(partition.Spec{Groups: groups, Parent: parent})
	if err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	if err := lat.CheckTopology(top); err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	// DESIGN 8: one-way = value/2 by default; the paper's emulation applied
	// the full value in each direction.
	div := 2.0
	if cfg.LatencyMode == LatencyPaper {
		div = 1
	}
	w := &world{top: top, lat: lat, oneWayUs: make([][]int64, top.Len())}
	for a := range top.Len() {
		w.oneWayUs[a] = make([]int64, top.Len())
		for b := range top.Len() {
			w.oneWayUs[a][b] = msToUs(lat.GroupRTTMs(top, partition.GroupID(a), partition.GroupID(b)) / div)
		}
	}
	return w, nil
}

// randomWorld: groups g0..g(n-1), symmetric one-way delays uniform in
// [1, 100] ms (0.5 ms inside a group), and a random tree: groups join in a
// random order, each below a random earlier one, so any group may be the
// root and the tree any shape from a path to a star.
func randomWorld(n int, rng *rand.Rand) (*world, error) {
	names := make([]string, n)
	groups := make([]partition.Group, n)
	for i := range n {
		names[i] = fmt.Sprintf("g%d", i)
		groups[i] = partition.Group{Name: names[i]}
	}
	oneWayMs := make([][]float64, n)
	for i := range n {
		oneWayMs[i] = make([]float64, n)
	}
	for i := range n {
		oneWayMs[i][i] = 0.5
		for j := i + 1; j < n; j++ {
			d := 1 + math.Round(rng.Float64()*990)/10 // 0.1 ms steps in [1, 100]
			oneWayMs[i][j], oneWayMs[j][i] = d, d
		}
	}
	order := rng.Perm(n)
	parent := make(map[string]string, n-1)
	for k := 1; k < n; k++ {
		parent[names[order[k]]] = names[order[rng.IntN(k)]]
	}
	top, err := partition.NewTopology(partition.Spec{Groups: groups, Parent: parent})
	if err != nil {
		return nil, fmt.Errorf("sim: random topology: %w", err)
	}
	rtt := make([][]float64, n)
	w := &world{top: top, oneWayUs: make([][]int64, n)}
	for i := range n {
		rtt[i] = make([]float64, n)
		w.oneWayUs[i] = make([]int64, n)
		for j := range n {
			rtt[i][j] = 2 * oneWayMs[i][j]
			w.oneWayUs[i][j] = msToUs(oneWayMs[i][j])
		}
	}
	if w.lat, err = partition.NewLatency(names, rtt); err != nil {
		return nil, fmt.Errorf("sim: random latency: %w", err)
	}
	return w, nil
}
