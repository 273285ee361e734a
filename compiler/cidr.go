package compiler

import (
	"fmt"
	"math/big"
	"net/netip"

	"github.com/kcompile/kcompile/compiler/diag"
)

// prefix parses the CIDR written at path, reporting a malformed one once.
func (m *model) prefix(path, s string) (netip.Prefix, bool) {
	if m.prefixes == nil {
		m.prefixes = map[string]netip.Prefix{}
	}
	if p, ok := m.prefixes[path]; ok {
		return p, p.IsValid()
	}
	p, err := netip.ParsePrefix(s)
	switch {
	case err != nil:
		m.report(CodeCIDRParse, path, fmt.Sprintf("%s is not a CIDR", diag.Quote(s)), `write an address range in prefix notation, such as "10.0.0.0/16"`)
		p = netip.Prefix{}
	case p.Masked() != p:
		m.report(CodeCIDRParse, path, fmt.Sprintf("CIDR %s has host bits set", s), fmt.Sprintf("did you mean %s?", p.Masked()))
		p = netip.Prefix{}
	}
	m.prefixes[path] = p
	return p, p.IsValid()
}

// lastAddr is the highest address of a prefix.
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Addr().AsSlice()
	bits := p.Bits()
	for i := range b {
		for j := 7; j >= 0; j-- {
			if i*8+(7-j) >= bits {
				b[i] |= 1 << j
			}
		}
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

// nthAddr is the address n places after the start of p, or false when p
// is too small.
func nthAddr(p netip.Prefix, n int64) (netip.Addr, bool) {
	base := new(big.Int).SetBytes(p.Addr().AsSlice())
	size := new(big.Int).Lsh(big.NewInt(1), uint(p.Addr().BitLen()-p.Bits()))
	if big.NewInt(n).Cmp(size) >= 0 {
		return netip.Addr{}, false
	}
	base.Add(base, big.NewInt(n))
	buf := make([]byte, len(p.Addr().AsSlice()))
	base.FillBytes(buf)
	a, _ := netip.AddrFromSlice(buf)
	return a, true
}

// overlaps reports whether two prefixes share any address.
func overlaps(a, b netip.Prefix) bool { return a.Overlaps(b) }

// subnets is how many prefixes of length bits fit into p, capped so huge
// IPv6 ranges do not overflow.
func subnets(p netip.Prefix, bits int) int64 {
	shift := bits - p.Bits()
	if shift < 0 {
		return 0
	}
	if shift > 62 {
		return 1 << 62
	}
	return 1 << shift
}
