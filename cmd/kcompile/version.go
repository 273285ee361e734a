package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/kcompile/kcompile/compiler/diag"
	"github.com/kcompile/kcompile/schema"
)

// Stamped at link time by scripts/release (-X main.releaseVersion=...
// -X main.releaseCommit=...); empty in a `go build` or `go install`, which
// fall back to the build information the Go toolchain embeds.
var (
	releaseVersion string
	releaseCommit  string
)

type versionCmd struct {
	Output string `short:"o" enum:"text,json" default:"text" help:"Output format: text or json."`
}

// versionInfo is what `kcompile version` reports.
type versionInfo struct {
	Version string `json:"version"`
	Commit  string `json:"commit"`
	// Modified is set when the binary was built from a work tree with
	// uncommitted changes (vcs.modified, or a release made --allow-dirty
	// says so in its commit).
	Modified   bool     `json:"modified,omitempty"`
	Go         string   `json:"go"`
	Kubernetes string   `json:"kubernetes"`
	Schemas    []string `json:"schemas"`
}

func (c *versionCmd) Run(e *env) error {
	v := readVersion()
	if c.Output == "json" {
		return diag.EncodeJSON(e.stdout, v)
	}
	// The Go release first: usage.txtar and scripts match "(go1.".
	modified := ""
	if v.Modified {
		modified = ", modified"
	}
	fmt.Fprintf(e.stdout, "kcompile %s (%s, commit %s%s)\n", v.Version, v.Go, v.Commit, modified)
	fmt.Fprintf(e.stdout, "kubernetes %s\n", v.Kubernetes)
	for _, s := range v.Schemas {
		fmt.Fprintf(e.stdout, "schema %s\n", s)
	}
	return nil
}

// version is this binary's version, which build manifests record too: the
// release's when scripts/release stamped it, else the module version the
// toolchain recorded ("(devel)" for a build from a checkout).
func version() string {
	if releaseVersion != "" {
		return releaseVersion
	}
	if info, ok := debug.ReadBuildInfo(); ok && info.Main.Version != "" {
		return info.Main.Version
	}
	return "(devel)"
}

// kubernetesAPIModule is the module of the Kubernetes API types kcompile
// compiles manifests with; its release v0.MINOR.PATCH is Kubernetes
// 1.MINOR.PATCH, the newest release kcompile targets (go.mod pins it).
const kubernetesAPIModule = "k8s.io/api"

func readVersion() versionInfo {
	v := versionInfo{Version: version(), Commit: releaseCommit, Go: runtime.Version(), Kubernetes: "unknown"}
	info, ok := debug.ReadBuildInfo()
	if ok {
		if v.Commit == "" {
			for _, s := range info.Settings {
				switch s.Key {
				case "vcs.revision":
					v.Commit = s.Value
				case "vcs.modified":
					v.Modified = s.Value == "true"
				}
			}
		}
		for _, d := range info.Deps {
			if d.Path != kubernetesAPIModule {
				continue
			}
			if d.Replace != nil {
				d = d.Replace
			}
			if k, ok := kubernetesRelease(d.Version); ok {
				v.Kubernetes = k
			}
		}
	}
	if c, ok := strings.CutSuffix(v.Commit, "-dirty"); ok {
		v.Commit, v.Modified = c, true
	}
	if v.Commit == "" {
		v.Commit = "unknown"
	}
	for _, s := range schema.Versions() {
		v.Schemas = append(v.Schemas, s.APIVersion)
	}
	return v
}

// kubernetesRelease maps a version of Kubernetes' staging modules,
// v0.MINOR.PATCH, to the Kubernetes release 1.MINOR.PATCH it is cut from.
func kubernetesRelease(module string) (string, bool) {
	rest, ok := strings.CutPrefix(module, "v0.")
	if !ok || rest == "" {
		return "", false
	}
	return "1." + rest, true
}
