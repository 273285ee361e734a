package review

import (
	"slices"
	"strings"
	"testing"

	"github.com/kcompile/kcompile/targets"
)

// base are the facts of a small cluster that each case changes.
func baseFacts() *Facts {
	return &Facts{
		Nodes: map[string]NodeFacts{
			"w1": {Labels: []string{"topology.kubernetes.io/zone=a"}},
			"w2": {Labels: []string{"topology.kubernetes.io/zone=b", "gpu=yes"}, Taints: []string{"dedicated=gpu:NoSchedule"}},
		},
		ServiceCIDRs: []string{"10.96.0.0/12"},
		PodCIDRs:     []string{"10.244.0.0/16"},
		Domain:       "cluster.local",
		CAs:          map[string]string{"kubernetes": "sha256:aaaa", "etcd": "sha256:bbbb", "service-account": "sha256:cccc"},
	}
}

var members = []EtcdMember{{Name: "cp1", Address: "10.0.0.11", Node: "cp1", PeerURL: "https://10.0.0.11:2380"}, {Name: "cp2", Address: "10.0.0.12", Node: "cp2", PeerURL: "https://10.0.0.12:2380"}, {Name: "cp3", Address: "10.0.0.13", Node: "cp3", PeerURL: "https://10.0.0.13:2380"}}

// steps compares two sides that differ only in their facts and etcd
// members.
func steps(a, b *Facts, ea, eb []EtcdMember) []Step {
	empty := targets.NewTree()
	return Compare(Side{Label: "a", Tree: empty, Etcd: ea, Facts: a}, Side{Label: "b", Tree: empty, Etcd: eb, Facts: b}, Options{}).Steps
}

// TestEffects: every setting a restart does not apply gets its step,
// with the commands that apply it, in order.
func TestEffects(t *testing.T) {
	for _, tc := range []struct {
		name    string
		change  func(f *Facts)
		ea, eb  []EtcdMember
		setting string
		want    []string
		not     string
	}{
		// A zone moved with another label: the kubelet's restart sets the
		// zone again, not the other label.
		{name: "zone move and a label", change: func(f *Facts) {
			f.Nodes["w1"] = NodeFacts{Labels: []string{"topology.kubernetes.io/zone=c", "tier=web"}}
		}, setting: "labels and taints of w1", want: []string{"kubectl label node w1 --overwrite tier=web"}, not: "zone"},
		// It never removes one.
		{name: "zone removed", change: func(f *Facts) {
			f.Nodes["w1"] = NodeFacts{}
		}, setting: "labels and taints of w1", want: []string{"kubectl label node w1 --overwrite topology.kubernetes.io/zone-"}},
		{name: "label removed, taint changed", change: func(f *Facts) {
			f.Nodes["w2"] = NodeFacts{Labels: []string{"topology.kubernetes.io/zone=b"}, Taints: []string{"dedicated=ml:NoExecute"}}
		}, setting: "labels and taints of w2", want: []string{"kubectl label node w2 --overwrite gpu-", "kubectl taint node w2 --overwrite dedicated=ml:NoExecute dedicated:NoSchedule-"}},
		// Only the value changes: --overwrite replaces it, and no removal
		// of the same key and effect follows (kubectl refuses both).
		{name: "taint value changed", change: func(f *Facts) {
			f.Nodes["w2"] = NodeFacts{Labels: f.Nodes["w2"].Labels, Taints: []string{"dedicated=ml:NoSchedule"}}
		}, setting: "labels and taints of w2", want: []string{"kubectl taint node w2 --overwrite dedicated=ml:NoSchedule"}, not: "NoSchedule-"},
		{name: "service CIDR", change: func(f *Facts) { f.ServiceCIDRs = []string{"10.112.0.0/16"} },
			setting: "service CIDR 10.96.0.0/12 → 10.112.0.0/16", want: []string{`add "10.96.0.1" to controlPlane.apiServer.extraSANs`, "create a ServiceCIDR object", "the kubernetes Service at the new range's first"}},
		{name: "pod CIDR", change: func(f *Facts) { f.PodCIDRs = []string{"10.128.0.0/16"} },
			setting: "pod CIDR 10.244.0.0/16 → 10.128.0.0/16", want: []string{"kubectl delete node NODE"}},
		{name: "domain", change: func(f *Facts) { f.Domain = "k8s.example" },
			setting: "cluster domain cluster.local → k8s.example", want: []string{"restart every pod"}},
		{name: "new CA", change: func(f *Facts) { f.CAs["kubernetes"] = "sha256:dddd" },
			setting: "kubernetes CA sha256:aaaa → sha256:dddd", want: []string{"kcompile secrets rotate --ca ca, then --next twice", "trusts both CAs", "the old one is dropped"}},
		{name: "service-account key", change: func(f *Facts) { f.CAs["service-account"] = "sha256:eeee" },
			setting: "service-account signing key", want: []string{"kcompile secrets rotate --ca service-account", "both public keys"}},
		{name: "etcd member moved", ea: members, eb: []EtcdMember{members[0], members[1], {Name: "cp3", Address: "10.0.0.23", Node: "cp3", PeerURL: "https://10.0.0.23:2380"}},
			setting: "etcd membership", want: []string{"etcdctl member update <ID of cp3> --peer-urls=https://10.0.0.23:2380"}},
		{name: "etcd members added and removed", ea: members[:2], eb: []EtcdMember{members[1], members[2]},
			setting: "etcd membership", want: []string{
				"etcdctl member add cp3 --peer-urls=https://10.0.0.13:2380, then start etcd on cp3 with --initial-cluster-state=existing",
				// cp1 is still a member when cp3 joins.
				"--initial-cluster=cp1=https://10.0.0.11:2380,cp2=https://10.0.0.12:2380,cp3=https://10.0.0.13:2380 ",
				"etcdctl member remove <ID of cp1>"}},
		// Each new member is told the members of its own step, not the
		// final five, which etcd refuses after the first member add.
		{name: "etcd grows from three to five", ea: members, eb: append(slices.Clone(members),
			EtcdMember{Name: "cp4", Address: "10.0.0.14", Node: "cp4", PeerURL: "https://10.0.0.14:2380"},
			EtcdMember{Name: "cp5", Address: "10.0.0.15", Node: "cp5", PeerURL: "https://10.0.0.15:2380"}),
			setting: "etcd membership", want: []string{
				"etcdctl member add cp4",
				"--initial-cluster=cp1=https://10.0.0.11:2380,cp2=https://10.0.0.12:2380,cp3=https://10.0.0.13:2380,cp4=https://10.0.0.14:2380 ",
				"etcdctl member add cp5",
				"--initial-cluster=cp1=https://10.0.0.11:2380,cp2=https://10.0.0.12:2380,cp3=https://10.0.0.13:2380,cp4=https://10.0.0.14:2380,cp5=https://10.0.0.15:2380 "}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := baseFacts()
			if tc.change != nil {
				tc.change(b)
			}
			got := steps(baseFacts(), b, tc.ea, tc.eb)
			if len(got) != 1 {
				t.Fatalf("%d steps: %+v", len(got), got)
			}
			if !strings.HasPrefix(got[0].Setting, tc.setting) || got[0].Why == "" {
				t.Errorf("step %q: %q", got[0].Setting, got[0].Why)
			}
			actions := strings.Join(got[0].Actions, "\n")
			if tc.not != "" && strings.Contains(actions, tc.not) {
				t.Errorf("actions hold %q:\n%s", tc.not, actions)
			}
			last := -1
			for _, w := range tc.want {
				i := strings.Index(actions, w)
				if i < 0 || i < last {
					t.Errorf("actions lack %q (in order):\n%s", w, actions)
				}
				last = i
			}
		})
	}
	// A zone moved alone takes effect with the kubelet's restart.
	moved := baseFacts()
	moved.Nodes["w1"] = NodeFacts{Labels: []string{"topology.kubernetes.io/zone=c"}}
	if got := steps(baseFacts(), moved, nil, nil); len(got) != 0 {
		t.Errorf("zone move, steps %+v", got)
	}
	if got := steps(baseFacts(), baseFacts(), members, members); len(got) != 0 {
		t.Errorf("no change, steps %+v", got)
	}
	// Golden comparisons have no facts: nothing to say.
	if got := steps(nil, nil, nil, nil); len(got) != 0 {
		t.Errorf("bare trees, steps %+v", got)
	}
}

// TestEffectsOrder: trust first, then etcd, then the ranges, and the
// Nodes last, once their kubelets run the new configuration; a member
// added comes before one removed, so that quorum never shrinks.
func TestEffectsOrder(t *testing.T) {
	b := baseFacts()
	b.CAs["etcd"] = "sha256:ffff"
	b.ServiceCIDRs = []string{"10.112.0.0/16"}
	b.Nodes["w1"] = NodeFacts{Labels: []string{"topology.kubernetes.io/zone=c", "tier=web"}}
	got := steps(baseFacts(), b, members[:2], []EtcdMember{members[1], members[2]})
	var order []string
	for _, s := range got {
		order = append(order, strings.Fields(s.Setting)[0])
	}
	if strings.Join(order, " ") != "etcd etcd service labels" || !strings.HasPrefix(got[0].Setting, "etcd CA") {
		t.Fatalf("order %v", order)
	}
	etcd := strings.Join(got[1].Actions, "\n")
	if strings.Index(etcd, "member add") > strings.Index(etcd, "member remove") {
		t.Errorf("a member is removed before one is added:\n%s", etcd)
	}
}

// A stage of a rotation keeps a CA or key trusted on both sides (the
// stages of kcompile secrets rotate, proven to keep every flow): it needs
// no trust step beyond its restarts; the stage that adds a cluster CA
// has the pods restart to load it, and the stage whose token signer
// changes has them restart for new tokens, last. A CA replaced with none
// in common needs the trust step.
func TestEffectsOfARotationStage(t *testing.T) {
	for _, tc := range []struct {
		name     string
		old, new string
		want     []StepKind
	}{
		{"stage 1", "sha256:aaaa", "sha256:aaaa+sha256:dddd", []StepKind{StepRootCA}},
		{"stage 2", "sha256:aaaa+sha256:dddd", "sha256:dddd+sha256:aaaa", []StepKind{StepTokens}},
		{"the end", "sha256:dddd+sha256:aaaa", "sha256:dddd", nil},
		{"stage 1 skipped", "sha256:aaaa", "sha256:dddd", []StepKind{StepTrust, StepTrust}},
	} {
		a, b := baseFacts(), baseFacts()
		a.CAs["kubernetes"], b.CAs["kubernetes"] = tc.old, tc.new
		a.CAs["service-account"], b.CAs["service-account"] = tc.old, tc.new
		var got []StepKind
		for _, s := range steps(a, b, nil, nil) {
			got = append(got, s.Kind)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: steps %v, want %v", tc.name, got, tc.want)
		}
	}
}
