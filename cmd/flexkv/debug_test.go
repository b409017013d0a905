package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flexkv/flexkv/partition"
)

// readBundle returns the files of a debug bundle by their path below its
// top directory.
func readBundle(t *testing.T, file string) map[string][]byte {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	out := map[string][]byte{}
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		root, name, ok := strings.Cut(hdr.Name, "/")
		if !ok || !strings.HasPrefix(root, "flexkv-debug-") || hdr.Mode&0o077 != 0 {
			t.Fatalf("bundle entry %s (mode %o): want flexkv-debug-TIME/..., private", hdr.Name, hdr.Mode)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		out[name] = b
	}
}

// TestDebugBundle makes a debug bundle of a running secure cluster (3
// groups x 3 replicas) and checks it: every replica's status, metrics, logs
// and settings, and no key or certificate; then with a replica stopped (its
// error in its place, exit 1), and bad usage (exit 2).
func TestDebugBundle(t *testing.T) {
	cfg, path, l := startStatusCluster(t)
	to := filepath.Join(t.TempDir(), "bundle.tar.gz")
	code, out, stderr := runCmd(t, newRootCmd(), "debug", "bundle", "--config", path, "--to", to)
	if code != 0 || !strings.Contains(out, "9 of 9 replicas") {
		t.Fatalf("debug bundle: exit %d, out %q, stderr %q; want 0 and 9 of 9", code, out, stderr)
	}
	files := readBundle(t, to)
	checkNoSecrets(t, files, l.CertsDir())
	for _, g := range cfg.Groups {
		// The server logs at info when a replica becomes its group's
		// leader, whatever --log-level (here: nothing logged at all).
		leaders := 0
		for _, r := range g.Replicas {
			checkBundlePart(t, files, g.Name, r)
			if strings.Contains(string(files[g.Name+"/"+r.ID+"/logs.txt"]), "msg=leader group="+g.Name+" replica="+r.ID) {
				leaders++
			}
		}
		if leaders == 0 {
			t.Errorf("group %s: no replica's logs.txt holds its line on becoming the leader", g.Name)
		}
	}
	var manifest struct {
		Replicas []struct{ Group, Replica, Error string }
	}
	if err := json.Unmarshal(files["manifest.json"], &manifest); err != nil || len(manifest.Replicas) != 9 {
		t.Fatalf("manifest.json: %v, %d replicas; want 9", err, len(manifest.Replicas))
	}

	if code, _, stderr := runCmd(t, newRootCmd(), "debug", "bundle", "--config", path, "--to", to); code != 2 || !strings.Contains(stderr, "exists") {
		t.Errorf("debug bundle onto an existing file: exit %d, stderr %q; want 2", code, stderr)
	}
	stopped := cfg.Groups[2].Replicas[1]
	if err := l.Stop(stopped.ID); err != nil {
		t.Fatal(err)
	}
	to2 := filepath.Join(t.TempDir(), "bundle.tar.gz")
	code, _, stderr = runCmd(t, newRootCmd(), "debug", "bundle", "--config", path, "--to", to2, "--timeout", "1s")
	if code != 1 || !strings.Contains(stderr, stopped.ID) {
		t.Fatalf("debug bundle with %s stopped: exit %d, stderr %q; want 1 naming it", stopped.ID, code, stderr)
	}
	files = readBundle(t, to2)
	if len(files[cfg.Groups[2].Name+"/"+stopped.ID+"/error.txt"]) == 0 || len(files[cfg.Groups[0].Name+"/"+cfg.Groups[0].Replicas[0].ID+"/status.json"]) == 0 {
		t.Errorf("bundle with %s stopped: want its error.txt and the others' parts; got %d files", stopped.ID, len(files))
	}
	for _, args := range [][]string{{}, {"--to", filepath.Join(t.TempDir(), "x"), "--endpoints", "nohost"}} {
		if code, _, stderr := runCmd(t, newRootCmd(), append([]string{"debug", "bundle", "--config", path}, args...)...); code != 2 {
			t.Errorf("debug bundle %q: exit %d (stderr %q), want 2", args, code, stderr)
		}
	}
}

// checkBundlePart checks replica r's part of a bundle.
func checkBundlePart(t *testing.T, files map[string][]byte, group string, r partition.ReplicaConfig) {
	t.Helper()
	dir := group + "/" + r.ID + "/"
	var status struct{ Group, Replica, Role string }
	if err := json.Unmarshal(files[dir+"status.json"], &status); err != nil || status.Replica != r.ID || status.Group != group || status.Role == "" {
		t.Errorf("%sstatus.json: %+v, %v; want replica %s of %s with a role", dir, status, err, r.ID, group)
	}
	if m := string(files[dir+"metrics.txt"]); !strings.Contains(m, `flexkv_raft_term{group="`+group+`",replica="`+r.ID+`"}`) || !strings.Contains(m, "go_goroutines") {
		t.Errorf("%smetrics.txt: no flexkv_raft_term of the replica, or no Go runtime metrics", dir)
	}
	if !strings.Contains(string(files[dir+"logs.txt"]), "older lines not kept") {
		t.Errorf("%slogs.txt: missing", dir)
	}
	var settings struct {
		Node          string
		TLS           bool
		Certificates  []struct{ File string }
		Configuration string
	}
	if err := json.Unmarshal(files[dir+"settings.json"], &settings); err != nil || settings.Node != r.ID || !settings.TLS ||
		len(settings.Certificates) != 2 || settings.Certificates[0].File != "node."+r.ID+".crt" || !strings.Contains(settings.Configuration, r.GRPC) {
		t.Errorf("%ssettings.json: %+v, %v; want node %s, TLS, its two certificates, the configuration", dir, settings, err, r.ID)
	}
}

// checkNoSecrets checks that no file of the bundle holds a PEM block, nor
// the body of any key or certificate of the cluster's certificates
// directory.
func checkNoSecrets(t *testing.T, files map[string][]byte, certsDir string) {
	t.Helper()
	entries, err := os.ReadDir(certsDir)
	if err != nil {
		t.Fatal(err)
	}
	var secrets [][]byte
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(certsDir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if block, _ := pem.Decode(b); block != nil {
			secrets = append(secrets, block.Bytes)
			// Its base64 body, line by line, as it would appear copied.
			for _, line := range strings.Split(string(b), "\n") {
				if len(line) == 64 {
					secrets = append(secrets, []byte(line))
				}
			}
		}
	}
	if len(secrets) < 10 {
		t.Fatalf("found %d secrets in %s: the check would check nothing", len(secrets), certsDir)
	}
	for name, b := range files { //flexkv:unordered independent checks
		if bytes.Contains(b, []byte("-----BEGIN")) {
			t.Errorf("%s holds a PEM block", name)
		}
		for _, s := range secrets {
			if bytes.Contains(b, s) {
				t.Errorf("%s holds bytes of a key or certificate", name)
				break
			}
		}
	}
}
