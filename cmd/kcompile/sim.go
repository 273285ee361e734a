package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
)

// simCmd runs kcompile-sim, the simulator, with the same arguments: it is
// a binary of its own because it links all of Kubernetes, which nothing
// else of kcompile needs.
type simCmd struct {
	Args []string `arg:"" optional:"" help:"kcompile-sim's arguments: [DIR] -s SECRETS [--workdir DIR] [--until ready] [--timeout D] [--scenario FILE]; kcompile sim --help lists them."`
}

// simBinary is the simulator's command name.
const simBinary = "kcompile-sim"

// installSim says how to get kcompile-sim, from a checkout of kcompile.
const installSim = "go build -C runtimes/sim -o \"$(go env GOPATH)/bin/kcompile-sim\" ./cmd/kcompile-sim"

func (c *simCmd) Run(e *env) error {
	bin, err := findSim()
	if err != nil {
		return statusError{code: exitProblems, msg: fmt.Sprintf("kcompile sim runs %s, which is neither beside kcompile nor on PATH. "+
			"It is built separately because it links all of Kubernetes (about 15 CPU-minutes the first time); from a checkout of kcompile:\n\n    %s\n\nthen run kcompile sim again", simBinary, installSim)}
	}
	// The simulator takes over this process: its exit status, signals
	// (Ctrl-C stops the cluster) and output are kcompile sim's.
	return syscall.Exec(bin, append([]string{simBinary}, c.Args...), os.Environ())
}

// findSim finds kcompile-sim beside the running kcompile, else on PATH.
func findSim() (string, error) {
	if self, err := os.Executable(); err == nil {
		beside := filepath.Join(filepath.Dir(self), simBinary)
		if fi, err := os.Stat(beside); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return beside, nil
		}
	}
	p, err := exec.LookPath(simBinary)
	if errors.Is(err, exec.ErrDot) {
		return "", err
	}
	return p, err
}
