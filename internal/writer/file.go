package writer

import (
	"os"
	"path/filepath"
)

// PrivateFile writes data to path, mode 0600, through a temporary file
// beside it that is synced and then renamed over path: a crash or a
// power cut leaves the old file or the new one, never a torn one, and
// the data is never readable by others on the way.
func PrivateFile(path string, data []byte) (err error) {
	f, err := os.CreateTemp(filepath.Dir(path), TempPrefix(path))
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			os.Remove(tmp)
		}
	}()
	// CreateTemp makes the file 0600 before anything is written to it;
	// the chmod keeps it so whatever the umask.
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// TempPrefix is the name prefix of PrivateFile's temporary files for
// path, by which those a crash left are found.
func TempPrefix(path string) string { return "." + filepath.Base(path) + ".tmp-" }
