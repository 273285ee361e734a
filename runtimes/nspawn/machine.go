package nspawn

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/kcompile/kcompile/compiler/ir"
	"github.com/kcompile/kcompile/layout"
	"github.com/kcompile/kcompile/pipeline"
)

// rebootStatus is systemd-nspawn's exit status when the machine asked to
// be rebooted (systemd-nspawn@.service restarts on it).
const rebootStatus = 133

// machine is one node booted by systemd-nspawn.
type machine struct {
	name string
	node ir.Node
	// netns is the node's network namespace, made anew at each boot so
	// that nothing a boot programmed (nftables, vxlan devices, routes)
	// survives a reboot, as on a real machine.
	netns string
	// hostLink is the host end of the node's veth, on the bridge.
	hostLink string
	mac      string
	addrs    []netip.Prefix
	// dir holds the machine's overlay (upper, work), its root mount
	// point and its console log.
	dir string
	// lowers are the overlay's read-only layers, top first: the node's
	// tree, the binaries, the image.
	lowers []string
	// binaries, when set, is the directory of programs by name the
	// machine boots instead of up's --binaries (kcompile apply's).
	binaries string

	mu sync.Mutex
	// cgroups are the machine's own cgroup in each hierarchy, and logf
	// up's log: a halt thaws what it finds stuck there.
	cgroups []string
	logf    func(string, ...any)

	proc    Resource
	cmd     *exec.Cmd
	boots   int
	stopped bool
	// done is closed when the machine has stopped for good.
	done chan struct{}
	err  error
}

func (m *machine) upper() string   { return filepath.Join(m.dir, "upper") }
func (m *machine) workDir() string { return filepath.Join(m.dir, "overlay-work") }
func (m *machine) root() string    { return filepath.Join(m.dir, "root") }
func (m *machine) console() string { return filepath.Join(m.dir, "console.log") }

// containerdDir is the machine's /var/lib/containerd: a directory of the
// host's file system, as containerd's overlayfs snapshots cannot have
// their upper layers on the machine's overlay root.
func (m *machine) containerdDir() string { return filepath.Join(m.dir, "containerd") }

// Leader is the PID of the machine's init (systemd), 0 when it is not
// running.
func (m *machine) leader() int {
	m.mu.Lock()
	pid := m.proc.PID
	alive := m.proc.alive()
	m.mu.Unlock()
	if !alive {
		return 0
	}
	return firstChild(pid)
}

// firstChild is the oldest child of pid: nspawn's only child is the
// container's PID 1.
func firstChild(pid int) int {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if err != nil {
		return 0
	}
	f := strings.Fields(string(data))
	if len(f) == 0 {
		return 0
	}
	var c int
	fmt.Sscan(f[0], &c)
	return c
}

// network makes the machine's namespace and veth, the node end carrying
// the spec's MAC; with configure, the node's addresses and default
// routes too (a systemd tree has no network configuration of its own:
// on bare metal the installed system has it; a cloud-init seed has one).
func (c *Cluster) network(m *machine, configure bool) error {
	if err := c.j.record(Resource{Kind: KindNetns, Name: m.netns}); err != nil {
		return err
	}
	if err := ip("netns", "add", m.netns); err != nil {
		return err
	}
	if err := c.j.record(Resource{Kind: KindLink, Name: m.hostLink}); err != nil {
		return err
	}
	args := []string{"link", "add", m.hostLink, "mtu", mtuArg(c.p.mtu), "type", "veth", "peer", "name", "eth0", "mtu", mtuArg(c.p.mtu)}
	if m.mac != "" {
		args = append(args, "address", m.mac)
	}
	args = append(args, "netns", m.netns)
	if err := ip(args...); err != nil {
		return err
	}
	if err := ip("link", "set", m.hostLink, "master", c.p.bridge, "up"); err != nil {
		return err
	}
	if err := ip("-n", m.netns, "link", "set", "lo", "up"); err != nil {
		return err
	}
	if !configure {
		return nil
	}
	for _, cmd := range addressing(c.p, m) {
		if err := ip(append([]string{"-n", m.netns}, cmd...)...); err != nil {
			return err
		}
	}
	return nil
}

// addressing is what gives machine m the node's addresses and default
// routes, each as ip's arguments inside its namespace.
func addressing(p *plan, m *machine) [][]string {
	var cmds [][]string
	for _, a := range m.addrs {
		cmds = append(cmds, []string{"addr", "add", addrArg(a), "dev", "eth0"})
	}
	cmds = append(cmds, []string{"link", "set", "eth0", "up"})
	for _, a := range m.addrs {
		if g, ok := p.gatewayFor(a.Addr()); ok {
			cmds = append(cmds, []string{family(g), "route", "replace", "default", "via", g.String(), "dev", "eth0"})
		}
	}
	return cmds
}

// dropNetwork removes the machine's namespace; its veth goes with it.
func (c *Cluster) dropNetwork(m *machine) error {
	if err := deleteNetns(m.netns); err != nil {
		return err
	}
	if err := deleteLink(m.hostLink); err != nil {
		return err
	}
	if err := c.j.forget(KindLink, m.hostLink); err != nil {
		return err
	}
	return c.j.forget(KindNetns, m.netns)
}

// overlayOptions are the mount options of the machine's root.
func (m *machine) overlayOptions() string {
	return "lowerdir=" + strings.Join(m.lowers, ":") + ",upperdir=" + m.upper() + ",workdir=" + m.workDir()
}

// machineShell starts a machine: its arguments are the root's overlay
// options, the root, the machine's cgroups (space-separated, none with a
// space) and nspawn's command.
const machineShell = `for g in $3; do echo $$ >"$g/cgroup.procs" || exit 1; done; mount -t overlay overlay -o "$1" "$2" && shift 3 && exec "$@"`

// nspawnArgs is the command that boots the machine: its root is an
// overlay mounted in a mount namespace of its own (made by unshare), so
// that it disappears with the machine even if up is killed.
// The shell (machineShell) moves itself into the machine's cgroups
// before it execs nspawn.
func (c *Cluster) nspawnArgs(m *machine, cgroups []string) []string {
	args := []string{
		"unshare", "--mount", "--propagation", "private", "--",
		"/bin/sh", "-c", machineShell, "kcompile-up-machine",
		m.overlayOptions(), m.root(), strings.Join(cgroups, " "),
		"systemd-nspawn",
		"--quiet",
		"--directory=" + m.root(),
		"--machine=" + m.name,
		"--uuid=" + uuid(machineID(c.p.cluster.Name, m.name)),
		// The host runs no systemd to register with or to put the
		// machine in a unit of its own.
		"--register=no", "--keep-unit",
		"--link-journal=no",
		"--console=read-only",
		"--network-namespace-path=" + netnsPath(m.netns),
		"--kill-signal=SIGRTMIN+3",
	}
	args = append(args, c.adjust.nspawn...)
	if m.node.RunsPods() {
		args = append(args, "--bind="+m.containerdDir()+":"+layout.Abs(layout.ContainerdStateDir))
	}
	return append(args, layout.Abs(layout.UpInit))
}

// boot starts the machine once: network, then nspawn.
func (c *Cluster) boot(m *machine) error {
	if err := c.network(m, c.cfg.Target == pipeline.Systemd); err != nil {
		return err
	}
	cgroups, err := c.makeCgroups(m)
	if err != nil {
		return err
	}
	args := c.nspawnArgs(m, cgroups)
	cmd := exec.Command(args[0], args[1:]...)
	log, err := os.OpenFile(m.console(), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = log, log
	// A process group of its own: Ctrl-C on up's terminal reaches up,
	// which halts the machines in order.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	m.mu.Lock()
	m.cgroups, m.logf = cgroups, c.logf
	m.mu.Unlock()
	cmd.Env = append(os.Environ(), "SYSTEMD_NSPAWN_TMPFS_TMP=0")
	if err := cmd.Start(); err != nil {
		log.Close()
		return fmt.Errorf("machine %s: %v", m.name, err)
	}
	log.Close()
	r := Resource{Kind: KindProcess, Name: m.name, PID: cmd.Process.Pid, Start: processStart(cmd.Process.Pid)}
	m.mu.Lock()
	m.cmd, m.proc = cmd, r
	m.boots++
	m.mu.Unlock()
	return c.j.record(r)
}

// supervise waits for the machine and boots it again when it asked for
// a reboot, until it halts or stop is called.
func (c *Cluster) supervise(m *machine) {
	defer close(m.done)
	for {
		m.mu.Lock()
		cmd := m.cmd
		m.mu.Unlock()
		err := cmd.Wait()
		status := cmd.ProcessState.ExitCode()
		c.jmu.Lock()
		_ = c.j.forget(KindProcess, m.name)
		derr := c.dropNetwork(m)
		c.jmu.Unlock()
		m.mu.Lock()
		stopped := m.stopped
		m.mu.Unlock()
		if derr != nil {
			m.err = derr
			return
		}
		if stopped {
			return
		}
		if status != rebootStatus {
			// The console goes with the work directory when up cleans
			// up after the failure: its end is in the error.
			m.err = fmt.Errorf("machine %s stopped (%v); the end of its console:\n%s", m.name, err, consoleTail(m.console(), 30))
			c.events <- m
			return
		}
		c.logf("machine %s: rebooting", m.name)
		c.jmu.Lock()
		err = c.boot(m)
		c.jmu.Unlock()
		if err != nil {
			m.err = err
			c.events <- m
			return
		}
	}
}

// consoleTail is the last n lines of a console log, indented.
func consoleTail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return "  (" + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "  " + strings.Join(lines, "\n  ")
}

// powerOff halts the machine as its operator would, through logind
// (systemctl poweroff), so that the kubelet's graceful node shutdown
// (its inhibitor lock, held for up to shutdown) ends the pods first. A
// machine that has not powered off within that and a margin for the
// units is halted by stop; forced says so, with the time it was given.
func (m *machine) powerOff(ctx context.Context, shutdown time.Duration) (grace time.Duration, forced bool) {
	grace = shutdown + 30*time.Second
	m.mu.Lock()
	m.stopped = true
	m.mu.Unlock()
	if _, err := m.exec(ctx, "systemctl", "poweroff", "--no-block"); err == nil {
		thawing := m.halting()
		t := time.NewTimer(grace)
		select {
		case <-m.done:
			t.Stop()
			thawing()
			return grace, false
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
		// stop watches from here on.
		thawing()
	}
	select {
	case <-m.done:
		// It ended meanwhile, or had ended before it was asked.
		return grace, false
	default:
	}
	m.stop(ctx, 20*time.Second)
	return grace, true
}

// stop halts the machine: SIGTERM makes nspawn send systemd its
// SIGRTMIN+3 (halt); after grace, a second SIGTERM makes nspawn end the
// machine at once. With no grace the machine is killed, as one that
// loses its power: nothing in it gets to say goodbye.
func (m *machine) stop(ctx context.Context, grace time.Duration) (forced bool) {
	m.mu.Lock()
	m.stopped = true
	r := m.proc
	m.mu.Unlock()
	if grace > 0 {
		r.signal(syscall.SIGTERM)
		defer m.halting()()
		t := time.NewTimer(grace)
		defer t.Stop()
		cancelled := false
		select {
		case <-m.done:
			return false
		case <-t.C:
		case <-ctx.Done():
			cancelled = true
		}
		// nspawn ends the machine at once on a second SIGTERM; the two
		// must not be sent back to back, or the kernel merges them into
		// one and the machine goes on shutting down. Cancelled right
		// after the first, it is killed instead.
		if !cancelled {
			r.signal(syscall.SIGTERM)
			select {
			case <-m.done:
				return true
			case <-time.After(10 * time.Second):
			}
		}
	}
	r.kill()
	<-m.done
	return true
}

// halting thaws the machine's stuck cgroups until the returned stop is
// called (thawWhileHalting): while it halts or reboots.
func (m *machine) halting() (stop func()) {
	m.mu.Lock()
	dirs, logf := m.cgroups, m.logf
	m.mu.Unlock()
	return thawWhileHalting(dirs, time.Second, func(format string, args ...any) {
		logf("machine %s: "+format, append([]any{m.name}, args...)...)
	})
}

// machineEnv is the environment of a command run in a machine, as
// systemd gives a root service there.
func machineEnv() []string {
	return []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root", "LANG=C.UTF-8"}
}

// exec runs a command inside the machine (all of its namespaces).
func (m *machine) exec(ctx context.Context, args ...string) ([]byte, error) {
	return execIn(ctx, m.leader(), m.name, args...)
}

// execIn runs a command in every namespace of the machine named name
// whose init is pid (0: not running).
func execIn(ctx context.Context, pid int, name string, args ...string) ([]byte, error) {
	if pid == 0 {
		return nil, fmt.Errorf("machine %s is not running", name)
	}
	full := append([]string{"-t", fmt.Sprint(pid), "-a", "--"}, args...)
	cmd := exec.CommandContext(ctx, "nsenter", full...)
	// The machine's environment, not the host's: a host user's TMPDIR,
	// say, names no directory in the machine.
	cmd.Env = machineEnv()
	// nsenter forks to enter the PID namespace: killed at the deadline,
	// it leaves its child holding the output pipe. Do not wait for it.
	cmd.WaitDelay = time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return out, fmt.Errorf("%s on %s: %v: %s", strings.Join(args, " "), name, err, strings.TrimSpace(string(out)))
		}
		return out, err
	}
	return out, nil
}
