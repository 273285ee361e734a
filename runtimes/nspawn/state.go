package nspawn

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/kcompile/kcompile/internal/writer"
)

// StateName is the journal of everything `up` made on the host, at the
// root of the work directory. It is written before each thing is made,
// so that `down`, or the next `up` after a crash, undoes exactly that and
// nothing else.
const StateName = "kcompile-up.json"

// Resource kinds, undone in the reverse order they were recorded.
const (
	// KindDir is a directory up created; removed with its contents.
	KindDir = "dir"
	// KindNetns is a named network namespace (ip netns add).
	KindNetns = "netns"
	// KindLink is a network device in the host's namespace.
	KindLink = "link"
	// KindProcess is a process up started (a machine's systemd-nspawn),
	// identified by PID and start time so that a reused PID is never
	// signalled.
	KindProcess = "process"
)

// Resource is one thing up made on the host.
type Resource struct {
	Kind string `json:"kind"`
	// Name is the directory path, namespace or device name, or the
	// machine a process runs.
	Name string `json:"name"`
	// PID and Start (the process's start time in clock ticks since
	// boot, /proc/PID/stat field 22) identify a process.
	PID   int    `json:"pid,omitempty"`
	Start uint64 `json:"start,omitempty"`
}

// State is the journal of one `up`.
type State struct {
	// Cluster is the spec's cluster name.
	Cluster string `json:"cluster"`
	// Owner is the process of `up` itself, so that `down` can ask it to
	// stop first.
	Owner Resource `json:"owner"`
	// Kubeconfig is the admin kubeconfig for the host.
	Kubeconfig string `json:"kubeconfig,omitempty"`
	// Resources in the order they were made.
	Resources []Resource `json:"resources"`
}

// journal keeps a State on disk, rewriting it atomically at each change.
type journal struct {
	path  string
	state State
}

// has says whether the journal lists a resource.
func (j *journal) has(kind, name string) bool {
	for _, r := range j.state.Resources {
		if r.Kind == kind && r.Name == name {
			return true
		}
	}
	return false
}

func (j *journal) record(r Resource) error {
	j.state.Resources = append(j.state.Resources, r)
	return j.save()
}

// forget drops resources that are gone (a machine's namespace after it
// stopped).
func (j *journal) forget(kind, name string) error {
	kept := j.state.Resources[:0]
	for _, r := range j.state.Resources {
		if r.Kind != kind || r.Name != name {
			kept = append(kept, r)
		}
	}
	j.state.Resources = kept
	return j.save()
}

func (j *journal) save() error {
	data, err := json.MarshalIndent(j.state, "", "  ")
	if err != nil {
		return err
	}
	// A power cut leaves the old journal or the new one, never a torn
	// one.
	return writer.PrivateFile(j.path, append(data, '\n'))
}

// ReadState reads the journal of the work directory dir; fs.ErrNotExist
// when there is none.
func ReadState(dir string) (*State, error) {
	data, err := os.ReadFile(filepath.Join(dir, StateName))
	if err != nil {
		return nil, err
	}
	var s State
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("%s: %v", filepath.Join(dir, StateName), err)
	}
	for _, r := range s.Resources {
		if err := r.valid(dir); err != nil {
			return nil, fmt.Errorf("%s: %v; it was not written by kcompile up", filepath.Join(dir, StateName), err)
		}
	}
	return &s, nil
}

// valid refuses a journal entry that would make down touch something up
// never makes: a directory outside the work directory, a device or
// namespace without up's prefix.
func (r Resource) valid(work string) error {
	switch r.Kind {
	case KindDir:
		rel, err := filepath.Rel(work, r.Name)
		if err != nil || !filepath.IsAbs(r.Name) || rel == ".." || strings.HasPrefix(rel, "../") {
			return fmt.Errorf("directory %q is outside the work directory", r.Name)
		}
	case KindNetns, KindLink, KindNftTable:
		if !strings.HasPrefix(r.Name, namePrefix) {
			return fmt.Errorf("%s %q is not one of kcompile up's", r.Kind, r.Name)
		}
	case KindCgroup:
		return validCgroup(r.Name)
	case KindProcess:
		if r.PID <= 1 {
			return fmt.Errorf("process %d", r.PID)
		}
	default:
		return fmt.Errorf("unknown kind %q", r.Kind)
	}
	return nil
}

// processStart is the start time of pid, 0 when it is not running.
func processStart(pid int) uint64 {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// The command name (field 2) may hold spaces and parentheses: count
	// fields after its closing parenthesis.
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state); the start time is field 22.
	if len(f) < 20 {
		return 0
	}
	v, _ := strconv.ParseUint(f[19], 10, 64)
	return v
}

// alive says whether the process a resource names still runs.
func (r Resource) alive() bool {
	return r.PID > 1 && r.Start != 0 && processStart(r.PID) == r.Start
}

// kill ends a machine at once. Its init goes first, which makes the
// kernel end every process of the machine's PID namespace: nspawn killed
// alone leaves the machine running, orphaned.
func (r Resource) kill() {
	if !r.alive() {
		return
	}
	if pid := firstChild(r.PID); pid > 0 {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	r.signal(syscall.SIGKILL)
}

// signal sends sig to the process a resource names, if it still is that
// process.
func (r Resource) signal(sig syscall.Signal) {
	if r.alive() {
		_ = syscall.Kill(r.PID, sig)
	}
}

// leftovers names what of a journal still exists on the host: machines
// that run, namespaces, devices and directories.
func (s *State) leftovers(work string) []string {
	var machines, netns, links, tables, cgroups []string
	dirs := 0
	for _, r := range s.Resources {
		switch {
		case r.Kind == KindProcess && r.alive():
			machines = append(machines, fmt.Sprintf("%s (pid %d)", r.Name, r.PID))
		case r.Kind == KindNetns && netnsExists(r.Name):
			netns = append(netns, r.Name)
		case r.Kind == KindLink && linkExists(r.Name):
			links = append(links, r.Name)
		case r.Kind == KindNftTable && nftTableExists(r.Name):
			tables = append(tables, "inet "+r.Name)
		case r.Kind == KindCgroup:
			if _, err := os.Lstat(r.Name); err == nil {
				cgroups = append(cgroups, r.Name)
			}
		case r.Kind == KindDir:
			if _, err := os.Lstat(r.Name); err == nil {
				dirs++
			}
		}
	}
	var out []string
	if len(machines) > 0 {
		out = append(out, "machines still running: "+strings.Join(machines, ", "))
	}
	if len(netns) > 0 {
		out = append(out, "network namespaces "+strings.Join(netns, ", "))
	}
	if len(links) > 0 {
		out = append(out, "devices "+strings.Join(links, ", "))
	}
	if len(tables) > 0 {
		out = append(out, "nftables tables "+strings.Join(tables, ", "))
	}
	if len(cgroups) > 0 {
		out = append(out, "cgroups "+strings.Join(cgroups, ", "))
	}
	switch {
	case dirs == 1:
		out = append(out, "a directory in "+work)
	case dirs > 1:
		out = append(out, fmt.Sprintf("%d directories in %s", dirs, work))
	}
	return out
}
