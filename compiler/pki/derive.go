package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hkdf"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/asn1"
	"encoding/binary"
	"errors"
	"fmt"
	"math/big"
	"strconv"
	"strings"
)

// Keys are derived, not generated: Go 1.26 ignores the random source passed
// to ecdsa.GenerateKey and rsa.GenerateKey, and issuance must be a pure
// function of the spec and the bundle. Each key is expanded with HKDF-SHA256
// from the bundle's seed and a label naming the key's identity, so a key
// depends on nothing but its own identity: adding a node changes no other
// node's keys.

// Algorithm is a key algorithm as the spec names it.
type Algorithm string

const (
	ECDSAP256 Algorithm = "ECDSA-P256"
	ECDSAP384 Algorithm = "ECDSA-P384"
	RSA2048   Algorithm = "RSA-2048"
	RSA3072   Algorithm = "RSA-3072"
	RSA4096   Algorithm = "RSA-4096"
)

// ParseAlgorithm checks an algorithm name.
func ParseAlgorithm(s string) (Algorithm, error) {
	switch a := Algorithm(s); a {
	case ECDSAP256, ECDSAP384, RSA2048, RSA3072, RSA4096:
		return a, nil
	}
	return "", fmt.Errorf("unsupported key algorithm %q (use ECDSA-P256, ECDSA-P384, RSA-2048, RSA-3072 or RSA-4096)", s)
}

// deriveKey derives the private key of one identity from seed.
func deriveKey(seed []byte, alg Algorithm, label string) (crypto.Signer, error) {
	if len(seed) < 32 {
		return nil, errors.New("the secrets bundle's seed is shorter than 32 bytes")
	}
	info := "kcompile key v1|" + string(alg) + "|" + label
	switch alg {
	case ECDSAP256:
		return deriveECDSA(seed, elliptic.P256(), info)
	case ECDSAP384:
		return deriveECDSA(seed, elliptic.P384(), info)
	case RSA2048, RSA3072, RSA4096:
		bits, _ := strconv.Atoi(strings.TrimPrefix(string(alg), "RSA-"))
		return deriveRSA(seed, bits, info)
	}
	return nil, fmt.Errorf("unsupported key algorithm %q", alg)
}

// deriveECDSA maps HKDF output onto a scalar in [1, N-1]. Taking 64 extra
// bits before the reduction keeps its bias below 2^-64 (FIPS 186-5 A.2.1).
func deriveECDSA(seed []byte, curve elliptic.Curve, info string) (*ecdsa.PrivateKey, error) {
	params := curve.Params()
	size := (params.N.BitLen() + 7) / 8
	raw, err := hkdf.Key(sha256.New, seed, nil, info, size+8)
	if err != nil {
		return nil, err
	}
	nMinus1 := new(big.Int).Sub(params.N, big.NewInt(1))
	d := new(big.Int).SetBytes(raw)
	d.Mod(d, nMinus1)
	d.Add(d, big.NewInt(1))
	return ecdsa.ParseRawPrivateKey(curve, d.FillBytes(make([]byte, size)))
}

// deriveRSA builds an RSA key from two primes found by searching upwards
// from HKDF-derived starting points.
func deriveRSA(seed []byte, bits int, info string) (*rsa.PrivateKey, error) {
	const e = 65537
	for attempt := 0; attempt < 16; attempt++ {
		p, err := derivePrime(seed, bits/2, fmt.Sprintf("%s|p|%d", info, attempt), e)
		if err != nil {
			return nil, err
		}
		q, err := derivePrime(seed, bits-bits/2, fmt.Sprintf("%s|q|%d", info, attempt), e)
		if err != nil {
			return nil, err
		}
		n := new(big.Int).Mul(p, q)
		if p.Cmp(q) == 0 || n.BitLen() != bits {
			continue
		}
		one := big.NewInt(1)
		phi := new(big.Int).Mul(new(big.Int).Sub(p, one), new(big.Int).Sub(q, one))
		d := new(big.Int).ModInverse(big.NewInt(e), phi)
		if d == nil {
			continue
		}
		key := &rsa.PrivateKey{PublicKey: rsa.PublicKey{N: n, E: e}, D: d, Primes: []*big.Int{p, q}}
		key.Precompute()
		if err := key.Validate(); err != nil {
			return nil, err
		}
		return key, nil
	}
	return nil, errors.New("could not derive an RSA key")
}

// derivePrime returns the first prime p >= start with p-1 coprime to e,
// where start has its two top bits set so that p*q has the full size.
// Candidates divisible by a small prime are skipped with an incremental
// sieve before the costly probabilistic test: four Miller-Rabin rounds
// plus Baillie-PSW, beyond what FIPS 186-5 (table B.1) asks for primes of
// 1024 bits and more.
func derivePrime(seed []byte, bits int, info string, e int64) (*big.Int, error) {
	raw, err := hkdf.Key(sha256.New, seed, nil, info, (bits+7)/8)
	if err != nil {
		return nil, err
	}
	start := new(big.Int).SetBytes(raw)
	start.Rsh(start, uint(len(raw)*8-bits))
	start.SetBit(start, bits-1, 1)
	start.SetBit(start, bits-2, 1)
	start.SetBit(start, 0, 1)
	small := smallPrimes()
	residues := make([]uint64, len(small))
	mod := new(big.Int)
	for i, q := range small {
		residues[i] = mod.Mod(start, new(big.Int).SetUint64(q)).Uint64()
	}
	one, bigE := big.NewInt(1), big.NewInt(e)
	p := new(big.Int)
next:
	for delta := uint64(0); delta < 1<<24; delta += 2 {
		for i, q := range small {
			if (residues[i]+delta)%q == 0 {
				continue next
			}
		}
		p.Add(start, new(big.Int).SetUint64(delta))
		if p.BitLen() != bits {
			break
		}
		if new(big.Int).Mod(new(big.Int).Sub(p, one), bigE).Sign() != 0 && p.ProbablyPrime(4) {
			return p, nil
		}
	}
	return nil, errors.New("prime search ran out of range")
}

// smallPrimes are the odd primes below 2^13, for sieving.
func smallPrimes() []uint64 {
	const limit = 1 << 13
	composite := make([]bool, limit)
	var out []uint64
	for i := 3; i < limit; i += 2 {
		if composite[i] {
			continue
		}
		out = append(out, uint64(i))
		for j := i * i; j < limit; j += 2 * i {
			composite[j] = true
		}
	}
	return out
}

// deriveSerial gives a certificate a serial number that is a hash of
// everything the certificate says: issuer, subject, names, validity,
// usages and public key. RFC 5280 (4.1.2.2) wants serials unique per
// issuer; two certificates of one issuer that differ in any field get
// different serials (up to a 127-bit collision), and the same certificate
// issued twice gets the same one, so issuance stays deterministic. issuer
// is nil for a self-signed certificate.
func deriveSerial(tmpl *x509.Certificate, pub crypto.PublicKey, issuer *x509.Certificate) (*big.Int, error) {
	spki, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, err
	}
	subject, err := asn1.Marshal(tmpl.Subject.ToRDNSequence())
	if err != nil {
		return nil, err
	}
	issuerName, issuerKey := subject, spki
	if issuer != nil {
		issuerName, issuerKey = issuer.RawSubject, issuer.RawSubjectPublicKeyInfo
	}
	h := sha256.New()
	// Every field is length-prefixed, so that no two certificates hash
	// the same bytes by moving a boundary.
	field := func(b []byte) {
		h.Write(binary.AppendUvarint(nil, uint64(len(b))))
		h.Write(b)
	}
	number := func(n int64) { field(binary.AppendVarint(nil, n)) }
	field([]byte("kcompile serial v2"))
	field(issuerName)
	field(issuerKey)
	field(subject)
	number(int64(len(tmpl.DNSNames)))
	for _, n := range tmpl.DNSNames {
		field([]byte(n))
	}
	number(int64(len(tmpl.IPAddresses)))
	for _, ip := range tmpl.IPAddresses {
		field(ip.To16())
	}
	number(tmpl.NotBefore.Unix())
	number(tmpl.NotAfter.Unix())
	number(int64(tmpl.KeyUsage))
	number(int64(len(tmpl.ExtKeyUsage)))
	for _, u := range tmpl.ExtKeyUsage {
		number(int64(u))
	}
	flags := int64(0)
	if tmpl.BasicConstraintsValid {
		flags |= 1
	}
	if tmpl.IsCA {
		flags |= 2
	}
	number(flags)
	number(int64(tmpl.SignatureAlgorithm))
	field(spki)
	sum := h.Sum(nil)
	sum[0] &= 0x7f
	n := new(big.Int).SetBytes(sum[:16])
	if n.Sign() == 0 {
		n.SetInt64(1)
	}
	return n, nil
}

// deriveBytes expands seed into n bytes for a named secret.
func deriveBytes(seed []byte, label string, n int) ([]byte, error) {
	return hkdf.Key(sha256.New, seed, nil, "kcompile secret v1|"+label, n)
}
