package plan_test

import (
	"errors"
	"fmt"
	"html"
	"math/rand"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kcompile/kcompile/compare"
	"github.com/kcompile/kcompile/compiler"
	"github.com/kcompile/kcompile/compiler/diag"
	"github.com/kcompile/kcompile/compiler/ir"
	"github.com/kcompile/kcompile/compiler/pki"
	"github.com/kcompile/kcompile/internal/fixture"
	"github.com/kcompile/kcompile/layout"
	"github.com/kcompile/kcompile/plan"
	"github.com/kcompile/kcompile/review"
)

// cluster is a spec of a test: three control-plane nodes in three zones
// and two pools, with what the test changes.
type cluster struct {
	version     string
	cps         []string // "name address zone"
	blue        int      // nodes of pool blue
	green       int
	blueBudget  string // its rollout.maxUnavailable, as CUE
	greenZero   bool   // green's budget 0
	serviceCIDR string
	extra       string
}

func (c cluster) write(t testing.TB) string {
	t.Helper()
	if c.version == "" {
		c.version = "1.37.2"
	}
	if c.cps == nil {
		c.cps = []string{"cp1 10.0.0.11 a", "cp2 10.0.0.12 b", "cp3 10.0.0.13 c"}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "package cluster\n\napiVersion: \"kcompile.dev/v1alpha1\"\nname: \"t\"\nkubernetes: version: %q\n", c.version)
	b.WriteString("controlPlane: endpoint: address: \"10.0.0.10\"\n")
	for _, cp := range c.cps {
		f := strings.Fields(cp)
		fmt.Fprintf(&b, "controlPlane: nodes: %s: {address: %q, zone: %q}\n", f[0], f[1], f[2])
	}
	b.WriteString("network: nodes: [\"10.0.0.0/16\"]\n")
	if c.serviceCIDR != "" {
		fmt.Fprintf(&b, "network: serviceCIDR: %q\n", c.serviceCIDR)
	}
	if c.blue > 0 {
		fmt.Fprintf(&b, "workers: pools: blue: {count: %d, firstAddress: \"10.0.1.10\", zones: [\"a\", \"b\"]}\n", c.blue)
		if c.blueBudget != "" {
			fmt.Fprintf(&b, "workers: pools: blue: rollout: maxUnavailable: %s\n", c.blueBudget)
		}
	}
	if c.green > 0 {
		fmt.Fprintf(&b, "workers: pools: green: {count: %d, firstAddress: \"10.0.2.10\", zones: [\"c\"]}\n", c.green)
		if c.greenZero {
			b.WriteString("workers: pools: green: rollout: maxUnavailable: 0\n")
		}
	}
	b.WriteString(c.extra)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "cluster.cue"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func makePlan(t testing.TB, old, new string, via ...string) (*plan.Plan, error) {
	t.Helper()
	v := map[int]string{}
	for _, s := range via {
		var major, minor, patch int
		fmt.Sscanf(s, "%d.%d.%d", &major, &minor, &patch)
		v[minor] = s
	}
	return compare.Plan(compare.Input{Args: []string{old, new}, Now: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC),
		Rand: rand.New(rand.NewSource(1)), Cwd: "/"}, v)
}

// compileState compiles a step's state as a spec placed in dir.
func compileState(t testing.TB, dir string, s plan.Step) *ir.Cluster {
	t.Helper()
	src, err := compiler.StateSource(compiler.Source{Dir: dir, Tolerate: s.Tolerate}, s.State)
	if err != nil {
		t.Fatal(err)
	}
	c, diags := compiler.Compile(src)
	if diags.HasErrors() {
		t.Fatalf("step %d's state does not compile: %v", s.N, diags)
	}
	return c
}

func steps(p *plan.Plan) []plan.Step {
	var out []plan.Step
	for _, s := range p.Stages {
		out = append(out, s.Steps...)
	}
	return out
}

func TestVersionUpgradeOrder(t *testing.T) {
	old := cluster{version: "1.36.4", blue: 5, green: 2, blueBudget: "2"}.write(t)
	new := cluster{version: "1.37.2", blue: 5, green: 2, blueBudget: "2"}.write(t)
	p, err := makePlan(t, old, new)
	if err != nil {
		t.Fatal(err)
	}
	all := steps(p)
	if p.States != len(all) {
		t.Errorf("%d states checked for %d steps", p.States, len(all))
	}
	order := map[string]int{"api server": 0, "controllers": 1, "node": 2, "workers": 3}
	last := 0
	for _, s := range all {
		o, ok := order[s.Kind]
		if !ok {
			t.Errorf("step %d: a version change has no %s step", s.N, s.Kind)
			continue
		}
		if o < last {
			t.Errorf("step %d (%s %v) comes after a later kind of step", s.N, s.Kind, s.Nodes)
		}
		last = o
		if s.Kind != "workers" && len(s.Nodes) != 1 {
			t.Errorf("step %d takes %v at once: the control plane goes one node at a time", s.N, s.Nodes)
		}
	}
	var blue, green [][]string
	for _, s := range all {
		if s.Kind == "workers" {
			if strings.HasPrefix(s.Nodes[0], "blue") {
				blue = append(blue, s.Nodes)
			} else {
				green = append(green, s.Nodes)
			}
			if !s.Drain || s.DrainTimeout != "5m0s" {
				t.Errorf("step %d: a kubelet's new minor drains the node first, within the default 5m (drain %v, %q)", s.N, s.Drain, s.DrainTimeout)
			}
		}
	}
	if want := [][]string{{"blue-1", "blue-2"}, {"blue-3", "blue-4"}, {"blue-5"}}; !reflect.DeepEqual(blue, want) {
		t.Errorf("pool blue (maxUnavailable 2) went %v, want %v", blue, want)
	}
	if want := [][]string{{"green-1"}, {"green-2"}}; !reflect.DeepEqual(green, want) {
		t.Errorf("pool green (the default budget, 1) went %v, want %v", green, want)
	}
	if len(p.Stages) != 1 || p.Stages[0].Name != "Kubernetes 1.36.4 → 1.37.2" {
		t.Errorf("stages: %v", stageNames(p))
	}
}

func stageNames(p *plan.Plan) []string {
	var out []string
	for _, s := range p.Stages {
		out = append(out, s.Name)
	}
	return out
}

func TestTwoMinorsAreTwoStages(t *testing.T) {
	old := cluster{version: "1.35.1", blue: 2}.write(t)
	new := cluster{version: "1.37.2", blue: 2}.write(t)
	_, err := makePlan(t, old, new)
	var r *plan.Refusal
	if !errors.As(err, &r) || !strings.Contains(r.Error(), "--via 1.36.PATCH") {
		t.Fatalf("1.35 → 1.37 without --via: %v", err)
	}
	p, err := makePlan(t, old, new, "1.36.5")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"Kubernetes 1.35.1 → 1.36.5", "Kubernetes 1.36.5 → 1.37.2"}; !slices.Equal(stageNames(p), want) {
		t.Errorf("stages %v, want %v", stageNames(p), want)
	}
	if _, err := makePlan(t, new, old, "1.36.5"); err == nil || !strings.Contains(err.Error(), "downgrade") {
		t.Errorf("1.37 → 1.35 is a downgrade, refused: %v", err)
	}
}

func TestBudgetZeroRefused(t *testing.T) {
	old := cluster{version: "1.36.4", green: 1, greenZero: true}.write(t)
	new := cluster{version: "1.37.2", green: 1, greenZero: true}.write(t)
	_, err := makePlan(t, old, new)
	if err == nil || !strings.Contains(err.Error(), "pool green has rollout.maxUnavailable 0") || !strings.Contains(err.Error(), "green-1") {
		t.Errorf("a pool of one node with maxUnavailable 0 that must restart: %v", err)
	}
}

func TestGrowEtcdThreeToFive(t *testing.T) {
	three := cluster{blue: 1}
	five := three
	five.cps = []string{"cp1 10.0.0.11 a", "cp2 10.0.0.12 b", "cp3 10.0.0.13 c", "cp4 10.0.0.14 d", "cp5 10.0.0.15 e"}
	p, err := makePlan(t, three.write(t), five.write(t))
	if err != nil {
		t.Fatal(err)
	}
	var adds []plan.Step
	for _, s := range steps(p) {
		if s.Kind == "add control-plane" {
			adds = append(adds, s)
		}
	}
	if len(adds) != 2 {
		t.Fatalf("two members added one at a time, got %d steps", len(adds))
	}
	for i, want := range []string{
		"--initial-cluster=cp1=https://10.0.0.11:2380,cp2=https://10.0.0.12:2380,cp3=https://10.0.0.13:2380,cp4=https://10.0.0.14:2380 ",
		"--initial-cluster=cp1=https://10.0.0.11:2380,cp2=https://10.0.0.12:2380,cp3=https://10.0.0.13:2380,cp4=https://10.0.0.14:2380,cp5=https://10.0.0.15:2380 ",
	} {
		if !strings.Contains(strings.Join(adds[i].Actions, "\n"), want) {
			t.Errorf("add %d: %v, want %s", i+1, adds[i].Actions, want)
		}
		if !strings.HasPrefix(adds[i].Actions[0], "etcdctl member add cp"+fmt.Sprint(4+i)) {
			t.Errorf("add %d does not start with its member add: %v", i+1, adds[i].Actions)
		}
	}
	if !slices.ContainsFunc(adds[0].Warnings, func(w string) bool { return strings.HasPrefix(w, "KC0401") }) {
		t.Errorf("the four-member state's even count is said: %v", adds[0].Warnings)
	}
	if len(adds[1].Warnings) != 0 {
		t.Errorf("five members: %v", adds[1].Warnings)
	}
	// Each added member boots joining the running cluster (etcd.joining,
	// in its step's state alone: --initial-cluster-state=existing) with
	// the membership of its step; its files, like the three old members',
	// are laid onto NEW's afterwards, and as etcd reads those flags only
	// when a member bootstraps, no member restarts for them.
	for i, want := range []string{"[cp4]", "[cp5]"} {
		etcd, _ := adds[i].State["etcd"].(map[string]any)
		if got := fmt.Sprint(etcd["joining"]); got != want {
			t.Errorf("add %d's state: etcd.joining %s, want %s", i+1, got, want)
		}
	}
	var laid []string
	for _, s := range steps(p) {
		if slices.Contains(s.Restarts, "etcd.service") {
			t.Errorf("step %d (%s %v) restarts etcd", s.N, s.Kind, s.Nodes)
		}
		if s.N > adds[1].N {
			laid = append(laid, s.Nodes...)
		}
	}
	for _, n := range []string{"cp1", "cp2", "cp3", "cp4", "cp5"} {
		if !slices.Contains(laid, n) {
			t.Errorf("no step after the additions lays %s's files onto NEW's: %q", n, laid)
		}
	}
}

// Two members added in zones a and b pass through four members, two in
// one zone: losing it loses the quorum, which neither end does.
func TestZoneQuorumLostOnTheWayRefused(t *testing.T) {
	three := cluster{blue: 1}
	five := three
	five.cps = []string{"cp1 10.0.0.11 a", "cp2 10.0.0.12 b", "cp3 10.0.0.13 c", "cp4 10.0.0.14 a", "cp5 10.0.0.15 b"}
	_, err := makePlan(t, three.write(t), five.write(t))
	var r *plan.Refusal
	if !errors.As(err, &r) {
		t.Fatalf("not refused: %v", err)
	}
	if r.Step != 1 || !strings.Contains(r.Error(), "step 1 (add control-plane cp4)") || !strings.Contains(r.Error(), "KC0405") {
		t.Errorf("refusal: %v", r)
	}
}

// Labels and taints of registered Nodes are a step of their own, after
// the kubelets restart with them: apply sets them through the API.
func TestNodeLabelsAreAStep(t *testing.T) {
	old := cluster{blue: 2, extra: "workers: pools: blue: labels: {tier: \"web\", legacy: \"yes\"}\n"}.write(t)
	new := cluster{blue: 2, extra: "workers: pools: blue: labels: tier: \"batch\"\nworkers: pools: blue: taints: [{key: \"dedicated\", value: \"blue\", effect: \"PreferNoSchedule\"}]\n"}.write(t)
	p, err := makePlan(t, old, new)
	if err != nil {
		t.Fatal(err)
	}
	all := steps(p)
	var kinds []string
	for _, s := range all {
		kinds = append(kinds, s.Kind+" "+strings.Join(s.Nodes, ","))
	}
	want := []string{"workers blue-1", "workers blue-2", plan.KindLabels + " blue-1,blue-2"}
	if !slices.Equal(kinds, want) {
		t.Fatalf("steps %q, want %q", kinds, want)
	}
	last := all[len(all)-1]
	text := strings.Join(last.Actions, "\n")
	for _, a := range []string{"kubectl label node blue-1 --overwrite tier=batch legacy-", "kubectl taint node blue-2 --overwrite dedicated=blue:PreferNoSchedule"} {
		if !strings.Contains(text, a) {
			t.Errorf("the labels step does not say %q:\n%s", a, text)
		}
	}
	if last.Rule != "explicit-step" || len(last.Gates) == 0 {
		t.Errorf("the labels step: rule %q, gates %q", last.Rule, last.Gates)
	}
}

// A service CIDR move keeps the kubernetes Service's old address in the
// API servers' certificates in every state until its Services have moved
// (an explicit step after every node runs the new range); then the API
// servers restart without it, one at a time, into NEW.
func TestServiceCIDRMove(t *testing.T) {
	old := cluster{blue: 1}.write(t)
	new := cluster{blue: 1, serviceCIDR: "10.112.0.0/12"}.write(t)
	p, err := makePlan(t, old, new)
	if err != nil {
		t.Fatal(err)
	}
	all := steps(p)
	// The new range opens first, before anything runs it: CoreDNS
	// answers at the new DNS address before a kubelet asks it.
	if all[0].Kind != plan.KindServiceRange {
		t.Fatalf("the first step is %s, want %s: %v", all[0].Kind, plan.KindServiceRange, stageNames(p))
	}
	text := strings.Join(all[0].Actions, "\n")
	for _, want := range []string{"service CIDR 10.96.0.0/12 → 10.112.0.0/12", "ServiceCIDR " + plan.ServiceRangeName, plan.DNSBridgeName + " at 10.112.0.10", "(10.96.0.1)"} {
		if !strings.Contains(text, want) {
			t.Errorf("the service range step does not say %q:\n%s", want, text)
		}
	}
	end := slices.IndexFunc(all, func(s plan.Step) bool { return s.Kind == plan.KindServiceMove })
	if end < 0 {
		t.Fatalf("no step ends the move: %v", stageNames(p))
	}
	text = strings.Join(all[end].Actions, "\n")
	for _, want := range []string{"hand over every Service with an address outside 10.112.0.0/12", "goes to 10.112.0.1", "delete the stand-ins", "restart every pod", "kube-dns at 10.112.0.10"} {
		if !strings.Contains(text, want) {
			t.Errorf("the move's end does not say %q:\n%s", want, text)
		}
	}
	// Every kubelet runs the new DNS address before the move ends.
	for _, s := range all[end+1:] {
		if s.Kind == "node" || s.Kind == "workers" {
			t.Errorf("step %d (%s %v) restarts a kubelet after the move ended", s.N, s.Kind, s.Nodes)
		}
	}
	// Every API server restarts with the new range before the move ends,
	// and once more after it, without the old address.
	var before, after []string
	for i, s := range all {
		if s.Kind != "api server" {
			continue
		}
		if i < end {
			before = append(before, s.Nodes...)
		} else {
			after = append(after, s.Nodes...)
			if s.Rule != "sans-until-moved" || !slices.Contains(s.Restarts, "kube-apiserver.service") {
				t.Errorf("step %d: rule %s, restarts %v", s.N, s.Rule, s.Restarts)
			}
		}
	}
	if want := []string{"cp1", "cp2", "cp3"}; !slices.Equal(before, want) || !slices.Equal(after, want) {
		t.Errorf("API servers restarted %v before the move ends and %v after, want %v twice", before, after, want)
	}
	// The certificates of every state, compiled again.
	old4, new4 := netip.MustParseAddr("10.96.0.1"), netip.MustParseAddr("10.112.0.1")
	for i, s := range all {
		c := compileState(t, new, s)
		for _, cert := range pki.Catalogue(c) {
			if cert.File != layout.APIServerStem {
				continue
			}
			hasOld, hasNew := slices.Contains(cert.IPs, old4), slices.Contains(cert.IPs, new4)
			switch {
			case !hasNew:
				t.Errorf("step %d: %s's serving certificate lacks the new address: %v", s.N, cert.Node, cert.IPs)
			case i <= end && !hasOld:
				t.Errorf("step %d, before the move ends: %s's serving certificate lacks the old address: %v", s.N, cert.Node, cert.IPs)
			case i == len(all)-1 && hasOld:
				t.Errorf("the last state: %s's serving certificate keeps the old address", cert.Node)
			}
		}
	}
}

// A range that shrinks around its first addresses keeps the kubernetes
// Service's and the DNS address: the change opens and ends (the default
// ServiceCIDR made again of the new range) without moving either or
// restarting every pod, and the API servers keep their certificates.
func TestServiceCIDRShrinks(t *testing.T) {
	p, err := makePlan(t, cluster{blue: 1}.write(t), cluster{blue: 1, serviceCIDR: "10.96.0.0/13"}.write(t))
	if err != nil {
		t.Fatal(err)
	}
	all := steps(p)
	kinds := map[string]bool{}
	for _, s := range all {
		kinds[s.Kind] = true
		if s.Rule == "sans-until-moved" {
			t.Errorf("step %d restarts %v for certificates that do not change", s.N, s.Nodes)
		}
	}
	if !kinds[plan.KindServiceRange] || !kinds[plan.KindServiceMove] {
		t.Fatalf("steps %v, want the range opened and the change ended", stageNames(p))
	}
	for _, s := range all {
		text := strings.Join(s.Actions, "\n")
		if strings.Contains(text, "restart every pod") || strings.Contains(text, plan.DNSBridgeName) || strings.Contains(text, "the kubernetes Service goes to") {
			t.Errorf("step %d (%s) moves what keeps its address:\n%s", s.N, s.Kind, text)
		}
	}
}

// A worker whose files change with nothing to restart has them laid by
// a step outside its pool's budget: it is not taken out of the pool, so a
// pool with maxUnavailable 0 does not refuse it.
func TestLayOnlyOutsideTheBudget(t *testing.T) {
	dir := cluster{green: 2, greenZero: true}.write(t)
	c, diags := compiler.Compile(compiler.Source{Dir: dir})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	data, diags := compiler.Concrete(compiler.Source{Dir: dir})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	side := plan.Side{Label: dir, Cluster: c, Data: data}
	// As diff reports a file no unit reads, changed on both workers.
	report := &review.Report{Nodes: []review.NodeChange{
		{Node: "green-1", Status: review.Modified, Files: 1},
		{Node: "green-2", Status: review.Modified, Files: 1},
	}}
	p, err := plan.Make(plan.Input{Old: side, New: side, Report: report})
	if err != nil {
		t.Fatal(err)
	}
	all := steps(p)
	if len(all) != 1 || all[0].Kind != "workers" || !slices.Equal(all[0].Nodes, []string{"green-1", "green-2"}) ||
		len(all[0].Restarts) != 0 || all[0].Drain || len(all[0].Gates) != 0 {
		t.Fatalf("steps %+v, want one that lays green-1's and green-2's files", all)
	}
	if !strings.Contains(strings.Join(all[0].Actions, "\n"), "nothing that reads them restarts") {
		t.Errorf("the step says %q", all[0].Actions)
	}
}

// TestPlanInvariants holds every state of plans between generated pairs
// of clusters to the rules: compiled again, no two API servers more than
// one minor apart, nothing newer than the oldest API server, a worker
// group never more than its budget away, the control plane one node at a
// time, and the last state NEW itself.
func TestPlanInvariants(t *testing.T) {
	r := rand.New(rand.NewSource(32))
	n := 8
	if testing.Short() {
		n = 3
	}
	for i := 0; i < n; i++ {
		oldMinor := 34 + r.Intn(3)
		newMinor := oldMinor + r.Intn(38-oldMinor)
		old := cluster{version: fmt.Sprintf("1.%d.%d", oldMinor, 1+r.Intn(5)), blue: 1 + r.Intn(4), green: r.Intn(3),
			blueBudget: []string{"1", "2", `"50%"`}[r.Intn(3)]}
		new := old
		new.version = fmt.Sprintf("1.%d.%d", newMinor, 1+r.Intn(5))
		if newMinor == oldMinor && new.version < old.version {
			new.version = old.version
		}
		new.blue = max(1, old.blue+r.Intn(3)-1)
		new.green = max(0, old.green+r.Intn(3)-1)
		if r.Intn(3) == 0 {
			new.cps = []string{"cp1 10.0.0.11 a", "cp2 10.0.0.12 b", "cp3 10.0.0.13 c", "cp4 10.0.0.14 d", "cp5 10.0.0.15 e"}
		}
		if r.Intn(3) == 0 {
			new.serviceCIDR = "10.112.0.0/12"
		}
		var via []string
		for m := oldMinor + 1; m < newMinor; m++ {
			via = append(via, fmt.Sprintf("1.%d.9", m))
		}
		name := fmt.Sprintf("%s→%s,blue%d→%d,green%d→%d,cps%d,services%q", old.version, new.version, old.blue, new.blue, old.green, new.green, len(new.cps), new.serviceCIDR)
		t.Run(name, func(t *testing.T) {
			newDir := new.write(t)
			p, err := makePlan(t, old.write(t), newDir, via...)
			if err != nil {
				t.Fatal(err)
			}
			budgets := map[string]int{"blue": budget(old.blueBudget, max(old.blue, new.blue)), "green": 1}
			var prev *ir.Cluster
			// The kubernetes Service's addresses: NEW's in every state, and
			// OLD's too until the Services have moved.
			moved := new.serviceCIDR == ""
			oldSvc, newSvc := netip.MustParseAddr("10.96.0.1"), netip.MustParseAddr("10.96.0.1")
			if !moved {
				newSvc = netip.MustParseAddr("10.112.0.1")
			}
			for _, s := range steps(p) {
				c := compileState(t, newDir, s)
				for _, cert := range pki.Catalogue(c) {
					if cert.File == layout.APIServerStem && (!slices.Contains(cert.IPs, newSvc) || !moved && !slices.Contains(cert.IPs, oldSvc)) {
						t.Errorf("step %d: %s's serving certificate: %v, want %s and, until the Services move, %s", s.N, cert.Node, cert.IPs, newSvc, oldSvc)
					}
				}
				if s.Kind == plan.KindServiceMove {
					moved = true
				}
				if len(s.Tolerate) > 0 && !strings.HasPrefix(s.Kind, "add control-plane") && !strings.HasPrefix(s.Kind, "remove control-plane") {
					t.Errorf("step %d (%s) tolerates %v: only a membership step may", s.N, s.Kind, s.Tolerate)
				}
				holdSkew(t, s, c)
				if prev != nil {
					holdBudgets(t, s, prev, c, budgets)
				}
				prev = c
			}
			want, diags := compiler.Compile(compiler.Source{Dir: newDir})
			if diags.HasErrors() {
				t.Fatal(diags)
			}
			if prev != nil {
				prev.Settings, want.Settings = nil, nil
				if !reflect.DeepEqual(prev, want) {
					t.Errorf("the last state is not NEW")
				}
			}
		})
	}
}

func budget(cue string, size int) int {
	if strings.HasSuffix(cue, `%"`) {
		var pct int
		fmt.Sscanf(strings.Trim(cue, `"`), "%d%%", &pct)
		return (pct*size + 99) / 100
	}
	var n int
	fmt.Sscanf(cue, "%d", &n)
	return n
}

func minor(v string) int {
	var a, b, c int
	fmt.Sscanf(v, "%d.%d.%d", &a, &b, &c)
	return b
}

func holdSkew(t *testing.T, s plan.Step, c *ir.Cluster) {
	t.Helper()
	lo, hi := 1<<30, 0
	for _, n := range c.Nodes {
		if n.Runs(ir.ComponentAPIServer) {
			lo, hi = min(lo, minor(n.APIServerVersion)), max(hi, minor(n.APIServerVersion))
		}
	}
	if hi-lo > 1 {
		t.Errorf("step %d: API servers at 1.%d and 1.%d", s.N, lo, hi)
	}
	for _, n := range c.Nodes {
		for name, v := range map[string]string{"kubelet": n.KubeletVersion, "kube-proxy": n.KubeProxyVersion,
			"kube-controller-manager": n.ControllerManagerVersion, "kube-scheduler": n.SchedulerVersion} {
			if v != "" && minor(v) > lo {
				t.Errorf("step %d: %s of %s at %s, newer than the oldest API server (1.%d)", s.N, name, n.Name, v, lo)
			}
		}
	}
}

// holdBudgets: between two states, at most one control-plane node and
// at most its budget of a worker pool are taken out (restarted with new
// versions, or removed); added nodes take nothing out.
func holdBudgets(t *testing.T, s plan.Step, a, b *ir.Cluster, budgets map[string]int) {
	t.Helper()
	after := map[string]ir.Node{}
	for _, n := range b.Nodes {
		after[n.Name] = n
	}
	out := map[string][]string{}
	for _, n := range a.Nodes {
		m, ok := after[n.Name]
		if ok && m.KubeletVersion == n.KubeletVersion && m.APIServerVersion == n.APIServerVersion &&
			m.ControllerManagerVersion == n.ControllerManagerVersion && m.KubeProxyVersion == n.KubeProxyVersion {
			continue
		}
		group := n.Pool
		if n.Role != ir.RoleWorker {
			group = "control plane"
		}
		out[group] = append(out[group], n.Name)
	}
	for group, names := range out {
		limit, ok := budgets[group]
		if group == "control plane" {
			limit, ok = 1, true
		}
		if !ok || len(names) > limit {
			t.Errorf("step %d takes %v of %s out at once (budget %d)", s.N, names, group, limit)
		}
	}
}

// BenchmarkPlanLarge plans examples/large (5,005 nodes, its pools rolled
// 10% at a time) from 1.36 to 1.37 with every state compiled and
// checked; the sides' compiles are outside the measure (issue target:
// under 10 s).
func BenchmarkPlanLarge(b *testing.B) {
	dirs := [2]string{}
	for i, version := range []string{"1.36.4", "1.37.2"} {
		dirs[i] = b.TempDir()
		for _, f := range []string{"cluster.cue", "workers.cue"} {
			data, err := os.ReadFile(filepath.Join("../examples/large", f))
			if err != nil {
				b.Fatal(err)
			}
			text := strings.Replace(string(data), `version: "1.37.2"`, fmt.Sprintf("version: %q", version), 1)
			text = strings.ReplaceAll(text, "\t\tlabels: \"node.kubernetes.io/pool\"", "\t\trollout: maxUnavailable: \"10%\"\n\t\tlabels: \"node.kubernetes.io/pool\"")
			if err := os.WriteFile(filepath.Join(dirs[i], f), []byte(text), 0o644); err != nil {
				b.Fatal(err)
			}
		}
	}
	var sides [2]plan.Side
	for i, dir := range dirs {
		c, diags := compiler.Compile(compiler.Source{Dir: dir})
		if diags.HasErrors() {
			b.Fatal(diags)
		}
		data, cdiags := compiler.Concrete(compiler.Source{Dir: dir})
		if cdiags.HasErrors() {
			b.Fatal(cdiags)
		}
		sides[i] = plan.Side{Label: dir, Cluster: c, Data: data, Diagnostics: diags}
	}
	check := func(data map[string]any, tolerate []string) diag.List {
		src, err := compiler.StateSource(compiler.Source{Dir: dirs[1], Tolerate: tolerate}, data)
		if err != nil {
			b.Fatal(err)
		}
		_, diags := compiler.Compile(src)
		return diags
	}
	b.ReportAllocs()
	for b.Loop() {
		p, err := plan.Make(plan.Input{Old: sides[0], New: sides[1], Check: check})
		if err != nil {
			b.Fatal(err)
		}
		if p.States != p.Steps() || p.Steps() < 60 {
			b.Fatalf("%d states checked for %d steps", p.States, p.Steps())
		}
	}
}

// The Markdown's picture of the stages is Mermaid that Mermaid's own CLI
// renders, with every stage and run in it.
func TestMarkdownPictureRenders(t *testing.T) {
	three := cluster{version: "1.36.4", blue: 3}
	five := cluster{version: "1.37.2", blue: 4}
	five.cps = []string{"cp1 10.0.0.11 a", "cp2 10.0.0.12 b", "cp3 10.0.0.13 c", "cp4 10.0.0.14 d", "cp5 10.0.0.15 e"}
	p, err := makePlan(t, three.write(t), five.write(t))
	if err != nil {
		t.Fatal(err)
	}
	var md strings.Builder
	if err := p.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	svg := html.UnescapeString(fixture.Mermaid(t, md.String())[0])
	for _, want := range []string{"1. nodes added", "2. Kubernetes 1.36.4 → 1.37.2", "add control-plane (2 steps)", "cp4, cp5",
		"api server (5 steps)", "workers (4 steps)", "blue-1, blue-2, blue-3, blue-4"} {
		if !strings.Contains(svg, want) {
			t.Errorf("the picture has no %q", want)
		}
	}
}

// --policy holds every state: a policy that forbids two API server
// minors at once refuses a version change at its first step, naming the
// policy.
func TestPolicyOnEveryState(t *testing.T) {
	policies := t.TempDir()
	if err := os.WriteFile(filepath.Join(policies, "policy.cue"), []byte(`package policies

policies: "one-api-minor": {
	message: "every API server runs one minor release"
	require: facts: apiServerMinors: [_]
}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	old := cluster{version: "1.36.4", blue: 1}.write(t)
	new := cluster{version: "1.37.2", blue: 1}.write(t)
	_, err := compare.Plan(compare.Input{Args: []string{old, new}, Policies: []string{policies},
		Now: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), Rand: rand.New(rand.NewSource(1)), Cwd: "/"}, nil)
	var r *plan.Refusal
	if !errors.As(err, &r) || r.Step != 1 || !strings.Contains(r.Error(), "one-api-minor") {
		t.Errorf("the policy's refusal at step 1: %v", err)
	}
	// Both ends keep the policy: without it in the way, the same change plans.
	if _, err := makePlan(t, old, new); err != nil {
		t.Errorf("without the policy: %v", err)
	}
}

// etcd moves in the first stage whose control plane supports its new
// release: 1.32's does not support etcd 3.6, 1.33's does.
func TestEtcdMovesWhereSupported(t *testing.T) {
	old := cluster{version: "1.32.9", blue: 1}.write(t)
	new := cluster{version: "1.34.3", blue: 1}.write(t)
	p, err := makePlan(t, old, new, "1.33.7")
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Stages) != 2 {
		t.Fatalf("stages: %v", stageNames(p))
	}
	for i, s := range p.Stages {
		etcd := slices.ContainsFunc(s.Steps, func(st plan.Step) bool { return st.Kind == "etcd" })
		if etcd != (i == 1) {
			t.Errorf("stage %d (%s) moves etcd: %v; want it in the stage from 1.33", i+1, s.Name, etcd)
		}
		if i == 1 && s.Steps[0].Kind != "etcd" {
			t.Errorf("etcd is not first in its stage: %s", s.Steps[0].Kind)
		}
	}
}

// A pool NEW adds and names in workers.order is left out of the states
// before it, and out of their order.
func TestNewPoolInOrder(t *testing.T) {
	old := cluster{blue: 2}.write(t)
	next := cluster{blue: 2, green: 2, extra: "workers: order: [\"green\", \"blue\"]\n"}
	// The control plane grows first: its states have no pool green yet.
	next.cps = []string{"cp1 10.0.0.11 a", "cp2 10.0.0.12 b", "cp3 10.0.0.13 c", "cp4 10.0.0.14 d", "cp5 10.0.0.15 e"}
	p, err := makePlan(t, old, next.write(t))
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, s := range steps(p) {
		kinds = append(kinds, s.Kind+" "+strings.Join(s.Nodes, ","))
	}
	if want := []string{"add control-plane cp4", "add control-plane cp5", "add workers green-1,green-2"}; len(kinds) < 3 || !slices.Equal(kinds[:3], want) {
		t.Errorf("steps %v, want them to start with %v", kinds, want)
	}
}
