// Package schema holds the versioned CUE schema of a kcompile cluster
// specification. The files are embedded so the binary never depends on the
// working directory; defaults live here, in CUE, so that `kcompile explain`
// can attribute every effective value either to the user's spec or to a
// line of this schema.
package schema

import (
	"embed"
	"io/fs"
	"sort"
	"strings"
)

//go:embed v1alpha1/*.cue
var files embed.FS

// Version describes one schema version: the apiVersion a spec names and the
// directory of the embedded CUE package that defines #Cluster for it.
type Version struct {
	APIVersion string
	Dir        string
}

// Versions lists every schema version this build understands, oldest first.
func Versions() []Version {
	return []Version{{APIVersion: "kcompile.dev/v1alpha1", Dir: "v1alpha1"}}
}

// Lookup finds the schema version named by apiVersion.
func Lookup(apiVersion string) (Version, bool) {
	for _, v := range Versions() {
		if v.APIVersion == apiVersion {
			return v, true
		}
	}
	return Version{}, false
}

// Files returns the CUE sources of a schema version keyed by their
// repository-relative path (for example "schema/v1alpha1/network.cue"), so
// positions printed to users name a file they can open in this repository.
func Files(v Version) (map[string][]byte, error) {
	entries, err := fs.ReadDir(files, v.Dir)
	if err != nil {
		return nil, err
	}
	out := make(map[string][]byte, len(entries))
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".cue") {
			continue
		}
		b, err := files.ReadFile(v.Dir + "/" + e.Name())
		if err != nil {
			return nil, err
		}
		out["schema/"+v.Dir+"/"+e.Name()] = b
	}
	return out, nil
}

// Names returns the sorted file names of Files, for stable iteration.
func Names(m map[string][]byte) []string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
