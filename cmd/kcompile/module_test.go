package main

import (
	"bufio"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestKcompileLinksNoKubernetes keeps kcompile light to build and
// installable with `go install ...@version`: its module has no replace
// directive, and no package of k8s.io/kubernetes is in its build (the
// simulator, which needs them, is a module of its own).
func TestKcompileLinksNoKubernetes(t *testing.T) {
	f, err := os.Open("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		if line := strings.TrimSpace(sc.Text()); strings.HasPrefix(line, "replace") {
			t.Errorf("go.mod:%d: %s (go install refuses a module with replace directives)", n, line)
		}
	}
	cmd := exec.Command("go", "list", "-deps", ".")
	// Outside the workspace, as `go install` builds it.
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	for _, p := range strings.Fields(string(out)) {
		if strings.HasPrefix(p, "k8s.io/kubernetes") || strings.HasPrefix(p, "github.com/kcompile/kcompile/runtimes/sim") {
			t.Errorf("kcompile links %s", p)
		}
	}
}
