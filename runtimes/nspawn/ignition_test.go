package nspawn

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/kcompile/kcompile/internal/fixture"
	"github.com/kcompile/kcompile/pipeline"
)

// ignitionBinaries are the programs examples/flatcar's install.cue names,
// by the last segment of their URLs, which up serves from --binaries.
var ignitionBinaries = []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy",
	"containerd", "containerd-shim-runc-v2", "runc", "loopback", "bridge", "host-local", "portmap"}

// ignitionOverlay is what a spec directory needs besides its files to
// boot here: examples/flatcar's install.cue where it has none, and a
// sha256.cue of the binaries up will serve in place of its own (the
// example's sums are of the builds of one machine).
func ignitionOverlay(t *testing.T, dir, binaries string) map[string][]byte {
	t.Helper()
	overlay := map[string][]byte{}
	if _, err := os.Stat(filepath.Join(dir, "install.cue")); err != nil {
		data, err := os.ReadFile(fixture.Path("examples/flatcar/install.cue"))
		if err != nil {
			t.Fatal(err)
		}
		overlay["install.cue"] = data
	}
	var b strings.Builder
	b.WriteString("package cluster\n\n_sha256: {\n")
	for _, name := range ignitionBinaries {
		sum, err := fileSHA256(filepath.Join(binaries, name))
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "\t%q: %q\n", name, sum)
	}
	b.WriteString("}\n")
	overlay["sha256.cue"] = []byte(b.String())
	return overlay
}

// console is what a machine printed on its console, its boots in turn.
func console(t *testing.T, c *Cluster, node string) string {
	t.Helper()
	for _, m := range c.p.machines {
		if m.name == node {
			data, err := os.ReadFile(m.console())
			if err != nil {
				t.Fatal(err)
			}
			return string(data)
		}
	}
	t.Fatalf("no machine %s", node)
	return ""
}

// checkIgnitionBoot holds a node to what its first boot from Ignition
// must have done: Ignition's stages ran once, the config's every file is
// there as compiled (the systemd tree's), its units enabled by the
// presets Ignition wrote, its user made in the family's sudo group with
// the spec's key, the binaries fetched from up's Matchbox, verified, and
// the first-boot flag gone.
func checkIgnitionBoot(t *testing.T, c *Cluster, out *pipeline.Output, node string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	log := console(t, c, node)
	if n := strings.Count(log, "Ignition's first boot"); n != 1 {
		t.Errorf("%s: Ignition's first boot began %d times:\n%s", node, n, tail([]byte(log), 3000))
	}
	for _, stage := range []string{"fetch-offline", "fetch", "files"} {
		if !strings.Contains(log, "Stage: "+stage) {
			t.Errorf("%s: Ignition's stage %s did not run:\n%s", node, stage, tail([]byte(log), 3000))
		}
	}
	assertCompiledFilesInMachine(t, c, out.Trees[pipeline.Systemd], node)
	var n = out.Cluster.Nodes[0]
	for _, x := range out.Cluster.Nodes {
		if x.Name == node {
			n = x
		}
	}
	group := "sudo"
	flag := "/boot/flatcar/first_boot"
	if n.OS == "fedora-coreos" {
		group, flag = "wheel", "/boot/ignition.firstboot"
	}
	for _, cmd := range [][]string{
		{"systemctl", "is-enabled", "kubelet.service", "containerd.service", "kcompile-install.service"},
		{"sh", "-c", "id -nG core | tr ' ' '\\n' | grep -qx " + group + " && grep -q 'ops@example.com' ~core/.ssh/authorized_keys"},
		{"test", "-s", "/etc/.ignition-result.json"},
		{"test", "!", "-e", flag},
		{"test", "!", "-e", "/run/ignition.json"},
	} {
		if got, err := c.Exec(ctx, node, cmd...); err != nil {
			t.Errorf("%s: %s: %v\n%s", node, strings.Join(cmd, " "), err, got)
		}
	}
	for _, b := range n.Binaries {
		if b.OS {
			continue
		}
		want, err := fileSHA256(filepath.Join(c.cfg.Binaries, filepath.Base(b.Path)))
		if err != nil {
			t.Fatal(err)
		}
		got, err := c.Exec(ctx, node, "sha256sum", b.Path)
		if err != nil || !strings.HasPrefix(string(got), want+" ") {
			t.Errorf("%s: %s is not the served binary: %v %s", node, b.Path, err, got)
		}
	}
}

// TestUpIgnition boots Flatcar and Fedora CoreOS nodes from their
// Ignition configs, served by up's Matchbox as a network boot reads them:
// a single node, then examples/flatcar (a control-plane node, two
// Flatcar workers and a Fedora CoreOS one). Each node's first boot runs
// Ignition's stages, which fetch the config and the binaries; the nodes
// are Ready, pods answer through a Service, and a second boot does not
// run Ignition again. bootIn's clean-up holds down to leaving nothing.
func TestUpIgnition(t *testing.T) {
	binaries, _ := bootInputs(t)
	t.Run("single-node", func(t *testing.T) {
		spec := fixture.Path("runtimes/nspawn/testdata/ignition-single")
		out := compileWith(t, spec, ignitionOverlay(t, spec, binaries), pipeline.Ignition)
		c := bootIn(t, out, pipeline.Ignition, filepath.Join(t.TempDir(), "work"), false)
		if log := c.cfg.Log.(*bytes.Buffer).String(); !strings.Contains(log, "Matchbox serving on 10.20.0.5:8080: 1 Ignition configs, 13 assets") {
			t.Errorf("up did not say it serves Matchbox:\n%s", log)
		}
		checkIgnitionBoot(t, c, out, "box")
		k := admin(t, c)
		runWorkload(t, k, []string{"box"})
		serviceAnswers(t, c, serviceIP(t, k), "box", "echo-box", time.Minute)

		ctx := context.Background()
		result := func() string {
			got, err := c.Exec(ctx, "box", "sh", "-c", "cat /etc/.ignition-result.json /etc/systemd/system-preset/20-ignition.preset")
			if err != nil {
				t.Fatalf("%v: %s", err, got)
			}
			return string(got)
		}
		before := result()
		rebooted := time.Now().Truncate(time.Second)
		if err := c.Reboot(ctx, "box"); err != nil {
			t.Fatal(err)
		}
		// The node comes back from what Ignition laid down: its kubelet
		// posts Ready after the reboot, flannel's pod runs again, and no
		// unit failed.
		eventually(t, 2*time.Minute, "box Ready, heard from after the reboot, and flannel running", func() error {
			var n corev1.Node
			if err := k.get(ctx, "/api/v1/nodes/box", &n); err != nil {
				return err
			}
			for _, cond := range n.Status.Conditions {
				if cond.Type == corev1.NodeReady && (cond.Status != corev1.ConditionTrue || !cond.LastHeartbeatTime.After(rebooted)) {
					return fmt.Errorf("Ready %s, last heard from %s", cond.Status, cond.LastHeartbeatTime)
				}
			}
			var pods corev1.PodList
			if err := k.get(ctx, "/api/v1/namespaces/kube-flannel/pods", &pods); err != nil {
				return err
			}
			for _, p := range pods.Items {
				for _, cs := range p.Status.ContainerStatuses {
					if r := cs.State.Running; r != nil && r.StartedAt.After(rebooted) {
						return nil
					}
				}
			}
			return fmt.Errorf("no flannel pod started since the reboot")
		})
		if log := console(t, c, "box"); strings.Count(log, "Ignition's first boot") != 1 || strings.Count(log, "Stage: files") != 1 {
			t.Errorf("Ignition ran again on the second boot:\n%s", tail([]byte(log), 4000))
		}
		if after := result(); after != before {
			t.Errorf("Ignition's result and presets changed on the second boot:\n%s\nnow\n%s", before, after)
		}
		if failed, err := c.Exec(ctx, "box", "systemctl", "list-units", "--failed", "--no-legend", "--plain"); err != nil || strings.TrimSpace(string(failed)) != "" {
			t.Errorf("failed units after the reboot: %v\n%s", err, failed)
		}
	})
	t.Run("control-plane-and-workers", func(t *testing.T) {
		spec := fixture.Path("examples/flatcar")
		out := compileWith(t, spec, ignitionOverlay(t, spec, binaries), pipeline.Ignition)
		c := bootIn(t, out, pipeline.Ignition, filepath.Join(t.TempDir(), "work"), false)
		for _, n := range []string{"cp1", "w1", "w2", "fc1"} {
			checkIgnitionBoot(t, c, out, n)
		}
		k := admin(t, c)
		workers := []string{"w1", "w2", "fc1"}
		runWorkload(t, k, workers)
		ip := serviceIP(t, k)
		for _, n := range workers {
			serviceAnswers(t, c, ip, n, "echo-", time.Minute)
		}
	})
}

// serviceAnswers waits for the echo Service to answer a request from a
// node, from a pod whose name has prefix.
func serviceAnswers(t *testing.T, c *Cluster, ip, from, prefix string, within time.Duration) {
	t.Helper()
	eventually(t, within, "the echo Service from "+from, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		body, err := c.Exec(ctx, from, "curl", "-fsS", "--max-time", "3", "http://"+ip+"/")
		if err != nil {
			return err
		}
		if !strings.Contains(string(body), `"hostname":"`+prefix) {
			return fmt.Errorf("answer %s", body)
		}
		return nil
	})
}

// TestPlanMatchbox: what up's Matchbox serves, and every reason it
// refuses before anything boots, each named.
func TestPlanMatchbox(t *testing.T) {
	c := compileDir(t, fixture.Path("examples/flatcar"), nil)
	out := compileFor(t, fixture.Path("examples/flatcar"), pipeline.Ignition)
	tree := out.Trees[pipeline.Ignition]
	binaries := t.TempDir()
	for i := range c.Install.Artifacts {
		a := &c.Install.Artifacts[i]
		name := filepath.Base(a.URL)
		data := []byte("#!/bin/sh\necho " + name + "\n")
		if err := os.WriteFile(filepath.Join(binaries, name), data, 0o755); err != nil {
			t.Fatal(err)
		}
		a.SHA256, _ = fileSHA256(filepath.Join(binaries, name))
	}
	mb, why := planMatchbox(c, tree, binaries)
	if len(why) > 0 {
		t.Fatalf("refused: %q", why)
	}
	if mb.addr.String() != "10.20.0.5:8080" || len(mb.configs) != 4 || len(mb.assets) != 13 {
		t.Errorf("serves %s: %d configs, %d assets", mb.addr, len(mb.configs), len(mb.assets))
	}
	if f := mb.assets["/assets/kcompile/kubelet"]; f != filepath.Join(binaries, "kubelet") {
		t.Errorf("kubelet served from %q", f)
	}
	// A binary that is not the spec's, an artifact elsewhere, no
	// --binaries, a Debian node: each named.
	if err := os.WriteFile(filepath.Join(binaries, "etcd"), []byte("another build"), 0o755); err != nil {
		t.Fatal(err)
	}
	c.Install.Artifacts[0].URL = "https://dl.example.com/elsewhere"
	c.Nodes[1].OS = "debian"
	_, why = planMatchbox(c, tree, binaries)
	want := []string{
		"is not under Matchbox's assets (http://10.20.0.5:8080/assets/)",
		"etcd has sha256 ",
		"node " + c.Nodes[1].Name + " runs Debian, which Ignition does not configure",
	}
	for _, w := range want {
		if !slices.ContainsFunc(why, func(s string) bool { return strings.Contains(s, w) }) {
			t.Errorf("no reason says %q: %q", w, why)
		}
	}
	if _, why = planMatchbox(c, tree, ""); !slices.ContainsFunc(why, func(s string) bool { return strings.Contains(s, "from --binaries DIR") }) {
		t.Errorf("without --binaries: %q", why)
	}
	c.Boot = nil
	if _, why = planMatchbox(c, tree, binaries); len(why) != 1 || !strings.HasPrefix(why[0], "boot: ") {
		t.Errorf("without boot: %q", why)
	}
}
