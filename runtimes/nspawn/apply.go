package nspawn

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kcompile/kcompile/compiler"
	"github.com/kcompile/kcompile/compiler/ir"
	"github.com/kcompile/kcompile/internal/writer"
	"github.com/kcompile/kcompile/layout"
	change "github.com/kcompile/kcompile/plan"
	"github.com/kcompile/kcompile/targets"
	"github.com/kcompile/kcompile/targets/systemd"
)

// What up records of the cluster it booted, under the work directory,
// for kcompile apply: the spec as data (compiler.StateText), the clock
// its certificates were issued at, and the changes up made to the
// compiled files (systemd.UpOverrides). Built again from these with the
// same secrets bundle, the spec gives the running nodes' files byte for
// byte; apply replaces the spec with each change it completes.
const (
	SpecDir       = "spec"
	SpecFile      = "spec/state.cue"
	IssuedFile    = "spec/issued"
	OverridesFile = "spec/overrides.json"
	// BundleFile is the secrets bundle the running cluster's files were
	// built with, so that a change of the bundle (a stage of kcompile
	// secrets rotate, a renewal) is planned from it.
	BundleFile = "spec/secrets.json"
	// ProgressFile is an apply's progress while it lasts: the plan it
	// follows and the steps done.
	ProgressFile = "apply.json"
)

// recordSpec writes what apply reads of the booted cluster.
func (c *Cluster) recordSpec() error {
	if c.cfg.Spec == nil {
		return nil
	}
	dir := filepath.Join(c.cfg.Work, SpecDir)
	if err := c.mkdir(dir); err != nil {
		return err
	}
	over, err := json.MarshalIndent(c.adjust.overrides, "", "  ")
	if err != nil {
		return err
	}
	files := map[string][]byte{
		SpecFile:      c.cfg.Spec,
		IssuedFile:    []byte(c.cfg.Issued.UTC().Format(time.RFC3339Nano) + "\n"),
		OverridesFile: append(over, '\n'),
	}
	if c.cfg.Secrets != nil {
		files[BundleFile] = c.cfg.Secrets
	}
	for name, data := range files {
		if err := writer.PrivateFile(filepath.Join(c.cfg.Work, name), data); err != nil {
			return err
		}
	}
	return nil
}

// Running is what apply knows of a cluster kcompile up runs, read from
// its work directory.
type Running struct {
	Work string
	// Spec is the running cluster's spec as a spec file's text, and
	// Issued the clock its certificates were issued at.
	Spec   []byte
	Issued time.Time
	// Overrides are up's changes to the compiled files.
	Overrides systemd.UpOverrides
	// Bundle is the path of the secrets bundle the running files were
	// built with (BundleFile), "" when none is recorded (a work directory
	// of a kcompile older than this).
	Bundle string
	state  *State
}

// ReadRunning reads what up recorded in work of the cluster it runs, or
// what an apply to hosts of bare metal recorded there (RecordRunning).
func ReadRunning(work string) (*Running, error) {
	st, err := ReadState(work)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	r := &Running{Work: work, state: st}
	if r.Spec, err = os.ReadFile(filepath.Join(work, SpecFile)); err != nil {
		if st == nil {
			return nil, fmt.Errorf("no cluster of kcompile up in %s (no %s), and no apply recorded one there (for hosts of bare metal: kcompile apply --from)", work, StateName)
		}
		return nil, fmt.Errorf("the cluster in %s records no spec (%v): it was booted by a kcompile up older than apply; boot it again", work, err)
	}
	issued, err := os.ReadFile(filepath.Join(work, IssuedFile))
	if err != nil {
		return nil, err
	}
	if r.Issued, err = time.Parse(time.RFC3339Nano, strings.TrimSpace(string(issued))); err != nil {
		return nil, fmt.Errorf("%s: %v", filepath.Join(work, IssuedFile), err)
	}
	over, err := os.ReadFile(filepath.Join(work, OverridesFile))
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(over, &r.Overrides); err != nil {
		return nil, fmt.Errorf("%s: %v", filepath.Join(work, OverridesFile), err)
	}
	if _, err := os.Stat(filepath.Join(work, BundleFile)); err == nil {
		r.Bundle = filepath.Join(work, BundleFile)
	}
	return r, nil
}

// Up says the cluster runs on machines of kcompile up, which apply can
// reach through the host.
func (r *Running) Up() bool { return r.state != nil }

// RecordRunning records in work (made when missing) the cluster that
// hosts of bare metal run, for an apply over SSH: its spec as data and
// the clock its certificates were issued at (kcompile build's), with no
// changes of up's. An apply that stopped keeps its progress there.
func RecordRunning(work string, spec map[string]any, issued time.Time, secrets []byte) (*Running, error) {
	if _, err := ReadState(work); err == nil {
		return nil, fmt.Errorf("%s is the work directory of a kcompile up: apply to it without --from", work)
	}
	text, err := compiler.StateText(spec)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(work, SpecDir), 0o700); err != nil {
		return nil, err
	}
	over, err := json.MarshalIndent(systemd.UpOverrides{}, "", "  ")
	if err != nil {
		return nil, err
	}
	for name, data := range map[string][]byte{
		SpecFile:      text,
		IssuedFile:    []byte(issued.UTC().Format(time.RFC3339Nano) + "\n"),
		OverridesFile: append(over, '\n'),
		BundleFile:    secrets,
	} {
		if err := writer.PrivateFile(filepath.Join(work, name), data); err != nil {
			return nil, err
		}
	}
	return ReadRunning(work)
}

// ApplyConfig is one kcompile apply of a cluster up runs.
type ApplyConfig struct {
	Running *Running
	Plan    *change.Plan
	// Old is the running cluster, built from Running.Spec as Build
	// builds a state.
	Old *ir.Cluster
	// OldTree is its systemd tree.
	OldTree *targets.Tree
	// Build compiles a state of the plan with the bundle and the clock
	// the running cluster was built with, and builds its systemd tree.
	// tolerate are the codes of errors the step's state may have while
	// it lasts (plan.Step.Tolerate).
	Build func(state map[string]any, tolerate []string) (*ir.Cluster, *targets.Tree, error)
	// Binaries is a directory of the programs of the plan's new
	// versions by name (as up's --binaries): a step that changes a
	// node's binaries lays those from there. Without it such a step is
	// refused.
	Binaries string
	// DryRun says what each step would do and changes nothing.
	DryRun bool
	// Resume continues an apply of the same plan that stopped.
	Resume bool
	// GateTimeout bounds the wait on each health gate (default 5m).
	GateTimeout time.Duration
	// SSH, when set, reaches the nodes over SSH instead of through up's
	// machines: the transport of bare metal, which a cluster of up also
	// answers (its image runs sshd for the spec's access.users).
	SSH *SSH
	Log io.Writer
	Now func() time.Time
	// Secrets is the bundle the plan's states are built with, recorded
	// as the running one (BundleFile) once the plan is done.
	Secrets []byte
}

// progress is ProgressFile.
type progress struct {
	// States are the digests of the plan's states, in step order.
	States []string `json:"states"`
	// Done counts the steps completed.
	Done int `json:"done"`
}

// applier runs one apply.
type applier struct {
	cfg   ApplyConfig
	kube  *kube
	etcd  *etcdHealth
	steps []change.Step
	log   func(format string, a ...any)
	// machines are the machines' processes (systemd-nspawn's), by node
	// name: a machine's init is their child (firstChild), read at each
	// use, as a machine just booted may not have it yet.
	machines map[string]int
	// addrs are the nodes' primary addresses, for SSH; conns the nodes
	// reached over it.
	addrs map[string]string
	conns map[string]nodeAccess
	// apiServerFresh are the nodes whose API server this apply started
	// again around its etcd member, with every file of the node laid
	// before: a later step of the API server's own with nothing new to
	// lay on the node has it running what it would restart it for.
	apiServerFresh map[string]bool
}

// Apply performs the plan on the cluster up runs, step by step: for
// each step it drains the step's nodes where the step says so, lays each
// node's files of the step's state (those that differ from the files
// the node has), reloads systemd and restarts the step's units, waits on
// the step's health gates, and uncordons. It stops at the first failure
// with the step named; a later Apply with Resume goes on from there. At
// the end the cluster's recorded spec is the plan's last state.
func Apply(ctx context.Context, cfg ApplyConfig) error {
	if cfg.GateTimeout == 0 {
		cfg.GateTimeout = 5 * time.Minute
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	a := newApplier(cfg)
	defer a.closeAll()
	for _, s := range cfg.Plan.Stages {
		a.steps = append(a.steps, s.Steps...)
	}
	if err := a.supported(); err != nil {
		return err
	}
	if err := a.connect(ctx); err != nil {
		return err
	}
	digests := make([]string, len(a.steps))
	for i, s := range a.steps {
		text, err := compiler.StateText(s.State)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(text)
		digests[i] = hex.EncodeToString(sum[:])
	}
	progressPath := filepath.Join(cfg.Running.Work, ProgressFile)
	done := 0
	if data, err := os.ReadFile(progressPath); err == nil {
		var p progress
		if err := json.Unmarshal(data, &p); err != nil {
			return fmt.Errorf("%s: %v", progressPath, err)
		}
		if !slices.Equal(p.States, digests) {
			return fmt.Errorf("an apply of another change stopped after step %d of %d (%s): apply that change with --resume first", p.Done, len(p.States), progressPath)
		}
		if !cfg.Resume {
			return fmt.Errorf("an apply of this change stopped after step %d of %d: run it again with --resume to go on from step %d", p.Done, len(p.States), p.Done+1)
		}
		done = p.Done
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	} else if cfg.Resume {
		return errors.New("--resume: no apply of this cluster stopped")
	}
	if done == 0 {
		// The running nodes' files must be the running spec's: else the
		// bundle or the spec is not the one the cluster was booted
		// from, and the steps would lay more than they say.
		if err := a.verify(ctx); err != nil {
			return err
		}
	}
	if len(a.steps) == 0 {
		a.log("nothing to apply: the running cluster is already %s", cfg.Plan.To)
		return nil
	}
	prevC, prev := cfg.Old, cfg.OldTree
	if done > 0 {
		var err error
		if prevC, prev, err = cfg.Build(a.steps[done-1].State, a.steps[done-1].Tolerate); err != nil {
			return err
		}
	}
	if err := a.healthyBefore(ctx, prevC, a.steps[done]); err != nil {
		return err
	}
	for i := done; i < len(a.steps); i++ {
		s := a.steps[i]
		c, tree, err := cfg.Build(s.State, s.Tolerate)
		if err != nil {
			return fmt.Errorf("step %d: building its state: %w", s.N, err)
		}
		a.log("step %d/%d: %s %s", s.N, len(a.steps), s.Kind, strings.Join(s.Nodes, " "))
		began := cfg.Now()
		if err := a.step(ctx, s, prevC, c, prev, tree); err != nil {
			if cfg.DryRun {
				return err
			}
			return fmt.Errorf("step %d (%s %s) stopped: %w; what it did stays done: fix the cause and run kcompile apply --resume to go on from step %d", s.N, s.Kind, strings.Join(s.Nodes, " "), err, s.N)
		}
		if !cfg.DryRun {
			if err := writeClusterFiles(cfg.Running.Work, prev, tree); err != nil {
				return err
			}
		}
		prevC, prev = c, tree
		if cfg.DryRun {
			continue
		}
		data, _ := json.Marshal(progress{States: digests, Done: i + 1})
		if err := writer.PrivateFile(progressPath, data); err != nil {
			return err
		}
		a.log("step %d/%d done in %s", s.N, len(a.steps), cfg.Now().Sub(began).Round(100*time.Millisecond))
		if err := ctx.Err(); err != nil && i+1 < len(a.steps) {
			return fmt.Errorf("stopped after step %d of %d (%w): kcompile apply --resume goes on from step %d", s.N, len(a.steps), err, s.N+1)
		}
	}
	if cfg.DryRun {
		return nil
	}
	text, err := compiler.StateText(a.steps[len(a.steps)-1].State)
	if err != nil {
		return err
	}
	if err := writer.PrivateFile(filepath.Join(cfg.Running.Work, SpecFile), text); err != nil {
		return err
	}
	if cfg.Secrets != nil {
		if err := writer.PrivateFile(filepath.Join(cfg.Running.Work, BundleFile), cfg.Secrets); err != nil {
			return err
		}
	}
	return os.Remove(progressPath)
}

// healthyBefore is the gate before the first step an apply takes, a
// resumed one's too: the cluster it starts from healthy (health). A step
// holds a cluster to what it was, and a gate after it to what it should
// be; on a cluster with a node or member down before it the step would
// take it further down (a member's restart beside one down loses etcd's
// quorum) or stop at its gate on a fault it did not cause. A dry run
// looks once and says what it found.
func (a *applier) healthyBefore(ctx context.Context, c *ir.Cluster, s change.Step) error {
	what := fmt.Sprintf("the running cluster healthy before step %d", s.N)
	if a.cfg.DryRun {
		if ok, status := a.health(ctx, c); !ok {
			a.log("the running cluster is not healthy now (%s): apply would wait up to %s for it before step %d", status, a.cfg.GateTimeout, s.N)
		} else {
			a.log("gate: %s", what)
		}
		return nil
	}
	if err := a.await(ctx, what, func() (bool, string) { return a.health(ctx, c) }); err != nil {
		again := "apply again"
		if a.cfg.Resume {
			again = "run kcompile apply --resume again"
		}
		return fmt.Errorf("apply changes nothing on a cluster that is not healthy: %w; mend what it names (kcompile node start, the unit's journal) and %s", err, again)
	}
	return nil
}

func newApplier(cfg ApplyConfig) *applier {
	a := &applier{cfg: cfg, machines: map[string]int{}, addrs: map[string]string{}, conns: map[string]nodeAccess{}, apiServerFresh: map[string]bool{}}
	for _, n := range cfg.Old.Nodes {
		a.addrs[n.Name] = n.Address().String()
	}
	a.log = func(format string, args ...any) { fmt.Fprintf(cfg.Log, format+"\n", args...) }
	return a
}

// connect reaches every node of the running cluster, its API and its
// etcd members, before anything changes.
func (a *applier) connect(ctx context.Context) error {
	cfg := a.cfg
	if cfg.Running.state != nil {
		for _, r := range cfg.Running.state.Resources {
			if r.Kind == KindProcess && r.alive() {
				a.machines[r.Name] = r.PID
			}
		}
	}
	for _, n := range cfg.Old.Nodes {
		if _, err := a.node(ctx, n.Name); err != nil {
			return err
		}
	}
	admin, ok := cfg.OldTree.Get(layout.ClusterTree("super-admin.conf"))
	if !ok {
		return errors.New("kcompile bug: the cluster tree has no super-admin.conf")
	}
	var err error
	if a.kube, err = newKube(admin.Data); err != nil {
		return err
	}
	a.etcd, err = etcdClientOf(cfg.Old, cfg.OldTree)
	return err
}

// supported refuses, before anything changes, a plan with a step apply
// cannot take on up's machines, naming it.
func (a *applier) supported() error {
	for _, s := range a.steps {
		switch {
		case (strings.HasPrefix(s.Kind, "add ") || strings.HasPrefix(s.Kind, "remove ")) && a.cfg.SSH != nil:
			return fmt.Errorf("step %d (%s %s) boots or powers off machines, which apply over SSH cannot: provision or retire the hosts (kcompile build's Matchbox module), or apply this change to a cluster of kcompile up through its machines", s.N, s.Kind, strings.Join(s.Nodes, " "))
		case strings.HasPrefix(s.Kind, "add ") && !a.cfg.Running.trees():
			return fmt.Errorf("step %d (%s %s): the cluster was booted from cloud-init seeds, and apply adds machines only to a cluster booted from systemd trees; boot the new spec with kcompile up instead", s.N, s.Kind, strings.Join(s.Nodes, " "))
		case s.Kind == "explicit":
			return fmt.Errorf("step %d is a change a restart does not apply, which apply does not perform: %s", s.N, strings.Join(s.Actions, "; "))
		case slices.Contains(s.Restarts, systemd.InstallUnit) && a.cfg.Binaries == "":
			return fmt.Errorf("step %d (%s %s) changes the node's binaries: give --binaries DIR, the programs of the new versions by name (as kcompile up's --binaries)", s.N, s.Kind, strings.Join(s.Nodes, " "))
		}
	}
	return nil
}

// verify holds the running nodes' files to the running spec's build.
func (a *applier) verify(ctx context.Context) error {
	for _, n := range a.cfg.Old.Nodes {
		_, changed, _, err := a.changes(ctx, n, a.cfg.Old, a.cfg.OldTree, a.cfg.OldTree)
		if err != nil {
			return err
		}
		if len(changed) > 0 {
			return fmt.Errorf("node %s's files are not those of the spec kcompile up recorded when it booted it (%s differs): apply with the secrets bundle the cluster was booted with", n.Name, changed[0])
		}
	}
	return nil
}

// nodeFiles are the files of node n as a machine of up has them: the
// compiled tree's and up's changes (systemd.UpFiles), by absolute path,
// with their modes.
func (a *applier) nodeFiles(c *ir.Cluster, tree *targets.Tree, name string) (map[string]targets.File, error) {
	out := map[string]targets.File{}
	prefix := layout.NodeTree(name, "")
	for _, f := range tree.Files() {
		if rel, ok := strings.CutPrefix(f.Path, prefix); ok {
			f.Path = "/" + rel
			out[f.Path] = f
		}
	}
	for _, n := range c.Nodes {
		if n.Name != name {
			continue
		}
		up, err := systemd.UpFiles(c, n, systemd.Options{}, a.cfg.Running.Overrides)
		if err != nil {
			return nil, err
		}
		for p, data := range up {
			out["/"+p] = targets.File{Path: "/" + p, Data: data, Mode: 0o644}
		}
	}
	return out, nil
}

// changes are the files node n must be given to be as tree builds it
// (prev is the tree it was built from before, whose files tree no longer
// has are removed), read against the machine's own.
func (a *applier) changes(ctx context.Context, n ir.Node, c *ir.Cluster, prev, tree *targets.Tree) (want map[string]targets.File, changed, removed []string, err error) {
	if want, err = a.nodeFiles(c, tree, n.Name); err != nil {
		return nil, nil, nil, err
	}
	had, err := a.nodeFiles(c, prev, n.Name)
	if err != nil {
		return nil, nil, nil, err
	}
	at, err := a.node(ctx, n.Name)
	if err != nil {
		return nil, nil, nil, err
	}
	paths := slices.Sorted(maps.Keys(want))
	have, err := at.readAll(ctx, paths)
	if err != nil {
		return nil, nil, nil, err
	}
	for _, p := range paths {
		if data, ok := have[p]; !ok || !bytes.Equal(data, want[p].Data) {
			changed = append(changed, p)
		}
	}
	for _, p := range slices.Sorted(maps.Keys(had)) {
		if _, ok := want[p]; !ok {
			there, err := at.exists(ctx, p)
			if err != nil {
				return nil, nil, nil, err
			}
			if there {
				removed = append(removed, p)
			}
		}
	}
	return want, changed, removed, ctx.Err()
}

// node is how apply reaches a node: over SSH when configured, else
// through its machine of up.
func (a *applier) node(ctx context.Context, name string) (nodeAccess, error) {
	if at, ok := a.conns[name]; ok {
		return at, nil
	}
	if a.cfg.SSH != nil {
		addr, ok := a.addrs[name]
		if !ok {
			return nil, fmt.Errorf("node %s has no address", name)
		}
		at, err := dialSSH(ctx, a.cfg.SSH, name, addr)
		if err != nil {
			return nil, err
		}
		a.conns[name] = at
		return at, nil
	}
	pid := 0
	if p, ok := a.machines[name]; ok {
		pid = firstChild(p)
	}
	if pid == 0 {
		return nil, fmt.Errorf("node %s is not running: kcompile node start %s --work %s, then apply again", name, name, a.cfg.Running.Work)
	}
	return machineAccess{name: name, pid: pid}, nil
}

// run runs a command on a node, as root.
func (a *applier) run(ctx context.Context, node string, args ...string) ([]byte, error) {
	at, err := a.node(ctx, node)
	if err != nil {
		return nil, err
	}
	return at.run(ctx, args...)
}

// forget drops what apply holds of a node that is gone.
func (a *applier) forget(name string) {
	if at, ok := a.conns[name]; ok {
		_ = at.close()
		delete(a.conns, name)
	}
	delete(a.machines, name)
	delete(a.addrs, name)
}

func (a *applier) closeAll() {
	for name := range a.conns {
		a.forget(name)
	}
}

// step performs one step.
func (a *applier) step(ctx context.Context, s change.Step, prevC, c *ir.Cluster, prev, tree *targets.Tree) error {
	switch {
	case s.Kind == "addons":
		return a.addons(ctx, c, tree)
	case s.Kind == change.KindLabels:
		return a.relabel(ctx, s, c)
	case s.Kind == change.KindServiceRange:
		return a.openServices(ctx, c)
	case s.Kind == change.KindServiceMove:
		return a.moveServices(ctx, c, tree)
	case s.Kind == change.KindPods:
		if a.cfg.DryRun {
			a.log("  would restart every pod started before, through its controller")
			return nil
		}
		if err := a.refuseBarePods(ctx); err != nil {
			return err
		}
		if err := a.rootCAPublished(ctx, c, tree); err != nil {
			return err
		}
		return a.restartPods(ctx)
	case strings.HasPrefix(s.Kind, "add "):
		return a.add(ctx, s, c, tree)
	case strings.HasPrefix(s.Kind, "remove "):
		return a.remove(ctx, s, prevC, c)
	}
	nodes := map[string]ir.Node{}
	for _, n := range c.Nodes {
		nodes[n.Name] = n
	}
	for _, name := range s.Nodes {
		if _, ok := nodes[name]; !ok {
			return fmt.Errorf("node %s is not in the step's state", name)
		}
	}
	// The binaries whose versions the step changes, by node.
	binaries := map[string][]ir.Binary{}
	for _, name := range s.Nodes {
		had := map[string]string{}
		for _, n := range prevC.Nodes {
			if n.Name == name {
				for _, b := range n.Binaries {
					had[b.Path] = b.Version
				}
			}
		}
		for _, b := range nodes[name].Binaries {
			if v, ok := had[b.Path]; ok && v != b.Version && !b.OS {
				binaries[name] = append(binaries[name], b)
			}
		}
	}
	if a.cfg.DryRun {
		for _, name := range s.Nodes {
			_, changed, removed, err := a.changes(ctx, nodes[name], c, prev, tree)
			if err != nil {
				return err
			}
			if s.Drain {
				a.log("  would drain %s (within %s)", name, s.DrainTimeout)
			}
			for _, b := range binaries[name] {
				a.log("  would lay %s on %s (%s)", b.Path, name, b.Version)
			}
			reloads := reloading(prev, tree, name, s.Restarts)
			var restart, reload []string
			for _, u := range s.Restarts {
				if reloads[u] {
					reload = append(reload, u)
				} else {
					restart = append(restart, u)
				}
			}
			then := []string{"restart " + strings.Join(restart, ", ")}
			if len(reload) > 0 {
				then = append(then[:min(len(restart), 1)], "reload "+strings.Join(reload, ", "))
			}
			a.log("  would lay %d files on %s%s, then %s", len(changed), name, listed(changed, removed), strings.Join(then, " and "))
		}
		return nil
	}
	if s.Drain {
		timeout := drainTimeout(s)
		for _, name := range s.Nodes {
			if err := a.drain(ctx, name, timeout); err != nil {
				return err
			}
		}
	}
	// When each node's units were restarted: a lease renewed after it is
	// the new kubelet's.
	restarted, began := map[string]time.Time{}, map[string]time.Time{}
	apiServerStopped := map[string]bool{}
	for _, name := range s.Nodes {
		want, changed, removed, err := a.changes(ctx, nodes[name], c, prev, tree)
		if err != nil {
			return err
		}
		at, err := a.node(ctx, name)
		if err != nil {
			return err
		}
		for _, p := range changed {
			if err := at.write(ctx, want[p]); err != nil {
				return fmt.Errorf("node %s: %v", name, err)
			}
		}
		for _, p := range removed {
			if err := at.remove(ctx, p); err != nil {
				return fmt.Errorf("node %s: %v", name, err)
			}
		}
		if len(changed)+len(removed)+len(binaries[name]) > 0 {
			delete(a.apiServerFresh, name)
		}
		a.log("  %s: laid %d files%s", name, len(changed), listed(changed, removed))
		for _, b := range binaries[name] {
			if err := at.install(ctx, filepath.Join(a.cfg.Binaries, filepath.Base(b.Path)), b.Path); err != nil {
				return fmt.Errorf("node %s: %v", name, err)
			}
			a.log("  %s: laid %s (%s)", name, b.Path, b.Version)
		}
		if _, err := a.run(ctx, name, "systemctl", "daemon-reload"); err != nil {
			return err
		}
		// A kubelet that rotates its client certificate keeps it in a
		// store of its own, made from its kubeconfig's at its first start
		// and preferred to it at every start after: without the store's
		// current certificate it takes the kubeconfig's new one (and
		// stores it), as at its first start.
		// The kubeconfig laid by this step or an earlier one of the plan:
		// held against the running cluster's.
		was, _ := a.cfg.OldTree.Get(layout.NodeTree(name, layout.KubeletKubeconfig))
		is, _ := tree.Get(layout.NodeTree(name, layout.KubeletKubeconfig))
		if slices.Contains(s.Restarts, "kubelet.service") && was.Data != nil && !bytes.Equal(was.Data, is.Data) {
			if out, err := a.run(ctx, name, "rm", "-f", layout.Abs(kubeletClientCurrent)); err != nil {
				return fmt.Errorf("node %s: %v: %s", name, err, out)
			}
			a.log("  %s: removed the kubelet's link to its current client certificate: it takes the kubeconfig's new one", name)
		}
		began[name] = a.cfg.Now()
		reloads := reloading(prev, tree, name, s.Restarts)
		// The units reloaded or left running, which the log does not
		// call restarted.
		kept := map[string]bool{}
		for _, u := range s.Restarts {
			if lease := leaderLease(u); lease != "" {
				// A controller holds its leader lease until it runs out
				// (15 s) unless it releases it, which neither does: once
				// stopped, its lease is released for it, as client-go's
				// ReleaseOnCancel would, and its successor, here or on
				// another node, takes it at once.
				if _, err := a.run(ctx, name, "systemctl", "stop", u); err != nil {
					return err
				}
				if err := a.releaseLease(ctx, name, lease); err != nil {
					return err
				}
				if _, err := a.run(ctx, name, "systemctl", "start", u); err != nil {
					return err
				}
				continue
			}
			if u == systemd.InstallUnit {
				// Restarting the install unit would restart every unit
				// that Requires= it: its command checks the binaries
				// instead, as the unit would.
				cmd, err := execStart(want[layout.Abs(layout.UnitDir+u)])
				if err != nil {
					return fmt.Errorf("node %s: %v", name, err)
				}
				if out, err := a.run(ctx, name, cmd...); err != nil {
					return fmt.Errorf("node %s: the binaries do not check: %v: %s", name, err, out)
				}
				continue
			}
			if m, ok := memberOf(c, name); ok && u == "etcd.service" && nodes[name].Runs(ir.ComponentAPIServer) {
				// The node's API server talks to this member alone: while
				// the member restarts it would hold its clients'
				// requests (those of every connection the endpoint gave
				// it) until they time out. It stops first, as it does
				// at a restart of its own (its delay has the endpoint
				// and kube-proxy send its clients elsewhere), and starts
				// once the member is healthy.
				for _, cmd := range [][]string{{"stop", "kube-apiserver.service"}, {"restart", u}} {
					if out, err := a.run(ctx, name, append([]string{"systemctl"}, cmd...)...); err != nil {
						return fmt.Errorf("node %s: systemctl %s: %v: %s", name, strings.Join(cmd, " "), err, out)
					}
				}
				if err := a.await(ctx, "etcd member "+name+" healthy, before its API server starts", func() (bool, string) {
					return a.etcd.healthy(ctx, m.ClientURL()), "not healthy"
				}); err != nil {
					return err
				}
				if out, err := a.run(ctx, name, "systemctl", "start", "kube-apiserver.service"); err != nil {
					return fmt.Errorf("node %s: starting kube-apiserver.service: %v: %s", name, err, out)
				}
				a.log("  %s: kube-apiserver.service stopped while etcd.service restarted", name)
				apiServerStopped[name] = true
				a.apiServerFresh[name] = true
				continue
			}
			if u == "kube-apiserver.service" && a.apiServerFresh[name] {
				a.log("  %s: kube-apiserver.service runs these files already: started again with its etcd member, nothing laid since", name)
				kept[u] = true
				continue
			}
			if reloads[u] {
				if out, err := a.run(ctx, name, "systemctl", "reload", u); err != nil {
					return fmt.Errorf("node %s: reloading %s: %v: %s", name, u, err, out)
				}
				a.log("  %s: reloaded %s (its unit unchanged: its connections stay)", name, u)
				kept[u] = true
				continue
			}
			if _, err := a.run(ctx, name, "systemctl", "restart", u); err != nil {
				return err
			}
		}
		restarted[name] = a.cfg.Now()
		if r := slices.DeleteFunc(slices.Clone(s.Restarts), func(u string) bool { return kept[u] }); len(r) > 0 {
			a.log("  %s: restarted %s", name, strings.Join(r, ", "))
		}
	}
	for _, name := range s.Nodes {
		units := s.Restarts
		if apiServerStopped[name] && !slices.Contains(units, "kube-apiserver.service") {
			units = append(slices.Clone(units), "kube-apiserver.service")
		}
		if err := a.gates(ctx, c, nodes[name], units, began[name], restarted[name]); err != nil {
			return err
		}
	}
	if s.Drain {
		for _, name := range s.Nodes {
			if err := a.cordon(ctx, name, false); err != nil {
				return err
			}
			a.log("  %s: uncordoned", name)
		}
		if err := a.await(ctx, "the drained nodes' workloads available", func() (bool, string) { return a.kube.workloadsReady(ctx) }); err != nil {
			return err
		}
	}
	return nil
}

// drainTimeout is how long a step's drains may take: the plan's, or 5
// minutes where it names none (a control-plane node).
func drainTimeout(s change.Step) time.Duration {
	if d, err := time.ParseDuration(s.DrainTimeout); err == nil && d > 0 {
		return d
	}
	return 5 * time.Minute
}

// reloading are the units of node name that apply reloads rather than
// restarts: the step leaves a unit's own files (its unit and drop-ins)
// as they were, and the unit has a reload command (HAProxy's, which
// starts new workers from the new configuration and certificates while
// the old ones finish their connections). Each tree is read once for
// all of them.
func reloading(prev, tree *targets.Tree, name string, units []string) map[string]bool {
	unitDir := layout.NodeTree(name, layout.UnitDir)
	// files are the unit's own files of t, by unit.
	files := func(t *targets.Tree) map[string]map[string]string {
		out := map[string]map[string]string{}
		for _, f := range t.Files() {
			rel, ok := strings.CutPrefix(f.Path, unitDir)
			if !ok {
				continue
			}
			u, _, _ := strings.Cut(rel, "/")
			u = strings.TrimSuffix(u, ".d")
			if slices.Contains(units, u) {
				if out[u] == nil {
					out[u] = map[string]string{}
				}
				out[u][f.Path] = string(f.Data)
			}
		}
		return out
	}
	was, is := files(prev), files(tree)
	out := map[string]bool{}
	for _, u := range units {
		if maps.Equal(was[u], is[u]) && strings.Contains(is[u][unitDir+u], "\nExecReload=") {
			out[u] = true
		}
	}
	return out
}

// execStart is the command of a unit file with one ExecStart= and no
// quoting, as the install unit's.
func execStart(f targets.File) ([]string, error) {
	for _, line := range strings.Split(string(f.Data), "\n") {
		if cmd, ok := strings.CutPrefix(line, "ExecStart="); ok && !strings.ContainsAny(cmd, `"'\$`) {
			return strings.Fields(cmd), nil
		}
	}
	return nil, fmt.Errorf("%s has no plain ExecStart= line", f.Path)
}

// copyInto copies the program src into a machine's root at path, as
// writeInto writes a file, mode 0755: a running program keeps its old
// file until it is restarted.
func copyInto(root, src, path string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	p := filepath.Join(root, path)
	tmp, err := os.CreateTemp(filepath.Dir(p), writer.TempPrefix(p))
	if err != nil {
		return err
	}
	name := tmp.Name()
	defer os.Remove(name)
	if _, err := io.Copy(tmp, in); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o755); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(name, p)
}

// listed says which files, in a log line.
func listed(changed, removed []string) string {
	var parts []string
	if len(changed) > 0 {
		parts = append(parts, strings.Join(changed, ", "))
	}
	if len(removed) > 0 {
		parts = append(parts, "removed "+strings.Join(removed, ", "))
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, "; ") + ")"
}

// writeInto writes a file into a machine's root, atomically, with its
// mode: a temporary file beside it renamed over it.
func writeInto(root string, f targets.File) error {
	p := filepath.Join(root, f.Path)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(p), writer.TempPrefix(p))
	if err != nil {
		return err
	}
	name := tmp.Name()
	defer os.Remove(name)
	if err := tmp.Chmod(f.Mode.Perm()); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(f.Data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(name, p)
}

// kubeletClientCurrent is the kubelet's current client certificate in its
// store (its --cert-dir, by default beside its serving certificate).
const kubeletClientCurrent = layout.KubeletDir + "pki/kubelet-client-current.pem"

// gates waits on what must hold of node n after step s before the next
// step: its kubelet's lease renewed since the restart (since: once every
// unit restarted) and the node Ready; its API server's /readyz; its etcd
// member healthy and the members' quorum; its controllers active and
// leading since they were stopped (began: before the first unit
// restarted).
func (a *applier) gates(ctx context.Context, c *ir.Cluster, n ir.Node, units []string, began, since time.Time) error {
	restarted := func(u string) bool { return slices.Contains(units, u) }
	if restarted("etcd.service") {
		for _, m := range c.Etcd.Members {
			if m.Name != n.Name {
				continue
			}
			if err := a.await(ctx, "etcd member "+n.Name+" healthy", func() (bool, string) {
				return a.etcd.healthy(ctx, m.ClientURL()), "not healthy"
			}); err != nil {
				return err
			}
		}
		if err := a.quorum(ctx, c); err != nil {
			return err
		}
	}
	if restarted("kube-apiserver.service") {
		k := a.kube.at(c.APIServerURL(n))
		if err := a.await(ctx, "kube-apiserver of "+n.Name+" ready", func() (bool, string) {
			return k.ready(ctx), "/readyz does not answer ok"
		}); err != nil {
			return err
		}
	}
	var controllers []string
	for _, u := range []string{"kube-controller-manager.service", "kube-scheduler.service", "kube-proxy.service", "containerd.service"} {
		if !restarted(u) {
			continue
		}
		if err := a.await(ctx, u+" of "+n.Name+" active", func() (bool, string) {
			out, err := a.run(ctx, n.Name, "systemctl", "is-active", u)
			return err == nil, strings.TrimSpace(string(out))
		}); err != nil {
			return err
		}
		if lease := leaderLease(u); lease != "" {
			if err := a.leads(ctx, n, lease, began); err != nil {
				return err
			}
			controllers = append(controllers, u)
		}
	}
	if err := a.staysUp(ctx, n, controllers); err != nil {
		return err
	}
	// The control plane's own components have their gates above; a
	// kubelet's renewed lease proves the node's own path to the API
	// (its kubelet, runtime, proxy, or the endpoint it reaches through).
	controlPlaneOnly := len(units) > 0 && !slices.ContainsFunc(units, func(u string) bool {
		return !slices.Contains([]string{"etcd.service", "kube-apiserver.service", "kube-controller-manager.service", "kube-scheduler.service"}, u)
	})
	if n.RunsPods() && !controlPlaneOnly {
		if err := a.renewedReady(ctx, n.Name, since, "its kubelet's lease renewed since the restart", "lease last renewed before the restart"); err != nil {
			return err
		}
	}
	if n.RunsPods() && slices.Contains(units, "kubelet.service") {
		if err := a.kubeletServes(ctx, n.Name); err != nil {
			return err
		}
	}
	return nil
}

// renewedReady waits until node is Ready and its kubelet has renewed its
// Lease after since: a Node's Ready condition alone may be what it said
// before (a restart, a restore of the snapshot's Nodes).
func (a *applier) renewedReady(ctx context.Context, node string, since time.Time, renewed, stale string) error {
	return a.await(ctx, node+" Ready, "+renewed, func() (bool, string) {
		var l coordinationv1.Lease
		if err := a.kube.get(ctx, "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/"+node, &l); err != nil {
			return false, err.Error()
		}
		if l.Spec.RenewTime == nil || !l.Spec.RenewTime.After(since) {
			return false, stale
		}
		var n corev1.Node
		if err := a.kube.get(ctx, "/api/v1/nodes/"+node, &n); err != nil {
			return false, err.Error()
		}
		return nodeReady(n), "not Ready"
	})
}

// kubeletServes waits until the restarted kubelet of node knows the pods
// the API runs there (asked through the API server, as kubectl logs and
// exec reach it): a kubelet Ready and renewing its lease may not have
// them yet, and answers a pod's logs or exec with "pod does not exist"
// until it has.
func (a *applier) kubeletServes(ctx context.Context, node string) error {
	return a.await(ctx, "the kubelet of "+node+" serves its pods' logs and exec", func() (bool, string) {
		var running corev1.PodList
		if err := a.kube.get(ctx, "/api/v1/pods?fieldSelector="+url.QueryEscape("spec.nodeName="+node+",status.phase=Running"), &running); err != nil {
			return false, err.Error()
		}
		var known corev1.PodList
		if err := a.kube.get(ctx, "/api/v1/nodes/"+node+"/proxy/pods", &known); err != nil {
			return false, err.Error()
		}
		has := map[types.UID]bool{}
		for _, p := range known.Items {
			has[p.UID] = true
		}
		for _, p := range running.Items {
			if p.DeletionTimestamp == nil && !has[p.UID] {
				return false, "it does not know " + p.Namespace + "/" + p.Name
			}
		}
		return true, ""
	})
}

// rootCAPublished waits until every namespace's kube-root-ca.crt holds
// the cluster CA bundle of c's control plane (the controller-managers'
// --root-ca-file): a pod started after takes it into its
// service-account volume.
func (a *applier) rootCAPublished(ctx context.Context, c *ir.Cluster, tree *targets.Tree) error {
	var want []byte
	for _, n := range c.Nodes {
		if f, ok := tree.Get(layout.NodeTree(n.Name, layout.ClusterCACert)); ok && n.Runs(ir.ComponentControllerManager) {
			want = f.Data
			break
		}
	}
	if want == nil {
		return errors.New("kcompile bug: the state's control plane has no cluster CA bundle")
	}
	wantCerts := pemBlocks(want)
	return a.await(ctx, "every namespace's kube-root-ca.crt is the cluster CA bundle", func() (bool, string) {
		var maps corev1.ConfigMapList
		if err := a.kube.get(ctx, "/api/v1/configmaps?fieldSelector="+url.QueryEscape("metadata.name=kube-root-ca.crt"), &maps); err != nil {
			return false, err.Error()
		}
		var namespaces corev1.NamespaceList
		if err := a.kube.get(ctx, "/api/v1/namespaces", &namespaces); err != nil {
			return false, err.Error()
		}
		have := map[string]bool{}
		var stale []string
		for _, m := range maps.Items {
			have[m.Namespace] = true
			if !slices.Equal(pemBlocks([]byte(m.Data["ca.crt"])), wantCerts) {
				stale = append(stale, m.Namespace)
			}
		}
		for _, ns := range namespaces.Items {
			if !have[ns.Name] && ns.DeletionTimestamp == nil {
				stale = append(stale, ns.Name+" (none)")
			}
		}
		sort.Strings(stale)
		return len(stale) == 0, "not yet in " + strings.Join(stale, ", ")
	})
}

// pemBlocks are the DER bytes of each PEM block of data, as strings, in
// order.
func pemBlocks(data []byte) []string {
	var out []string
	for {
		var b *pem.Block
		if b, data = pem.Decode(data); b == nil {
			return out
		}
		out = append(out, string(b.Bytes))
	}
}

// leaderLease is the leader lease in kube-system of a controller's unit,
// "" for another unit.
func leaderLease(unit string) string {
	if l := strings.TrimSuffix(unit, ".service"); l == "kube-controller-manager" || l == "kube-scheduler" {
		return l
	}
	return ""
}

// leaderLeasePath is the API path of a controller's leader lease.
func leaderLeasePath(lease string) string {
	return "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/" + lease
}

// releaseLease gives up the leader lease for a process of node that has
// stopped, where it holds it: no holder, and a duration of a second, as
// client-go's leader election releases it.
func (a *applier) releaseLease(ctx context.Context, node, lease string) error {
	p := leaderLeasePath(lease)
	var l coordinationv1.Lease
	if err := a.kube.get(ctx, p, &l); err != nil {
		if notFound(err) {
			return nil
		}
		return fmt.Errorf("the lease %s: %w", lease, err)
	}
	if l.Spec.HolderIdentity == nil || !strings.HasPrefix(*l.Spec.HolderIdentity, node+"_") {
		return nil
	}
	now := metav1.NewMicroTime(a.cfg.Now())
	none, second := "", int32(1)
	l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds, l.Spec.AcquireTime, l.Spec.RenewTime = &none, &second, &now, &now
	body, err := json.Marshal(l)
	if err != nil {
		return err
	}
	if _, err := a.kube.do(ctx, http.MethodPut, p, "application/json", body); err != nil {
		var ae *apiError
		if errors.As(err, &ae) && ae.code == http.StatusConflict {
			// Taken meanwhile: by another node's process, which is what
			// the release is for.
			return nil
		}
		return fmt.Errorf("releasing the lease %s: %w", lease, err)
	}
	return nil
}

// leads waits until the leader lease of a controller restarted on n is
// held by a process of n that took it since the restart began, or
// renewed since then by another node's.
func (a *applier) leads(ctx context.Context, n ir.Node, lease string, since time.Time) error {
	return a.await(ctx, lease+" leading from "+n.Name+" or another node", func() (bool, string) {
		var l coordinationv1.Lease
		if err := a.kube.get(ctx, leaderLeasePath(lease), &l); err != nil {
			return false, err.Error()
		}
		holder := ""
		if l.Spec.HolderIdentity != nil {
			holder = *l.Spec.HolderIdentity
		}
		if strings.HasPrefix(holder, n.Name+"_") {
			return l.Spec.AcquireTime != nil && l.Spec.AcquireTime.After(since), "held by " + holder + ", acquired before the restart"
		}
		return holder != "" && l.Spec.RenewTime != nil && l.Spec.RenewTime.After(since), "held by " + holder + ", not renewed since the restart"
	})
}

// staysUp holds the units to be started no more by systemd for 3 s, once
// they lead: an active unit says little of a controller that fails once
// it leads (builds its controllers) and is started again.
func (a *applier) staysUp(ctx context.Context, n ir.Node, units []string) error {
	if len(units) == 0 {
		return nil
	}
	restarts := func() string {
		out, _ := a.run(ctx, n.Name, append([]string{"systemctl", "show", "-p", "NRestarts", "--value"}, units...)...)
		return strings.Join(strings.Fields(string(out)), " ")
	}
	before := restarts()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(3 * time.Second):
	}
	if after := restarts(); after != before {
		return fmt.Errorf("%s of %s started again by systemd (restarts %s, then %s): it fails once it runs; its journal says why", strings.Join(units, ", "), n.Name, before, after)
	}
	a.log("  gate: %s of %s stay up", strings.Join(units, ", "), n.Name)
	return nil
}

// quorum waits until more than half of the state's etcd members answer
// healthy.
func (a *applier) quorum(ctx context.Context, c *ir.Cluster) error {
	members := c.Etcd.Members
	return a.await(ctx, "etcd quorum", func() (bool, string) {
		healthy := 0
		for _, m := range members {
			if a.etcd.healthy(ctx, m.ClientURL()) {
				healthy++
			}
		}
		return healthy > len(members)/2, fmt.Sprintf("%d/%d members healthy", healthy, len(members))
	})
}

// await polls f until it holds, the gate's time runs out or ctx ends.
func (a *applier) await(ctx context.Context, what string, f func() (bool, string)) error {
	ctx, cancel := context.WithTimeout(ctx, a.cfg.GateTimeout)
	defer cancel()
	last := ""
	began := a.cfg.Now()
	for {
		ok, status := f()
		if ok {
			// How long a gate held a step up says where a step's time
			// went; one that held at once says nothing more.
			if waited := a.cfg.Now().Sub(began); waited >= time.Second {
				a.log("  gate: %s (after %s)", what, waited.Round(100*time.Millisecond))
			} else {
				a.log("  gate: %s", what)
			}
			return nil
		}
		last = status
		select {
		case <-ctx.Done():
			return fmt.Errorf("gate %q does not hold (%s) after %s", what, last, a.cfg.GateTimeout)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// cordon marks a node unschedulable, or schedulable again.
func (a *applier) cordon(ctx context.Context, node string, on bool) error {
	patch := fmt.Sprintf(`{"spec":{"unschedulable":%t}}`, on)
	_, err := a.kube.do(ctx, http.MethodPatch, "/api/v1/nodes/"+node, "application/strategic-merge-patch+json", []byte(patch))
	return err
}

// drain cordons a node and evicts its pods through the Eviction API,
// which refuses an eviction a PodDisruptionBudget forbids (429): those
// are asked again until timeout. DaemonSet pods and static pods stay. As
// kubectl drain without --force, it refuses, before it cordons, a node
// running a pod no controller would start again elsewhere.
func (a *applier) drain(ctx context.Context, node string, timeout time.Duration) error {
	var pods corev1.PodList
	if err := a.kube.get(ctx, "/api/v1/pods?fieldSelector="+url.QueryEscape("spec.nodeName="+node), &pods); err != nil {
		return err
	}
	for _, p := range pods.Items {
		if !staysOnDrain(p) && len(p.OwnerReferences) == 0 {
			return fmt.Errorf("draining %s: pod %s/%s has no controller, so an eviction would end it for good; delete it, or give it a controller, then --resume", node, p.Namespace, p.Name)
		}
	}
	if err := a.cordon(ctx, node, true); err != nil {
		return err
	}
	a.log("  %s: cordoned", node)
	began := a.cfg.Now()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	left := -1
	timedOut := func() error {
		return fmt.Errorf("draining %s: %d pods still on it after %s (a PodDisruptionBudget refuses their eviction, or they do not end)", node, left, timeout)
	}
	for {
		var pods corev1.PodList
		if err := a.kube.get(ctx, "/api/v1/pods?fieldSelector="+url.QueryEscape("spec.nodeName="+node), &pods); err != nil {
			if ctx.Err() != nil && left >= 0 {
				return timedOut()
			}
			return err
		}
		left = 0
		for _, p := range pods.Items {
			if staysOnDrain(p) {
				continue
			}
			left++
			if err := a.evict(ctx, p); err != nil {
				if ctx.Err() != nil {
					return timedOut()
				}
				return fmt.Errorf("evicting %s/%s: %v", p.Namespace, p.Name, err)
			}
		}
		if left == 0 {
			a.log("  %s: drained (%s)", node, a.cfg.Now().Sub(began).Round(100*time.Millisecond))
			return nil
		}
		select {
		case <-ctx.Done():
			return timedOut()
		case <-time.After(time.Second):
		}
	}
}

// evict asks the Eviction API to evict p; a refusal a
// PodDisruptionBudget makes (429) and a pod already gone are not errors:
// the caller asks again while the pod is there.
func (a *applier) evict(ctx context.Context, p corev1.Pod) error {
	ev := policyv1.Eviction{TypeMeta: metav1.TypeMeta{APIVersion: "policy/v1", Kind: "Eviction"},
		ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace}}
	body, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	_, err = a.kube.do(ctx, http.MethodPost, path.Join("/api/v1/namespaces", p.Namespace, "pods", p.Name, "eviction"), "application/json", body)
	var ae *apiError
	if err != nil && errors.As(err, &ae) && (ae.code == http.StatusTooManyRequests || ae.code == http.StatusNotFound) {
		return nil
	}
	return err
}

// endedOrMirror: a pod that ended, or a static pod's mirror, which no
// eviction or restart concerns.
func endedOrMirror(p corev1.Pod) bool {
	if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return true
	}
	_, mirror := p.Annotations[corev1.MirrorPodAnnotationKey]
	return mirror
}

// staysOnDrain: a DaemonSet's pod, a static pod, or one that ended.
func staysOnDrain(p corev1.Pod) bool {
	if endedOrMirror(p) {
		return true
	}
	for _, o := range p.OwnerReferences {
		if o.Kind == "DaemonSet" {
			return true
		}
	}
	return false
}

// addons applies the addon manifests of tree (up's copies where its
// overrides change them) and waits until they roll out.
func (a *applier) addons(ctx context.Context, c *ir.Cluster, tree *targets.Tree) error {
	manifests, err := addonManifests(c, tree, a.cfg.Running.Overrides)
	if err != nil {
		return err
	}
	for _, m := range manifests {
		rel, data := m.name, m.data
		if a.cfg.DryRun {
			a.log("  would apply %s", rel)
			continue
		}
		n, err := a.kube.apply(ctx, rel, data)
		if err != nil {
			return fmt.Errorf("applying %s: %v", rel, err)
		}
		a.log("  applied %s (%d objects)", rel, n)
	}
	if a.cfg.DryRun {
		return nil
	}
	return a.await(ctx, "every addon rolled out", func() (bool, string) { return a.kube.workloadsReady(ctx) })
}
