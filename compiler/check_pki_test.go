package compiler

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// clockSkewCases are the pass/fail pairs of KC1005, in the form of
// checkCases. (TestEveryRuleIsTested looks for a KC1005 case in
// checkCases; this test runs these in the meantime.)
func clockSkewCases() []checkCase {
	return []checkCase{
		{code: CodeClockSkew,
			pass: haNet + `pki: clockSkew: "24h"`,
			fail: haNet + `pki: clockSkew: "25h"`,
			path: "pki.clockSkew", pos: "14:17"},
		{code: CodeClockSkew,
			pass: haNet + `pki: clockSkew: "86400s"`,
			fail: haNet + `pki: clockSkew: "86401s"`,
			path: "pki.clockSkew", pos: "14:17"},
		{code: CodeClockSkew, // would overflow a time.Duration
			pass: haNet + `pki: clockSkew: "0s"`,
			fail: haNet + `pki: clockSkew: "99999999999999999999m"`,
			path: "pki.clockSkew", pos: "14:17"},
	}
}

func TestClockSkewBound(t *testing.T) {
	for _, c := range clockSkewCases() {
		t.Run(c.fail[len(haNet):], func(t *testing.T) {
			for _, d := range compileFiles(t, map[string]string{"spec.cue": header + c.pass}) {
				if d.Code == c.code {
					t.Errorf("passing spec raised %s", line(d))
				}
			}
			fail := compileFiles(t, map[string]string{"spec.cue": header + c.fail})
			found := false
			for _, d := range fail {
				if d.Code == c.code && d.Path == c.path && d.Primary().String() == "spec.cue:"+c.pos && d.Hint != "" {
					found = true
				}
			}
			if !found {
				t.Errorf("failing spec did not raise %s at %s spec.cue:%s; got:\n%s", c.code, c.path, c.pos, lines(fail))
			}
		})
	}
	// The schema takes only whole seconds, minutes or hours.
	for _, bad := range []string{`"5"`, `"-5m"`, `"1d"`, `"1.5h"`, `"5 m"`} {
		diags := compileFiles(t, map[string]string{"spec.cue": header + haNet + `pki: clockSkew: ` + bad})
		if !diags.HasErrors() {
			t.Errorf("clockSkew %s accepted", bad)
		}
	}
}

// TestLowerClockSkew: pki.clockSkew reaches the IR, 5m by default.
func TestLowerClockSkew(t *testing.T) {
	if got := compileExample(t, "single-node").PKI.ClockSkew; got != 5*time.Minute {
		t.Errorf("default clock skew %s, want 5m", got)
	}
	for spec, want := range map[string]time.Duration{`"300s"`: 5 * time.Minute, `"1h"`: time.Hour, `"0s"`: 0, `"24h"`: 24 * time.Hour} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "spec.cue"), []byte(header+haNet+`pki: clockSkew: `+spec), 0o644); err != nil {
			t.Fatal(err)
		}
		c, diags := Compile(Source{Dir: dir})
		if c == nil {
			t.Fatalf("clockSkew %s: %s", spec, lines(diags))
		}
		if c.PKI.ClockSkew != want {
			t.Errorf("clockSkew %s lowered to %s, want %s", spec, c.PKI.ClockSkew, want)
		}
	}
}
