package compiler

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/kcompile/kcompile/compiler/diag"
)

const (
	CodeRSAWeak        = "KC1001"
	CodeRSASize        = "KC1002"
	CodeLeafOutlivesCA = "KC1003"
	CodeZeroValidity   = "KC1004"
	CodeClockSkew      = "KC1005"
)

func pkiFamily() family {
	return family{name: "PKI", check: checkPKI, rules: []diag.Rule{
		rule(CodeRSAWeak, diag.Error, "RSA keys shorter than 2048 bits"),
		rule(CodeRSASize, diag.Error, "an RSA key size other than 2048, 3072 or 4096 bits"),
		rule(CodeLeafOutlivesCA, diag.Error, "leaf certificates are valid longer than their CA"),
		rule(CodeZeroValidity, diag.Error, "a certificate validity is zero or longer than 200 years"),
		rule(CodeClockSkew, diag.Error, "pki.clockSkew is longer than 24 hours"),
	}}
}

func checkPKI(m *model) {
	p := m.spec.PKI
	if bits, ok := strings.CutPrefix(p.KeyAlgorithm, "RSA-"); ok {
		n, err := strconv.Atoi(bits)
		switch {
		case err != nil:
			m.report(CodeRSASize, "pki.keyAlgorithm", fmt.Sprintf("RSA key size %s is not supported", bits),
				`use "RSA-2048", "RSA-3072" or "RSA-4096"`)
		case n < 2048:
			m.report(CodeRSAWeak, "pki.keyAlgorithm", fmt.Sprintf("RSA keys of %d bits can be factored; Kubernetes and NIST require at least 2048", n),
				`use "ECDSA-P256" (the default), "RSA-2048", "RSA-3072" or "RSA-4096"`)
		case n != 2048 && n != 3072 && n != 4096:
			m.report(CodeRSASize, "pki.keyAlgorithm", fmt.Sprintf("RSA key size %d is not supported", n),
				`use "RSA-2048", "RSA-3072" or "RSA-4096"`)
		}
	}
	ca, leaf := parseValidity(p.CAValidity), parseValidity(p.LeafValidity)
	for _, v := range []struct {
		path string
		d    time.Duration
	}{{"pki.caValidity", ca}, {"pki.leafValidity", leaf}} {
		if v.d <= 0 {
			m.report(CodeZeroValidity, v.path, "a certificate validity must be positive and at most 200 years", `write a duration such as "1y", "90d" or "8760h"`)
		}
	}
	if parseSkew(p.ClockSkew) < 0 {
		m.report(CodeClockSkew, "pki.clockSkew", fmt.Sprintf("clock skew %s is longer than 24 hours: leaves would be valid long before they were issued", p.ClockSkew),
			`write a short allowance such as "5m" (the default, as kubeadm) or "300s", and fix the clocks of the nodes with NTP`)
	}
	if ca > 0 && leaf > ca {
		at, more := m.conflict("pki.leafValidity", "pki.caValidity")
		m.report(CodeLeafOutlivesCA, at, fmt.Sprintf("leaf validity %s is longer than CA validity %s: leaves would outlive the CA that signs them", p.LeafValidity, p.CAValidity),
			"shorten leafValidity or lengthen caValidity", more...)
	}
}
