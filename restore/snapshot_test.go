package restore

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/kcompile/kcompile/compiler/ir"
	"github.com/kcompile/kcompile/compiler/pki"
	"github.com/kcompile/kcompile/internal/fixture"
)

// program is a program of .bin, which scripts/tools builds.
func program(t *testing.T, name string) string {
	t.Helper()
	for _, dir := range []string{"../.bin", "../.bin/node"} {
		p, err := filepath.Abs(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	t.Fatalf("%s is missing from .bin: run scripts/tools first", name)
	return ""
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// etcdWith starts a real etcd on loopback, writes kvs through its API,
// and returns a snapshot of it taken by etcdctl snapshot save, as
// etcd.backup's script takes one.
func etcdWith(t *testing.T, kvs map[string][]byte, deleted ...string) string {
	t.Helper()
	dir := t.TempDir()
	client := fmt.Sprintf("http://127.0.0.1:%d", freePort(t))
	peer := fmt.Sprintf("http://127.0.0.1:%d", freePort(t))
	ctx, cancel := context.WithCancel(context.Background())
	etcd := exec.CommandContext(ctx, program(t, "etcd"), "--name", "elsewhere", "--data-dir", filepath.Join(dir, "data"),
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer, "--initial-cluster", "elsewhere="+peer,
		"--listen-metrics-urls", "")
	var log bytes.Buffer
	etcd.Stdout, etcd.Stderr = &log, &log
	// Ended with the test's process, even one that crashes.
	etcd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := etcd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		etcd.Wait()
		if t.Failed() {
			t.Logf("etcd's log:\n%s", log.String())
		}
	})
	post := func(path string, body any) error {
		data, _ := json.Marshal(body)
		resp, err := http.Post(client+path, "application/json", bytes.NewReader(data))
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: %s", path, resp.Status)
		}
		return nil
	}
	b64 := func(b []byte) string { return base64.StdEncoding.EncodeToString(b) }
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := post("/v3/kv/put", map[string]string{"key": b64([]byte("/probe")), "value": b64([]byte("up"))})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("etcd does not answer: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for k, v := range kvs {
		if err := post("/v3/kv/put", map[string]string{"key": b64([]byte(k)), "value": b64(v)}); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range append(deleted, "/probe") {
		if err := post("/v3/kv/deleterange", map[string]string{"key": b64([]byte(k))}); err != nil {
			t.Fatal(err)
		}
	}
	snap := filepath.Join(dir, "snapshot.db")
	if out, err := exec.Command(program(t, "etcdctl"), "--endpoints", client, "snapshot", "save", snap).CombinedOutput(); err != nil {
		t.Fatalf("etcdctl snapshot save: %v\n%s", err, out)
	}
	return snap
}

// stored is a ConfigMap as an API server stores it: protobuf with
// Kubernetes' magic prefix.
func stored(t *testing.T, cm *corev1.ConfigMap) []byte {
	t.Helper()
	codec := scheme.Codecs.EncoderForVersion(protobuf.NewSerializer(scheme.Scheme, scheme.Scheme), corev1.SchemeGroupVersion)
	var b bytes.Buffer
	if err := codec.Encode(cm, &b); err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(b.Bytes(), []byte("k8s\x00")) {
		t.Fatalf("not the API server's protobuf: %q", b.Bytes()[:8])
	}
	return b.Bytes()
}

func authentication(t *testing.T, cas ...*x509.Certificate) []byte {
	var bundle []byte
	for _, c := range cas {
		bundle = append(bundle, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})...)
	}
	return stored(t, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "extension-apiserver-authentication"},
		Data:       map[string]string{"client-ca-file": string(bundle)},
	})
}

// otherCA is a CA of no bundle of the tests.
func otherCA(t *testing.T) *x509.Certificate {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: "another-ca"}, NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// ofCluster restores snap with etcdutl as the members of c, the way a
// restore does, and returns the first member's database: a snapshot
// whose members are c's (a data directory's db, without a hash).
func ofCluster(t *testing.T, snap string, c *ir.Cluster) string {
	t.Helper()
	m := c.Etcd.Members[0]
	data := filepath.Join(t.TempDir(), "data")
	if out, err := exec.Command(program(t, "etcdutl"), "snapshot", "restore", snap, "--name", m.Name, "--initial-cluster", c.Etcd.InitialCluster(),
		"--initial-cluster-token", "test", "--initial-advertise-peer-urls", m.PeerURL(), "--data-dir", data).CombinedOutput(); err != nil {
		t.Fatalf("etcdutl snapshot restore: %v\n%s", err, out)
	}
	return filepath.Join(data, "member", "snap", "db")
}

func TestInspectRealSnapshot(t *testing.T) {
	b := fixture.Bundle(t)
	c := fixture.Cluster(t, "ha-stacked", nil)
	ca := b.Trusted(pki.ClusterCA)
	snap := etcdWith(t, map[string][]byte{
		authenticationKey:                                  authentication(t, ca...),
		"/registry/namespaces/shop":                        []byte("ns"),
		"/registry/namespaces/gone":                        []byte("ns"),
		"/registry/configmaps/shop/prices":                 []byte("cm"),
		"/registry/deployments/shop/web":                   []byte("deploy"),
		"/registry/apiregistration.k8s.io/apiservices/v1.": []byte("api"),
		"/elsewhere":                                       []byte("x"),
	}, "/registry/namespaces/gone")
	s, err := Inspect(snap)
	if err != nil {
		t.Fatal(err)
	}
	if !s.Hashed {
		t.Error("etcdctl's snapshot has its SHA-256 at its end; Inspect did not find it")
	}
	want := map[string]int{"configmaps": 2, "namespaces": 1, "deployments": 1, "apiservices.apiregistration.k8s.io": 1, NotKubernetes: 1}
	if fmt.Sprint(s.Counts) != fmt.Sprint(want) || s.Keys != 6 {
		t.Errorf("counts %v (%d keys), want %v (6 keys): the deleted namespace and the deleted probe are gone", s.Counts, s.Keys, want)
	}
	// The probe's put, one per key, two deletions, after etcd's first
	// revision.
	if s.Revision != 11 {
		t.Errorf("revision %d, want 11", s.Revision)
	}
	if len(s.Members) != 1 || s.Members[0].Name != "elsewhere" {
		t.Errorf("members %+v, want the one member elsewhere", s.Members)
	}
	if len(s.ClientCAs) != len(ca) || !s.ClientCAs[0].Equal(ca[0]) {
		t.Errorf("client CAs %d, want the bundle's %d", len(s.ClientCAs), len(ca))
	}

	// Another cluster's members: refused, naming both.
	err = Match(s, c, ca)
	if err == nil || !strings.Contains(err.Error(), "another cluster") || !strings.Contains(err.Error(), "elsewhere=http://127.0.0.1:") || !strings.Contains(err.Error(), c.Etcd.Members[0].PeerURL()) {
		t.Errorf("a snapshot of another cluster's members: %v", err)
	}
	// The same objects under the cluster's own members: accepted with
	// the bundle's CA, refused with another.
	own, err := Inspect(ofCluster(t, snap, c))
	if err != nil {
		t.Fatal(err)
	}
	if own.Hashed || len(own.Members) != len(c.Etcd.Members) {
		t.Errorf("a data directory's db: hashed %v, %d members, want no hash and %d", own.Hashed, len(own.Members), len(c.Etcd.Members))
	}
	if err := Match(own, c, ca); err != nil {
		t.Errorf("the cluster's own snapshot is refused: %v", err)
	}
	err = Match(own, c, []*x509.Certificate{otherCA(t)})
	if err == nil || !strings.Contains(err.Error(), "client CA") || !strings.Contains(err.Error(), ca[0].Subject.CommonName) {
		t.Errorf("a snapshot under another CA: %v", err)
	}
}

func TestInspectRefusesCorruptSnapshots(t *testing.T) {
	b := fixture.Bundle(t)
	snap := etcdWith(t, map[string][]byte{authenticationKey: authentication(t, b.Trusted(pki.ClusterCA)...), "/registry/namespaces/shop": []byte("ns")})
	data, err := os.ReadFile(snap)
	if err != nil {
		t.Fatal(err)
	}
	if len(data)%512 != sha256.Size {
		t.Fatalf("etcdctl's snapshot is %d bytes, not a database's with its hash", len(data))
	}
	dir := t.TempDir()
	write := func(name string, d []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, d, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	flipped := bytes.Clone(data)
	flipped[len(flipped)/2] ^= 0xff
	// A database rewritten with a hash of its own but broken pages:
	// bbolt's check, not the hash, finds it.
	db := bytes.Clone(data[:len(data)-sha256.Size])
	for i := 4096 * 2; i < len(db); i += 4096 {
		// Page headers' ids past the meta pages.
		db[i] ^= 0xff
	}
	sum := sha256.Sum256(db)
	rehashed := append(db, sum[:]...)
	for name, c := range map[string]struct {
		data []byte
		want string
	}{
		"flipped":   {flipped, "SHA-256 at its end does not match"},
		"truncated": {data[:len(data)-100], "cut short"},
		"empty":     {nil, "no etcd snapshot"},
		"text":      {bytes.Repeat([]byte("not a db"), 64), "no etcd snapshot"},
		"pages":     {rehashed, "corrupt"},
	} {
		_, err := Inspect(write(name, c.data))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error saying %q", name, err, c.want)
		}
	}
	after, err := os.ReadFile(snap)
	if err != nil || !bytes.Equal(after, data) {
		t.Error("Inspect changed the snapshot it read")
	}
}

func TestStepsText(t *testing.T) {
	c := fixture.Cluster(t, "ha-stacked", nil)
	s := &Snapshot{Path: "/backups/snap.db", Digest: strings.Repeat("ab", 32), Revision: 42, Keys: 7, Hashed: true}
	p := Steps(c, s, Options{Stamp: "20261204T120000Z"})
	var b bytes.Buffer
	if err := p.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	text := b.String()
	var kinds []Kind
	for _, st := range p.Steps {
		kinds = append(kinds, st.Kind)
	}
	if fmt.Sprint(kinds) != fmt.Sprint([]Kind{StopControlPlane, StopEtcd, Lay, Restore, StartEtcd, StartControlPlane, NodesReady, Clean}) {
		t.Errorf("steps %v", kinds)
	}
	for _, m := range c.Etcd.Members {
		want := fmt.Sprintf("%s: /usr/local/bin/etcdutl snapshot restore /var/lib/kcompile-restore/snapshot.db --name %s --initial-cluster %s --initial-cluster-token %s --initial-advertise-peer-urls %s --data-dir /var/lib/etcd.restoring --bump-revision 1000000000 --mark-compacted",
			m.Node, m.Name, c.Etcd.InitialCluster(), c.Name+"-restore-abababababab", m.PeerURL())
		if !strings.Contains(text, want) {
			t.Errorf("no line %q in\n%s", want, text)
		}
		if !strings.Contains(text, m.Node+": mv /var/lib/etcd /var/lib/etcd.before-restore-20261204T120000Z\n") {
			t.Errorf("member %s's data is not moved aside", m.Node)
		}
	}
	// The API servers stop before etcd does, and start after it.
	if strings.Index(text, "stop kube-scheduler.service kube-controller-manager.service kube-apiserver.service") > strings.Index(text, "systemctl stop etcd.service") ||
		strings.Index(text, "start kube-apiserver.service") < strings.Index(text, "start --no-block etcd.service") {
		t.Errorf("the API servers are not stopped around etcd:\n%s", text)
	}
}
