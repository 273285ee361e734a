package compiler

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestFacts: what policies read of examples/ha-stacked (three stacked
// members, one per zone, six workers over the zones) and of a spec whose
// members share a zone.
func TestFacts(t *testing.T) {
	c, diags := Compile(Source{Dir: "../examples/ha-stacked"})
	if c == nil {
		t.Fatal(diags)
	}
	f := deriveFacts(c, ProfileCIS)
	if f.Version != "v1" || f.Nodes.Total != 9 || f.Nodes.ControlPlane != 3 || f.Nodes.Workers != 6 || f.Nodes.Etcd != 0 {
		t.Errorf("nodes %+v", f.Nodes)
	}
	if f.Etcd.Members != 3 || f.Etcd.Quorum != 2 || f.Etcd.Tolerates != 1 || f.Etcd.Zones != 3 || !f.Etcd.QuorumSurvivesZoneLoss || f.Etcd.QuorumSurvivesRackLoss {
		t.Errorf("etcd %+v (no member has a rack: rack loss is not known to be survived)", f.Etcd)
	}
	for _, z := range []string{"a", "b", "c"} {
		if got := f.Zones[z]; got == nil || got.Nodes != 3 || got.Workers != 2 || got.EtcdMembers != 1 || !got.EtcdQuorumAfterLoss || got.WorkerCapacityLostPercent != 34 {
			t.Errorf("zone %s: %+v", z, got)
		}
	}
	if f.Certificates.KeyAlgorithm != "ECDSA-P256" || f.Certificates.LeafValidityDays != 365 || f.Certificates.CAValidityDays != 3650 ||
		f.CNI != "calico" || f.Runtime != "containerd" || f.Profile != "cis" || strings.Join(f.OperatingSystems, ",") != "debian" {
		t.Errorf("facts %+v", f)
	}

	// cp3 moved into zone a: two of three members there.
	src := Source{Dir: t.TempDir()}
	for _, name := range []string{"cluster.cue", "network.cue", "workers.cue"} {
		b, err := os.ReadFile(filepath.Join("../examples/ha-stacked", name))
		if err != nil {
			t.Fatal(err)
		}
		if name == "cluster.cue" {
			b = []byte(strings.Replace(string(b), `mac: "52:54:00:00:00:13", zone: "c"`, `mac: "52:54:00:00:00:13", zone: "a"`, 1))
		}
		if err := os.WriteFile(filepath.Join(src.Dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	c, diags = Compile(src)
	if c == nil {
		t.Fatal(diags)
	}
	f = deriveFacts(c, "")
	if f.Etcd.Zones != 2 || f.Etcd.QuorumSurvivesZoneLoss || f.Zones["a"].EtcdQuorumAfterLoss || !f.Zones["b"].EtcdQuorumAfterLoss {
		t.Errorf("two members in zone a: etcd %+v, zones %+v %+v", f.Etcd, f.Zones["a"], f.Zones["b"])
	}
}

// TestPolicySelector: a policy applies only to the clusters its when
// selects, and its violation names both positions.
func TestPolicySelector(t *testing.T) {
	dir := t.TempDir()
	pol := `package p

policies: "big": {
	message: "production clusters have at least ten workers"
	when: spec: labels: tier: "prod"
	require: facts: nodes: workers: >=10
}
`
	if err := os.WriteFile(filepath.Join(dir, "p.cue"), []byte(pol), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		labels string
		fails  bool
	}{{"", false}, {`labels: tier: "dev"`, false}, {`labels: tier: "prod"`, true}} {
		src := Source{Dir: "../examples/ha-stacked", Policies: []string{dir},
			Overlay: map[string][]byte{"zz.cue": []byte("package cluster\n" + tc.labels + "\n")}}
		_, diags := Compile(src)
		var got []string
		for _, d := range diags {
			if d.Code == "big" {
				got = append(got, d.Message)
				if len(d.Positions) != 2 || !strings.HasSuffix(d.Positions[1].File, "p.cue") || d.Positions[1].Line != 6 || d.Path != "workers.pools" {
					t.Errorf("%q: positions %v path %s", tc.labels, d.Positions, d.Path)
				}
			}
		}
		if (len(got) > 0) != tc.fails {
			t.Errorf("labels %q: violations %v", tc.labels, got)
		}
	}
}

// TestPolicyRules: each diagnostic about policies, from a policy package
// (and a spec overlay) that raises it, at the position given.
func TestPolicyRules(t *testing.T) {
	// ha-stacked runs calico.
	const cilium = "package p\npolicies: \"cni\": {\n\tmessage: \"cilium only\"\n\trequire: spec: network: cni: plugin: \"cilium\"\n}\n"
	for _, tc := range []struct {
		code, policy, spec, at string
	}{
		{CodePolicyLoad, "package p\npolicies: \"x\": {\n", "", "p.cue:2:18"},
		{CodePolicyLoad, "package p\nrules: {}\n", "", "p.cue:1:1"},
		{CodePolicyShape, "package p\npolicies: \"x\": {\n\tmessage: \"m\"\n\trequire: facts: etcd: memberz: 3\n}\n", "", "p.cue:4:24"},
		{CodePolicyShape, "package p\npolicies: \"x\": {\n\tmessage: 3\n\trequire: spec: name: \"a\"\n}\n", "", "p.cue:3:11"},
		{CodePolicyNothing, "package p\npolicies: \"x\": {\n\tmessage: \"m\"\n\trequire: facts: {}\n}\n", "", "p.cue:4:2"},
		{CodePolicyWaived, cilium, "policies: waivers: cni: reason: \"a lab\"\n", "zz.cue:2:25"},
		{CodePolicyWaiver, cilium, "policies: waivers: other: reason: \"old\"\n", "zz.cue:2:27"},
	} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "p.cue"), []byte(tc.policy), 0o644); err != nil {
			t.Fatal(err)
		}
		src := Source{Dir: "../examples/ha-stacked", Policies: []string{dir},
			Overlay: map[string][]byte{"zz.cue": []byte("package cluster\n" + tc.spec)}}
		_, diags := Compile(src)
		found := false
		for _, d := range diags {
			if d.Code == tc.code {
				found = true
				if p := d.Primary(); !strings.HasSuffix(p.String(), "/"+tc.at) {
					t.Errorf("%s: at %s, want %s: %s", tc.code, p, tc.at, d.Message)
				}
			}
		}
		if !found {
			t.Errorf("%s: not raised by %q with %q: %v", tc.code, tc.policy, tc.spec, diags)
		}
	}
}

// TestPolicyDefaultsAreFinal: a rule cannot choose another arm of a
// default's disjunction; a violation of a default points at the nearest
// value the user wrote.
func TestPolicyDefaultsAreFinal(t *testing.T) {
	dir := t.TempDir()
	pol := "package p\npolicies: kp: {\n\tmessage: \"iptables only\"\n\trequire: spec: network: kubeProxy: mode: \"iptables\"\n}\n"
	if err := os.WriteFile(filepath.Join(dir, "p.cue"), []byte(pol), 0o644); err != nil {
		t.Fatal(err)
	}
	_, diags := Compile(Source{Dir: "../examples/single-node", Policies: []string{dir}})
	for _, d := range diags {
		if d.Code == "kp" {
			if !strings.Contains(d.Message, `spec.network.kubeProxy.mode is "nftables", the policy asks "iptables"`) ||
				len(d.Positions) != 2 || !strings.HasSuffix(d.Positions[0].File, "single-node/cluster.cue") || d.Positions[0].Line != 20 {
				t.Errorf("%s at %v", d.Message, d.Positions)
			}
			return
		}
	}
	t.Errorf("the default nftables passed a rule asking iptables: %v", diags)
}

// TestPolicyAbsentValue: a concrete value the rule asks for and the spec
// does not give breaks the rule, at the spec's name when the user wrote
// nothing around it.
func TestPolicyAbsentValue(t *testing.T) {
	dir := t.TempDir()
	pol := "package p\npolicies: owner: {\n\tmessage: \"every cluster names its owner\"\n\trequire: spec: labels: owner: \"team-a\"\n}\n"
	if err := os.WriteFile(filepath.Join(dir, "p.cue"), []byte(pol), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		labels string
		fails  bool
	}{{"", true}, {`labels: owner: "team-b"`, true}, {`labels: owner: "team-a"`, false}} {
		_, diags := Compile(Source{Dir: "../examples/ha-stacked", Policies: []string{dir},
			Overlay: map[string][]byte{"zz.cue": []byte("package cluster\n" + tc.labels + "\n")}})
		found := false
		for _, d := range diags {
			found = found || d.Code == "owner"
		}
		if found != tc.fails {
			t.Errorf("labels %q: violation %v: %v", tc.labels, found, diags)
		}
	}
}

// TestPolicyIDGrammar is issue 29: a policy's id is printed raw as the
// code of its violations, so one holding a terminal escape or a line
// break reached the terminal, or forged a diagnostic line of its own. An
// id outside the grammar is refused at its label, quoted, and never
// becomes a code; the ids the examples ship are ids.
func TestPolicyIDGrammar(t *testing.T) {
	for _, tc := range []struct {
		label string // the id as written in CUE
		ok    bool
	}{
		{`"x"`, true}, {`"prod-etcd-zones"`, true}, {`"a.b-1"`, true}, {`"9"`, true}, {`"` + strings.Repeat("a", 63) + `"`, true},
		{`"evil\nspec.cue:1:1: error KC0101: forged"`, false}, {`"red\u001b[31m"`, false}, {`"\u001b]0;title\u0007"`, false},
		{`"Prod"`, false}, {`"-x"`, false}, {`"x-"`, false}, {`"a_b"`, false}, {`"a b"`, false}, {`""`, false},
		{`"` + strings.Repeat("a", 64) + `"`, false}, {`"zone\u202e"`, false},
	} {
		dir := t.TempDir()
		pol := "package p\n\npolicies: " + tc.label + ": {\n\tmessage: \"three workers\"\n\trequire: facts: nodes: workers: >=100\n}\n"
		if err := os.WriteFile(filepath.Join(dir, "p.cue"), []byte(pol), 0o644); err != nil {
			t.Fatal(err)
		}
		_, diags := Compile(Source{Dir: "../examples/ha-stacked", Policies: []string{dir}})
		var shape, violations int
		for _, d := range diags {
			switch {
			case d.Code == CodePolicyShape:
				shape++
				if p := d.Primary(); !strings.HasSuffix(p.File, "p.cue") || p.Line != 3 || p.Column != 11 {
					t.Errorf("%s: at %s, want p.cue:3:11, the id", tc.label, p)
				}
				if strings.ContainsAny(d.Message, "\n\x1b\x07\u202e") || !strings.Contains(d.Message, "is not an id") {
					t.Errorf("%s: message %q", tc.label, d.Message)
				}
			case !strings.HasPrefix(d.Code, "KC"):
				violations++
				if !tc.ok {
					t.Errorf("%s: reported as the code %q", tc.label, d.Code)
				}
			}
		}
		if tc.ok && (shape != 0 || violations != 1) {
			t.Errorf("%s: %d KC2002, %d violations; want the one violation: %v", tc.label, shape, violations, diags)
		}
		if !tc.ok && shape != 1 {
			t.Errorf("%s: %d KC2002; want one: %v", tc.label, shape, diags)
		}
	}
}

// TestPolicyIDsShipped: every policy the examples ship has an id of the
// grammar.
func TestPolicyIDsShipped(t *testing.T) {
	dirs, err := filepath.Glob("../examples/policies/*")
	if err != nil || len(dirs) == 0 {
		t.Fatal(dirs, err)
	}
	for _, dir := range dirs {
		_, diags := Compile(Source{Dir: "../examples/ha-stacked", Policies: []string{dir}})
		for _, d := range diags {
			if d.Code == CodePolicyShape || d.Code == CodePolicyLoad {
				t.Errorf("%s: %s", dir, d.Message)
			}
		}
	}
}

// TestFactsNodeByNode: the facts of each node and pool of
// examples/ha-stacked, and the API servers' minors.
func TestFactsNodeByNode(t *testing.T) {
	c, diags := Compile(Source{Dir: "../examples/ha-stacked",
		Overlay: map[string][]byte{"zz.cue": []byte("package cluster\ncontrolPlane: nodes: cp1: kubeletVersion: \"1.36.4\"\n")}})
	if c == nil {
		t.Fatal(diags)
	}
	f := deriveFacts(c, "")
	cp1, w := f.Node["cp1"], f.Node["w03"]
	if len(f.Node) != 9 || cp1 == nil || w == nil {
		t.Fatalf("nodes %v", f.Node)
	}
	if cp1.Role != "control-plane" || cp1.Zone != "a" || cp1.Pool != "" || cp1.OS != "debian" ||
		cp1.Versions["kubelet"] != "1.36.4" || cp1.Minors["kubelet"] != 36 || cp1.Versions["kube-apiserver"] != "1.37.2" ||
		cp1.Minors["kube-apiserver"] != 37 || cp1.Versions["etcd"] == "" || !slices.Contains(cp1.Components, "etcd") {
		t.Errorf("cp1 %+v", cp1)
	}
	if _, ok := cp1.Minors["etcd"]; ok {
		t.Errorf("etcd's release is not a Kubernetes minor: %v", cp1.Minors)
	}
	if w.Role != "worker" || w.Pool != "general" || w.Zone != "c" || w.CPU != 8 || w.MaxPods != 110 ||
		w.Minors["kubelet"] != 37 || w.Versions["kube-apiserver"] != "" || slices.Contains(w.Components, "etcd") {
		t.Errorf("w03 %+v", w)
	}
	if p := f.Pools["general"]; len(f.Pools) != 1 || p == nil || p.Nodes != 6 || strings.Join(p.Zones, ",") != "a,b,c" || len(p.Racks) != 0 {
		t.Errorf("pools %v", f.Pools)
	}
	if fmt.Sprint(f.APIServerMinors) != "[37]" {
		t.Errorf("API server minors %v", f.APIServerMinors)
	}
}

// TestPolicyNodeByNode: a rule on every pool or node (a pattern), and a
// rule that computes from spec and facts (a hidden field), each broken
// and kept, reported at the spec values that break it; the mistakes of
// such rules at the policy's line.
func TestPolicyNodeByNode(t *testing.T) {
	const overlayOld = "controlPlane: nodes: cp1: kubeletVersion: \"1.36.4\"\n"
	for _, tc := range []struct {
		name, rule, spec string
		// want are the diagnostics' code, spec position (file:line) and
		// a part of the message, one each; none: the rule is kept.
		want [][3]string
	}{
		{name: "pool pattern kept", rule: `require: facts: pools: [string]: zones: [_, _, ...]`},
		{name: "pool pattern broken", rule: `require: facts: pools: [string]: zones: [_, _, _, _, ...]`,
			want: [][3]string{{"r", "workers.cue:11", `facts.pools.general.zones is ["a", "b", "c"]`}}},
		{name: "spec pattern absent", rule: `require: spec: workers: pools: [string]: labels: team: string`,
			want: [][3]string{{"r", "workers.cue:12", "spec.workers.pools.general.labels.team is not set, the policy asks string"}}},
		{name: "node pattern", rule: `require: facts: node: [string]: os: "debian"`},
		{name: "node pattern broken at each node", rule: `require: facts: node: [string]: zone: "a"`,
			want: [][3]string{{"r", "cluster.cue:15", `facts.node.cp2.zone is "b", the policy asks "a"`}}},
		{name: "computed kept", rule: "require: {\n\tspec: _\n\tfacts: _\n\t_fits: facts.nodes.total*2 <= 256\n\t_fits: true\n}"},
		{name: "computed broken", rule: "require: {\n\tspec: _\n\tfacts: _\n\t_fits: facts.nodes.total*2 <= math.Pow(2, spec.network.nodeCIDRMaskSize.ipv4-16)\n\t_fits: true\n}",
			spec: "network: nodeCIDRMaskSize: ipv4: 20\n",
			want: [][3]string{{"r", "workers.cue:3", "_fits is false, the policy asks true (facts.nodes.total is 9, spec.network.nodeCIDRMaskSize.ipv4 is 20)"}}},
		{name: "computed over nodes", spec: overlayOld,
			rule: "require: {\n\tfacts: _\n\t_behind: [for name, n in facts.node if n.minors.kubelet != _|_ if n.minors.kubelet < facts.apiServerMinors[0] {name}]\n\t_behind: []\n}",
			want: [][3]string{{"r", "cluster.cue:14", `_behind is ["cp1"], the policy asks []`}}},
		{name: "pattern of nothing", rule: `require: facts: pools: [string]: {}`,
			want: [][3]string{{CodePolicyNothing, "", "requires nothing"}}},
		{name: "typo in a pattern", rule: `require: facts: node: [string]: oss: "debian"`,
			want: [][3]string{{CodePolicyShape, "", "reads facts.node.[string].oss"}}},
		{name: "bound over the spec", rule: `require: facts: nodes: total: <=facts.etcd.members*100`,
			want: [][3]string{{CodePolicyLoad, "", "requires concrete value"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			pol := "package p\n\nimport \"math\"\n\n_m: math.Pi\n\npolicies: r: {\n\tmessage: \"m\"\n\t" + tc.rule + "\n}\n"
			if err := os.WriteFile(filepath.Join(dir, "p.cue"), []byte(pol), 0o644); err != nil {
				t.Fatal(err)
			}
			_, diags := Compile(Source{Dir: "../examples/ha-stacked", Policies: []string{dir},
				Overlay: map[string][]byte{"zz.cue": []byte("package cluster\n" + tc.spec)}})
			var got []string
			for _, d := range diags {
				if d.Code == "r" || strings.HasPrefix(d.Code, "KC2") {
					got = append(got, d.Code+" "+d.Message+" at "+fmt.Sprint(d.Positions))
				}
			}
			for _, w := range tc.want {
				found := false
				for _, d := range diags {
					if d.Code != w[0] || !strings.Contains(d.Message, w[2]) {
						continue
					}
					found = true
					if w[1] != "" && !strings.HasSuffix(d.Positions[0].File, "/"+strings.Split(w[1], ":")[0]) {
						t.Errorf("%s at %v, want %s", d.Message, d.Positions, w[1])
					}
					if w[1] != "" && fmt.Sprint(d.Positions[0].Line) != strings.Split(w[1], ":")[1] {
						t.Errorf("%s at line %d, want %s", d.Message, d.Positions[0].Line, w[1])
					}
					if w[0] == "r" && !strings.HasSuffix(d.Positions[len(d.Positions)-1].File, "p.cue") {
						t.Errorf("%s: the last position %v is not the policy's", d.Message, d.Positions)
					}
					if w[0] == CodePolicyLoad && !strings.Contains(d.Hint, "hidden field") {
						t.Errorf("hint %q does not say how to compute", d.Hint)
					}
				}
				if !found {
					t.Errorf("want %v, got %v", w, got)
				}
			}
			if len(tc.want) == 0 && len(got) > 0 {
				t.Errorf("the rule is kept, got %v", got)
			}
		})
	}
}
