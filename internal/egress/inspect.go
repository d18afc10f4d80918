package egress

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"

	"github.com/airlock-dev/airlock/internal/egress/gateway"
	"github.com/airlock-dev/airlock/internal/egress/rules"
	"github.com/airlock-dev/airlock/internal/policy"
)

// compiled is a sandbox's network policy as the gateway asks it: host and
// address rules, request rules of inspected hosts, and credentials.
type compiled struct {
	p       *rules.Policy
	http    []httpRule
	creds   []*Bound
	refused []Endpoint // never dialed (HostAccess.Refused)
}

var _ gateway.Interceptor = (*compiled)(nil)

func (c *compiled) Host(host string, port int) gateway.Decision {
	d := c.p.Host(host, port)
	// A tunnel to a bare address has no name to inspect: it could reach
	// an inspected host's server without its request rules. In open mode,
	// where any public address would do, a policy that inspects hosts
	// lets out only addresses an allow rule names.
	if d.Allow && d.Rule == rules.RuleOpen && len(c.http)+len(c.creds) > 0 {
		if _, _, isIP, err := rules.NormalizeHost(host); err == nil && isIP {
			return gateway.Decision{Rule: "an address in open mode while the policy inspects hosts (their request rules would not apply): connect by name, or allow the address explicitly"}
		}
	}
	return gateway.Decision{Allow: d.Allow, Rule: d.Rule}
}

func (c *compiled) Addr(host string, ip netip.Addr, port int) gateway.Decision {
	for _, e := range c.refused {
		if e.matches(ip, port) {
			return gateway.Decision{Rule: fmt.Sprintf("%s is %s, which sandboxes never reach", netip.AddrPortFrom(ip.Unmap(), uint16(port)), e.What)}
		}
	}
	d := c.p.Addr(host, ip, port)
	return gateway.Decision{Allow: d.Allow, Rule: d.Rule}
}

// Intercept implements gateway.Interceptor.
func (c *compiled) Intercept(host string, port int) gateway.Interception {
	var in inspection
	for i := range c.http {
		if matchAny(c.http[i].hosts, host, port) {
			in.rules = append(in.rules, &c.http[i])
		}
	}
	for _, b := range c.creds {
		if matchAny(b.hosts, host, port) {
			in.creds = append(in.creds, b)
		}
	}
	if len(in.rules)+len(in.creds) == 0 {
		return nil
	}
	return &in
}

func matchAny(ps []rules.Pattern, host string, port int) bool {
	for _, p := range ps {
		if p.Match(host, port) {
			return true
		}
	}
	return false
}

// httpRule is a compiled policy.HTTPRule.
type httpRule struct {
	n       int // index in the policy, for messages
	hosts   []rules.Pattern
	methods []string // upper case; empty: any
	paths   []string // empty: any
}

func compileHTTP(rs []policy.HTTPRule) ([]httpRule, error) {
	out := make([]httpRule, 0, len(rs))
	for i, r := range rs {
		hr := httpRule{n: i}
		for _, h := range r.Hosts {
			p, err := rules.ParsePattern(h)
			if err != nil {
				return nil, fmt.Errorf("network.http[%d]: %w", i, err)
			}
			if !p.IsName() {
				return nil, fmt.Errorf("network.http[%d]: %q is an address: request rules apply to names only", i, h)
			}
			hr.hosts = append(hr.hosts, p)
		}
		if len(hr.hosts) == 0 {
			return nil, fmt.Errorf("network.http[%d]: no hosts", i)
		}
		for _, m := range r.Methods {
			hr.methods = append(hr.methods, strings.ToUpper(m))
		}
		hr.paths = r.Paths
		out = append(out, hr)
	}
	return out, nil
}

func (r *httpRule) String() string {
	hosts := make([]string, len(r.hosts))
	for i, h := range r.hosts {
		hosts[i] = h.String()
	}
	s := fmt.Sprintf("http rule %d (%s", r.n, strings.Join(hosts, ","))
	if len(r.methods) > 0 {
		s += " " + strings.Join(r.methods, ",")
	}
	if len(r.paths) > 0 {
		s += " " + strings.Join(r.paths, ",")
	}
	return s + ")"
}

// allows reports whether r allows a request. path is escaped, without the
// query.
func (r *httpRule) allows(method, path string) bool {
	if len(r.methods) > 0 {
		ok := false
		for _, m := range r.methods {
			ok = ok || m == method
		}
		if !ok {
			return false
		}
	}
	if len(r.paths) == 0 {
		return true
	}
	for _, p := range r.paths {
		if pathUnder(path, p) {
			return true
		}
	}
	return false
}

// pathUnder reports whether path is prefix, or below it: "/repos/" covers
// "/repos/x"; "/user" covers "/user" and "/user/keys" but not "/users".
func pathUnder(path, prefix string) bool {
	if !strings.HasPrefix(path, prefix) {
		return false
	}
	return len(path) == len(prefix) || strings.HasSuffix(prefix, "/") || path[len(prefix)] == '/'
}

// canonicalPath decodes an escaped request path for rule matching, and
// refuses spellings a server might read differently from the rules: dot
// segments (with ";parameters" too), encoded slashes, backslashes or
// percent signs, empty segments, NULs.
func canonicalPath(escaped string) (string, bool) {
	lower := strings.ToLower(escaped)
	// %25 too: a server (or a proxy before it) that decodes twice would
	// read %252e%252e as "..".
	if strings.Contains(lower, "%2f") || strings.Contains(lower, "%5c") || strings.Contains(lower, "%25") || strings.Contains(escaped, "\\") {
		return "", false
	}
	p, err := url.PathUnescape(escaped)
	if err != nil || !strings.HasPrefix(p, "/") || strings.ContainsRune(p, 0) || strings.Contains(p, "//") {
		return "", false
	}
	for seg := range strings.SplitSeq(p, "/") {
		// Some servers drop ";parameters" before resolving dot segments
		// ("/repos/..;/admin").
		seg, _, _ = strings.Cut(seg, ";")
		if seg == "." || seg == ".." {
			return "", false
		}
	}
	return p, true
}

// inspection is what applies to one request to an inspected host (a
// fresh one for every request).
type inspection struct {
	rules []*httpRule
	creds []*Bound
	// swapped are Basic authorization values Inject rewrote: the new
	// encoding -> the one the sandbox sent.
	swapped map[string]string
}

// Request implements gateway.Interception: with no request rules for the
// host, every request is allowed; otherwise one rule must allow it.
func (in *inspection) Request(method, path string) gateway.Decision {
	if len(in.rules) == 0 {
		return gateway.Decision{Allow: true}
	}
	p := path
	for _, r := range in.rules {
		if len(r.paths) > 0 {
			var ok bool
			if p, ok = canonicalPath(path); !ok {
				return gateway.Decision{Rule: "path not canonical: dot segments, encoded slashes and empty segments are refused where paths are ruled"}
			}
			break
		}
	}
	for _, r := range in.rules {
		if r.allows(method, p) {
			return gateway.Decision{Allow: true, Rule: r.String()}
		}
	}
	names := make([]string, len(in.rules))
	for i, r := range in.rules {
		names[i] = r.String()
	}
	return gateway.Decision{Rule: "no http rule allows " + method + " " + p + ": " + strings.Join(names, "; ")}
}

// Inject implements gateway.Interception.
func (in *inspection) Inject(h http.Header, u *url.URL) []string {
	var used []string
	for _, b := range in.creds {
		if b.inject(h, u, in) {
			used = append(used, b.Name)
		}
	}
	return used
}

// Scrub implements gateway.Interception: every spelling of a secret the
// request could have carried upstream or the server may echo (as is,
// query- or path-escaped, JSON-escaped or Go-quoted, base64, inside the
// Basic value Inject made) goes back as the placeholder's.
func (in *inspection) Scrub() []string {
	var pairs []string
	for enc, orig := range in.swapped {
		pairs = append(pairs, enc, orig)
	}
	for _, b := range in.creds {
		pairs = append(pairs, b.spellings...)
	}
	return pairs
}

// makeSpellings sets the pairs Scrub returns for b.
func (b *Bound) makeSpellings() {
	b.spellings = []string{b.secret, b.Placeholder}
	for _, esc := range []func(string) string{url.QueryEscape, url.PathEscape} {
		e := esc(b.secret)
		b.spellings = append(b.spellings, e, b.Placeholder, lowerHex(e), b.Placeholder)
	}
	for _, js := range jsonForms(b.secret) {
		b.spellings = append(b.spellings, js, b.Placeholder)
	}
	// Go's %q, as error messages quote what they could not parse.
	q := strconv.Quote(b.secret)
	b.spellings = append(b.spellings, q[1:len(q)-1], b.Placeholder)
	// Inside the base64 of a longer text (a server that encodes the whole
	// request it got), the secret starts at any offset of a 3-byte group:
	// the groups made of its bytes alone are spelled the same whatever
	// surrounds them. At most two bytes at each end stay, in mixed groups.
	// These come first: where a core is also the whole encoding (a secret
	// of 3n bytes), its replacement keeps the text decodable.
	for _, enc := range []*base64.Encoding{base64.RawStdEncoding, base64.RawURLEncoding} {
		for skip := range 3 {
			old, new := base64Core(enc, b.secret, skip), base64Core(enc, b.Placeholder, skip)
			if len(old) >= minBase64Core {
				b.spellings = append(b.spellings, old, new)
			}
		}
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding, base64.RawStdEncoding, base64.RawURLEncoding} {
		b.spellings = append(b.spellings, enc.EncodeToString([]byte(b.secret)), enc.EncodeToString([]byte(b.Placeholder)))
	}
}

// minBase64Core is the shortest base64 core of a secret that is scrubbed:
// shorter ones (6 bytes of secret) would match unrelated text too often.
const minBase64Core = 8

// base64Core is the base64 of s's whole 3-byte groups after its first
// skip bytes.
func base64Core(enc *base64.Encoding, s string, skip int) string {
	if skip >= len(s) {
		return ""
	}
	s = s[skip:]
	return enc.EncodeToString([]byte(s[:len(s)/3*3]))
}

// lowerHex is a percent-encoded string with lower-case hex digits, as
// some servers write them.
func lowerHex(s string) string {
	b := []byte(s)
	for i := 0; i+2 < len(b); i++ {
		if b[i] == '%' {
			b[i+1], b[i+2] = lowerASCII(b[i+1]), lowerASCII(b[i+2])
		}
	}
	return string(b)
}

func lowerASCII(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// jsonForms are the ways JSON encoders write s inside a string, without
// the quotes: escaped minimally, with HTML characters as \u00XX (Go),
// and with slashes as \/ (PHP).
func jsonForms(s string) []string {
	var forms []string
	for _, html := range []bool{false, true} {
		var buf strings.Builder
		e := json.NewEncoder(&buf)
		e.SetEscapeHTML(html)
		e.Encode(s)
		f := strings.TrimSuffix(buf.String(), "\n")
		f = f[1 : len(f)-1] // the quotes
		forms = append(forms, f, strings.ReplaceAll(f, "/", `\/`))
	}
	return forms
}

// Bound is a credential ready for the gateway: its secret, the hosts it
// may go to, and the placeholder the sandbox sees instead.
type Bound struct {
	Name        string
	Env         string // sandbox variable holding the placeholder ("" for none)
	Placeholder string
	hosts       []rules.Pattern
	secret      string
	header      string
	format      string
	spellings   []string // the secret's spellings, each followed by the placeholder's
}

// inject puts b's secret into a request bound for one of its hosts: in
// place of the placeholder in any header (Basic authorization decoded and
// re-encoded) and in the query, and as Header when set.
func (b *Bound) inject(h http.Header, u *url.URL, in *inspection) bool {
	used := false
	for k, vs := range h {
		for i, v := range vs {
			if nv, enc, orig, ok := b.swap(k, v); ok {
				if enc != "" {
					if in.swapped == nil {
						in.swapped = map[string]string{}
					}
					in.swapped[enc] = orig
				}
				vs[i], used = nv, true
			}
		}
	}
	if strings.Contains(u.RawQuery, b.Placeholder) {
		u.RawQuery = strings.ReplaceAll(u.RawQuery, b.Placeholder, url.QueryEscape(b.secret))
		used = true
	}
	if b.header != "" {
		f := b.format
		if f == "" {
			f = "{secret}"
		}
		h.Set(b.header, strings.ReplaceAll(f, "{secret}", b.secret))
		used = true
	}
	return used
}

// swap returns v with the placeholder replaced by the secret, and for a
// Basic authorization value the new encoding and the one it replaced.
func (b *Bound) swap(key, v string) (nv, enc, orig string, ok bool) {
	if strings.Contains(v, b.Placeholder) {
		return strings.ReplaceAll(v, b.Placeholder, b.secret), "", "", true
	}
	if http.CanonicalHeaderKey(key) == "Authorization" || http.CanonicalHeaderKey(key) == "Proxy-Authorization" {
		scheme, old, found := strings.Cut(v, " ")
		old = strings.TrimSpace(old)
		if !found || !strings.EqualFold(scheme, "Basic") {
			return v, "", "", false
		}
		raw, err := base64.StdEncoding.DecodeString(old)
		if err != nil || !strings.Contains(string(raw), b.Placeholder) {
			return v, "", "", false
		}
		enc = base64.StdEncoding.EncodeToString([]byte(strings.ReplaceAll(string(raw), b.Placeholder, b.secret)))
		return scheme + " " + enc, enc, old, true
	}
	return v, "", "", false
}
