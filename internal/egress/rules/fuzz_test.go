package rules

import (
	"errors"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/airlock-dev/airlock/internal/errdefs"
)

// patternSeeds are rules worth starting from; the seeds run as unit tests.
var patternSeeds = []string{
	"", "*", "*.", "*.com", "*.co.uk", "*.github.io", "a.*.com", "*example.com", "**.example.com",
	"*.*.example.com", "api.github.com", "API.GitHub.COM.", "api.github.com:443", "*.example.com",
	"*.Example.COM.:8443", "bücher.example", "*.bücher.example", "xn--bcher-kva.example",
	"xn--bcher-2pa.example", "xn--abc-.example", "xn--ls8h.la", "ｅｘａｍｐｌｅ。com", "_dmarc.example.com",
	"r3---sn-abc.googlevideo.com", "10.0.0.1", "10.0.0.1:5432", "10.0.0.1/32", "10.0.0.1/8", "10.0.0.0/8",
	"10.0.0.0/8:5432", "10.0.0.0/33", "0.0.0.0/0", "2001:db8::1", "[2001:DB8::1]", "[2001:db8::1]:443",
	"fd00::/8", "[fd00::]/8", "[fd00::]/8:443", "[fd00::1]/8", "[::ffff:10.0.0.1]", "::ffff:10.0.0.0/104",
	"::ffff:0:0/95", "[fe80::1%eth0]", "[::1", "[::1]x", "[10.0.0.1]", "127.1", "0x7f.1", "2130706433",
	"1.2.3.4.5", "example.123", "example.com:0", "example.com:65536", "example.com:0443", "example.com:",
	"example.com:443:1", "https://github.com", "github.com/foo", "a..b", "example.com..", "exa mple.com",
	"\u0301a.example", "a\u200db.example", "a\xffb.example", "[]", "[]:1", ":", "::", "[::]:65535", "/",
	strings.Repeat("a", 64) + ".com", strings.Repeat("a.", 127) + "a",
}

// FuzzParsePattern: ParsePattern never panics; errors name the rule and
// wrap ErrInvalid; a parsed pattern's String() parses back to an equal
// pattern with the same string; Match never panics, and a pattern matches
// the hosts it names.
func FuzzParsePattern(f *testing.F) {
	for _, s := range patternSeeds {
		f.Add(s, 443)
	}
	for _, rules := range Presets {
		for _, r := range rules {
			f.Add(r, 443)
		}
	}
	f.Add("*.example.com", 0)
	f.Add("10.0.0.0/8", -1)
	f.Fuzz(func(t *testing.T, s string, port int) {
		p, err := ParsePattern(s)
		if err != nil {
			if !errors.Is(err, errdefs.ErrInvalid) {
				t.Fatalf("ParsePattern(%q) = %v, not an ErrInvalid", s, err)
			}
			if prefix := "egress rule " + strconv.Quote(s) + ": "; !strings.HasPrefix(err.Error(), prefix) {
				t.Fatalf("ParsePattern(%q) = %q, does not start with %q", s, err, prefix)
			}
			if p != (Pattern{}) {
				t.Fatalf("ParsePattern(%q) failed but returned %v", s, p)
			}
			return
		}
		str := p.String()
		q, err := ParsePattern(str)
		if err != nil {
			t.Fatalf("ParsePattern(%q) = %q, which does not parse: %v", s, str, err)
		}
		if q != p || q.String() != str {
			t.Fatalf("ParsePattern(%q) = %#v (%q), but its string parses to %#v (%q)", s, p, str, q, q.String())
		}
		if p.kind == kindNone || p.port < 0 || p.port > 65535 {
			t.Fatalf("ParsePattern(%q) = %#v", s, p)
		}
		p.Match(s, port)
		p.Match(str, port)
		// The pattern matches what it names, on its port.
		matchPort := p.port
		if matchPort == 0 {
			matchPort = 1 + port&0xffff%65535
		}
		var host string
		switch p.kind {
		case kindName:
			host = p.name
		case kindWildcard:
			host = "x." + p.name
		case kindIP:
			host = p.prefix.Addr().String()
		}
		if len(host) <= maxName {
			n, _, _, err := NormalizeHost(host)
			if err != nil || n != host {
				t.Fatalf("ParsePattern(%q) names %q, which NormalizeHost gives as %q, %v", s, host, n, err)
			}
			if !p.Match(host, matchPort) {
				t.Fatalf("%q does not match %q on port %d", str, host, matchPort)
			}
		}
		if p.kind == kindWildcard && p.Match(p.name, matchPort) {
			t.Fatalf("%q matches its own apex %q", str, p.name)
		}
	})
}

// FuzzNormalizeHost: NormalizeHost never panics; its result is canonical
// (normalising it again changes nothing); an address classifies the same
// as its canonical string re-normalised; every address net/netip parses
// normalises to the same address; a name is an exact rule that matches
// itself; and an open policy never allows a private address literal.
func FuzzNormalizeHost(f *testing.F) {
	for _, g := range ssrfSpellings {
		for _, s := range g.spellings {
			f.Add(s)
		}
	}
	for _, s := range []string{
		"", "example.com", "Example.COM.", "localhost", "bücher.example", "BÜCHER.Example.", "XN--BCHER-KVA.example",
		"例え.中国", "ｅｘａｍｐｌｅ．ｃｏｍ", "example。com", "xn--zz.example", "xn--abc-.example", "xn--bcher-2pa.example",
		"xn--ls8h.la", "💩.la", "xn--ü.example", "xn--xn---3ra.example", "a\u200bb.example", "\u0301a.example", "a\xffb.example", "İ.example", "K.example", "ß.example",
		"fe80::1%eth0", "[fe80::1%25eth0]", "[::1", "[::1]", "::1", "[127.0.0.1]", "example.com:443",
		"::ffff:127.0.0.1", "[::ffff:127.0.0.1]", "::ffff:7f00:1", "::127.0.0.1", "64:ff9b::7f00:1",
		"::ffff:169.254.169.254", "64:ff9b::a9fe:a9fe", "64:ff9b:1::a9fe:a9fe", "64:ff9b:1:a9fe:a9:fe00::",
		"fd00:ec2::254", "2002:a9fe:a9fe::1", "2001:0:4136:e378:8000:63bf:f5ff:fffe", "::ffff:0177.0.0.1",
		"1.2.3.4.5", "256.0.0.1", "0x100000000", "4294967296", "4294967295", "08.0.0.1", "1..2", "example.123",
		"example.0x1f", "example.0x1g", "0x", "0x.0x", "a..b", ".", "..", "。", "*.example.com",
		"host.airlock.internal", "HOST.Airlock.Internal.", "x.host.airlock.internal",
	} {
		f.Add(s)
	}
	open := &Policy{Mode: ModeOpen}
	f.Fuzz(func(t *testing.T, s string) {
		// Anything net/netip parses (without a zone) normalises to it.
		if a, err := netip.ParseAddr(s); err == nil && a.Zone() == "" {
			_, ip, isIP, err := NormalizeHost(s)
			if err != nil || !isIP || ip != a.Unmap() {
				t.Fatalf("NormalizeHost(%q) = %v, %v, %v; netip says %v", s, ip, isIP, err, a)
			}
		}
		if runes := []rune(s); utf8.ValidString(s) && len(runes) < 256 {
			if a, err := punyEncode(runes); err == nil {
				if u, err := punyDecode(a); err != nil || string(u) != s {
					t.Fatalf("punycode of %q is %q, which decodes to %q, %v", s, a, string(u), err)
				}
			}
		}
		host, ip, isIP, err := NormalizeHost(s)
		if err != nil {
			if !errors.Is(err, errdefs.ErrInvalid) {
				t.Fatalf("NormalizeHost(%q) = %v, not an ErrInvalid", s, err)
			}
			if host != "" || ip.IsValid() || isIP {
				t.Fatalf("NormalizeHost(%q) failed but returned %q, %v, %v", s, host, ip, isIP)
			}
			if d := open.Host(s, 443); d.Allow {
				t.Fatalf("open policy allows invalid host %q: %+v", s, d)
			}
			return
		}
		host2, ip2, isIP2, err := NormalizeHost(host)
		if err != nil || host2 != host || ip2 != ip || isIP2 != isIP {
			t.Fatalf("NormalizeHost(%q) = %q, but that normalises to %q, %v, %v, %v", s, host, host2, ip2, isIP2, err)
		}
		if !isASCII(host) || strings.ToLower(host) != host || len(host) > maxName {
			t.Fatalf("NormalizeHost(%q) = %q: not lowercase ASCII of at most %d bytes", s, host, maxName)
		}
		d := open.Host(s, 443)
		if !isIP {
			if ip.IsValid() {
				t.Fatalf("NormalizeHost(%q) = name %q with address %v", s, host, ip)
			}
			p, err := ParsePattern(host)
			if err != nil || p.kind != kindName || !p.Match(host, 443) {
				t.Fatalf("NormalizeHost(%q) = %q, which is not an exact rule matching itself: %v, %v", s, host, p, err)
			}
			if d.Allow == (host == HostLoopback) { // open mode never reaches the host's loopback
				t.Fatalf("open policy on name %q: %+v", s, d)
			}
			return
		}
		if host != ip.String() || ip.Zone() != "" || ip.Is4In6() {
			t.Fatalf("NormalizeHost(%q) = %q, %v: not the canonical address", s, host, ip)
		}
		class, private := Classify(ip)
		if class2, private2 := Classify(ip2); class2 != class || private2 != private {
			t.Fatalf("Classify(%v) = %s, but its canonical form classifies as %s", ip, class, class2)
		}
		if private == (class == ClassPublic) {
			t.Fatalf("Classify(%v) = %s, %v", ip, class, private)
		}
		if d.Allow == private {
			t.Fatalf("open policy on %q (%v, %s) = %+v", s, ip, class, d)
		}
		if p, err := ParsePattern(netip.PrefixFrom(ip, ip.BitLen()).String()); err != nil || !p.Match(host, 443) {
			t.Fatalf("address %v as a rule: %v, %v", ip, p, err)
		}
	})
}
