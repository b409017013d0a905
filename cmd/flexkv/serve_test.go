package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flexkv/flexkv/certs"
	"github.com/flexkv/flexkv/cluster"
	"github.com/flexkv/flexkv/partition"
)

// syncBuffer is a bytes.Buffer safe for a command writing while the test
// reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// oneReplicaConfig writes the local layout with one replica per group, on
// free ports, and returns its path.
func oneReplicaConfig(t *testing.T) (string, *partition.ClusterConfig) {
	t.Helper()
	cfg, _, err := loadCluster("")
	if err != nil {
		t.Fatal(err)
	}
	for i := range cfg.Groups {
		r := cfg.Groups[i].Replicas[0]
		r.Raft, r.GRPC, r.Peer, r.HTTP = freeAddr(t), freeAddr(t), freeAddr(t), ""
		cfg.Groups[i].Replicas = []partition.ReplicaConfig{r}
	}
	return configFile(t, cfg), cfg
}

// runUntil runs the root command with args until its output contains
// ready, then cancels it (as SIGTERM would) and returns its exit code and
// output.
func runUntil(t *testing.T, ready string, during func(), args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errOut syncBuffer
	cmd := newRootCmd()
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs(args)
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()
	deadline := time.After(30 * time.Second)
	for !strings.Contains(out.String()+errOut.String(), ready) {
		select {
		case err := <-done:
			return exitCode(err), out.String(), errOut.String()
		case <-deadline:
			cancel()
			err := <-done
			t.Fatalf("no %q after 30s (exit %d); stdout:\n%s\nstderr:\n%s", ready, exitCode(err), out.String(), errOut.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	if during != nil {
		during()
	}
	cancel()
	if err := <-done; err != nil {
		return exitCode(err), out.String(), errOut.String()
	}
	return 0, out.String(), errOut.String()
}

// TestLocalCommand starts `flexkv local`, which prints every endpoint, takes
// a write through `flexkv kv`, and stops cleanly when cancelled; started
// again on the same data, the value is there.
func TestLocalCommand(t *testing.T) {
	path, cfg := oneReplicaConfig(t)
	data := t.TempDir()
	code, out, errOut := runUntil(t, "endpoints:", func() {
		if code, _, stderr := runKVCmd(t, nil, "put", "--config", path, "--certs-dir", cluster.CertsDir(data), "--timeout", "30s", "w/0003/x", "42"); code != 0 {
			t.Errorf("kv put: exit %d: %s", code, stderr)
		}
	}, "local", "--config", path, "--data-dir", data)
	if code != 0 {
		t.Fatalf("local: exit %d\n%s\n%s", code, out, errOut)
	}
	for _, g := range cfg.Groups {
		if !strings.Contains(out, g.Replicas[0].GRPC) {
			t.Errorf("output does not list endpoint %s:\n%s", g.Replicas[0].GRPC, out)
		}
	}
	heap, cpu := filepath.Join(t.TempDir(), "heap.pprof"), filepath.Join(t.TempDir(), "cpu.pprof")
	code, out, errOut = runUntil(t, "endpoints:", func() {
		code, stdout, stderr := runKVCmd(t, nil, "get", "--config", path, "--certs-dir", cluster.CertsDir(data), "--timeout", "30s", "w/0003/x")
		if code != 0 || stdout != "42\n" {
			t.Errorf("kv get after restart: exit %d, %q, %s", code, stdout, stderr)
		}
	}, "local", "--config", path, "--data-dir", data, "--mem-profile", heap, "--cpu-profile", cpu)
	if code != 0 {
		t.Fatalf("local again: exit %d\n%s\n%s", code, out, errOut)
	}
	// The soak reads the memory limit from the first line, and the heap
	// profile written while the cluster still ran.
	if first, _, _ := strings.Cut(out, "\n"); !regexp.MustCompile(`memory limit [0-9]+ MiB`).MatchString(first) {
		t.Errorf("first line does not state the memory limit: %q", first)
	}
	for _, f := range []string{heap, cpu} {
		if st, err := os.Stat(f); err != nil || st.Size() == 0 {
			t.Errorf("profile %s: %v", f, err)
		}
	}
}

// TestServerCommand runs one replica of a one-replica group with
// `flexkv server`, configured through the environment, and stops it.
func TestServerCommand(t *testing.T) {
	path, _ := oneReplicaConfig(t)
	t.Setenv("FLEXKV_CONFIG", path)
	t.Setenv("FLEXKV_DATA_DIR", t.TempDir())
	code, out, errOut := runUntil(t, "msg=serving", nil, "server", "--node", "r4")
	if code != 0 || !strings.Contains(errOut, "group=eu-west-3") || !strings.Contains(errOut, "msg=stopping") {
		t.Fatalf("server: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
}

// TestServerSettingsFile: node and data directory from a settings file,
// below the flags.
func TestServerSettingsFile(t *testing.T) {
	path, _ := oneReplicaConfig(t)
	settings := writeFile(t, "settings.yaml", []byte("node: r1\nconfig: "+path+"\ndata-dir: "+t.TempDir()+"\n"))
	code, out, errOut := runUntil(t, "msg=serving", nil, "server", "--settings", settings)
	if code != 0 || !strings.Contains(errOut, "node=r1") {
		t.Fatalf("server: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	code, out, errOut = runUntil(t, "msg=serving", nil, "server", "--settings", settings, "--node", "r7", "--data-dir", t.TempDir())
	if code != 0 || !strings.Contains(errOut, "node=r7") {
		t.Fatalf("server with --node over the file: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	bad := writeFile(t, "bad.yaml", []byte("nodee: r1\n"))
	if code, _, stderr := runCmd(t, newRootCmd(), "server", "--settings", bad); code != 2 || !strings.Contains(stderr, `unknown setting "nodee"`) {
		t.Errorf("misspelt setting: exit %d, %q", code, stderr)
	}
}

// TestServerSecureByDefault: without --certs-dir a replica refuses to
// start unless --insecure says so, which it logs as a warning; a
// certificate that names another replica is refused.
func TestServerSecureByDefault(t *testing.T) {
	path, _ := oneReplicaConfig(t)
	t.Setenv("FLEXKV_CERTS_DIR", "")
	code, _, stderr := runCmd(t, newRootCmd(), "server", "--config", path, "--node", "r1", "--data-dir", t.TempDir())
	if want := "no --certs-dir"; code != 2 || !strings.Contains(stderr, want) || !strings.Contains(stderr, "--insecure") {
		t.Errorf("server without --certs-dir: exit %d, stderr %q; want 2 naming --certs-dir and --insecure", code, stderr)
	}
	code, _, stderr = runCmd(t, newRootCmd(), "server", "--config", path, "--node", "r1", "--insecure", "--certs-dir", t.TempDir())
	if code != 2 || !strings.Contains(stderr, "choose one") {
		t.Errorf("server with --insecure and --certs-dir: exit %d, stderr %q", code, stderr)
	}
	code, out, errOut := runUntil(t, "msg=serving", nil, "server", "--config", path, "--node", "r1", "--insecure", "--data-dir", t.TempDir())
	if code != 0 || !strings.Contains(errOut, "running without TLS") || !strings.Contains(errOut, "tls=false") {
		t.Errorf("server --insecure: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	// A certificates directory whose node.r1 names another replica.
	dir := t.TempDir()
	ca, err := certs.CreateCA(dir, filepath.Join(t.TempDir(), "ca.key"), certs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ca.CreateNode(dir, certs.NodeID{Group: "eu-west-3", Replica: "r1"}, []string{"127.0.0.1"}, certs.Options{}); err != nil {
		t.Fatal(err)
	}
	code, _, stderr = runCmd(t, newRootCmd(), "server", "--config", path, "--node", "r1", "--certs-dir", dir, "--data-dir", t.TempDir())
	if code == 0 || !strings.Contains(stderr, "names eu-west-3/r1, but this replica is eu-west-1/r1") {
		t.Errorf("server with another node's certificate: exit %d, stderr %q", code, stderr)
	}
}

func TestServeCommandErrors(t *testing.T) {
	path, _ := oneReplicaConfig(t)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"server without node", []string{"server", "--config", path}, "--node is required"},
		{"server unknown node", []string{"server", "--config", path, "--node", "r42"}, `node "r42" is not a replica`},
		{"server missing config", []string{"server", "--config", "/nonexistent.yaml", "--node", "r1"}, "/nonexistent.yaml"},
		{"server bad log level", []string{"server", "--config", path, "--node", "r1", "--log-level", "loud"}, "--log-level"},
		{"server bad initial cluster state", []string{"server", "--config", path, "--node", "r1", "--initial-cluster-state", "joined"}, `--initial-cluster-state: server: initial cluster state "joined": want new or existing`},
		{"local bad chaos", []string{"local", "--config", path, "--chaos", "meteor=1s"}, `unknown fault "meteor"`},
		{"local chaos without period", []string{"local", "--config", path, "--chaos", "leader-kill"}, "KIND=DURATION"},
		{"local chaos bad period", []string{"local", "--config", path, "--chaos", "partition=soon"}, "partition=soon"},
		{"local extra argument", []string{"local", "now"}, `flexkv local: unexpected argument "now"`},
		{"server extra argument", []string{"server", "--config", path, "--node", "r1", "now"}, `flexkv server: unexpected argument "now"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := runCmd(t, newRootCmd(), tc.args...)
			if code == 0 || !strings.Contains(stderr, tc.want) {
				t.Errorf("exit %d, stderr %q; want non-zero and %q", code, stderr, tc.want)
			}
			if strings.HasSuffix(tc.name, "extra argument") && code != 2 {
				t.Errorf("exit %d; want 2 (bad usage)", code)
			}
		})
	}
}
