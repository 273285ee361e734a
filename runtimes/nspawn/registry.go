package nspawn

import (
	"context"
	"io"
	"net"
	"net/netip"
	"slices"

	"github.com/google/go-containerregistry/pkg/name"

	"github.com/kcompile/kcompile/compiler/ir"
	"github.com/kcompile/kcompile/runtimes/nspawn/images"
)

// ImageRegistry serves the images a cluster pulls, built from programs
// on this machine (see package images).
type ImageRegistry struct {
	images []images.Image
	log    io.Writer
}

// NewRegistry plans the images the cluster pulls from the programs in
// dir. Problems are images that cannot be built here: up refuses to boot
// a cluster with any.
func NewRegistry(c *ir.Cluster, dir string, log io.Writer) (*ImageRegistry, []images.Problem, error) {
	progs, err := images.ReadPrograms(dir)
	if err != nil {
		return nil, nil, err
	}
	imgs, problems, err := images.Plan(c, progs)
	if err != nil {
		return nil, nil, err
	}
	return &ImageRegistry{images: imgs, log: log}, problems, nil
}

// Images are the images served.
func (r *ImageRegistry) Images() []images.Image { return slices.Clone(r.images) }

// Serve builds the images, listens on addr and serves until ctx ends;
// a ctx that ends while the images are built stops the building.
func (r *ImageRegistry) Serve(ctx context.Context, addr netip.AddrPort) error {
	l, err := net.Listen("tcp", addr.String())
	if err != nil {
		return err
	}
	stop, err := images.Serve(ctx, l, r.images, r.log)
	if err != nil {
		return err
	}
	go func() {
		<-ctx.Done()
		_ = stop()
	}()
	return nil
}

// Refs are the references of the images served, sorted.
func (r *ImageRegistry) Refs() []string {
	var out []string
	for _, img := range r.images {
		out = append(out, img.Ref)
	}
	slices.Sort(out)
	return out
}

// Registries are the registry hosts the images are named with.
func (r *ImageRegistry) Registries() []string {
	var out []string
	for _, img := range r.images {
		ref, err := name.ParseReference(img.Ref, name.StrictValidation)
		if err != nil {
			continue
		}
		out = append(out, ref.Context().RegistryStr())
	}
	slices.Sort(out)
	return slices.Compact(out)
}

var _ Registry = (*ImageRegistry)(nil)
