package pki

import (
	"crypto/x509"
	"fmt"
	"sort"
	"strings"
	"time"
)

// Info describes a certificate for listings and reviews.
type Info struct {
	ID        string    `json:"id"`
	Node      string    `json:"node,omitempty"`
	Subject   string    `json:"subject"`
	Issuer    string    `json:"issuer"`
	SANs      []string  `json:"sans,omitempty"`
	Usages    []string  `json:"usages"`
	Algorithm string    `json:"algorithm"`
	NotBefore time.Time `json:"notBefore"`
	NotAfter  time.Time `json:"notAfter"`
	IsCA      bool      `json:"isCA,omitempty"`
	// RenewedBy is the command that replaces the certificate before it
	// expires.
	RenewedBy string `json:"renewedBy,omitempty"`
}

// Describe summarises a certificate.
func Describe(id, node string, c *x509.Certificate) Info {
	i := Info{ID: id, Node: node, Subject: c.Subject.String(), Issuer: c.Issuer.String(),
		Algorithm: keyAlgorithm(c.PublicKey), NotBefore: c.NotBefore.UTC(), NotAfter: c.NotAfter.UTC(), IsCA: c.IsCA}
	i.SANs = append(i.SANs, c.DNSNames...)
	for _, ip := range c.IPAddresses {
		i.SANs = append(i.SANs, ip.String())
	}
	for _, u := range []struct {
		bit  x509.KeyUsage
		name string
	}{{x509.KeyUsageDigitalSignature, "digital signature"}, {x509.KeyUsageKeyEncipherment, "key encipherment"},
		{x509.KeyUsageCertSign, "cert sign"}, {x509.KeyUsageCRLSign, "CRL sign"}} {
		if c.KeyUsage&u.bit != 0 {
			i.Usages = append(i.Usages, u.name)
		}
	}
	for _, u := range c.ExtKeyUsage {
		switch u {
		case x509.ExtKeyUsageServerAuth:
			i.Usages = append(i.Usages, "server auth")
		case x509.ExtKeyUsageClientAuth:
			i.Usages = append(i.Usages, "client auth")
		default:
			i.Usages = append(i.Usages, fmt.Sprintf("ext usage %d", u))
		}
	}
	return i
}

// Inventory describes the CAs (during a rotation the old ones too, as
// "ca (previous)") and every leaf, in catalogue order, each with what
// renews it.
func (m *Material) Inventory() []Info {
	var out []Info
	for _, a := range Authorities() {
		i := Describe(string(a), "", m.Bundle.CAs[a].Cert)
		i.RenewedBy = "kcompile secrets rotate --ca " + string(a)
		out = append(out, i)
		if r := m.Bundle.Rotation; r != nil {
			if old, ok := r.Previous[a]; ok {
				i := Describe(string(a)+" (previous)", "", old.Cert)
				i.RenewedBy = "kcompile secrets rotate --next (the rotation under way replaces it)"
				out = append(out, i)
			}
		}
	}
	for _, l := range m.Leaves {
		i := Describe(l.ID, l.Node, l.X509)
		i.RenewedBy = "kcompile pki renew"
		out = append(out, i)
	}
	return out
}

// Expiry is the inventory sorted by notAfter, soonest first, then ID.
func (m *Material) Expiry() []Info {
	out := m.Inventory()
	sort.SliceStable(out, func(i, j int) bool {
		if !out[i].NotAfter.Equal(out[j].NotAfter) {
			return out[i].NotAfter.Before(out[j].NotAfter)
		}
		return out[i].ID < out[j].ID
	})
	return out
}

// FirstBreak is the first moment a certificate the cluster needs expires,
// and which ones expire then.
func (m *Material) FirstBreak() (time.Time, []string) {
	cal := m.Expiry()
	first := cal[0].NotAfter
	var ids []string
	for _, i := range cal {
		if i.NotAfter.Equal(first) {
			ids = append(ids, i.ID)
		}
	}
	return first, ids
}

// String renders Info on one line for logs and tests.
func (i Info) String() string {
	return fmt.Sprintf("%s subject=%q issuer=%q sans=[%s] usages=[%s] %s notAfter=%s",
		i.ID, i.Subject, i.Issuer, strings.Join(i.SANs, ","), strings.Join(i.Usages, ","), i.Algorithm, i.NotAfter.Format(time.RFC3339))
}
