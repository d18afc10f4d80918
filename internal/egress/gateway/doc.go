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
//   - resolve a name the policy denies (the lookup itself would leak it);
//   - let the sandbox pick the resolved address (an IP literal from the
//     sandbox is checked like any other address, by Host and by Addr);
//   - let a TLS ClientHello name a server other than the one checked
//     (domain fronting through CONNECT or SOCKS);
//   - forward UDP (SOCKS5 UDP ASSOCIATE and BIND are refused);
//   - log or audit secrets: request headers, bodies, query strings and
//     URL user info are never recorded.
//
// Design notes:
//   - CONNECT answers 200 after the policy and the resolver, before
//     dialing: the ClientHello is read and checked first, so a mismatching
//     one never causes an upstream connection. A dial that then fails can
//     only close the tunnel (audited with the dial error). To other ports
//     than 443, a client silent for 500 ms (a server-first protocol) is
//     dialed anyway, and its first bytes are still checked before any is
//     forwarded. SOCKS5 replies after dialing, as the protocol expects, and
//     checks the first bytes the same way.
//   - Plain HTTP goes through one http.Transport whose request URLs carry
//     the checked ip:port, so its connection pool is keyed by checked
//     address and a pooled connection is only reused for a request that
//     checked the same address.
//   - A tunnel between two stream sockets (TCP, unix) is spliced once a
//     read fills the copy buffer (splice_linux.go): same idle deadlines
//     (renewed by every write's progress), the byte budget reserved
//     before bytes are sent and spent to its last byte.
//   - MaxBytes counts tunnel payload and plain-HTTP bodies and request
//     heads (the URL and headers go upstream too); Record byte counts are
//     payload only.
//   - Responses from a host with secrets (Interception.Scrub) have them
//     replaced by placeholders in headers and, streaming, in bodies
//     (scrub.go); a body that cannot be scrubbed is refused.
//   - HostLoopback (host.airlock.internal) is never resolved: it stands
//     for the host's 127.0.0.1, then ::1, which the Policy decides.
//
// Known limit: the gateway does not intercept TLS, so an Encrypted Client
// Hello is judged by its outer server name only.
package gateway
