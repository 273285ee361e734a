package sim

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kcompile/kcompile/compiler/ir"
)

// Result is the outcome of one step.
type Result struct {
	Step int
	// Pos is where the step is written.
	Pos    ir.Pos
	What   string
	Passed bool
	Detail string
}

// Run plays a scenario, as compiler.LoadScenario checked it against this
// cluster, and reports every step with its position in the scenario file;
// the scenario passes when every expectation held.
func (s *Sim) Run(ctx context.Context, sc *ir.Scenario, report io.Writer) (bool, error) {
	cs := kubernetes.NewForConfigOrDie(s.AdminConfig())
	ok := true
	for i, st := range sc.Steps {
		r := s.step(ctx, cs, st)
		r.Step, r.Pos = i+1, st.Pos
		mark := "PASS"
		if !r.Passed {
			mark = "FAIL"
			ok = false
		}
		fmt.Fprintf(report, "%s step %d", mark, r.Step)
		if r.Pos.File != "" {
			fmt.Fprintf(report, " at %s", r.Pos)
		}
		fmt.Fprintf(report, ": %s", r.What)
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

func (s *Sim) step(ctx context.Context, cs kubernetes.Interface, st ir.Step) Result {
	fail := func(what string, err error) Result { return Result{What: what, Detail: err.Error()} }
	switch {
	case st.Apply != nil:
		what := "apply manifests"
		if _, err := s.apply(ctx, "scenario", []byte(st.Apply.Manifests)); err != nil {
			return fail(what, err)
		}
		return Result{What: what, Passed: true}
	case st.Wait != nil:
		w := st.Wait
		if w.Pods != nil {
			what := "wait for " + describePods(w.Pods)
			err := s.waitFor(ctx, w.Timeout, func() bool { return s.podsHold(ctx, cs, w.Pods) == nil })
			if err != nil {
				return fail(what, s.podsHold(ctx, cs, w.Pods))
			}
			return Result{What: what, Passed: true}
		}
		what := fmt.Sprintf("wait for %d nodes Ready", w.NodesReady)
		var st Status
		err := s.waitFor(ctx, w.Timeout, func() bool {
			st, _ = s.Status(ctx)
			return st.Ready >= w.NodesReady
		})
		if err != nil {
			return fail(what, fmt.Errorf("%d Ready", st.Ready))
		}
		return Result{What: what, Passed: true}
	case st.Stop != nil:
		return s.stopStart(ctx, "stop", st.Stop)
	case st.Start != nil:
		return s.stopStart(ctx, "start", st.Start)
	case st.Expect != nil:
		return s.expect(ctx, cs, st.Expect)
	}
	return Result{What: "empty step"}
}

func describePods(p *ir.Pods) string {
	s := fmt.Sprintf("%d running pods %q in %s", p.Running, p.Selector, p.Namespace)
	if len(p.NotOn) > 0 {
		s += ", none on " + strings.Join(p.NotOn, ", ")
	}
	return s
}

// podsHold checks that exactly the wanted number of live pods run, and
// none on the excluded nodes.
func (s *Sim) podsHold(ctx context.Context, cs kubernetes.Interface, p *ir.Pods) error {
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

func (s *Sim) stopStart(ctx context.Context, verb string, t *ir.Subject) Result {
	var err error
	var what string
	switch t.Kind {
	case ir.SubjectNode:
		what = verb + " node " + t.Name
		if verb == "stop" {
			if h := s.lb.Holder(); h != "" && h == t.Name {
				what += ", which holds the API endpoint's VIP"
			}
			err = s.StopNode(t.Name)
		} else {
			err = s.StartNode(ctx, t.Name)
		}
	case ir.SubjectEtcd:
		what = verb + " etcd member " + t.Name
		if verb == "stop" {
			err = s.StopEtcd(t.Name)
		} else {
			err = s.StartEtcd(t.Name)
		}
	case ir.SubjectControlPlane:
		what = verb + " the control plane of " + t.Name
		if verb == "stop" {
			for _, comp := range []ir.Component{ir.ComponentScheduler, ir.ComponentControllerManager, ir.ComponentAPIServer} {
				s.stopComponent(t.Name, comp)
			}
			break
		}
		for _, comp := range []ir.Component{ir.ComponentAPIServer, ir.ComponentControllerManager, ir.ComponentScheduler} {
			if err = s.startComponent(t.Name, comp); err != nil {
				break
			}
		}
	default:
		return Result{What: verb + " nothing", Detail: fmt.Sprintf("unknown target %q", t.Kind)}
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

func (s *Sim) expect(ctx context.Context, cs kubernetes.Interface, e *ir.Expect) Result {
	switch {
	case e.API != "":
		what := "expect the API " + e.API + " through " + s.cluster.Endpoint.URL()
		if e.Within > 0 {
			what += " within " + e.Within.String()
		}
		var err error
		werr := s.waitFor(ctx, e.Within, func() bool {
			rctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			err = s.readyz(rctx)
			return (err == nil) == (e.API == ir.APIServed)
		})
		if werr != nil {
			detail := "served"
			if err != nil {
				detail = err.Error()
			}
			return Result{What: what, Detail: detail}
		}
		r := Result{What: what, Passed: true}
		if h := s.lb.Holder(); h != "" {
			r.Detail = "the VIP is held by " + h
			if m := s.lb.lastMove(); m != "" {
				r.Detail += "; " + m
			}
		}
		return r
	case e.Write != "":
		// kcompile check's failure-domain analysis: writes need a
		// majority of the members.
		members, running := len(s.cluster.Etcd.Members), s.etcdRunning()
		predicted := running >= members/2+1
		what := fmt.Sprintf("expect writes to %s within %s (%d of %d etcd members running, quorum %d)", strings.TrimSuffix(e.Write, "s"), e.Within, running, members, members/2+1)
		// A client tries again: a write sent to an API server whose own
		// etcd member just stopped waits until the endpoint's health
		// checks take that server out.
		want := e.Write == ir.WriteSucceeds
		var err error
		observed := false
		deadline := time.Now().Add(max(e.Within, time.Second))
		for {
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "kcompile-sim-write-", Namespace: metav1.NamespaceDefault}}
			_, err = cs.CoreV1().ConfigMaps(metav1.NamespaceDefault).Create(wctx, cm, metav1.CreateOptions{})
			cancel()
			observed = err == nil
			// A write that succeeds where one should fail is the answer.
			if observed == want || !want || time.Now().After(deadline) || ctx.Err() != nil {
				break
			}
			time.Sleep(500 * time.Millisecond)
		}
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
		what := fmt.Sprintf("expect node %s %s within %s", e.Node, want, e.Within)
		var got string
		err := s.waitFor(ctx, e.Within, func() bool {
			n, err := cs.CoreV1().Nodes().Get(ctx, e.Node, metav1.GetOptions{})
			if err != nil {
				return false
			}
			got = "NotReady"
			if nodeReady(n) {
				got = "Ready"
			}
			return got == want
		})
		if err != nil {
			return Result{What: what, Detail: "still " + got}
		}
		return Result{What: what, Passed: true}
	case e.Pods != nil:
		what := "expect " + describePods(e.Pods) + " within " + e.Within.String()
		if err := s.waitFor(ctx, e.Within, func() bool { return s.podsHold(ctx, cs, e.Pods) == nil }); err != nil {
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
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.cluster.Endpoint.URL()+"/readyz", nil)
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
