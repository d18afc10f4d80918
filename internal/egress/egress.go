// Package egress connects a sandbox to its egress gateway: it compiles a
// policy's network section into rules, starts a gateway on the listeners
// the runtime bound inside the sandbox (runtime.Listeners, Spec.Listen:
// the HTTP proxy first, then SOCKS5), and changes the rules while the
// sandbox runs.
//
// It must never start a sandbox with network access whose listeners it
// cannot serve, and never let anything out in mode none.
package egress

import (
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strings"

	"github.com/airlock-dev/airlock/internal/egress/gateway"
	"github.com/airlock-dev/airlock/internal/egress/rules"
	"github.com/airlock-dev/airlock/internal/errdefs"
	"github.com/airlock-dev/airlock/internal/policy"
	"github.com/airlock-dev/airlock/internal/runtime"
)

// Compile turns a policy's network section into rules.
func Compile(n policy.Network) (*rules.Policy, error) {
	mode := n.Mode
	if mode == "" {
		mode = policy.NetworkNone
	}
	return rules.Compile(mode, n.Allow, n.Deny)
}

// NewPolicy is the gateway policy of n, with the credentials of s (nil:
// none), for callers that run a gateway.Gateway themselves. It opens
// nothing on the host (the zero HostAccess).
func NewPolicy(n policy.Network, s *Setup) (gateway.Policy, error) {
	var creds []*Bound
	if s != nil {
		creds = s.Creds
	}
	return compile(n, creds, HostAccess{})
}

// compile makes the gateway's policy: n's rules, with the credentials
// bound at start (which cannot change while the sandbox runs) and what
// the host lets sandboxes reach on it.
func compile(n policy.Network, creds []*Bound, host HostAccess) (*compiled, error) {
	rp, err := Compile(n)
	if err != nil {
		return nil, err
	}
	if err := host.Check(n); err != nil {
		return nil, err
	}
	hr, err := compileHTTP(n.HTTP)
	if err != nil {
		return nil, err
	}
	return &compiled{p: rp, http: hr, creds: creds, refused: host.Refused}, nil
}

// HostAccess is what sandboxes may reach on the host their gateway runs
// on. The zero HostAccess opens no port of the host's loopback.
type HostAccess struct {
	// AnyPort lets a policy open any port of the host's loopback with an
	// allow rule host.airlock.internal:PORT (airlock run: the user's own
	// machine); otherwise only the Ports listed (airlock serve: its
	// configuration's egress_host_ports).
	AnyPort bool
	Ports   []int
	// Refused are never dialed, whatever the rules, by name or by address
	// (airlock serve's own API).
	Refused []Endpoint
}

// Endpoint is a port on a range of addresses, and what listens there.
type Endpoint struct {
	Prefix netip.Prefix
	Port   int
	What   string // for denials: "airlock serve's API"
}

func (e Endpoint) matches(ip netip.Addr, port int) bool {
	return e.Port == port && e.Prefix.Contains(ip.Unmap())
}

// Check refuses a network section whose allow rules open a port of the
// host's loopback (host.airlock.internal:PORT) that a does not let
// sandboxes reach. Errors wrap errdefs.ErrInvalid.
func (a HostAccess) Check(n policy.Network) error {
	for _, r := range n.Allow {
		p, err := rules.ParsePattern(r)
		if err != nil {
			continue // Compile says why
		}
		port, ok := p.HostLoopbackPort()
		if !ok || port == 0 {
			continue
		}
		for _, e := range a.Refused {
			for _, ip := range rules.HostLoopbackAddrs() {
				if e.matches(ip, port) {
					return fmt.Errorf("network.allow %q: %w: port %d of the host's loopback is %s, which sandboxes never reach", r, errdefs.ErrInvalid, port, e.What)
				}
			}
		}
		if !a.AnyPort && !slices.Contains(a.Ports, port) {
			open := "none"
			if len(a.Ports) > 0 {
				open = strings.Trim(fmt.Sprint(a.Ports), "[]")
			}
			return fmt.Errorf("network.allow %q: %w: port %d of the host's loopback is not open to sandboxes here (airlock serve's egress_host_ports opens: %s)", r, errdefs.ErrInvalid, port, open)
		}
	}
	return nil
}

// ListenerEndpoints returns where a TCP listener bound to addr can be
// reached from the host itself, as what: its address; for a loopback or
// unspecified address, all of loopback; for an unspecified one, every
// address of the host's interfaces too.
func ListenerEndpoints(addr net.Addr, what string) []Endpoint {
	ta, ok := addr.(*net.TCPAddr)
	if !ok {
		return nil
	}
	ap := ta.AddrPort()
	ip, port := ap.Addr().Unmap(), int(ap.Port())
	out := []Endpoint{{Prefix: netip.PrefixFrom(ip, ip.BitLen()), Port: port, What: what}}
	if ip.IsLoopback() || ip.IsUnspecified() {
		out = append(out, Endpoint{Prefix: netip.MustParsePrefix("127.0.0.0/8"), Port: port, What: what},
			Endpoint{Prefix: netip.MustParsePrefix("::1/128"), Port: port, What: what})
	}
	if ip.IsUnspecified() {
		addrs, _ := net.InterfaceAddrs()
		for _, a := range addrs {
			if pn, ok := a.(*net.IPNet); ok {
				if ia, ok := netip.AddrFromSlice(pn.IP); ok {
					ia = ia.Unmap()
					out = append(out, Endpoint{Prefix: netip.PrefixFrom(ia, ia.BitLen()), Port: port, What: what})
				}
			}
		}
	}
	return out
}

// Options configure Start.
type Options struct {
	Sandbox string
	// Hosts is a static host map (like /etc/hosts) the gateway consults
	// before DNS, for tests and air-gapped setups.
	Hosts    map[string][]netip.Addr
	MaxConns int
	MaxBytes int64
	Audit    func(gateway.Record)
	Log      *slog.Logger
	// Setup is the sandbox's CA and credentials (Prepare, Load). Without
	// it, hosts with request rules or credentials are refused.
	Setup *Setup
	// UpstreamRoots verifies inspected hosts' servers (nil: the system's,
	// which honour SSL_CERT_FILE).
	UpstreamRoots *x509.CertPool
	// Host is what the sandbox may reach on this host (zero: no port of
	// its loopback, whatever the policy).
	Host HostAccess
}

// Gateway is a running sandbox gateway.
type Gateway struct {
	gw    *gateway.Gateway
	creds []policy.Credential // as given at start
	bound []*Bound
	host  HostAccess
}

// Start serves sb's egress listeners with the rules of n.
func Start(sb runtime.Sandbox, n policy.Network, o Options) (*Gateway, error) {
	var bound []*Bound
	var ca *gateway.CA
	if o.Setup != nil {
		bound, ca = o.Setup.Creds, o.Setup.CA
	} else if len(n.Credentials) > 0 {
		return nil, errors.New("egress: the policy has credentials but the sandbox was not prepared for them (egress.Prepare)")
	}
	cp, err := compile(n, bound, o.Host)
	if err != nil {
		return nil, err
	}
	lp, ok := sb.(runtime.Listeners)
	if !ok || len(lp.Listeners()) != 2 {
		return nil, errors.New("egress: the sandbox has no gateway listeners (the runtime must support Spec.Listen)")
	}
	ls := lp.Listeners()
	if n.MaxConnections > 0 {
		o.MaxConns = n.MaxConnections
	}
	if n.MaxBytes > 0 {
		o.MaxBytes = n.MaxBytes
	}
	gw := gateway.New(gateway.Config{
		Sandbox: o.Sandbox, Policy: cp,
		Resolver: &gateway.StaticResolver{Hosts: o.Hosts, Fallback: net.DefaultResolver},
		MaxConns: o.MaxConns, MaxBytes: o.MaxBytes, Audit: o.Audit, Log: o.Log,
		CA: ca, UpstreamRoots: o.UpstreamRoots,
	})
	go gw.ServeHTTP(ls[0])
	go gw.ServeSOCKS(ls[1])
	return &Gateway{gw: gw, creds: n.Credentials, bound: bound, host: o.Host}, nil
}

// SetNetwork replaces the rules; open connections the new rules deny are
// closed.
//
// Credentials are fixed when the sandbox starts (its processes hold their
// placeholders): n.Credentials must equal them.
func (g *Gateway) SetNetwork(n policy.Network) error {
	if !slices.EqualFunc(n.Credentials, g.creds, func(a, b policy.Credential) bool {
		return a.Name == b.Name && a.Secret == b.Secret && a.Env == b.Env && a.Header == b.Header &&
			a.Format == b.Format && slices.Equal(a.Hosts, b.Hosts)
	}) {
		return fmt.Errorf("egress: %w: credentials cannot change while the sandbox runs", errdefs.ErrInvalid)
	}
	cp, err := compile(n, g.bound, g.host)
	if err != nil {
		return fmt.Errorf("egress: %w", err)
	}
	g.gw.SetPolicy(cp)
	return nil
}

// Close stops the gateway and closes every connection.
func (g *Gateway) Close() error { return g.gw.Close() }

// AddHost adds an entry to a static host map: name (any case, trailing dot
// allowed) resolves to ip (brackets allowed; IPv4-mapped IPv6 unmapped).
// host.airlock.internal is the gateway's own: it cannot be mapped.
func AddHost(hosts map[string][]netip.Addr, name, ip string) error {
	a, err := netip.ParseAddr(strings.Trim(ip, "[]"))
	name = strings.TrimSuffix(strings.ToLower(name), ".")
	if name == "" || err != nil {
		return fmt.Errorf("host map entry %q -> %q: want a name and an IP address", name, ip)
	}
	if name == rules.HostLoopback {
		return fmt.Errorf("host map entry %q: the gateway maps %s to the host's loopback itself; allow %s:PORT instead", name, name, name)
	}
	hosts[name] = append(hosts[name], a.Unmap())
	return nil
}
