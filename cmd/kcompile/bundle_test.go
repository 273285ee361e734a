package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kcompile/kcompile/internal/fixture"

	"github.com/kcompile/kcompile/compiler/pki"
)

// testSecrets is a private copy of the test-only bundle: git checks
// testdata/test-secrets.json out 0644, which the CLI refuses (KC1110).
func testSecrets(t testing.TB) string { return fixture.BundleFile(t) }

func TestParseDuration(t *testing.T) {
	const day, year = 24 * time.Hour, 365 * 24 * time.Hour
	for s, want := range map[string]time.Duration{
		"30d": 30 * day, "1y": year, "200y": 200 * year, "12h": 12 * time.Hour, "90m": 90 * time.Minute, "73000d": 200 * year,
	} {
		if got, err := parseDuration("ca-validity", s, pki.MaxCAValidity); err != nil || got != want {
			t.Errorf("parseDuration(%q) = %s, %v; want %s", s, got, err, want)
		}
	}
	for s, want := range map[string]string{
		"0d": "is not a positive duration", "0s": "is not a positive duration", "-1d": "is not a positive duration",
		"-24h": "is not a positive duration", "+0y": "is not a positive duration",
		"500y": "is longer than 200 years", "201y": "is longer than 200 years", "73001d": "is longer than 200 years",
		"99999999999999999999y": "is longer than 200 years", "1753200h": "is longer than 200 years",
		"soon": "is not a duration", "": "is not a duration", "d": "is not a duration", "1.5d": "is not a duration",
	} {
		got, err := parseDuration("ca-validity", s, pki.MaxCAValidity)
		if err == nil || !strings.Contains(err.Error(), want) || !strings.HasPrefix(err.Error(), "--ca-validity ") {
			t.Errorf("parseDuration(%q) = %s, %v; want an error on --ca-validity saying %q", s, got, err, want)
		}
	}
}

// TestLoadBundleModes: a bundle any other user may read or change is
// refused with the chmod that fixes it; one only its owner can read is
// loaded, and knows its file.
func TestLoadBundleModes(t *testing.T) {
	file := testSecrets(t)
	for mode, who := range map[os.FileMode]string{
		0o644: "readable by others", 0o604: "readable by others", 0o640: "readable by its group",
		0o660: "readable by its group", 0o620: "writable by its group or others", 0o610: "open to its group or others",
	} {
		if err := os.Chmod(file, mode); err != nil {
			t.Fatal(err)
		}
		b, diags, err := loadBundle(file)
		if err != nil || b != nil || len(diags) != 1 {
			t.Fatalf("mode %04o: got bundle %v, %d diagnostics, error %v; want one diagnostic", mode, b != nil, len(diags), err)
		}
		d := diags[0]
		want := fmt.Sprintf("%s is %s (mode %04o); run: chmod 600 %s", file, who, mode, file)
		if d.Code != pki.CodeBundleMode || d.Message != want || d.Primary().File != file {
			t.Errorf("mode %04o: %s at %s: %q", mode, d.Code, d.Primary(), d.Message)
		}
	}
	for _, mode := range []os.FileMode{0o600, 0o400} {
		if err := os.Chmod(file, mode); err != nil {
			t.Fatal(err)
		}
		b, diags, err := loadBundle(file)
		if err != nil || len(diags) != 0 || b == nil || b.Source != file {
			t.Errorf("mode %04o: got %v, %v, %v; want the bundle, from %s", mode, b, diags, err, file)
		}
	}
	// A path the shell would split is quoted in the command to run.
	odd := filepath.Join(t.TempDir(), "my secrets.json")
	if err := os.WriteFile(odd, []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, diags, _ := loadBundle(odd); len(diags) != 1 || !strings.HasSuffix(diags[0].Message, "run: chmod 600 '"+odd+"'") {
		t.Errorf("a path with a space: %v", diags)
	}
}
