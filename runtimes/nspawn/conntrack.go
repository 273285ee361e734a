package nspawn

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"

	"github.com/kcompile/kcompile/compiler/ir"
)

// kube-proxy's defaults for the conntrack table, which the compiled
// KubeProxyConfiguration leaves in force: it raises
// net.netfilter.nf_conntrack_max to conntrackPerCPU per online CPU, at
// least conntrackMin and at most conntrackCap, and nf_conntrack's
// hashsize to a quarter of that, and exits if it cannot. Both are the
// host's (the sysctl is read-only outside the host's network namespace,
// the module parameter is under /sys), so a machine can change neither:
// up refuses a host whose limits are lower, naming the host's fix,
// rather than hide a capacity limit behind a file as it does the
// kubelet's host-wide policy sysctls.
const (
	conntrackPerCPU = 32768
	conntrackMin    = 131072
	conntrackCap    = 1 << 20
)

// conntrackFacts are the host's conntrack limits.
type conntrackFacts struct {
	// max is net.netfilter.nf_conntrack_max, hashsize nf_conntrack's
	// parameter; 0 where nf_conntrack is not loaded.
	max, hashsize int
	// cpus are the online CPUs, as kube-proxy counts them.
	cpus int
}

func readConntrackFacts() (conntrackFacts, error) {
	var f conntrackFacts
	var err error
	if f.max, err = readIntFile("/proc/sys/net/netfilter/nf_conntrack_max"); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return f, err
	}
	if f.hashsize, err = readIntFile("/sys/module/nf_conntrack/parameters/hashsize"); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return f, err
	}
	online, err := os.ReadFile("/sys/devices/system/cpu/online")
	if err != nil {
		return f, err
	}
	f.cpus, err = countCPUs(strings.TrimSpace(string(online)))
	return f, err
}

// countCPUs counts a CPU list such as "0-3,8,10-11".
func countCPUs(list string) (int, error) {
	n := 0
	for _, r := range strings.Split(list, ",") {
		lo, hi, isRange := strings.Cut(r, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return 0, fmt.Errorf("CPU list %q: %v", list, err)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return 0, fmt.Errorf("CPU list %q: bad range %q", list, r)
			}
		}
		n += b - a + 1
	}
	return n, nil
}

func readIntFile(path string) (int, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(data)))
}

// want is the nf_conntrack_max kube-proxy sets on this host.
func (f conntrackFacts) want() int {
	return min(max(conntrackPerCPU*f.cpus, conntrackMin), conntrackCap)
}

// why says what of the host's conntrack limits kube-proxy would fail to
// raise.
func (f conntrackFacts) why(c *ir.Cluster) []string {
	proxies := false
	for _, n := range c.Nodes {
		proxies = proxies || n.Runs(ir.ComponentKubeProxy)
	}
	if !proxies {
		return nil
	}
	want := f.want()
	var why []string
	if f.max == 0 {
		return []string{"kube-proxy needs the host's connection tracking, and nf_conntrack is not loaded (no /proc/sys/net/netfilter/nf_conntrack_max); a machine cannot load it: modprobe nf_conntrack on the host first"}
	}
	if f.max < want {
		why = append(why, fmt.Sprintf("kube-proxy raises net.netfilter.nf_conntrack_max to %d (%d per CPU, %d CPUs, at least %d) and exits if it cannot; this host's is %d, and a machine cannot change it: raise it on the host first (sysctl -w net.netfilter.nf_conntrack_max=%d)",
			want, conntrackPerCPU, f.cpus, conntrackMin, f.max, want))
	}
	if f.hashsize < want/4 {
		why = append(why, fmt.Sprintf("kube-proxy raises nf_conntrack's hashsize to %d (a quarter of nf_conntrack_max %d) and exits if it cannot; this host's is %d, and a machine cannot change it: raise it on the host first (echo %d > /sys/module/nf_conntrack/parameters/hashsize)",
			want/4, want, f.hashsize, want/4))
	}
	return why
}
