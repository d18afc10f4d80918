package main

// airlock-bench egress: what the egress gateway costs, measured in one run
// on loopback against servers, a gateway and clients all in this process.
// Every gateway figure is shown next to the same measurement made directly
// (client to server, no gateway):
//
//   - download throughput: one GET of -size MiB over plain HTTP (direct, via
//     the HTTP proxy with an absolute URI, via SOCKS5) and over HTTPS
//     (direct, via CONNECT, to a host the gateway inspects, and to one with
//     a credential, whose response bodies the gateway scrubs of the
//     secret), on kept-alive connections, -reps times each,
//     interleaved round-robin; the median in MB/s (10^6 bytes) and the ratio
//     gateway/direct (target >= 0.90, issue 15);
//   - latency per request: a small GET on a kept-alive connection (direct,
//     via the HTTP proxy, via SOCKS5) and a GET on a new TCP connection with
//     a new TLS handshake (direct, via CONNECT), -samples each, interleaved
//     request by request; p50 and p99 and the added time, gateway percentile
//     minus direct percentile (target: added p50 <= 0.1 ms, issue 15);
//   - new connections per second: -clients concurrent clients for
//     -duration, one GET per new connection: plain HTTP direct and via the
//     HTTP proxy, HTTPS direct and via CONNECT; the rate and the ratio.
//
// The gateway is configured as a sandbox's would be (egress.Compile of an
// allowlist, a static host map, an audit function), with the name
// bench.test mapped to 127.0.0.1 and allowed, plus the IP rule 127.0.0.1
// that loopback needs. The HTTPS server's certificate is signed by a test
// CA made at startup. Every request has a timeout; a failed request is
// reported and makes the command exit 1.

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"flag"
	"fmt"
	"io"
	"log"
	"math/big"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlock-dev/airlock/internal/egress"
	"github.com/airlock-dev/airlock/internal/egress/gateway"
	"github.com/airlock-dev/airlock/internal/policy"
)

const (
	benchHost   = "bench.test"   // resolves to 127.0.0.1, for the gateway and the direct clients
	inspectHost = "inspect.test" // the same server, a host the gateway inspects
	secretHost  = "secret.test"  // the same server, inspected with a credential bound to it

	targetThroughput = 0.90  // gateway / direct median throughput, at least
	targetAddedP50   = 100.0 // µs added to the p50 latency, at most

	smallTimeout = 10 * time.Second // one small request, including its connection
	maxSize      = 16 << 10         // MiB, the largest -size
)

type egressOpts struct {
	sizeMiB  int
	reps     int
	samples  int
	clients  int
	duration time.Duration
}

// egressRow is one line of the table. Latencies are in µs, throughputs in
// MB/s, rates in connections/s.
type egressRow struct {
	name     string
	unit     string // "MB/s", "µs" or "conn/s"
	direct   float64
	gateway  float64
	added    bool    // show gateway-direct rather than gateway/direct
	target   float64 // 0: none
	hasTgt   bool
	nDirect  int // samples behind the figures
	nGateway int
}

type egressResult struct {
	opts     egressOpts
	rows     []egressRow
	errors   int
	audited  map[string]int64 // gateway audit records by proto
	spread   []string         // min-max of each download configuration
	denied   int64
	warnings []string
}

func runEgress(args []string) int {
	fs := flag.NewFlagSet("egress", flag.ExitOnError)
	o := egressOpts{}
	fs.IntVar(&o.sizeMiB, "size", 256, "MiB per download")
	fs.IntVar(&o.reps, "reps", 5, "downloads per configuration (the median is reported)")
	fs.IntVar(&o.samples, "samples", 2000, "latency samples per configuration")
	fs.IntVar(&o.clients, "clients", 4, "concurrent clients for the new-connection rate")
	fs.DurationVar(&o.duration, "duration", 3*time.Second, "length of each new-connection rate run")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: airlock-bench egress [-size 256] [-reps 5] [-samples 2000] [-clients 4] [-duration 3s]\n\n")
		fs.PrintDefaults()
	}
	fs.Parse(args)
	if fs.NArg() > 0 {
		fs.Usage()
		return 2
	}
	if o.sizeMiB < 1 || o.sizeMiB > maxSize || o.reps < 1 || o.samples < 1 || o.clients < 1 || o.duration <= 0 {
		logf("egress: -size must be 1..%d, -reps, -samples and -clients at least 1, -duration positive", maxSize)
		return 2
	}
	res, err := egressBench(o)
	if err != nil {
		logf("egress: %v", err)
		return 1
	}
	printEgress(os.Stdout, res)
	if res.errors > 0 || res.denied > 0 {
		logf("egress: %d request(s) failed, %d denied by the gateway; see above", res.errors, res.denied)
		return 1
	}
	return 0
}

// egressWorld is the servers, the gateway and the clients.
type egressWorld struct {
	plainURL, tlsURL string // http://bench.test:PORT, https://bench.test:PORT
	inspectURL       string // https://inspect.test:PORT: the same server, inspected by the gateway
	secretURL        string // https://secret.test:PORT: inspected, with a credential (responses scrubbed)
	setupDir         string // the credential's egress setup
	roots            *x509.CertPool
	gw               *gateway.Gateway
	httpProxy        *url.URL
	socksProxy       *url.URL
	servers          []*http.Server
	transports       []*http.Transport
	payload          []byte

	mu      sync.Mutex
	audited map[string]int64
	denied  int64
	errs    int
}

func newEgressWorld() (w *egressWorld, err error) {
	w = &egressWorld{audited: map[string]int64{}}
	defer func() {
		if err != nil {
			w.close()
		}
	}()
	w.payload = make([]byte, 1<<20)
	rand.Read(w.payload) // incompressible, though nothing here compresses
	cert, roots, err := benchCerts()
	if err != nil {
		return nil, err
	}
	w.roots = roots.Clone()
	quiet := log.New(io.Discard, "", 0)
	newServer := func() *http.Server {
		return &http.Server{
			Handler:           http.HandlerFunc(w.serve),
			ReadHeaderTimeout: smallTimeout,
			IdleTimeout:       time.Minute,
			ErrorLog:          quiet,
			TLSNextProto:      map[string]func(*http.Server, *tls.Conn, http.Handler){}, // HTTP/1.1 only
		}
	}
	pl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	ps := newServer()
	w.servers = append(w.servers, ps)
	go ps.Serve(pl)
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	ts := newServer()
	ts.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}}
	w.servers = append(w.servers, ts)
	go ts.ServeTLS(tl, "", "")
	w.plainURL = fmt.Sprintf("http://%s:%d", benchHost, pl.Addr().(*net.TCPAddr).Port)
	w.tlsURL = fmt.Sprintf("https://%s:%d", benchHost, tl.Addr().(*net.TCPAddr).Port)
	w.inspectURL = fmt.Sprintf("https://%s:%d", inspectHost, tl.Addr().(*net.TCPAddr).Port)
	w.secretURL = fmt.Sprintf("https://%s:%d", secretHost, tl.Addr().(*net.TCPAddr).Port)

	// inspect.test has a request rule (any request): the gateway terminates
	// its TLS with a sandbox CA. secret.test has a credential too, so the
	// gateway also scrubs the secret from its responses.
	if w.setupDir, err = os.MkdirTemp("", "airlock-bench-egress-"); err != nil {
		return nil, err
	}
	secretFile := filepath.Join(w.setupDir, "secret")
	if err := os.WriteFile(secretFile, []byte("bench-secret-0123456789abcdef"), 0o600); err != nil {
		return nil, err
	}
	n := policy.Network{Mode: "allowlist", Allow: []string{benchHost, inspectHost, secretHost, "127.0.0.1"},
		HTTP:        []policy.HTTPRule{{Hosts: []string{inspectHost}}},
		Credentials: []policy.Credential{{Name: "bench", Hosts: []string{secretHost}, Secret: "file:" + secretFile, Header: "X-Bench-Token"}}}
	setup, err := egress.Prepare(filepath.Join(w.setupDir, "setup"), "bench", n, "", nil)
	if err != nil {
		return nil, err
	}
	gp, err := egress.NewPolicy(n, setup)
	if err != nil {
		return nil, err
	}
	ca := setup.CA
	w.roots.AddCert(ca.Certificate()) // the sandbox's trust: the world's and its CA
	loop := []netip.Addr{netip.MustParseAddr("127.0.0.1")}
	w.gw = gateway.New(gateway.Config{
		Sandbox:       "bench",
		Policy:        gp,
		Resolver:      &gateway.StaticResolver{Hosts: map[string][]netip.Addr{benchHost: loop, inspectHost: loop, secretHost: loop}},
		Audit:         w.audit,
		CA:            ca,
		UpstreamRoots: roots,
	})
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	go w.gw.ServeHTTP(hl)
	sl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		hl.Close()
		return nil, err
	}
	go w.gw.ServeSOCKS(sl)
	w.httpProxy = &url.URL{Scheme: "http", Host: hl.Addr().String()}
	w.socksProxy = &url.URL{Scheme: "socks5", Host: sl.Addr().String()}
	return w, nil
}

func (w *egressWorld) close() {
	for _, t := range w.transports {
		t.CloseIdleConnections()
	}
	if w.gw != nil {
		w.gw.Close()
	}
	for _, s := range w.servers {
		s.Close()
	}
	if w.setupDir != "" {
		os.RemoveAll(w.setupDir)
	}
}

func (w *egressWorld) audit(r gateway.Record) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.audited[r.Proto]++
	if !r.Allowed {
		w.denied++
		if w.denied <= 3 {
			logf("egress: the gateway denied %s %s:%d: %s %s", r.Proto, r.Host, r.Port, r.Rule, r.Error)
		}
	}
}

// serve answers "/" with a few bytes and "/size/N" with N bytes.
func (w *egressWorld) serve(rw http.ResponseWriter, r *http.Request) {
	rest, ok := strings.CutPrefix(r.URL.Path, "/size/")
	if !ok {
		rw.Header().Set("Content-Type", "text/plain")
		io.WriteString(rw, "ok\n")
		return
	}
	n, err := strconv.ParseInt(rest, 10, 64)
	if err != nil || n < 0 || n > maxSize<<20 {
		http.Error(rw, "bad size", http.StatusBadRequest)
		return
	}
	rw.Header().Set("Content-Length", strconv.FormatInt(n, 10))
	rw.Header().Set("Content-Type", "application/octet-stream")
	for n > 0 {
		k := min(n, int64(len(w.payload)))
		if _, err := rw.Write(w.payload[:k]); err != nil {
			return
		}
		n -= k
	}
}

// client returns an HTTP/1.1 client: direct (proxy nil; bench.test is
// dialed as 127.0.0.1) or through proxy, keeping connections alive or not.
func (w *egressWorld) client(proxy *url.URL, keepAlive bool, timeout time.Duration) *http.Client {
	d := &net.Dialer{Timeout: smallTimeout}
	tr := &http.Transport{
		TLSClientConfig:     &tls.Config{RootCAs: w.roots},
		TLSNextProto:        map[string]func(string, *tls.Conn) http.RoundTripper{}, // HTTP/1.1 only
		DisableKeepAlives:   !keepAlive,
		DisableCompression:  true,
		MaxIdleConnsPerHost: 64,
		TLSHandshakeTimeout: smallTimeout,
	}
	if proxy != nil {
		tr.Proxy = http.ProxyURL(proxy)
		tr.DialContext = d.DialContext
	} else {
		tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			host, port, err := net.SplitHostPort(addr)
			if err != nil || host != benchHost {
				return nil, fmt.Errorf("direct client: unexpected address %q", addr)
			}
			return d.DialContext(ctx, network, net.JoinHostPort("127.0.0.1", port))
		}
	}
	w.transports = append(w.transports, tr)
	return &http.Client{Transport: tr, Timeout: timeout}
}

// get does one GET, reads the whole body into buf's worth of reads and
// returns the time it took and the body length.
func get(c *http.Client, u string, buf []byte) (time.Duration, int64, error) {
	t0 := time.Now()
	resp, err := c.Get(u)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	var n int64
	for {
		k, err := resp.Body.Read(buf)
		n += int64(k)
		if err == io.EOF {
			break
		}
		if err != nil {
			return 0, n, err
		}
	}
	d := time.Since(t0)
	if resp.StatusCode != http.StatusOK {
		return 0, n, fmt.Errorf("%s: %s", u, resp.Status)
	}
	return d, n, nil
}

// failed counts a failed request and logs the first few.
func (w *egressWorld) failed(what string, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.errs++
	if w.errs <= 5 {
		logf("egress: %s: %v (not counted)", what, err)
	}
}

type benchCase struct {
	name    string
	client  *http.Client
	url     string
	samples []float64
	count   int64         // rate runs: requests completed
	elapsed time.Duration // rate runs
}

func egressBench(o egressOpts) (*egressResult, error) {
	w, err := newEgressWorld()
	if err != nil {
		return nil, err
	}
	defer w.close()
	res := &egressResult{opts: o}
	size := int64(o.sizeMiB) << 20
	buf := make([]byte, 256<<10)

	// 1. Download throughput, kept-alive connections, interleaved.
	dlTimeout := max(60*time.Second, time.Duration(size/(20<<20))*time.Second) // >= 20 MiB/s
	sizePath := fmt.Sprintf("/size/%d", size)
	dl := []*benchCase{
		{name: "direct", client: w.client(nil, true, dlTimeout), url: w.plainURL + sizePath},
		{name: "HTTP proxy", client: w.client(w.httpProxy, true, dlTimeout), url: w.plainURL + sizePath},
		{name: "SOCKS5", client: w.client(w.socksProxy, true, dlTimeout), url: w.plainURL + sizePath},
		{name: "TLS direct", client: w.client(nil, true, dlTimeout), url: w.tlsURL + sizePath},
		{name: "CONNECT", client: w.client(w.httpProxy, true, dlTimeout), url: w.tlsURL + sizePath},
		{name: "inspected", client: w.client(w.httpProxy, true, dlTimeout), url: w.inspectURL + sizePath},
		{name: "credential", client: w.client(w.httpProxy, true, dlTimeout), url: w.secretURL + sizePath},
	}
	logf("egress: downloads of %d MiB, %d per configuration, interleaved", o.sizeMiB, o.reps)
	warmPath := fmt.Sprintf("/size/%d", min(size, 8<<20))
	for _, c := range dl { // warm-up: connections, TLS sessions, buffers
		if _, _, err := get(c.client, strings.TrimSuffix(c.url, sizePath)+warmPath, buf); err != nil {
			w.failed(c.name+" download warm-up", err)
		}
	}
	order := newShuffler()
	for i := 0; i < o.reps; i++ {
		for _, c := range order.shuffle(dl) {
			d, n, err := get(c.client, c.url, buf)
			if err == nil && n != size {
				err = fmt.Errorf("%d bytes, want %d", n, size)
			}
			if err != nil {
				w.failed(c.name+" download", err)
				continue
			}
			c.samples = append(c.samples, float64(size)/1e6/d.Seconds())
		}
		progress(i+1, o.reps)
	}
	thr := func(name string, direct, gw *benchCase) egressRow {
		return egressRow{name: name, unit: "MB/s", direct: median(sorted(direct.samples)), gateway: median(sorted(gw.samples)),
			target: targetThroughput, hasTgt: true, nDirect: len(direct.samples), nGateway: len(gw.samples)}
	}
	for _, c := range dl {
		if len(c.samples) > 0 {
			s := sorted(c.samples)
			res.spread = append(res.spread, fmt.Sprintf("%s %.0f-%.0f", c.name, s[0], s[len(s)-1]))
		}
	}
	sz := fmt.Sprintf("%d MiB", o.sizeMiB)
	res.rows = append(res.rows,
		thr("download "+sz+", HTTP, via HTTP proxy (absolute URI)", dl[0], dl[1]),
		thr("download "+sz+", HTTP, via SOCKS5", dl[0], dl[2]),
		thr("download "+sz+", HTTPS, via CONNECT", dl[3], dl[4]),
		thr("download "+sz+", HTTPS, inspected (TLS terminated, sent on over TLS)", dl[3], dl[5]),
		thr("download "+sz+", HTTPS, inspected with a credential (body scrubbed)", dl[3], dl[6]),
	)

	// 2. Latency per request, interleaved request by request.
	small := "/"
	lat := []*benchCase{
		{name: "keep-alive direct", client: w.client(nil, true, smallTimeout), url: w.plainURL + small},
		{name: "keep-alive HTTP proxy", client: w.client(w.httpProxy, true, smallTimeout), url: w.plainURL + small},
		{name: "keep-alive SOCKS5", client: w.client(w.socksProxy, true, smallTimeout), url: w.plainURL + small},
		{name: "new TLS direct", client: w.client(nil, false, smallTimeout), url: w.tlsURL + small},
		{name: "new TLS CONNECT", client: w.client(w.httpProxy, false, smallTimeout), url: w.tlsURL + small},
		{name: "keep-alive TLS direct", client: w.client(nil, true, smallTimeout), url: w.tlsURL + small},
		{name: "keep-alive inspected", client: w.client(w.httpProxy, true, smallTimeout), url: w.inspectURL + small},
	}
	logf("egress: latency, %d samples per configuration, interleaved", o.samples)
	for i := 0; i < 20; i++ { // warm-up
		for _, c := range lat {
			if _, _, err := get(c.client, c.url, buf); err != nil {
				w.failed(c.name+" warm-up", err)
			}
		}
	}
	// Kept-alive and new-connection requests are measured apart, so that
	// the teardown of a new connection does not land in a kept-alive
	// sample; within each group the order is shuffled every round, so that
	// no configuration always follows the same one.
	for _, group := range [][]*benchCase{lat[:3], lat[3:5], lat[5:]} {
		for i := 0; i < o.samples; i++ {
			for _, c := range order.shuffle(group) {
				d, _, err := get(c.client, c.url, buf)
				if err != nil {
					w.failed(c.name, err)
					continue
				}
				c.samples = append(c.samples, float64(d.Nanoseconds())/1e3)
			}
			if (i+1)%100 == 0 || i+1 == o.samples {
				progress(i+1, o.samples)
			}
		}
	}
	pct := func(name string, direct, gw *benchCase, p int) egressRow {
		r := egressRow{name: fmt.Sprintf("%s, p%d", name, p), unit: "µs", added: true, nDirect: len(direct.samples), nGateway: len(gw.samples)}
		d, g := sorted(direct.samples), sorted(gw.samples)
		if p == 50 {
			r.direct, r.gateway = median(d), median(g)
			r.target, r.hasTgt = targetAddedP50, true
		} else {
			r.direct, r.gateway = percentile(d, p), percentile(g, p)
		}
		return r
	}
	res.rows = append(res.rows,
		pct("GET, kept-alive HTTP, via HTTP proxy", lat[0], lat[1], 50),
		pct("GET, kept-alive HTTP, via HTTP proxy", lat[0], lat[1], 99),
		pct("GET, kept-alive HTTP, via SOCKS5", lat[0], lat[2], 50),
		pct("GET, kept-alive HTTP, via SOCKS5", lat[0], lat[2], 99),
		pct("GET, new TCP+TLS connection, via CONNECT", lat[3], lat[4], 50),
		pct("GET, new TCP+TLS connection, via CONNECT", lat[3], lat[4], 99),
		pct("GET, kept-alive HTTPS, inspected", lat[5], lat[6], 50),
		pct("GET, kept-alive HTTPS, inspected", lat[5], lat[6], 99),
	)

	// 3. New connections per second: rounds, each configuration in turn.
	rate := []*benchCase{
		{name: "new conn HTTP direct", client: w.client(nil, false, smallTimeout), url: w.plainURL + small},
		{name: "new conn HTTP proxy", client: w.client(w.httpProxy, false, smallTimeout), url: w.plainURL + small},
		{name: "new conn TLS direct", client: w.client(nil, false, smallTimeout), url: w.tlsURL + small},
		{name: "new conn CONNECT", client: w.client(w.httpProxy, false, smallTimeout), url: w.tlsURL + small},
	}
	const rounds = 3
	logf("egress: new connections, %d clients, %s per configuration in %d rounds", o.clients, o.duration, rounds)
	for r := 0; r < rounds; r++ {
		for _, c := range order.shuffle(rate) {
			n, d := w.connRate(c, o.clients, o.duration/rounds)
			c.count += n
			c.elapsed += d
		}
		progress(r+1, rounds)
	}
	perSec := func(c *benchCase) float64 {
		if c.elapsed <= 0 {
			return 0
		}
		return float64(c.count) / c.elapsed.Seconds()
	}
	cl := fmt.Sprintf("%d clients", o.clients)
	res.rows = append(res.rows,
		egressRow{name: "new connections/s, HTTP, " + cl + ", via HTTP proxy", unit: "conn/s", direct: perSec(rate[0]), gateway: perSec(rate[1]),
			nDirect: int(rate[0].count), nGateway: int(rate[1].count)},
		egressRow{name: "new connections/s, HTTPS, " + cl + ", via CONNECT", unit: "conn/s", direct: perSec(rate[2]), gateway: perSec(rate[3]),
			nDirect: int(rate[2].count), nGateway: int(rate[3].count)},
	)

	// Close the client connections so that the gateway audits every tunnel,
	// then check that the gateway saw every kind of traffic.
	for _, t := range w.transports {
		t.CloseIdleConnections()
	}
	w.gw.Close()
	w.mu.Lock()
	res.errors, res.denied = w.errs, w.denied
	res.audited = map[string]int64{}
	for k, v := range w.audited {
		res.audited[k] = v
	}
	w.mu.Unlock()
	for _, p := range []string{"http", "connect", "socks", "https"} {
		if res.audited[p] == 0 {
			res.warnings = append(res.warnings, fmt.Sprintf("the gateway audited no %s traffic: the gateway rows did not go through it", p))
		}
	}
	return res, nil
}

// shuffler gives a new random order of the configurations for every round
// (seeded: the same sequence on every run).
type shuffler struct{ rng *mrand.Rand }

func newShuffler() shuffler { return shuffler{mrand.New(mrand.NewPCG(1, 2))} }

func (s shuffler) shuffle(cases []*benchCase) []*benchCase {
	out := append([]*benchCase(nil), cases...)
	s.rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// connRate runs clients goroutines doing GETs on new connections for d and
// returns the requests completed and the time from the start to the end of
// the last one.
func (w *egressWorld) connRate(c *benchCase, clients int, d time.Duration) (int64, time.Duration) {
	var n atomic.Int64
	var wg sync.WaitGroup
	t0 := time.Now()
	deadline := t0.Add(d)
	for i := 0; i < clients; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 4<<10)
			for time.Now().Before(deadline) {
				if _, _, err := get(c.client, c.url, buf); err != nil {
					w.failed(c.name, err)
					continue
				}
				n.Add(1)
			}
		}()
	}
	wg.Wait()
	return n.Load(), time.Since(t0)
}

// verdict says whether a row meets its target ("-" without one).
func (r egressRow) verdict() string {
	if !r.hasTgt {
		return "-"
	}
	if r.nDirect == 0 || r.nGateway == 0 {
		return "no data"
	}
	if r.added {
		ok := r.gateway-r.direct <= r.target
		return fmt.Sprintf("added <= %s: %s", fmtUnit(r.target, r.unit), okFail(ok))
	}
	ok := r.direct > 0 && r.gateway/r.direct >= r.target
	return fmt.Sprintf(">= %.2fx: %s", r.target, okFail(ok))
}

func okFail(ok bool) string {
	if ok {
		return "ok"
	}
	return "FAIL"
}

func fmtUnit(v float64, unit string) string {
	switch unit {
	case "µs":
		if v >= 10000 {
			return fmt.Sprintf("%.1f ms", v/1000)
		}
		return fmt.Sprintf("%.0f µs", v)
	case "MB/s":
		return fmt.Sprintf("%.0f MB/s", v)
	}
	return fmt.Sprintf("%.0f %s", v, unit)
}

// cells returns the direct, gateway and comparison cells of a row.
func (r egressRow) cells() (string, string, string) {
	if r.nDirect == 0 || r.nGateway == 0 {
		return "n/a", "n/a", "n/a"
	}
	cmp := "n/a"
	if r.added {
		diff := r.gateway - r.direct
		sign := "+"
		if diff < 0 {
			sign, diff = "-", -diff
		}
		cmp = sign + fmtUnit(diff, r.unit)
	} else if r.direct > 0 {
		cmp = fmt.Sprintf("%.2fx", r.gateway/r.direct)
	}
	return fmtUnit(r.direct, r.unit), fmtUnit(r.gateway, r.unit), cmp
}

func printEgress(out io.Writer, res *egressResult) {
	var b strings.Builder
	o := res.opts
	fmt.Fprintf(&b, "airlock-bench egress: Linux %s, %d CPUs, GOMAXPROCS %d, %s; servers, gateway and clients in one process on loopback\n",
		kernel(), goruntime.NumCPU(), goruntime.GOMAXPROCS(0), goruntime.Version())
	fmt.Fprintf(&b, "downloads: %d MiB x %d each, median; latency: %d samples each, interleaved; new connections: %d clients x %s each\n\n",
		o.sizeMiB, o.reps, o.samples, o.clients, o.duration)
	b.WriteString("| measurement | direct | gateway | gateway vs direct | target |\n")
	b.WriteString("|---|---:|---:|---:|---|\n")
	for _, r := range res.rows {
		d, g, cmp := r.cells()
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", r.name, d, g, cmp, r.verdict())
	}
	b.WriteString("\nMB/s = 10^6 bytes/s. Added latency = gateway percentile minus direct percentile. The plain-HTTP proxy reuses its upstream connections, so its new-connection row pays a new client connection only; CONNECT pays a new upstream connection too.\n")
	if len(res.spread) > 0 {
		fmt.Fprintf(&b, "download MB/s min-max: %s\n", strings.Join(res.spread, ", "))
	}
	var kinds []string
	for _, p := range []string{"http", "connect", "socks", "https"} {
		kinds = append(kinds, fmt.Sprintf("%s %d", p, res.audited[p]))
	}
	fmt.Fprintf(&b, "gateway audit records: %s; denied %d\n", strings.Join(kinds, ", "), res.denied)
	for _, wn := range res.warnings {
		fmt.Fprintf(&b, "warning: %s\n", wn)
	}
	if res.errors > 0 {
		fmt.Fprintf(&b, "%d request(s) FAILED and were not counted (the first ones are above)\n", res.errors)
	}
	io.WriteString(out, b.String())
}

// benchCerts makes a test CA and a certificate it signs for bench.test and
// 127.0.0.1.
func benchCerts() (tls.Certificate, *x509.CertPool, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "airlock-bench test CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: benchHost},
		DNSNames:     []string{benchHost, inspectHost, secretHost},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, roots, nil
}
