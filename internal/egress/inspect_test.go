package egress

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/big"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/egress/gateway"
	"github.com/airlock-dev/airlock/internal/policy"
	"github.com/airlock-dev/airlock/internal/runtime"
)

// listenersOnly is a runtime.Sandbox with real listeners and nothing else:
// Start only serves its listeners (a real sandbox is in tests/e2e).
type listenersOnly struct {
	runtime.Sandbox
	ls []net.Listener
}

func (s *listenersOnly) Listeners() []net.Listener { return s.ls }

// seen is what an upstream server got.
type seen struct {
	host, path, query string
	header            http.Header
}

type upstream struct {
	srv  *httptest.Server
	port int
	mu   sync.Mutex
	got  []seen
	sent []byte // the last body a reflect path sent
	// proceed lets /repos/stream send its second event.
	proceed chan struct{}
}

func (u *upstream) last(t *testing.T) seen {
	t.Helper()
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.got) == 0 {
		t.Fatal("the upstream saw no request")
	}
	return u.got[len(u.got)-1]
}

func (u *upstream) count() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.got)
}

func newUpstream(t testing.TB, cert *tls.Certificate) *upstream {
	u := &upstream{proceed: make(chan struct{})}
	u.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.got = append(u.got, seen{host: r.Host, path: r.URL.EscapedPath(), query: r.URL.RawQuery, header: r.Header.Clone()})
		u.mu.Unlock()
		io.Copy(io.Discard, r.Body)
		if u.reflect(w, r) {
			return
		}
		w.Header().Set("X-Echo", r.Header.Get("Authorization")) // a server that echoes credentials
		if r.URL.Path == "/repos/redirect" {                    // ... and redirects with the query, and sends it as a trailer
			w.Header().Set("Location", "/next?"+r.URL.RawQuery)
			w.Header().Set("Trailer", "X-T")
			w.WriteHeader(http.StatusFound)
			io.WriteString(w, "moved")
			w.(http.Flusher).Flush() // chunked, so that the trailer is sent
			w.Header().Set("X-T", r.Header.Get("Authorization"))
			return
		}
		io.WriteString(w, "ok "+r.Method+" "+r.URL.Path)
	}))
	if cert != nil {
		u.srv.TLS = &tls.Config{Certificates: []tls.Certificate{*cert}}
		u.srv.StartTLS()
	} else {
		u.srv.Start()
	}
	t.Cleanup(u.srv.Close)
	u.port = u.srv.Listener.Addr().(*net.TCPAddr).Port
	return u
}

// reflect serves the paths of a server that reflects the request into
// its response body, as echo and debug endpoints do:
//
//	/repos/reflect        the request's headers and query, a few bytes per
//	                      chunk (each flushed: its own TLS record)
//	/repos/reflect-large  1 MiB of random bytes, the reflection, 2 MiB
//	                      more, the reflection again, with a Content-Length
//	/repos/reflect-gzip   the reflection gzip-encoded, whatever was asked
//	/repos/reflect-b64    the reflection base64-encoded at each of the
//	                      three offsets of a byte group
//	/repos/reflect-br     a body said to be brotli-encoded
//	/repos/nocontent      204, no body
//	/repos/malformed      a malformed response: the query's key
//	/repos/stream         an event with the Authorization header, then
//	                      another once proceed is closed
//	/repos/random         3 MiB of random bytes, gzip-encoded if asked to
//	                      (a control: nothing to scrub)
func (u *upstream) reflect(w http.ResponseWriter, r *http.Request) bool {
	what, ok := strings.CutPrefix(r.URL.Path, "/repos/")
	if !ok {
		return false
	}
	if what == "bench" { // 64 MiB of random bytes, for BenchmarkInspectedDownload
		w.Header().Set("Content-Length", fmt.Sprint(len(benchBody())))
		w.Write(benchBody())
		return true
	}
	var dump bytes.Buffer
	keys := slices.Sorted(maps.Keys(r.Header))
	for _, k := range keys {
		fmt.Fprintf(&dump, "%s: %s\n", k, strings.Join(r.Header[k], ", "))
	}
	fmt.Fprintf(&dump, "query: %s\nkey: %s\n", r.URL.RawQuery, r.URL.Query().Get("key"))
	js, _ := json.Marshal(r.Header) // HTML characters as \u00XX
	dump.Write(js)
	random := func(n int) []byte {
		b := make([]byte, n)
		mrand.NewChaCha8([32]byte{byte(n), byte(n >> 8), byte(n >> 16)}).Read(b)
		return b
	}
	var body []byte
	switch what {
	case "reflect":
		for b := dump.Bytes(); len(b) > 0; b = b[min(len(b), 5):] {
			w.Write(b[:min(len(b), 5)])
			w.(http.Flusher).Flush()
		}
		return true
	case "reflect-large":
		body = slices.Concat(random(1<<20), dump.Bytes(), random(2<<20), dump.Bytes())
	case "reflect-gzip":
		var zb bytes.Buffer
		zw := gzip.NewWriter(&zb)
		zw.Write(dump.Bytes())
		zw.Close()
		w.Header().Set("Content-Encoding", "gzip")
		body = zb.Bytes()
	case "stream": // an event stream: the second event waits for proceed
		fmt.Fprintf(w, "data: %s\n\n", r.Header.Get("Authorization"))
		w.(http.Flusher).Flush()
		select {
		case <-u.proceed:
			io.WriteString(w, "data: second\n\n")
		case <-time.After(10 * time.Second):
			io.WriteString(w, "data: late\n\n")
		}
		return true
	case "nocontent":
		w.WriteHeader(http.StatusNoContent)
		return true
	case "malformed": // a status line that is the query's key
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			fmt.Fprintf(conn, "leak:%s\r\n\r\n", r.URL.Query().Get("key"))
			conn.Close()
		}
		return true
	case "reflect-b64": // the whole reflection base64-encoded, three times, each shifted by a byte
		for i := range 3 {
			body = append(body, base64.StdEncoding.EncodeToString(append(bytes.Repeat([]byte{'#'}, i), dump.Bytes()...))...)
			body = append(body, '\n')
		}
	case "reflect-br":
		w.Header().Set("Content-Encoding", "br")
		body = dump.Bytes() // not brotli: the gateway must not look
	case "random":
		body = random(3 << 20)
		if strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
			var zb bytes.Buffer
			zw := gzip.NewWriter(&zb)
			zw.Write(body)
			zw.Close()
			w.Header().Set("Content-Encoding", "gzip")
			body = zb.Bytes()
		}
	default:
		return false
	}
	u.mu.Lock()
	u.sent = body
	u.mu.Unlock()
	w.Header().Set("Content-Length", fmt.Sprint(len(body)))
	w.Write(body)
	return true
}

func (u *upstream) lastSent() []byte {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.sent
}

// testPKI makes a CA and a server certificate for names.
func testPKI(t testing.TB, names ...string) (*x509.CertPool, *tls.Certificate) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caT := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "upstream test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caT, caT, caKey.Public(), caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	lt := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: names[0]}, DNSNames: names,
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		NotBefore:   time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, lt, caCert, key.Public(), caKey)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(caCert)
	return pool, &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

type harness struct {
	api, other, plain *upstream
	upstreamRoots     *x509.CertPool
	sandboxRoots      *x509.CertPool // what the sandbox trusts: the sandbox CA and the upstream CA
	setup             *Setup
	gw                *Gateway
	httpAddr, socks   string
	logs              *bytes.Buffer
	mu                sync.Mutex
	records           []gateway.Record
}

const testSecret = "s3cr3t-Token_value"

func newHarness(t testing.TB, n policy.Network, withSetup bool, secret ...string) *harness {
	t.Helper()
	h := &harness{logs: &bytes.Buffer{}}
	var cert *tls.Certificate
	h.upstreamRoots, cert = testPKI(t, "api.test", "other.test")
	h.api, h.other, h.plain = newUpstream(t, cert), newUpstream(t, cert), newUpstream(t, nil)
	h.sandboxRoots = h.upstreamRoots.Clone()
	t.Setenv("AIRLOCK_TEST_SECRET", testSecret)
	if len(secret) > 0 {
		t.Setenv("AIRLOCK_TEST_SECRET", secret[0])
	}
	var err error
	if withSetup {
		h.setup, err = Prepare(t.TempDir(), "test", n, t.TempDir(), nil)
		if err != nil {
			t.Fatal(err)
		}
		h.sandboxRoots.AddCert(h.setup.CA.Certificate())
	}
	var ls []net.Listener
	for range 2 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
	}
	h.httpAddr, h.socks = ls[0].Addr().String(), ls[1].Addr().String()
	hosts := map[string][]netip.Addr{"api.test": {netip.MustParseAddr("127.0.0.1")}, "other.test": {netip.MustParseAddr("127.0.0.1")}}
	var logMu sync.Mutex
	h.gw, err = Start(&listenersOnly{ls: ls}, n, Options{
		Sandbox: "test", Hosts: hosts, Setup: h.setup, UpstreamRoots: h.upstreamRoots,
		Log: slog.New(slog.NewTextHandler(lockedWriter{&logMu, h.logs}, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Audit: func(r gateway.Record) {
			h.mu.Lock()
			h.records = append(h.records, r)
			h.mu.Unlock()
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.gw.Close() })
	return h
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(p)
}

// client is an HTTP client configured as a sandbox's would be: proxy, and
// the roots the sandbox trusts.
func (h *harness) client(socks bool) *http.Client {
	pu, _ := url.Parse("http://" + h.httpAddr)
	if socks {
		pu, _ = url.Parse("socks5h://" + h.socks)
	}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		Proxy:           http.ProxyURL(pu),
		TLSClientConfig: &tls.Config{RootCAs: h.sandboxRoots},
	}}
}

func (h *harness) do(t *testing.T, c *http.Client, method, rawURL string, hdr map[string]string) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequest(method, rawURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, rawURL, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

func (h *harness) recordsFor(host string) []gateway.Record {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []gateway.Record
	for _, r := range h.records {
		if r.Host == host {
			out = append(out, r)
		}
	}
	return out
}

func testNetwork() policy.Network {
	return policy.Network{
		Mode:  policy.NetworkAllowlist,
		Allow: []string{"api.test", "other.test", "127.0.0.1"},
		HTTP:  []policy.HTTPRule{{Hosts: []string{"api.test"}, Methods: []string{"GET", "HEAD"}, Paths: []string{"/repos/", "/user"}}},
		Credentials: []policy.Credential{
			{Name: "token", Hosts: []string{"api.test"}, Secret: "env:AIRLOCK_TEST_SECRET", Env: "API_TOKEN"},
			{Name: "apikey", Hosts: []string{"api.test"}, Secret: "env:AIRLOCK_TEST_SECRET", Header: "X-Api-Key", Format: "key {secret}"},
		},
	}
}

func TestCredentialInjection(t *testing.T) {
	h := newHarness(t, testNetwork(), true)
	ph := h.setup.Env["API_TOKEN"]
	if !strings.HasPrefix(ph, "airlock-placeholder-") || strings.Contains(ph, testSecret) {
		t.Fatalf("placeholder %q", ph)
	}
	for _, socks := range []bool{false, true} {
		c := h.client(socks)
		// The bound host gets the secret: in place of the placeholder in a
		// header and in the query, and as the configured header.
		st, body, rh := h.do(t, c, "GET", fmt.Sprintf("https://api.test:%d/repos/x?key=%s&a=1", h.api.port, ph), map[string]string{"Authorization": "Bearer " + ph})
		if st != 200 || body != "ok GET /repos/x" {
			t.Fatalf("socks=%v: %d %q", socks, st, body)
		}
		// The server echoed the secret; the sandbox gets the placeholder.
		if rh.Get("X-Echo") != "Bearer "+ph {
			t.Fatalf("socks=%v: echoed header reached the sandbox as %q", socks, rh.Get("X-Echo"))
		}
		got := h.api.last(t)
		if got.header.Get("Authorization") != "Bearer "+testSecret || got.header.Get("X-Api-Key") != "key "+testSecret || got.query != "key="+testSecret+"&a=1" {
			t.Fatalf("socks=%v: the bound upstream saw %v, query %q", socks, got.header, got.query)
		}
		// Any other host keeps the placeholder, and gets no added header.
		st, _, _ = h.do(t, c, "GET", fmt.Sprintf("https://other.test:%d/repos/x?key=%s", h.other.port, ph), map[string]string{"Authorization": "Bearer " + ph})
		if st != 200 {
			t.Fatalf("other host: %d", st)
		}
		got = h.other.last(t)
		if got.header.Get("Authorization") != "Bearer "+ph || got.header.Get("X-Api-Key") != "" || got.query != "key="+ph {
			t.Fatalf("socks=%v: an unbound upstream saw %v, query %q", socks, got.header, got.query)
		}
	}
	// Basic authorization (git over https) is decoded and re-encoded.
	c := h.client(false)
	basic := "Basic " + base64.StdEncoding.EncodeToString([]byte("x-access-token:"+ph))
	if st, _, _ := h.do(t, c, "GET", fmt.Sprintf("https://api.test:%d/repos/y", h.api.port), map[string]string{"Authorization": basic}); st != 200 {
		t.Fatalf("basic: %d", st)
	}
	if got := h.api.last(t).header.Get("Authorization"); got != "Basic "+base64.StdEncoding.EncodeToString([]byte("x-access-token:"+testSecret)) {
		t.Fatalf("basic: upstream saw %q", got)
	}
	// Plain HTTP to the bound host: never the secret (it would travel in
	// clear), but the request rules apply.
	if st, _, _ := h.do(t, c, "GET", fmt.Sprintf("http://api.test:%d/repos/z", h.plain.port), map[string]string{"Authorization": "Bearer " + ph}); st != 200 {
		t.Fatalf("plain: %d", st)
	}
	if got := h.plain.last(t).header; got.Get("Authorization") != "Bearer "+ph || got.Get("X-Api-Key") != "" {
		t.Fatalf("plain HTTP carried the secret: %v", got)
	}
	if st, _, hdr := h.do(t, c, "POST", fmt.Sprintf("http://api.test:%d/repos/z", h.plain.port), nil); st != 403 || !strings.Contains(hdr.Get("X-Airlock-Rule"), "no http rule allows POST") {
		t.Fatalf("plain POST: %d %v", st, hdr)
	}

	// The audit names the credentials, never their values; neither the
	// records nor the gateway's log hold the secret.
	// A request's record is written once its response has been relayed,
	// which can be just after the client read it: wait (bounded) for it.
	var https []gateway.Record
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		https = nil
		for _, r := range h.recordsFor("api.test") {
			if r.Proto == "https" {
				https = append(https, r)
			}
			if strings.Contains(fmt.Sprintf("%+v", r), testSecret) {
				t.Fatalf("a record holds the secret: %+v", r)
			}
		}
		if len(https) >= 3 || time.Now().After(deadline) {
			break
		}
	}
	if len(https) != 3 || https[0].Credential != "token,apikey" || https[0].Path != "/repos/x" || !https[0].Allowed || https[0].Addr == "" {
		t.Fatalf("https records: %+v", https)
	}
	h.gw.Close()
	if strings.Contains(h.logs.String(), testSecret) {
		t.Fatal("the gateway's log holds the secret")
	}
	if !strings.Contains(h.logs.String(), "api.test") {
		t.Fatal("the log is empty: the check above proves nothing")
	}
}

func TestRequestRules(t *testing.T) {
	h := newHarness(t, testNetwork(), true)
	c := h.client(false)
	base := fmt.Sprintf("https://api.test:%d", h.api.port)
	for _, tc := range []struct {
		method, path string
		allowed      bool
	}{
		{"GET", "/repos/a/b", true},
		{"HEAD", "/repos/a", true},
		{"GET", "/user", true},
		{"GET", "/user/keys", true},
		{"POST", "/repos/a/b", false},
		{"DELETE", "/repos/a", false},
		{"GET", "/users", false},
		{"GET", "/admin", false},
		{"GET", "/repos/%2e%2e/admin", false},
		{"GET", "/repos/..%2fadmin", false},
		{"GET", "/repos//x", false},
		{"GET", "/repos/..;/admin", false},
		{"GET", "/repos/%252e%252e/admin", false},
		{"GET", "/repos/a;b/c", true},
	} {
		before := h.api.count()
		req, _ := http.NewRequest(tc.method, base+"/", nil)
		req.URL.RawPath, req.URL.Path = tc.path, mustUnescape(tc.path)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", tc.method, tc.path, err)
		}
		resp.Body.Close()
		reached := h.api.count() > before
		if tc.allowed != (resp.StatusCode == 200) || reached != tc.allowed {
			t.Errorf("%s %s: status %d, reached upstream %v; want allowed=%v", tc.method, tc.path, resp.StatusCode, reached, tc.allowed)
		}
		if !tc.allowed && resp.Header.Get("X-Airlock-Rule") == "" {
			t.Errorf("%s %s: a denial without the rule", tc.method, tc.path)
		}
	}
	// The rules change while the sandbox runs; credentials may not.
	n := testNetwork()
	n.HTTP[0].Methods = append(n.HTTP[0].Methods, "POST")
	if err := h.gw.SetNetwork(n); err != nil {
		t.Fatal(err)
	}
	if st, _, _ := h.do(t, c, "POST", base+"/repos/a", nil); st != 200 {
		t.Fatalf("POST after the change: %d", st)
	}
	n.Credentials[0].Hosts = []string{"other.test"}
	if err := h.gw.SetNetwork(n); err == nil || !strings.Contains(err.Error(), "credentials cannot change") {
		t.Fatalf("changing credentials: %v", err)
	}
	// A Host header other than the tunnel's is refused inside it.
	req, _ := http.NewRequest("GET", base+"/repos/a", nil)
	req.Host = "other.test"
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 403 || resp.Header.Get("X-Airlock-Rule") != "host header mismatch" {
		t.Fatalf("host mismatch inside the tunnel: %d %v", resp.StatusCode, resp.Header)
	}
}

func mustUnescape(p string) string {
	s, err := url.PathUnescape(p)
	if err != nil {
		panic(err)
	}
	return s
}

// An IP-literal tunnel may not carry an inspected host's name in its SNI
// (that would skip its rules); another name is fine (the control).
func TestInspectedHostByAddress(t *testing.T) {
	h := newHarness(t, testNetwork(), true)
	for _, tc := range []struct {
		sni  string
		port int
		ok   bool
	}{{"other.test", h.other.port, true}, {"api.test", h.api.port, false}} {
		conn, err := net.DialTimeout("tcp", h.httpAddr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		conn.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(conn, "CONNECT 127.0.0.1:%d HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n", tc.port, tc.port)
		br := bufio.NewReader(conn)
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("CONNECT: %v %v", resp, err)
		}
		tc2 := tls.Client(conn, &tls.Config{ServerName: tc.sni, RootCAs: h.sandboxRoots})
		err = tc2.Handshake()
		if (err == nil) != tc.ok {
			t.Fatalf("SNI %s via 127.0.0.1: handshake error %v, want ok=%v", tc.sni, err, tc.ok)
		}
		conn.Close()
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		for _, r := range h.recordsFor("127.0.0.1") {
			if !r.Allowed && strings.Contains(r.Rule, "sni names an inspected host: api.test") {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no denial recorded: %+v", h.records)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Without a CA, an inspected host is refused (its rules could not be
// enforced); other hosts work.
func TestInspectionNeedsCA(t *testing.T) {
	n := testNetwork()
	n.Credentials = nil
	h := newHarness(t, n, false)
	c := h.client(false)
	if _, err := c.Get(fmt.Sprintf("https://api.test:%d/repos/x", h.api.port)); err == nil {
		t.Fatal("an inspected host was reached without a CA")
	}
	if st, _, _ := h.do(t, c, "GET", fmt.Sprintf("https://other.test:%d/x", h.other.port), nil); st != 200 {
		t.Fatalf("control: %d", st)
	}
	if h.api.count() != 0 {
		t.Fatal("the upstream saw a request")
	}
	// And credentials need a Setup.
	if _, err := Start(&listenersOnly{}, testNetwork(), Options{}); err == nil {
		t.Fatal("credentials without a setup started")
	}
}

func TestPrepareAndLoad(t *testing.T) {
	t.Setenv("AIRLOCK_TEST_SECRET", testSecret)
	dir := t.TempDir()
	// An image whose system bundle holds a certificate and other things;
	// only the certificate is kept.
	base := filepath.Join(dir, "image")
	os.MkdirAll(filepath.Join(base, "etc/ssl/certs"), 0o755)
	os.WriteFile(filepath.Join(base, BundlePath), []byte("junk\n-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n-----BEGIN PRIVATE KEY-----\nMIIB\n-----END PRIVATE KEY-----\n"), 0o644)
	n := testNetwork()
	s, err := Prepare(filepath.Join(dir, "sb"), "x", n, base, nil)
	if err != nil {
		t.Fatal(err)
	}
	bundle, _ := os.ReadFile(filepath.Join(dir, "sb", bundleFile))
	if string(bundle) != "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"+string(s.CA.CertPEM()) {
		t.Fatalf("bundle:\n%s", bundle)
	}
	// An image whose bundle is an absolute symlink: it resolves inside the
	// image (to nothing), never to the host's file.
	host := filepath.Join(dir, "host-file.pem")
	os.WriteFile(host, []byte("-----BEGIN CERTIFICATE-----\nSE9TVA==\n-----END CERTIFICATE-----\n"), 0o644)
	evil := filepath.Join(dir, "evil")
	os.MkdirAll(filepath.Join(evil, "etc/ssl/certs"), 0o755)
	os.Symlink(host, filepath.Join(evil, BundlePath))
	s2, err := Prepare(filepath.Join(dir, "sb2"), "x", n, evil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "sb2", bundleFile)); string(b) != string(s2.CA.CertPEM()) {
		t.Fatalf("a symlink in the image reached a host file:\n%s", b)
	}
	if fi, _ := os.Stat(filepath.Join(dir, "sb", caKeyFile)); fi.Mode().Perm() != 0o600 {
		t.Fatalf("key mode %v", fi.Mode())
	}
	for _, f := range []string{bundleFile, caFile, placeholderFile, caKeyFile} {
		b, _ := os.ReadFile(filepath.Join(dir, "sb", f))
		if bytes.Contains(b, []byte(testSecret)) {
			t.Fatalf("%s holds the secret", f)
		}
	}
	l, err := Load(filepath.Join(dir, "sb"), n, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !l.CA.Certificate().Equal(s.CA.Certificate()) || l.Env["API_TOKEN"] != s.Env["API_TOKEN"] || l.Env["SSL_CERT_FILE"] != BundlePath {
		t.Fatal("Load does not give back what Prepare made")
	}
	// Every credential must resolve, or nothing starts; errors name the
	// source, never a value.
	for _, tc := range []struct{ secret, want string }{
		{"env:AIRLOCK_TEST_UNSET", "is not set"},
		{"file:/nonexistent/x", "no such file"},
		{"github", "named secrets come from airlock serve"},
	} {
		n := testNetwork()
		n.Credentials[0].Secret = tc.secret
		if _, err := Prepare(t.TempDir(), "x", n, base, nil); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("secret %s: %v", tc.secret, err)
		}
	}
	n.Credentials[0].Secret = "github"
	if _, err := Prepare(t.TempDir(), "x", n, base, func(name string) (string, error) { return "v-" + name, nil }); err != nil {
		t.Errorf("named secret: %v", err)
	}
	t.Setenv("AIRLOCK_TEST_BAD", "a\r\nX-Evil: 1")
	n.Credentials[0].Secret = "env:AIRLOCK_TEST_BAD"
	if _, err := Prepare(t.TempDir(), "x", n, base, nil); err == nil || strings.Contains(err.Error(), "Evil") {
		t.Errorf("a secret with a line break: %v", err)
	}
}

// BenchmarkPrepare: what a sandbox with network access pays before it
// starts (CA key and certificate, trust files, one credential).
func BenchmarkPrepare(b *testing.B) {
	b.Setenv("AIRLOCK_TEST_SECRET", testSecret)
	n := testNetwork()
	dir := b.TempDir()
	for i := 0; b.Loop(); i++ {
		if _, err := Prepare(filepath.Join(dir, fmt.Sprint(i)), "bench", n, "", nil); err != nil {
			b.Fatal(err)
		}
	}
}

// TestScrubEncodedForms: a secret with characters that escaping changes
// comes back to the sandbox in no spelling: not in a redirect's query, not
// base64 in an echoed Basic value, not in a trailer.
func TestScrubEncodedForms(t *testing.T) {
	const special = "ab+cd/ef=="
	h := newHarness(t, testNetwork(), true, special)
	ph := h.setup.Env["API_TOKEN"]
	c := h.client(false)
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	basic := "Basic " + base64.StdEncoding.EncodeToString([]byte("u:"+ph))
	req, _ := http.NewRequest("GET", fmt.Sprintf("https://api.test:%d/repos/redirect?key=%s", h.api.port, ph), nil)
	req.Header.Set("Authorization", basic)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.ReadAll(resp.Body)
	resp.Body.Close()
	got := h.api.last(t)
	if got.query != "key="+url.QueryEscape(special) || got.header.Get("Authorization") != "Basic "+base64.StdEncoding.EncodeToString([]byte("u:"+special)) {
		t.Fatalf("the upstream saw query %q, authorization %q: the secret was not injected", got.query, got.header.Get("Authorization"))
	}
	all := fmt.Sprint(resp.Header, resp.Trailer)
	for _, form := range []string{special, url.QueryEscape(special), url.PathEscape(special), base64.StdEncoding.EncodeToString([]byte("u:" + special))} {
		if strings.Contains(all, form) {
			t.Fatalf("the sandbox got %q back in %s", form, all)
		}
	}
	if resp.Header.Get("Location") != "/next?key="+ph || resp.Header.Get("X-Echo") != basic {
		t.Fatalf("scrubbed headers: Location %q, X-Echo %q", resp.Header.Get("Location"), resp.Header.Get("X-Echo"))
	}
}

// TestRawTunnelEndsWhenInspected: a tunnel relayed untouched is closed
// when a new policy starts inspecting its host (its requests would escape
// the rules); the next connection is inspected.
func TestRawTunnelEndsWhenInspected(t *testing.T) {
	h := newHarness(t, testNetwork(), true)
	c := h.client(false)
	base := fmt.Sprintf("https://other.test:%d", h.other.port)
	if st, _, _ := h.do(t, c, "POST", base+"/admin", nil); st != 200 {
		t.Fatalf("before: %d", st)
	}
	before := h.other.count()
	n := testNetwork()
	n.HTTP = append(n.HTTP, policy.HTTPRule{Hosts: []string{"other.test"}, Methods: []string{"GET"}})
	if err := h.gw.SetNetwork(n); err != nil {
		t.Fatal(err)
	}
	// A new connection is inspected; the kept-alive client's old tunnel
	// is gone (it reconnects for a GET, which it may retry).
	st, _, hdr := h.do(t, h.client(false), "POST", base+"/admin", nil)
	if st != 403 || !strings.Contains(hdr.Get("X-Airlock-Rule"), "no http rule allows POST") || h.other.count() != before {
		t.Fatalf("after: %d %v, upstream saw %d more", st, hdr, h.other.count()-before)
	}
	if st, _, _ := h.do(t, c, "GET", base+"/x", nil); st != 200 {
		t.Fatalf("control GET: %d", st)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		for _, r := range h.recordsFor("other.test") {
			if r.Proto == "connect" && !r.Allowed && strings.HasPrefix(r.Rule, "inspected now") {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the raw tunnel's closing was not audited: %+v", h.recordsFor("other.test"))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestOpenModeAddressesWithInspection: in open mode, a policy that
// inspects hosts refuses bare public addresses (which could reach an
// inspected server without its rules) unless an allow rule names them;
// without inspection, open mode lets them out (the control).
func TestOpenModeAddressesWithInspection(t *testing.T) {
	for _, tc := range []struct {
		http  bool
		allow []string
		want  bool
	}{{false, nil, true}, {true, nil, false}, {true, []string{"93.184.216.34"}, true}} {
		n := policy.Network{Mode: policy.NetworkOpen, Allow: tc.allow}
		if tc.http {
			n.HTTP = []policy.HTTPRule{{Hosts: []string{"api.example.com"}, Methods: []string{"GET"}}}
		}
		p, err := NewPolicy(n, nil)
		if err != nil {
			t.Fatal(err)
		}
		if d := p.Host("93.184.216.34", 443); d.Allow != tc.want {
			t.Errorf("%+v: address allowed=%v (%s), want %v", tc, d.Allow, d.Rule, tc.want)
		}
		if d := p.Host("www.example.org", 443); !d.Allow {
			t.Errorf("%+v: a name in open mode denied: %s", tc, d.Rule)
		}
	}
}

// TestSystemBundleCache: a root's bundle is decoded once, and again when
// the file changes.
func TestSystemBundleCache(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "etc/ssl/certs"), 0o755)
	cert := func(body string) string {
		return "-----BEGIN CERTIFICATE-----\n" + body + "\n-----END CERTIFICATE-----\n"
	}
	path := filepath.Join(root, BundlePath)
	os.WriteFile(path, []byte(cert("QUFB")), 0o644)
	for range 2 {
		if b, err := systemBundle(root); err != nil || string(b) != cert("QUFB") {
			t.Fatalf("%q %v", b, err)
		}
	}
	// Replaced (a new inode, as package managers do), and rewritten in place.
	os.WriteFile(path+".new", []byte(cert("QkJCQg==")), 0o644)
	os.Rename(path+".new", path)
	if b, _ := systemBundle(root); string(b) != cert("QkJCQg==") {
		t.Fatalf("after a replacement: %q", b)
	}
	os.WriteFile(path, []byte(cert("Q0NDQ0ND")), 0o644)
	if b, _ := systemBundle(root); string(b) != cert("Q0NDQ0ND") {
		t.Fatalf("after a rewrite: %q", b)
	}
}

// TestScrubBodies: a server that reflects requests into its response
// bodies hands the sandbox the secret in no spelling (as is, escaped,
// JSON-escaped, inside the Basic value), however its body is cut into
// chunks, however large, and gzip-encoded though identity was asked; a
// body it cannot decode is refused. The controls: a body without the
// secret arrives byte for byte, and a host without credentials gets the
// request as sent and answers as is (encoding, length, ranges).
func TestScrubBodies(t *testing.T) {
	const special = `tok/en+<&>"q\z=`
	h := newHarness(t, testNetwork(), true, special)
	ph := h.setup.Env["API_TOKEN"]
	basic := "Basic " + base64.StdEncoding.EncodeToString([]byte("u:"+ph))
	leaks := []string{special, url.QueryEscape(special), url.PathEscape(special), strings.ToLower(url.QueryEscape(special)),
		`tok/en+\u003c\u0026\u003e\"q\\z=`, base64.StdEncoding.EncodeToString([]byte("u:" + special)),
		`tok/en+<&>\"q\\z=`} // JSON, and Go's %q
	check := func(what string, body []byte) {
		t.Helper()
		for _, l := range leaks {
			if bytes.Contains(body, []byte(l)) {
				t.Fatalf("%s: the sandbox got the secret as %q", what, l)
			}
		}
	}
	get := func(c *http.Client, host string, port int, path string, hdr map[string]string) (*http.Response, []byte) {
		t.Helper()
		req, _ := http.NewRequest("GET", fmt.Sprintf("https://%s:%d%s", host, port, path), nil)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("GET %s%s: %v", host, path, err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("GET %s%s: body: %v", host, path, err)
		}
		return resp, b
	}
	for _, socks := range []bool{false, true} {
		c := h.client(socks)
		// Reflected in small chunks: the secret spans many of them.
		resp, body := get(c, "api.test", h.api.port, "/repos/reflect?key="+ph, map[string]string{"Authorization": "Bearer " + ph, "X-Basic": basic})
		if got := h.api.last(t).header.Get("Authorization"); resp.StatusCode != 200 || got != "Bearer "+special {
			t.Fatalf("socks=%v: %d; the upstream saw %q: the secret was not sent", socks, resp.StatusCode, got)
		}
		check(fmt.Sprintf("socks=%v reflect", socks), body)
		for _, want := range []string{"Authorization: Bearer " + ph, "X-Api-Key: key ", "query: key=" + ph, "key: " + ph} {
			if !bytes.Contains(body, []byte(want)) {
				t.Fatalf("socks=%v: %q is not in the reflection:\n%s", socks, want, body)
			}
		}
	}
	c := h.client(false)
	// Large, with a length the replacements change: sent without one, and
	// otherwise byte for byte what the server sent.
	resp, body := get(c, "api.test", h.api.port, "/repos/reflect-large", map[string]string{"Authorization": "Bearer " + ph})
	sent := h.api.lastSent()
	check("reflect-large", body)
	if !bytes.Contains(sent, []byte("Bearer "+special)) || resp.ContentLength != -1 {
		t.Fatalf("the server sent no secret, or the length %d reached the sandbox", resp.ContentLength)
	}
	want := bytes.ReplaceAll(sent, []byte(special), []byte(ph))
	if want = bytes.ReplaceAll(want, []byte(leaks[4]), []byte(ph)); !bytes.Equal(body, want) {
		t.Fatalf("reflect-large: %d bytes, want %d: more than the secret changed", len(body), len(want))
	}
	// The whole request base64-encoded, at each offset: the secret's bytes
	// are in no group of the answer. The control decodes what the server
	// sent: the secret is there.
	_, body = get(c, "api.test", h.api.port, "/repos/reflect-b64", map[string]string{"Authorization": "Bearer " + ph})
	sent = h.api.lastSent()
	for i, line := range bytes.Split(bytes.TrimSpace(sent), []byte("\n")) {
		raw, err := base64.StdEncoding.DecodeString(string(line))
		if err != nil || !bytes.Contains(raw, []byte("Bearer "+special)) {
			t.Fatalf("control: line %d of what the server sent does not carry the secret (%v)", i, err)
		}
	}
	for i, line := range bytes.Split(bytes.TrimSpace(body), []byte("\n")) {
		raw, err := base64.StdEncoding.DecodeString(string(line))
		// At most two bytes at each end of the secret share a group with
		// what surrounds it; the rest must be gone.
		if mid := special[2 : len(special)-2]; err != nil || bytes.Contains(raw, []byte(mid)) || !bytes.Contains(raw, []byte("Authorization: Bearer ")) {
			t.Fatalf("reflect-b64 line %d (%v): the sandbox decodes %q", i, err, raw)
		}
	}
	// Upstream was asked for identity and a whole body; it sent gzip
	// anyway: the gateway decodes it.
	c = h.client(false)
	tr := c.Transport.(*http.Transport)
	tr.DisableCompression = true // the client asks for gzip itself and decodes nothing
	tr.MaxConnsPerHost = 1       // one connection for all that follows
	resp, body = get(c, "api.test", h.api.port, "/repos/reflect-gzip", map[string]string{"Authorization": "Bearer " + ph, "Accept-Encoding": "gzip", "Range": "bytes=0-9"})
	seen := h.api.last(t).header
	if seen.Get("Accept-Encoding") != "identity" || seen.Get("Range") != "" {
		t.Fatalf("the upstream was asked Accept-Encoding %q, Range %q", seen.Get("Accept-Encoding"), seen.Get("Range"))
	}
	check("reflect-gzip", body)
	if resp.Header.Get("Content-Encoding") != "" || !bytes.Contains(body, []byte("Authorization: Bearer "+ph)) {
		t.Fatalf("reflect-gzip: Content-Encoding %q, body %q", resp.Header.Get("Content-Encoding"), body)
	}
	// A malformed response, quoted in the error: not the secret either,
	// neither to the sandbox nor in the audit.
	resp, body = get(c, "api.test", h.api.port, "/repos/malformed?key="+ph, nil)
	check("malformed", body)
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(string(body), "leak:") {
		t.Fatalf("malformed: %d %q", resp.StatusCode, body)
	}
	for _, r := range h.recordsFor("api.test") {
		check("the audit", []byte(fmt.Sprintf("%+v", r)))
	}
	// An encoding the gateway cannot decode is refused, not passed on.
	resp, body = get(c, "api.test", h.api.port, "/repos/reflect-br", map[string]string{"Authorization": "Bearer " + ph})
	check("reflect-br", body)
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(string(body), "cannot be scrubbed") {
		t.Fatalf("reflect-br: %d %q", resp.StatusCode, body)
	}
	// Responses without a body (HEAD, 204) are sent as they came, and the
	// kept-alive connection goes on.
	for _, m := range []string{"HEAD", "GET"} {
		req, _ := http.NewRequest(m, fmt.Sprintf("https://api.test:%d/repos/nocontent", h.api.port), nil)
		if m == "HEAD" {
			req.URL.Path = "/repos/reflect-large"
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", m, err)
		}
		resp.Body.Close()
		if want := map[string]int{"HEAD": 200, "GET": 204}[m]; resp.StatusCode != want {
			t.Fatalf("%s: %d", m, resp.StatusCode)
		}
	}
	if resp, body := get(c, "api.test", h.api.port, "/repos/reflect", map[string]string{"Authorization": "Bearer " + ph}); resp.StatusCode != 200 || !bytes.Contains(body, []byte("Bearer "+ph)) {
		t.Fatalf("after HEAD and 204: %d %q", resp.StatusCode, body)
	}
	// An event stream is scrubbed and not held back: the server sends its
	// second event only once the sandbox has the first.
	req, _ := http.NewRequest("GET", fmt.Sprintf("https://api.test:%d/repos/stream", h.api.port), nil)
	req.Header.Set("Authorization", "Bearer "+ph)
	stream, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	sbr := bufio.NewReader(stream.Body)
	if ev, err := sbr.ReadString('\n'); err != nil || ev != "data: Bearer "+ph+"\n" {
		t.Fatalf("first event: %q %v", ev, err)
	}
	close(h.api.proceed)
	rest, err := io.ReadAll(sbr)
	stream.Body.Close()
	if err != nil || string(rest) != "\ndata: second\n\n" {
		t.Fatalf("the first event was held back until the server gave up: %q %v", rest, err)
	}
	// Control: without the secret in it, a body arrives byte for byte.
	_, body = get(c, "api.test", h.api.port, "/repos/random", map[string]string{"Authorization": "Bearer " + ph})
	if sent := h.api.lastSent(); len(sent) != 3<<20 || !bytes.Equal(body, sent) {
		t.Fatalf("random: %d bytes, the server sent %d: a body without the secret changed", len(body), len(sent))
	}
	// Control: a host without credentials gets the request as the
	// sandbox sent it, and its answer as is.
	resp, body = get(c, "other.test", h.other.port, "/repos/random", map[string]string{"Accept-Encoding": "gzip", "Range": "bytes=0-9"})
	seen = h.other.last(t).header
	if seen.Get("Accept-Encoding") != "gzip" || seen.Get("Range") != "bytes=0-9" {
		t.Fatalf("other.test was asked Accept-Encoding %q, Range %q", seen.Get("Accept-Encoding"), seen.Get("Range"))
	}
	if sent := h.other.lastSent(); resp.Header.Get("Content-Encoding") != "gzip" || resp.ContentLength != int64(len(sent)) || !bytes.Equal(body, sent) {
		t.Fatalf("other.test: Content-Encoding %q, length %d, %d bytes; the server sent %d", resp.Header.Get("Content-Encoding"), resp.ContentLength, len(body), len(sent))
	}
}

var benchBody = sync.OnceValue(func() []byte {
	b := make([]byte, 64<<20)
	mrand.NewChaCha8([32]byte{1}).Read(b)
	return b
})

// cpuTime is the CPU time this process has used (user and system), in ns:
// servers, gateway and client together.
func cpuTime() int64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// BenchmarkInspectedDownload: a 64 MiB download through an intercepted
// tunnel, from a host with request rules only and from one with a
// credential (whose body is scrubbed), in one process: what scrubbing
// costs next to inspection alone.
func BenchmarkInspectedDownload(b *testing.B) {
	n := testNetwork()
	n.HTTP = append(n.HTTP, policy.HTTPRule{Hosts: []string{"other.test"}})
	h := newHarness(b, n, true)
	ph := h.setup.Env["API_TOKEN"]
	buf := make([]byte, 32<<10)
	for _, tc := range []struct{ name, host string }{{"Inspected", "other.test"}, {"Credential", "api.test"}} {
		b.Run(tc.name, func(b *testing.B) {
			c := h.client(false)
			port := map[string]int{"other.test": h.other.port, "api.test": h.api.port}[tc.host]
			b.SetBytes(int64(len(benchBody())))
			cpu0 := cpuTime()
			for b.Loop() {
				req, _ := http.NewRequest("GET", fmt.Sprintf("https://%s:%d/repos/bench", tc.host, port), nil)
				req.Header.Set("Authorization", "Bearer "+ph)
				resp, err := c.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				n, err := io.CopyBuffer(io.Discard, resp.Body, buf)
				resp.Body.Close()
				if err != nil || n != int64(len(benchBody())) {
					b.Fatal(n, err)
				}
			}
			// CPU time is steadier than wall time on a shared machine.
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N)/float64(len(benchBody())>>20), "cpu-ns/MiB")
		})
	}
}
