package main

import (
	"bufio"
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

	"github.com/kcompile/kcompile/pipeline"
	"github.com/kcompile/kcompile/targets/terraform"
)

type provisionCmd struct {
	specAndSecrets
	OutDir           string `short:"d" name:"out-dir" default:"out" placeholder:"DIR" help:"Output directory: the module is written to DIR/terraform (replacing only a module kcompile wrote there that is unchanged since) and the state kept in DIR/terraform-state (private)."`
	Output           string `short:"o" hidden:"" help:"Deprecated spelling of --out-dir."`
	Replace          bool   `help:"Write the module even when DIR/terraform holds something kcompile did not write or that changed since; it is moved aside to DIR/terraform.replaced-N, never deleted."`
	MatchboxEndpoint string `name:"matchbox-endpoint" required:"" placeholder:"HOST:PORT" help:"Matchbox's gRPC API (matchbox -rpc-address)."`
	MatchboxCA       string `name:"matchbox-ca" required:"" type:"existingfile" placeholder:"FILE" help:"PEM CA certificate that signed Matchbox's gRPC server certificate."`
	MatchboxCert     string `name:"matchbox-cert" required:"" type:"existingfile" placeholder:"FILE" help:"PEM client certificate for Matchbox's gRPC API."`
	MatchboxKey      string `name:"matchbox-key" required:"" type:"existingfile" placeholder:"FILE" help:"PEM private key of the client certificate."`
	Tofu             string `name:"tofu" placeholder:"PATH" help:"OpenTofu or Terraform executable; default: tofu, else terraform, from PATH."`
	AutoApprove      bool   `name:"auto-approve" help:"Apply without asking."`
	Destroy          bool   `help:"Remove every profile and group of the cluster from Matchbox instead."`
}

// reachTimeout bounds the check that Matchbox answers before the tool
// runs: the provider itself would block for 25 s on an unreachable
// endpoint and then report a bare gRPC timeout.
const reachTimeout = 10 * time.Second

// tofuLock is the dependency lock file init writes into the module. It is
// the tool's, so between runs it is kept beside the state: the module
// stays exactly what kcompile wrote, and the next write may replace it.
const tofuLock = ".terraform.lock.hcl"

func (provisionCmd) Help() string {
	return `Examples:
  kcompile provision examples/ha-stacked --matchbox-endpoint matchbox.lan:8081 \
      --matchbox-ca ca.crt --matchbox-cert client.crt --matchbox-key client.key
  kcompile provision examples/ha-stacked ... --destroy

Writes DIR/terraform, runs tofu (or terraform) init and plan, asks, then
applies; the state stays in DIR/terraform-state.
` + exitCodes("0", "applied, or nothing to change, or not confirmed", "1", "the spec or the bundle has errors, Matchbox cannot be reached, or the tool failed", "2", "usage error")
}

func (c *provisionCmd) Run(e *env) (err error) {
	if err := legacyPath(e, c.Output, &c.OutDir, "out", "-d", "output directory"); err != nil {
		return err
	}
	out, err := c.run(e, pipeline.Terraform)
	if err != nil {
		return err
	}
	tree := out.Trees[pipeline.Terraform]
	tool, err := findTool(c.Tofu)
	if err != nil {
		return err
	}
	mb, err := c.matchbox()
	if err != nil {
		return err
	}
	ctx := context.Background()
	if err := reachMatchbox(ctx, mb); err != nil {
		return statusError{code: exitProblems, msg: err.Error() + "; nothing was changed"}
	}

	moduleDir := filepath.Join(c.OutDir, "terraform")
	if err := writeTree(e, moduleDir, tree, out.Material.Bundle.ManifestKey(), c.Replace); err != nil {
		return err
	}
	if err := warnIfTracked(e, c.OutDir, "the module and its state hold the nodes' configurations with their private keys"); err != nil {
		return err
	}
	absModule, err := filepath.Abs(moduleDir)
	if err != nil {
		return err
	}
	r, err := terraform.NewRunner(absModule, tool, environ(), mb)
	if err != nil {
		return err
	}
	inModule, kept := filepath.Join(absModule, tofuLock), filepath.Join(filepath.Dir(r.StatePath()), tofuLock)
	if err := renameIfExists(kept, inModule); err != nil {
		return err
	}
	defer func() {
		if kErr := renameIfExists(inModule, kept); err == nil {
			err = kErr
		}
	}()
	fmt.Fprintf(e.stdout, "module %s written; running %s\n", moduleDir, filepath.Base(tool))
	if err := r.Init(ctx); err != nil {
		return err
	}
	plan, err := r.Plan(ctx, c.Destroy)
	if err != nil {
		return err
	}
	what := "plan"
	if c.Destroy {
		what = "destroy plan"
	}
	fmt.Fprintf(e.stdout, "%s: %s\n", what, plan.Summary())
	for _, ch := range plan.Changes {
		fmt.Fprintf(e.stdout, "  %-3s %s\n", ch.Action.Symbol(), ch.Address)
	}
	if len(plan.Changes) == 0 {
		if err := r.Discard(plan); err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "Matchbox at %s already serves this spec\n", c.MatchboxEndpoint)
		return nil
	}
	if !c.AutoApprove {
		ok, err := confirm(e, fmt.Sprintf("Apply these changes to Matchbox at %s? Only 'yes' is accepted: ", c.MatchboxEndpoint))
		if err != nil || !ok {
			if rmErr := r.Discard(plan); rmErr != nil {
				return rmErr
			}
			if err != nil {
				return err
			}
			return statusError{code: exitProblems, msg: "not applied; nothing was changed"}
		}
	}
	if err := r.Apply(ctx, plan); err != nil {
		// A partial apply is recorded in the state: say what it holds so
		// that nothing is left unaccounted for.
		msg := fmt.Sprintf("%v\nthe state (%s) records what was applied", err, r.StatePath())
		if res, sErr := r.Resources(ctx); sErr == nil {
			msg += fmt.Sprintf(": %d resources (%s)", len(res), strings.Join(res, ", "))
		}
		return statusError{code: exitProblems, msg: msg + "; run provision again to finish, or with --destroy to remove them"}
	}
	fmt.Fprintf(e.stdout, "applied: %s\n", plan.Summary())
	return nil
}

// renameIfExists renames from to to when from exists.
func renameIfExists(from, to string) error {
	if err := os.Rename(from, to); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// matchbox resolves the credential paths: the tool runs in the module
// directory.
func (c *provisionCmd) matchbox() (terraform.Matchbox, error) {
	mb := terraform.Matchbox{Endpoint: c.MatchboxEndpoint}
	for _, f := range []struct {
		dst *string
		src string
	}{{&mb.CA, c.MatchboxCA}, {&mb.ClientCert, c.MatchboxCert}, {&mb.ClientKey, c.MatchboxKey}} {
		abs, err := filepath.Abs(f.src)
		if err != nil {
			return mb, err
		}
		*f.dst = abs
	}
	if _, _, err := net.SplitHostPort(mb.Endpoint); err != nil {
		return mb, statusError{code: exitUsage, msg: fmt.Sprintf("--matchbox-endpoint %q is not HOST:PORT", mb.Endpoint)}
	}
	return mb, nil
}

// findTool is the --tofu executable, else tofu or terraform on PATH.
func findTool(flag string) (string, error) {
	if flag != "" {
		p, err := exec.LookPath(flag)
		if err != nil {
			return "", statusError{code: exitProblems, msg: fmt.Sprintf("--tofu %s: %v", flag, err)}
		}
		return p, nil
	}
	for _, name := range []string{"tofu", "terraform"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	return "", statusError{code: exitProblems, msg: "neither tofu nor terraform is on PATH: install OpenTofu (https://opentofu.org/docs/intro/install/) or Terraform, or name the executable with --tofu"}
}

// reachMatchbox makes one TLS handshake with Matchbox's gRPC API using the
// given credentials, so that a wrong endpoint, CA or certificate is
// reported plainly and within reachTimeout.
func reachMatchbox(ctx context.Context, mb terraform.Matchbox) error {
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
		NetDialer: &net.Dialer{Timeout: reachTimeout},
		Config: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, ServerName: host,
			NextProtos: []string{"h2"}, MinVersion: tls.VersionTLS12},
	}
	ctx, cancel := context.WithTimeout(ctx, reachTimeout)
	defer cancel()
	conn, err := d.DialContext(ctx, "tcp", mb.Endpoint)
	if err != nil {
		var certErr *tls.CertificateVerificationError
		if errors.As(err, &certErr) {
			return fmt.Errorf("the Matchbox at %s presents a certificate --matchbox-ca does not verify: %v", mb.Endpoint, certErr.Err)
		}
		return fmt.Errorf("cannot reach Matchbox's gRPC API at %s within %s: %v (is matchbox running with -rpc-address %s?)", mb.Endpoint, reachTimeout, err, mb.Endpoint)
	}
	return conn.Close()
}

// confirm asks a yes/no question on the terminal.
func confirm(e *env, question string) (bool, error) {
	fmt.Fprint(e.stdout, question)
	line, err := bufio.NewReader(e.stdin).ReadString('\n')
	if err != nil && line == "" {
		fmt.Fprintln(e.stdout)
		return false, nil
	}
	return strings.TrimSpace(line) == "yes", nil
}

// environ is the process environment as a map, for the tool.
func environ() map[string]string {
	env := map[string]string{}
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	return env
}
