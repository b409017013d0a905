package hosts_test

import (
	"context"
	"errors"
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
		ns, links, mounts := c.Resources()
		if len(ns)+len(links)+len(mounts) > 0 {
			t.Errorf("left behind: namespaces %v, links %v, mounts %v", ns, links, mounts)
		}
	})
	return c
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
