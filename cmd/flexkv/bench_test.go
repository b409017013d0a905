package main

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/flexkv/flexkv/configs"
	"github.com/flexkv/flexkv/internal/testaddr"
)

// runBenchCmd runs `flexkv bench args...` in-process.
func runBenchCmd(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	return runCmd(t, newBenchCmd(), args...)
}

// oneGroupYAML is a cluster of one group: no transfer between two groups
// can be placed in it.
const oneGroupYAML = `protocol: flexcast
groups:
  - name: solo
    replicas:
      - {id: r1, raft: "127.0.0.1:7101", grpc: "127.0.0.1:7201"}
partitions:
  - {name: all, start: "a", group: solo}
`

// TestBenchBadInvocations: every bad invocation exits 2 with one line
// naming the problem, and none reaches the server it is pointed at.
func TestBenchBadInvocations(t *testing.T) {
	srv := newSilentServer(t)
	cfg := writeFile(t, "local.yaml", configs.LocalYAML())
	solo := writeFile(t, "solo.yaml", []byte(oneGroupYAML))
	conn := []string{"--endpoints", srv.addr, "--config", cfg, "--timeout", "1m"}
	tests := []struct {
		name string
		args []string
		want string // on stderr
	}{
		{name: "no command", args: nil, want: "bench: want a command: put, get or txn"},
		{name: "unknown command", args: []string{"frob"}, want: `bench: unknown command "frob"`},
		{name: "argument", args: []string{"put", "w/0001/a"}, want: `bench put: want no arguments, got 1 (["w/0001/a"])`},
		{name: "unknown flag", args: []string{"get", "--fast"}, want: "bench get: unknown flag: --fast"},
		{name: "clients 0", args: []string{"put", "--clients", "0"}, want: "bench put: --clients 0, want 1..16384"},
		{name: "clients too many", args: []string{"put", "--clients", "16385"}, want: "--clients 16385, want 1..16384"},
		{name: "clients not a number", args: []string{"put", "--clients", "ten"}, want: `bench put: invalid argument "ten" for "--clients"`},
		{name: "total 0", args: []string{"get", "--total", "0"}, want: "bench get: --total 0, want 1..1073741824"},
		{name: "total negative", args: []string{"txn", "--total", "-5"}, want: "bench txn: --total -5"},
		{name: "key size 0", args: []string{"put", "--key-size", "0"}, want: "--key-size 0, want 1..partition.KeyMax (4096)"},
		{name: "key size too large", args: []string{"put", "--key-size", "4097"}, want: "--key-size 4097"},
		{name: "value size negative", args: []string{"put", "--val-size", "-1"}, want: "--val-size -1, want 0..txn.ValueMax (65536)"},
		{name: "value size too large", args: []string{"put", "--val-size", "65537"}, want: "--val-size 65537"},
		{name: "keys too long", args: []string{"put", "--prefix", strings.Repeat("w", 4090)}, want: "make keys of 4106 bytes, more than partition.KeyMax (4096)"},
		{name: "prefix in no partition", args: []string{"put", "--prefix", "zzz"}, want: `bench put: keys "zzz0000000000000000".."zzz9999999999999999": partition: key "zzz0000000000000000": no partition holds the key`},
		{name: "keys below every partition", args: []string{"get", "--prefix", "w/000", "--key-size", "2"}, want: `key "w/00000": no partition holds the key`},
		{name: "txn through the gateway", args: []string{"txn", "--gateway", "127.0.0.1:1"}, want: "bench txn: --gateway runs put and get"},
		{name: "read txn of a put", args: []string{"put", "--read-txn"}, want: "bench put: --read-txn reads by the Go client: bench get without --gateway"},
		{name: "read txn through the gateway", args: []string{"get", "--read-txn", "--gateway", "127.0.0.1:1"}, want: "bench get: --read-txn reads by the Go client"},
		{name: "gateway and one endpoint", args: []string{"put", "--gateway", "127.0.0.1:1", "--one-endpoint"}, want: "bench put: --gateway and --one-endpoint: choose one"},
		{name: "txn in a replicated partition", args: []string{"txn", "--prefix", "item/"}, want: "bench txn: the keys lie in the replicated partition item"},
		{name: "txn in a cluster of one group", args: []string{"txn", "--config", solo}, want: "bench txn: no partition of another group than all's (group 0): a transfer needs partitions of two groups"},
		{name: "zero timeout", args: []string{"put", "--timeout", "0s"}, want: "bench put: --timeout 0s: want more than 0"},
		{name: "endpoint without port", args: []string{"put", "--endpoints", "localhost"}, want: `--endpoints: "localhost" is not host:port`},
		{name: "config missing", args: []string{"put", "--config", filepath.Join(t.TempDir(), "none.yaml")}, want: "bench put: config "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := tt.args
			if len(args) > 0 && args[0] != "frob" {
				args = append(append([]string{args[0]}, conn...), args[1:]...)
			}
			before := srv.accepted.Load()
			code, stdout, stderr := runBenchCmd(t, args...)
			checkRefused(t, code, stdout, stderr, 2, tt.want, srv.accepted.Load()-before)
		})
	}
}

// TestBenchUnreachable: a cluster that refuses connections is exit 3,
// naming the endpoints.
func TestBenchUnreachable(t *testing.T) {
	a := testaddr.Refused(t, 1)
	code, stdout, stderr := runBenchCmd(t, "put", "--endpoints", a, "--total", "1")
	if code != 3 || !strings.Contains(stderr, "bench put: cannot reach the cluster at "+a) || stdout != "" {
		t.Fatalf("exit code %d, stdout %q, stderr %q; want 3, nothing, the endpoint named", code, stdout, stderr)
	}
}

// benchJSON is the --json object of DESIGN 7.
type benchJSON struct {
	Op           string             `json:"op"`
	Clients      int                `json:"clients"`
	Total        int                `json:"total"`
	Errors       int                `json:"errors"`
	RequestsPerS float64            `json:"requests_per_s"`
	LatencyMs    map[string]float64 `json:"latency_ms"`
	// AnswersMs: bench txn's 1st and 2nd answer, beside DESIGN 7's fields.
	AnswersMs []map[string]float64 `json:"answers_ms"`
}

// decodeBench checks that out is exactly one JSON object with DESIGN 7's
// fields, no others, and returns it.
func decodeBench(t *testing.T, out string) benchJSON {
	t.Helper()
	if strings.Count(out, "\n") != 1 || !strings.HasSuffix(out, "\n") {
		t.Fatalf("output %q, want one line", out)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal([]byte(out), &fields); err != nil {
		t.Fatalf("output %q: %v", out, err)
	}
	keys := slices.Sorted(func(yield func(string) bool) {
		for k := range fields {
			if !yield(k) {
				return
			}
		}
	})
	want := "clients,errors,latency_ms,op,requests_per_s,total"
	if _, ok := fields["answers_ms"]; ok && string(fields["op"]) == `"txn"` {
		want = "answers_ms," + want // bench txn --answers
	}
	if got := strings.Join(keys, ","); got != want {
		t.Fatalf("fields %s, want %s", got, want)
	}
	var b benchJSON
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&b); err != nil {
		t.Fatalf("output %q: %v", out, err)
	}
	lat := b.LatencyMs
	var names []string
	for k := range lat {
		names = append(names, k)
	}
	slices.Sort(names)
	if got, want := strings.Join(names, ","), "max,mean,p50,p90,p99,p999"; got != want {
		t.Fatalf("latency_ms fields %s, want %s", got, want)
	}
	return b
}

// checkBenchRun checks a successful run's object: its op, clients and
// total, no errors, and figures that a run of requests gives (positive, the
// percentiles in order).
func checkBenchRun(t *testing.T, b benchJSON, op string, clients, total int) {
	t.Helper()
	lat := b.LatencyMs
	if b.Op != op || b.Clients != clients || b.Total != total || b.Errors != 0 || b.RequestsPerS <= 0 ||
		lat["mean"] <= 0 || lat["p50"] <= 0 || lat["p50"] > lat["p90"] || lat["p90"] > lat["p99"] ||
		lat["p99"] > lat["p999"] || lat["p999"] > lat["max"] || lat["mean"] > lat["max"] {
		t.Fatalf("bench %s: %+v; want op %s, %d clients, %d requests, no errors, positive figures, percentiles in order",
			op, b, op, clients, total)
	}
	if op != "txn" || b.AnswersMs == nil {
		return
	}
	// Two answers, the first no later than the second, the second no later
	// than the whole call.
	if len(b.AnswersMs) != 2 {
		t.Fatalf("bench txn: answers %v, want the 1st and the 2nd", b.AnswersMs)
	}
	first, second := b.AnswersMs[0], b.AnswersMs[1]
	for _, k := range []string{"mean", "p50", "max"} {
		if first[k] <= 0 || first[k] > second[k] || second[k] > lat[k]*1.01 {
			t.Errorf("bench txn: %s of the 1st answer %v, of the 2nd %v, of the call %v; want 0 < 1st <= 2nd <= call",
				k, first[k], second[k], lat[k])
		}
	}
}

// TestBenchCluster runs each bench op against a cluster and checks that
// its requests happened: get finds the keys put wrote, and every transfer
// keeps the sum of its two accounts, which lie in two groups.
func TestBenchCluster(t *testing.T) {
	r := benchRig{cfg: startLocal(t)}
	benchPutGet(t, r)
	benchTransfers(t, r)
	benchTextTransfer(t, r)
}

// benchRig runs bench and kv against the cluster of the configuration file
// cfg.
type benchRig struct{ cfg string }

// bench runs flexkv bench args[0] with the rest of args. Generous: the
// first requests wait for the groups to elect.
func (r benchRig) bench(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	return runBenchCmd(t, append(append([]string{args[0]}, "--config", r.cfg, "--timeout", "1m"), args[1:]...)...)
}

// kv runs flexkv kv args[0] with the rest of args.
func (r benchRig) kv(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	return runKVCmd(t, nil, append(append([]string{args[0]}, "--config", r.cfg, "--timeout", "1m"), args[1:]...)...)
}

// accounts scans [start, end) and returns each key's integer value, by the
// key without its warehouse prefix.
func (r benchRig) accounts(t *testing.T, start, end string) map[string]int {
	t.Helper()
	code, stdout, stderr := r.kv(t, "scan", start, end)
	if code != 0 {
		t.Fatalf("kv scan %s %s: exit code %d, stderr %q", start, end, code, stderr)
	}
	out := map[string]int{}
	for line := range strings.Lines(stdout) {
		key, value, _ := strings.Cut(strings.TrimSuffix(line, "\n"), "\t")
		n, err := strconv.Atoi(value)
		if err != nil {
			t.Fatalf("account %s: %q, want an integer", key, value)
		}
		out[strings.TrimPrefix(key, start[:len("w/000N/")])] = n
	}
	return out
}

// benchPutGet runs bench put, then get, of 40 keys from 4 clients, and
// checks with kv that put wrote exactly those keys.
func benchPutGet(t *testing.T, r benchRig) {
	t.Helper()
	sizes := []string{"--clients", "4", "--total", "40", "--key-size", "6", "--val-size", "10"}
	code, stdout, stderr := r.bench(t, append([]string{"put", "--json"}, sizes...)...)
	if code != 0 || stderr != "" {
		t.Fatalf("bench put: exit code %d, stderr %q", code, stderr)
	}
	checkBenchRun(t, decodeBench(t, stdout), "put", 4, 40)
	for key, want := range map[string]string{"w/0001/000000": "abcdefghij\n", "w/0001/000039": "abcdefghij\n"} {
		if code, stdout, stderr := r.kv(t, "get", key); code != 0 || stdout != want {
			t.Fatalf("kv get %s: exit code %d, stdout %q, stderr %q; want %q", key, code, stdout, stderr, want)
		}
	}
	if code, _, _ := r.kv(t, "get", "w/0001/000040"); code != 1 {
		t.Fatalf("kv get w/0001/000040: exit code %d, want 1: bench put wrote 40 keys", code)
	}

	code, stdout, stderr = r.bench(t, append([]string{"get", "--json"}, sizes...)...)
	if code != 0 || stderr != "" {
		t.Fatalf("bench get: exit code %d, stderr %q", code, stderr)
	}
	checkBenchRun(t, decodeBench(t, stdout), "get", 4, 40)
	code, stdout, stderr = r.bench(t, append([]string{"get"}, sizes...)...)
	if code != 0 || !strings.Contains(stdout, "bench get: 40 requests, 4 clients, 0 errors") ||
		!strings.Contains(stdout, `keys "w/0001/000000".."w/0001/000039" in w0001, 40 found`) ||
		!strings.Contains(stdout, "requests/s") || !strings.Contains(stdout, "p99.9") {
		t.Fatalf("bench get: exit code %d, stdout %q, stderr %q; want the 40 keys found", code, stdout, stderr)
	}
	code, stdout, stderr = r.bench(t, append([]string{"get", "--read-txn"}, sizes...)...)
	if code != 0 || !strings.Contains(stdout, `keys "w/0001/000000".."w/0001/000039" in w0001, 40 found`) {
		t.Fatalf("bench get --read-txn: exit code %d, stdout %q, stderr %q; want the 40 keys found", code, stdout, stderr)
	}
}

// benchTransfers runs two runs of 30 transfers between w0001 and w0003 and
// checks that each account pair keeps its sum.
func benchTransfers(t *testing.T, r benchRig) {
	t.Helper()
	// Two runs of 30 transfers, with different clients, the first with
	// adds that wrap, the second with checked adds: each account pair
	// moves two units, keeping its sum at 0. The accounts count down from
	// 999999, away from the put's text values.
	for _, clients := range []string{"3", "7"} {
		// The first run asks for the answers too; the second's object
		// has DESIGN 7's fields only.
		args := []string{"txn", "--json", "--clients", clients, "--total", "30", "--key-size", "6", "--wrap=" + strconv.FormatBool(clients == "3")}
		if clients == "3" {
			args = append(args, "--answers")
		}
		code, stdout, stderr := r.bench(t, args...)
		if code != 0 || stderr != "" {
			t.Fatalf("bench txn: exit code %d, stderr %q", code, stderr)
		}
		n, _ := strconv.Atoi(clients)
		b := decodeBench(t, stdout)
		if got := b.AnswersMs != nil; got != (clients == "3") {
			t.Fatalf("bench txn %v: answers_ms in the output %v", args, got)
		}
		checkBenchRun(t, b, "txn", n, 30)
	}
	from, to := r.accounts(t, "w/0001/9", "w/0002/"), r.accounts(t, "w/0003/9", "w/0004/")
	if len(from) != 30 || len(to) != 30 {
		t.Fatalf("%d accounts in w0001 and %d in w0003, want 30 each", len(from), len(to))
	}
	for suffix, a := range from {
		if b, ok := to[suffix]; !ok || a != -2 || b != 2 {
			t.Fatalf("accounts %s: w0001 %d, w0003 %d (present %v); want -2 and 2", suffix, a, b, ok)
		}
	}
}

// benchTextTransfer checks a transfer from an account that holds a put's
// text value: checked adds abort, adds that wrap count it as 0.
func benchTextTransfer(t *testing.T, r benchRig) {
	t.Helper()
	// A transfer whose account holds a put's text value aborts: exit 1,
	// the failure counted, and neither account changed.
	if code, _, stderr := r.bench(t, "put", "--key-size", "1", "--total", "10"); code != 0 {
		t.Fatalf("bench put --key-size 1: exit code %d, stderr %q", code, stderr)
	}
	code, stdout, stderr := r.bench(t, "txn", "--json", "--key-size", "1", "--total", "1", "--wrap=false")
	if b := decodeBench(t, stdout); code != 1 || b.Errors != 1 || b.Total != 1 || b.RequestsPerS != 0 ||
		!strings.Contains(stderr, "bench txn: 1 of 1 requests failed; the first: ") || !strings.Contains(stderr, "not an integer") {
		t.Fatalf("bench txn on text values: exit code %d, output %+v, stderr %q; want 1, one error, the abort named", code, b, stderr)
	}
	if code, stdout, _ := r.kv(t, "get", "w/0003/9"); code != 1 {
		t.Fatalf("kv get w/0003/9: exit code %d, stdout %q; want 1: the aborted transfer wrote nothing", code, stdout)
	}
	// With adds that wrap, the text value counts as 0: the transfer runs.
	if code, _, stderr := r.bench(t, "txn", "--key-size", "1", "--total", "1"); code != 0 {
		t.Fatalf("bench txn (wrap) on text values: exit code %d, stderr %q; want 0", code, stderr)
	}
	for key, want := range map[string]string{"w/0001/9": "-1\n", "w/0003/9": "1\n"} {
		if code, stdout, _ := r.kv(t, "get", key); code != 0 || stdout != want {
			t.Fatalf("kv get %s: exit code %d, stdout %q; want %q", key, code, stdout, want)
		}
	}
}
