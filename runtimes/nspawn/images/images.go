// Package images builds the container images a compiled cluster pulls and
// serves them from a registry in the calling process, for kcompile up,
// whose machines reach no registry. Each image is packed from a program
// built here from the Go module proxy (scripts/tools assembles them in
// .bin/images): CoreDNS, flanneld and cilium's programs themselves, at
// the release that was built (flanneld with Debian's iptables and nft,
// which it executes; the cilium agent with Debian's clang, with which it
// compiles its datapath), and kcompile's stand-ins (internal/standin) for
// what the proxy does not serve. An image that cannot be built that way
// (calico's, another release than the one built, one pinned by digest) is
// a Problem, never an image of another name.
package images

import (
	"cmp"
	"debug/buildinfo"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"

	"github.com/kcompile/kcompile/compiler/ir"
	"github.com/kcompile/kcompile/targets/systemd"
)

// EchoImage is the test workload (internal/standin/echo), served
// with every cluster's images for the boot tests to run.
const EchoImage = "registry.kcompile.test/echo:v1"

// Image is one image to serve and what it is packed from.
type Image struct {
	// Ref is the reference the cluster pulls, as its files name it.
	Ref string
	// Repository and Tag are where the registry serves it: the
	// reference's repository without its registry ("coredns/coredns"),
	// so that a mirror configured for any registry finds it.
	Repository, Tag string
	// Files are the contents of the image's one layer.
	Files []File
	// Entrypoint and User are the image's, as upstream's image has them.
	Entrypoint []string
	User       string
	// StandIn says the image runs kcompile's stand-ins, not upstream's
	// programs.
	StandIn bool
}

// File is a file, or a directory tree, of an image.
type File struct {
	// Path is where it lies in the image, absolute.
	Path string
	// Source is the file on this machine. A directory is packed with
	// everything under it, symbolic links kept as links.
	Source string
	// Xattrs are extended attributes to set, such as file capabilities.
	Xattrs map[string]string
}

// Problem is an image of the cluster that cannot be built here.
type Problem struct {
	// Image is the reference as the cluster names it.
	Image   string
	Message string
}

func (p Problem) Error() string { return p.Image + ": " + p.Message }

// Programs is a directory of programs to pack (.bin/images) and the
// upstream release each was built from.
type Programs struct {
	Dir string
	// Releases maps each program present in Dir to the release of the
	// upstream module it was built from ("1.15.0"), "" for a stand-in.
	Releases map[string]string
}

// programs are the names ReadPrograms looks for, each with the module it
// is built from, or "" for a stand-in (and for the root file system
// fragments: iptables-root, Debian's iptables and nft, which flanneld and
// the cilium agent execute; shell-root, Debian's static BusyBox, the shell
// of flannel's postStart hook; cilium-root, what the cilium agent's image
// holds besides its programs, scripts/tools says what).
func programs() map[string]string {
	const cilium = "github.com/cilium/cilium"
	return map[string]string{
		"coredns":                 "github.com/coredns/coredns",
		"flanneld":                "github.com/flannel-io/flannel",
		"cilium-agent":            cilium,
		"cilium-dbg":              cilium,
		"cilium-health-responder": cilium,
		"cilium-cni":              cilium,
		"cilium-mount":            cilium,
		"cilium-sysctlfix":        cilium,
		"cilium-operator-generic": cilium,
		"pause":                   "",
		"flannel":                 "",
		"cp":                      "",
		"echo":                    "",
		"iptables-root":           "",
		"shell-root":              "",
		"cilium-root":             "",
	}
}

// ReadPrograms lists the programs present in dir and reads the release
// each upstream one was built from out of its Go build information.
func ReadPrograms(dir string) (Programs, error) {
	p := Programs{Dir: dir, Releases: map[string]string{}}
	for prog, module := range programs() {
		file := filepath.Join(dir, prog)
		if _, err := os.Stat(file); errors.Is(err, fs.ErrNotExist) {
			continue
		} else if err != nil {
			return Programs{}, err
		}
		release := ""
		if module != "" {
			var err error
			if release, err = moduleRelease(file, module); err != nil {
				return Programs{}, err
			}
		}
		p.Releases[prog] = release
	}
	return p, nil
}

// moduleRelease is the version, without its "v", of module as the Go
// program file was built with it: its main module or a dependency.
func moduleRelease(file, module string) (string, error) {
	info, err := buildinfo.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("%s: %w", file, err)
	}
	for _, m := range append([]*debug.Module{&info.Main}, info.Deps...) {
		if m.Path == module && m.Replace == nil && strings.HasPrefix(m.Version, "v") {
			return strings.TrimPrefix(m.Version, "v"), nil
		}
	}
	return "", fmt.Errorf("%s was not built from a release of %s", file, module)
}

// recipe says how to build the images of one repository.
type recipe struct {
	// program is the one the tag's release must match ("" for none),
	// title its name in a message, and field where the spec sets it.
	program, title, field string
	// files are the image's contents, packed from the programs in dir.
	files func(dir string) []File
	// entrypoint and user are those of upstream's image.
	entrypoint []string
	user       string
	standIn    bool
}

// capNetBindService is a security.capability attribute (struct
// vfs_cap_data, revision 2) granting CAP_NET_BIND_SERVICE, effective:
// upstream's CoreDNS image sets it on /coredns so that its non-root user
// binds port 53.
const capNetBindService = "\x01\x00\x00\x02\x00\x04\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"

// recipes are the images that can be built here, by repository with its
// registry.
func recipes() map[string]recipe {
	prog := func(name, at string) func(string) File {
		return func(dir string) File { return File{Path: at, Source: filepath.Join(dir, name)} }
	}
	return map[string]recipe{
		"registry.k8s.io/pause": {
			files:      func(dir string) []File { return []File{prog("pause", "/pause")(dir)} },
			entrypoint: []string{"/pause"}, user: "65535:65535", standIn: true,
		},
		"registry.k8s.io/coredns/coredns": {
			program: "coredns", title: "CoreDNS", field: "addons.coredns.version",
			files: func(dir string) []File {
				f := prog("coredns", "/coredns")(dir)
				f.Xattrs = map[string]string{"security.capability": capNetBindService}
				return []File{f}
			},
			entrypoint: []string{"/coredns"}, user: "65532:65532",
		},
		"ghcr.io/flannel-io/flannel": {
			program: "flanneld", title: "flannel", field: "network.cni.version",
			files: func(dir string) []File {
				return []File{prog("flanneld", systemd.FlanneldProgram)(dir), prog("iptables-root", "/")(dir), prog("shell-root", "/")(dir)}
			},
			entrypoint: []string{systemd.FlanneldProgram},
		},
		// The init container runs `cp -f /flannel /opt/cni/bin/flannel`.
		"ghcr.io/flannel-io/flannel-cni-plugin": {
			files: func(dir string) []File {
				return []File{prog("flannel", systemd.FlannelCNIPlugin)(dir), prog("cp", "/bin/cp")(dir)}
			},
			standIn: true,
		},
		// Upstream's image (images/cilium/Dockerfile) is its programs on
		// cilium-runtime's Ubuntu, with clang, iptables and iproute2.
		"quay.io/cilium/cilium": {
			program: "cilium-agent", title: "cilium", field: "network.cni.version",
			files: func(dir string) []File {
				files := []File{prog("iptables-root", "/")(dir), prog("cilium-root", "/")(dir), prog("cilium-cni", "/opt/cni/bin/cilium-cni")(dir)}
				for _, p := range []string{"cilium-agent", "cilium-dbg", "cilium-health-responder", "cilium-mount", "cilium-sysctlfix"} {
					files = append(files, prog(p, "/usr/bin/"+p)(dir))
				}
				return files
			},
		},
		"quay.io/cilium/operator-generic": {
			program: "cilium-operator-generic", title: "cilium", field: "network.cni.version",
			files: func(dir string) []File {
				return []File{prog("cilium-operator-generic", "/usr/bin/cilium-operator-generic")(dir)}
			},
			entrypoint: []string{"/usr/bin/cilium-operator-generic"},
		},
		"registry.kcompile.test/echo": {
			files:      func(dir string) []File { return []File{prog("echo", "/echo")(dir)} },
			entrypoint: []string{"/echo"}, standIn: true,
		},
	}
}

// unbuildable names the addons whose images cannot be built here (their
// programs are not on the module proxy), by the repository prefix of
// their images on any registry.
func unbuildable() map[string]string {
	return map[string]string{"calico/": "calico"}
}

// Plan lists every image the cluster pulls, and the test workload, with
// how each is built from progs, or why it cannot be. The systemd target
// names the images, from what it renders the cluster's files from.
func Plan(c *ir.Cluster, progs Programs) ([]Image, []Problem, error) {
	refs, err := systemd.Images(c)
	if err != nil {
		return nil, nil, err
	}
	images, problems := planRefs(append(refs, EchoImage), progs)
	return images, problems, nil
}

// planRefs plans the images refs name.
func planRefs(refs []string, progs Programs) ([]Image, []Problem) {
	refs = slices.Clone(refs)
	slices.Sort(refs)
	refs = slices.Compact(refs)
	var images []Image
	var problems []Problem
	for _, ref := range refs {
		img, p := plan(ref, progs)
		if p != "" {
			problems = append(problems, Problem{Image: ref, Message: p})
			continue
		}
		images = append(images, img)
	}
	slices.SortFunc(problems, func(a, b Problem) int {
		return cmp.Or(cmp.Compare(a.Image, b.Image), cmp.Compare(a.Message, b.Message))
	})
	return images, problems
}

// plan is the image of ref, or why it cannot be built.
func plan(ref string, progs Programs) (Image, string) {
	// Weak validation: a short name is Docker Hub's, as the runtimes
	// read it.
	r, err := name.ParseReference(ref)
	if err != nil {
		return Image{}, fmt.Sprintf("not an image reference: %v", err)
	}
	repo := r.Context().Name()
	tag, ok := r.(name.Tag)
	if !ok {
		return Image{}, "pinned by digest, which an image built here cannot match; name it by tag"
	}
	rec, ok := recipes()[repo]
	if !ok {
		for prefix, addon := range unbuildable() {
			if strings.HasPrefix(r.Context().RepositoryStr(), prefix) {
				return Image{}, fmt.Sprintf("%s's images cannot be built from Go sources here; kcompile up runs flannel and cilium (network.cni.plugin)", addon)
			}
		}
		return Image{}, "kcompile up cannot build this image: it builds only the images of flannel, cilium, CoreDNS, the sandbox and the test workload"
	}
	img := Image{
		Ref: ref, Repository: r.Context().RepositoryStr(), Tag: tag.TagStr(),
		Files: rec.files(progs.Dir), Entrypoint: rec.entrypoint, User: rec.user, StandIn: rec.standIn,
	}
	for _, f := range img.Files {
		if _, ok := progs.Releases[filepath.Base(f.Source)]; !ok {
			return Image{}, fmt.Sprintf("needs %s, which is not built (scripts/tools builds it)", f.Source)
		}
	}
	if rec.program != "" {
		built := progs.Releases[rec.program]
		if want := strings.TrimPrefix(img.Tag, "v"); want != built {
			return Image{}, fmt.Sprintf("the spec's %s %s cannot be built here; set %s: %s", rec.title, want, rec.field, built)
		}
	}
	return img, ""
}

// Registries are the registries the images name, sorted: the nodes need a
// mirror of each pointing at the registry Serve runs.
func Registries(images []Image) []string {
	var out []string
	for _, img := range images {
		if r, err := name.ParseReference(img.Ref); err == nil {
			out = append(out, r.Context().RegistryStr())
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}
