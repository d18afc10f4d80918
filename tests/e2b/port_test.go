//go:build linux

package e2b_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/client"
	"github.com/airlock-dev/airlock/internal/testdaemon"
)

// get sends one HTTP/1.0 request over a tunnel and returns the answer.
func tunnelGet(t *testing.T, rwc io.ReadWriteCloser, path string) string {
	t.Helper()
	defer rwc.Close()
	if _, err := io.WriteString(rwc, "GET "+path+" HTTP/1.0\r\nX-Custom: tun\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(rwc)
	if err != nil {
		t.Fatalf("read through the tunnel: %v", err)
	}
	return string(b)
}

// TestPortTunnel: airlock's own API and CLI reach a port inside a sandbox
// (GET /v1/sandboxes/{id}/ports/{port}, client.DialPort, `airlock port`),
// only for keys that may see the sandbox.
func TestPortTunnel(t *testing.T) {
	d := startE2B(t, "")
	ctx := testdaemon.Ctx(t)
	sb, err := d.C.CreateSandbox(ctx, &api.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := d.C.StartProcess(ctx, sb.ID, &api.ExecRequest{Argv: []string{"python3", "-u", "-c", previewServer}})
	if err != nil {
		t.Fatal(err)
	}
	waitOutput(t, d, sb.ID, p.ID, "listening")

	// Over the unix socket and over TCP with a key.
	rwc, err := d.C.DialPort(ctx, sb.ID, 8123)
	if err != nil {
		t.Fatalf("DialPort over the socket: %v", err)
	}
	if got := tunnelGet(t, rwc, "/sock"); !strings.Contains(got, "200 OK") || !strings.Contains(got, "GET /sock custom=tun") {
		t.Errorf("through the socket's tunnel: %q", got)
	}
	ct, _ := client.New(d.base, d.key)
	rwc, err = ct.DialPort(ctx, sb.ID, 8123)
	if err != nil {
		t.Fatalf("DialPort over TCP: %v", err)
	}
	if got := tunnelGet(t, rwc, "/tcp"); !strings.Contains(got, "GET /tcp") || strings.Contains(got, d.key) {
		t.Errorf("through the TCP tunnel: %q", got)
	}

	// Refusals.
	other, err := d.C.CreateTenantKey(ctx, "other", "other")
	if err != nil {
		t.Fatal(err)
	}
	co, _ := client.New(d.base, other.Key)
	if _, err := co.DialPort(ctx, sb.ID, 8123); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("another tenant's key: %v, want not found", err)
	}
	cn, _ := client.New(d.base, "")
	if _, err := cn.DialPort(ctx, sb.ID, 8123); !errors.Is(err, client.ErrUnauthorized) {
		t.Errorf("no key over TCP: %v, want unauthorized", err)
	}
	if _, err := d.C.DialPort(ctx, sb.ID, 8124); !errors.Is(err, client.ErrUnavailable) {
		t.Errorf("a port nothing listens on: %v, want unavailable", err)
	}
	if _, err := d.C.DialPort(ctx, sb.ID, 0); !errors.Is(err, client.ErrInvalid) {
		t.Errorf("port 0: %v, want invalid", err)
	}
	if _, err := d.C.DialPort(ctx, "sb-00000000deadbeef", 8123); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("an unknown sandbox: %v, want not found", err)
	}
	r := do(t, "GET", d.base+"/v1/sandboxes/"+sb.ID+"/ports/8123", map[string]string{"Authorization": "Bearer " + d.key}, nil)
	wantStatus(t, "without the upgrade headers", r, 400)

	// The CLI forwards a local port.
	cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(cctx, testdaemon.Bin, "port", sb.ID, "8123", "--host", "unix://"+d.Sock)
	out, _ := cmd.StdoutPipe()
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Signal(syscall.SIGTERM); cmd.Wait() }()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("airlock port printed no address: %v (%s)", err, stderr.String())
	}
	res, err := http.Get("http://" + strings.TrimSpace(line) + "/cli")
	if err != nil {
		t.Fatalf("through airlock port: %v", err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || !strings.HasPrefix(string(b), "GET /cli ") {
		t.Errorf("through airlock port: %d %q", res.StatusCode, b)
	}
	// Its refusal is one line and a non-zero exit.
	bad := exec.CommandContext(cctx, testdaemon.Bin, "port", sb.ID, "8124", "--host", "unix://"+d.Sock)
	msg, err := bad.CombinedOutput()
	if err == nil || strings.Count(strings.TrimSpace(string(msg)), "\n") != 0 || !strings.Contains(string(msg), "nothing listens") {
		t.Errorf("airlock port to a closed port: %v %q", err, msg)
	}
	if !strings.Contains(d.Logs(), "port tunnel opened") {
		t.Errorf("tunnels were not logged")
	}
}

// afterEOFServer answers each connection only once the client has ended
// its side: it reads to the end of stream, then says how much it read.
const afterEOFServer = `
import socket, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 8125)); s.listen(8)
print("listening", flush=True)
while True:
    c, _ = s.accept()
    n = 0
    while True:
        b = c.recv(65536)
        if not b: break
        n += len(b)
    time.sleep(0.1)
    c.sendall(b"read %d bytes" % n); c.close()
`

// TestPortTunnelHalfClose: a client that ends its side of a tunnel (a
// request then an end of stream, as HTTP/1.0 clients and nc do) still
// reads the whole answer, through the Go client and through `airlock
// port`; the daemon passes each end of stream on instead of closing both.
func TestPortTunnelHalfClose(t *testing.T) {
	d := startE2B(t, "")
	ctx := testdaemon.Ctx(t)
	sb, err := d.C.CreateSandbox(ctx, &api.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := d.C.StartProcess(ctx, sb.ID, &api.ExecRequest{Argv: []string{"python3", "-u", "-c", afterEOFServer}})
	if err != nil {
		t.Fatal(err)
	}
	waitOutput(t, d, sb.ID, p.ID, "listening")
	send := func(name string, w io.Writer, closeWrite func() error, r io.Reader) {
		t.Helper()
		if _, err := w.Write(make([]byte, 100000)); err != nil {
			t.Fatalf("%s: write: %v", name, err)
		}
		if err := closeWrite(); err != nil {
			t.Fatalf("%s: close the write half: %v", name, err)
		}
		b, err := io.ReadAll(r)
		if got := string(b); err != nil || got != "read 100000 bytes" {
			t.Errorf("%s: answer after the end of the request: %q, %v", name, got, err)
		}
	}

	tun, err := d.C.DialPort(ctx, sb.ID, 8125)
	if err != nil {
		t.Fatal(err)
	}
	send("client.DialPort", tun, tun.CloseWrite, tun)
	tun.Close()

	cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(cctx, testdaemon.Bin, "port", sb.ID, "8125", "--host", "unix://"+d.Sock)
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Signal(syscall.SIGTERM); cmd.Wait() }()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("airlock port printed no address: %v", err)
	}
	c, err := net.Dial("tcp", strings.TrimSpace(line))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	send("airlock port", c, c.(*net.TCPConn).CloseWrite, c)
}
