package restore

import (
	"crypto/x509"
	"fmt"
	"slices"
	"strings"

	"github.com/kcompile/kcompile/compiler/ir"
)

// Match refuses a snapshot that is not of the cluster c with the trusted
// cluster CAs (the bundle's, both during a rotation): none of its members
// is one of c's (a name with its peer URL), or the client CA its API
// server published is none of them, or it holds no API server's data at
// all. Its objects would come back into a cluster whose certificates
// they do not know: service-account tokens signed by another key,
// Secrets encrypted with another, Nodes of other machines.
//
// A snapshot whose members are a part of c's is of the same cluster at
// another time (before a member was added or after one was removed):
// the restore brings back c's members.
func Match(s *Snapshot, c *ir.Cluster, trusted []*x509.Certificate) error {
	same := false
	var theirs, ours []string
	for _, m := range s.Members {
		theirs = append(theirs, member(m.Name, m.PeerURLs))
		for _, cm := range c.Etcd.Members {
			if (m.Name == cm.Name || m.Name == "") && slices.Contains(m.PeerURLs, cm.PeerURL()) {
				same = true
			}
		}
	}
	for _, cm := range c.Etcd.Members {
		ours = append(ours, member(cm.Name, []string{cm.PeerURL()}))
	}
	if !same {
		return fmt.Errorf("%s is a snapshot of another cluster: its etcd members are %s, cluster %s's are %s; restore it with the spec of the cluster it was taken from", s.Path, strings.Join(theirs, ", "), c.Name, strings.Join(ours, ", "))
	}
	if s.ClientCAs == nil {
		return fmt.Errorf("%s holds no Kubernetes API server's data (no kube-system/extension-apiserver-authentication): it is a snapshot of an etcd no cluster of this spec ran against", s.Path)
	}
	for _, have := range s.ClientCAs {
		for _, want := range trusted {
			if have.Equal(want) {
				return nil
			}
		}
	}
	var names []string
	for _, ca := range s.ClientCAs {
		names = append(names, fmt.Sprintf("%q (serial %s)", ca.Subject.CommonName, ca.SerialNumber))
	}
	return fmt.Errorf("%s is a snapshot of another cluster: its API server trusted the client CA %s, which is not the cluster CA of the secrets bundle; its Secrets and service-account tokens are of other keys: restore it with the bundle of the cluster it was taken from", s.Path, strings.Join(names, ", "))
}

func member(name string, urls []string) string {
	if name == "" {
		name = "(unstarted)"
	}
	return name + "=" + strings.Join(urls, ",")
}
