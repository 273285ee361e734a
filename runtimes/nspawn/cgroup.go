package nspawn

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// KindCgroup is a cgroup directory up made for a cluster or one of its
// machines; removed with the cgroups below it, after ending any process
// still in them.
const KindCgroup = "cgroup"

// cgroupRoot is where the kernel's cgroup hierarchies are mounted; up
// makes cgroups under no other directory.
const cgroupRoot = "/sys/fs/cgroup"

// cgroupMount is one mounted cgroup hierarchy.
type cgroupMount struct {
	dir string
	// cpuset says it is cgroup v1's cpuset controller, whose new groups
	// have no CPUs or memory nodes until given their parent's.
	cpuset bool
}

// readCgroupMounts lists the cgroup hierarchies mounted under
// cgroupRoot, in the order /proc/self/mounts has them.
func readCgroupMounts(mounts []byte) []cgroupMount {
	var out []cgroupMount
	sc := bufio.NewScanner(bytes.NewReader(mounts))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || f[2] != "cgroup" && f[2] != "cgroup2" || !strings.HasPrefix(f[1], cgroupRoot) {
			continue
		}
		out = append(out, cgroupMount{dir: f[1], cpuset: f[2] == "cgroup" && slices.Contains(strings.Split(f[3], ","), "cpuset")})
	}
	return out
}

// machineCgroups are the cgroups of machine name in cluster (the
// bridge's name, unique to the cluster): one per hierarchy, below the
// cluster's own.
func machineCgroups(mounts []cgroupMount, cluster, name string) []string {
	var out []string
	for _, m := range mounts {
		out = append(out, filepath.Join(m.dir, cluster, name))
	}
	return out
}

// makeCgroups makes the cluster's cgroup and the machine's in every
// hierarchy, each journalled before it is made and only once (a machine
// that boots again keeps its cgroups, emptied).
func (c *Cluster) makeCgroups(m *machine) ([]string, error) {
	dirs := machineCgroups(c.adjust.cgroups, c.p.bridge, m.name)
	for i, mnt := range c.adjust.cgroups {
		for _, dir := range []string{filepath.Dir(dirs[i]), dirs[i]} {
			if c.j.has(KindCgroup, dir) {
				continue
			}
			if err := c.j.record(Resource{Kind: KindCgroup, Name: dir}); err != nil {
				return nil, err
			}
			if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
				return nil, fmt.Errorf("machine %s: %v", m.name, err)
			}
			if mnt.cpuset {
				// A cpuset group takes no process until it has CPUs and
				// memory nodes: its parent's.
				for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
					v, err := os.ReadFile(filepath.Join(filepath.Dir(dir), f))
					if err != nil {
						return nil, err
					}
					if err := os.WriteFile(filepath.Join(dir, f), v, 0o644); err != nil {
						return nil, fmt.Errorf("machine %s: %s: %v", m.name, filepath.Join(dir, f), err)
					}
				}
			}
		}
	}
	// A machine that boots again finds no cgroup of its last boot below
	// its own, as a real one after a power cut: the kubelet's cAdvisor
	// chased the containers of those, and synced its pods 13 s late
	// (measured after `node kill` and `node start`).
	for _, d := range dirs {
		if err := clearCgroup(d); err != nil {
			return nil, fmt.Errorf("machine %s: %v", m.name, err)
		}
	}
	return dirs, nil
}

// clearCgroup removes the cgroups below dir, keeping dir.
func clearCgroup(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.IsDir() {
			if err := removeCgroup(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	return nil
}

// removeCgroup removes a cgroup up made and every cgroup below it
// (those the machine's systemd and container runtime made), deepest
// first, ending any process still in one (a machine orphaned by a crash
// of up). A cgroup already gone is no error.
func removeCgroup(dir string) error {
	if err := thawCgroup(dir); err != nil {
		return err
	}
	var dirs []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	if err != nil {
		return err
	}
	slices.Reverse(dirs)
	for _, d := range dirs {
		if err := emptyCgroup(d); err != nil {
			return err
		}
		if err := rmdirCgroup(d, 10*time.Second); err != nil {
			return err
		}
	}
	return nil
}

// rmdirCgroup removes an emptied cgroup. A process just killed leaves
// cgroup.procs when it starts to exit but keeps its cgroup busy until
// the exit ends (a runc init thawed a moment before, seen at a down on
// cgroup v1): the removal is tried again, the cgroup thawed and emptied
// each time, until wait has passed.
func rmdirCgroup(dir string, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	for {
		err := syscall.Rmdir(dir)
		if err == nil || errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if !errors.Is(err, syscall.EBUSY) || time.Now().After(deadline) {
			return fmt.Errorf("cgroup %s: %w", dir, err)
		}
		time.Sleep(100 * time.Millisecond)
		if err := thawCgroup(dir); err != nil {
			return err
		}
		if err := emptyCgroup(dir); err != nil {
			return err
		}
	}
}

// thawCgroup lets every process of dir, and of the cgroups at dir's
// place in the other hierarchies, run again, so that a kill ends them. A
// frozen process takes no signal: runc freezes a container's cgroup
// while it sets the container's device rules, and a runc killed in the
// middle (its machine shutting down) leaves it frozen; down then waited
// on a runc init no SIGKILL reached, and the machine's shutdown with it.
func thawCgroup(dir string) error {
	places, err := cgroupPlaces(dir)
	if err != nil {
		return err
	}
	frozen, err := frozenCgroups(places)
	if err != nil {
		return err
	}
	for file, thawed := range frozen {
		if err := thaw(file, thawed); err != nil {
			return err
		}
	}
	return nil
}

// cgroupPlaces are dir's place in every hierarchy: its path below the
// hierarchy it is in, joined to each hierarchy's mount.
func cgroupPlaces(dir string) ([]string, error) {
	mounts, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return nil, err
	}
	hierarchies := readCgroupMounts(mounts)
	// The hierarchy dir is in: the longest mount that holds it (a v2
	// hierarchy may be mounted at cgroupRoot itself).
	own := ""
	for _, h := range hierarchies {
		if strings.HasPrefix(dir, h.dir+"/") && len(h.dir) > len(own) {
			own = h.dir
		}
	}
	if own == "" {
		return nil, nil
	}
	rel := strings.TrimPrefix(dir, own+"/")
	var places []string
	for _, h := range hierarchies {
		places = append(places, filepath.Join(h.dir, rel))
	}
	return places, nil
}

// frozenCgroups finds the frozen cgroups at and below each of dirs: each
// one's state file (cgroup v1's freezer.state, cgroup v2's
// cgroup.freeze), mapped to what thaws it. A directory gone is none.
func frozenCgroups(dirs []string) (map[string]string, error) {
	frozen := map[string]string{}
	for _, dir := range dirs {
		err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					return nil
				}
				return err
			}
			if !d.IsDir() {
				return nil
			}
			for file, thawed := range map[string]string{"freezer.state": "THAWED", "cgroup.freeze": "0"} {
				f := filepath.Join(p, file)
				state, err := os.ReadFile(f)
				if err == nil && strings.TrimSpace(string(state)) != thawed {
					frozen[f] = thawed
				}
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return frozen, nil
}

func thaw(file, thawed string) error {
	if err := os.WriteFile(file, []byte(thawed), 0o644); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("thawing cgroup %s: %v", filepath.Dir(file), err)
	}
	return nil
}

// thawWhileHalting thaws, until the returned stop is called, each cgroup
// at or below dirs (a machine's own, one per hierarchy) that a halt
// finds frozen at two looks a second apart.
// A container whose runc was killed while it set the container's device
// rules stays frozen (see thawCgroup), and its runc init with it: the
// machine's systemd waits on that process, which neither its SIGTERM nor
// its SIGKILL reaches, until the halt is forced. runc freezes a cgroup
// for milliseconds; nothing in a halting machine is frozen for a second
// on purpose.
func thawWhileHalting(dirs []string, every time.Duration, logf func(string, ...any)) (stop func()) {
	if len(dirs) == 0 {
		return func() {}
	}
	done := make(chan struct{})
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		t := time.NewTicker(every)
		defer t.Stop()
		var seen map[string]string
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			frozen, err := frozenCgroups(dirs)
			if err != nil {
				logf("%v", err)
				return
			}
			for file, thawed := range frozen {
				if _, again := seen[file]; !again {
					continue
				}
				if err := thaw(file, thawed); err != nil {
					logf("%v", err)
					continue
				}
				logf("cgroup %s was frozen while its machine halted (a runc ended in the middle of its work leaves it so, and its processes with it): thawed, so that the halt ends them", filepath.Dir(file))
				delete(frozen, file)
			}
			seen = frozen
		}
	}()
	return func() {
		close(done)
		<-ended
	}
}

// emptyCgroup ends the processes of one cgroup and waits until it has
// none.
func emptyCgroup(dir string) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		data, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		pids := strings.Fields(string(data))
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cgroup %s still holds processes %s", dir, strings.Join(pids, " "))
		}
		// cgroup v2 ends the whole group at once; v1 has no such file.
		if err := os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0o644); err != nil {
			for _, p := range pids {
				if pid, err := strconv.Atoi(p); err == nil && pid > 1 {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// validCgroup refuses a cgroup entry that is not one up makes: a
// directory under cgroupRoot named for a cluster of up's, or below one.
func validCgroup(name string) error {
	rel, err := filepath.Rel(cgroupRoot, name)
	if err != nil || filepath.Clean(name) != name || rel == "." || strings.HasPrefix(rel, "..") {
		return fmt.Errorf("cgroup %q is not under %s", name, cgroupRoot)
	}
	if !strings.HasPrefix(filepath.Base(name), namePrefix) && !strings.HasPrefix(filepath.Base(filepath.Dir(name)), namePrefix) {
		return fmt.Errorf("cgroup %q is not one of kcompile up's", name)
	}
	return nil
}
