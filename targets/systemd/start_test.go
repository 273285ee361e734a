package systemd

import (
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kcompile/kcompile/compiler/ir"
	"github.com/kcompile/kcompile/internal/fixture"
	"github.com/kcompile/kcompile/internal/unitfile"
	"github.com/kcompile/kcompile/layout"
)

// TestBootDropInWantsEveryUnit: every node's tree starts each of its
// units at boot by itself, in dependency order (the installer first,
// etcd before the API server, the runtime before the kubelet), from
// regular files only, and carries the start script.
func TestBootDropInWantsEveryUnit(t *testing.T) {
	for _, name := range fixture.Examples() {
		c := compileExample(t, name)
		tree := buildExample(t, name)
		for _, n := range c.Nodes {
			f, ok := tree.Get(layout.NodeTree(n.Name, layout.BootDropIn))
			if !ok || f.Mode != 0o644 {
				t.Fatalf("%s/%s: no drop-in %s, or not 0644", name, n.Name, layout.BootDropIn)
			}
			u, err := unitfile.Parse(f.Data)
			if err != nil {
				t.Fatal(err)
			}
			wants := u.Get("Unit", "Wants")
			var units []string
			for _, uf := range NodeUnits(c, n, Options{}) {
				if uf.Triggered {
					// Started by its timer, not at boot.
					continue
				}
				units = append(units, uf.Name)
			}
			if !slices.Equal(wants, units) {
				t.Errorf("%s/%s: the drop-in wants %v, the node's units are %v", name, n.Name, wants, units)
			}
			if slices.Contains(wants, BackupService) || c.Etcd.Backup != nil && n.Runs(ir.ComponentEtcd) && !slices.Contains(wants, BackupTimer) {
				t.Errorf("%s/%s: the boot starts the backup service, or not its timer: %v", name, n.Name, wants)
			}
			before := func(a, b string) {
				i, j := slices.Index(wants, a), slices.Index(wants, b)
				if i >= 0 && j >= 0 && i > j {
					t.Errorf("%s/%s: %s starts after %s: %v", name, n.Name, a, b, wants)
				}
			}
			if wants[0] != InstallUnit {
				t.Errorf("%s/%s: the installer does not start first: %v", name, n.Name, wants)
			}
			before("etcd.service", "kube-apiserver.service")
			before("containerd.service", "kubelet.service")
			before("crio.service", "kubelet.service")
			if s, ok := tree.Get(layout.NodeTree(n.Name, StartScript(n.OS)[1:])); !ok || s.Mode != 0o755 || string(s.Data) != startScriptText {
				t.Errorf("%s/%s: no executable start script", name, n.Name)
			}
		}
	}
}

// TestEtcdDataDirOnFirstBoot: the sandbox of etcd's ExecStartPre, which
// creates the data directory, must not need the directory to exist.
func TestEtcdDataDirOnFirstBoot(t *testing.T) {
	c := compileExample(t, "single-node")
	for _, u := range NodeUnits(c, c.Nodes[0], Options{}) {
		if u.Name == "etcd.service" {
			if got := u.Unit.Get("Service", "ReadWritePaths"); !slices.Equal(got, []string{"-/" + layout.EtcdDataDir}) {
				t.Errorf("ReadWritePaths %v", got)
			}
			return
		}
	}
	t.Fatal("single-node has no etcd.service")
}

// standIns are the programs the start script calls, as sh scripts that
// record each call in $KC_LOG and answer from $KC_STATE: a file
// UNIT.PROPERTY holds the value systemctl show gives (a running unit by
// default); UNIT.grow makes its NRestarts grow with every call; KC_FAIL
// names what fails: "sysctl", "daemon-reload" or "start UNIT". sleep
// returns at once, so the script's time limit is counted in polls.
func standIns() map[string]string {
	return map[string]string{
		"sysctl": `echo "sysctl $*" >>"$KC_LOG"; [ "$KC_FAIL" != sysctl ]`,
		"sleep":  `:`,
		"systemctl": `echo "systemctl $*" >>"$KC_LOG"
for last; do :; done
case $1 in
daemon-reload) [ "$KC_FAIL" != daemon-reload ] ;;
start) [ "$KC_FAIL" != "start $last" ] ;;
show)
	prop=${2#--property=}
	if [ "$prop" = NRestarts ] && [ -f "$KC_STATE/$last.grow" ]; then
		n=$(cat "$KC_STATE/$last.grow"); echo $((n + 1)) >"$KC_STATE/$last.grow"; echo "$n"
	elif [ -f "$KC_STATE/$last.$prop" ]; then cat "$KC_STATE/$last.$prop"
	else case $prop in ActiveState) echo active ;; NRestarts) echo 0 ;; Type) echo simple ;; Result) echo success ;; esac
	fi ;;
*) exit 3 ;;
esac`,
	}
}

// TestStartScript runs the start script under sh on single-node's
// drop-in, with stand-ins for systemctl and sysctl: it starts every unit
// in the drop-in's order after sysctl and a reload, and its exit status
// and message name what did not come up.
func TestStartScript(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Fatal(err)
	}
	tree := buildExample(t, "single-node")
	node := layout.NodeTree(compileExample(t, "single-node").Nodes[0].Name, "")
	dir := t.TempDir()
	for _, p := range []string{layout.BootDropIn, StartScript(ir.OSDebian)[1:]} {
		f, _ := tree.Get(node + p)
		writeFile(t, filepath.Join(dir, path.Base(p)), f.Data, f.Mode)
	}
	bin := filepath.Join(dir, "bin")
	for name, body := range standIns() {
		writeFile(t, filepath.Join(bin, name), []byte("#!/bin/sh\n"+body+"\n"), 0o755)
	}
	wants := []string{"kcompile-install.service", "etcd.service", "kube-apiserver.service", "kube-controller-manager.service",
		"kube-scheduler.service", "containerd.service", "kubelet.service", "kube-proxy.service"}

	for _, tc := range []struct {
		name string
		// state is the stand-ins' state files, fail what fails.
		state map[string]string
		fail  string
		// ok is whether the script succeeds, message what it says,
		// started the units it starts.
		ok      bool
		message string
		started []string
	}{
		{name: "every unit comes up", ok: true, message: "every unit is up", started: wants},
		{name: "an installer that exited", state: map[string]string{"kcompile-install.service.Type": "oneshot", "kcompile-install.service.ActiveState": "inactive"},
			ok: true, started: wants},
		{name: "an installer that failed", state: map[string]string{"kcompile-install.service.Type": "oneshot", "kcompile-install.service.ActiveState": "inactive",
			"kcompile-install.service.Result": "exit-code"}, message: "kcompile-install.service is inactive", started: wants[:1]},
		{name: "a start job that fails", fail: "start etcd.service", message: "etcd.service did not start; see journalctl -u etcd.service", started: wants[:2]},
		{name: "a unit that failed", state: map[string]string{"etcd.service.ActiveState": "failed", "etcd.service.Result": "exit-code"},
			message: "etcd.service failed (exit-code)", started: wants[:2]},
		{name: "a unit that never comes up", state: map[string]string{"kubelet.service.ActiveState": "activating"},
			message: "kubelet.service is not up after 120 s (activating, restarted 0 times)", started: wants[:7]},
		{name: "a unit that keeps restarting", state: map[string]string{"kube-apiserver.service.grow": "0"},
			message: "kube-apiserver.service is not up after 120 s (active, restarted", started: wants[:3]},
		{name: "sysctl fails", fail: "sysctl", message: "every unit is up, but sysctl -p /etc/sysctl.d/99-kubernetes.conf failed", started: wants},
		{name: "systemd does not reload", fail: "daemon-reload", message: "systemctl daemon-reload failed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			state := t.TempDir()
			for name, v := range tc.state {
				writeFile(t, filepath.Join(state, name), []byte(v+"\n"), 0o644)
			}
			log := filepath.Join(state, "log")
			cmd := exec.Command(sh, filepath.Join(dir, "start"), filepath.Join(dir, "kcompile.conf"))
			cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"), "KC_LOG="+log, "KC_STATE="+state, "KC_FAIL="+tc.fail)
			out, err := cmd.CombinedOutput()
			if (err == nil) != tc.ok || !strings.Contains(string(out), tc.message) {
				t.Errorf("exit %v, want success %t and %q:\n%s", err, tc.ok, tc.message, out)
			}
			calls, _ := os.ReadFile(log)
			var started []string
			lines := strings.Split(strings.TrimSpace(string(calls)), "\n")
			for _, l := range lines {
				if u, ok := strings.CutPrefix(l, "systemctl start "); ok {
					started = append(started, u)
				}
			}
			if !slices.Equal(started, tc.started) {
				t.Errorf("started %v, want %v", started, tc.started)
			}
			if tc.fail != "daemon-reload" && (len(lines) < 2 || lines[0] != "sysctl -p /etc/sysctl.d/99-kubernetes.conf" || lines[1] != "systemctl daemon-reload") {
				t.Errorf("sysctl and a reload do not come first:\n%s", calls)
			}
		})
	}
}

// A controller-manager or scheduler that restarts (each exits when it
// loses its leader lease) must not start an API server an operator or a
// halt stopped: ordered after it, not wanting it.
func TestControllersDoNotPullTheAPIServer(t *testing.T) {
	tree := buildExample(t, "ha-stacked")
	for _, unit := range []string{"kube-controller-manager.service", "kube-scheduler.service"} {
		f, ok := tree.Get(layout.NodeTree("cp1", layout.UnitDir+unit))
		if !ok {
			t.Fatalf("cp1 has no %s", unit)
		}
		u, err := unitfile.Parse(f.Data)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(strings.Fields(strings.Join(u.Get("Unit", "After"), " ")), "kube-apiserver.service") {
			t.Errorf("%s is not ordered after the API server: %q", unit, u.Get("Unit", "After"))
		}
		for _, w := range u.Get("Unit", "Wants") {
			if slices.Contains(strings.Fields(w), "kube-apiserver.service") {
				t.Errorf("%s wants the API server: %q", unit, w)
			}
		}
	}
}
