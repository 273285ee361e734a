package systemd

import (
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/kcompile/kcompile/compiler/pki"
	"github.com/kcompile/kcompile/internal/fixture"
)

// TestKubeletClientRBAC: the API server's kubelet client certificate
// carries no group, so the only rights it has are those the cluster's
// RBAC binds to its user: the kubelet API, not cluster-admin.
func TestKubeletClientRBAC(t *testing.T) {
	var roles []string
	for _, o := range clusterRBAC() {
		crb, ok := o.(*rbacv1.ClusterRoleBinding)
		if !ok {
			continue
		}
		for _, s := range crb.Subjects {
			if s.Kind == rbacv1.UserKind && s.Name == pki.APIServerKubeletClientUser {
				roles = append(roles, crb.RoleRef.Name)
			}
		}
	}
	if len(roles) != 1 || roles[0] != "system:kubelet-api-admin" {
		t.Errorf("user %s is bound to %q, want exactly system:kubelet-api-admin", pki.APIServerKubeletClientUser, roles)
	}
	c := compileExample(t, "ha-stacked")
	m, err := pki.Issue(c, fixture.Bundle(t))
	if err != nil {
		t.Fatal(err)
	}
	l, ok := m.Leaf("apiserver-kubelet-client@cp1")
	if !ok || l.X509.Subject.CommonName != pki.APIServerKubeletClientUser || len(l.X509.Subject.Organization) != 0 {
		t.Errorf("apiserver-kubelet-client@cp1 (found %v) is not CN=%s without O", ok, pki.APIServerKubeletClientUser)
	}
}
