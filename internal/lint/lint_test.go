package lint

import (
	"bufio"
	"errors"
	"fmt"
	"go/ast"
	"go/build"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const modulePath = "github.com/flexkv/flexkv"

// corePackages are the deterministic state machines of DESIGN 3.1: the
// shared contract, the wire encoding, the reliable channel layer, the three
// protocols, and the group replica's state machine that joins them to the
// log and the executor (DESIGN 1), and the self-checks they all run
// (STYLE 3). Each must exist and hold
// Go files; a missing one fails the test rather than passing it unchecked.
// Any other package under multicast/ that is not a harness is checked too.
var corePackages = []string{
	"multicast",
	"internal/wire",
	"internal/invariants",
	"multicast/channel",
	"multicast/rawnode",
	"group",
	"multicast/flexcast",
	"multicast/skeen",
	"multicast/tree",
}

// harnessPackages are the packages under multicast/ that drive or check the
// cores from outside and may therefore read files, clocks and seeded random
// numbers (multicast/internal holds the test rigs of the layer). Their
// subdirectories are harness code too.
var harnessPackages = []string{"multicast/sim", "multicast/check", "multicast/internal"}

// forbiddenImports are the standard-library packages a core may not import,
// with the reason. An entry ending in "/..." also covers every package below
// it.
//
// reflect is forbidden: reflection iterates maps in Go's random order
// (Value.MapRange, MapKeys) and a core has nothing to inspect that it does not
// know statically; encoding packages that use reflection internally
// (encoding/binary, encoding/json) stay allowed, since they order map keys or
// reject maps. hash/maphash is forbidden because its seeds are random per
// process, so hashes differ between replicas.
var forbiddenImports = []struct{ path, why string }{
	{"time", "reads the clock; time enters a core as a logical tick"},
	{"math/rand", "randomness belongs to the driver"},
	{"math/rand/v2", "randomness belongs to the driver"},
	{"crypto/rand", "randomness belongs to the driver"},
	{"hash/maphash", "random per-process seeds make hashes differ between replicas"},
	{"sync", "a core is single-threaded; its caller serializes Step and Ready"},
	{"sync/atomic", "a core is single-threaded; its caller serializes Step and Ready"},
	{"os", "I/O belongs to the shell"},
	{"os/...", "I/O belongs to the shell"},
	{"net", "I/O belongs to the shell"},
	{"net/...", "I/O belongs to the shell"},
	{"syscall", "I/O belongs to the shell"},
	{"io/fs", "I/O belongs to the shell"},
	{"io/ioutil", "I/O belongs to the shell"},
	{"path/filepath", "file paths are I/O; a core names nothing on disk"},
	{"log", "logging is I/O; a core reports through Ready and metrics"},
	{"log/...", "logging is I/O; a core reports through Ready and metrics"},
	{"plugin", "loads code at run time"},
	{"unsafe", "bypasses the type system; layouts and addresses are no part of a replicated state"},
	{"runtime", "scheduling and memory state differ between replicas"},
	{"runtime/...", "scheduling and memory state differ between replicas"},
	{"reflect", "reflection iterates maps in random order; a core needs none"},
	{"C", "cgo is I/O outside Go's control"},
}

// coreImportProblem returns why a core package may not import path, or "" if
// it may: the standard library minus forbiddenImports, partition, and the
// multicast packages other than the harnesses.
func coreImportProblem(path string) string {
	for _, f := range forbiddenImports {
		if prefix, ok := strings.CutSuffix(f.path, "/..."); ok {
			if strings.HasPrefix(path, prefix+"/") {
				return f.why
			}
		} else if path == f.path {
			return f.why
		}
	}
	if rel, ok := moduleRel(path); ok {
		if rel == "partition" || rel == "internal/wire" || rel == "internal/invariants" || underDir(rel, "group") {
			return ""
		}
		for _, h := range harnessPackages {
			if underDir(rel, h) {
				return "a core may not depend on the harness that tests it"
			}
		}
		if underDir(rel, "multicast") {
			return ""
		}
		return "a core imports only the standard library, partition, internal/wire, internal/invariants, multicast/... and group"
	}
	// The go command's rule: standard-library paths have no dot in their
	// first element.
	first, _, _ := strings.Cut(path, "/")
	if strings.Contains(first, ".") {
		return "a core imports only the standard library, partition and multicast/..."
	}
	return ""
}

// moduleRel returns path relative to the module root, if it is in the module.
func moduleRel(path string) (string, bool) {
	if path == modulePath {
		return ".", true
	}
	return strings.CutPrefix(path, modulePath+"/")
}

// underDir reports whether the slash-separated path rel is dir or below it.
func underDir(rel, dir string) bool {
	return rel == dir || strings.HasPrefix(rel, dir+"/")
}

// A finding is one broken rule at one place.
type finding struct {
	pos  token.Position
	rule string
	msg  string
}

func (f finding) String() string {
	return fmt.Sprintf("%s:%d: %s: %s", f.pos.Filename, f.pos.Line, f.rule, f.msg)
}

// unorderedDirective marks a range over a map (or a maps iterator) whose
// effect cannot depend on the iteration order; it must give the reason and
// sit on the loop's line or the line above:
//
//	//flexkv:unordered only deletes expired entries
//	for id, e := range c.pending {
const unorderedDirective = "//flexkv:unordered"

// unorderedLines returns the lines of f that carry an unordered directive
// with a reason.
func unorderedLines(fset *token.FileSet, f *ast.File) map[int]bool {
	lines := make(map[int]bool)
	for _, cg := range f.Comments {
		for _, c := range cg.List {
			rest, ok := strings.CutPrefix(c.Text, unorderedDirective)
			if ok && strings.TrimSpace(rest) != "" && (rest[0] == ' ' || rest[0] == '\t') {
				lines[fset.Position(c.Pos()).Line] = true
			}
		}
	}
	return lines
}

// checkCoreFile applies the purity rules of DESIGN 3.1 to one non-test file
// of a core package. info may lack types where the package did not type-check;
// the rules that need types then see less, and the rest still apply.
func checkCoreFile(fset *token.FileSet, f *ast.File, info *types.Info) []finding {
	var out []finding
	report := func(pos token.Pos, rule, format string, args ...any) {
		out = append(out, finding{pos: fset.Position(pos), rule: rule, msg: fmt.Sprintf(format, args...)})
	}
	for _, imp := range f.Imports {
		path, err := strconv.Unquote(imp.Path.Value)
		if err != nil {
			report(imp.Pos(), "import", "malformed import path %s", imp.Path.Value)
			continue
		}
		if why := coreImportProblem(path); why != "" {
			report(imp.Pos(), "import", "%q: %s (DESIGN 3.1)", path, why)
		}
	}
	unordered := unorderedLines(fset, f)
	marked := func(pos token.Pos) bool {
		line := fset.Position(pos).Line
		return unordered[line] || unordered[line-1]
	}
	var stack []ast.Node
	ast.Inspect(f, func(n ast.Node) bool {
		if n == nil {
			stack = stack[:len(stack)-1]
			return true
		}
		var parent ast.Node
		if len(stack) > 0 {
			parent = stack[len(stack)-1]
		}
		stack = append(stack, n)
		switch n := n.(type) {
		case *ast.GoStmt:
			report(n.Pos(), "go", "go statement: a core starts no goroutine (DESIGN 3.1)")
		case *ast.SelectStmt:
			report(n.Pos(), "select", "select statement: a core never waits on channels (DESIGN 3.1)")
		case *ast.SendStmt:
			report(n.Pos(), "chan", "channel send: a core hands its effects out through Ready (DESIGN 3.1)")
		case *ast.UnaryExpr:
			if n.Op == token.ARROW {
				report(n.Pos(), "chan", "channel receive: a core takes its inputs through Step (DESIGN 3.1)")
			}
		case *ast.RangeStmt:
			t := info.TypeOf(n.X)
			if t == nil {
				break
			}
			switch t.Underlying().(type) {
			case *types.Map:
				if !marked(n.Pos()) {
					report(n.Pos(), "maprange", "range over a map (%s): Go's map order is random and must not reach state or output; "+
						"range over sorted keys, or mark the loop %s <why the order cannot matter>", t, unorderedDirective)
				}
			case *types.Chan:
				report(n.Pos(), "chan", "range over a channel: a core takes its inputs through Step (DESIGN 3.1)")
			}
		case *ast.CallExpr:
			switch callee(info, n) {
			case "print", "println":
				report(n.Pos(), "print", "builtin %s writes to standard error: a core does no I/O", callee(info, n))
			case "fmt.Print", "fmt.Printf", "fmt.Println":
				report(n.Pos(), "print", "%s writes to standard output: a core does no I/O", callee(info, n))
			case "maps.Keys", "maps.Values", "maps.All":
				if !orderedConsumer(info, parent, n) && !marked(n.Pos()) {
					report(n.Pos(), "maporder", "%s yields in Go's random map order; pass it straight to slices.Sorted "+
						"(or maps.Collect, maps.Insert), or mark the line %s <why the order cannot matter>", callee(info, n), unorderedDirective)
				}
			}
		}
		return true
	})
	return out
}

// callee names the function that call calls: "pkgpath.Name" for a
// package-level function, the bare name for a builtin, "" otherwise.
func callee(info *types.Info, call *ast.CallExpr) string {
	fun := ast.Unparen(call.Fun)
	switch fn := fun.(type) { // an explicit instantiation: maps.Keys[M]
	case *ast.IndexExpr:
		fun = fn.X
	case *ast.IndexListExpr:
		fun = fn.X
	}
	var id *ast.Ident
	switch fn := fun.(type) {
	case *ast.Ident:
		id = fn
	case *ast.SelectorExpr:
		id = fn.Sel
	default:
		return ""
	}
	switch obj := info.Uses[id].(type) {
	case *types.Builtin:
		return obj.Name()
	case *types.Func:
		if obj.Pkg() == nil {
			return ""
		}
		if sig, ok := obj.Type().(*types.Signature); ok && sig.Recv() != nil {
			return ""
		}
		return obj.Pkg().Path() + "." + obj.Name()
	}
	return ""
}

// orderedConsumer reports whether inner is an argument of a call that does
// not let the iteration order through: sorting it, or collecting it into a
// map.
func orderedConsumer(info *types.Info, parent ast.Node, inner *ast.CallExpr) bool {
	outer, ok := parent.(*ast.CallExpr)
	if !ok || !slices.Contains(outer.Args, ast.Expr(inner)) {
		return false
	}
	switch callee(info, outer) {
	case "slices.Sorted", "slices.SortedFunc", "slices.SortedStableFunc", "maps.Collect", "maps.Insert":
		return true
	}
	return false
}

// A moduleImporter type-checks the module's own packages from source and the
// standard library with go/importer's source importer: no tool, no network
// and no build cache are involved.
type moduleImporter struct {
	root string
	fset *token.FileSet
	std  types.ImporterFrom
	pkgs map[string]*types.Package // nil while being checked (import cycle guard)
}

func newModuleImporter(root string, fset *token.FileSet) *moduleImporter {
	return &moduleImporter{
		root: root,
		fset: fset,
		std:  importer.ForCompiler(fset, "source", nil).(types.ImporterFrom),
		pkgs: make(map[string]*types.Package),
	}
}

func (m *moduleImporter) Import(path string) (*types.Package, error) {
	return m.ImportFrom(path, m.root, 0)
}

func (m *moduleImporter) ImportFrom(path, dir string, mode types.ImportMode) (*types.Package, error) {
	rel, ok := moduleRel(path)
	if !ok {
		if first, _, _ := strings.Cut(path, "/"); strings.Contains(first, ".") {
			// Outside the module and the standard library: never allowed in
			// a core, so not worth resolving (it would run the go command).
			return nil, fmt.Errorf("lint: %s is outside the module and the standard library", path)
		}
		return m.std.ImportFrom(path, dir, mode)
	}
	if pkg, seen := m.pkgs[path]; seen {
		if pkg == nil {
			return nil, fmt.Errorf("lint: import cycle through %s", path)
		}
		return pkg, nil
	}
	m.pkgs[path] = nil
	files, err := parsePackage(m.fset, m.root, rel)
	if err == nil {
		files, err = matching(&build.Default, m.fset, m.root, files)
	}
	if err != nil {
		delete(m.pkgs, path)
		return nil, err
	}
	pkg, _ := m.check(path, files, nil) // errors show up where the package itself is checked
	m.pkgs[path] = pkg
	return pkg, nil
}

// shared is one importer for every test of the package: type-checking the
// standard library from source takes about a second, so it is done once.
// The tests of this package do not run in parallel.
var shared struct {
	fset *token.FileSet
	imp  *moduleImporter
}

// sharedImporter returns the package's importer and its file set.
func sharedImporter(t *testing.T) (*token.FileSet, *moduleImporter) {
	t.Helper()
	if shared.imp == nil {
		shared.fset = token.NewFileSet()
		shared.imp = newModuleImporter(repoRoot(t), shared.fset)
	}
	return shared.fset, shared.imp
}

// check type-checks files as package path, collecting every error instead
// of stopping at the first.
func (m *moduleImporter) check(path string, files []*ast.File, info *types.Info) (*types.Package, []error) {
	var errs []error
	conf := types.Config{Importer: m, Error: func(err error) { errs = append(errs, err) }}
	pkg, _ := conf.Check(path, m.fset, files, info)
	return pkg, errs
}

// parsePackage parses the non-test Go files of the package in directory rel
// (slash-separated, relative to root). Positions name files relative to root.
func parsePackage(fset *token.FileSet, root, rel string) ([]*ast.File, error) {
	names, err := goFiles(filepath.Join(root, filepath.FromSlash(rel)), false)
	if err != nil {
		return nil, err
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("lint: %s: no non-test Go files", rel)
	}
	var files []*ast.File
	for _, name := range names {
		src, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(rel), name))
		if err != nil {
			return nil, fmt.Errorf("lint: %w", err)
		}
		f, err := parser.ParseFile(fset, rel+"/"+name, src, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			return nil, fmt.Errorf("lint: %w", err)
		}
		files = append(files, f)
	}
	return files, nil
}

// buildContexts are the configurations a core is type-checked in: the default
// one, and the one with the invariants tag that turns on expensive
// self-checks (STYLE 3), whose files may replace default ones.
func buildContexts() []*build.Context {
	def, inv := build.Default, build.Default
	inv.BuildTags = append(slices.Clone(inv.BuildTags), "invariants")
	return []*build.Context{&def, &inv}
}

// matching returns the files (parsed by parsePackage) that ctx builds.
func matching(ctx *build.Context, fset *token.FileSet, root string, files []*ast.File) ([]*ast.File, error) {
	var out []*ast.File
	for _, f := range files {
		name := filepath.FromSlash(fset.Position(f.Package).Filename)
		ok, err := ctx.MatchFile(filepath.Join(root, filepath.Dir(name)), filepath.Base(name))
		if err != nil {
			return nil, fmt.Errorf("lint: %w", err)
		}
		if ok {
			out = append(out, f)
		}
	}
	return out, nil
}

// goFiles lists the Go files of dir in name order, with or without tests.
func goFiles(dir string, withTests bool) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("lint: %w", err)
	}
	var names []string
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") {
			continue
		}
		if !withTests && strings.HasSuffix(name, "_test.go") {
			continue
		}
		names = append(names, name)
	}
	return names, nil
}

// repoRoot finds the module root above the test's directory and checks that
// it is FlexKV's.
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		gomod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil {
			if !strings.Contains(string(gomod), "module "+modulePath+"\n") {
				t.Fatalf("%s/go.mod is not module %s", dir, modulePath)
			}
			return dir
		}
		if !errors.Is(err, fs.ErrNotExist) {
			t.Fatal(err)
		}
		up := filepath.Dir(dir)
		if up == dir {
			t.Fatal("no go.mod above the test directory")
		}
		dir = up
	}
}

// packageDirs returns the slash-separated directories under root/rel (rel
// included) that hold Go files, skipping testdata and hidden directories,
// and nested modules (a directory below rel with a go.mod of its own, such
// as contrib/ycsb): their packages are not the module's, and neither the
// house nor its arrows hold them (DESIGN 1). nestedModules lists them.
func packageDirs(t *testing.T, root, rel string) []string {
	t.Helper()
	var dirs []string
	base := filepath.Join(root, filepath.FromSlash(rel))
	err := filepath.WalkDir(base, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		name := d.Name()
		if path != base && (name == "testdata" || name == "vendor" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
			return filepath.SkipDir
		}
		if path != base && isModuleRoot(path) {
			return filepath.SkipDir
		}
		names, err := goFiles(path, true)
		if err != nil {
			return err
		}
		if len(names) > 0 {
			r, err := filepath.Rel(root, path)
			if err != nil {
				return err
			}
			dirs = append(dirs, filepath.ToSlash(r))
		}
		return nil
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	return dirs
}

// coreDirs returns the required core packages and any other non-harness
// package found under multicast/, in a stable order.
func coreDirs(t *testing.T, root string) []string {
	dirs := slices.Clone(corePackages)
	for _, d := range packageDirs(t, root, "multicast") {
		harness := slices.ContainsFunc(harnessPackages, func(h string) bool { return underDir(d, h) })
		if !harness && !slices.Contains(dirs, d) {
			dirs = append(dirs, d)
		}
	}
	return dirs
}

// TestCorePackagesArePure checks DESIGN 3.1 on the non-test files of every
// core package: allowed imports only, no go or select statement, no channel
// operation, no printing, and no map iteration order that can reach state or
// output. Each file is type-checked with the others of its build
// configuration (default, invariants); a file in neither (another OS, an
// ignored generator) still gets the rules that need no types.
func TestCorePackagesArePure(t *testing.T) {
	root := repoRoot(t)
	fset, imp := sharedImporter(t)
	for _, rel := range coreDirs(t, root) {
		t.Run(rel, func(t *testing.T) {
			checkPackage(t, fset, imp, root, rel, "every core package must exist and hold Go files (DESIGN 3.1)", checkCoreFile)
		})
	}
}

// checkPackage applies check to every non-test file of package rel, each
// type-checked with the others of its build configuration (default,
// invariants); a file in neither (another OS, an ignored generator) still
// gets the rules that need no types. Each finding is reported once.
func checkPackage(t *testing.T, fset *token.FileSet, imp *moduleImporter, root, rel, missing string, check func(*token.FileSet, *ast.File, *types.Info) []finding) {
	t.Helper()
	files, err := parsePackage(fset, root, rel)
	if err != nil {
		t.Fatalf("%v: %s", err, missing)
	}
	reported := make(map[string]bool)
	report := func(fds []finding) {
		for _, fd := range fds {
			if s := fd.String(); !reported[s] {
				reported[s] = true
				t.Error(s)
			}
		}
	}
	typed := make(map[*ast.File]bool)
	for _, ctx := range buildContexts() {
		built, err := matching(ctx, fset, root, files)
		if err != nil {
			t.Fatal(err)
		}
		if len(built) == 0 {
			continue
		}
		info := &types.Info{Types: make(map[ast.Expr]types.TypeAndValue), Uses: make(map[*ast.Ident]types.Object)}
		_, errs := imp.check(modulePath+"/"+rel, built, info)
		for _, err := range errs {
			// The build reports these; the map rules just see less.
			t.Logf("type-checking %s (tags %v): %v", rel, ctx.BuildTags, err)
		}
		for _, f := range built {
			typed[f] = true
			report(check(fset, f, info))
		}
	}
	for _, f := range files {
		if !typed[f] {
			report(check(fset, f, &types.Info{}))
		}
	}
}

// A replicaPackage is deterministic replica-side code outside the ordering
// layer, which every replica of a group runs on the same inputs in the same
// order and which must write the same bytes (DESIGN 1, 6, 9): it gets the
// cores' purity rules with imports of its own (replicaImportProblem).
type replicaPackage struct {
	dir string
	// imports are the module packages it may import.
	imports []string
	// std are the standard-library packages that forbiddenImports names
	// and it may import all the same, each with the reason.
	std map[string]string
}

// replicaPackages are the replica-side packages: the gTPC-C stored
// procedures, and the executor that runs them and the transactions over
// kv (DESIGN 1: the executor has no clock, randomness, goroutines or I/O,
// like the cores). Each must exist and hold Go files.
var replicaPackages = []replicaPackage{
	{dir: "gtpcc/procs", imports: []string{"partition", "txn"}},
	{dir: "executor", imports: []string{"group", "internal/invariants", "internal/wire", "kv", "multicast", "multicast/rawnode", "partition", "txn"},
		std: map[string]string{
			// Execute runs single-threaded in log order; its locks only let
			// the shell read results, session states and stats meanwhile, and
			// decide nothing that reaches the state.
			"sync": "the executor's locks serialize the shell's reads with Execute",
		}},
}

// replicaImportProblem returns why replica-side package p may not import
// path, or "" if it may: the standard library minus forbiddenImports (less
// those p.std names), and p.imports.
func replicaImportProblem(p replicaPackage, path string) string {
	if rel, ok := moduleRel(path); ok {
		if slices.Contains(p.imports, rel) {
			return ""
		}
		return fmt.Sprintf("replica-side code of %s imports only the standard library and %s", p.dir, strings.Join(p.imports, ", "))
	}
	if _, ok := p.std[path]; ok {
		return ""
	}
	return coreImportProblem(path)
}

// checkReplicaFile returns the check of one non-test file of replica-side
// package p: the purity rules of a core, with replicaImportProblem for its
// imports.
func checkReplicaFile(p replicaPackage) func(*token.FileSet, *ast.File, *types.Info) []finding {
	return func(fset *token.FileSet, f *ast.File, info *types.Info) []finding {
		var out []finding
		for _, fd := range checkCoreFile(fset, f, info) {
			if fd.rule != "import" {
				out = append(out, fd)
			}
		}
		for _, imp := range f.Imports {
			path, err := strconv.Unquote(imp.Path.Value)
			if err != nil {
				out = append(out, finding{pos: fset.Position(imp.Pos()), rule: "import", msg: fmt.Sprintf("malformed import path %s", imp.Path.Value)})
				continue
			}
			if why := replicaImportProblem(p, path); why != "" {
				out = append(out, finding{pos: fset.Position(imp.Pos()), rule: "import", msg: fmt.Sprintf("%q: %s (DESIGN 1)", path, why)})
			}
		}
		return out
	}
}

// TestReplicaPackagesArePure checks the non-test files of every
// replica-side package as TestCorePackagesArePure checks a core's, in each
// build configuration.
func TestReplicaPackagesArePure(t *testing.T) {
	root := repoRoot(t)
	fset, imp := sharedImporter(t)
	for _, p := range replicaPackages {
		t.Run(p.dir, func(t *testing.T) {
			checkPackage(t, fset, imp, root, p.dir, "every replica-side package must exist and hold Go files", checkReplicaFile(p))
		})
	}
}

// replicaPackageOf returns the replica-side package dir.
func replicaPackageOf(t *testing.T, dir string) replicaPackage {
	t.Helper()
	i := slices.IndexFunc(replicaPackages, func(p replicaPackage) bool { return p.dir == dir })
	if i < 0 {
		t.Fatalf("%s is not a replica-side package", dir)
	}
	return replicaPackages[i]
}

func TestReplicaImportProblem(t *testing.T) {
	for _, tt := range []struct {
		dir, path string
		allowed   bool
	}{
		{"gtpcc/procs", "fmt", true},
		{"gtpcc/procs", "encoding/json", true},
		{"gtpcc/procs", "hash/fnv", true},
		{"gtpcc/procs", "math/bits", true},
		{"gtpcc/procs", modulePath + "/partition", true},
		{"gtpcc/procs", modulePath + "/txn", true},
		{"gtpcc/procs", "math/rand/v2", false},
		{"gtpcc/procs", "time", false},
		{"gtpcc/procs", "sync", false},
		{"gtpcc/procs", "os", false},
		{"gtpcc/procs", "net/http", false},
		{"gtpcc/procs", modulePath + "/executor", false},
		{"gtpcc/procs", modulePath + "/multicast", false},
		{"gtpcc/procs", modulePath + "/client", false},
		{"gtpcc/procs", modulePath + "/kv", false},
		{"gtpcc/procs", modulePath + "/gtpcc", false},
		{"gtpcc/procs", "github.com/google/go-cmp/cmp", false},
		{"executor", "fmt", true},
		{"executor", "container/list", true},
		{"executor", "hash/fnv", true},
		{"executor", "io", true},
		{"executor", "sync", true},
		{"executor", modulePath + "/kv", true},
		{"executor", modulePath + "/txn", true},
		{"executor", modulePath + "/group", true},
		{"executor", modulePath + "/multicast/rawnode", true},
		{"executor", modulePath + "/internal/wire", true},
		{"executor", modulePath + "/internal/invariants", true},
		{"executor", "sync/atomic", false},
		{"executor", "time", false},
		{"executor", "math/rand/v2", false},
		{"executor", "os", false},
		{"executor", "log/slog", false},
		{"executor", "runtime", false},
		{"executor", modulePath + "/replication", false},
		{"executor", modulePath + "/server", false},
		{"executor", modulePath + "/multicast/channel", false},
		{"executor", modulePath + "/gtpcc/procs", false},
		{"executor", "github.com/cockroachdb/pebble/v2", false},
		{"executor", "github.com/hashicorp/raft", false},
	} {
		why := replicaImportProblem(replicaPackageOf(t, tt.dir), tt.path)
		if got := why == ""; got != tt.allowed {
			t.Errorf("replica %s import %q: allowed = %v (reason %q), want %v", tt.dir, tt.path, got, why, tt.allowed)
		}
	}
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// checkSource parses and type-checks one in-memory file and applies the core
// rules to it. It also returns the type-checking errors.
func checkSource(t *testing.T, name, src string) ([]finding, []error) {
	t.Helper()
	fset, imp := sharedImporter(t)
	f, err := parser.ParseFile(fset, name, src, parser.ParseComments|parser.SkipObjectResolution)
	if err != nil {
		t.Fatalf("parse %s: %v", name, err)
	}
	info := &types.Info{Types: make(map[ast.Expr]types.TypeAndValue), Uses: make(map[*ast.Ident]types.Object)}
	_, errs := imp.check("example.com/"+strings.TrimSuffix(name, ".go"), []*ast.File{f}, info)
	return checkCoreFile(fset, f, info), errs
}

// wantFindings reads `// want: rule` comments: the findings expected on
// each line, as "line:rule" strings (the line padded so that they sort by
// line), sorted.
func wantFindings(src string) []string {
	var want []string
	sc := bufio.NewScanner(strings.NewReader(src))
	for line := 1; sc.Scan(); line++ {
		if _, rules, ok := strings.Cut(sc.Text(), "// want: "); ok {
			for _, r := range strings.Fields(rules) {
				want = append(want, fmt.Sprintf("%3d:%s", line, r))
			}
		}
	}
	slices.Sort(want)
	return want
}

func gotFindings(fs []finding) []string {
	var got []string
	for _, f := range fs {
		got = append(got, fmt.Sprintf("%3d:%s", f.pos.Line, f.rule))
	}
	slices.Sort(got)
	return got
}

const impureSource = `package impure

import (
	"fmt"
	"maps"
	"slices"
	"sync" // want: import
	"time" // want: import

	_ "github.com/flexkv/flexkv/multicast/sim" // want: import
	_ "github.com/google/go-cmp/cmp" // want: import
)

var mu sync.Mutex

func f(m map[string]int, c chan int) []string {
	go func() {}() // want: go
	select {} // want: select
	var out []string
	for k := range m { // want: maprange
		out = append(out, k)
	}
	//flexkv:unordered
	for k := range m { // want: maprange
		out = append(out, k)
	}
	for k := range maps.Keys(m) { // want: maporder
		out = append(out, k)
	}
	out = slices.Collect(maps.Keys(m)) // want: maporder
	println("x") // want: print
	fmt.Println(time.Now()) // want: print
	c <- 1 // want: chan
	<-c // want: chan
	for range c { // want: chan
	}
	for k := range maps.Keys[map[string]int](m) { // want: maporder
		out = append(out, k)
	}
	return out
}

type byName map[string]int

func g(m byName) (n int) {
	for _, v := range m { // want: maprange
		n += v
	}
	return n
}
`

// TestCheckerFindsViolations feeds the checker a file that breaks every rule
// and asserts that each break is found where it is, so that the purity test
// cannot pass by finding nothing.
func TestCheckerFindsViolations(t *testing.T) {
	findings, errs := checkSource(t, "impure.go", impureSource)
	// Only the two packages outside the standard library may fail to
	// resolve: every other identifier must have its type, or the map rules
	// would be checked on nothing.
	for _, err := range errs {
		if msg := err.Error(); !strings.Contains(msg, "multicast/sim") && !strings.Contains(msg, "go-cmp") {
			t.Errorf("type-check impure.go: %v", err)
		}
	}
	got, want := gotFindings(findings), wantFindings(impureSource)
	if !slices.Equal(got, want) {
		t.Errorf("findings (line:rule)\n got  %v\n want %v", got, want)
		for _, fd := range findings {
			t.Log(fd)
		}
	}
	for _, fd := range findings {
		if fd.pos.Filename != "impure.go" || fd.pos.Line == 0 || fd.msg == "" {
			t.Errorf("finding %q does not name file:line and the rule", fd)
		}
	}
}

const pureSource = `package pure

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/flexkv/flexkv/partition"
)

type queue struct{ ids []int }

func f(m map[string]int, s partition.GroupSet, q queue) (string, error) {
	total := 0
	for _, k := range slices.Sorted(maps.Keys(m)) {
		total += m[k]
	}
	//flexkv:unordered a sum does not depend on the order of its terms
	for _, v := range m {
		total += v
	}
	for k := range m { //flexkv:unordered deleting every match is order-free
		if k == "" {
			delete(m, k)
		}
	}
	c := maps.Collect(maps.All[map[string]int](m))
	maps.Insert(c, maps.All(m))
	for _, g := range s.Slice() {
		total += int(g)
	}
	for i := range 3 {
		total += i + q.ids[i]
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d", total)
	if total < 0 {
		return "", errors.New("pure: negative")
	}
	return fmt.Sprint(b.String(), len(c)), nil
}
`

// TestCheckerAcceptsPureCode guards against a checker that flags too much:
// sorted map keys, marked loops, ranges over slices and integers, formatting
// into a builder and the partition package are all allowed.
func TestCheckerAcceptsPureCode(t *testing.T) {
	findings, errs := checkSource(t, "pure.go", pureSource)
	for _, err := range errs {
		t.Errorf("type-check pure.go: %v", err)
	}
	for _, fd := range findings {
		t.Errorf("unexpected finding %s", fd)
	}
}

func TestCoreImportProblem(t *testing.T) {
	tests := []struct {
		path    string
		allowed bool
	}{
		{"fmt", true},
		{"encoding/binary", true},
		{"container/heap", true},
		{"slices", true},
		{"maps", true},
		{"math", true},
		{"math/bits", true},
		{"crypto/sha256", true},
		{modulePath + "/partition", true},
		{modulePath + "/multicast", true},
		{modulePath + "/internal/wire", true},
		{modulePath + "/internal/invariants", true},
		{modulePath + "/internal/testaddr", false},
		{modulePath + "/multicast/flexcast", true},
		{"time", false},
		{"math/rand", false},
		{"math/rand/v2", false},
		{"crypto/rand", false},
		{"hash/maphash", false},
		{"sync", false},
		{"sync/atomic", false},
		{"os", false},
		{"os/exec", false},
		{"net", false},
		{"net/http", false},
		{"net/netip", false},
		{"syscall", false},
		{"io/fs", false},
		{"path/filepath", false},
		{"log", false},
		{"log/slog", false},
		{"unsafe", false},
		{"runtime", false},
		{"runtime/debug", false},
		{"reflect", false},
		{"C", false},
		{modulePath + "/multicast/sim", false},
		{modulePath + "/multicast/check", false},
		{modulePath + "/multicast/sim/internal/x", false},
		{modulePath + "/kv", false},
		{modulePath + "/configs", false},
		{modulePath, false},
		{"github.com/hashicorp/raft", false},
		{"google.golang.org/grpc", false},
		{"github.com/google/go-cmp/cmp", false},
	}
	for _, tt := range tests {
		why := coreImportProblem(tt.path)
		if got := why == ""; got != tt.allowed {
			t.Errorf("core import %q: allowed = %v (reason %q), want %v", tt.path, got, why, tt.allowed)
		}
	}
}

// isModuleRoot reports whether dir holds a go.mod.
func isModuleRoot(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, "go.mod"))
	return err == nil
}

// nestedModules returns the slash-separated directories below root that
// hold a module of their own (contrib/ycsb), skipping hidden directories
// and testdata, as packageDirs does.
func nestedModules(t *testing.T, root string) []string {
	t.Helper()
	var mods []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() || path == root {
			return nil
		}
		name := d.Name()
		if name == "testdata" || name == "vendor" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") {
			return filepath.SkipDir
		}
		if isModuleRoot(path) {
			r, err := filepath.Rel(root, path)
			if err != nil {
				return err
			}
			mods = append(mods, filepath.ToSlash(r))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return mods
}
