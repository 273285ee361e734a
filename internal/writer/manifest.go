package writer

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/kcompile/kcompile/targets"
)

// ManifestName is the file Write puts at the root of every tree it
// writes: the record of what kcompile wrote there, so that a later build
// replaces only a tree that is provably its own and unchanged. It is not
// part of the targets.Tree, so golden files and diffs never see it.
const ManifestName = ".kcompile-manifest.json"

// manifestMode keeps the manifest private: it holds digests of private
// keys.
const manifestMode fs.FileMode = 0o600

type manifest struct {
	Version string         `json:"kcompileVersion"`
	Files   []manifestFile `json:"files"`
	// MAC binds the rest to the secrets bundle: "hmac-sha256:" and the
	// hex HMAC-SHA256 of manifestMAC's canonical form under the bundle's
	// manifest key. It is absent when the writer had no key.
	MAC string `json:"mac,omitempty"`
}

type manifestFile struct {
	Path   string `json:"path"`
	SHA256 string `json:"sha256"`
	// Mode is octal ("0600"): JSON has no octal numbers, and 384 reads
	// as nothing.
	Mode string `json:"mode"`
}

// macPrefix names the MAC's algorithm in the manifest.
const macPrefix = "hmac-sha256:"

// encodeManifest records files, which are sorted, one per line so that
// two manifests diff well, and with a key their MAC on the last line.
func encodeManifest(version string, files []targets.File, key []byte) []byte {
	m := manifest{Version: version, Files: make([]manifestFile, len(files))}
	for i, f := range files {
		sum := sha256.Sum256(f.Data)
		m.Files[i] = manifestFile{Path: f.Path, SHA256: hex.EncodeToString(sum[:]), Mode: fmt.Sprintf("%04o", f.Mode.Perm())}
	}
	var b bytes.Buffer
	v, _ := json.Marshal(m.Version)
	fmt.Fprintf(&b, "{\"kcompileVersion\":%s,\"files\":[", v)
	for i, f := range m.Files {
		if i > 0 {
			b.WriteByte(',')
		}
		e, _ := json.Marshal(f)
		b.WriteString("\n")
		b.Write(e)
	}
	if key == nil {
		b.WriteString("\n]}\n")
		return b.Bytes()
	}
	fmt.Fprintf(&b, "\n],\"mac\":\"%s%x\"}\n", macPrefix, manifestMAC(key, &m))
	return b.Bytes()
}

// manifestMAC is the HMAC-SHA256 under key of m's version and files, in
// their order, each field length-prefixed so that no two manifests share
// a canonical form. It does not depend on how the JSON is spelled.
func manifestMAC(key []byte, m *manifest) []byte {
	h := hmac.New(sha256.New, key)
	field := func(s string) {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	field("kcompile manifest v1")
	field(m.Version)
	field(strconv.Itoa(len(m.Files)))
	for _, f := range m.Files {
		field(f.Path)
		field(f.SHA256)
		field(f.Mode)
	}
	return h.Sum(nil)
}

// verifies says whether m carries a MAC made with key.
func (m *manifest) verifies(key []byte) bool {
	hexMAC, ok := strings.CutPrefix(m.MAC, macPrefix)
	if !ok {
		return false
	}
	got, err := hex.DecodeString(hexMAC)
	return err == nil && hmac.Equal(got, manifestMAC(key, m))
}

// ForeignError refuses to replace Dir: kcompile cannot prove it wrote
// what is there, or it changed since.
type ForeignError struct {
	Dir string
	// What says why, after the directory's name: "is a symbolic link, not
	// a tree kcompile wrote", "changed since kcompile wrote it".
	What string
	// Paths are the entries that are not as kcompile wrote them, relative
	// to Dir and sorted.
	Paths []Finding
}

// Finding is one path of a ForeignError.
type Finding struct {
	Path string
	// Problem is "changed", "missing", "unexpected directory"...; empty
	// when the whole directory is foreign.
	Problem string
}

// maxListed keeps a refusal over /etc readable.
const maxListed = 10

func (e *ForeignError) Error() string {
	var b strings.Builder
	b.WriteString(e.Dir + " " + e.What)
	for i, f := range e.Paths {
		if i == maxListed {
			fmt.Fprintf(&b, ", and %d more", len(e.Paths)-i)
			break
		}
		if i == 0 {
			b.WriteString(": ")
		} else {
			b.WriteString(", ")
		}
		b.WriteString(f.Path)
		if f.Problem != "" {
			b.WriteString(" (" + f.Problem + ")")
		}
	}
	return b.String()
}

// inspect reports whether something is at dir and, as a *ForeignError,
// whether it is not kcompile's to replace. Ours is an empty directory or
// one holding exactly what its manifest lists: every file regular with
// its digest and mode, and nothing else. With a key the manifest must
// also carry a MAC made with it: a manifest anyone can edit proves
// nothing, as it can be made to list what a user changed. Without a key
// the manifest is trusted as written.
func inspect(dir string, key []byte) (exists bool, err error) {
	fi, err := os.Lstat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if !fi.IsDir() {
		return true, &ForeignError{Dir: dir, What: "is a " + kind(fi.Mode()) + ", not a tree kcompile wrote"}
	}
	m, err := readManifest(dir)
	if errors.Is(err, fs.ErrNotExist) {
		entries, err := os.ReadDir(dir)
		if err != nil || len(entries) == 0 {
			return true, err
		}
		fe := &ForeignError{Dir: dir, What: "holds files kcompile did not write (it has no " + ManifestName + ")"}
		for _, e := range entries {
			fe.Paths = append(fe.Paths, Finding{Path: e.Name()})
		}
		return true, fe
	}
	if err != nil {
		return true, &ForeignError{Dir: dir, What: "has a " + ManifestName + " kcompile cannot read (" + err.Error() + ")"}
	}
	// Before any file is hashed: what the manifest says counts only once
	// it is proven.
	if key != nil && m.MAC == "" {
		return true, &ForeignError{Dir: dir, What: "has a " + ManifestName + " without a MAC, so kcompile cannot prove it wrote the tree (an older kcompile wrote it, or it was edited)"}
	}
	if key != nil && !m.verifies(key) {
		return true, &ForeignError{Dir: dir, What: "has a " + ManifestName + " that does not verify with this secrets bundle (it was edited, or written with another bundle)"}
	}
	findings, err := check(dir, m)
	if err != nil {
		return true, err
	}
	if len(findings) > 0 {
		return true, &ForeignError{Dir: dir, What: "changed since kcompile wrote it", Paths: findings}
	}
	return true, nil
}

func readManifest(dir string) (*manifest, error) {
	p := filepath.Join(dir, ManifestName)
	fi, err := os.Lstat(p)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("it is a %s", kind(fi.Mode()))
	}
	data, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	var m manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, errors.New("not valid JSON")
	}
	return &m, nil
}

// check compares dir with its manifest. It walks the disk and looks the
// entries up in the manifest, never the other way round, so a path in a
// forged manifest is never opened.
func check(dir string, m *manifest) ([]Finding, error) {
	listed := make(map[string]manifestFile, len(m.Files))
	implied := map[string]bool{}
	for _, f := range m.Files {
		listed[f.Path] = f
		for d := path.Dir(f.Path); d != "." && d != "/" && !implied[d]; d = path.Dir(d) {
			implied[d] = true
		}
	}
	var findings []Finding
	var regular []string
	seen := make(map[string]bool, len(m.Files))
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "." || rel == ManifestName {
			return err
		}
		rel = filepath.ToSlash(rel)
		_, isListed := listed[rel]
		seen[rel] = isListed
		switch {
		case d.IsDir() && implied[rel]:
		case d.Type().IsRegular() && isListed:
			regular = append(regular, rel)
		case isListed:
			findings = append(findings, Finding{Path: rel, Problem: "now a " + kind(d.Type())})
		case d.Type().IsRegular():
			findings = append(findings, Finding{Path: rel, Problem: "unexpected"})
		default:
			findings = append(findings, Finding{Path: rel, Problem: "unexpected " + kind(d.Type())})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for p := range listed {
		if !seen[p] {
			findings = append(findings, Finding{Path: p, Problem: "missing"})
		}
	}
	hashed, err := compareFiles(dir, regular, listed)
	if err != nil {
		return nil, err
	}
	findings = append(findings, hashed...)
	sort.Slice(findings, func(i, j int) bool { return findings[i].Path < findings[j].Path })
	return findings, nil
}

// compareFiles hashes the files over GOMAXPROCS workers: a large cluster
// writes some 90,000 of them, and one core hashing them in turn would make
// every rebuild wait.
func compareFiles(dir string, rels []string, listed map[string]manifestFile) ([]Finding, error) {
	problems := make([]string, len(rels))
	errs := make([]error, len(rels))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			buf := make([]byte, 64<<10)
			for {
				i := int(next.Add(1) - 1)
				if i >= len(rels) {
					return
				}
				problems[i], errs[i] = compareFile(filepath.Join(dir, filepath.FromSlash(rels[i])), listed[rels[i]], buf)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	var findings []Finding
	for i, p := range problems {
		if p != "" {
			findings = append(findings, Finding{Path: rels[i], Problem: p})
		}
	}
	return findings, nil
}

// compareFile says how the file at p differs from its manifest entry, or
// "" when it does not.
func compareFile(p string, want manifestFile, buf []byte) (string, error) {
	mode, err := strconv.ParseUint(want.Mode, 8, 32)
	if err != nil {
		return "changed", nil
	}
	f, err := os.Open(p)
	if errors.Is(err, fs.ErrNotExist) {
		return "missing", nil
	}
	if err != nil {
		return "", err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", err
	}
	h := sha256.New()
	// Hiding File.WriteTo makes the copy use buf rather than allocate.
	if _, err := io.CopyBuffer(h, struct{ io.Reader }{f}, buf); err != nil {
		return "", err
	}
	switch {
	case hex.EncodeToString(h.Sum(nil)) != want.SHA256:
		return "changed", nil
	case fi.Mode().Perm() != fs.FileMode(mode):
		return fmt.Sprintf("mode %04o, written %s", fi.Mode().Perm(), want.Mode), nil
	case fi.Mode() != fs.FileMode(mode):
		return fmt.Sprintf("mode %v, written %s", fi.Mode(), want.Mode), nil
	}
	return "", nil
}

// kind names a file type for a message.
func kind(m fs.FileMode) string {
	switch {
	case m.IsRegular():
		return "regular file"
	case m.IsDir():
		return "directory"
	case m&fs.ModeSymlink != 0:
		return "symbolic link"
	case m&fs.ModeNamedPipe != 0:
		return "named pipe"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeDevice != 0:
		return "device"
	}
	return "special file"
}
