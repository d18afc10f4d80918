package rules

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/internal/errdefs"
)

func TestNormalizeHostNames(t *testing.T) {
	tests := []struct{ in, want string }{
		{"example.com", "example.com"},
		{"Example.COM.", "example.com"},
		{"_dmarc.example.com", "_dmarc.example.com"},
		{"r3---sn-abc.googlevideo.com", "r3---sn-abc.googlevideo.com"},
		{"123.example", "123.example"}, // a numeric label that is not the last one
		{"0x7g.example", "0x7g.example"},
		{"1e100.net", "1e100.net"},
		{"localhost", "localhost"},
		{"bücher.example", "xn--bcher-kva.example"},
		{"BÜCHER.Example.", "xn--bcher-kva.example"},
		{"XN--BCHER-KVA.example", "xn--bcher-kva.example"},
		{"münchen.de", "xn--mnchen-3ya.de"},
		{"例え.中国", "xn--r8jz45g.xn--fiqs8s"},
		{"ｅｘａｍｐｌｅ．ｃｏｍ", "example.com"},
		{"example。com", "example.com"},
		{"example｡com", "example.com"},
		{"example.com。", "example.com"},
	}
	for _, tt := range tests {
		host, ip, isIP, err := NormalizeHost(tt.in)
		if err != nil || host != tt.want || isIP || ip.IsValid() {
			t.Errorf("NormalizeHost(%q) = %q, %v, %v, %v; want %q, a name", tt.in, host, ip, isIP, err, tt.want)
		}
	}
}

// TestNormalizeHostRejects puts each rejected host next to a similar one
// that is accepted.
func TestNormalizeHostRejects(t *testing.T) {
	long63 := strings.Repeat("a", 63)
	name253 := strings.Repeat(long63+".", 3) + strings.Repeat("b", 61)
	tests := []struct{ bad, want, good string }{
		{"", "empty host", "a"},
		{"fe80::1%eth0", "zone identifiers are not allowed", "fe80::1"},
		{"[fe80::1%25eth0]", "zone identifiers are not allowed", "[fe80::1]"},
		{"[::1", "missing ']'", "[::1]"},
		{"[127.0.0.1]", "brackets are only for IPv6 addresses; write 127.0.0.1", "127.0.0.1"},
		{"[example.com]", "not a valid IPv6 address", "example.com"},
		{"example.com:443", "not a valid IPv6 address", "example.com"},
		{"::ffff:0177.0.0.1", "not a valid IPv6 address", "::ffff:127.0.0.1"},
		{"1.2.3.4.5", "ends in a number but is not an IPv4 address", "1.2.3.4"},
		{"256.0.0.1", "not an IPv4 address", "255.0.0.1"},
		{"1.2.3.256", "not an IPv4 address", "1.2.256"},
		{"1.2.65536", "not an IPv4 address", "1.2.65535"},
		{"1.16777216", "not an IPv4 address", "1.16777215"},
		{"4294967296", "not an IPv4 address", "4294967295"},
		{"0x100000000", "not an IPv4 address", "0xffffffff"},
		{"08.0.0.1", "not an IPv4 address", "07.0.0.1"},
		{"0x7g.1", "not an IPv4 address", "0x7f.1"},
		{"1..2", "not an IPv4 address", "1.2"},
		{"example.123", "ends in a number", "example.com"},
		{"example.0x1f", "ends in a number", "example.0x1g"},
		{"a..b", "empty label", "a.b"},
		{".example.com", "empty label", "example.com"},
		{"example.com..", "empty label", "example.com."},
		{"exa mple.com", "contains ' '", "example.com"},
		{"*.example.com", "contains '*'", "a.example.com"},
		{"exam%70le.com", "contains '%'", "example.com"},
		{"example.com/", "contains '/'", "example.com"},
		{long63 + "a.com", "is 64 characters long", long63 + ".com"},
		{name253 + "b", "name is 254 characters long", name253},
		{"xn--ls8h.la", "only letters and combining marks", "xn--bcher-kva.la"},
		{"💩.la", "only letters and combining marks", "ü.la"},
		{"xn--zz.example", "not valid punycode", "xn--bcher-kva.example"},
		{"xn--abc-.example", "punycode for the ASCII label", "abc.example"},
		{"xn--bcher-2pa.example", "not lowercase", "xn--bcher-kva.example"},
		{"xn--ü.example", "starts with xn-- but is not ASCII", "ü.example"},
		{"xn--xn---3ra.example", "starts with xn-- but is not ASCII", "xn--tda.example"},
		{"a\u200bb.example", "only letters and combining marks", "ab.example"},
		{"a\u00adb.example", "only letters and combining marks", "ab.example"},
		{"a\u202eb.example", "only letters and combining marks", "ab.example"},
		{"١٢٣.example", "only letters and combining marks", "123.example"},
		{"a\xffb.example", "not valid UTF-8", "ab.example"},
		{strings.Repeat("a", 1025), "1025 bytes long", strings.Repeat("a", 63)},
	}
	for _, tt := range tests {
		_, _, _, err := NormalizeHost(tt.bad)
		if err == nil {
			t.Errorf("NormalizeHost(%q) succeeded, want an error containing %q", tt.bad, tt.want)
		} else {
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("NormalizeHost(%q) = %q, want it to contain %q", tt.bad, err, tt.want)
			}
			if !errors.Is(err, errdefs.ErrInvalid) {
				t.Errorf("NormalizeHost(%q) = %v, not an errdefs.ErrInvalid", tt.bad, err)
			}
		}
		if _, _, _, err := NormalizeHost(tt.good); err != nil {
			t.Errorf("control NormalizeHost(%q) (for %q): %v", tt.good, tt.bad, err)
		}
	}
}

// ssrfSpellings are the ways to write an address that SSRF filters miss.
// Each group's spellings must all normalise to addr, of class class.
var ssrfSpellings = []struct {
	addr, class string
	spellings   []string
}{
	{"127.0.0.1", ClassLoopback, []string{
		"127.0.0.1", "127.0.0.1.", "2130706433", "0x7f000001", "0X7F000001", "0x7F000001",
		"0177.0.0.1", "0177.0.0.01", "0177.00.00.01", "00177.0.0.1", "017700000001", "0000000000017700000001",
		"127.1", "127.0.1", "0x7f.1", "0x7f.0.1", "0x7f.0.0.1", "0x7f.0x0.0x0.0x1", "0x7f.0.0x0001",
		"127.000.000.001", "127.0x0.0.1", "0177.1", "0177.0.1",
		"１２７.０.０.１", "127。0。0。1", "127．0．0．1",
	}},
	{"169.254.169.254", ClassMetadata, []string{
		"169.254.169.254", "2852039166", "0xa9fea9fe", "0xA9FEA9FE", "0251.0376.0251.0376",
		"0xa9.0xfe.0xa9.0xfe", "0251.254.169.254", "169.254.43518", "169.16689662", "0xa9.16689662",
		"025177524776", "169.254.169.254.",
	}},
	{"10.0.0.1", ClassPrivate, []string{
		"10.0.0.1", "167772161", "0xa000001", "012.0.0.1", "012.0.0.01", "10.1", "10.0.1",
		"0xa.1", "012.1", "0xa.0.0.1", "10.0.0.0x1", "01200000001",
	}},
	{"0.0.0.0", ClassUnspecified, []string{"0", "0.0.0.0", "0x0", "00", "0.0", "0x", "0x.0x.0x.0x"}},
	{"192.168.0.1", ClassPrivate, []string{"3232235521", "0xc0a80001", "0300.0250.0.1", "192.168.1"}},
	// Public controls: the same tricks on public addresses stay public.
	{"8.8.8.8", ClassPublic, []string{"8.8.8.8", "134744072", "0x8080808", "010.010.010.010", "8.8.2056", "8.526344", "0x8.0x8.0x8.0x8"}},
	{"87.0.0.1", ClassPublic, []string{"0127.0.0.1"}}, // leading zero means octal: 0127 = 87
	{"1.0.0.0", ClassPublic, []string{"16777216", "1.0"}},
}

func TestNormalizeHostIPv4(t *testing.T) {
	for _, g := range ssrfSpellings {
		if g.spellings == nil {
			continue
		}
		want := netip.MustParseAddr(g.addr)
		for _, s := range g.spellings {
			host, ip, isIP, err := NormalizeHost(s)
			if err != nil || !isIP || ip != want || host != g.addr {
				t.Errorf("NormalizeHost(%q) = %q, %v, %v, %v; want %s", s, host, ip, isIP, err, want)
				continue
			}
			if class, private := Classify(ip); class != g.class || private != (g.class != ClassPublic) {
				t.Errorf("Classify(NormalizeHost(%q)) = %s, %v; want %s", s, class, private, g.class)
			}
		}
	}
}

func TestNormalizeHostIPv6(t *testing.T) {
	tests := []struct{ in, want, class string }{
		{"::1", "::1", ClassLoopback},
		{"[::1]", "::1", ClassLoopback},
		{"[0:0:0:0:0:0:0:1]", "::1", ClassLoopback},
		{"::ffff:127.0.0.1", "127.0.0.1", ClassLoopback},
		{"[::ffff:127.0.0.1]", "127.0.0.1", ClassLoopback},
		{"::ffff:7f00:1", "127.0.0.1", ClassLoopback},
		{"[0:0:0:0:0:ffff:7f00:0001]", "127.0.0.1", ClassLoopback},
		{"::127.0.0.1", "::7f00:1", ClassLoopback},
		{"64:ff9b::7f00:1", "64:ff9b::7f00:1", ClassLoopback},
		{"64:ff9b::127.0.0.1", "64:ff9b::7f00:1", ClassLoopback},
		{"::ffff:169.254.169.254", "169.254.169.254", ClassMetadata},
		{"[::ffff:a9fe:a9fe]", "169.254.169.254", ClassMetadata},
		{"64:ff9b::a9fe:a9fe", "64:ff9b::a9fe:a9fe", ClassMetadata},
		{"64:ff9b::169.254.169.254", "64:ff9b::a9fe:a9fe", ClassMetadata},
		{"::169.254.169.254", "::a9fe:a9fe", ClassMetadata},
		{"[fd00:ec2::254]", "fd00:ec2::254", ClassMetadata},
		{"FD00:EC2:0::254", "fd00:ec2::254", ClassMetadata},
		{"::ffff:10.0.0.1", "10.0.0.1", ClassPrivate},
		{"::ffff:a00:1", "10.0.0.1", ClassPrivate},
		{"64:ff9b::a00:1", "64:ff9b::a00:1", ClassPrivate},
		{"2002:a00:1::1", "2002:a00:1::1", ClassPrivate},
		{"fe80::1", "fe80::1", ClassLinkLocal},
		{"::", "::", ClassUnspecified},
		// Public controls.
		{"::ffff:8.8.8.8", "8.8.8.8", ClassPublic},
		{"64:ff9b::808:808", "64:ff9b::808:808", ClassPublic},
		{"[2001:4860:4860::8888]", "2001:4860:4860::8888", ClassPublic},
	}
	for _, tt := range tests {
		host, ip, isIP, err := NormalizeHost(tt.in)
		if err != nil || !isIP || host != tt.want || ip != netip.MustParseAddr(tt.want) {
			t.Errorf("NormalizeHost(%q) = %q, %v, %v, %v; want %s", tt.in, host, ip, isIP, err, tt.want)
			continue
		}
		if class, private := Classify(ip); class != tt.class || private != (tt.class != ClassPublic) {
			t.Errorf("Classify(NormalizeHost(%q)) = %s, %v; want %s", tt.in, class, private, tt.class)
		}
	}
}

func TestClassify(t *testing.T) {
	tests := []struct{ ip, class string }{
		{"0.0.0.0", ClassUnspecified},
		{"0.1.2.3", ClassUnspecified},
		{"127.0.0.1", ClassLoopback},
		{"127.255.255.254", ClassLoopback},
		{"10.0.0.1", ClassPrivate},
		{"10.255.255.255", ClassPrivate},
		{"11.0.0.1", ClassPublic},
		{"172.16.0.1", ClassPrivate},
		{"172.31.255.255", ClassPrivate},
		{"172.32.0.1", ClassPublic},
		{"172.15.255.255", ClassPublic},
		{"192.168.1.1", ClassPrivate},
		{"192.169.0.1", ClassPublic},
		{"169.254.1.1", ClassLinkLocal},
		{"169.254.169.254", ClassMetadata},
		{"169.254.169.253", ClassLinkLocal},
		{"169.254.170.2", ClassMetadata},
		{"100.100.100.200", ClassMetadata},
		{"100.100.100.201", ClassCGNAT},
		{"192.0.0.192", ClassMetadata},
		{"192.0.0.8", ClassReserved},
		{"168.63.129.16", ClassMetadata},
		{"168.63.129.17", ClassPublic},
		{"100.64.0.1", ClassCGNAT},
		{"100.127.255.255", ClassCGNAT},
		{"100.128.0.1", ClassPublic},
		{"100.63.255.255", ClassPublic},
		{"224.0.0.1", ClassMulticast},
		{"239.255.255.250", ClassMulticast},
		{"240.0.0.1", ClassReserved},
		{"255.255.255.255", ClassReserved},
		{"192.0.2.1", ClassReserved},
		{"192.88.99.1", ClassReserved},
		{"198.18.0.1", ClassReserved},
		{"198.19.255.255", ClassReserved},
		{"198.20.0.1", ClassPublic},
		{"198.51.100.1", ClassReserved},
		{"203.0.113.1", ClassReserved},
		{"203.0.114.1", ClassPublic},
		{"8.8.8.8", ClassPublic},
		{"1.1.1.1", ClassPublic},
		{"223.255.255.255", ClassPublic},

		{"::", ClassUnspecified},
		{"::1", ClassLoopback},
		{"::2", ClassUnspecified}, // IPv4-compatible 0.0.0.2
		{"::ffff:127.0.0.1", ClassLoopback},
		{"::ffff:169.254.169.254", ClassMetadata},
		{"::ffff:8.8.8.8", ClassPublic},
		{"::127.0.0.1", ClassLoopback},
		{"::8.8.8.8", ClassPublic},
		{"::ffff:0:7f00:1", ClassReserved}, // SIIT, in ::/8
		{"fd00:ec2::254", ClassMetadata},
		{"fd00:ec2::253", ClassPrivate},
		{"fc00::1", ClassPrivate},
		{"fd12:3456::1", ClassPrivate},
		{"fe80::1", ClassLinkLocal},
		{"febf::1", ClassLinkLocal},
		{"fec0::1", ClassReserved}, // deprecated site-local
		{"ff02::1", ClassMulticast},
		{"100::1", ClassReserved},
		{"100:0:0:1::1", ClassReserved}, // outside 2000::/3
		{"2001:db8::1", ClassReserved},
		{"3fff::1", ClassReserved},
		{"2001:2::1", ClassReserved},
		{"2001:10::1", ClassReserved},
		{"4000::1", ClassReserved},
		{"64:ff9b::a9fe:a9fe", ClassMetadata},
		{"64:ff9b::7f00:1", ClassLoopback},
		{"64:ff9b::808:808", ClassPublic},
		{"64:ff9b:1::a9fe:a9fe", ClassMetadata},                 // local-use NAT64, /96 layout
		{"64:ff9b:1:a9fe:a9:fe00::", ClassMetadata},             // local-use NAT64, /48 layout
		{"64:ff9b:1:808:8:800::", ClassPublic},                  // both layouts public
		{"64:ff9b:0:1::a9fe:a9fe", ClassReserved},               // not a NAT64 prefix, in ::/8
		{"2002:a9fe:a9fe::1", ClassMetadata},                    // 6to4
		{"2002:c0a8:101::1", ClassPrivate},                      // 6to4 of 192.168.1.1
		{"2002:808:808::1", ClassPublic},                        // 6to4 of 8.8.8.8
		{"2001:0:4136:e378:8000:63bf:f5ff:fffe", ClassPrivate},  // Teredo, client 10.0.0.1
		{"2001:0:4136:e378:8000:63bf:80ff:fffe", ClassLoopback}, // Teredo, client 127.0.0.1
		{"2001:0:a9fe:a9fe:8000:63bf:f7f7:f7f7", ClassMetadata}, // Teredo, server 169.254.169.254
		{"2001:0:4136:e378:8000:63bf:f7f7:f7f7", ClassPublic},   // Teredo, both public
		{"2606:4700:4700::1111", ClassPublic},
		{"2001:4860:4860::8888", ClassPublic},
		{"fe80::1%eth0", ClassLinkLocal},
	}
	for _, tt := range tests {
		ip := netip.MustParseAddr(tt.ip)
		class, private := Classify(ip)
		if class != tt.class || private != (tt.class != ClassPublic) {
			t.Errorf("Classify(%s) = %s, %v; want %s", tt.ip, class, private, tt.class)
		}
	}
	if class, private := Classify(netip.Addr{}); class != ClassUnspecified || !private {
		t.Errorf("Classify(zero Addr) = %s, %v; want unspecified, private", class, private)
	}
}

func TestPunycode(t *testing.T) {
	for _, tt := range []struct{ u, a string }{
		{"bücher", "bcher-kva"},
		{"münchen", "mnchen-3ya"},
		{"中国", "fiqs8s"},
		{"日本", "wgv71a"},
		{"рф", "p1ai"},
		{"ελ", "qxam"},
		{"한국", "3e0b707e"},
		{"مصر", "wgbh1c"},
		{"例え", "r8jz45g"},
		// RFC 3492 section 7.1 (A) Arabic (Egyptian), (B) Chinese (simplified).
		{"\u0644\u064a\u0647\u0645\u0627\u0628\u062a\u0643\u0644\u0645\u0648\u0634\u0639\u0631\u0628\u064a\u061f", "egbpdaj6bu4bxfgehfvwxn"},
		{"\u4ed6\u4eec\u4e3a\u4ec0\u4e48\u4e0d\u8bf4\u4e2d\u6587", "ihqwcrb4cv8a8dqg056pqjye"},
	} {
		a, err := punyEncode([]rune(tt.u))
		if err != nil || a != tt.a {
			t.Errorf("punyEncode(%q) = %q, %v; want %q", tt.u, a, err, tt.a)
		}
		u, err := punyDecode(tt.a)
		if err != nil || string(u) != tt.u {
			t.Errorf("punyDecode(%q) = %q, %v; want %q", tt.a, string(u), err, tt.u)
		}
	}
}
