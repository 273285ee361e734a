package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"

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

func (provisionCmd) Help() string {
	return `Examples:
  kcompile provision examples/ha-stacked --matchbox-endpoint matchbox.lan:8081 \
      --matchbox-ca ca.crt --matchbox-cert client.crt --matchbox-key client.key
  kcompile provision examples/ha-stacked ... --destroy

Writes DIR/terraform, runs tofu (or terraform) init and plan, asks, then
applies; the state stays in DIR/terraform-state.
` + exitCodes("0", "applied, or nothing to change, or not confirmed", "1", "the spec or the bundle has errors, Matchbox cannot be reached, or the tool failed", "2", "usage error")
}

func (c *provisionCmd) Run(e *env) error {
	if err := legacyPath(e, c.Output, &c.OutDir, "out", "-d", "output directory"); err != nil {
		return err
	}
	if _, _, err := net.SplitHostPort(c.MatchboxEndpoint); err != nil {
		return statusError{code: exitUsage, msg: fmt.Sprintf("--matchbox-endpoint %q is not HOST:PORT", c.MatchboxEndpoint)}
	}
	out, err := c.run(e, pipeline.Terraform)
	if err != nil {
		return err
	}
	tool, err := terraform.FindTool(c.Tofu)
	if err != nil {
		return statusError{code: exitProblems, msg: err.Error()}
	}
	moduleDir := filepath.Join(c.OutDir, "terraform")
	p := terraform.Provisioning{
		Module: moduleDir,
		Write: func() error {
			if err := writeTree(e, moduleDir, out.Trees[pipeline.Terraform], out.Material.Bundle.ManifestKey(), c.Replace); err != nil {
				return err
			}
			if err := warnIfTracked(e, c.OutDir, "the module and its state hold the nodes' configurations with their private keys"); err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "module %s written; running %s\n", moduleDir, filepath.Base(tool))
			return nil
		},
		Tool:     tool,
		Env:      environ(),
		Matchbox: terraform.Matchbox{Endpoint: c.MatchboxEndpoint, CA: c.MatchboxCA, ClientCert: c.MatchboxCert, ClientKey: c.MatchboxKey},
		Destroy:  c.Destroy,
		Planned: func(plan *terraform.Plan) {
			what := "plan"
			if c.Destroy {
				what = "destroy plan"
			}
			fmt.Fprintf(e.stdout, "%s: %s\n", what, plan.Summary())
			for _, ch := range plan.Changes {
				fmt.Fprintf(e.stdout, "  %-3s %s\n", ch.Action.Symbol(), ch.Address)
			}
		},
	}
	if !c.AutoApprove {
		p.Confirm = func(*terraform.Plan) (bool, error) {
			return confirm(e, fmt.Sprintf("Apply these changes to Matchbox at %s? Only 'yes' is accepted: ", c.MatchboxEndpoint))
		}
	}
	res, err := terraform.Provision(context.Background(), p)
	var unreachable *terraform.UnreachableError
	var partial *terraform.PartialError
	switch {
	case errors.As(err, &unreachable), errors.As(err, &partial), errors.Is(err, terraform.ErrNotConfirmed):
		return statusError{code: exitProblems, msg: err.Error()}
	case err != nil:
		return err
	case !res.Applied:
		fmt.Fprintf(e.stdout, "Matchbox at %s already serves this spec\n", c.MatchboxEndpoint)
	default:
		fmt.Fprintf(e.stdout, "applied: %s\n", res.Plan.Summary())
	}
	return nil
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
