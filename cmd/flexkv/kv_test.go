package main

import (
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/flexkv/flexkv/certs"
	"github.com/flexkv/flexkv/client"
	"github.com/flexkv/flexkv/cluster"
	"github.com/flexkv/flexkv/configs"
	"github.com/flexkv/flexkv/internal/testaddr"
	"github.com/flexkv/flexkv/partition"
	"github.com/flexkv/flexkv/txn"
)

// runKVCmd runs `flexkv kv args...` in-process, with stdin when not nil.
func runKVCmd(t *testing.T, stdin io.Reader, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	cmd := newKVCmd()
	if stdin != nil {
		cmd.SetIn(stdin)
	}
	return runCmd(t, cmd, args...)
}

// silentServer accepts TCP connections on a loopback port, counts them and
// never answers: a test sees whether a command reached a server, and a
// command that does waits for its --timeout.
type silentServer struct {
	addr     string
	accepted atomic.Int64
}

func newSilentServer(t *testing.T) *silentServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &silentServer{addr: ln.Addr().String()}
	done := make(chan struct{})
	var held []net.Conn // only the accepting goroutine touches it until done
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.accepted.Add(1)
			held = append(held, c)
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		<-done
		for _, c := range held {
			_ = c.Close()
		}
	})
	return s
}

// writeFile writes data to name in a fresh temporary directory.
func writeFile(t *testing.T, name string, data []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestKVBadInvocations: every bad invocation exits non-zero with a message
// naming the problem, and none of them reaches a server, although the
// endpoint given accepts connections: input errors are reported before the
// client connects, keys checked against the partition map of --config.
func TestKVBadInvocations(t *testing.T) {
	srv := newSilentServer(t)
	cfg := writeFile(t, "local.yaml", configs.LocalYAML())
	badTxn := writeFile(t, "bad.json", []byte(`{"then":[{"op":"put","key":"w/0001/a"}]}`))
	conn := []string{"--endpoints", srv.addr, "--config", cfg, "--timeout", "1m"}
	longKey := strings.Repeat("k", partition.KeyMax+1)
	bigValue := strings.Repeat("v", txn.ValueMax+1)

	tests := []struct {
		name  string
		args  []string
		env   map[string]string
		stdin string
		code  int
		want  string // on stderr
	}{
		{name: "no command", args: nil, code: 2, want: "kv: want a command"},
		{name: "unknown command", args: []string{"frob"}, code: 2, want: `kv: unknown command "frob"`},
		{name: "get without key", args: []string{"get"}, code: 2, want: "kv get: want KEY, got 0 arguments"},
		{name: "get two keys", args: []string{"get", "w/0001/a", "w/0001/b"}, code: 2, want: "kv get: want KEY, got 2 arguments"},
		{name: "put without value", args: []string{"put", "w/0001/a"}, code: 2, want: "kv put: want KEY VALUE, got 1 arguments"},
		{name: "put three args", args: []string{"put", "w/0001/a", "1", "2"}, code: 2, want: "want KEY VALUE, got 3"},
		{name: "del without key", args: []string{"del"}, code: 2, want: "kv del: want KEY"},
		{name: "scan one bound", args: []string{"scan", "w/0001/a"}, code: 2, want: "kv scan: want START END, got 1"},
		{name: "txn with argument", args: []string{"txn", "{}"}, code: 2, want: "kv txn: want no arguments, got 1"},
		{name: "empty key", args: []string{"get", ""}, code: 2, want: `kv get: partition: invalid key "": empty`},
		{name: "long key", args: []string{"del", longKey}, code: 2, want: "more than KeyMax (4096)"},
		{name: "get key in no partition", args: []string{"get", "zzz"}, code: 2, want: `kv get: partition: key "zzz": no partition holds the key`},
		{name: "put key in no partition", args: []string{"put", "a", "1"}, code: 2, want: "it sorts before the first partition"},
		{name: "del key in no partition", args: []string{"del", "w/0007/x"}, code: 2, want: `key "w/0007/x": no partition holds the key`},
		{name: "oversized value", args: []string{"put", "w/0001/a", bigValue}, code: 2, want: "kv put: value of 65537 bytes, more than txn.ValueMax (65536)"},
		{name: "scan empty range", args: []string{"scan", "w/0001/b", "w/0001/a"}, code: 2, want: `end "w/0001/a" is not after start "w/0001/b"`},
		{name: "scan of no partition", args: []string{"scan", "x", "y"}, code: 2, want: `kv scan: partition: range ["x", "y"): no partition overlaps it (it starts after the last partition, w0006`},
		{name: "scan of a gap", args: []string{"scan", "j", "k", "--consistent"}, code: 2, want: `range ["j", "k"): no partition overlaps it (it lies between item ["item/", "item0") replicated and w0001`},
		{name: "scan limit 0", args: []string{"scan", "w/0001/a", "w/0001/b", "--limit", "0"}, code: 2, want: "--limit 0, want 1..txn.ScanLimitMax (1024)"},
		{name: "scan limit too large", args: []string{"scan", "w/0001/a", "w/0001/b", "--limit", "1025"}, code: 2, want: "--limit 1025"},
		{name: "scan limit not a number", args: []string{"scan", "w/0001/a", "w/0001/b", "--limit", "ten"}, code: 2, want: `kv scan: invalid argument "ten" for "--limit"`},
		{name: "txn without input", args: []string{"txn"}, code: 2, want: "kv txn: no transaction: give --json"},
		{name: "txn malformed JSON", args: []string{"txn", "--json", `{"then":[`}, code: 2, want: "kv txn: txn: "},
		{name: "txn trailing data", args: []string{"txn", "--json", `{"then":[{"op":"get","key":"w/0001/a"}]} x`}, code: 2, want: "after the transaction: invalid JSON"},
		{name: "txn empty", args: []string{"txn", "--json", `{}`}, code: 2, want: "txn: empty"},
		{name: "txn unknown op", args: []string{"txn", "--json", `{"then":[{"op":"frob","key":"w/0001/a"}]}`}, code: 2, want: `then[0]`},
		{name: "txn unknown field", args: []string{"txn", "--json", `{"than":[]}`}, code: 2, want: `unknown field "than"`},
		{name: "txn compare with int and value", args: []string{"txn", "--json", `{"if":[{"key":"w/0001/a","cmp":"=","int":1,"value":"1"}],"then":[]}`}, code: 2, want: "if[0]"},
		{name: "txn key in no partition", args: []string{"txn", "--json", `{"then":[{"op":"get","key":"w/0001/a"},{"op":"add","key":"zzz","int":1}]}`}, code: 2, want: `kv txn: txn: then[1].key: partition: key "zzz": no partition holds the key`},
		{name: "txn scan of no partition", args: []string{"txn", "--json", `{"then":[{"op":"scan","key":"x","end":"y","limit":5}]}`}, code: 2, want: `kv txn: txn: then[0]: scan: partition: range ["x", "y"): no partition overlaps it`},
		{name: "txn both inputs", args: []string{"txn", "--json", `{}`, "--file", badTxn}, code: 2, want: "both --json and --file given"},
		{name: "txn file missing", args: []string{"txn", "--file", filepath.Join(t.TempDir(), "none.json")}, code: 2, want: "no such file"},
		{name: "txn file empty name", args: []string{"txn", "--file", ""}, code: 2, want: "--file: empty file name"},
		{name: "txn file invalid", args: []string{"txn", "--file", badTxn}, code: 2, want: "then[0]"},
		{name: "txn stdin invalid", args: []string{"txn", "--file", "-"}, stdin: `{"else":[{"op":"delete","key":""}]}`, code: 2, want: "else[0].key"},
		{name: "unknown flag", args: []string{"get", "w/0001/a", "--fast"}, code: 2, want: "kv get: unknown flag: --fast"},
		{name: "--json on put takes no value", args: []string{"put", "w/0001/a", "1", "--json=maybe"}, code: 2, want: `invalid argument "maybe" for "--json"`},
		{name: "endpoint without port", args: []string{"get", "w/0001/a", "--endpoints", "localhost"}, code: 2, want: `--endpoints: "localhost" is not host:port`},
		{name: "endpoint without host", args: []string{"get", "w/0001/a", "--endpoints", ":7201"}, code: 2, want: `--endpoints: ":7201" has no host`},
		{name: "endpoint port 0", args: []string{"get", "w/0001/a", "--endpoints", "127.0.0.1:0"}, code: 2, want: `port "0", want 1..65535`},
		{name: "endpoint port out of range", args: []string{"get", "w/0001/a", "--endpoints", "127.0.0.1:70000"}, code: 2, want: `port "70000"`},
		{name: "empty endpoint in list", args: []string{"get", "w/0001/a", "--endpoints", srv.addr + ",,"}, code: 2, want: "empty address"},
		{name: "bad endpoints from the environment", args: []string{"get", "w/0001/a"}, env: map[string]string{"FLEXKV_ENDPOINTS": "nowhere"}, code: 2, want: `"nowhere" is not host:port`},
		{name: "zero timeout", args: []string{"get", "w/0001/a", "--timeout", "0s"}, code: 2, want: "--timeout 0s: want more than 0"},
		{name: "timeout not a duration", args: []string{"get", "w/0001/a", "--timeout", "soon"}, code: 2, want: `invalid argument "soon" for "--timeout"`},
		{name: "bad timeout from the environment", args: []string{"get", "w/0001/a"}, env: map[string]string{"FLEXKV_TIMEOUT": "soon"}, code: 2, want: `--timeout "soon": want a duration`},
		{name: "config missing", args: []string{"get", "w/0001/a", "--config", filepath.Join(t.TempDir(), "none.yaml")}, code: 2, want: "kv get: config "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			var stdin io.Reader
			if tt.stdin != "" {
				stdin = strings.NewReader(tt.stdin)
			}
			// The connection flags go right after the command: a flag
			// given twice takes its last value, so a case's own comes
			// after them and wins. Cases about the environment go
			// without them, since a flag beats its variable.
			args := tt.args
			if len(args) > 0 && args[0] != "frob" && tt.env == nil {
				args = append(append([]string{args[0]}, conn...), args[1:]...)
			}
			before := srv.accepted.Load()
			code, stdout, stderr := runKVCmd(t, stdin, args...)
			checkRefused(t, code, stdout, stderr, tt.code, tt.want, srv.accepted.Load()-before)
		})
	}
}

// checkRefused checks the outcome of a bad invocation: exit code wantCode,
// one line on stderr that starts with "flexkv: " and contains want, nothing
// on stdout, and no connection made (connections: how many the test's
// server accepted during the command).
func checkRefused(t *testing.T, code int, stdout, stderr string, wantCode int, want string, connections int64) {
	t.Helper()
	if code != wantCode {
		t.Errorf("exit code %d, want %d (stderr %q)", code, wantCode, stderr)
	}
	if !strings.Contains(stderr, want) {
		t.Errorf("stderr %q, want it to contain %q", stderr, want)
	}
	if !strings.HasPrefix(stderr, "flexkv: ") || strings.Count(stderr, "\n") != 1 {
		t.Errorf("stderr %q, want one line starting with \"flexkv: \"", stderr)
	}
	if stdout != "" {
		t.Errorf("stdout %q, want nothing", stdout)
	}
	if connections != 0 {
		t.Errorf("%d connections reached the server, want none", connections)
	}
}

// TestKVDefaultConfigChecksKeys: with neither --endpoints nor --config, the
// embedded configuration's partition map checks keys before any
// connection is attempted, so a key in no partition is exit 2 whether or
// not a cluster runs on its addresses.
func TestKVDefaultConfigChecksKeys(t *testing.T) {
	code, _, stderr := runKVCmd(t, nil, "put", "zzz", "1")
	if code != 2 || !strings.Contains(stderr, `kv put: partition: key "zzz": no partition holds the key`) {
		t.Fatalf("exit code %d, stderr %q; want 2 and the key in no partition", code, stderr)
	}
}

// TestKVUnreachable: a cluster that refuses connections is exit 3, and the
// error names the endpoints tried. With explicit --endpoints and no
// --config the partition map is the cluster's, so even a key in no
// partition gets that far: the map is unknown until the cluster answers.
// Endpoints from FLEXKV_ENDPOINTS and a transaction from stdin or a file
// reach the same point, which shows that each was read and accepted.
func TestKVUnreachable(t *testing.T) {
	a, b := testaddr.Refused(t, 1), testaddr.Refused(t, 2)
	good := `{"if":[{"key":"w/0001/acct","cmp":">=","int":5}],"then":[{"op":"add","key":"w/0001/acct","int":-5},{"op":"add","key":"w/0003/acct","int":5}],"else":[]}`
	file := writeFile(t, "txn.json", []byte(good))
	tests := []struct {
		name  string
		args  []string
		env   map[string]string
		stdin string
	}{
		{name: "get", args: []string{"get", "w/0001/a", "--endpoints", a + "," + b}},
		{name: "key unknown without the map", args: []string{"get", "zzz", "--endpoints", a + "," + b}},
		{name: "put", args: []string{"put", "w/0001/a", "v", "--endpoints", a + "," + b, "--json"}},
		{name: "scan", args: []string{"scan", "w/0001/a", "w/0002/", "--endpoints", a + "," + b}},
		{name: "endpoints from the environment", args: []string{"del", "w/0001/a"}, env: map[string]string{"FLEXKV_ENDPOINTS": a + "," + b}},
		{name: "txn from --json", args: []string{"txn", "--json", good, "--endpoints", a + "," + b}},
		{name: "txn from a file", args: []string{"txn", "--file", file, "--endpoints", a + "," + b}},
		{name: "txn from stdin", args: []string{"txn", "--file", "-", "--endpoints", a + "," + b}, stdin: good},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			var stdin io.Reader
			if tt.stdin != "" {
				stdin = strings.NewReader(tt.stdin)
			}
			code, stdout, stderr := runKVCmd(t, stdin, tt.args...)
			if code != 3 {
				t.Errorf("exit code %d, want 3 (stderr %q)", code, stderr)
			}
			if want := "cannot reach the cluster at " + a + "," + b + ": "; !strings.Contains(stderr, want) {
				t.Errorf("stderr %q, want it to name the endpoints: %q", stderr, want)
			}
			if strings.Count(stderr, "\n") != 1 {
				t.Errorf("stderr %q, want one line", stderr)
			}
			if stdout != "" {
				t.Errorf("stdout %q, want nothing", stdout)
			}
		})
	}
}

// TestKVTimeout: a server that accepts connections and never answers holds
// the command until --timeout, then exit 3 names the endpoint and the
// deadline.
func TestKVTimeout(t *testing.T) {
	srv := newSilentServer(t)
	cfg := writeFile(t, "local.yaml", configs.LocalYAML())
	code, _, stderr := runKVCmd(t, nil, "get", "w/0001/a", "--endpoints", srv.addr, "--config", cfg, "--timeout", "200ms")
	if code != 3 {
		t.Fatalf("exit code %d, want 3 (stderr %q)", code, stderr)
	}
	for _, want := range []string{"kv get: no answer from the cluster at " + srv.addr + " within --timeout 200ms", "deadline exceeded"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr %q lacks %q", stderr, want)
		}
	}
	// The command's connection may be accepted after it gave up: wait for
	// the accepting goroutine, for long enough that only a command that
	// never connected runs out.
	deadline := time.Now().Add(10 * time.Second)
	for srv.accepted.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the command never connected to the server")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestParseEndpoints(t *testing.T) {
	got, err := parseEndpoints(" 127.0.0.1:7201, [::1]:7202,host.example:1")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"127.0.0.1:7201", "[::1]:7202", "host.example:1"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("got %q, want %q", got, want)
	}
}

// freeAddr returns a loopback address for a server (testaddr.Command).
func freeAddr(t *testing.T) string { return testaddr.Free(t, testaddr.Command) }

// startLocal runs the groups and partitions of configs/local.yaml, one
// replica per group on free ports, in this process, and returns the path
// of its configuration file: `--config` of that path reaches it.
func startLocal(t *testing.T) string {
	t.Helper()
	return startLocalScanBytes(t, 0)
}

// startLocalScanBytes is startLocal with the servers' scan byte bound
// (server.Config.ScanBytesMax; 0: the default).
func startLocalScanBytes(t *testing.T, scanBytesMax int) string {
	t.Helper()
	path, cfg := oneReplicaConfig(t)
	l, err := cluster.Start(cluster.Config{
		Cluster:      cfg,
		Dir:          t.TempDir(),
		NoSync:       true,
		Logger:       slog.New(slog.DiscardHandler),
		ScanBytesMax: scanBytesMax,
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
	return path
}

// TestKVCluster runs every kv command against a cluster and checks their
// output and exit codes, plain and --json.
func TestKVCluster(t *testing.T) {
	cfg := startLocal(t)
	kv := func(t *testing.T, args ...string) (int, string, string) {
		t.Helper()
		// Generous: the first command waits for the groups to elect.
		return runKVCmd(t, nil, append(append([]string{args[0]}, "--config", cfg, "--timeout", "1m"), args[1:]...)...)
	}
	type want struct {
		code   int
		stdout string
		stderr string // a substring; "" wants stderr empty
	}
	steps := []struct {
		args []string
		want want
	}{
		{[]string{"put", "w/0001/a", "1"}, want{0, "", ""}},
		// The cluster runs TLS: a plaintext client is told so, and a
		// client of another user has no certificate here.
		{[]string{"put", "w/0001/a", "2", "--insecure", "--timeout", "3s"}, want{3, "", "it runs TLS and this client does not: drop --insecure"}},
		{[]string{"put", "w/0001/a", "2", "--user", "nobody"}, want{2, "", "client.nobody.crt"}},
		{[]string{"put", "w/0001/b", "two words", "--json"}, want{0, `{"key":"w/0001/b","ok":true}` + "\n", ""}},
		{[]string{"put", "w/0001/c", "<x>&"}, want{0, "", ""}},
		{[]string{"put", "w/0002/a", "other partition"}, want{0, "", ""}},
		{[]string{"get", "w/0001/a"}, want{0, "1\n", ""}},
		{[]string{"get", "w/0001/b", "--json"}, want{0, `{"key":"w/0001/b","found":true,"value":"two words"}` + "\n", ""}},
		{[]string{"get", "w/0001/c", "--json"}, want{0, `{"key":"w/0001/c","found":true,"value":"<x>&"}` + "\n", ""}},
		{[]string{"get", "w/0001/a", "--stale"}, want{0, "1\n", ""}},
		{[]string{"get", "w/0001/b", "--stale", "--json"}, want{0, `{"key":"w/0001/b","found":true,"value":"two words","stale":true}` + "\n", ""}},
		{[]string{"get", "w/0001/none"}, want{1, "", `flexkv: kv get: key "w/0001/none" not found`}},
		{[]string{"get", "w/0001/none", "--json"}, want{1, `{"key":"w/0001/none","found":false}` + "\n", "not found"}},
		{[]string{"scan", "w/0001/", "w/0002/"}, want{0, "w/0001/a\t1\nw/0001/b\ttwo words\nw/0001/c\t<x>&\n", ""}},
		{[]string{"scan", "w/0001/", "w/0002/", "--limit", "1", "--json"}, want{0, `{"kvs":[{"key":"w/0001/a","value":"1"}]}` + "\n", ""}},
		{[]string{"scan", "w/0001/x", "w/0002/", "--json"}, want{0, `{"kvs":[]}` + "\n", ""}},
		{[]string{"del", "w/0001/b"}, want{0, "", ""}},
		{[]string{"del", "w/0001/b", "--json"}, want{0, `{"key":"w/0001/b","ok":true}` + "\n", ""}},
		{[]string{"get", "w/0001/b"}, want{1, "", "not found"}},
		// add on a value that is not an integer aborts the transaction.
		{[]string{"txn", "--json", `{"then":[{"op":"add","key":"w/0001/c","int":1}]}`}, want{1, "", "not an integer"}},
	}
	for _, s := range steps {
		code, stdout, stderr := kv(t, s.args...)
		if code != s.want.code || stdout != s.want.stdout ||
			(s.want.stderr == "" && stderr != "") || !strings.Contains(stderr, s.want.stderr) {
			t.Fatalf("kv %q: exit code %d, stdout %q, stderr %q; want %d, %q, stderr with %q",
				s.args, code, stdout, stderr, s.want.code, s.want.stdout, s.want.stderr)
		}
	}

	checkKVScanAcross(t, kv)

	// A transfer between partitions of two groups (eu-west-1, eu-west-3):
	// the result JSON names both destinations.
	transfer := `{"if":[{"key":"w/0001/a","cmp":">=","int":1}],
		"then":[{"op":"add","key":"w/0001/a","int":-1},{"op":"add","key":"w/0003/a","int":1},{"op":"get","key":"w/0001/a"}],
		"else":[{"op":"get","key":"w/0001/a"}]}`
	for i, succeeded := range []bool{true, false} {
		code, stdout, stderr := kv(t, "txn", "--file", writeFile(t, "transfer.json", []byte(transfer)))
		if code != 0 {
			t.Fatalf("transfer %d: exit code %d, stderr %q", i, code, stderr)
		}
		var res struct {
			ID           string            `json:"id"`
			Succeeded    bool              `json:"succeeded"`
			Results      []json.RawMessage `json:"results"`
			Destinations []txn.DestLatency `json:"destinations"`
		}
		if err := json.Unmarshal([]byte(stdout), &res); err != nil {
			t.Fatalf("transfer %d: output %q: %v", i, stdout, err)
		}
		wantResults := 3
		if !succeeded {
			wantResults = 1
		}
		groups := []string{}
		for _, d := range res.Destinations {
			groups = append(groups, d.Group)
		}
		slices.Sort(groups)
		if res.ID == "" || res.Succeeded != succeeded || len(res.Results) != wantResults ||
			strings.Join(groups, ",") != "eu-west-1,eu-west-3" {
			t.Fatalf("transfer %d: result %s, want succeeded %v, %d results, destinations eu-west-1 and eu-west-3",
				i, stdout, succeeded, wantResults)
		}
		if got := string(res.Results[len(res.Results)-1]); got != `{"op":"get","key":"w/0001/a","found":true,"value":"0"}` {
			t.Fatalf("transfer %d: last result %s, want w/0001/a at 0", i, got)
		}
	}
	if code, stdout, _ := kv(t, "get", "w/0003/a"); code != 0 || stdout != "1\n" {
		t.Fatalf("get w/0003/a: exit code %d, stdout %q; want 0 and 1", code, stdout)
	}

	// With --endpoints alone the partition map is the cluster's: the
	// client rejects a key in no partition before sending it.
	t.Setenv("FLEXKV_ENDPOINTS", strings.Join(clientEndpointsOf(t, cfg), ","))
	code, _, stderr := runKVCmd(t, nil, "put", "zzz", "1", "--timeout", "1m")
	if code != 2 || !strings.Contains(stderr, `key "zzz": no partition holds the key`) {
		t.Fatalf("put zzz: exit code %d, stderr %q; want 2 and the key in no partition", code, stderr)
	}
}

// clientEndpointsOf returns the gRPC addresses of the configuration at path.
func clientEndpointsOf(t *testing.T, path string) []string {
	t.Helper()
	cfg, _, err := loadCluster(path)
	if err != nil {
		t.Fatal(err)
	}
	return cfg.Endpoints()
}

// TestKVInsecureCluster runs kv against a cluster started with --insecure:
// a client with certificates is told that the cluster runs without TLS,
// and --insecure works (the Go client detects both directions of the
// mismatch; TestKVCluster checks the other).
func TestKVInsecureCluster(t *testing.T) {
	path, cfg := oneReplicaConfig(t)
	l, err := cluster.Start(cluster.Config{Cluster: cfg, Dir: t.TempDir(), NoSync: true, Insecure: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Error(err)
		}
	})
	dir := t.TempDir()
	ca, err := certs.CreateCA(dir, filepath.Join(t.TempDir(), "ca.key"), certs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ca.CreateClient(dir, cluster.RootUser, certs.Options{}); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := runKVCmd(t, nil, "put", "w/0001/a", "1", "--config", path, "--certs-dir", dir, "--timeout", "1m")
	t.Logf("put with certificates: %s", stderr)
	if want := "it runs without TLS: give --insecure"; code != kvExitUnreachable || !strings.Contains(stderr, want) || strings.Contains(stderr, "Config.") {
		t.Errorf("put with certificates: exit %d, stderr %q; want %d naming %q, in the flags' terms", code, stderr, kvExitUnreachable, want)
	}
	if code, stdout, stderr := runKVCmd(t, nil, "put", "w/0001/a", "1", "--config", path, "--insecure", "--timeout", "1m"); code != 0 {
		t.Errorf("put --insecure: exit %d, stdout %q, stderr %q; want 0", code, stdout, stderr)
	}
}

// TestTLSHint checks the hint a command adds to a connection's error, in
// the flags' terms, for each side that sees each mismatch.
func TestTLSHint(t *testing.T) {
	preface := status.Error(codes.Unavailable, `connection error: desc = "error reading server preface: EOF"`)
	record := status.Error(codes.Unavailable, `connection error: desc = "transport: authentication handshake failed: tls: first record does not look like a TLS handshake"`)
	unknownCA := status.Error(codes.Unavailable, `connection error: desc = "transport: authentication handshake failed: tls: failed to verify certificate: x509: certificate signed by unknown authority"`)
	for _, tt := range []struct {
		err    error
		secure bool
		want   string
	}{
		{preface, false, "it runs TLS and this client does not: drop --insecure"},
		{&client.TLSMismatchError{ClusterTLS: true, Err: preface}, false, "it runs TLS and this client does not: drop --insecure"},
		{record, true, "it runs without TLS: give --insecure"},
		{&client.TLSMismatchError{Err: record}, true, "it runs without TLS: give --insecure"},
		{unknownCA, true, "TLS failed: is --certs-dir the cluster's"},
		{status.Error(codes.Unavailable, "connection refused"), true, ""},
		{status.Error(codes.Unavailable, "connection refused"), false, ""},
	} {
		got := tlsHint(tt.err, tt.secure)
		if (tt.want == "") != (got == "") || !strings.Contains(got, tt.want) {
			t.Errorf("tlsHint(%v, secure %v) = %q, want %q", tt.err, tt.secure, got, tt.want)
		}
	}
}

// kvWant is what a kv command should do: its exit code, its stdout, and a
// substring of its stderr ("" wants stderr empty).
type kvWant struct {
	code   int
	stdout string
	stderr string
}

// checkKVScanAcross scans across the partitions of the three groups of
// configs/local.yaml, in key order, up to the limit: plainly, a partition
// at a time, and at one cut (--consistent). The keys of w/0001/ and
// w/0002/ are TestKVCluster's.
func checkKVScanAcross(t *testing.T, kv func(t *testing.T, args ...string) (int, string, string)) {
	t.Helper()
	steps := []struct {
		args []string
		want kvWant
	}{
		{[]string{"put", "w/0003/z", "3z"}, kvWant{0, "", ""}},
		{[]string{"put", "w/0005/z", "5z"}, kvWant{0, "", ""}},
		{[]string{"scan", "w/0001/b", "w/0007/"}, kvWant{0, "w/0001/c\t<x>&\nw/0002/a\tother partition\nw/0003/z\t3z\nw/0005/z\t5z\n", ""}},
		{[]string{"scan", "w/0001/b", "w/0007/", "--limit", "3"}, kvWant{0, "w/0001/c\t<x>&\nw/0002/a\tother partition\nw/0003/z\t3z\n", ""}},
		{[]string{"scan", "w/0001/b", "w/0007/", "--consistent"}, kvWant{0, "w/0001/c\t<x>&\nw/0002/a\tother partition\nw/0003/z\t3z\nw/0005/z\t5z\n", ""}},
		{[]string{"scan", "w/0002/", "w/0006/", "--consistent", "--limit", "2", "--json"}, kvWant{0, `{"kvs":[{"key":"w/0002/a","value":"other partition"},{"key":"w/0003/z","value":"3z"}]}` + "\n", ""}},
		{[]string{"scan", "w/0004/", "w/0005/", "--consistent", "--json"}, kvWant{0, `{"kvs":[]}` + "\n", ""}},
		{[]string{"del", "w/0003/z"}, kvWant{0, "", ""}},
		{[]string{"del", "w/0005/z"}, kvWant{0, "", ""}},
	}
	for _, s := range steps {
		code, stdout, stderr := kv(t, s.args...)
		if code != s.want.code || stdout != s.want.stdout ||
			(s.want.stderr == "" && stderr != "") || !strings.Contains(stderr, s.want.stderr) {
			t.Fatalf("kv %q: exit code %d, stdout %q, stderr %q; want %d, %q, stderr with %q",
				s.args, code, stdout, stderr, s.want.code, s.want.stdout, s.want.stderr)
		}
	}
}

// TestKVScanPastTheBound: with servers whose scan byte bound is 64 bytes,
// a plain scan across partitions pages through the whole range, and a
// consistent one, answered whole or not at all, fails (exit 1) naming the
// bound; a lower --limit fits.
func TestKVScanPastTheBound(t *testing.T) {
	cfg := startLocalScanBytes(t, 64)
	kv := func(t *testing.T, args ...string) (int, string, string) {
		t.Helper()
		return runKVCmd(t, nil, append(append([]string{args[0]}, "--config", cfg, "--timeout", "1m"), args[1:]...)...)
	}
	var lines []string
	for _, k := range []string{"w/0001/a", "w/0001/b", "w/0003/a", "w/0003/b", "w/0005/a", "w/0005/b"} {
		if code, _, stderr := kv(t, "put", k, "0123456789"); code != 0 {
			t.Fatalf("put %s: exit code %d, %s", k, code, stderr)
		}
		lines = append(lines, k+"\t0123456789\n")
	}
	all := strings.Join(lines, "")
	for _, s := range []struct {
		args []string
		want kvWant
	}{
		{[]string{"scan", "w/0001/", "w/0007/"}, kvWant{0, all, ""}},
		{[]string{"scan", "w/0001/", "w/0007/", "--consistent"}, kvWant{1, "", "consistent scan [\"w/0001/\", \"w/0007/\"): its first 6 keys hold 108 bytes of keys and values, more than the scan byte bound (64, server.Config.ScanBytesMax)"}},
		{[]string{"scan", "w/0001/", "w/0007/", "--consistent", "--limit", "3"}, kvWant{0, strings.Join(lines[:3], ""), ""}},
	} {
		code, stdout, stderr := kv(t, s.args...)
		if code != s.want.code || stdout != s.want.stdout ||
			(s.want.stderr == "" && stderr != "") || !strings.Contains(stderr, s.want.stderr) {
			t.Errorf("kv %q: exit code %d, stdout %q, stderr %q; want %d, %q, stderr with %q",
				s.args, code, stdout, stderr, s.want.code, s.want.stdout, s.want.stderr)
		}
	}
}
