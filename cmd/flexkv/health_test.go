package main

import (
	"strings"
	"testing"
)

// TestHealth probes replicas of a running secure cluster as a Kubernetes
// probe does: SERVING on the peer port with the replica's own node
// certificate, through --addr too, and on the client port; a stopped replica fails (exit 3); bad
// usage exits 2.
func TestHealth(t *testing.T) {
	cfg, path, l := startStatusCluster(t)
	r := cfg.Groups[1].Replicas[0]
	health := func(args ...string) (int, string, string) {
		t.Helper()
		return runCmd(t, newRootCmd(), append([]string{"health", "--config", path, "--certs-dir", l.CertsDir()}, args...)...)
	}
	if code, out, stderr := health("--node", r.ID); code != 0 || out != "SERVING\n" {
		t.Fatalf("health --node %s: exit %d, out %q, stderr %q; want 0 and SERVING", r.ID, code, out, stderr)
	}
	if code, out, stderr := health("--node", r.ID, "--addr", r.PeerAddr()); code != 0 || out != "SERVING\n" {
		t.Fatalf("health --addr %s: exit %d, out %q, stderr %q; want 0 and SERVING", r.PeerAddr(), code, out, stderr)
	}
	// The client port admits the cluster's nodes too (they forward
	// requests there for their users, DESIGN 7): the probe answers there.
	if code, out, stderr := health("--node", r.ID, "--addr", r.GRPC); code != 0 || out != "SERVING\n" {
		t.Fatalf("health on the client port with a node certificate: exit %d, out %q, stderr %q; want 0 and SERVING", code, out, stderr)
	}
	if err := l.Stop(r.ID); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := health("--node", r.ID, "--timeout", "300ms"); code != 3 || !strings.Contains(stderr, r.PeerAddr()) {
		t.Fatalf("health of stopped %s: exit %d, stderr %q; want 3 naming its address", r.ID, code, stderr)
	}
	for _, args := range [][]string{{}, {"--node", "nobody"}, {"--node", r.ID, "--insecure"}} {
		if code, _, stderr := health(args...); code != 2 {
			t.Errorf("health %q: exit %d (stderr %q), want 2", args, code, stderr)
		}
	}
}
