package rules

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// Pattern is one parsed egress rule: a host pattern and an optional port.
// The zero Pattern matches nothing. Patterns are comparable with ==; two
// rules that mean the same thing ("10.0.0.1" and "10.0.0.1/32") parse to
// equal Patterns.
type Pattern struct {
	kind   kind
	name   string       // kindName: the name; kindWildcard: the name under "*."
	prefix netip.Prefix // kindIP: the address range (/32 or /128 for one address)
	port   int          // 0 means any port
}

type kind uint8

const (
	kindNone     kind = iota
	kindName          // api.github.com
	kindWildcard      // *.example.com
	kindIP            // 10.0.0.1, [2001:db8::1], 10.0.0.0/8, [fd00::]/8
)

// ParsePattern parses a rule of the form HOST[:PORT]. HOST is one of
//
//   - a domain name: api.github.com, bücher.example (converted to
//     punycode), case-insensitive, with or without a trailing dot;
//   - a wildcard *.example.com, which matches every name below
//     example.com at any depth but not example.com itself. '*' may only be
//     the whole first label, and may not stand over a single label (*.com)
//     or a common public suffix (*.co.uk, *.github.io);
//   - an IPv4 address in dotted-decimal form: 10.0.0.1;
//   - an IPv6 address, bracketed if a port follows: [2001:db8::1]:443,
//     2001:db8::1;
//   - a CIDR with no host bits set: 10.0.0.0/8, fd00::/8, [fd00::]/8:443.
//
// IPv4-mapped IPv6 ([::ffff:10.0.0.1], ::ffff:10.0.0.0/104) means the IPv4
// address or range. Only IP and CIDR rules can let a connection reach a
// private address (see Policy.Addr).
//
// PORT is 1-65535 without leading zeros; without it the rule matches every
// port. Errors say which rule failed and why, and wrap errdefs.ErrInvalid.
func ParsePattern(s string) (Pattern, error) {
	p, err := parsePattern(s)
	if err != nil {
		return Pattern{}, invalidf("egress rule %q: %v", s, err)
	}
	return p, nil
}

func parsePattern(s string) (Pattern, error) {
	switch {
	case s == "":
		return Pattern{}, fmt.Errorf("empty rule")
	case len(s) > maxInput:
		return Pattern{}, fmt.Errorf("%d bytes long; a host name is at most %d", len(s), maxName)
	case strings.Contains(s, "://"):
		return Pattern{}, fmt.Errorf("rules name hosts, not URLs: drop the scheme and any path")
	}
	host, port, err := splitPort(s)
	if err != nil {
		return Pattern{}, err
	}
	var p Pattern
	switch {
	case strings.HasPrefix(host, "["):
		p, err = parseIPv6Pattern(host)
	case strings.ContainsAny(host, ":/"):
		p, err = parseIPPattern(host)
	case host == "*":
		err = fmt.Errorf("a bare * would match every host; use mode open with deny rules instead")
	case strings.HasPrefix(host, "*."):
		p, err = parseWildcard(host[2:])
	default:
		p, err = parseName(host)
	}
	p.port = port
	return p, err
}

// splitPort splits s into the host part and the port (0 if none). A port
// follows the closing bracket of an IPv6 host, or the only colon of any
// other; a host with several colons and no brackets is an IPv6 address.
func splitPort(s string) (host string, port int, err error) {
	i := -1
	if strings.HasPrefix(s, "[") {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return "", 0, fmt.Errorf("missing ']' after IPv6 address")
		}
		if j := strings.IndexByte(s[end:], ':'); j >= 0 {
			i = end + j
		}
	} else if strings.Count(s, ":") == 1 {
		i = strings.IndexByte(s, ':')
	}
	if i < 0 {
		return s, 0, nil
	}
	port, err = parsePort(s[i+1:])
	return s[:i], port, err
}

func parsePort(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > 65535 || s[0] < '1' || s[0] > '9' {
		return 0, fmt.Errorf("port %q must be a number from 1 to 65535", s)
	}
	return n, nil
}

// parseIPv6Pattern parses "[addr]" or "[addr]/bits".
func parseIPv6Pattern(host string) (Pattern, error) {
	end := strings.IndexByte(host, ']')
	inner, rest := host[1:end], host[end+1:]
	if rest != "" && !strings.HasPrefix(rest, "/") {
		return Pattern{}, fmt.Errorf("unexpected %q after ']'", rest)
	}
	p, err := parseIPPattern(inner + rest)
	if err == nil && strings.IndexByte(inner, ':') < 0 {
		err = fmt.Errorf("brackets are only for IPv6 addresses; write %s", p)
	}
	return p, err
}

// parseIPPattern parses an address or CIDR without brackets.
func parseIPPattern(s string) (Pattern, error) {
	if strings.IndexByte(s, '%') >= 0 {
		return Pattern{}, fmt.Errorf("IPv6 zone identifiers are not allowed")
	}
	var prefix netip.Prefix
	if i := strings.IndexByte(s, '/'); i >= 0 {
		var err error
		if prefix, err = netip.ParsePrefix(s); err != nil {
			return Pattern{}, fmt.Errorf("not a valid CIDR (address/bits); rules name hosts, not URLs or paths")
		}
		if m := prefix.Masked(); m != prefix {
			return Pattern{}, fmt.Errorf("host bits are set; write %s for the whole range or %s for one address",
				Pattern{kind: kindIP, prefix: m}, Pattern{kind: kindIP, prefix: netip.PrefixFrom(prefix.Addr(), prefix.Addr().BitLen())})
		}
		if a := prefix.Addr(); a.Is4In6() { // bits >= 96, since the prefix is masked
			prefix = netip.PrefixFrom(a.Unmap(), prefix.Bits()-96)
		}
	} else {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return Pattern{}, fmt.Errorf("not a valid IP address")
		}
		a = a.Unmap()
		prefix = netip.PrefixFrom(a, a.BitLen())
	}
	return Pattern{kind: kindIP, prefix: prefix}, nil
}

// parseName parses a domain name or an IPv4 address in dotted-decimal form.
func parseName(host string) (Pattern, error) {
	name, err := toASCII(host)
	if err != nil {
		return Pattern{}, err
	}
	if endsInNumber(name) {
		a, ok := parseIPv4(name)
		if !ok {
			return Pattern{}, fmt.Errorf("ends in a number but is not an IPv4 address")
		}
		if name != a.String() {
			return Pattern{}, fmt.Errorf("is the IPv4 address %s written unusually; write %s", a, a)
		}
		return Pattern{kind: kindIP, prefix: netip.PrefixFrom(a, 32)}, nil
	}
	if err := checkName(name); err != nil {
		return Pattern{}, err
	}
	return Pattern{kind: kindName, name: name}, nil
}

// parseWildcard parses the part of "*.example.com" after "*.".
func parseWildcard(under string) (Pattern, error) {
	if strings.IndexByte(under, '*') >= 0 {
		return Pattern{}, fmt.Errorf("'*' may only be the whole first label, as in *.example.com")
	}
	name, err := toASCII(under)
	if err != nil {
		return Pattern{}, err
	}
	if name != "" && endsInNumber(name) {
		return Pattern{}, fmt.Errorf("wildcards apply to domain names, not addresses; use a CIDR such as 10.0.0.0/8")
	}
	if err := checkName(name); err != nil {
		return Pattern{}, err
	}
	if len(name)+2 > maxName {
		return Pattern{}, fmt.Errorf("name is %d characters long; the limit is %d", len(name)+2, maxName)
	}
	if strings.IndexByte(name, '.') < 0 {
		return Pattern{}, fmt.Errorf("*.%s would match every site in the top-level domain; name the domain, as in *.example.%s", name, name)
	}
	if publicSuffixes[name] {
		return Pattern{}, fmt.Errorf("%s is a public suffix, under which anyone can register a name; name the domain, as in *.example.%s", name, name)
	}
	return Pattern{kind: kindWildcard, name: name}, nil
}

// Match reports whether the rule matches a connection to host on port.
// host must be normalised by NormalizeHost (an address may also be
// bracketed); anything else may fail to match. Domain rules match only
// names and IP rules only addresses.
func (p Pattern) Match(host string, port int) bool {
	if p.port != 0 && p.port != port {
		return false
	}
	switch p.kind {
	case kindName:
		return host == p.name
	case kindWildcard:
		n := len(host) - len(p.name)
		return n > 1 && host[n-1] == '.' && host[n:] == p.name
	case kindIP:
		if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
			host = host[1 : len(host)-1]
		}
		a, err := netip.ParseAddr(host)
		return err == nil && p.matchAddr(a, port)
	}
	return false
}

// matchAddr reports whether p is an IP rule matching ip on port.
func (p Pattern) matchAddr(ip netip.Addr, port int) bool {
	return p.kind == kindIP && (p.port == 0 || p.port == port) && p.prefix.Contains(ip.Unmap())
}

// String returns the canonical form of the rule, which ParsePattern parses
// back to an equal Pattern: lowercase punycode names, dotted-decimal IPv4,
// bracketed IPv6 ("[fd00::]/8:443"). The zero Pattern is "".
func (p Pattern) String() string {
	var s string
	switch p.kind {
	case kindName:
		s = p.name
	case kindWildcard:
		s = "*." + p.name
	case kindIP:
		a, bits := p.prefix.Addr(), p.prefix.Bits()
		switch {
		case a.Is4() && bits == 32:
			s = a.String()
		case a.Is4():
			s = p.prefix.String()
		case bits == 128:
			s = "[" + a.String() + "]"
		default:
			s = "[" + a.String() + "]/" + strconv.Itoa(bits)
		}
	default:
		return ""
	}
	if p.port != 0 {
		s += ":" + strconv.Itoa(p.port)
	}
	return s
}

// IsName reports whether p matches names (a name or a wildcard) rather
// than addresses.
func (p Pattern) IsName() bool { return p.kind == kindName || p.kind == kindWildcard }

// Within reports whether every host and port p matches is also matched by
// q. Only name patterns (names and wildcards) are ever within another.
func (p Pattern) Within(q Pattern) bool {
	if q.port != 0 && p.port != q.port {
		return false
	}
	if p.kind != kindName && p.kind != kindWildcard {
		return false
	}
	switch q.kind {
	case kindName:
		return p.kind == kindName && p.name == q.name
	case kindWildcard:
		return strings.HasSuffix(p.name, "."+q.name) || p.kind == kindWildcard && p.name == q.name
	}
	return false
}
