// Command pause is a stand-in for the program of the Kubernetes sandbox
// image (registry.k8s.io/pause): upstream's is C (build/pause/linux/pause.c
// in kubernetes), which the Go module proxy cannot serve, and no registry
// is reachable from the machines of kcompile up. It does what upstream's
// does: as PID 1 of a pod's sandbox it holds the pod's namespaces open,
// reaps the orphans a shared PID namespace hands it, and exits 0 at once
// on SIGINT or SIGTERM.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-v" {
		fmt.Println("pause (kcompile stand-in)")
		return
	}
	if os.Getpid() != 1 {
		fmt.Fprintln(os.Stderr, "Warning: pause should be the first process")
	}
	os.Exit(wait(notify()))
}

// notify subscribes to the signals pause acts on.
func notify() <-chan os.Signal {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	return sigs
}

// wait reaps children until SIGINT or SIGTERM, then gives the exit status.
func wait(sigs <-chan os.Signal) int {
	for s := range sigs {
		if s != syscall.SIGCHLD {
			return 0
		}
		for {
			pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
	return 0
}
