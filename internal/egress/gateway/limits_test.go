package gateway

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"runtime"
	"strings"
	"testing"
	"time"
)

// waitActive waits until n connections count against MaxConns.
func waitActive(t *testing.T, g *Gateway, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		g.mu.Lock()
		a := g.active
		g.mu.Unlock()
		if a == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d active connections, want %d", a, n)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// openTunnel opens a CONNECT tunnel to target and proves it works.
func openTunnel(t *testing.T, w *world, target, host string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, br, resp := w.connect(target)
	if resp.StatusCode != 200 {
		t.Fatalf("CONNECT %s: %d", target, resp.StatusCode)
	}
	if resp, body, err := get(c, br, host, "/"); err != nil || resp.StatusCode != 200 || body != "hello "+host {
		t.Fatalf("GET through %s: %v %q", target, err, body)
	}
	return c, br
}

// assertClosed checks that the gateway closes c promptly.
func assertClosed(t *testing.T, c net.Conn, what string) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(3 * time.Second))
	for {
		_, err := c.Read(make([]byte, 4096))
		if err == nil {
			continue
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Errorf("%s: still open", what)
		}
		return
	}
}

func countRule(recs []Record, rule string) int {
	n := 0
	for _, r := range recs {
		if r.Rule == rule && !r.Allowed {
			n++
		}
	}
	return n
}

// TestMaxConns: beyond MaxConns, connections are refused with a clear
// answer and audited; a freed slot admits the next one.
func TestMaxConns(t *testing.T) {
	w := newWorld(t, func(c *Config) { c.MaxConns = 2 })
	a, _ := openTunnel(t, w, "api.test:80", "api.test")
	openTunnel(t, w, "other.test:80", "other.test")

	_, _, resp := w.connect("api.test:80")
	body := readBody(t, resp)
	if resp.StatusCode != 503 || resp.Header.Get("X-Airlock-Rule") != RuleConnLimit || !strings.Contains(body, "connection limit") {
		t.Errorf("third CONNECT: %d %q %q", resp.StatusCode, resp.Header.Get("X-Airlock-Rule"), body)
	}
	if _, err := w.socksDial("api.test:80"); err == nil || !strings.Contains(err.Error(), "not allowed") {
		t.Errorf("third connection over SOCKS: %v", err)
	}
	resp, err := w.httpClient().Get("http://api.test/")
	if err != nil {
		t.Fatal(err)
	}
	readBody(t, resp)
	if resp.StatusCode != 503 {
		t.Errorf("third connection, plain HTTP: %d", resp.StatusCode)
	}
	if n := countRule(w.waitRecords(3), RuleConnLimit); n != 3 {
		t.Errorf("%d refusals audited, want 3", n)
	}
	// The control: free a slot, and the next connection goes through.
	a.Close()
	waitActive(t, w.gw, 1)
	openTunnel(t, w, "api.test:80", "api.test")
}

// TestMaxBytes: the byte budget closes the connection that spends it and
// refuses every later one.
func TestMaxBytes(t *testing.T) {
	const budget = 1 << 20
	w := newWorld(t, func(c *Config) { c.MaxBytes = budget })
	client := w.httpClient()
	resp, err := client.Get("http://api.test/size/1000")
	if err != nil {
		t.Fatal(err)
	}
	if body := readBody(t, resp); len(body) != 1000 {
		t.Fatalf("under the budget: %d bytes", len(body))
	}
	w.waitRecords(1)
	c, br, _ := w.connect("api.test:80")
	fmt.Fprintf(c, "GET /size/%d HTTP/1.1\r\nHost: api.test\r\n\r\n", 4*budget)
	got, _ := io.Copy(io.Discard, br)
	if got > budget || got < budget/2 {
		t.Errorf("received %d bytes through a tunnel with a %d-byte budget", got, budget)
	}
	recs := w.waitRecords(2)
	if r := recs[1]; r.Allowed || r.Rule != RuleByteLimit || r.BytesDown > budget {
		t.Errorf("record %+v", r)
	}
	var total int64
	for _, r := range recs {
		total += r.BytesUp + r.BytesDown
	}
	if total > budget {
		t.Errorf("records account for %d bytes, budget %d", total, budget)
	}
	_, _, resp = w.connect("api.test:80")
	if body := readBody(t, resp); resp.StatusCode != 503 || !strings.Contains(body, "byte limit") {
		t.Errorf("CONNECT after the budget: %d %q", resp.StatusCode, body)
	}
	if _, err := w.socksDial("api.test:80"); err == nil {
		t.Error("SOCKS after the budget went through")
	}
	client.CloseIdleConnections()
	resp, err = client.Get("http://api.test/size/10")
	if err != nil {
		t.Fatal(err)
	}
	if readBody(t, resp); resp.StatusCode != 503 {
		t.Errorf("plain HTTP after the budget: %d", resp.StatusCode)
	}
	if recs := w.waitRecords(5); countRule(recs, RuleByteLimit) != 4 {
		t.Errorf("%d records by the byte limit, want 4: %+v", countRule(recs, RuleByteLimit), recs)
	}
}

// TestSetPolicy: a new policy closes what it denies (by name or by
// address) at once and leaves the rest running.
func TestSetPolicy(t *testing.T) {
	w := newWorld(t, func(c *Config) { c.Policy = allow(defaultNames, privIP) })
	keep, keepBR := openTunnel(t, w, "api.test:80", "api.test")
	byName, _ := openTunnel(t, w, "other.test:80", "other.test")
	byAddr, _ := openTunnel(t, w, "internal.test:80", "internal.test")
	socks, err := w.socksDial("other.test:80")
	if err != nil {
		t.Fatal(err)
	}
	if resp, _, err := get(socks, bufio.NewReader(socks), "other.test", "/"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("SOCKS: %v", err)
	}
	stream, err := w.httpClient().Get("http://other.test/slow")
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Body.Close()
	line, err := bufio.NewReader(stream.Body).ReadString('\n')
	if err != nil || line != "tick\n" {
		t.Fatalf("stream: %q %v", line, err)
	}

	w.gw.SetPolicy(allow([]string{"api.test", "internal.test"}))
	assertClosed(t, byName, "CONNECT tunnel to a host the new policy denies")
	assertClosed(t, byAddr, "CONNECT tunnel to an address the new policy denies")
	assertClosed(t, socks, "SOCKS tunnel to a host the new policy denies")
	done := make(chan error, 1)
	go func() { _, err := io.Copy(io.Discard, stream.Body); done <- err }()
	select {
	case <-done:
	case <-time.After(3 * time.Second):
		t.Error("plain-HTTP stream from a host the new policy denies still running")
	}
	// The control: the tunnel still allowed carries on.
	if resp, body, err := get(keep, keepBR, "api.test", "/"); err != nil || resp.StatusCode != 200 || body != "hello api.test" {
		t.Errorf("still-allowed tunnel: %v %q", err, body)
	}
	recs := w.waitRecords(4)
	closed := 0
	for _, r := range recs {
		if !r.Allowed && strings.Contains(r.Error, "new policy") {
			closed++
			if r.Host == "other.test" && r.Rule != "host other.test not in allowlist" || r.Host == "internal.test" && r.Rule != "private address 10.0.0.5" {
				t.Errorf("record %+v", r)
			}
		}
	}
	if closed != 4 {
		t.Errorf("%d records of connections closed by the new policy, want 4: %+v", closed, recs)
	}
}

// TestIdleTimeout: a silent tunnel is closed; one busy in either
// direction is not.
func TestIdleTimeout(t *testing.T) {
	w := newWorld(t, func(c *Config) { c.IdleTimeout = 300 * time.Millisecond })
	busy, busyBR := openTunnel(t, w, "api.test:80", "api.test")
	idle, _ := openTunnel(t, w, "other.test:80", "other.test")
	fmt.Fprintf(busy, "GET /slow HTTP/1.1\r\nHost: api.test\r\n\r\n")
	start := time.Now()
	assertClosed(t, idle, "idle tunnel")
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("idle tunnel closed after %v", d)
	}
	if rec := w.record(1); rec.Error != "idle timeout" {
		t.Errorf("record %+v", rec)
	}
	// The busy one (only downloading) outlives the idle timeout.
	busy.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(busyBR, nil)
	if err != nil {
		t.Fatal(err)
	}
	n, _ := io.CopyN(io.Discard, resp.Body, 5*60) // 60 ticks: 1.2 s
	if n != 300 {
		t.Errorf("busy tunnel: %d bytes", n)
	}
}

// TestAuditCompleteness: one record per tunnel and per plain request,
// allowed or not, with the bytes the client actually moved.
func TestAuditCompleteness(t *testing.T) {
	w := newWorld(t, nil)
	// Plain HTTP: three requests on one connection.
	c, err := net.Dial("tcp", w.httpProxy)
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	if _, body, err := get(c, br, "api.test", "http://api.test/size/1234"); err != nil || len(body) != 1234 {
		t.Fatal(err, len(body))
	}
	post := strings.Repeat("p", 5000)
	fmt.Fprintf(c, "POST http://api.test/echo HTTP/1.1\r\nHost: api.test\r\nContent-Length: %d\r\n\r\n%s", len(post), post)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || readBody(t, resp) != post {
		t.Fatal(err)
	}
	if resp, _, err := get(c, br, "evil.test", "http://evil.test/x"); err != nil || resp.StatusCode != 403 {
		t.Fatal(err)
	}
	c.Close()

	// Tunnels: exact byte counts measured at the client.
	tunnel := func(conn net.Conn, host string) (up, down int64) {
		req := fmt.Sprintf("GET /size/%d HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", 3333, host)
		io.WriteString(conn, req)
		n, _ := io.Copy(io.Discard, conn)
		conn.Close()
		return int64(len(req)), n
	}
	tc, tbr, _ := w.connect("api.test:80")
	if tbr.Buffered() != 0 {
		t.Fatal("bytes before the tunnel")
	}
	connectUp, connectDown := tunnel(tc, "api.test")
	sc, err := w.socksDial("other.test:80")
	if err != nil {
		t.Fatal(err)
	}
	socksUp, socksDown := tunnel(sc, "other.test")
	_, _, dresp := w.connect("evil.test:443")
	readBody(t, dresp)
	if _, err := w.socksDial("evil.test:443"); err == nil {
		t.Fatal("SOCKS to evil.test")
	}
	recs := w.waitRecords(7)
	time.Sleep(100 * time.Millisecond)
	if recs = w.waitRecords(7); len(recs) != 7 {
		t.Fatalf("%d records, want 7: %+v", len(recs), recs)
	}
	type key struct {
		proto, host string
		allowed     bool
	}
	byKey := map[key][]Record{}
	for _, r := range recs {
		k := key{r.Proto, r.Host, r.Allowed}
		byKey[k] = append(byKey[k], r)
		if r.Time.IsZero() || r.Duration <= 0 || r.Sandbox != "sb-test" {
			t.Errorf("record %+v", r)
		}
	}
	plain := byKey[key{"http", "api.test", true}]
	if len(plain) != 2 || plain[0].BytesDown != 1234 || plain[0].BytesUp != 0 || plain[1].BytesUp != 5000 || plain[1].BytesDown != 5000 || plain[1].Path != "/echo" {
		t.Errorf("plain records %+v", plain)
	}
	if r := byKey[key{"http", "evil.test", false}]; len(r) != 1 || r[0].Path != "/x" {
		t.Errorf("plain denial %+v", r)
	}
	if r := byKey[key{"connect", "api.test", true}]; len(r) != 1 || r[0].BytesUp != connectUp || r[0].BytesDown != connectDown || r[0].Addr != "203.0.113.10:80" {
		t.Errorf("CONNECT record %+v, client moved %d up %d down", r, connectUp, connectDown)
	}
	if r := byKey[key{"socks", "other.test", true}]; len(r) != 1 || r[0].BytesUp != socksUp || r[0].BytesDown != socksDown || r[0].Addr != "203.0.113.20:80" {
		t.Errorf("SOCKS record %+v, client moved %d up %d down", r, socksUp, socksDown)
	}
	if len(byKey[key{"connect", "evil.test", false}]) != 1 || len(byKey[key{"socks", "evil.test", false}]) != 1 {
		t.Errorf("denials %+v", recs)
	}
}

// gatewayGoroutines counts goroutines running gateway code (not tests).
func gatewayGoroutines() (int, string) {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	n, dump := 0, ""
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		if strings.Contains(g, "egress/gateway.(*Gateway)") || strings.Contains(g, "egress/gateway.(*tunnel)") {
			if !strings.Contains(g, "egress/gateway.Test") {
				n++
				dump += g + "\n\n"
			}
		}
	}
	return n, dump
}

// TestNoGoroutineLeak: Close ends every connection and goroutine, with
// tunnels, streams and half-sent requests open.
func TestNoGoroutineLeak(t *testing.T) {
	base := runtime.NumGoroutine()
	w := newWorld(t, nil)
	hc, sc := w.httpClient(), w.socksClient()
	for _, u := range []string{"http://api.test/", "https://api.test/"} {
		for _, c := range []*http.Client{hc, sc} {
			resp, err := c.Get(u)
			if err != nil {
				t.Fatal(err)
			}
			readBody(t, resp)
		}
	}
	stream, err := hc.Get("http://other.test/slow")
	if err != nil {
		t.Fatal(err)
	}
	tun, tbr := openTunnel(t, w, "api.test:80", "api.test")
	fmt.Fprintf(tun, "GET /slow HTTP/1.1\r\nHost: api.test\r\n\r\n")
	http.ReadResponse(tbr, nil)
	half, _ := net.Dial("tcp", w.httpProxy)
	io.WriteString(half, "GET http://api.test/ HTTP/1.1\r\n")
	greet, _ := net.Dial("tcp", w.socksProxy)
	greet.Write([]byte{5, 1, 0})
	waitActive(t, w.gw, 7) // hc plain+tunnel, sc x2, stream, tun, half, greet - hc reuses
	start := time.Now()
	w.gw.Close()
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Close took %v", d)
	}
	w.serving.Wait()
	// Close waited for them; give the exiting ones a moment to be gone.
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		n, dump := gatewayGoroutines()
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("%d gateway goroutines after Close:\n%s", n, dump)
			break
		}
	}
	io.Copy(io.Discard, stream.Body)
	stream.Body.Close()
	for _, c := range []net.Conn{tun, half, greet} {
		c.Close()
	}
	hc.CloseIdleConnections()
	sc.CloseIdleConnections()
	w.close()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > base {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines, %d before:\n%s", runtime.NumGoroutine(), base, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
	var closedByClose int
	for _, r := range w.waitRecords(1) {
		if r.Error == "gateway closed" {
			closedByClose++
		}
	}
	if closedByClose == 0 {
		t.Error("connections open at Close were not audited")
	}
}

// TestMaxBytesCountsHeads: a plain request's URL and headers go upstream,
// so they are charged to the budget too (no unbounded exfiltration in
// query strings).
func TestMaxBytesCountsHeads(t *testing.T) {
	w := newWorld(t, func(c *Config) { c.MaxBytes = 10 << 10 })
	client := w.httpClient()
	q := strings.Repeat("q", 3000)
	codes := []int{}
	for range 5 {
		resp, err := client.Get("http://api.test/?" + q)
		if err != nil {
			codes = append(codes, -1)
			continue
		}
		readBody(t, resp)
		codes = append(codes, resp.StatusCode)
	}
	if codes[0] != 200 || codes[4] == 200 {
		t.Errorf("status codes %v: want the first through and the last refused", codes)
	}
}

// TestStreamNotHeldBack: a chunked response's first chunk reaches the
// client while the upstream waits for the client to have it (the server
// writes its second chunk only then, or "late" if it gives up).
func TestStreamNotHeldBack(t *testing.T) {
	got := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		io.WriteString(rw, "first\n")
		rw.(http.Flusher).Flush()
		select {
		case <-got:
			io.WriteString(rw, "second\n")
		case <-time.After(10 * time.Second):
			io.WriteString(rw, "late\n")
		}
	}))
	defer srv.Close()
	w := newWorld(t, nil)
	w.route(netip.AddrPortFrom(apiIP, 8080), srv.Listener.Addr().String())
	resp, err := w.httpClient().Get("http://api.test:8080/")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	if line, err := br.ReadString('\n'); err != nil || line != "first\n" {
		t.Fatalf("first chunk: %q %v", line, err)
	}
	close(got)
	if rest, err := io.ReadAll(br); err != nil || string(rest) != "second\n" {
		t.Fatalf("the first chunk was held back until the server gave up: %q %v", rest, err)
	}
}
