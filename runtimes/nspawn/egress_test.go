package nspawn

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/kcompile/kcompile/internal/fixture"
)

// serveChild makes the test binary an HTTP server on an address that
// answers each request with the address it came from, until its stdin
// closes (TestMain): the internet, as egress tests see it.
const serveChild = "KCOMPILE_TEST_SERVE"

func serveUntilEOF(addr string) int {
	l, err := net.Listen("tcp4", addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	go func() {
		_ = http.Serve(l, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprint(w, r.RemoteAddr)
		}))
	}()
	fmt.Println("listening")
	_, _ = io.Copy(io.Discard, os.Stdin)
	l.Close()
	return 0
}

// outside is a network namespace beyond a device of the host's
// (kctest-up, 198.51.100.1/24), where a server on 198.51.100.2:8080
// says who called; it has no route back to anything else, so only a
// masqueraded connection is answered. It is made before the up's leak
// check reads the host and removed after it.
func outside(t *testing.T) (uplink, url string) {
	t.Helper()
	const ns, dev = "kctest-out", "kctest-up"
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	run("ip", "netns", "add", ns)
	t.Cleanup(func() {
		_ = exec.Command("ip", "link", "delete", dev).Run()
		_ = exec.Command("ip", "netns", "delete", ns).Run()
	})
	run("ip", "link", "add", dev, "type", "veth", "peer", "name", "eth0", "netns", ns)
	run("ip", "addr", "add", "198.51.100.1/24", "dev", dev)
	run("ip", "link", "set", dev, "up")
	run("ip", "-n", ns, "addr", "add", "198.51.100.2/24", "dev", "eth0")
	run("ip", "-n", ns, "link", "set", "eth0", "up")
	// The device is the test's: forwarding on it changes nothing of the
	// host's.
	if err := os.WriteFile("/proc/sys/net/ipv4/conf/"+dev+"/forwarding", []byte("1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("ip", "netns", "exec", ns, os.Args[0])
	cmd.Env = append(os.Environ(), serveChild+"=198.51.100.2:8080")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		_ = cmd.Wait()
	})
	if line, _ := bufio.NewReader(stdout).ReadString('\n'); line != "listening\n" {
		t.Fatalf("the server beyond %s did not start: %q", dev, line)
	}
	return dev, "http://198.51.100.2:8080/"
}

// TestEgressRefusesAnUplinkThatDoesNotForward: up --egress changes no
// host-wide setting, so an uplink whose forwarding is off is refused
// with the sysctl that turns it on.
func TestEgressRefusesAnUplinkThatDoesNotForward(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("the egress tests make devices: run them as root (CI does)")
	}
	const dev = "kctest-fw0"
	if out, err := exec.Command("ip", "link", "add", dev, "type", "veth", "peer", "name", "kctest-fw1").CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "link", "delete", dev).Run() })
	c := fixture.Cluster(t, "single-node", nil)
	p, err := newPlan(c, "/w")
	if err != nil {
		t.Fatal(err)
	}
	set := func(v string) {
		if err := os.WriteFile("/proc/sys/net/ipv4/conf/"+dev+"/forwarding", []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	set("0")
	_, why := planEgress(t.Context(), c, p, dev)
	wantOne(t, why, "refusal", "the uplink kctest-fw0 does not forward IPv4", "sysctl -w net.ipv4.conf.kctest-fw0.forwarding=1")
	set("1")
	e, why := planEgress(t.Context(), c, p, dev)
	if len(why) != 0 {
		t.Fatalf("a forwarding uplink: %q", why)
	}
	rules := e.ruleset(p.bridge)
	for _, want := range []string{"table inet " + p.bridge + "-egress", `iifname "` + p.bridge + `" oifname "kctest-fw0" ip saddr { 192.168.50.0/24 } masquerade`} {
		if !strings.Contains(rules, want) {
			t.Errorf("the table does not say %q:\n%s", want, rules)
		}
	}
	_, why = planEgress(t.Context(), c, p, "../../../etc")
	wantOne(t, why, "refusal", `"../../../etc" is not a network device name`)
	_, why = planEgress(t.Context(), c, p, "kctest-none")
	wantOne(t, why, "refusal", "no device kctest-none")
	if err := (Resource{Kind: KindNftTable, Name: "filter"}).valid("/w"); err == nil {
		t.Error("a journal naming the host's own nft table is taken")
	}
}
