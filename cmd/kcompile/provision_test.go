package main

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kcompile/kcompile/internal/fixture"
	"github.com/kcompile/kcompile/targets/ignition"
)

// testBin is a program scripts/tools built into .bin.
func testBin(t *testing.T, name string) string {
	t.Helper()
	p, err := filepath.Abs("../../.bin/" + name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s is missing: run scripts/tools first", p)
	}
	return p
}

// matchboxTLS writes a CA, Matchbox's gRPC server certificate for
// 127.0.0.1 and a client certificate into dir.
func matchboxTLS(t *testing.T, dir string) {
	t.Helper()
	now := time.Now()
	newKey := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	write := func(name, typ string, der []byte) {
		if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	caKey := newKey()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "matchbox-ca"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	write("ca.crt", "CERTIFICATE", caDER)
	for i, leaf := range []struct {
		name  string
		usage x509.ExtKeyUsage
	}{{"server", x509.ExtKeyUsageServerAuth}, {"client", x509.ExtKeyUsageClientAuth}} {
		k := newKey()
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(int64(i + 2)), Subject: pkix.Name{CommonName: leaf.name},
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
			ExtKeyUsage: []x509.ExtKeyUsage{leaf.usage}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		write(leaf.name+".crt", "CERTIFICATE", der)
		kder, err := x509.MarshalPKCS8PrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		write(leaf.name+".key", "PRIVATE KEY", kder)
	}
}

// freePort is a loopback port nothing listens on right now.
func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// startMatchbox runs the real Matchbox on loopback: gRPC API with mutual
// TLS, HTTP for booting machines. It returns both addresses.
func startMatchbox(t *testing.T, tlsDir string) (rpc, httpAddr string) {
	t.Helper()
	rpc, httpAddr = freePort(t), freePort(t)
	data := t.TempDir()
	cmd := exec.Command(testBin(t, "matchbox"), "-address", httpAddr, "-rpc-address", rpc,
		"-data-path", data, "-assets-path", "", "-log-level", "warn",
		"-ca-file", filepath.Join(tlsDir, "ca.crt"), "-cert-file", filepath.Join(tlsDir, "server.crt"),
		"-key-file", filepath.Join(tlsDir, "server.key"))
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			t.Logf("matchbox log:\n%s", log.String())
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get("http://" + httpAddr + "/")
		if err == nil {
			resp.Body.Close()
			if c, err := net.Dial("tcp", rpc); err == nil {
				c.Close()
				return rpc, httpAddr
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("matchbox did not start: %v\n%s", err, log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// fetch GETs a Matchbox HTTP path; a 404 gives nil.
func fetch(t *testing.T, httpAddr, path string) []byte {
	t.Helper()
	resp, err := http.Get("http://" + httpAddr + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	switch resp.StatusCode {
	case http.StatusOK:
		return body
	case http.StatusNotFound:
		return nil
	}
	t.Fatalf("GET %s: %s\n%s", path, resp.Status, body)
	return nil
}

// kcompile runs the CLI in-process.
func kcompile(t *testing.T, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var o, e bytes.Buffer
	code = run(args, strings.NewReader(stdin), &o, &e)
	return code, o.String(), e.String()
}

// provisionEnv makes provisioning reproducible and offline: a fixed clock,
// and a tofu that installs the Matchbox provider from the mirror
// scripts/tools fills.
func provisionEnv(t *testing.T) {
	t.Helper()
	rc := filepath.Join(t.TempDir(), "tofurc")
	cfg := fmt.Sprintf(`provider_installation {
  filesystem_mirror {
    path    = %q
    include = ["registry.opentofu.org/poseidon/matchbox"]
  }
}
`, testBin(t, "providers"))
	if err := os.WriteFile(rc, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TF_CLI_CONFIG_FILE", rc)
	t.Setenv("CHECKPOINT_DISABLE", "1")
	t.Setenv("SOURCE_DATE_EPOCH", "1780272000")
}

// provisionExample starts a Matchbox and copies examples/NAME, whose
// boot.matchboxURL is url, to a spec directory pointing at it; it returns
// Matchbox's HTTP address, the spec, a work directory, the output
// directory and the kcompile provision command for them.
func provisionExample(t *testing.T, name, url string) (httpAddr, spec, work, out string, provision []string) {
	t.Helper()
	provisionEnv(t)
	tlsDir := t.TempDir()
	matchboxTLS(t, tlsDir)
	rpc, httpAddr := startMatchbox(t, tlsDir)
	spec = t.TempDir()
	if err := os.CopyFS(spec, os.DirFS("../../examples/"+name)); err != nil {
		t.Fatal(err)
	}
	// Booting machines reach this Matchbox.
	replaceIn(t, filepath.Join(spec, "cluster.cue"), `matchboxURL: "`+url+`"`, `matchboxURL: "http://`+httpAddr+`"`)
	work = t.TempDir()
	out = filepath.Join(work, "out")
	provision = []string{"provision", spec, "-s", testSecrets(t), "-d", out,
		"--matchbox-endpoint", rpc, "--tofu", testBin(t, "tofu"),
		"--matchbox-ca", filepath.Join(tlsDir, "ca.crt"),
		"--matchbox-cert", filepath.Join(tlsDir, "client.crt"), "--matchbox-key", filepath.Join(tlsDir, "client.key")}
	return httpAddr, spec, work, out, provision
}

// hexhyp is a MAC address as iPXE's ${mac:hexhyp} writes it.
func hexhyp(mac string) string { return strings.ReplaceAll(mac, ":", "-") }

// TestProvisionMatchbox provisions examples/ha-stacked into a real
// Matchbox through real OpenTofu and the real provider, then boots each
// node as far as cloud-init's own NoCloud code fetching its files.
func TestProvisionMatchbox(t *testing.T) {
	httpAddr, spec, work, out, provision := provisionExample(t, "ha-stacked", "http://10.0.0.5:8080")

	code, stdout, stderr := kcompile(t, "", append(provision, "--auto-approve")...)
	if code != 0 {
		t.Fatalf("first provision: exit %d\n%s%s", code, stdout, stderr)
	}
	if !strings.Contains(stdout, "plan: 11 to add, 0 to change, 0 to replace, 0 to destroy") ||
		!strings.Contains(stdout, `+   matchbox_group.node["w06"]`) || !strings.Contains(stdout, `+   matchbox_profile.role["control-plane"]`) {
		t.Errorf("first provision printed:\n%s", stdout)
	}

	// What Matchbox serves is what the cloudinit target builds.
	if code, o, e := kcompile(t, "", "build", spec, "-s", testSecrets(t), "-t", "cloudinit", "-d", filepath.Join(work, "built")); code != 0 {
		t.Fatalf("build: %s%s", o, e)
	}
	macs := map[string]string{"cp1": "52:54:00:00:00:11", "cp2": "52:54:00:00:00:12", "cp3": "52:54:00:00:00:13",
		"w01": "52:54:00:00:01:10", "w02": "52:54:00:00:01:11", "w03": "52:54:00:00:01:12",
		"w04": "52:54:00:00:01:13", "w05": "52:54:00:00:01:14", "w06": "52:54:00:00:01:15"}
	for node, mac := range macs {
		checkServed(t, httpAddr, filepath.Join(work, "built", "cloudinit", "nodes", node), mac)
	}
	// An unknown machine gets nothing.
	if b := fetch(t, httpAddr, "/generic?mac=52-54-00-ff-ff-ff&file=user-data"); b != nil {
		t.Errorf("an unknown MAC was served %d bytes", len(b))
	}
	checkStatePrivate(t, out)

	// Nothing changed: nothing to do.
	code, stdout, stderr = kcompile(t, "", provision...)
	if code != 0 || !strings.Contains(stdout, "plan: no changes") || strings.Contains(stdout, "Apply these changes") {
		t.Fatalf("second provision: exit %d\n%s%s", code, stdout, stderr)
	}

	// Replace w03's network card: exactly that node's group is replaced.
	replaceIn(t, filepath.Join(spec, "workers.cue"), `"52:54:00:00:01:12"`, `"52:54:00:00:01:99"`)
	code, stdout, stderr = kcompile(t, "no\n", provision...)
	if code != 1 || !strings.Contains(stderr, "not applied") {
		t.Fatalf("declined provision: exit %d\n%s%s", code, stdout, stderr)
	}
	if b := fetch(t, httpAddr, "/generic?mac=52-54-00-00-01-12"); b == nil {
		t.Error("declining the plan changed Matchbox")
	}
	code, stdout, stderr = kcompile(t, "yes\n", provision...)
	if code != 0 {
		t.Fatalf("third provision: exit %d\n%s%s", code, stdout, stderr)
	}
	changes := regexp.MustCompile(`(?m)^  (\+|~|-/\+|-)\s+(\S+)$`).FindAllStringSubmatch(stdout, -1)
	if len(changes) != 1 || changes[0][1] != "-/+" || changes[0][2] != `matchbox_group.node["w03"]` ||
		!strings.Contains(stdout, "plan: 0 to add, 0 to change, 1 to replace, 0 to destroy") {
		t.Errorf("changing w03 planned:\n%s", stdout)
	}
	if b := fetch(t, httpAddr, "/generic?mac=52-54-00-00-01-12"); b != nil {
		t.Error("w03's old MAC is still served")
	}
	if code, o, e := kcompile(t, "", "build", spec, "-s", testSecrets(t), "-t", "cloudinit", "-d", filepath.Join(work, "built")); code != 0 {
		t.Fatalf("build: %s%s", o, e)
	}
	checkServed(t, httpAddr, filepath.Join(work, "built", "cloudinit", "nodes", "w03"), "52:54:00:00:01:99")

	// Tear down.
	code, stdout, stderr = kcompile(t, "", append(provision, "--destroy", "--auto-approve")...)
	if code != 0 || !strings.Contains(stdout, "destroy plan: 0 to add, 0 to change, 0 to replace, 11 to destroy") {
		t.Fatalf("destroy: exit %d\n%s%s", code, stdout, stderr)
	}
	for _, mac := range []string{"52:54:00:00:00:11", "52:54:00:00:01:99"} {
		if b := fetch(t, httpAddr, "/generic?mac="+hexhyp(mac)); b != nil {
			t.Errorf("%s is still served after destroy", mac)
		}
	}
	checkStatePrivate(t, out)
}

// checkServed fetches a node's files from Matchbox by MAC and compares
// them with the built ones, then lets cloud-init's NoCloud data source
// read them the way it does on a booting machine: from the kernel
// arguments of the iPXE script Matchbox serves for that MAC.
func checkServed(t *testing.T, httpAddr, nodeDir, mac string) {
	t.Helper()
	want := map[string][]byte{}
	for _, f := range []string{"user-data", "meta-data", "network-config"} {
		b, err := os.ReadFile(filepath.Join(nodeDir, f))
		if err != nil {
			t.Fatal(err)
		}
		want[f] = b
		if got := fetch(t, httpAddr, "/generic?mac="+hexhyp(mac)+"&file="+f); !bytes.Equal(got, b) {
			t.Errorf("%s: Matchbox serves %d bytes of %s for %s, want the %d compiled", nodeDir, len(got), f, mac, len(b))
		}
	}
	if got := fetch(t, httpAddr, "/generic?mac="+mac); !bytes.Equal(got, want["user-data"]) {
		t.Errorf("%s: /generic without file is not the user-data", nodeDir)
	}
	if got := fetch(t, httpAddr, "/generic?mac="+mac+"&file=vendor-data"); got == nil || len(got) != 0 {
		t.Errorf("%s: vendor-data is %q, want empty", nodeDir, got)
	}

	script := string(fetch(t, httpAddr, "/ipxe?mac="+hexhyp(mac)))
	var cmdline string
	for _, l := range strings.Split(script, "\n") {
		if rest, ok := strings.CutPrefix(l, "kernel "); ok {
			_, cmdline, _ = strings.Cut(rest, " ")
		}
	}
	if !strings.Contains(cmdline, "console=ttyS0,115200n8") {
		t.Fatalf("iPXE script for %s lacks the spec's kernel arguments:\n%s", mac, script)
	}
	// What iPXE does to the line before booting.
	cmdline = strings.ReplaceAll(cmdline, "${mac:hexhyp}", hexhyp(mac))
	const nocloud = `
import base64, json, sys
from cloudinit.sources import DataSourceNoCloud as ds
from cloudinit import util
fill = {}
if not ds.parse_cmdline_data("ds=nocloud-net", fill, sys.argv[1]):
    sys.exit("cloud-init does not see a NoCloud seed in the kernel arguments")
md, ud, vd = util.read_seeded(fill["seedfrom"], timeout=5, retries=0)
json.dump({"seedfrom": fill["seedfrom"], "md": md, "ud": base64.b64encode(ud).decode(), "vd": base64.b64encode(vd or b"").decode()}, sys.stdout)
`
	outb, err := exec.Command("/usr/bin/python3", "-c", nocloud, cmdline).CombinedOutput()
	if err != nil {
		t.Fatalf("cloud-init NoCloud for %s: %v\n%s", mac, err, outb)
	}
	var seeded struct {
		Seedfrom string         `json:"seedfrom"`
		MD       map[string]any `json:"md"`
		UD, VD   string
	}
	if err := json.Unmarshal(outb, &seeded); err != nil {
		t.Fatalf("%v: %s", err, outb)
	}
	ud, _ := base64.StdEncoding.DecodeString(seeded.UD)
	if !bytes.Equal(ud, want["user-data"]) {
		t.Errorf("%s: cloud-init read %d bytes of user-data from %s, want the %d compiled", nodeDir, len(ud), seeded.Seedfrom, len(want["user-data"]))
	}
	if seeded.VD != "" {
		t.Errorf("%s: cloud-init read vendor-data %q", nodeDir, seeded.VD)
	}
	node := filepath.Base(nodeDir)
	if seeded.MD["local-hostname"] != node || seeded.MD["instance-id"] != "prod-eu1-"+node {
		t.Errorf("%s: cloud-init read meta-data %v", nodeDir, seeded.MD)
	}
}

func replaceIn(t *testing.T, file, old, new string) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte(old)) {
		t.Fatalf("%s has no %q", file, old)
	}
	if err := os.WriteFile(file, bytes.Replace(b, []byte(old), []byte(new), 1), 0o644); err != nil {
		t.Fatal(err)
	}
}

// checkStatePrivate: the state holds the nodes' private keys.
func checkStatePrivate(t *testing.T, out string) {
	t.Helper()
	dir := filepath.Join(out, "terraform-state")
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o700 {
		t.Errorf("%s has mode %o, want 700", dir, fi.Mode().Perm())
	}
	for _, f := range []string{"terraform.tfstate", "terraform.tfstate.backup"} {
		if fi, err := os.Stat(filepath.Join(dir, f)); err == nil && fi.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %o, want 600", f, fi.Mode().Perm())
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "kcompile.tfplan")); err == nil {
		t.Error("the plan file (with secrets in it) was left behind")
	}
}

// TestProvisionUnreachable: a Matchbox that does not answer is reported
// plainly, well within 30 s, and nothing is written or provisioned.
func TestProvisionUnreachable(t *testing.T) {
	provisionEnv(t)
	tlsDir := t.TempDir()
	matchboxTLS(t, tlsDir)
	// One endpoint refuses connections; the other accepts them and never
	// speaks, as a firewall or a hung server would.
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	for _, endpoint := range []string{freePort(t), silent.Addr().String()} {
		out := filepath.Join(t.TempDir(), "out")
		start := time.Now()
		code, stdout, stderr := kcompile(t, "", "provision", "../../examples/ha-stacked", "-s", testSecrets(t),
			"-d", out, "--matchbox-endpoint", endpoint, "--tofu", testBin(t, "tofu"), "--auto-approve",
			"--matchbox-ca", filepath.Join(tlsDir, "ca.crt"),
			"--matchbox-cert", filepath.Join(tlsDir, "client.crt"), "--matchbox-key", filepath.Join(tlsDir, "client.key"))
		if took := time.Since(start); took > 30*time.Second {
			t.Errorf("%s: gave up after %s", endpoint, took)
		}
		if code != 1 || !strings.Contains(stderr, "cannot reach Matchbox's gRPC API at "+endpoint) || !strings.Contains(stderr, "nothing was changed") {
			t.Errorf("%s: exit %d\n%s%s", endpoint, code, stdout, stderr)
		}
		if _, err := os.Stat(out); err == nil {
			t.Errorf("%s: %s was written", endpoint, out)
		}
	}
}

// TestProvisionMatchboxIgnition provisions examples/flatcar (Flatcar and
// Fedora CoreOS nodes) into a real Matchbox through real OpenTofu, then
// fetches each node's config as its booting machine would: the iPXE
// script Matchbox serves for its MAC names ignition.config.url, and that
// URL, with the MAC iPXE fills in, answers the compiled config, which
// Ignition's own validator accepts.
func TestProvisionMatchboxIgnition(t *testing.T) {
	httpAddr, spec, work, out, provision := provisionExample(t, "flatcar", "http://10.20.0.5:8080")
	code, stdout, stderr := kcompile(t, "", append(provision, "--auto-approve")...)
	if code != 0 {
		t.Fatalf("provision: exit %d\n%s%s", code, stdout, stderr)
	}
	if !strings.Contains(stdout, "plan: 8 to add, 0 to change, 0 to replace, 0 to destroy") ||
		!strings.Contains(stdout, `+   matchbox_profile.ignition["fc1"]`) {
		t.Errorf("provision printed:\n%s", stdout)
	}
	if code, o, e := kcompile(t, "", "build", spec, "-s", testSecrets(t), "-t", "ignition", "-d", filepath.Join(work, "built")); code != 0 {
		t.Fatalf("build: %s%s", o, e)
	}
	macs := map[string]string{"cp1": "52:54:00:20:00:11", "w1": "52:54:00:20:00:21", "w2": "52:54:00:20:00:22", "fc1": "52:54:00:20:00:31"}
	for node, mac := range macs {
		want, err := os.ReadFile(filepath.Join(work, "built", "ignition", "nodes", node, ignition.ConfigName))
		if err != nil {
			t.Fatal(err)
		}
		script := string(fetch(t, httpAddr, "/ipxe?mac="+hexhyp(mac)))
		var url string
		for _, arg := range strings.Fields(script) {
			if u, ok := strings.CutPrefix(arg, "ignition.config.url="); ok {
				url = strings.ReplaceAll(u, "${mac:hexhyp}", hexhyp(mac))
			}
		}
		first := "flatcar.first_boot=yes"
		if node == "fc1" {
			first = "ignition.platform.id=metal"
		}
		if !strings.HasPrefix(url, "http://"+httpAddr+"/") || !strings.Contains(script, first) {
			t.Fatalf("%s: the iPXE script does not point Ignition at Matchbox:\n%s", node, script)
		}
		holdIPXE(t, node, script)
		goldenIPXE(t, node, strings.ReplaceAll(script, httpAddr, "10.20.0.5:8080"))
		got := fetch(t, httpAddr, strings.TrimPrefix(url, "http://"+httpAddr))
		if !bytes.Equal(got, want) {
			t.Errorf("%s: Matchbox serves %d bytes at %s, want the %d compiled", node, len(got), url, len(want))
		}
		if err := ignition.Validate(got); err != nil {
			t.Errorf("%s: what Matchbox serves: %v", node, err)
		}
	}
	if b := fetch(t, httpAddr, "/ignition?mac=52-54-00-ff-ff-ff"); b != nil {
		t.Errorf("an unknown MAC was served %d bytes", len(b))
	}
	checkStatePrivate(t, out)
	code, stdout, stderr = kcompile(t, "", append(provision, "--destroy", "--auto-approve")...)
	if code != 0 || !strings.Contains(stdout, "8 to destroy") {
		t.Fatalf("destroy: exit %d\n%s%s", code, stdout, stderr)
	}
}

// holdIPXE holds the iPXE script Matchbox serves a node to what each
// firmware needs of it. BIOS machines (undionly.kpxe) and UEFI ones
// (ipxe.efi) run the same script: under BIOS, iPXE hands the initrds to
// the kernel through the boot protocol, and the command line must carry
// Ignition's arguments; under UEFI, the kernel's EFI stub loads only the
// initrds named on its command line (initrd=NAME), NAME being what iPXE
// calls the image (--name, or the last segment of its URL), and an
// initrd= naming no image would fail the boot.
func holdIPXE(t *testing.T, node, script string) {
	t.Helper()
	var args []string
	var images []string
	for _, line := range strings.Split(script, "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 2 && f[0] == "kernel":
			args = f[2:]
		case len(f) >= 2 && f[0] == "initrd":
			name := path.Base(f[len(f)-1])
			if len(f) == 4 && f[1] == "--name" {
				name = f[2]
			}
			images = append(images, name)
		}
	}
	if len(images) == 0 {
		t.Fatalf("%s: the script loads no initrd:\n%s", node, script)
	}
	// BIOS: the first boot and the config's URL are on the command line.
	first := map[bool][]string{true: {"ignition.firstboot", "ignition.platform.id=metal"}, false: {"flatcar.first_boot=yes"}}[node == "fc1"]
	for _, want := range first {
		if !slices.Contains(args, want) {
			t.Errorf("%s (BIOS): the command line lacks %s: %q", node, want, args)
		}
	}
	// UEFI: every image named, and every name an image.
	named := map[string]bool{}
	for _, a := range args {
		if n, ok := strings.CutPrefix(a, "initrd="); ok {
			named[n] = true
			if !slices.Contains(images, n) {
				t.Errorf("%s (UEFI): initrd=%s names no image the script loads (%q)", node, n, images)
			}
		}
	}
	for _, img := range images {
		if !named[img] {
			t.Errorf("%s (UEFI): the kernel would not load initrd %s: no initrd=%s in %q", node, img, img, args)
		}
	}
}

// goldenIPXE compares the script Matchbox serves a node, for BIOS and
// UEFI machines alike, with golden/flatcar/matchbox/NODE.ipxe;
// KCOMPILE_UPDATE=1 rewrites it.
func goldenIPXE(t *testing.T, node, script string) {
	t.Helper()
	p := fixture.Path("golden/flatcar/matchbox/" + node + ".ipxe")
	if os.Getenv("KCOMPILE_UPDATE") != "" {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(script), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(p)
	if err != nil || string(want) != script {
		t.Errorf("%s: Matchbox serves\n%s\nnot %s (%v); KCOMPILE_UPDATE=1 rewrites it", node, script, p, err)
	}
}
