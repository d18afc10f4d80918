package gateway

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
)

// Decision is the verdict of a policy.
type Decision struct {
	Allow bool
	// Rule names the rule or reason that decided. It is shown to the
	// sandbox on a denial (in the 403 body and X-Airlock-Rule), so it must
	// not contain secrets.
	Rule string
}

// Policy decides by name before resolving and by address after. Host gets
// a lower-case name without a trailing dot, or the canonical form of an IP
// literal (IPv4-mapped IPv6 unmapped). Addr is called for every resolved
// address (and for an IP literal) before it may be dialed. Both may be
// called concurrently and again for open connections when SetPolicy
// installs a new policy.
type Policy interface {
	Host(host string, port int) Decision
	Addr(host string, ip netip.Addr, port int) Decision
}

// Resolver resolves names for the gateway. It is asked once per connection
// (or plain-HTTP request); its answer is checked and then dialed as is.
type Resolver interface {
	LookupNetIP(ctx context.Context, host string) ([]netip.Addr, error)
}

// StaticResolver answers from Hosts first (like /etc/hosts; names match
// case-insensitively, trailing dot ignored) and asks Fallback for anything
// else. A nil Fallback resolves nothing else.
type StaticResolver struct {
	Hosts    map[string][]netip.Addr
	Fallback *net.Resolver
}

var _ Resolver = (*StaticResolver)(nil)

// LookupNetIP implements Resolver.
func (r *StaticResolver) LookupNetIP(ctx context.Context, host string) ([]netip.Addr, error) {
	name := strings.TrimSuffix(strings.ToLower(host), ".")
	if addrs, ok := r.Hosts[name]; ok && len(addrs) > 0 {
		return append([]netip.Addr(nil), addrs...), nil
	}
	for k, addrs := range r.Hosts { // keys not written in normal form
		if len(addrs) > 0 && strings.TrimSuffix(strings.ToLower(k), ".") == name {
			return append([]netip.Addr(nil), addrs...), nil
		}
	}
	if r.Fallback == nil {
		return nil, &net.DNSError{Err: "no such host", Name: name, IsNotFound: true}
	}
	return r.Fallback.LookupNetIP(ctx, "ip", name)
}

// HostLoopback is the name by which a sandbox reaches a service on the
// loopback of the host the gateway runs on. The gateway never asks its
// Resolver (nor a static host map) for it: it stands for 127.0.0.1, then
// ::1, each decided by Policy.Addr like any address. Whether it is
// reachable at all is the Policy's to say (package rules opens it only
// by an allow rule naming it with the port).
const HostLoopback = "host.airlock.internal"

var hostLoopbackAddrs = []netip.Addr{netip.AddrFrom4([4]byte{127, 0, 0, 1}), netip.IPv6Loopback()}

// denyAll is the policy in force when none was given: fail closed.
type denyAll struct{}

func (denyAll) Host(string, int) Decision { return Decision{Rule: "no egress policy"} }
func (denyAll) Addr(string, netip.Addr, int) Decision {
	return Decision{Rule: "no egress policy"}
}

// target is a destination as the sandbox named it, normalized.
type target struct {
	host string     // lower-case name without trailing dot, or canonical IP
	port int        // 1..65535
	ip   netip.Addr // valid when host is an IP literal
}

func (t target) String() string { return net.JoinHostPort(t.host, fmt.Sprint(t.port)) }

// parseTarget validates and normalizes a destination. Names must be plain
// ASCII DNS names; numeric names that are not IP addresses ("127.1",
// "2130706433") are refused rather than left to a resolver's
// interpretation; zoned IPv6 addresses are refused.
func parseTarget(host string, port int) (target, error) {
	if port < 1 || port > 65535 {
		return target{}, fmt.Errorf("invalid port %d: want 1-65535", port)
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		if ip.Zone() != "" {
			return target{}, fmt.Errorf("invalid host %q: zoned IPv6 addresses are not allowed", host)
		}
		ip = ip.Unmap()
		return target{host: ip.String(), port: port, ip: ip}, nil
	}
	name := strings.TrimSuffix(strings.ToLower(host), ".")
	if err := checkName(name); err != nil {
		return target{}, fmt.Errorf("invalid host %q: %v", host, err)
	}
	return target{host: name, port: port}, nil
}

func checkName(name string) error {
	if name == "" || len(name) > 253 {
		return errors.New("want a DNS name of 1-253 characters")
	}
	labels := strings.Split(name, ".")
	for _, l := range labels {
		if l == "" || len(l) > 63 {
			return errors.New("want labels of 1-63 characters")
		}
		for i := 0; i < len(l); i++ {
			c := l[i]
			ok := c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_'
			if !ok {
				return fmt.Errorf("character %q is not allowed in a host name (use punycode for IDNs)", c)
			}
		}
	}
	last := labels[len(labels)-1]
	if strings.Trim(last, "0123456789") == "" {
		return errors.New("a numeric name that is not an IP address")
	}
	return nil
}

// failure says why a destination could not be reached.
type failure int

const (
	failNone       failure = iota
	failDenied             // by policy (Host or Addr)
	failUnresolved         // the resolver had no usable answer
	failDial               // every allowed address failed to connect
)

// verdict is the outcome of checking a target against one policy.
type verdict struct {
	fail  failure
	rule  string // deciding rule: the denial, or the rules that allowed
	err   error  // resolver or dial error
	addrs []allowedAddr
	// deniedAddr is the first address Policy.Addr refused (audited when
	// every address was refused).
	deniedAddr netip.AddrPort
	gen        uint64 // policy generation that decided
}

type allowedAddr struct {
	ap   netip.AddrPort
	rule string
}

// check decides t: Host first, then (for names) one resolution, then Addr
// for every answer. Only addresses that pass Addr are kept, in the
// resolver's order.
func (g *Gateway) check(ctx context.Context, t target) verdict {
	st := g.policy.Load()
	hd := st.p.Host(t.host, t.port)
	if !hd.Allow {
		return verdict{fail: failDenied, rule: ruleOr(hd.Rule, "host not allowed"), gen: st.gen}
	}
	var ips []netip.Addr
	if t.ip.IsValid() {
		ips = []netip.Addr{t.ip}
	} else if t.host == HostLoopback {
		ips = hostLoopbackAddrs
	} else {
		rctx, cancel := context.WithTimeout(ctx, dialTimeout)
		answer, err := g.cfg.Resolver.LookupNetIP(rctx, t.host)
		cancel()
		if err != nil {
			return verdict{fail: failUnresolved, err: err, gen: st.gen}
		}
		seen := make(map[netip.Addr]bool, len(answer))
		for _, ip := range answer {
			ip = ip.Unmap()
			if !ip.IsValid() || ip.Zone() != "" || seen[ip] {
				continue
			}
			seen[ip] = true
			ips = append(ips, ip)
		}
		if len(ips) == 0 {
			return verdict{fail: failUnresolved, err: fmt.Errorf("no usable address for %s", t.host), gen: st.gen}
		}
	}
	v := verdict{gen: st.gen}
	var denial string
	for _, ip := range ips {
		ap := netip.AddrPortFrom(ip, uint16(t.port))
		ad := st.p.Addr(t.host, ip, t.port)
		if !ad.Allow {
			if denial == "" {
				denial, v.deniedAddr = ruleOr(ad.Rule, "address not allowed"), ap
			}
			continue
		}
		v.addrs = append(v.addrs, allowedAddr{ap: ap, rule: joinRules(hd.Rule, ad.Rule)})
	}
	if len(v.addrs) == 0 {
		v.fail, v.rule = failDenied, denial
		return v
	}
	v.rule = v.addrs[0].rule
	return v
}

// dial connects to the first allowed address that answers, passing the
// dialer nothing but a checked ip:port.
func (g *Gateway) dial(ctx context.Context, v *verdict) (net.Conn, netip.AddrPort, error) {
	var errs []error
	for _, a := range v.addrs {
		dctx, cancel := context.WithTimeout(ctx, dialTimeout)
		up, err := g.cfg.Dial(dctx, "tcp", a.ap.String())
		cancel()
		if err == nil {
			v.rule = a.rule
			return up, a.ap, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	v.fail = failDial
	v.err = errors.Join(errs...)
	return nil, v.addrs[0].ap, v.err
}

// recheck re-decides an open connection under policy p.
func recheck(p Policy, host string, port int, ap netip.AddrPort) Decision {
	d := p.Host(host, port)
	if !d.Allow {
		d.Rule = ruleOr(d.Rule, "host not allowed")
		return d
	}
	if ap.IsValid() {
		d = p.Addr(host, ap.Addr(), port)
		if !d.Allow {
			d.Rule = ruleOr(d.Rule, "address not allowed")
		}
	}
	return d
}

func ruleOr(rule, def string) string {
	if rule == "" {
		return def
	}
	return rule
}

func joinRules(a, b string) string {
	switch {
	case a == "" || a == b:
		return b
	case b == "":
		return a
	}
	return a + "; " + b
}

// cleanRule makes a rule safe for a header and a one-line body.
func cleanRule(rule string) string {
	const maxRule = 256
	b := []byte(rule)
	for i, c := range b {
		if c < 0x20 || c == 0x7f {
			b[i] = ' '
		}
	}
	if len(b) > maxRule {
		b = b[:maxRule]
	}
	return strings.ToValidUTF8(string(b), "?")
}
