package main

import (
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/flexkv/flexkv/certs"
)

// certDirs returns a fresh certs directory and CA key path, the key outside
// the directory.
func certDirs(t *testing.T) (dir, caKey string) {
	t.Helper()
	root := t.TempDir()
	return filepath.Join(root, "certs"), filepath.Join(root, "private", "ca.key")
}

func mustRun(t *testing.T, args ...string) string {
	t.Helper()
	code, out, errOut := runRoot(t, args...)
	if code != 0 {
		t.Fatalf("flexkv %s: exit code %d, want 0; stderr:\n%s", strings.Join(args, " "), code, errOut)
	}
	return out
}

// TestCert: create a CA, nodes from two configurations, a client, and list
// them.
func TestCert(t *testing.T) {
	dir, caKey := certDirs(t)
	flags := []string{"--certs-dir", dir, "--ca-key", caKey}
	out := mustRun(t, append([]string{"cert", "create-ca"}, flags...)...)
	if !strings.HasPrefix(out, "created "+filepath.Join(dir, "ca.crt")+" and "+caKey+": CA, valid until ") {
		t.Fatalf("create-ca printed %q", out)
	}
	// r4 of the embedded configs/local.yaml: group eu-west-3, host 127.0.0.1,
	// and the hosts given.
	out = mustRun(t, append([]string{"cert", "create-node", "r4", "db4.example", "10.0.0.4", "127.0.0.1"}, flags...)...)
	if !strings.Contains(out, "node eu-west-3/r4, hosts db4.example,127.0.0.1,10.0.0.4, valid until ") {
		t.Fatalf("create-node r4 printed %q", out)
	}
	// r7 of the docker cluster: its host is the compose service name.
	mustRun(t, append([]string{"cert", "create-node", "r7", "--config", "../../configs/docker.yaml"}, flags...)...)
	// The certs dir from the environment, the CA key from a flag.
	t.Setenv("FLEXKV_CERTS_DIR", dir)
	mustRun(t, "cert", "create-client", "root", "--ca-key", caKey)

	out = mustRun(t, "cert", "list")
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	want := [][]string{
		{"FILE", "KIND", "SUBJECT", "HOSTS", "NOT-AFTER", "DAYS-LEFT", "CHAINS", "PROBLEM"},
		{"ca.crt", "ca", "FlexKV", "CA", "-"},
		{"client.root.crt", "client", "root", "-"},
		{"node.r4.crt", "node", "eu-west-3/r4", "db4.example,127.0.0.1,10.0.0.4"},
		{"node.r7.crt", "node", "eu-central-1/r7", "r7"},
	}
	if len(lines) != len(want) {
		t.Fatalf("list printed %d lines, want %d:\n%s", len(lines), len(want), out)
	}
	for i, w := range want {
		f := strings.Fields(lines[i])
		if len(f) < len(w) || strings.Join(f[:len(w)], " ") != strings.Join(w, " ") {
			t.Errorf("list line %d %q, want it to start with %q", i, lines[i], w)
		}
		if i > 0 && strings.Join(f[len(f)-2:], " ") != "yes -" {
			t.Errorf("list line %d %q: want chains yes and no problem", i, lines[i])
		}
		if days, err := strconv.Atoi(f[len(f)-3]); i > 0 && (err != nil || days < 5*365-2) {
			t.Errorf("list line %d %q: days left %q, want about 5 years' (10 for the CA)", i, lines[i], f[len(f)-3])
		}
	}

	var got struct {
		Certs []certListEntry `json:"certs"`
	}
	if err := json.Unmarshal([]byte(mustRun(t, "cert", "list", "--json")), &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Certs) != 4 {
		t.Fatalf("list --json: %d certs, want 4: %+v", len(got.Certs), got.Certs)
	}
	if c := got.Certs[2]; c.File != "node.r4.crt" || c.Kind != "node" || c.Subject != "eu-west-3/r4" ||
		strings.Join(c.Hosts, ",") != "db4.example,127.0.0.1,10.0.0.4" || !c.Chains || c.Problem != "" || c.NotAfter == "" ||
		c.DaysLeft == nil || *c.DaysLeft < 5*365-2 || *c.DaysLeft > 5*366 {
		t.Fatalf("list --json: node.r4.crt is %+v", c)
	}

	// The files load as package certs loads them.
	n, err := certs.LoadNode(dir, "r4")
	if err != nil {
		t.Fatal(err)
	}
	if n.ID != (certs.NodeID{Group: "eu-west-3", Replica: "r4"}) {
		t.Fatalf("node.r4 names %v", n.ID)
	}
	if _, err := certs.LoadClient(dir, "root"); err != nil {
		t.Fatal(err)
	}
}

// TestCertOverwrite: an existing file is refused, named, and left as it
// was; --overwrite replaces it.
func TestCertOverwrite(t *testing.T) {
	dir, caKey := certDirs(t)
	flags := []string{"--certs-dir", dir, "--ca-key", caKey}
	mustRun(t, append([]string{"cert", "create-ca"}, flags...)...)
	mustRun(t, append([]string{"cert", "create-node", "r1"}, flags...)...)
	mustRun(t, append([]string{"cert", "create-client", "root"}, flags...)...)
	before := readFiles(t, dir)
	for _, tc := range []struct {
		args []string
		file string
	}{
		{[]string{"create-ca"}, filepath.Join(dir, "ca.crt")},
		{[]string{"create-node", "r1"}, filepath.Join(dir, "node.r1.crt")},
		{[]string{"create-client", "root"}, filepath.Join(dir, "client.root.crt")},
	} {
		t.Run(tc.args[0], func(t *testing.T) {
			code, _, errOut := runRoot(t, append(append([]string{"cert"}, tc.args...), flags...)...)
			if code != 1 {
				t.Fatalf("exit code %d, want 1; stderr %q", code, errOut)
			}
			if want := tc.file + " exists (give --overwrite to replace it)"; !strings.Contains(errOut, want) {
				t.Fatalf("stderr %q lacks %q", errOut, want)
			}
		})
	}
	if after := readFiles(t, dir); !maps.Equal(before, after) {
		t.Fatal("a refused command changed the certs dir")
	}
	mustRun(t, append([]string{"cert", "create-node", "r1", "--overwrite"}, flags...)...)
	after := readFiles(t, dir)
	if after["node.r1.key"] == before["node.r1.key"] || after["node.r1.crt"] == before["node.r1.crt"] {
		t.Fatal("--overwrite left node.r1's files as they were")
	}
	if after["ca.crt"] != before["ca.crt"] || after["client.root.key"] != before["client.root.key"] {
		t.Fatal("create-node --overwrite changed other files")
	}
}

func readFiles(t *testing.T, dir string) map[string]string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	files := make(map[string]string, len(entries))
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		files[e.Name()] = string(data)
	}
	return files
}

// TestCertBadUsage: each bad invocation exits with its code and a message
// that names the problem, and writes nothing.
func TestCertBadUsage(t *testing.T) {
	dir, caKey := certDirs(t)
	flags := []string{"--certs-dir", dir, "--ca-key", caKey}
	mustRun(t, append([]string{"cert", "create-ca"}, flags...)...)
	before := readFiles(t, dir)
	openKey := filepath.Join(t.TempDir(), "open.key")
	if err := os.WriteFile(openKey, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	otherDir := t.TempDir()
	t.Setenv("FLEXKV_CERTS_DIR", "")
	tests := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"cert"}, 2, "cert: want a command: create-ca, create-node, create-client or list"},
		{[]string{"cert", "renew"}, 2, `cert: unknown command "renew"`},
		{[]string{"cert", "create-ca", "--ca-key", caKey}, 2, "cert create-ca: --certs-dir is required (or FLEXKV_CERTS_DIR)"},
		{[]string{"cert", "create-ca", "--certs-dir", dir}, 2, "cert create-ca: --ca-key is required (or FLEXKV_CA_KEY)"},
		{append([]string{"cert", "create-ca", "extra"}, flags...), 2, "cert create-ca: want no arguments, got 1"},
		{append([]string{"cert", "create-ca", "--bogus"}, flags...), 2, "cert create-ca: unknown flag: --bogus"},
		{append([]string{"cert", "create-node"}, flags...), 2, "cert create-node: want ID [HOST...], got 0 arguments"},
		{append([]string{"cert", "create-node", "r99"}, flags...), 2,
			`cert create-node: replica "r99" is not in the configuration configs/local.yaml (replicas: r1, r2, r3, r4, r5, r6, r7, r8, r9)`},
		{append([]string{"cert", "create-node", "r99", "--config", "../../configs/docker.yaml"}, flags...), 2,
			`replica "r99" is not in the configuration ../../configs/docker.yaml`},
		{append([]string{"cert", "create-node", "r10", "127.0.0.1", "--group", "mars"}, flags...), 2,
			`cert create-node: --group "mars" is not a group of the configuration configs/local.yaml (groups: eu-west-1, eu-west-3, eu-central-1)`},
		{append([]string{"cert", "create-node", "r10", "--group", "eu-west-1"}, flags...), 2,
			"cert create-node: r10 is not in the configuration configs/local.yaml: give the HOSTs it is dialled by"},
		{append([]string{"cert", "create-node", "r4", "127.0.0.1", "--group", "eu-west-1"}, flags...), 2,
			`cert create-node: --group eu-west-1: replica "r4" is a replica of group eu-west-3`},
		{append([]string{"cert", "create-node", "R1"}, flags...), 2, `cert create-node: certs: replica "R1" is not a valid name`},
		{append([]string{"cert", "create-node", "r1", "r1:7100"}, flags...), 2, `cert create-node: host "r1:7100" is not a DNS name or an IP address`},
		{append([]string{"cert", "create-node", "r1", "--config", "no-such.yaml"}, flags...), 2, "cert create-node: config no-such.yaml"},
		{[]string{"cert", "create-node", "r1", "--certs-dir", dir, "--ca-key", openKey}, 1,
			"cert create-node: certs: key " + openKey + " has mode 0644, want 0600"},
		{[]string{"cert", "create-node", "r1", "--certs-dir", otherDir, "--ca-key", caKey}, 1, filepath.Join(otherDir, "ca.crt")},
		{append([]string{"cert", "create-client"}, flags...), 2, "cert create-client: want NAME, got 0 arguments"},
		{append([]string{"cert", "create-client", "a", "b"}, flags...), 2, "cert create-client: want NAME, got 2 arguments"},
		{append([]string{"cert", "create-client", "../root"}, flags...), 2, `cert create-client: certs: user "../root" is not a valid name`},
		{[]string{"cert", "list"}, 2, "cert list: --certs-dir is required (or FLEXKV_CERTS_DIR)"},
		{[]string{"cert", "list", "--certs-dir", filepath.Join(otherDir, "none")}, 1, "cert list: certs: open " + filepath.Join(otherDir, "none")},
		{[]string{"cert", "list", "--certs-dir", dir, "x"}, 2, "cert list: want no arguments, got 1"},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, out, errOut := runRoot(t, tc.args...)
			if code != tc.code {
				t.Fatalf("exit code %d, want %d; stdout %q stderr %q", code, tc.code, out, errOut)
			}
			if !strings.Contains(errOut, tc.want) {
				t.Fatalf("stderr %q lacks %q", errOut, tc.want)
			}
		})
	}
	if after := readFiles(t, dir); !maps.Equal(before, after) {
		t.Fatal("a bad invocation changed the certs dir")
	}
	if entries, _ := os.ReadDir(otherDir); len(entries) != 0 {
		t.Fatalf("a bad invocation wrote into %s: %v", otherDir, entries)
	}
}

// TestCertCAKeyInCertsDir: a CA key in the certs directory, which goes to
// every node, is allowed but warned about.
func TestCertCAKeyInCertsDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "certs")
	code, _, errOut := runRoot(t, "cert", "create-ca", "--certs-dir", dir, "--ca-key", filepath.Join(dir, "ca.key"))
	if code != 0 {
		t.Fatalf("exit code %d; stderr %q", code, errOut)
	}
	if !strings.Contains(errOut, "warning: --ca-key "+filepath.Join(dir, "ca.key")+" is inside --certs-dir") {
		t.Fatalf("stderr %q lacks the warning", errOut)
	}
}

// TestCertCreateCluster: create-cluster makes a configuration's CA, node and
// client certificates, and a second run keeps them all; a replica then
// loads its node certificate, and a user asked for later is added.
func TestCertCreateCluster(t *testing.T) {
	t.Setenv("FLEXKV_CERTS_DIR", "")
	dir := filepath.Join(t.TempDir(), "certs")
	caKey := filepath.Join(t.TempDir(), "ca.key")
	args := []string{"cert", "create-cluster", "--certs-dir", dir, "--ca-key", caKey}
	code, stdout, stderr := runCmd(t, newRootCmd(), args...)
	if code != 0 || !strings.Contains(stdout, "22 files created; 9 nodes and 1 users") {
		t.Fatalf("first run: exit %d, %q, %q", code, stdout, stderr)
	}
	code, stdout, _ = runCmd(t, newRootCmd(), args...)
	if code != 0 || !strings.Contains(stdout, "0 files created") {
		t.Errorf("second run: exit %d, %q; want nothing created", code, stdout)
	}
	code, stdout, _ = runCmd(t, newRootCmd(), append(args, "--user", "root,alice")...)
	if code != 0 || !strings.Contains(stdout, "client.alice.crt") || strings.Contains(stdout, "client.root.crt") {
		t.Errorf("with alice: exit %d, %q; want alice's certificate only", code, stdout)
	}
	n, err := certs.LoadNode(dir, "r5")
	if err != nil || n.ID != (certs.NodeID{Group: "eu-west-3", Replica: "r5"}) {
		t.Errorf("node r5: %+v, %v", n, err)
	}
	if code, _, stderr := runCmd(t, newRootCmd(), "cert", "create-cluster", "--certs-dir", dir, "--ca-key", caKey, "--user", "Bad Name"); code != 2 || !strings.Contains(stderr, "user") {
		t.Errorf("bad user: exit %d, %q", code, stderr)
	}
}
