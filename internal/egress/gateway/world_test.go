package gateway

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/proxy"
)

// The test world: a small fake internet of documentation addresses that
// the test dialer routes to loopback servers. Nothing leaves 127.0.0.1.
var (
	apiIP   = netip.MustParseAddr("203.0.113.10") // api.test
	otherIP = netip.MustParseAddr("203.0.113.20") // other.test
	privIP  = netip.MustParseAddr("10.0.0.5")     // internal.test
	downIP  = netip.MustParseAddr("203.0.113.99") // down.test: no route
)

// testPolicy allows exact names and explicit IPs, and denies private
// addresses unless explicitly allowed.
type testPolicy struct {
	names map[string]bool
	ips   map[netip.Addr]bool
}

func allow(names []string, ips ...netip.Addr) testPolicy {
	p := testPolicy{names: map[string]bool{}, ips: map[netip.Addr]bool{}}
	for _, n := range names {
		p.names[n] = true
	}
	for _, ip := range ips {
		p.ips[ip] = true
	}
	return p
}

func (p testPolicy) Host(host string, port int) Decision {
	if ip, err := netip.ParseAddr(host); err == nil {
		if p.ips[ip] {
			return Decision{Allow: true, Rule: "ip " + host}
		}
		return Decision{Rule: "ip literal " + host + " not allowed"}
	}
	if p.names[host] {
		return Decision{Allow: true, Rule: "name " + host}
	}
	return Decision{Rule: "host " + host + " not in allowlist"}
}

func (p testPolicy) Addr(host string, ip netip.Addr, port int) Decision {
	if p.ips[ip] {
		return Decision{Allow: true, Rule: "ip " + ip.String()}
	}
	if private(ip) {
		return Decision{Rule: "private address " + ip.String()}
	}
	return Decision{Allow: true, Rule: "public address"}
}

func private(ip netip.Addr) bool {
	return ip.IsPrivate() || ip.IsLoopback() || ip.IsLinkLocalUnicast() || ip.IsUnspecified() ||
		ip.IsLinkLocalMulticast() || ip.IsInterfaceLocalMulticast()
}

var defaultNames = []string{"api.test", "other.test", "internal.test", "down.test", "rebind.test"}

// rebinder answers each lookup with the next of its answers (the last one
// forever after), the way a rebinding DNS server would.
type rebinder struct {
	answers [][]netip.Addr
	calls   atomic.Int32
}

func (r *rebinder) LookupNetIP(ctx context.Context, host string) ([]netip.Addr, error) {
	i := int(r.calls.Add(1)) - 1
	return r.answers[min(i, len(r.answers)-1)], nil
}

type world struct {
	tb            testing.TB
	plain, secure *httptest.Server
	roots         *x509.CertPool
	routes        map[netip.AddrPort]string
	gw            *Gateway
	httpProxy     string // host:port of the HTTP proxy
	socksProxy    string // host:port of the SOCKS5 proxy
	serving       sync.WaitGroup

	mu      sync.Mutex
	dialed  []string
	records []Record
	closed  bool
}

// newWorld starts the upstream servers and a gateway for them; configure
// may change the gateway's Config before it starts.
func newWorld(tb testing.TB, configure func(*Config)) *world {
	tb.Helper()
	w := &world{tb: tb}
	w.plain = httptest.NewServer(http.HandlerFunc(upstream))
	cert, roots := testCerts(tb, "api.test", "other.test")
	w.roots = roots
	w.secure = httptest.NewUnstartedServer(http.HandlerFunc(upstream))
	w.secure.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	w.secure.Config.ErrorLog = log.New(io.Discard, "", 0) // refused handshakes are the point
	w.secure.StartTLS()
	plainAddr, secureAddr := w.plain.Listener.Addr().String(), w.secure.Listener.Addr().String()
	w.routes = map[netip.AddrPort]string{
		netip.AddrPortFrom(apiIP, 80):       plainAddr,
		netip.AddrPortFrom(apiIP, 443):      secureAddr,
		netip.AddrPortFrom(otherIP, 80):     plainAddr,
		netip.AddrPortFrom(otherIP, 443):    secureAddr,
		netip.AddrPortFrom(privIP, 80):      plainAddr,
		netip.MustParseAddrPort(plainAddr):  plainAddr,
		netip.MustParseAddrPort(secureAddr): secureAddr,
	}
	cfg := Config{
		Sandbox: "sb-test",
		Policy:  allow(defaultNames),
		Resolver: &StaticResolver{Hosts: map[string][]netip.Addr{
			"api.test":      {apiIP},
			"other.test":    {otherIP},
			"internal.test": {privIP},
			"down.test":     {downIP},
		}},
		Dial:  w.dial,
		Audit: w.audit,
	}
	if configure != nil {
		configure(&cfg)
	}
	w.gw = New(cfg)
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	sl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	w.httpProxy, w.socksProxy = hl.Addr().String(), sl.Addr().String()
	w.serving.Add(2)
	go func() {
		defer w.serving.Done()
		if err := w.gw.ServeHTTP(hl); err != nil {
			tb.Errorf("ServeHTTP: %v", err)
		}
	}()
	go func() {
		defer w.serving.Done()
		if err := w.gw.ServeSOCKS(sl); err != nil {
			tb.Errorf("ServeSOCKS: %v", err)
		}
	}()
	tb.Cleanup(w.close)
	return w
}

func (w *world) close() {
	w.mu.Lock()
	closed := w.closed
	w.closed = true
	w.mu.Unlock()
	if closed {
		return
	}
	w.gw.Close()
	w.serving.Wait()
	w.plain.Close()
	w.secure.Close()
}

// route adds a route to the fake internet.
func (w *world) route(ap netip.AddrPort, to string) {
	w.mu.Lock()
	w.routes[ap] = to
	w.mu.Unlock()
}

// dial is the gateway's dialer: it insists on ip:port, records it, and
// routes the fake internet to the loopback servers.
func (w *world) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		w.tb.Errorf("the gateway handed a name to its dialer: %q", addr)
		return nil, err
	}
	w.mu.Lock()
	w.dialed = append(w.dialed, addr)
	real, ok := w.routes[ap]
	w.mu.Unlock()
	if !ok {
		return nil, &net.OpError{Op: "dial", Net: network, Err: errors.New("no route to host (test world)")}
	}
	var d net.Dialer
	return d.DialContext(ctx, network, real)
}

func (w *world) audit(r Record) {
	if r.Sandbox != "sb-test" {
		w.tb.Errorf("record without the sandbox: %+v", r)
	}
	w.mu.Lock()
	w.records = append(w.records, r)
	w.mu.Unlock()
}

// reset forgets dials and records so far (after waiting for n records).
func (w *world) reset() {
	w.mu.Lock()
	w.dialed, w.records = nil, nil
	w.mu.Unlock()
}

func (w *world) dials() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.dialed...)
}

// waitRecords waits for at least n records and returns them all.
func (w *world) waitRecords(n int) []Record {
	w.tb.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		w.mu.Lock()
		if len(w.records) >= n {
			r := append([]Record(nil), w.records...)
			w.mu.Unlock()
			return r
		}
		got := len(w.records)
		w.mu.Unlock()
		if time.Now().After(deadline) {
			w.tb.Fatalf("waited for %d audit records, got %d", n, got)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// lastRecord waits for the n-th record (1-based) and returns it.
func (w *world) record(n int) Record {
	w.tb.Helper()
	return w.waitRecords(n)[n-1]
}

// httpClient uses the HTTP proxy (absolute URIs for http, CONNECT for https).
func (w *world) httpClient() *http.Client {
	u := &url.URL{Scheme: "http", Host: w.httpProxy}
	tr := &http.Transport{Proxy: http.ProxyURL(u), TLSClientConfig: &tls.Config{RootCAs: w.roots}}
	w.tb.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// socksClient uses the SOCKS5 proxy (golang.org/x/net/proxy).
func (w *world) socksClient() *http.Client {
	d, err := proxy.SOCKS5("tcp", w.socksProxy, nil, proxy.Direct)
	if err != nil {
		w.tb.Fatal(err)
	}
	tr := &http.Transport{DialContext: d.(proxy.ContextDialer).DialContext, TLSClientConfig: &tls.Config{RootCAs: w.roots}}
	w.tb.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

func (w *world) socksDial(addr string) (net.Conn, error) {
	d, err := proxy.SOCKS5("tcp", w.socksProxy, nil, proxy.Direct)
	if err != nil {
		return nil, err
	}
	return d.Dial("tcp", addr)
}

// connect sends a raw CONNECT and reads the answer.
func (w *world) connect(target string) (net.Conn, *bufio.Reader, *http.Response) {
	w.tb.Helper()
	c, err := net.Dial("tcp", w.httpProxy)
	if err != nil {
		w.tb.Fatal(err)
	}
	w.tb.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		w.tb.Fatalf("CONNECT %s: %v", target, err)
	}
	return c, br, resp
}

// get sends a GET over an open tunnel (or a proxy connection, with an
// absolute URI as path) and reads the whole answer.
func get(c net.Conn, br *bufio.Reader, host, path string) (*http.Response, string, error) {
	if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\n\r\n", path, host); err != nil {
		return nil, "", err
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return nil, "", err
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b), err
}

func readBody(tb testing.TB, resp *http.Response) string {
	tb.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.Fatalf("reading body: %v", err)
	}
	return string(b)
}

// upstream is the handler of both upstream servers.
//
//	/size/N  N bytes of a pattern, with Content-Length
//	/echo    the request body back
//	/slow    a chunk every 20 ms until the client goes away
//	/headers the request's Host and header names
//	else     "hello <Host>"
func upstream(w http.ResponseWriter, r *http.Request) {
	switch {
	case strings.HasPrefix(r.URL.Path, "/size/"):
		n, _ := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/size/"))
		w.Header().Set("Content-Length", strconv.Itoa(n))
		writePattern(w, n)
	case r.URL.Path == "/echo":
		b, _ := io.ReadAll(r.Body) // all of it first: the server is not full duplex
		w.Write(b)
	case r.URL.Path == "/slow":
		for i := 0; i < 500; i++ {
			if _, err := io.WriteString(w, "tick\n"); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	case r.URL.Path == "/headers":
		fmt.Fprintf(w, "host=%s\n", r.Host)
		for k := range r.Header {
			fmt.Fprintf(w, "%s\n", k)
		}
	default:
		fmt.Fprintf(w, "hello %s", r.Host)
	}
}

var pattern = func() []byte {
	b := make([]byte, 64<<10)
	for i := range b {
		b[i] = byte('a' + i%26)
	}
	return b
}()

// patternStream is what writePattern(w, n) writes.
func patternStream(n int) []byte {
	var b bytes.Buffer
	writePattern(&b, n)
	return b.Bytes()
}

func writePattern(w io.Writer, n int) {
	for n > 0 {
		k := min(n, len(pattern))
		if _, err := w.Write(pattern[:k]); err != nil {
			return
		}
		n -= k
	}
}

// testCerts makes a CA and a server certificate for names, signed by it.
func testCerts(tb testing.TB, names ...string) (tls.Certificate, *x509.CertPool) {
	tb.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	ca := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "airlock test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		tb.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	leaf := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: names[0]},
		DNSNames:     names,
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, leaf, caCert, &key.PublicKey, caKey)
	if err != nil {
		tb.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(caCert)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, pool
}
