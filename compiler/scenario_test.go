package compiler

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/kcompile/kcompile/compiler/diag"
	"github.com/kcompile/kcompile/compiler/ir"
)

// exampleCluster compiles an example, for scenarios to be checked against.
func exampleCluster(t testing.TB, example string) *ir.Cluster {
	t.Helper()
	c, diags := Compile(Source{Dir: "../examples/" + example})
	if c == nil {
		t.Fatalf("%s: %s", example, lines(diags))
	}
	return c
}

// loadScenarioText writes body to scenario.cue in a fresh directory and
// loads it; positions come back relative to that directory.
func loadScenarioText(t testing.TB, body string, c *ir.Cluster) (*ir.Scenario, diag.List) {
	t.Helper()
	dir := t.TempDir()
	file := filepath.Join(dir, "scenario.cue")
	if err := os.WriteFile(file, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	sc, diags := LoadScenario(file, c)
	return sc, diags.Relative(dir)
}

// scenarioCase is one scenario rule exercised twice, like checkCase: pass
// is a scenario that must not raise code, fail one that must raise it at
// path, with its primary position at pos ("line:column" in scenario.cue).
// Both run against the example named (ha-stacked when empty).
type scenarioCase struct {
	code       string
	example    string
	pass, fail string
	path, pos  string
}

func scenarioCases() []scenarioCase {
	return []scenarioCase{
		{code: CodeScenarioLoad,
			pass: `name: "x", steps: [{stop: node: "cp1"}]`,
			fail: `name: "x", steps: [{stop: node: "cp1"}`,
			pos:  "1:39"},
		{code: CodeScenarioLoad, // a package clause is allowed, not in the middle
			pass: "package s\nname: \"x\"\nsteps: []\n",
			fail: "name: \"x\"\npackage s\nsteps: []\n",
			pos:  "2:9"},
		{code: CodeScenarioLoad,
			pass: "name: \"x\"\nsteps: []\n",
			fail: "name: \"x\nsteps: []\n",
			pos:  "1:7"},
		// The schema's own codes, as for a spec: an unknown field at its
		// label (this was runtimes/sim's TestParseScenarioErrors), a value
		// not allowed, a duration the schema does not accept, a missing
		// value.
		{code: CodeSchema,
			pass: "name: \"x\"\nsteps: [{stop: {node: \"cp1\"}}]\n",
			fail: "name: \"x\"\nsteps: [{stop: {disk: \"cp1\"}}]\n",
			path: "steps[0].stop.disk", pos: "2:17"},
		{code: CodeSchema,
			pass: "name: \"x\"\nsteps: [{expect: api: \"served\"}]\n",
			fail: "name: \"x\"\nsteps: [{expect: api: \"servd\"}]\n",
			path: "steps[0].expect.api", pos: "2:23"},
		{code: CodeSchema,
			pass: "name: \"x\"\nsteps: [{wait: {nodesReady: 3, timeout: \"90s\"}}]\n",
			fail: "name: \"x\"\nsteps: [{wait: {nodesReady: 3, timeout: \"90x\"}}]\n",
			path: "steps[0].wait.timeout", pos: "2:41"},
		{code: CodeSchema, // within belongs to expectations; a wait has a timeout
			pass: "name: \"x\"\nsteps: [{expect: {api: \"served\", within: \"10s\"}}]\n",
			fail: "name: \"x\"\nsteps: [{wait: {nodesReady: 1, within: \"10s\"}}]\n",
			path: "steps[0].wait.within", pos: "2:32"},
		{code: CodeMissing,
			pass: "name: \"x\"\nsteps: [{expect: {node: \"w01\", ready: false}}]\n",
			fail: "name: \"x\"\nsteps: [{expect: {node: \"w01\"}}]\n",
			path: "steps[0].expect.ready", pos: "2:18"},

		{code: CodeScenarioShape,
			pass: "name: \"x\"\nsteps: [\n\t{stop: node: \"cp1\"},\n\t{start: node: \"cp1\"},\n]\n",
			fail: "name: \"x\"\nsteps: [\n\t{stop: node: \"cp1\", start: node: \"cp1\"},\n]\n",
			path: "steps[0]", pos: "3:2"},
		{code: CodeScenarioShape,
			pass: "name: \"x\"\nsteps: [{stop: node: \"cp1\"}]\n",
			fail: "name: \"x\"\nsteps: [{}]\n",
			path: "steps[0]", pos: "2:9"},
		{code: CodeScenarioShape,
			pass: "name: \"x\"\nsteps: [{stop: {etcd: \"cp1\"}}]\n",
			fail: "name: \"x\"\nsteps: [{stop: {etcd: \"cp1\", node: \"cp1\"}}]\n",
			path: "steps[0].stop", pos: "2:16"},
		{code: CodeScenarioShape,
			pass: "name: \"x\"\nsteps: [{wait: nodesReady: 9}]\n",
			fail: "name: \"x\"\nsteps: [{wait: {nodesReady: 9, pods: {selector: \"app=a\", running: 1}}}]\n",
			path: "steps[0].wait", pos: "2:16"},
		{code: CodeScenarioShape,
			pass: "name: \"x\"\nsteps: [{expect: write: \"succeeds\"}]\n",
			fail: "name: \"x\"\nsteps: [{expect: {write: \"succeeds\", api: \"served\"}}]\n",
			path: "steps[0].expect", pos: "2:18"},

		{code: CodeScenarioNode,
			pass: "name: \"x\"\nsteps: [{stop: node: \"w06\"}]\n",
			fail: "name: \"x\"\nsteps: [{stop: node: \"w07\"}]\n",
			path: "steps[0].stop.node", pos: "2:22"},
		{code: CodeScenarioNode,
			pass: "name: \"x\"\nsteps: [{expect: {node: \"cp1\", ready: true}}]\n",
			fail: "name: \"x\"\nsteps: [{expect: {node: \"cp4\", ready: true}}]\n",
			path: "steps[0].expect.node", pos: "2:25"},
		{code: CodeScenarioNode, example: "external-etcd", // an external etcd node has no kubelet
			pass: "name: \"x\"\nsteps: [{stop: node: \"etcd1\"}, {expect: {node: \"compute-1\", ready: false}}]\n",
			fail: "name: \"x\"\nsteps: [{stop: node: \"etcd1\"}, {expect: {node: \"etcd1\", ready: false}}]\n",
			path: "steps[1].expect.node", pos: "2:48"},
		{code: CodeScenarioEtcd,
			pass: "name: \"x\"\nsteps: [{start: etcd: \"cp3\"}]\n",
			fail: "name: \"x\"\nsteps: [{start: etcd: \"w01\"}]\n",
			path: "steps[0].start.etcd", pos: "2:23"},
		{code: CodeScenarioEtcd, example: "external-etcd",
			pass: "name: \"x\"\nsteps: [{stop: etcd: \"etcd5\"}]\n",
			fail: "name: \"x\"\nsteps: [{stop: etcd: \"cp1\"}]\n",
			path: "steps[0].stop.etcd", pos: "2:22"},
		{code: CodeScenarioControlPlane,
			pass: "name: \"x\"\nsteps: [{stop: controlPlane: \"cp2\"}]\n",
			fail: "name: \"x\"\nsteps: [{stop: controlPlane: \"w02\"}]\n",
			path: "steps[0].stop.controlPlane", pos: "2:30"},
		{code: CodeScenarioControlPlane,
			pass: "name: \"x\"\nsteps: [{stop: controlPlane: \"cp3\"}]\n",
			fail: "name: \"x\"\nsteps: [{stop: controlPlane: \"cp4\"}]\n",
			path: "steps[0].stop.controlPlane", pos: "2:30"},
		{code: CodeScenarioNodesReady, // 3 control-plane nodes and 6 workers run a kubelet
			pass: "name: \"x\"\nsteps: [{wait: nodesReady: 9}]\n",
			fail: "name: \"x\"\nsteps: [{wait: nodesReady: 10}]\n",
			path: "steps[0].wait.nodesReady", pos: "2:28"},
		{code: CodeScenarioNodesReady, example: "external-etcd", // 3 + 4, not the 5 etcd nodes
			pass: "name: \"x\"\nsteps: [{wait: nodesReady: 7}]\n",
			fail: "name: \"x\"\nsteps: [{wait: nodesReady: 12}]\n",
			path: "steps[0].wait.nodesReady", pos: "2:28"},
		{code: CodeScenarioDuration,
			pass: "name: \"x\"\nsteps: [{wait: {nodesReady: 1, timeout: \"1ms\"}}]\n",
			fail: "name: \"x\"\nsteps: [{wait: {nodesReady: 1, timeout: \"0s\"}}]\n",
			path: "steps[0].wait.timeout", pos: "2:41"},
		{code: CodeScenarioDuration,
			pass: "name: \"x\"\nsteps: [{expect: {pods: {selector: \"app=a\", running: 2}, within: \"100000m\"}}]\n",
			fail: "name: \"x\"\nsteps: [{expect: {pods: {selector: \"app=a\", running: 2}, within: \"99999999999999999999m\"}}]\n",
			path: "steps[0].expect.within", pos: "2:66"},
		{code: CodeScenarioNotOn,
			pass: "name: \"x\"\nsteps: [{expect: pods: {selector: \"app=a\", running: 2, notOn: [\"w01\", \"cp1\"]}}]\n",
			fail: "name: \"x\"\nsteps: [{expect: pods: {selector: \"app=a\", running: 2, notOn: [\"w01\", \"w1\"]}}]\n",
			path: "steps[0].expect.pods.notOn[1]", pos: "2:71"},
		{code: CodeScenarioNotOn,
			pass: "name: \"x\"\nsteps: [{wait: pods: {selector: \"app=a\", running: 2, notOn: [\"w02\"]}}]\n",
			fail: "name: \"x\"\nsteps: [{wait: pods: {selector: \"app=a\", running: 2, notOn: [\"w20\"]}}]\n",
			path: "steps[0].wait.pods.notOn[0]", pos: "2:62"},
		// Manifests: a YAML error at its line in the file, a document
		// that is no object, an object without kind, nothing at all.
		{code: CodeScenarioManifest,
			pass: "name: \"x\"\nsteps: [{apply: \"\"\"\n\tapiVersion: v1\n\tkind: ConfigMap\n\tmetadata: {name: a}\n\t\"\"\"}]\n",
			fail: "name: \"x\"\nsteps: [{apply: \"\"\"\n\tapiVersion: v1\n\tkind: ConfigMap\n\tmetadata: {name: a\n\t\"\"\"}]\n",
			path: "steps[0].apply", pos: "5:2"},
		{code: CodeScenarioManifest,
			pass: "name: \"x\"\nsteps: [{apply: \"\"\"\n\t\tkind: Namespace\n\t\tapiVersion: v1\n\t\t---\n\t\tkind: Namespace\n\t\tapiVersion: v1\n\t\t\"\"\"}]\n",
			fail: "name: \"x\"\nsteps: [{apply: \"\"\"\n\t\tkind: Namespace\n\t\tapiVersion: v1\n\t\t---\n\t\t- kind: Namespace\n\t\t\"\"\"}]\n",
			path: "steps[0].apply", pos: "6:3"},
		{code: CodeScenarioManifest,
			pass: "name: \"x\"\nsteps: [{apply: \"kind: Namespace\\napiVersion: v1\\n\"}]\n",
			fail: "name: \"x\"\nsteps: [{apply: \"kind: Namespace\\n\"}]\n",
			path: "steps[0].apply", pos: "2:17"},
		{code: CodeScenarioManifest,
			pass: "name: \"x\"\nsteps: [{apply: \"kind: Namespace\\napiVersion: v1\\n---\\n\"}]\n",
			fail: "name: \"x\"\nsteps: [{apply: \"---\\n# nothing\\n\"}]\n",
			path: "steps[0].apply", pos: "2:17"},
	}
}

func TestScenarioChecks(t *testing.T) {
	clusters := map[string]*ir.Cluster{}
	for i, c := range scenarioCases() {
		example := c.example
		if example == "" {
			example = "ha-stacked"
		}
		if clusters[example] == nil {
			clusters[example] = exampleCluster(t, example)
		}
		cl := clusters[example]
		t.Run(fmt.Sprintf("%s_%d", c.code, i), func(t *testing.T) {
			sc, pass := loadScenarioText(t, c.pass, cl)
			if sc == nil || len(pass) > 0 {
				t.Errorf("passing scenario raised:\n%s", lines(pass))
			}
			sc, fail := loadScenarioText(t, c.fail, cl)
			found := false
			for _, d := range fail {
				if d.Code == c.code && d.Path == c.path && d.Primary().String() == "scenario.cue:"+c.pos {
					found = true
				}
				if d.Hint == "" || d.Message == "" {
					t.Errorf("%s has no message or no hint", line(d))
				}
			}
			if !found {
				t.Errorf("failing scenario did not raise %s at %s scenario.cue:%s; got:\n%s", c.code, c.path, c.pos, lines(fail))
			}
			if sc != nil {
				t.Error("a scenario with errors came back")
			}
		})
	}
}

// TestEveryScenarioRuleIsTested keeps scenarioCases complete.
func TestEveryScenarioRuleIsTested(t *testing.T) {
	tested := map[string]bool{}
	for _, c := range scenarioCases() {
		tested[c.code] = true
	}
	n := 0
	for _, r := range Rules() {
		if r.Family != "scenario" {
			continue
		}
		n++
		if !tested[r.Code] {
			t.Errorf("rule %s (%s) has no case in scenarioCases", r.Code, r.Summary)
		}
	}
	if n == 0 {
		t.Error("Rules has no scenario family")
	}
}

// TestScenarioLowers: the schema's defaults and every alternative reach
// the IR typed, with each step's position.
func TestScenarioLowers(t *testing.T) {
	const body = `// every kind of step
name: "all"
steps: [
	{apply: """
		apiVersion: v1
		kind: Namespace
		metadata: {name: a}
		"""},
	{wait: pods: {selector: "app=a", running: 2}},
	{wait: {nodesReady: 9, timeout: "500ms"}},
	{stop: node: "w01"},
	{start: etcd: "cp2"},
	{stop: controlPlane: "cp3"},
	{expect: api: "unavailable"},
	{expect: write: "fails"},
	{expect: {node: "w01", ready: false}},
	{expect: pods: {namespace: "kube-system", selector: "k8s-app=kube-dns", running: 2, notOn: ["cp1"]}},
]
`
	sc, diags := loadScenarioText(t, body, exampleCluster(t, "ha-stacked"))
	if sc == nil || len(diags) > 0 {
		t.Fatalf("diagnostics:\n%s", lines(diags))
	}
	at := func(line, col int) ir.Pos { return ir.Pos{File: sc.File, Line: line, Column: col} }
	want := &ir.Scenario{Name: "all", File: sc.File, Steps: []ir.Step{
		{Pos: at(4, 2), Apply: &ir.Apply{Manifests: "apiVersion: v1\nkind: Namespace\nmetadata: {name: a}"}},
		{Pos: at(9, 2), Wait: &ir.Wait{Pods: &ir.Pods{Namespace: "default", Selector: "app=a", Running: 2, NotOn: []string{}}, Timeout: 2 * time.Minute}},
		{Pos: at(10, 2), Wait: &ir.Wait{NodesReady: 9, Timeout: 500 * time.Millisecond}},
		{Pos: at(11, 2), Stop: &ir.Subject{Kind: ir.SubjectNode, Name: "w01"}},
		{Pos: at(12, 2), Start: &ir.Subject{Kind: ir.SubjectEtcd, Name: "cp2"}},
		{Pos: at(13, 2), Stop: &ir.Subject{Kind: ir.SubjectControlPlane, Name: "cp3"}},
		{Pos: at(14, 2), Expect: &ir.Expect{API: ir.APIUnavailable, Within: 10 * time.Second}},
		{Pos: at(15, 2), Expect: &ir.Expect{Write: ir.WriteFails, Within: 30 * time.Second}},
		{Pos: at(16, 2), Expect: &ir.Expect{Node: "w01", Within: 90 * time.Second}},
		{Pos: at(17, 2), Expect: &ir.Expect{Pods: &ir.Pods{Namespace: "kube-system", Selector: "k8s-app=kube-dns", Running: 2, NotOn: []string{"cp1"}},
			Within: 3 * time.Minute}},
	}}
	if !strings.HasSuffix(sc.File, "scenario.cue") {
		t.Errorf("file %q", sc.File)
	}
	if len(sc.Steps) != len(want.Steps) {
		t.Fatalf("%d steps, want %d", len(sc.Steps), len(want.Steps))
	}
	for i := range want.Steps {
		if !reflect.DeepEqual(sc.Steps[i], want.Steps[i]) {
			t.Errorf("step %d:\n got %s\nwant %s", i+1, stepString(sc.Steps[i]), stepString(want.Steps[i]))
		}
	}
}

func stepString(s ir.Step) string {
	b := s.Pos.String()
	for _, x := range []any{s.Apply, s.Wait, s.Stop, s.Start, s.Expect} {
		if !reflect.ValueOf(x).IsNil() {
			b += fmt.Sprintf(" %+v", x)
		}
	}
	if s.Wait != nil && s.Wait.Pods != nil {
		b += fmt.Sprintf(" %+v", *s.Wait.Pods)
	}
	if s.Expect != nil && s.Expect.Pods != nil {
		b += fmt.Sprintf(" %+v", *s.Expect.Pods)
	}
	return b
}

// TestScenarioAllAtOnce: every problem of a scenario is reported in one
// run, sorted by position, and the schema is checked without a cluster.
func TestScenarioAllAtOnce(t *testing.T) {
	const body = `name: "x"
steps: [
	{stop: node: "w9"},
	{expect: pods: {selector: "a=b", running: 1, notOn: ["w10"]}},
	{wait: {nodesReady: 50, timeout: "0ms"}},
	{start: etcd: "w01"},
]
`
	_, diags := loadScenarioText(t, body, exampleCluster(t, "ha-stacked"))
	want := "KC1703 error steps[0].stop.node scenario.cue:3:15\n" +
		"KC1708 error steps[1].expect.pods.notOn[0] scenario.cue:4:55\n" +
		"KC1706 error steps[2].wait.nodesReady scenario.cue:5:22\n" +
		"KC1707 error steps[2].wait.timeout scenario.cue:5:35\n" +
		"KC1704 error steps[3].start.etcd scenario.cue:6:16\n"
	if got := lines(diags); got != want {
		t.Errorf("got:\n%swant:\n%s", got, want)
	}
	_, diags = loadScenarioText(t, body, nil)
	if got, want := lines(diags), "KC1707 error steps[2].wait.timeout scenario.cue:5:35\n"; got != want {
		t.Errorf("without a cluster, only what needs none is checked; got:\n%swant:\n%s", got, want)
	}
}

// TestScenarioUnreadable: a file that is not there is a diagnostic at its
// name, not a crash or a bare error.
func TestScenarioUnreadable(t *testing.T) {
	file := filepath.Join(t.TempDir(), "missing.cue")
	sc, diags := LoadScenario(file, nil)
	if sc != nil || len(diags) != 1 || diags[0].Code != CodeScenarioLoad || diags[0].Primary().File != file {
		t.Errorf("got %v:\n%s", sc, lines(diags))
	}
}
