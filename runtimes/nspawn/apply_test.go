package nspawn

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/kcompile/kcompile/compare"
	"github.com/kcompile/kcompile/compiler"
	"github.com/kcompile/kcompile/compiler/ir"
	"github.com/kcompile/kcompile/compiler/pki"
	"github.com/kcompile/kcompile/internal/fixture"
	"github.com/kcompile/kcompile/pipeline"
	change "github.com/kcompile/kcompile/plan"
	"github.com/kcompile/kcompile/targets"
)

// stopAt is a log that cancels an apply once it has said a line
// holding at.
type stopAt struct {
	mu     sync.Mutex
	b      bytes.Buffer
	at     string
	cancel context.CancelFunc
}

func (s *stopAt) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.b.Write(p)
	if s.at != "" && strings.Contains(s.b.String(), s.at) {
		s.cancel()
	}
	return len(p), nil
}

func (s *stopAt) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestUpApply changes a running cluster's configuration with apply: a
// worker pool's maxPods, which restarts only that pool's kubelets, one
// node at a time (its budget). A dry run changes nothing; an apply
// interrupted after its first step says how to go on, refuses to start
// over, and goes on with --resume from the second step; at the end every
// node runs the new spec's files (a second apply finds nothing to do and
// the running files equal the new build), and nothing but the two
// kubelets restarted.
func TestUpApply(t *testing.T) {
	dir := fixture.Path("runtimes/nspawn/testdata/three-nodes")
	issued := time.Now().Truncate(time.Second)
	b, err := pki.New(rand.Reader, issued, pki.NewOptions{Algorithm: pki.ECDSAP256, CAValidity: 10 * 365 * 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	secrets := filepath.Join(t.TempDir(), "secrets.json")
	data, err := b.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(secrets, data, 0o600); err != nil {
		t.Fatal(err)
	}
	build := func(src compiler.Source) (*ir.Cluster, *targets.Tree, error) {
		out, err := pipeline.Run(pipeline.Input{Source: src, Bundle: b, Now: issued, Issue: true, Targets: []pipeline.Target{pipeline.Systemd}})
		if err != nil {
			return nil, nil, err
		}
		if out.Diagnostics.HasErrors() {
			return nil, nil, fmt.Errorf("%v", out.Diagnostics.Errors())
		}
		return out.Cluster, out.Trees[pipeline.Systemd], nil
	}
	out, err := pipeline.Run(pipeline.Input{Source: compiler.Source{Dir: dir}, Bundle: b, Now: issued, Issue: true, Targets: []pipeline.Target{pipeline.Systemd}})
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
	work := filepath.Join(t.TempDir(), "work")
	c := bootIn(t, out, pipeline.Systemd, work, false, func(cfg *Config) { cfg.Spec, cfg.Issued = text, issued })
	k := admin(t, c)
	ctx := context.Background()

	// NEW: pool w's nodes may run 90 pods, not 110.
	newDir := t.TempDir()
	orig, err := os.ReadFile(filepath.Join(dir, "cluster.cue"))
	if err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string][]byte{"cluster.cue": orig, "pods.cue": []byte("package cluster\n\nworkers: pools: w: capacity: maxPods: 90\n")} {
		if err := os.WriteFile(filepath.Join(newDir, name), content, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	specDir := filepath.Join(work, SpecDir)
	makePlan := func() *change.Plan {
		t.Helper()
		p, err := compare.Plan(compare.Input{Args: []string{specDir, newDir}, Secrets: secrets, Now: time.Now(), Rand: rand.Reader, Cwd: "/"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	apply := func(ctx context.Context, p *change.Plan, log *stopAt, dryRun, resume bool) error {
		t.Helper()
		running, err := ReadRunning(work)
		if err != nil {
			t.Fatal(err)
		}
		oldData, diags := compiler.Concrete(compiler.Source{Dir: specDir})
		if diags.HasErrors() {
			t.Fatal(diags)
		}
		src, err := compiler.StateSource(compiler.Source{Dir: specDir}, oldData)
		if err != nil {
			t.Fatal(err)
		}
		old, oldTree, err := build(src)
		if err != nil {
			t.Fatal(err)
		}
		return Apply(ctx, ApplyConfig{Running: running, Plan: p, Old: old, OldTree: oldTree,
			Build: func(state map[string]any) (*ir.Cluster, *targets.Tree, error) {
				src, err := compiler.StateSource(compiler.Source{Dir: newDir}, state)
				if err != nil {
					return nil, nil, err
				}
				return build(src)
			},
			DryRun: dryRun, Resume: resume, GateTimeout: 2 * time.Minute, Log: log, Now: time.Now})
	}
	p := makePlan()
	var steps []string
	for _, s := range p.Stages {
		for _, st := range s.Steps {
			steps = append(steps, fmt.Sprintf("%s %v %v", st.Kind, st.Nodes, st.Restarts))
		}
	}
	if want := []string{"workers [w1] [kubelet.service]", "workers [w2] [kubelet.service]"}; !slices.Equal(steps, want) {
		t.Fatalf("plan %q, want %q", steps, want)
	}

	units := []string{"kubelet.service", "containerd.service", "kube-proxy.service"}
	invocations := func() map[string]string {
		t.Helper()
		out := map[string]string{}
		for _, n := range []string{"cp1", "w1", "w2"} {
			us := units
			if n == "cp1" {
				us = append(slices.Clone(units), "etcd.service", "kube-apiserver.service")
			}
			for _, u := range us {
				id, err := c.Exec(ctx, n, "systemctl", "show", "-p", "InvocationID", "--value", u)
				if err != nil || strings.TrimSpace(string(id)) == "" {
					t.Fatalf("%s %s: %v %q", n, u, err, id)
				}
				out[n+" "+u] = strings.TrimSpace(string(id))
			}
		}
		return out
	}
	restarted := func(before, after map[string]string) []string {
		var out []string
		for k, v := range after {
			if before[k] != v {
				out = append(out, k)
			}
		}
		slices.Sort(out)
		return out
	}
	start := invocations()

	// A dry run says what it would lay and restart, and does nothing.
	dry := &stopAt{}
	if err := apply(ctx, p, dry, true, false); err != nil {
		t.Fatalf("dry run: %v\n%s", err, dry)
	}
	if !strings.Contains(dry.String(), "would lay 1 files on w1 (/var/lib/kubelet/config.yaml), then restart kubelet.service") {
		t.Errorf("the dry run does not say what it would do:\n%s", dry)
	}
	if r := restarted(start, invocations()); len(r) > 0 {
		t.Errorf("the dry run restarted %v", r)
	}

	// Interrupted once the first step is done.
	ctx1, cancel := context.WithCancel(ctx)
	defer cancel()
	first := &stopAt{at: "step 1/2 done", cancel: cancel}
	err = apply(ctx1, p, first, false, false)
	if err == nil || !strings.Contains(err.Error(), "stopped after step 1 of 2") || !strings.Contains(err.Error(), "--resume goes on from step 2") {
		t.Fatalf("an interrupted apply: %v\n%s", err, first)
	}
	afterFirst := invocations()
	if r := restarted(start, afterFirst); !slices.Equal(r, []string{"w1 kubelet.service"}) {
		t.Errorf("the first step restarted %v, want w1's kubelet", r)
	}
	// Starting over is refused; --resume goes on.
	if err := apply(ctx, makePlan(), &stopAt{}, false, false); err == nil || !strings.Contains(err.Error(), "run it again with --resume to go on from step 2") {
		t.Errorf("an apply over a stopped one: %v", err)
	}
	second := &stopAt{}
	if err := apply(ctx, makePlan(), second, false, true); err != nil {
		t.Fatalf("resume: %v\n%s", err, second)
	}
	t.Logf("the apply, interrupted:\n%s\nresumed:\n%s", first, second)
	if strings.Contains(second.String(), "step 1/2") {
		t.Errorf("the resumed apply took step 1 again:\n%s", second)
	}
	for _, gate := range []string{"gate: w2 Ready, its kubelet's lease renewed since the restart", "step 2/2 done"} {
		if !strings.Contains(second.String(), gate) {
			t.Errorf("the resumed apply does not say %q:\n%s", gate, second)
		}
	}
	if r := restarted(afterFirst, invocations()); !slices.Equal(r, []string{"w2 kubelet.service"}) {
		t.Errorf("the second step restarted %v, want w2's kubelet", r)
	}
	// The new setting is live, where the spec says.
	for n, want := range map[string]string{"cp1": "110", "w1": "90", "w2": "90"} {
		var node corev1.Node
		eventually(t, time.Minute, n+"'s pod capacity", func() error {
			if err := k.get(ctx, "/api/v1/nodes/"+n, &node); err != nil {
				return err
			}
			if got := node.Status.Capacity.Pods().String(); got != want {
				return fmt.Errorf("%s pods, want %s", got, want)
			}
			return nil
		})
	}
	// The cluster is NEW: its recorded spec is, and a second apply finds
	// the nodes' files to be NEW's build and nothing to do.
	if _, err := os.Stat(filepath.Join(work, ProgressFile)); !os.IsNotExist(err) {
		t.Errorf("the progress file stayed: %v", err)
	}
	again := &stopAt{}
	if err := apply(ctx, makePlan(), again, false, false); err != nil || !strings.Contains(again.String(), "nothing to apply") {
		t.Errorf("a second apply: %v\n%s", err, again)
	}
}
