package nspawn

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/kcompile/kcompile/targets"
)

// nodeAccess is how apply reaches one node: its files and its commands.
// A machine of up is reached from the host (its root through /proc, its
// namespaces through nsenter); any node, of up or of bare metal, over
// SSH as one of the spec's access users with sudo.
type nodeAccess interface {
	// read is the file at the absolute path; fs.ErrNotExist when there
	// is none.
	read(ctx context.Context, path string) ([]byte, error)
	// readAll reads many files at once: those that exist, by path.
	readAll(ctx context.Context, paths []string) (map[string][]byte, error)
	// exists says whether the path names anything (a link included).
	exists(ctx context.Context, path string) (bool, error)
	// write replaces the file at f.Path atomically, with f's mode, owned
	// by root, its directory made when missing.
	write(ctx context.Context, f targets.File) error
	remove(ctx context.Context, path string) error
	// install lays the local program src at path, mode 0755, atomically:
	// a running program keeps its old file until it restarts.
	install(ctx context.Context, src, path string) error
	// run runs a command as root and returns its output.
	run(ctx context.Context, args ...string) ([]byte, error)
	close() error
}

// machineAccess reaches a machine of up through its init process.
type machineAccess struct {
	name string
	pid  int
}

func (m machineAccess) root() string { return fmt.Sprintf("/proc/%d/root", m.pid) }

func (m machineAccess) read(_ context.Context, path string) ([]byte, error) {
	return os.ReadFile(filepath.Join(m.root(), path))
}

func (m machineAccess) readAll(ctx context.Context, paths []string) (map[string][]byte, error) {
	out := map[string][]byte{}
	for _, p := range paths {
		data, err := m.read(ctx, p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out[p] = data
	}
	return out, nil
}

func (m machineAccess) exists(_ context.Context, path string) (bool, error) {
	_, err := os.Lstat(filepath.Join(m.root(), path))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return err == nil, err
}

func (m machineAccess) write(_ context.Context, f targets.File) error {
	return writeInto(m.root(), f)
}

func (m machineAccess) remove(_ context.Context, path string) error {
	if err := os.Remove(filepath.Join(m.root(), path)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

func (m machineAccess) install(_ context.Context, src, path string) error {
	return copyInto(m.root(), src, path)
}

func (m machineAccess) run(ctx context.Context, args ...string) ([]byte, error) {
	return execIn(ctx, m.pid, m.name, args...)
}

func (m machineAccess) close() error { return nil }

// SSH is how apply reaches nodes over SSH: as User (an access user of the
// spec whose sudo is set, or root) at each node's primary address and
// Port, authenticated by one of Signers, each host's key held to HostKeys
// (known_hosts).
type SSH struct {
	User     string
	Port     int
	Signers  []ssh.Signer
	HostKeys ssh.HostKeyCallback
	// Timeout bounds each connection's set-up (default 10 s).
	Timeout time.Duration
}

// sshAccess reaches one node over one SSH connection, a session per
// operation.
type sshAccess struct {
	node   string
	addr   string
	sudo   bool
	client *ssh.Client
	// mu keeps one operation at a time: some servers limit sessions.
	mu sync.Mutex
}

// dialSSH connects to a node's SSH server and checks that the user may
// run commands as root without a password.
func dialSSH(ctx context.Context, cfg *SSH, node, host string) (*sshAccess, error) {
	port := cfg.Port
	if port == 0 {
		port = 22
	}
	timeout := cfg.Timeout
	if timeout == 0 {
		timeout = 10 * time.Second
	}
	addr := net.JoinHostPort(host, strconv.Itoa(port))
	connect := func(algorithms []string) (*ssh.Client, error) {
		d := net.Dialer{Timeout: timeout}
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		cc, chans, reqs, err := ssh.NewClientConn(conn, addr, &ssh.ClientConfig{
			User: cfg.User, Auth: []ssh.AuthMethod{ssh.PublicKeys(cfg.Signers...)}, HostKeyCallback: cfg.HostKeys,
			HostKeyAlgorithms: algorithms, Timeout: timeout,
		})
		if err != nil {
			conn.Close()
			return nil, err
		}
		return ssh.NewClient(cc, chans, reqs), nil
	}
	client, err := connect(nil)
	// The host offered a key of a type known_hosts has no line for: ask
	// for the types it has, as OpenSSH's client does.
	var ke *knownhosts.KeyError
	if errors.As(err, &ke) && len(ke.Want) > 0 {
		client, err = connect(keyAlgorithms(ke.Want))
	}
	if err != nil {
		return nil, fmt.Errorf("node %s: ssh %s@%s: %v", node, cfg.User, addr, err)
	}
	s := &sshAccess{node: node, addr: addr, sudo: cfg.User != "root", client: client}
	if out, err := s.run(ctx, "true"); err != nil {
		s.close()
		return nil, fmt.Errorf("node %s: %s cannot run commands as root without a password (set access.users.%s.sudo in the spec): %v %s", node, cfg.User, cfg.User, err, out)
	}
	return s, nil
}

// keyAlgorithms are the host key algorithms that present the known
// keys: an RSA key is offered with SHA-2 signatures.
func keyAlgorithms(known []knownhosts.KnownKey) []string {
	var out []string
	for _, k := range known {
		algs := []string{k.Key.Type()}
		if k.Key.Type() == ssh.KeyAlgoRSA {
			algs = []string{ssh.KeyAlgoRSASHA512, ssh.KeyAlgoRSASHA256, ssh.KeyAlgoRSA}
		}
		for _, a := range algs {
			if !slices.Contains(out, a) {
				out = append(out, a)
			}
		}
	}
	return out
}

// quote is a word for the remote shell: single-quoted, as POSIX sh
// reads it.
func quote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// command is args as a remote command line, as root.
func (s *sshAccess) command(args ...string) string {
	var words []string
	if s.sudo {
		words = append(words, "sudo", "-n", "--")
	}
	for _, a := range args {
		words = append(words, quote(a))
	}
	return strings.Join(words, " ")
}

// session runs args with stdin and returns stdout, stderr and the exit
// status (-1 when the command did not exit).
func (s *sshAccess) session(ctx context.Context, stdin io.Reader, args ...string) (stdout, stderr []byte, status int, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sess, err := s.client.NewSession()
	if err != nil {
		return nil, nil, -1, fmt.Errorf("node %s: %v", s.node, err)
	}
	defer sess.Close()
	var o, e bytes.Buffer
	sess.Stdin, sess.Stdout, sess.Stderr = stdin, &o, &e
	done := make(chan error, 1)
	go func() { done <- sess.Run(s.command(args...)) }()
	select {
	case err = <-done:
	case <-ctx.Done():
		_ = sess.Signal(ssh.SIGKILL)
		sess.Close()
		return o.Bytes(), e.Bytes(), -1, ctx.Err()
	}
	var ee *ssh.ExitError
	switch {
	case err == nil:
		return o.Bytes(), e.Bytes(), 0, nil
	case errors.As(err, &ee):
		return o.Bytes(), e.Bytes(), ee.ExitStatus(), nil
	}
	return o.Bytes(), e.Bytes(), -1, fmt.Errorf("node %s: %v", s.node, err)
}

// absent is the status of the scripts below for a path with nothing at it.
const absent = 99

// The scripts run by sh -c on the node, the path as $1: read prints a
// file or exits absent; write and install put stdin beside it and rename
// it into place with mode $2.
const (
	readScript = `if [ -e "$1" ] || [ -L "$1" ]; then exec cat -- "$1"; fi; exit 99`
	// readAllScript writes, for each path, its size on a line and its
	// content, or "-" on a line when nothing is there.
	readAllScript = `for p do if [ -e "$p" ] || [ -L "$p" ]; then n=$(wc -c <"$p") || exit 1; echo $n; cat -- "$p" || exit 1; else echo -; fi; done`
	existsScript  = `if [ -e "$1" ] || [ -L "$1" ]; then exit 0; fi; exit 99`
	writeScript   = `set -e; mkdir -p -- "$(dirname -- "$1")"; t=$(mktemp -- "$1.kcompile-XXXXXX"); trap 'rm -f -- "$t"' EXIT; cat >"$t"; chmod "$2" "$t"; mv -f -- "$t" "$1"; trap - EXIT`
)

func (s *sshAccess) script(ctx context.Context, stdin io.Reader, script string, args ...string) ([]byte, int, error) {
	out, stderr, status, err := s.session(ctx, stdin, append([]string{"sh", "-c", script, "kcompile"}, args...)...)
	if err != nil {
		return nil, status, err
	}
	if status != 0 && status != absent {
		return nil, status, fmt.Errorf("node %s: exit status %d: %s", s.node, status, strings.TrimSpace(string(stderr)))
	}
	return out, status, nil
}

func (s *sshAccess) read(ctx context.Context, path string) ([]byte, error) {
	out, status, err := s.script(ctx, nil, readScript, path)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	if status == absent {
		return nil, &fs.PathError{Op: "read", Path: path, Err: fs.ErrNotExist}
	}
	return out, nil
}

func (s *sshAccess) readAll(ctx context.Context, paths []string) (map[string][]byte, error) {
	out := map[string][]byte{}
	if len(paths) == 0 {
		return out, nil
	}
	data, _, err := s.script(ctx, nil, readAllScript, paths...)
	if err != nil {
		return nil, fmt.Errorf("reading %d files: %w", len(paths), err)
	}
	for _, p := range paths {
		line, rest, ok := bytes.Cut(data, []byte("\n"))
		if !ok {
			return nil, fmt.Errorf("node %s: reading %s: the answer ends early", s.node, p)
		}
		data = rest
		if string(line) == "-" {
			continue
		}
		n, err := strconv.Atoi(strings.TrimSpace(string(line)))
		if err != nil || n < 0 || n > len(data) {
			return nil, fmt.Errorf("node %s: reading %s: a size of %q", s.node, p, line)
		}
		out[p], data = data[:n:n], data[n:]
	}
	return out, nil
}

func (s *sshAccess) exists(ctx context.Context, path string) (bool, error) {
	_, status, err := s.script(ctx, nil, existsScript, path)
	return err == nil && status == 0, err
}

func (s *sshAccess) write(ctx context.Context, f targets.File) error {
	if _, _, err := s.script(ctx, bytes.NewReader(f.Data), writeScript, f.Path, fmt.Sprintf("%o", f.Mode.Perm())); err != nil {
		return fmt.Errorf("writing %s: %w", f.Path, err)
	}
	return nil
}

func (s *sshAccess) remove(ctx context.Context, path string) error {
	if out, err := s.run(ctx, "rm", "-f", "--", path); err != nil {
		return fmt.Errorf("removing %s: %v %s", path, err, out)
	}
	return nil
}

func (s *sshAccess) install(ctx context.Context, src, path string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	if _, _, err := s.script(ctx, in, writeScript, path, "755"); err != nil {
		return fmt.Errorf("installing %s: %w", path, err)
	}
	return nil
}

func (s *sshAccess) run(ctx context.Context, args ...string) ([]byte, error) {
	out, stderr, status, err := s.session(ctx, nil, args...)
	if err != nil {
		return out, err
	}
	if status != 0 {
		return append(out, stderr...), fmt.Errorf("%s on %s: exit status %d: %s", strings.Join(args, " "), s.node, status, strings.TrimSpace(string(stderr)))
	}
	return out, nil
}

func (s *sshAccess) close() error { return s.client.Close() }
