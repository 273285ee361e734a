package restore

import (
	"fmt"
	"io"
	"path"
	"slices"
	"strings"

	"github.com/kcompile/kcompile/compiler/ir"
	"github.com/kcompile/kcompile/layout"
)

// Kind is what a step of a restore does; a runtime performs each kind
// and waits on its gate.
type Kind string

// The kinds of step, in the order a restore takes them.
const (
	// StopControlPlane stops every API server (and the controllers
	// that act on what it serves), so that nothing writes to etcd while
	// its data is replaced, and the backup timers.
	StopControlPlane Kind = "stop control plane"
	// StopEtcd stops every member.
	StopEtcd Kind = "stop etcd"
	// Lay copies the snapshot to every member (Command.Copy).
	Lay Kind = "lay snapshot"
	// Restore writes every member's data from the snapshot and moves
	// the data it replaces aside.
	Restore Kind = "restore"
	// StartEtcd starts every member at once (a member alone has no
	// quorum); its gate: every member healthy, the member list the
	// cluster's.
	StartEtcd Kind = "start etcd"
	// StartControlPlane starts the API servers and controllers; its
	// gate: every API server ready.
	StartControlPlane Kind = "start control plane"
	// NodesReady is a gate alone: every node Ready.
	NodesReady Kind = "nodes ready"
	// Clean removes what the restore laid.
	Clean Kind = "clean"
)

// BumpRevision is how far the restored key space's revision is moved
// past the snapshot's: more than the writes a cluster makes between a
// snapshot and its restore, so that a watcher that saw a revision after
// the snapshot is never served an older state under a newer number (the
// value etcd's recovery guide gives).
const BumpRevision = 1_000_000_000

// Plan is a restore of cluster Cluster from a snapshot.
type Plan struct {
	Cluster  string
	Snapshot *Snapshot
	// Token is the restored cluster's token: new, so that the members'
	// IDs are new and no member of the cluster before the restore is
	// taken for one of it. Derived from the snapshot, so that a restore
	// taken again from the same snapshot gives the same cluster.
	Token string
	// Aside is where each member's data before the restore is moved.
	Aside string
	Steps []Step
}

// Step is one step of a restore: commands on nodes, then its kind's
// gate.
type Step struct {
	N    int
	Kind Kind
	// Say is what the step does and why, one line.
	Say      string
	Commands []Command
}

// Command is what a step does on one node, as root: a copy of the
// snapshot to Copy (0600), or Argv, each run in order.
type Command struct {
	Node string
	Copy string
	Argv [][]string
}

// Options places a restore.
type Options struct {
	// Stamp names the directory each member's data is moved to (the
	// restore's time).
	Stamp string
	// Etcdutl is the path of etcdutl on each member, by node; a node
	// missing from it has the one the spec installs (with etcd.backup).
	Etcdutl map[string]string
}

// Units a restore stops and starts.
const (
	unitEtcd              = "etcd.service"
	unitAPIServer         = "kube-apiserver.service"
	unitControllerManager = "kube-controller-manager.service"
	unitScheduler         = "kube-scheduler.service"
	unitBackupTimer       = "etcd-backup.timer"
)

// Steps are the restore of c from s: the ordered steps every runtime
// takes, and the text printed for hosts no runtime reaches.
func Steps(c *ir.Cluster, s *Snapshot, opts Options) *Plan {
	p := &Plan{
		Cluster:  c.Name,
		Snapshot: s,
		Token:    Token(c.Name, s),
		Aside:    layout.Abs(layout.EtcdBeforeRestoreDir + opts.Stamp),
	}
	var apiServers []string
	for _, n := range c.Nodes {
		if n.Runs(ir.ComponentAPIServer) {
			apiServers = append(apiServers, n.Name)
		}
	}
	members := c.Etcd.Members
	add := func(k Kind, say string, cmds []Command) {
		p.Steps = append(p.Steps, Step{N: len(p.Steps) + 1, Kind: k, Say: say, Commands: cmds})
	}
	each := func(nodes []string, argv ...[]string) []Command {
		var out []Command
		for _, n := range nodes {
			out = append(out, Command{Node: n, Argv: argv})
		}
		return out
	}
	var memberNodes []string
	for _, m := range members {
		memberNodes = append(memberNodes, m.Node)
	}
	backup := c.Etcd.Backup != nil
	stop := each(apiServers, []string{"systemctl", "stop", unitScheduler, unitControllerManager, unitAPIServer})
	if backup {
		stop = mergeCommands(stop, each(memberNodes, []string{"systemctl", "stop", unitBackupTimer}))
	}
	add(StopControlPlane, "stop every API server, controller manager and scheduler, so that nothing writes to etcd while its data is replaced", stop)
	add(StopEtcd, "stop every etcd member", each(memberNodes, []string{"systemctl", "stop", unitEtcd}))
	var lay []Command
	for _, m := range members {
		lay = append(lay, Command{Node: m.Node, Copy: layout.Abs(layout.RestoreSnapshot)})
	}
	add(Lay, "copy the snapshot to every member", lay)
	var restore []Command
	data, restoring := layout.Abs(layout.EtcdDataDir), layout.Abs(layout.EtcdRestoringDir)
	for _, m := range members {
		etcdutl := Etcdutl(c, m)
		if u, ok := opts.Etcdutl[m.Node]; ok {
			etcdutl = u
		}
		restore = append(restore, Command{Node: m.Node, Argv: [][]string{
			// What a restore stopped part-way left; kcompile's own.
			{"rm", "-rf", restoring},
			Argv(etcdutl, layout.Abs(layout.RestoreSnapshot), m.Name, c.Etcd.InitialCluster(), p.Token, m.PeerURL(), restoring),
			{"chmod", "0700", restoring},
			{"mv", data, p.Aside},
			{"mv", restoring, data},
		}})
	}
	add(Restore, fmt.Sprintf("write every member's data from the snapshot, with its own name and peer URL, the new cluster token and the revision moved on by %d (compacted: watchers relist); the data it replaces is kept at %s", BumpRevision, p.Aside), restore)
	add(StartEtcd, "start every member at once; gate: every member healthy, the member list the spec's", each(memberNodes, []string{"systemctl", "start", "--no-block", unitEtcd}))
	start := each(apiServers, []string{"systemctl", "start", unitAPIServer, unitControllerManager, unitScheduler})
	if backup {
		start = mergeCommands(start, each(memberNodes, []string{"systemctl", "start", unitBackupTimer}))
	}
	add(StartControlPlane, "start the API servers, controller managers and schedulers on the restored data; gate: every API server ready", start)
	add(NodesReady, "gate: every node Ready (the kubelets' watches see the compaction and relist the restored pods)", nil)
	add(Clean, "remove the snapshot's copies", each(memberNodes, []string{"rm", "-rf", layout.Abs(layout.RestoreDir)}))
	return p
}

// Token is the cluster token of cluster's restore from s.
func Token(cluster string, s *Snapshot) string { return cluster + "-restore-" + s.Digest[:12] }

// Argv is etcdutl's restore of one member from the snapshot into a new
// data directory: the member's own name and peer URL, the cluster's
// members, the restore's token, the revision moved on and compacted.
func Argv(etcdutl, snapshot, name, initialCluster, token, peerURL, dataDir string) []string {
	return []string{etcdutl, "snapshot", "restore", snapshot,
		"--name", name,
		"--initial-cluster", initialCluster,
		"--initial-cluster-token", token,
		"--initial-advertise-peer-urls", peerURL,
		"--data-dir", dataDir,
		"--bump-revision", fmt.Sprint(BumpRevision),
		"--mark-compacted"}
}

// mergeCommands appends b's commands to a's of the same node, and b's
// other nodes after.
func mergeCommands(a, b []Command) []Command {
	for _, cb := range b {
		i := slices.IndexFunc(a, func(ca Command) bool { return ca.Node == cb.Node })
		if i < 0 {
			a = append(a, cb)
			continue
		}
		a[i].Argv = append(a[i].Argv, cb.Argv...)
	}
	return a
}

// Etcdutl is where the spec installs etcdutl on member m's node (with
// etcd.backup): its OS's binary directory.
func Etcdutl(c *ir.Cluster, m ir.EtcdMember) string {
	var o ir.OS
	if i := slices.IndexFunc(c.Nodes, func(n ir.Node) bool { return n.Name == m.Node }); i >= 0 {
		o = c.Nodes[i].OS
	}
	return path.Join(o.BinDir(), "etcdutl")
}

// WriteText writes the restore's steps as an operator runs them by hand
// on hosts kcompile does not reach: each command on its node, as root.
func (p *Plan) WriteText(w io.Writer) error {
	s := p.Snapshot
	hashed := "its SHA-256 checked"
	if !s.Hashed {
		hashed = "no SHA-256 (a data directory's db): bbolt's check only"
	}
	fmt.Fprintf(w, "restore of cluster %s from %s: revision %d, %d keys, %s; cluster token %s\n", p.Cluster, s.Path, s.Revision, s.Keys, hashed, p.Token)
	for _, st := range p.Steps {
		fmt.Fprintf(w, "step %d/%d: %s: %s\n", st.N, len(p.Steps), st.Kind, st.Say)
		for _, c := range st.Commands {
			if c.Copy != "" {
				fmt.Fprintf(w, "  %s: copy %s to %s (mode 0600, in a directory 0700)\n", c.Node, s.Path, c.Copy)
				continue
			}
			for _, argv := range c.Argv {
				fmt.Fprintf(w, "  %s: %s\n", c.Node, shellWords(argv))
			}
		}
	}
	return nil
}

// shellWords quotes each word for a POSIX shell where it needs it.
func shellWords(argv []string) string {
	out := make([]string, len(argv))
	for i, a := range argv {
		if a != "" && strings.Trim(a, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./:=,@+") == "" {
			out[i] = a
			continue
		}
		out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(out, " ")
}
