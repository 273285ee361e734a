package nspawn

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// listenChild makes the test binary a process that listens on an
// address until its stdin closes (TestMain), for the port preflight.
const listenChild = "KCOMPILE_TEST_LISTEN"

func listenUntilEOF(addr string) int {
	l, err := net.Listen("tcp4", addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer l.Close()
	fmt.Println("listening")
	_, _ = io.Copy(io.Discard, os.Stdin)
	return 0
}

// hostNetns is a network namespace of the test's own, standing in for
// the host; commands run in it are set up with ip -n / ip netns exec.
func hostNetns(t *testing.T, setup ...[]string) preflight {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("the preflight tests make network namespaces: run them as root (CI does)")
	}
	name := fmt.Sprintf("kcpf%d-%s", os.Getpid(), strings.NewReplacer("/", "-", "_", "").Replace(t.Name()))
	if len(name) > 40 {
		name = name[:40]
	}
	if err := ip("netns", "add", name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := deleteNetns(name); err != nil {
			t.Error(err)
		}
	})
	for _, args := range setup {
		full := append([]string{"netns", "exec", name}, args...)
		if out, err := exec.Command("ip", full...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	return preflight{netns: name}
}

func prefixes(ss ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range ss {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}

// wantOne checks that a preflight found exactly one error or warning
// (kind) and that it says each of want.
func wantOne(t *testing.T, found []string, kind string, want ...string) {
	t.Helper()
	if len(found) != 1 {
		t.Fatalf("%d %s, want 1: %q", len(found), kind, found)
	}
	for _, w := range want {
		if !strings.Contains(found[0], w) {
			t.Errorf("the %s does not say %q:\n%s", kind, w, found[0])
		}
	}
}

func TestPreflightCleanHost(t *testing.T) {
	h := hostNetns(t, []string{"ip", "link", "set", "lo", "up"})
	f, err := h.check(t.Context(), prefixes("10.9.0.0/24", "fd09::/64"), []service{{at: netip.MustParseAddrPort("10.9.0.1:5000"), what: "its image registry", setByPath: "runtime.mirrors"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(f.errors)+len(f.warnings) > 0 {
		t.Errorf("a host with nothing in the way: %q, %q", f.errors, f.warnings)
	}
}

func TestPreflightAddressOnAnInterface(t *testing.T) {
	h := hostNetns(t,
		[]string{"ip", "link", "add", "kca", "type", "veth", "peer", "name", "kcb"},
		[]string{"ip", "addr", "add", "10.9.0.5/24", "dev", "kca"})
	f, err := h.check(t.Context(), prefixes("10.9.0.0/25"), nil)
	if err != nil {
		t.Fatal(err)
	}
	wantOne(t, f.errors, "error", "interface kca has the address 10.9.0.5/24", "node network 10.9.0.0/25", "network.nodes", "ip addr del 10.9.0.5/24 dev kca")
}

// TestPreflightEarlierUp: the bridge of an up killed before it undid
// anything is one finding, naming its work directory, whether its up
// still runs, and the down that removes it, not a line for each of its
// addresses and routes.
func TestPreflightEarlierUp(t *testing.T) {
	for _, tc := range []struct {
		name  string
		owner Resource
		says  string
	}{
		{"gone", Resource{Kind: KindProcess, Name: "kcompile up", PID: 1 << 22, Start: 1}, "its up is gone"},
		{"running", Resource{Kind: KindProcess, Name: "kcompile up", PID: os.Getpid(), Start: processStart(os.Getpid())}, fmt.Sprintf("its up (pid %d) still runs cluster demo", os.Getpid())},
	} {
		t.Run(tc.name, func(t *testing.T) {
			work := t.TempDir()
			data, err := json.Marshal(State{Cluster: "demo", Owner: tc.owner, Resources: []Resource{{Kind: KindLink, Name: "kcfeed00"}}})
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(work, StateName), data, 0o600); err != nil {
				t.Fatal(err)
			}
			h := hostNetns(t,
				[]string{"ip", "link", "add", "kcfeed00", "type", "bridge"},
				[]string{"ip", "link", "set", "dev", "kcfeed00", "alias", bridgeAlias + work},
				[]string{"ip", "addr", "add", "10.9.0.1/24", "dev", "kcfeed00"},
				[]string{"ip", "addr", "add", "10.9.0.2/24", "dev", "kcfeed00"},
				[]string{"ip", "link", "set", "kcfeed00", "up"})
			f, err := h.check(t.Context(), prefixes("10.9.0.0/24"), nil)
			if err != nil {
				t.Fatal(err)
			}
			wantOne(t, f.errors, "error", "interface kcfeed00, in the node network 10.9.0.0/24, is the bridge of the kcompile up whose work directory is "+work, tc.says, "`kcompile down --work "+work+"`")
		})
	}
}

func TestPreflightRoutesOfEveryTable(t *testing.T) {
	h := hostNetns(t, []string{"ip", "route", "add", "blackhole", "10.8.0.0/24", "table", "100"})
	f, err := h.check(t.Context(), prefixes("10.8.0.0/16"), nil)
	if err != nil {
		t.Fatal(err)
	}
	wantOne(t, f.errors, "error", "a blackhole route to 10.8.0.0/24", "routing table 100", "node network 10.8.0.0/16", "ip route del 10.8.0.0/24 table 100")
}

func TestPreflightPolicyRules(t *testing.T) {
	h := hostNetns(t, []string{"ip", "rule", "add", "priority", "1000", "to", "10.7.0.0/16", "lookup", "100"})
	f, err := h.check(t.Context(), prefixes("10.7.3.0/24"), nil)
	if err != nil {
		t.Fatal(err)
	}
	wantOne(t, f.errors, "error", "policy routing rule 1000 'to 10.7.0.0/16 lookup 100'", "node network 10.7.3.0/24", "ip rule del priority 1000")
}

func TestPreflightFirewall(t *testing.T) {
	h := hostNetns(t,
		[]string{"sysctl", "-qw", "net.bridge.bridge-nf-call-iptables=1"},
		[]string{"nft", "add", "table", "inet", "host"},
		[]string{"nft", "add chain inet host guardfwd { type filter hook forward priority 0; policy drop; }"},
		[]string{"nft", "add chain inet host guardin { type filter hook input priority 0; policy drop; }"})
	f, err := h.check(t.Context(), prefixes("10.6.0.0/24"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.errors) > 0 {
		t.Errorf("a firewall is a warning, not an error: %q", f.errors)
	}
	if len(f.warnings) != 2 {
		t.Fatalf("%d warnings, want 2 (input and forward): %q", len(f.warnings), f.warnings)
	}
	in, fwd := f.warnings[0], f.warnings[1]
	if strings.Contains(in, "hook forward") {
		in, fwd = fwd, in
	}
	for _, w := range []string{"inet host guardin (hook input) drops by default", "image registry", `nft insert rule inet host guardin iifname "` + namePrefix + `*" accept`} {
		if !strings.Contains(in, w) {
			t.Errorf("the input warning does not say %q:\n%s", w, in)
		}
	}
	for _, w := range []string{"inet host guardfwd (hook forward) drops by default", "bridge netfilter", "etcd finds no quorum", "bridge-nf-call-iptables"} {
		if !strings.Contains(fwd, w) {
			t.Errorf("the forward warning does not say %q:\n%s", w, fwd)
		}
	}
}

func TestPreflightBusyPort(t *testing.T) {
	h := hostNetns(t, []string{"ip", "link", "set", "lo", "up"})
	cmd := exec.Command("ip", "netns", "exec", h.netns, os.Args[0])
	cmd.Env = append(os.Environ(), listenChild+"=0.0.0.0:5000")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		_ = cmd.Wait()
	})
	ready := make(chan error, 1)
	go func() {
		line := make([]byte, len("listening"))
		_, err := io.ReadFull(stdout, line)
		ready <- err
	}()
	select {
	case err := <-ready:
		if err != nil {
			t.Fatalf("the listener did not start: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the listener did not start within 30 s")
	}
	f, err := h.check(t.Context(), prefixes("10.5.0.0/24"), []service{
		{at: netip.MustParseAddrPort("10.5.0.1:5000"), what: "its image registry", setByPath: "runtime.mirrors"},
		{at: netip.MustParseAddrPort("10.5.0.1:6443"), what: "the API endpoint", setByPath: "controlPlane.endpoint"},
	})
	if err != nil {
		t.Fatal(err)
	}
	wantOne(t, f.errors, "error", "(pid "+strconv.Itoa(cmd.Process.Pid)+")", "already listens on 0.0.0.0:5000", "its image registry at 10.5.0.1:5000", "runtime.mirrors")
}

func TestParseListening(t *testing.T) {
	table := []byte(`  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 12345 1 0000000000000000 100 0 0 10 0
   1: 0100007F:1F91 0100007F:D431 01 00000000:00000000 00:00000000 00000000     0        0 12346 1 0000000000000000 20 4 30 10 -1
`)
	got := parseListening(table)
	if len(got) != 1 || got[0].at != netip.MustParseAddrPort("127.0.0.1:8080") || got[0].inode != "12345" {
		t.Errorf("parsed %+v, want 127.0.0.1:8080 (inode 12345) alone", got)
	}
}

// TestDiskWhy: a host disk under the kubelets' image threshold is
// refused, one near it warned of, naming the share and the threshold.
func TestDiskWhy(t *testing.T) {
	const gib = 1 << 30
	if w, r := diskWhy(100*gib, 200*gib, "/w"); w != "" || r != "" {
		t.Errorf("half free: %q %q", w, r)
	}
	w, r := diskWhy(35*gib, 200*gib, "/w")
	if r != "" || !strings.Contains(w, "/w, which has 17.5% free (35.0 GiB of 200.0 GiB): the kubelets evict pods once it has under 15%") {
		t.Errorf("17.5%% free: %q %q", w, r)
	}
	w, r = diskWhy(20*gib, 200*gib, "/w")
	if w != "" || !strings.Contains(r, "10.0% free") || !strings.Contains(r, "every pod would be evicted") {
		t.Errorf("10%% free: %q %q", w, r)
	}
}

// TestInotifyWhy: machines are refused when the host's inotify
// instances cannot hold them, naming the limit to raise.
func TestInotifyWhy(t *testing.T) {
	if why := inotifyWhy(128, 10, 5); why != "" {
		t.Errorf("5 machines, 118 free: %s", why)
	}
	why := inotifyWhy(128, 20, 7)
	if !strings.Contains(why, "7 machines take about 140 inotify instances, and the host's root may hold 128") || !strings.Contains(why, "sysctl -w fs.inotify.max_user_instances=256") {
		t.Errorf("7 machines, 108 free: %q", why)
	}
	// An instance this test opens is counted.
	before := inotifyInUse()
	fd, err := syscall.InotifyInit()
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	if after := inotifyInUse(); after < before+1 {
		t.Errorf("inotify instances in use: %d, then %d with one more open", before, after)
	}
}
