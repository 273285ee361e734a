package nspawn

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/kcompile/kcompile/compiler/ir"
	change "github.com/kcompile/kcompile/plan"
	"github.com/kcompile/kcompile/review"
)

// relabel performs a plan's labels step: the registered Nodes of its
// nodes get the labels and taints their nodes have in state c, and lose
// those only the running cluster's nodes had. A restarted kubelet sets
// again only the well-known labels and removes none (review.RelabelOf).
// Labels and taints that others set stay.
func (a *applier) relabel(ctx context.Context, s change.Step, c *ir.Cluster) error {
	old := map[string]ir.Node{}
	for _, n := range a.cfg.Old.Nodes {
		old[n.Name] = n
	}
	now := map[string]ir.Node{}
	for _, n := range c.Nodes {
		now[n.Name] = n
	}
	changes := map[string]review.Relabel{}
	for _, name := range s.Nodes {
		o, wasThere := old[name]
		n, isThere := now[name]
		if !wasThere || !isThere {
			return fmt.Errorf("node %s is not both in the running cluster and in the step's state", name)
		}
		changes[name] = review.RelabelOf(review.NodeFactsOf(o), review.NodeFactsOf(n))
	}
	for _, name := range s.Nodes {
		r := changes[name]
		if a.cfg.DryRun {
			a.log("  would set on Node %s: %s", name, relabelText(r))
			continue
		}
		if err := a.relabelNode(ctx, name, r); err != nil {
			return fmt.Errorf("node %s: %v", name, err)
		}
		a.log("  Node %s: %s", name, relabelText(r))
	}
	if a.cfg.DryRun {
		return nil
	}
	for _, name := range s.Nodes {
		r := changes[name]
		if err := a.await(ctx, "Node "+name+"'s labels and taints", func() (bool, string) {
			var node corev1.Node
			if err := a.kube.get(ctx, "/api/v1/nodes/"+name, &node); err != nil {
				return false, err.Error()
			}
			if why := relabeled(node, r); why != "" {
				return false, why
			}
			return true, ""
		}); err != nil {
			return err
		}
	}
	return nil
}

// relabelNode changes one Node, with its resourceVersion: a change made
// meanwhile (the kubelet's own, a controller's) is read again, not
// overwritten.
func (a *applier) relabelNode(ctx context.Context, name string, r review.Relabel) error {
	for attempt := 0; ; attempt++ {
		var node corev1.Node
		if err := a.kube.get(ctx, "/api/v1/nodes/"+name, &node); err != nil {
			return err
		}
		if relabeled(node, r) == "" {
			return nil
		}
		labels := map[string]*string{}
		for _, l := range r.Set {
			k, v, _ := strings.Cut(l, "=")
			labels[k] = &v
		}
		for _, k := range r.Unset {
			labels[k] = nil
		}
		set := parseTaints(r.Taint)
		taints := slices.DeleteFunc(slices.Clone(node.Spec.Taints), func(t corev1.Taint) bool {
			ke := t.Key + ":" + string(t.Effect)
			return slices.Contains(r.Untaint, ke) || slices.ContainsFunc(set, func(s corev1.Taint) bool { return s.Key+":"+string(s.Effect) == ke })
		})
		taints = append(taints, set...)
		patch := map[string]any{
			"metadata": map[string]any{"resourceVersion": node.ResourceVersion, "labels": labels},
			"spec":     map[string]any{"taints": taints},
		}
		body, err := json.Marshal(patch)
		if err != nil {
			return err
		}
		_, err = a.kube.do(ctx, http.MethodPatch, "/api/v1/nodes/"+name, "application/merge-patch+json", body)
		var ae *apiError
		if errors.As(err, &ae) && ae.code == http.StatusConflict && attempt < 5 {
			continue
		}
		return err
	}
}

// relabeled says what of r node lacks, or "".
func relabeled(node corev1.Node, r review.Relabel) string {
	for _, l := range r.Set {
		k, v, _ := strings.Cut(l, "=")
		if got, ok := node.Labels[k]; !ok || got != v {
			return "label " + l + " not set"
		}
	}
	for _, k := range r.Unset {
		if _, ok := node.Labels[k]; ok {
			return "label " + k + " still set"
		}
	}
	has := func(key, effect string) (corev1.Taint, bool) {
		i := slices.IndexFunc(node.Spec.Taints, func(t corev1.Taint) bool { return t.Key == key && string(t.Effect) == effect })
		if i < 0 {
			return corev1.Taint{}, false
		}
		return node.Spec.Taints[i], true
	}
	for _, t := range parseTaints(r.Taint) {
		if got, ok := has(t.Key, string(t.Effect)); !ok || got.Value != t.Value {
			return "taint " + t.ToString() + " not set"
		}
	}
	for _, ke := range r.Untaint {
		k, e, _ := strings.Cut(ke, ":")
		if _, ok := has(k, e); ok {
			return "taint " + ke + " still set"
		}
	}
	return ""
}

// parseTaints reads taints written "key=value:Effect".
func parseTaints(ts []string) []corev1.Taint {
	var out []corev1.Taint
	for _, t := range ts {
		key, rest, _ := strings.Cut(t, "=")
		value, effect, _ := strings.Cut(rest, ":")
		out = append(out, corev1.Taint{Key: key, Value: value, Effect: corev1.TaintEffect(effect)})
	}
	return out
}

func relabelText(r review.Relabel) string {
	var parts []string
	add := func(what string, items []string) {
		if len(items) > 0 {
			parts = append(parts, what+" "+strings.Join(items, ", "))
		}
	}
	add("labels set", r.Set)
	add("labels removed", r.Unset)
	add("taints set", r.Taint)
	add("taints removed", r.Untaint)
	return strings.Join(parts, "; ")
}
