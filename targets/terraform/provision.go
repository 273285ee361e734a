package terraform

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// ReachTimeout bounds the check that Matchbox answers before the tool
// runs: the provider itself would block for 25 s on an unreachable
// endpoint and then report a bare gRPC timeout.
const ReachTimeout = 10 * time.Second

// lockFile is the dependency lock file init writes into the module. It is
// the tool's, so between runs it is kept beside the state: the module
// stays exactly what kcompile wrote, and the next write may replace it.
const lockFile = ".terraform.lock.hcl"

// Provisioning is one run of OpenTofu (or Terraform) that makes Matchbox
// serve a built module.
type Provisioning struct {
	// Module is the module's directory; Write writes it there.
	Module string
	// Write writes the module, once Matchbox has answered: nothing is
	// written for a Matchbox that cannot be reached.
	Write func() error
	// Tool is the executable; Env is the environment it sees.
	Tool string
	Env  map[string]string
	// Matchbox is how the provider reaches Matchbox; relative paths are
	// made absolute, as the tool runs in the module directory.
	Matchbox Matchbox
	// Destroy plans the removal of everything the state records.
	Destroy bool
	// Planned is told the plan before anything is applied.
	Planned func(*Plan)
	// Confirm is asked before a plan with changes is applied; nil
	// applies without asking.
	Confirm func(*Plan) (bool, error)
}

// Provisioned is what a provisioning did.
type Provisioned struct {
	// Plan is what was planned (and, with Applied, applied).
	Plan    *Plan
	Applied bool
}

// UnreachableError is a Matchbox that did not answer, or answered with
// credentials that do not match: nothing was written or changed.
type UnreachableError struct{ Err error }

func (e *UnreachableError) Error() string { return e.Err.Error() + "; nothing was changed" }
func (e *UnreachableError) Unwrap() error { return e.Err }

// ErrNotConfirmed is a plan Confirm declined: nothing was changed.
var ErrNotConfirmed = errors.New("not applied; nothing was changed")

// PartialError is an apply that failed part way: the state records what
// was applied, so that nothing is left unaccounted for.
type PartialError struct {
	Err   error
	State string
	// Resources are the addresses the state records, nil when the state
	// could not be read.
	Resources []string
}

func (e *PartialError) Error() string {
	msg := fmt.Sprintf("%v\nthe state (%s) records what was applied", e.Err, e.State)
	if e.Resources != nil {
		msg += fmt.Sprintf(": %d resources (%s)", len(e.Resources), strings.Join(e.Resources, ", "))
	}
	return msg + "; run provision again to finish, or with --destroy to remove them"
}

func (e *PartialError) Unwrap() error { return e.Err }

// Provision checks that Matchbox answers, has the module written, and
// runs init, plan, Confirm and apply, keeping the tool's lock file beside
// the state between runs.
func Provision(ctx context.Context, p Provisioning) (res Provisioned, err error) {
	mb, err := p.Matchbox.absolute()
	if err != nil {
		return res, err
	}
	if err := Reach(ctx, mb); err != nil {
		return res, &UnreachableError{Err: err}
	}
	if err := p.Write(); err != nil {
		return res, err
	}
	module, err := filepath.Abs(p.Module)
	if err != nil {
		return res, err
	}
	r, err := NewRunner(module, p.Tool, p.Env, mb)
	if err != nil {
		return res, err
	}
	inModule, kept := filepath.Join(module, lockFile), filepath.Join(filepath.Dir(r.StatePath()), lockFile)
	if err := renameIfExists(kept, inModule); err != nil {
		return res, err
	}
	defer func() {
		if kErr := renameIfExists(inModule, kept); err == nil {
			err = kErr
		}
	}()
	if err := r.Init(ctx); err != nil {
		return res, err
	}
	if res.Plan, err = r.Plan(ctx, p.Destroy); err != nil {
		return res, err
	}
	if p.Planned != nil {
		p.Planned(res.Plan)
	}
	if len(res.Plan.Changes) == 0 {
		return res, r.Discard(res.Plan)
	}
	if p.Confirm != nil {
		ok, err := p.Confirm(res.Plan)
		if err != nil || !ok {
			if rmErr := r.Discard(res.Plan); rmErr != nil {
				return res, rmErr
			}
			if err != nil {
				return res, err
			}
			return res, ErrNotConfirmed
		}
	}
	if err := r.Apply(ctx, res.Plan); err != nil {
		pe := &PartialError{Err: err, State: r.StatePath()}
		if got, sErr := r.Resources(ctx); sErr == nil {
			pe.Resources = got
			if pe.Resources == nil {
				pe.Resources = []string{}
			}
		}
		return res, pe
	}
	res.Applied = true
	return res, nil
}

// renameIfExists renames from to to when from exists.
func renameIfExists(from, to string) error {
	if err := os.Rename(from, to); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// absolute is mb with absolute credential paths.
func (mb Matchbox) absolute() (Matchbox, error) {
	for _, f := range []*string{&mb.CA, &mb.ClientCert, &mb.ClientKey} {
		abs, err := filepath.Abs(*f)
		if err != nil {
			return mb, err
		}
		*f = abs
	}
	return mb, nil
}

// FindTool is the named executable, else tofu or terraform on PATH.
func FindTool(name string) (string, error) {
	if name != "" {
		p, err := exec.LookPath(name)
		if err != nil {
			return "", fmt.Errorf("--tofu %s: %v", name, err)
		}
		return p, nil
	}
	for _, name := range []string{"tofu", "terraform"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	return "", errors.New("neither tofu nor terraform is on PATH: install OpenTofu (https://opentofu.org/docs/intro/install/) or Terraform, or name the executable with --tofu")
}

// Reach makes one TLS handshake with Matchbox's gRPC API using the given
// credentials, so that a wrong endpoint, CA or certificate is reported
// plainly and within ReachTimeout.
func Reach(ctx context.Context, mb Matchbox) error {
	caPEM, err := os.ReadFile(mb.CA)
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return fmt.Errorf("--matchbox-ca %s holds no PEM certificate", mb.CA)
	}
	cert, err := tls.LoadX509KeyPair(mb.ClientCert, mb.ClientKey)
	if err != nil {
		return fmt.Errorf("--matchbox-cert and --matchbox-key: %v", err)
	}
	host, _, _ := net.SplitHostPort(mb.Endpoint)
	d := tls.Dialer{
		NetDialer: &net.Dialer{Timeout: ReachTimeout},
		Config: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, ServerName: host,
			NextProtos: []string{"h2"}, MinVersion: tls.VersionTLS12},
	}
	ctx, cancel := context.WithTimeout(ctx, ReachTimeout)
	defer cancel()
	conn, err := d.DialContext(ctx, "tcp", mb.Endpoint)
	if err != nil {
		var certErr *tls.CertificateVerificationError
		if errors.As(err, &certErr) {
			return fmt.Errorf("the Matchbox at %s presents a certificate --matchbox-ca does not verify: %v", mb.Endpoint, certErr.Err)
		}
		return fmt.Errorf("cannot reach Matchbox's gRPC API at %s within %s: %v (is matchbox running with -rpc-address %s?)", mb.Endpoint, ReachTimeout, err, mb.Endpoint)
	}
	return conn.Close()
}
