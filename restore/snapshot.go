// Package restore is what kcompile restore knows of an etcd snapshot and
// of bringing a compiled cluster back from one: the snapshot read as
// etcd's own storage (bbolt) without starting an etcd, the refusals of a
// snapshot that is corrupt or of another cluster, and the ordered steps
// of a restore, which the runtimes perform and which are printed for
// hosts kcompile cannot reach.
package restore

import (
	"bytes"
	"crypto/sha256"
	"crypto/x509"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/encoding/protowire"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/scheme"
)

// Snapshot is what a snapshot file holds, read from its bbolt database.
type Snapshot struct {
	Path string
	Size int64
	// Digest is the SHA-256 of the whole file, by which a restore names
	// its cluster token.
	Digest string
	// Hashed says the file ends with the SHA-256 of its database, as a
	// snapshot taken through etcd's API (etcdctl snapshot save) does,
	// and that it matched; a data directory's db copied by hand has
	// none.
	Hashed bool
	// Revision is the newest revision of the key space.
	Revision int64
	// Keys are the live keys, Counts them by resource (the path below
	// /registry/, with its API group: "deployments",
	// "apiservices.apiregistration.k8s.io"; "(not Kubernetes)" for keys
	// elsewhere).
	Keys   int
	Counts map[string]int
	// Live are the live keys, sorted; Leased those of them bound to an
	// etcd lease (events, the API servers' endpoint leases), which
	// expire by themselves after a restore.
	Live   []string
	Leased map[string]bool
	// Members are the members the snapshot's cluster had.
	Members []Member
	// ClientCAs are the certificates of the API server's client CA file
	// as it published them (kube-system/extension-apiserver-authentication),
	// nil when the snapshot holds no such ConfigMap.
	ClientCAs []*x509.Certificate
}

// Member is one member of the snapshot's cluster, as etcd stores it.
type Member struct {
	ID       uint64
	Name     string
	PeerURLs []string
}

// authenticationKey is where an API server publishes the CAs it trusts
// for client certificates (its --client-ca-file): the mark of the
// cluster's CA in its data.
const authenticationKey = "/registry/configmaps/kube-system/extension-apiserver-authentication"

// revBytesLen is the length of a revision key of etcd's key bucket: the
// main revision, '_', the sub revision; a tombstone adds a 't'.
const revBytesLen = 8 + 1 + 8

// Inspect reads the snapshot at path and refuses one that is not whole:
// a SHA-256 at its end that does not match its database, a size neither
// a database's nor a database's with its hash, or a database whose pages
// bbolt cannot read. It changes nothing.
func Inspect(path string) (*Snapshot, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a file", path)
	}
	s := &Snapshot{Path: path, Size: st.Size(), Counts: map[string]int{}}
	// etcd's own rule (its snapshot restore): a file whose size is a
	// multiple of 512 plus 32 ends with the SHA-256 of what precedes.
	db := s.Size
	switch {
	case s.Size%512 == sha256.Size:
		db -= sha256.Size
	case s.Size%512 != 0 || s.Size == 0:
		return nil, fmt.Errorf("%s is no etcd snapshot: %d bytes is neither a database's size (pages of 4 KiB) nor one with its SHA-256 (32 bytes more); a snapshot cut short is corrupt", path, s.Size)
	}
	whole, contents := sha256.New(), sha256.New()
	if _, err := io.Copy(io.MultiWriter(whole, contents), io.NewSectionReader(f, 0, db)); err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	if db < s.Size {
		want := make([]byte, sha256.Size)
		if _, err := io.ReadFull(io.NewSectionReader(f, db, sha256.Size), want); err != nil {
			return nil, fmt.Errorf("reading %s: %w", path, err)
		}
		whole.Write(want)
		if !bytes.Equal(contents.Sum(nil), want) {
			return nil, fmt.Errorf("%s is corrupt: the SHA-256 at its end does not match its contents (etcd's snapshot restore would refuse it too); take another snapshot, or use an older one", path)
		}
		s.Hashed = true
	}
	s.Digest = hex.EncodeToString(whole.Sum(nil))
	// Read-only: bbolt opens the file for reading and takes a shared
	// lock; the hash after the last page is past what it reads.
	bdb, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		return nil, fmt.Errorf("%s is no etcd snapshot (bbolt cannot open it: %v)", path, err)
	}
	defer bdb.Close()
	err = bdb.View(func(tx *bolt.Tx) (err error) {
		// bbolt panics on some broken pages rather than failing.
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("%s is corrupt: bbolt cannot read it: %v", path, r)
			}
		}()
		// Every page reachable from a bucket is read once, in this
		// goroutine, where a broken one panics into the recover above
		// (bbolt's own tx.Check reads in goroutines of its own, where a
		// broken page's panic would end kcompile).
		if err := tx.ForEach(func(_ []byte, b *bolt.Bucket) error {
			return b.ForEach(func(_, _ []byte) error { return nil })
		}); err != nil {
			return fmt.Errorf("%s is corrupt: %v", path, err)
		}
		keys := tx.Bucket([]byte("key"))
		members := tx.Bucket([]byte("members"))
		if keys == nil || members == nil {
			return fmt.Errorf("%s is a bbolt database but no etcd snapshot (it has no key or members bucket)", path)
		}
		if err := members.ForEach(func(_, v []byte) error {
			var m struct {
				ID       uint64   `json:"id"`
				Name     string   `json:"name"`
				PeerURLs []string `json:"peerURLs"`
			}
			if err := json.Unmarshal(v, &m); err != nil {
				return fmt.Errorf("%s: a member of its members bucket does not read: %v", path, err)
			}
			s.Members = append(s.Members, Member(m))
			return nil
		}); err != nil {
			return err
		}
		sort.Slice(s.Members, func(i, j int) bool { return s.Members[i].Name < s.Members[j].Name })
		return s.readKeys(keys)
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// readKeys replays the key bucket, which holds every revision of every
// key in revision order: the last write of a key is its value, a
// tombstone its deletion.
func (s *Snapshot) readKeys(b *bolt.Bucket) error {
	live := map[string]bool{}
	s.Leased = map[string]bool{}
	var auth []byte
	err := b.ForEach(func(k, v []byte) error {
		if len(k) < revBytesLen || k[8] != '_' {
			return fmt.Errorf("%s is corrupt: a key of revision %x is not one", s.Path, k)
		}
		if rev := int64(binary.BigEndian.Uint64(k[:8])); rev > s.Revision {
			s.Revision = rev
		}
		key, value, lease, err := keyValue(v)
		if err != nil {
			return fmt.Errorf("%s is corrupt: the value at revision %x: %v", s.Path, k, err)
		}
		tombstone := len(k) == revBytesLen+1 && k[revBytesLen] == 't'
		live[key] = !tombstone
		if lease != 0 && !tombstone {
			s.Leased[key] = true
		} else {
			delete(s.Leased, key)
		}
		if key == authenticationKey {
			auth = nil
			if !tombstone {
				auth = bytes.Clone(value)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	for k, ok := range live {
		if ok {
			s.Live = append(s.Live, k)
			s.Counts[ResourceOf(k)]++
		}
	}
	sort.Strings(s.Live)
	s.Keys = len(s.Live)
	if auth != nil {
		if s.ClientCAs, err = clientCAs(auth); err != nil {
			return fmt.Errorf("%s: kube-system/extension-apiserver-authentication: %v", s.Path, err)
		}
	}
	return nil
}

// keyValue reads the key, value and lease of etcd's mvccpb.KeyValue
// (fields 1, 5 and 6). protowire reads the two fields rather than etcd's API module,
// which would bring gRPC and gogoproto into kcompile's build for one
// message of six scalar fields.
func keyValue(b []byte) (key string, value []byte, lease int64, err error) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return "", nil, 0, protowire.ParseError(n)
		}
		b = b[n:]
		if typ == protowire.VarintType && num == 6 {
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return "", nil, 0, protowire.ParseError(n)
			}
			lease = int64(v)
			b = b[n:]
			continue
		}
		if typ == protowire.BytesType && (num == 1 || num == 5) {
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return "", nil, 0, protowire.ParseError(n)
			}
			if num == 1 {
				key = string(v)
			} else {
				value = v
			}
			b = b[n:]
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return "", nil, 0, protowire.ParseError(n)
		}
		b = b[n:]
	}
	if key == "" {
		return "", nil, 0, errors.New("no key")
	}
	return key, value, lease, nil
}

// NotKubernetes counts the keys outside /registry/.
const NotKubernetes = "(not Kubernetes)"

// ResourceOf names the resource a key of the API server's stores: its
// first segment below /registry/, with the second when the first is an
// API group.
func ResourceOf(key string) string {
	rest, ok := strings.CutPrefix(key, "/registry/")
	if !ok {
		return NotKubernetes
	}
	seg := strings.SplitN(rest, "/", 3)
	if strings.Contains(seg[0], ".") && len(seg) > 1 {
		return seg[1] + "." + seg[0]
	}
	// The API server keeps Nodes under their first name.
	if seg[0] == "minions" {
		return "nodes"
	}
	return seg[0]
}

// clientCAs decodes the stored ConfigMap (the API server's protobuf, or
// JSON) and parses its client-ca-file.
func clientCAs(stored []byte) ([]*x509.Certificate, error) {
	obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(stored, nil, nil)
	if err != nil {
		return nil, err
	}
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok {
		return nil, fmt.Errorf("holds a %T, not a ConfigMap", obj)
	}
	var out []*x509.Certificate
	rest := []byte(cm.Data["client-ca-file"])
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, errors.New("its client-ca-file holds no certificate")
	}
	return out, nil
}

// Resources are the counted resources, sorted.
func (s *Snapshot) Resources() []string {
	out := make([]string, 0, len(s.Counts))
	for r := range s.Counts {
		out = append(out, r)
	}
	sort.Strings(out)
	return out
}
