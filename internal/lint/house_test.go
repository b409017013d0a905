package lint

import (
	"fmt"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// A room is one package of the module: its floor and every arrow that leaves
// it (DESIGN 1). The house is the whole list; nothing is allowed that it
// does not name, and there is no list of exceptions.
type room struct {
	dir   string // the package, relative to the module root
	floor int    // a package imports only packages on lower floors
	// imports are the module packages its code may import; tests may also
	// import tests (the rigs and the code they run the package against).
	imports, tests []string
	// ext are the packages outside the standard library and the module that
	// its code may import (a trailing * matches any suffix); testExt adds
	// those its tests may import beyond testingExt.
	ext, testExt []string
}

// testingExt are the testing libraries any test may import.
var testingExt = []string{
	"github.com/google/go-cmp/*", "go.uber.org/goleak", "github.com/anishathalye/porcupine",
	"github.com/cockroachdb/datadriven", "go.yaml.in/yaml/v3", "google.golang.org/protobuf/proto",
}

// Shared lists of outside packages.
var (
	grpcExt   = []string{"google.golang.org/grpc", "google.golang.org/grpc/*"}
	protoExt  = []string{"google.golang.org/grpc", "google.golang.org/grpc/*", "google.golang.org/protobuf/*"}
	pebbleExt = []string{"github.com/cockroachdb/pebble/v2", "github.com/cockroachdb/pebble/v2/*"}
	raftExt   = []string{"github.com/hashicorp/raft", "github.com/hashicorp/go-hclog"}
	promExt   = []string{"github.com/prometheus/*"}
	// gatewayExt is grpc-gateway v2's runtime, which the generated HTTP
	// gateway (apipb) and its registration (api) use (DESIGN 7).
	gatewayExt = []string{"github.com/grpc-ecosystem/grpc-gateway/v2/runtime", "github.com/grpc-ecosystem/grpc-gateway/v2/utilities"}
)

// house is DESIGN 1's layout, bottom up. Floor 0 imports no package of the
// module; every other room names each package it imports, and each of those
// is on a lower floor.
var house = []room{
	// 0: the ground: topology, certificates, generated protobuf, plumbing.
	{dir: "partition", floor: 0},
	{dir: "certs", floor: 0},
	{dir: "internal/invariants", floor: 0},
	{dir: "jepsen/history", floor: 0},
	{dir: "overlay", floor: 0, tests: []string{"partition"}},
	{dir: "api/apipb", floor: 0, ext: slices.Concat(protoExt, gatewayExt), testExt: []string{"go.etcd.io/etcd/api/v3/*"}},
	{dir: "replication/transport/transportpb", floor: 0, ext: protoExt},
	{dir: "internal/h2test", floor: 0, ext: []string{"golang.org/x/net/http2", "golang.org/x/net/http2/hpack"}},
	{dir: "internal/rpcflow", floor: 0, ext: grpcExt, tests: []string{"internal/h2test"}, testExt: []string{"golang.org/x/net/http2"}},
	{dir: "internal/loadgen", floor: 0, ext: []string{"github.com/HdrHistogram/hdrhistogram-go"}},
	{dir: "internal/testaddr", floor: 0},
	{dir: "internal/crashfs", floor: 0, ext: []string{"github.com/cockroachdb/pebble/v2/vfs"}},
	{dir: "internal/syncfs", floor: 0, ext: []string{"github.com/cockroachdb/pebble/v2/vfs"}},
	{dir: "internal/lint", floor: 0},
	{dir: "internal/buildinfo", floor: 0},
	// 1: the deterministic wire encoding, the store, the shipped
	// configurations.
	{dir: "internal/wire", floor: 1, imports: []string{"partition"}},
	{dir: "kv", floor: 1, imports: []string{"internal/invariants", "internal/syncfs", "partition"}, ext: pebbleExt},
	{dir: "configs", floor: 1, imports: []string{"partition"}, tests: []string{"multicast", "multicast/protocol"}},
	{dir: "jepsen/checker", floor: 1, imports: []string{"jepsen/history"}, ext: []string{"github.com/anishathalye/porcupine"}},
	{dir: "jepsen/hosts", floor: 1, imports: []string{"certs", "partition"}, tests: []string{"client", "txn"}, ext: []string{"go.yaml.in/yaml/v3"}},
	{dir: "internal/testcluster", floor: 1, imports: []string{"internal/testaddr", "partition"}, ext: append([]string{"go.uber.org/goleak"}, promExt...)},
	// 2: the ordering contract.
	{dir: "multicast", floor: 2, imports: []string{"internal/wire", "partition"}},
	// 3: the ordering checker, the cores, the reliable channel, the
	// transaction model, the raft log.
	{dir: "multicast/check", floor: 3, imports: []string{"multicast"}},
	{dir: "multicast/channel", floor: 3, imports: []string{"internal/invariants", "internal/wire", "multicast", "partition"},
		tests: []string{"multicast/internal/simnet"}},
	{dir: "multicast/flexcast", floor: 3, imports: []string{"internal/invariants", "internal/wire", "multicast", "partition"},
		tests: []string{"configs", "multicast/internal/simnet", "multicast/internal/snaptest", "multicast/check", "multicast/internal/interaction"}},
	{dir: "multicast/skeen", floor: 3, imports: []string{"internal/wire", "multicast", "partition"},
		tests: []string{"multicast/internal/simnet", "multicast/internal/snaptest", "multicast/check", "multicast/internal/interaction"}},
	{dir: "multicast/tree", floor: 3, imports: []string{"internal/wire", "multicast", "partition"},
		tests: []string{"multicast/internal/simnet", "multicast/internal/snaptest", "multicast/internal/interaction"}},
	{dir: "multicast/internal/simnet", floor: 4, imports: []string{"multicast", "multicast/check", "partition"},
		tests: []string{"multicast/tree"}},
	{dir: "multicast/internal/snaptest", floor: 3, imports: []string{"internal/wire", "multicast", "partition"}, ext: []string{"github.com/google/go-cmp/*"}},
	{dir: "txn", floor: 3, imports: []string{"internal/wire", "multicast", "partition"}},
	{dir: "replication/raftstore", floor: 3, imports: []string{"internal/syncfs", "internal/wire"}, tests: []string{"internal/crashfs"}, ext: append(slices.Clone(pebbleExt), raftExt...)},
	// 4: the registry of protocols, the node (core over channel), the
	// transport, the stored procedures.
	{dir: "multicast/protocol", floor: 4, imports: []string{"multicast", "multicast/flexcast", "multicast/skeen", "multicast/tree", "partition"}},
	{dir: "multicast/rawnode", floor: 4, imports: []string{"internal/wire", "multicast", "multicast/channel", "partition"},
		tests: []string{"multicast/internal/simnet", "multicast/check", "multicast/flexcast", "multicast/protocol", "multicast/skeen"}},
	{dir: "replication/transport", floor: 4, imports: []string{"internal/rpcflow", "multicast/channel", "partition", "replication/transport/transportpb"},
		// x/sys/unix: the links' TCP_USER_TIMEOUT.
		tests: []string{"internal/testaddr"}, ext: append([]string{"golang.org/x/sys/unix"}, protoExt...)},
	{dir: "gtpcc/procs", floor: 4, imports: []string{"txn"}, tests: []string{"executor", "group", "kv", "multicast", "partition"}},
	// 5: the group state machine, the API's conversions, the scripted
	// environment of the cores.
	{dir: "group", floor: 5, imports: []string{"internal/invariants", "internal/wire", "multicast", "multicast/channel", "multicast/protocol", "multicast/rawnode", "partition"}},
	{dir: "api", floor: 5, imports: []string{"api/apipb", "multicast", "multicast/protocol", "partition", "txn"}, tests: []string{"configs"}, ext: slices.Concat(protoExt, gatewayExt)},
	{dir: "multicast/internal/interaction", floor: 5, imports: []string{"multicast", "multicast/channel", "multicast/check", "multicast/rawnode", "partition"},
		tests: []string{"multicast/protocol"}, ext: []string{"github.com/cockroachdb/datadriven"}},
	// 6: the executor, the replication shell, the ordering simulator, the
	// client.
	{dir: "executor", floor: 6, imports: []string{"group", "internal/invariants", "internal/wire", "kv", "multicast", "multicast/rawnode", "partition", "txn"},
		tests: []string{"api/apipb"}},
	{dir: "replication", floor: 6, imports: []string{"group", "multicast", "multicast/channel", "multicast/rawnode", "partition", "replication/raftstore", "replication/transport"},
		tests: []string{"internal/crashfs", "internal/testaddr", "internal/testcluster", "internal/wire", "multicast/check", "multicast/protocol"},
		ext:   append(append(slices.Clone(raftExt), grpcExt...), "github.com/cockroachdb/pebble/v2/vfs"), testExt: pebbleExt},
	{dir: "multicast/sim", floor: 6, imports: []string{"configs", "multicast", "multicast/channel", "multicast/check", "multicast/flexcast", "multicast/protocol", "multicast/rawnode", "multicast/internal/interaction", "partition"}},
	// The client's tests and examples run it against in-process clusters
	// (package cluster, above it); its code links no server (DESIGN 1).
	{dir: "client", floor: 6, imports: []string{"api", "api/apipb", "certs", "internal/rpcflow", "multicast", "multicast/protocol", "partition", "txn"},
		tests: []string{"cluster", "internal/testaddr", "internal/testcluster"}, ext: grpcExt},
	// 7: the whole-database simulator, the server, the gTPC-C driver.
	{dir: "dbsim", floor: 7, imports: []string{"executor", "group", "kv", "multicast", "multicast/channel", "multicast/check", "multicast/protocol", "multicast/rawnode", "partition", "txn"},
		ext: pebbleExt},
	{dir: "server", floor: 7, imports: []string{"api", "api/apipb", "certs", "executor", "group", "internal/buildinfo", "internal/rpcflow", "kv", "multicast", "multicast/channel", "multicast/check", "multicast/protocol", "multicast/rawnode", "partition", "replication", "replication/transport", "txn"},
		tests: []string{"internal/testaddr", "internal/testcluster"}, ext: slices.Concat(grpcExt, promExt, []string{"golang.org/x/net/netutil", "google.golang.org/protobuf/proto"})},
	{dir: "gtpcc", floor: 7, imports: []string{"client", "gtpcc/procs", "partition", "txn"},
		tests: []string{"api", "api/apipb", "cluster", "internal/testaddr"},
		ext:   []string{"github.com/HdrHistogram/hdrhistogram-go", "gonum.org/v1/plot", "gonum.org/v1/plot/*"}, testExt: grpcExt},
	{dir: "jepsen/workload", floor: 7, imports: []string{"client", "jepsen/history", "txn"},
		tests: []string{"cluster", "jepsen/checker", "internal/testaddr", "partition"}},
	{dir: "jepsen/outage", floor: 7, imports: []string{"client", "jepsen/hosts", "txn"}},
	// 8: the in-process clusters (rigs for local, demo and tests).
	{dir: "cluster", floor: 8, imports: []string{"certs", "multicast/channel", "multicast/check", "multicast/protocol", "partition", "replication", "server", "txn"},
		tests:   []string{"api", "api/apipb", "client", "gtpcc", "gtpcc/procs", "internal/h2test", "internal/testaddr", "internal/testcluster", "kv", "replication/transport/transportpb"},
		testExt: append(slices.Clone(grpcExt), "google.golang.org/protobuf/types/descriptorpb")},
	{dir: "jepsen", floor: 8, imports: []string{"client", "jepsen/checker", "jepsen/history", "jepsen/hosts", "jepsen/workload"}},
	// 9: the benchmark runs, which start clusters; the checks of the files
	// an operator deploys (code: none; tests: against a running cluster).
	{dir: "deploy", floor: 9, tests: []string{"cluster", "internal/testaddr", "internal/testcluster"},
		testExt: []string{"github.com/VictoriaMetrics/metricsql", "github.com/prometheus/client_model/go"}},
	{dir: "deploy/kubernetes", floor: 9, tests: []string{"certs", "partition"},
		testExt: []string{"k8s.io/api/*", "k8s.io/apimachinery/*", "sigs.k8s.io/json", "sigs.k8s.io/yaml"}},
	{dir: "gtpcc/bench", floor: 9, imports: []string{"client", "cluster", "gtpcc", "gtpcc/procs", "multicast", "multicast/protocol", "partition", "server"}},
	// 9: backups of a whole cluster (DESIGN 14): a client of the API that
	// also seeds a replica's data directory.
	{dir: "backup", floor: 9, imports: []string{"api", "api/apipb", "executor", "internal/rpcflow", "multicast/protocol", "partition", "server"},
		tests: []string{"certs", "client", "cluster", "internal/testaddr", "internal/testcluster", "replication", "txn"}, ext: grpcExt},
	// 10: the command line.
	{dir: "cmd/flexkv", floor: 10, imports: []string{"api", "api/apipb", "backup", "certs", "client", "cluster", "configs", "gtpcc", "gtpcc/bench", "gtpcc/procs", "internal/buildinfo", "internal/loadgen", "internal/rpcflow", "multicast", "multicast/check", "multicast/flexcast", "multicast/protocol", "multicast/sim", "overlay", "partition", "replication", "server", "txn"},
		tests: []string{"internal/testaddr", "internal/testcluster"},
		ext:   append([]string{"github.com/spf13/cobra", "github.com/spf13/pflag", "github.com/spf13/viper", "google.golang.org/protobuf/encoding/protojson"}, grpcExt...)},
}

// roomOf returns the room of package directory dir.
func roomOf(dir string) (room, bool) {
	i := slices.IndexFunc(house, func(r room) bool { return r.dir == dir })
	if i < 0 {
		return room{}, false
	}
	return house[i], true
}

// importProblem returns why a file of package dir (a test file if test) may
// not import path, or "" if it may.
func importProblem(dir, path string, test bool) string {
	r, ok := roomOf(dir)
	if !ok {
		return fmt.Sprintf("package %s has no room in the house: name its floor and arrows (DESIGN 1)", dir)
	}
	if rel, ok := moduleRel(path); ok {
		if rel == dir || slices.Contains(r.imports, rel) || (test && slices.Contains(r.tests, rel)) {
			return ""
		}
		return fmt.Sprintf("%s (floor %d) has no arrow to %s: name it in the house, going down (DESIGN 1)", dir, r.floor, rel)
	}
	first, _, _ := strings.Cut(path, "/")
	if !strings.Contains(first, ".") {
		return "" // the standard library; the purity tests bound the cores'
	}
	match := func(p string) bool { return matchImport(path, p) }
	if slices.ContainsFunc(r.ext, match) || (test && (slices.ContainsFunc(r.testExt, match) || slices.ContainsFunc(testingExt, match))) {
		return ""
	}
	return fmt.Sprintf("%s may not import %s: outside packages are named per room (DESIGN 1)", dir, path)
}

// matchImport reports whether path is pattern or below it; a pattern ending
// in * matches any path it prefixes.
func matchImport(path, pattern string) bool {
	if prefix, ok := strings.CutSuffix(pattern, "*"); ok {
		return strings.HasPrefix(path, prefix)
	}
	return path == pattern || strings.HasPrefix(path, pattern+"/")
}

// TestHouseArrowsGoDown checks the house itself: every arrow names a room on
// a lower floor, no room is listed twice, and no arrow is listed twice.
func TestHouseArrowsGoDown(t *testing.T) {
	seen := map[string]bool{}
	for _, r := range house {
		if seen[r.dir] {
			t.Errorf("room %s listed twice", r.dir)
		}
		seen[r.dir] = true
		if r.floor == 0 && len(r.imports) > 0 {
			t.Errorf("%s is on the ground floor but imports %v", r.dir, r.imports)
		}
		for _, to := range r.imports {
			target, ok := roomOf(to)
			switch {
			case !ok:
				t.Errorf("%s -> %s: no such room", r.dir, to)
			case target.floor >= r.floor:
				t.Errorf("%s (floor %d) -> %s (floor %d): an arrow goes down only", r.dir, r.floor, to, target.floor)
			}
		}
		for _, to := range r.tests {
			if _, ok := roomOf(to); !ok {
				t.Errorf("%s tests -> %s: no such room", r.dir, to)
			}
			if slices.Contains(r.imports, to) {
				t.Errorf("%s tests -> %s: already an arrow of its code", r.dir, to)
			}
		}
		for _, list := range [][]string{r.imports, r.tests} {
			if s := slices.Sorted(slices.Values(list)); len(slices.Compact(s)) != len(list) {
				t.Errorf("%s: an arrow listed twice in %v", r.dir, list)
			}
		}
	}
}

// TestHouseHoldsEveryPackage checks that every package of the module has a
// room and every room a package: a new package names its floor and arrows.
func TestHouseHoldsEveryPackage(t *testing.T) {
	root := repoRoot(t)
	dirs := packageDirs(t, root, ".")
	if len(dirs) < len(house)/2 {
		t.Fatalf("found %d package directories: the walk is broken", len(dirs))
	}
	for _, d := range dirs {
		if _, ok := roomOf(d); !ok {
			t.Errorf("package %s has no room in the house", d)
		}
	}
	for _, r := range house {
		if !slices.Contains(dirs, r.dir) {
			t.Errorf("room %s: no such package", r.dir)
		}
	}
}

// TestImportArrows checks every import of every Go file of the module,
// tests included, against the house.
func TestImportArrows(t *testing.T) {
	root := repoRoot(t)
	fset := token.NewFileSet()
	checked := 0
	for _, dir := range packageDirs(t, root, ".") {
		names, err := goFiles(filepath.Join(root, filepath.FromSlash(dir)), true)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range names {
			rel := dir + "/" + name
			f, err := parser.ParseFile(fset, rel, readFile(t, filepath.Join(root, filepath.FromSlash(rel))), parser.ImportsOnly)
			if err != nil {
				t.Error(err)
				continue
			}
			checked++
			for _, imp := range f.Imports {
				path, _ := strconv.Unquote(imp.Path.Value)
				if why := importProblem(dir, path, strings.HasSuffix(name, "_test.go")); why != "" {
					t.Errorf("%s:%d: imports %q: %s", rel, fset.Position(imp.Pos()).Line, path, why)
				}
			}
		}
	}
	if checked < 100 {
		t.Fatalf("checked %d Go files: the directory walk is broken", checked)
	}
}

func TestImportProblem(t *testing.T) {
	tests := []struct {
		dir, path string
		test      bool
		allowed   bool
	}{
		{"multicast", modulePath + "/partition", false, true},
		{"multicast/sim", modulePath + "/multicast/flexcast", false, true},
		{"multicast/sim", "github.com/google/go-cmp/cmp", true, true},
		{"multicast/sim", "github.com/google/go-cmp/cmp", false, false},
		{"multicast", modulePath + "/replication", false, false},
		{"multicast", modulePath + "/group", false, false},
		{"multicast/sim", modulePath + "/group", false, false},
		{"multicast/flexcast", modulePath + "/kv", false, false},
		{"multicast/flexcast", modulePath + "/api/apipb", false, false},
		{"multicast/sim", modulePath + "/txn", false, false},
		{"multicast/check", "github.com/hashicorp/raft", true, false},
		{"multicast/check", "github.com/hashicorp/raft-boltdb/v2", false, false},
		{"multicast/channel", "google.golang.org/grpc/codes", false, false},
		{"multicast", modulePath + "/kvstore", false, false}, // no such room
		{"group", modulePath + "/multicast/rawnode", false, true},
		{"group", modulePath + "/executor", false, false},
		{"group", "github.com/cockroachdb/pebble/v2", false, false},
		{"txn", modulePath + "/kv", false, false},
		{"txn", modulePath + "/api/apipb", false, false},
		{"txn", modulePath + "/executor", false, false},
		{"executor", modulePath + "/kv", false, true},
		{"executor", modulePath + "/internal/invariants", false, true},
		{"multicast/channel", modulePath + "/internal/invariants", false, true},
		{"internal/invariants", modulePath + "/partition", false, false},
		{"api/apipb", modulePath + "/txn", false, false},
		{"api", modulePath + "/api/apipb", false, true},
		{"api", modulePath + "/kv", false, false},
		{"txn", modulePath + "/replication", false, false},
		{"partition", modulePath + "/partition", false, true},
		{"partition", modulePath + "/multicast", false, false},
		{"replication", modulePath + "/multicast", false, true},
		{"replication", "github.com/hashicorp/raft", false, true},
		{"kv", "github.com/hashicorp/raft", false, false},
		{"multicastx", modulePath + "/kv", false, false}, // no such room
		{"gtpcc", modulePath + "/server", false, false},
		{"gtpcc/procs", modulePath + "/server", false, false},
		{"gtpcc/procs", modulePath + "/executor", true, true},
		{"gtpcc/procs", modulePath + "/executor", false, false},
		{"gtpcc/bench", modulePath + "/server", false, true},
		{"gtpcc/bench", modulePath + "/replication", false, false},
		{"gtpcc", modulePath + "/cluster", false, false},
		{"gtpcc", modulePath + "/cluster", true, true},
		{"gtpcc/procs", modulePath + "/cluster", false, false},
		{"gtpcc/bench", modulePath + "/cluster", false, true},
		{"server", modulePath + "/cluster", false, false},
		{"server", modulePath + "/cluster", true, false},
		{"replication", modulePath + "/cluster", false, false},
		{"replication/transport", modulePath + "/cluster", false, false},
		{"cluster", modulePath + "/server", false, true},
		{"cluster", modulePath + "/replication", false, true},
		{"client", modulePath + "/cluster", false, false},
		{"client", modulePath + "/cluster", true, true},
		{"client", modulePath + "/kv", false, false},
		{"client", "github.com/cockroachdb/pebble/v2", false, false},
		{"server", modulePath + "/clusterx", false, false}, // a sibling of cluster, not cluster
	}
	for _, tt := range tests {
		why := importProblem(tt.dir, tt.path, tt.test)
		if got := why == ""; got != tt.allowed {
			t.Errorf("%s (test %v) importing %q: allowed = %v (reason %q), want %v", tt.dir, tt.test, tt.path, got, why, tt.allowed)
		}
	}
}
