package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/containernetworking/cni/pkg/skel"
)

// TestMain plays the bridge plugin when the plugin under test delegates
// to it: this test binary, linked into CNI_PATH as "bridge", records the
// configuration and command it was given and answers ADD with an address.
func TestMain(m *testing.M) {
	if filepath.Base(os.Args[0]) == "bridge" {
		os.Exit(fakeBridge())
	}
	os.Exit(m.Run())
}

func fakeBridge() int {
	conf, err := io.ReadAll(os.Stdin)
	if err != nil {
		return 1
	}
	dir := filepath.Dir(os.Args[0])
	cmd := os.Getenv("CNI_COMMAND")
	if err := os.WriteFile(filepath.Join(dir, "bridge-"+cmd+".json"), conf, 0o600); err != nil {
		return 1
	}
	if os.Getenv("FAKE_BRIDGE_FAIL") == "1" {
		fmt.Println(`{"cniVersion": "1.0.0", "code": 11, "msg": "bridge failed"}`)
		return 1
	}
	if cmd == "ADD" {
		fmt.Println(`{"cniVersion": "1.0.0", "interfaces": [{"name": "eth0"}], "ips": [{"address": "10.244.3.2/24", "gateway": "10.244.3.1", "interface": 0}]}`)
	}
	return 0
}

// plugin sets up a CNI_PATH holding the fake bridge, a subnet file and a
// data directory, and returns the directory and the plugin's
// configuration as the node's 10-flannel.conflist gives it (libcni adds
// name and cniVersion).
func plugin(t *testing.T, subnetEnv string) (string, []byte) {
	t.Helper()
	dir := t.TempDir()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(self, filepath.Join(dir, "bridge")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "subnet.env"), []byte(subnetEnv), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("CNI_PATH", dir)
	t.Setenv("CNI_CONTAINERID", "c1")
	t.Setenv("CNI_NETNS", "/var/run/netns/c1")
	t.Setenv("CNI_IFNAME", "eth0")
	conf, err := json.Marshal(map[string]any{
		"cniVersion": "1.0.0", "name": "cbr0", "type": "flannel",
		"delegate":   map[string]any{"hairpinMode": true, "isDefaultGateway": true},
		"subnetFile": filepath.Join(dir, "subnet.env"),
		"dataDir":    filepath.Join(dir, "data"),
	})
	if err != nil {
		t.Fatal(err)
	}
	return dir, conf
}

const subnetEnvV4 = "FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.3.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n"

func readJSON(t *testing.T, file string) map[string]any {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// TestAddDelegatesToBridge: ADD hands the bridge plugin the conflist's
// delegate settings completed from subnet.env, as upstream's plugin does,
// and keeps them for DEL, which delegates them again and forgets them.
func TestAddDelegatesToBridge(t *testing.T) {
	dir, conf := plugin(t, subnetEnvV4)
	args := &skel.CmdArgs{ContainerID: "c1", Netns: "/var/run/netns/c1", IfName: "eth0", StdinData: conf}
	stdout := os.Stdout
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	os.Stdout = w
	err = add(args)
	os.Stdout = stdout
	w.Close()
	printed, _ := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	var result map[string]any
	if err := json.Unmarshal(printed, &result); err != nil || result["ips"] == nil {
		t.Fatalf("ADD printed %q (%v), not the bridge's result", printed, err)
	}

	want := map[string]any{
		"cniVersion": "1.0.0", "name": "cbr0", "type": "bridge",
		"hairpinMode": true, "isDefaultGateway": true, "isGateway": true,
		// flanneld masquerades (FLANNEL_IPMASQ=true), so the bridge does not.
		"ipMasq": false, "mtu": float64(1450),
		"ipam": map[string]any{
			"type":   "host-local",
			"ranges": []any{[]any{map[string]any{"subnet": "10.244.3.0/24"}}},
			"routes": []any{map[string]any{"dst": "10.244.0.0/16"}},
		},
	}
	got := readJSON(t, filepath.Join(dir, "bridge-ADD.json"))
	if !reflect.DeepEqual(got, want) {
		t.Errorf("the bridge got\n%v\nwant\n%v", got, want)
	}
	kept := filepath.Join(dir, "data", "c1")
	if !reflect.DeepEqual(readJSON(t, kept), want) {
		t.Error("ADD did not keep what it delegated")
	}

	if err := check(args); err != nil {
		t.Errorf("CHECK: %v", err)
	}
	t.Setenv("FAKE_BRIDGE_FAIL", "1")
	if err := del(args); err == nil {
		t.Error("DEL succeeded though the bridge failed")
	}
	if _, err := os.Stat(kept); err != nil {
		t.Error("a failed DEL forgot the configuration")
	}
	t.Setenv("FAKE_BRIDGE_FAIL", "")
	if err := del(args); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(readJSON(t, filepath.Join(dir, "bridge-DEL.json")), want) {
		t.Error("DEL delegated another configuration than ADD")
	}
	if _, err := os.Stat(kept); !os.IsNotExist(err) {
		t.Error("DEL kept the configuration")
	}
	// A second DEL has nothing to do and succeeds, as the spec asks.
	if err := del(args); err != nil {
		t.Errorf("second DEL: %v", err)
	}
}

// TestDualStackAndSettings: both families become ranges and routes; the
// delegate's own settings win over flannel's; IPAM settings are kept.
func TestDualStackAndSettings(t *testing.T) {
	n := &netConf{
		Delegate: map[string]any{"type": "bridge", "mtu": 1300, "ipMasq": true, "isGateway": false},
		IPAM:     map[string]any{"routes": []any{map[string]any{"dst": "192.168.0.0/16"}}},
	}
	n.Name = "cbr0"
	se, err := loadSubnetEnv(writeEnv(t, "FLANNEL_NETWORK=10.244.0.0/16,10.245.0.0/16\nFLANNEL_SUBNET=10.244.3.1/24\n"+
		"FLANNEL_IPV6_NETWORK=fd00::/56\nFLANNEL_IPV6_SUBNET=fd00:0:0:3::1/64\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=false\n"))
	if err != nil {
		t.Fatal(err)
	}
	d, err := delegateConf(n, se)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(d)
	var got map[string]any
	_ = json.Unmarshal(b, &got)
	want := map[string]any{
		"name": "cbr0", "type": "bridge", "mtu": float64(1300), "ipMasq": true, "isGateway": false,
		"ipam": map[string]any{
			"type": "host-local",
			"ranges": []any{
				[]any{map[string]any{"subnet": "10.244.3.0/24"}},
				[]any{map[string]any{"subnet": "fd00:0:0:3::/64"}},
			},
			"routes": []any{
				map[string]any{"dst": "192.168.0.0/16"}, map[string]any{"dst": "10.244.0.0/16"},
				map[string]any{"dst": "10.245.0.0/16"}, map[string]any{"dst": "fd00::/56"},
			},
		},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("delegate\n%v\nwant\n%v", got, want)
	}
}

func writeEnv(t *testing.T, data string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "subnet.env")
	if err := os.WriteFile(f, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}

// TestRefuses: an incomplete subnet file, and delegate settings flannel
// owns, are errors, as upstream has them.
func TestRefuses(t *testing.T) {
	if _, err := loadSubnetEnv(writeEnv(t, "FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.3.1/24\n")); err == nil {
		t.Error("a subnet file without MTU and IPMASQ loaded")
	}
	if _, err := loadSubnetEnv(writeEnv(t, "FLANNEL_SUBNET=nonsense\n")); err == nil {
		t.Error("a malformed subnet loaded")
	}
	if _, err := loadSubnetEnv(filepath.Join(t.TempDir(), "absent")); err == nil {
		t.Error("an absent subnet file loaded")
	}
	se, err := loadSubnetEnv(writeEnv(t, subnetEnvV4))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []map[string]any{{"name": "x"}, {"ipam": map[string]any{}}, {"type": 7}} {
		if _, err := delegateConf(&netConf{Delegate: d}, se); err == nil {
			t.Errorf("delegate %v accepted", d)
		}
	}
}
