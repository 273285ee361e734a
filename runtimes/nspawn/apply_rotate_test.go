package nspawn

import (
	"context"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/kcompile/kcompile/compiler"
	"github.com/kcompile/kcompile/compiler/pki"
	"github.com/kcompile/kcompile/layout"
	change "github.com/kcompile/kcompile/plan"
)

// rotation rotates every CA and the service-account key of TestUpApply's
// running cluster (the spec in dir) with apply, stage by stage as
// kcompile secrets rotate writes them: each stage's apply restarts what
// reads the files that change, the second stage's restarts every pod
// once the API server signs tokens with the new key, and after each the
// cluster answers with that stage's admin credentials, every node is
// Ready, and a second apply finds nothing to do. At the end no node holds
// a certificate of an old CA or trusts one, and the old admin
// credentials are refused.
func rotation(t *testing.T, e *applyEnv, dir string) {
	ctx := context.Background()
	b0 := e.b
	b1, err := b0.Rotate(rand.Reader, time.Now(), pki.RotateOptions{Authorities: pki.Authorities(), ServiceAccount: true, ClockSkew: 5 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	old := admin(t, e.c)
	stages := []*pki.Bundle{b1}
	for i := 1; i <= 3; i++ {
		b := stages[i-1]
		file := filepath.Join(t.TempDir(), "secrets.json")
		data, err := b.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(file, data, 0o600); err != nil {
			t.Fatal(err)
		}
		e.b, e.secrets = b, file
		p := e.plan(dir)
		kinds := steps(p)
		if i == 2 && !slices.ContainsFunc(kinds, func(s string) bool { return strings.HasPrefix(s, change.KindPods+" ") }) {
			t.Errorf("stage 2's plan %q restarts no pod for the new token key", kinds)
		}
		log := &stopAt{}
		began := time.Now()
		if err := e.apply(ctx, p, dir, log, "", false, false); err != nil {
			for _, u := range []string{"kube-controller-manager", "kube-apiserver"} {
				out, _ := e.c.Exec(ctx, "cp1", "journalctl", "-u", u, "-n", "30", "--no-pager", "-q")
				t.Logf("cp1's %s:\n%s", u, out)
			}
			t.Fatalf("stage %d: %v\n%s", i, err, log)
		}
		t.Logf("stage %d took %s:\n%s", i, time.Since(began).Round(time.Second), log)
		again := &stopAt{}
		if err := e.apply(ctx, e.plan(dir), dir, again, "", false, false); err != nil || !strings.Contains(again.String(), "nothing to apply") {
			t.Errorf("stage %d, a second apply: %v\n%s", i, err, again)
		}
		k := stageAdmin(t, e, dir)
		eventually(t, time.Minute, fmt.Sprintf("stage %d: every node Ready", i), func() error {
			nodes, err := k.nodes(ctx)
			if err != nil {
				return err
			}
			for _, n := range nodes {
				if !nodeReady(n) {
					return fmt.Errorf("%s not Ready", n.Name)
				}
			}
			return nil
		})
		if i < 3 {
			next, err := b.Advance(time.Now())
			if err != nil {
				t.Fatal(err)
			}
			stages = append(stages, next)
		}
	}
	// No node holds a certificate of an old CA, or trusts one.
	for _, n := range e.c.cfg.Cluster.Nodes {
		files := []string{layout.ClusterCACert, layout.CertFile(layout.KubeletServingStem)}
		if n.Name == "cp1" {
			files = append(files, layout.CertFile(layout.APIServerStem), layout.EtcdCACert)
		}
		for _, f := range files {
			out, err := e.c.Exec(ctx, n.Name, "cat", layout.Abs(f))
			if err != nil {
				t.Fatalf("%s: %v", n.Name, err)
			}
			for rest := out; ; {
				var block *pem.Block
				if block, rest = pem.Decode(rest); block == nil {
					break
				}
				cert, err := x509.ParseCertificate(block.Bytes)
				if err != nil {
					t.Fatal(err)
				}
				for _, a := range pki.Authorities() {
					ca := b0.CAs[a].Cert
					if cert.Equal(ca) || cert.CheckSignatureFrom(ca) == nil {
						t.Errorf("%s's %s holds %q of the old %s", n.Name, f, cert.Subject.CommonName, a)
					}
				}
			}
		}
	}
	var ns corev1.Namespace
	if err := old.get(ctx, "/api/v1/namespaces/default", &ns); err == nil {
		t.Error("the old admin credentials are still accepted")
	}
}

// stageAdmin is a client with the admin kubeconfig dir builds with e.b.
func stageAdmin(t *testing.T, e *applyEnv, dir string) *kube {
	t.Helper()
	data, diags := compiler.Concrete(compiler.Source{Dir: dir})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	src, err := compiler.StateSource(compiler.Source{Dir: dir}, data)
	if err != nil {
		t.Fatal(err)
	}
	_, tree, err := e.build(src)
	if err != nil {
		t.Fatal(err)
	}
	f, ok := tree.Get(layout.ClusterTree("admin.conf"))
	if !ok {
		t.Fatal("the build has no admin.conf")
	}
	k, err := newKube(f.Data)
	if err != nil {
		t.Fatal(err)
	}
	return k
}
