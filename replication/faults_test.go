package replication

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/multicast/channel"
	"github.com/flexkv/flexkv/partition"
)

// cutLayer is raft's stream layer over TCP with a switch that cuts the
// replica off: while cut, it refuses to dial, closes what it accepts, and
// the connections it had are closed.
type cutLayer struct {
	net.Listener
	mu    sync.Mutex
	cut   bool
	conns []net.Conn
}

func listenCut(t testing.TB, addr string) *cutLayer {
	t.Helper()
	var l net.Listener
	var err error
	// The port was free a moment ago; a restarted replica may have to wait
	// for the previous listener's socket to go.
	for range 50 {
		if l, err = net.Listen("tcp", addr); err == nil {
			return &cutLayer{Listener: l}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal(err)
	return nil
}

func (l *cutLayer) track(c net.Conn) (net.Conn, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cut {
		c.Close()
		return nil, errors.New("cut off")
	}
	l.conns = append(l.conns, c)
	return c, nil
}

func (l *cutLayer) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if c, err := l.track(c); err == nil {
			return c, nil
		}
	}
}

func (l *cutLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	l.mu.Lock()
	cut := l.cut
	l.mu.Unlock()
	if cut {
		return nil, errors.New("cut off")
	}
	c, err := net.DialTimeout("tcp", string(addr), timeout)
	if err != nil {
		return nil, err
	}
	return l.track(c)
}

func (l *cutLayer) setCut(cut bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cut = cut
	if cut {
		for _, c := range l.conns {
			c.Close()
		}
		l.conns = nil
	}
}

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
	for _, p := range multicast.Protocols {
		t.Run(string(p), func(t *testing.T) {
			c := newTestClusterWith(t, p, 3, 3, clusterOpts{filter: lossy(7, 0.1, 0.1), cuttable: true})
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- c.load(ctx, 8, 4, 300) }()
			time.Sleep(300 * time.Millisecond)
			l := c.leader(1)
			c.reps[1][l].layer.setCut(true)
			f := (c.leader(2) + 1) % 3
			c.reps[2][f].layer.setCut(true)
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
			c.reps[1][l].layer.setCut(false)
			c.reps[2][f].layer.setCut(false)
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			c.settle(30 * time.Second)
		})
	}
}
