package compiler

import (
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/distribution/reference"
	"golang.org/x/crypto/ssh"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/kcompile/kcompile/compiler/diag"
	"github.com/kcompile/kcompile/compiler/ir"
)

// Every free-form string of a spec reaches root-run units, scripts, YAML
// read by the API server, or HCL. Each is held here to the rules of the
// program that consumes it, at its position, so that no value can add a
// line, a directive, a flag or a file to what kcompile writes. The writers
// quote as well; these checks make the refusal a diagnostic instead of a
// surprise. stringFields (below) lists every string of the schema and
// which check holds it; a test walks the schema and fails on a string
// that is in neither.
const (
	CodeLabelValue     = "KC1601"
	CodeTaintValue     = "KC1602"
	CodeFailureDomain  = "KC1603"
	CodeImage          = "KC1604"
	CodeImageComponent = "KC1605"
	CodeUserName       = "KC1606"
	CodeSSHKey         = "KC1607"
	CodeURL            = "KC1608"
	CodeFilePath       = "KC1609"
	CodeArchiveMember  = "KC1610"
	CodeKernelArg      = "KC1611"
	CodeAdmission      = "KC1612"
	CodeParameters     = "KC1613"
	CodeMAC            = "KC1614"
	CodeRegistryHost   = "KC1615"
	CodeMirrorURL      = "KC1616"
	CodeKernelArgOwned = "KC1617"
)

func valuesFamily() family {
	return family{name: "values", check: checkValues, rules: []diag.Rule{
		rule(CodeLabelValue, diag.Error, "a node label value is not a valid Kubernetes label value"),
		rule(CodeTaintValue, diag.Error, "a taint value is not a valid Kubernetes taint value"),
		rule(CodeFailureDomain, diag.Error, "a zone or rack is not a valid Kubernetes label value (zones become topology.kubernetes.io/zone)"),
		rule(CodeImage, diag.Error, "a container image is not a fully qualified reference with a tag or digest"),
		rule(CodeImageComponent, diag.Error, "an image override names no component of the CNI plugin"),
		rule(CodeUserName, diag.Error, "a login name is not a portable user name, or names an account the system or the tree owns or a group the base system has"),
		rule(CodeSSHKey, diag.Error, "an SSH key is not one authorized_keys line that OpenSSH accepts"),
		rule(CodeURL, diag.Error, "a URL is not an absolute http(s) URL without credentials, spaces or control characters"),
		rule(CodeFilePath, diag.Error, "a file path is not a clean absolute path of safe characters"),
		rule(CodeArchiveMember, diag.Error, "an archive member is not a clean relative path of safe characters"),
		rule(CodeKernelArg, diag.Error, "a kernel argument or boot asset holds characters iPXE or the kernel would interpret"),
		rule(CodeAdmission, diag.Error, "an admission plugin is not one kube-apiserver knows"),
		rule(CodeParameters, diag.Error, "StorageClass parameters break the API server's limits (at most 512, non-empty keys, 256 KiB in all)"),
		rule(CodeMAC, diag.Error, "a MAC address is all-zero, broadcast or multicast: no machine's interface has it"),
		rule(CodeRegistryHost, diag.Error, "a registry of runtime.mirrors is not a registry host as image references name it (host or IP address, optionally :port)"),
		rule(CodeMirrorURL, diag.Error, "a registry mirror is not an http(s) URL of a host and optional port, or a registry's mirror list is empty or repeats one"),
		rule(CodeKernelArgOwned, diag.Error, "a kernel argument sets what kcompile appends itself: ignition.config.url (or coreos.config.url), ignition.firstboot, ignition.platform.id, flatcar.first_boot (or coreos.first_boot), ds"),
	}}
}

// stringField is one string of the schema: a path pattern ("*" any field
// name, "[]" any list index, a final ":key" the field names themselves)
// and the code of the check that validates it. checkedBy "schema" is a
// constraint of the schema itself (an enumeration or a pattern); a field
// whose value reaches no artifact says why in unused.
type stringField struct {
	pattern   string
	checkedBy string
	unused    string
	// sample is a CUE snippet placing a value at the field, with %s
	// for the value; the schema test puts hostile strings there and
	// expects checkedBy's diagnostic at its position.
	sample string
	// anyString marks a field whose consumer accepts any string (a
	// StorageClass parameter): only the encoder of the artifact keeps
	// it in its place, which the property test proves.
	anyString bool
}

// stringFields lists every string field of schema v1alpha1.
func stringFields() []stringField {
	const (
		cpNode = `controlPlane: nodes: cp1: `
		pool   = `workers: pools: p: {count: 1, firstAddress: "10.0.1.10", `
		worker = `workers: nodes: w9: {address: "10.0.1.9", `
		member = `etcd: {topology: "external", members: e1: {address: "10.0.2.1", `
		art    = `install: {source: "download", artifacts: a: {url: "https://example.com/a", sha256: "` + zeroSHA + `", `
		boot   = `boot: {matchboxURL: "http://mb.example.com:8080", kernel: "/assets/k", initrd: [], args: [], `
	)
	return []stringField{
		{pattern: "apiVersion", checkedBy: CodeAPIVersion, sample: `apiVersion: %s`},
		{pattern: "name", checkedBy: CodeClusterName, sample: `name: %s`},
		{pattern: "kubernetes.version", checkedBy: "schema", sample: `kubernetes: version: %s`},
		{pattern: "kubernetes.components.apiServer", checkedBy: "schema", sample: `kubernetes: components: apiServer: %s`},
		{pattern: "kubernetes.components.controllerManager", checkedBy: "schema", sample: `kubernetes: components: controllerManager: %s`},
		{pattern: "kubernetes.components.scheduler", checkedBy: "schema", sample: `kubernetes: components: scheduler: %s`},
		{pattern: "kubernetes.components.kubelet", checkedBy: "schema", sample: `kubernetes: components: kubelet: %s`},
		{pattern: "kubernetes.components.kubeProxy", checkedBy: "schema", sample: `kubernetes: components: kubeProxy: %s`},
		{pattern: "controlPlane.endpoint.address", checkedBy: CodeEndpointInvalid, sample: `controlPlane: endpoint: address: %s`},
		{pattern: "controlPlane.endpoint.host", checkedBy: CodeEndpointInvalid, sample: `controlPlane: endpoint: host: %s`},
		{pattern: "controlPlane.endpoint.mode", checkedBy: "schema", sample: `controlPlane: endpoint: mode: %s`},
		{pattern: "controlPlane.apiServer.extraSANs[]", checkedBy: CodeExtraSAN, sample: `controlPlane: apiServer: extraSANs: [%s]`},
		{pattern: "controlPlane.nodes.*:key", checkedBy: CodeNodeName, sample: `controlPlane: nodes: %s: address: "10.0.0.12"`},
		{pattern: "controlPlane.nodes.*.address", checkedBy: CodeAddressParse, sample: cpNode + `address: %s`},
		{pattern: "controlPlane.nodes.*.secondaryAddress", checkedBy: CodeAddressParse, sample: cpNode + `secondaryAddress: %s`},
		{pattern: "controlPlane.nodes.*.mac", checkedBy: "schema", sample: cpNode + `mac: %s`},
		{pattern: "controlPlane.nodes.*.zone", checkedBy: CodeFailureDomain, sample: cpNode + `zone: %s`},
		{pattern: "controlPlane.nodes.*.rack", checkedBy: CodeFailureDomain, sample: cpNode + `rack: %s`},
		{pattern: "controlPlane.nodes.*.labels.*:key", checkedBy: CodeLabelInvalid, sample: cpNode + `labels: %s: "x"`},
		{pattern: "controlPlane.nodes.*.labels.*", checkedBy: CodeLabelValue, sample: cpNode + `labels: x: %s`},
		{pattern: "controlPlane.nodes.*.taints[].key", checkedBy: CodeLabelInvalid, sample: cpNode + `taints: [{key: %s, effect: "NoSchedule"}]`},
		{pattern: "controlPlane.nodes.*.taints[].value", checkedBy: CodeTaintValue, sample: cpNode + `taints: [{key: "k", value: %s, effect: "NoSchedule"}]`},
		{pattern: "controlPlane.nodes.*.taints[].effect", checkedBy: "schema", sample: cpNode + `taints: [{key: "k", effect: %s}]`},
		{pattern: "controlPlane.nodes.*.capacity.memory", checkedBy: "schema", sample: cpNode + `capacity: memory: %s`},
		{pattern: "controlPlane.nodes.*.kubeletVersion", checkedBy: "schema", sample: cpNode + `kubeletVersion: %s`},
		{pattern: "controlPlane.nodes.*.kubeProxyVersion", checkedBy: "schema", sample: cpNode + `kubeProxyVersion: %s`},
		{pattern: "controlPlane.nodes.*.apiServerVersion", checkedBy: "schema", sample: cpNode + `apiServerVersion: %s`},
		{pattern: "controlPlane.nodes.*.controllerManagerVersion", checkedBy: "schema", sample: cpNode + `controllerManagerVersion: %s`},
		{pattern: "controlPlane.nodes.*.schedulerVersion", checkedBy: "schema", sample: cpNode + `schedulerVersion: %s`},
		{pattern: "controlPlane.nodes.*.os", checkedBy: "schema", sample: cpNode + `os: %s`},
		{pattern: "workers.nodes.*:key", checkedBy: CodeNodeName, sample: `workers: nodes: %s: address: "10.0.1.9"`},
		{pattern: "workers.nodes.*.address", checkedBy: CodeAddressParse, sample: `workers: nodes: w9: address: %s`},
		{pattern: "workers.nodes.*.secondaryAddress", checkedBy: CodeAddressParse, sample: worker + `secondaryAddress: %s}`},
		{pattern: "workers.nodes.*.mac", checkedBy: "schema", sample: worker + `mac: %s}`},
		{pattern: "workers.nodes.*.zone", checkedBy: CodeFailureDomain, sample: worker + `zone: %s}`},
		{pattern: "workers.nodes.*.rack", checkedBy: CodeFailureDomain, sample: worker + `rack: %s}`},
		{pattern: "workers.nodes.*.labels.*:key", checkedBy: CodeLabelInvalid, sample: worker + `labels: %s: "x"}`},
		{pattern: "workers.nodes.*.labels.*", checkedBy: CodeLabelValue, sample: worker + `labels: x: %s}`},
		{pattern: "workers.nodes.*.taints[].key", checkedBy: CodeLabelInvalid, sample: worker + `taints: [{key: %s, effect: "NoSchedule"}]}`},
		{pattern: "workers.nodes.*.taints[].value", checkedBy: CodeTaintValue, sample: worker + `taints: [{key: "k", value: %s, effect: "NoSchedule"}]}`},
		{pattern: "workers.nodes.*.taints[].effect", checkedBy: "schema", sample: worker + `taints: [{key: "k", effect: %s}]}`},
		{pattern: "workers.nodes.*.capacity.memory", checkedBy: "schema", sample: worker + `capacity: memory: %s}`},
		{pattern: "workers.nodes.*.kubeletVersion", checkedBy: "schema", sample: worker + `kubeletVersion: %s}`},
		{pattern: "workers.nodes.*.kubeProxyVersion", checkedBy: "schema", sample: worker + `kubeProxyVersion: %s}`},
		{pattern: "workers.nodes.*.os", checkedBy: "schema", sample: worker + `os: %s}`},
		{pattern: "workers.order[]", checkedBy: CodeRolloutOrder, sample: `workers: order: [%s]`},
		{pattern: "workers.rollout.maxUnavailable", checkedBy: "schema", sample: `workers: rollout: maxUnavailable: %s`},
		{pattern: "workers.rollout.drainTimeout", checkedBy: "schema", sample: `workers: rollout: drainTimeout: %s`},
		{pattern: "workers.pools.*:key", unused: "a pool's name names nodes only through namePattern, whose results KC0102 checks"},
		{pattern: "workers.pools.*.namePattern", checkedBy: CodePoolPattern, sample: pool + `namePattern: %s}`},
		{pattern: "workers.pools.*.firstAddress", checkedBy: CodeAddressParse, sample: `workers: pools: p: {count: 1, namePattern: "p%%d", firstAddress: %s}`},
		{pattern: "workers.pools.*.firstSecondaryAddress", checkedBy: CodeAddressParse, sample: pool + `firstSecondaryAddress: %s}`},
		{pattern: "workers.pools.*.macs[]", checkedBy: "schema", sample: pool + `macs: [%s]}`},
		{pattern: "workers.pools.*.zones[]", checkedBy: CodeFailureDomain, sample: pool + `zones: [%s]}`},
		{pattern: "workers.pools.*.racks[]", checkedBy: CodeFailureDomain, sample: pool + `racks: [%s]}`},
		{pattern: "workers.pools.*.labels.*:key", checkedBy: CodeLabelInvalid, sample: pool + `labels: %s: "x"}`},
		{pattern: "workers.pools.*.labels.*", checkedBy: CodeLabelValue, sample: pool + `labels: x: %s}`},
		{pattern: "workers.pools.*.taints[].key", checkedBy: CodeLabelInvalid, sample: pool + `taints: [{key: %s, effect: "NoSchedule"}]}`},
		{pattern: "workers.pools.*.taints[].value", checkedBy: CodeTaintValue, sample: pool + `taints: [{key: "k", value: %s, effect: "NoSchedule"}]}`},
		{pattern: "workers.pools.*.taints[].effect", checkedBy: "schema", sample: pool + `taints: [{key: "k", effect: %s}]}`},
		{pattern: "workers.pools.*.capacity.memory", checkedBy: "schema", sample: pool + `capacity: memory: %s}`},
		{pattern: "workers.pools.*.kubeletVersion", checkedBy: "schema", sample: pool + `kubeletVersion: %s}`},
		{pattern: "workers.pools.*.kubeProxyVersion", checkedBy: "schema", sample: pool + `kubeProxyVersion: %s}`},
		{pattern: "workers.pools.*.os", checkedBy: "schema", sample: pool + `os: %s}`},
		{pattern: "workers.pools.*.nodes.*:key", checkedBy: CodePoolNodeOverride, sample: pool + `nodes: %s: kubeletVersion: "1.37.2"}`},
		{pattern: "workers.pools.*.nodes.*.kubeletVersion", checkedBy: "schema", sample: pool + `nodes: "p-1": kubeletVersion: %s}`},
		{pattern: "workers.pools.*.nodes.*.kubeProxyVersion", checkedBy: "schema", sample: pool + `nodes: "p-1": kubeProxyVersion: %s}`},
		{pattern: "workers.pools.*.rollout.maxUnavailable", checkedBy: "schema", sample: pool + `rollout: maxUnavailable: %s}`},
		{pattern: "workers.pools.*.rollout.drainTimeout", checkedBy: "schema", sample: pool + `rollout: drainTimeout: %s}`},
		{pattern: "os", checkedBy: "schema", sample: `os: %s`},
		{pattern: "labels.*:key", unused: "cluster labels only select organisation policies; no artifact carries them"},
		{pattern: "labels.*", unused: "cluster labels only select organisation policies; no artifact carries them"},
		{pattern: "policies.waivers.*:key", unused: "a policy waiver's id only names a policy in diagnostics"},
		{pattern: "policies.waivers.*.reason", unused: "a waiver's reason is shown in diagnostics only"},
		{pattern: "etcd.topology", checkedBy: "schema", sample: `etcd: topology: %s`},
		{pattern: "etcd.version", checkedBy: "schema", sample: `etcd: version: %s`},
		{pattern: "etcd.members.*:key", checkedBy: CodeNodeName, sample: `etcd: {topology: "external", members: %s: address: "10.0.2.1"}`},
		{pattern: "etcd.members.*.address", checkedBy: CodeAddressParse, sample: `etcd: {topology: "external", members: e1: address: %s}`},
		{pattern: "etcd.members.*.mac", checkedBy: "schema", sample: member + `mac: %s}}`},
		{pattern: "etcd.members.*.zone", checkedBy: CodeFailureDomain, sample: member + `zone: %s}}`},
		{pattern: "etcd.members.*.rack", checkedBy: CodeFailureDomain, sample: member + `rack: %s}}`},
		{pattern: "etcd.joining[]", checkedBy: CodeEtcdJoining, sample: `etcd: joining: [%s]`},
		{pattern: "etcd.backup.schedule", checkedBy: CodeBackupSchedule, sample: `etcd: backup: schedule: %s`},
		{pattern: "etcd.backup.directory", checkedBy: CodeBackupDirectory, sample: `etcd: backup: directory: %s`},
		{pattern: "etcd.backup.timeout", checkedBy: "schema", sample: `etcd: backup: timeout: %s`},
		// The program; its arguments reach the unit's command line through
		// its encoder, control characters refused.
		{pattern: "etcd.backup.upload[]", checkedBy: CodeBackupUpload, sample: `etcd: backup: upload: [%s]`},
		{pattern: "network.nodes[]", checkedBy: CodeCIDRParse, sample: `network: nodes: ["10.0.0.0/16", %s]`},
		{pattern: "network.podCIDR", checkedBy: CodeCIDRParse, sample: `network: podCIDR: %s`},
		{pattern: "network.secondaryPodCIDR", checkedBy: CodeCIDRParse, sample: `network: {secondaryServiceCIDR: "fd00:96::/112", secondaryPodCIDR: %s}`},
		{pattern: "network.serviceCIDR", checkedBy: CodeCIDRParse, sample: `network: serviceCIDR: %s`},
		{pattern: "network.secondaryServiceCIDR", checkedBy: CodeCIDRParse, sample: `network: {secondaryPodCIDR: "fd00:244::/56", secondaryServiceCIDR: %s}`},
		{pattern: "network.domain", checkedBy: CodeDomain, sample: `network: domain: %s`},
		{pattern: "network.dnsServiceIP", checkedBy: CodeAddressParse, sample: `network: dnsServiceIP: %s`},
		{pattern: "network.gateways[]", checkedBy: CodeAddressParse, sample: `network: gateways: [%s]`},
		{pattern: "network.nameservers[]", checkedBy: CodeAddressParse, sample: `network: nameservers: [%s]`},
		{pattern: "network.cni.plugin", checkedBy: "schema", sample: `network: cni: plugin: %s`},
		{pattern: "network.cni.version", checkedBy: "schema", sample: `network: cni: version: %s`},
		{pattern: "network.cni.mode", checkedBy: "schema", sample: `network: cni: mode: %s`},
		{pattern: "network.cni.images.*:key", checkedBy: CodeImageComponent, sample: `network: cni: images: %s: "ghcr.io/flannel-io/flannel:v0.27.4"`},
		{pattern: "network.cni.images.*", checkedBy: CodeImage, sample: `network: cni: images: flannel: %s`},
		{pattern: "network.kubeProxy.mode", checkedBy: "schema", sample: `network: kubeProxy: mode: %s`},
		{pattern: "storage.drivers.*:key", checkedBy: CodeDriverName, sample: `storage: drivers: %s: {}`},
		{pattern: "storage.classes.*:key", checkedBy: CodeStorageClassName, sample: `storage: {drivers: "d.example.com": {}, classes: %s: {driver: "d.example.com", default: true}}`},
		{pattern: "storage.classes.*.driver", checkedBy: CodeUnknownDriver, sample: `storage: classes: c: {driver: %s, default: true}`},
		{pattern: "storage.classes.*.reclaimPolicy", checkedBy: "schema", sample: `storage: classes: c: {driver: "d", reclaimPolicy: %s}`},
		{pattern: "storage.classes.*.volumeBindingMode", checkedBy: "schema", sample: `storage: classes: c: {driver: "d", volumeBindingMode: %s}`},
		{pattern: "storage.classes.*.parameters.*:key", checkedBy: CodeParameters, anyString: true, sample: `storage: {drivers: "d.example.com": {}, classes: c: {driver: "d.example.com", default: true, parameters: %s: "x"}}`},
		{pattern: "storage.classes.*.parameters.*", checkedBy: CodeParameters, anyString: true, sample: `storage: {drivers: "d.example.com": {}, classes: c: {driver: "d.example.com", default: true, parameters: x: %s}}`},
		{pattern: "runtime.engine", checkedBy: "schema", sample: `runtime: engine: %s`},
		{pattern: "runtime.version", checkedBy: "schema", sample: `runtime: version: %s`},
		{pattern: "runtime.cgroupDriver", checkedBy: "schema", sample: `runtime: cgroupDriver: %s`},
		{pattern: "runtime.mirrors.*:key", checkedBy: CodeRegistryHost, sample: `runtime: mirrors: %s: ["https://mirror.example.com"]`},
		{pattern: "runtime.mirrors.*[]", checkedBy: CodeMirrorURL, sample: `runtime: mirrors: "registry.k8s.io": [%s]`},
		{pattern: "kubelet.cgroupDriver", checkedBy: "schema", sample: `kubelet: cgroupDriver: %s`},
		{pattern: "pki.keyAlgorithm", checkedBy: "schema", sample: `pki: keyAlgorithm: %s`},
		{pattern: "pki.caValidity", checkedBy: "schema", sample: `pki: caValidity: %s`},
		{pattern: "pki.leafValidity", checkedBy: "schema", sample: `pki: leafValidity: %s`},
		{pattern: "pki.clockSkew", checkedBy: "schema", sample: `pki: clockSkew: %s`},
		{pattern: "security.encryptionAtRest.provider", checkedBy: "schema", sample: `security: encryptionAtRest: provider: %s`},
		{pattern: "security.cis.waivers.*:key", checkedBy: "schema", sample: `security: cis: waivers: %s: reason: "r"`},
		{pattern: "security.cis.waivers.*.reason", unused: "a waiver's reason is shown in diagnostics only"},
		{pattern: "security.admission.plugins[]", checkedBy: CodeAdmission, sample: `security: admission: plugins: ["NodeRestriction", %s]`},
		{pattern: "security.admission.podSecurity", checkedBy: "schema", sample: `security: admission: podSecurity: %s`},
		{pattern: "addons.coredns.version", checkedBy: "schema", sample: `addons: coredns: version: %s`},
		{pattern: "install.source", checkedBy: "schema", sample: `install: source: %s`},
		{pattern: "install.artifacts.*:key", unused: "an artifact's name only labels it in the spec and in diagnostics"},
		{pattern: "install.artifacts.*.url", checkedBy: CodeURL, sample: `install: artifacts: a: {url: %s, sha256: "` + zeroSHA + `", path: "` + kubeletPath() + `"}`},
		{pattern: "install.artifacts.*.sha256", checkedBy: "schema", sample: `install: artifacts: a: {url: "https://example.com/a", sha256: %s, path: "` + kubeletPath() + `"}`},
		{pattern: "install.artifacts.*.path", checkedBy: CodeFilePath, sample: art + `path: %s}}`},
		{pattern: "install.artifacts.*.extract.*:key", checkedBy: CodeArchiveMember, sample: art + `extract: %s: "` + kubeletPath() + `"}}`},
		{pattern: "install.artifacts.*.extract.*", checkedBy: CodeFilePath, sample: art + `extract: "kubelet": %s}}`},
		{pattern: "access.users.*:key", checkedBy: CodeUserName, sample: `access: users: %s: {}`},
		{pattern: "access.users.*.sshAuthorizedKeys[]", checkedBy: CodeSSHKey, sample: `access: users: alice: sshAuthorizedKeys: [%s]`},
		{pattern: "boot.matchboxURL", checkedBy: "schema", sample: `boot: {matchboxURL: %s, kernel: "/assets/k", initrd: [], args: []}`},
		{pattern: "boot.kernel", checkedBy: "schema", sample: `boot: {matchboxURL: "http://mb.example.com:8080", kernel: %s, initrd: [], args: []}`},
		{pattern: "boot.initrd[]", checkedBy: "schema", sample: `boot: {matchboxURL: "http://mb.example.com:8080", kernel: "/assets/k", initrd: [%s], args: []}`},
		{pattern: "boot.args[]", checkedBy: CodeKernelArg, sample: `boot: {matchboxURL: "http://mb.example.com:8080", kernel: "/assets/k", initrd: [], args: [%s]}`},
		{pattern: "boot.roles.*:key", checkedBy: "schema", sample: boot + `roles: %s: {}}`},
		{pattern: "boot.roles.*.kernel", checkedBy: "schema", sample: boot + `roles: worker: kernel: %s}`},
		{pattern: "boot.roles.*.initrd[]", checkedBy: "schema", sample: boot + `roles: worker: initrd: [%s]}`},
		{pattern: "boot.roles.*.args[]", checkedBy: CodeKernelArg, sample: boot + `roles: worker: args: [%s]}`},
		{pattern: "boot.os.*:key", checkedBy: "schema", sample: boot + `os: %s: {}}`},
		{pattern: "boot.os.*.kernel", checkedBy: "schema", sample: boot + `os: flatcar: kernel: %s}`},
		{pattern: "boot.os.*.initrd[]", checkedBy: "schema", sample: boot + `os: flatcar: initrd: [%s]}`},
		{pattern: "boot.os.*.args[]", checkedBy: CodeKernelArg, sample: boot + `os: flatcar: args: [%s]}`},
	}
}

const zeroSHA = "0000000000000000000000000000000000000000000000000000000000000000"

func checkValues(m *model) {
	s := &m.spec
	first := onceSet{}.first
	for _, n := range m.nodes {
		for _, k := range sortedKeys(n.spec.Labels) {
			if errs := validation.IsValidLabelValue(n.spec.Labels[k]); len(errs) > 0 && first(CodeLabelValue+n.path+k) {
				m.report(CodeLabelValue, n.fieldPath("labels."+quoteLabel(k)),
					fmt.Sprintf("label %s has the value %s, which is not a valid label value: %s", quoteLabel(k), diag.Quote(n.spec.Labels[k]), strings.Join(errs, "; ")),
					`a label value is at most 63 letters, digits, '-', '_' and '.', starting and ending with a letter or digit (or empty)`)
			}
		}
		for i, t := range n.spec.Taints {
			if errs := validation.IsValidLabelValue(t.Value); len(errs) > 0 && first(CodeTaintValue+n.path+fmt.Sprint(i)) {
				m.report(CodeTaintValue, n.fieldPath(fmt.Sprintf("taints[%d].value", i)),
					fmt.Sprintf("taint %s has the value %s, which is not a valid taint value: %s", diag.Quote(t.Key), diag.Quote(t.Value), strings.Join(errs, "; ")),
					`a taint value follows the rules of a label value: at most 63 letters, digits, '-', '_' and '.', starting and ending with a letter or digit (or empty)`)
			}
		}
	}
	// Zones and racks are checked where they are written: a pool's list
	// entries, a node's or member's field.
	domain := func(path, kind, v string) {
		errs := validation.IsValidLabelValue(v)
		if v == "" && m.writtenOrElement(path) {
			errs = append(errs, "it is empty")
		}
		if len(errs) > 0 && first(CodeFailureDomain+path) {
			m.report(CodeFailureDomain, path, fmt.Sprintf("%s %s is not a valid label value: %s", kind, diag.Quote(v), strings.Join(errs, "; ")),
				"name failure domains with at most 63 letters, digits, '-', '_' and '.', such as \"eu-west-1a\"")
		}
	}
	for _, name := range sortedKeys(s.ControlPlane.Nodes) {
		n := s.ControlPlane.Nodes[name]
		p := "controlPlane.nodes." + quoteLabel(name)
		domain(p+".zone", "zone", n.Zone)
		domain(p+".rack", "rack", n.Rack)
	}
	for _, name := range sortedKeys(s.Workers.Nodes) {
		n := s.Workers.Nodes[name]
		p := "workers.nodes." + quoteLabel(name)
		domain(p+".zone", "zone", n.Zone)
		domain(p+".rack", "rack", n.Rack)
	}
	for _, name := range sortedKeys(s.Workers.Pools) {
		pl := s.Workers.Pools[name]
		p := "workers.pools." + quoteLabel(name)
		for i, z := range pl.Zones {
			domain(fmt.Sprintf("%s.zones[%d]", p, i), "zone", z)
		}
		for i, r := range pl.Racks {
			domain(fmt.Sprintf("%s.racks[%d]", p, i), "rack", r)
		}
	}
	for _, name := range sortedKeys(s.Etcd.Members) {
		mem := s.Etcd.Members[name]
		p := "etcd.members." + quoteLabel(name)
		domain(p+".zone", "zone", mem.Zone)
		domain(p+".rack", "rack", mem.Rack)
	}
	checkMACs(m)
	checkImages(m)
	checkUsers(m)
	checkInstallValues(m)
	checkBootValues(m)
	checkMirrors(m)
	for i, p := range s.Security.Admission.Plugins {
		if !slices.Contains(admissionPlugins(), p) {
			m.report(CodeAdmission, fmt.Sprintf("security.admission.plugins[%d]", i),
				fmt.Sprintf("admission plugin %s is not one kube-apiserver knows: it would refuse to start", diag.Quote(p)),
				"use a name from kube-apiserver --enable-admission-plugins, such as \"NodeRestriction\" or \"DenyServiceExternalIPs\"")
		}
	}
	for _, name := range sortedKeys(s.Storage.Classes) {
		params := s.Storage.Classes[name].Parameters
		path := "storage.classes." + quoteLabel(name) + ".parameters"
		size := 0
		for _, k := range sortedKeys(params) {
			size += len(k) + len(params[k])
			if k == "" {
				m.reportKey(CodeParameters, path+"."+quoteLabel(k), "a StorageClass parameter has an empty name", "give the parameter the name the CSI driver documents")
			}
		}
		switch {
		case len(params) > 512:
			m.report(CodeParameters, path, fmt.Sprintf("StorageClass %s has %d parameters; the API server accepts at most 512", name, len(params)), "pass fewer parameters")
		case size > 256*1024:
			m.report(CodeParameters, path, fmt.Sprintf("StorageClass %s has %d bytes of parameters; the API server accepts at most 256 KiB", name, size), "pass fewer or shorter parameters")
		}
	}
}

// checkMACs refuses addresses no interface has: they pass the schema's
// shape but would select no machine (or every one) when network booting.
func checkMACs(m *model) {
	first := onceSet{}.first
	for _, n := range m.nodes {
		if n.spec.MAC == "" {
			continue
		}
		hw, err := net.ParseMAC(n.spec.MAC)
		if err != nil || len(hw) != 6 {
			continue // the schema reports the shape
		}
		what := ""
		switch {
		case slices.Equal(hw, net.HardwareAddr{0, 0, 0, 0, 0, 0}):
			what = "the all-zero address"
		case slices.Equal(hw, net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}):
			what = "the broadcast address"
		case hw[0]&1 == 1:
			what = "a multicast address (the lowest bit of its first octet is set)"
		}
		if what != "" && first(CodeMAC+n.fieldPath("mac")) {
			m.report(CodeMAC, n.fieldPath("mac"), fmt.Sprintf("MAC address %s of node %s is %s", n.spec.MAC, n.name, what),
				"write the hardware address of the machine's provisioning interface (ip link shows it)")
		}
	}
}

// kubeletPath is where examples put the kubelet.
func kubeletPath() string { return ir.OSDebian.BinDir() + "/kubelet" }

// checkImages holds image overrides to what the runtime pulls: a fully
// qualified name pinned by tag or digest, for a component the plugin has.
func checkImages(m *model) {
	cni := m.spec.Network.CNI
	components := ir.CNIImageComponents(cni.Plugin)
	for _, k := range sortedKeys(cni.Images) {
		path := "network.cni.images." + quoteLabel(k)
		if !slices.Contains(components, k) {
			m.reportKey(CodeImageComponent, path, fmt.Sprintf("%s has no component %s whose image could be replaced", cni.Plugin, diag.Quote(k)),
				fmt.Sprintf("name one of %s", strings.Join(components, ", ")))
			continue
		}
		v := cni.Images[k]
		ref, err := reference.ParseNamed(v)
		switch {
		case err != nil:
			m.report(CodeImage, path, fmt.Sprintf("image %s is not a fully qualified image reference: %v", diag.Quote(v), err),
				`write registry/repository:tag or registry/repository@sha256:digest, such as "quay.io/calico/node:v3.30.3"`)
		default:
			_, tagged := ref.(reference.Tagged)
			_, digested := ref.(reference.Digested)
			if !tagged && !digested {
				m.report(CodeImage, path, fmt.Sprintf("image %s has no tag or digest: nodes would pull whatever :latest is", diag.Quote(v)),
					"pin the image with a tag, or exactly with @sha256:<digest>")
			}
		}
	}
}

// maxUserName is the length of a portable login name (useradd's limit).
const maxUserName = 32

// reservedUsers are accounts a Debian-like or immutable base system
// creates, or the node tree itself does (etcd): a login of that name
// would take over the account, its files and its processes.
func reservedUsers() []string {
	return []string{"root", "daemon", "bin", "sys", "sync", "games", "man", "lp", "mail", "news", "uucp", "proxy",
		"www-data", "backup", "list", "irc", "gnats", "nobody", "nogroup", "messagebus", "sshd", "polkitd", "tss",
		"uuidd", "syslog", "dnsmasq", "ntp", "chrony", "etcd", "kubelet", "containerd",
		// The VIP's proxies: Debian's haproxy and keepalived packages make
		// these accounts on the control-plane nodes.
		"haproxy", "keepalived_script"}
}

// systemGroups are groups the base images already have (Debian, Fedora
// CoreOS, Flatcar): useradd refuses to make a user whose name is an
// existing group, and cloud-init or Ignition then fails the first boot.
func systemGroups() []string {
	return []string{"adm", "tty", "disk", "mem", "kmem", "wheel", "sudo", "cdrom", "dialout", "floppy", "tape", "audio",
		"video", "users", "utmp", "utempter", "input", "kvm", "render", "sgx", "lock", "ftp", "dbus", "docker",
		"ssh_keys", "rpc", "rpcuser", "portage", "staff", "src", "shadow", "plugdev", "netdev", "operator"}
}

func checkUsers(m *model) {
	for _, name := range sortedKeys(m.spec.Access.Users) {
		path := "access.users." + quoteLabel(name)
		switch {
		case len(name) > maxUserName:
			m.reportKey(CodeUserName, path, fmt.Sprintf("login name %s is longer than %d characters", diag.Quote(name), maxUserName), "use a shorter name")
		case slices.Contains(reservedUsers(), name) || strings.HasPrefix(name, "systemd-") || strings.HasPrefix(name, "_"):
			m.reportKey(CodeUserName, path, fmt.Sprintf("login name %s is an account the system or the node tree owns: the user's keys would own its files and processes", diag.Quote(name)),
				"choose a personal name for the login, such as \"alice\"")
		case slices.Contains(systemGroups(), name):
			m.reportKey(CodeUserName, path, fmt.Sprintf("login name %s is a group the nodes' base system already has: useradd refuses the user, and cloud-init or Ignition fails the first boot", diag.Quote(name)),
				"choose a personal name for the login, such as \"alice\"; add it to groups through sudo instead")
		}
		for i, key := range m.spec.Access.Users[name].SSHAuthorizedKeys {
			if problem := sshKeyProblem(key); problem != "" {
				m.report(CodeSSHKey, fmt.Sprintf("%s.sshAuthorizedKeys[%d]", path, i), fmt.Sprintf("SSH key %s of %s: %s", diag.Quote(key), name, problem),
					`paste the one line of the public key file, such as "ssh-ed25519 AAAA... alice@laptop"`)
			}
		}
	}
}

// sshKeyProblem says why OpenSSH would not take key as one line of
// authorized_keys, or "".
func sshKeyProblem(key string) string {
	if strings.ContainsFunc(key, isControl) {
		return "it holds a line break or another control character"
	}
	pub, _, options, rest, err := ssh.ParseAuthorizedKey([]byte(key))
	switch {
	case err != nil:
		return "it does not parse as a public key"
	case len(options) > 0:
		return "it carries authorized_keys options, which kcompile does not write"
	case len(rest) > 0:
		return "it holds more than one key"
	case pub.Type() == "ssh-dss":
		return "OpenSSH refuses DSA keys"
	}
	if k, ok := pub.(ssh.CryptoPublicKey); ok {
		if rsa, ok := k.CryptoPublicKey().(interface{ Size() int }); ok && pub.Type() == ssh.KeyAlgoRSA && rsa.Size()*8 < 2048 {
			return fmt.Sprintf("its RSA key has %d bits; use at least 2048", rsa.Size()*8)
		}
	}
	return ""
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) }

// urlProblem says why s is not an absolute http(s) URL the installer and
// Matchbox can be given, or "".
func urlProblem(s string) string {
	_, problem := parseURL(s)
	return problem
}

// parseURL parses an http(s) URL a node fetches, or says why it is not
// one.
func parseURL(s string) (*url.URL, string) {
	// A URL is ASCII: anything else is percent-encoded.
	if i := strings.IndexFunc(s, func(r rune) bool {
		return isControl(r) || r == ' ' || r > 0x7e || strings.ContainsRune(`"'\<>|^{}`+"`", r)
	}); i >= 0 {
		return nil, fmt.Sprintf("it holds %s at byte %d", describeRune([]rune(s[i:])[0]), i)
	}
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return nil, "it does not parse as a URL"
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, "its scheme is not http or https"
	case u.Host == "" || u.Hostname() == "":
		return nil, "it names no host"
	case u.User != nil:
		return nil, "it carries credentials, which would be written into every node's files"
	case u.Fragment != "" || strings.Contains(s, "#"):
		return nil, "it has a fragment"
	}
	return u, ""
}

func describeRune(r rune) string {
	switch {
	case r == '\n':
		return "a line break"
	case r == ' ':
		return "a space"
	case isControl(r):
		return fmt.Sprintf("the control character %U", r)
	}
	return fmt.Sprintf("the character %q", r)
}

// safePathRune are the characters kcompile accepts in paths it writes into
// scripts' data files and units: enough for every real binary or archive
// layout, nothing a shell, systemd or a list parser would interpret.
func safePathRune(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("/._+-@:=,", r)
}

// pathProblem says why p is not a clean absolute path of safe characters.
func pathProblem(p string) string {
	if i := strings.IndexFunc(p, func(r rune) bool { return !safePathRune(r) }); i >= 0 {
		return fmt.Sprintf("it holds %s", describeRune([]rune(p[i:])[0]))
	}
	switch {
	case !strings.HasPrefix(p, "/"):
		return "it is not absolute"
	case path.Clean(p) != p:
		return fmt.Sprintf("it is not clean (%s)", path.Clean(p))
	case p == "/":
		return "it is the root directory"
	case len(p) > 4096:
		return "it is longer than 4096 bytes"
	}
	return ""
}

// memberProblem says why m is not a clean relative archive member.
func memberProblem(name string) string {
	if i := strings.IndexFunc(name, func(r rune) bool { return !safePathRune(r) }); i >= 0 {
		return fmt.Sprintf("it holds %s", describeRune([]rune(name[i:])[0]))
	}
	// Release archives often list their members as "./name".
	rel := strings.TrimPrefix(name, "./")
	switch {
	case rel == "" || strings.HasPrefix(name, "/"):
		return "it is not a relative path"
	case strings.HasPrefix(name, "-"):
		return "it starts with '-', which tar would read as an option"
	case path.Clean(rel) != rel || rel == "." || slices.Contains(strings.Split(rel, "/"), ".."):
		return "it is not a clean path inside the archive"
	}
	return ""
}

func checkInstallValues(m *model) {
	for _, name := range sortedKeys(m.spec.Install.Artifacts) {
		a := m.spec.Install.Artifacts[name]
		path := "install.artifacts." + quoteLabel(name)
		if problem := urlProblem(a.URL); problem != "" {
			m.report(CodeURL, path+".url", fmt.Sprintf("artifact URL %s: %s", diag.Quote(a.URL), problem),
				"write the release's download address, such as \"https://dl.k8s.io/v1.37.2/bin/linux/amd64/kubelet\"")
		}
		if a.Path != "" {
			if problem := pathProblem(a.Path); problem != "" {
				m.report(CodeFilePath, path+".path", fmt.Sprintf("artifact path %s: %s", diag.Quote(a.Path), problem),
					"write where the binary is installed, such as "+strconv.Quote(kubeletPath()))
			}
		}
		for _, member := range sortedKeys(a.Extract) {
			mpath := path + ".extract." + quoteLabel(member)
			if problem := memberProblem(member); problem != "" {
				m.reportKey(CodeArchiveMember, mpath, fmt.Sprintf("archive member %s: %s", diag.Quote(member), problem),
					"write the member's path as `tar -tzf` lists it, such as \"kubernetes/node/bin/kubelet\"")
			}
			if problem := pathProblem(a.Extract[member]); problem != "" {
				m.report(CodeFilePath, mpath, fmt.Sprintf("install path %s: %s", diag.Quote(a.Extract[member]), problem),
					"write where the member is installed, such as "+strconv.Quote(kubeletPath()))
			}
		}
	}
}

// kernelArgProblem says why a kernel argument or boot asset would not
// reach the kernel as written: iPXE expands ${...} and splits on spaces,
// the kernel's command line parser interprets quotes.
func kernelArgProblem(s string) string {
	if i := strings.IndexFunc(s, func(r rune) bool { return r <= ' ' || r >= 0x7f || strings.ContainsRune(`"'\$;|&<>`+"`", r) }); i >= 0 {
		return fmt.Sprintf("it holds %s", describeRune([]rune(s[i:])[0]))
	}
	switch {
	case s == "":
		return "it is empty"
	case len(s) > maxKernelArg:
		return fmt.Sprintf("it is %d bytes long; the kernel's whole command line holds %d", len(s), maxKernelArg)
	}
	return ""
}

// ownedKernelArgs are the kernel arguments (up to "=") kcompile appends
// to a node's command line itself (targets/terraform: IgnitionArgs,
// SeedArg), and the older names Ignition and Flatcar still read for them,
// with what each sets.
var ownedKernelArgs = map[string]string{
	"ignition.config.url":  "the URL Ignition fetches the node's configuration from",
	"coreos.config.url":    "the URL Ignition fetches the node's configuration from (the older name of ignition.config.url)",
	"ignition.firstboot":   "Ignition's first-boot switch",
	"ignition.platform.id": "the platform Ignition reads its configuration for",
	"flatcar.first_boot":   "Flatcar's first-boot switch",
	"coreos.first_boot":    "Flatcar's first-boot switch (the older name of flatcar.first_boot)",
	"ds":                   "cloud-init's data source, which kcompile points at Matchbox",
}

// ownedKernelArg says what a kernel argument sets that kcompile sets
// itself, or "".
func ownedKernelArg(a string) string {
	key, _, _ := strings.Cut(a, "=")
	return ownedKernelArgs[key]
}

// maxKernelArg is the kernel's command line size on x86 (COMMAND_LINE_SIZE).
const maxKernelArg = 2048

func checkBootValues(m *model) {
	b := m.spec.Boot
	if b == nil {
		return
	}
	if problem := urlProblem(b.MatchboxURL); problem != "" {
		m.report(CodeURL, "boot.matchboxURL", fmt.Sprintf("Matchbox URL %s: %s", diag.Quote(b.MatchboxURL), problem),
			`write Matchbox's HTTP endpoint as machines reach it, such as "http://matchbox.example.com:8080"`)
	} else if u, _ := url.Parse(b.MatchboxURL); u.RawQuery != "" || u.ForceQuery {
		m.report(CodeURL, "boot.matchboxURL", fmt.Sprintf("Matchbox URL %s has a query; kcompile appends its own", diag.Quote(b.MatchboxURL)),
			"write the endpoint without ?...")
	}
	asset := func(path, v string) {
		problem := kernelArgProblem(v)
		if problem == "" && !strings.HasPrefix(v, "/") {
			problem = urlProblem(v)
		}
		if problem == "" && strings.HasPrefix(v, "/") {
			problem = pathProblem(v)
		}
		if problem != "" {
			m.report(CodeKernelArg, path, fmt.Sprintf("boot asset %s: %s", diag.Quote(v), problem),
				`write an http(s) URL or a path Matchbox serves, such as "/assets/fedora-coreos/kernel"`)
		}
	}
	args := func(path string, xs []string) {
		for i, a := range xs {
			if problem := kernelArgProblem(a); problem != "" {
				m.report(CodeKernelArg, fmt.Sprintf("%s[%d]", path, i), fmt.Sprintf("kernel argument %s: %s", diag.Quote(a), problem),
					"write one argument without spaces, quotes, backslashes or any of $;|&<>, such as \"console=ttyS0\"")
			} else if what := ownedKernelArg(a); what != "" {
				m.report(CodeKernelArgOwned, fmt.Sprintf("%s[%d]", path, i), fmt.Sprintf("kernel argument %s sets %s, which kcompile appends itself after the spec's arguments: the node would boot with kcompile's, or with two that contradict each other", diag.Quote(a), what),
					"remove it: kcompile points every node at its own configuration on Matchbox (boot.matchboxURL)")
			}
		}
	}
	asset("boot.kernel", b.Kernel)
	for i, x := range b.Initrd {
		asset(fmt.Sprintf("boot.initrd[%d]", i), x)
	}
	args("boot.args", b.Args)
	overrides := map[string]specBootOverride{}
	for role, r := range b.Roles {
		overrides["boot.roles."+quoteLabel(role)] = r
	}
	for os, r := range b.OS {
		overrides["boot.os."+quoteLabel(os)] = r
	}
	for _, p := range sortedKeys(overrides) {
		r := overrides[p]
		if r.Kernel != nil {
			asset(p+".kernel", *r.Kernel)
		}
		if r.Initrd != nil {
			for i, x := range *r.Initrd {
				asset(fmt.Sprintf("%s.initrd[%d]", p, i), x)
			}
		}
		if r.Args != nil {
			args(p+".args", *r.Args)
		}
	}
}

// checkMirrors holds registry mirrors to what both runtimes read the
// same way: containerd names a registry's directory and CRI-O its prefix
// after the host images name, and each takes a mirror's scheme, host and
// port (a path means a prefix of every request to containerd and a
// namespace to CRI-O, so none is accepted).
func checkMirrors(m *model) {
	for _, host := range sortedKeys(m.spec.Runtime.Mirrors) {
		path := "runtime.mirrors." + quoteLabel(host)
		if problem := registryHostProblem(host); problem != "" {
			m.reportKey(CodeRegistryHost, path, fmt.Sprintf("registry %s: %s", diag.Quote(host), problem),
				`write the registry's host as image references name it, such as "registry.k8s.io", "docker.io" or "registry.example.com:5000"`)
		}
		endpoints := m.spec.Runtime.Mirrors[host]
		if len(endpoints) == 0 {
			m.report(CodeMirrorURL, path, fmt.Sprintf("registry %s has no mirror", diag.Quote(host)), "list its mirrors, or remove the registry")
		}
		for i, e := range endpoints {
			u, problem := mirrorURL(e)
			if problem == "" && slices.Index(endpoints, e) < i {
				problem = "it is listed twice"
			}
			if problem == "" {
				if m.mirrors == nil {
					m.mirrors = map[string][]*url.URL{}
				}
				m.mirrors[host] = append(m.mirrors[host], u)
			}
			if problem != "" {
				m.report(CodeMirrorURL, fmt.Sprintf("%s[%d]", path, i), fmt.Sprintf("mirror %s of %s: %s", diag.Quote(e), diag.Quote(host), problem),
					`write the mirror's scheme, host and port only, such as "https://mirror.example.com:5000"`)
			}
		}
	}
}

// registryHostProblem says why h is not a registry host an image
// reference can name, or "".
func registryHostProblem(h string) string {
	if i := strings.IndexFunc(h, func(r rune) bool { return isControl(r) || r == ' ' || r > 0x7e }); i >= 0 {
		return fmt.Sprintf("it holds %s", describeRune([]rune(h[i:])[0]))
	}
	named, err := reference.ParseNormalizedNamed(h + "/image")
	switch {
	case err != nil || strings.Contains(h, "/"):
		return "it is not a host name or address with an optional port"
	case reference.Domain(named) != h:
		return fmt.Sprintf("images naming it are pulled from %s: it is no registry host", reference.Domain(named))
	case strings.ToLower(h) != h:
		return "it has upper-case letters; image references name registries in lower case"
	}
	return portProblem(h)
}

// portProblem says why the port of host[:port], if any, is out of range.
func portProblem(hostport string) string {
	i := strings.LastIndex(hostport, ":")
	if i < 0 || strings.HasSuffix(hostport, "]") {
		return ""
	}
	if p, err := strconv.Atoi(hostport[i+1:]); err != nil || p < 1 || p > 65535 {
		return "its port is not a number from 1 to 65535"
	}
	return ""
}

// mirrorURL says why e is not scheme://host[:port] for a mirror,
// or "".
func mirrorURL(e string) (*url.URL, string) {
	u, problem := parseURL(e)
	if problem != "" {
		return nil, problem
	}
	host := u.Hostname()
	switch {
	case u.Path != "" || u.RawPath != "" || u.Opaque != "":
		return nil, "it has a path, which containerd and CRI-O read differently"
	case u.RawQuery != "" || u.ForceQuery:
		return nil, "it has a query"
	case len(validation.IsDNS1123Subdomain(host)) > 0 && !isIP(host):
		return nil, "its host is neither a lower-case DNS name nor an IP address"
	}
	if problem := portProblem(u.Host); problem != "" {
		return nil, problem
	}
	return u, ""
}

func isIP(s string) bool { _, err := netip.ParseAddr(s); return err == nil }

// admissionPlugins are the admission plugins kube-apiserver 1.37 knows
// (k8s.io/kubernetes/pkg/kubeapiserver/options.AllOrderedPlugins; the
// simulator's tests hold this list to it).
func admissionPlugins() []string {
	return []string{"AlwaysAdmit", "NamespaceAutoProvision", "NamespaceLifecycle", "NamespaceExists",
		"LimitPodHardAntiAffinityTopology", "LimitRanger", "ServiceAccount", "NodeRestriction", "TaintNodesByCondition",
		"AlwaysPullImages", "ImagePolicyWebhook", "PodSecurity", "PodNodeSelector", "Priority", "DefaultTolerationSeconds",
		"PodTolerationRestriction", "EventRateLimit", "ExtendedResourceToleration", "DefaultStorageClass",
		"StorageObjectInUseProtection", "PodGroupProtection", "OwnerReferencesPermissionEnforcement",
		"PersistentVolumeClaimResize", "RuntimeClass", "CertificateApproval", "CertificateSigning",
		"ClusterTrustBundleAttest", "CertificateSubjectRestriction", "DefaultIngressClass", "DenyServiceExternalIPs",
		"PodTopologyLabels", "NodeDeclaredFeatureValidator", "PodResizeValidator", "MutatingAdmissionPolicy",
		"MutatingAdmissionWebhook", "ValidatingAdmissionPolicy", "ValidatingAdmissionWebhook", "ResourceQuota", "AlwaysDeny"}
}

// AdmissionPlugins exports the list for the test that holds it to
// kube-apiserver's.
func AdmissionPlugins() []string { return admissionPlugins() }
