package replication

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/flexkv/flexkv/multicast/channel"
	"github.com/flexkv/flexkv/multicast/protocol"
	"github.com/flexkv/flexkv/partition"
)

// lossy returns a frame filter that drops and duplicates frames at the given
// rates, and swaps neighbours at the same rate.
func lossy(seed uint64, drop, dup float64) func(partition.GroupID, []channel.Frame) []channel.Frame {
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(seed, 99))
	return func(_ partition.GroupID, frames []channel.Frame) []channel.Frame {
		mu.Lock()
		defer mu.Unlock()
		out := make([]channel.Frame, 0, len(frames)+1)
		for _, f := range frames {
			switch x := rng.Float64(); {
			case x < drop:
			case x < drop+dup:
				out = append(out, f, f)
			default:
				out = append(out, f)
			}
		}
		for i := 1; i < len(out); i++ {
			if rng.Float64() < dup {
				out[i-1], out[i] = out[i], out[i-1]
			}
		}
		return out
	}
}

// TestPartitionAndLossyLinks: inter-group traffic loses, duplicates and
// reorders 10% of frames; meanwhile the leader of one group and a follower
// of another are cut off from their groups for a while and healed.
func TestPartitionAndLossyLinks(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	for _, p := range protocol.Names() {
		t.Run(string(p), func(t *testing.T) {
			c := newTestClusterWith(t, p, 3, 3, clusterOpts{filter: lossy(7, 0.1, 0.1), cuttable: true})
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- c.load(ctx, 8, 4, 300) }()
			time.Sleep(300 * time.Millisecond)
			l := c.leader(1)
			c.reps[1][l].cut.SetCut(true)
			f := (c.leader(2) + 1) % 3
			c.reps[2][f].cut.SetCut(true)
			// The cut is real: the rest of group 1 elects another leader.
			deadline := time.Now().Add(10 * time.Second)
			for {
				other := false
				for i, tr := range c.reps[1] {
					r := tr.live.Load()
					other = other || (i != l && r != nil && r.IsLeader())
				}
				if other {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("group 1 elected no new leader while its leader was cut off")
				}
				time.Sleep(10 * time.Millisecond)
			}
			time.Sleep(1000 * time.Millisecond)
			c.reps[1][l].cut.SetCut(false)
			c.reps[2][f].cut.SetCut(false)
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			c.settle(30 * time.Second)
		})
	}
}
