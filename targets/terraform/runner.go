package terraform

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/hashicorp/terraform-exec/tfexec"
	tfjson "github.com/hashicorp/terraform-json"
)

// Runner drives a built module with OpenTofu or Terraform through
// terraform-exec. Its environment is given, not read: the caller decides
// what the tool sees.
type Runner struct {
	tf *tfexec.Terraform
	// stateDir holds the state, the plan file and the tool's data
	// directory (providers), outside the rebuilt module.
	stateDir string
	vars     []string
}

// Matchbox is how the provider reaches Matchbox's gRPC API. The paths are
// absolute: the tool runs in the module directory.
type Matchbox struct {
	Endpoint, CA, ClientCert, ClientKey string
}

// NewRunner prepares execPath (tofu or terraform) to run in moduleDir
// with environment env. The state directory is created private: the state
// holds the nodes' private keys.
func NewRunner(moduleDir, execPath string, env map[string]string, mb Matchbox) (*Runner, error) {
	stateDir := filepath.Join(moduleDir, StateDir)
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return nil, err
	}
	if err := os.Chmod(stateDir, 0o700); err != nil {
		return nil, err
	}
	tf, err := tfexec.NewTerraform(moduleDir, execPath)
	if err != nil {
		return nil, err
	}
	env = maps.Clone(env)
	env["TF_DATA_DIR"] = filepath.Join(stateDir, ".terraform")
	// terraform-exec manages these itself and refuses them.
	for _, k := range tfexec.ProhibitedEnv(env) {
		delete(env, k)
	}
	if err := tf.SetEnv(env); err != nil {
		return nil, err
	}
	tf.SetStdout(io.Discard)
	tf.SetStderr(io.Discard)
	return &Runner{tf: tf, stateDir: stateDir, vars: []string{
		"matchbox_endpoint=" + mb.Endpoint,
		"matchbox_ca=" + mb.CA,
		"matchbox_client_cert=" + mb.ClientCert,
		"matchbox_client_key=" + mb.ClientKey,
	}}, nil
}

// StatePath is the state file the module's local backend writes.
func (r *Runner) StatePath() string { return filepath.Join(r.stateDir, "terraform.tfstate") }

// Init installs the provider and configures the backend.
func (r *Runner) Init(ctx context.Context) error {
	if err := r.tf.Init(ctx); err != nil {
		return fmt.Errorf("init: %w", err)
	}
	return nil
}

// Action is what a plan does to one resource.
type Action string

const (
	Create  Action = "create"
	Update  Action = "update"
	Replace Action = "replace"
	Delete  Action = "delete"
)

// Symbol is how plans conventionally mark the action.
func (a Action) Symbol() string {
	switch a {
	case Create:
		return "+"
	case Update:
		return "~"
	case Replace:
		return "-/+"
	}
	return "-"
}

// Change is one resource a plan touches.
type Change struct {
	Address string
	Action  Action
}

// Plan is a saved plan and what it changes.
type Plan struct {
	file    string
	Destroy bool
	// Changes are in the order the tool lists them (by address); no-ops
	// are left out.
	Changes []Change
}

// Count is how many changes have action a.
func (p *Plan) Count(a Action) int {
	n := 0
	for _, c := range p.Changes {
		if c.Action == a {
			n++
		}
	}
	return n
}

// Summary is a one-line account of the plan.
func (p *Plan) Summary() string {
	if len(p.Changes) == 0 {
		return "no changes"
	}
	return fmt.Sprintf("%d to add, %d to change, %d to replace, %d to destroy",
		p.Count(Create), p.Count(Update), p.Count(Replace), p.Count(Delete))
}

// Plan saves a plan (of destruction when destroy is set) and reads back
// what it does. Values never leave the tool: only addresses and actions.
func (r *Runner) Plan(ctx context.Context, destroy bool) (*Plan, error) {
	file := filepath.Join(r.stateDir, "kcompile.tfplan")
	opts := []tfexec.PlanOption{tfexec.Out(file), tfexec.Destroy(destroy)}
	for _, v := range r.vars {
		opts = append(opts, tfexec.Var(v))
	}
	if _, err := r.tf.Plan(ctx, opts...); err != nil {
		return nil, fmt.Errorf("plan: %w", err)
	}
	if err := os.Chmod(file, 0o600); err != nil {
		return nil, err
	}
	raw, err := r.tf.ShowPlanFile(ctx, file)
	if err != nil {
		return nil, fmt.Errorf("reading the plan: %w", err)
	}
	p := &Plan{file: file, Destroy: destroy}
	for _, rc := range raw.ResourceChanges {
		if rc.Change == nil {
			continue
		}
		a, ok := action(rc.Change.Actions)
		if !ok {
			continue
		}
		p.Changes = append(p.Changes, Change{Address: rc.Address, Action: a})
	}
	slices.SortStableFunc(p.Changes, func(a, b Change) int { return strings.Compare(a.Address, b.Address) })
	return p, nil
}

func action(as tfjson.Actions) (Action, bool) {
	switch {
	case as.Create():
		return Create, true
	case as.Update():
		return Update, true
	case as.Replace():
		return Replace, true
	case as.Delete():
		return Delete, true
	}
	return "", false
}

// Apply carries out a saved plan, then removes it: it holds the values it
// applies, secrets included.
func (r *Runner) Apply(ctx context.Context, p *Plan) error {
	err := r.tf.Apply(ctx, tfexec.DirOrPlan(p.file))
	r.protectState()
	if rmErr := r.Discard(p); err == nil {
		err = rmErr
	}
	if err != nil {
		return fmt.Errorf("apply: %w", err)
	}
	return nil
}

// Discard removes a plan that will not be applied.
func (r *Runner) Discard(p *Plan) error {
	if err := os.Remove(p.file); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// protectState keeps the state files private whatever mode the tool
// created them with.
func (r *Runner) protectState() {
	for _, name := range []string{"terraform.tfstate", "terraform.tfstate.backup"} {
		_ = os.Chmod(filepath.Join(r.stateDir, name), 0o600)
	}
}

// Resources lists the resource addresses the state records, sorted.
func (r *Runner) Resources(ctx context.Context) ([]string, error) {
	st, err := r.tf.Show(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the state: %w", err)
	}
	var out []string
	if st.Values != nil && st.Values.RootModule != nil {
		for _, res := range st.Values.RootModule.Resources {
			out = append(out, res.Address)
		}
	}
	slices.Sort(out)
	return out, nil
}
