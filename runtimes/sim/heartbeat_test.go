package sim

import (
	"context"
	"runtime"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
)

// TestHeartbeat: a started kubelet renews its Lease every period with no
// goroutine of its own between renewals; started again while running it
// still renews once a period; stopped, it renews no more.
func TestHeartbeat(t *testing.T) {
	cs := fake.NewClientset()
	k := &kubelet{name: "w1", core: cs.CoreV1(), coordination: cs.CoordinationV1(), renewEvery: 50 * time.Millisecond,
		running: map[types.UID]bool{}}
	if err := k.renewLease(context.Background()); err != nil {
		t.Fatal(err)
	}
	renewals := func() int {
		n := 0
		for _, a := range cs.Actions() {
			if a.GetResource().Resource == "leases" && a.GetVerb() == "update" {
				n++
			}
		}
		return n
	}
	before := runtime.NumGoroutine()
	began := time.Now()
	k.start(context.Background())
	k.start(context.Background())
	if k.stopped() {
		t.Fatal("a started kubelet reports stopped")
	}
	if n := runtime.NumGoroutine(); n > before {
		t.Errorf("%d goroutines while waiting, %d before start", n, before)
	}
	time.Sleep(530 * time.Millisecond)
	k.stop()
	got := renewals()
	// One renewal a period, not two (started twice); a loaded machine
	// fires the timers late, so fewer, but not fewer than half: the
	// periods counted are those that passed, not those slept.
	periods := int(time.Since(began) / k.renewEvery)
	if got > periods+1 || got < periods/2 {
		t.Errorf("%d renewals in %d periods", got, periods)
	}
	if !k.stopped() {
		t.Error("a stopped kubelet reports running")
	}
	time.Sleep(200 * time.Millisecond)
	if after := renewals(); after != got {
		t.Errorf("%d renewals after stop", after-got)
	}
}
