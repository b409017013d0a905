package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flexkv/flexkv/cluster"
	"github.com/flexkv/flexkv/txn"
)

func TestLatencyFlagErrors(t *testing.T) {
	path, _ := oneReplicaConfig(t)
	for _, tc := range []struct {
		name string
		env  string // FLEXKV_LATENCY_MODE, when set
		args []string
		want string
	}{
		{"server mode", "", []string{"server", "--config", path, "--node", "r1", "--latency-mode", "fast"}, `--latency-mode: server: latency mode "fast"`},
		{"local mode", "", []string{"local", "--config", path, "--latency-mode", "half"}, `latency mode "half": want real, paper or off`},
		{"mode from the environment", "bogus", []string{"local", "--config", path}, `latency mode "bogus"`},
		{"jitter above 1", "", []string{"local", "--config", path, "--latency-jitter", "1.5"}, `--latency-jitter "1.5": want a fraction from 0 to 1`},
		{"jitter negative", "", []string{"server", "--config", path, "--node", "r1", "--latency-jitter", "-0.1"}, `--latency-jitter "-0.1"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.env != "" {
				t.Setenv("FLEXKV_LATENCY_MODE", tc.env)
			}
			code, _, stderr := runCmd(t, newRootCmd(), tc.args...)
			if code != 2 || !strings.Contains(stderr, tc.want) {
				t.Errorf("exit %d, stderr %q; want 2 and %q", code, stderr, tc.want)
			}
		})
	}
}

// TestLocalLatencyMode runs `flexkv local --latency-mode paper` on a
// configuration with a latency matrix of 40 ms between eu-west-1 and
// eu-west-3: a transfer between them answers at eu-west-3 no earlier than
// a send from eu-west-1 crossed, 40 ms in paper mode.
func TestLocalLatencyMode(t *testing.T) {
	path, cfg := oneReplicaConfig(t)
	dir := filepath.Dir(path)
	matrix := "region,eu-west-1,eu-west-3,eu-central-1\n" +
		"eu-west-1,2,40,30\n" +
		"eu-west-3,40,2,20\n" +
		"eu-central-1,30,20,2\n"
	if err := os.WriteFile(filepath.Join(dir, "latency.csv"), []byte(matrix), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg.Latency = "latency.csv"
	writeConfigAt(t, path, cfg)
	transfer := `{"then":[{"op":"add","key":"w/0001/a","int":-1},{"op":"add","key":"w/0003/a","int":1}]}`
	dataDir := t.TempDir()
	code, out, errOut := runUntil(t, "endpoints:", func() {
		code, stdout, stderr := runKVCmd(t, nil, "txn", "--config", path, "--certs-dir", cluster.CertsDir(dataDir), "--timeout", "30s", "--json", transfer)
		if code != 0 {
			t.Errorf("kv txn: exit %d: %s", code, stderr)
			return
		}
		var res struct {
			Destinations []txn.DestLatency `json:"destinations"`
		}
		if err := json.Unmarshal([]byte(stdout), &res); err != nil {
			t.Errorf("kv txn output %q: %v", stdout, err)
			return
		}
		found := false
		for _, d := range res.Destinations {
			if d.Group == "eu-west-3" {
				found = true
				if d.Ms < 40 {
					t.Errorf("eu-west-3 answered after %.1f ms, want at least the one-way delay of 40 ms (paper mode)", d.Ms)
				}
			}
		}
		if !found {
			t.Errorf("kv txn output %s names no destination eu-west-3", stdout)
		}
	}, "local", "--config", path, "--data-dir", dataDir, "--latency-mode", "paper")
	if code != 0 {
		t.Fatalf("local: exit %d\n%s\n%s", code, out, errOut)
	}
	if !strings.Contains(out, "emulated WAN: paper\n") {
		t.Errorf("output does not say the emulated WAN is in paper mode:\n%s", out)
	}
}
