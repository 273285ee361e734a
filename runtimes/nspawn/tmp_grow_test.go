package nspawn

import (
	"testing"

	"github.com/kcompile/kcompile/internal/fixture"
)

func TestTmpGrow(t *testing.T) {
	pools := [2]string{`workers: nodes: w1: {address: "10.78.0.21", mac: "52:54:00:78:00:21"}`, `workers: pools: {
	blue: {count: 1, namePattern: "w%d", firstAddress: "10.78.0.21", macs: ["52:54:00:78:00:21"]}
	green: {count: 1, namePattern: "g%d", firstAddress: "10.78.0.31", macs: ["52:54:00:78:00:31"]}
}`}
	dir := specDir(t, fixture.Path("runtimes/nspawn/testdata/vip"), [][2]string{pools}, nil)
	e := bootForApply(t, dir, "")
	k := admin(t, e.c)
	if _, err := k.apply(t.Context(), "web", []byte(workloadHA)); err != nil {
		t.Fatal(err)
	}
	growAndShrink(t, e, k, dir)
}
