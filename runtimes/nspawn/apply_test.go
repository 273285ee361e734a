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
	// each is told every line as it is written.
	each func(line string)
}

func (s *stopAt) Write(p []byte) (int, error) {
	s.mu.Lock()
	s.b.Write(p)
	stop := s.at != "" && strings.Contains(s.b.String(), s.at)
	s.mu.Unlock()
	if stop {
		s.cancel()
	}
	if s.each != nil {
		for _, line := range strings.Split(strings.TrimSpace(string(p)), "\n") {
			s.each(strings.TrimSpace(line))
		}
	}
	return len(p), nil
}

func (s *stopAt) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// applyEnv is a cluster booted for apply's tests from a spec directory,
// with the bundle and clock it was built with.
type applyEnv struct {
	t       *testing.T
	c       *Cluster
	work    string
	secrets string
	b       *pki.Bundle
	issued  time.Time
}

// bootForApply boots the spec in dir with the programs of binaries
// (".bin/node" when empty), recording the spec as kcompile up does.
func bootForApply(t *testing.T, dir, binaries string) *applyEnv {
	t.Helper()
	e := &applyEnv{t: t, issued: time.Now().Truncate(time.Second)}
	var err error
	if e.b, err = pki.New(rand.Reader, e.issued, pki.NewOptions{Algorithm: pki.ECDSAP256, CAValidity: 10 * 365 * 24 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	e.secrets = filepath.Join(t.TempDir(), "secrets.json")
	data, err := e.b.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(e.secrets, data, 0o600); err != nil {
		t.Fatal(err)
	}
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
	e.work = filepath.Join(t.TempDir(), "work")
	e.c = bootIn(t, out, pipeline.Systemd, e.work, false, func(cfg *Config) {
		cfg.Spec, cfg.Issued = text, e.issued
		if binaries != "" {
			cfg.Binaries = fixture.Path(binaries)
		}
	})
	return e
}

// build builds a spec as the running cluster was built.
func (e *applyEnv) build(src compiler.Source) (*ir.Cluster, *targets.Tree, error) {
	out, err := pipeline.Run(pipeline.Input{Source: src, Bundle: e.b, Now: e.issued, Issue: true, Targets: []pipeline.Target{pipeline.Systemd}})
	if err != nil {
		return nil, nil, err
	}
	if out.Diagnostics.HasErrors() {
		return nil, nil, fmt.Errorf("%v", out.Diagnostics.Errors())
	}
	return out.Cluster, out.Trees[pipeline.Systemd], nil
}

// plan plans from the recorded spec to the one in dir, as kcompile
// apply does.
func (e *applyEnv) plan(dir string) *change.Plan {
	e.t.Helper()
	p, err := compare.Plan(compare.Input{Args: []string{filepath.Join(e.work, SpecDir), dir}, Secrets: e.secrets, Now: time.Now(), Rand: rand.Reader, Cwd: "/"}, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	return p
}

// steps are a plan's steps as "kind [nodes] [restarts]".
func steps(p *change.Plan) []string {
	var out []string
	for _, s := range p.Stages {
		for _, st := range s.Steps {
			out = append(out, fmt.Sprintf("%s %v %v", st.Kind, st.Nodes, st.Restarts))
		}
	}
	return out
}

// apply applies p (to the spec in dir) as kcompile apply does.
func (e *applyEnv) apply(ctx context.Context, p *change.Plan, dir string, log *stopAt, binaries string, dryRun, resume bool) error {
	e.t.Helper()
	running, err := ReadRunning(e.work)
	if err != nil {
		e.t.Fatal(err)
	}
	specDir := filepath.Join(e.work, SpecDir)
	oldData, diags := compiler.Concrete(compiler.Source{Dir: specDir})
	if diags.HasErrors() {
		e.t.Fatal(diags)
	}
	src, err := compiler.StateSource(compiler.Source{Dir: specDir}, oldData)
	if err != nil {
		e.t.Fatal(err)
	}
	old, oldTree, err := e.build(src)
	if err != nil {
		e.t.Fatal(err)
	}
	if binaries != "" {
		binaries = fixture.Path(binaries)
	}
	return Apply(ctx, ApplyConfig{Running: running, Plan: p, Old: old, OldTree: oldTree,
		Build: func(state map[string]any) (*ir.Cluster, *targets.Tree, error) {
			src, err := compiler.StateSource(compiler.Source{Dir: dir}, state)
			if err != nil {
				return nil, nil, err
			}
			return e.build(src)
		},
		Binaries: binaries, DryRun: dryRun, Resume: resume, GateTimeout: 3 * time.Minute, Log: log, Now: time.Now})
}

// invocations are the InvocationIDs of units on nodes: a unit restarted
// has a new one.
func (e *applyEnv) invocations(units map[string][]string) map[string]string {
	e.t.Helper()
	out := map[string]string{}
	for n, us := range units {
		for _, u := range us {
			id, err := e.c.Exec(context.Background(), n, "systemctl", "show", "-p", "InvocationID", "--value", u)
			if err != nil || strings.TrimSpace(string(id)) == "" {
				e.t.Fatalf("%s %s: %v %q", n, u, err, id)
			}
			out[n+" "+u] = strings.TrimSpace(string(id))
		}
	}
	return out
}

// restarted names the units whose invocation changed.
func restarted(before, after map[string]string) []string {
	var out []string
	for k, v := range after {
		if before[k] != v {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// specDir writes a spec directory of dir's cluster.cue, each of edits
// (old, new) replaced, and the extra files.
func specDir(t *testing.T, dir string, edits [][2]string, extra map[string]string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "cluster.cue"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	for _, e := range edits {
		if !strings.Contains(text, e[0]) {
			t.Fatalf("%s has no %q", dir, e[0])
		}
		text = strings.ReplaceAll(text, e[0], e[1])
	}
	out := t.TempDir()
	if err := os.WriteFile(filepath.Join(out, "cluster.cue"), []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, content := range extra {
		if err := os.WriteFile(filepath.Join(out, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return out
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
	e := bootForApply(t, dir, "")
	k := admin(t, e.c)
	ctx := context.Background()
	newDir := specDir(t, dir, nil, map[string]string{"pods.cue": "package cluster\n\nworkers: pools: w: capacity: maxPods: 90\n"})
	p := e.plan(newDir)
	if got, want := steps(p), []string{"workers [w1] [kubelet.service]", "workers [w2] [kubelet.service]"}; !slices.Equal(got, want) {
		t.Fatalf("plan %q, want %q", got, want)
	}
	units := []string{"kubelet.service", "containerd.service", "kube-proxy.service"}
	watched := map[string][]string{"cp1": append(slices.Clone(units), "etcd.service", "kube-apiserver.service"), "w1": units, "w2": units}
	start := e.invocations(watched)

	// A dry run says what it would lay and restart, and does nothing.
	dry := &stopAt{}
	if err := e.apply(ctx, p, newDir, dry, "", true, false); err != nil {
		t.Fatalf("dry run: %v\n%s", err, dry)
	}
	if !strings.Contains(dry.String(), "would lay 1 files on w1 (/var/lib/kubelet/config.yaml), then restart kubelet.service") {
		t.Errorf("the dry run does not say what it would do:\n%s", dry)
	}
	if r := restarted(start, e.invocations(watched)); len(r) > 0 {
		t.Errorf("the dry run restarted %v", r)
	}

	// Interrupted once the first step is done.
	ctx1, cancel := context.WithCancel(ctx)
	defer cancel()
	first := &stopAt{at: "step 1/2 done", cancel: cancel}
	err := e.apply(ctx1, p, newDir, first, "", false, false)
	if err == nil || !strings.Contains(err.Error(), "stopped after step 1 of 2") || !strings.Contains(err.Error(), "--resume goes on from step 2") {
		t.Fatalf("an interrupted apply: %v\n%s", err, first)
	}
	afterFirst := e.invocations(watched)
	if r := restarted(start, afterFirst); !slices.Equal(r, []string{"w1 kubelet.service"}) {
		t.Errorf("the first step restarted %v, want w1's kubelet", r)
	}
	// Starting over is refused; --resume goes on.
	if err := e.apply(ctx, e.plan(newDir), newDir, &stopAt{}, "", false, false); err == nil || !strings.Contains(err.Error(), "run it again with --resume to go on from step 2") {
		t.Errorf("an apply over a stopped one: %v", err)
	}
	second := &stopAt{}
	if err := e.apply(ctx, e.plan(newDir), newDir, second, "", false, true); err != nil {
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
	if r := restarted(afterFirst, e.invocations(watched)); !slices.Equal(r, []string{"w2 kubelet.service"}) {
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
	if _, err := os.Stat(filepath.Join(e.work, ProgressFile)); !os.IsNotExist(err) {
		t.Errorf("the progress file stayed: %v", err)
	}
	again := &stopAt{}
	if err := e.apply(ctx, e.plan(newDir), newDir, again, "", false, false); err != nil || !strings.Contains(again.String(), "nothing to apply") {
		t.Errorf("a second apply: %v\n%s", err, again)
	}
}

// TestUpApplyVersion upgrades a running cluster from Kubernetes 1.36 to
// 1.37 with apply: the API server first, then the controllers, then each
// node's kubelet and kube-proxy, each worker drained first (a new kubelet
// minor). After every step no kubelet is newer than the API server; the
// steps lay the new programs and check them as the install unit does,
// restarting nothing else (etcd and containerd keep running); at the end
// every component runs 1.37.2 and the nodes' files are the new build.
func TestUpApplyVersion(t *testing.T) {
	dir := fixture.Path("runtimes/nspawn/testdata/three-nodes")
	oldDir := specDir(t, dir, [][2]string{{`kubernetes: version: "1.37.2"`, `kubernetes: version: "1.36.3"`}}, nil)
	e := bootForApply(t, oldDir, ".bin/node-1.36")
	k := admin(t, e.c)
	ctx := context.Background()
	p := e.plan(dir)
	want := []string{
		"api server [cp1] [kcompile-install.service kube-apiserver.service]",
		"controllers [cp1] [kcompile-install.service kube-controller-manager.service kube-scheduler.service]",
		"node [cp1] [kcompile-install.service kube-proxy.service kubelet.service]",
		"workers [w1] [kcompile-install.service kube-proxy.service kubelet.service]",
		"workers [w2] [kcompile-install.service kube-proxy.service kubelet.service]",
	}
	if got := steps(p); !slices.Equal(got, want) {
		t.Fatalf("plan %q, want %q", got, want)
	}
	watched := map[string][]string{"cp1": {"etcd.service", "containerd.service"}, "w1": {"containerd.service"}, "w2": {"containerd.service"}}
	start := e.invocations(watched)
	// After each step: no kubelet newer than the API server.
	var skew []string
	checkSkew := func(step string) {
		var v struct {
			GitVersion string `json:"gitVersion"`
		}
		if err := k.get(ctx, "/version", &v); err != nil {
			skew = append(skew, step+": "+err.Error())
			return
		}
		var nodes corev1.NodeList
		if err := k.get(ctx, "/api/v1/nodes", &nodes); err != nil {
			skew = append(skew, step+": "+err.Error())
			return
		}
		for _, n := range nodes.Items {
			if kv := n.Status.NodeInfo.KubeletVersion; kv > v.GitVersion {
				skew = append(skew, fmt.Sprintf("%s: %s's kubelet %s is newer than the API server %s", step, n.Name, kv, v.GitVersion))
			}
		}
	}
	log := &stopAt{}
	log.each = func(line string) {
		if strings.HasSuffix(line, " done") && strings.HasPrefix(line, "step ") {
			checkSkew(line)
		}
	}
	if err := e.apply(ctx, p, dir, log, ".bin/node", false, false); err != nil {
		t.Fatalf("apply: %v\n%s", err, log)
	}
	t.Logf("apply:\n%s", log)
	if len(skew) > 0 {
		t.Errorf("version skew between steps: %q", skew)
	}
	for _, line := range []string{"w1: drained", "w1: laid /usr/local/bin/kubelet (Kubernetes v1.37.2)", "gate: kube-apiserver of cp1 ready", "w2: uncordoned"} {
		if !strings.Contains(log.String(), line) {
			t.Errorf("apply does not say %q", line)
		}
	}
	if r := restarted(start, e.invocations(watched)); len(r) > 0 {
		t.Errorf("apply restarted %v, which no step names", r)
	}
	var v struct {
		GitVersion string `json:"gitVersion"`
	}
	if err := k.get(ctx, "/version", &v); err != nil || v.GitVersion != "v1.37.2" {
		t.Errorf("the API server is %s (%v)", v.GitVersion, err)
	}
	eventually(t, time.Minute, "every node at 1.37.2", func() error {
		var nodes corev1.NodeList
		if err := k.get(ctx, "/api/v1/nodes", &nodes); err != nil {
			return err
		}
		for _, n := range nodes.Items {
			if info := n.Status.NodeInfo; info.KubeletVersion != "v1.37.2" || !nodeReady(n) {
				return fmt.Errorf("%s: kubelet %s, Ready %v", n.Name, info.KubeletVersion, nodeReady(n))
			}
		}
		return nil
	})
	// Every component runs the new program: the file its process runs
	// is the one in place (not a replaced, deleted one), and reports
	// 1.37.2.
	programs := map[string][]string{"cp1": {"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy"}, "w1": {"kubelet", "kube-proxy"}, "w2": {"kubelet", "kube-proxy"}}
	for n, progs := range programs {
		for _, prog := range progs {
			out, err := e.c.Exec(ctx, n, "sh", "-c", "p=$(systemctl show -p MainPID --value "+prog+".service) && readlink /proc/$p/exe && /usr/local/bin/"+prog+" --version")
			if got := strings.Fields(strings.TrimSpace(string(out))); err != nil || len(got) != 3 || got[0] != "/usr/local/bin/"+prog || got[2] != "v1.37.2" {
				t.Errorf("%s's %s: %q (%v)", n, prog, out, err)
			}
		}
	}
	again := &stopAt{}
	if err := e.apply(ctx, e.plan(dir), dir, again, ".bin/node", false, false); err != nil || !strings.Contains(again.String(), "nothing to apply") {
		t.Errorf("a second apply: %v\n%s", err, again)
	}
}
