package sim

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kcompile/kcompile/fixture"
)

// BenchmarkKWOKBeside boots 5,000 fake nodes with KWOK (kwokctl's binary
// runtime over the Kubernetes v1.37.2 control plane scripts/tools builds,
// the same version the simulation runs), then the same 5,000 workers
// with kcompile sim behind one control-plane node (the first 5,000
// workers of examples/xlarge), then examples/large (5 API servers, 5
// etcd members), one after the other. Each is timed from its start until
// a watch of its Nodes, the same code for all three, sees every node
// Ready; memory is the peak of the resident memory summed over each
// one's processes, sampled alike (KWOK: etcd, the control plane, the
// kwok controller and kwokctl creating the nodes). It reports both
// times, both memories and the ratios the simulation is held to: on the
// same shape at most 0.5× KWOK's time and 1.0× its memory; large at
// most 0.8× KWOK's time. It takes a few minutes and is run on demand
// (README, "Simulating a cluster").
func BenchmarkKWOKBeside(b *testing.B) {
	const nodes = 5000
	bin := make(map[string]string)
	for _, name := range []string{"kwokctl", "kwok", "etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
		p := fixture.Path(".bin/" + name)
		if _, err := os.Stat(p); err != nil {
			b.Fatalf("%s: run scripts/tools first (%v)", p, err)
		}
		bin[name] = p
	}
	xlarge, bundle := compile(b, "xlarge")
	shape := firstWorkers(xlarge, nodes)
	large, _ := compile(b, "large")
	quietKlog(b)
	for b.Loop() {
		kwokTime, kwokPeak := bootKWOK(b, bin, nodes)
		sim := bootSim(b, "xlarge-5000", shape, bundle, watchReady)
		simLarge := bootSim(b, "large", large, bundle, watchReady)
		b.ReportMetric(kwokTime.Seconds(), "kwok-ready-s")
		b.ReportMetric(float64(kwokPeak)/(1<<30), "kwok-peak-GiB")
		b.ReportMetric(sim.ready.Seconds(), "sim-ready-s")
		b.ReportMetric(float64(sim.peak)/(1<<30), "sim-peak-GiB")
		b.ReportMetric(simLarge.ready.Seconds(), "large-ready-s")
		b.ReportMetric(float64(simLarge.peak)/(1<<30), "large-peak-GiB")
		b.ReportMetric(sim.ready.Seconds()/kwokTime.Seconds(), "sim/kwok-time")
		b.ReportMetric(float64(sim.peak)/float64(kwokPeak), "sim/kwok-memory")
		b.ReportMetric(simLarge.ready.Seconds()/kwokTime.Seconds(), "large/kwok-time")
	}
}

// watchReady waits for every pod-running node of a simulation to be
// Ready, as a client of its endpoint counts them.
func watchReady(ctx context.Context, s *Sim) error {
	want := 0
	for _, n := range s.cluster.Nodes {
		if n.RunsPods() {
			want++
		}
	}
	return countReady(ctx, s.AdminConfig(), want)
}

// countReady watches a cluster's Nodes until want of them are Ready. A
// watch without a resource version first lists every Node as added; a
// watch that ends is started again.
func countReady(ctx context.Context, cfg *rest.Config, want int) error {
	cs, err := kubernetes.NewForConfig(protobuf(cfg))
	if err != nil {
		return err
	}
	for {
		w, err := cs.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{})
		if err != nil {
			if ctx.Err() != nil {
				return err
			}
			time.Sleep(100 * time.Millisecond)
			continue
		}
		ready := map[string]bool{}
		count := 0
		for ev := range w.ResultChan() {
			n, ok := ev.Object.(*corev1.Node)
			if !ok {
				continue
			}
			was := ready[n.Name]
			now := ev.Type != watch.Deleted && nodeReady(n)
			ready[n.Name] = now
			switch {
			case now && !was:
				count++
			case was && !now:
				count--
			}
			if count >= want {
				w.Stop()
				return nil
			}
		}
		w.Stop()
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

// bootKWOK creates a KWOK cluster in a temporary work directory (its
// kubeconfig too: the user's is not touched), scales it to nodes fake
// nodes, and deletes it. It returns the time from the start of the
// creation until every node is Ready and the peak memory of its
// processes.
func bootKWOK(b *testing.B, bin map[string]string, nodes int) (time.Duration, uint64) {
	work := b.TempDir()
	const name = "kcompile-bench"
	kwokctl := func(args ...string) *exec.Cmd {
		cmd := exec.Command(bin["kwokctl"], append(args, "--name", name)...)
		cmd.Env = append(os.Environ(), "KWOK_WORKDIR="+work)
		return cmd
	}
	cluster := filepath.Join(work, "clusters", name)
	// The pid of kwokctl scale, which creates the nodes, while it runs.
	var scalePID atomic.Int64
	peak := sampleRSS(func() []int {
		var pids []int
		files, _ := filepath.Glob(filepath.Join(cluster, "pids", "*.pid"))
		for _, f := range files {
			data, _ := os.ReadFile(f)
			if pid, err := strconv.Atoi(strings.TrimSpace(string(data))); err == nil {
				pids = append(pids, pid)
			}
		}
		if pid := scalePID.Load(); pid != 0 {
			pids = append(pids, int(pid))
		}
		return pids
	})
	deleted := false
	defer func() {
		if !deleted {
			// A failed run leaves no process behind either.
			_ = kwokctl("delete", "cluster").Run()
		}
	}()
	start := time.Now()
	create := kwokctl("create", "cluster", "--runtime", "binary", "--kubeconfig", filepath.Join(work, "user.kubeconfig"),
		"--kube-apiserver-binary", bin["kube-apiserver"], "--kube-controller-manager-binary", bin["kube-controller-manager"],
		"--kube-scheduler-binary", bin["kube-scheduler"], "--kwok-controller-binary", bin["kwok"], "--etcd-binary", bin["etcd"])
	if out, err := create.CombinedOutput(); err != nil {
		b.Fatalf("kwokctl create cluster: %v\n%s", err, out)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(cluster, "kubeconfig.yaml"))
	if err != nil {
		b.Fatal(err)
	}
	cfg.QPS, cfg.Burst = 500, 1000
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	counted := make(chan error, 1)
	go func() { counted <- countReady(ctx, cfg, nodes) }()
	scale := kwokctl("scale", "node", "--replicas", strconv.Itoa(nodes))
	var out bytes.Buffer
	scale.Stdout, scale.Stderr = &out, &out
	if err := scale.Start(); err != nil {
		b.Fatal(err)
	}
	scalePID.Store(int64(scale.Process.Pid))
	err = scale.Wait()
	scalePID.Store(0)
	if err != nil {
		b.Fatalf("kwokctl scale node: %v\n%s", err, out.String())
	}
	if err := <-counted; err != nil {
		b.Fatalf("KWOK's nodes Ready: %v", err)
	}
	took := time.Since(start)
	b.Logf("KWOK: %d nodes Ready after %s", nodes, took.Round(time.Millisecond))
	max := peak()
	deleted = true
	if out, err := kwokctl("delete", "cluster").CombinedOutput(); err != nil {
		b.Fatalf("kwokctl delete cluster: %v\n%s", err, out)
	}
	return took, max
}
