package lint

import (
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// The project carries its own documents (DESIGN 12): the code cites the
// design by section ("DESIGN 3.2", "DESIGN 2, 6, 7", "DESIGN sections 1 and
// 5"), and every such citation must name a heading of docs/design.md, so
// that a reader who follows one lands on the argument it points to. The
// README and the documents under docs/ link each other; every relative link
// must reach a file, and a heading when it names one.

// designPath is the design document, relative to the module root.
const designPath = "docs/design.md"

// docCitation is one citation of the design found in a file.
type docCitation struct {
	file     string   // relative to the module root
	line     int      // 1-based, the line where the citation starts
	text     string   // as written, on one line
	sections []string // the section numbers it names, e.g. "3.2"
}

// docProblem is something a document or a citation gets wrong, at file:line.
type docProblem struct {
	file string
	line int
	msg  string
}

func (p docProblem) String() string { return fmt.Sprintf("%s:%d: %s", p.file, p.line, p.msg) }

// sectionNum is one section number as citations write it: "3", "3.2". It
// may not run on into a larger number ("100,000" is no list of sections,
// "3.2.1" no citation of 3.2).
const sectionNum = `\d+(?:\.\d+)*(?:[^\d,.]|,[^\d]|\.[^\d]|$)`

var (
	// citationRE matches a citation and the list that follows it. A list
	// item is separated by a comma, "and", or both.
	citationRE = regexp.MustCompile(`\bDESIGN(?:\s+sections?)?\s+(\d+(?:\.\d+)*)((?:\s*(?:,\s*and|,|and)\s+\d+(?:\.\d+)*)*)`)
	// numRE finds the section numbers in a matched citation.
	numRE = regexp.MustCompile(`\d+(?:\.\d+)*`)
	// designFileRE finds a reference to the design file outside the
	// repository (its name spelled in capitals).
	designFileRE = regexp.MustCompile(`\bDESIGN[.]md\b`)
	// headingRE matches a numbered heading of the design: "## 3. Ordering",
	// "### 3.2 FlexCast".
	headingRE = regexp.MustCompile(`^#{1,6}\s+(\d+(?:\.\d+)*)\.?\s`)
	// mdHeadingRE matches any Markdown heading.
	mdHeadingRE = regexp.MustCompile(`^(#{1,6})\s+(.*?)\s*#*\s*$`)
	// mdLinkRE matches an inline link or image: [text](target "title").
	mdLinkRE = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	// codeSpanRE matches inline code, whose brackets are no links.
	codeSpanRE = regexp.MustCompile("`[^`\n]*`")
	// sectionNumRE checks that a number of a list is a whole section number.
	sectionNumRE = regexp.MustCompile(`^` + sectionNum)
)

// designSections reads the numbered headings of the design document at
// root: every section a citation may name. A missing or unnumbered design
// is an error, so that the citations cannot pass by having nothing to
// resolve against.
func designSections(root string) (map[string]bool, error) {
	src, err := os.ReadFile(filepath.Join(root, designPath))
	if err != nil {
		return nil, fmt.Errorf("lint: the design every DESIGN citation names: %w", err)
	}
	sections := map[string]bool{}
	for _, line := range markdownLines(string(src)) {
		if m := headingRE.FindStringSubmatch(line); m != nil {
			sections[m[1]] = true
		}
	}
	if len(sections) == 0 {
		return nil, fmt.Errorf("lint: %s has no numbered section headings", designPath)
	}
	return sections, nil
}

// findCitations returns the citations of the design in src, the content of
// file name. A citation may wrap across lines, comment lines included
// ("(DESIGN" at the end of one line, "// 10.1)" at the start of the next):
// the lines are joined, each without its indentation and comment marker,
// and a citation is reported at the line where it starts.
func findCitations(name, src string) []docCitation {
	var b strings.Builder
	var starts []int // offset in b of each line
	for line := range strings.SplitSeq(src, "\n") {
		starts = append(starts, b.Len())
		t := strings.TrimSpace(line)
		if c, ok := strings.CutPrefix(t, "//"); ok {
			t = strings.TrimSpace(c)
		} else if c, ok := strings.CutPrefix(t, "#"); ok && !strings.HasSuffix(name, ".md") {
			t = strings.TrimSpace(c)
		}
		b.WriteString(t)
		b.WriteByte(' ')
	}
	text := b.String()
	var out []docCitation
	for _, m := range citationRE.FindAllStringSubmatchIndex(text, -1) {
		whole := text[m[0]:m[1]]
		// Drop list items that run on into a larger number: the list ends
		// before them.
		nums := numRE.FindAllStringIndex(whole, -1)
		var sections []string
		for _, n := range nums {
			rest := text[m[0]+n[0]:]
			if !sectionNumRE.MatchString(rest) {
				break
			}
			sections = append(sections, whole[n[0]:n[1]])
		}
		if len(sections) == 0 {
			continue
		}
		line, _ := slices.BinarySearch(starts, m[0]+1)
		out = append(out, docCitation{file: name, line: line, text: whole, sections: sections})
	}
	return out
}

// checkCitations resolves every citation against the design's sections.
func checkCitations(cites []docCitation, sections map[string]bool) []docProblem {
	var out []docProblem
	for _, c := range cites {
		for _, s := range c.sections {
			if !sections[s] {
				out = append(out, docProblem{c.file, c.line, fmt.Sprintf("%q cites section %s, which %s does not have", c.text, s, designPath)})
			}
		}
	}
	return out
}

// findDesignFileRefs reports every mention of the design file by the
// capitalised name of the copy outside the repository: the design lives in
// the repository, at docs/design.md.
func findDesignFileRefs(name, src string) []docProblem {
	var out []docProblem
	for i, line := range strings.Split(src, "\n") {
		if designFileRE.MatchString(line) {
			out = append(out, docProblem{name, i + 1, "names a design file the repository does not hold: cite " + designPath})
		}
	}
	return out
}

// citingExts are the kinds of files a citation of the design may be in: Go
// (tests included), Markdown, and the protobuf, YAML and scenario files
// whose comments cite it too.
var citingExts = []string{".go", ".md", ".proto", ".yaml", ".yml", ".txt"}

// docFiles returns the files under root that may cite the design (by
// citingExts, and the Makefile and Dockerfile), relative to root, sorted,
// skipping hidden directories.
func docFiles(root string) ([]string, error) {
	var files []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && strings.HasPrefix(d.Name(), ".") {
				return filepath.SkipDir
			}
			return nil
		}
		if slices.Contains(citingExts, filepath.Ext(path)) || d.Name() == "Makefile" || d.Name() == "Dockerfile" {
			rel, err := filepath.Rel(root, path)
			if err != nil {
				return err
			}
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	slices.Sort(files)
	return files, err
}

// markdownLines returns the lines of a Markdown text with every line inside
// a fenced code block blanked, so that neither headings nor links are read
// from code.
func markdownLines(src string) []string {
	lines := strings.Split(src, "\n")
	fence := ""
	for i, line := range lines {
		t := strings.TrimSpace(line)
		switch {
		case fence == "" && (strings.HasPrefix(t, "```") || strings.HasPrefix(t, "~~~")):
			fence = t[:3]
			lines[i] = ""
		case fence != "":
			if strings.HasPrefix(t, fence) {
				fence = ""
			}
			lines[i] = ""
		}
	}
	return lines
}

// headingAnchor returns the anchor GitHub gives a heading: lower case,
// everything but letters, digits, spaces, hyphens and underscores dropped,
// spaces turned into hyphens.
func headingAnchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// mdAnchors returns the anchors of the headings of a Markdown text; a
// repeated heading gets -1, -2, ... as on GitHub.
func mdAnchors(src string) map[string]bool {
	anchors := map[string]bool{}
	seen := map[string]int{}
	for _, line := range markdownLines(src) {
		m := mdHeadingRE.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		a := headingAnchor(m[2])
		if n := seen[a]; n > 0 {
			seen[a]++
			a = fmt.Sprintf("%s-%d", a, n)
		} else {
			seen[a] = 1
		}
		anchors[a] = true
	}
	return anchors
}

// checkLinks checks the relative links of the Markdown file name (relative
// to root): each must reach a file or directory of the repository, and a
// heading of the Markdown file it names when it carries an anchor.
func checkLinks(root, name string) ([]docProblem, error) {
	src, err := os.ReadFile(filepath.Join(root, name))
	if err != nil {
		return nil, err
	}
	var out []docProblem
	lines := markdownLines(string(src))
	// Links may wrap across lines ("[a whole cluster in one\nprocess](#x)"):
	// scan the text with code blanked, and count lines up to each match.
	text := codeSpanRE.ReplaceAllStringFunc(strings.Join(lines, "\n"), func(s string) string {
		return strings.Repeat(" ", len(s))
	})
	for _, m := range mdLinkRE.FindAllStringSubmatchIndex(text, -1) {
		target := text[m[2]:m[3]]
		line := strings.Count(text[:m[0]], "\n") + 1
		if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
			continue
		}
		path, anchor, _ := strings.Cut(target, "#")
		file := name
		if path != "" {
			file = filepath.ToSlash(filepath.Join(filepath.Dir(name), path))
			if strings.HasPrefix(file, "../") || filepath.IsAbs(path) {
				out = append(out, docProblem{name, line, fmt.Sprintf("link %s leaves the repository", target)})
				continue
			}
			if _, err := os.Stat(filepath.Join(root, file)); err != nil {
				out = append(out, docProblem{name, line, fmt.Sprintf("link %s: no file %s", target, file)})
				continue
			}
		}
		if anchor == "" || filepath.Ext(file) != ".md" {
			continue
		}
		dst, err := os.ReadFile(filepath.Join(root, file))
		if err != nil {
			return nil, err
		}
		if !mdAnchors(string(dst))[anchor] {
			out = append(out, docProblem{name, line, fmt.Sprintf("link %s: %s has no heading #%s", target, file, anchor)})
		}
	}
	return out, nil
}

// linkedDocs returns the Markdown files whose links are checked: the README
// and every document under docs/.
func linkedDocs(root string) ([]string, error) {
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		return nil, err
	}
	out := []string{"README.md"}
	for _, d := range docs {
		out = append(out, "docs/"+filepath.Base(d))
	}
	return out, nil
}

// TestDesignCitations checks every citation of the design in every .go file
// (tests included) and every .md file of the repository, and in the
// protobuf, YAML, scenario and build files whose comments cite it.
func TestDesignCitations(t *testing.T) {
	root := repoRoot(t)
	sections, err := designSections(root)
	if err != nil {
		t.Fatal(err)
	}
	files, err := docFiles(root)
	if err != nil {
		t.Fatal(err)
	}
	var cites []docCitation
	var problems []docProblem
	for _, name := range files {
		src := string(readFile(t, filepath.Join(root, name)))
		cites = append(cites, findCitations(name, src)...)
		problems = append(problems, findDesignFileRefs(name, src)...)
	}
	problems = append(problems, checkCitations(cites, sections)...)
	for _, p := range problems {
		t.Error(p)
	}
	// The repository cites its design in hundreds of places: finding none
	// means the scan is broken, not that all is well.
	if len(cites) < 100 {
		t.Errorf("found %d citations of the design in %d files, want at least 100: is the scan broken?", len(cites), len(files))
	}
	t.Logf("%d citations of the design in %d files, against %d sections of %s", len(cites), len(files), len(sections), designPath)
}

// TestDocLinks checks the relative links of the README and docs/.
func TestDocLinks(t *testing.T) {
	root := repoRoot(t)
	docs, err := linkedDocs(root)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(docs, designPath) {
		t.Errorf("%s is missing: the design every citation names", designPath)
	}
	links := 0
	for _, name := range docs {
		src := readFile(t, filepath.Join(root, name))
		links += len(mdLinkRE.FindAll(src, -1))
		problems, err := checkLinks(root, name)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range problems {
			t.Error(p)
		}
	}
	t.Logf("about %d links in %d documents", links, len(docs))
}

// TestFindCitations shows the scanner on planted text: wrapped citations,
// lists, "sections ... and ...", and numbers that are no sections.
func TestFindCitations(t *testing.T) {
	d := "DES" + "IGN" // kept apart, so that this file cites nothing itself
	src := strings.Join([]string{
		"// Package x does y (" + d,
		"// 10.1): the log.",
		"// per " + d + " 3.2, then " + d + " 2, 6, 7 and " + d + " sections 1 and 5.",
		"// after " + d + " 3.1. The next sentence.",
		"// " + d + " 3.2, 100,000 seeds; " + d + " 6, 7, and 13.",
		"var s = `see " + d + " 99`",
		"// " + d + " 4.3.2 is no citation of 4.3, nor is " + d + "ED 5",
		"# a configuration comment (" + d,
		"# 8), wrapped",
	}, "\n")
	var got []string
	for _, c := range findCitations("x.go", src) {
		got = append(got, fmt.Sprintf("%d:%s", c.line, strings.Join(c.sections, ",")))
	}
	want := []string{"1:10.1", "3:3.2", "3:2,6,7", "3:1,5", "4:3.1", "5:3.2", "5:6,7,13", "6:99", "7:4.3.2", "8:8"}
	if !slices.Equal(got, want) {
		t.Errorf("citations:\n got %q\nwant %q", got, want)
	}
}

// TestCheckCitationsFails proves the check can fail: a planted citation of
// a section the design lacks is reported with its file and line, and the
// good ones are not.
func TestCheckCitationsFails(t *testing.T) {
	d := "DES" + "IGN"
	sections := map[string]bool{"1": true, "3": true, "3.2": true, "10.1": true}
	src := "// " + d + " 3.2 holds.\n//\n// " + d + " 1, 3 and 14.\n// " + d + " 10.1, " + d + " 3.3.\n"
	got := checkCitations(findCitations("a/b.go", src), sections)
	var lines []string
	for _, p := range got {
		lines = append(lines, p.String())
	}
	want := []string{
		`a/b.go:3: "` + d + ` 1, 3 and 14" cites section 14, which docs/design.md does not have`,
		`a/b.go:4: "` + d + ` 3.3" cites section 3.3, which docs/design.md does not have`,
	}
	if !slices.Equal(lines, want) {
		t.Errorf("problems:\n got %q\nwant %q", lines, want)
	}
	if p := findDesignFileRefs("README.md", "see "+d+".md, section 2\n"); len(p) != 1 || p[0].line != 1 {
		t.Errorf("a mention of the outside design file: got %v, want one problem at line 1", p)
	}
}

// TestDesignSectionsMissing: a repository without its design fails, and so
// does a design without numbered headings.
func TestDesignSectionsMissing(t *testing.T) {
	root := t.TempDir()
	if _, err := designSections(root); err == nil {
		t.Error("designSections without docs/design.md: got no error")
	}
	writeFile(t, root, designPath, "# Design\n\n## Words\n")
	if _, err := designSections(root); err == nil {
		t.Error("designSections of a design without numbered headings: got no error")
	}
	writeFile(t, root, designPath, "# Design\n\n## 0. Words\n\n## 3. Protocols\n\n### 3.2 FlexCast\n\n```\n## 9. in code\n```\n")
	got, err := designSections(root)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]bool{"0": true, "3": true, "3.2": true}; !maps.Equal(got, want) {
		t.Errorf("sections: got %v, want %v", got, want)
	}
}

// TestCheckLinksFails proves the link check can fail: a missing file, a
// missing heading, and a link out of the repository are reported; links in
// code and good links are not.
func TestCheckLinksFails(t *testing.T) {
	root := t.TempDir()
	writeFile(t, root, "docs/design.md", "# D\n\n## 3.2 FlexCast's `core`\n\n## Words\n\n## Words\n")
	writeFile(t, root, "README.md", strings.Join([]string{
		"See [the design](docs/design.md#32-flexcasts-core) and",
		"[words](docs/design.md#words-1), [a](docs/design.md#nothing-here),",
		"[gone](docs/gone.md), [up](../outside.md), [web](https://example.com/x.md)",
		"and [a wrapped",
		"link](#no-such-heading). `[code](nowhere.md)`",
		"```",
		"[block](nowhere.md)",
		"```",
		"## Top",
		"[self](#top)",
	}, "\n"))
	got, err := checkLinks(root, "README.md")
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, p := range got {
		lines = append(lines, p.String())
	}
	want := []string{
		"README.md:2: link docs/design.md#nothing-here: docs/design.md has no heading #nothing-here",
		"README.md:3: link docs/gone.md: no file docs/gone.md",
		"README.md:3: link ../outside.md leaves the repository",
		"README.md:4: link #no-such-heading: README.md has no heading #no-such-heading",
	}
	if !slices.Equal(lines, want) {
		t.Errorf("problems:\n got %q\nwant %q", lines, want)
	}
}

func writeFile(t *testing.T, root, name, content string) {
	t.Helper()
	path := filepath.Join(root, name)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// floorRowRE matches a row of the design's floor table: | 3 | `txn`, ... |.
var floorRowRE = regexp.MustCompile(`^\|\s*(\d+)\s*\|(.*)\|\s*$`)

// designFloors reads the floor table of section 1 of the design: each
// package, written in backquotes, with its floor.
func designFloors(src string) (map[string]int, error) {
	floors := map[string]int{}
	in := false
	for _, line := range markdownLines(src) {
		if m := headingRE.FindStringSubmatch(line); m != nil {
			in = m[1] == "1"
			continue
		}
		m := floorRowRE.FindStringSubmatch(line)
		if !in || m == nil {
			continue
		}
		var floor int
		if _, err := fmt.Sscan(m[1], &floor); err != nil {
			return nil, err
		}
		for _, p := range codeSpanRE.FindAllString(m[2], -1) {
			dir := strings.Trim(p, "`")
			if f, ok := floors[dir]; ok {
				return nil, fmt.Errorf("lint: %s: %s on floors %d and %d", designPath, dir, f, floor)
			}
			floors[dir] = floor
		}
	}
	if len(floors) == 0 {
		return nil, fmt.Errorf("lint: %s: no floor table in section 1", designPath)
	}
	return floors, nil
}

// floorProblems compares the design's floors with the house's rooms.
func floorProblems(floors map[string]int, rooms []room) []string {
	var out []string
	inHouse := map[string]bool{}
	for _, r := range rooms {
		inHouse[r.dir] = true
		f, ok := floors[r.dir]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("%s (floor %d in the house) is missing from %s's floor table", r.dir, r.floor, designPath))
		case f != r.floor:
			out = append(out, fmt.Sprintf("%s is on floor %d in %s, %d in the house", r.dir, f, designPath, r.floor))
		}
	}
	for _, dir := range slices.Sorted(maps.Keys(floors)) {
		if !inHouse[dir] {
			out = append(out, fmt.Sprintf("%s is in %s's floor table but has no room in the house", dir, designPath))
		}
	}
	return out
}

// TestDesignFloorsMatchHouse holds section 1 of the design to the layout
// the import lint enforces (house_test.go), so that the design shows the
// packages as they are.
func TestDesignFloorsMatchHouse(t *testing.T) {
	root := repoRoot(t)
	floors, err := designFloors(string(readFile(t, filepath.Join(root, designPath))))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range floorProblems(floors, house) {
		t.Error(p)
	}
}

// TestFloorProblems proves the floor check can fail: a package on the wrong
// floor, one missing and one unknown are each reported.
func TestFloorProblems(t *testing.T) {
	src := "## 1. Packages\n\n| floor | packages |\n|---|---|\n| 1 | `multicast`, `kv` |\n| 0 | `partition`, `nowhere` |\n\n## 2. Life\n\n| 3 | `txn` |\n"
	floors, err := designFloors(src)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]int{"multicast": 1, "kv": 1, "partition": 0, "nowhere": 0}; !maps.Equal(floors, want) {
		t.Errorf("floors: got %v, want %v", floors, want)
	}
	rooms := []room{{dir: "partition", floor: 0}, {dir: "multicast", floor: 2}, {dir: "kv", floor: 1}, {dir: "txn", floor: 3}}
	got := floorProblems(floors, rooms)
	want := []string{
		"multicast is on floor 1 in docs/design.md, 2 in the house",
		"txn (floor 3 in the house) is missing from docs/design.md's floor table",
		"nowhere is in docs/design.md's floor table but has no room in the house",
	}
	if !slices.Equal(got, want) {
		t.Errorf("problems:\n got %q\nwant %q", got, want)
	}
	if _, err := designFloors("## 1. Packages\n\nno table\n"); err == nil {
		t.Error("designFloors without a table: got no error")
	}
}
