package pki

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
)

// TestIssuedAndMaterialRedacted: printing issued material with any verb
// shows no private key.
func TestIssuedAndMaterialRedacted(t *testing.T) {
	m := issueExample(t, "single-node")
	l := m.Leaves[0]
	for _, verb := range []string{"%v", "%+v", "%#v", "%s"} {
		for _, v := range []any{l, &l, m, *m, []Issued{l}} {
			out := fmt.Sprintf(verb, v)
			if strings.Contains(out, "PRIVATE KEY") || bytes.Contains([]byte(out), l.KeyPEM[40:80]) {
				t.Errorf("%s of %T prints key material: %.200s", verb, v, out)
			}
		}
	}
}

func TestParseRejectsBadToken(t *testing.T) {
	b := newTestBundle(t)
	c := *b
	c.BootstrapToken = "ABCDEF.0123456789abcdef"
	data, err := c.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Parse(data); err == nil || !strings.Contains(err.Error(), "bootstrapToken") {
		t.Errorf("a malformed bootstrap token is accepted: %v", err)
	}
	if !bootstrapToken.MatchString(b.BootstrapToken) {
		t.Errorf("New makes a malformed token %q", b.BootstrapToken)
	}
}
