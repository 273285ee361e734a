package compiler

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/kcompile/kcompile/compiler/diag"
	"github.com/kcompile/kcompile/compiler/ir"
)

const (
	CodeK8sUnsupported  = "KC0601"
	CodeKubeletNewer    = "KC0602"
	CodeKubeletOld      = "KC0603"
	CodeKubeProxyNewer  = "KC0604"
	CodeKubeProxyOld    = "KC0605"
	CodeControlPlaneMix = "KC0606"
	CodeEtcdVersion     = "KC0607"
	CodeAPIServerSkew   = "KC0608"
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
		rule(CodeAPIServerSkew, diag.Error, "two API servers are more than one minor version apart"),
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
	oldest, newest := apiServerRange(m)
	skew := func(path, name, v, newer, older string) {
		cv := parseVersion(v)
		switch {
		// The skew policy counts minor versions: a newer patch release of
		// the API server's minor is supported (kubeadm compares minors too).
		case cv.compare(semver{oldest.v.major, oldest.v.minor, cv.patch}) > 0:
			msg := fmt.Sprintf("%s %s is newer than the API server %s", name, v, oldest.v)
			var more []string
			if oldest.own {
				msg, more = fmt.Sprintf("%s %s is newer than kube-apiserver %s of %s, which it reaches through the endpoint", name, v, oldest.v, oldest.node), []string{oldest.path}
			}
			m.report(newer, path, msg, "upgrade the API servers first; components may not be newer than any of them", more...)
		case cv.major != newest.v.major || newest.v.minor-cv.minor > 3:
			m.report(older, path, fmt.Sprintf("%s %s is %d minor versions older than the API server %s; at most 3 are supported", name, v, newest.v.minor-cv.minor, newest.v),
				fmt.Sprintf("upgrade %s to 1.%d or later", name, newest.v.minor-3))
		}
	}
	// A component left out takes kubernetes.version, which the API
	// servers are checked against above, unless a node's own API server
	// version is older (a state of a rolling upgrade): then it is checked
	// where kubernetes.version sets it, once.
	defaulted := map[string]bool{}
	check := func(clusterPath, name, v, newer, older string) {
		var path string
		switch {
		case m.written(clusterPath):
			path = clusterPath
		case oldest.own:
			if defaulted[name] {
				return
			}
			defaulted[name] = true
			path = "kubernetes.version"
		default:
			return
		}
		skew(path, name, v, newer, older)
	}
	if m.spec.Network.KubeProxy.Mode != "none" || m.written("kubernetes.components.kubeProxy") {
		check("kubernetes.components.kubeProxy", "kube-proxy", k.Components.KubeProxy, CodeKubeProxyNewer, CodeKubeProxyOld)
	}
	check("kubernetes.components.kubelet", "kubelet", k.Components.Kubelet, CodeKubeletNewer, CodeKubeletOld)
	seen := map[string]bool{}
	for _, n := range m.nodes {
		if !n.runsPods() {
			continue
		}
		for _, c := range []struct{ field, name, v, newer, older string }{
			{"kubeletVersion", "kubelet", n.spec.KubeletVersion, CodeKubeletNewer, CodeKubeletOld},
			{"kubeProxyVersion", "kube-proxy", n.spec.KubeProxyVersion, CodeKubeProxyNewer, CodeKubeProxyOld},
		} {
			if c.v == "" || seen[n.fieldPath(c.field)] || (c.name == "kube-proxy" && m.spec.Network.KubeProxy.Mode == "none") {
				continue
			}
			seen[n.fieldPath(c.field)] = true
			name := c.name + " of " + n.name
			if n.pool != "" && !n.own[c.field] {
				name = c.name + " of pool " + n.pool
			}
			skew(n.fieldPath(c.field), name, c.v, c.newer, c.older)
		}
	}
	checkControlPlaneNodes(m, oldest, newest)
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

// versionAt is one component's version on one node, and the spec field
// that gives it.
type versionAt struct {
	v          semver
	node, path string
	// own says the node sets it (a rolling upgrade's override).
	own bool
}

// apiServerRange is the oldest and the newest API server of the
// control plane, each at its node's own version where the node sets one
// (a state of a rolling upgrade) and at kubernetes.components.apiServer
// otherwise.
func apiServerRange(m *model) (oldest, newest versionAt) {
	k := m.spec.Kubernetes.Components
	path := "kubernetes.components.apiServer"
	if !m.written(path) {
		path = "kubernetes.version"
	}
	oldest = versionAt{v: parseVersion(k.APIServer), path: path}
	newest = oldest
	first := true
	for _, n := range m.nodes {
		if n.role != ir.RoleControlPlane {
			continue
		}
		a := versionAt{v: parseVersion(k.APIServer), node: n.name, path: path}
		if n.spec.APIServerVersion != "" {
			a = versionAt{v: parseVersion(n.spec.APIServerVersion), node: n.name, path: n.fieldPath("apiServerVersion"), own: true}
		}
		// Of equal versions, a node's own is kept: it is what a rollout
		// wrote, and where a diagnostic belongs.
		if first || a.v.compare(oldest.v) < 0 || (a.v == oldest.v && a.own) {
			oldest = a
		}
		if first || a.v.compare(newest.v) > 0 || (a.v == newest.v && a.own) {
			newest = a
		}
		first = false
	}
	return oldest, newest
}

// checkControlPlaneNodes holds the skew policy where control-plane nodes
// carry versions of their own, as the states of a rolling upgrade do:
// the API servers at most one minor apart; a controller-manager or
// scheduler not newer than any API server and at most one minor older
// than the newest.
func checkControlPlaneNodes(m *model, oldest, newest versionAt) {
	for _, n := range m.nodes {
		for _, c := range []struct{ field, v string }{
			{"apiServerVersion", n.spec.APIServerVersion}, {"controllerManagerVersion", n.spec.ControllerManagerVersion},
			{"schedulerVersion", n.spec.SchedulerVersion},
		} {
			// A kubelet's or kube-proxy's own version is held by the skew
			// checks against the API servers, which are in range.
			if v := parseVersion(c.v); c.v != "" && (v.major != 1 || v.minor < minMinor || v.minor > maxMinor) {
				m.report(CodeK8sUnsupported, n.fieldPath(c.field), fmt.Sprintf("Kubernetes %s is not supported by this kcompile", c.v),
					fmt.Sprintf("choose a release from 1.%d to 1.%d", minMinor, maxMinor))
			}
		}
	}
	if d := newest.v.minor - oldest.v.minor; d > 1 || newest.v.major != oldest.v.major {
		// Reported at the override, the value a rollout wrote.
		here, there := newest, oldest
		if !newest.own {
			here, there = oldest, newest
		}
		m.report(CodeAPIServerSkew, here.path, fmt.Sprintf("kube-apiserver %s of %s is %d minor versions from kube-apiserver %s of %s; API servers may be at most one minor apart", here.v, here.node, abs(d), there.v, there.node),
			"upgrade the control plane one minor at a time: every API server to the next minor before any goes further", there.path)
	}
	k := m.spec.Kubernetes.Components
	for _, n := range m.nodes {
		if n.role != ir.RoleControlPlane {
			continue
		}
		for _, c := range []struct{ field, name, own, cluster string }{
			{"controllerManagerVersion", "kube-controller-manager", n.spec.ControllerManagerVersion, k.ControllerManager},
			{"schedulerVersion", "kube-scheduler", n.spec.SchedulerVersion, k.Scheduler},
		} {
			if c.own == "" && !oldest.own && !newest.own {
				continue // the cluster-wide check above has said it
			}
			v, path := parseVersion(c.own), n.fieldPath(c.field)
			if c.own == "" {
				v, path = parseVersion(c.cluster), "kubernetes.components."+strings.TrimSuffix(c.field, "Version")
				if !m.written(path) {
					path = "kubernetes.version"
				}
			}
			switch {
			case v.minor > oldest.v.minor:
				m.report(CodeControlPlaneMix, path, fmt.Sprintf("%s %s of %s is newer than kube-apiserver %s of %s, which it may reach", c.name, v, n.name, oldest.v, oldest.node),
					"upgrade every API server to the minor first; then the controller-managers and schedulers", oldest.path)
			case newest.v.minor-v.minor > 1:
				m.report(CodeControlPlaneMix, path, fmt.Sprintf("%s %s of %s is more than one minor older than kube-apiserver %s of %s", c.name, v, n.name, newest.v, newest.node),
					"upgrade the controller-managers and schedulers before the API servers go a further minor", newest.path)
			}
		}
	}
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// EtcdSupports says whether kcompile compiles etcd release etcd with
// Kubernetes 1.kubeMinor (KC0607's table): kcompile plan moves etcd in
// the first stage whose control plane supports its new release.
func EtcdSupports(kubeMinor int, etcd string) bool {
	v := parseVersion(etcd)
	for _, r := range etcdSupport() {
		if kubeMinor >= r.fromMinor && kubeMinor <= r.toMinor {
			return v.compare(r.min) >= 0 && v.compare(r.max) < 0
		}
	}
	return false
}
