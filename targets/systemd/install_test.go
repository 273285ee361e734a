package systemd

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/kcompile/kcompile/compiler"
	"github.com/kcompile/kcompile/compiler/ir"
	"github.com/kcompile/kcompile/layout"
)

// fakeBinary is a program that prints a version, standing in for a real
// one in the install tests.
func fakeBinary(version string) []byte {
	return []byte("#!/bin/sh\necho '" + version + "'\n")
}

func targz(t *testing.T, files map[string][]byte) []byte {
	var b bytes.Buffer
	gz := gzip.NewWriter(&b)
	tw := tar.NewWriter(gz)
	for _, name := range sortedPaths(files) {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o755, Size: int64(len(files[name]))}); err != nil {
			t.Fatal(err)
		}
		tw.Write(files[name])
	}
	tw.Close()
	gz.Close()
	return b.Bytes()
}

func hexsum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// runInstall runs the node's install script with its list under DESTDIR.
func runInstall(t *testing.T, list []byte, dest string) (string, error) {
	t.Helper()
	dir := t.TempDir()
	script := filepath.Join(dir, "install.sh")
	listPath := filepath.Join(dir, "binaries.list")
	writeFile(t, script, []byte(installScriptText), 0o755)
	writeFile(t, listPath, list, 0o644)
	cmd := exec.Command("/bin/sh", script, listPath)
	cmd.Env = append(os.Environ(), "DESTDIR="+dest)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestInstallDownload serves the artifacts of a single-node cluster on
// loopback, runs the generated installer against them, and checks that
// it installs and verifies everything, does not download again on the
// next boot, and refuses an artifact whose checksum differs.
func TestInstallDownload(t *testing.T) {
	// Each binary differs, so that no two artifacts share a checksum.
	kube := func(name string) []byte { return fakeBinary("Kubernetes v1.37.2 (" + name + ")") }
	served := map[string][]byte{
		"/etcd":                    fakeBinary("etcd Version: 3.6.16"),
		"/kube-apiserver":          kube("kube-apiserver"),
		"/kube-controller-manager": kube("kube-controller-manager"),
		"/kube-scheduler":          kube("kube-scheduler"),
		"/kubelet":                 kube("kubelet"),
		"/kube-proxy":              kube("kube-proxy"),
		"/runc":                    fakeBinary("runc version 1.3.0"),
		"/containerd.tar.gz": targz(t, map[string][]byte{
			"bin/containerd":              fakeBinary("containerd github.com/containerd/containerd/v2 v2.1.4 abcdef"),
			"bin/containerd-shim-runc-v2": fakeBinary("shim"),
			"bin/ctr":                     fakeBinary("ctr"),
		}),
		"/cni.tgz": targz(t, map[string][]byte{"./loopback": fakeBinary("cni"), "./bridge": fakeBinary("cni"),
			"./host-local": fakeBinary("cni"), "./portmap": fakeBinary("cni")}),
	}
	var requests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		b, ok := served[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Write(b)
	}))
	defer srv.Close()

	spec := `package cluster

apiVersion: "kcompile.dev/v1alpha1"
name: "dl"
kubernetes: version: "1.37.2"
controlPlane: {schedulable: true, nodes: box: address: "10.0.0.11"}
network: nodes: ["10.0.0.0/16"]
install: source: "download"
`
	for _, name := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy", "runc"} {
		spec += fmt.Sprintf("install: artifacts: %q: {url: %q, sha256: %q, path: %q}\n", name, srv.URL+"/"+name, hexsum(served["/"+name]), ir.OSDebian.BinDir()+"/"+name)
	}
	spec += fmt.Sprintf(`install: artifacts: containerd: {url: %q, sha256: %q, extract: {"bin/containerd": "/usr/local/bin/containerd", "bin/containerd-shim-runc-v2": "/usr/local/bin/containerd-shim-runc-v2"}}
install: artifacts: cni: {url: %q, sha256: %q, extract: {"./loopback": "/opt/cni/bin/loopback", "./bridge": "/opt/cni/bin/bridge", "./host-local": "/opt/cni/bin/host-local", "./portmap": "/opt/cni/bin/portmap"}}
`, srv.URL+"/containerd.tar.gz", hexsum(served["/containerd.tar.gz"]), srv.URL+"/cni.tgz", hexsum(served["/cni.tgz"]))
	dir := t.TempDir()
	c, diags := compiler.Compile(compiler.Source{Dir: dir, Overlay: map[string][]byte{"spec.cue": []byte(spec)}})
	if c == nil {
		t.Fatalf("spec does not compile: %v", diags)
	}
	list, err := binariesList(c, c.Nodes[0])
	if err != nil {
		t.Fatal(err)
	}
	dest := t.TempDir()
	if out, err := runInstall(t, list, dest); err != nil {
		t.Fatalf("install failed: %v\n%s\nlist:\n%s", err, out, list)
	}
	for _, p := range []string{"/usr/local/bin/kubelet", "/usr/local/bin/containerd", "/opt/cni/bin/portmap", "/usr/local/bin/etcd"} {
		fi, err := os.Stat(filepath.Join(dest, p))
		if err != nil || fi.Mode().Perm() != 0o755 {
			t.Errorf("%s not installed executable: %v", p, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dest, "usr/local/bin/ctr")); err == nil {
		t.Error("an archive member nobody needs was installed")
	}
	// The next boot finds everything in place and downloads nothing.
	before := requests.Load()
	if out, err := runInstall(t, list, dest); err != nil {
		t.Fatalf("second run failed: %v\n%s", err, out)
	}
	if requests.Load() != before {
		t.Errorf("the second run downloaded %d files again", requests.Load()-before)
	}
	// A node whose config fetched the artifacts before the first boot
	// (Ignition's remote files): binaries at their paths, archives in the
	// cache by sha256. The installer downloads nothing; a cached archive
	// that does not match its sum is downloaded again.
	laid := t.TempDir()
	for _, a := range c.Install.Artifacts {
		data := served["/"+filepath.Base(a.URL)]
		if a.Path != "" {
			writeFile(t, filepath.Join(laid, a.Path), data, 0o755)
			continue
		}
		if a.Name == "cni" {
			data = []byte("not the archive")
		}
		writeFile(t, filepath.Join(laid, layout.ArtifactCacheDir, a.SHA256), data, 0o644)
	}
	before = requests.Load()
	if out, err := runInstall(t, list, laid); err != nil {
		t.Fatalf("install from what the config laid failed: %v\n%s", err, out)
	}
	if got := requests.Load() - before; got != 1 {
		t.Errorf("install from what the config laid made %d requests, want 1 (the broken cached archive)", got)
	}
	if _, err := os.Stat(filepath.Join(laid, "opt/cni/bin/portmap")); err != nil {
		t.Errorf("the CNI plugins were not installed: %v", err)
	}
	// A tampered download is refused and nothing is installed.
	original := served["/kubelet"]
	served["/kubelet"] = fakeBinary("Kubernetes v1.37.2 (tampered)")
	fresh := t.TempDir()
	out, err := runInstall(t, list, fresh)
	if err == nil || !strings.Contains(out, "/kubelet does not have sha256 "+hexsum(original)) {
		t.Errorf("a tampered artifact was accepted: %v\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(fresh, "usr/local/bin/kubelet")); err == nil {
		t.Error("the tampered kubelet was installed")
	}
}

// TestInstallPreinstalled: with preinstalled binaries the installer only
// checks that each is there and reports the spec's version.
func TestInstallPreinstalled(t *testing.T) {
	c := compileExample(t, "single-node")
	n := c.Nodes[0]
	list, err := binariesList(c, n)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(list, []byte("file|")) || bytes.Contains(list, []byte("member|")) {
		t.Fatalf("preinstalled list downloads:\n%s", list)
	}
	dest := t.TempDir()
	for _, b := range n.Binaries {
		writeFile(t, filepath.Join(dest, b.Path), fakeBinary(b.Version), 0o755)
	}
	if out, err := runInstall(t, list, dest); err != nil {
		t.Fatalf("install check failed: %v\n%s", err, out)
	}
	writeFile(t, filepath.Join(dest, "usr/local/bin/kubelet"), fakeBinary("Kubernetes v1.36.9"), 0o755)
	out, err := runInstall(t, list, dest)
	if err == nil || !strings.Contains(out, "/usr/local/bin/kubelet reports 'Kubernetes v1.36.9', not Kubernetes v1.37.2") {
		t.Errorf("a kubelet of another version passed: %v\n%s", err, out)
	}
	os.Remove(filepath.Join(dest, "opt/cni/bin/loopback"))
	writeFile(t, filepath.Join(dest, "usr/local/bin/kubelet"), fakeBinary("Kubernetes v1.37.2"), 0o755)
	out, err = runInstall(t, list, dest)
	if err == nil || !strings.Contains(out, "/opt/cni/bin/loopback is missing") {
		t.Errorf("a missing CNI plugin passed: %v\n%s", err, out)
	}
}

// TestComponentsRequireInstall: no component starts before the binaries
// are checked.
func TestComponentsRequireInstall(t *testing.T) {
	c := compileExample(t, "ha-stacked")
	for _, u := range NodeUnits(c, c.Nodes[0], Options{}) {
		if u.Name == InstallUnit {
			continue
		}
		requires := strings.Join(u.Unit.Get("Unit", "Requires"), " ")
		if !strings.Contains(requires, InstallUnit) {
			t.Errorf("%s does not require %s", u.Name, InstallUnit)
		}
	}
}

// TestInstallRefusesTamperedLists: the installer runs as root and reads
// its list from the node's disk; a line whose fields do not have their
// shape (a value that escaped the compiler's checks, or an edit on the
// machine) is refused before anything runs, naming the line.
func TestInstallRefusesTamperedLists(t *testing.T) {
	dest := t.TempDir()
	marker := filepath.Join(dest, "pwned")
	writeFile(t, filepath.Join(dest, "usr/local/bin/kubelet"), fakeBinary("Kubernetes v1.37.2"), 0o755)
	for _, line := range []string{
		"version|/usr/local/bin/kubelet|--version|Kubernetes v1.37.2|extra",
		"version|/usr/local/bin/kubelet|--version|Kubernetes v1.37.2|x|y",
		"version|/usr/local/bin/kubelet|-c touch " + marker + "|x",
		"version|/usr/local/bin/kubelet|--version|$(touch " + marker + ")",
		"exists|/usr/local/bin/../../../bin/sh",
		"exists|relative/path",
		"file|/usr/local/bin/kubelet|" + strings.Repeat("0", 64) + "|-o" + marker,
		"file|/usr/local/bin/kubelet|not-a-sum|https://example.com/kubelet",
		"member|/usr/local/bin/kubelet|" + strings.Repeat("0", 64) + "|https://example.com/k.tgz|--to-command=touch " + marker,
		"member|/usr/local/bin/kubelet|" + strings.Repeat("0", 64) + "|https://example.com/k.tgz|../../etc/shadow",
		"bogus|/usr/local/bin/kubelet",
	} {
		out, err := runInstall(t, []byte("# list\n"+line+"\n"), dest)
		if err == nil || !strings.Contains(out, "line 2:") {
			t.Errorf("the installer took %q: %v\n%s", line, err, out)
		}
		if _, err := os.Stat(marker); err == nil {
			t.Fatalf("%q ran a command", line)
		}
	}
}

// TestListLineRefusesSeparators: the list writer never lets a field add a
// field or a line.
func TestListLineRefusesSeparators(t *testing.T) {
	for _, f := range []string{"a|b", "a\nversion|/bin/sh", "a\rb", "a\x00b"} {
		if _, err := listLine("exists", f); err == nil {
			t.Errorf("listLine took %q", f)
		}
	}
}
