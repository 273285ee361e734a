package nspawn

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/kcompile/kcompile/targets"
)

// sshServer serves SSH on a loopback port, running each exec request's
// command line with the host's sh as OpenSSH's sshd does (the user's
// shell with -c): the transport's scripts and quoting meet a real shell.
func sshServer(t *testing.T, client ssh.PublicKey) (addr string, hostKey ssh.PublicKey) {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &ssh.ServerConfig{PublicKeyCallback: func(_ ssh.ConnMetadata, k ssh.PublicKey) (*ssh.Permissions, error) {
		if string(k.Marshal()) != string(client.Marshal()) {
			return nil, errors.New("unknown key")
		}
		return nil, nil
	}}
	cfg.AddHostKey(signer)
	// A second key, of a type the client asks for before ed25519's: a
	// known_hosts that holds only the ed25519 key is still matched.
	ec, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ecSigner, err := ssh.NewSignerFromKey(ec)
	if err != nil {
		t.Fatal(err)
	}
	cfg.AddHostKey(ecSigner)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go serveSSH(c, cfg)
		}
	}()
	return l.Addr().String(), signer.PublicKey()
}

func serveSSH(c net.Conn, cfg *ssh.ServerConfig) {
	_, chans, reqs, err := ssh.NewServerConn(c, cfg)
	if err != nil {
		return
	}
	go ssh.DiscardRequests(reqs)
	for nc := range chans {
		ch, reqs, err := nc.Accept()
		if err != nil {
			continue
		}
		go func() {
			defer ch.Close()
			for r := range reqs {
				if r.Type != "exec" || len(r.Payload) < 4 {
					_ = r.Reply(false, nil)
					continue
				}
				_ = r.Reply(true, nil)
				line := string(r.Payload[4 : 4+binary.BigEndian.Uint32(r.Payload)])
				cmd := exec.Command("sh", "-c", line)
				cmd.Stdin, cmd.Stdout, cmd.Stderr = ch, ch, ch.Stderr()
				status := 0
				if err := cmd.Run(); err != nil {
					var ee *exec.ExitError
					status = 255
					if errors.As(err, &ee) {
						status = ee.ExitCode()
					}
				}
				_ = ch.CloseWrite()
				_, _ = ch.SendRequest("exit-status", false, binary.BigEndian.AppendUint32(nil, uint32(status)))
				return
			}
		}()
	}
}

// TestSSHAccess drives the SSH transport against a shell: files with
// awkward names are written atomically with their modes and read back,
// a missing file is fs.ErrNotExist, a program is installed executable,
// a failing command reports its status and stderr, and a host whose
// key is not the known one is refused.
func TestSSHAccess(t *testing.T) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	addr, hostKey := sshServer(t, signer.PublicKey())
	host, port, _ := net.SplitHostPort(addr)
	portN, err := strconv.Atoi(port)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	known := filepath.Join(t.TempDir(), "known_hosts")
	if err := os.WriteFile(known, []byte(knownhosts.Line([]string{addr}, hostKey)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	hostKeys, err := knownhosts.New(known)
	if err != nil {
		t.Fatal(err)
	}
	// root: the commands run without sudo, which this host may not have.
	cfg := &SSH{User: "root", Port: portN, Signers: []ssh.Signer{signer}, HostKeys: hostKeys}
	at, err := dialSSH(ctx, cfg, "n1", host)
	if err != nil {
		t.Fatal(err)
	}
	defer at.close()

	dir := t.TempDir()
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	for _, f := range []targets.File{
		{Path: filepath.Join(dir, "etc", "it's here", "a b.conf"), Data: []byte("one\n$HOME `x` \"q\"\n"), Mode: 0o640},
		{Path: filepath.Join(dir, "key"), Data: []byte("secret"), Mode: 0o600},
		{Path: filepath.Join(dir, "empty"), Data: nil, Mode: 0o644},
	} {
		if err := at.write(ctx, f); err != nil {
			t.Fatal(err)
		}
		got, err := at.read(ctx, f.Path)
		if err != nil || string(got) != string(f.Data) {
			t.Errorf("%s: read back %q (%v), want %q", f.Path, got, err, f.Data)
		}
		st, err := os.Stat(f.Path)
		if err != nil || st.Mode().Perm() != f.Mode {
			t.Errorf("%s: mode %v (%v), want %v", f.Path, st.Mode().Perm(), err, f.Mode)
		}
		if there, err := at.exists(ctx, f.Path); !there || err != nil {
			t.Errorf("%s: exists %v %v", f.Path, there, err)
		}
	}
	// Many at once, in one session: a missing one is left out.
	all := []string{filepath.Join(dir, "etc", "it's here", "a b.conf"), filepath.Join(dir, "missing"), filepath.Join(dir, "empty"), filepath.Join(dir, "key")}
	got, err := at.readAll(ctx, all)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || string(got[all[0]]) != "one\n$HOME `x` \"q\"\n" || got[all[2]] == nil || len(got[all[2]]) != 0 || string(got[all[3]]) != "secret" {
		t.Errorf("readAll: %q", got)
	}
	if _, ok := got[all[1]]; ok {
		t.Errorf("readAll gave a missing file")
	}
	if entries, _ := filepath.Glob(filepath.Join(dir, "*kcompile-*")); len(entries) > 0 {
		t.Errorf("temporary files left: %v", entries)
	}
	if err := at.remove(ctx, filepath.Join(dir, "key")); err != nil {
		t.Fatal(err)
	}
	if _, err := at.read(ctx, filepath.Join(dir, "key")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a removed file reads as %v, want fs.ErrNotExist", err)
	}
	if there, err := at.exists(ctx, filepath.Join(dir, "key")); there || err != nil {
		t.Errorf("a removed file exists: %v %v", there, err)
	}
	prog := filepath.Join(t.TempDir(), "prog")
	if err := os.WriteFile(prog, []byte("#!/bin/sh\necho installed \"$@\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := at.install(ctx, prog, filepath.Join(dir, "bin", "prog")); err != nil {
		t.Fatal(err)
	}
	out, err := at.run(ctx, filepath.Join(dir, "bin", "prog"), "a b", "it's")
	if err != nil || strings.TrimSpace(string(out)) != "installed a b it's" {
		t.Errorf("the installed program: %q %v", out, err)
	}
	if _, err := at.run(ctx, "sh", "-c", "echo broken >&2; exit 3"); err == nil || !strings.Contains(err.Error(), "exit status 3: broken") {
		t.Errorf("a failing command: %v", err)
	}
	other, _, _ := ed25519.GenerateKey(rand.Reader)
	otherKey, _ := ssh.NewPublicKey(other)
	cfg.HostKeys = ssh.FixedHostKey(otherKey)
	if _, err := dialSSH(ctx, cfg, "n1", host); err == nil || !strings.Contains(err.Error(), "host key mismatch") {
		t.Errorf("a host of another key: %v", err)
	}
	if err := os.WriteFile(known, []byte(knownhosts.Line([]string{addr}, otherKey)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if cfg.HostKeys, err = knownhosts.New(known); err != nil {
		t.Fatal(err)
	}
	if _, err := dialSSH(ctx, cfg, "n1", host); err == nil || !strings.Contains(err.Error(), "knownhosts: key mismatch") {
		t.Errorf("a host of another key: %v", err)
	}
}
