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
	"fmt"
	"github.com/airlock-dev/airlock/internal/buildtest"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/client"
)

var (
	airlockBin string
	skipReason string
)

func TestMain(m *testing.M) { os.Exit(testMain(m)) }

func testMain(m *testing.M) int {
	switch {
	case os.Geteuid() != 0:
		skipReason = "needs root (the daemon's sandboxes use cgroups; host-side oracles)"
	case !exists("/proc/self/ns/user"):
		skipReason = "user namespaces are not available"
	}
	if _, err := exec.LookPath("go"); err != nil && skipReason == "" {
		skipReason = "the go tool is not in PATH"
	}
	if skipReason != "" {
		fmt.Println("serve: skipping all tests:", skipReason)
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "airlock-serve-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o755)
	airlockBin = filepath.Join(dir, "airlock")
	if err := buildtest.Airlock(airlockBin); err != nil {
		fmt.Fprintf(os.Stderr, "serve: build: %v\n", err)
		return 1
	}
	return m.Run()
}

func exists(p string) bool { _, err := os.Stat(p); return err == nil }

func need(t testing.TB) {
	t.Helper()
	if skipReason != "" {
		t.Skip(skipReason)
	}
}

// daemon is one `airlock serve` process with its own socket, data and
// state directories.
type daemon struct {
	t        testing.TB
	dir      string
	sock     string
	stateDir string
	cfg      string
	listen   string
	cmd      *exec.Cmd
	logs     *lockedBuffer
	exited   chan struct{}
	c        *client.Client
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startDaemon starts a daemon with the given extra configuration (YAML
// lines). It is stopped, and every sandbox it still has deleted, at the
// end of the test.
func startDaemon(t testing.TB, extra string) *daemon {
	t.Helper()
	need(t)
	dir, err := os.MkdirTemp("", "airlock-serve-")
	if err != nil {
		t.Fatal(err)
	}
	// The sandboxes' inits (unprivileged on the host) must traverse it to
	// their state directories.
	os.Chmod(dir, 0o711)
	d := &daemon{t: t, dir: dir, sock: filepath.Join(dir, "airlock.sock"), stateDir: filepath.Join(dir, "state"), cfg: filepath.Join(dir, "config.yaml")}
	conf := fmt.Sprintf("socket: %s\ndata_dir: %s\nstate_dir: %s\nlog_level: debug\n%s\n", d.sock, filepath.Join(dir, "data"), d.stateDir, extra)
	if err := os.WriteFile(d.cfg, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(extra, "\n") {
		if v, ok := strings.CutPrefix(l, "listen: "); ok {
			d.listen = strings.TrimSpace(v)
		}
	}
	d.start()
	t.Cleanup(func() {
		if d.cmd != nil {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if list, err := d.c.AllSandboxes(ctx, client.ListOptions{}); err == nil {
				for _, sb := range list {
					d.c.DeleteSandbox(ctx, sb.ID)
				}
			}
			d.stop(syscall.SIGTERM)
		}
		if t.Failed() {
			t.Logf("daemon log:\n%s", tail(d.logs.String(), 60))
		}
		os.RemoveAll(dir)
	})
	return d
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// start starts the daemon process and waits until it is ready.
func (d *daemon) start() {
	d.t.Helper()
	if d.logs == nil {
		d.logs = &lockedBuffer{}
	}
	d.cmd = exec.Command(airlockBin, "serve", "--config", d.cfg)
	d.cmd.Stdout, d.cmd.Stderr = d.logs, d.logs
	if err := d.cmd.Start(); err != nil {
		d.t.Fatal(err)
	}
	d.exited = make(chan struct{})
	go func(cmd *exec.Cmd, ch chan struct{}) { cmd.Wait(); close(ch) }(d.cmd, d.exited)
	c, err := client.New("unix://"+d.sock, "")
	if err != nil {
		d.t.Fatal(err)
	}
	d.c = c
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.Ready(ctx)
		cancel()
		if err == nil {
			return
		}
		select {
		case <-d.exited:
			d.t.Fatalf("daemon exited at start:\n%s", d.logs.String())
		default:
		}
		if time.Now().After(deadline) {
			d.t.Fatalf("daemon not ready after 30s: %v\n%s", err, d.logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop signals the daemon and waits for it to exit.
func (d *daemon) stop(sig syscall.Signal) {
	d.t.Helper()
	d.cmd.Process.Signal(sig)
	select {
	case <-d.exited:
	case <-time.After(30 * time.Second):
		d.cmd.Process.Kill()
		<-d.exited
		d.t.Errorf("daemon did not exit within 30s of %v", sig)
	}
	d.cmd = nil
}

// restart stops the daemon with sig and starts a new one on the same
// directories.
func (d *daemon) restart(sig syscall.Signal) {
	d.t.Helper()
	d.stop(sig)
	d.start()
}

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
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
