package systemd

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/kcompile/kcompile/compiler/ir"
	"github.com/kcompile/kcompile/internal/unitfile"
	"github.com/kcompile/kcompile/layout"
	"github.com/kcompile/kcompile/targets"
)

// The CIS Kubernetes Benchmark, judged by kube-bench (built by
// scripts/tools into .bin/, with its cfg/ copied beside it). kube-bench
// reads component flags from running processes and file modes and owners
// from the paths a node uses. Each run happens in private mount and PID
// namespaces: the node's tree is mounted over /etc, /var/lib and
// /usr/local, and stand-in processes (this test binary, linked under
// each component's name) carry the exact command lines of the compiled
// units. The host is not touched.
//
// The expected result of every check is kept per node in
// testdata/cis/<example>/<node>.txt: "ID STATUS", and for a WARN the
// reason it is not a PASS. A check whose status differs fails the test,
// naming its ID; KCOMPILE_UPDATE=1 rewrites the lists, keeping the
// reasons.

// cisStandIn is the environment variable that turns this test binary
// into a stand-in for a component.
const cisStandIn = "KCOMPILE_CIS_STAND_IN"

func TestMain(m *testing.M) {
	if os.Getenv(cisStandIn) != "" {
		standIn()
		return
	}
	os.Exit(m.Run())
}

// standIn answers the version probe kube-bench makes of the kubelet and
// otherwise waits to be killed with its namespace.
func standIn() {
	if slices.Contains(os.Args[1:], "--version") {
		fmt.Println("Kubernetes v" + os.Getenv(cisStandIn))
		return
	}
	for {
		time.Sleep(time.Hour)
	}
}

// cisBenchmark is the kube-bench benchmark for the spec's Kubernetes
// version: kube-bench v0.15.6 maps 1.32 and every later version to
// cis-1.12, and would silently fall back to cis-1.6 if it had to guess.
const cisBenchmark = "cis-1.12"

// cisNode is one kube-bench run: a node and the benchmark targets its
// components make it.
type cisNode struct {
	node ir.Node
	// file names the node's golden list.
	file    string
	targets []string
	// args are more kube-bench arguments: checks of a target that do
	// not apply to the node are skipped (reported INFO).
	args []string
}

// etcdOnMaster are the master checks of the etcd member on a
// control-plane node: its unit and its data directory.
const etcdOnMaster = "1.1.7,1.1.8,1.1.11,1.1.12"

// cisNodes picks, for an example, the first node of each shape.
func cisNodes(c *ir.Cluster) []cisNode {
	var out []cisNode
	seen := map[string]bool{}
	for _, n := range c.Nodes {
		var tg []string
		if n.Runs(ir.ComponentAPIServer) {
			tg = append(tg, "master", "controlplane")
		}
		if n.Runs(ir.ComponentEtcd) {
			tg = append(tg, "etcd")
		}
		if n.RunsPods() {
			tg = append(tg, "node")
		}
		key := strings.Join(tg, ",")
		if len(tg) == 0 || seen[key] {
			continue
		}
		seen[key] = true
		cn := cisNode{node: n, file: n.Name, targets: tg}
		var skip []string
		if n.Runs(ir.ComponentAPIServer) && !n.Runs(ir.ComponentEtcd) {
			skip = append(skip, etcdOnMaster)
		}
		if n.RunsPods() && !n.Runs(ir.ComponentKubeProxy) {
			skip = append(skip, "4.3.1")
		}
		if len(skip) > 0 {
			cn.args = []string{"--skip", strings.Join(skip, ",")}
		}
		out = append(out, cn)
		// A member on a node of its own: the master checks of its unit
		// are run there. Those of its data directory (1.1.11, 1.1.12)
		// find the member through the master components kube-bench
		// requires, so they run on stacked members only; the data
		// directory comes from the same files on both.
		if n.Runs(ir.ComponentEtcd) && !n.Runs(ir.ComponentAPIServer) {
			out = append(out, cisNode{node: n, file: n.Name + "-master", targets: []string{"master"}, args: []string{"--check", "1.1.7,1.1.8"}})
		}
	}
	return out
}

func TestCISBenchmark(t *testing.T) {
	kb := cisTools(t)
	update := os.Getenv("KCOMPILE_UPDATE") != ""
	for _, name := range []string{"ha-stacked", "external-etcd"} {
		c := compileExample(t, name)
		tree := buildExample(t, name)
		for _, cn := range cisNodes(c) {
			file := cn.file
			t.Run(name+"/"+file, func(t *testing.T) {
				got := kb.run(t, c, tree, cn)
				golden := filepath.Join("testdata", "cis", name, file+".txt")
				want, err := readCISList(golden)
				if err != nil && !(update && os.IsNotExist(err)) {
					t.Fatal(err)
				}
				if update {
					for _, r := range got {
						if r.status != "PASS" {
							t.Logf("%s %s: %s", r.id, r.status, r.detail)
						}
					}
					writeCISList(t, golden, got, want)
					want, _ = readCISList(golden)
				}
				for _, e := range want {
					if e.status == "FAIL" {
						t.Errorf("%s: %s is expected to FAIL: every automatable check must pass", golden, e.id)
					}
					if e.status != "PASS" && e.reason == "" {
						t.Errorf("%s: %s is %s without a reason", golden, e.id, e.status)
					}
				}
				if d := compareCIS(want, got); d != "" {
					t.Errorf("kube-bench %s on %s/%s differs from %s (KCOMPILE_UPDATE=1 rewrites it):\n%s",
						cisBenchmark, name, cn.node.Name, golden, d)
				}
			})
		}
	}
}

// TestCISBenchmarkCatchesRegressions breaks the compiled tree the way a
// careless change would and expects the harness to name the check.
func TestCISBenchmarkCatchesRegressions(t *testing.T) {
	kb := cisTools(t)
	c := compileExample(t, "ha-stacked")
	tree := buildExample(t, "ha-stacked")
	cn := cisNodes(c)[0]
	want, err := readCISList(filepath.Join("testdata", "cis", "ha-stacked", cn.node.Name+".txt"))
	if err != nil {
		t.Fatal(err)
	}
	unit := layout.NodeTree(cn.node.Name, layout.UnitDir+"kube-apiserver.service")
	for _, tc := range []struct {
		name   string
		change func(path string, f targets.File) targets.File
		ids    []string
	}{
		{"a key readable by all", func(p string, f targets.File) targets.File {
			if p == layout.NodeTree(cn.node.Name, "etc/kubernetes/pki/apiserver.key") {
				f.Mode = 0o644
			}
			return f
		}, []string{"1.1.21"}},
		{"anonymous requests allowed", func(p string, f targets.File) targets.File {
			if p == unit {
				f.Data = []byte(strings.Replace(string(f.Data), "--anonymous-auth=false", "--anonymous-auth=true", 1))
			}
			return f
		}, []string{"1.2.1"}},
		{"no encryption at rest", func(p string, f targets.File) targets.File {
			if p == unit {
				var kept []string
				for _, l := range strings.Split(string(f.Data), "\n") {
					if !strings.Contains(l, "--encryption-provider-config=") {
						kept = append(kept, l)
					}
				}
				f.Data = []byte(strings.Join(kept, "\n"))
			}
			return f
		}, []string{"1.2.27", "1.2.28"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			changed := targets.NewTree()
			for _, f := range tree.Files() {
				g := tc.change(f.Path, f)
				if err := changed.Add(g.Path, g.Data, g.Mode); err != nil {
					t.Fatal(err)
				}
			}
			got := kb.run(t, c, changed, cisNode{node: cn.node, targets: []string{"master"}})
			var master []cisResult
			for _, w := range want {
				if strings.HasPrefix(w.id, "1.") {
					master = append(master, w)
				}
			}
			d := compareCIS(master, got)
			for _, id := range tc.ids {
				if !strings.Contains(d, "\n"+id+" ") && !strings.HasPrefix(d, id+" ") {
					t.Errorf("the harness did not name %s:\n%s", id, d)
				}
			}
		})
	}
}

// kubeBench is the built tool and its benchmark definitions.
type kubeBench struct{ bin, cfg string }

func cisTools(t *testing.T) kubeBench {
	t.Helper()
	bin, err := filepath.Abs("../../.bin")
	if err != nil {
		t.Fatal(err)
	}
	kb := kubeBench{filepath.Join(bin, "kube-bench"), filepath.Join(bin, "kube-bench-cfg")}
	for _, p := range []string{kb.bin, kb.cfg} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("%s is missing: run scripts/tools first", p)
		}
	}
	if os.Geteuid() != 0 {
		t.Fatal("the CIS harness needs root for its private mount namespace (CI runs as root)")
	}
	for _, tool := range []string{"unshare", "mount", "ps", "systemd-sysusers", "systemd-tmpfiles"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is missing: run scripts/tools first", tool)
		}
	}
	return kb
}

// run stages the node and runs kube-bench on it.
func (kb kubeBench) run(t *testing.T, c *ir.Cluster, tree *targets.Tree, cn cisNode) []cisResult {
	t.Helper()
	// kube-bench greps "ps -ef" for the components' names: no path of
	// the run may contain one (a test's temporary directory is named
	// after the test, "external-etcd" among them).
	stage, err := os.MkdirTemp("", "cis-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(stage) })
	root := filepath.Join(stage, "root")
	// The host's /etc (libraries, users, ps's configuration) with the
	// node's files over it.
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("cp", "-a", "/etc", root).CombinedOutput(); err != nil {
		t.Fatalf("copying /etc: %v\n%s", err, out)
	}
	layNode(t, tree, cn.node.Name, root)
	prefix := layout.NodeTree(cn.node.Name, "")
	for _, d := range []string{"var/lib", "usr/local/bin"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// The node's own users and directories, made by systemd's tools.
	if out, err := exec.Command("systemd-sysusers", "--root="+root).CombinedOutput(); err != nil {
		t.Fatalf("systemd-sysusers: %v\n%s", err, out)
	}
	if p := filepath.Join(root, layout.EtcdTmpfilesConf); fileExists(p) {
		if out, err := exec.Command("systemd-tmpfiles", "--root="+root, "--create", p).CombinedOutput(); err != nil {
			t.Fatalf("systemd-tmpfiles: %v\n%s", err, out)
		}
	}

	// Stand-ins for every component unit of the node.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var script strings.Builder
	fmt.Fprintf(&script, "set -e\nmount --bind %q /etc\nmount --bind %q /var/lib\nmount --bind %q /usr/local\n",
		filepath.Join(root, "etc"), filepath.Join(root, "var/lib"), filepath.Join(root, "usr/local"))
	var names []string
	for _, f := range tree.Files() {
		rel, ok := strings.CutPrefix(f.Path, prefix+layout.UnitDir)
		if !ok || strings.HasPrefix(rel, "kcompile-") {
			continue
		}
		unit, err := unitfile.Parse(f.Data)
		if err != nil {
			t.Fatalf("%s: %v", f.Path, err)
		}
		for _, cmd := range unit.Get("Service", "ExecStart") {
			argv := strings.Fields(cmd)
			if !strings.HasPrefix(argv[0], ir.OSDebian.BinDir()+"/") {
				continue
			}
			name := filepath.Base(argv[0])
			if name == "containerd" || name == "crio" {
				continue
			}
			if err := os.Link(self, filepath.Join(root, "usr/local/bin", name)); err != nil {
				t.Fatal(err)
			}
			names = append(names, name)
			fmt.Fprintf(&script, "%s=%s %s >/dev/null 2>&1 &\n", cisStandIn, c.Kubernetes.Version, shellQuote(argv))
		}
	}
	for _, n := range names {
		fmt.Fprintf(&script, "until ps -C %s >/dev/null; do sleep 0.05; done\n", n)
	}
	cfg := filepath.Join(stage, "cfg")
	copyCfg(t, kb.cfg, cfg)
	out := filepath.Join(stage, "kube-bench.json")
	// From /: kube-bench's etcd file checks glob in the working
	// directory.
	fmt.Fprintf(&script, "cd /\n%q run --targets %s --json --benchmark %s --config-dir %q --outputfile %q %s >%q 2>&1\n",
		kb.bin, strings.Join(cn.targets, ","), cisBenchmark, cfg, out, shellQuote(cn.args), filepath.Join(stage, "kube-bench.log"))
	// The script runs from a file: as "sh -c SCRIPT" its command line,
	// which holds every stand-in's, would be among what kube-bench greps.
	runScript := filepath.Join(stage, "run.sh")
	if err := os.WriteFile(runScript, []byte(script.String()), 0o700); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("unshare", "--mount", "--pid", "--fork", "--mount-proc", "--propagation", "private", "sh", runScript)
	if b, err := cmd.CombinedOutput(); err != nil {
		log, _ := os.ReadFile(filepath.Join(stage, "kube-bench.log"))
		t.Fatalf("kube-bench on %s: %v\n%s\n%s", cn.node.Name, err, b, log)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	res, err := parseKubeBench(data)
	if err != nil {
		t.Fatalf("kube-bench on %s: %v", cn.node.Name, err)
	}
	return res
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

func shellQuote(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}

// copyCfg copies kube-bench's definitions and tells its configuration
// where a systemd node keeps what kube-bench otherwise looks for in
// static-pod manifests: the units are the components' specifications
// (CIS 1.1.1-1.1.8), and kube-proxy's kubeconfig has its own path
// (4.1.3, 4.1.4). The checks themselves are not touched.
func copyCfg(t *testing.T, from, to string) {
	t.Helper()
	if out, err := exec.Command("cp", "-r", from, to).CombinedOutput(); err != nil {
		t.Fatalf("copying %s: %v\n%s", from, err, out)
	}
	p := filepath.Join(to, "config.yaml")
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		t.Fatal(err)
	}
	prepend := func(section, component, key, value string) {
		s, _ := cfg[section].(map[string]any)
		comp, _ := s[component].(map[string]any)
		if comp == nil {
			t.Fatalf("kube-bench config.yaml has no %s.%s", section, component)
		}
		list, _ := comp[key].([]any)
		comp[key] = append([]any{value}, list...)
	}
	for _, u := range []struct{ section, component, unit string }{
		{"master", "apiserver", "kube-apiserver.service"},
		{"master", "controllermanager", "kube-controller-manager.service"},
		{"master", "scheduler", "kube-scheduler.service"},
		{"master", "etcd", "etcd.service"},
		{"etcd", "etcd", "etcd.service"},
	} {
		prepend(u.section, u.component, "confs", "/"+layout.UnitDir+u.unit)
	}
	prepend("node", "proxy", "kubeconfig", "/"+layout.KubeProxyKubeconfig)
	out, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, out, 0o644); err != nil {
		t.Fatal(err)
	}
}

// cisResult is one check as kube-bench reported it.
type cisResult struct {
	id, status, reason string
	// detail is what kube-bench saw, for the failure message.
	detail string
}

func parseKubeBench(data []byte) ([]cisResult, error) {
	var report struct {
		Controls []struct {
			Tests []struct {
				Results []struct {
					ID       string `json:"test_number"`
					Status   string `json:"status"`
					Actual   string `json:"actual_value"`
					Expected string `json:"expected_result"`
					Reason   string `json:"reason"`
				} `json:"results"`
			} `json:"tests"`
		} `json:"Controls"`
	}
	if err := json.Unmarshal(data, &report); err != nil {
		return nil, err
	}
	var out []cisResult
	for _, c := range report.Controls {
		for _, g := range c.Tests {
			for _, r := range g.Results {
				out = append(out, cisResult{id: r.ID, status: r.Status,
					detail: strings.TrimSpace(fmt.Sprintf("%s %s %s", r.Expected, r.Actual, r.Reason))})
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("kube-bench reported no checks")
	}
	return out, nil
}

// readCISList reads a golden list: "ID STATUS[ reason]" per line, #
// comments.
func readCISList(p string) ([]cisResult, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []cisResult
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.SplitN(line, " ", 3)
		if len(fields) < 2 {
			return nil, fmt.Errorf("%s: %q is not ID STATUS", p, line)
		}
		r := cisResult{id: fields[0], status: fields[1]}
		if len(fields) == 3 {
			r.reason = strings.TrimSpace(fields[2])
		}
		out = append(out, r)
	}
	return out, sc.Err()
}

func writeCISList(t *testing.T, p string, got, old []cisResult) {
	t.Helper()
	reasons := map[string]string{}
	for _, r := range old {
		reasons[r.id] = r.reason
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# kube-bench %s: the expected status of every check, and why a WARN is not a PASS.\n", cisBenchmark)
	for _, r := range got {
		line := r.id + " " + r.status
		if r.status != "PASS" && reasons[r.id] != "" {
			line += " " + reasons[r.id]
		}
		b.WriteString(line + "\n")
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// compareCIS lists, one per line starting with the check ID, every check
// whose status is not the expected one, and checks missing on either
// side.
func compareCIS(want, got []cisResult) string {
	gotBy := map[string]cisResult{}
	for _, r := range got {
		gotBy[r.id] = r
	}
	var b strings.Builder
	seen := map[string]bool{}
	for _, w := range want {
		seen[w.id] = true
		g, ok := gotBy[w.id]
		switch {
		case !ok:
			fmt.Fprintf(&b, "%s expected %s, not reported\n", w.id, w.status)
		case g.status != w.status:
			fmt.Fprintf(&b, "%s expected %s, got %s: %s\n", w.id, w.status, g.status, g.detail)
		}
	}
	for _, g := range got {
		if !seen[g.id] {
			fmt.Fprintf(&b, "%s not in the list, got %s: %s\n", g.id, g.status, g.detail)
		}
	}
	return b.String()
}

// TestAnonymousAuthFollowsSpec: the API server refuses anonymous
// requests unless the spec turns them on (with a CIS waiver).
func TestAnonymousAuthFollowsSpec(t *testing.T) {
	c := compileExample(t, "single-node")
	for _, on := range []bool{false, true} {
		c.Security.AnonymousAuth = on
		n := c.Nodes[0]
		want := fmt.Sprintf("--anonymous-auth=%t", on)
		if !slices.Contains(apiServerArgs(c, n, Options{}.placement(n)), want) {
			t.Errorf("anonymousAuth %t: kube-apiserver flags lack %s", on, want)
		}
	}
}
