package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/kcompile/kcompile/schema"
)

type versionCmd struct{}

func (versionCmd) Run(e *env) error {
	fmt.Fprintf(e.stdout, "kcompile %s (%s)\n", version(), runtime.Version())
	for _, s := range schema.Versions() {
		fmt.Fprintf(e.stdout, "schema %s\n", s.APIVersion)
	}
	return nil
}

// version is this binary's module version, which build manifests record
// too.
func version() string {
	if info, ok := debug.ReadBuildInfo(); ok && info.Main.Version != "" {
		return info.Main.Version
	}
	return "(devel)"
}
