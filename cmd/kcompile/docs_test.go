package main

import (
	"fmt"
	"iter"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"

	"github.com/kcompile/kcompile/pipeline"
)

// The repository's root, the README and the docs, from this package.
const (
	repoRoot   = "../.."
	checksPage = "docs/checks.md"
	// readmeMaxLines is what a newcomer reads in one sitting (issue 28).
	readmeMaxLines = 250
)

const (
	checksBegin = "<!-- checks:begin (generated from pipeline.Rules by TestDocsChecks in cmd/kcompile/docs_test.go; KCOMPILE_UPDATE=1 rewrites) -->"
	checksEnd   = "<!-- checks:end -->"
)

// checksTable renders the rule table as Markdown.
func checksTable() string {
	var b strings.Builder
	b.WriteString("| Code | Severity | Family | What it catches |\n|---|---|---|---|\n")
	for _, r := range pipeline.Rules() {
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", r.Code, r.Severity, r.Family, strings.ReplaceAll(r.Summary, "|", "\\|"))
	}
	return b.String()
}

// TestDocsChecks fails when the table of checks in docs/checks.md no
// longer matches the code; KCOMPILE_UPDATE=1 rewrites it.
func TestDocsChecks(t *testing.T) {
	file := filepath.Join(repoRoot, filepath.FromSlash(checksPage))
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	page := string(b)
	start := strings.Index(page, checksBegin)
	end := strings.Index(page, checksEnd)
	if start < 0 || end < start {
		t.Fatalf("%s lacks the %q ... %q markers", checksPage, checksBegin, checksEnd)
	}
	want := page[:start+len(checksBegin)] + "\n" + checksTable() + page[end:]
	if want == page {
		return
	}
	if os.Getenv("KCOMPILE_UPDATE") != "" {
		if err := os.WriteFile(file, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("%s's table of checks is stale; run KCOMPILE_UPDATE=1 go test ./cmd/kcompile -run TestDocsChecks", checksPage)
}

// TestReadmeLength holds the README to one screenful for a newcomer; the
// rest belongs in docs/.
func TestReadmeLength(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "\n"); n > readmeMaxLines {
		t.Errorf("README.md has %d lines, more than %d: move the detail to a page of docs/", n, readmeMaxLines)
	}
}

// docPages are the Markdown files whose links are checked: the README
// and every page of docs/, as paths relative to the repository.
func docPages(t *testing.T) []string {
	t.Helper()
	pages, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(pages) == 0 {
		t.Fatal("docs/ has no pages")
	}
	out := []string{"README.md"}
	for _, p := range pages {
		out = append(out, "docs/"+filepath.Base(p))
	}
	return out
}

// TestDocsLinks fails on a relative link or image of the README or of
// docs/ that names no file of the repository or no heading of the page,
// and on an absolute link that is not a well-formed http(s) URL (they are
// not fetched).
func TestDocsLinks(t *testing.T) {
	pages := docPages(t)
	for _, p := range pages {
		for _, problem := range checkLinks(repoRoot, p) {
			t.Error(problem)
		}
	}
	// The README's Documentation section is how a user finds a page.
	readme, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var linked []string
	for _, l := range mdLinks(string(readme)) {
		linked = append(linked, strings.SplitN(l.dest, "#", 2)[0])
	}
	for _, p := range pages[1:] {
		if !slices.Contains(linked, p) {
			t.Errorf("README.md links no %s", p)
		}
	}
}

// TestDocsLinksCatchBreakage holds checkLinks itself to finding broken
// links, so that TestDocsLinks cannot pass by finding none.
func TestDocsLinksCatchBreakage(t *testing.T) {
	root := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(root, "docs"), 0o755))
	must(os.WriteFile(filepath.Join(root, "docs", "b.md"), []byte("# Page B\n\n## Size and speed: `kcompile sim`\n\n## Size and speed: `kcompile sim`\n"), 0o644))
	must(os.WriteFile(filepath.Join(root, "pic.svg"), []byte("<svg/>"), 0o644))
	page := strings.Join([]string{
		"# A",
		"## A heading, with punctuation!",
		"[ok](docs/b.md) [ok](docs/b.md#size-and-speed-kcompile-sim) [ok](docs/b.md#size-and-speed-kcompile-sim-1)",
		"[ok](#a-heading-with-punctuation) ![ok](pic.svg) [ok](docs) [ok](https://cuelang.org/docs)",
		"`[not a link](nowhere.md)`",
		"```",
		"[not a link](nowhere.md)",
		"```",
		"[missing](docs/c.md)",
		"![missing image](golden/none.svg)",
		"[bad anchor](docs/b.md#size-and-speed)",
		"[bad local anchor](#nothing)",
		"[anchor on a directory](docs#x)",
		"[bad url](https://)",
		"[other scheme](ftp://example.com/x)",
		"[outside](../../etc/passwd)",
		"",
	}, "\n")
	must(os.WriteFile(filepath.Join(root, "README.md"), []byte(page), 0o644))
	got := checkLinks(root, "README.md")
	for _, want := range []string{"docs/c.md", "golden/none.svg", "docs/b.md#size-and-speed)", "#nothing", "docs#x", "https://", "ftp://example.com/x", "../../etc/passwd"} {
		found := false
		for _, g := range got {
			found = found || strings.Contains(g, want)
		}
		if !found {
			t.Errorf("checkLinks does not report %s; it reports:\n%s", want, strings.Join(got, "\n"))
		}
	}
	if len(got) != 8 {
		t.Errorf("checkLinks reports %d problems, want 8:\n%s", len(got), strings.Join(got, "\n"))
	}
}

// mdLink is a link or image of a Markdown page.
type mdLink struct {
	line int
	dest string
}

var (
	// inlineLink is [text](dest) or ![alt](dest), with an optional title;
	// the text may hold one level of brackets.
	inlineLink = regexp.MustCompile(`!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^()\s<>]*)>?(?:\s+"[^"]*")?\s*\)`)
	// refDef is a reference definition: [label]: dest.
	refDef = regexp.MustCompile(`^\s{0,3}\[[^\]]+\]:\s+<?(\S+?)>?(?:\s+"[^"]*")?\s*$`)
	// htmlRef is an href or src attribute of inline HTML.
	htmlRef = regexp.MustCompile(`\b(?:href|src)="([^"]*)"`)
	// codeSpan is inline code, whose brackets are no link.
	codeSpan = regexp.MustCompile("`+[^`]*`+")
)

// proseLines yields a Markdown page's lines outside fenced code blocks,
// with their numbers from 1.
func proseLines(text string) iter.Seq2[int, string] {
	return func(yield func(int, string) bool) {
		fence := ""
		for i, line := range strings.Split(text, "\n") {
			trimmed := strings.TrimSpace(line)
			switch {
			case fence != "":
				if strings.HasPrefix(trimmed, fence) {
					fence = ""
				}
			case strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~"):
				fence = trimmed[:3]
			default:
				if !yield(i+1, line) {
					return
				}
			}
		}
	}
}

// mdLinks returns the links and images of a Markdown page outside code
// blocks and code spans.
func mdLinks(text string) []mdLink {
	var out []mdLink
	for i, line := range proseLines(text) {
		line = codeSpan.ReplaceAllString(line, "")
		for _, m := range inlineLink.FindAllStringSubmatch(line, -1) {
			out = append(out, mdLink{i, m[1]})
		}
		if m := refDef.FindStringSubmatch(line); m != nil {
			out = append(out, mdLink{i, m[1]})
		}
		for _, m := range htmlRef.FindAllStringSubmatch(line, -1) {
			out = append(out, mdLink{i, m[1]})
		}
	}
	return out
}

var (
	// headingLine is an ATX heading.
	headingLine = regexp.MustCompile(`^\s{0,3}#{1,6}\s+(.*?)(?:\s+#+)?\s*$`)
	// linkText reduces a link or image in a heading to its text.
	linkText = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
)

// anchors returns the anchors GitHub gives the headings of a Markdown
// page: the heading's text in lower case, spaces made '-', every other
// character but letters, digits, '-' and '_' dropped; a repeated anchor
// gets -1, -2, ... appended.
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, line := range proseLines(text) {
		m := headingLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		heading := linkText.ReplaceAllString(m[1], "$1")
		var b strings.Builder
		for _, r := range strings.ToLower(heading) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			seen[a] = n + 1
			a = fmt.Sprintf("%s-%d", a, n)
		} else {
			seen[a] = 1
		}
		out[a] = true
	}
	return out
}

// checkLinks returns a problem for every link of the page (a path
// relative to root) that does not resolve.
func checkLinks(root, page string) []string {
	data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(page)))
	if err != nil {
		return []string{err.Error()}
	}
	var problems []string
	report := func(l mdLink, format string, args ...any) {
		problems = append(problems, fmt.Sprintf("%s:%d: (%s) %s", page, l.line, l.dest, fmt.Sprintf(format, args...)))
	}
	for _, l := range mdLinks(string(data)) {
		if l.dest == "" {
			report(l, "empty link")
			continue
		}
		u, err := url.Parse(l.dest)
		if err != nil {
			report(l, "not a URL: %v", err)
			continue
		}
		if u.Scheme != "" || strings.HasPrefix(l.dest, "//") {
			if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Hostname() == "" {
				report(l, "an absolute link must be an http(s) URL with a host")
			}
			continue
		}
		target := page
		if u.Path != "" {
			target = path.Clean(path.Join(path.Dir(page), u.Path))
			if target == ".." || strings.HasPrefix(target, "../") || path.IsAbs(u.Path) {
				report(l, "leads out of the repository")
				continue
			}
		}
		info, err := os.Stat(filepath.Join(root, filepath.FromSlash(target)))
		if err != nil {
			report(l, "no such file: %s", target)
			continue
		}
		if !strings.Contains(l.dest, "#") {
			continue
		}
		if info.IsDir() || !strings.HasSuffix(target, ".md") {
			report(l, "an anchor needs a Markdown page, and %s is not one", target)
			continue
		}
		text, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(target)))
		if err != nil {
			report(l, "%v", err)
			continue
		}
		if !anchors(string(text))[u.Fragment] {
			report(l, "%s has no heading with the anchor #%s", target, u.Fragment)
		}
	}
	return problems
}
