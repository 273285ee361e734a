package pki

import (
	"crypto/hkdf"
	"crypto/sha256"
)

// manifestKeyInfo separates the manifest key from every key deriveKey
// makes, whose HKDF info starts "kcompile key v1|".
const manifestKeyInfo = "kcompile manifest mac v1"

// ManifestKey is the HMAC key that binds the manifest of a written tree to
// this bundle (writer.Options.Key): only a holder of the bundle can
// write a manifest a later build accepts. It is expanded with HKDF-SHA256
// from the seed alone, so `pki renew`, which keeps the seed, keeps it. It
// is nil for a nil bundle or one without a seed.
func (b *Bundle) ManifestKey() []byte {
	if b == nil || len(b.Seed) == 0 {
		return nil
	}
	key, err := hkdf.Key(sha256.New, b.Seed, nil, manifestKeyInfo, 32)
	if err != nil {
		// Only a length over 255 hashes fails; 32 bytes never does.
		panic("kcompile bug: " + err.Error())
	}
	return key
}
