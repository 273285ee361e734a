package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/kcompile/kcompile/compare"
	"github.com/kcompile/kcompile/compiler"
	"github.com/kcompile/kcompile/compiler/diag"
	"github.com/kcompile/kcompile/compiler/ir"
	"github.com/kcompile/kcompile/compiler/pki"
	"github.com/kcompile/kcompile/pipeline"
	"github.com/kcompile/kcompile/runtimes/nspawn"
	"github.com/kcompile/kcompile/targets"
)

// applyCmd performs the plan from the cluster kcompile up runs to a new
// spec.
type applyCmd struct {
	Dir         string        `arg:"" optional:"" default:"." help:"The spec the running cluster is to become (a spec directory)."`
	Work        string        `help:"Work directory of the kcompile up that runs the cluster; default /var/lib/kcompile/up/<cluster name>." placeholder:"DIR"`
	Secrets     string        `short:"s" default:"secrets.json" placeholder:"FILE" help:"The secrets bundle the cluster was booted with."`
	Via         []string      `placeholder:"VERSION" help:"As for kcompile plan: the release of each Kubernetes minor the change passes through."`
	Policy      []string      `placeholder:"PDIR" help:"Hold every state of the plan to the organisation policies of PDIR (repeatable)."`
	Profile     string        `enum:",cis" default:"" help:"With --policy: the benchmark every state is checked with."`
	Binaries    string        `help:"Directory of the programs of the new versions by name (as kcompile up's --binaries): a step that changes a node's binaries lays them from there." placeholder:"DIR"`
	DryRun      bool          `help:"Say what each step would do (the files it would lay on each node, the units it would restart) and change nothing."`
	Resume      bool          `help:"Go on with an apply of the same change that stopped, from the step after the last one done."`
	GateTimeout time.Duration `default:"5m" help:"How long each health gate may take to hold before apply stops."`
	From        string        `placeholder:"DIR" help:"Bare metal: the spec the cluster runs now, as kcompile build built it (its certificates' clock is SOURCE_DATE_EPOCH's, as build's was). Needs --work, where apply keeps what it did, and --ssh-user. Later applies take --work alone."`
	SSHUser     string        `name:"ssh-user" placeholder:"USER" help:"Reach the nodes over SSH at their addresses as USER: root, or an access user of the spec with sudo."`
	SSHKey      string        `name:"ssh-key" placeholder:"FILE" help:"With --ssh-user: the private key (unencrypted); default: the keys of ssh-agent (SSH_AUTH_SOCK)."`
	KnownHosts  string        `name:"known-hosts" placeholder:"FILE" help:"With --ssh-user: the nodes' host keys, as OpenSSH's known_hosts (default ~/.ssh/known_hosts); a node whose key is not there is refused."`
	SSHPort     int           `name:"ssh-port" default:"22" help:"With --ssh-user: the nodes' SSH port."`
	ToEnd       bool          `name:"to-end" help:"A rotation under way (kcompile secrets rotate): once the stage in --secrets is rolled out, write each next stage there, proven first as secrets rotate --next proves it, and roll it out, until the rotation has ended."`
}

// Run plans the change from the running cluster's recorded spec to the
// new one, refuses a plan whose any state fails, and performs it (exit 0
// when done, 1 when refused or stopped, 2 on any other error).
func (c *applyCmd) Run(e *env) error {
	via, err := parseVia(c.Via)
	if err != nil {
		return err
	}
	if c.ToEnd && c.DryRun {
		return usageError("--to-end rolls out one stage after another, each planned from the one before it: a dry run says what the first does; leave --to-end out")
	}
	for {
		b, err := c.applyStage(e, via)
		if err != nil {
			return err
		}
		if !c.ToEnd || b.Stage() == 0 {
			return nil
		}
		if _, err := writeStage(e, c.Dir, c.Secrets, b, func(*ir.Cluster) (*pki.Bundle, error) { return b.Advance(e.now) }); err != nil {
			return err
		}
		// The next stage is a change of its own, from the cluster the
		// last one left, which apply recorded.
		c.From, c.Resume = "", false
	}
}

// applyStage plans and performs the change from the running cluster to
// the spec with the bundle of --secrets, and returns that bundle.
func (c *applyCmd) applyStage(e *env, via map[int]string) (*pki.Bundle, error) {
	if c.From != "" && (c.Work == "" || c.SSHUser == "") {
		return nil, usageError("--from needs --work DIR (where apply keeps what it did) and --ssh-user USER (how it reaches the nodes)")
	}
	work, err := upWorkDir(e, c.Dir, c.Work)
	if err != nil {
		return nil, err
	}
	specDir := filepath.Join(work, nspawn.SpecDir)
	var transport *nspawn.SSH
	if c.SSHUser != "" {
		if transport, err = sshTransport(c.SSHUser, c.SSHKey, c.KnownHosts, c.SSHPort); err != nil {
			return nil, err
		}
	}
	b, diags, err := loadBundle(c.Secrets)
	if err != nil {
		return nil, err
	}
	if diags.HasErrors() {
		return nil, printDiagnostics(e, diags, "cannot use the secrets bundle "+c.Secrets)
	}
	secrets, err := b.Marshal()
	if err != nil {
		return nil, err
	}
	var running *nspawn.Running
	if c.From != "" {
		from, err := filepath.Abs(c.From)
		if err != nil {
			return nil, err
		}
		data, diags := compiler.Concrete(compiler.Source{Dir: from, Bound: e.bound})
		if diags.HasErrors() {
			return nil, printDiagnostics(e, diags, "the spec of --from does not evaluate")
		}
		// The hosts run what build built with this bundle.
		if running, err = nspawn.RecordRunning(work, data, e.now, secrets); err != nil {
			return nil, err
		}
	} else if running, err = nspawn.ReadRunning(work); err != nil {
		return nil, statusError{code: exitProblems, msg: err.Error()}
	}
	if c.SSHUser == "" && !running.Up() {
		return nil, usageError("the cluster in " + work + " runs on hosts kcompile up did not boot: give --ssh-user USER (and --ssh-key, --known-hosts) to reach them")
	}
	// The running cluster's files were built with the bundle recorded
	// beside its spec; --secrets is the one it is to run, the same but
	// across a stage of kcompile secrets rotate or a renewal.
	oldB := b
	if running.Bundle != "" {
		if oldB, diags, err = loadBundle(running.Bundle); err != nil {
			return nil, err
		}
		if diags.HasErrors() {
			return nil, printDiagnostics(e, diags, "cannot use the running cluster's recorded secrets bundle "+running.Bundle)
		}
	}
	p, err := compare.Plan(compare.Input{Args: []string{specDir, c.Dir}, Secrets: c.Secrets, OldSecrets: running.Bundle, Policies: c.Policy, Profile: c.Profile,
		Bound: e.bound, Now: e.now, Rand: rand.Reader, Cwd: e.cwd, Stage: e.progress.stage}, via)
	if err != nil {
		return nil, planError(e, err, "plan refused, nothing applied: ")
	}
	// Every state is built as the running cluster was: the clock its
	// certificates were issued at, with NEW's bundle (OLD's for OLD).
	buildWith := func(b *pki.Bundle, dir string, state map[string]any, tolerate []string) (*ir.Cluster, *targets.Tree, error) {
		src, err := compiler.StateSource(compiler.Source{Dir: dir, Bound: e.bound, Tolerate: tolerate}, state)
		if err != nil {
			return nil, nil, err
		}
		out, err := pipeline.Run(pipeline.Input{Source: src, Bundle: b, Now: running.Issued, Issue: true, Targets: []pipeline.Target{pipeline.Systemd}})
		if err != nil {
			return nil, nil, err
		}
		if out.Diagnostics.HasErrors() {
			var errs []string
			for _, d := range out.Diagnostics {
				if d.Severity == diag.Error {
					errs = append(errs, d.Code+" "+d.Path+": "+d.Message)
				}
			}
			return nil, nil, fmt.Errorf("the state does not build: %s", strings.Join(errs, "; "))
		}
		return out.Cluster, out.Trees[pipeline.Systemd], nil
	}
	oldData, oldDiags := compiler.Concrete(compiler.Source{Dir: specDir, Bound: e.bound})
	if oldDiags.HasErrors() {
		return nil, printDiagnostics(e, oldDiags, "the running cluster's recorded spec does not evaluate")
	}
	old, oldTree, err := buildWith(oldB, specDir, oldData, nil)
	if err != nil {
		return nil, statusError{code: exitProblems, msg: "the running cluster's recorded spec: " + err.Error()}
	}
	// A change of the bundle is taken only once every flow of the
	// running cluster is proven to work between the two, as kcompile
	// secrets rotate proved it when it wrote the stage.
	runningSecrets, err := oldB.Marshal()
	if err != nil {
		return nil, err
	}
	if !bytes.Equal(runningSecrets, secrets) {
		if err := pki.ProveTransition(old, oldB, b, e.now, rand.Reader); err != nil {
			return nil, statusError{code: exitProblems, msg: "nothing applied: the secrets bundle " + c.Secrets + " is not the next stage of the running cluster's: " + err.Error()}
		}
	}
	if transport != nil && c.SSHUser != "root" && !slices.ContainsFunc(old.Users, func(u ir.User) bool { return u.Name == c.SSHUser && u.Sudo }) {
		return nil, usageError("--ssh-user " + c.SSHUser + " is no access user of the running spec with sudo: apply runs its commands as root (access.users." + c.SSHUser + ".sudo: true, or root)")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	e.progress.pause()
	if err := p.WriteText(e.stderr); err != nil {
		return nil, err
	}
	err = nspawn.Apply(ctx, nspawn.ApplyConfig{
		Running: running, Plan: p, Old: old, OldTree: oldTree,
		Build: func(state map[string]any, tolerate []string) (*ir.Cluster, *targets.Tree, error) {
			return buildWith(b, c.Dir, state, tolerate)
		},
		Secrets:  secrets,
		Binaries: c.Binaries, DryRun: c.DryRun, Resume: c.Resume, GateTimeout: c.GateTimeout, Log: e.stderr, Now: time.Now, SSH: transport,
	})
	if err != nil {
		return nil, statusError{code: exitProblems, msg: err.Error()}
	}
	switch {
	case c.DryRun:
		fmt.Fprintf(e.stdout, "dry run: %s to apply, nothing changed\n", plural(p.Steps(), "step"))
	case p.Steps() == 0:
		fmt.Fprintf(e.stdout, "nothing to apply: the cluster in %s already runs %s\n", work, c.Dir)
	default:
		fmt.Fprintf(e.stdout, "applied %s → %s: %s, every gate held\n", p.From, p.To, plural(p.Steps(), "step"))
	}
	return b, nil
}

// sshTransport reads the key and the known hosts of --ssh-user.
func sshTransport(user, keyFile, knownHosts string, port int) (*nspawn.SSH, error) {
	t := &nspawn.SSH{User: user, Port: port}
	if keyFile != "" {
		data, err := os.ReadFile(keyFile)
		if err != nil {
			return nil, err
		}
		signer, err := ssh.ParsePrivateKey(data)
		if err != nil {
			return nil, usageError(fmt.Sprintf("--ssh-key %s: %v (an encrypted key is read through ssh-agent: leave --ssh-key out)", keyFile, err))
		}
		t.Signers = []ssh.Signer{signer}
	} else {
		sock := os.Getenv("SSH_AUTH_SOCK")
		if sock == "" {
			return nil, usageError("--ssh-user needs --ssh-key FILE, or an ssh-agent (SSH_AUTH_SOCK)")
		}
		conn, err := net.Dial("unix", sock)
		if err != nil {
			return nil, fmt.Errorf("ssh-agent: %v", err)
		}
		signers, err := agent.NewClient(conn).Signers()
		if err != nil {
			return nil, fmt.Errorf("ssh-agent: %v", err)
		}
		if len(signers) == 0 {
			return nil, usageError("ssh-agent holds no key: add one (ssh-add), or give --ssh-key FILE")
		}
		t.Signers = signers
	}
	if knownHosts == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return nil, err
		}
		knownHosts = filepath.Join(home, ".ssh", "known_hosts")
	}
	cb, err := knownhosts.New(knownHosts)
	if err != nil {
		return nil, usageError(fmt.Sprintf("--known-hosts %s: %v", knownHosts, err))
	}
	t.HostKeys = cb
	return t, nil
}

func usageError(msg string) error { return statusError{code: exitUsage, msg: msg} }
