package sim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"cuelang.org/go/cue"
	"cuelang.org/go/cue/cuecontext"
	cueerrors "cuelang.org/go/cue/errors"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kcompile/kcompile/compiler/ir"
)

// scenarioSchema is what a scenario file may say. Steps run in order; an
// expectation that does not hold is reported and the scenario goes on.
const scenarioSchema = `
#Target: {node: string} | {etcd: string} | {controlPlane: string}
#Duration: =~"^[0-9]+(ms|s|m)$"
#Step: {apply: string} |
	{wait: {pods: #Pods, timeout: *"2m" | #Duration}} |
	{wait: {nodesReady: int, timeout: *"2m" | #Duration}} |
	{stop: #Target} |
	{start: #Target} |
	{expect: {api: "served" | "unavailable"}} |
	{expect: {write: "succeeds" | "fails"}} |
	{expect: {node: string, ready: bool, within: *"90s" | #Duration}} |
	{expect: {pods: #Pods, within: *"3m" | #Duration}}
#Pods: {namespace: *"default" | string, selector: string, running: int & >=0, notOn: [...string]}
#Scenario: {name: string, steps: [...#Step]}
`

// Scenario is a parsed scenario file.
type Scenario struct {
	Name  string `json:"name"`
	Steps []Step `json:"steps"`
}

// Step is one step; exactly one field is set.
type Step struct {
	Apply  string  `json:"apply,omitempty"`
	Wait   *Wait   `json:"wait,omitempty"`
	Stop   *Target `json:"stop,omitempty"`
	Start  *Target `json:"start,omitempty"`
	Expect *Expect `json:"expect,omitempty"`
}

// Target names what a stop or start acts on: a whole node, an etcd
// member, or a node's control-plane components.
type Target struct {
	Node         string `json:"node,omitempty"`
	Etcd         string `json:"etcd,omitempty"`
	ControlPlane string `json:"controlPlane,omitempty"`
}

// Wait waits for pods or nodes.
type Wait struct {
	Pods       *Pods  `json:"pods,omitempty"`
	NodesReady int    `json:"nodesReady,omitempty"`
	Timeout    string `json:"timeout"`
}

// Expect is an expectation.
type Expect struct {
	API    string `json:"api,omitempty"`
	Write  string `json:"write,omitempty"`
	Node   string `json:"node,omitempty"`
	Ready  bool   `json:"ready,omitempty"`
	Pods   *Pods  `json:"pods,omitempty"`
	Within string `json:"within,omitempty"`
}

// Pods selects pods and says how many must run, and where not.
type Pods struct {
	Namespace string   `json:"namespace"`
	Selector  string   `json:"selector"`
	Running   int      `json:"running"`
	NotOn     []string `json:"notOn,omitempty"`
}

// ParseScenario reads a CUE scenario; errors name their file positions.
func ParseScenario(filename string, src []byte) (*Scenario, error) {
	ctx := cuecontext.New()
	schema := ctx.CompileString(scenarioSchema).LookupPath(cue.ParsePath("#Scenario"))
	v := ctx.CompileBytes(src, cue.Filename(filename))
	if err := v.Err(); err != nil {
		return nil, scenarioError(err)
	}
	v = schema.Unify(v)
	if err := v.Validate(cue.Concrete(true)); err != nil {
		return nil, scenarioError(err)
	}
	var s Scenario
	if err := v.Decode(&s); err != nil {
		return nil, scenarioError(err)
	}
	return &s, nil
}

func scenarioError(err error) error {
	var lines []string
	for _, e := range cueerrors.Errors(err) {
		pos := ""
		if ps := cueerrors.Positions(e); len(ps) > 0 {
			pos = ps[0].String() + ": "
		}
		format, args := e.Msg()
		path := strings.Join(e.Path(), ".")
		lines = append(lines, fmt.Sprintf("%s%s: %s", pos, path, fmt.Sprintf(format, args...)))
	}
	return errors.New(strings.Join(lines, "\n"))
}

// Result is the outcome of one step.
type Result struct {
	Step   int
	What   string
	Passed bool
	Detail string
}

// Run plays a scenario against the running cluster and reports every
// step; the scenario passes when every expectation held.
func (s *Sim) Run(ctx context.Context, sc *Scenario, report io.Writer) (bool, error) {
	cs := kubernetes.NewForConfigOrDie(s.AdminConfig())
	ok := true
	for i, st := range sc.Steps {
		r := s.step(ctx, cs, st)
		r.Step = i + 1
		mark := "PASS"
		if !r.Passed {
			mark = "FAIL"
			ok = false
		}
		fmt.Fprintf(report, "%s step %d: %s", mark, r.Step, r.What)
		if r.Detail != "" {
			fmt.Fprintf(report, " (%s)", r.Detail)
		}
		fmt.Fprintln(report)
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
	}
	return ok, nil
}

func duration(s, def string) time.Duration {
	if s == "" {
		s = def
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return time.Minute
	}
	return d
}

func (s *Sim) step(ctx context.Context, cs kubernetes.Interface, st Step) Result {
	fail := func(what string, err error) Result { return Result{What: what, Detail: err.Error()} }
	switch {
	case st.Apply != "":
		what := "apply manifests"
		if _, err := s.apply(ctx, "scenario", []byte(st.Apply)); err != nil {
			return fail(what, err)
		}
		return Result{What: what, Passed: true}
	case st.Wait != nil:
		w := st.Wait
		if w.Pods != nil {
			what := "wait for " + w.Pods.describe()
			err := s.waitFor(ctx, duration(w.Timeout, "2m"), func() bool { return s.podsHold(ctx, cs, w.Pods) == nil })
			if err != nil {
				return fail(what, s.podsHold(ctx, cs, w.Pods))
			}
			return Result{What: what, Passed: true}
		}
		what := fmt.Sprintf("wait for %d nodes Ready", w.NodesReady)
		var st Status
		err := s.waitFor(ctx, duration(w.Timeout, "2m"), func() bool {
			st, _ = s.Status(ctx)
			return st.Ready >= w.NodesReady
		})
		if err != nil {
			return fail(what, fmt.Errorf("%d Ready", st.Ready))
		}
		return Result{What: what, Passed: true}
	case st.Stop != nil || st.Start != nil:
		return s.stopStart(ctx, st)
	case st.Expect != nil:
		return s.expect(ctx, cs, st.Expect)
	}
	return Result{What: "empty step"}
}

func (p *Pods) describe() string {
	s := fmt.Sprintf("%d running pods %q in %s", p.Running, p.Selector, p.Namespace)
	if len(p.NotOn) > 0 {
		s += ", none on " + strings.Join(p.NotOn, ", ")
	}
	return s
}

// podsHold checks that exactly the wanted number of live pods run, and
// none on the excluded nodes.
func (s *Sim) podsHold(ctx context.Context, cs kubernetes.Interface, p *Pods) error {
	list, err := cs.CoreV1().Pods(p.Namespace).List(ctx, metav1.ListOptions{LabelSelector: p.Selector})
	if err != nil {
		return err
	}
	running := 0
	for _, pod := range list.Items {
		if pod.DeletionTimestamp != nil || pod.Status.Phase != corev1.PodRunning {
			continue
		}
		for _, n := range p.NotOn {
			if pod.Spec.NodeName == n {
				return fmt.Errorf("pod %s runs on %s", pod.Name, n)
			}
		}
		running++
	}
	if running != p.Running {
		return fmt.Errorf("%d running", running)
	}
	return nil
}

func (s *Sim) stopStart(ctx context.Context, st Step) Result {
	t, verb := st.Stop, "stop"
	if t == nil {
		t, verb = st.Start, "start"
	}
	var err error
	var what string
	switch {
	case t.Node != "":
		what = verb + " node " + t.Node
		if verb == "stop" {
			err = s.StopNode(t.Node)
		} else {
			err = s.StartNode(ctx, t.Node)
		}
	case t.Etcd != "":
		what = verb + " etcd member " + t.Etcd
		if verb == "stop" {
			err = s.StopEtcd(t.Etcd)
		} else {
			err = s.StartEtcd(t.Etcd)
		}
	default:
		what = verb + " the control plane of " + t.ControlPlane
		for _, comp := range []ir.Component{ir.ComponentScheduler, ir.ComponentControllerManager, ir.ComponentAPIServer} {
			if verb == "stop" {
				s.stopComponent(t.ControlPlane, comp)
			}
		}
		if verb == "start" {
			for _, comp := range []ir.Component{ir.ComponentAPIServer, ir.ComponentControllerManager, ir.ComponentScheduler} {
				if err = s.startComponent(t.ControlPlane, comp); err != nil {
					break
				}
			}
		}
	}
	if err != nil {
		return Result{What: what, Detail: err.Error()}
	}
	return Result{What: what, Passed: true}
}

// etcdRunning counts the members running.
func (s *Sim) etcdRunning() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.etcd)
}

func (s *Sim) expect(ctx context.Context, cs kubernetes.Interface, e *Expect) Result {
	switch {
	case e.API != "":
		what := "expect the API " + e.API + " through " + s.cluster.Endpoint.URL
		err := s.readyz(ctx)
		if (err == nil) != (e.API == "served") {
			detail := "served"
			if err != nil {
				detail = err.Error()
			}
			return Result{What: what, Detail: detail}
		}
		return Result{What: what, Passed: true}
	case e.Write != "":
		// kcompile check's failure-domain analysis: writes need a
		// majority of the members.
		members, running := len(s.cluster.Etcd.Members), s.etcdRunning()
		predicted := running >= members/2+1
		what := fmt.Sprintf("expect writes to %s (%d of %d etcd members running, quorum %d)", strings.TrimSuffix(e.Write, "s"), running, members, members/2+1)
		wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		defer cancel()
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "kcompile-sim-write-", Namespace: metav1.NamespaceDefault}}
		_, err := cs.CoreV1().ConfigMaps(metav1.NamespaceDefault).Create(wctx, cm, metav1.CreateOptions{})
		observed := err == nil
		want := e.Write == "succeeds"
		switch {
		case observed != want:
			detail := "the write succeeded"
			if err != nil {
				detail = "the write failed: " + err.Error()
			}
			return Result{What: what, Detail: detail}
		case observed != predicted:
			return Result{What: what, Detail: "the simulation disagrees with the quorum analysis of kcompile check"}
		}
		return Result{What: what, Passed: true}
	case e.Node != "":
		want := "Ready"
		if !e.Ready {
			want = "NotReady"
		}
		what := fmt.Sprintf("expect node %s %s within %s", e.Node, want, duration(e.Within, "90s"))
		var got string
		err := s.waitFor(ctx, duration(e.Within, "90s"), func() bool {
			n, err := cs.CoreV1().Nodes().Get(ctx, e.Node, metav1.GetOptions{})
			if err != nil {
				return false
			}
			got = "NotReady"
			for _, c := range n.Status.Conditions {
				if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
					got = "Ready"
				}
			}
			return got == want
		})
		if err != nil {
			return Result{What: what, Detail: "still " + got}
		}
		return Result{What: what, Passed: true}
	case e.Pods != nil:
		what := "expect " + e.Pods.describe() + " within " + duration(e.Within, "3m").String()
		if err := s.waitFor(ctx, duration(e.Within, "3m"), func() bool { return s.podsHold(ctx, cs, e.Pods) == nil }); err != nil {
			return Result{What: what, Detail: s.podsHold(ctx, cs, e.Pods).Error()}
		}
		return Result{What: what, Passed: true}
	}
	return Result{What: "empty expectation"}
}

// readyz asks the API endpoint, through the load balancer, whether it
// serves.
func (s *Sim) readyz(ctx context.Context) error {
	tr, err := rest.TransportFor(s.admin)
	if err != nil {
		return err
	}
	c := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.cluster.Endpoint.URL+"/readyz", nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/readyz: %s", resp.Status)
	}
	return nil
}
