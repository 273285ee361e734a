// Package plan orders a change of a running cluster: from the compiled
// OLD cluster to the compiled NEW one, a sequence of stages and steps,
// each chosen by a rule that is data (Rules) and each leaving the
// cluster in a state that is itself a spec. Every state is compiled and
// checked as a spec is (skew, quorum, failure domains, policies); a plan
// with a state that fails is refused, naming the step.
package plan

import (
	"fmt"
	"maps"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/kcompile/kcompile/compiler"
	"github.com/kcompile/kcompile/compiler/diag"
	"github.com/kcompile/kcompile/compiler/ir"
	"github.com/kcompile/kcompile/review"
)

// Side is one end of the change: the compiled cluster and its spec as
// data (compiler.Concrete), which the states are edited from.
type Side struct {
	Label   string
	Cluster *ir.Cluster
	Data    map[string]any
	// Diagnostics are the side's warnings and policy violations, from
	// its own compile.
	Diagnostics diag.List
}

// Input is what a plan is made from.
type Input struct {
	Old, New Side
	// Report is diff's analysis of the change: which units of which
	// node restart, and the steps a restart does not apply.
	Report *review.Report
	// Via gives the release of each minor a version change passes
	// through (1.35 → 1.37 passes through 1.36), by minor.
	Via map[int]string
	// Check compiles and checks a state given as spec data, the errors
	// of the codes tolerate reported as warnings; the plan is refused at
	// the first state with an error. Its warnings are kept with the
	// step. It is called for several states at once.
	Check func(data map[string]any, tolerate []string) diag.List
	// Since is diff's analysis from a state to NEW: the units of each
	// node that restart or start. A node this plan boots starts with the
	// files of its step's state; the restarts that take it on to NEW's
	// are found so. Nil: such a node needs none.
	Since func(data map[string]any, tolerate []string) (map[string][]string, error)
}

// Plan is the ordered change.
type Plan struct {
	From   string   `json:"from"`
	To     string   `json:"to"`
	Stages []*Stage `json:"stages"`
	// States counts the states compiled and checked: one per step, the
	// last of which is NEW itself.
	States int `json:"states"`
	// Rules are the rules the steps name, in the order of Rules.
	Rules []Rule `json:"rules"`
}

// Stage is a group of steps with one purpose.
type Stage struct {
	Name  string `json:"name"`
	Why   string `json:"why,omitempty"`
	Steps []Step `json:"steps"`
}

// Step is one change of the running cluster, taken whole before the
// next; its gates must hold before the next step starts.
type Step struct {
	// N numbers the steps of the whole plan from 1.
	N    int    `json:"n"`
	Kind string `json:"kind"`
	// Nodes are the nodes the step touches.
	Nodes []string `json:"nodes,omitempty"`
	// Restarts are the units restarted on each of Nodes.
	Restarts []string `json:"restarts,omitempty"`
	// Drain: each node is cordoned and drained first (PodDisruptionBudgets
	// respected, within DrainTimeout), and uncordoned after.
	Drain        bool   `json:"drain,omitempty"`
	DrainTimeout string `json:"drainTimeout,omitempty"`
	// Actions are what the step does, in order, as an operator would.
	Actions []string `json:"actions"`
	// Gates must hold before the next step.
	Gates []string `json:"gates,omitempty"`
	// Rule names the rule that placed the step (Rules).
	Rule string `json:"rule"`
	// Warnings are the check's warnings of the state the step leaves.
	Warnings []string `json:"warnings,omitempty"`
	// State is the spec data of the cluster after the step.
	State map[string]any `json:"-"`
	// Tolerate are the codes of errors the step's state may have while
	// it lasts: they are warnings of the step.
	Tolerate []string `json:"tolerate,omitempty"`
}

// KindLabels is the kind of the step that sets the labels and taints of
// registered Nodes (Step.Nodes) to those of NEW's nodes, removing those
// only OLD's have.
const KindLabels = "labels"

// KindPods is the step that restarts every pod started before it, each
// through its controller: once every API server signs service-account
// tokens with a new key, so that no pod holds a token of the old one when
// a rotation drops it.
const KindPods = "pods"

// KindServiceRange is the step that opens NEW's service ranges before
// anything runs them: a ServiceCIDR object of NEW's ranges
// (ServiceRangeName) and, where the DNS address moves, a Service at the
// new one beside CoreDNS's (DNSBridgeName). KindServiceMove ends the
// change once every node runs NEW's ranges: Services move into them,
// the pods holding old addresses restart, the bridges and the old
// default ServiceCIDR go.
const (
	KindServiceRange = "service range"
	KindServiceMove  = "service move"
	// ServiceRangeName is the ServiceCIDR of NEW's ranges while a move
	// lasts; the API servers' default one (kubernetes) takes its place
	// at the end.
	ServiceRangeName = "kcompile-next"
	// DNSBridgeName is the Service in kube-system at NEW's DNS address
	// while kube-dns keeps OLD's.
	DNSBridgeName = "kcompile-dns-next"
)

// Rule is one rule that orders a plan.
type Rule struct {
	ID   string `json:"id"`
	Text string `json:"text"`
}

// Rules are the rules a plan is made by.
func Rules() []Rule {
	return []Rule{
		{"minor-at-a-time", "Kubernetes versions move one minor at a time: a change of two minors is two stages, through a release of the minor between (--via)"},
		{"etcd-first", "etcd goes first, one member at a time, in the first version stage whose control plane supports its new release"},
		{"api-servers-first", "API servers go before every other component, one control-plane node at a time: no kubelet, kube-proxy, controller-manager or scheduler is ever newer than an API server it can reach through the endpoint, and no two API servers are more than one minor apart"},
		{"controllers-after-api-servers", "controller-managers and schedulers follow once every API server runs the stage's minor, one control-plane node at a time"},
		{"nodes-in-budget", "kubelets and kube-proxies go last: control-plane nodes one at a time, then each worker group in workers.order, at most its rollout.maxUnavailable nodes at once, drained first when its rollout.drain is set"},
		{"one-member-at-a-time", "etcd members and control-plane nodes are added or removed one at a time, each started with the membership of its own step; a removal never leaves fewer members than the quorum of the membership before it; an even membership between two steps is accepted while it lasts (KC0401 is a warning of that step)"},
		{"add-before-remove", "nodes are added before any is removed, so that a group never runs short of capacity; a removed node is cordoned and drained first"},
		{"replace-in-place", "a member whose address changes is removed, then added at its new address: a name stands for one member at a time"},
		{"restart-what-changed", "a configuration change restarts only the units whose files changed (kcompile diff's analysis), in the same order and budgets"},
		{"explicit-step", "a change a restart does not apply (labels of registered nodes, the service CIDR, the pod CIDR, the cluster domain, a CA) is an explicit step with its procedure"},
		{"service-range-first", "a service CIDR change opens NEW's range (a ServiceCIDR object, and a Service at the new DNS address beside CoreDNS's) before any node runs it, and ends once every node does: Services move into the new range and the pods that hold old addresses restart"},
		{"sans-until-moved", "a service CIDR move keeps the kubernetes Service's old address in the API servers' certificates in every state until its Services are recreated in the new range and its pods restarted; then the API servers restart without it, one at a time"},
		{"addons-last", "addons are applied last, once every node runs the new configuration"},
	}
}

// Refusal is a plan that cannot be made, or one of whose states does
// not check.
type Refusal struct {
	// Step is the step whose state failed; 0 when the plan could not be
	// made at all.
	Step int
	What string
	// Diagnostics are the state's errors.
	Diagnostics diag.List
}

func (r *Refusal) Error() string {
	if r.Step == 0 {
		return r.What
	}
	var b strings.Builder
	fmt.Fprintf(&b, "step %d (%s) leaves a cluster that does not check:", r.Step, r.What)
	for _, d := range r.Diagnostics {
		if d.Severity == diag.Error {
			fmt.Fprintf(&b, "\n  %s %s: %s", d.Code, d.Path, d.Message)
		}
	}
	return b.String()
}

func refuse(format string, a ...any) *Refusal { return &Refusal{What: fmt.Sprintf(format, a...)} }

// Make orders the change and checks every state it passes through.
func Make(in Input) (*Plan, error) {
	w, err := newWorld(in)
	if err != nil {
		return nil, err
	}
	p := &Plan{From: in.Old.Label, To: in.New.Label}
	b := &builder{in: in, w: w, plan: p, ends: map[string]bool{}, born: map[string]Step{}}
	for _, d := range append(slices.Clone(in.Old.Diagnostics), in.New.Diagnostics...) {
		b.ends[d.Code+" "+d.Message] = true
	}
	for _, f := range []func() error{b.servicesOpen, b.additions, b.removals, func() error { return b.explicit(false) },
		b.versions, b.configuration, func() error { return b.explicit(true) }, b.servicesMove, b.addons} {
		if err := f(); err != nil {
			// A state before the point the plan could not go past that
			// does not check is the first thing wrong with it.
			if cerr := b.checkAll(); cerr != nil {
				return nil, cerr
			}
			return nil, err
		}
	}
	if err := b.checkAll(); err != nil {
		return nil, err
	}
	b.drop()
	if !w.final() {
		return nil, refuse("internal error: the plan ends before the cluster is NEW")
	}
	used := map[string]bool{}
	for _, s := range p.Stages {
		for _, st := range s.Steps {
			used[st.Rule] = true
		}
	}
	for _, r := range Rules() {
		if used[r.ID] {
			p.Rules = append(p.Rules, r)
		}
	}
	return p, nil
}

// builder appends stages and checks each step's state.
type builder struct {
	in   Input
	w    *world
	plan *Plan
	n    int
	// configOnly: the change moves no version; its restarts are a stage
	// of their own.
	configOnly bool
	// ends are the diagnostics of OLD and NEW (code and message): a
	// failure domain whose loss loses etcd's quorum is accepted in a
	// state only where an end has it too.
	ends map[string]bool
	// born are the steps that boot the nodes this plan adds, by node.
	born map[string]Step
	// bornUnits caches sinceBorn.
	bornUnits map[string][]string
	// unchecked are the steps whose states are yet to be checked, in
	// order: checkAll checks them side by side.
	unchecked []stepAt
}

// stepAt is a step of a stage, by index: a pointer into the stage's
// steps would not survive the appends after it.
type stepAt struct {
	st *Stage
	i  int
}

// transient are the warnings a state may not add to what its ends
// have: the change would pass through a cluster weaker than either.
func transient() []string { return []string{compiler.CodeEtcdZone, compiler.CodeEtcdRack} }

// stage starts a stage; one left without steps is dropped at the end.
func (b *builder) stage(name, why string) *Stage {
	s := &Stage{Name: name, Why: why}
	b.plan.Stages = append(b.plan.Stages, s)
	return s
}

// step records s, after the world has been moved to its state; its
// state is checked with every other by checkAll.
func (b *builder) step(st *Stage, s Step) error {
	b.n++
	s.N = b.n
	s.State = b.w.data()
	st.Steps = append(st.Steps, s)
	if b.in.Check != nil {
		b.unchecked = append(b.unchecked, stepAt{st, len(st.Steps) - 1})
	}
	if strings.HasPrefix(s.Kind, "add ") {
		for _, n := range s.Nodes {
			b.born[n] = s
		}
	}
	return nil
}

// checkAll checks the states of the steps recorded since it last ran,
// as many at once as the machine has processors (a state's check is a
// whole compile, and states do not depend on each other's), then takes
// their diagnostics in the steps' order: the plan is refused at the
// first state with an error; the warnings are kept with their step.
func (b *builder) checkAll() error {
	jobs := b.unchecked
	b.unchecked = nil
	results := make([]diag.List, len(jobs))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), len(jobs)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= len(jobs) {
					return
				}
				s := jobs[i].st.Steps[jobs[i].i]
				results[i] = slices.Clone(b.in.Check(s.State, s.Tolerate))
			}
		}()
	}
	wg.Wait()
	for i, j := range jobs {
		s := &j.st.Steps[j.i]
		diags := results[i]
		b.plan.States++
		for i, d := range diags {
			if slices.Contains(s.Tolerate, d.Code) {
				diags[i].Message += " (while this step's membership lasts)"
			}
		}
		for i, d := range diags {
			if slices.Contains(transient(), d.Code) && !b.ends[d.Code+" "+d.Message] {
				diags[i].Severity = diag.Error
				diags[i].Message += " (neither the old nor the new cluster does: order the change so that no step passes through it, or make it in two changes)"
			}
		}
		if diags.HasErrors() {
			return &Refusal{Step: s.N, What: s.summary(), Diagnostics: diags}
		}
		for _, d := range diags {
			s.Warnings = append(s.Warnings, fmt.Sprintf("%s %s: %s", d.Code, d.Path, d.Message))
		}
	}
	return nil
}

// sinceBorn are the units that restart on each node this plan booted,
// from the state of the step that booted it to NEW.
func (b *builder) sinceBorn() (map[string][]string, error) {
	if b.bornUnits != nil {
		return b.bornUnits, nil
	}
	out := map[string][]string{}
	b.bornUnits = out
	if b.in.Since == nil {
		return out, nil
	}
	byStep := map[int]map[string][]string{}
	for _, node := range slices.Sorted(maps.Keys(b.born)) {
		s := b.born[node]
		units, ok := byStep[s.N]
		if !ok {
			var err error
			if units, err = b.in.Since(s.State, s.Tolerate); err != nil {
				return nil, fmt.Errorf("step %d's state: %w", s.N, err)
			}
			byStep[s.N] = units
		}
		if us, ok := units[node]; ok {
			// Listed: its files change, restarting what us says.
			out[node] = append([]string{}, us...)
		}
	}
	return out, nil
}

func (s Step) summary() string {
	return s.Kind + " " + strings.Join(s.Nodes, ", ")
}

// drop removes the stages left without steps.
func (b *builder) drop() {
	b.plan.Stages = slices.DeleteFunc(b.plan.Stages, func(s *Stage) bool { return len(s.Steps) == 0 })
}
