package nspawn

import (
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// ip runs iproute2's ip with args (never through a shell).
func ip(args ...string) error {
	cmd := exec.Command("ip", args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// linkExists says whether the host has a device called name.
func linkExists(name string) bool {
	_, err := os.Stat("/sys/class/net/" + name)
	return err == nil
}

// netnsExists says whether a named network namespace exists.
func netnsExists(name string) bool {
	_, err := os.Stat("/run/netns/" + name)
	return err == nil
}

// netnsPath is where ip netns keeps a named namespace.
func netnsPath(name string) string { return "/run/netns/" + name }

// addrArg is an address with its prefix length as ip takes it.
func addrArg(p netip.Prefix) string { return p.String() }

// family is ip's flag for a's family.
func family(a netip.Addr) string {
	if a.Is4() {
		return "-4"
	}
	return "-6"
}

// deleteNetns removes a named namespace; a missing one is not an error.
func deleteNetns(name string) error {
	if !netnsExists(name) {
		return nil
	}
	return ip("netns", "delete", name)
}

// deleteLink removes a host device; a missing one is not an error.
func deleteLink(name string) error {
	if !linkExists(name) {
		return nil
	}
	err := ip("link", "delete", name)
	if err != nil && !linkExists(name) {
		return nil
	}
	return err
}

// bridgeAlias starts the alias up gives its bridge, followed by the work
// directory: a bridge left by an up that was killed (its journal never
// undone) is then named with the one command that removes it, by the
// next up's preflight and by the boot tests' sweep.
const bridgeAlias = "kcompile up --work "

// maxAlias is the kernel's limit on an interface alias (IFALIASZ less
// its terminating NUL).
const maxAlias = 255

// aliasWork is the work directory an alias of up's names.
func aliasWork(alias string) (string, bool) {
	work, ok := strings.CutPrefix(alias, bridgeAlias)
	return work, ok && filepath.IsAbs(work)
}

// mtuArg is an MTU as ip takes it.
func mtuArg(mtu int) string { return strconv.Itoa(mtu) }
