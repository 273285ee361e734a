package review

import (
	"crypto/sha256"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/kcompile/kcompile/compiler/pki"
	"github.com/kcompile/kcompile/targets"
)

// SummarySuffix names the text summary written beside every certificate
// of a golden tree, so that a review reads what changed (a SAN, a
// validity) rather than base64.
const SummarySuffix = ".txt"

// goldenFiles are the files a golden directory holds for a tree: the
// tree's files and a summary beside each certificate.
func goldenFiles(tree *targets.Tree) (map[string][]byte, error) {
	out := map[string][]byte{}
	for _, f := range tree.Files() {
		out[f.Path] = f.Data
		if strings.HasSuffix(f.Path, ".crt") {
			s, err := CertSummary(f.Data)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", f.Path, err)
			}
			out[f.Path+SummarySuffix] = s
		}
	}
	return out, nil
}

// CertSummary describes a PEM certificate in a few stable lines.
func CertSummary(data []byte) ([]byte, error) {
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, errors.New("not a PEM certificate")
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, err
	}
	i := pki.Describe("", "", c)
	sum := sha256.Sum256(c.Raw)
	var b strings.Builder
	fmt.Fprintf(&b, "subject: %s\nissuer: %s\n", i.Subject, i.Issuer)
	fmt.Fprintf(&b, "sans: %s\nusages: %s\n", strings.Join(i.SANs, ", "), strings.Join(i.Usages, ", "))
	fmt.Fprintf(&b, "valid: %s to %s\nkey: %s\nca: %v\n", i.NotBefore.Format(time.RFC3339), i.NotAfter.Format(time.RFC3339), i.Algorithm, i.IsCA)
	fmt.Fprintf(&b, "sha256: %x\n", sum)
	return []byte(b.String()), nil
}

// Golden compares a tree with the golden directory dir and returns a
// unified diff of every difference ("" when equal): changed files, files
// missing from the golden directory and stale ones in it. With update it
// rewrites dir to match instead, deleting stale files, and returns "".
func Golden(dir string, tree *targets.Tree, update bool) (string, error) {
	want, err := goldenFiles(tree)
	if err != nil {
		return "", err
	}
	have := map[string]bool{}
	if err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) && p == dir {
			return filepath.SkipAll
		}
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		have[filepath.ToSlash(rel)] = true
		return nil
	}); err != nil {
		return "", err
	}
	if update {
		for p := range have {
			if _, ok := want[p]; !ok {
				if err := os.Remove(filepath.Join(dir, filepath.FromSlash(p))); err != nil {
					return "", err
				}
			}
		}
		for p, data := range want {
			full := filepath.Join(dir, filepath.FromSlash(p))
			if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
				return "", err
			}
			if err := os.WriteFile(full, data, 0o644); err != nil {
				return "", err
			}
		}
		return "", removeEmptyDirs(dir)
	}
	paths := make([]string, 0, len(want)+len(have))
	for p := range want {
		paths = append(paths, p)
	}
	for p := range have {
		if _, ok := want[p]; !ok {
			paths = append(paths, p)
		}
	}
	sort.Strings(paths)
	var out strings.Builder
	for _, p := range paths {
		var old []byte
		if have[p] {
			if old, err = os.ReadFile(filepath.Join(dir, filepath.FromSlash(p))); err != nil {
				return "", err
			}
		}
		oldName, newName := "golden/"+p, "built/"+p
		if !have[p] {
			oldName = "/dev/null"
		}
		if _, ok := want[p]; !ok {
			newName = "/dev/null"
		}
		out.WriteString(Unified(oldName, newName, old, want[p], 3))
	}
	return out.String(), nil
}

// removeEmptyDirs deletes directories left empty by removing stale files.
func removeEmptyDirs(dir string) error {
	var dirs []string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() && p != dir {
			dirs = append(dirs, p)
		}
		return nil
	})
	sort.Sort(sort.Reverse(sort.StringSlice(dirs)))
	for _, d := range dirs {
		if entries, err := os.ReadDir(d); err == nil && len(entries) == 0 {
			if err := os.Remove(d); err != nil {
				return err
			}
		}
	}
	return nil
}
