package systemd

import (
	"strings"
	"testing"
)

func TestUnitRoundTrip(t *testing.T) {
	u := service("demo", "https://example.com/", []string{"network-online.target", "etcd.service"}, []string{"etcd.service"},
		"/usr/local/bin/demo", []string{"--a=1", "--b=x,y"})
	got, err := ParseUnit(u.Render())
	if err != nil {
		t.Fatal(err)
	}
	if exec := got.Get("Service", "ExecStart"); len(exec) != 1 || exec[0] != "/usr/local/bin/demo --a=1 --b=x,y" {
		t.Errorf("ExecStart %q", exec)
	}
	if after := got.Get("Unit", "After"); len(after) != 1 || after[0] != "network-online.target etcd.service" {
		t.Errorf("After %q", after)
	}
	if !strings.Contains(string(u.Render()), " \\\n  --b=x,y\n") {
		t.Errorf("flags are not one per line:\n%s", u.Render())
	}
}

func TestParseUnitErrors(t *testing.T) {
	for _, bad := range []string{"Key=value\n", "[Unit]\nno equals sign\n", "[Service]\nExecStart=/bin/x \\\n"} {
		if _, err := ParseUnit([]byte(bad)); err == nil {
			t.Errorf("ParseUnit accepted %q", bad)
		}
	}
	u, err := ParseUnit([]byte("# comment\n; other\n\n[Unit]\nDescription = spaced  out \n"))
	if err != nil || u.Get("Unit", "Description")[0] != "spaced out" {
		t.Errorf("ParseUnit %+v %v", u, err)
	}
}
