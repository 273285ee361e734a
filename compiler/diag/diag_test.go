package diag

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestSortedOrdersAndDeduplicates(t *testing.T) {
	a := Diagnostic{Code: "KC0302", Severity: Error, Path: "network.podCIDR", Message: "overlap",
		Positions: []Pos{{"b.cue", 5, 11}, {"b.cue", 4, 9}, {"b.cue", 5, 11}}, Hint: "move"}
	b := Diagnostic{Code: "KC0101", Severity: Error, Path: "name", Message: "bad name", Positions: []Pos{{"a.cue", 4, 13}}, Hint: "rename"}
	c := Diagnostic{Code: "KC0402", Severity: Warning, Path: "etcd", Message: "single", Positions: []Pos{{"a.cue", 10, 2}}, Hint: "3"}
	none := Diagnostic{Code: "KC0005", Severity: Error, Message: "internal"}
	got := List{none, a, c, b, a}.Sorted()
	var codes []string
	for _, d := range got {
		codes = append(codes, d.Code)
	}
	if strings.Join(codes, " ") != "KC0101 KC0402 KC0302 KC0005" {
		t.Errorf("order %v", codes)
	}
	if len(got[2].Positions) != 2 || got[2].Positions[0] != (Pos{"b.cue", 5, 11}) {
		t.Errorf("positions not de-duplicated with the primary first: %v", got[2].Positions)
	}
	if got.Errors() != 3 || got.Warnings() != 1 || !got.HasErrors() {
		t.Errorf("counts %d/%d", got.Errors(), got.Warnings())
	}
	if s := (List{c}).Strict(); s.Errors() != 1 || c.Severity != Warning {
		t.Errorf("Strict must turn warnings into errors without changing the original")
	}
}

func TestRelative(t *testing.T) {
	l := List{{Code: "X", Positions: []Pos{{"/home/u/spec/a.cue", 1, 1}, {"schema/v1alpha1/x.cue", 2, 2}, {"/etc/other.cue", 3, 3}}}}
	got := l.Relative("/home/u")
	want := []Pos{{"spec/a.cue", 1, 1}, {"schema/v1alpha1/x.cue", 2, 2}, {"/etc/other.cue", 3, 3}}
	for i, p := range got[0].Positions {
		if p != want[i] {
			t.Errorf("position %d = %v, want %v", i, p, want[i])
		}
	}
	if l[0].Positions[0].File != "/home/u/spec/a.cue" {
		t.Error("Relative modified its receiver")
	}
}

func TestTextAndJSON(t *testing.T) {
	l := List{{Code: "KC0302", Severity: Error, Path: "network.podCIDR", Message: "overlap",
		Positions: []Pos{{"b.cue", 5, 11}, {"b.cue", 4, 9}}, Hint: "move one"},
		{Code: "KC0402", Severity: Warning, Message: "single", Positions: []Pos{{"a.cue", 1, 1}}}}
	var text bytes.Buffer
	if err := l.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	want := "b.cue:5:11: error KC0302: overlap (network.podCIDR)\n    b.cue:4:9: related position\n    hint: move one\n" +
		"a.cue:1:1: warning KC0402: single\n1 error, 1 warning\n"
	if text.String() != want {
		t.Errorf("text:\n%s\nwant:\n%s", text.String(), want)
	}
	var js bytes.Buffer
	if err := l.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var r JSONReport
	if err := json.Unmarshal(js.Bytes(), &r); err != nil {
		t.Fatal(err)
	}
	if r.Errors != 1 || r.Warnings != 1 || len(r.Diagnostics) != 2 || r.Diagnostics[1].Severity != Warning || r.Diagnostics[0].Positions[1].Line != 4 {
		t.Errorf("JSON round trip: %+v", r)
	}
	var empty bytes.Buffer
	if err := (List{}).WriteJSON(&empty); err != nil || !strings.Contains(empty.String(), `"diagnostics": []`) {
		t.Errorf("empty list renders %q", empty.String())
	}
}
