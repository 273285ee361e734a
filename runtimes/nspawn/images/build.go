package images

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// env is the environment of every image, as Alpine's and distroless'
// images have it: cp is found on PATH.
func env() []string {
	return []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
}

// Build packs the image: an OCI image for linux/amd64 of one
// uncompressed layer (the registry is local, compressing would only cost
// time), owned by root, without timestamps, so that the same programs
// always make the same digest.
func (img Image) Build() (v1.Image, error) {
	layer, err := img.layer()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", img.Ref, err)
	}
	base := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	base = mutate.ConfigMediaType(base, types.OCIConfigJSON)
	cfg := &v1.ConfigFile{
		Architecture: "amd64", OS: "linux",
		Config: v1.Config{Entrypoint: img.Entrypoint, Env: env(), User: img.User, WorkingDir: "/"},
	}
	base, err = mutate.ConfigFile(base, cfg)
	if err != nil {
		return nil, err
	}
	createdBy := "kcompile: upstream's programs, packed on this machine"
	if img.StandIn {
		createdBy = "kcompile: stand-ins (internal/standin) for upstream's programs"
	}
	return mutate.Append(base, mutate.Addendum{
		Layer:     static.NewLayer(layer, types.OCIUncompressedLayer),
		History:   v1.History{CreatedBy: createdBy},
		MediaType: types.OCIUncompressedLayer,
	})
}

// entry is one member of a layer.
type entry struct {
	hdr    *tar.Header
	source string
}

// layer is the tar of the image's files, each directory above them
// included, sorted by path.
func (img Image) layer() ([]byte, error) {
	entries := map[string]entry{}
	dir := func(p string) {
		for ; p != "/" && p != "."; p = path.Dir(p) {
			if _, ok := entries[p]; !ok {
				entries[p] = entry{hdr: &tar.Header{Typeflag: tar.TypeDir, Mode: 0o755}}
			}
		}
	}
	for _, f := range img.Files {
		err := filepath.WalkDir(f.Source, func(src string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, err := filepath.Rel(f.Source, src)
			if err != nil {
				return err
			}
			at := path.Join(f.Path, filepath.ToSlash(rel))
			fi, err := d.Info()
			if err != nil {
				return err
			}
			hdr := &tar.Header{Mode: int64(fi.Mode().Perm())}
			switch {
			case d.IsDir():
				hdr.Typeflag = tar.TypeDir
			case d.Type()&fs.ModeSymlink != 0:
				hdr.Typeflag = tar.TypeSymlink
				if hdr.Linkname, err = os.Readlink(src); err != nil {
					return err
				}
			case d.Type().IsRegular():
				hdr.Typeflag, hdr.Size = tar.TypeReg, fi.Size()
			default:
				return fmt.Errorf("%s is neither a file, a directory nor a link", src)
			}
			if at == f.Path {
				for k, v := range f.Xattrs {
					if hdr.PAXRecords == nil {
						hdr.PAXRecords = map[string]string{}
					}
					hdr.PAXRecords["SCHILY.xattr."+k] = v
				}
			}
			if at != "/" {
				dir(path.Dir(at))
				entries[at] = entry{hdr: hdr, source: src}
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}

	var b bytes.Buffer
	w := tar.NewWriter(&b)
	for _, at := range slices.Sorted(maps.Keys(entries)) {
		e := entries[at]
		hdr := e.hdr
		// Members are relative to the root, as docker save writes them.
		hdr.Name = at[1:]
		if hdr.Typeflag == tar.TypeDir {
			hdr.Name += "/"
		}
		hdr.ModTime = time.Unix(0, 0)
		if err := w.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if hdr.Typeflag == tar.TypeReg {
			if err := copyFile(w, e.source, hdr.Size); err != nil {
				return nil, err
			}
		}
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// copyFile writes exactly size bytes of the file src: a file that changed
// size since it was listed would corrupt the layer.
func copyFile(w io.Writer, src string, size int64) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	n, err := io.Copy(w, io.LimitReader(f, size))
	if err == nil && n != size {
		err = fmt.Errorf("%s changed while it was packed", src)
	}
	return err
}
