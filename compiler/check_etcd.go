package compiler

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/kcompile/kcompile/compiler/calendar"
	"github.com/kcompile/kcompile/compiler/diag"
	"github.com/kcompile/kcompile/layout"
)

const (
	CodeEtcdEven        = "KC0401"
	CodeEtcdSingle      = "KC0402"
	CodeEtcdStackedNode = "KC0403"
	CodeEtcdNoAddress   = "KC0404"
	CodeEtcdZone        = "KC0405"
	CodeEtcdRack        = "KC0406"
	CodeEtcdNoMembers   = "KC0407"
	CodeEtcdTooMany     = "KC0408"
	CodeEtcdStackedAddr = "KC0409"
	CodeEtcdJoining     = "KC0410"
	CodeBackupSchedule  = "KC0411"
	CodeBackupDirectory = "KC0412"
	CodeBackupUpload    = "KC0413"
	CodeBackupReach     = "KC0414"
	CodeBackupNone      = "KC0415"
	CodeBackupTimeout   = "KC0416"
)

func etcdFamily() family {
	return family{name: "etcd", check: checkEtcd, rules: []diag.Rule{
		rule(CodeEtcdEven, diag.Error, "etcd has an even number of members: no more fault tolerance than one fewer, and more ways to lose quorum"),
		rule(CodeEtcdSingle, diag.Warning, "etcd has a single member: losing it loses the cluster's state"),
		rule(CodeEtcdStackedNode, diag.Error, "a stacked etcd member is not a control-plane node"),
		rule(CodeEtcdNoAddress, diag.Error, "an external etcd member has no address"),
		rule(CodeEtcdZone, diag.Warning, "losing one zone loses etcd quorum"),
		rule(CodeEtcdRack, diag.Warning, "losing one rack loses etcd quorum"),
		rule(CodeEtcdNoMembers, diag.Error, "the etcd topology is external but no member is declared"),
		rule(CodeEtcdTooMany, diag.Warning, "etcd has more than 7 members: every write waits for a majority"),
		rule(CodeEtcdStackedAddr, diag.Error, "a stacked etcd member sets its own address, MAC, zone or rack instead of its node's"),
		rule(CodeEtcdJoining, diag.Error, "etcd.joining names no member of the cluster, or every member: a member joins one that runs"),
		rule(CodeBackupSchedule, diag.Error, "etcd.backup.schedule is no calendar event systemd reads, or one that never elapses"),
		rule(CodeBackupDirectory, diag.Error, "etcd.backup.directory is no clean absolute path, or lies in etcd's data directory or a system directory"),
		rule(CodeBackupUpload, diag.Error, "etcd.backup.upload is no command: its program is no clean absolute path, or an argument holds a control character"),
		rule(CodeBackupReach, diag.Warning, "the snapshots etcd.backup keeps reach back less than a day"),
		rule(CodeBackupNone, diag.Warning, "a cluster labelled production takes no etcd snapshots"),
		rule(CodeBackupTimeout, diag.Error, "etcd.backup.timeout is not a positive duration"),
	}}
}

func checkEtcd(m *model) {
	s := m.spec
	invalid := false
	if s.Etcd.Topology == "external" {
		if len(s.Etcd.Members) == 0 {
			m.report(CodeEtcdNoMembers, "etcd.topology", "etcd topology is external but etcd.members is empty",
				"declare the external members with their addresses, or use topology \"stacked\"")
			return
		}
		for _, name := range sortedKeys(s.Etcd.Members) {
			if s.Etcd.Members[name].Address == "" {
				m.report(CodeEtcdNoAddress, "etcd.members."+quoteLabel(name), fmt.Sprintf("external etcd member %s has no address", name),
					"set address: the API servers and the other members dial it")
			}
		}
	} else {
		for _, name := range sortedKeys(s.Etcd.Members) {
			path := "etcd.members." + quoteLabel(name)
			if _, ok := s.ControlPlane.Nodes[name]; !ok {
				m.report(CodeEtcdStackedNode, path, fmt.Sprintf("stacked etcd member %s is not a control-plane node", name),
					"stacked members run on control-plane nodes: name one of "+strings.Join(sortedKeys(s.ControlPlane.Nodes), ", ")+", or use topology \"external\"")
				invalid = true
				continue
			}
			// Reported at the first field set, and naming them all, so the
			// user sees which values to move.
			mem := s.Etcd.Members[name]
			var set []string
			for _, f := range []struct{ field, v string }{{"address", mem.Address}, {"mac", mem.MAC}, {"zone", mem.Zone}, {"rack", mem.Rack}} {
				if f.v != "" {
					set = append(set, f.field)
				}
			}
			if len(set) > 0 {
				m.report(CodeEtcdStackedAddr, path+"."+set[0], fmt.Sprintf("stacked etcd member %s sets its own %s", name, strings.Join(set, ", ")),
					"a stacked member takes these from its control-plane node: remove them here and set them on controlPlane.nodes."+quoteLabel(name))
			}
		}
	}
	members := m.etcdMembers()
	n := len(members)
	checkJoining(m, members)
	checkBackup(m)
	if n == 0 || invalid {
		// Counting the members that remain would misstate the topology
		// the user wrote.
		return
	}
	where := "etcd.topology"
	if s.Etcd.Topology == "external" || len(s.Etcd.Members) > 0 {
		where = "etcd.members"
	} else if !m.written("etcd.topology") {
		where = "controlPlane.nodes"
	}
	switch {
	case n == 1:
		m.report(CodeEtcdSingle, where, "etcd has a single member: it tolerates no failure, and losing its disk loses the cluster",
			"run 3 members (or 5) for a cluster that must survive a machine failure")
	case n%2 == 0:
		m.report(CodeEtcdEven, where, fmt.Sprintf("etcd has %d members: quorum is %d, so it tolerates %d failure(s), no more than %d members would, and a network split can leave no side with quorum",
			n, quorum(n), n-quorum(n), n-1),
			fmt.Sprintf("use an odd number of members: %d or %d", n-1, n+1))
	case n > 7:
		m.report(CodeEtcdTooMany, where, fmt.Sprintf("etcd has %d members; every write waits for %d of them", n, quorum(n)),
			"etcd recommends at most 7 members; run 5 and make the rest learners or remove them")
	}
	// With one or two members losing any member loses quorum, which
	// CodeEtcdSingle or CodeEtcdEven already report; no spreading over
	// zones or racks would help.
	if n > 2 {
		domainLoss(m, members, "zone", CodeEtcdZone, func(e etcdMember) string { return e.zone })
		domainLoss(m, members, "rack", CodeEtcdRack, func(e etcdMember) string { return e.rack })
	}
}

// domainLoss warns for each failure domain whose loss leaves fewer than a
// quorum of members.
func domainLoss(m *model, members []etcdMember, kind, code string, of func(etcdMember) string) {
	count := map[string][]etcdMember{}
	for _, e := range members {
		if d := of(e); d != "" {
			count[d] = append(count[d], e)
		}
	}
	if len(count) == 0 {
		return
	}
	q := quorum(len(members))
	domains := sortedKeys(count)
	sort.Strings(domains)
	for _, d := range domains {
		lost := count[d]
		if len(members)-len(lost) >= q {
			continue
		}
		var names, paths []string
		for _, e := range lost {
			names = append(names, e.name)
			paths = append(paths, e.node+"."+kind)
		}
		m.report(code, paths[0], fmt.Sprintf("losing %s %s loses etcd quorum: it holds %d of %d members (%s) and %d are needed",
			kind, diag.Quote(d), len(lost), len(members), strings.Join(names, ", "), q),
			fmt.Sprintf("spread the members so that no %s holds %d or more of them", kind, len(members)-q+1), paths[1:]...)
	}
}

// checkJoining holds etcd.joining to the members: each a member, and at
// least one member not joining, whose cluster the others join.
func checkJoining(m *model, members []etcdMember) {
	joining := m.spec.Etcd.Joining
	if len(joining) == 0 {
		return
	}
	names := map[string]bool{}
	for _, e := range members {
		names[e.name] = true
	}
	for i, j := range joining {
		if !names[j] {
			var all []string
			for _, e := range members {
				all = append(all, e.name)
			}
			m.report(CodeEtcdJoining, fmt.Sprintf("etcd.joining[%d]", i), fmt.Sprintf("etcd.joining names %s, which is no etcd member", diag.Quote(j)),
				"name members of the cluster ("+strings.Join(all, ", ")+"), or remove it")
			return
		}
	}
	staying := 0
	for _, e := range members {
		if !slices.Contains(joining, e.name) {
			staying++
		}
	}
	if staying == 0 {
		m.report(CodeEtcdJoining, "etcd.joining", "every etcd member is joining: none runs the cluster they would join",
			"leave out of etcd.joining the members that bootstrap the cluster (a first boot joins none)")
	}
}

// checkBackup checks etcd.backup, and its absence from a production
// cluster. A schedule's reach is measured from its first elapse after
// the epoch: a check reads no clock.
func checkBackup(m *model) {
	b := m.spec.Etcd.Backup
	if b == nil {
		for _, k := range sortedKeys(m.spec.Labels) {
			if m.spec.Labels[k] == "production" {
				m.report(CodeBackupNone, "labels."+quoteLabel(k), fmt.Sprintf("the cluster is labelled %s: production, and takes no etcd snapshots: losing its control-plane disks loses every object", k),
					"set etcd.backup (etcd: backup: {} takes one twice a day on every member and keeps 5), and copy them off the machines with etcd.backup.upload")
				return
			}
		}
		return
	}
	if ev, err := calendar.Parse(b.Schedule); err != nil {
		m.report(CodeBackupSchedule, "etcd.backup.schedule", err.Error(),
			`write a systemd calendar event in UTC (systemd.time(7)): "daily", "*-*-* 00/12:00:00", "Mon..Fri 02:30"; systemd-analyze calendar checks one`)
	} else if first, ok := ev.Next(time.Unix(0, 0)); !ok {
		m.report(CodeBackupSchedule, "etcd.backup.schedule", fmt.Sprintf("%s never elapses: no snapshot would be taken", diag.Quote(b.Schedule)),
			"name a day that exists (no 30 February) in a year to come")
	} else if reach, _ := ev.Reach(first.Add(-time.Second), b.Retention); reach < 24*time.Hour {
		hint := "take them less often: at this schedule no 1,000 snapshots reach a day"
		if n, ok := ev.Needed(first.Add(-time.Second), 24*time.Hour, 1000); ok {
			hint = fmt.Sprintf("keep %d (they reach a day at this schedule), or take them less often", n)
		}
		m.report(CodeBackupReach, "etcd.backup.retention", fmt.Sprintf("the %d snapshots kept at %s reach back %s: a mistake noticed the next morning is older than every one", b.Retention, diag.Quote(ev.String()), reach),
			hint, "etcd.backup.schedule")
	}
	if why := pathProblem(b.Directory); why != "" {
		m.report(CodeBackupDirectory, "etcd.backup.directory", fmt.Sprintf("etcd.backup.directory %s: %s", diag.Quote(b.Directory), why),
			"write a clean absolute path of letters, digits and /._+-@:=, such as /var/lib/etcd-backup")
	} else {
		overlaps := false
		// The operating system's directories, and etcd's own data.
		for _, d := range []string{"/bin", "/boot", "/dev", "/etc", "/lib", "/lib64", "/proc", "/run", "/sbin", "/sys", "/tmp", "/usr", "/var/tmp", "/" + layout.EtcdDataDir} {
			if b.Directory == d || strings.HasPrefix(b.Directory, d+"/") || strings.HasPrefix(d, b.Directory+"/") {
				m.report(CodeBackupDirectory, "etcd.backup.directory", fmt.Sprintf("etcd.backup.directory %s overlaps %s: the backup unit makes it 0700 and prunes files in it", diag.Quote(b.Directory), d),
					"give the snapshots a directory of their own, such as /var/lib/etcd-backup")
				overlaps = true
				break
			}
		}
		// Directories that hold others' files: the unit would make them
		// 0700.
		if !overlaps && slices.Contains([]string{"/home", "/media", "/mnt", "/opt", "/root", "/srv", "/var", "/var/backups", "/var/cache", "/var/lib", "/var/log"}, b.Directory) {
			m.report(CodeBackupDirectory, "etcd.backup.directory", fmt.Sprintf("etcd.backup.directory %s holds other programs' files: the backup unit makes it 0700 and prunes files in it", diag.Quote(b.Directory)),
				"give the snapshots a directory of their own, such as "+b.Directory+"/etcd-backup")
		}
	}
	if d, err := time.ParseDuration(b.Timeout); err != nil || d <= 0 {
		m.report(CodeBackupTimeout, "etcd.backup.timeout", fmt.Sprintf("etcd.backup.timeout %s is not a positive duration: the backup unit would stop no run", diag.Quote(b.Timeout)),
			`write a Go duration such as "1h" or "2h30m": how long a snapshot and its upload may take`)
	}
	for i, a := range b.Upload {
		p := fmt.Sprintf("etcd.backup.upload[%d]", i)
		if i == 0 {
			if why := pathProblem(a); why != "" {
				m.report(CodeBackupUpload, p, fmt.Sprintf("the upload program %s: %s", diag.Quote(a), why),
					"name the program by its absolute path (/usr/local/bin/rclone): the unit runs it without a shell or a PATH")
				break
			}
			continue
		}
		if j := strings.IndexFunc(a, func(r rune) bool { return r < 0x20 || r == 0x7f }); j >= 0 {
			m.report(CodeBackupUpload, p, fmt.Sprintf("upload argument %d holds %s", i, describeRune([]rune(a[j:])[0])),
				"write each argument on one line, without control characters")
			break
		}
	}
}
