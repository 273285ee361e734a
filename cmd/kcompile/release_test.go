package main

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"debug/buildinfo"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// releaseTestVersion is the version the release test stamps.
const releaseTestVersion = "v0.0.0-releasetest.1"

// TestRelease runs scripts/release once into a temporary directory and
// checks what it made: kcompile's `version` output (version, commit, the
// Kubernetes release), SHA256SUMS against the files, the static binaries'
// architectures, the SBOM with the SPDX project's own parser
// (.bin/spdxcheck, see tools/sbom), and that kcompile for amd64 built on
// its own into another directory has the same bytes. It fails when
// scripts/tools has not built .bin/syft and .bin/spdxcheck.
func TestRelease(t *testing.T) {
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
		t.Skipf("runs the linux/amd64 release binaries; this is %s/%s", runtime.GOOS, runtime.GOARCH)
	}
	testBin(t, "syft")
	spdxcheck := testBin(t, "spdxcheck")
	head := strings.TrimSpace(releaseOutput(t, "git", "rev-parse", "HEAD"))
	// The versions of the modules the release links, as its go.mod pins
	// them (scripts/release builds outside the workspace).
	mods := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(releaseOutput(t, "go", "list", "-m", "-f", "{{.Path}} {{.Version}}", "k8s.io/api", "cuelang.org/go")), "\n") {
		path, v, _ := strings.Cut(line, " ")
		mods[path] = v
	}
	wantKubernetes, ok := kubernetesRelease(mods["k8s.io/api"])
	if !ok {
		t.Fatalf("k8s.io/api is at %q, not a Kubernetes staging release", mods["k8s.io/api"])
	}

	// kcompile for amd64 alone first, into another directory, and right
	// after it the whole release, whose first build is the same: the
	// reproducibility check below compares the two, and the sources
	// cannot change in between but in a work tree being edited.
	again := t.TempDir()
	releaseRun(t, again, "--only", "kcompile-linux-amd64")
	dir := t.TempDir()
	releaseRun(t, dir)
	amd64 := "kcompile-" + releaseTestVersion + "-linux-amd64"
	arm64 := "kcompile-" + releaseTestVersion + "-linux-arm64"
	sim := "kcompile-sim-" + releaseTestVersion + "-linux-amd64"
	sbom := "kcompile-" + releaseTestVersion + ".spdx.json"

	t.Run("version", func(t *testing.T) {
		bin := filepath.Join(dir, amd64)
		var v versionInfo
		if err := json.Unmarshal([]byte(releaseOutput(t, bin, "version", "-o", "json")), &v); err != nil {
			t.Fatal(err)
		}
		if v.Version != releaseTestVersion || v.Commit != head || v.Go != runtime.Version() || v.Kubernetes != wantKubernetes || len(v.Schemas) == 0 {
			t.Errorf("version -o json = %+v; want version %s, commit %s, %s, kubernetes %s and the schemas", v, releaseTestVersion, head, runtime.Version(), wantKubernetes)
		}
		text := releaseOutput(t, bin, "version")
		modified := ""
		if v.Modified {
			modified = ", modified"
		}
		first := "kcompile " + releaseTestVersion + " (" + runtime.Version() + ", commit " + head + modified + ")\n"
		if !strings.HasPrefix(text, first+"kubernetes "+wantKubernetes+"\nschema ") {
			t.Errorf("version printed\n%s\nwant it to start with\n%skubernetes %s\nschema ...", text, first, wantKubernetes)
		}
	})

	t.Run("SHA256SUMS", func(t *testing.T) {
		sums, err := os.ReadFile(filepath.Join(dir, "SHA256SUMS"))
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		sc := bufio.NewScanner(bytes.NewReader(sums))
		for sc.Scan() {
			// sha256sum's format: the digest, a space, a space (text
			// mode) or an asterisk (binary mode), the name.
			sum, name, ok := strings.Cut(sc.Text(), " ")
			if !ok || len(name) < 2 || (name[0] != ' ' && name[0] != '*') {
				t.Fatalf("SHA256SUMS: line %q is not in sha256sum's format", sc.Text())
			}
			name = name[1:]
			b, err := os.ReadFile(filepath.Join(dir, name))
			if err != nil {
				t.Fatal(err)
			}
			if got := sha256.Sum256(b); hex.EncodeToString(got[:]) != sum {
				t.Errorf("SHA256SUMS: %s is %x, not %s", name, got, sum)
			}
			names = append(names, name)
		}
		slices.Sort(names)
		want := []string{amd64, arm64, sim, sbom}
		slices.Sort(want)
		if !slices.Equal(names, want) {
			t.Errorf("SHA256SUMS names %q, want %q", names, want)
		}
	})

	t.Run("binaries", func(t *testing.T) {
		for _, c := range []struct {
			name    string
			machine elf.Machine
			goarch  string
		}{{amd64, elf.EM_X86_64, "amd64"}, {arm64, elf.EM_AARCH64, "arm64"}, {sim, elf.EM_X86_64, "amd64"}} {
			path := filepath.Join(dir, c.name)
			f, err := elf.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			if f.Machine != c.machine {
				t.Errorf("%s is for %s, want %s", c.name, f.Machine, c.machine)
			}
			for _, p := range f.Progs {
				if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
					t.Errorf("%s is dynamically linked (%s)", c.name, p.Type)
				}
			}
			if f.Section(".symtab") != nil {
				t.Errorf("%s has a symbol table (not built with -s)", c.name)
			}
			f.Close()
			info, err := buildinfo.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			settings := map[string]string{}
			for _, s := range info.Settings {
				settings[s.Key] = s.Value
			}
			if settings["GOARCH"] != c.goarch || settings["CGO_ENABLED"] != "0" || settings["-trimpath"] != "true" || info.GoVersion != runtime.Version() {
				t.Errorf("%s was built with %s and %v", c.name, info.GoVersion, info.Settings)
			}
			// Go records no -ldflags under -trimpath: the stamped version
			// is looked for in the bytes (the arm64 build cannot be run).
			if c.name != sim {
				b, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Contains(b, []byte(releaseTestVersion)) {
					t.Errorf("%s does not hold its version %s", c.name, releaseTestVersion)
				}
			}
		}
	})

	t.Run("SBOM", func(t *testing.T) {
		// The SBOM describes kcompile at the release's version, and names
		// kcompile's and the simulator's modules, a module kcompile links
		// at the version go.mod pins, the Kubernetes the simulator links
		// (the release kcompile targets) and the Go standard library the
		// binaries were built with.
		out, err := exec.Command(spdxcheck, filepath.Join(dir, sbom),
			"kcompile@"+releaseTestVersion,
			"github.com/kcompile/kcompile",
			"github.com/kcompile/kcompile/runtimes/sim",
			"cuelang.org/go@"+mods["cuelang.org/go"],
			"k8s.io/kubernetes@v"+wantKubernetes,
			"stdlib@"+runtime.Version(),
		).CombinedOutput()
		if err != nil {
			t.Fatalf("spdxcheck: %v\n%s", err, out)
		}
		t.Logf("spdxcheck:\n%s", out)
	})

	// Reproducible: the same sources built twice, into two directories,
	// give the same bytes.
	t.Run("reproducible", func(t *testing.T) {
		a, err := os.ReadFile(filepath.Join(dir, amd64))
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(again, amd64))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a, b) {
			t.Errorf("%s differs between two builds of the same sources (or were they edited in between?)", amd64)
		}
	})
}

// releaseRun runs scripts/release for the test version into dir; the work
// tree is being edited, so it is let be dirty.
func releaseRun(t *testing.T, dir string, flags ...string) {
	t.Helper()
	args := append([]string{"--allow-dirty"}, flags...)
	args = append(args, releaseTestVersion, dir)
	cmd := exec.Command("../../scripts/release", args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("scripts/release %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	t.Logf("scripts/release %s:\n%s", strings.Join(args, " "), out)
}

// releaseOutput runs a command in the module outside the workspace (as
// scripts/release builds) and returns its standard output.
func releaseOutput(t *testing.T, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), "GOWORK=off")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, stderr.Bytes())
	}
	return string(out)
}
