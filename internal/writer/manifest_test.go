package writer

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
)

// TestManifestMAC checks that the MAC verifies with its key only, and
// that any change to what the manifest says breaks it.
func TestManifestMAC(t *testing.T) {
	files := sample(t, "a").Files()
	data := encodeManifest("v1.2.3", files, testKey)
	if !bytes.Equal(data, encodeManifest("v1.2.3", files, testKey)) {
		t.Error("the same tree, version and key give two manifests")
	}
	lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	if last := lines[len(lines)-1]; !regexp.MustCompile(`^\],"mac":"hmac-sha256:[0-9a-f]{64}"\}$`).MatchString(last) {
		t.Errorf("the manifest ends %q, want its MAC", last)
	}
	// Without a key, the manifest is as it was before MACs.
	plain := encodeManifest("v1.2.3", files, nil)
	if bytes.Contains(plain, []byte(`"mac"`)) || !bytes.HasSuffix(plain, []byte("\n]}\n")) {
		t.Errorf("a manifest written without a key has a MAC:\n%s", plain)
	}
	if bytes.Contains(data, testKey) || bytes.Contains(data, []byte(hex.EncodeToString(testKey))) {
		t.Error("the manifest holds its key")
	}

	parse := func(b []byte) *manifest {
		t.Helper()
		var m manifest
		must(t, json.Unmarshal(b, &m))
		return &m
	}
	if m := parse(data); !m.verifies(testKey) {
		t.Fatal("a manifest does not verify with its own key")
	}
	if parse(data).verifies(otherKey) {
		t.Error("a manifest verifies with another bundle's key")
	}
	if parse(plain).verifies(testKey) {
		t.Error("a manifest without a MAC verifies")
	}
	// Spelling does not matter, content does.
	var compact bytes.Buffer
	must(t, json.Compact(&compact, data))
	if !parse(compact.Bytes()).verifies(testKey) {
		t.Error("the same manifest spelt without newlines does not verify")
	}

	forgeries := map[string]func(m *manifest){
		"version":       func(m *manifest) { m.Version = "v9" },
		"digest":        func(m *manifest) { m.Files[1].SHA256 = strings.Repeat("0", 64) },
		"mode":          func(m *manifest) { m.Files[2].Mode = "0644" },
		"path":          func(m *manifest) { m.Files[0].Path = "cluster/other.conf" },
		"file dropped":  func(m *manifest) { m.Files = m.Files[1:] },
		"file added":    func(m *manifest) { m.Files = append(m.Files, manifestFile{"x", strings.Repeat("0", 64), "0644"}) },
		"files swapped": func(m *manifest) { m.Files[0], m.Files[1] = m.Files[1], m.Files[0] },
		"MAC flipped": func(m *manifest) {
			b := []byte(m.MAC)
			b[len(b)-1] ^= 1
			m.MAC = string(b)
		},
		"MAC not hex":        func(m *manifest) { m.MAC = macPrefix + "zz" },
		"MAC truncated":      func(m *manifest) { m.MAC = m.MAC[:len(m.MAC)-2] },
		"MAC without prefix": func(m *manifest) { m.MAC = strings.TrimPrefix(m.MAC, macPrefix) },
		"MAC removed":        func(m *manifest) { m.MAC = "" },
		"MAC of another key": func(m *manifest) {
			m.Version = "v9"
			m.MAC = macPrefix + hex.EncodeToString(manifestMAC(otherKey, m))
		},
	}
	for name, forge := range forgeries {
		m := parse(data)
		forge(m)
		if m.verifies(testKey) {
			t.Errorf("%s: a forged manifest verifies", name)
		}
	}

	// The fields are length-prefixed: moving a boundary changes the MAC.
	a := &manifest{Version: "v1", Files: []manifestFile{{"ab", "c", "0644"}}}
	b := &manifest{Version: "v1", Files: []manifestFile{{"a", "bc", "0644"}}}
	c := &manifest{Version: "v1a", Files: []manifestFile{{"b", "c", "0644"}}}
	if bytes.Equal(manifestMAC(testKey, a), manifestMAC(testKey, b)) || bytes.Equal(manifestMAC(testKey, b), manifestMAC(testKey, c)) {
		t.Error("two manifests share a MAC")
	}
}
