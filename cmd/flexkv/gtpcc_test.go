package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/flexkv/flexkv/cluster"
	"github.com/flexkv/flexkv/gtpcc"
	"github.com/flexkv/flexkv/gtpcc/bench"
	"github.com/flexkv/flexkv/gtpcc/procs"
	"github.com/flexkv/flexkv/internal/testaddr"
	"github.com/flexkv/flexkv/partition"
)

// gtpccCmdTimeout bounds one in-process command of these tests: a command
// that should have stopped at a bad flag but went on to run a workload is
// cancelled instead of holding the test for its whole --duration. A demo
// of two 12-group clusters (TestDemoOverlays) takes 30-45 s on the 2-core
// machine when other packages' tests run beside it, so the bound leaves it
// room.
const gtpccCmdTimeout = 120 * time.Second

// runRoot runs `flexkv args...` in-process, as main does, under a deadline
// of gtpccCmdTimeout, and returns its exit code and output; stderr ends
// with the line main would print for an error.
func runRoot(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), gtpccCmdTimeout)
	defer cancel()
	var out, errOut bytes.Buffer
	cmd := newRootCmd()
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs(args)
	if err := cmd.ExecuteContext(ctx); err != nil {
		errOut.WriteString("flexkv: " + err.Error() + "\n")
		return exitCode(err), out.String(), errOut.String()
	}
	return 0, out.String(), errOut.String()
}

// localLayout writes configs/local.yaml with every address on a free port
// and replicas replicas per group (1 or 3) into a fresh directory, and
// returns its path and the configuration. With latency, the file names a
// copy of the AWS latency matrix written beside it, so that a cluster
// started from it emulates the WAN between its three regions.
func localLayout(t *testing.T, replicas int, latency bool) (string, *partition.ClusterConfig) {
	t.Helper()
	cfg, _, err := loadCluster("")
	if err != nil {
		t.Fatal(err)
	}
	for i := range cfg.Groups {
		rs := cfg.Groups[i].Replicas[:replicas]
		for j := range rs {
			rs[j].Raft, rs[j].GRPC, rs[j].Peer, rs[j].HTTP = freeAddr(t), freeAddr(t), freeAddr(t), ""
		}
		cfg.Groups[i].Replicas = rs
	}
	dir := t.TempDir()
	if latency {
		const name = "aws-12-regions-latency-ms.csv"
		csv, err := os.ReadFile(filepath.Join("..", "..", "configs", name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), csv, 0o644); err != nil {
			t.Fatal(err)
		}
		cfg.Latency = name
	}
	path := filepath.Join(dir, "cluster.yaml")
	writeConfigAt(t, path, cfg)
	return path, cfg
}

// startGtpccCluster runs the local layout, one replica per group on free
// ports, with the gTPC-C procedures registered, until the test ends; it
// returns once every group has a leader, with the path of the
// configuration file that `--config` reaches it by.
func startGtpccCluster(t *testing.T) string {
	t.Helper()
	path, cfg := localLayout(t, 1, false)
	l, err := cluster.Start(cluster.Config{
		Cluster:    cfg,
		Dir:        t.TempDir(),
		NoSync:     true,
		Logger:     slog.New(slog.DiscardHandler),
		Procedures: procs.Registry(),
	})
	if err != nil {
		t.Fatal(err)
	}
	useCertsOf(t, l)
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Error(err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := bench.WaitLeaders(ctx, l, cfg); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestGtpccBadInvocations: every bad invocation of gtpcc load, run, check
// and demo exits 2 with one line on stderr naming the problem, before it
// connects anywhere or starts a cluster. The gtpcc commands are given the
// address of a server that accepts connections and counts them; the demo
// and --local runs, a configuration on free ports and a short --duration,
// so that a case that went too far fails on its exit code instead of
// running for long on ports another test may hold.
func TestGtpccBadInvocations(t *testing.T) {
	srv := newSilentServer(t)
	cfg, _ := localLayout(t, 1, false)
	remote := []string{"--endpoints", srv.addr}
	local := []string{"--config", cfg, "--duration", "1s", "--data-dir", t.TempDir(), "--progress", "0"}

	tests := []struct {
		name  string
		args  []string // command words, then flags
		local bool     // gets the local flags, else (gtpcc) the remote ones
		bare  bool     // gets no default flags
		code  int
		want  string // on stderr
	}{
		{name: "unknown protocol", args: []string{"gtpcc", "run", "--local", "--protocols", "flexcast,paxos"}, local: true, code: 2,
			want: `--protocols "flexcast,paxos": unknown protocol "paxos" (want flexcast, skeen, tree)`},
		{name: "demo unknown protocol", args: []string{"demo", "--protocols", "Skeen"}, local: true, code: 2, want: `unknown protocol "Skeen"`},
		{name: "empty protocol", args: []string{"demo", "--protocols", "flexcast,"}, local: true, code: 2, want: `unknown protocol ""`},
		{name: "duplicate protocol", args: []string{"demo", "--protocols", "flexcast,skeen,flexcast"}, local: true, code: 2,
			want: `--protocols "flexcast,skeen,flexcast": flexcast twice`},
		{name: "scale junk", args: []string{"gtpcc", "load", "--scale", "huge"}, code: 2,
			want: `--scale "huge": want small, full or items=N,customers=N,orders=N,new-orders=N`},
		{name: "scale unknown field", args: []string{"gtpcc", "load", "--scale", "items=50,customers=10,orders=10,lines=3"}, code: 2,
			want: "want small, full or items=N"},
		{name: "scale partial", args: []string{"gtpcc", "load", "--scale", "items=50,customers=10"}, code: 2,
			want: `--scale "items=50,customers=10": give all of items, customers, orders and new-orders`},
		{name: "scale not a number", args: []string{"gtpcc", "load", "--scale", "items=many,customers=10,orders=10,new-orders=3"}, code: 2,
			want: `items="many" is not a number`},
		{name: "scale orders above customers", args: []string{"gtpcc", "load", "--scale", "items=50,customers=10,orders=20,new-orders=3"}, code: 2,
			want: "20 orders per district, want 0..customers per district (10)"},
		{name: "scale new orders above orders", args: []string{"demo", "--scale", "items=50,customers=10,orders=5,new-orders=6"}, local: true, code: 2,
			want: "6 new orders per district, want 0..orders per district (5)"},
		{name: "scale no items", args: []string{"gtpcc", "run", "--local", "--scale", "items=0,customers=10,orders=10,new-orders=3"}, local: true, code: 2,
			want: "0 items, want 1..999999"},
		{name: "duration 0", args: []string{"gtpcc", "run", "--duration", "0s"}, code: 2, want: "--duration 0s: want more than 0"},
		{name: "demo negative duration", args: []string{"demo", "--duration", "-1s"}, local: true, code: 2, want: "--duration -1s: want more than 0"},
		{name: "clients 0", args: []string{"gtpcc", "run", "--clients", "0"}, code: 2, want: "--clients 0: want at least 1 per warehouse"},
		{name: "demo clients 0", args: []string{"demo", "--clients", "0"}, local: true, code: 2, want: "--clients 0"},
		{name: "locality 2", args: []string{"gtpcc", "run", "--locality", "2"}, code: 2, want: "--locality 2: want a probability from 0 to 1"},
		{name: "locality NaN", args: []string{"demo", "--locality", "NaN"}, local: true, code: 2, want: "--locality NaN: want a probability"},
		{name: "remote item -1", args: []string{"gtpcc", "run", "--remote-item", "-1"}, code: 2, want: "--remote-item -1: want a probability from 0 to 1"},
		{name: "remote payment 1.5", args: []string{"demo", "--remote-payment", "1.5"}, local: true, code: 2, want: "--remote-payment 1.5"},
		{name: "warm-up and cool-down leave nothing", args: []string{"gtpcc", "run", "--warm-up", "0.6", "--cool-down", "0.5"}, code: 2,
			want: "--warm-up 0.6 and --cool-down 0.5: want fractions that leave some of the run"},
		{name: "negative warm-up", args: []string{"demo", "--warm-up", "-0.1"}, local: true, code: 2, want: "--warm-up -0.1 and --cool-down 0.1"},
		{name: "negative progress", args: []string{"gtpcc", "run", "--progress", "-1s"}, code: 2, want: "--progress -1s: want 0 (none) or more"},
		{name: "latency mode junk", args: []string{"gtpcc", "run", "--latency-mode", "fast"}, code: 2,
			want: `--latency-mode: server: latency mode "fast": want real, paper or off`},
		{name: "demo latency mode junk", args: []string{"demo", "--latency-mode", "Real"}, local: true, code: 2, want: `latency mode "Real"`},
		{name: "latency jitter 3", args: []string{"gtpcc", "run", "--local", "--latency-jitter", "3"}, local: true, code: 2,
			want: "--latency-jitter 3: want a fraction from 0 to 1"},
		{name: "demo negative jitter", args: []string{"demo", "--latency-jitter", "-0.5"}, local: true, code: 2, want: "--latency-jitter -0.5"},
		{name: "protocols without --local", args: []string{"gtpcc", "run", "--protocols", "skeen"}, code: 2,
			want: "--protocols needs --local (a run against a running cluster uses it as it is)"},
		{name: "scale without --local", args: []string{"gtpcc", "run", "--scale", "small"}, code: 2, want: "--scale needs --local"},
		{name: "jitter without --local", args: []string{"gtpcc", "run", "--latency-jitter", "0.1"}, code: 2, want: "--latency-jitter needs --local"},
		{name: "data dir without --local", args: []string{"gtpcc", "run", "--data-dir", "x"}, code: 2, want: "--data-dir needs --local"},
		{name: "local with endpoints", args: []string{"gtpcc", "run", "--local", "--endpoints", srv.addr}, local: true, code: 2,
			want: "--endpoints names a running cluster; --local starts its own"},
		{name: "demo log level", args: []string{"demo", "--log-level", "loud"}, local: true, code: 2, want: `--log-level "loud"`},
		{name: "demo config missing", args: []string{"demo", "--config", filepath.Join(t.TempDir(), "none.yaml")}, local: true, code: 2,
			want: "none.yaml"},
		{name: "check config missing", args: []string{"gtpcc", "check", "--endpoints", "", "--config", filepath.Join(t.TempDir(), "none.yaml")}, code: 2,
			want: "none.yaml"},
		{name: "check endpoint without port", args: []string{"gtpcc", "check", "--endpoints", "localhost"}, code: 2,
			want: `--endpoints: "localhost" is not host:port`},
		{name: "load empty endpoint", args: []string{"gtpcc", "load", "--endpoints", srv.addr + ",,"}, code: 2, want: "empty address"},
		// Cobra's own errors (flags, arguments) are usage errors too.
		{name: "demo has no --endpoints", args: []string{"demo", "--endpoints", srv.addr}, local: true, code: 2, want: "unknown flag: --endpoints"},
		{name: "duration not a duration", args: []string{"gtpcc", "run", "--duration", "soon"}, code: 2, want: `invalid argument "soon" for "--duration"`},
		{name: "argument to run", args: []string{"gtpcc", "run", "now"}, code: 2, want: `unexpected argument "now"`},
		{name: "unknown gtpcc command", args: []string{"gtpcc", "lod"}, bare: true, code: 2, want: `"lod"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// The default flags go right after the command words: a
			// flag given twice takes its last value, so a case's own
			// come after them and win.
			words := 1
			if tt.args[0] == "gtpcc" {
				words = 2
			}
			defaults := remote
			if tt.local {
				defaults = local
			}
			if tt.local || tt.args[1] == "load" {
				defaults = slices.Concat(defaults, []string{"--scale", testScale})
			}
			if tt.bare {
				defaults = nil
			}
			args := slices.Concat(tt.args[:words], defaults, tt.args[words:])
			before := srv.accepted.Load()
			code, stdout, stderr := runRoot(t, args...)
			checkRefused(t, code, stdout, stderr, tt.code, tt.want, srv.accepted.Load()-before)
		})
	}
}

// TestGtpccUnreachable: load, check and run against an address that
// refuses connections exit 3 (kvExitUnreachable) and name it.
func TestGtpccUnreachable(t *testing.T) {
	addr := testaddr.Refused(t, 1)
	for _, args := range [][]string{
		{"gtpcc", "check", "--endpoints", addr},
		{"gtpcc", "load", "--endpoints", addr, "--scale", testScale},
		{"gtpcc", "run", "--endpoints", addr, "--duration", "1s"},
		{"gtpcc", "check", "--endpoints", addr, "--json"},
	} {
		code, stdout, stderr := runRoot(t, args...)
		if want := "flexkv: cannot reach the cluster at " + addr + ": "; code != kvExitUnreachable || !strings.HasPrefix(stderr, want) || stdout != "" {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want %d and %q", args, code, stdout, stderr, kvExitUnreachable, want)
		}
		if strings.Count(stderr, "\n") != 1 {
			t.Errorf("%q: stderr %q, want one line", args, stderr)
		}
	}
}

// testScale is a population that loads in a moment: 10 districts of 10
// customers and 10 orders, the last 3 of them new, per warehouse.
const testScale = "items=50,customers=10,orders=10,new-orders=3"

// TestGtpccCluster drives a running cluster through the gtpcc commands as
// an operator would: run before load fails, load, check (plain, --json,
// some warehouses), a short run with its table and results JSON, and
// check again after rows were corrupted with kv, which must fail and name
// the conditions broken.
func TestGtpccCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster and runs the workload")
	}
	cfg := startGtpccCluster(t)
	checkGtpccUnloaded(t, cfg)
	loadGtpcc(t, cfg)
	out := filepath.Join(t.TempDir(), "out.json")
	runGtpcc(t, cfg, out)
	corruptGtpcc(t, cfg)
	checkGtpccCorrupted(t, cfg, out)
}

// checkGtpccUnloaded checks that run and check fail on the cluster of cfg
// before load, and that load, check and run refuse warehouses the cluster
// does not have.
func checkGtpccUnloaded(t *testing.T, cfg string) {
	t.Helper()
	code, stdout, stderr := runRoot(t, "gtpcc", "run", "--config", cfg, "--duration", "1s", "--progress", "0", "--latency-mode", "off")
	if code != 1 || !strings.Contains(stderr, "gtpcc: warehouse 1 is not loaded (no ") || !strings.Contains(stderr, "run flexkv gtpcc load first") {
		t.Fatalf("run before load: exit %d, stdout %q, stderr %q; want 1 and warehouse 1 not loaded", code, stdout, stderr)
	}
	code, stdout, stderr = runRoot(t, "gtpcc", "check", "--config", cfg)
	if code != 1 || !strings.Contains(stderr, "gtpcc: warehouse 1 is not loaded (no ") {
		t.Fatalf("check before load: exit %d, stdout %q, stderr %q; want 1 and warehouse 1 not loaded", code, stdout, stderr)
	}

	// --warehouses is checked against the cluster's partitions.
	for _, tc := range []struct{ warehouses, want string }{
		{"7", `--warehouses "7": warehouse 7 is not a partition of the cluster (it has 1-6)`},
		{"1,5-8", "warehouse 7 is not a partition"},
		{"junk", `--warehouses "junk": want all, or numbers and ranges such as 1-3,5`},
		{"3-1", `--warehouses "3-1": want all`},
		{"0", `--warehouses "0": want all`},
	} {
		for _, args := range [][]string{{"load"}, {"check"}, {"run", "--duration", "1s"}} {
			sub := args[0]
			code, stdout, stderr := runRoot(t, slices.Concat([]string{"gtpcc"}, args, []string{"--config", cfg, "--warehouses", tc.warehouses})...)
			if code != 2 || !strings.Contains(stderr, tc.want) || stdout != "" {
				t.Errorf("gtpcc %s --warehouses %s: exit %d, stdout %q, stderr %q; want 2 and %q", sub, tc.warehouses, code, stdout, stderr, tc.want)
			}
		}
	}
}

// loadGtpcc loads the cluster of cfg at testScale and checks it, whole,
// some warehouses, and as JSON.
func loadGtpcc(t *testing.T, cfg string) {
	t.Helper()
	code, stdout, stderr := runRoot(t, "gtpcc", "load", "--config", cfg, "--scale", testScale)
	if want := "loaded warehouses 1-6 at scale " + testScale + " in "; code != 0 || !strings.HasPrefix(stdout, want) {
		t.Fatalf("load: exit %d, stdout %q, stderr %q; want 0 and %q", code, stdout, stderr, want)
	}
	// The population: per warehouse, 10 districts, 10 orders and 10
	// history rows per district, 3 of the orders new.
	code, stdout, stderr = runRoot(t, "gtpcc", "check", "--config", cfg)
	if want := "check passed: warehouses 1-6, TPC-C 1-10 and 12, gTPC-C g1 and g2 (60 districts, 600 customers, 600 orders, "; code != 0 || !strings.HasPrefix(stdout, want) ||
		!strings.HasSuffix(stdout, " order lines, 180 new orders, 600 history rows, 0 payment records, 300 stock rows)\n") {
		t.Fatalf("check: exit %d, stdout %q, stderr %q; want 0 and %q...", code, stdout, stderr, want)
	}
	code, stdout, stderr = runRoot(t, "gtpcc", "check", "--config", cfg, "--warehouses", "2,4-5")
	if want := "check passed: warehouses 2,4-5, TPC-C 1-10 and 12, gTPC-C g1 and g2 (30 districts, 300 customers, 300 orders, "; code != 0 || !strings.HasPrefix(stdout, want) ||
		!strings.Contains(stdout, "not checked: g1: stock is checked over every loaded warehouse of the cluster only (3 not checked, e.g. 1)") {
		t.Fatalf("check 2,4-5: exit %d, stdout %q, stderr %q; want 0 and %q", code, stdout, stderr, want)
	}
	code, stdout, stderr = runRoot(t, "gtpcc", "check", "--config", cfg, "--json")
	if code != 0 {
		t.Fatalf("check --json: exit %d, stderr %q", code, stderr)
	}
	checked := decodeCheck(t, stdout)
	if !checked.Passed || len(checked.Failures) != 0 || checked.Checked.Warehouses != 6 || checked.Checked.NewOrders != 180 {
		t.Fatalf("check --json: %s; want passed, no failures, 6 warehouses and 180 new orders", stdout)
	}
}

// runGtpcc runs the workload briefly on the cluster of cfg and checks its
// table and its results JSON, written to out.
func runGtpcc(t *testing.T, cfg, out string) {
	t.Helper()
	code, stdout, stderr := runRoot(t, "gtpcc", "run", "--config", cfg, "--duration", "2s", "--clients", "1",
		"--latency-mode", "off", "--json", out, "--progress", "0")
	if code != 0 {
		t.Fatalf("run: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	for _, want := range []string{"protocol flexcast: ", "latency (ms)", "new_order", "payment", "1st destination", "check: passed", "results: " + out + "\n"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("run: stdout lacks %q:\n%s", want, stdout)
		}
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	rep := checkResultsJSON(t, data, "flexcast")
	if rep.Errors != 0 {
		t.Errorf("run: %d errors on an idle cluster, want 0", rep.Errors)
	}
}

// corruptGtpcc breaks two consistency conditions of the cluster of cfg with
// kv, after checking that kv get, get --raw and scan show a row.
func corruptGtpcc(t *testing.T, cfg string) {
	t.Helper()
	// Corrupt warehouse 1's district 1 (its year-to-date no longer sums
	// with the warehouse's and its history's) and delete the first line of
	// order 1 of warehouse 2 district 3 (loaded: it has 5 to 15 lines, and
	// delivery never removes lines).
	kv := func(args ...string) string {
		t.Helper()
		code, stdout, stderr := runRoot(t, slices.Concat([]string{"kv", args[0], "--config", cfg, "--timeout", "30s"}, args[1:])...)
		if code != 0 {
			t.Fatalf("kv %q: exit %d, stderr %q", args, code, stderr)
		}
		return stdout
	}
	// kv get shows a row, stored in binary, as JSON; --raw as stored.
	var d, raw procs.District
	shown := kv("get", string(procs.DistrictKey(1, 1)))
	if err := json.Unmarshal([]byte(shown), &d); err != nil || d.NextOID < 1 || d.Name == "" {
		t.Fatalf("kv get %s: %q (%v), want the district as JSON", procs.DistrictKey(1, 1), shown, err)
	}
	stored := strings.TrimSuffix(kv("get", "--raw", string(procs.DistrictKey(1, 1))), "\n")
	if err := procs.Decode(procs.DistrictKey(1, 1), []byte(stored), &raw); err != nil || raw != d {
		t.Fatalf("kv get --raw %s: %+v, %v; want %+v", procs.DistrictKey(1, 1), raw, err, d)
	}
	if scanned := kv("scan", string(procs.DistrictKey(1, 1)), string(procs.DistrictKey(1, 2))); scanned != string(procs.DistrictKey(1, 1))+"\t"+shown {
		t.Errorf("kv scan of district 1: %q, want %q", scanned, string(procs.DistrictKey(1, 1))+"\t"+shown)
	}
	d.YTD += 7
	kv("put", string(procs.DistrictKey(1, 1)), string(procs.Encode(d)))
	kv("del", string(procs.OrderLineKey(2, 3, 1, 1)))
}

// checkGtpccCorrupted checks that check and run (results JSON in out) fail
// on the corrupted cluster of cfg, naming the conditions broken, and that
// the intact warehouses still pass.
func checkGtpccCorrupted(t *testing.T, cfg, out string) {
	t.Helper()
	code, stdout, stderr := runRoot(t, "gtpcc", "check", "--config", cfg)
	if want := "flexkv: gtpcc check: 4 condition failures\n"; code != 1 || stderr != want {
		t.Fatalf("check after corruption: exit %d, stdout %q, stderr %q; want 1 and %q", code, stdout, stderr, want)
	}
	for _, want := range []string{
		"check FAILED: 4 failures\n",
		"condition 1: warehouse 1: W_YTD ",
		"condition 9: warehouse 1 district 1: D_YTD ",
		"condition 6: warehouse 2 district 3: order 1 has O_OL_CNT ",
		"condition 4: warehouse 2 district 3: sum(O_OL_CNT) ",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("check after corruption: stdout lacks %q:\n%s", want, stdout)
		}
	}
	code, stdout, _ = runRoot(t, "gtpcc", "check", "--config", cfg, "--json", "--warehouses", "1")
	checked := decodeCheck(t, stdout)
	if code != 1 || checked.Passed || len(checked.Failures) != 2 || !strings.HasPrefix(checked.Failures[0], "condition 1: warehouse 1: ") {
		t.Errorf("check --json --warehouses 1 after corruption: exit %d, %s; want 1 and the failures of conditions 1 and 9", code, stdout)
	}
	if code, stdout, stderr = runRoot(t, "gtpcc", "check", "--config", cfg, "--warehouses", "3-6"); code != 0 {
		t.Errorf("check of the intact warehouses: exit %d, stdout %q, stderr %q; want 0", code, stdout, stderr)
	}

	// A run checks afterwards: the corruption fails it, in its table, its
	// results JSON and its exit code.
	code, stdout, stderr = runRoot(t, "gtpcc", "run", "--config", cfg, "--duration", "1s", "--latency-mode", "off", "--json", out, "--progress", "0")
	if code != 1 || !strings.Contains(stderr, "consistency check failed under flexcast") || !strings.Contains(stdout, "check: FAILED, ") {
		t.Fatalf("run after corruption: exit %d\nstdout:\n%s\nstderr:\n%s\nwant 1 and the check failed", code, stdout, stderr)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var failed results
	if err := json.Unmarshal(data, &failed); err != nil || failed.Check == nil || failed.Check.Passed || len(failed.Check.Failures) < 4 {
		t.Errorf("run after corruption: results %.300s (%v); want a check that failed at least 4 times", data, err)
	}
}

// decodeCheck decodes the output of gtpcc check --json: one line, whose
// failures are a list, never null.
func decodeCheck(t *testing.T, stdout string) gtpcc.CheckReport {
	t.Helper()
	if strings.Count(stdout, "\n") != 1 || !strings.Contains(stdout, `"failures":[`) {
		t.Fatalf("check --json: %q, want one line with a list of failures", stdout)
	}
	var rep gtpcc.CheckReport
	dec := json.NewDecoder(strings.NewReader(stdout))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rep); err != nil {
		t.Fatalf("check --json: %q: %v", stdout, err)
	}
	return rep
}

// resultsKeys are the top-level keys of the results JSON (DESIGN 10.3),
// and the one extra the driver adds.
var (
	resultsKeys     = []string{"protocol", "config", "duration_s", "txn_total", "txn_per_s", "errors", "latency_ms", "traffic", "overhead", "check"}
	resultsKeyExtra = []string{"rolled_back", "overlay", "tree", "run", "predicted_ms", "destination_sets", "bytes_per_txn", "msgs_per_txn", "bytes_per_txn_by_kind", "step_ms", "entry_step_ms", "predicted_at_step_ms", "consistency"}
	latencyKeys     = []string{"count", "mean", "p50", "p90", "p95", "p99", "max"}
	destinationKeys = []string{"1st", "2nd", "3rd"}
)

// results holds the fields of a results JSON object the tests look at.
type results struct {
	Protocol  string  `json:"protocol"`
	DurationS float64 `json:"duration_s"`
	TxnTotal  int64   `json:"txn_total"`
	TxnPerS   float64 `json:"txn_per_s"`
	Errors    int64   `json:"errors"`
	Latency   struct {
		ByDestination map[string]gtpcc.LatencyStats `json:"by_destination"`
	} `json:"latency_ms"`
	Traffic  map[string]map[string]float64 `json:"traffic"`
	Overhead map[string]map[string]float64 `json:"overhead"`
	Check    *struct {
		Passed   bool     `json:"passed"`
		Failures []string `json:"failures"`
	} `json:"check"`
}

// checkResultsJSON checks that data is one results object of DESIGN 10.3
// for protocol, with some transactions and a passed check, and returns it.
func checkResultsJSON(t *testing.T, data []byte, protocol string) results {
	t.Helper()
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil {
		t.Fatalf("results %s: %v", data, err)
	}
	for _, k := range resultsKeys {
		if _, ok := top[k]; !ok {
			t.Errorf("results: no key %q", k)
		}
	}
	for k := range top {
		if !slices.Contains(resultsKeys, k) && !slices.Contains(resultsKeyExtra, k) {
			t.Errorf("results: key %q, not one of DESIGN 10.3", k)
		}
	}
	var lat map[string]json.RawMessage
	if err := json.Unmarshal(top["latency_ms"], &lat); err != nil {
		t.Fatalf("results latency_ms %s: %v", top["latency_ms"], err)
	}
	var byDest map[string]json.RawMessage
	if err := json.Unmarshal(lat["by_destination"], &byDest); err != nil {
		t.Fatalf("results latency_ms.by_destination %s: %v", lat["by_destination"], err)
	}
	if got := slices.Sorted(maps.Keys(byDest)); !slices.Equal(got, destinationKeys) {
		t.Errorf("results latency_ms.by_destination keys %q, want %q", got, destinationKeys)
	}
	stats := map[string]json.RawMessage{}
	for k, v := range lat {
		if k != "by_destination" {
			stats[k] = v
		}
	}
	for k, v := range byDest {
		stats["by_destination."+k] = v
	}
	for _, kind := range []string{"new_order", "payment", "order_status", "delivery", "stock_level"} {
		if _, ok := stats[kind]; !ok {
			t.Errorf("results latency_ms: no %q", kind)
		}
	}
	for name, v := range stats {
		var s map[string]float64
		if err := json.Unmarshal(v, &s); err != nil {
			t.Errorf("results latency_ms %s: %s: %v", name, v, err)
			continue
		}
		if got := slices.Sorted(maps.Keys(s)); !slices.Equal(got, slices.Sorted(slices.Values(latencyKeys))) {
			t.Errorf("results latency_ms %s keys %q, want %q", name, got, latencyKeys)
		}
		if s["count"] > 0 && !(s["max"] >= s["p99"] && s["p99"] >= s["p50"] && s["p50"] > 0) {
			t.Errorf("results latency_ms %s: %s, want 0 < p50 <= p99 <= max", name, v)
		}
	}
	var r results
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatalf("results %s: %v", data, err)
	}
	if r.Protocol != protocol || r.TxnTotal <= 0 || r.DurationS <= 0 || r.TxnPerS <= 0 {
		t.Errorf("results: protocol %q, %d txn in %g s (%g/s); want %s and some transactions", r.Protocol, r.TxnTotal, r.DurationS, r.TxnPerS, protocol)
	}
	if r.Check == nil || !r.Check.Passed || r.Check.Failures == nil || len(r.Check.Failures) != 0 {
		t.Errorf("results: check %s, want passed with failures []", top["check"])
	}
	if r.Traffic == nil || r.Overhead == nil {
		t.Errorf("results: traffic %s, overhead %s; want objects", top["traffic"], top["overhead"])
	}
	return r
}

// TestDemo runs `flexkv demo` on the local layout (3 regions x 3
// replicas, on free ports, with the AWS latencies between the regions):
// one protocol gives one results object with traffic for every replica
// and the plots; it must have global transactions answered by 2 and 3
// groups.
func TestDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster and runs the workload")
	}
	cfg, cc := localLayout(t, 3, true)
	dir := t.TempDir()
	out, plots := filepath.Join(dir, "demo.json"), filepath.Join(dir, "plots")
	code, stdout, stderr := runRoot(t, "demo", "--config", cfg, "--duration", "3s", "--clients", "1", "--scale", testScale,
		"--json", out, "--plots", plots, "--progress", "0", "--data-dir", filepath.Join(dir, "data"))
	if code != 0 {
		t.Fatalf("demo: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	for _, want := range []string{
		"flexcast: 3 groups x 3 replicas ready in ", "emulated WAN: real",
		"flexcast: loaded warehouses 1-6 at scale " + testScale, "running 6 clients for 3s",
		"protocol flexcast: ", "check: passed", "results: " + out + "\n",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("demo: stdout lacks %q:\n%s", want, stdout)
		}
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	rep := checkResultsJSON(t, data, "flexcast")
	var head struct {
		Consistency string `json:"consistency"`
	}
	if err := json.Unmarshal(data, &head); err != nil || head.Consistency != "strict-serializable" {
		t.Errorf("demo: results consistency %q (%v); want strict-serializable, the default", head.Consistency, err)
	}
	// --global-only: every transaction touches 2 or 3 groups (a remote
	// warehouse is one of another group).
	if first, second := rep.Latency.ByDestination["1st"], rep.Latency.ByDestination["2nd"]; first.Count == 0 || second.Count != first.Count {
		t.Errorf("demo: by_destination 1st %d, 2nd %d; want every transaction answered by 2 groups at least", first.Count, second.Count)
	}
	for _, g := range cc.Groups {
		for _, r := range g.Replicas {
			if _, ok := rep.Traffic[r.ID]; !ok {
				t.Errorf("demo: no traffic for replica %s: %v", r.ID, rep.Traffic)
			}
		}
		if _, ok := rep.Overhead[g.Name]; !ok {
			t.Errorf("demo: no overhead for group %s: %v", g.Name, rep.Overhead)
		}
	}
	for _, name := range []string{gtpcc.PlotDestinationCDF, gtpcc.PlotThroughput, gtpcc.PlotKindCDFPrefix + "new_order.png", gtpcc.PlotKindCDFPrefix + "payment.png"} {
		path := filepath.Join(plots, name)
		if fi, err := os.Stat(path); err != nil || fi.Size() == 0 {
			t.Errorf("demo: plot %s: %v", name, err)
		}
		if !strings.Contains(stdout, "plot: "+path+"\n") {
			t.Errorf("demo: stdout does not name plot %s", path)
		}
	}
}

// TestDemoCompare runs the demo under two protocols, one after the other
// (one replica per group, to keep it short): each protocol's results
// JSON goes to a file of its own, and stdout ends with the side-by-side
// table.
func TestDemoCompare(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two clusters and runs the workload")
	}
	cfg, _ := localLayout(t, 1, true)
	dir := t.TempDir()
	out := filepath.Join(dir, "compare.json")
	code, stdout, stderr := runRoot(t, "demo", "--config", cfg, "--protocols", "flexcast,skeen", "--duration", "2s", "--clients", "1",
		"--scale", testScale, "--json", out, "--progress", "0", "--data-dir", filepath.Join(dir, "data"))
	if code != 0 {
		t.Fatalf("demo: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	// One results object per protocol, each in a file of its own.
	for _, proto := range []string{"flexcast", "skeen"} {
		path := filepath.Join(dir, "compare-"+proto+".json")
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		checkResultsJSON(t, data, proto)
		if !strings.Contains(stdout, "results: "+path) {
			t.Errorf("demo: stdout does not name %s", path)
		}
	}
	if _, err := os.Stat(out); err == nil {
		t.Errorf("demo: wrote %s too, with several protocols", out)
	}
	_, table, ok := strings.Cut(stdout, "mean / p99 ms")
	if !ok {
		t.Fatalf("demo: no side-by-side table on stdout:\n%s", stdout)
	}
	header, _, _ := strings.Cut(table, "\n")
	if f := strings.Fields(header); !slices.Equal(f, []string{"flexcast", "skeen"}) {
		t.Errorf("demo: table header %q, want the columns flexcast and skeen", header)
	}
	for _, want := range []string{"txn/s", "new_order", "1st destination", "protocol flexcast: ", "protocol skeen: "} {
		if !strings.Contains(stdout, want) {
			t.Errorf("demo: stdout lacks %q:\n%s", want, stdout)
		}
	}
}
