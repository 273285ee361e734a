package sim

import (
	"fmt"
	"testing"
)

// TestBalancerKeepsClients: a named client (a simulated kubelet) gets the
// same healthy backend at every connection, the fleet is spread over
// every backend, a client whose backend is down gets another healthy one
// and its own again once it is back; unnamed clients take turns.
func TestBalancerKeepsClients(t *testing.T) {
	backends := []string{"a:6443", "b:6443", "c:6443", "d:6443", "e:6443"}
	b := &balancer{backends: backends, healthy: map[string]bool{}}
	for _, be := range backends {
		b.healthy[be] = true
	}
	pick := func(client string) string {
		t.Helper()
		be, err := b.pickExcept(map[string]bool{}, client)
		if err != nil {
			t.Fatal(err)
		}
		return be
	}
	own := map[string]string{}
	used := map[string]int{}
	for i := range 500 {
		name := fmt.Sprintf("node-%04d", i)
		own[name] = pick(name)
		used[own[name]]++
	}
	for _, be := range backends {
		if used[be] < 50 {
			t.Errorf("%s serves %d of 500 clients: the fleet is not spread (%v)", be, used[be], used)
		}
	}
	for name, be := range own {
		for range 3 {
			if got := pick(name); got != be {
				t.Fatalf("%s went to %s, then to %s", name, be, got)
			}
		}
	}

	name := "node-0007"
	down := own[name]
	b.healthy[down] = false
	other := pick(name)
	if other == down || !b.healthy[other] {
		t.Errorf("with %s down, %s went to %s", down, name, other)
	}
	b.healthy[down] = true
	if got := pick(name); got != down {
		t.Errorf("with %s back, %s went to %s", down, name, got)
	}

	seen := map[string]bool{}
	for range backends {
		seen[pick("")] = true
	}
	if len(seen) != len(backends) {
		t.Errorf("unnamed clients took %d of %d backends in turn", len(seen), len(backends))
	}
	for _, be := range backends {
		b.healthy[be] = false
	}
	if _, err := b.pickExcept(map[string]bool{}, name); err == nil {
		t.Error("a backend was picked with none healthy")
	}
}
