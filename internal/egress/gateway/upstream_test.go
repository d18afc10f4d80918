package gateway

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// proxyConn dials the world's HTTP proxy, with a deadline on everything.
func proxyConn(t *testing.T, w *world) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", w.httpProxy)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	return c, bufio.NewReader(c)
}

// TestPlainHTTPSplicedBody: a large plain-HTTP response body goes from the
// upstream socket to the client's with splice(2), whole and in order, is
// audited, and leaves the upstream connection for the next request. The
// control: a small body is copied, on that same upstream connection.
func TestPlainHTTPSplicedBody(t *testing.T) {
	w := newWorld(t, nil)
	c, br := proxyConn(t, w)
	const size = 4 << 20
	before := splicing.Load()
	resp, body, err := get(c, br, "api.test", "http://api.test/size/"+strconv.Itoa(size))
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET: %v %v", err, resp)
	}
	if !bytes.Equal([]byte(body), patternStream(size)) {
		t.Fatalf("body of %d bytes differs from what the server sent", len(body))
	}
	if splicing.Load() == before {
		t.Error("a 4 MiB body was not spliced")
	}
	before = splicing.Load()
	resp, body, err = get(c, br, "api.test", "http://api.test/size/1000")
	if err != nil || resp.StatusCode != 200 || body != string(patternStream(1000)) {
		t.Fatalf("small GET: %v %v %d bytes", err, resp, len(body))
	}
	if splicing.Load() != before {
		t.Error("a 1000-byte body was spliced")
	}
	if d := w.dials(); len(d) != 1 {
		t.Errorf("upstream dialed %v: want one connection for both requests", d)
	}
	recs := w.waitRecords(2)
	if recs[0].BytesDown != size || recs[1].BytesDown != 1000 || !recs[0].Allowed || recs[0].Error != "" {
		t.Errorf("records %+v", recs)
	}
}

// stallServer answers every request with a Content-Length of 8 MiB, sends
// 1 MiB of it and then nothing until the client goes away. It is routed
// as api.test:8080.
func stallServer(t *testing.T, w *world) {
	t.Helper()
	srv := &http.Server{Handler: http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		rw.Header().Set("Content-Length", strconv.Itoa(8<<20))
		writePattern(rw, 1<<20)
		rw.(http.Flusher).Flush()
		<-r.Context().Done()
	})}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	w.route(netip.AddrPortFrom(apiIP, 8080), l.Addr().String())
}

// readStalled reads a stalled response: its head, the first MiB of its
// body, then (after onMiB) the rest until the connection ends. It returns
// the body bytes and whether the connection ended within 5 s.
func readStalled(t *testing.T, c net.Conn, br *bufio.Reader, onMiB func()) (int64, bool) {
	t.Helper()
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("head: %v %v", err, resp)
	}
	if _, err := io.CopyN(io.Discard, resp.Body, 1<<20); err != nil {
		t.Fatalf("the first MiB: %v", err)
	}
	if onMiB != nil {
		onMiB()
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := io.Copy(io.Discard, resp.Body)
	var ne net.Error
	return (1 << 20) + n, !(errors.As(err, &ne) && ne.Timeout())
}

// TestPlainHTTPSplicedIdle: a spliced body that stops moving ends at the
// idle timeout, audited as such; the MiB before the stall arrived.
func TestPlainHTTPSplicedIdle(t *testing.T) {
	w := newWorld(t, func(c *Config) { c.IdleTimeout = 300 * time.Millisecond })
	stallServer(t, w)
	c, br := proxyConn(t, w)
	before := splicing.Load()
	fmt.Fprintf(c, "GET http://api.test:8080/ HTTP/1.1\r\nHost: api.test:8080\r\n\r\n")
	got, ended := readStalled(t, c, br, nil)
	if !ended || got != 1<<20 {
		t.Errorf("stalled body: %d bytes, ended %v; want 1 MiB, then the connection closed", got, ended)
	}
	if splicing.Load() == before {
		t.Error("the body was not spliced")
	}
	if r := w.record(1); !strings.Contains(r.Error, "idle") || r.BytesDown != 1<<20 {
		t.Errorf("record %+v", r)
	}
}

// TestPlainHTTPSplicedPolicyChange: a new policy that denies the host
// ends a spliced body at once; the same body was flowing before it.
func TestPlainHTTPSplicedPolicyChange(t *testing.T) {
	w := newWorld(t, nil)
	stallServer(t, w)
	c, br := proxyConn(t, w)
	fmt.Fprintf(c, "GET http://api.test:8080/ HTTP/1.1\r\nHost: api.test:8080\r\n\r\n")
	got, ended := readStalled(t, c, br, func() { w.gw.SetPolicy(allow([]string{"other.test"})) })
	if !ended || got != 1<<20 {
		t.Errorf("body after the policy change: %d bytes, ended %v", got, ended)
	}
	if r := w.record(1); r.Allowed || r.BytesDown != 1<<20 {
		t.Errorf("record %+v", r)
	}
}

// TestPlainHTTPSplicedBudget: the byte budget stops a spliced body at its
// last byte and closes the connection; the control, a body under the
// budget, went through.
func TestPlainHTTPSplicedBudget(t *testing.T) {
	const budget = 1 << 20
	w := newWorld(t, func(c *Config) { c.MaxBytes = budget })
	c, br := proxyConn(t, w)
	if resp, body, err := get(c, br, "api.test", "http://api.test/size/1000"); err != nil || resp.StatusCode != 200 || len(body) != 1000 {
		t.Fatalf("under the budget: %v %v %d", err, resp, len(body))
	}
	before := splicing.Load()
	fmt.Fprintf(c, "GET http://api.test/size/%d HTTP/1.1\r\nHost: api.test\r\n\r\n", 4*budget)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("head: %v %v", err, resp)
	}
	got, err := io.Copy(io.Discard, resp.Body)
	if err == nil || got > budget || got < budget/2 {
		t.Errorf("received %d bytes (%v) of a 4 MiB body with a %d-byte budget", got, err, budget)
	}
	if splicing.Load() == before {
		t.Error("the body was not spliced")
	}
	recs := w.waitRecords(2)
	if r := recs[1]; r.Allowed || r.Rule != RuleByteLimit || r.BytesDown != got {
		t.Errorf("record %+v, client got %d", r, got)
	}
	var total int64
	for _, r := range recs {
		total += r.BytesUp + r.BytesDown
	}
	if total > budget {
		t.Errorf("records account for %d bytes, budget %d", total, budget)
	}
}

// rawServer is an upstream server written by hand, routed as
// api.test:port, whose connections are served by serve (i counts them
// from 0).
func rawServer(t *testing.T, w *world, port uint16, serve func(i int, c net.Conn, br *bufio.Reader)) *atomic.Int32 {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var open []net.Conn
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for _, c := range open {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	var n atomic.Int32
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			i := int(n.Add(1)) - 1
			mu.Lock()
			open = append(open, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				c.SetDeadline(time.Now().Add(10 * time.Second))
				serve(i, c, bufio.NewReader(c))
			}()
		}
	}()
	w.route(netip.AddrPortFrom(apiIP, port), l.Addr().String())
	return &n
}

// TestUpstreamClosedKeptConnection: a kept upstream connection that the
// server closes as the next request arrives is replaced by a new one for
// a request that may be sent twice (GET), and not for one that may not
// (POST: the server saw it once; the client gets a 502). One the server
// closed while it was kept is not used at all: a POST goes on a new one.
func TestUpstreamClosedKeptConnection(t *testing.T) {
	// Each connection serves one request, then reads the next and closes
	// without answering it (or, closeIdle, closes right after answering).
	serve := func(closeIdle bool, seen *atomic.Int32) func(int, net.Conn, *bufio.Reader) {
		return func(_ int, c net.Conn, br *bufio.Reader) {
			for k := 0; ; k++ {
				req, err := http.ReadRequest(br)
				if err != nil {
					return
				}
				io.Copy(io.Discard, req.Body)
				seen.Add(1)
				if k == 1 {
					return
				}
				fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
				if closeIdle {
					return
				}
			}
		}
	}
	for _, tc := range []struct {
		name      string
		closeIdle bool
		method    string
		status    int
		conns     int32
		seen      int32
	}{
		{"GET sent again", false, http.MethodGet, 200, 2, 3},
		{"POST not sent again", false, http.MethodPost, 502, 1, 2},
		{"closed while kept", true, http.MethodPost, 200, 2, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, nil)
			var seen atomic.Int32
			conns := rawServer(t, w, 8081, serve(tc.closeIdle, &seen))
			c, br := proxyConn(t, w)
			if resp, body, err := get(c, br, "api.test:8081", "http://api.test:8081/"); err != nil || resp.StatusCode != 200 || body != "ok" {
				t.Fatalf("first GET: %v %v %q", err, resp, body)
			}
			if tc.closeIdle {
				// The server closed the kept connection after answering:
				// wait (bounded) until the gateway's end sees it, which is
				// what the gateway goes by, so that the POST cannot race
				// the server's FIN.
				if !keptClosed(w, netip.AddrPortFrom(apiIP, 8081)) {
					t.Fatal("the server's close of the kept connection never reached the gateway")
				}
			}
			var req string
			if tc.method == http.MethodPost {
				req = "POST http://api.test:8081/ HTTP/1.1\r\nHost: api.test:8081\r\nContent-Length: 3\r\n\r\nabc"
			} else {
				req = "GET http://api.test:8081/ HTTP/1.1\r\nHost: api.test:8081\r\n\r\n"
			}
			io.WriteString(c, req)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.status || conns.Load() != tc.conns || seen.Load() != tc.seen {
				t.Errorf("%s: %d %q over %d upstream connections, the server saw %d requests; want %d, %d, %d",
					tc.method, resp.StatusCode, body, conns.Load(), seen.Load(), tc.status, tc.conns, tc.seen)
			}
		})
	}
}

// keptClosed waits up to 2 s until the gateway keeps a connection to ap
// whose peer has closed it.
func keptClosed(w *world, ap netip.AddrPort) bool {
	for i := 0; i < 200; i++ {
		w.gw.up.mu.Lock()
		l := w.gw.up.idle[ap]
		closed := len(l) > 0 && !peerOpen(l[len(l)-1].nc)
		w.gw.up.mu.Unlock()
		if closed {
			return true
		}
		time.Sleep(10 * time.Millisecond)
	}
	return false
}

// TestUpstreamAnswersEarly: a server that answers before the request's
// body is complete (413) is heard: the client gets the answer while its
// body is still being sent, and the connection ends after it.
func TestUpstreamAnswersEarly(t *testing.T) {
	w := newWorld(t, nil)
	rawServer(t, w, 8082, func(_ int, c net.Conn, br *bufio.Reader) {
		if _, err := http.ReadRequest(br); err != nil {
			return
		}
		io.WriteString(c, "HTTP/1.1 413 Content Too Large\r\nContent-Length: 3\r\nConnection: close\r\n\r\nbig")
		c.(*net.TCPConn).CloseWrite()
		io.Copy(io.Discard, br) // no reset: the answer must arrive
	})
	c, br := proxyConn(t, w)
	fmt.Fprintf(c, "POST http://api.test:8082/ HTTP/1.1\r\nHost: api.test:8082\r\nContent-Length: %d\r\n\r\n", 8<<20)
	c.Write(patternStream(64 << 10)) // and no more
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no answer while the body was incomplete: %v", err)
	}
	if body, _ := io.ReadAll(resp.Body); resp.StatusCode != 413 || string(body) != "big" {
		t.Errorf("answer %d %q", resp.StatusCode, body)
	}
	if _, err := br.ReadByte(); err != io.EOF {
		t.Errorf("connection after an early answer: %v, want it closed", err)
	}
}

// TestUpstreamInformational: informational (1xx) answers are dropped
// before the final one; a server that sends only those, beyond a bound,
// gets a 502.
func TestUpstreamInformational(t *testing.T) {
	w := newWorld(t, nil)
	rawServer(t, w, 8083, func(_ int, c net.Conn, br *bufio.Reader) {
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			n := 2
			if req.URL.Path == "/many" {
				n = 40
			}
			for i := 0; i < n; i++ {
				io.WriteString(c, "HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n")
			}
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		}
	})
	c, br := proxyConn(t, w)
	if resp, body, err := get(c, br, "api.test:8083", "http://api.test:8083/"); err != nil || resp.StatusCode != 200 || body != "ok" {
		t.Errorf("after two 103s: %v %v %q", err, resp, body)
	}
	if resp, body, err := get(c, br, "api.test:8083", "http://api.test:8083/many"); err != nil || resp.StatusCode != 502 || !strings.Contains(body, "informational") {
		t.Errorf("after forty 103s: %v %v %q", err, resp, body)
	}
}
