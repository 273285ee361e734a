package images

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/kcompile/kcompile/compiler/ir"
	"github.com/kcompile/kcompile/internal/fixture"
	"github.com/kcompile/kcompile/targets/systemd"
)

// upSpec names the releases of CoreDNS and flannel that scripts/tools
// builds, as a spec for kcompile up does.
const upSpec = "addons: coredns: version: \"1.15.0\"\nnetwork: cni: version: \"0.28.10\"\n"

// singleNode is examples/single-node with the CUE fields extra added.
func singleNode(t *testing.T, extra string) *ir.Cluster {
	t.Helper()
	return fixture.Cluster(t, "single-node", map[string]string{"up.cue": "package cluster\n" + extra})
}

// fakePrograms is a programs directory whose programs are small files,
// built (so to speak) from the releases scripts/tools builds.
func fakePrograms(t *testing.T) Programs {
	t.Helper()
	dir := t.TempDir()
	p := Programs{Dir: dir, Releases: map[string]string{"coredns": "1.15.0", "flanneld": "0.28.10"}}
	cilium := []string{"cilium-agent", "cilium-dbg", "cilium-health-responder", "cilium-cni", "cilium-mount", "cilium-sysctlfix", "cilium-operator-generic"}
	for _, prog := range cilium {
		p.Releases[prog] = "1.18.2"
	}
	for _, prog := range append([]string{"coredns", "flanneld", "pause", "flannel", "cp", "echo"}, cilium...) {
		if err := os.WriteFile(filepath.Join(dir, prog), []byte("program "+prog), 0o755); err != nil {
			t.Fatal(err)
		}
		if _, ok := p.Releases[prog]; !ok {
			p.Releases[prog] = ""
		}
	}
	// The root fragments: a program and a name linked to it.
	for _, r := range []struct{ root, dir, prog, link, says string }{
		{"iptables-root", "usr/sbin", "xtables-nft-multi", "iptables", "program iptables"},
		{"shell-root", "bin", "busybox", "sh", "program busybox"},
		{"cilium-root", "usr/bin", "clang-19", "clang", "program clang"},
	} {
		at := filepath.Join(dir, r.root, r.dir)
		if err := os.MkdirAll(at, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(at, r.prog), []byte(r.says), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(r.prog, filepath.Join(at, r.link)); err != nil {
			t.Fatal(err)
		}
		p.Releases[r.root] = ""
	}
	return p
}

func refs(images []Image) []string {
	var out []string
	for _, img := range images {
		out = append(out, img.Ref)
	}
	return out
}

func messages(problems []Problem) []string {
	var out []string
	for _, p := range problems {
		out = append(out, p.Error())
	}
	return out
}

// TestPlanUpSpec: a flannel cluster at the releases built here needs
// nothing but what can be built: every image, the sandbox's and the
// flannel CNI plugin's stand-ins among them.
func TestPlanUpSpec(t *testing.T) {
	progs := fakePrograms(t)
	images, problems, err := Plan(singleNode(t, upSpec), progs)
	if err != nil {
		t.Fatal(err)
	}
	if len(problems) > 0 {
		t.Fatalf("problems: %q", messages(problems))
	}
	type want struct {
		repo, tag  string
		files      []string
		entrypoint []string
		standIn    bool
	}
	wants := map[string]want{
		"ghcr.io/flannel-io/flannel-cni-plugin:v1.9.1-flannel3": {"flannel-io/flannel-cni-plugin", "v1.9.1-flannel3",
			[]string{"/flannel", "/bin/cp"}, nil, true},
		"ghcr.io/flannel-io/flannel:v0.28.10": {"flannel-io/flannel", "v0.28.10",
			[]string{"/opt/bin/flanneld", "/", "/"}, []string{"/opt/bin/flanneld"}, false},
		"registry.k8s.io/coredns/coredns:v1.15.0": {"coredns/coredns", "v1.15.0",
			[]string{"/coredns"}, []string{"/coredns"}, false},
		"registry.k8s.io/pause:3.10.1":   {"pause", "3.10.1", []string{"/pause"}, []string{"/pause"}, true},
		"registry.kcompile.test/echo:v1": {"echo", "v1", []string{"/echo"}, []string{"/echo"}, true},
	}
	if got := refs(images); !slices.Equal(got, slices.Sorted(maps.Keys(wants))) {
		t.Fatalf("images %q", got)
	}
	if got := Registries(images); !slices.Equal(got, []string{"ghcr.io", "registry.k8s.io", "registry.kcompile.test"}) {
		t.Errorf("registries %q", got)
	}
	for _, img := range images {
		w := wants[img.Ref]
		var files []string
		for _, f := range img.Files {
			files = append(files, f.Path)
		}
		if img.Repository != w.repo || img.Tag != w.tag || !slices.Equal(files, w.files) ||
			!slices.Equal(img.Entrypoint, w.entrypoint) || img.StandIn != w.standIn {
			t.Errorf("%s: %+v", img.Ref, img)
		}
	}
}

// TestPlanExamples: every image of the flannel and cilium examples can
// be built here; calico's cannot, each a problem saying so, and what can
// be built still is.
func TestPlanExamples(t *testing.T) {
	for _, tc := range []struct {
		example  string
		images   []string
		problems []string
	}{
		{"single-node",
			[]string{"ghcr.io/flannel-io/flannel-cni-plugin:v1.9.1-flannel3", "ghcr.io/flannel-io/flannel:v0.28.10",
				"registry.k8s.io/coredns/coredns:v1.15.0", "registry.k8s.io/pause:3.10.1", EchoImage},
			nil},
		{"ha-stacked",
			[]string{"registry.k8s.io/coredns/coredns:v1.15.0", "registry.k8s.io/pause:3.10.1", EchoImage},
			[]string{
				"quay.io/calico/cni:v3.30.3: calico's images cannot be built from Go sources here; kcompile up runs flannel and cilium (network.cni.plugin)",
				"quay.io/calico/kube-controllers:v3.30.3: calico's images cannot be built from Go sources here; kcompile up runs flannel and cilium (network.cni.plugin)",
				"quay.io/calico/node:v3.30.3: calico's images cannot be built from Go sources here; kcompile up runs flannel and cilium (network.cni.plugin)",
			}},
		{"external-etcd",
			[]string{"quay.io/cilium/cilium:v1.18.2", "quay.io/cilium/operator-generic:v1.18.2",
				"registry.k8s.io/coredns/coredns:v1.15.0", "registry.k8s.io/pause:3.10.1", EchoImage},
			nil},
	} {
		t.Run(tc.example, func(t *testing.T) {
			images, problems, err := Plan(fixture.Cluster(t, tc.example, nil), fakePrograms(t))
			if err != nil {
				t.Fatal(err)
			}
			if got := refs(images); !slices.Equal(got, tc.images) {
				t.Errorf("images\n%q\nwant\n%q", got, tc.images)
			}
			if got := messages(problems); !slices.Equal(got, tc.problems) {
				t.Errorf("problems\n%q\nwant\n%q", got, tc.problems)
			}
		})
	}
}

// TestPlanOtherReleases: a release of CoreDNS or flannel other than the
// one built is a problem saying what to set, never an image of the
// release built under the spec's tag.
func TestPlanOtherReleases(t *testing.T) {
	images, problems, err := Plan(singleNode(t, "addons: coredns: version: \"1.12.4\"\nnetwork: cni: version: \"0.27.4\"\n"), fakePrograms(t))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"ghcr.io/flannel-io/flannel:v0.27.4: the spec's flannel 0.27.4 cannot be built here; set network.cni.version: 0.28.10",
		"registry.k8s.io/coredns/coredns:v1.12.4: the spec's CoreDNS 1.12.4 cannot be built here; set addons.coredns.version: 1.15.0",
	}
	if got := messages(problems); !slices.Equal(got, want) {
		t.Errorf("problems\n%q\nwant\n%q", got, want)
	}
	if got := refs(images); !slices.Equal(got, []string{"ghcr.io/flannel-io/flannel-cni-plugin:v1.8.0-flannel1", "registry.k8s.io/pause:3.10.1", EchoImage}) {
		t.Errorf("images %q", got)
	}
}

// TestPlanRefuses: an image pinned by digest is never re-tagged, an image
// of no recipe is named, and a program not built is asked for.
func TestPlanRefuses(t *testing.T) {
	digest := "ghcr.io/flannel-io/flannel@sha256:" + strings.Repeat("ab", 32)
	pulled, err := systemd.Images(singleNode(t, upSpec+"network: cni: images: flannel: \""+digest+"\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	// Images of other workloads, under each kind of name.
	pulled = append(pulled, "docker.io/library/busybox:1.36", "registry.k8s.io/coredns/coredns:v1.15.0", "example.com/team/app:1", "calico/node:v3.30.3", EchoImage)
	progs := fakePrograms(t)
	delete(progs.Releases, "echo")
	images, problems := planRefs(pulled, progs)
	want := []string{
		"calico/node:v3.30.3: calico's images cannot be built from Go sources here; kcompile up runs flannel and cilium (network.cni.plugin)",
		"docker.io/library/busybox:1.36: kcompile up cannot build this image: it builds only the images of flannel, cilium, CoreDNS, the sandbox and the test workload",
		"example.com/team/app:1: kcompile up cannot build this image: it builds only the images of flannel, cilium, CoreDNS, the sandbox and the test workload",
		digest + ": pinned by digest, which an image built here cannot match; name it by tag",
		EchoImage + ": needs " + filepath.Join(progs.Dir, "echo") + ", which is not built (scripts/tools builds it)",
	}
	if got := messages(problems); !slices.Equal(got, want) {
		t.Errorf("problems\n%q\nwant\n%q", got, want)
	}
	if got := refs(images); !slices.Equal(got, []string{"ghcr.io/flannel-io/flannel-cni-plugin:v1.9.1-flannel3",
		"registry.k8s.io/coredns/coredns:v1.15.0", "registry.k8s.io/pause:3.10.1"}) {
		t.Errorf("images %q", got)
	}
}

// TestServeStopsWhenInterrupted: an up interrupted while its images are
// built serves nothing and frees the address at once.
func TestServeStopsWhenInterrupted(t *testing.T) {
	images, problems, err := Plan(singleNode(t, upSpec), fakePrograms(t))
	if err != nil || len(problems) > 0 || len(images) == 0 {
		t.Fatal(err, problems)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	stop, err := Serve(ctx, l, images, nil)
	if !errors.Is(err, context.Canceled) || stop != nil {
		t.Fatalf("an interrupted build: %v", err)
	}
	// The address is free again: the listener was closed.
	again, err := net.Listen("tcp", l.Addr().String())
	if err != nil {
		t.Fatalf("the listener of an interrupted build stays open: %v", err)
	}
	again.Close()
}

// TestServeRoundTrip: every planned image pulls by its mirrored name
// (the repository without its registry, as a containerd mirror asks for
// it), as a linux/amd64 OCI image whose layer holds its programs at the
// paths the manifests run, and whose entrypoint runs them.
func TestServeRoundTrip(t *testing.T) {
	progs := fakePrograms(t)
	images, problems, err := Plan(singleNode(t, upSpec), progs)
	if err != nil || len(problems) > 0 {
		t.Fatal(err, problems)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	stop, err := Serve(t.Context(), l, images, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := stop(); err != nil {
			t.Error(err)
		}
	}()
	addr := l.Addr().String()

	for _, img := range images {
		ref, err := name.NewTag(addr+"/"+img.Repository+":"+img.Tag, name.Insecure)
		if err != nil {
			t.Fatal(err)
		}
		pulled, err := remote.Image(ref)
		if err != nil {
			t.Fatalf("%s: %v", img.Ref, err)
		}
		if mt, err := pulled.MediaType(); err != nil || mt != types.OCIManifestSchema1 {
			t.Errorf("%s: media type %s, %v", img.Ref, mt, err)
		}
		cfg, err := pulled.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cfg.OS != "linux" || cfg.Architecture != "amd64" || !slices.Equal(cfg.Config.Entrypoint, img.Entrypoint) {
			t.Errorf("%s: config %+v", img.Ref, cfg)
		}
		layers, err := pulled.Layers()
		if err != nil || len(layers) != 1 {
			t.Fatalf("%s: %d layers, %v", img.Ref, len(layers), err)
		}
		files := layerFiles(t, layers[0])
		for _, f := range img.Files {
			if f.Path == "/" {
				continue
			}
			want, err := os.ReadFile(f.Source)
			if err != nil {
				t.Fatal(err)
			}
			got, ok := files[f.Path[1:]]
			if !ok || !bytes.Equal(got.data, want) || got.hdr.Mode != 0o755 {
				t.Errorf("%s: %s is not %s (mode %o)", img.Ref, f.Path, f.Source, got.hdr.Mode)
			}
		}
		for _, e := range img.Entrypoint {
			if _, ok := files[e[1:]]; !ok {
				t.Errorf("%s: the entrypoint %s is not in the layer", img.Ref, e)
			}
		}
		switch img.Repository {
		case "coredns/coredns":
			if got := files["coredns"].hdr.PAXRecords["SCHILY.xattr.security.capability"]; got != capNetBindService {
				t.Errorf("/coredns has capabilities %q", got)
			}
			if cfg.Config.User != "65532:65532" {
				t.Errorf("CoreDNS runs as %q", cfg.Config.User)
			}
		case "flannel-io/flannel":
			if got := files["usr/sbin/iptables"].hdr; got.Typeflag != tar.TypeSymlink || got.Linkname != "xtables-nft-multi" {
				t.Errorf("iptables is %+v, not a link to xtables-nft-multi", got)
			}
			if got := files["usr/sbin/xtables-nft-multi"].data; string(got) != "program iptables" {
				t.Errorf("xtables-nft-multi holds %q", got)
			}
		case "flannel-io/flannel-cni-plugin":
			if !slices.Contains(strings.Split(strings.TrimPrefix(cfg.Config.Env[0], "PATH="), ":"), "/bin") {
				t.Errorf("cp is not on PATH: %q", cfg.Config.Env)
			}
		}
	}

	// containerd asks a mirror with the registry it stands for.
	req, err := http.NewRequest(http.MethodGet, "http://"+addr+"/v2/coredns/coredns/manifests/v1.15.0?ns=registry.k8s.io", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", string(types.OCIManifestSchema1))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("the mirror request answered %s", resp.Status)
	}
}

type member struct {
	hdr  *tar.Header
	data []byte
}

func layerFiles(t *testing.T, l interface{ Uncompressed() (io.ReadCloser, error) }) map[string]member {
	t.Helper()
	rc, err := l.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	out := map[string]member{}
	r := tar.NewReader(rc)
	for {
		hdr, err := r.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(r)
		if err != nil {
			t.Fatal(err)
		}
		out[hdr.Name] = member{hdr, data}
	}
}

// TestBuildIsReproducible: the same programs make the same digest, and
// every directory above a file is in the layer, owned by root.
func TestBuildIsReproducible(t *testing.T) {
	progs := fakePrograms(t)
	img := Image{Ref: "ghcr.io/flannel-io/flannel:v0.28.10", Repository: "flannel-io/flannel", Tag: "v0.28.10",
		Files: []File{{Path: "/opt/bin/flanneld", Source: filepath.Join(progs.Dir, "flanneld")}, {Path: "/", Source: filepath.Join(progs.Dir, "iptables-root")}}}
	a, err := img.Build()
	if err != nil {
		t.Fatal(err)
	}
	b, err := img.Build()
	if err != nil {
		t.Fatal(err)
	}
	da, _ := a.Digest()
	db, _ := b.Digest()
	if da != db {
		t.Errorf("two builds: %s and %s", da, db)
	}
	layers, err := a.Layers()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for name, m := range layerFiles(t, layers[0]) {
		names = append(names, name)
		if m.hdr.Uid != 0 || m.hdr.Gid != 0 || m.hdr.ModTime.Unix() != 0 {
			t.Errorf("%s: %+v", name, m.hdr)
		}
	}
	slices.Sort(names)
	want := []string{"opt/", "opt/bin/", "opt/bin/flanneld", "usr/", "usr/sbin/", "usr/sbin/iptables", "usr/sbin/xtables-nft-multi"}
	if !reflect.DeepEqual(names, want) {
		t.Errorf("layer %q, want %q", names, want)
	}
}

// TestReadPrograms: releases come from the programs' Go build
// information; a program not built from a release of its module (this
// test, whose build information names no module but kcompile) is an
// error; the stand-ins have none.
func TestReadPrograms(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "pause"), []byte("x"), 0o755); err != nil {
		t.Fatal(err)
	}
	p, err := ReadPrograms(dir)
	if err != nil || !reflect.DeepEqual(p.Releases, map[string]string{"pause": ""}) {
		t.Errorf("ReadPrograms: %+v, %v", p, err)
	}
	if err := os.Symlink(self, filepath.Join(dir, "coredns")); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadPrograms(dir); err == nil || !strings.Contains(err.Error(), "not built from a release of github.com/coredns/coredns") {
		t.Errorf("a coredns of no release: %v", err)
	}

	// What scripts/tools built, when it has.
	bin := fixture.Path(".bin/images")
	if _, err := os.Stat(filepath.Join(bin, "coredns")); err != nil {
		t.Skip("scripts/tools has not built .bin/images")
	}
	p, err = ReadPrograms(bin)
	if err != nil {
		t.Fatal(err)
	}
	if p.Releases["coredns"] != "1.15.0" || p.Releases["flanneld"] != "0.28.10" {
		t.Errorf(".bin/images: %v", p.Releases)
	}
	if _, problems, err := Plan(singleNode(t, upSpec), p); err != nil || len(problems) > 0 {
		t.Errorf("the programs built cannot serve a spec for kcompile up: %v %q", err, messages(problems))
	}
}

// TestPlanCilium: the agent's image is cilium's programs where upstream's
// image has them, on the root fragments (clang and the tools its
// containers run, iptables), and both images are refused at a release
// other than the one built.
func TestPlanCilium(t *testing.T) {
	progs := fakePrograms(t)
	images, problems, err := Plan(fixture.Cluster(t, "external-etcd", nil), progs)
	if err != nil || len(problems) > 0 {
		t.Fatal(err, messages(problems))
	}
	want := map[string][]string{
		"quay.io/cilium/cilium:v1.18.2": {"/", "/", "/opt/cni/bin/cilium-cni", "/usr/bin/cilium-agent", "/usr/bin/cilium-dbg",
			"/usr/bin/cilium-health-responder", "/usr/bin/cilium-mount", "/usr/bin/cilium-sysctlfix"},
		"quay.io/cilium/operator-generic:v1.18.2": {"/usr/bin/cilium-operator-generic"},
	}
	for _, img := range images {
		paths, ok := want[img.Ref]
		if !ok {
			continue
		}
		delete(want, img.Ref)
		var got []string
		for _, f := range img.Files {
			got = append(got, f.Path)
			if _, err := os.Stat(f.Source); err != nil {
				t.Errorf("%s: %v", img.Ref, err)
			}
		}
		if !slices.Equal(got, paths) || img.StandIn {
			t.Errorf("%s: files %q, stand-in %v", img.Ref, got, img.StandIn)
		}
	}
	if len(want) > 0 {
		t.Errorf("not planned: %v", slices.Collect(maps.Keys(want)))
	}
	_, problems, err = Plan(fixture.Cluster(t, "external-etcd", map[string]string{"up.cue": "package cluster\nnetwork: cni: version: \"1.17.6\"\n"}), progs)
	if err != nil {
		t.Fatal(err)
	}
	wantProblems := []string{
		"quay.io/cilium/cilium:v1.17.6: the spec's cilium 1.17.6 cannot be built here; set network.cni.version: 1.18.2",
		"quay.io/cilium/operator-generic:v1.17.6: the spec's cilium 1.17.6 cannot be built here; set network.cni.version: 1.18.2",
	}
	if got := messages(problems); !slices.Equal(got, wantProblems) {
		t.Errorf("problems\n%q\nwant\n%q", got, wantProblems)
	}
}
