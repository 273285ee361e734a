// Package docs holds the project's documentation; its test holds the
// package table of architecture.md to the code: the table is the import
// rule, so the document and the build cannot drift apart.
package docs

import (
	"bufio"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/kcompile/kcompile/"

// TestImportsFollowArchitecture lists every package of both modules with
// `go list` and holds its imports of the project's own packages to the
// Imports column of its row in architecture.md: every package has a row,
// and imports exactly what the row says.
func TestImportsFollowArchitecture(t *testing.T) {
	rules, err := readRules("architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	graph, err := listImports()
	if err != nil {
		t.Fatal(err)
	}
	if len(graph) < 20 {
		t.Fatalf("go list found only %d packages", len(graph))
	}
	for _, p := range checkImports(graph, rules) {
		t.Error(p)
	}
}

// TestImportRuleBroken shows the check failing: a renderer that imports
// the compiler, a runtime imported by the pipeline, a package without a
// row and a row that promises an import the code does not make.
func TestImportRuleBroken(t *testing.T) {
	rules := map[string][]string{
		"pipeline":        {"targets/systemd"},
		"targets/systemd": {"compiler/ir"},
		"compiler/ir":     nil,
		"runtimes/sim":    {"pipeline"},
	}
	graph := map[string][]string{
		"pipeline":        {"targets/systemd", "runtimes/sim"},
		"targets/systemd": {"compiler", "compiler/ir"},
		"compiler/ir":     nil,
		"compiler":        nil,
		"runtimes/sim":    nil,
	}
	got := strings.Join(checkImports(graph, rules), "\n")
	for _, want := range []string{
		"pipeline imports runtimes/sim",
		"targets/systemd imports compiler,",
		"compiler has no row",
		"runtimes/sim does not import pipeline",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the check does not report %q:\n%s", want, got)
		}
	}
}

// checkImports compares an import graph with the rules and says what
// breaks them.
func checkImports(graph, rules map[string][]string) []string {
	var out []string
	for _, pkg := range slices.Sorted(maps.Keys(graph)) {
		allowed, ok := rules[pkg]
		if !ok {
			out = append(out, fmt.Sprintf("%s has no row in docs/architecture.md's package table: add one saying what it owns and imports", pkg))
			continue
		}
		for _, imp := range graph[pkg] {
			if !slices.Contains(allowed, imp) {
				out = append(out, fmt.Sprintf("%s imports %s, which its row in docs/architecture.md does not allow: change the code, or the design and its row", pkg, imp))
			}
		}
		for _, imp := range allowed {
			if !slices.Contains(graph[pkg], imp) {
				out = append(out, fmt.Sprintf("%s does not import %s, which its row in docs/architecture.md lists: keep the row true", pkg, imp))
			}
		}
	}
	for _, pkg := range slices.Sorted(maps.Keys(rules)) {
		if _, ok := graph[pkg]; !ok {
			out = append(out, fmt.Sprintf("docs/architecture.md has a row for %s, which is no package", pkg))
		}
	}
	return out
}

var (
	codeRE  = regexp.MustCompile("`([^`]+)`")
	braceRE = regexp.MustCompile(`^(.*)\{([^}]*)\}(.*)$`)
)

// readRules reads the package table under "## Packages": the packages
// of a row (first column, in backquotes, with {a,b} alternatives) and the
// packages they may import (third column; "nothing" for none).
func readRules(file string) (map[string][]string, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	rules := map[string][]string{}
	in := false
	s := bufio.NewScanner(f)
	s.Buffer(nil, 1<<20)
	for s.Scan() {
		line := s.Text()
		if strings.HasPrefix(line, "## ") {
			in = line == "## Packages"
			continue
		}
		if !in || !strings.HasPrefix(line, "| `") {
			continue
		}
		cols := strings.Split(strings.Trim(line, "|"), " | ")
		if len(cols) != 3 {
			return nil, fmt.Errorf("%s: a row of the package table has %d columns: %s", file, len(cols), line)
		}
		m := codeRE.FindStringSubmatch(cols[0])
		if m == nil {
			return nil, fmt.Errorf("%s: no package in %q", file, cols[0])
		}
		var imports []string
		if strings.TrimSpace(cols[2]) != "nothing" {
			for imp := range strings.SplitSeq(cols[2], ",") {
				imports = append(imports, strings.TrimSpace(imp))
			}
		}
		for _, pkg := range expand(m[1]) {
			rules[pkg] = imports
		}
	}
	if len(rules) == 0 {
		return nil, fmt.Errorf("%s has no package table under ## Packages", file)
	}
	return rules, s.Err()
}

// expand writes out "a/{b,c}" as a/b and a/c.
func expand(p string) []string {
	m := braceRE.FindStringSubmatch(p)
	if m == nil {
		return []string{p}
	}
	var out []string
	for alt := range strings.SplitSeq(m[2], ",") {
		out = append(out, m[1]+alt+m[3])
	}
	return out
}

// listImports is every package of both modules with the project packages
// it imports (tests aside), by `go list`.
func listImports() (map[string][]string, error) {
	cmd := exec.Command("go", "list", "-f", `{{if .GoFiles}}{{.ImportPath}}{{range .Imports}} {{.}}{{end}}{{end}}`, module+"...", module+"runtimes/sim/...")
	cmd.Dir = ".."
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list: %v", err)
	}
	graph := map[string][]string{}
	for line := range strings.SplitSeq(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || !strings.HasPrefix(f[0], module) {
			continue
		}
		pkg := strings.TrimPrefix(f[0], module)
		graph[pkg] = []string{}
		for _, imp := range f[1:] {
			if strings.HasPrefix(imp, module) {
				graph[pkg] = append(graph[pkg], strings.TrimPrefix(imp, module))
			}
		}
	}
	return graph, nil
}
