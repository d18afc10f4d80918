package gateway

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"
)

var v6IP = netip.MustParseAddr("2001:db8::10")

// TestSOCKSMatrix: the allow/deny matrix through SOCKS5, each denial next
// to its allowed control, for all three address types.
func TestSOCKSMatrix(t *testing.T) {
	w := newWorld(t, nil)
	w.route(netip.AddrPortFrom(v6IP, 80), w.plain.Listener.Addr().String())
	client := w.socksClient()
	for _, url := range []string{"https://api.test/", "http://api.test/", "https://other.test/"} {
		resp, err := client.Get(url)
		if err != nil {
			t.Fatalf("GET %s: %v", url, err)
		}
		if body := readBody(t, resp); resp.StatusCode != 200 || !strings.HasPrefix(body, "hello ") {
			t.Errorf("GET %s: %d %q", url, resp.StatusCode, body)
		}
	}
	client.CloseIdleConnections()
	w.waitRecords(3)
	w.reset()

	loop := netip.MustParseAddrPort(w.plain.Listener.Addr().String())
	for _, tc := range []struct {
		addr  string
		allow bool
		rule  string
	}{
		{"evil.test:443", false, "host evil.test not in allowlist"},
		{"internal.test:80", false, "private address 10.0.0.5"},
		{"169.254.169.254:80", false, "ip literal 169.254.169.254 not allowed"},
		{loop.String(), false, "ip literal 127.0.0.1 not allowed"},
		{"[2001:db8::10]:80", false, "ip literal 2001:db8::10 not allowed"},
	} {
		w.reset()
		w.gw.SetPolicy(allow(defaultNames))
		_, err := w.socksDial(tc.addr)
		if err == nil || !strings.Contains(err.Error(), "not allowed by ruleset") {
			t.Errorf("SOCKS %s: %v, want not allowed", tc.addr, err)
		}
		if rec := w.record(1); rec.Allowed || rec.Rule != tc.rule || rec.Method != "CONNECT" || rec.Proto != "socks" {
			t.Errorf("SOCKS %s: record %+v, want denied by %q", tc.addr, rec, tc.rule)
		}
		// The control: the same destination with the permission granted.
		host, _, _ := net.SplitHostPort(tc.addr)
		p := allow(append(defaultNames, host))
		if ip, err := netip.ParseAddr(host); err == nil {
			p.ips[ip] = true
		}
		if tc.addr == "internal.test:80" {
			p.ips[privIP] = true
		}
		w.gw.SetPolicy(p)
		c, err := w.socksDial(tc.addr)
		if tc.addr == "evil.test:443" || tc.addr == "169.254.169.254:80" {
			// Allowed by policy, but not in the test world: the gateway got
			// as far as resolving or dialing.
			if err == nil || strings.Contains(err.Error(), "not allowed") {
				t.Errorf("SOCKS %s allowed: %v, want unreachable", tc.addr, err)
			}
			w.record(2)
			continue
		}
		if err != nil {
			t.Fatalf("SOCKS %s allowed: %v", tc.addr, err)
		}
		if resp, body, err := get(c, bufio.NewReader(c), "x.test", "/"); err != nil || resp.StatusCode != 200 || body != "hello x.test" {
			t.Errorf("SOCKS %s allowed: %v %q", tc.addr, err, body)
		}
		c.Close()
		if rec := w.record(2); !rec.Allowed {
			t.Errorf("SOCKS %s allowed: record %+v", tc.addr, rec)
		}
	}
}

// TestSOCKSSNIMismatch: a SOCKS tunnel to a name carries TLS for that
// name only; nothing of a mismatching ClientHello reaches upstream.
func TestSOCKSSNIMismatch(t *testing.T) {
	w := newWorld(t, nil)
	c, err := w.socksDial("api.test:443")
	if err != nil {
		t.Fatal(err)
	}
	if err := tlsGet(c, "other.test", w); err == nil {
		t.Fatal("TLS for other.test through SOCKS to api.test succeeded")
	}
	if rec := w.record(1); rec.Allowed || !strings.HasPrefix(rec.Rule, "sni mismatch") || rec.BytesUp != 0 {
		t.Errorf("record %+v", rec)
	}
	c, err = w.socksDial("api.test:443")
	if err != nil {
		t.Fatal(err)
	}
	if err := tlsGet(c, "api.test", w); err != nil {
		t.Fatalf("matching SNI: %v", err)
	}
	c.Close()
	if rec := w.record(2); !rec.Allowed || rec.BytesUp == 0 {
		t.Errorf("record %+v", rec)
	}
}

// socksRaw performs a greeting offering methods and, if req is non-nil,
// sends it; it returns the bytes answered before the connection closed or
// went quiet.
func socksRaw(t *testing.T, w *world, greeting, req []byte) []byte {
	t.Helper()
	c, err := net.Dial("tcp", w.socksProxy)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write(greeting)
	if req != nil {
		c.Write(req)
	}
	c.SetReadDeadline(time.Now().Add(3 * time.Second))
	b, err := io.ReadAll(c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Errorf("the gateway neither answered nor closed: % x", b)
	}
	return b
}

func socksReq(cmd, atyp byte, addr []byte, port uint16) []byte {
	b := []byte{5, cmd, 0, atyp}
	if atyp == atypDomain {
		b = append(b, byte(len(addr)))
	}
	b = append(b, addr...)
	return binary.BigEndian.AppendUint16(b, port)
}

// TestSOCKSProtocol: only no-auth and CONNECT; UDP ASSOCIATE and BIND are
// refused and audited; SOCKS4 and garbage are closed.
func TestSOCKSProtocol(t *testing.T) {
	w := newWorld(t, nil)
	noAuth := []byte{5, 1, 0}
	for _, tc := range []struct {
		name     string
		greeting []byte
		req      []byte
		want     []byte
		method   string
		rule     string
	}{
		{"udp associate", noAuth, socksReq(cmdUDPAssociate, atypIPv4, []byte{0, 0, 0, 0}, 0), []byte{5, 0, 5, 7}, "UDP ASSOCIATE", "command not supported"},
		{"bind", noAuth, socksReq(cmdBind, atypDomain, []byte("api.test"), 443), []byte{5, 0, 5, 7}, "BIND", "command not supported"},
		{"unknown command", noAuth, socksReq(9, atypDomain, []byte("api.test"), 443), []byte{5, 0, 5, 7}, "", ""},
		{"unknown address type", noAuth, []byte{5, 1, 0, 9, 1, 2}, []byte{5, 0, 5, 8}, "", ""},
		{"unresolvable", noAuth, socksReq(cmdConnect, atypDomain, []byte("nowhere.test"), 443), []byte{5, 0, 5, 4}, "CONNECT", ""},
		{"dial failure", noAuth, socksReq(cmdConnect, atypDomain, []byte("down.test"), 443), []byte{5, 0, 5, 5}, "CONNECT", "name down.test; public address"},
		{"invalid name", noAuth, socksReq(cmdConnect, atypDomain, []byte("a/b"), 443), []byte{5, 0, 5, 4}, "CONNECT", ""},
		{"auth only", []byte{5, 1, 2}, nil, []byte{5, 0xff}, "", ""},
		{"socks4", []byte{4, 1, 0, 80, 127, 0, 0, 1, 0}, nil, nil, "", ""},
		{"http", []byte("GET / HTTP/1.1\r\n\r\n"), nil, nil, "", ""},
	} {
		w.reset()
		w.gw.SetPolicy(allow(append(defaultNames, "nowhere.test")))
		got := socksRaw(t, w, tc.greeting, tc.req)
		if len(got) > 4 {
			got = got[:4]
		}
		if string(got) != string(tc.want) {
			t.Errorf("%s: answered % x, want % x", tc.name, got, tc.want)
		}
		rec := w.record(1)
		if rec.Allowed != (tc.name == "dial failure") || rec.Method != tc.method || (tc.rule != "" && !strings.HasPrefix(rec.Rule, tc.rule)) || rec.Proto != "socks" {
			t.Errorf("%s: record %+v", tc.name, rec)
		}
	}
	if d := w.dials(); len(d) != 0 {
		t.Errorf("dialed %v", d)
	}
	// The control: CONNECT works on the same gateway.
	c, err := w.socksDial("api.test:80")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if resp, _, err := get(c, bufio.NewReader(c), "api.test", "/"); err != nil || resp.StatusCode != 200 {
		t.Errorf("CONNECT control: %v", err)
	}
}
