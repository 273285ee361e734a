package pki

import (
	"bytes"
	"crypto"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"
)

// Rotation is a staged replacement of some of the bundle's CAs and of its
// service-account key, recorded in the bundle so that every state
// between the old cluster and the new one is a bundle that compiles:
//
//   - stage 1: every trust store trusts the old and the new; leaves are
//     still signed by the old CAs, tokens by the old key;
//   - stage 2: every leaf re-keyed and signed by the new CAs, tokens by
//     the new key; the old are still trusted, the old public key still
//     verifies the tokens it signed;
//   - then the rotation ends (Advance from stage 2): the old CAs and key
//     are in no trust store. The bundle is then one without a rotation.
//
// During a rotation Bundle.CAs and Bundle.ServiceAccountKey are the new
// ones.
type Rotation struct {
	Stage int
	// Previous are the old CAs of the rotating authorities;
	// PreviousServiceAccountKey is the old signing key, nil when it does
	// not rotate.
	Previous                  map[Authority]CA
	PreviousServiceAccountKey crypto.Signer
	// NextSeed is the seed leaves are derived from from stage 2 on, drawn
	// when the rotation starts: a rotation made because the bundle leaked
	// must not leave the leaves' keys derivable from the old seed.
	NextSeed []byte
}

// ServiceAccount names the service-account signing key among the
// authorities a rotation replaces.
const ServiceAccount = "service-account"

// RotateOptions say what a rotation replaces and how the new keys are
// made.
type RotateOptions struct {
	Authorities    []Authority
	ServiceAccount bool
	// CAValidity is how long the new CAs are valid from now; 0 keeps
	// each old CA's span.
	CAValidity time.Duration
	// ClockSkew backdates the new CAs' notBefore, as New does.
	ClockSkew time.Duration
}

// Stage is the rotation's stage, 0 when none is under way.
func (b *Bundle) Stage() int {
	if b.Rotation == nil {
		return 0
	}
	return b.Rotation.Stage
}

// Signer is the CA that signs a's leaves: the old one in stage 1.
func (b *Bundle) Signer(a Authority) CA {
	if r := b.Rotation; r != nil && r.Stage == 1 {
		if old, ok := r.Previous[a]; ok {
			return old
		}
	}
	return b.CAs[a]
}

// Trusted are the CA certificates a's trust stores hold, the signer
// first (what reads one certificate of a file reads the signer's).
func (b *Bundle) Trusted(a Authority) []*x509.Certificate {
	out := []*x509.Certificate{b.Signer(a).Cert}
	if r := b.Rotation; r != nil {
		if old, ok := r.Previous[a]; ok {
			for _, c := range []*x509.Certificate{b.CAs[a].Cert, old.Cert} {
				if !c.Equal(out[0]) {
					out = append(out, c)
				}
			}
		}
	}
	return out
}

// ServiceAccountSigner signs service-account tokens: the old key in
// stage 1.
func (b *Bundle) ServiceAccountSigner() crypto.Signer {
	if r := b.Rotation; r != nil && r.Stage == 1 && r.PreviousServiceAccountKey != nil {
		return r.PreviousServiceAccountKey
	}
	return b.ServiceAccountKey
}

// ServiceAccountPublicKeys verify tokens: the signer's first, then the
// other key of a rotation.
func (b *Bundle) ServiceAccountPublicKeys() []crypto.PublicKey {
	signer := b.ServiceAccountSigner()
	out := []crypto.PublicKey{signer.Public()}
	if r := b.Rotation; r != nil && r.PreviousServiceAccountKey != nil {
		for _, k := range []crypto.Signer{b.ServiceAccountKey, r.PreviousServiceAccountKey} {
			if k != signer {
				out = append(out, k.Public())
			}
		}
	}
	return out
}

// Rotating names what the rotation replaces, in catalogue order.
func (b *Bundle) Rotating() []string {
	if b.Rotation == nil {
		return nil
	}
	var out []string
	for _, a := range Authorities() {
		if _, ok := b.Rotation.Previous[a]; ok {
			out = append(out, string(a))
		}
	}
	if b.Rotation.PreviousServiceAccountKey != nil {
		out = append(out, ServiceAccount)
	}
	return out
}

// Rotate starts a rotation: stage 1, with new CAs (and key) for what
// opts names, each of the old one's algorithm, made from a seed drawn
// from random, which the leaves use from stage 2 on. now is when the new
// CAs start, less opts.ClockSkew.
func (b *Bundle) Rotate(random io.Reader, now time.Time, opts RotateOptions) (*Bundle, error) {
	if b.Rotation != nil {
		return nil, fmt.Errorf("a rotation of %s is at stage %d: finish it first (kcompile secrets rotate --next)", strings.Join(b.Rotating(), ", "), b.Rotation.Stage)
	}
	if len(opts.Authorities) == 0 && !opts.ServiceAccount {
		return nil, errors.New("nothing to rotate: name a CA or the service-account key")
	}
	if opts.CAValidity < 0 || opts.CAValidity > MaxCAValidity {
		return nil, fmt.Errorf("a CA validity of %s is not between 1 second and 200 years", opts.CAValidity)
	}
	seed := make([]byte, 32)
	if _, err := io.ReadFull(random, seed); err != nil {
		return nil, fmt.Errorf("reading the random seed: %w", err)
	}
	now = now.UTC().Truncate(time.Second)
	c := *b
	c.CAs = maps.Clone(b.CAs)
	r := &Rotation{Stage: 1, Previous: map[Authority]CA{}, NextSeed: seed}
	for _, a := range opts.Authorities {
		old, ok := b.CAs[a]
		if !ok {
			return nil, fmt.Errorf("unknown authority %s (a bundle has ca, etcd-ca and front-proxy-ca)", a)
		}
		if _, twice := r.Previous[a]; twice {
			continue
		}
		validity := opts.CAValidity
		if validity == 0 {
			validity = old.Cert.NotAfter.Sub(old.Cert.NotBefore)
		}
		ca, err := newCA(seed, a, Algorithm(keyAlgorithm(old.Cert.PublicKey)), now, validity, opts.ClockSkew)
		if err != nil {
			return nil, err
		}
		r.Previous[a] = old
		c.CAs[a] = ca
	}
	if opts.ServiceAccount {
		key, err := deriveKey(seed, Algorithm(keyAlgorithm(b.ServiceAccountKey.Public())), "service-account")
		if err != nil {
			return nil, err
		}
		r.PreviousServiceAccountKey = b.ServiceAccountKey
		c.ServiceAccountKey = key
	}
	c.Rotation = r
	return &c, nil
}

// Advance moves a rotation to its next stage: from 1 to 2 the leaves are
// re-keyed from the rotation's seed and issued at epoch now by the new
// CAs; from 2 the rotation ends and the old CAs and key are dropped.
func (b *Bundle) Advance(now time.Time) (*Bundle, error) {
	r := b.Rotation
	if r == nil {
		return nil, errors.New("no rotation is under way (kcompile secrets rotate --ca starts one)")
	}
	c := *b
	switch r.Stage {
	case 1:
		now = now.UTC().Truncate(time.Second)
		for a := range r.Previous {
			if now.Before(b.CAs[a].Cert.NotBefore) {
				return nil, fmt.Errorf("the new %s starts at %s, after %s: leaves cannot be issued by it yet", a, b.CAs[a].Cert.NotBefore.UTC().Format(time.RFC3339), now.Format(time.RFC3339))
			}
		}
		if now.Before(b.Epoch) {
			return nil, fmt.Errorf("%s is before the bundle's epoch %s", now.Format(time.RFC3339), b.Epoch.Format(time.RFC3339))
		}
		next := *r
		next.Stage, next.NextSeed = 2, nil
		c.Seed, c.Epoch, c.Rotation = r.NextSeed, now, &next
	case 2:
		c.Rotation = nil
	default:
		return nil, fmt.Errorf("a rotation at stage %d cannot go on", r.Stage)
	}
	return &c, nil
}

// rotationFile is a rotation on disk.
type rotationFile struct {
	Stage                     int                  `json:"stage"`
	Previous                  map[Authority]caFile `json:"previous,omitempty"`
	PreviousServiceAccountKey string               `json:"previousServiceAccountKey,omitempty"`
	NextSeed                  []byte               `json:"nextSeed,omitempty"`
}

func (r *Rotation) file() (*rotationFile, error) {
	f := &rotationFile{Stage: r.Stage, NextSeed: r.NextSeed, Previous: map[Authority]caFile{}}
	for a, ca := range r.Previous {
		key, err := encodeKey(ca.Key)
		if err != nil {
			return nil, err
		}
		f.Previous[a] = caFile{Cert: string(encodeCert(ca.Cert.Raw)), Key: string(key)}
	}
	if r.PreviousServiceAccountKey != nil {
		key, err := encodeKey(r.PreviousServiceAccountKey)
		if err != nil {
			return nil, err
		}
		f.PreviousServiceAccountKey = string(key)
	}
	return f, nil
}

// parseRotation checks a rotation read from a bundle against the
// bundle's current CAs and key.
func parseRotation(f *rotationFile, b *Bundle) (*Rotation, error) {
	r := &Rotation{Stage: f.Stage, Previous: map[Authority]CA{}, NextSeed: f.NextSeed}
	switch {
	case f.Stage != 1 && f.Stage != 2:
		return nil, fmt.Errorf("secrets bundle: rotation stage %d is not 1 or 2", f.Stage)
	case f.Stage == 1 && len(f.NextSeed) < 32:
		return nil, errors.New("secrets bundle: a rotation at stage 1 needs its nextSeed of at least 32 bytes")
	case f.Stage == 2 && len(f.NextSeed) > 0:
		return nil, errors.New("secrets bundle: a rotation at stage 2 has no nextSeed: its leaves use the bundle's seed")
	case len(f.Previous) == 0 && f.PreviousServiceAccountKey == "":
		return nil, errors.New("secrets bundle: a rotation replaces nothing")
	}
	for _, a := range slices.Sorted(maps.Keys(f.Previous)) {
		if !slices.Contains(Authorities(), a) {
			return nil, fmt.Errorf("secrets bundle: rotation: unknown authority %s", fieldName(string(a)))
		}
		cf := f.Previous[a]
		ca, err := parseCA(a, []byte(cf.Cert), []byte(cf.Key))
		if err != nil {
			return nil, fmt.Errorf("secrets bundle: rotation: previous %w", err)
		}
		if publicKeysEqual(ca.Cert.PublicKey, b.CAs[a].Cert.PublicKey) {
			return nil, fmt.Errorf("secrets bundle: rotation: the previous %s is the current one", a)
		}
		r.Previous[a] = ca
	}
	if f.PreviousServiceAccountKey != "" {
		key, err := parseKey([]byte(f.PreviousServiceAccountKey))
		if err != nil {
			return nil, fmt.Errorf("secrets bundle: rotation: previousServiceAccountKey: %w", err)
		}
		if publicKeysEqual(key.Public(), b.ServiceAccountKey.Public()) {
			return nil, errors.New("secrets bundle: rotation: the previous service-account key is the current one")
		}
		r.PreviousServiceAccountKey = key
	}
	return r, nil
}

// trustPEM is a's trust store as a PEM file, the signer first.
func trustPEM(b *Bundle, a Authority) []byte {
	var out bytes.Buffer
	for _, c := range b.Trusted(a) {
		out.Write(encodeCert(c.Raw))
	}
	return out.Bytes()
}
