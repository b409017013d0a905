package lint

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// funcLinesMax bounds a function, from its func line to its closing brace,
// tests included: a longer one is split along its seams, and a test's table
// of cases stands beside it as data.
const funcLinesMax = 100

// longFuncs returns, for one parsed file, every function longer than
// lines (linesMax) as "file:line name (n lines)".
func longFuncs(fset *token.FileSet, f *ast.File, linesMax int) []string {
	var out []string
	for _, d := range f.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok || fd.Body == nil {
			continue
		}
		start, end := fset.Position(fd.Pos()), fset.Position(fd.End())
		if n := end.Line - start.Line + 1; n > linesMax {
			out = append(out, fmt.Sprintf("%s:%d %s (%d lines)", start.Filename, start.Line, fd.Name.Name, n))
		}
	}
	return out
}

// generatedFile reports whether a Go file of the module is generated
// (protoc-gen-go, protoc-gen-go-grpc, protoc-gen-grpc-gateway), by its
// name: its code is the generator's, not the module's to shape.
func generatedFile(name string) bool {
	return strings.HasSuffix(name, ".pb.go") || strings.HasSuffix(name, ".pb.gw.go")
}

// TestNoLongFunctions checks every hand-written Go file of the module, and
// of the modules nested in its tree (contrib/ycsb), which follow the same
// habits though the house does not hold them.
func TestNoLongFunctions(t *testing.T) {
	root := repoRoot(t)
	fset := token.NewFileSet()
	checked := 0
	var dirs []string
	for _, m := range append([]string{"."}, nestedModules(t, root)...) {
		dirs = append(dirs, packageDirs(t, root, m)...)
	}
	for _, dir := range dirs {
		names, err := goFiles(filepath.Join(root, filepath.FromSlash(dir)), true)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range names {
			if generatedFile(name) {
				continue
			}
			rel := dir + "/" + name
			f, err := parser.ParseFile(fset, rel, readFile(t, filepath.Join(root, filepath.FromSlash(rel))), parser.SkipObjectResolution)
			if err != nil {
				t.Error(err)
				continue
			}
			checked++
			for _, long := range longFuncs(fset, f, funcLinesMax) {
				t.Errorf("%s: over %d lines: split it along its seams", long, funcLinesMax)
			}
		}
	}
	if checked < 100 {
		t.Fatalf("checked %d Go files: the directory walk is broken", checked)
	}
}

func TestLongFuncsFindsOne(t *testing.T) {
	var b strings.Builder
	b.WriteString("package p\n\nfunc short() {}\n\nfunc long() {\n")
	for range 5 {
		b.WriteString("\t_ = 1\n")
	}
	b.WriteString("}\n")
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "p.go", b.String(), 0)
	if err != nil {
		t.Fatal(err)
	}
	got := longFuncs(fset, f, 6)
	if len(got) != 1 || got[0] != "p.go:5 long (7 lines)" {
		t.Errorf("longFuncs = %q, want the one function of 7 lines", got)
	}
	if got := longFuncs(fset, f, 7); len(got) != 0 {
		t.Errorf("longFuncs at its length = %q, want none", got)
	}
}
