package sim

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
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

	"github.com/kcompile/kcompile/internal/fixture"
)

// BenchmarkKWOKBeside boots 5,000 fake nodes with KWOK (kwokctl's binary
// runtime over the Kubernetes v1.37.2 control plane scripts/tools builds,
// the same version the simulation runs), then the same 5,000 workers
// with kcompile sim behind one control-plane node (the first 5,000
// workers of examples/xlarge), then examples/large (5 API servers, 5
// etcd members), one after the other, each simulation in a process of its
// own (childBench). Each is timed from its start until
// a watch of its Nodes, the same code for all three, sees every node
// Ready; memory is the peak of the resident memory summed over each
// one's processes, sampled alike (KWOK: etcd, the control plane, the
// kwok controller and kwokctl creating the nodes). It reports both
// times, both memories and the ratios the simulation is held to: on the
// same shape at most 0.5× KWOK's time and 1.0× its memory; large at
// most 0.8× KWOK's time. It takes a few minutes and is run on demand
// (docs/simulation.md, "The benchmarks").
func BenchmarkKWOKBeside(b *testing.B) {
	const nodes = 5000
	bin := kwokBinaries(b)
	for b.Loop() {
		kwok := bootKWOK(b, bin, nodes)
		reportBeside(b, "sim", kwok, childBench(b, "^BenchmarkSimBootOneControlPlane$/^workers=5000$"))
		reportBeside(b, "large", kwok, childBench(b, "^BenchmarkSimBootLarge$"))
	}
}

// BenchmarkKWOKBesideXLarge boots 10,000 fake nodes with KWOK, then
// examples/xlarge (the same number of workers behind one control-plane
// node) with kcompile sim in a process of its own, timed and measured
// as BenchmarkKWOKBeside does. It reports both and the ratios. It takes
// about five minutes and is run on demand (docs/simulation.md, "The
// benchmarks").
func BenchmarkKWOKBesideXLarge(b *testing.B) {
	const nodes = 10000
	bin := kwokBinaries(b)
	for b.Loop() {
		reportBeside(b, "sim", bootKWOK(b, bin, nodes), childBench(b, "^BenchmarkSimBootXLarge$"))
	}
}

// reportBeside reports KWOK's time and memory, a simulation's under its
// name and the simulation's ratios to KWOK.
func reportBeside(b *testing.B, name string, kwok, sim simRun) {
	b.ReportMetric(kwok.ready.Seconds(), "kwok-ready-s")
	b.ReportMetric(float64(kwok.peak)/(1<<30), "kwok-peak-GiB")
	b.ReportMetric(sim.ready.Seconds(), name+"-ready-s")
	b.ReportMetric(float64(sim.peak)/(1<<30), name+"-peak-GiB")
	b.ReportMetric(sim.ready.Seconds()/kwok.ready.Seconds(), name+"/kwok-time")
	b.ReportMetric(float64(sim.peak)/float64(kwok.peak), name+"/kwok-memory")
}

// kwokBinaries are the programs a KWOK cluster runs, as scripts/tools
// builds them.
func kwokBinaries(b *testing.B) map[string]string {
	bin := make(map[string]string)
	for _, name := range []string{"kwokctl", "kwok", "etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
		p := fixture.Path(".bin/" + name)
		if _, err := os.Stat(p); err != nil {
			b.Fatalf("%s: run scripts/tools first (%v)", p, err)
		}
		bin[name] = p
	}
	return bin
}

// childBench runs one of the simulation's boot benchmarks in a process
// of its own (this test binary again, counting Ready nodes with the watch
// KWOK's are counted with) and reads its time to Ready and peak memory.
// Each simulation so starts from a fresh process, as KWOK's processes
// do: in one process the second would run beside what the components of
// the first leave behind (work queues, caches), which measured 10–20 s
// slower and 0.5 GiB heavier on examples/large.
func childBench(b *testing.B, pattern string) simRun {
	b.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$", "-test.bench="+pattern, "-test.benchtime=1x", "-test.timeout=20m")
	cmd.Env = append(os.Environ(), readyByWatch+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		b.Fatalf("%s: %v\n%s", pattern, err, out)
	}
	metric := func(unit string) float64 {
		m := regexp.MustCompile(`\s([0-9.]+) ` + regexp.QuoteMeta(unit) + `(\s|$)`).FindSubmatch(out)
		if m == nil {
			b.Fatalf("%s reported no %s:\n%s", pattern, unit, out)
		}
		v, err := strconv.ParseFloat(string(m[1]), 64)
		if err != nil {
			b.Fatal(err)
		}
		return v
	}
	return simRun{ready: time.Duration(metric("ready-s/op") * float64(time.Second)), peak: uint64(metric("peak-GiB") * (1 << 30))}
}

// readyByWatch set in a boot benchmark's environment makes it count Ready
// nodes as BenchmarkKWOKBeside counts KWOK's (watchReady) instead of with
// the simulation's own Node cache.
const readyByWatch = "KCOMPILE_SIM_READY_BY_WATCH"

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
func bootKWOK(b *testing.B, bin map[string]string, nodes int) simRun {
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
	return simRun{ready: took, peak: max}
}
