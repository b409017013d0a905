package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"time"
)

// The faults a chaos run injects (flexkv local --chaos).
const (
	FaultLeaderKill      = "leader-kill"      // stop a group's leader, restart it from disk
	FaultFollowerRestart = "follower-restart" // the same to a follower
	FaultPartition       = "partition"        // cut a replica off from everyone, then heal it
	// FaultGroupPartition cuts every replica of a group off from the other
	// groups (raft inside it and its clients keep going), then heals it.
	FaultGroupPartition = "group-partition"
)

// Fault is one kind of fault, injected every Every.
type Fault struct {
	Kind  string
	Every time.Duration
}

// ParseChaos parses a --chaos value: comma-separated KIND=DURATION items,
// e.g. "leader-kill=5s,partition=10s".
func ParseChaos(s string) ([]Fault, error) {
	var out []Fault
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	for _, item := range strings.Split(s, ",") {
		kind, every, ok := strings.Cut(strings.TrimSpace(item), "=")
		if !ok {
			return nil, fmt.Errorf("cluster: chaos %q: want KIND=DURATION, e.g. leader-kill=5s", item)
		}
		switch kind {
		case FaultLeaderKill, FaultFollowerRestart, FaultPartition, FaultGroupPartition:
		default:
			return nil, fmt.Errorf("cluster: chaos %q: unknown fault %q (want %s, %s, %s or %s)", item, kind, FaultLeaderKill, FaultFollowerRestart, FaultPartition, FaultGroupPartition)
		}
		d, err := time.ParseDuration(every)
		if err != nil {
			return nil, fmt.Errorf("cluster: chaos %q: %w", item, err)
		}
		if d < 100*time.Millisecond {
			return nil, fmt.Errorf("cluster: chaos %q: every %s is too often (at least 100ms)", item, d)
		}
		out = append(out, Fault{Kind: kind, Every: d})
	}
	return out, nil
}

// Chaos injects faults into a Local cluster until its context ends: each
// fault on its own schedule, at a node drawn from a generator seeded with
// seed. The seed fixes the draws, not the run: which node a draw picks
// depends on who leads at that moment. A stopped or cut node comes
// back after Down (default: a third of the fault's period, at most 2s).
type Chaos struct {
	Local  *Local
	Faults []Fault
	Seed   uint64
	Down   time.Duration
	Logger *slog.Logger

	mu          sync.Mutex
	rng         *rand.Rand
	n           int // faults injected
	restartErrs int // restarts that failed
}

// Run injects faults until ctx ends, then heals and restarts every node it
// disturbed. It returns the number of faults injected.
func (c *Chaos) Run(ctx context.Context) int {
	c.rng = rand.New(rand.NewPCG(c.Seed, 0xc4a05))
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	var wg sync.WaitGroup
	for _, f := range c.Faults {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := time.NewTicker(f.Every)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
					c.inject(ctx, f)
				}
			}
		}()
	}
	wg.Wait()
	return c.n
}

func (c *Chaos) pick(candidates []string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(candidates) == 0 {
		return ""
	}
	return candidates[c.rng.IntN(len(candidates))]
}

func (c *Chaos) down(f Fault) time.Duration {
	if c.Down > 0 {
		return c.Down
	}
	return min(f.Every/3, 2*time.Second)
}

// groups returns the group names, in configuration order.
func (c *Chaos) groups() []string {
	var out []string
	for _, g := range c.Local.cfg.Cluster.Groups {
		out = append(out, g.Name)
	}
	return out
}

func (c *Chaos) inject(ctx context.Context, f Fault) {
	l := c.Local
	if f.Kind == FaultGroupPartition {
		c.cutGroup(ctx, f)
		return
	}
	var victim string
	switch f.Kind {
	case FaultLeaderKill:
		victim = l.Leader(c.pick(c.groups()))
	case FaultFollowerRestart:
		group := c.pick(c.groups())
		var followers []string
		for _, id := range l.Nodes() {
			if l.Group(id) == group && l.Running(id) && l.Leader(group) != id {
				followers = append(followers, id)
			}
		}
		victim = c.pick(followers)
	case FaultPartition:
		var running []string
		for _, id := range l.Nodes() {
			if l.Running(id) {
				running = append(running, id)
			}
		}
		victim = c.pick(running)
	}
	if victim == "" {
		c.Logger.Info("chaos: no victim this time", "fault", f.Kind)
		return
	}
	c.mu.Lock()
	c.n++
	c.mu.Unlock()
	down := c.down(f)
	c.Logger.Warn("chaos: inject", "fault", f.Kind, "node", victim, "group", l.Group(victim), "for", down)
	if f.Kind == FaultPartition {
		if err := l.SetCut(victim, true); err != nil {
			c.Logger.Error("chaos: cut", "node", victim, "err", err)
			return
		}
	} else if err := l.Stop(victim); err != nil {
		c.Logger.Error("chaos: stop", "node", victim, "err", err)
	}
	select {
	case <-ctx.Done():
	case <-time.After(down):
	}
	if f.Kind == FaultPartition {
		if err := l.SetCut(victim, false); err != nil {
			c.Logger.Error("chaos: heal", "node", victim, "err", err)
		}
		c.Logger.Warn("chaos: healed", "node", victim)
		return
	}
	// A restart can fail for a moment (a port the stopped replica held not
	// yet free on a loaded machine): try again, for up to a minute, even
	// after the run ended, so that the cluster is whole when Run returns.
	var err error
	for attempt := range 60 {
		if err = l.Start(victim); err == nil {
			break
		}
		c.Logger.Error("chaos: restart", "node", victim, "attempt", attempt+1, "err", err)
		c.mu.Lock()
		c.restartErrs++
		c.mu.Unlock()
		time.Sleep(time.Second)
	}
	if err != nil {
		return
	}
	c.Logger.Warn("chaos: restarted", "node", victim)
}

// cutGroup cuts a random group off from the others for a while.
func (c *Chaos) cutGroup(ctx context.Context, f Fault) {
	l := c.Local
	g := c.pick(c.groups())
	c.mu.Lock()
	c.n++
	c.mu.Unlock()
	down := c.down(f)
	c.Logger.Warn("chaos: inject", "fault", f.Kind, "group", g, "for", down)
	l.SetGroupCut(g, true)
	select {
	case <-ctx.Done():
	case <-time.After(down):
	}
	l.SetGroupCut(g, false)
	c.Logger.Warn("chaos: healed", "group", g)
}

// RestartErrors returns how many restarts failed (and were tried again).
func (c *Chaos) RestartErrors() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.restartErrs
}
