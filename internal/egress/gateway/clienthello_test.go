package gateway

import (
	"bytes"
	"crypto/tls"
	"encoding/binary"
	"net"
	"strings"
	"testing"
	"time"
)

// clientHello captures the first flight crypto/tls sends for sni ("" sends
// none).
func clientHello(tb testing.TB, sni string) []byte {
	tb.Helper()
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	go tls.Client(a, &tls.Config{ServerName: sni, InsecureSkipVerify: true}).Handshake()
	b.SetDeadline(time.Now().Add(5 * time.Second))
	var buf []byte
	tmp := make([]byte, 4096)
	for {
		n, err := b.Read(tmp)
		buf = append(buf, tmp[:n]...)
		if st, _, _ := parseClientHello(buf); st == helloDone {
			return buf
		}
		if err != nil {
			tb.Fatalf("reading ClientHello: %v", err)
		}
	}
}

// refragment re-encodes the handshake of a one-record ClientHello into
// records of at most n bytes each.
func refragment(hello []byte, n int) []byte {
	hs := hello[5:]
	var out []byte
	for len(hs) > 0 {
		k := min(n, len(hs))
		out = append(out, 0x16, 3, 1)
		out = binary.BigEndian.AppendUint16(out, uint16(k))
		out = append(out, hs[:k]...)
		hs = hs[k:]
	}
	return out
}

// buildHello makes a minimal ClientHello, the same every time.
func buildHello(sni string) []byte {
	u16 := func(n int) []byte { return []byte{byte(n >> 8), byte(n)} }
	body := []byte{3, 3}
	body = append(body, make([]byte, 32)...)    // random
	body = append(body, 0)                      // session id
	body = append(body, 0, 2, 0x13, 0x01, 1, 0) // one cipher suite, null compression
	var exts []byte
	if sni != "" {
		entry := append(append([]byte{nameTypeHost}, u16(len(sni))...), sni...)
		list := append(u16(len(entry)), entry...)
		exts = append(append(append(exts, 0, extServerName), u16(len(list))...), list...)
	}
	exts = append(exts, 0, 43, 0, 3, 2, 3, 4) // supported_versions: TLS 1.3
	body = append(append(body, u16(len(exts))...), exts...)
	hs := append([]byte{1, 0, byte(len(body) >> 8), byte(len(body))}, body...)
	return append(append([]byte{0x16, 3, 1}, u16(len(hs))...), hs...)
}

func TestParseClientHello(t *testing.T) {
	for _, sni := range []string{"api.test", ""} {
		st, info, err := parseClientHello(buildHello(sni))
		if err != nil || st != helloDone || info.sni != sni || info.hasSNI != (sni != "") {
			t.Fatalf("built hello for %q: %v %v %+v", sni, st, err, info)
		}
	}
	hello := clientHello(t, "api.test")
	st, info, err := parseClientHello(hello)
	if err != nil || st != helloDone || info.sni != "api.test" || !info.hasSNI {
		t.Fatalf("parse: %v %v %+v", st, err, info)
	}
	// Every prefix needs more; none is an error.
	for i := range hello {
		if st, _, err := parseClientHello(hello[:i]); st != helloNeedMore || err != nil {
			t.Fatalf("prefix %d: %v %v", i, st, err)
		}
	}
	// Fragmented over many records, down to one byte each.
	for _, n := range []int{1, 3, 100} {
		st, info, err := parseClientHello(refragment(hello, n))
		if err != nil || st != helloDone || info.sni != "api.test" {
			t.Errorf("fragments of %d: %v %v %+v", n, st, err, info)
		}
	}
	// Trailing data after the hello (early data) does not matter.
	if st, info, _ := parseClientHello(append(append([]byte{}, hello...), 0x17, 3, 3, 0, 1, 0)); st != helloDone || info.sni != "api.test" {
		t.Errorf("with trailing data: %v %+v", st, info)
	}
	if st, info, err := parseClientHello(clientHello(t, "")); err != nil || st != helloDone || info.hasSNI {
		t.Errorf("no SNI: %v %v %+v", st, err, info)
	}
	for _, plain := range []string{"GET / HTTP/1.1\r\n", "SSH-2.0-x\r\n", "\x00"} {
		if st, _, err := parseClientHello([]byte(plain)); st != helloNotTLS || err != nil {
			t.Errorf("%q: %v %v", plain, st, err)
		}
	}
}

func TestParseClientHelloRejects(t *testing.T) {
	hello := clientHello(t, "api.test")
	mutate := func(f func(b []byte) []byte) []byte { return f(append([]byte{}, hello...)) }
	cases := map[string][]byte{
		"SSLv2-style version": mutate(func(b []byte) []byte { b[1] = 2; return b }),
		"not a ClientHello":   mutate(func(b []byte) []byte { b[5] = 2; return b }),
		"alert record":        {0x16, 3, 1, 0, 1, 1, 0x15, 3, 1, 0, 2, 2, 40},
		"empty record":        {0x16, 3, 1, 0, 0},
		"oversized record":    {0x16, 3, 1, 0x48, 0x01},
		"huge ClientHello":    {0x16, 3, 1, 0, 4, 1, 0xff, 0xff, 0xff},
		"truncated body":      {0x16, 3, 1, 0, 6, 1, 0, 0, 2, 3, 3},
		"duplicate SNI": func() []byte {
			// Append a second server_name extension for other.test.
			ext := []byte{0, 0}
			name := []byte("other.test")
			list := append([]byte{0}, binary.BigEndian.AppendUint16(nil, uint16(len(name)))...)
			list = append(list, name...)
			data := binary.BigEndian.AppendUint16(nil, uint16(len(list)))
			data = append(data, list...)
			ext = binary.BigEndian.AppendUint16(ext, uint16(len(data)))
			ext = append(ext, data...)
			return withExtra(hello, ext)
		}(),
	}
	for name, b := range cases {
		if st, info, err := parseClientHello(b); err == nil {
			t.Errorf("%s: accepted as %v %+v", name, st, info)
		}
	}
}

// withExtra appends an extension to a one-record ClientHello, fixing up
// the three lengths around it.
func withExtra(hello, ext []byte) []byte {
	b := append(append([]byte{}, hello...), ext...)
	add := len(ext)
	binary.BigEndian.PutUint16(b[3:], uint16(int(binary.BigEndian.Uint16(b[3:]))+add))
	m := int(b[6])<<16 | int(b[7])<<8 | int(b[8]) + add
	b[6], b[7], b[8] = byte(m>>16), byte(m>>8), byte(m)
	// The extensions vector starts after version, random, session id,
	// cipher suites and compression methods.
	p := 9 + 2 + 32
	p += 1 + int(b[p])
	p += 2 + int(binary.BigEndian.Uint16(b[p:]))
	p += 1 + int(b[p])
	binary.BigEndian.PutUint16(b[p:], uint16(int(binary.BigEndian.Uint16(b[p:]))+add))
	return b
}

func TestSNIRule(t *testing.T) {
	name := target{host: "api.test", port: 443}
	lit, _ := parseTarget("203.0.113.10", 443)
	other := target{host: "api.test", port: 8443}
	for _, tc := range []struct {
		t    target
		st   helloState
		info helloInfo
		ok   bool
	}{
		{name, helloDone, helloInfo{sni: "api.test", hasSNI: true}, true},
		{name, helloDone, helloInfo{sni: "API.Test.", hasSNI: true}, true},
		{name, helloDone, helloInfo{sni: "other.test", hasSNI: true}, false},
		{name, helloDone, helloInfo{sni: "api.test.evil", hasSNI: true}, false},
		{name, helloDone, helloInfo{}, false},
		{name, helloNotTLS, helloInfo{}, false},
		{lit, helloDone, helloInfo{}, true},
		{lit, helloDone, helloInfo{sni: "anything", hasSNI: true}, true},
		{lit, helloNotTLS, helloInfo{}, false},
		{other, helloNotTLS, helloInfo{}, true},
		{other, helloDone, helloInfo{sni: "other.test", hasSNI: true}, false},
	} {
		if rule := sniRule(tc.t, tc.st, tc.info); (rule == "") != tc.ok {
			t.Errorf("%v %v %+v: %q", tc.t, tc.st, tc.info, rule)
		}
	}
}

func TestParseTarget(t *testing.T) {
	for in, want := range map[string]string{
		"API.Test.":        "api.test",
		"x_y-z.test":       "x_y-z.test",
		"::ffff:127.0.0.1": "127.0.0.1",
		"2001:DB8::1":      "2001:db8::1",
		"1.2.3.4":          "1.2.3.4",
	} {
		if tg, err := parseTarget(in, 1); err != nil || tg.host != want {
			t.Errorf("%q: %v %q, want %q", in, err, tg.host, want)
		}
	}
	for _, in := range []string{"", ".", "a..b", "127.1", "0x7f.1", "2130706433", "a b", "a/b", "fe80::1%eth0", "bücher.test", strings.Repeat("a", 64) + ".test", "x\x00.test"} {
		if tg, err := parseTarget(in, 80); err == nil {
			t.Errorf("%q accepted as %+v", in, tg)
		}
	}
	for _, port := range []int{0, -1, 65536} {
		if _, err := parseTarget("api.test", port); err == nil {
			t.Errorf("port %d accepted", port)
		}
	}
}

// FuzzParseClientHello: arbitrary bytes never panic, and whatever parses
// as a complete ClientHello parses the same after refragmenting.
func FuzzParseClientHello(f *testing.F) {
	// Deterministic seeds: crypto/tls makes a different hello every run,
	// and a seed corpus that changes confuses the fuzzing engine.
	for _, sni := range []string{"api.test", "", "other.test"} {
		f.Add(buildHello(sni))
	}
	f.Add([]byte{0x16, 3, 1, 0, 4, 1, 0, 0, 0})
	f.Add([]byte("GET / HTTP/1.1\r\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		st, info, err := parseClientHello(b)
		if err != nil || st != helloDone || len(b) < 5 || b[0] != 0x16 {
			return
		}
		n := int(binary.BigEndian.Uint16(b[3:]))
		if 5+n > len(b) {
			return
		}
		one := b[:5+n]
		if st1, _, _ := parseClientHello(one); st1 != helloDone {
			return // the hello spans several records already
		}
		st2, info2, err2 := parseClientHello(refragment(one, 7))
		if err2 != nil || st2 != helloDone || info2 != info {
			t.Errorf("refragmented: %v %v %+v, was %+v", st2, err2, info2, info)
		}
		if bytes.Contains(b, []byte{0}) && info.hasSNI && strings.Contains(info.sni, "\x00") {
			if rule := sniRule(target{host: "api.test", port: 443}, st, info); rule == "" {
				t.Errorf("SNI with NUL matched: %q", info.sni)
			}
		}
	})
}
