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
	"github.com/kcompile/kcompile/internal/writer"
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

// Golden compares a tree with the golden directory dir and returns the
// report of kcompile diff --golden as text ("" when equal): changed files,
// files missing from the golden directory and stale ones in it. With
// update it rewrites dir to match instead, deleting stale files, and
// returns "".
func Golden(dir string, tree *targets.Tree, update bool) (string, error) {
	want, err := WithSummaries(tree)
	if err != nil {
		return "", err
	}
	have, err := ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		have, err = targets.NewTree(), nil
	}
	if err != nil {
		return "", err
	}
	if update {
		for _, f := range have.Files() {
			if _, ok := want.Get(f.Path); !ok {
				if err := os.Remove(filepath.Join(dir, filepath.FromSlash(f.Path))); err != nil {
					return "", err
				}
			}
		}
		for _, f := range want.Files() {
			full := filepath.Join(dir, filepath.FromSlash(f.Path))
			if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
				return "", err
			}
			if err := os.WriteFile(full, f.Data, 0o644); err != nil {
				return "", err
			}
		}
		return "", removeEmptyDirs(dir)
	}
	r := Compare(Side{Label: "golden", Tree: have}, Side{Label: "built", Tree: want}, Options{IgnoreModes: true})
	if r.Equal() {
		return "", nil
	}
	var b strings.Builder
	if err := r.WriteText(&b, false); err != nil {
		return "", err
	}
	return b.String(), nil
}

// WithSummaries is a tree with a text summary beside every certificate,
// as golden directories hold it.
func WithSummaries(tree *targets.Tree) (*targets.Tree, error) {
	files, err := goldenFiles(tree)
	if err != nil {
		return nil, err
	}
	out := targets.NewTree()
	for _, f := range tree.Files() {
		if err := out.Add(f.Path, f.Data, f.Mode); err != nil {
			return nil, err
		}
	}
	for p, data := range files {
		if _, ok := out.Get(p); !ok {
			if err := out.Add(p, data, 0o644); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// ReadDir reads a directory written by a target (or a golden directory)
// back into a tree, with the files' modes. Symbolic links and other
// special files are refused: trees hold regular files only. The manifest
// at the root is the writer's record, not part of the tree.
func ReadDir(dir string) (*targets.Tree, error) {
	if _, err := os.Stat(dir); err != nil {
		return nil, err
	}
	tree := targets.NewTree()
	manifest := filepath.Join(dir, writer.ManifestName)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || p == manifest {
			return err
		}
		if !d.Type().IsRegular() {
			return fmt.Errorf("%s is not a regular file", p)
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		return tree.Add(filepath.ToSlash(rel), data, info.Mode().Perm())
	})
	if err != nil {
		return nil, err
	}
	return tree, nil
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
