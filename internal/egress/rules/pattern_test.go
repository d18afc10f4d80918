package rules

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/internal/errdefs"
)

func TestParsePattern(t *testing.T) {
	tests := []struct{ in, want string }{
		{"api.github.com", "api.github.com"},
		{"API.GitHub.COM.", "api.github.com"},
		{"api.github.com:443", "api.github.com:443"},
		{"localhost", "localhost"},
		{"com", "com"}, // an exact name is never too broad
		{"_dmarc.example.com", "_dmarc.example.com"},
		{"r3---sn-abc.googlevideo.com", "r3---sn-abc.googlevideo.com"},
		{"*.example.com", "*.example.com"},
		{"*.Example.COM.:8443", "*.example.com:8443"},
		{"*.foo.co.uk", "*.foo.co.uk"},
		{"*.octocat.github.io", "*.octocat.github.io"},
		{"*.s3.amazonaws.com", "*.s3.amazonaws.com"},
		{"bücher.example", "xn--bcher-kva.example"},
		{"BÜCHER.example:443", "xn--bcher-kva.example:443"},
		{"xn--bcher-kva.example", "xn--bcher-kva.example"},
		{"*.bücher.example", "*.xn--bcher-kva.example"},
		{"ｅｘａｍｐｌｅ。com", "example.com"},
		{"10.0.0.1", "10.0.0.1"},
		{"10.0.0.1:5432", "10.0.0.1:5432"},
		{"10.0.0.1/32", "10.0.0.1"},
		{"10.0.0.0/8", "10.0.0.0/8"},
		{"10.0.0.0/8:5432", "10.0.0.0/8:5432"},
		{"0.0.0.0/0", "0.0.0.0/0"},
		{"2001:db8::1", "[2001:db8::1]"},
		{"[2001:DB8::1]", "[2001:db8::1]"},
		{"[2001:db8::1]:443", "[2001:db8::1]:443"},
		{"[2001:db8:0:0::1]/128:443", "[2001:db8::1]:443"},
		{"fd00::/8", "[fd00::]/8"},
		{"[fd00::]/8", "[fd00::]/8"},
		{"[fd00::]/8:443", "[fd00::]/8:443"},
		{"[::ffff:10.0.0.1]", "10.0.0.1"},
		{"::ffff:10.0.0.0/104", "10.0.0.0/8"},
		{"example.com:65535", "example.com:65535"},
		{"example.com:1", "example.com:1"},
	}
	for _, tt := range tests {
		p, err := ParsePattern(tt.in)
		if err != nil {
			t.Errorf("ParsePattern(%q): %v", tt.in, err)
			continue
		}
		if got := p.String(); got != tt.want {
			t.Errorf("ParsePattern(%q).String() = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// TestParsePatternRejects puts each rejected rule next to a similar one
// that is accepted, so a test that passes because everything is rejected
// fails.
func TestParsePatternRejects(t *testing.T) {
	long63 := strings.Repeat("a", 63)
	name253 := strings.Repeat(long63+".", 3) + strings.Repeat("b", 61) // 3*64+61 = 253
	tests := []struct{ bad, want, good string }{
		{"", "empty rule", "a"},
		{"*", "bare * would match every host", "*.example.com"},
		{"*.com", "every site in the top-level domain", "*.example.com"},
		{"*.COM.", "every site in the top-level domain", "*.example.com."},
		{"*.localhost", "every site in the top-level domain", "*.app.localhost"},
		{"*.co.uk", "co.uk is a public suffix", "*.foo.co.uk"},
		{"*.github.io", "github.io is a public suffix", "*.octocat.github.io"},
		{"*.amazonaws.com", "amazonaws.com is a public suffix", "*.s3.amazonaws.com"},
		{"*.workers.dev", "workers.dev is a public suffix", "*.me.workers.dev"},
		{"a.*.com", "contains '*'", "a.b.com"},
		{"*example.com", "contains '*'", "*.example.com"},
		{"*.*.example.com", "'*' may only be the whole first label", "*.a.example.com"},
		{"**.example.com", "contains '*'", "*.example.com"},
		{"*.", "empty name", "*.a.b"},
		{"*.10.0.0.1", "wildcards apply to domain names", "10.0.0.0/24"},
		{"example.com:0", `port "0"`, "example.com:1"},
		{"example.com:65536", `port "65536"`, "example.com:65535"},
		{"example.com:-1", `port "-1"`, "example.com:1"},
		{"example.com:+443", `port "+443"`, "example.com:443"},
		{"example.com:0443", `port "0443"`, "example.com:443"},
		{"example.com:", `port ""`, "example.com"},
		{"example.com:https", `port "https"`, "example.com:443"},
		{"example.com:443:1", "not a valid IP address", "example.com:443"},
		{"https://github.com", "not URLs", "github.com"},
		{"github.com/foo", "not a valid CIDR", "github.com"},
		{"a..b", "empty label", "a.b"},
		{".example.com", "empty label", "example.com"},
		{"example.com..", "empty label", "example.com."},
		{"exa mple.com", "contains ' '", "example.com"},
		{"ex!ample.com", "contains '!'", "example.com"},
		{"@pypi", "contains '@'", "pypi.org"},
		{long63 + "a.com", "is 64 characters long", long63 + ".com"},
		{name253 + "b", "name is 254 characters long", name253},
		{"*." + name253[2:] + "b", "name is 254 characters long", "*." + name253[2:]},
		{"10.0.0.1/8", "host bits are set; write 10.0.0.0/8 for the whole range or 10.0.0.1", "10.0.0.0/8"},
		{"10.0.0.0/33", "not a valid CIDR", "10.0.0.0/32"},
		{"[fd00::1]/8", "host bits are set; write [fd00::]/8", "[fd00::]/8"},
		{"127.1", "written unusually; write 127.0.0.1", "127.0.0.1"},
		{"2130706433", "written unusually; write 127.0.0.1", "127.0.0.1"},
		{"0x7f.1", "written unusually; write 127.0.0.1", "127.0.0.1"},
		{"010.0.0.1", "is the IPv4 address 8.0.0.1 written unusually", "10.0.0.1"},
		{"1.2.3.4.5", "ends in a number but is not an IPv4 address", "1.2.3.4"},
		{"example.123", "ends in a number", "example.com"},
		{"[10.0.0.1]", "brackets are only for IPv6", "10.0.0.1"},
		{"[10.0.0.0]/8", "brackets are only for IPv6", "10.0.0.0/8"},
		{"[fe80::1%eth0]", "zone identifiers", "[fe80::1]"},
		{"fe80::1%eth0", "zone identifiers", "fe80::1"},
		{"[::1", "missing ']'", "[::1]"},
		{"[::1]x", `unexpected "x" after ']'`, "[::1]"},
		{"[::1]:0", `port "0"`, "[::1]:1"},
		{"[example.com]", "not a valid IP address", "example.com"},
		{"xn--ls8h.la", "only letters and combining marks", "xn--bcher-kva.la"},
		{"💩.la", "only letters and combining marks", "ü.la"},
		{"xn--abc-.example", "punycode for the ASCII label", "abc.example"},
		{"xn--bcher-2pa.example", "not lowercase", "xn--bcher-kva.example"}, // "bÜcher"
		{"a\u200db.example", "only letters and combining marks", "ab.example"},
		{"\u0301a.example", "starts with a combining mark", "a\u0301.example"},
		{"a\xffb.example", "not valid UTF-8", "ab.example"},
		{strings.Repeat("a", 1025), "1025 bytes long", "a"},
	}
	for _, tt := range tests {
		_, err := ParsePattern(tt.bad)
		if err == nil {
			t.Errorf("ParsePattern(%q) succeeded, want an error containing %q", tt.bad, tt.want)
		} else {
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("ParsePattern(%q) = %q, want it to contain %q", tt.bad, err, tt.want)
			}
			if !errors.Is(err, errdefs.ErrInvalid) {
				t.Errorf("ParsePattern(%q) = %v, not an errdefs.ErrInvalid", tt.bad, err)
			}
			if prefix := "egress rule " + strconv.Quote(tt.bad) + ": "; !strings.HasPrefix(err.Error(), prefix) {
				t.Errorf("ParsePattern(%q) = %q, want it to start with %q", tt.bad, err, prefix)
			}
		}
		if _, err := ParsePattern(tt.good); err != nil {
			t.Errorf("control ParsePattern(%q) (for %q): %v", tt.good, tt.bad, err)
		}
	}
}

func TestPatternMatch(t *testing.T) {
	tests := []struct {
		rule string
		host string
		port int
		want bool
	}{
		{"*.example.com", "a.example.com", 443, true},
		{"*.example.com", "a.b.example.com", 80, true},
		{"*.example.com", "example.com", 443, false},
		{"*.example.com", "evilexample.com", 443, false},
		{"*.example.com", "a.evilexample.com", 443, false},
		{"*.example.com", "example.com.evil.org", 443, false},
		{"*.example.com", "a.example.com.evil.org", 443, false},
		{"*.example.com", ".example.com", 443, false},
		{"*.example.com:443", "a.example.com", 443, true},
		{"*.example.com:443", "a.example.com", 8443, false},
		{"api.github.com", "api.github.com", 22, true},
		{"api.github.com", "github.com", 443, false},
		{"api.github.com", "x.api.github.com", 443, false},
		{"api.github.com:443", "api.github.com", 443, true},
		{"api.github.com:443", "api.github.com", 80, false},
		{"api.github.com:443", "api.github.com", 0, false},
		{"bücher.example", "xn--bcher-kva.example", 443, true},
		{"10.0.0.1", "10.0.0.1", 443, true},
		{"10.0.0.1", "10.0.0.2", 443, false},
		{"10.0.0.0/8", "10.1.2.3", 443, true},
		{"10.0.0.0/8", "11.0.0.1", 443, false},
		{"10.0.0.0/8", "::ffff:10.1.2.3", 443, true},
		{"10.0.0.0/8:5432", "10.1.2.3", 5432, true},
		{"10.0.0.0/8:5432", "10.1.2.3", 5433, false},
		{"[fd00::]/8", "fd12::1", 443, true},
		{"[fd00::]/8", "[fd12::1]", 443, true},
		{"[fd00::]/8", "fe80::1", 443, false},
		{"[2001:db8::1]:443", "2001:db8::1", 443, true},
		{"[2001:db8::1]:443", "2001:db8::2", 443, false},
		{"example.com", "93.184.216.34", 443, false}, // names never match addresses
		{"93.184.216.34", "example.com", 443, false}, // and addresses never match names
		{"0.0.0.0/0", "example.com", 443, false},
	}
	for _, tt := range tests {
		p, err := ParsePattern(tt.rule)
		if err != nil {
			t.Fatalf("ParsePattern(%q): %v", tt.rule, err)
		}
		if got := p.Match(tt.host, tt.port); got != tt.want {
			t.Errorf("%q.Match(%q, %d) = %v, want %v", tt.rule, tt.host, tt.port, got, tt.want)
		}
	}
	if (Pattern{}).Match("", 0) || (Pattern{}).Match("example.com", 443) || (Pattern{}).String() != "" {
		t.Errorf("the zero Pattern matches something or has a string form")
	}
}

// TestPatternMatchNormalized checks that matching after NormalizeHost is
// insensitive to case, trailing dots and Unicode spelling.
func TestPatternMatchNormalized(t *testing.T) {
	tests := []struct {
		rule, host string
		want       bool
	}{
		{"*.Bücher.example", "WWW.BÜCHER.EXAMPLE.", true},
		{"*.bücher.example", "www.xn--bcher-kva.example", true},
		{"*.bücher.example", "BÜCHER.example", false},
		{"API.GITHUB.COM", "api.github.com.", true},
		{"api.github.com", "ａｐｉ．ｇｉｔｈｕｂ．ｃｏｍ", true},
		{"api.github.com", "api。github。com", true},
		{"api.github.com", "api.github.com..", false}, // NormalizeHost rejects it
		{"127.0.0.1", "0x7f.1", true},
		{"10.0.0.0/8", "012.1", true},
		{"10.0.0.0/8", "[::ffff:a00:1]", true},
	}
	for _, tt := range tests {
		p, err := ParsePattern(tt.rule)
		if err != nil {
			t.Fatalf("ParsePattern(%q): %v", tt.rule, err)
		}
		host, _, _, err := NormalizeHost(tt.host)
		if got := err == nil && p.Match(host, 443); got != tt.want {
			t.Errorf("%q matches %q (normalised %q, %v) = %v, want %v", tt.rule, tt.host, host, err, got, tt.want)
		}
	}
}

// TestPatternEqual checks that rules meaning the same thing are equal.
func TestPatternEqual(t *testing.T) {
	for _, set := range [][]string{
		{"10.0.0.1", "10.0.0.1/32", "[::ffff:10.0.0.1]", "::ffff:10.0.0.1/128"},
		{"bücher.example", "BÜCHER.EXAMPLE.", "xn--bcher-kva.example"},
		{"[fd00::]/8", "fd00::/8", "[FD00:0::]/8"},
	} {
		first, err := ParsePattern(set[0])
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range set[1:] {
			if p, err := ParsePattern(s); err != nil || p != first {
				t.Errorf("ParsePattern(%q) = %v, %v; want %v like %q", s, p, err, first, set[0])
			}
		}
	}
	a, _ := ParsePattern("example.com")
	b, _ := ParsePattern("example.com:443")
	if a == b {
		t.Errorf("example.com and example.com:443 are equal")
	}
}

func TestPatternWithin(t *testing.T) {
	for _, tc := range []struct {
		p, q string
		want bool
	}{
		{"api.github.com", "api.github.com", true},
		{"api.github.com", "API.github.com.", true},
		{"api.github.com:443", "api.github.com", true},
		{"api.github.com", "api.github.com:443", false}, // p covers every port
		{"api.github.com", "*.github.com", true},
		{"a.b.github.com", "*.github.com", true},
		{"github.com", "*.github.com", false}, // the wildcard never covers the apex
		{"*.github.com", "*.github.com", true},
		{"*.x.github.com", "*.github.com", true},
		{"*.github.com", "api.github.com", false},
		{"evilgithub.com", "*.github.com", false},
		{"api.github.com.evil.com", "api.github.com", false},
		{"10.0.0.1", "10.0.0.0/8", false}, // addresses are never within
	} {
		p, err := ParsePattern(tc.p)
		if err != nil {
			t.Fatal(err)
		}
		q, err := ParsePattern(tc.q)
		if err != nil {
			t.Fatal(err)
		}
		if got := p.Within(q); got != tc.want {
			t.Errorf("%s within %s = %v, want %v", tc.p, tc.q, got, tc.want)
		}
	}
}
