package systemd

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kcompile/kcompile/internal/fixture"
	"github.com/kcompile/kcompile/internal/unitfile"
	"github.com/kcompile/kcompile/layout"
)

const backupEnv = "KCOMPILE_TEST_BACKUP"

// TestBackupAgainstEtcd runs a member's compiled etcd-backup service (its
// ExecStart: kcompile's script with the unit's arguments) against the
// member's etcd, started from its own compiled unit, in a network
// namespace holding the node's address: each run leaves a snapshot 0600
// that etcdutl snapshot status reads, with the member's keys; the newest
// snapshots stay, older ones of the member go, and no other file of the
// directory is touched; the upload command gets the snapshot's path, and
// its failure fails the run and keeps the snapshot.
func TestBackupAgainstEtcd(t *testing.T) {
	if os.Getenv(backupEnv) != "" {
		runBackup(t)
		return
	}
	out := inNodeNamespace(t, fixture.Cluster(t, "single-node", backupSpec), "TestBackupAgainstEtcd", backupEnv, "etcd", "etcdctl", "etcdutl")
	t.Logf("%s", out)
}

// backupSpec gives examples/single-node snapshots, kept two at a time,
// and an upload command.
var backupSpec = map[string]string{"backup.cue": `package cluster

etcd: backup: {schedule: "daily", retention: 2, directory: "/var/lib/etcd-backup", upload: ["/bin/sh", "-c", "cp \"$KCOMPILE_SNAPSHOT\" \"$0\" && test ! -e \"$0.fail\"", "/var/lib/etcd-backup/uploaded"]}
`}

func runBackup(t *testing.T) {
	c := fixture.Cluster(t, "single-node", backupSpec)
	m := testMaterial(t, c)
	top, root := layRerooted(t, m)
	node := c.Nodes[0].Name
	bin := os.Getenv("KCOMPILE_BIN")
	unit := func(name string) []string {
		data, err := os.ReadFile(filepath.Join(root, layout.UnitDir, name))
		if err != nil {
			t.Fatal(err)
		}
		u, err := unitfile.Parse(data)
		if err != nil {
			t.Fatal(err)
		}
		return u.Commands("Service", "ExecStart")[0].Argv
	}
	ctx, cancel := context.WithCancel(context.Background())
	argv := unit("etcd.service")
	etcd := exec.CommandContext(ctx, filepath.Join(bin, "etcd"), argv[1:]...)
	for i, a := range etcd.Args {
		if strings.HasPrefix(a, "--data-dir=") {
			etcd.Args[i] = "--data-dir=" + filepath.Join(top, "etcd")
		}
	}
	logPath := filepath.Join(top, "etcd.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	etcd.Stdout, etcd.Stderr = logf, logf
	if err := etcd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cancel()
		etcd.Wait()
	}()

	// The service's command, with the tree's paths (the unit names them
	// under root) and the programs of .bin; the directory of the
	// snapshots under the test's own.
	argv = unit(BackupService)
	dir := filepath.Join(top, "backup")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	for i, a := range argv {
		switch {
		case a == "/var/lib/etcd-backup":
			argv[i] = dir
		case strings.HasPrefix(a, "/var/lib/etcd-backup/"):
			argv[i] = filepath.Join(dir, strings.TrimPrefix(a, "/var/lib/etcd-backup/"))
		case filepath.Base(a) == "etcdctl" || filepath.Base(a) == "etcdutl":
			argv[i] = filepath.Join(bin, filepath.Base(a))
		}
	}
	if argv[0] != filepath.Join(root, layout.LibDir, layout.EtcdBackupScript) {
		t.Fatalf("the service runs %s, not kcompile's script", argv[0])
	}
	// Not ours: the script leaves it.
	other := filepath.Join(dir, "etcd-other-20200101T000000Z.db")
	if err := os.WriteFile(other, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	backup := func() (string, error) {
		out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
		return string(out), err
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		out, err := backup()
		if err == nil {
			t.Logf("first run:\n%s", out)
			break
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(logPath)
			t.Fatalf("the backup never succeeded: %v\n%s\netcd:\n%s", err, out, log)
		}
		time.Sleep(time.Second)
	}
	snapshots := func() []string {
		matches, err := filepath.Glob(filepath.Join(dir, "etcd-"+node+"-*.db"))
		if err != nil {
			t.Fatal(err)
		}
		return matches
	}
	// Known keys, which the snapshots of the next runs hold.
	for i := range 3 {
		put := exec.Command(filepath.Join(bin, "etcdctl"), "--endpoints="+argv[4], "--cacert="+argv[5], "--cert="+argv[6], "--key="+argv[7],
			"put", fmt.Sprintf("/kcompile-test/%d", i), "v")
		if out, err := put.CombinedOutput(); err != nil {
			t.Fatalf("etcdctl put: %v\n%s", err, out)
		}
	}
	for range 2 {
		// One snapshot a second at most: the names are by the second.
		time.Sleep(1100 * time.Millisecond)
		if out, err := backup(); err != nil {
			t.Fatalf("a run: %v\n%s", err, out)
		}
	}
	kept := snapshots()
	if len(kept) != 2 {
		t.Fatalf("after three runs with retention 2: %q", kept)
	}
	for _, s := range kept {
		st, err := os.Stat(s)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %o, want 600", s, st.Mode().Perm())
		}
		out, err := exec.Command(filepath.Join(bin, "etcdutl"), "snapshot", "status", "--write-out=json", s).Output()
		if err != nil {
			t.Fatalf("etcdutl snapshot status %s: %v", s, err)
		}
		var status struct {
			Revision int64 `json:"revision"`
			TotalKey int   `json:"totalKey"`
		}
		if err := json.Unmarshal(out, &status); err != nil || status.Revision < 3 || status.TotalKey < 3 {
			t.Errorf("%s: status %s: %v", s, out, err)
		}
	}
	if _, err := os.Stat(other); err != nil {
		t.Errorf("the script touched a file not of its member's snapshots: %v", err)
	}
	uploaded, err := os.ReadFile(filepath.Join(dir, "uploaded"))
	if err != nil {
		t.Fatalf("the upload command did not run: %v", err)
	}
	newest := slices.Max(kept)
	if data, _ := os.ReadFile(newest); string(data) != string(uploaded) {
		t.Errorf("the upload command got another file than the newest snapshot %s", newest)
	}
	// An upload that fails fails the run, and keeps its snapshot.
	if err := os.WriteFile(filepath.Join(dir, "uploaded.fail"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond)
	out, err := backup()
	if err == nil || !strings.Contains(out, "the upload command failed") {
		t.Errorf("a failing upload: %v\n%s", err, out)
	}
	if after := snapshots(); len(after) != 2 || slices.Max(after) == newest {
		t.Errorf("after a failed upload the snapshots are %q (before %q): the new one must stay", after, kept)
	}
}

// TestBackupTimeout holds the backup service's TimeoutStartSec= to the
// spec's etcd.backup.timeout (and its default, an hour) as systemd reads
// the span: systemd-analyze timespan's microseconds.
func TestBackupTimeout(t *testing.T) {
	for _, tc := range []struct {
		spec string
		want time.Duration
	}{
		{"", time.Hour},
		{`timeout: "2h30m"`, 150 * time.Minute},
		{`timeout: "90s"`, 90 * time.Second},
		{`timeout: "1h0m1s"`, time.Hour + time.Second},
		{`timeout: "48h"`, 48 * time.Hour},
	} {
		m := fixture.Material(t, "single-node", map[string]string{"backup.cue": "package cluster\n\netcd: backup: {" + tc.spec + "}\n"})
		tree, err := Build(m, Options{})
		if err != nil {
			t.Fatal(err)
		}
		f, ok := tree.Get(layout.NodeTree(m.Cluster.Nodes[0].Name, layout.UnitDir+BackupService))
		if !ok {
			t.Fatalf("%s: no %s", tc.spec, BackupService)
		}
		u, err := unitfile.Parse(f.Data)
		if err != nil {
			t.Fatal(err)
		}
		spans := u.Get("Service", "TimeoutStartSec")
		if len(spans) != 1 {
			t.Fatalf("%s: TimeoutStartSec %q, want one", tc.spec, spans)
		}
		out, err := exec.Command("systemd-analyze", "timespan", spans[0]).CombinedOutput()
		if err != nil {
			t.Fatalf("systemd-analyze timespan %s: %v\n%s", spans[0], err, out)
		}
		var us int64
		for _, l := range strings.Split(string(out), "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(l), "μs: "); ok {
				fmt.Sscan(v, &us)
			}
		}
		if got := time.Duration(us) * time.Microsecond; got != tc.want {
			t.Errorf("%s: TimeoutStartSec=%s is %s to systemd, want %s", tc.spec, spans[0], got, tc.want)
		}
	}
}
