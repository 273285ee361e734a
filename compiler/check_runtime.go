package compiler

import (
	"fmt"

	"github.com/kcompile/kcompile/compiler/diag"
)

const (
	CodeDockerEngine = "KC0701"
	CodeCgroupDriver = "KC0702"
	CodeOOMScoreAdj  = "KC0703"
)

func runtimeFamily() family {
	return family{name: "runtime", check: checkRuntime, rules: []diag.Rule{
		rule(CodeDockerEngine, diag.Error, "Docker Engine is not a CRI runtime from Kubernetes 1.24 on"),
		rule(CodeCgroupDriver, diag.Error, "the kubelet's and the runtime's cgroup drivers differ"),
		rule(CodeOOMScoreAdj, diag.Error, "restrictOOMScoreAdj is set for a runtime other than containerd, which has no such setting"),
	}}
}

func checkRuntime(m *model) {
	r := m.spec.Runtime
	if r.Engine == "docker" {
		if v := parseVersion(m.spec.Kubernetes.Components.Kubelet); v.major == 1 && v.minor >= 24 {
			m.report(CodeDockerEngine, "runtime.engine", fmt.Sprintf("Docker Engine cannot be the runtime of Kubernetes %s: dockershim was removed from the kubelet in 1.24, and the kubelet only speaks CRI", m.spec.Kubernetes.Version),
				`use engine "containerd" (Docker Engine itself runs on containerd) or "cri-o"`)
		}
	}
	if m.spec.Kubelet.CgroupDriver != r.CgroupDriver {
		at, more := m.conflict("kubelet.cgroupDriver", "runtime.cgroupDriver")
		m.report(CodeCgroupDriver, at, fmt.Sprintf("kubelet uses the %s cgroup driver but %s uses %s", m.spec.Kubelet.CgroupDriver, r.Engine, r.CgroupDriver),
			"two cgroup managers on one node make it unstable under pressure: use the same driver (systemd on systemd hosts)", more...)
	}
	// CRI-O has no such setting: the spec would ask for what no file
	// of the tree can say.
	if r.RestrictOOMScoreAdj && r.Engine != "containerd" {
		m.report(CodeOOMScoreAdj, "runtime.restrictOOMScoreAdj", fmt.Sprintf("restrictOOMScoreAdj is containerd's setting; %s has none", r.Engine),
			`remove restrictOOMScoreAdj, or use engine "containerd"`)
	}
}
