package nspawn

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/kcompile/kcompile/compiler/ir"
	"github.com/kcompile/kcompile/layout"
	"github.com/kcompile/kcompile/targets"
	"github.com/kcompile/kcompile/targets/ignition"
	"github.com/kcompile/kcompile/targets/terraform"
)

// The Ignition target: a machine boots as a network-booted Flatcar or
// Fedora CoreOS machine does the first time. Up plays its firmware and
// iPXE (the kernel command line of the node's Matchbox profile, with
// ${mac:hexhyp} filled in) and Matchbox (the node's config at
// /ignition?mac=, the artifacts at /assets/, over HTTP on the spec's
// boot.matchboxURL); the machine's PID 1 plays the initramfs: on the
// first boot only it runs Ignition's own stages against the root, which
// fetch the config and the artifacts (verified by their sha256) and lay
// the node down, then starts systemd, which applies the presets Ignition
// wrote as on any first boot.

// IgnitionProgram is the name of Ignition's program in --binaries: the
// `ignition` of the Ignition module, which scripts/tools builds into
// .bin/node.
const IgnitionProgram = "ignition"

// firstBootFlag is the file whose presence makes a boot the first, on the
// node's family: Flatcar's GRUB passes flatcar.first_boot while
// /boot/flatcar/first_boot exists and ignition-quench removes it; Fedora
// CoreOS's passes ignition.firstboot while /boot/ignition.firstboot
// exists and coreos-ignition-firstboot-complete removes it.
func firstBootFlag(os ir.OS) string {
	if os == ir.OSFlatcar {
		return flatcarFirstBoot
	}
	return fcosFirstBoot
}

const (
	flatcarFirstBoot = "boot/flatcar/first_boot"
	fcosFirstBoot    = "boot/ignition.firstboot"
)

// ignitionInit is the part of the PID-1 script that plays the initramfs
// on a first boot. It configures the node's address as DHCP would give
// it to the initramfs (UpNetwork); Ignition's fetch-offline stage finds
// the config's URL needs the network and flags it; fetch gets the
// config; disks and mount have nothing to do for kcompile's configs;
// files lays the files, the users and the presets. The address goes
// again before systemd, whose networkd configures it from the config's
// file, except where nothing would (UpNetworkKept). "uninitialized" in
// /etc/machine-id makes systemd's first boot, which applies presets, as
// on the distributions; the config and Ignition's state in /run go, as
// the initramfs's /run does at switch-root.
const ignitionInit = `# The first boot of an Ignition system: Ignition's stages, as its initramfs
# runs them, with the kernel command line of the node's profile.
first=
for f in /` + flatcarFirstBoot + ` /` + fcosFirstBoot + `; do
	if [ -e "$f" ]; then first=$f; fi
done
if [ -n "$first" ] || [ -e /` + layout.UpNetworkKept + ` ]; then
	sh -e /` + layout.UpNetwork + ` up
fi
if [ -n "$first" ]; then
	echo "kcompile up: $first is there: Ignition's first boot"
	mount --bind /` + layout.UpCmdline + ` /proc/cmdline
	if [ "$first" = /` + fcosFirstBoot + ` ] && ! grep -q '^wheel:' /etc/group; then
		groupadd --system wheel
	fi
	for stage in fetch-offline fetch files; do
		if [ $stage = fetch ] && [ ! -e /run/ignition/neednet ]; then continue; fi
		/` + layout.UpIgnition + ` --platform=metal --stage=$stage --log-to-stdout
	done
	umount /proc/cmdline
	if [ ! -e /` + layout.UpNetworkKept + ` ]; then
		sh -e /` + layout.UpNetwork + ` down
	fi
	rm -rf /run/ignition.json /run/ignition
	echo uninitialized >/etc/machine-id
	rm -f "$first"
fi
`

// matchbox is up's stand-in for Matchbox on the bridge: what a node's
// Ignition fetches on its first boot.
type matchbox struct {
	addr netip.AddrPort
	// configs are the nodes' Ignition configs by MAC (colons, lower
	// case).
	configs map[string][]byte
	// assets are the files served under /assets/, by URL path.
	assets map[string]string
}

// planMatchbox reads what the machines will fetch: each node's config,
// and each artifact, taken by its URL's last segment from binaries and
// checked against its sha256 now (a mismatch would fail Ignition deep
// inside a machine). The reasons a cluster cannot boot from Ignition here
// are returned, all of them.
func planMatchbox(c *ir.Cluster, tree *targets.Tree, binaries string) (*matchbox, []string) {
	var why []string
	if c.Boot == nil {
		return nil, []string{"boot: up --target ignition serves the nodes' configs where their kernel command line points Ignition, Matchbox's boot.matchboxURL, which the spec does not set; set it to an http:// address on a node network"}
	}
	u, err := url.Parse(c.Boot.MatchboxURL)
	if err != nil {
		return nil, []string{fmt.Sprintf("boot.matchboxURL %q: %v", c.Boot.MatchboxURL, err)}
	}
	addr, err := netip.ParseAddr(u.Hostname())
	_, onNet := networkOf(c, addr)
	if u.Scheme != "http" || u.Path != "" || err != nil || !onNet {
		return nil, []string{fmt.Sprintf("boot.matchboxURL %q: up serves Matchbox on its bridge, over plain HTTP at an address of a node network (%s), without a path; the machines reach nothing else", c.Boot.MatchboxURL, ir.Join(c.Network.NodeNetworks, ", "))}
	}
	port := uint64(80)
	if p := u.Port(); p != "" {
		if port, err = strconv.ParseUint(p, 10, 16); err != nil || port == 0 {
			return nil, []string{fmt.Sprintf("boot.matchboxURL %q: port %s", c.Boot.MatchboxURL, p)}
		}
	}
	mb := &matchbox{addr: netip.AddrPortFrom(addr, uint16(port)), configs: map[string][]byte{}, assets: map[string]string{}}
	for _, n := range c.Nodes {
		if !n.OS.Ignition() {
			why = append(why, fmt.Sprintf("%s: node %s runs %s, which Ignition does not configure; boot the cluster with --target systemd or cloudinit, or run the node on \"flatcar\" or \"fedora-coreos\"", n.OSPath, n.Name, n.OS.Name()))
			continue
		}
		f, ok := tree.Get(layout.NodeTree(n.Name, ignition.ConfigName))
		if !ok {
			return nil, []string{"kcompile bug: the Ignition tree has no config for node " + n.Name}
		}
		mb.configs[strings.ToLower(n.MAC)] = f.Data
	}
	prefix := c.Boot.MatchboxURL + "/assets/"
	// Artifacts of several paths share a file (a family's binary
	// directory each): each file is read once.
	sums := map[string]string{}
	for _, a := range c.Install.Artifacts {
		rest, ok := strings.CutPrefix(a.URL, prefix)
		if !ok || strings.ContainsAny(rest, "?#") {
			why = append(why, fmt.Sprintf("install.artifacts.%s: its url %s is not under Matchbox's assets (%s), which up serves; the machines reach nothing else", a.Name, a.URL, prefix))
			continue
		}
		name := path.Base(rest)
		file := filepath.Join(binaries, name)
		sum, ok := sums[file]
		var err error
		if !ok && binaries != "" {
			if sum, err = fileSHA256(file); err == nil {
				sums[file] = sum
			}
		}
		switch {
		case binaries == "":
			why = append(why, fmt.Sprintf("install.artifacts.%s: up serves Matchbox's assets from --binaries DIR, by the last segment of each url (%s): give it", a.Name, name))
		case err != nil:
			why = append(why, fmt.Sprintf("install.artifacts.%s: %v (up serves %s from --binaries, by the last segment of its url)", a.Name, err, a.URL))
		case sum != a.SHA256:
			why = append(why, fmt.Sprintf("install.artifacts.%s: %s has sha256 %s, not the spec's %s: the node's Ignition would refuse it", a.Name, file, sum, a.SHA256))
		default:
			mb.assets[strings.TrimPrefix(prefix, c.Boot.MatchboxURL)+rest] = file
		}
	}
	return mb, why
}

func fileSHA256(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// serve listens on the bridge until ctx ends; it returns once listening.
func (mb *matchbox) serve(ctx context.Context) error {
	l, err := net.Listen("tcp", mb.addr.String())
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mb}
	go func() { _ = srv.Serve(l) }()
	context.AfterFunc(ctx, func() { _ = srv.Close() })
	return nil
}

// ServeHTTP answers as Matchbox does: a node's Ignition config by the
// MAC its group selects, the assets by path, 404 for anything else.
func (mb *matchbox) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	if r.URL.Path == "/ignition" {
		mac, err := net.ParseMAC(r.URL.Query().Get("mac"))
		cfg, ok := mb.configs[strings.ToLower(mac.String())]
		if err != nil || !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(cfg)
		return
	}
	if file, ok := mb.assets[r.URL.Path]; ok {
		http.ServeFile(w, r, file)
		return
	}
	http.NotFound(w, r)
}

// initramfsNetwork is a script that configures the node's addresses and
// default routes on the machine's interface (up), with the commands up
// runs for the systemd target (addressing), or removes them again
// (down), as a network boot's initramfs configures its network before
// Ignition and tears it down before the system starts.
func initramfsNetwork(p *plan, m *machine) []byte {
	var b strings.Builder
	b.WriteString("# Written by kcompile up: the node's network as its initramfs has it.\ncase $1 in\nup)\n")
	for _, cmd := range addressing(p, m) {
		b.WriteString("\tip " + strings.Join(cmd, " ") + "\n")
	}
	b.WriteString("\t;;\ndown)\n\tip route flush dev eth0 scope global\n\tip addr flush dev eth0 scope global\n\t;;\nesac\n")
	return []byte(b.String())
}

// kernelCmdline is the command line the node's Matchbox profile gives
// its kernel, as iPXE passes it, ${mac:hexhyp} replaced by the node's
// MAC.
func kernelCmdline(c *ir.Cluster, n ir.Node) (string, error) {
	if c.Boot == nil {
		return "", errors.New("kcompile bug: the Ignition target without boot")
	}
	_, _, args, err := terraform.IgnitionProfile(c, n)
	if err != nil {
		return "", err
	}
	line := strings.ReplaceAll(strings.Join(args, " "), "${mac:hexhyp}", strings.ReplaceAll(strings.ToLower(n.MAC), ":", "-"))
	return line + "\n", nil
}
