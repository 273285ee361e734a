package systemd

import (
	"context"
	"fmt"
	"github.com/kcompile/kcompile/layout"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kcompile/kcompile/internal/unitfile"
)

// The end-to-end test runs the control plane of examples/single-node from
// its compiled units: etcd, kube-apiserver, kube-controller-manager and
// kube-scheduler, started from their own ExecStart lines with the real
// binaries (built by scripts/tools into .bin/) and every path rerooted
// into a temporary directory. The node's address is not this machine's,
// so the test runs itself again inside a private network namespace that
// has the address on its loopback interface.

const e2eEnv = "KCOMPILE_E2E_IN_NETNS"

func TestControlPlaneStartsFromUnits(t *testing.T) {
	if os.Getenv(e2eEnv) != "" {
		runControlPlane(t)
		return
	}
	out := inNodeNamespace(t, compileExample(t, "single-node"), "TestControlPlaneStartsFromUnits", e2eEnv, "etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")
	t.Logf("%s", out)
}

func runControlPlane(t *testing.T) {
	c := compileExample(t, "single-node")
	m := testMaterial(t, c)
	top, root := layRerooted(t, m)
	bin := os.Getenv("KCOMPILE_BIN")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var procs []*exec.Cmd
	defer func() {
		cancel()
		for _, p := range procs {
			p.Wait()
		}
	}()
	logs := map[string]string{}
	for _, name := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
		data, err := os.ReadFile(filepath.Join(root, layout.UnitDir, name+".service"))
		if err != nil {
			t.Fatal(err)
		}
		u, err := unitfile.Parse(data)
		if err != nil {
			t.Fatal(err)
		}
		argv := u.Commands("Service", "ExecStart")[0].Argv
		prog, args := filepath.Join(bin, filepath.Base(argv[0])), argv[1:]
		logPath := filepath.Join(top, name+".log")
		logs[name] = logPath
		logf, err := os.Create(logPath)
		if err != nil {
			t.Fatal(err)
		}
		defer logf.Close()
		cmd := exec.CommandContext(ctx, prog, args...)
		cmd.Stdout, cmd.Stderr = logf, logf
		if err := cmd.Start(); err != nil {
			t.Fatalf("starting %s: %v", name, err)
		}
		procs = append(procs, cmd)
	}
	tail := func() string {
		var b strings.Builder
		for name, p := range logs {
			data, _ := os.ReadFile(p)
			lines := strings.Split(string(data), "\n")
			fmt.Fprintf(&b, "== %s\n%s\n", name, strings.Join(lines[max(0, len(lines)-25):], "\n"))
		}
		return b.String()
	}

	// The admin kubeconfig of the cluster tree, as an operator uses it.
	kc, err := os.ReadFile(filepath.Join(top, "out", "cluster", "admin.conf"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(kc)
	if err != nil {
		t.Fatal(err)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(90 * time.Second)
	var lastErr error
	for ready := false; !ready; {
		if time.Now().After(deadline) {
			t.Fatalf("/readyz did not answer ok: %v\n%s", lastErr, tail())
		}
		body, err := client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		ready = err == nil && string(body) == "ok"
		lastErr = fmt.Errorf("%v %s", err, body)
		time.Sleep(500 * time.Millisecond)
	}
	// Bootstrap as kubeadm does: the break-glass super-admin (group
	// system:masters) applies the cluster's RBAC, after which the admin
	// kubeconfig (group kubeadm:cluster-admins) has its rights.
	super, err := os.ReadFile(filepath.Join(top, "out", "cluster", "super-admin.conf"))
	if err != nil {
		t.Fatal(err)
	}
	superCfg, err := clientcmd.RESTConfigFromKubeConfig(super)
	if err != nil {
		t.Fatal(err)
	}
	superClient, err := kubernetes.NewForConfig(superCfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range clusterRBAC() {
		crb := o.(*rbacv1.ClusterRoleBinding)
		if _, err := superClient.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil {
			t.Fatalf("applying %s as super-admin: %v", crb.Name, err)
		}
	}
	for _, lease := range []string{"kube-controller-manager", "kube-scheduler"} {
		for {
			l, err := client.CoordinationV1().Leases("kube-system").Get(ctx, lease, metav1.GetOptions{})
			if err == nil && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "" {
				t.Logf("%s holds its lease: %s", lease, *l.Spec.HolderIdentity)
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s holds no lease: %v\n%s", lease, err, tail())
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
}
