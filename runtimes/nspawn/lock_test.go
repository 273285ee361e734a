package nspawn

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestWorkLock: one run at a time holds a work directory; the loser is
// told who holds it and changes nothing; the lock file and a directory
// the holder made go when it is released.
func TestWorkLock(t *testing.T) {
	work := filepath.Join(t.TempDir(), "up")
	first, err := lockWork(work)
	if err != nil {
		t.Fatal(err)
	}
	if !first.created {
		t.Error("the run that made the work directory does not know it")
	}
	second, err := lockWork(work)
	var locked *errLocked
	if !errors.As(err, &locked) || second != nil {
		t.Fatalf("a second run got the lock: %v", err)
	}
	if locked.pid != os.Getpid() || !strings.Contains(err.Error(), "pid "+strconv.Itoa(os.Getpid())) || !strings.Contains(err.Error(), "kcompile down --work "+work) {
		t.Errorf("the refusal does not name the holder and the way out: %v", err)
	}
	if entries, _ := os.ReadDir(work); len(entries) != 1 || entries[0].Name() != LockName {
		t.Errorf("the work directory holds %v, want only the lock file", entries)
	}
	first.release(true)
	if _, err := os.Stat(work); !os.IsNotExist(err) {
		t.Errorf("the work directory the holder made survived its release: %v", err)
	}
	again, err := lockWork(work)
	if err != nil {
		t.Fatalf("a released lock is not free: %v", err)
	}
	again.release(true)

	// A work directory the user made stays, empty, after the release.
	mine := t.TempDir()
	l, err := lockWork(mine)
	if err != nil || l.created {
		t.Fatalf("lock of an existing directory: %v, created %v", err, l != nil && l.created)
	}
	l.release(true)
	if entries, err := os.ReadDir(mine); err != nil || len(entries) != 0 {
		t.Errorf("the user's work directory after a release: %v, %v", entries, err)
	}
}

// deadOwner is the journal owner of an up that was killed: a process
// that has ended.
func deadOwner(t *testing.T) Resource {
	t.Helper()
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	return Resource{Kind: KindProcess, Name: "kcompile up", PID: cmd.Process.Pid, Start: 1}
}

// TestTakeOverAfterACrash: the journal of an up that died is named, with
// what of it is left, and removed only when asked.
func TestTakeOverAfterACrash(t *testing.T) {
	work := t.TempDir()
	left := filepath.Join(work, "machines", "a")
	if err := os.MkdirAll(left, 0o700); err != nil {
		t.Fatal(err)
	}
	j := &journal{path: filepath.Join(work, StateName), state: State{Cluster: "demo", Owner: deadOwner(t)}}
	for _, d := range []string{filepath.Join(work, "machines"), left} {
		if err := j.record(Resource{Kind: KindDir, Name: d}); err != nil {
			t.Fatal(err)
		}
	}
	l, err := lockWork(work)
	if err != nil {
		t.Fatal(err)
	}
	defer l.release(true)

	err = takeOver(t.Context(), Config{Work: work}, l)
	if err == nil {
		t.Fatal("the leftovers of a crashed up were taken over silently")
	}
	for _, want := range []string{"pid " + strconv.Itoa(j.state.Owner.PID), "cluster demo", "ended without stopping it", "2 directories in " + work, "kcompile up --recover", "kcompile down --work " + work} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal does not say %q:\n%v", want, err)
		}
	}
	if _, err := os.Stat(left); err != nil {
		t.Errorf("a refusal removed what was left: %v", err)
	}

	if err := takeOver(t.Context(), Config{Work: work, Recover: true}, l); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(work)
	if len(entries) != 1 || entries[0].Name() != LockName {
		t.Errorf("after --recover the work directory holds %v, want only the lock file", entries)
	}
}

// TestMkdirJournalsEveryParent: each directory up makes on the way is in
// the journal before it exists, outermost first, so that down removes
// them all from a work directory up did not make.
func TestMkdirJournalsEveryParent(t *testing.T) {
	work := t.TempDir()
	c := &Cluster{cfg: Config{Work: work}, j: &journal{path: filepath.Join(work, StateName)}}
	dir := filepath.Join(work, "machines", "cp1")
	if err := c.mkdir(dir); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range c.j.state.Resources {
		got = append(got, r.Name)
	}
	if want := []string{filepath.Join(work, "machines"), dir}; !slices.Equal(got, want) {
		t.Errorf("journalled %q, want %q", got, want)
	}
	if err := Down(t.Context(), work, nil); err != nil {
		t.Fatal(err)
	}
	if entries, err := os.ReadDir(work); err != nil || len(entries) != 0 {
		t.Errorf("down left %v in a work directory up did not make (%v)", entries, err)
	}
}

// recorder is a testing.TB that keeps what a helper reports.
type recorder struct {
	testing.TB
	errors []string
}

func (r *recorder) Errorf(format string, args ...any) {
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}
func (r *recorder) Helper() {}

// TestLeakCheckSees: the boot tests' leak check fails on a file left on
// the host, a firewall table and a process whose command names the work
// directory.
func TestLeakCheckSees(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("the leak check reads every process and the firewall: run it as root (CI does)")
	}
	work := t.TempDir()
	p := &plan{id: "zz"}
	before := readHost(t)
	left := filepath.Join("/run", "kcompile-leak-test-"+strconv.Itoa(os.Getpid()))
	if err := os.WriteFile(left, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(left)
	table := "kcleak" + strconv.Itoa(os.Getpid())
	if out, err := exec.Command("nft", "add", "table", "inet", table).CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	defer exec.Command("nft", "delete", "table", "inet", table).Run()
	// A process whose command line names the work directory, as a
	// machine's nspawn does.
	sleeper := exec.Command("sleep", "60")
	if err := os.Symlink("/bin/sleep", filepath.Join(work, "sleep")); err != nil {
		t.Fatal(err)
	}
	sleeper.Path = filepath.Join(work, "sleep")
	sleeper.Args = []string{filepath.Join(work, "sleep"), "60"}
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sleeper.Process.Kill(); _ = sleeper.Wait() }()
	os.Remove(filepath.Join(work, "sleep"))

	// A cgroup at the top of a hierarchy, as a machine's systemd made
	// them when machines shared up's cgroup.
	mounts, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		t.Fatal(err)
	}
	hierarchies := readCgroupMounts(mounts)
	if len(hierarchies) == 0 {
		t.Fatal("this host mounts no cgroup hierarchy under " + cgroupRoot)
	}
	cgroup := filepath.Join(hierarchies[0].dir, "kcompile-leak-test-"+strconv.Itoa(os.Getpid()))
	if err := os.Mkdir(cgroup, 0o755); err != nil {
		t.Fatal(err)
	}
	defer syscall.Rmdir(cgroup)

	r := &recorder{TB: t}
	assertNothingLeft(r, p, work, before)
	all := strings.Join(r.errors, "\n")
	for _, want := range []string{left + " appeared on the host", cgroup + " appeared on the host", "firewall changed", "process " + strconv.Itoa(sleeper.Process.Pid) + " still runs"} {
		if !strings.Contains(all, want) {
			t.Errorf("the leak check does not report %q; it said:\n%s", want, all)
		}
	}
}

// TestMachineCgroups: a machine's cgroups are made in every hierarchy of
// this host (a cpuset group able to take a process), emptied of its last
// boot's when it boots again, a process started the way a machine's is
// lands in them, and down removes them after ending that process, as
// after a crash of up that orphaned a machine, even with the process
// frozen.
// TestRmdirCgroupWaitsWhileBusy holds rmdirCgroup to retrying a cgroup
// the kernel calls busy until it is not (here a child cgroup removed a
// moment later, as a killed process's exit ends), and to giving up
// with the kernel's answer once its wait has passed.
func TestRmdirCgroupWaitsWhileBusy(t *testing.T) {
	hs := hostCgroups(t)
	dir := filepath.Join(hs[0].dir, namePrefix+"rm"+strconv.Itoa(os.Getpid()%10000))
	child := filepath.Join(dir, "child")
	if err := os.MkdirAll(child, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Rmdir(child)
		_ = syscall.Rmdir(dir)
	})
	if err := rmdirCgroup(dir, 0); !errors.Is(err, syscall.EBUSY) {
		t.Fatalf("a busy cgroup with no wait: %v, want the kernel's %q", err, syscall.EBUSY.Error())
	}
	go func() {
		time.Sleep(300 * time.Millisecond)
		_ = syscall.Rmdir(child)
	}()
	if err := rmdirCgroup(dir, 5*time.Second); err != nil {
		t.Fatalf("a cgroup busy for 300 ms: %v", err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("%s stays: %v", dir, err)
	}
}

// A halting machine's cgroup that stays frozen (a runc ended in the
// middle of its device rules) is thawed at the second look, and the
// halt's signal then ends its process; one frozen for less than the
// time between two looks is left alone.
func TestThawWhileHalting(t *testing.T) {
	var dir, file, frozen, thawed string
	for _, h := range hostCgroups(t) {
		d := filepath.Join(h.dir, namePrefix+"thaw"+strconv.Itoa(os.Getpid()%10000))
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, f := range [][3]string{{"freezer.state", "FROZEN", "THAWED"}, {"cgroup.freeze", "1", "0"}} {
			if _, err := os.Stat(filepath.Join(d, f[0])); err == nil && dir == "" {
				dir, file, frozen, thawed = d, filepath.Join(d, f[0]), f[1], f[2]
			}
		}
		if d != dir {
			if err := syscall.Rmdir(d); err != nil {
				t.Fatal(err)
			}
		}
		if dir != "" {
			break
		}
	}
	if dir == "" {
		t.Fatal("no cgroup hierarchy here can freeze a cgroup")
	}
	sleeper := exec.Command("sleep", "60")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan struct{})
	go func() {
		_ = sleeper.Wait()
		close(waited)
	}()
	t.Cleanup(func() {
		_ = os.WriteFile(file, []byte(thawed), 0o644)
		_ = sleeper.Process.Kill()
		<-waited
		eventuallyTrue(t, func() bool { return syscall.Rmdir(dir) == nil }, "removing "+dir)
	})
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(sleeper.Process.Pid)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte(frozen), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := sleeper.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	var logged []string
	var logMu sync.Mutex
	logf := func(format string, args ...any) {
		logMu.Lock()
		defer logMu.Unlock()
		logged = append(logged, fmt.Sprintf(format, args...))
	}

	// Stopped between the first look and the second: left frozen.
	stop := thawWhileHalting([]string{dir}, time.Second, logf)
	time.Sleep(1400 * time.Millisecond)
	stop()
	select {
	case <-waited:
		t.Fatal("the process ended while its cgroup was to be frozen: the test freezes nothing, or the watch thawed at its first look")
	default:
	}
	if state, _ := os.ReadFile(file); strings.TrimSpace(string(state)) != frozen || len(logged) != 0 {
		t.Fatalf("after one look: %s is %q, logged %q", file, state, logged)
	}

	stop = thawWhileHalting([]string{dir}, 100*time.Millisecond, logf)
	defer stop()
	select {
	case <-waited:
	case <-time.After(5 * time.Second):
		t.Fatal("the process of a cgroup frozen through a halt outlived its SIGTERM by 5 s")
	}
	logMu.Lock()
	defer logMu.Unlock()
	if len(logged) != 1 || !strings.Contains(logged[0], "cgroup "+dir+" was frozen while its machine halted") {
		t.Errorf("the watch logged %q", logged)
	}
}

func TestMachineCgroups(t *testing.T) {
	hs := hostCgroups(t)
	work := t.TempDir()
	c := &Cluster{
		p:      &plan{bridge: namePrefix + "cg" + strconv.Itoa(os.Getpid()%10000)},
		adjust: &adjustments{cgroups: hs},
		j:      &journal{path: filepath.Join(work, StateName), state: State{Cluster: "x"}},
	}
	m := &machine{name: "cp1"}
	dirs, err := c.makeCgroups(m)
	if err != nil {
		t.Fatal(err)
	}
	// Again, as when the machine boots a second time: nothing new, and
	// nothing of its last boot's below its own.
	for _, d := range dirs {
		if err := os.MkdirAll(filepath.Join(d, "kubepods.slice", "cri-containerd-1.scope"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	n := len(c.j.state.Resources)
	if again, err := c.makeCgroups(m); err != nil || !slices.Equal(again, dirs) || len(c.j.state.Resources) != n {
		t.Fatalf("a second boot: %v, %d entries, %d before", err, len(c.j.state.Resources), n)
	}
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "kubepods.slice")); !os.IsNotExist(err) {
			t.Errorf("a second boot finds %s of the last: %v", filepath.Join(d, "kubepods.slice"), err)
		}
		if _, err := os.Stat(d); err != nil {
			t.Errorf("a second boot lost its own cgroup: %v", err)
		}
	}
	if len(dirs) != len(c.adjust.cgroups) || n != 2*len(dirs) {
		t.Fatalf("cgroups %v, journal %+v", dirs, c.j.state.Resources)
	}
	sleeper := exec.Command("/bin/sh", "-c", strings.Replace(machineShell, "mount -t overlay", "exec sleep 60; mount -t overlay", 1), "kcompile-up-machine", "", "", strings.Join(dirs, " "))
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- sleeper.Wait() }()
	defer sleeper.Process.Kill()
	pid := strconv.Itoa(sleeper.Process.Pid)
	for _, d := range dirs {
		eventuallyTrue(t, func() bool {
			procs, _ := os.ReadFile(filepath.Join(d, "cgroup.procs"))
			return slices.Contains(strings.Fields(string(procs)), pid)
		}, "process "+pid+" in "+d)
	}
	// Below the machine's, as its systemd makes them.
	for _, d := range dirs {
		if err := os.Mkdir(filepath.Join(d, "system.slice"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// Frozen, as runc leaves a container's cgroup when it is killed
	// while it sets the container's devices: a SIGKILL does not end the
	// process until the cgroup is thawed.
	frozen := 0
	for _, d := range dirs {
		for file, state := range map[string]string{"freezer.state": "FROZEN", "cgroup.freeze": "1"} {
			if _, err := os.Stat(filepath.Join(d, file)); err != nil {
				continue
			}
			if err := os.WriteFile(filepath.Join(d, file), []byte(state), 0o644); err != nil {
				t.Fatal(err)
			}
			frozen++
		}
	}
	if frozen == 0 {
		t.Fatalf("no hierarchy of %q can freeze a cgroup", dirs)
	}
	if err := sleeper.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case <-waited:
		t.Fatal("the frozen process ended on a SIGKILL: the test freezes nothing")
	case <-time.After(time.Second):
	}
	began := time.Now()
	if err := Down(t.Context(), work, nil); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(began); d > 5*time.Second {
		t.Errorf("down took %s to end a frozen machine's process", d.Round(100*time.Millisecond))
	}
	select {
	case <-waited:
	case <-time.After(10 * time.Second):
		t.Error("the machine's process outlived down")
	}
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Dir(d)); !os.IsNotExist(err) {
			t.Errorf("%s survived down: %v", filepath.Dir(d), err)
		}
	}
}

// hostCgroups are this host's cgroup hierarchies, for a test that makes
// cgroups in them as up does: as root.
func hostCgroups(t *testing.T) []cgroupMount {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("cgroups are made by root: run the test as root (CI does)")
	}
	mounts, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		t.Fatal(err)
	}
	hs := readCgroupMounts(mounts)
	if len(hs) == 0 {
		t.Fatal("no cgroup hierarchy mounted")
	}
	return hs
}

func eventuallyTrue(t *testing.T, f func() bool, what string) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !f(); {
		if time.Now().After(deadline) {
			t.Fatalf("never: %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
