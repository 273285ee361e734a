package compiler

import (
	"fmt"
	"strings"
	"testing"
)

// header starts every spec of the check table.
const header = `package cluster

apiVersion: "kcompile.dev/v1alpha1"
kubernetes: version: "1.37.2"
`

// checkCase is one semantic rule exercised twice: pass is a spec body
// that must not raise code, fail one that must raise it at path, with
// its primary position at pos ("line:column" in spec.cue, counting the
// header's 4 lines). Bodies set the cluster name themselves.
type checkCase struct {
	code       string
	pass, fail string
	path, pos  string
}

// ha is a clean three-node control plane that many cases extend.
const ha = `
name: "t"
controlPlane: endpoint: address: "10.0.0.10"
controlPlane: nodes: {
	cp1: {address: "10.0.0.11", zone: "a"}
	cp2: {address: "10.0.0.12", zone: "b"}
	cp3: {address: "10.0.0.13", zone: "c"}
}
`

func checkCases() []checkCase {
	return []checkCase{
		{code: CodeClusterName,
			pass: ha + `network: nodes: ["10.0.0.0/16"]`,
			fail: strings.Replace(ha, `name: "t"`, `name: "UPPER"`, 1) + `network: nodes: ["10.0.0.0/16"]`,
			path: "name", pos: "6:7"},
		{code: CodeCIDROverlap,
			pass: ha + `network: {nodes: ["10.0.0.0/16"], podCIDR: "10.1.0.0/16"}`,
			fail: ha + `network: {nodes: ["10.0.0.0/16"], podCIDR: "10.0.128.0/17"}`,
			path: "network.podCIDR", pos: "13:44"},
	}
}

func TestChecks(t *testing.T) {
	for i, c := range checkCases() {
		t.Run(fmt.Sprintf("%s_%d", c.code, i), func(t *testing.T) {
			pass := compileFiles(t, map[string]string{"spec.cue": header + c.pass})
			for _, d := range pass {
				if d.Code == c.code {
					t.Errorf("passing spec raised %s", line(d))
				}
			}
			fail := compileFiles(t, map[string]string{"spec.cue": header + c.fail})
			found := false
			for _, d := range fail {
				if d.Code == c.code && d.Path == c.path && d.Primary().String() == "spec.cue:"+c.pos {
					found = true
				}
			}
			if !found {
				t.Errorf("failing spec did not raise %s at %s spec.cue:%s; got:\n%s", c.code, c.path, c.pos, lines(fail))
			}
		})
	}
}

// TestEveryRuleIsTested keeps the table complete: every semantic rule has
// a passing and a failing spec.
func TestEveryRuleIsTested(t *testing.T) {
	tested := map[string]bool{}
	for _, c := range checkCases() {
		tested[c.code] = true
	}
	for _, r := range Rules() {
		if r.Family == "load" || r.Family == "schema" || r.Family == "internal" {
			continue
		}
		if !tested[r.Code] {
			t.Errorf("rule %s (%s) has no case in checkCases", r.Code, r.Summary)
		}
	}
}
