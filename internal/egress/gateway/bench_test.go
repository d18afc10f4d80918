package gateway

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
)

const benchSize = 64 << 20

// benchWorld is a world without audit bookkeeping.
func benchWorld(b *testing.B) *world {
	b.Helper()
	return newWorld(b, func(c *Config) { c.Audit = nil })
}

// directClient talks to the upstream servers without the gateway, by the
// same names (api.test goes to the loopback servers).
func (w *world) directClient(keepAlive bool) *http.Client {
	plain, secure := w.plain.Listener.Addr().String(), w.secure.Listener.Addr().String()
	tr := &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			_, port, _ := net.SplitHostPort(addr)
			var d net.Dialer
			if port == "443" {
				return d.DialContext(ctx, network, secure)
			}
			return d.DialContext(ctx, network, plain)
		},
		TLSClientConfig:   &tls.Config{RootCAs: w.roots},
		DisableKeepAlives: !keepAlive,
	}
	w.tb.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

func benchDownload(b *testing.B, c *http.Client, url string) {
	b.SetBytes(benchSize)
	b.ResetTimer()
	for b.Loop() {
		resp, err := c.Get(url)
		if err != nil {
			b.Fatal(err)
		}
		n, err := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil || n != benchSize {
			b.Fatalf("%d bytes, %v", n, err)
		}
	}
}

var sizeURL = fmt.Sprintf("http://api.test/size/%d", benchSize)

func BenchmarkDownloadDirect(b *testing.B) {
	w := benchWorld(b)
	benchDownload(b, w.directClient(true), sizeURL)
}

func BenchmarkDownloadViaHTTPProxy(b *testing.B) {
	w := benchWorld(b)
	benchDownload(b, w.httpClient(), sizeURL)
}

func BenchmarkDownloadViaSOCKS(b *testing.B) {
	w := benchWorld(b)
	benchDownload(b, w.socksClient(), sizeURL)
}

func BenchmarkDownloadTLSDirect(b *testing.B) {
	w := benchWorld(b)
	benchDownload(b, w.directClient(true), "https://api.test/size/67108864")
}

func BenchmarkDownloadTLSViaCONNECT(b *testing.B) {
	w := benchWorld(b)
	benchDownload(b, w.httpClient(), "https://api.test/size/67108864")
}

func benchRequest(b *testing.B, c *http.Client, url string) {
	for b.Loop() {
		resp, err := c.Get(url)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatal(resp.Status)
		}
	}
}

// Small GETs on a kept-alive connection.
func BenchmarkRequestDirect(b *testing.B) {
	w := benchWorld(b)
	benchRequest(b, w.directClient(true), "http://api.test/")
}

func BenchmarkRequestViaProxy(b *testing.B) {
	w := benchWorld(b)
	benchRequest(b, w.httpClient(), "http://api.test/")
}

func BenchmarkRequestViaSOCKS(b *testing.B) {
	w := benchWorld(b)
	benchRequest(b, w.socksClient(), "http://api.test/")
}

// A new connection and TLS handshake per request.
func BenchmarkRequestTLSDirect(b *testing.B) {
	w := benchWorld(b)
	benchRequest(b, w.directClient(false), "https://api.test/")
}

func BenchmarkRequestTLSViaCONNECT(b *testing.B) {
	w := benchWorld(b)
	c := w.httpClient()
	c.Transport.(*http.Transport).DisableKeepAlives = true
	benchRequest(b, c, "https://api.test/")
}

// New TCP connections, one small request each: the cost of deciding,
// resolving, dialing and auditing a connection.
func BenchmarkNewConnections(b *testing.B) {
	exchange := func(b *testing.B, c net.Conn, br *bufio.Reader, path string) {
		if resp, body, err := get(c, br, "api.test", path); err != nil || resp.StatusCode != 200 || body != "hello api.test" {
			b.Fatal(err, body)
		}
		c.Close()
	}
	b.Run("Direct", func(b *testing.B) {
		w := benchWorld(b)
		for b.Loop() {
			c, err := net.Dial("tcp", w.plain.Listener.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			exchange(b, c, bufio.NewReader(c), "/")
		}
	})
	b.Run("CONNECT", func(b *testing.B) {
		w := benchWorld(b)
		for b.Loop() {
			c, br, resp := w.connect("api.test:80")
			if resp.StatusCode != 200 {
				b.Fatal(resp.Status)
			}
			exchange(b, c, br, "/")
		}
	})
	b.Run("SOCKS", func(b *testing.B) {
		w := benchWorld(b)
		for b.Loop() {
			c, err := w.socksDial("api.test:80")
			if err != nil {
				b.Fatal(err)
			}
			exchange(b, c, bufio.NewReader(c), "/")
		}
	})
	b.Run("PlainHTTP", func(b *testing.B) {
		w := benchWorld(b)
		for b.Loop() {
			c, err := net.Dial("tcp", w.httpProxy)
			if err != nil {
				b.Fatal(err)
			}
			exchange(b, c, bufio.NewReader(c), "http://api.test/")
		}
	})
}

// BenchmarkScrubReader: what scrubbing a credential's spellings costs per
// byte of a body that holds none of them (random bytes, read 32 KiB at a
// time as the gateway does), next to reading the body plainly.
func BenchmarkScrubReader(b *testing.B) {
	const secret = "ghp_0123456789abcdefABCDEF0123456789abcd"
	pairs := []string{secret, "airlock-placeholder-0123456789abcdef0123456789abcdef"}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding, base64.RawStdEncoding, base64.RawURLEncoding} {
		pairs = append(pairs, enc.EncodeToString([]byte(secret)), enc.EncodeToString([]byte(pairs[1])))
	}
	data := make([]byte, 8<<20)
	rand.Read(data)
	buf := make([]byte, 32<<10)
	for _, scrub := range []bool{false, true} {
		b.Run(map[bool]string{false: "Plain", true: "Scrubbed"}[scrub], func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				var r io.Reader = bytes.NewReader(data)
				if scrub {
					r = newReplacer(pairs).reader(r)
				}
				if n, err := io.CopyBuffer(io.Discard, struct{ io.Reader }{r}, buf); err != nil || n != int64(len(data)) {
					b.Fatal(n, err)
				}
			}
		})
	}
}
