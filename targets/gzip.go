package targets

import (
	"bytes"
	"compress/gzip"
	"io"
)

// Gzip compresses a file for a node config that carries it compressed
// (cloud-init's gz+b64, Ignition's compression "gzip"): best compression,
// no name or time in the header, so that the same file gives the same
// bytes.
func Gzip(data []byte) ([]byte, error) {
	var b bytes.Buffer
	w, err := gzip.NewWriterLevel(&b, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	if _, err := w.Write(data); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// Gunzip reads back what Gzip (or any gzip writer) wrote.
func Gunzip(data []byte) ([]byte, error) {
	r, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return nil, err
	}
	return io.ReadAll(r)
}
