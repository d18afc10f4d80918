// Package gateway is a sandbox's only way out: one Gateway per sandbox
// serves an HTTP proxy (CONNECT and absolute-URI plain HTTP) and a SOCKS5
// proxy on listeners it is handed (sockets bound inside the sandbox's
// network namespace, whose fds were passed out to the supervisor).
//
// It owns, for every connection the sandbox opens: deciding (Policy.Host on
// the name, then Policy.Addr on each resolved address), resolving (once per
// connection, with the gateway's Resolver, never the sandbox's), dialing
// (exactly the ip:port that was checked), relaying (with idle timeouts, a
// connection cap and a byte budget), re-deciding when the policy changes,
// and auditing (one Record per tunnel and per plain-HTTP request, allowed
// or not).
//
// It must never:
//   - connect to an address it did not check, or hand a name to a dialer
//     (a resolver whose answer changes between calls must not matter);
//   - let the sandbox pick the resolved address (an IP literal from the
//     sandbox is checked like any other address, by Host and by Addr);
//   - let a TLS ClientHello name a server other than the one checked
//     (domain fronting through CONNECT or SOCKS);
//   - forward UDP (SOCKS5 UDP ASSOCIATE and BIND are refused);
//   - log or audit secrets: request headers, bodies, query strings and
//     URL user info are never recorded.
//
// Known limit: the gateway does not intercept TLS, so an Encrypted Client
// Hello is judged by its outer server name only.
package gateway
