// This file replaces picture/svg.go in BenchmarkStartup's build of
// kcompile without pictures (go build -overlay): everything that draws an
// SVG, and all it imports, left out of the command.

package picture

import (
	"context"
	"errors"
)

// SVG draws nothing in this build.
func (t *Topology) SVG(context.Context) ([]byte, error) {
	return nil, errors.New("kcompile was built without pictures")
}
