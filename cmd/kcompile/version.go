package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/kcompile/kcompile/schema"
)

type versionCmd struct{}

func (versionCmd) Run(e *env) error {
	v := "(devel)"
	if info, ok := debug.ReadBuildInfo(); ok && info.Main.Version != "" {
		v = info.Main.Version
	}
	fmt.Fprintf(e.stdout, "kcompile %s (%s)\n", v, runtime.Version())
	for _, s := range schema.Versions() {
		fmt.Fprintf(e.stdout, "schema %s\n", s.APIVersion)
	}
	return nil
}
