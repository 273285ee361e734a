package main

import (
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/kcompile/kcompile/compiler/diag"
	"github.com/kcompile/kcompile/compiler/pki"
	"github.com/kcompile/kcompile/pipeline"
)

type pkiCmd struct {
	List   pkiListCmd   `cmd:"" help:"List every certificate: subject, issuer, SANs, usages, algorithm, expiry."`
	Expiry pkiExpiryCmd `cmd:"" help:"Show when each certificate expires and the first date the cluster breaks."`
	Renew  pkiRenewCmd  `cmd:"" help:"Move the bundle's issuance epoch: every leaf is re-keyed and re-issued, CAs are kept."`
	Verify pkiVerifyCmd `cmd:"" help:"Verify a written tree: chains, key pairs, kubeconfigs, file modes, and SANs against the spec."`
}

// specAndSecrets are the arguments of commands that issue the PKI.
type specAndSecrets struct {
	Dir     string `arg:"" optional:"" default:"." help:"Spec directory (a CUE package)."`
	Secrets string `short:"s" default:"secrets.json" placeholder:"FILE" help:"Secrets bundle (see kcompile secrets init)."`
}

func (a specAndSecrets) issue(e *env) (*pki.Material, error) {
	out, err := a.run(e)
	if err != nil {
		return nil, err
	}
	return out.Material, nil
}

type pkiListCmd struct {
	specAndSecrets
	Output string `short:"o" enum:"text,json" default:"text" help:"Output format: text or json."`
}

func (c *pkiListCmd) Run(e *env) error {
	m, err := c.issue(e)
	if err != nil {
		return err
	}
	inv := m.Inventory()
	defer e.progress.done(fmt.Sprintf("listed %s of %s", plural(len(inv), "certificate"), plural(len(m.Cluster.Nodes), "node")))
	if c.Output == "json" {
		return diag.EncodeJSON(e.stdout, inv)
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CERTIFICATE\tSUBJECT\tISSUER\tSANS\tUSAGES\tALGORITHM\tNOT AFTER")
	for _, i := range inv {
		// Names and addresses come from the spec: escaped for the
		// terminal.
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", diag.Printable(i.ID, maxShown), diag.Printable(i.Subject, maxShown),
			diag.Printable(i.Issuer, maxShown), diag.Printable(orDash(strings.Join(i.SANs, ",")), maxShown*10),
			strings.Join(i.Usages, ","), i.Algorithm, i.NotAfter.Format(time.DateOnly))
	}
	return tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

type pkiExpiryCmd struct {
	specAndSecrets
	FailWithin string `aliases:"within" help:"Exit with status 1 when the cluster breaks within this duration (e.g. 30d), for a scheduled CI job."`
	Output     string `short:"o" enum:"text,json" default:"text" help:"Output format: text or json."`
}

func (pkiListCmd) Help() string {
	return `Examples:
  kcompile pki list examples/ha-stacked
  kcompile pki list examples/ha-stacked -o json | jq '.[] | select(.id | startswith("kubelet"))'
` + exitCodes("0", "listed", "1", "the spec or the bundle has errors", "2", "usage error")
}

func (pkiExpiryCmd) Help() string {
	return `Examples:
  kcompile pki expiry examples/ha-stacked
  kcompile pki expiry examples/ha-stacked --fail-within 30d -o json   # in CI
` + exitCodes("0", "listed (and, with --fail-within, nothing breaks within it)",
		"1", "the spec or the bundle has errors, or the cluster breaks within --fail-within", "2", "usage error")
}

func (pkiRenewCmd) Help() string {
	return `Examples:
  kcompile pki renew examples/ha-stacked -s secrets.json
  kcompile pki renew examples/ha-stacked --epoch 2027-01-01T00:00:00Z

Then build again and redeploy: every leaf changes, the CAs do not.
` + exitCodes("0", "renewed", "1", "the spec or the bundle has errors, or the epoch does not fit the CAs; the bundle is unchanged", "2", "usage error")
}

func (pkiVerifyCmd) Help() string {
	return `Examples:
  kcompile pki verify out/systemd --spec examples/ha-stacked
  kcompile pki verify out/pki -o json
` + exitCodes("0", "every certificate, key and kubeconfig verifies", "1", "problems found (listed) or the tree cannot be read", "2", "usage error")
}

// expiry is pki expiry's JSON form.
type expiry struct {
	Certificates []expiring `json:"certificates"`
	// FirstBreak is when the first certificate the cluster needs
	// expires, and Breaking those that expire then.
	FirstBreak time.Time `json:"firstBreak"`
	DaysLeft   int       `json:"daysLeft"`
	Breaking   []string  `json:"breaking"`
	// Within is --fail-within, and Fails whether the cluster breaks
	// within it.
	Within string `json:"failWithin,omitempty"`
	Fails  bool   `json:"fails"`
}

type expiring struct {
	ID        string    `json:"id"`
	NotAfter  time.Time `json:"notAfter"`
	RenewedBy string    `json:"renewedBy"`
}

func (c *pkiExpiryCmd) Run(e *env) error {
	var within time.Duration
	if c.FailWithin != "" {
		d, err := parseDuration("fail-within", c.FailWithin, pki.MaxCAValidity)
		if err != nil {
			return statusError{code: exitUsage, msg: err.Error()}
		}
		within = d
	}
	m, err := c.issue(e)
	if err != nil {
		return err
	}
	first, which := m.FirstBreak()
	left := first.Sub(e.now)
	fails := c.FailWithin != "" && left < within
	var renew []string
	for _, i := range m.Inventory() {
		if slices.Contains(which, i.ID) && !slices.Contains(renew, i.RenewedBy) {
			renew = append(renew, i.RenewedBy)
		}
	}
	failure := statusError{code: exitProblems, msg: fmt.Sprintf("certificates expire within %s: %s, then build and redeploy", c.FailWithin, strings.Join(renew, "; "))}
	if c.Output == "json" {
		x := expiry{FirstBreak: first.UTC(), DaysLeft: int(left.Hours() / 24), Breaking: which, Within: c.FailWithin, Fails: fails, Certificates: []expiring{}}
		for _, i := range m.Expiry() {
			x.Certificates = append(x.Certificates, expiring{ID: i.ID, NotAfter: i.NotAfter.UTC(), RenewedBy: i.RenewedBy})
		}
		if err := diag.EncodeJSON(e.stdout, x); err != nil {
			return err
		}
		if fails {
			return failure
		}
		return nil
	}
	// One line per date, with the certificates expiring then.
	var day string
	var ids []string
	flush := func() {
		if day != "" {
			fmt.Fprintf(e.stdout, "%s  %s\n", day, summarize(ids))
		}
	}
	for _, i := range m.Expiry() {
		d := i.NotAfter.Format(time.DateOnly)
		if d != day {
			flush()
			day, ids = d, nil
		}
		ids = append(ids, i.ID)
	}
	flush()
	fmt.Fprintf(e.stdout, "the cluster first breaks on %s (in %d days), when these expire: %s\n",
		first.Format(time.RFC3339), int(left.Hours()/24), summarize(which))
	if fails {
		return failure
	}
	return nil
}

// summarize names up to five certificates and counts the rest.
func summarize(ids []string) string {
	if len(ids) <= 5 {
		return strings.Join(ids, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(ids[:5], ", "), len(ids)-5)
}

type pkiRenewCmd struct {
	specAndSecrets
	Epoch string `help:"New issuance epoch (RFC 3339); defaults to now."`
}

func (c *pkiRenewCmd) Run(e *env) error {
	epoch := e.now
	if c.Epoch != "" {
		var err error
		if epoch, err = time.Parse(time.RFC3339, c.Epoch); err != nil {
			return statusError{code: exitUsage, msg: fmt.Sprintf("--epoch %q is not an RFC 3339 time", c.Epoch)}
		}
	}
	b, diags, err := loadBundle(c.Secrets)
	if err != nil {
		return err
	}
	if diags.HasErrors() {
		return printDiagnostics(e, diags, "not renewed: cannot use the secrets bundle "+c.Secrets)
	}
	r := pipeline.Renew(pipeline.Input{Source: pipeline.Source{Dir: c.Dir, Bound: e.bound}, Bundle: b, Now: e.now, Stage: e.progress.stage}, epoch)
	switch {
	case r.Cluster == nil:
		return printDiagnostics(e, r.Diagnostics, "the spec has errors; `kcompile check` explains them")
	case r.Diagnostics.HasErrors():
		return printDiagnostics(e, r.Diagnostics, "not renewed: the bundle was left as it was")
	}
	// Warnings are shown as well, since this is when the epoch is
	// chosen.
	if err := printWarnings(e, r.Diagnostics); err != nil {
		return err
	}
	data, err := r.Bundle.Marshal()
	if err != nil {
		return err
	}
	if err := writePrivateFile(c.Secrets, data, true); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "renewed %s: epoch %s → %s; leaves are re-keyed and valid until %s; CAs unchanged\n",
		c.Secrets, b.Epoch.Format(time.RFC3339), r.Bundle.Epoch.Format(time.RFC3339), r.Bundle.Epoch.Add(r.Cluster.PKI.LeafValidity).Format(time.DateOnly))
	return nil
}

type pkiVerifyCmd struct {
	Tree   string `arg:"" help:"A built tree: DIR/<target> as written by kcompile build."`
	Spec   string `help:"Spec directory: also check that the tree has the certificates, SANs and servers of its topology."`
	Output string `short:"o" enum:"text,json" default:"text" help:"Output format: text or json."`
}

func (c *pkiVerifyCmd) Run(e *env) error {
	v, err := pipeline.Verify(c.Tree, pipeline.Source{Dir: c.Spec, Bound: e.bound}, e.now)
	if err != nil {
		// Verify's errors name paths inside the tree, as its problems do.
		return statusError{code: exitProblems, msg: v.Root + ": " + err.Error()}
	}
	if v.Diagnostics.HasErrors() {
		return printDiagnostics(e, v.Diagnostics, "the spec has errors; `kcompile check` explains them")
	}
	if err := printWarnings(e, v.Diagnostics); err != nil {
		return err
	}
	problems := v.Problems
	if c.Output == "json" {
		if problems == nil {
			problems = []pki.Problem{}
		}
		if err := diag.EncodeJSON(e.stdout, problems); err != nil {
			return err
		}
	} else {
		for _, p := range problems {
			fmt.Fprintln(e.stdout, diag.Printable(p.String(), maxShown*10))
		}
	}
	if len(problems) > 0 {
		return statusError{code: exitProblems, msg: fmt.Sprintf("%d problems in %s", len(problems), c.Tree)}
	}
	if c.Output == "text" {
		fmt.Fprintf(e.stdout, "%s: every certificate, key and kubeconfig verifies\n", c.Tree)
	}
	return nil
}
