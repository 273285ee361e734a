package images

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/pelletier/go-toml/v2"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/kcompile/kcompile/layout"
	"github.com/kcompile/kcompile/targets"
)

// References lists, sorted and without repeats, every image a compiled
// cluster pulls: those of the containers of the addon manifests
// (cluster/addons) and each node's sandbox image (its runtime's
// configuration).
func References(tree *targets.Tree) ([]string, error) {
	var refs []string
	for _, f := range tree.Files() {
		var found []string
		var err error
		_, rel, node := layout.SplitTree(f.Path)
		switch {
		case strings.HasPrefix(f.Path, layout.ClusterTree("addons/")):
			found, err = manifestImages(f.Data)
		case node && rel == layout.ContainerdConfig:
			found, err = sandboxImage(f.Data, "plugins", "io.containerd.cri.v1.images", "pinned_images", "sandbox")
		case node && strings.HasPrefix(rel, layout.CRIODropInDir):
			found, err = sandboxImage(f.Data, "crio", "image", "pause_image")
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f.Path, err)
		}
		refs = append(refs, found...)
	}
	slices.Sort(refs)
	return slices.Compact(refs), nil
}

// manifestImages are the images of every container list (containers,
// initContainers, ephemeralContainers) of a multi-document manifest,
// wherever the object nests its pod template.
func manifestImages(data []byte) ([]string, error) {
	var out []string
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		var obj any
		if err := yaml.Unmarshal(doc, &obj); err != nil {
			return nil, err
		}
		out = append(out, containerImages(obj)...)
	}
}

func containerImages(v any) []string {
	var out []string
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			if list, ok := x.([]any); ok && (k == "containers" || k == "initContainers" || k == "ephemeralContainers") {
				for _, c := range list {
					if c, ok := c.(map[string]any); ok {
						if img, ok := c["image"].(string); ok {
							out = append(out, img)
						}
					}
				}
				continue
			}
			out = append(out, containerImages(x)...)
		}
	case []any:
		for _, x := range v {
			out = append(out, containerImages(x)...)
		}
	}
	return out
}

// sandboxImage is the string at keys of a TOML document, if any.
func sandboxImage(data []byte, keys ...string) ([]string, error) {
	var doc map[string]any
	if err := toml.Unmarshal(data, &doc); err != nil {
		return nil, err
	}
	var v any = doc
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil, nil
		}
		v = m[k]
	}
	if s, ok := v.(string); ok {
		return []string{s}, nil
	}
	return nil, nil
}
