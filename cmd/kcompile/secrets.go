package main

import (
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/kcompile/kcompile/compiler"
	"github.com/kcompile/kcompile/compiler/ir"
	"github.com/kcompile/kcompile/compiler/pki"
	"github.com/kcompile/kcompile/layout"
)

type secretsCmd struct {
	Init          secretsInitCmd   `cmd:"" help:"Create a secrets bundle: CAs, service-account key, encryption key, bootstrap token, issuance epoch."`
	ImportKubeadm secretsImportCmd `cmd:"" name:"import-kubeadm" help:"Create a secrets bundle from an existing kubeadm PKI directory (/etc/kubernetes/pki)."`
	Rotate        secretsRotateCmd `cmd:"" help:"Replace CAs and the service-account key in stages that keep every flow of the cluster working, each proven by real handshakes."`
}

type secretsRotateCmd struct {
	specAndSecrets
	CA         []string `name:"ca" sep:"," placeholder:"NAME,..." help:"Start a rotation of these: ca, etcd-ca, front-proxy-ca, service-account, or all."`
	Next       bool     `help:"Take the rotation under way to its next stage."`
	CAValidity string   `help:"How long the new CAs are valid, e.g. 10y (default: as long as the ones they replace)."`
}

func (secretsRotateCmd) Help() string {
	return `Examples:
  kcompile secrets rotate --ca all            # stage 1: every trust store trusts old and new
  kcompile secrets rotate --next              # stage 2: every leaf from the new CAs
  kcompile secrets rotate --next              # the end: the old CAs trusted nowhere
  kcompile secrets rotate prod/ -s prod.json --ca etcd-ca

Each stage is written to the bundle, with the stage recorded: roll it
out to every node (kcompile apply -s FILE) before the next stage. A
stage is written only once every flow of the spec's cluster (each kind
of TLS connection, and service-account tokens) is proven to work
between it and the stage before, a client of either against a server of
the other, as happens while nodes move from one to the next.
` + exitCodes("0", "the next stage written", "1", "the spec or bundle has errors, a flow would break, or the file cannot be written", "2", "usage error")
}

func (c *secretsRotateCmd) Run(e *env) error {
	if (len(c.CA) > 0) == c.Next {
		return statusError{code: exitUsage, msg: "give --ca NAME,... to start a rotation, or --next to take one to its next stage"}
	}
	var opts pki.RotateOptions
	for _, name := range c.CA {
		switch {
		case name == "all":
			opts.Authorities, opts.ServiceAccount = pki.Authorities(), true
		case name == pki.ServiceAccount:
			opts.ServiceAccount = true
		case slices.Contains(pki.Authorities(), pki.Authority(name)):
			opts.Authorities = append(opts.Authorities, pki.Authority(name))
		default:
			return statusError{code: exitUsage, msg: fmt.Sprintf("--ca %s is not one of ca, etcd-ca, front-proxy-ca, service-account, all", shellWord(name))}
		}
	}
	if c.CAValidity != "" {
		v, err := parseDuration("ca-validity", c.CAValidity, pki.MaxCAValidity)
		if err != nil {
			return statusError{code: exitUsage, msg: err.Error()}
		}
		opts.CAValidity = v
	}
	b, diags, err := loadBundle(c.Secrets)
	if err != nil {
		return err
	}
	if diags.HasErrors() {
		return printDiagnostics(e, diags, "not rotated: cannot use the secrets bundle "+c.Secrets)
	}
	next, err := writeStage(e, c.Dir, c.Secrets, b, func(cl *ir.Cluster) (*pki.Bundle, error) {
		if c.Next {
			return b.Advance(e.now)
		}
		opts.ClockSkew = cl.PKI.ClockSkew
		return b.Rotate(rand.Reader, e.now, opts)
	})
	if err != nil {
		return err
	}
	if next.Stage() > 0 {
		fmt.Fprintf(e.stdout, "roll it out (kcompile apply -s %s, or build and lay every node's files), then `kcompile secrets rotate --next`\n", c.Secrets)
	} else {
		fmt.Fprintf(e.stdout, "roll it out (kcompile apply -s %s, or build and lay every node's files)\n", c.Secrets)
	}
	return nil
}

// writeStage writes to path the stage of a rotation that step makes of
// b, the bundle there, once the stage passes the spec's checks in dir
// and every flow of its cluster is proven to work between b and it: the
// bundle is left as it was otherwise. It says what it wrote.
func writeStage(e *env, dir, path string, b *pki.Bundle, step func(*ir.Cluster) (*pki.Bundle, error)) (*pki.Bundle, error) {
	cl, diags := compiler.Compile(compiler.Source{Dir: dir, Bound: e.bound})
	if cl == nil || diags.HasErrors() {
		return nil, printDiagnostics(e, diags, "the spec has errors; `kcompile check` explains them")
	}
	next, err := step(cl)
	if err != nil {
		return nil, statusError{code: exitProblems, msg: "not rotated: " + err.Error()}
	}
	if d := pki.Check(cl, next, e.now); d.HasErrors() {
		return nil, printDiagnostics(e, d, "not rotated: the bundle was left as it was")
	}
	if err := pki.ProveTransition(cl, b, next, e.now, rand.Reader); err != nil {
		return nil, statusError{code: exitProblems, msg: "not rotated, the bundle was left as it was: " + err.Error()}
	}
	data, err := next.Marshal()
	if err != nil {
		return nil, err
	}
	if err := writePrivateFile(path, data, true); err != nil {
		return nil, err
	}
	names := next.Rotating()
	if len(names) == 0 {
		names = b.Rotating()
	}
	rotating := strings.Join(names, ", ")
	switch next.Stage() {
	case 1:
		fmt.Fprintf(e.stdout, "wrote %s: stage 1 of the rotation of %s: every trust store trusts the old and the new, leaves still from the old\n", path, rotating)
	case 2:
		fmt.Fprintf(e.stdout, "wrote %s: stage 2 of the rotation of %s: every leaf re-keyed at %s and issued by the new, the old still trusted\n", path, rotating, next.Epoch.Format(time.RFC3339))
	default:
		fmt.Fprintf(e.stdout, "wrote %s: the rotation of %s has ended: the old are trusted nowhere\n", path, rotating)
	}
	fmt.Fprintln(e.stdout, "proven: every flow of the cluster works between this stage and the one before, both ways round")
	return next, nil
}

type secretsInitCmd struct {
	Secrets      string `short:"s" default:"secrets.json" placeholder:"FILE" help:"Bundle file to write (mode 0600)."`
	Output       string `short:"o" hidden:"" help:"Deprecated spelling of --secrets."`
	Force        bool   `help:"Replace an existing bundle."`
	KeyAlgorithm string `enum:"ECDSA-P256,ECDSA-P384,RSA-2048,RSA-3072,RSA-4096" default:"ECDSA-P256" help:"Algorithm of the CA and service-account keys."`
	CAValidity   string `default:"10y" help:"How long the CAs are valid, e.g. 10y or 3650d."`
	ClockSkew    string `default:"5m" help:"Backdate the CAs' notBefore by this much, as the spec's pki.clockSkew backdates leaves, so that nodes whose clocks run behind accept a fresh tree (0s: not at all; at most 24h)."`
}

func (secretsInitCmd) Help() string {
	return `Examples:
  kcompile secrets init                            # secrets.json here
  kcompile secrets init -s prod.json --key-algorithm ECDSA-P384 --ca-validity 5y

The bundle holds every private key of the cluster: keep it out of git (a
warning says so when it lands in a work tree that does not ignore it).
` + exitCodes("0", "written", "1", "the file exists (use --force) or cannot be written", "2", "usage error")
}

func (c *secretsInitCmd) Run(e *env) error {
	if err := legacyPath(e, c.Output, &c.Secrets, "secrets.json", "-s", "bundle file"); err != nil {
		return err
	}
	validity, err := parseDuration("ca-validity", c.CAValidity, pki.MaxCAValidity)
	if err != nil {
		return statusError{code: exitUsage, msg: err.Error()}
	}
	skew, err := time.ParseDuration(c.ClockSkew)
	if err != nil || skew < 0 || skew > ir.MaxClockSkew {
		return statusError{code: exitUsage, msg: fmt.Sprintf("--clock-skew %s is not a duration between 0s and 24h, such as 5m", shellWord(c.ClockSkew))}
	}
	b, err := pki.New(rand.Reader, e.now, pki.NewOptions{Algorithm: pki.Algorithm(c.KeyAlgorithm), CAValidity: validity, ClockSkew: skew})
	if err != nil {
		return err
	}
	return writeBundle(e, b, c.Secrets, c.Force)
}

func writeBundle(e *env, b *pki.Bundle, file string, force bool) error {
	data, err := b.Marshal()
	if err != nil {
		return err
	}
	if err := writePrivateFile(file, data, force); err != nil {
		return err
	}
	ca := b.CAs[pki.ClusterCA].Cert
	fmt.Fprintf(e.stdout, "wrote %s (mode 0600): CAs valid until %s, leaves issued from %s\n",
		file, ca.NotAfter.Format("2006-01-02"), b.Epoch.Format("2006-01-02T15:04:05Z"))
	fmt.Fprintln(e.stdout, "keep it secret: it holds every private key of the cluster")
	return warnIfTracked(e, file, "it holds every private key of the cluster")
}

type secretsImportCmd struct {
	Dir     string `arg:"" help:"A kubeadm PKI directory, usually /etc/kubernetes/pki."`
	Secrets string `short:"s" default:"secrets.json" placeholder:"FILE" help:"Bundle file to write (mode 0600)."`
	Output  string `short:"o" hidden:"" help:"Deprecated spelling of --secrets."`
	Force   bool   `help:"Replace an existing bundle."`
}

func (secretsImportCmd) Help() string {
	return `Examples:
  kcompile secrets import-kubeadm ` + layout.Abs(strings.TrimSuffix(layout.PKIDir, "/")) + ` -s secrets.json

Reads ca.crt/key, etcd/ca.crt/key, front-proxy-ca.crt/key and sa.key; the
cluster keeps its CAs, and kcompile issues every leaf from them.
` + exitCodes("0", "written", "1", "a file is missing or unusable, or the bundle exists (use --force)", "2", "usage error")
}

func (c *secretsImportCmd) Run(e *env) error {
	if err := legacyPath(e, c.Output, &c.Secrets, "secrets.json", "-s", "bundle file"); err != nil {
		return err
	}
	read := func(name string) ([]byte, error) {
		b, err := os.ReadFile(filepath.Join(c.Dir, name))
		if err != nil {
			return nil, statusError{code: exitProblems, msg: fmt.Sprintf("%s: %s is missing or unreadable", c.Dir, name)}
		}
		return b, nil
	}
	// The directory is a node's PKIDir: its files are named as there.
	files := map[string][]byte{}
	for _, p := range []string{layout.ClusterCACert, layout.ClusterCAKey, layout.EtcdCACert, layout.EtcdCAKey, layout.FrontProxyCACert, layout.FrontProxyCAKey, layout.ServiceAccountKey} {
		data, err := read(strings.TrimPrefix(p, layout.PKIDir))
		if err != nil {
			return err
		}
		files[p] = data
	}
	b, err := pki.Import(rand.Reader, e.now, pki.KubeadmFiles{
		CACert: files[layout.ClusterCACert], CAKey: files[layout.ClusterCAKey],
		EtcdCACert: files[layout.EtcdCACert], EtcdCAKey: files[layout.EtcdCAKey],
		FrontProxyCACert: files[layout.FrontProxyCACert], FrontProxyCAKey: files[layout.FrontProxyCAKey],
		ServiceAccountKey: files[layout.ServiceAccountKey],
	})
	if err != nil {
		return statusError{code: exitProblems, msg: fmt.Sprintf("%s: %v", c.Dir, err)}
	}
	return writeBundle(e, b, c.Secrets, c.Force)
}
