//go:build !unix

package writer

import "errors"

// lockDir refuses where flock(2) is missing: unserialised builds could
// replace each other's trees.
func lockDir(dir string) (unlock func(), err error) {
	return nil, errors.New("writing a tree needs flock(2), which this system lacks")
}
