package rules

import (
	"fmt"
	"net/netip"
	"strings"
)

// Mode is how much network a sandbox gets.
type Mode string

// The modes.
const (
	ModeNone      Mode = "none"      // no network: every connection is denied
	ModeAllowlist Mode = "allowlist" // only what an allow rule matches, minus what a deny rule matches
	ModeOpen      Mode = "open"      // every public address, minus what a deny rule matches
)

// Policy is a compiled set of egress rules. Deny wins over allow; private
// and special addresses (see Classify) are reachable only through an IP or
// CIDR allow rule, in every mode.
type Policy struct {
	Mode  Mode
	Allow []Pattern // presets expanded
	Deny  []Pattern
}

// Decision is the answer for one connection.
type Decision struct {
	Allow bool
	// Rule is the canonical form of the rule that decided, or a fixed
	// reason: "mode none", "mode open", "not in allowlist",
	// "private address 10.0.0.5 (private)", "invalid port 0", or why the
	// host is invalid.
	Rule string
}

// Compile parses a mode and allow and deny rules (see ParsePattern) into a
// Policy. Allow rules may also be preset references ("@pypi", see
// Presets). The mode is "none" (or "", the same), "allowlist" or "open";
// with mode none the rules are kept but nothing is allowed. Errors name the
// mode or the rule that failed and wrap errdefs.ErrInvalid.
func Compile(mode string, allow, deny []string) (*Policy, error) {
	p := &Policy{Mode: Mode(mode)}
	switch p.Mode {
	case "":
		p.Mode = ModeNone
	case ModeNone, ModeAllowlist, ModeOpen:
	default:
		return nil, invalidf("unknown egress mode %q (known: none, allowlist, open)", mode)
	}
	for _, r := range allow {
		if strings.HasPrefix(r, "@") {
			pats, err := expandPreset(r)
			if err != nil {
				return nil, err
			}
			p.Allow = append(p.Allow, pats...)
			continue
		}
		pat, err := ParsePattern(r)
		if err != nil {
			return nil, err
		}
		if port, ok := pat.HostLoopbackPort(); ok && port == 0 {
			return nil, errHostLoopbackPort(r)
		}
		p.Allow = append(p.Allow, pat)
	}
	for _, r := range deny {
		if strings.HasPrefix(r, "@") {
			return nil, invalidf("egress rule %q: presets can only be allowed, not denied", r)
		}
		pat, err := ParsePattern(r)
		if err != nil {
			return nil, err
		}
		p.Deny = append(p.Deny, pat)
	}
	return p, nil
}

// Host decides on a connection to host (as the sandbox spelled it; it is
// normalised with NormalizeHost) on port, before the host is resolved. A
// matching deny rule denies; in allowlist mode a matching allow rule is
// needed; mode none denies everything. If host is an IP address, the
// address is also checked as by Addr. An allowed name must still pass Addr
// for each address it resolves to. HostLoopback is allowed only by an
// allow rule naming it with the port, in either mode.
func (p *Policy) Host(host string, port int) Decision {
	if d, done := p.precheck(port); done {
		return d
	}
	d, _ := p.host(host, port)
	return d
}

// host is Host after precheck; it also returns the normalised name ("" for
// an address or an invalid host).
func (p *Policy) host(host string, port int) (Decision, string) {
	name, ip, isIP, err := NormalizeHost(host)
	if err != nil {
		return deny(err.Error()), ""
	}
	if isIP {
		return p.addr("", ip, port, false), ""
	}
	for _, r := range p.Deny {
		if r.Match(name, port) {
			return deny(r.String()), name
		}
	}
	if name == HostLoopback {
		for _, r := range p.Allow {
			if r.opensHostLoopback(port) {
				return allow(r.String()), name
			}
		}
		return deny(hostLoopbackDenial(port)), name
	}
	for _, r := range p.Allow {
		if r.Match(name, port) {
			return allow(r.String()), name
		}
	}
	if p.Mode == ModeOpen {
		return allow(RuleOpen), name
	}
	return deny("not in allowlist"), name
}

// RuleOpen is the rule of a decision that only mode open allowed (no allow
// rule matched).
const RuleOpen = "mode open"

// Addr decides on a connection to ip on port, after host was resolved to
// ip; host may be "" when the sandbox named the address itself. It
// denies whatever Host(host, port) denies, and ip if a deny rule on
// addresses matches it (or an IPv4 address it embeds, see Classify). A
// private or special address is then allowed only by an IP or CIDR allow
// rule that matches it: a domain allow rule is not enough, so a name that
// resolves to an internal address is refused (DNS rebinding). A public
// address is allowed if host is; with no host, in allowlist mode, it needs
// an IP or CIDR allow rule.
//
// HostLoopback, once allowed, passes for the addresses it stands for
// (HostLoopbackAddrs) and no other.
//
// The gateway must connect to exactly ip, and must have resolved the name
// NormalizeHost returns, not the sandbox's spelling.
func (p *Policy) Addr(host string, ip netip.Addr, port int) Decision {
	if d, done := p.precheck(port); done {
		return d
	}
	byName, loopback := "", false
	if host != "" {
		d, name := p.host(host, port)
		if !d.Allow {
			return d
		}
		byName, loopback = d.Rule, name == HostLoopback
	}
	return p.addr(byName, ip, port, loopback)
}

// addr is Addr after the name check; byName is the rule that allowed the
// name, if any, and loopback says the name was HostLoopback.
func (p *Policy) addr(byName string, ip netip.Addr, port int, loopback bool) Decision {
	if !ip.IsValid() {
		return deny("invalid address")
	}
	if ip.Zone() != "" {
		return deny(fmt.Sprintf("address %s has an IPv6 zone", ip))
	}
	ip = ip.Unmap()
	candidates := append([]netip.Addr{ip}, embeddedV4(ip)...)
	for _, r := range p.Deny {
		for _, a := range candidates {
			if r.matchAddr(a, port) {
				return deny(r.String())
			}
		}
	}
	if loopback {
		for _, a := range hostLoopbackAddrs {
			if ip == a {
				return allow(byName)
			}
		}
		return deny(fmt.Sprintf("%s stands for the host's loopback (127.0.0.1, ::1), not %s", HostLoopback, ip))
	}
	byAddr := ""
	for _, r := range p.Allow {
		if r.matchAddr(ip, port) {
			byAddr = r.String()
			break
		}
	}
	if class, private := Classify(ip); private {
		if byAddr != "" {
			return allow(byAddr)
		}
		return deny(fmt.Sprintf("private address %s (%s)", ip, class))
	}
	switch {
	case byName != "":
		return allow(byName)
	case byAddr != "":
		return allow(byAddr)
	case p.Mode == ModeOpen:
		return allow(RuleOpen)
	}
	return deny("not in allowlist")
}

// precheck denies what no rule can allow: a nil policy, mode none or an
// unknown mode, and ports outside 1-65535.
func (p *Policy) precheck(port int) (Decision, bool) {
	switch {
	case p == nil:
		return deny("no policy"), true
	case p.Mode == ModeNone:
		return deny("mode none"), true
	case p.Mode != ModeAllowlist && p.Mode != ModeOpen:
		return deny(fmt.Sprintf("unknown mode %q", p.Mode)), true
	case port < 1 || port > 65535:
		return deny(fmt.Sprintf("invalid port %d", port)), true
	}
	return Decision{}, false
}

func allow(rule string) Decision { return Decision{Allow: true, Rule: rule} }
func deny(rule string) Decision  { return Decision{Allow: false, Rule: rule} }
