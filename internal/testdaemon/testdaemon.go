//go:build linux

// Package testdaemon starts real `airlock serve` processes for the test
// suites that drive the daemon from outside (the E2B layer, the SDKs, the
// MCP server): one built binary per test binary, one daemon per test with
// its own socket, data and state directories, stopped and emptied at the
// test's end.
package testdaemon

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/client"
	"github.com/airlock-dev/airlock/internal/buildtest"
)

var (
	// Bin is the airlock binary that Main built ("" when skipping).
	Bin string
	// SkipReason is why the suite cannot run here ("" when it can).
	SkipReason string
)

// Main is a TestMain body: it decides whether the suite can run (root,
// user namespaces, the go tool), builds airlock once, calls each of built
// (with Bin set), runs the tests and removes the build. Use it as
// `func TestMain(m *testing.M) { os.Exit(testdaemon.Main(m, "suite")) }`.
func Main(m *testing.M, suite string, built ...func()) int {
	switch {
	case os.Geteuid() != 0:
		SkipReason = "needs root (the daemon's sandboxes use cgroups)"
	case !exists("/proc/self/ns/user"):
		SkipReason = "user namespaces are not available"
	}
	if _, err := exec.LookPath("go"); err != nil && SkipReason == "" {
		SkipReason = "the go tool is not in PATH"
	}
	if SkipReason != "" {
		fmt.Printf("%s: skipping all tests: %s\n", suite, SkipReason)
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "airlock-"+suite+"-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o755)
	Bin = filepath.Join(dir, "airlock")
	if err := buildtest.Airlock(Bin); err != nil {
		fmt.Fprintf(os.Stderr, "%s: build: %v\n", suite, err)
		return 1
	}
	for _, f := range built {
		f()
	}
	return m.Run()
}

func exists(p string) bool { _, err := os.Stat(p); return err == nil }

// Need skips the test when the suite cannot run here.
func Need(t testing.TB) {
	t.Helper()
	if SkipReason != "" {
		t.Skip(SkipReason)
	}
}

// Daemon is one `airlock serve` process.
type Daemon struct {
	t        testing.TB
	Dir      string // its private directory (config, socket, data, state)
	Sock     string // the API's unix socket
	StateDir string
	DataDir  string
	Config   string // the configuration file
	Listen   string // the TCP address from `listen:` in the extra configuration, if any
	C        *client.Client
	logs     *LockedBuffer
	cmd      *exec.Cmd
	exited   chan struct{}
}

// LockedBuffer is a bytes.Buffer that several goroutines (a process's
// stdout and stderr copiers, a test) may use at once.
type LockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *LockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *LockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// FreeAddr returns a loopback TCP address that was free a moment ago.
func FreeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// Start starts a daemon with extra configuration (YAML lines appended to
// the generated file) and waits until it is ready. At the test's end every
// sandbox it still holds is deleted and it is stopped with SIGTERM.
func Start(t testing.TB, extra string) *Daemon {
	t.Helper()
	Need(t)
	dir, err := os.MkdirTemp("", "airlock-td-")
	if err != nil {
		t.Fatal(err)
	}
	// The sandboxes' inits (unprivileged on the host) traverse it.
	os.Chmod(dir, 0o711)
	d := &Daemon{t: t, Dir: dir, Sock: filepath.Join(dir, "airlock.sock"), StateDir: filepath.Join(dir, "state"),
		DataDir: filepath.Join(dir, "data"), Config: filepath.Join(dir, "config.yaml")}
	conf := fmt.Sprintf("socket: %s\ndata_dir: %s\nstate_dir: %s\nlog_level: debug\n%s\n", d.Sock, d.DataDir, d.StateDir, extra)
	if err := os.WriteFile(d.Config, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(extra, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "listen: "); ok {
			d.Listen = strings.Trim(strings.TrimSpace(v), `"'`)
		}
	}
	d.StartProcess()
	t.Cleanup(func() {
		if d.cmd != nil {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if list, err := d.C.AllSandboxes(ctx, client.ListOptions{}); err == nil {
				for _, sb := range list {
					d.C.DeleteSandbox(ctx, sb.ID)
				}
			}
			d.Stop(syscall.SIGTERM)
		}
		if t.Failed() {
			t.Logf("daemon log:\n%s", Tail(d.Logs(), 80))
		}
		// The volumes' copy-on-write pool, if a daemon killed or busy at
		// its end left it mounted.
		syscall.Unmount(filepath.Join(d.DataDir, "volumes"), syscall.MNT_DETACH)
		os.RemoveAll(dir)
	})
	return d
}

// Logs is everything the daemon printed so far.
func (d *Daemon) Logs() string { return d.logs.String() }

// Tail keeps the last n lines of s.
func Tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// StartProcess starts the daemon process and waits (at most 30 s) until it
// answers; Start calls it, and Restart does again.
func (d *Daemon) StartProcess() {
	d.t.Helper()
	if d.logs == nil {
		d.logs = &LockedBuffer{}
	}
	d.cmd = exec.Command(Bin, "serve", "--config", d.Config)
	d.cmd.Stdout, d.cmd.Stderr = d.logs, d.logs
	if err := d.cmd.Start(); err != nil {
		d.t.Fatal(err)
	}
	d.exited = make(chan struct{})
	go func(cmd *exec.Cmd, ch chan struct{}) { cmd.Wait(); close(ch) }(d.cmd, d.exited)
	c, err := client.New("unix://"+d.Sock, "")
	if err != nil {
		d.t.Fatal(err)
	}
	d.C = c
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

// Pid is the daemon process's pid (0 when stopped).
func (d *Daemon) Pid() int {
	if d.cmd == nil || d.cmd.Process == nil {
		return 0
	}
	return d.cmd.Process.Pid
}

// Stop signals the daemon and waits (at most 30 s, then SIGKILL) for it.
func (d *Daemon) Stop(sig syscall.Signal) {
	d.t.Helper()
	if d.cmd == nil {
		return
	}
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

// Restart stops the daemon with sig and starts a new one on the same
// directories.
func (d *Daemon) Restart(sig syscall.Signal) {
	d.t.Helper()
	d.Stop(sig)
	d.StartProcess()
}

// Key makes an API key (over the unix socket, as `airlock keys create`
// does) and returns its secret.
func (d *Daemon) Key(t testing.TB, name string) string {
	t.Helper()
	k, err := d.C.CreateKey(Ctx(t), name)
	if err != nil {
		t.Fatalf("create key: %v", err)
	}
	return k.Key
}

// Ctx is a context bounded to two minutes and cancelled at the test's end.
func Ctx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// Eventually polls cond every 20 ms for up to limit.
func Eventually(t testing.TB, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", limit, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// NPMInstall copies files from src (a package.json, its package-lock.json
// and the test's scripts) into a temporary directory and installs the
// pinned packages there with `npm ci`. It skips the test, saying why,
// without node 18 or newer and npm.
func NPMInstall(t testing.TB, src string, files ...string) string {
	t.Helper()
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed (Debian: apt-get install nodejs npm; the project's CI installs them)", tool)
		}
	}
	v, err := exec.Command("node", "-p", "process.versions.node.split('.')[0]").Output()
	if n, _ := strconv.Atoi(strings.TrimSpace(string(v))); err != nil || n < 18 {
		t.Skipf("node %s is older than 18", strings.TrimSpace(string(v)))
	}
	dir := t.TempDir()
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "npm", "ci", "--ignore-scripts", "--no-audit", "--no-fund", "--loglevel=error")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm ci in a copy of %s: %v\n%s", src, err, out)
	}
	return dir
}
