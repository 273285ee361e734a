package pki

import (
	"bytes"
	"crypto/ecdsa"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/big"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/kcompile/kcompile/compiler/ir"
)

type nodePath struct{ node, path string }

func filesByKey(t *testing.T, m *Material) map[nodePath]File {
	t.Helper()
	files, err := Files(m)
	if err != nil {
		t.Fatalf("Files: %v", err)
	}
	out := map[nodePath]File{}
	for _, f := range files {
		k := nodePath{f.Node, f.Path}
		if _, dup := out[k]; dup {
			t.Errorf("Files lists %s:%s twice", f.Node, f.Path)
		}
		out[k] = f
	}
	return out
}

// TestIssueDeterministic: the same spec and bundle give the same bytes.
func TestIssueDeterministic(t *testing.T) {
	for _, ex := range []string{"ha-stacked", "external-etcd"} {
		t.Run(ex, func(t *testing.T) {
			c := compileExample(t, ex)
			b := newTestBundle(t)
			m1, err := Issue(c, b)
			if err != nil {
				t.Fatal(err)
			}
			// The same bundle, the spec compiled again.
			m2, err := Issue(compileDir(t, "../../examples/"+ex), b)
			if err != nil {
				t.Fatal(err)
			}
			// A bundle created again from the same seed is the same bundle.
			b2 := newTestBundle(t)
			d1, err1 := b.Marshal()
			d2, err2 := b2.Marshal()
			if err1 != nil || err2 != nil || !bytes.Equal(d1, d2) {
				t.Errorf("two bundles from one seed differ (%v, %v)", err1, err2)
			}
			if len(m1.Leaves) != len(m2.Leaves) || len(m1.Leaves) == 0 {
				t.Fatalf("issued %d and %d leaves", len(m1.Leaves), len(m2.Leaves))
			}
			serials := map[string]string{}
			for i, l := range m1.Leaves {
				o := m2.Leaves[i]
				if l.ID != o.ID {
					t.Fatalf("leaf %d is %s then %s", i, l.ID, o.ID)
				}
				if !bytes.Equal(l.CertPEM, o.CertPEM) {
					t.Errorf("%s: the certificate differs between runs", l.ID)
				}
				if !bytes.Equal(l.KeyPEM, o.KeyPEM) {
					t.Errorf("%s: the key differs between runs", l.ID)
				}
				if prev, dup := serials[l.X509.SerialNumber.String()]; dup {
					t.Errorf("%s and %s share serial %s", prev, l.ID, l.X509.SerialNumber)
				}
				serials[l.X509.SerialNumber.String()] = l.ID
			}
			f1, f2 := filesByKey(t, m1), filesByKey(t, m2)
			if len(f1) != len(f2) {
				t.Errorf("Files gave %d then %d files", len(f1), len(f2))
			}
			for k, f := range f1 {
				o, ok := f2[k]
				if !ok || !bytes.Equal(f.Data, o.Data) || f.Mode != o.Mode {
					t.Errorf("%s:%s differs between runs", k.node, k.path)
				}
			}
			// Distinct identities get distinct keys.
			keys := map[string]string{}
			for _, l := range m1.Leaves {
				k := string(l.KeyPEM)
				if prev, dup := keys[k]; dup {
					t.Errorf("%s and %s share a key", prev, l.ID)
				}
				keys[k] = l.ID
			}
		})
	}
}

// diffNodeFiles checks that every file of before is in after, unchanged,
// unless it belongs to node gone, and that every file of after that is not
// in before belongs to node added. It returns the files of added and gone.
func diffNodeFiles(t *testing.T, before, after map[nodePath]File, added, gone string) (addedFiles, goneFiles []string) {
	t.Helper()
	for k, f := range before {
		o, ok := after[k]
		switch {
		case !ok && k.node == gone && gone != "":
			goneFiles = append(goneFiles, k.path)
		case !ok:
			t.Errorf("%s:%s disappeared", k.node, k.path)
		case !bytes.Equal(f.Data, o.Data) || f.Mode != o.Mode:
			if k.node == "" {
				t.Errorf("cluster tree file %s changed", k.path)
			} else {
				t.Errorf("%s:%s changed", k.node, k.path)
			}
		}
	}
	for k := range after {
		if _, ok := before[k]; ok {
			continue
		}
		if k.node != added || added == "" {
			t.Errorf("new file %s:%s is not the new node's", k.node, k.path)
			continue
		}
		addedFiles = append(addedFiles, k.path)
	}
	return addedFiles, goneFiles
}

// haWorkerFiles are the files a worker of ha-stacked (calico, kube-proxy)
// gets.
var haWorkerFiles = []string{
	"etc/cni/net.d/calico-kubeconfig",
	"etc/kubernetes/kubelet.conf",
	"etc/kubernetes/pki/ca.crt",
	"var/lib/kube-proxy/kubeconfig.conf",
	"var/lib/kubelet/pki/kubelet.crt",
	"var/lib/kubelet/pki/kubelet.key",
}

func sameStrings(got, want []string) bool {
	g, w := slices.Clone(got), slices.Clone(want)
	slices.Sort(g)
	slices.Sort(w)
	return slices.Equal(g, w)
}

// TestAddRemoveWorker: a node's files depend only on that node and the
// cluster-wide settings, so adding or removing a worker changes nothing
// else.
func TestAddRemoveWorker(t *testing.T) {
	b := newTestBundle(t)
	issue := func(c *ir.Cluster) map[nodePath]File {
		m, err := Issue(c, b)
		if err != nil {
			t.Fatal(err)
		}
		return filesByKey(t, m)
	}
	base := issue(compileExample(t, "ha-stacked"))

	t.Run("add", func(t *testing.T) {
		dir := copyExample(t, "ha-stacked", map[string]string{
			"extra.cue": "package cluster\n\nworkers: nodes: extra: address: \"10.0.2.50\"\n",
		})
		c := compileDir(t, dir)
		if len(c.Nodes) != len(compileExample(t, "ha-stacked").Nodes)+1 {
			t.Fatalf("the extra worker was not added: %d nodes", len(c.Nodes))
		}
		added, _ := diffNodeFiles(t, base, issue(c), "extra", "")
		if !sameStrings(added, haWorkerFiles) {
			t.Errorf("the new worker got files %q, want %q", added, haWorkerFiles)
		}
	})

	t.Run("remove", func(t *testing.T) {
		// The pool of six workers, made five: w06 goes.
		dir := copyExample(t, "ha-stacked", map[string]string{
			"workers.cue": `package cluster

workers: pools: general: {
	count:        5
	namePattern:  "w%02d"
	firstAddress: "10.0.1.10"
	macs: [
		"52:54:00:00:01:10", "52:54:00:00:01:11", "52:54:00:00:01:12",
		"52:54:00:00:01:13", "52:54:00:00:01:14",
	]
	zones: ["a", "b", "c"]
	labels: "node.kubernetes.io/pool": "general"
	capacity: {cpu: 8, memory: "32Gi", maxPods: 110}
}
`,
		})
		c := compileDir(t, dir)
		for _, n := range c.Nodes {
			if n.Name == "w06" {
				t.Fatalf("w06 is still in the cluster")
			}
		}
		_, gone := diffNodeFiles(t, base, issue(c), "", "w06")
		if !sameStrings(gone, haWorkerFiles) {
			t.Errorf("removing w06 removed files %q, want %q", gone, haWorkerFiles)
		}
	})
}

// TestRenew: a new epoch re-keys and re-issues every leaf and keeps the
// CAs and the other secrets.
func TestRenew(t *testing.T) {
	c := compileExample(t, "ha-stacked")
	b := newTestBundle(t)
	epoch := testEpoch.Add(200 * 24 * time.Hour)
	r := b.Renew(epoch)
	if !r.Epoch.Equal(epoch) {
		t.Errorf("renewed epoch %s, want %s", r.Epoch, epoch)
	}
	if !b.Epoch.Equal(testEpoch) {
		t.Errorf("Renew changed the original bundle's epoch to %s", b.Epoch)
	}
	for _, a := range Authorities() {
		if !bytes.Equal(b.CAs[a].Cert.Raw, r.CAs[a].Cert.Raw) {
			t.Errorf("%s certificate changed", a)
		}
		if !b.CAs[a].Key.(*ecdsa.PrivateKey).Equal(r.CAs[a].Key) {
			t.Errorf("%s key changed", a)
		}
	}
	if !bytes.Equal(b.Seed, r.Seed) || !bytes.Equal(b.EncryptionKey, r.EncryptionKey) || b.BootstrapToken != r.BootstrapToken ||
		!b.ServiceAccountKey.(*ecdsa.PrivateKey).Equal(r.ServiceAccountKey) {
		t.Errorf("Renew changed a secret other than the leaves")
	}
	m1, err := Issue(c, b)
	if err != nil {
		t.Fatal(err)
	}
	m2, err := Issue(c, r)
	if err != nil {
		t.Fatal(err)
	}
	for i, l := range m1.Leaves {
		o := m2.Leaves[i]
		if l.ID != o.ID {
			t.Fatalf("leaf %d is %s then %s", i, l.ID, o.ID)
		}
		if bytes.Equal(l.KeyPEM, o.KeyPEM) || l.Key.(*ecdsa.PrivateKey).Equal(o.Key) {
			t.Errorf("%s was not re-keyed", l.ID)
		}
		if bytes.Equal(l.CertPEM, o.CertPEM) || l.X509.SerialNumber.Cmp(o.X509.SerialNumber) == 0 {
			t.Errorf("%s was not re-issued with a new serial", l.ID)
		}
		// Backdated by the clock skew, which the CA's start does not
		// clamp 200 days in.
		if !o.X509.NotBefore.Equal(epoch.Add(-c.PKI.ClockSkew)) || !o.X509.NotAfter.Equal(epoch.Add(c.PKI.LeafValidity)) {
			t.Errorf("%s renewed valid %s–%s, want from %s less %s for %s", l.ID, o.X509.NotBefore, o.X509.NotAfter, epoch, c.PKI.ClockSkew, c.PKI.LeafValidity)
		}
		if !publicKeysEqual(o.X509.PublicKey, o.Key.Public()) {
			t.Errorf("%s: the renewed key does not belong to the renewed certificate", l.ID)
		}
		if err := o.X509.CheckSignatureFrom(r.CAs[o.CA].Cert); err != nil {
			t.Errorf("%s: the renewed certificate is not signed by %s: %v", l.ID, o.CA, err)
		}
	}
	// The CA files and the service-account key are the same; every file
	// holding a leaf changed.
	f1, f2 := filesByKey(t, m1), filesByKey(t, m2)
	unchanged := map[string]bool{
		"etc/kubernetes/pki/ca.crt": true, "etc/kubernetes/pki/ca.key": true, "etc/kubernetes/pki/cluster-signing-ca.crt": true,
		"etc/kubernetes/pki/front-proxy-ca.crt": true, "etc/kubernetes/pki/etcd/ca.crt": true,
		"etc/kubernetes/pki/sa.key": true, "etc/kubernetes/pki/sa.pub": true, "pki/ca.crt": true,
	}
	for k, f := range f1 {
		o, ok := f2[k]
		if !ok {
			t.Errorf("%s:%s disappeared", k.node, k.path)
			continue
		}
		if same := bytes.Equal(f.Data, o.Data); same != unchanged[k.path] {
			t.Errorf("%s:%s: unchanged by renewal is %v, want %v", k.node, k.path, same, unchanged[k.path])
		}
	}
	if len(f1) != len(f2) {
		t.Errorf("renewal changed the number of files from %d to %d", len(f1), len(f2))
	}
}

// TestFileModes: keys, and kubeconfigs that embed them, are 0600;
// certificates and public keys 0644.
func TestFileModes(t *testing.T) {
	for _, ex := range []string{"ha-stacked", "external-etcd", "single-node", "dual-stack"} {
		t.Run(ex, func(t *testing.T) {
			files := filesByKey(t, issueExample(t, ex))
			var keys, kubeconfigs, certs int
			for k, f := range files {
				var want = ModePublic
				switch {
				case bytes.Contains(f.Data, []byte("PRIVATE KEY")):
					want = ModePrivate
					keys++
				case hasKubeconfigCredential(f.Data):
					want = ModePrivate
					kubeconfigs++
				case bytes.Contains(f.Data, []byte("-----BEGIN CERTIFICATE-----")), bytes.Contains(f.Data, []byte("-----BEGIN PUBLIC KEY-----")):
					certs++
				default:
					t.Errorf("%s:%s is neither a key, a kubeconfig nor a certificate", k.node, k.path)
				}
				if f.Mode != want {
					t.Errorf("%s:%s has mode %v, want %v", k.node, k.path, f.Mode, want)
				}
			}
			if keys == 0 || kubeconfigs == 0 || certs == 0 {
				t.Errorf("%d keys, %d kubeconfigs, %d certificates: want some of each", keys, kubeconfigs, certs)
			}
		})
	}
}

// hasKubeconfigCredential reports whether data is a kubeconfig with a credential.
func hasKubeconfigCredential(data []byte) bool {
	cfg, err := clientcmd.Load(data)
	if err != nil || len(cfg.AuthInfos) == 0 {
		return false
	}
	for _, a := range cfg.AuthInfos {
		if len(a.ClientKeyData) == 0 && a.ClientKey == "" && a.Token == "" {
			return false
		}
	}
	return true
}

// bundleSecretRenderings are renderings of the bundle's secrets that must never
// appear in output meant for logs or in error messages.
func bundleSecretRenderings(t *testing.T, b *Bundle) []string {
	t.Helper()
	out := []string{
		base64.StdEncoding.EncodeToString(b.Seed),
		base64.StdEncoding.EncodeToString(b.Seed)[:16],
		base64.RawURLEncoding.EncodeToString(b.Seed)[:16],
		hex.EncodeToString(b.Seed)[:16],
		strings.Trim(fmt.Sprint(b.Seed[:8]), "[]"),
		string(b.Seed[:8]),
		base64.StdEncoding.EncodeToString(b.EncryptionKey)[:16],
		hex.EncodeToString(b.EncryptionKey)[:16],
		strings.Trim(fmt.Sprint(b.EncryptionKey[:8]), "[]"),
		b.BootstrapToken,
		b.BootstrapToken[7:],
	}
	keys := []*ecdsa.PrivateKey{b.ServiceAccountKey.(*ecdsa.PrivateKey)}
	for _, a := range Authorities() {
		keys = append(keys, b.CAs[a].Key.(*ecdsa.PrivateKey))
	}
	for _, k := range keys {
		raw, err := k.Bytes()
		if err != nil {
			t.Fatal(err)
		}
		d := new(big.Int).SetBytes(raw)
		out = append(out, d.String()[:16], d.Text(16)[:16], hex.EncodeToString(raw)[:16],
			base64.StdEncoding.EncodeToString(raw)[:16], strings.Trim(fmt.Sprint(raw[:8]), "[]"))
		pemKey, err := encodeKey(k)
		if err != nil {
			t.Fatal(err)
		}
		// Every line of the key's PEM body.
		for _, line := range strings.Split(string(pemKey), "\n") {
			if len(line) >= 16 && !strings.HasPrefix(line, "-----") {
				out = append(out, line[:16])
			}
		}
	}
	return out
}

func assertNoSecretIn(t *testing.T, what, s string, secrets []string) {
	t.Helper()
	for _, sec := range secrets {
		if strings.Contains(s, sec) {
			t.Errorf("%s contains secret material %q:\n%s", what, sec, s)
			return
		}
	}
}

// TestBundleFormat: printing a bundle, whatever the verb, shows no secret.
func TestBundleFormat(t *testing.T) {
	b := newTestBundle(t)
	secrets := append(bundleSecretRenderings(t, b), "PRIVATE KEY")
	type holder struct {
		Name   string
		Bundle *Bundle
	}
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%d"} {
		for _, arg := range []struct {
			name string
			v    any
		}{{"*Bundle", b}, {"Bundle", *b}, {"struct holding *Bundle", holder{"h", b}}, {"[]*Bundle", []*Bundle{b}}} {
			s := fmt.Sprintf(verb, arg.v)
			assertNoSecretIn(t, fmt.Sprintf("Sprintf(%q, %s)", verb, arg.name), s, secrets)
			if arg.name == "*Bundle" && !strings.Contains(s, "redacted") {
				t.Errorf("Sprintf(%q, %s) = %q, want the redacted form", verb, arg.name, s)
			}
		}
	}
	// Errors that wrap a bundle print it the same way.
	err := fmt.Errorf("writing %v: %w", b, fmt.Errorf("disk full"))
	assertNoSecretIn(t, "an error", err.Error(), secrets)
	var nilBundle *Bundle
	if s := fmt.Sprintf("%v", nilBundle); strings.Contains(s, "0x") {
		t.Errorf("a nil bundle prints as %q", s)
	}
	// The check is not vacuous: the secrets are what Marshal writes.
	data, err := b.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, sec := range secrets {
		if strings.Contains(string(data), sec) {
			found++
		}
	}
	if found < 5 {
		t.Errorf("only %d of the secret strings are in the marshalled bundle: the leak check is vacuous", found)
	}
}

// TestBundleRoundTrip: Marshal then Parse gives the same bundle.
func TestBundleRoundTrip(t *testing.T) {
	b := newTestBundle(t)
	data, err := b.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	p, err := Parse(data)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	again, err := p.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(data, again) {
		t.Errorf("Marshal→Parse→Marshal changed the bundle:\n%s\n---\n%s", data, again)
	}
	if !p.Epoch.Equal(b.Epoch) || !bytes.Equal(p.Seed, b.Seed) || !bytes.Equal(p.EncryptionKey, b.EncryptionKey) ||
		p.BootstrapToken != b.BootstrapToken || !b.ServiceAccountKey.(*ecdsa.PrivateKey).Equal(p.ServiceAccountKey) {
		t.Errorf("Parse lost a secret")
	}
	for _, a := range Authorities() {
		if !bytes.Equal(p.CAs[a].Cert.Raw, b.CAs[a].Cert.Raw) || !b.CAs[a].Key.(*ecdsa.PrivateKey).Equal(p.CAs[a].Key) {
			t.Errorf("Parse changed %s", a)
		}
	}
	// The parsed bundle issues the same PKI.
	c := compileExample(t, "ha-stacked")
	m1, err := Issue(c, b)
	if err != nil {
		t.Fatal(err)
	}
	m2, err := Issue(c, p)
	if err != nil {
		t.Fatal(err)
	}
	f1, f2 := filesByKey(t, m1), filesByKey(t, m2)
	for k, f := range f1 {
		if !bytes.Equal(f.Data, f2[k].Data) {
			t.Errorf("%s:%s differs when issued from the parsed bundle", k.node, k.path)
		}
	}
	// Bootstrap token in kubeadm's form.
	if len(b.BootstrapToken) != 23 || b.BootstrapToken[6] != '.' {
		t.Errorf("bootstrap token %q is not of the form [a-z0-9]{6}.[a-z0-9]{16}", b.BootstrapToken)
	}
}

// TestParseRejects: Parse refuses damaged bundles, and its errors quote no
// key material.
func TestParseRejects(t *testing.T) {
	b := newTestBundle(t)
	secrets := bundleSecretRenderings(t, b)
	data, err := b.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	var f map[string]any
	if err := json.Unmarshal(data, &f); err != nil {
		t.Fatal(err)
	}
	edit := func(change func(map[string]any)) []byte {
		var g map[string]any
		if err := json.Unmarshal(data, &g); err != nil {
			t.Fatal(err)
		}
		change(g)
		out, err := json.Marshal(g)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	auth := func(g map[string]any, a Authority) map[string]any {
		return g["authorities"].(map[string]any)[string(a)].(map[string]any)
	}
	cases := map[string][]byte{
		"empty":          nil,
		"not JSON":       []byte("seed: " + base64.StdEncoding.EncodeToString(b.Seed)),
		"trailing comma": bytes.Replace(data, []byte("\n}"), []byte(",\n}"), 1),
		"control char":   bytes.Replace(data, []byte("-----BEGIN EC PRIVATE KEY-----\\n"), []byte("-----BEGIN EC PRIVATE KEY-----\n"), 1),
		"unknown field":  edit(func(g map[string]any) { g["extra"] = base64.StdEncoding.EncodeToString(b.Seed) }),
		"wrong kind":     edit(func(g map[string]any) { g["kind"] = "Secret" }),
		"seed a number":  edit(func(g map[string]any) { g["seed"] = 12345 }),
		"seed garbled":   edit(func(g map[string]any) { g["seed"] = "!" + g["seed"].(string)[1:] }),
		"seed short":     edit(func(g map[string]any) { g["seed"] = base64.StdEncoding.EncodeToString(b.Seed[:16]) }),
		"encryption key": edit(func(g map[string]any) { g["encryptionKey"] = base64.StdEncoding.EncodeToString(b.EncryptionKey[:31]) }),
		"no epoch":       edit(func(g map[string]any) { delete(g, "epoch") }),
		"no etcd CA":     edit(func(g map[string]any) { delete(g["authorities"].(map[string]any), string(EtcdCA)) }),
		"CA key swapped": edit(func(g map[string]any) {
			auth(g, ClusterCA)["key"], auth(g, EtcdCA)["key"] = auth(g, EtcdCA)["key"], auth(g, ClusterCA)["key"]
		}),
		"CA key not PEM": edit(func(g map[string]any) {
			a := auth(g, FrontProxyCA)
			a["key"] = strings.ReplaceAll(a["key"].(string), "-----", "")
		}),
		"trailing data":  append(append([]byte(nil), data...), "garbage"...),
		"two bundles":    append(append([]byte(nil), data...), data...),
		"SA key missing": edit(func(g map[string]any) { delete(g, "serviceAccountKey") }),
		"leaf as CA": edit(func(g map[string]any) {
			auth(g, FrontProxyCA)["cert"] = string(issueExample(t, "single-node").Leaves[0].CertPEM)
		}),
	}
	// Truncated anywhere before the closing brace.
	end := bytes.LastIndexByte(data, '}')
	for i := 0; i < end; i += 37 {
		cases[fmt.Sprintf("truncated at %d", i)] = data[:i]
	}
	for name, d := range cases {
		p, err := Parse(d)
		if err == nil {
			t.Errorf("%s: Parse accepted it (%v)", name, p)
			continue
		}
		assertNoSecretIn(t, name+": the error", err.Error(), secrets)
	}
	if _, err := Parse(append(append([]byte(nil), data...), " \n\t\n"...)); err != nil {
		t.Errorf("Parse rejects trailing white space: %v", err)
	}

	// Every one-character change in the PEM body of a CA certificate or a
	// key is rejected, or changes nothing that matters: never another key,
	// never a damaged CA certificate. (Changes to the public key SEC 1
	// keeps beside the private one that leave it unparsed are harmless.)
	type pemField struct {
		name string
		get  func(map[string]any) string
		set  func(map[string]any, string)
	}
	var fields []pemField
	for _, a := range Authorities() {
		for _, k := range []string{"cert", "key"} {
			fields = append(fields, pemField{string(a) + " " + k,
				func(g map[string]any) string { return auth(g, a)[k].(string) },
				func(g map[string]any, s string) { auth(g, a)[k] = s }})
		}
	}
	fields = append(fields, pemField{"serviceAccountKey",
		func(g map[string]any) string { return g["serviceAccountKey"].(string) },
		func(g map[string]any, s string) { g["serviceAccountKey"] = s }})
	for _, fld := range fields {
		var g map[string]any
		if err := json.Unmarshal(data, &g); err != nil {
			t.Fatal(err)
		}
		orig := fld.get(g)
		start, stop := strings.Index(orig, "-----\n")+6, strings.LastIndex(orig, "\n-----")
		rejected, harmless := 0, 0
		for i := start; i < stop; i++ {
			if orig[i] == '\n' {
				continue
			}
			c := byte('B')
			if orig[i] == c {
				c = 'C'
			}
			fld.set(g, orig[:i]+string(c)+orig[i+1:])
			d, err := json.Marshal(g)
			if err != nil {
				t.Fatal(err)
			}
			p, err := Parse(d)
			if err != nil {
				rejected++
				assertNoSecretIn(t, fld.name+" damaged: the error", err.Error(), secrets)
				continue
			}
			harmless++
			if what := bundleDifference(b, p); what != "" {
				t.Errorf("%s damaged at PEM offset %d: Parse accepted a bundle with %s", fld.name, i-start, what)
			}
		}
		fld.set(g, orig)
		if rejected == 0 {
			t.Errorf("%s: no damage was rejected", fld.name)
		}
		t.Logf("%s: %d one-character changes rejected, %d harmless ones accepted", fld.name, rejected, harmless)
	}
}

// bundleDifference names what differs between two bundles that matters
// for issuance and trust, or returns "".
func bundleDifference(b, p *Bundle) string {
	if !b.ServiceAccountKey.(*ecdsa.PrivateKey).Equal(p.ServiceAccountKey) {
		return "another service-account key"
	}
	for _, a := range Authorities() {
		x, y := b.CAs[a], p.CAs[a]
		switch {
		case !x.Key.(*ecdsa.PrivateKey).Equal(y.Key):
			return "another " + string(a) + " key"
		case !bytes.Equal(x.Cert.Raw, y.Cert.Raw):
			return "a damaged " + string(a) + " certificate"
		}
	}
	return ""
}

// TestIssueCertsIsIssue: a part of the catalogue, issued alone (as the
// simulator issues its kubelets' client certificates), gives the very
// leaves the whole issuance gives, in the order asked, whatever the
// number of cores signing.
func TestIssueCertsIsIssue(t *testing.T) {
	c := compileExample(t, "ha-stacked")
	b := newTestBundle(t)
	whole, err := Issue(c, b)
	if err != nil {
		t.Fatal(err)
	}
	var part []Cert
	for _, cert := range slices.Backward(Catalogue(c)) {
		if cert.Name == "kubelet-client" || cert.Node == "" {
			part = append(part, cert)
		}
	}
	m, err := IssueCerts(c, b, part)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Leaves) != len(part) || len(part) != 11 {
		t.Fatalf("%d leaves for %d certificates (want 9 kubelets, admin and super-admin)", len(m.Leaves), len(part))
	}
	for i, l := range m.Leaves {
		w, ok := whole.Leaf(part[i].ID)
		if l.ID != part[i].ID || !ok || !bytes.Equal(l.CertPEM, w.CertPEM) || !bytes.Equal(l.KeyPEM, w.KeyPEM) {
			t.Errorf("leaf %d (%s) differs from the whole issuance's %s", i, l.ID, part[i].ID)
		}
	}
}
