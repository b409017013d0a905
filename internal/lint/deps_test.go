package lint

import (
	"go/build"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// serverOnly are the import paths a program that only talks to FlexKV must
// not link (DESIGN 1): the executor, the store and its engine, raft and the
// replication shell, the server and the in-process clusters above it. Each
// entry covers what is below it; the client API's generated code is
// api/apipb, outside all of them.
var serverOnly = []string{
	modulePath + "/kv",
	modulePath + "/executor",
	modulePath + "/replication",
	modulePath + "/server",
	modulePath + "/cluster",
	"github.com/cockroachdb/pebble",
	"github.com/cockroachdb/pebble/v2",
	"github.com/hashicorp/raft",
}

// linksServerCode returns the entry of serverOnly that dep falls under, or "".
func linksServerCode(dep string) string {
	for _, p := range serverOnly {
		if dep == p || strings.HasPrefix(dep, p+"/") || strings.HasPrefix(dep, p+"-") {
			return p
		}
	}
	return ""
}

func goTool() string {
	if p := filepath.Join(build.Default.GOROOT, "bin", "go"); fileExists(p) {
		return p
	}
	return "go"
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// TestClientLinksNoServerCode checks, transitively, that the client library
// and what it is built from link no storage engine, raft or server code: a
// Go program that only talks to FlexKV must not (DESIGN 1).
func TestClientLinksNoServerCode(t *testing.T) {
	root := repoRoot(t)
	for _, pkg := range []string{"client", "api", "txn", "api/apipb", "partition", "certs"} {
		t.Run(pkg, func(t *testing.T) {
			cmd := exec.Command(goTool(), "list", "-deps", modulePath+"/"+pkg)
			cmd.Dir = root
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("go list -deps %s: %v", pkg, err)
			}
			deps := strings.Fields(string(out))
			if !slices.Contains(deps, modulePath+"/"+pkg) {
				t.Fatalf("go list -deps %s does not list the package itself: %q", pkg, out)
			}
			for _, d := range deps {
				if p := linksServerCode(d); p != "" {
					t.Errorf("%s links %s (under %s): the client side reaches no server code (DESIGN 1)", pkg, d, p)
				}
			}
		})
	}
}

func TestLinksServerCode(t *testing.T) {
	for _, tc := range []struct {
		dep  string
		want bool
	}{
		{modulePath + "/kv", true},
		{modulePath + "/api/apipb", false},
		{modulePath + "/txn", false},
		{modulePath + "/executor", true},
		{modulePath + "/replication/raftstore", true},
		{modulePath + "/server", true},
		{modulePath + "/cluster", true},
		{"github.com/cockroachdb/pebble/v2/vfs", true},
		{"github.com/hashicorp/raft", true},
		{"github.com/hashicorp/raft-boltdb/v2", true},
		{"google.golang.org/grpc", false},
		{modulePath + "/kvstore", false},
	} {
		if got := linksServerCode(tc.dep) != ""; got != tc.want {
			t.Errorf("linksServerCode(%q) = %v, want %v", tc.dep, got, tc.want)
		}
	}
}

// TestRaftOnlyInReplication checks that no package but replication (and
// those below it) imports hashicorp/raft: the rest of the tree reaches raft
// through the shell's own types (DESIGN 1).
func TestRaftOnlyInReplication(t *testing.T) {
	root := repoRoot(t)
	fset := token.NewFileSet()
	checked := 0
	for _, dir := range packageDirs(t, root, ".") {
		if underDir(dir, "replication") {
			continue
		}
		names, err := goFiles(filepath.Join(root, filepath.FromSlash(dir)), true)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range names {
			rel := filepath.ToSlash(filepath.Join(dir, name))
			f, err := parser.ParseFile(fset, rel, readFile(t, filepath.Join(root, filepath.FromSlash(rel))), parser.ImportsOnly)
			if err != nil {
				t.Error(err)
				continue
			}
			checked++
			for _, imp := range f.Imports {
				path, _ := strconv.Unquote(imp.Path.Value)
				if matchImport(path, "github.com/hashicorp/raft*") {
					t.Errorf("%s:%d: imports %q: only replication imports raft (DESIGN 1)", rel, fset.Position(imp.Pos()).Line, path)
				}
			}
		}
	}
	if checked == 0 {
		t.Fatal("no Go file checked: the directory walk is broken")
	}
}

// TestNoPackageLinksOneAbove checks with the go command what the house
// claims: every module package that a package links, transitively (tests
// aside), stands on a lower floor than the package itself.
func TestNoPackageLinksOneAbove(t *testing.T) {
	root := repoRoot(t)
	cmd := exec.Command(goTool(), "list", "-deps", "-f", `{{.ImportPath}}{{range .Deps}} {{.}}{{end}}`, "./...")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps ./...: %v", err)
	}
	checked := 0
	for line := range strings.Lines(string(out)) {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		dir, ok := moduleRel(fields[0])
		if !ok {
			continue // the standard library and outside modules
		}
		r, ok := roomOf(dir)
		if !ok {
			t.Errorf("%s: no room in the house", dir)
			continue
		}
		checked++
		for _, dep := range fields[1:] {
			d, ok := moduleRel(dep)
			if !ok {
				continue
			}
			if dr, ok := roomOf(d); ok && dr.floor >= r.floor {
				t.Errorf("%s (floor %d) links %s (floor %d): one at or above it", dir, r.floor, d, dr.floor)
			}
		}
	}
	if checked < len(house)/2 {
		t.Fatalf("go list named %d module packages: the listing is broken", checked)
	}
}
