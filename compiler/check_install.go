package compiler

import (
	"fmt"
	"strings"

	"github.com/kcompile/kcompile/compiler/diag"
	"github.com/kcompile/kcompile/compiler/ir"
)

const (
	CodeArtifactShape   = "KC1201"
	CodeBinaryMissing   = "KC1202"
	CodeArtifactUnused  = "KC1203"
	CodeArtifactClash   = "KC1204"
	CodeArtifactsUnused = "KC1205"
)

func installFamily() family {
	return family{name: "install", check: checkInstall, rules: []diag.Rule{
		rule(CodeArtifactShape, diag.Error, "an artifact sets both or neither of path and extract"),
		rule(CodeBinaryMissing, diag.Error, "with source \"download\", a binary a node needs comes from no artifact"),
		rule(CodeArtifactUnused, diag.Warning, "an artifact installs nothing any node needs"),
		rule(CodeArtifactClash, diag.Error, "two artifacts install the same path"),
		rule(CodeArtifactsUnused, diag.Warning, "artifacts are declared but source is \"preinstalled\""),
	}}
}

func checkInstall(m *model) {
	in := m.spec.Install
	provides := map[string]string{} // path -> artifact path in spec
	for _, name := range sortedKeys(in.Artifacts) {
		a := in.Artifacts[name]
		path := "install.artifacts." + quoteLabel(name)
		if (a.Path == "") == (len(a.Extract) == 0) {
			m.report(CodeArtifactShape, path, fmt.Sprintf("artifact %s must set exactly one of path (a binary) and extract (members of a .tar.gz)", name),
				`write path: "`+ir.OSDebian.BinDir()+`/<name>" for a binary, or extract: {"<member>": "<path>"} for an archive`)
			continue
		}
		dests := map[string]string{a.Path: path + ".path"}
		if a.Path == "" {
			dests = map[string]string{}
			for member, dest := range a.Extract {
				dests[dest] = path + ".extract." + quoteLabel(member)
			}
		}
		for _, dest := range sortedKeys(dests) {
			if other, dup := provides[dest]; dup {
				m.report(CodeArtifactClash, dests[dest], fmt.Sprintf("%s is installed by two artifacts", dest),
					"keep one source for each path", other)
				continue
			}
			provides[dest] = dests[dest]
		}
	}
	if in.Source != "download" {
		if len(in.Artifacts) > 0 {
			m.report(CodeArtifactsUnused, "install.artifacts", "artifacts are declared but install.source is \"preinstalled\": they are not used",
				`set install: source: "download", or remove the artifacts`)
		}
		return
	}
	needed := map[string][]string{} // path -> nodes
	flatcar := false
	for _, n := range m.nodes {
		os, _ := osNode(m, n)
		flatcar = flatcar || os == ir.OSFlatcar
		for _, b := range nodeBinaries(&m.spec, irNodeForBinaries(m, n)) {
			if b.OS {
				continue
			}
			needed[b.Path] = append(needed[b.Path], n.name)
		}
	}
	var missing []string
	for _, p := range sortedKeys(needed) {
		if _, ok := provides[p]; !ok {
			missing = append(missing, fmt.Sprintf("%s (%s)", p, summarizeNames(needed[p])))
		}
	}
	binaries := "binaries go to " + ir.OSDebian.BinDir()
	if flatcar {
		binaries = "binaries go to " + ir.OSDebian.BinDir() + ", on Flatcar (whose /usr is read-only) to " + ir.OSFlatcar.BinDir()
	}
	if len(missing) > 0 {
		m.report(CodeBinaryMissing, "install.source", fmt.Sprintf("no artifact installs %s", strings.Join(missing, ", ")),
			"add an artifact with the binary's URL and sha256 for each ("+binaries+"), or use source \"preinstalled\"")
	}
	for _, dest := range sortedKeys(provides) {
		if _, ok := needed[dest]; !ok {
			m.report(CodeArtifactUnused, provides[dest], fmt.Sprintf("%s is installed but no node's components use it", dest),
				"remove it, or check the path: "+binaries+", CNI plugins to /opt/cni/bin")
		}
	}
}

func summarizeNames(names []string) string {
	if len(names) <= 3 {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more nodes", strings.Join(names[:3], ", "), len(names)-3)
}
