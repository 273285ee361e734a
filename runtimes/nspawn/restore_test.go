package nspawn

import (
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/kcompile/kcompile/compiler"
	"github.com/kcompile/kcompile/internal/fixture"
	"github.com/kcompile/kcompile/pipeline"
)

// restoreObjects are the objects the restore test writes before its
// snapshot: a namespace, a ConfigMap, and a Deployment whose pods must
// run again on the machines of the second up.
const restoreObjects = `apiVersion: v1
kind: Namespace
metadata: {name: shop}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: prices, namespace: shop}
data: {currency: EUR, vat: "0.21"}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: till, namespace: shop}
spec:
  replicas: 2
  selector: {matchLabels: {app: till}}
  template:
    metadata: {labels: {app: till}}
    spec:
      terminationGracePeriodSeconds: 5
      tolerations: [{key: node-role.kubernetes.io/control-plane, operator: Exists, effect: NoSchedule}]
      containers:
      - name: echo
        image: registry.kcompile.test/echo:v1
        ports: [{containerPort: 8080}]
        readinessProbe: {httpGet: {path: /, port: 8080}, periodSeconds: 1}
`

// TestUpRestore is issue 34's acceptance: a cluster of three
// control-plane nodes (VIP, no worker) whose compiled timer takes the snapshots
// (every 20 s here), objects written, a snapshot taken after them; every
// machine destroyed (down); a fresh up of the same spec and bundle, then
// kcompile restore of the snapshot into it: every object back, the
// Deployment's pods running, the first cluster's kubeconfig working
// unchanged through the VIP. A corrupt snapshot is refused first, with
// the fresh cluster's API servers left running.
func TestUpRestore(t *testing.T) {
	// The three control-plane nodes alone, which run the pods too: a
	// worker would add a machine to each of the two boots and nothing to
	// the restore.
	dir := specDir(t, fixture.Path("runtimes/nspawn/testdata/vip"), [][2]string{{`workers: nodes: w1: {address: "10.78.0.21", mac: "52:54:00:78:00:21"}`, ``}}, map[string]string{"backup.cue": `package cluster

controlPlane: schedulable: true
etcd: backup: {schedule: "*:*:00/20", retention: 3}
`})
	e := bootForApply(t, dir, "")
	k := admin(t, e.c)
	ctx := context.Background()
	if _, err := k.apply(ctx, "shop", []byte(restoreObjects)); err != nil {
		t.Fatal(err)
	}
	tillRuns := func(k *kube) {
		t.Helper()
		eventually(t, 3*time.Minute, "the till's two replicas available", func() error {
			var d appsv1.Deployment
			if err := k.get(ctx, "/apis/apps/v1/namespaces/shop/deployments/till", &d); err != nil {
				return err
			}
			if d.Status.AvailableReplicas < 2 {
				return fmt.Errorf("%d available", d.Status.AvailableReplicas)
			}
			return nil
		})
	}
	tillRuns(k)
	written := time.Now()
	oldKubeconfig, err := os.ReadFile(e.c.Kubeconfig())
	if err != nil {
		t.Fatal(err)
	}

	// The timer's next snapshot of cp1, taken after the objects.
	snapshot := filepath.Join(t.TempDir(), "snapshot.db")
	eventually(t, time.Minute, "a snapshot of cp1 taken by its timer after the objects were written", func() error {
		var root string
		for _, ns := range e.c.Status(ctx).Nodes {
			if ns.Name == "cp1" {
				root = fmt.Sprintf("/proc/%d/root", firstChild(ns.PID))
			}
		}
		dir := filepath.Join(root, "var/lib/etcd-backup")
		entries, err := os.ReadDir(dir)
		if err != nil {
			return err
		}
		for _, en := range slices.Backward(entries) {
			info, err := en.Info()
			if err != nil || !strings.HasSuffix(en.Name(), ".db") || !info.ModTime().After(written) {
				continue
			}
			if info.Mode().Perm() != 0o600 {
				t.Errorf("snapshot %s has mode %v, want 0600", en.Name(), info.Mode().Perm())
			}
			data, err := os.ReadFile(filepath.Join(dir, en.Name()))
			if err != nil {
				return err
			}
			return os.WriteFile(snapshot, data, 0o600)
		}
		return fmt.Errorf("none newer than %s in %v", written.Format(time.TimeOnly), entries)
	})

	// Every machine destroyed.
	downCtx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	if err := e.c.Down(downCtx); err != nil {
		t.Fatalf("down: %v", err)
	}

	// A fresh up of the same spec and bundle: what its boot wrote to
	// etcd is all it has.
	out, err := pipeline.Run(pipeline.Input{Source: compiler.Source{Dir: dir}, Bundle: e.b, Now: e.issued, Issue: true, Targets: []pipeline.Target{pipeline.Systemd}})
	if err != nil || out.Diagnostics.HasErrors() {
		t.Fatal(err, out.Diagnostics)
	}
	spec, diags := compiler.Concrete(compiler.Source{Dir: dir})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	text, err := compiler.StateText(spec)
	if err != nil {
		t.Fatal(err)
	}
	secrets, err := e.b.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	work := filepath.Join(t.TempDir(), "work")
	fresh := bootIn(t, out, pipeline.Systemd, work, false, func(cfg *Config) {
		cfg.Spec, cfg.Issued, cfg.Secrets = text, e.issued, secrets
	})
	k = admin(t, fresh)
	var ns corev1.Namespace
	if err := k.get(ctx, "/api/v1/namespaces/shop", &ns); err == nil {
		t.Fatal("the fresh cluster has the namespace shop before the restore")
	}

	kcompile := kcompileBinary(t)
	run := func(args ...string) (string, error) {
		cmd := exec.Command(kcompile, args...)
		b, err := cmd.CombinedOutput()
		return string(b), err
	}

	// A corrupt snapshot: refused, nothing stopped.
	corrupt := filepath.Join(t.TempDir(), "corrupt.db")
	data, err := os.ReadFile(snapshot)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)/2] ^= 0xff
	if err := os.WriteFile(corrupt, data, 0o600); err != nil {
		t.Fatal(err)
	}
	said, err := run("restore", corrupt, dir, "--work", work, "--secrets", e.secrets)
	if err == nil || !strings.Contains(said, "nothing stopped") || !strings.Contains(said, "corrupt") {
		t.Errorf("a corrupt snapshot: %v\n%s", err, said)
	}
	for _, n := range []string{"cp1", "cp2", "cp3"} {
		if state, err := fresh.Exec(ctx, n, "systemctl", "is-active", "kube-apiserver.service", "etcd.service"); err != nil {
			t.Errorf("after the refusal, %s's API server or etcd is not active: %v %s", n, err, state)
		}
	}

	began := time.Now()
	said, err = run("restore", snapshot, dir, "--work", work, "--secrets", e.secrets)
	took := time.Since(began)
	e.detail("kcompile restore said:\n%s", said)
	if err != nil {
		t.Fatalf("kcompile restore: %v\n%s", err, said)
	}
	t.Logf("kcompile restore to every node Ready: %s (%s)", took.Round(100*time.Millisecond), lastLine(said))

	// The first cluster's kubeconfig, unchanged, through the VIP.
	old, err := newKube(oldKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(old.server, "10.78.0.10") {
		t.Errorf("the kubeconfig's server is %s, not the VIP", old.server)
	}
	var cm corev1.ConfigMap
	if err := old.get(ctx, "/api/v1/namespaces/shop/configmaps/prices", &cm); err != nil {
		t.Fatalf("the old kubeconfig after the restore: %v", err)
	}
	if !maps.Equal(cm.Data, map[string]string{"currency": "EUR", "vat": "0.21"}) {
		t.Errorf("shop/prices after the restore: %v", cm.Data)
	}
	tillRuns(old)
	var pods corev1.PodList
	if err := old.get(ctx, "/api/v1/namespaces/shop/pods", &pods); err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.Status.Phase != corev1.PodRunning {
			t.Errorf("pod %s on %s is %s", p.Name, p.Spec.NodeName, p.Status.Phase)
		}
	}
	// etcd's members are the spec's, under the restore's token.
	st := fresh.Status(ctx)
	if st.EtcdLeader == "" {
		t.Error("after the restore, up's status names no etcd leader")
	}
	// What the restore laid is gone; what it replaced is kept.
	for _, n := range []string{"cp1", "cp2", "cp3"} {
		if out, err := fresh.Exec(ctx, n, "sh", "-c", "test ! -e /var/lib/kcompile-restore && ls -d /var/lib/etcd.before-restore-*"); err != nil {
			t.Errorf("%s after the restore: %v %s", n, err, out)
		}
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
