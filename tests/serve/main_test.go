//go:build linux

// Package serve tests `airlock serve` end to end: a real daemon process
// (the built binary) with a real SQLite store and real sandboxes, driven
// through the Go SDK (package client) the way a user would, and through the
// CLI. Denials sit next to their positive controls; host-side oracles (the
// host's files, the state directory, cgroups, /proc) are preferred over
// what the daemon reports.
package serve

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/client"
	"github.com/airlock-dev/airlock/internal/testdaemon"
)

var airlockBin string // the binary testdaemon.Main built

func TestMain(m *testing.M) {
	os.Exit(testdaemon.Main(m, "serve", func() { airlockBin = testdaemon.Bin }))
}

func exists(p string) bool { _, err := os.Stat(p); return err == nil }

func need(t testing.TB) { t.Helper(); testdaemon.Need(t) }

// daemon is one `airlock serve` process (internal/testdaemon) with its own
// socket, data and state directories, under the short names these tests
// use.
type daemon struct {
	*testdaemon.Daemon
	c                                *client.Client // the SDK over the unix socket (a new one after each restart)
	dir, sock, stateDir, cfg, listen string
}

// startDaemon starts a daemon with the given extra configuration (YAML
// lines). It is stopped, and every sandbox it still has deleted, at the
// end of the test.
func startDaemon(t testing.TB, extra string) *daemon {
	t.Helper()
	td := testdaemon.Start(t, extra)
	return &daemon{Daemon: td, c: td.C, dir: td.Dir, sock: td.Sock, stateDir: td.StateDir, cfg: td.Config, listen: td.Listen}
}

func tail(s string, n int) string { return testdaemon.Tail(s, n) }

// start starts the daemon process again and waits until it is ready.
func (d *daemon) start() { d.StartProcess(); d.c = d.C }

// stop signals the daemon and waits for it to exit.
func (d *daemon) stop(sig syscall.Signal) { d.Stop(sig) }

// restart stops the daemon with sig and starts a new one on the same
// directories.
func (d *daemon) restart(sig syscall.Signal) { d.Restart(sig); d.c = d.C }

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// create makes a sandbox or fails the test.
func (d *daemon) create(t testing.TB, req *api.CreateSandboxRequest) *api.Sandbox {
	t.Helper()
	if req == nil {
		req = &api.CreateSandboxRequest{}
	}
	sb, err := d.c.CreateSandbox(ctxT(t), req)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	return sb
}

// sh runs a shell command in a sandbox and returns stdout; a non-zero
// exit fails the test.
func (d *daemon) sh(t testing.TB, id, script string) string {
	t.Helper()
	res, err := d.c.Exec(ctxT(t), id, &api.ExecRequest{Argv: []string{"sh", "-c", script}})
	if err != nil {
		t.Fatalf("exec %q: %v", script, err)
	}
	if res.ExitCode != 0 {
		t.Fatalf("exec %q: exit %d, stderr %q", script, res.ExitCode, res.Stderr)
	}
	return string(res.Stdout)
}

// wantCode checks that err is an API error with the given status.
func wantCode(t testing.TB, what string, err error, status int) {
	t.Helper()
	var e *client.Error
	if !errors.As(err, &e) {
		t.Fatalf("%s: want HTTP %d, got %v", what, status, err)
	}
	if e.Status != status {
		t.Fatalf("%s: want HTTP %d, got %d (%s: %s)", what, status, e.Status, e.Code, e.Message)
	}
	if e.Message == "" || e.Code == "" {
		t.Fatalf("%s: error without code or message: %+v", what, e)
	}
}

// rawRequest sends a request over the daemon's socket without the SDK
// (for inputs the SDK would never produce).
func (d *daemon) rawRequest(t testing.TB, method, path string, body io.Reader, hdr map[string]string) (*http.Response, []byte) {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", d.sock)
	}}}
	req, err := http.NewRequest(method, "http://airlock"+path, body)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

// metric reads one sample from /metrics ("name{labels}" as printed).
func (d *daemon) metric(t testing.TB, series string) float64 {
	t.Helper()
	_, b := d.rawRequest(t, "GET", "/metrics", nil, nil)
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			if err != nil {
				t.Fatalf("metric %s: %q", series, line)
			}
			return f
		}
	}
	return 0
}

// stateEntries lists the runtime state directory's sandbox entries.
func (d *daemon) stateEntries() []string {
	entries, _ := os.ReadDir(d.stateDir)
	var out []string
	for _, e := range entries {
		if len(e.Name()) == 16 {
			out = append(out, e.Name())
		}
	}
	return out
}

// eventually polls cond for up to d.
func eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	testdaemon.Eventually(t, d, what, cond)
}
