package nspawn

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// quorumWatch asks etcd every 250 ms for its members (through the first
// member that answers) and for each member's health, and keeps the
// samples in which the healthy members were not a majority of the
// members etcd listed.
type quorumWatch struct {
	mu      sync.Mutex
	samples int
	lost    []string
	sizes   map[int]bool
	cancel  context.CancelFunc
	done    chan struct{}
}

func watchQuorum(ctx context.Context, e *etcdHealth, clientURLs []string) *quorumWatch {
	ctx, cancel := context.WithCancel(ctx)
	q := &quorumWatch{cancel: cancel, done: make(chan struct{}), sizes: map[int]bool{}}
	go func() {
		defer close(q.done)
		// Each call has a time of its own: a member that hangs is one
		// unhealthy member, not a sample lost.
		call := func(f func(context.Context)) {
			rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
			defer rcancel()
			f(rctx)
		}
		for ctx.Err() == nil {
			var list []etcdMember
			var err error
			for _, u := range clientURLs {
				if call(func(c context.Context) { list, err = e.members(c, u) }); err == nil {
					break
				}
			}
			healthy := 0
			for _, m := range list {
				for _, u := range m.ClientURLs {
					ok := false
					call(func(c context.Context) { ok = e.healthy(c, u) })
					if ok {
						healthy++
						break
					}
				}
			}
			if ctx.Err() != nil {
				break
			}
			q.mu.Lock()
			q.samples++
			q.sizes[len(list)] = true
			if err != nil || healthy <= len(list)/2 {
				q.lost = append(q.lost, fmt.Sprintf("%s: %d of %d members healthy (%v)", time.Now().Format("15:04:05.000"), healthy, len(list), err))
			}
			q.mu.Unlock()
			select {
			case <-ctx.Done():
			case <-time.After(250 * time.Millisecond):
			}
		}
	}()
	return q
}

func (q *quorumWatch) stop() {
	q.cancel()
	<-q.done
}

// growAndShrink changes TestUpApplyVersionHA's highly available cluster
// once upgraded (three control-plane nodes holding the VIP, a worker in
// pool blue as w1 and one in pool green; the spec in dir, its nodes at
// version, the programs of binaries), with apply
// changing machines while the Deployment behind its PodDisruptionBudget
// serves and etcd's quorum is sampled: first to five control-plane
// nodes (etcd 3 -> 5, each member added before its machine boots, joining
// with the membership of its step) and a second worker in pool blue;
// then back to three, cp3 replaced at a new address (member removed,
// then added there), the second worker and cp4, cp5 removed. After each
// change every member is healthy, the cluster's machines, Nodes and
// members are the spec's, nothing of a removed machine stays on the
// host, every kubelet (those of the added machines too) runs version,
// and a second apply finds the nodes' files to be the new build.
func growAndShrink(t *testing.T, e *applyEnv, k *kube, dir, binaries, version string) {
	ctx := context.Background()
	// With the credentials the machines have now (after the rotation,
	// no member trusts the boot's).
	etcd, err := e.c.liveEtcdClient()
	if err != nil {
		t.Fatal(err)
	}
	var urls []string
	for _, last := range []string{"11", "12", "13", "14", "15", "16"} {
		urls = append(urls, "https://10.78.0."+last+":2379")
	}
	cp := func(name, last, zone string) string {
		return fmt.Sprintf("\t\t%s: {address: \"10.78.0.%s\", mac: \"52:54:00:78:00:%s\", zone: %q}\n", name, last, last, zone)
	}
	grown := specDir(t, dir, [][2]string{
		{cp("cp3", "13", "c"), cp("cp3", "13", "c") + cp("cp4", "14", "d") + cp("cp5", "15", "e")},
		{`count: 1, namePattern: "w%d", firstAddress: "10.78.0.21", macs: ["52:54:00:78:00:21"]}`,
			`count: 2, namePattern: "w%d", firstAddress: "10.78.0.21", macs: ["52:54:00:78:00:21", "52:54:00:78:00:22"]}`},
	}, nil)
	shrunk := specDir(t, dir, [][2]string{{cp("cp3", "13", "c"), cp("cp3", "16", "c")}}, nil)

	from := dir
	change := func(name, to string, wantSteps []string, nodes []string, members map[string]string) {
		t.Helper()
		p := e.plan(to)
		var got []string
		for _, s := range steps(p) {
			got = append(got, strings.SplitN(s, " [", 2)[0]+" "+strings.SplitN(strings.SplitN(s, "[", 2)[1], "]", 2)[0])
		}
		if !slices.Equal(got, wantSteps) {
			t.Fatalf("%s: plan %q, want %q", name, got, wantSteps)
		}
		// The members that stay read the new membership's flags only when
		// bootstrapping: nothing restarts them.
		stay := map[string][]string{"cp1": {"etcd.service"}, "cp2": {"etcd.service"}}
		before := e.invocations(stay)
		q := watchQuorum(ctx, etcd, urls)
		client := startSteady(ctx, k, "web", "web")
		log := &stopAt{}
		begin := time.Now()
		err := e.apply(ctx, p, to, log, binaries, false, false)
		client.stop()
		q.stop()
		t.Logf("%s: apply took %s", name, time.Since(begin).Round(time.Second))
		e.detail("%s's apply:\n%s", name, log)
		t.Logf("%s: API through the VIP: %d answered, %d failed, longest wait %s; failures: %q", name, client.ok, client.fail, client.longest.Round(10*time.Millisecond), client.errs)
		t.Logf("%s: etcd sampled %d times, memberships seen %v", name, q.samples, slices.Sorted(maps.Keys(q.sizes)))
		if err != nil {
			t.Fatalf("%s: apply: %v", name, err)
		}
		if len(q.lost) > 0 {
			t.Errorf("%s: etcd without quorum: %q", name, q.lost)
		}
		if r := restarted(before, e.invocations(stay)); len(r) > 0 {
			t.Errorf("%s: apply restarted %v", name, r)
		}
		if len(client.unavailable) > 0 {
			t.Errorf("%s: the Deployment's budget did not hold: %q", name, client.unavailable)
		}
		// The machines, Nodes and members are the spec's.
		var running []string
		for _, n := range e.c.Status(ctx).Nodes {
			if n.State == "running" {
				running = append(running, n.Name)
			}
		}
		slices.Sort(running)
		if !slices.Equal(running, nodes) {
			t.Errorf("%s: machines running %v, want %v", name, running, nodes)
		}
		eventually(t, 2*time.Minute, name+": every Node Ready", func() error {
			var list corev1.NodeList
			if err := k.get(ctx, "/api/v1/nodes", &list); err != nil {
				return err
			}
			var ready []string
			for _, n := range list.Items {
				if !nodeReady(n) {
					return fmt.Errorf("%s not Ready", n.Name)
				}
				if v := n.Status.NodeInfo.KubeletVersion; v != version {
					return fmt.Errorf("%s's kubelet is %s, want %s", n.Name, v, version)
				}
				ready = append(ready, n.Name)
			}
			slices.Sort(ready)
			if !slices.Equal(ready, nodes) {
				return fmt.Errorf("Nodes %v, want %v", ready, nodes)
			}
			return nil
		})
		list, err := etcd.members(ctx, urls[0])
		if err != nil {
			t.Fatal(err)
		}
		got = nil
		for _, m := range list {
			got = append(got, m.Name+"="+strings.Join(m.PeerURLs, ","))
			for _, u := range m.ClientURLs {
				if !etcd.healthy(ctx, u) {
					t.Errorf("%s: member %s is not healthy", name, m.Name)
				}
			}
		}
		slices.Sort(got)
		var want []string
		for n, a := range members {
			want = append(want, n+"=https://"+a+":2380")
		}
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("%s: etcd members %q, want %q", name, got, want)
		}
		again := &stopAt{}
		if err := e.apply(ctx, e.plan(to), to, again, binaries, false, false); err != nil || !strings.Contains(again.String(), "nothing to apply") {
			t.Errorf("%s: a second apply: %v\n%s", name, err, again)
		}
		e.runningIsBuilt(ctx, to, from)
		from = to
	}

	change("grow", grown,
		[]string{"add control-plane cp4", "add control-plane cp5", "add workers w2",
			"node cp1", "node cp2", "node cp3", "node cp4", "node cp5", "addons "},
		[]string{"cp1", "cp2", "cp3", "cp4", "cp5", "g1", "w1", "w2"},
		map[string]string{"cp1": "10.78.0.11", "cp2": "10.78.0.12", "cp3": "10.78.0.13", "cp4": "10.78.0.14", "cp5": "10.78.0.15"})
	change("shrink", shrunk,
		[]string{"remove control-plane cp3", "add control-plane cp3", "remove workers w2", "remove control-plane cp4", "remove control-plane cp5",
			"node cp1", "node cp2", "node cp3", "addons "},
		[]string{"cp1", "cp2", "cp3", "g1", "w1"},
		map[string]string{"cp1": "10.78.0.11", "cp2": "10.78.0.12", "cp3": "10.78.0.16"})

	// Nothing of the removed machines stays: no namespace, link,
	// directory or cgroup, and the journal names none of them.
	st, err := ReadState(e.work)
	if err != nil {
		t.Fatal(err)
	}
	for _, gone := range []string{"cp4", "cp5", "w2"} {
		if netnsExists(e.c.p.bridge + "-" + gone) {
			t.Errorf("the namespace of %s stays", gone)
		}
		if _, err := os.Stat(filepath.Join(e.work, "machines", gone)); !os.IsNotExist(err) {
			t.Errorf("the machine directory of %s stays: %v", gone, err)
		}
		if _, err := os.Stat(nodeTreeDir(e.work, gone)); !os.IsNotExist(err) {
			t.Errorf("the tree of %s stays: %v", gone, err)
		}
		for _, dir := range machineCgroups(e.c.adjust.cgroups, e.c.p.bridge, gone) {
			if _, err := os.Stat(dir); !os.IsNotExist(err) {
				t.Errorf("the cgroup %s stays: %v", dir, err)
			}
		}
		for _, r := range st.Resources {
			if strings.HasSuffix(r.Name, "/"+gone) || strings.HasSuffix(r.Name, "-"+gone) || r.Name == gone {
				t.Errorf("the journal still names %s: %+v", gone, r)
			}
		}
	}
	var links int
	for _, r := range st.Resources {
		if r.Kind == KindLink && r.Name != e.c.p.bridge {
			links++
		}
	}
	if links != 5 {
		t.Errorf("the journal lists %d machine links, want 5", links)
	}
	if holder := e.c.Status(ctx).VIPHolder; !slices.Contains([]string{"cp1", "cp2", "cp3"}, holder) {
		t.Errorf("the VIP is held by %q", holder)
	}
	if !k.ready(ctx) {
		t.Error("the API does not answer through the VIP")
	}
}
