package compiler

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rogpeppe/go-internal/txtar"
)

// TestCorpus compiles every bad spec under testdata/bad. Each is a txtar
// archive: the comment says what is wrong, the file "expect" lists the
// diagnostics (one per line, as line() renders them), and the other files
// are the spec. KCOMPILE_UPDATE=1 rewrites the expect files; review the
// diff before committing.
func TestCorpus(t *testing.T) {
	files, err := filepath.Glob("testdata/bad/*.txtar")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 30 {
		t.Fatalf("the corpus has %d bad specs; it must keep at least 30", len(files))
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".txtar"), func(t *testing.T) {
			ar, err := txtar.ParseFile(file)
			if err != nil {
				t.Fatal(err)
			}
			spec := map[string]string{}
			expect := -1
			for i, f := range ar.Files {
				if f.Name == "expect" {
					expect = i
					continue
				}
				spec[f.Name] = string(f.Data)
			}
			if expect < 0 {
				t.Fatal("no expect file")
			}
			if len(strings.TrimSpace(string(ar.Comment))) == 0 {
				t.Error("the archive comment must say what is wrong with the spec")
			}
			diags := compileFiles(t, spec)
			got := lines(diags)
			if !diags.HasErrors() && !strings.Contains(got, "warning") {
				t.Errorf("a bad spec must raise at least one diagnostic")
			}
			if os.Getenv("KCOMPILE_UPDATE") != "" {
				ar.Files[expect].Data = []byte(got)
				if err := os.WriteFile(file, txtar.Format(ar), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			if want := string(ar.Files[expect].Data); got != want {
				t.Errorf("diagnostics differ\ngot:\n%s\nwant:\n%s", got, want)
			}
			for _, d := range diags {
				if d.Message == "" || d.Hint == "" || len(d.Positions) == 0 {
					t.Errorf("%s lacks a message, hint or position: %+v", d.Code, d)
				}
			}
		})
	}
}
