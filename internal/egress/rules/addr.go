package rules

import (
	"net/netip"
	"strings"
)

// NormalizeHost returns the canonical form of a host as a sandbox may spell
// it in a URL, a CONNECT request, a Host header or SNI.
//
// For a domain name, host is its lowercase ASCII form: one trailing dot
// stripped, Unicode labels converted to punycode (IDNA, UTS #46 as
// browsers do), each label checked; isIP is false.
//
// For an address, ip is the address, host is ip.String() (IPv6 without
// brackets) and isIP is true. Every IPv4 spelling that inet_aton, curl and
// browsers accept is recognised, because each is a way to smuggle an
// internal address past a naive check: decimal 2130706433, hex 0x7f000001,
// octal 0177.0.0.1 and 017700000001, short forms 127.1 and 127.0.1, mixed
// 0x7f.1, leading zeros. IPv6 may be bracketed or not; IPv4-mapped
// addresses (::ffff:127.0.0.1) are returned as IPv4. Other forms that
// embed an IPv4 address (::127.0.0.1, 64:ff9b::7f00:1, 6to4, Teredo) are
// returned as IPv6: Classify looks inside them.
//
// A name whose last label is a number ("1.2.3.4.5", "example.123") is an
// error, not a name, as is an IPv6 zone ("fe80::1%eth0"), which would let
// the sandbox choose the gateway's interface.
func NormalizeHost(s string) (host string, ip netip.Addr, isIP bool, err error) {
	switch {
	case s == "":
		return "", netip.Addr{}, false, invalidf("empty host")
	case len(s) > maxInput:
		return "", netip.Addr{}, false, invalidf("invalid host %.20q...: %d bytes long; a host name is at most %d", s, len(s), maxName)
	case s[0] == '[':
		if !strings.HasSuffix(s, "]") {
			return "", netip.Addr{}, false, invalidf("invalid host %q: missing ']' after IPv6 address", s)
		}
		ip, err = parseIPv6(s, s[1:len(s)-1])
	case strings.IndexByte(s, ':') >= 0:
		ip, err = parseIPv6(s, s)
	default:
		var name string
		if name, err = toASCII(s); err != nil {
			return "", netip.Addr{}, false, invalidf("invalid host %q: %v", s, err)
		}
		if !endsInNumber(name) {
			if err := checkName(name); err != nil {
				return "", netip.Addr{}, false, invalidf("invalid host %q: %v", s, err)
			}
			return name, netip.Addr{}, false, nil
		}
		var ok bool
		if ip, ok = parseIPv4(name); !ok {
			return "", netip.Addr{}, false, invalidf("invalid host %q: ends in a number but is not an IPv4 address", s)
		}
	}
	if err != nil {
		return "", netip.Addr{}, false, err
	}
	return ip.String(), ip, true, nil
}

// parseIPv6 parses addr, the IPv6 part of host, refusing zones and
// unmapping IPv4-mapped addresses.
func parseIPv6(host, addr string) (netip.Addr, error) {
	if strings.IndexByte(addr, '%') >= 0 {
		return netip.Addr{}, invalidf("invalid host %q: IPv6 zone identifiers are not allowed", host)
	}
	ip, err := netip.ParseAddr(addr)
	if err != nil {
		return netip.Addr{}, invalidf("invalid host %q: not a valid IPv6 address", host)
	}
	if !ip.Is6() {
		return netip.Addr{}, invalidf("invalid host %q: brackets are only for IPv6 addresses; write %s", host, ip)
	}
	return ip.Unmap(), nil
}

// parseIPv4 parses the IPv4 forms inet_aton and the WHATWG URL standard
// accept: one to four dot-separated numbers, each decimal, octal (leading
// 0) or hex (leading 0x); all but the last are one byte each and the last
// fills the remaining bytes. s has no trailing dot.
func parseIPv4(s string) (netip.Addr, bool) {
	var nums [4]uint64
	n := 0
	for part := range strings.SplitSeq(s, ".") {
		if n == len(nums) {
			return netip.Addr{}, false
		}
		v, ok := parseIPv4Number(part)
		if !ok {
			return netip.Addr{}, false
		}
		nums[n] = v
		n++
	}
	for _, v := range nums[:n-1] {
		if v > 0xff {
			return netip.Addr{}, false
		}
	}
	last := nums[n-1]
	if last >= 1<<(8*(5-n)) {
		return netip.Addr{}, false
	}
	v := uint32(last)
	for i, b := range nums[:n-1] {
		v |= uint32(b) << (8 * (3 - i))
	}
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), true
}

// parseIPv4Number parses one part of an IPv4 address: decimal, octal with a
// leading 0, or hex with a leading 0x ("0x" alone is 0), at most 2³²-1.
func parseIPv4Number(s string) (uint64, bool) {
	if s == "" {
		return 0, false
	}
	base := uint64(10)
	switch {
	case len(s) >= 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X'):
		s, base = s[2:], 16
	case len(s) >= 2 && s[0] == '0':
		s, base = s[1:], 8
	}
	var v uint64
	for i := 0; i < len(s); i++ {
		var d uint64
		switch c := s[i]; {
		case '0' <= c && c <= '9':
			d = uint64(c - '0')
		case 'a' <= c && c <= 'f':
			d = uint64(c-'a') + 10
		case 'A' <= c && c <= 'F':
			d = uint64(c-'A') + 10
		default:
			return 0, false
		}
		if d >= base {
			return 0, false
		}
		if v = v*base + d; v > 0xffffffff {
			return 0, false
		}
	}
	return v, true
}
