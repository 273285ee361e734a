package nspawn

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
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

// hostRoute is one route of the host's main table, as ip -j prints it.
type hostRoute struct {
	Dst string `json:"dst"`
	Dev string `json:"dev"`
}

// routeClash says which of the host's routes would overlap the node
// networks: up would shadow them, or they it.
func routeClash(networks []netip.Prefix) error {
	for _, family := range []string{"-4", "-6"} {
		out, err := exec.Command("ip", "-j", family, "route", "show", "table", "main").Output()
		if err != nil {
			return fmt.Errorf("ip -j %s route: %v", family, err)
		}
		var routes []hostRoute
		if err := json.Unmarshal(out, &routes); err != nil {
			return fmt.Errorf("ip -j %s route: %v", family, err)
		}
		for _, r := range routes {
			if r.Dst == "default" || r.Dst == "" {
				continue
			}
			dst, err := netip.ParsePrefix(r.Dst)
			if err != nil {
				a, aerr := netip.ParseAddr(r.Dst)
				if aerr != nil {
					continue
				}
				dst = netip.PrefixFrom(a, a.BitLen())
			}
			for _, nw := range networks {
				if dst.Overlaps(nw) {
					return fmt.Errorf("the host already routes %s (dev %s), which overlaps the node network %s: kcompile up would take those addresses over; change the spec's network.nodes or free the range", r.Dst, r.Dev, nw)
				}
			}
		}
	}
	return nil
}

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

// mtuArg is an MTU as ip takes it.
func mtuArg(mtu int) string { return strconv.Itoa(mtu) }
