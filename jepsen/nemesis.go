package jepsen

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/flexkv/flexkv/jepsen/history"
	"github.com/flexkv/flexkv/jepsen/hosts"
)

// The fault kinds, as the nemesis lines of a history name them.
const (
	KillLeader   = "kill-leader"   // SIGKILL a group's leader, restart it after the hold
	KillFollower = "kill-follower" // SIGKILL a follower, restart it after the hold
	Partition    = "partition"     // a region's link down, up after the hold
	PartitionOut = "partition-out" // what a region sends dropped (one direction), forwarded after the hold
	DiskFull     = "disk-full"     // a replica's disk filled, freed after the hold
)

// Kinds are every fault kind, in the order a schedule cycles through them.
var Kinds = []string{KillLeader, Partition, KillFollower, DiskFull, PartitionOut}

// nemesis makes faults on a cluster of hosts on a seeded schedule and
// records each as it starts and ends.
type nemesis struct {
	c     *hosts.Cluster
	w     *history.Writer
	rng   *rand.Rand
	kinds []string
	logf  func(string, ...any)
	// holdMin and holdMax bound how long a fault lasts; gapMin and gapMax
	// the quiet between two.
	holdMin, holdMax, gapMin, gapMax time.Duration
}

// between returns a duration in [lo, hi).
func (n *nemesis) between(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(n.rng.Int64N(int64(hi-lo)+1))
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// run makes faults until ctx ends, each healed before the next starts,
// cycling through the kinds in a seeded order; the fault under way when
// ctx ends is healed at once.
func (n *nemesis) run(ctx context.Context) error {
	order := append([]string(nil), n.kinds...)
	n.rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	for i := 0; ctx.Err() == nil; i++ {
		sleep(ctx, n.between(n.gapMin, n.gapMax))
		if ctx.Err() != nil {
			break
		}
		if err := n.revive(); err != nil {
			return err
		}
		if err := n.fault(ctx, order[i%len(order)]); err != nil {
			return err
		}
	}
	return nil
}

// Crash is the kind of the nemesis lines of a replica found exited by
// itself (a disk that was full when it wrote, seen only later) and
// restarted.
const Crash = "crash"

// revive restarts every replica whose server exited by itself since the
// last fault, and records it.
func (n *nemesis) revive() error {
	for _, r := range n.c.Replicas {
		if !n.c.Reap(r.ID) {
			continue
		}
		target := r.Group + "/" + r.ID
		if err := n.record(Crash, history.PhaseStart, target, "found exited (see its log)"); err != nil {
			return err
		}
		if err := n.c.Restart(r.ID); err != nil {
			return err
		}
		if err := n.record(Crash, history.PhaseEnd, target, "restarted"); err != nil {
			return err
		}
	}
	return nil
}

// record writes a nemesis line.
func (n *nemesis) record(kind, phase, target, detail string) error {
	_, err := n.w.Record(history.Op{
		Process: history.NemesisProcess, Type: history.Info, F: kind,
		Fault: &history.Fault{Phase: phase, Target: target, Detail: detail},
	})
	n.logf("nemesis: %s %s %s %s", kind, phase, target, detail)
	return err
}

// fault makes one fault of kind, holds it and heals it.
func (n *nemesis) fault(ctx context.Context, kind string) error {
	hold := n.between(n.holdMin, n.holdMax)
	g := n.rng.IntN(len(n.c.ClusterConfig.Groups))
	group := hosts.GroupName(g)
	switch kind {
	case KillLeader, KillFollower:
		id := n.pick(group, kind == KillLeader)
		if err := n.record(kind, history.PhaseStart, group+"/"+id, "SIGKILL"); err != nil {
			return err
		}
		if err := n.c.Kill(id); err != nil {
			return err
		}
		sleep(ctx, hold)
		if err := n.c.Restart(id); err != nil {
			return err
		}
		return n.record(kind, history.PhaseEnd, group+"/"+id, "restarted")
	case Partition:
		if err := n.record(kind, history.PhaseStart, group, "region link down"); err != nil {
			return err
		}
		if err := n.c.CutRegion(g, true); err != nil {
			return err
		}
		sleep(ctx, hold)
		if err := n.c.CutRegion(g, false); err != nil {
			return err
		}
		return n.record(kind, history.PhaseEnd, group, "region link up")
	case PartitionOut:
		if err := n.record(kind, history.PhaseStart, group, "what the region sends is dropped"); err != nil {
			return err
		}
		if err := n.c.CutRegionOutbound(g, true); err != nil {
			return err
		}
		sleep(ctx, hold)
		if err := n.c.CutRegionOutbound(g, false); err != nil {
			return err
		}
		return n.record(kind, history.PhaseEnd, group, "forwarded again")
	case DiskFull:
		return n.diskFull(ctx, group, hold)
	}
	return fmt.Errorf("jepsen: unknown fault kind %q", kind)
}

// diskFull fills a replica's disk for hold, frees it, and restarts the
// replica if it exited meanwhile.
func (n *nemesis) diskFull(ctx context.Context, group string, hold time.Duration) error {
	id := n.pick(group, n.rng.IntN(2) == 0)
	target := group + "/" + id
	if err := n.record(DiskFull, history.PhaseStart, target, "tmpfs filled"); err != nil {
		return err
	}
	if err := n.c.FillDisk(id); err != nil {
		return err
	}
	sleep(ctx, hold)
	if err := n.c.FreeDisk(id); err != nil {
		return err
	}
	detail := "freed; the server kept running"
	if n.c.Reap(id) {
		detail = "freed; the server had exited: restarted"
		if err := n.c.Restart(id); err != nil {
			return err
		}
	}
	return n.record(DiskFull, history.PhaseEnd, target, detail)
}

// pick returns a replica of group: its leader (or a follower), as `flexkv
// status` reports; a random replica when no replica says so.
func (n *nemesis) pick(group string, leader bool) string {
	var ids, want []string
	for _, gc := range n.c.ClusterConfig.Groups {
		if gc.Name == group {
			for _, r := range gc.Replicas {
				ids = append(ids, r.ID)
			}
		}
	}
	role := "follower"
	if leader {
		role = "leader"
	}
	for _, row := range n.c.Roles() {
		if row.Group == group && row.Role == role {
			want = append(want, row.Replica)
		}
	}
	if len(want) == 0 {
		want = ids
	}
	return want[n.rng.IntN(len(want))]
}
