package compiler

import (
	"fmt"
	"slices"
	"sort"
	"strconv"

	"github.com/kcompile/kcompile/compiler/diag"
)

// The CIS Kubernetes Benchmark profile. The compiled nodes satisfy every
// item a generator controls by default (kube-bench proves it in
// targets/systemd); these checks name, at the spec's positions, the
// settings that would break an item. A spec relaxes an item with a
// named waiver under security.cis.waivers.
const (
	CodeCISBroken       = "KC1501"
	CodeCISWaived       = "KC1502"
	CodeCISWaiverUnused = "KC1503"
)

// ProfileCIS is the profile of `kcompile check --profile cis`.
const ProfileCIS = "cis"

func cisFamily() family {
	return family{name: "cis", check: checkCIS, rules: []diag.Rule{
		rule(CodeCISBroken, diag.Error, "a setting breaks an item of the CIS Kubernetes Benchmark that no waiver relaxes (with --profile cis)"),
		rule(CodeCISWaived, diag.Warning, "a waiver relaxes an item of the CIS Kubernetes Benchmark"),
		rule(CodeCISWaiverUnused, diag.Warning, "a waiver names a CIS item no setting of the spec breaks"),
	}}
}

// cisBreak is a setting that breaks a CIS item.
type cisBreak struct {
	id, path, what, fix string
}

// cisBreaks lists what the spec's settings break, item by item.
func cisBreaks(m *model) []cisBreak {
	s := m.spec.Security
	var out []cisBreak
	add := func(id, path, what, fix string) { out = append(out, cisBreak{id, path, what, fix}) }
	if s.AnonymousAuth {
		add("1.2.1", "security.anonymousAuth", "the API server answers anonymous requests", "set anonymousAuth: false")
	}
	plugins := s.Admission.Plugins
	if !slices.Contains(plugins, "DenyServiceExternalIPs") {
		add("1.2.3", "security.admission.plugins", "Services may claim any external address (DenyServiceExternalIPs is not enabled)", `add "DenyServiceExternalIPs"`)
	}
	if slices.Contains(plugins, "AlwaysAdmit") {
		add("1.2.10", "security.admission.plugins", "the AlwaysAdmit admission plugin admits everything", `remove "AlwaysAdmit"`)
	}
	if !slices.Contains(plugins, "NodeRestriction") {
		add("1.2.14", "security.admission.plugins", "kubelets may modify other nodes and their pods (NodeRestriction is not enabled)", `add "NodeRestriction"`)
	}
	a := s.Audit
	if !a.Enabled {
		add("1.2.16", "security.audit.enabled", "the API server keeps no audit log", "set enabled: true")
		add("3.2.1", "security.audit.enabled", "the API server has no audit policy", "set enabled: true")
	} else {
		if a.MaxAgeDays < 30 {
			add("1.2.17", "security.audit.maxAgeDays", "audit logs are kept "+strconv.Itoa(a.MaxAgeDays)+" days", "keep them at least 30 days")
		}
		if a.MaxBackups < 10 {
			add("1.2.18", "security.audit.maxBackups", "audit logs keep "+strconv.Itoa(a.MaxBackups)+" rotated files", "keep at least 10")
		}
		if a.MaxSizeMB < 100 {
			add("1.2.19", "security.audit.maxSizeMB", "audit logs rotate at "+strconv.Itoa(a.MaxSizeMB)+" MB", "rotate at 100 MB or more")
		}
	}
	e := s.EncryptionAtRest
	if !e.Enabled {
		add("1.2.27", "security.encryptionAtRest.enabled", "Secrets are stored in etcd unencrypted", "set enabled: true")
	} else if e.Provider != "aescbc" && e.Provider != "secretbox" {
		add("1.2.28", "security.encryptionAtRest.provider", "Secrets are encrypted with "+e.Provider+", which the benchmark does not accept", `use "secretbox" or "aescbc"`)
	}
	if s.Admission.PodSecurity == "privileged" {
		add("5.2.2", "security.admission.podSecurity", "the privileged Pod Security Standard admits privileged containers", `use "baseline" or "restricted"`)
	}
	return out
}

func checkCIS(m *model) {
	waivers := m.spec.Security.CIS.Waivers
	used := map[string]bool{}
	for _, b := range cisBreaks(m) {
		waiverPath := "security.cis.waivers." + quoteLabel(b.id)
		if w, ok := waivers[b.id]; ok {
			used[b.id] = true
			m.report(CodeCISWaived, waiverPath, fmt.Sprintf("CIS %s is waived: %s (%s)", b.id, b.what, diag.Printable(w.Reason, maxLiteral)),
				"the cluster does not meet this item of the CIS Kubernetes Benchmark; auditors will ask for the reason", b.path)
			continue
		}
		if m.profile != ProfileCIS {
			continue
		}
		m.report(CodeCISBroken, b.path, fmt.Sprintf("breaks CIS %s: %s", b.id, b.what),
			fmt.Sprintf("%s, or waive the item: security: cis: waivers: %q: reason: \"...\"", b.fix, b.id))
	}
	ids := make([]string, 0, len(waivers))
	for id := range waivers {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		if !used[id] {
			m.reportKey(CodeCISWaiverUnused, "security.cis.waivers."+quoteLabel(id),
				fmt.Sprintf("the waiver of CIS %s relaxes nothing: no setting of the spec breaks that item", id),
				"remove the waiver, so that it cannot hide a later change")
		}
	}
}
