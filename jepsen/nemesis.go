package jepsen

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/flexkv/flexkv/jepsen/history"
	"github.com/flexkv/flexkv/jepsen/hosts"
)

// The fault kinds, as the nemesis lines of a history name them.
const (
	KillLeader   = "kill-leader"   // SIGKILL a group's leader, restart it after the hold
	KillFollower = "kill-follower" // SIGKILL a follower, restart it after the hold
	// PauseLeader: SIGSTOP a group's leader, SIGCONT after the hold: it
	// wakes believing it leads, its peers' answers from before the pause
	// and its clients' requests waiting in its sockets.
	PauseLeader  = "pause-leader"
	Partition    = "partition"     // a region's link down, up after the hold
	PartitionOut = "partition-out" // what a region sends dropped (one direction), forwarded after the hold
	DiskFull     = "disk-full"     // a replica's disk filled, freed after the hold
	Overlay      = "overlay"       // the overlay changed (ranks rotated; the tree's root moved), no hold
	// MemberReplace: a replica SIGKILLed and replaced, as an operator
	// replaces a dead machine: a new one added, joined, promoted, the dead
	// one removed; no hold.
	MemberReplace = "member-replace"
	// PartitionMove: a warehouse moved to another group (flexkv partition
	// move --wait); no hold.
	PartitionMove = "partition-move"
)

// Kinds are every fault kind, in the order a schedule cycles through them.
var Kinds = []string{KillLeader, Partition, KillFollower, DiskFull, PartitionOut, Overlay, MemberReplace, PartitionMove, PauseLeader}

// Bounds of an overlay change: how long `flexkv overlay apply` may take,
// and then how long the nemesis waits for every replica to start the new
// epoch before it records the change as ended.
const (
	overlayApplyTimeout = 20 * time.Second
	overlayEpochWait    = 10 * time.Second
	// memberPromoteWait bounds a new member's catching up (from its
	// group leader's snapshot) before it is promoted.
	memberPromoteWait = 60 * time.Second
	// partitionMoveWait bounds a partition move, its copy included.
	partitionMoveWait = 60 * time.Second
)

// nemesis makes faults on a cluster of hosts on a seeded schedule and
// records each as it starts and ends.
type nemesis struct {
	c     *hosts.Cluster
	w     *history.Writer
	rng   *rand.Rand
	kinds []string
	lead  string // made first, then the cycle ("": none)
	logf  func(string, ...any)
	// overlay is the running overlay, lowest rank first: the
	// configuration's until the nemesis changes it.
	overlay []string
	// owners are the partitions' owners, by name: the configuration's
	// until the nemesis moves one.
	owners map[string]string
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

// run makes faults until ctx ends, each healed before the next starts:
// the lead kind first, if any, then cycling through the kinds in a seeded
// order; the fault under way when
// ctx ends is healed at once.
func (n *nemesis) run(ctx context.Context) error {
	order := append([]string(nil), n.kinds...)
	n.rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	var lead []string // made once, before the cycle
	if n.lead != "" {
		lead = []string{n.lead}
	}
	for i := 0; ctx.Err() == nil; i++ {
		sleep(ctx, n.between(n.gapMin, n.gapMax))
		if ctx.Err() != nil {
			break
		}
		if err := n.revive(); err != nil {
			return err
		}
		var kind string
		if i < len(lead) {
			kind = lead[i]
		} else {
			kind = order[(i-len(lead))%len(order)]
		}
		if err := n.fault(ctx, kind); err != nil {
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
		return n.held(ctx, kind, group+"/"+id, hold, "SIGKILL", "restarted",
			func() error { return n.c.Kill(id) }, func() error { return n.c.Restart(id) })
	case PauseLeader:
		id := n.pick(group, true)
		return n.held(ctx, kind, group+"/"+id, hold, "SIGSTOP", "SIGCONT",
			func() error { return n.c.Pause(id, true) }, func() error { return n.c.Pause(id, false) })
	case Partition:
		return n.held(ctx, kind, group, hold, "region link down", "region link up",
			func() error { return n.c.CutRegion(g, true) }, func() error { return n.c.CutRegion(g, false) })
	case PartitionOut:
		return n.held(ctx, kind, group, hold, "what the region sends is dropped", "forwarded again",
			func() error { return n.c.CutRegionOutbound(g, true) }, func() error { return n.c.CutRegionOutbound(g, false) })
	case DiskFull:
		return n.diskFull(ctx, group, hold)
	case Overlay:
		return n.changeOverlay()
	case MemberReplace:
		return n.replace(g)
	case PartitionMove:
		return n.movePartition()
	}
	return fmt.Errorf("jepsen: unknown fault kind %q", kind)
}

// held records the start of a fault of kind on target (started: its
// detail), makes it (start), holds it for hold (less if ctx ends), heals it and
// records the end (healed).
func (n *nemesis) held(ctx context.Context, kind, target string, hold time.Duration, started, healed string, start, heal func() error) error {
	if err := n.record(kind, history.PhaseStart, target, started); err != nil {
		return err
	}
	if err := start(); err != nil {
		return err
	}
	sleep(ctx, hold)
	if err := heal(); err != nil {
		return err
	}
	return n.record(kind, history.PhaseEnd, target, healed)
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

// changeOverlay changes the running cluster's overlay as an operator does
// (DESIGN 14, flexkv overlay apply): the ranks rotated by one, so that the
// group of the lowest rank (FlexCast's change entry and lca of every set
// it is in) becomes the highest, and under the tree protocol a new tree,
// every group a child of the new lowest rank, so that the root moves. A
// change is not held: it ends once every running replica has started the
// new epoch (or overlayEpochWait passed), and the stall it causes counts
// for it. An error of the command (the cluster refused the change, or no
// leader of the change entry took it in overlayApplyTimeout) ends the run:
// the nemesis makes a change only when the previous fault has healed.
func (n *nemesis) changeOverlay() error {
	if n.overlay == nil {
		n.overlay = slices.Clone(n.c.ClusterConfig.Overlay)
	}
	order := append(slices.Clone(n.overlay[1:]), n.overlay[0])
	detail := "overlay " + strings.Join(order, ",")
	var tree map[string]string
	if n.c.ClusterConfig.Protocol == "tree" {
		tree = map[string]string{}
		for _, g := range order[1:] {
			tree[g] = order[0]
		}
		detail += ", tree under " + order[0]
	}
	if err := n.record(Overlay, history.PhaseStart, "cluster", "flexkv overlay apply: "+detail); err != nil {
		return err
	}
	epoch, err := n.c.ApplyOverlay(order, tree, overlayApplyTimeout)
	if err != nil {
		return err
	}
	n.overlay = order
	at, running := n.c.WaitEpoch(epoch, overlayEpochWait)
	return n.record(Overlay, history.PhaseEnd, "cluster",
		fmt.Sprintf("epoch %d: %s; %d of %d running replicas in it", epoch, detail, at, running))
}

// replace replaces a replica of group g (its leader or a follower) the way
// DESIGN 14 says a dead replica is replaced, with no pause in service: it
// is SIGKILLed (the machine is lost), a new host is made with its node
// certificate (flexkv cert create-node --group), the new replica is added
// as a learner (flexkv member add), started with flexkv server --join,
// made a voter once it has caught up (flexkv member promote --wait), and
// the dead one is removed (flexkv member remove). The end line names the
// epochs of the add and the remove. A command that fails ends the run, as
// for an overlay change.
func (n *nemesis) replace(g int) error {
	group := hosts.GroupName(g)
	old := n.pick(group, n.rng.IntN(2) == 0)
	target := group + "/" + old
	if err := n.record(MemberReplace, history.PhaseStart, target, "SIGKILL, then a new member added, joined, promoted, the old one removed"); err != nil {
		return err
	}
	if err := n.c.Kill(old); err != nil {
		return err
	}
	r, err := n.c.AddHost(g)
	if err != nil {
		return err
	}
	added, err := n.c.MemberAdd(r.ID)
	if err != nil {
		return err
	}
	if err := n.c.Restart(r.ID); err != nil {
		return err
	}
	start := time.Now()
	if err := n.c.MemberPromote(r.ID, memberPromoteWait); err != nil {
		return err
	}
	promoted := time.Since(start)
	removed, err := n.c.MemberRemove(old)
	if err != nil {
		return err
	}
	return n.record(MemberReplace, history.PhaseEnd, target, fmt.Sprintf("%s added (epoch %d), joined at %s, promoted after %.1fs; %s removed (epoch %d)",
		r.ID, added, r.IP, promoted.Seconds(), old, removed))
}

// pick returns a replica of group: its leader (or a follower), as `flexkv
// status` reports; a random replica when no replica says so.
func (n *nemesis) pick(group string, leader bool) string {
	var ids, want []string
	for g := range n.c.ClusterConfig.Groups {
		if hosts.GroupName(g) == group {
			ids = n.c.Members(g)
		}
	}
	role := "follower"
	if leader {
		role = "leader"
	}
	for _, row := range n.c.Roles() {
		if row.Group == group && row.Role == role && slices.Contains(ids, row.Replica) {
			want = append(want, row.Replica)
		}
	}
	if len(want) == 0 {
		want = ids
	}
	return want[n.rng.IntN(len(want))]
}

// movePartition moves a random warehouse to another random group as an
// operator does (DESIGN 14, flexkv partition move --wait). A move is not
// held: it ends once the new owner owns it, and the wait of the requests
// on it counts for it. An error of the command ends the run, as for an
// overlay change.
func (n *nemesis) movePartition() error {
	if n.owners == nil {
		n.owners = map[string]string{}
		for _, p := range n.c.ClusterConfig.Partitions {
			if !p.Replicated {
				n.owners[p.Name] = p.Group
			}
		}
	}
	names := slices.Sorted(maps.Keys(n.owners))
	if len(names) == 0 {
		return nil
	}
	part := names[n.rng.IntN(len(names))]
	var others []string
	for _, g := range n.c.ClusterConfig.Groups {
		if g.Name != n.owners[part] {
			others = append(others, g.Name)
		}
	}
	to := others[n.rng.IntN(len(others))]
	detail := fmt.Sprintf("flexkv partition move %s --to %s (from %s)", part, to, n.owners[part])
	if err := n.record(PartitionMove, history.PhaseStart, "cluster", detail); err != nil {
		return err
	}
	start := time.Now()
	epoch, err := n.c.MovePartition(part, to, partitionMoveWait)
	if err != nil {
		return err
	}
	n.owners[part] = to
	return n.record(PartitionMove, history.PhaseEnd, "cluster", fmt.Sprintf("epoch %d: %s, %.1fs", epoch, detail, time.Since(start).Seconds()))
}
