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
	return family{name: "PKI", check: checkPKI, rules: []Rule{
		rule(CodeRSAWeak, diag.Error, "RSA keys shorter than 2048 bits"),
		rule(CodeRSASize, diag.Error, "an RSA key size other than 2048, 3072 or 4096 bits"),
		rule(CodeLeafOutlivesCA, diag.Error, "leaf certificates are valid longer than their CA"),
		rule(CodeZeroValidity, diag.Error, "a certificate validity is zero or longer than 200 years"),
		rule(CodeClockSkew, diag.Error, "pki.clockSkew is longer than 24 hours"),
	}}
}

// maxValidity bounds certificate validities: a time.Duration holds only
// about 292 years, and longer values would wrap around.
const maxValidity = 200 * 365 * 24 * time.Hour

// parseValidity reads the schema's duration form: a whole number of hours,
// days or 365-day years. It returns 0 for a value above maxValidity.
func parseValidity(s string) time.Duration {
	if len(s) < 2 {
		return 0
	}
	n, err := strconv.ParseInt(s[:len(s)-1], 10, 64)
	unit := map[byte]time.Duration{'h': time.Hour, 'd': 24 * time.Hour, 'y': 365 * 24 * time.Hour}[s[len(s)-1]]
	// The count is bounded, not the product, which could overflow.
	if err != nil || unit == 0 || n > int64(maxValidity/unit) {
		return 0
	}
	return time.Duration(n) * unit
}

// maxClockSkew bounds the backdating of leaves: clocks a day apart are a
// broken time service to fix, not a skew to paper over, and a long
// backdating makes a renewed certificate valid before the decision to
// issue it.
const maxClockSkew = 24 * time.Hour

// parseSkew reads the schema's skew form: a whole number of seconds,
// minutes or hours. It returns -1 for a value above maxClockSkew, so that
// zero (no backdating) stays a valid choice.
func parseSkew(s string) time.Duration {
	if len(s) < 2 {
		return -1
	}
	n, err := strconv.ParseInt(s[:len(s)-1], 10, 64)
	unit := map[byte]time.Duration{'s': time.Second, 'm': time.Minute, 'h': time.Hour}[s[len(s)-1]]
	// The count is bounded, not the product, which could overflow.
	if err != nil || unit == 0 || n < 0 || n > int64(maxClockSkew/unit) {
		return -1
	}
	return time.Duration(n) * unit
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
