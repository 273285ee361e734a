package compiler

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/kcompile/kcompile/compiler/diag"
)

const (
	CodeK8sUnsupported  = "KC0601"
	CodeKubeletNewer    = "KC0602"
	CodeKubeletOld      = "KC0603"
	CodeKubeProxyNewer  = "KC0604"
	CodeKubeProxyOld    = "KC0605"
	CodeControlPlaneMix = "KC0606"
	CodeEtcdVersion     = "KC0607"
)

// Kubernetes minors kcompile compiles for.
const (
	minMinor = 30
	maxMinor = 37
)

func versionsFamily() family {
	return family{name: "versions", check: checkVersions, rules: []diag.Rule{
		rule(CodeK8sUnsupported, diag.Error, fmt.Sprintf("the Kubernetes version is outside 1.%d–1.%d", minMinor, maxMinor)),
		rule(CodeKubeletNewer, diag.Error, "a kubelet is newer than the API server"),
		rule(CodeKubeletOld, diag.Error, "a kubelet is more than three minor versions older than the API server"),
		rule(CodeKubeProxyNewer, diag.Error, "kube-proxy is newer than the API server"),
		rule(CodeKubeProxyOld, diag.Error, "kube-proxy is more than three minor versions older than the API server"),
		rule(CodeControlPlaneMix, diag.Error, "control-plane components are on different minor versions"),
		rule(CodeEtcdVersion, diag.Error, "the etcd version is not supported by the Kubernetes version"),
	}}
}

// semver is a parsed MAJOR.MINOR.PATCH; the schema guarantees the shape.
type semver struct{ major, minor, patch int }

func parseVersion(s string) semver {
	parts := strings.SplitN(s, ".", 3)
	var v [3]int
	for i := 0; i < len(parts) && i < 3; i++ {
		v[i], _ = strconv.Atoi(parts[i])
	}
	return semver{v[0], v[1], v[2]}
}

func (v semver) compare(w semver) int {
	switch {
	case v.major != w.major:
		return v.major - w.major
	case v.minor != w.minor:
		return v.minor - w.minor
	}
	return v.patch - w.patch
}

func (v semver) String() string { return fmt.Sprintf("%d.%d.%d", v.major, v.minor, v.patch) }

// etcdRange is the etcd releases tested with a range of Kubernetes minors,
// after kubeadm's supported etcd versions.
type etcdRange struct {
	fromMinor, toMinor int
	min, max           semver // max is exclusive
}

func etcdSupport() []etcdRange {
	return []etcdRange{
		{30, 32, semver{3, 5, 0}, semver{3, 6, 0}},
		{33, 33, semver{3, 5, 0}, semver{3, 7, 0}},
		{34, 35, semver{3, 5, 21}, semver{3, 7, 0}},
		{36, 37, semver{3, 6, 0}, semver{3, 8, 0}},
	}
}

func checkVersions(m *model) {
	k := m.spec.Kubernetes
	api := parseVersion(k.Components.APIServer)
	ver := parseVersion(k.Version)
	if ver.major != 1 || ver.minor < minMinor || ver.minor > maxMinor {
		m.report(CodeK8sUnsupported, "kubernetes.version", fmt.Sprintf("Kubernetes %s is not supported by this kcompile", k.Version),
			fmt.Sprintf("choose a release from 1.%d to 1.%d", minMinor, maxMinor))
		return
	}
	for _, c := range []struct{ path, name, v string }{
		{"kubernetes.components.controllerManager", "kube-controller-manager", k.Components.ControllerManager},
		{"kubernetes.components.scheduler", "kube-scheduler", k.Components.Scheduler},
	} {
		// A component left out takes kubernetes.version, which the API
		// server is checked against below: comparing it again would repeat
		// that diagnostic at a value the user did not write.
		if !m.written(c.path) {
			continue
		}
		cv := parseVersion(c.v)
		if cv.major != api.major || cv.minor != api.minor {
			m.report(CodeControlPlaneMix, c.path, fmt.Sprintf("%s %s is not on the API server's minor version %d.%d", c.name, c.v, api.major, api.minor),
				"upgrade the control plane one minor at a time, all components together", "kubernetes.components.apiServer")
		}
	}
	if k.Components.APIServer != k.Version && parseVersion(k.Components.APIServer).minor != ver.minor {
		m.report(CodeControlPlaneMix, "kubernetes.components.apiServer", fmt.Sprintf("kube-apiserver %s is not on minor version %d.%d of kubernetes.version", k.Components.APIServer, ver.major, ver.minor),
			"kubernetes.version names the control plane's release: keep the API server on its minor", "kubernetes.version")
	}
	skew := func(path, name, v, newer, older string) {
		if !m.written(path) {
			return // left out, it is kubernetes.version: see above
		}
		cv := parseVersion(v)
		switch {
		// The skew policy counts minor versions: a newer patch release of
		// the API server's minor is supported (kubeadm compares minors too).
		case cv.compare(semver{api.major, api.minor, cv.patch}) > 0:
			m.report(newer, path, fmt.Sprintf("%s %s is newer than the API server %s", name, v, api),
				"upgrade the API server first; components may not be newer than it")
		case cv.major != api.major || api.minor-cv.minor > 3:
			m.report(older, path, fmt.Sprintf("%s %s is %d minor versions older than the API server %s; at most 3 are supported", name, v, api.minor-cv.minor, api),
				fmt.Sprintf("upgrade %s to 1.%d or later", name, api.minor-3))
		}
	}
	skew("kubernetes.components.kubeProxy", "kube-proxy", k.Components.KubeProxy, CodeKubeProxyNewer, CodeKubeProxyOld)
	skew("kubernetes.components.kubelet", "kubelet", k.Components.Kubelet, CodeKubeletNewer, CodeKubeletOld)
	seen := map[string]bool{}
	for _, n := range m.nodes {
		if n.spec.KubeletVersion == "" || seen[n.path] {
			continue
		}
		seen[n.path] = true
		skew(n.fieldPath("kubeletVersion"), "kubelet of "+n.name, n.spec.KubeletVersion, CodeKubeletNewer, CodeKubeletOld)
	}
	ev := parseVersion(m.spec.Etcd.Version)
	for _, r := range etcdSupport() {
		if api.minor < r.fromMinor || api.minor > r.toMinor {
			continue
		}
		if ev.compare(r.min) < 0 || ev.compare(r.max) >= 0 {
			// etcd.version may be the schema's default, which does not
			// follow the Kubernetes version: then report at the latter.
			at, more := m.conflict("etcd.version", "kubernetes.version")
			m.report(CodeEtcdVersion, at, fmt.Sprintf("etcd %s is not supported with Kubernetes 1.%d (supported: %s up to, not including, %d.%d)", ev, api.minor, r.min, r.max.major, r.max.minor),
				fmt.Sprintf("set etcd.version to %s or a later release below %d.%d", r.min, r.max.major, r.max.minor), more...)
		}
	}
}
