package rules

import "net/netip"

// Address classes returned by Classify. Every class but ClassPublic is
// private: the gateway does not connect to it unless an IP or CIDR rule
// allows it.
const (
	ClassPublic      = "public"      // globally routable unicast
	ClassLoopback    = "loopback"    // 127.0.0.0/8, ::1
	ClassPrivate     = "private"     // RFC 1918, fc00::/7 (ULA)
	ClassLinkLocal   = "link-local"  // 169.254.0.0/16, fe80::/10
	ClassMetadata    = "metadata"    // cloud instance metadata endpoints
	ClassMulticast   = "multicast"   // 224.0.0.0/4, ff00::/8
	ClassUnspecified = "unspecified" // 0.0.0.0/8, ::, and the invalid zero netip.Addr
	ClassCGNAT       = "cgnat"       // 100.64.0.0/10, carrier-grade NAT
	ClassReserved    = "reserved"    // documentation, benchmarking, future use, broadcast, non-unicast IPv6
)

type class struct {
	prefix netip.Prefix
	class  string
}

// v4Classes is searched in order; the first match wins, so single
// addresses come before the ranges that contain them.
var v4Classes = []class{
	{netip.MustParsePrefix("169.254.169.254/32"), ClassMetadata}, // AWS, GCP, Azure, OpenStack, DigitalOcean, ...
	{netip.MustParsePrefix("169.254.170.2/32"), ClassMetadata},   // AWS ECS task credentials
	{netip.MustParsePrefix("100.100.100.200/32"), ClassMetadata}, // Alibaba Cloud
	{netip.MustParsePrefix("192.0.0.192/32"), ClassMetadata},     // Oracle Cloud
	{netip.MustParsePrefix("168.63.129.16/32"), ClassMetadata},   // Azure WireServer (publicly routable, host-local)
	{netip.MustParsePrefix("0.0.0.0/8"), ClassUnspecified},
	{netip.MustParsePrefix("127.0.0.0/8"), ClassLoopback},
	{netip.MustParsePrefix("10.0.0.0/8"), ClassPrivate},
	{netip.MustParsePrefix("172.16.0.0/12"), ClassPrivate},
	{netip.MustParsePrefix("192.168.0.0/16"), ClassPrivate},
	{netip.MustParsePrefix("169.254.0.0/16"), ClassLinkLocal},
	{netip.MustParsePrefix("100.64.0.0/10"), ClassCGNAT},
	{netip.MustParsePrefix("224.0.0.0/4"), ClassMulticast},
	{netip.MustParsePrefix("240.0.0.0/4"), ClassReserved},     // future use and 255.255.255.255
	{netip.MustParsePrefix("192.0.0.0/24"), ClassReserved},    // IETF protocol assignments
	{netip.MustParsePrefix("192.0.2.0/24"), ClassReserved},    // TEST-NET-1
	{netip.MustParsePrefix("192.88.99.0/24"), ClassReserved},  // 6to4 relay anycast (deprecated)
	{netip.MustParsePrefix("198.18.0.0/15"), ClassReserved},   // benchmarking
	{netip.MustParsePrefix("198.51.100.0/24"), ClassReserved}, // TEST-NET-2
	{netip.MustParsePrefix("203.0.113.0/24"), ClassReserved},  // TEST-NET-3
}

// v6Classes is searched in order, before looking for embedded IPv4
// addresses.
var v6Classes = []class{
	{netip.MustParsePrefix("::/128"), ClassUnspecified},
	{netip.MustParsePrefix("::1/128"), ClassLoopback},
	{netip.MustParsePrefix("fd00:ec2::254/128"), ClassMetadata}, // AWS IMDS over IPv6
	{netip.MustParsePrefix("fc00::/7"), ClassPrivate},
	{netip.MustParsePrefix("fe80::/10"), ClassLinkLocal},
	{netip.MustParsePrefix("ff00::/8"), ClassMulticast},
	{netip.MustParsePrefix("100::/64"), ClassReserved},      // discard
	{netip.MustParsePrefix("2001:db8::/32"), ClassReserved}, // documentation
	{netip.MustParsePrefix("3fff::/20"), ClassReserved},     // documentation (RFC 9637)
	{netip.MustParsePrefix("2001:2::/48"), ClassReserved},   // benchmarking
	{netip.MustParsePrefix("2001:10::/28"), ClassReserved},  // ORCHID
	{netip.MustParsePrefix("2001:20::/28"), ClassReserved},  // ORCHIDv2
}

// Ranges of IPv6 that carry an IPv4 address.
var (
	v4Compatible = netip.MustParsePrefix("::/96")
	nat64        = netip.MustParsePrefix("64:ff9b::/96")
	nat64Local   = netip.MustParsePrefix("64:ff9b:1::/48")
	sixToFour    = netip.MustParsePrefix("2002::/16")
	teredo       = netip.MustParsePrefix("2001::/32")
	globalV6     = netip.MustParsePrefix("2000::/3")
)

// Classify says what kind of address ip is, and whether it is private,
// which is true for every class but ClassPublic.
//
// IPv6 addresses that carry an IPv4 address are classified by it:
// IPv4-mapped (::ffff:0:0/96), IPv4-compatible (::/96), NAT64
// (64:ff9b::/96, and 64:ff9b:1::/48 read in both the /48 and /96 layouts),
// 6to4 (2002::/16) and Teredo (2001::/32, server and client address). If
// any embedded address is private the class is its class, otherwise the
// address is public. IPv6 outside 2000::/3 that is not classified more
// precisely is reserved. A zone is ignored; the zero netip.Addr is
// unspecified.
func Classify(ip netip.Addr) (class string, private bool) {
	if !ip.IsValid() {
		return ClassUnspecified, true
	}
	ip = ip.WithZone("").Unmap()
	if ip.Is4() {
		c := classify4(ip)
		return c, c != ClassPublic
	}
	for _, c := range v6Classes {
		if c.prefix.Contains(ip) {
			return c.class, true
		}
	}
	if v4s := embeddedV4(ip); len(v4s) > 0 {
		for _, v4 := range v4s {
			if c := classify4(v4); c != ClassPublic {
				return c, true
			}
		}
		return ClassPublic, false
	}
	if !globalV6.Contains(ip) {
		return ClassReserved, true
	}
	return ClassPublic, false
}

func classify4(ip netip.Addr) string {
	for _, c := range v4Classes {
		if c.prefix.Contains(ip) {
			return c.class
		}
	}
	return ClassPublic
}

// embeddedV4 returns the IPv4 addresses that the IPv6 address ip carries
// (see Classify), or nil. ip is neither zoned nor IPv4-mapped.
func embeddedV4(ip netip.Addr) []netip.Addr {
	b := ip.As16()
	from := func(i int) netip.Addr { return netip.AddrFrom4([4]byte(b[i : i+4])) }
	switch {
	case v4Compatible.Contains(ip), nat64.Contains(ip):
		return []netip.Addr{from(12)}
	case nat64Local.Contains(ip):
		// The prefix may be the /48 itself or a longer one inside it, so
		// read both layouts; ignore one that is all zero when the other is
		// not, or every address would classify as 0.0.0.0.
		v96, v48 := from(12), netip.AddrFrom4([4]byte{b[6], b[7], b[9], b[10]})
		switch zero := netip.IPv4Unspecified(); {
		case v96 == zero && v48 != zero:
			return []netip.Addr{v48}
		case v48 == zero:
			return []netip.Addr{v96}
		}
		return []netip.Addr{v96, v48}
	case sixToFour.Contains(ip):
		return []netip.Addr{from(2)}
	case teredo.Contains(ip):
		c := [4]byte(b[12:16])
		for i := range c {
			c[i] ^= 0xff
		}
		return []netip.Addr{from(4), netip.AddrFrom4(c)}
	}
	return nil
}
