package images

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// Serve builds the images and serves them from a registry on l, each
// under its Repository and Tag, until stop is called; stop closes l.
// Requests are logged to logTo (nil: nowhere). On an error, or when ctx
// ends before every image is built, nothing is served and l is closed.
func Serve(ctx context.Context, l net.Listener, images []Image, logTo io.Writer) (stop func() error, err error) {
	if logTo == nil {
		logTo = io.Discard
	}
	h := registry.New(registry.Logger(log.New(logTo, "registry: ", log.LstdFlags)))
	// The images are pushed through the handler itself, not the network:
	// l may be bound to an address only the machines reach.
	push := []remote.Option{remote.WithTransport(handlerTransport{h}), remote.WithContext(ctx)}
	for _, img := range images {
		if err := ctx.Err(); err != nil {
			return nil, errors.Join(fmt.Errorf("building the images: %w", err), l.Close())
		}
		built, err := img.Build()
		if err == nil {
			var tag name.Tag
			tag, err = name.NewTag("localhost/"+img.Repository+":"+img.Tag, name.StrictValidation)
			if err == nil {
				err = remote.Write(tag, built, push...)
			}
		}
		if err != nil {
			return nil, errors.Join(fmt.Errorf("image %s: %w", img.Ref, err), l.Close())
		}
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 30 * time.Second}
	go func() { _ = srv.Serve(l) }()
	return srv.Close, nil
}

// handlerTransport answers requests with a handler, in process.
type handlerTransport struct{ h http.Handler }

func (t handlerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	// A server's request always has a body; a client's may have none.
	if req.Body == nil {
		req = req.Clone(req.Context())
		req.Body = http.NoBody
	}
	rec := httptest.NewRecorder()
	t.h.ServeHTTP(rec, req)
	resp := rec.Result()
	resp.Request = req
	return resp, nil
}
