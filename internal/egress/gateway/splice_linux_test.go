package gateway

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/net/proxy"
)

// TestSplicedTunnel: a tunnel between two stream sockets is relayed with
// splice(2) in both directions, and several MiB arrive whole and in order
// each way, counted in the tunnel's record: through SOCKS5 and CONNECT
// from TCP, and through SOCKS5 from a unix socket (a gVisor sandbox's).
func TestSplicedTunnel(t *testing.T) {
	w := newWorld(t, nil)
	sock := filepath.Join(t.TempDir(), "socks.sock")
	ul, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	go w.gw.ServeSOCKS(ul)
	const size = 6<<20 + 12345
	up := patternStream(size)
	want := sha256.Sum256(up)
	for i, how := range []string{"socks", "connect", "unix socks"} {
		before := splicing.Load()
		var c interface {
			io.ReadWriter
			Close() error
		}
		var br *bufio.Reader
		switch how {
		case "socks", "unix socks":
			d, err := proxy.SOCKS5("tcp", w.socksProxy, nil, proxy.Direct)
			if how == "unix socks" {
				d, err = proxy.SOCKS5("unix", sock, nil, proxy.Direct)
			}
			if err != nil {
				t.Fatal(err)
			}
			sc, err := d.Dial("tcp", "api.test:80")
			if err != nil {
				t.Fatal(err)
			}
			c, br = sc, bufio.NewReader(sc)
		default:
			cc, cbr, resp := w.connect("api.test:80")
			if resp.StatusCode != 200 {
				t.Fatalf("CONNECT: %d", resp.StatusCode)
			}
			c, br = cc, cbr
		}
		// Up: a body of the pattern to /echo; down: the server sends it
		// back, then /size sends another pattern.
		go func() {
			fmt.Fprintf(c, "POST /echo HTTP/1.1\r\nHost: api.test\r\nContent-Length: %d\r\n\r\n", size)
			c.Write(up)
			fmt.Fprintf(c, "GET /size/%d HTTP/1.1\r\nHost: api.test\r\nConnection: close\r\n\r\n", size)
		}()
		for j, path := range []string{"/echo", "/size"} {
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("%s %s: %v", how, path, err)
			}
			h := sha256.New()
			n, err := io.Copy(h, resp.Body)
			resp.Body.Close()
			if err != nil || n != size || !bytes.Equal(h.Sum(nil), want[:]) {
				t.Fatalf("%s %s (response %d): %d bytes, err %v, intact %v", how, path, j, n, err, bytes.Equal(h.Sum(nil), want[:]))
			}
		}
		c.Close()
		rec := w.record(i + 1)
		if !rec.Allowed || rec.BytesUp < size || rec.BytesDown < 2*size || rec.Error != "" {
			t.Errorf("%s record: %+v", how, rec)
		}
		if got := splicing.Load() - before; got != 2 {
			t.Errorf("%s: %d tunnel directions spliced, want 2", how, got)
		}
	}
}

// TestSplicedTunnelBudget: on the splice path, which reads up to a MiB at
// once, the byte budget is spent to its last byte and no further (the
// control: a download that fits arrives whole).
func TestSplicedTunnelBudget(t *testing.T) {
	const budget = 3 << 20
	w := newWorld(t, func(c *Config) { c.MaxBytes = budget })
	c, br, _ := w.connect("api.test:80")
	fmt.Fprintf(c, "GET /size/%d HTTP/1.1\r\nHost: api.test\r\n\r\n", 2<<20)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := io.Copy(io.Discard, resp.Body); n != 2<<20 || err != nil {
		t.Fatalf("within the budget: %d bytes, %v", n, err)
	}
	fmt.Fprintf(c, "GET /size/%d HTTP/1.1\r\nHost: api.test\r\n\r\n", 4<<20)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, _ := io.Copy(io.Discard, br)
	rec := w.record(1)
	if rec.Allowed || rec.Rule != RuleByteLimit {
		t.Errorf("record %+v", rec)
	}
	if total := rec.BytesUp + rec.BytesDown; total != budget {
		t.Errorf("the tunnel moved %d bytes with a %d-byte budget", total, budget)
	}
	if got < 1<<20-4096 || got > 1<<20 {
		t.Errorf("the client read %d bytes of the second response, want the budget's last MiB less the heads", got)
	}
}

// tcpPair returns the two ends of a loopback TCP connection.
func tcpPair(t *testing.T) (*net.TCPConn, *net.TCPConn) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); s.Close() })
	return c.(*net.TCPConn), s.(*net.TCPConn)
}

// TestSplicedTunnelSlowReader: a client that reads steadily but slowly is
// not idle, however long the whole transfer takes: as on the copy path,
// each write's progress renews the idle deadline (a splice moves up to a
// MiB, which a slow reader behind a small socket buffer drains in longer
// than the timeout). The control: a client that stops reading is cut off
// after the timeout.
func TestSplicedTunnelSlowReader(t *testing.T) {
	const idle = 200 * time.Millisecond
	const size = 6 << 20
	// Made before the tunnel's idle clock starts: under the race
	// detector, making 6 MiB of pattern took longer than the timeout,
	// and the tunnel ended idle before its first byte.
	data := patternStream(size)
	for _, stall := range []bool{false, true} {
		upFar, upNear := tcpPair(t)       // the server's end, the gateway's
		downNear, downFar := tcpPair(t)   // the gateway's end, the client's
		downNear.SetWriteBuffer(64 << 10) // a write wakes up every few KiB read
		downFar.SetReadBuffer(64 << 10)
		tn := &tunnel{g: &Gateway{}, idle: idle}
		tn.touch()
		before := splicing.Load()
		done := make(chan error, 1)
		go func() {
			err := tn.pump(downNear, upNear, &tn.received, nil, nil)
			downNear.Close() // as relay does: the client sees the end at once
			done <- err
		}()
		go func() { upFar.Write(data); upFar.CloseWrite() }()
		start := time.Now()
		var got int64
		buf := make([]byte, 64<<10)
		downFar.SetReadDeadline(time.Now().Add(30 * time.Second))
		for {
			if stall && got >= 1<<20 {
				// The control: the client stops reading.
				select {
				case err := <-done:
					if err == nil {
						t.Error("the tunnel of a client that stopped reading ended cleanly")
					}
				case <-time.After(5 * idle):
					t.Errorf("a client that stopped reading was not cut off within %v", 5*idle)
				}
				break
			}
			n, err := downFar.Read(buf)
			got += int64(n)
			if err != nil {
				break
			}
			time.Sleep(20 * time.Millisecond) // 64 KiB per 20 ms: about 3 MB/s
		}
		if stall {
			continue
		}
		err := <-done
		if got != size || err != nil {
			t.Errorf("a slow reader got %d of %d bytes in %v (idle timeout %v): %v", got, size, time.Since(start), idle, err)
		}
		if d := time.Since(start); d < 4*idle {
			t.Errorf("the slow transfer took %v: not long enough to test the timeout", d)
		}
		if splicing.Load() == before {
			t.Error("the tunnel was not spliced")
		}
	}
}
