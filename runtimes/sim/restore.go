package sim

import (
	"context"
	"fmt"
	"io"
	"os/exec"
	"sort"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3client"

	"github.com/kcompile/kcompile/restore"
)

// Restore is a snapshot every member's data is restored from before etcd
// first starts (kcompile restore --rehearse), by Etcdutl, etcd's own
// restore, with the arguments a restore of the real cluster gives it.
type Restore struct {
	Snapshot *restore.Snapshot
	Etcdutl  string
}

// restoreMembers writes every member's data directory from the snapshot.
func (s *Sim) restoreMembers() error {
	r := s.opts.Restore
	token := restore.Token(s.cluster.Name, r.Snapshot)
	for _, m := range s.cluster.Etcd.Members {
		args, err := s.execArgs(m.Node, "etcd.service")
		if err != nil {
			return err
		}
		f := flagMap(args)
		argv := restore.Argv(r.Etcdutl, r.Snapshot.Path, f["name"], f["initial-cluster"], token, f["initial-advertise-peer-urls"], f["data-dir"])
		if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
			return fmt.Errorf("etcdutl snapshot restore of member %s: %v\n%s", m.Name, err, out)
		}
	}
	return nil
}

// RestoreReport is what came back of a snapshot in a restored
// simulation.
type RestoreReport struct {
	// Revision is the key space's revision now (the snapshot's, moved on
	// by restore.BumpRevision, and the writes since).
	Revision int64
	// Counts are the keys now by resource (restore.ResourceOf).
	Counts map[string]int
	// Missing are the snapshot's keys not back, but those bound to an
	// etcd lease, which expire by themselves.
	Missing []string
	Took    time.Duration
}

// RestoreReport reads the restored key space through a member.
func (s *Sim) RestoreReport(ctx context.Context, began time.Time) (*RestoreReport, error) {
	s.mu.Lock()
	var e *clientv3.Client
	for _, m := range s.cluster.Etcd.Members {
		if srv, ok := s.etcd[m.Name]; ok {
			e = v3client.New(srv.Server)
			break
		}
	}
	s.mu.Unlock()
	if e == nil {
		return nil, fmt.Errorf("no etcd member runs")
	}
	defer e.Close()
	resp, err := e.Get(ctx, "\x00", clientv3.WithFromKey(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, err
	}
	rep := &RestoreReport{Revision: resp.Header.Revision, Counts: map[string]int{}, Took: time.Since(began)}
	have := map[string]bool{}
	for _, kv := range resp.Kvs {
		have[string(kv.Key)] = true
		rep.Counts[restore.ResourceOf(string(kv.Key))]++
	}
	for _, k := range s.opts.Restore.Snapshot.Live {
		if !have[k] && !s.opts.Restore.Snapshot.Leased[k] {
			rep.Missing = append(rep.Missing, k)
		}
	}
	return rep, nil
}

// WriteText writes the report beside the snapshot's counts.
func (r *RestoreReport) WriteText(w io.Writer, snap *restore.Snapshot) {
	fmt.Fprintf(w, "restored from %s in %s: revision %d (the snapshot's %d, moved on by %d)\n", snap.Path, r.Took.Round(100*time.Millisecond), r.Revision, snap.Revision, restore.BumpRevision)
	seen := map[string]bool{}
	var resources []string
	for _, m := range []map[string]int{snap.Counts, r.Counts} {
		for k := range m {
			if !seen[k] {
				seen[k] = true
				resources = append(resources, k)
			}
		}
	}
	sort.Strings(resources)
	fmt.Fprintf(w, "  %-50s %9s %9s\n", "resource", "snapshot", "now")
	for _, k := range resources {
		fmt.Fprintf(w, "  %-50s %9d %9d\n", k, snap.Counts[k], r.Counts[k])
	}
	if len(r.Missing) == 0 {
		fmt.Fprintf(w, "every key of the snapshot is back (%d; keys bound to an etcd lease may expire)\n", snap.Keys)
		return
	}
	shown := r.Missing
	if len(shown) > 20 {
		shown = shown[:20]
	}
	fmt.Fprintf(w, "%d keys of the snapshot are not back: %s\n", len(r.Missing), strings.Join(shown, ", "))
}
