package main

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/flexkv/flexkv/cluster"
	"github.com/flexkv/flexkv/internal/buildinfo"
	"github.com/flexkv/flexkv/partition"
)

// TestStatus runs `flexkv status` against a running cluster (3 groups x 3
// replicas, secure): a table of every replica, with the build it runs (this
// test binary's, the servers run in it), then --json, then with a replica
// stopped (down, exit 1), and bad usage (exit 2).
func TestStatus(t *testing.T) {
	cfg, path, l := startStatusCluster(t)
	status := func(args ...string) (int, string, string) {
		t.Helper()
		return runCmd(t, newRootCmd(), append([]string{"status", "--config", path}, args...)...)
	}

	code, out, stderr := status()
	if code != 0 || stderr != "" {
		t.Fatalf("status: exit %d, stderr %q, want 0 and nothing", code, stderr)
	}
	fingerprint := checkStatusTable(t, cfg, out)

	code, out, _ = status("--json")
	if code != 0 {
		t.Fatalf("status --json: exit %d", code)
	}
	checkStatusJSON(t, out, fingerprint)

	// A stopped replica: down, exit 1.
	stopped := cfg.Groups[1].Replicas[0]
	if err := l.Stop(stopped.ID); err != nil {
		t.Fatal(err)
	}
	code, out, stderr = status("--timeout", "2s")
	if code != 1 || !strings.Contains(stderr, "status: 1 of 9 replicas down") || !strings.Contains(stderr, stopped.GRPC) {
		t.Fatalf("status with %s stopped: exit %d, stderr %q; want 1 naming it", stopped.ID, code, stderr)
	}
	if row := rowOf(out, stopped.ID); len(row) < 4 || row[3] != "down" || row[4] != "-" {
		t.Fatalf("status with %s stopped: its row %q, want down and no figures:\n%s", stopped.ID, row, out)
	}
	code, out, _ = status("--timeout", "2s", "--json")
	if code != 1 {
		t.Fatalf("status --json with a replica down: exit %d, want 1", code)
	}
	for _, r := range decodeRows(t, out) {
		if (r.Replica == stopped.ID) != (r.Role == "down") || (r.Role == "down" && (r.Error == "" || r.Term != nil)) {
			t.Fatalf("status --json with %s down: row %+v", stopped.ID, r)
		}
	}

	for _, args := range [][]string{{"extra"}, {"--endpoints", "nohost"}, {"--timeout", "soon"}, {"--endpoints", stopped.GRPC}} {
		if code, _, stderr := status(args...); code != 2 {
			t.Errorf("status %q: exit %d (stderr %q), want 2", args, code, stderr)
		}
	}
}

// startStatusCluster starts the embedded configuration's cluster on free
// addresses, until t ends, and waits for every group's leader; it returns
// the configuration, its file and the cluster.
func startStatusCluster(t *testing.T) (*partition.ClusterConfig, string, *cluster.Local) {
	t.Helper()
	return startEmbeddedCluster(t, nil)
}

// startEmbeddedCluster is startStatusCluster with edit applied to the
// configuration before it is written (nil: none), and the latency matrix
// that the written file names, if any.
func startEmbeddedCluster(t *testing.T, edit func(*partition.ClusterConfig)) (*partition.ClusterConfig, string, *cluster.Local) {
	t.Helper()
	cfg, _, err := loadCluster("")
	if err != nil {
		t.Fatal(err)
	}
	for i := range cfg.Groups {
		for j := range cfg.Groups[i].Replicas {
			r := &cfg.Groups[i].Replicas[j]
			r.Raft, r.GRPC, r.Peer, r.HTTP = freeAddr(t), freeAddr(t), freeAddr(t), ""
		}
	}
	if edit != nil {
		edit(cfg)
	}
	path := configFile(t, cfg)
	cfg, lat, err := loadCluster(path)
	if err != nil {
		t.Fatal(err)
	}
	l, err := cluster.Start(cluster.Config{Cluster: cfg, Latency: lat, Dir: t.TempDir(), NoSync: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Error(err)
		}
	})
	useCertsOf(t, l)
	deadline := time.Now().Add(20 * time.Second)
	for _, g := range cfg.Groups {
		for l.Leader(g.Name) == "" {
			if time.Now().After(deadline) {
				t.Fatalf("group %s has no leader", g.Name)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return cfg, path, l
}

// checkStatusTable checks status's table out: a header and a row for every
// replica of cfg, in order, leader or follower, with its TLS identity, the
// configuration's fingerprint, which it returns, and the running build.
func checkStatusTable(t *testing.T, cfg *partition.ClusterConfig, out string) string {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 10 || !strings.HasPrefix(lines[0], "GROUP") || !strings.HasSuffix(strings.Join(strings.Fields(lines[0]), " "), "FINGERPRINT VERSION") {
		t.Fatalf("status table:\n%s\nwant a header and 9 rows", out)
	}
	t.Logf("flexkv status:\n%s", out)
	fingerprint := ""
	bi := buildinfo.Read()
	version := versionLabel(bi.Version, bi.ShortRevision())
	for i, line := range lines[1:] {
		f := strings.Fields(line)
		g := cfg.Groups[i/3]
		r := g.Replicas[i%3]
		if len(f) != 14 || f[0] != g.Name || f[1] != r.ID || f[2] != r.GRPC || (f[3] != "leader" && f[3] != "follower") || f[4] != "1" || f[11] != g.Name+"/"+r.ID {
			t.Fatalf("row %q, want %s %s %s leader|follower, epoch 1 ... TLS %s/%s", line, g.Name, r.ID, r.GRPC, g.Name, r.ID)
		}
		if fingerprint == "" {
			fingerprint = f[12]
		}
		if f[12] != fingerprint || len(fingerprint) != 16 {
			t.Fatalf("row %q: fingerprint %q, want %q like every replica", line, f[12], fingerprint)
		}
		if f[13] != version {
			t.Fatalf("row %q: version %q, want %q (the build's %s, revision %s)", line, f[13], version, bi.Version, bi.ShortRevision())
		}
	}
	if want := partition.Fingerprint(cfg.Canonical()); fingerprint != want {
		t.Fatalf("fingerprint %s, want the configuration's %s", fingerprint, want)
	}
	return fingerprint
}

// checkStatusJSON checks status --json's out: an object for every replica
// of the 3 x 3 cluster with every figure, 3 leaders, fingerprint, and the
// running build's version and short revision.
func checkStatusJSON(t *testing.T, out, fingerprint string) {
	t.Helper()
	rows := decodeRows(t, out)
	if len(rows) != 9 {
		t.Fatalf("status --json: %d objects, want 9:\n%s", len(rows), out)
	}
	leaders := 0
	bi := buildinfo.Read()
	for _, r := range rows {
		if r.Role == "leader" {
			leaders++
		}
		if r.Epoch == nil || *r.Epoch != 1 || r.Term == nil || *r.Term == 0 || r.CommitIndex == nil || r.AppliedIndex == nil || r.Lag == nil || r.Outbox == nil || r.Pending == nil ||
			r.TLSIdentity != r.Group+"/"+r.Replica || r.Fingerprint != fingerprint || r.ClusterID == "" || r.Error != "" {
			t.Fatalf("status --json row %+v: want every figure, TLS %s/%s, fingerprint %s", r, r.Group, r.Replica, fingerprint)
		}
		if r.Version != bi.Version || r.Revision != bi.ShortRevision() {
			t.Fatalf("status --json row %+v: version %q revision %q, want %q %q", r, r.Version, r.Revision, bi.Version, bi.ShortRevision())
		}
	}
	if leaders != 3 {
		t.Fatalf("status --json: %d leaders, want 3", leaders)
	}
}

// TestStatusVersions prints the rows of a cluster half upgraded: each
// replica's VERSION shows its build, the revision added where the version
// does not hold it, "-" for a server too old to report one.
func TestStatusVersions(t *testing.T) {
	for _, tc := range []struct {
		version, revision, want string
	}{
		{"v0.4.0", "19c832a01234", "v0.4.0@19c832a01234"},
		{"v0.0.0-20261206054158-4a41b9acf42c+dirty", "4a41b9acf42c", "v0.0.0-20261206054158-4a41b9acf42c+dirty"},
		{"(devel)", "unknown", "(devel)"},
		{"(devel)", "19c832a01234", "(devel)@19c832a01234"},
		{"", "", ""},
	} {
		if got := versionLabel(tc.version, tc.revision); got != tc.want {
			t.Errorf("versionLabel(%q, %q) = %q, want %q", tc.version, tc.revision, got, tc.want)
		}
	}
	one := uint64(1)
	rows := []*statusRow{
		{Group: "g", Replica: "r1", Address: "h:1", Role: "leader", Term: &one, Version: "v0.4.0", Revision: "19c832a01234"},
		{Group: "g", Replica: "r2", Address: "h:2", Role: "follower", Term: &one, Version: "v0.5.0", Revision: "5e2f0a9b7c1d"},
		{Group: "g", Replica: "r3", Address: "h:3", Role: "follower", Term: &one},
	}
	var out bytes.Buffer
	if err := printStatus(&out, rows); err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"v0.4.0@19c832a01234", "v0.5.0@5e2f0a9b7c1d", "-"} {
		id := rows[i].Replica
		if f := rowOf(out.String(), id); len(f) != 14 || f[13] != want {
			t.Errorf("row of %s: %q, want VERSION %s:\n%s", id, f, want, out.String())
		}
	}
}

func decodeRows(t *testing.T, out string) []statusRow {
	t.Helper()
	var rows []statusRow
	for line := range strings.Lines(out) {
		var r statusRow
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("status --json line %q: %v", line, err)
		}
		rows = append(rows, r)
	}
	return rows
}

// rowOf returns the fields of the table row of replica id.
func rowOf(out, id string) []string {
	for line := range strings.Lines(out) {
		if f := strings.Fields(line); len(f) > 1 && f[1] == id {
			return f
		}
	}
	return nil
}
