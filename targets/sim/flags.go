package sim

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/kcompile/kcompile/targets"
	"github.com/kcompile/kcompile/targets/unitfile"
)

// unit parses one of a node's compiled units.
func unit(tree *targets.Tree, node, name string) (unitfile.File, error) {
	f, ok := tree.Get(targets.NodePath(node, "etc/systemd/system/"+name))
	if !ok {
		return unitfile.File{}, fmt.Errorf("kcompile bug: node %s has no %s", node, name)
	}
	return unitfile.Parse(f.Data)
}

// execArgs reads the arguments of a unit's ExecStart from a node's tree.
func execArgs(tree *targets.Tree, node, name string) ([]string, error) {
	u, err := unit(tree, node, name)
	if err != nil {
		return nil, err
	}
	exec := u.Commands("Service", "ExecStart")
	if len(exec) != 1 {
		return nil, fmt.Errorf("kcompile bug: %s of node %s has no single ExecStart", name, node)
	}
	return exec[0].Argv[1:], nil
}

// rooted rewrites the absolute paths of a node's files in s to where the
// simulation wrote them: root is the node's directory in the workdir (an
// absolute path without a trailing slash).
func rooted(s, root string) string {
	for _, p := range []string{"/etc/kubernetes/", "/var/lib/kubelet/", "/var/lib/kube-proxy/", "/var/lib/etcd", "/var/log/kubernetes/"} {
		s = strings.ReplaceAll(s, p, root+p)
	}
	return s
}

// flagMap reads "--name=value" arguments into a map.
func flagMap(args []string) map[string]string {
	out := map[string]string{}
	for _, a := range args {
		name, value, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		out[name] = value
	}
	return out
}

// withFlags replaces (or adds) flags; an empty value removes the flag.
func withFlags(args []string, set map[string]string) []string {
	var out []string
	done := map[string]bool{}
	for _, a := range args {
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if v, ok := set[name]; ok {
			if v != "" && !done[name] {
				out = append(out, "--"+name+"="+v)
			}
			done[name] = true
			continue
		}
		out = append(out, a)
	}
	names := make([]string, 0, len(set))
	for name := range set {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if v := set[name]; !done[name] && v != "" {
			out = append(out, "--"+name+"="+v)
		}
	}
	return out
}

// restartPolicy reads a unit's Restart= and RestartSec= (seconds, as
// the compiled units write them): whether systemd starts the program
// again when it exits by itself, and after how long.
func restartPolicy(tree *targets.Tree, node, name string) (bool, time.Duration) {
	u, err := unit(tree, node, name)
	if err != nil {
		return false, 0
	}
	restart := false
	for _, v := range u.Get("Service", "Restart") {
		restart = v == "always" || v == "on-failure" || v == "on-abnormal" || v == "on-abort"
	}
	delay := 100 * time.Millisecond // systemd's default RestartSec
	for _, v := range u.Get("Service", "RestartSec") {
		if d, err := time.ParseDuration(v); err == nil {
			delay = d
		} else if n, err := strconv.ParseFloat(v, 64); err == nil {
			delay = time.Duration(n * float64(time.Second))
		}
	}
	return restart, delay
}
