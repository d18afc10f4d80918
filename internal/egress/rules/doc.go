// Package rules is the policy core of airlock's egress gateway: it owns the
// syntax and meaning of egress rules (HOST[:PORT] patterns, wildcards, IP
// literals, CIDRs and @presets), the normalisation of host names and
// addresses as a sandbox may spell them, the classification of addresses
// (loopback, private, metadata, ...) and the allow/deny decision for a
// connection.
//
// Decisions are made twice: Policy.Host on the name a sandbox asked for,
// before it is resolved, and Policy.Addr on every address it resolved to,
// before connecting. Addr refuses private and special addresses unless an
// IP or CIDR rule allows them by address, so an allowed name that resolves
// to 10.0.0.5 or 169.254.169.254 (DNS rebinding) is still refused.
//
// The package is pure: it must never do I/O, resolve names, read the clock
// or the environment, or keep mutable state; the gateway does all of that
// and asks this package only for answers. It must not import anything of
// airlock's except errdefs.
package rules
