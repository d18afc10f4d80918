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
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strings"

	"github.com/airlock-dev/airlock/internal/egress/gateway"
	"github.com/airlock-dev/airlock/internal/egress/rules"
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

// adapter makes rules.Policy a gateway.Policy.
type adapter struct{ p *rules.Policy }

func (a adapter) Host(host string, port int) gateway.Decision {
	d := a.p.Host(host, port)
	return gateway.Decision{Allow: d.Allow, Rule: d.Rule}
}

func (a adapter) Addr(host string, ip netip.Addr, port int) gateway.Decision {
	d := a.p.Addr(host, ip, port)
	return gateway.Decision{Allow: d.Allow, Rule: d.Rule}
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
}

// Gateway is a running sandbox gateway.
type Gateway struct {
	gw *gateway.Gateway
}

// Start serves sb's egress listeners with the rules of n.
func Start(sb runtime.Sandbox, n policy.Network, o Options) (*Gateway, error) {
	rp, err := Compile(n)
	if err != nil {
		return nil, err
	}
	lp, ok := sb.(runtime.Listeners)
	if !ok || len(lp.Listeners()) != 2 {
		return nil, errors.New("egress: the sandbox has no gateway listeners (the runtime must support Spec.Listen)")
	}
	ls := lp.Listeners()
	gw := gateway.New(gateway.Config{
		Sandbox: o.Sandbox, Policy: adapter{rp},
		Resolver: &gateway.StaticResolver{Hosts: o.Hosts, Fallback: net.DefaultResolver},
		MaxConns: o.MaxConns, MaxBytes: o.MaxBytes, Audit: o.Audit, Log: o.Log,
	})
	go gw.ServeHTTP(ls[0])
	go gw.ServeSOCKS(ls[1])
	return &Gateway{gw: gw}, nil
}

// SetNetwork replaces the rules; open connections the new rules deny are
// closed.
func (g *Gateway) SetNetwork(n policy.Network) error {
	rp, err := Compile(n)
	if err != nil {
		return fmt.Errorf("egress: %w", err)
	}
	g.gw.SetPolicy(adapter{rp})
	return nil
}

// Close stops the gateway and closes every connection.
func (g *Gateway) Close() error { return g.gw.Close() }

// AddHost adds an entry to a static host map: name (any case, trailing dot
// allowed) resolves to ip (brackets allowed; IPv4-mapped IPv6 unmapped).
func AddHost(hosts map[string][]netip.Addr, name, ip string) error {
	a, err := netip.ParseAddr(strings.Trim(ip, "[]"))
	name = strings.TrimSuffix(strings.ToLower(name), ".")
	if name == "" || err != nil {
		return fmt.Errorf("host map entry %q -> %q: want a name and an IP address", name, ip)
	}
	hosts[name] = append(hosts[name], a.Unmap())
	return nil
}
