package main

import (
	"os"
	"strings"
	"testing"
)

// TestReadmeCommands keeps the README's two first commands and .ci/run in
// step: CI must run exactly the command the README gives.
func TestReadmeCommands(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	ci, err := os.ReadFile("../../.ci/run")
	if err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []string{"kcompile check examples/ha-stacked", "scripts/test"} {
		if !strings.Contains(string(readme), "\n"+cmd+"\n") {
			t.Errorf("README.md does not give the command %q on a line of its own", cmd)
		}
	}
	if !strings.Contains(string(ci), "\nscripts/test\n") {
		t.Errorf(".ci/run does not run the README's test command scripts/test")
	}
}
