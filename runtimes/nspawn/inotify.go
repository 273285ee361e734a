package nspawn

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// inotifyPerMachine is how many inotify instances one machine takes:
// its systemd and the daemons that watch files (journald, logind, udev,
// dbus, containerd, the kubelet, kube-proxy, the CNI), measured here at
// about 16 for a control-plane node, with room for the containers.
const inotifyPerMachine = 20

// inotifyLimit is where the kernel keeps the number of inotify
// instances one user may have: every machine's processes are the host's
// root, so the machines share it.
const inotifyLimit = "/proc/sys/fs/inotify/max_user_instances"

// inotifyInUse counts the inotify instances the host's processes hold.
func inotifyInUse() int {
	n := 0
	fds, _ := filepath.Glob("/proc/[0-9]*/fd/*")
	for _, fd := range fds {
		if l, err := os.Readlink(fd); err == nil && l == "anon_inode:inotify" {
			n++
		}
	}
	return n
}

// inotifyWhy refuses machines the host's inotify instances cannot
// hold: a machine's systemd that gets none exits at once ("Failed to
// allocate manager object: Too many open files").
func inotifyWhy(limit, used, machines int) string {
	need := machines * inotifyPerMachine
	if used+need <= limit {
		return ""
	}
	want := used + need
	// Rounded up to a power of two, as the kernel's default is one.
	suggest := 128
	for suggest < want {
		suggest *= 2
	}
	return fmt.Sprintf("%d machines take about %d inotify instances, and the host's root may hold %d (fs.inotify.max_user_instances), %d of them in use: raise the limit (sysctl -w fs.inotify.max_user_instances=%d, and a file in /etc/sysctl.d to keep it), as kind's known issues advise for clusters of several nodes",
		machines, need, limit, used, suggest)
}

// readInotifyLimit reads the host's limit; 0 when it cannot be read.
func readInotifyLimit() int {
	data, err := os.ReadFile(inotifyLimit)
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(strings.TrimSpace(string(data)))
	return n
}
