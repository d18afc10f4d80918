package rules

import (
	"fmt"
	"net/netip"
)

// HostLoopback is the name by which a sandbox reaches a service on the
// loopback of the host its gateway runs on (a local model server, a
// development database): 127.0.0.1 inside a sandbox is the sandbox's own.
// The gateway maps the name to 127.0.0.1 and ::1 itself, never asking a
// resolver.
//
// Only an allow rule naming it with a port opens it
// (host.airlock.internal:11434), one port per rule: Compile refuses it
// without a port, and neither a wildcard (*.airlock.internal) nor mode
// open reaches it. Deny rules apply to it as to any name, and to the
// addresses it stands for.
const HostLoopback = "host.airlock.internal"

// hostLoopbackAddrs are the addresses HostLoopback stands for.
var hostLoopbackAddrs = [...]netip.Addr{netip.AddrFrom4([4]byte{127, 0, 0, 1}), netip.IPv6Loopback()}

// HostLoopbackAddrs returns the addresses HostLoopback stands for, in the
// order to dial them.
func HostLoopbackAddrs() []netip.Addr { return hostLoopbackAddrs[:] }

// HostLoopbackPort returns the port of a rule that names HostLoopback
// exactly (not a wildcard over it), and whether it does.
func (p Pattern) HostLoopbackPort() (int, bool) {
	if p.kind == kindName && p.name == HostLoopback {
		return p.port, true
	}
	return 0, false
}

// opensHostLoopback reports whether allow rule p opens HostLoopback on
// port: only an exact rule with that port does.
func (p Pattern) opensHostLoopback(port int) bool {
	return p.kind == kindName && p.name == HostLoopback && p.port != 0 && p.port == port
}

func hostLoopbackDenial(port int) string {
	return fmt.Sprintf("%s:%d is the host's loopback: only an allow rule naming it with the port opens it", HostLoopback, port)
}

func errHostLoopbackPort(rule string) error {
	return invalidf("egress rule %q: name the port, as in %s:11434: %s reaches services on the host's loopback one port at a time, and a rule without a port would open them all", rule, HostLoopback, HostLoopback)
}
