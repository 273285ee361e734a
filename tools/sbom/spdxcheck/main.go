// Command spdxcheck reads an SPDX JSON document with the SPDX project's Go
// library (github.com/spdx/tools-golang) and checks that it is a well-formed
// SPDX 2 document that names the given packages, each at the given version:
//
//	spdxcheck FILE [NAME[@VERSION]]...
//
// It prints one line per package found and exits 1 on the first document
// error or with every package missing reported. kcompile's release test
// runs it on the SBOM scripts/release writes.
package main

import (
	"fmt"
	"os"
	"slices"
	"strings"

	spdxjson "github.com/spdx/tools-golang/json"
	"github.com/spdx/tools-golang/spdx"
	"github.com/spdx/tools-golang/spdxlib"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: spdxcheck FILE [NAME[@VERSION]]...")
		os.Exit(2)
	}
	if err := check(os.Args[1], os.Args[2:]); err != nil {
		fmt.Fprintln(os.Stderr, "spdxcheck:", err)
		os.Exit(1)
	}
}

func check(file string, want []string) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	doc, err := spdxjson.Read(f)
	if err != nil {
		return fmt.Errorf("%s: not an SPDX JSON document: %v", file, err)
	}
	var problems []string
	if !strings.HasPrefix(doc.SPDXVersion, "SPDX-2.") {
		problems = append(problems, fmt.Sprintf("spdxVersion is %q, want SPDX-2.x", doc.SPDXVersion))
	}
	if doc.DataLicense != spdx.DataLicense {
		problems = append(problems, fmt.Sprintf("dataLicense is %q, want %s", doc.DataLicense, spdx.DataLicense))
	}
	if doc.DocumentName == "" || doc.DocumentNamespace == "" {
		problems = append(problems, "the document has no name or namespace")
	}
	if doc.CreationInfo == nil || doc.CreationInfo.Created == "" || len(doc.CreationInfo.Creators) == 0 {
		problems = append(problems, "the document has no creation time or creator")
	}
	if err := spdxlib.ValidateDocument(doc); err != nil {
		problems = append(problems, err.Error())
	}
	ids, err := spdxlib.GetDescribedPackageIDs(doc)
	if err != nil || len(ids) == 0 {
		problems = append(problems, fmt.Sprintf("the document describes no package (%v)", err))
	}
	if len(problems) > 0 {
		return fmt.Errorf("%s: %s", file, strings.Join(problems, "; "))
	}
	var described []string
	for _, p := range doc.Packages {
		if slices.Contains(ids, p.PackageSPDXIdentifier) {
			described = append(described, p.PackageName+" "+p.PackageVersion)
		}
	}
	fmt.Printf("%s: %s %q describing %s: %d packages, %d files, %d relationships\n",
		file, doc.SPDXVersion, doc.DocumentName, strings.Join(described, ", "), len(doc.Packages), len(doc.Files), len(doc.Relationships))

	for _, w := range want {
		name, version, _ := strings.Cut(w, "@")
		var versions []string
		found := false
		for _, p := range doc.Packages {
			if p.PackageName != name {
				continue
			}
			versions = append(versions, p.PackageVersion)
			if version == "" || p.PackageVersion == version {
				found = true
				fmt.Printf("%s: package %s %s (%s)\n", file, p.PackageName, p.PackageVersion, p.PackageSPDXIdentifier)
				break
			}
		}
		switch {
		case found:
		case len(versions) > 0:
			problems = append(problems, fmt.Sprintf("package %s is at %s, not %s", name, strings.Join(versions, ", "), version))
		default:
			problems = append(problems, fmt.Sprintf("no package %s", name))
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("%s: %s", file, strings.Join(problems, "; "))
	}
	return nil
}
