package hosts_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flexkv/flexkv/client"
	"github.com/flexkv/flexkv/jepsen/hosts"
	"github.com/flexkv/flexkv/txn"
)

// startCluster builds the binary and starts a cluster of hosts, or skips
// the test naming what the machine lacks. Its cleanup closes the cluster
// and fails the test if anything it made is left.
func startCluster(t *testing.T, protocol string) *hosts.Cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("starts nine server processes")
	}
	if err := hosts.Available(); err != nil {
		t.Skipf("no host harness here: %v", err)
	}
	ctx := context.Background()
	dir := t.TempDir()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "flexkv")
	if err := hosts.Build(ctx, root, bin); err != nil {
		t.Fatal(err)
	}
	c, err := hosts.Start(ctx, hosts.Config{Binary: bin, Dir: filepath.Join(dir, "run"), Protocol: protocol, DiskBytes: 256 << 20, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
		if t.Failed() {
			logTails(t, filepath.Join(dir, "run", "logs"))
		}
		ns, links, mounts := c.Resources()
		if len(ns)+len(links)+len(mounts) > 0 {
			t.Errorf("left behind: namespaces %v, links %v, mounts %v", ns, links, mounts)
		}
	})
	return c
}

// logTails logs the last lines of every replica's log under dir: what a
// failed test needs to say why a server went away.
func logTails(t *testing.T, dir string) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
		t.Logf("%s, last lines:\n%s", filepath.Base(f), strings.Join(lines[max(0, len(lines)-15):], "\n"))
	}
}

// TestHostFaults: a cluster of nine namespaces answers over TLS; a cut
// region's keys stop answering and answer again once healed while the
// other regions serve throughout; a region cut from the other regions
// alone serves its own keys but no transaction across; a killed leader's
// group serves again; a full disk is full.
func TestHostFaults(t *testing.T) {
	c := startCluster(t, "flexcast")
	ctx := context.Background()
	cl, err := client.New(ctx, client.Config{Endpoints: c.Endpoints(), CertsDir: c.CertsDir, AttemptTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	put := func(key string, limit time.Duration) error {
		ctx, cancel := context.WithTimeout(ctx, limit)
		defer cancel()
		return cl.Put(ctx, []byte(key), []byte("v"))
	}
	prefixes := c.Prefixes()
	for _, p := range prefixes {
		if err := put(p+"a", 30*time.Second); err != nil {
			t.Fatalf("put %s: %v", p, err)
		}
	}

	if err := c.CutRegion(1, true); err != nil {
		t.Fatal(err)
	}
	if err := put(prefixes[1]+"b", 2*time.Second); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a put into the cut region: %v, want a deadline", err)
	}
	if err := put(prefixes[0]+"b", 10*time.Second); err != nil {
		t.Errorf("a put into a region not cut: %v", err)
	}
	if err := c.CutRegion(1, false); err != nil {
		t.Fatal(err)
	}
	if err := put(prefixes[1]+"c", 30*time.Second); err != nil {
		t.Errorf("a put after the heal: %v", err)
	}

	if err := c.CutRegionOutbound(2, true); err != nil {
		t.Fatal(err)
	}
	if err := put(prefixes[2]+"b", 2*time.Second); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a put into a region whose packets out are dropped: %v, want a deadline", err)
	}
	if err := c.CutRegionOutbound(2, false); err != nil {
		t.Fatal(err)
	}
	if err := put(prefixes[2]+"c", 30*time.Second); err != nil {
		t.Errorf("a put after the heal: %v", err)
	}

	checkPeersCut(ctx, t, c, cl, put, prefixes[0], prefixes[1])

	r := c.Replicas[0]
	if err := c.Kill(r.ID); err != nil {
		t.Fatal(err)
	}
	if c.Running(r.ID) {
		t.Errorf("%s runs after SIGKILL", r.ID)
	}
	if err := put(prefixes[0]+"d", 30*time.Second); err != nil {
		t.Errorf("a put with one of three replicas killed: %v", err)
	}
	if err := c.Restart(r.ID); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitServing(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}

	victim := c.Replicas[4].ID
	if err := c.FillDisk(victim); err != nil {
		t.Fatal(err)
	}
	if free, err := c.DiskFree(victim); err != nil || free > 64<<10 {
		t.Errorf("%s's disk has %d bytes free after the fill (%v)", victim, free, err)
	}
	if err := c.FreeDisk(victim); err != nil {
		t.Fatal(err)
	}
	if free, err := c.DiskFree(victim); err != nil || free < 64<<20 {
		t.Errorf("%s's disk has %d bytes free after the fill was removed (%v)", victim, free, err)
	}
	if c.Reap(victim) {
		if err := c.Restart(victim); err != nil {
			t.Fatal(err)
		}
	}
	if err := put(prefixes[1]+"e", 30*time.Second); err != nil && !strings.Contains(err.Error(), "no space") {
		t.Errorf("a put after the disk was freed: %v", err)
	}
}

// checkPeersCut cuts group 1's peer traffic: it still serves its clients
// alone (a put of cutPrefix); a transaction that needs another group (of
// otherPrefix) does not complete, and does after the heal.
func checkPeersCut(ctx context.Context, t *testing.T, c *hosts.Cluster, cl *client.Client, put func(string, time.Duration) error, otherPrefix, cutPrefix string) {
	t.Helper()
	if err := c.CutRegionPeers(1, true); err != nil {
		t.Fatal(err)
	}
	if err := put(cutPrefix+"p", 10*time.Second); err != nil {
		t.Errorf("a put into a region whose peer traffic is cut: %v, want it served (its clients and raft are untouched)", err)
	}
	across := &txn.Txn{Then: []txn.Op{
		{Kind: txn.OpAdd, Key: []byte(otherPrefix + "n"), Int: 1, Wrap: true},
		{Kind: txn.OpAdd, Key: []byte(cutPrefix + "n"), Int: 1, Wrap: true},
	}}
	tctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	if _, err := cl.Txn(tctx, across); err == nil {
		t.Error("a transaction across a region whose peer traffic is cut completed")
	}
	cancel()
	if err := c.CutRegionPeers(1, false); err != nil {
		t.Fatal(err)
	}
	tctx, cancel = context.WithTimeout(ctx, 60*time.Second)
	if _, err := cl.Txn(tctx, across); err != nil {
		t.Errorf("a transaction across the region after the heal: %v", err)
	}
	cancel()
}

// TestAvailableNamesWhatIsMissing: without root or without the ip command
// the harness says which, so that a test skips with the reason.
func TestAvailableNamesWhatIsMissing(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	err := hosts.Available()
	if err == nil {
		t.Fatal("no error without an ip command in PATH")
	}
	if !strings.Contains(err.Error(), "needs root") && !strings.Contains(err.Error(), "needs iproute2") {
		t.Errorf("error %q names neither root nor iproute2", err)
	}
}

// TestHostChanges: the cluster changes of DESIGN 14 through the flexkv
// binary, as the nemesis makes them: an overlay change (the ranks rotated,
// the tree rooted at the new lowest rank) starts epoch 2 at every replica
// and the cluster serves across groups after it; a killed replica is
// replaced (a new host added, joined, promoted, the old one removed), the
// new one serves its group and restarts with --join after a kill, and the
// removed one is never started again.
func TestHostChanges(t *testing.T) {
	c := startCluster(t, "tree")
	ctx := context.Background()
	cl, err := client.New(ctx, client.Config{Endpoints: c.Endpoints(), CertsDir: c.CertsDir, AttemptTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	prefixes := c.Prefixes()
	across := func(key string) error {
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		var ops []txn.Op
		for _, p := range prefixes {
			ops = append(ops, txn.Op{Kind: txn.OpAdd, Key: []byte(p + key), Int: 1, Wrap: true})
		}
		_, err := cl.Txn(ctx, &txn.Txn{Then: ops})
		return err
	}
	if err := across("n"); err != nil {
		t.Fatalf("a transaction across every group: %v", err)
	}

	order := append(append([]string(nil), c.ClusterConfig.Overlay[1:]...), c.ClusterConfig.Overlay[0])
	tree := map[string]string{}
	for _, g := range order[1:] {
		tree[g] = order[0]
	}
	epoch, err := c.ApplyOverlay(order, tree, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if epoch != 2 {
		t.Errorf("overlay apply started epoch %d, want 2", epoch)
	}
	if at, running := c.WaitEpoch(epoch, 30*time.Second); at != running || running != 9 {
		t.Errorf("%d of %d running replicas at epoch %d, want 9 of 9", at, running, epoch)
	}
	if err := across("n"); err != nil {
		t.Errorf("a transaction across every group after the overlay change: %v", err)
	}
	if _, err := c.ApplyOverlay([]string{order[0], order[0], order[1]}, nil, 5*time.Second); err == nil {
		t.Error("an overlay that lists a group twice was taken")
	}
	checkReplace(ctx, t, c, across)
}

// checkReplace replaces a killed replica of group 0 (add, join, promote,
// remove: epochs 3 and 4) and checks that the new one votes and the
// removed one is never started again.
func checkReplace(ctx context.Context, t *testing.T, c *hosts.Cluster, across func(string) error) {
	t.Helper()
	old := c.Members(0)[1]
	if err := c.Kill(old); err != nil {
		t.Fatal(err)
	}
	r, err := c.AddHost(0)
	if err != nil {
		t.Fatal(err)
	}
	epoch, err := c.MemberAdd(r.ID)
	if err != nil || epoch != 3 {
		t.Fatalf("member add %s: epoch %d, %v; want epoch 3", r.ID, epoch, err)
	}
	if err := c.Restart(r.ID); err != nil {
		t.Fatal(err)
	}
	if err := c.MemberPromote(r.ID, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	if epoch, err = c.MemberRemove(old); err != nil || epoch != 4 {
		t.Fatalf("member remove %s: epoch %d, %v; want epoch 4", old, epoch, err)
	}
	members := strings.Join(c.Members(0), ",")
	if strings.Contains(","+members+",", ","+old+",") || !strings.Contains(","+members+",", ","+r.ID+",") {
		t.Errorf("group 0's members %s: want %s in and %s out", members, r.ID, old)
	}
	if err := c.Restart(old); err == nil {
		t.Errorf("the removed %s was started again", old)
	}
	// The new member votes: with it and one other of the group killed,
	// the group has no quorum unless the new member serves; restarted
	// (with --join), it serves again.
	if err := c.Kill(r.ID); err != nil {
		t.Fatal(err)
	}
	if err := c.Restart(r.ID); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitServing(ctx, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	other := c.Members(0)[0]
	if err := c.Kill(other); err != nil {
		t.Fatal(err)
	}
	if err := across("n"); err != nil {
		t.Errorf("a transaction across every group with %s killed, %s replaced by %s: %v\n%s's log:\n%s", other, old, r.ID, err, r.ID, logTail(r.Log))
	}
	if err := c.Restart(other); err != nil {
		t.Fatal(err)
	}
	roles := map[string]string{}
	for _, row := range c.Roles() {
		roles[row.Replica] = row.Role
	}
	if roles[r.ID] != "leader" && roles[r.ID] != "follower" {
		t.Errorf("%s's role %q, want leader or follower (roles %v)", r.ID, roles[r.ID], roles)
	}
}

// logTail returns the end of a replica's log.
func logTail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	return string(b[max(0, len(b)-3000):])
}
