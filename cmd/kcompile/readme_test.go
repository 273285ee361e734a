package main

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/kcompile/kcompile/pipeline"
)

const (
	checksBegin = "<!-- checks:begin (generated from pipeline.Rules by TestReadmeChecks; KCOMPILE_UPDATE=1 rewrites) -->"
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

// TestReadmeChecks fails when the README's table of checks no longer
// matches the code.
func TestReadmeChecks(t *testing.T) {
	const path = "../../README.md"
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	start := strings.Index(readme, checksBegin)
	end := strings.Index(readme, checksEnd)
	if start < 0 || end < start {
		t.Fatalf("README.md lacks the %q ... %q markers", checksBegin, checksEnd)
	}
	want := readme[:start+len(checksBegin)] + "\n" + checksTable() + readme[end:]
	if want == readme {
		return
	}
	if os.Getenv("KCOMPILE_UPDATE") != "" {
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("README.md's table of checks is stale; run KCOMPILE_UPDATE=1 go test ./cmd/kcompile -run TestReadmeChecks")
}

// TestReadmeCommands keeps the README's two set-up commands and .ci/run in
// step: CI must run exactly the command the README gives.
func TestReadmeCommands(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	ci, err := os.ReadFile("../../.ci/run")
	if err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []string{"go run ./cmd/kcompile check examples/ha-stacked", "scripts/test"} {
		if !strings.Contains(string(readme), "\n"+cmd+"\n") {
			t.Errorf("README.md does not give the command %q on a line of its own", cmd)
		}
	}
	if !strings.Contains(string(ci), "\nscripts/test\n") {
		t.Errorf(".ci/run does not run the README's test command scripts/test")
	}
}
