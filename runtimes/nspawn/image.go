package nspawn

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/kcompile/kcompile/layout"
)

// The base image: Debian bookworm, minbase, with what a node's tree
// needs from its operating system (systemd as init, iproute2, nftables
// for kube-proxy, kmod for modules-load.d, curl for install units that
// download, ca-certificates), and cloud-init for the cloud-init target
// with sshd and sudo, which a node image carries for the spec's
// access.users, and keepalived and HAProxy, which serve the API endpoint
// in modes vip and nodeLocal.
const (
	imageSuite = "bookworm"
	// imageRevision changes when what build writes changes, so that a
	// cached image of an older recipe is not used.
	imageRevision = "3"
)

var imagePackages = []string{
	"systemd", "systemd-sysv", "dbus", "iproute2", "procps", "nftables", "iptables",
	"kmod", "ca-certificates", "curl",
}

// chrootPackages are installed after debootstrap, with apt-get in the
// new root: debootstrap's own resolver cannot order cloud-init's Python
// dependencies. sudo, which cloud-init only recommends, is what its
// access users' sudo rule (and kcompile apply over SSH) runs, as on a
// distribution's cloud image.
var chrootPackages = []string{"cloud-init", "openssh-server", "sudo", "keepalived", "haproxy"}

// imageKey names a cached image by its recipe and mirror.
func imageKey(mirror string) string {
	parts := append([]string{imageSuite, imageRevision, mirror}, imagePackages...)
	sum := sha256.Sum256([]byte(strings.Join(append(parts, chrootPackages...), "\x00")))
	return imageSuite + "-" + hex.EncodeToString(sum[:])[:12]
}

// aptMirror is the Debian mirror this machine's apt uses, so that the
// image comes from where the machine's own packages do.
func aptMirror() string {
	for _, f := range []string{"/etc/apt/sources.list.d/debian.sources", "/etc/apt/sources.list"} {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(data), "\n") {
			line = strings.TrimSpace(line)
			if u, ok := strings.CutPrefix(line, "URIs:"); ok {
				for _, u := range strings.Fields(u) {
					if !strings.Contains(u, "security") {
						return u
					}
				}
			}
			if f := strings.Fields(line); len(f) >= 3 && f[0] == "deb" && !strings.Contains(f[1], "security") && !strings.HasPrefix(f[1], "[") {
				return f[1]
			}
		}
	}
	return "http://deb.debian.org/debian"
}

// ensureImage returns the cached base image under cache, building it
// with debootstrap the first time (into a temporary directory, renamed
// into place when complete). log receives debootstrap's output.
func ensureImage(ctx context.Context, cache string, now time.Time, log io.Writer, logf func(string, ...any)) (string, error) {
	mirror := aptMirror()
	dir := filepath.Join(cache, "images", imageKey(mirror))
	if _, err := os.Stat(filepath.Join(dir, layout.OSRelease)); err == nil {
		return dir, nil
	}
	if _, err := exec.LookPath("debootstrap"); err != nil {
		return "", errors.New("debootstrap is not installed (apt-get install debootstrap), and no --image was given")
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return "", err
	}
	removeStaleBuilds(filepath.Dir(dir), now)
	tmp, err := os.MkdirTemp(filepath.Dir(dir), ".build-")
	if err != nil {
		return "", err
	}
	// debootstrap mounts /proc (and more) in the new root; one that is
	// interrupted leaves them mounted, and a removal must not descend
	// through them into the host's.
	defer func() {
		unmountUnder(tmp)
		_ = removeDir(tmp)
	}()
	logf("building the base image %s with debootstrap from %s (once; cached)", filepath.Base(dir), mirror)
	cmd := buildCommand(ctx, "debootstrap", "--variant=minbase", "--include="+strings.Join(imagePackages, ","), imageSuite, tmp, mirror)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return "", fmt.Errorf("building the base image: %w; the partial image was removed", ctx.Err())
		}
		return "", fmt.Errorf("debootstrap: %v (its output is above)", err)
	}
	for _, args := range [][]string{
		{"apt-get", "update", "-q"},
		append([]string{"apt-get", "install", "-y", "-q", "--no-install-recommends"}, chrootPackages...),
		{"apt-get", "clean"},
	} {
		cmd := buildCommand(ctx, "chroot", append([]string{tmp}, args...)...)
		cmd.Env = []string{"DEBIAN_FRONTEND=noninteractive", "PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C"}
		cmd.Stdout, cmd.Stderr = log, log
		if err := cmd.Run(); err != nil {
			if ctx.Err() != nil {
				return "", fmt.Errorf("building the base image: %w; the partial image was removed", ctx.Err())
			}
			return "", fmt.Errorf("%s in the new image: %v (its output is above)", strings.Join(args, " "), err)
		}
	}
	if err := finishImage(tmp); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, dir); err != nil {
		if _, serr := os.Stat(filepath.Join(dir, layout.OSRelease)); serr == nil {
			// Another up built it meanwhile.
			return dir, nil
		}
		return "", err
	}
	return dir, nil
}

// buildCommand is a step of the image build that ends with ctx: its
// whole process group (debootstrap runs dpkg and more below it) is
// killed, so that an interrupted up stops within seconds.
func buildCommand(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 2 * time.Second
	return cmd
}

// removeStaleBuilds removes the build directories of builds that died
// with their process (a crash or a machine restart): any older than a
// build could take.
func removeStaleBuilds(images string, now time.Time) {
	entries, _ := os.ReadDir(images)
	for _, e := range entries {
		info, err := e.Info()
		if !strings.HasPrefix(e.Name(), ".build-") || err != nil || now.Sub(info.ModTime()) < 6*time.Hour {
			continue
		}
		p := filepath.Join(images, e.Name())
		unmountUnder(p)
		_ = removeDir(p)
	}
}

// unmountUnder detaches every mount at or below dir, deepest first.
func unmountUnder(dir string) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return
	}
	var points []string
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		// mountinfo escapes blanks as octal; a build directory has none.
		if p := f[4]; p == dir || strings.HasPrefix(p, dir+"/") {
			points = append(points, p)
		}
	}
	for i := len(points) - 1; i >= 0; i-- {
		_ = syscall.Unmount(points[i], syscall.MNT_DETACH)
	}
}

// finishImage makes a debootstrapped root a stock node image: no
// identity of the machine that built it, nothing that waits for
// hardware a machine does not have.
func finishImage(root string) error {
	write := func(p string, data []byte, mode fs.FileMode) error {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return err
		}
		return os.WriteFile(full, data, mode)
	}
	// debootstrap copies the builder's hostname and resolver; a node gets
	// its hostname from nspawn (or cloud-init) and its resolver from up.
	for _, p := range []string{layout.Hostname, layout.ResolvConf} {
		if err := os.Remove(filepath.Join(root, p)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	// An empty machine-id: each machine gets its own (nspawn --uuid).
	if err := write(layout.MachineID, nil, 0o444); err != nil {
		return err
	}
	if err := write(layout.Hosts, []byte(localHosts), 0o644); err != nil {
		return err
	}
	// cloud-init: NoCloud only (no network probing for other clouds), a
	// locale the minbase image has, networkd to apply its network
	// configuration.
	if err := write(layout.CloudInitUpCfg, []byte("# kcompile up: a NoCloud seed is all a machine has; C.UTF-8 is the\n# locale a minbase image has.\ndatasource_list: [ NoCloud ]\nlocale: C.UTF-8\n"), 0o644); err != nil {
		return err
	}
	if err := write(layout.DefaultLocale, []byte("LANG=C.UTF-8\n"), 0o644); err != nil {
		return err
	}
	// cloud-init enables itself through its generator when it finds a
	// seed; without one (the systemd target) it stays off.
	links := map[string]string{
		layout.UnitDir + "multi-user.target.wants/systemd-networkd.service": layout.Abs(layout.SystemdLibUnitDir) + "systemd-networkd.service",
		layout.UnitDir + "sockets.target.wants/systemd-networkd.socket":     layout.Abs(layout.SystemdLibUnitDir) + "systemd-networkd.socket",
	}
	for l, target := range links {
		full := filepath.Join(root, l)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return err
		}
		if err := os.Remove(full); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		if err := os.Symlink(target, full); err != nil {
			return err
		}
	}
	// Timers that would download package lists on a throw-away machine.
	for _, t := range []string{"apt-daily.timer", "apt-daily-upgrade.timer", "e2scrub_all.timer", "fstrim.timer"} {
		_ = os.Remove(filepath.Join(root, layout.UnitDir+"timers.target.wants", t))
	}
	return nil
}

// localHosts is the image's /etc/hosts.
const localHosts = "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"
