//go:build linux

// Package e2e runs the escape and robustness probes of /work/shared/probes.md
// against the real airlock binary. Every denial sits next to its positive
// control: the same action where it is permitted must succeed, so that a
// probe can never pass because the test itself is broken. Host-side oracles
// (hashes, files, processes, cgroups) are preferred over what the sandbox
// prints.
package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/airlock-dev/airlock/internal/buildtest"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// runTimeout bounds every airlock run.
const runTimeout = 60 * time.Second

var (
	airlockBin string // the binary under test
	binDir     string // its world-readable directory
	skipReason string // why everything is skipped, if it is
)

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	if reason := prerequisites(); reason != "" {
		skipReason = reason
		fmt.Println("e2e: skipping all tests:", reason)
		return m.Run()
	}
	var err error
	binDir, err = os.MkdirTemp("", "airlock-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer os.RemoveAll(binDir)
	if err := os.Chmod(binDir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	airlockBin = filepath.Join(binDir, "airlock")
	if prebuilt := os.Getenv("AIRLOCK_E2E_BIN"); prebuilt != "" {
		// Test a given binary instead (e.g. to check that a probe catches
		// a known-bad build).
		b, err := os.ReadFile(prebuilt)
		if err == nil {
			err = os.WriteFile(airlockBin, b, 0o755)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "e2e: AIRLOCK_E2E_BIN:", err)
			return 1
		}
	} else {
		if err := buildtest.Airlock(airlockBin); err != nil {
			fmt.Fprintf(os.Stderr, "e2e: build failed: %v\n", err)
			return 1
		}
	}
	if err := os.Chmod(airlockBin, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	return m.Run()
}

// prerequisites says why the suite cannot run here ("" when it can).
func prerequisites() string {
	if _, err := os.Stat("/proc/self/ns/user"); err != nil {
		return "user namespaces are not available (no /proc/self/ns/user)"
	}
	if b, err := os.ReadFile("/proc/sys/user/max_user_namespaces"); err == nil && strings.TrimSpace(string(b)) == "0" {
		return "user namespaces are disabled (user.max_user_namespaces = 0)"
	}
	if b, err := os.ReadFile("/proc/sys/kernel/unprivileged_userns_clone"); err == nil && strings.TrimSpace(string(b)) == "0" && os.Geteuid() != 0 {
		return "unprivileged user namespaces are disabled (kernel.unprivileged_userns_clone = 0)"
	}
	if _, err := exec.LookPath("go"); err != nil {
		return "the go tool is not in PATH"
	}
	return ""
}

// need skips the test when the suite cannot run.
func need(t testing.TB) {
	t.Helper()
	if skipReason != "" {
		t.Skip(skipReason)
	}
}

// needRoot skips the test unless it runs as root.
func needRoot(t testing.TB) {
	t.Helper()
	need(t)
	if os.Geteuid() != 0 {
		t.Skip("needs root (host-side oracles, cgroups or running as nobody)")
	}
}

// opts are how one airlock process is started.
type opts struct {
	stdin   string
	env     []string // extra environment of the airlock process
	nobody  bool     // run as uid/gid 65534 (adds --insecure-no-cgroups unless noFlag)
	noFlag  bool     // with nobody: do not add --insecure-no-cgroups
	extra   []*os.File
	timeout time.Duration
}

// result is what one airlock run gave.
type result struct {
	stdout, stderr string
	code           int
	dur            time.Duration
}

func (r result) String() string {
	return fmt.Sprintf("exit %d after %s\n--- stdout:\n%s\n--- stderr:\n%s", r.code, r.dur.Round(time.Millisecond), r.stdout, r.stderr)
}

const nobodyID = 65534

// baseEnv is the environment of the airlock process.
func baseEnv(o opts) []string {
	env := []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8"}
	if o.nobody {
		env = append(env, "HOME=/nonexistent")
	} else {
		// The suite's runs keep their workspace runs in a changes root
		// of its own, removed at its end, not in the machine's (a test
		// that lists runs gives itself one: changesEnv).
		env = append(env, "HOME="+os.Getenv("HOME"), "AIRLOCK_CHANGES_DIR="+filepath.Join(binDir, "changes"))
	}
	// Where the gvisor backend finds runsc (o.env may override it).
	for _, k := range []string{"AIRLOCK_RUNSC", "AIRLOCK_RUNSC_CACHE"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return append(env, o.env...)
}

// command builds the airlock command; args follow the binary name.
func command(ctx context.Context, o opts, args ...string) *exec.Cmd {
	if backend != "" && len(args) > 0 && args[0] == "run" {
		// The conformance table gives other backends the directory
		// itself (live); TestGVisorWorkspaceOverlay runs the overlay's
		// tests there.
		if backendLive && (slices.Contains(args, "--workspace") || slices.Contains(args, "-w")) {
			args = append([]string{"run", "--workspace-mode", "live"}, args[1:]...)
		}
		args = append([]string{"run", "--runtime", backend}, args[1:]...)
	}
	if o.nobody && !o.noFlag && len(args) > 0 && args[0] == "run" {
		args = append([]string{"run", "--insecure-no-cgroups"}, args[1:]...)
	}
	cmd := exec.CommandContext(ctx, airlockBin, args...)
	cmd.Env = baseEnv(o)
	cmd.Dir = binDir
	cmd.ExtraFiles = o.extra
	cmd.SysProcAttr = &syscall.SysProcAttr{}
	if o.nobody {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: nobodyID, Gid: nobodyID, NoSetGroups: false, Groups: []uint32{}}
	}
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// runContext skips the test when o cannot run here and bounds one run.
func runContext(t testing.TB, o opts) (context.Context, context.CancelFunc) {
	t.Helper()
	if o.nobody {
		needRoot(t)
	} else {
		need(t)
	}
	return context.WithTimeout(context.Background(), runTimeoutOf(o))
}

// runTimeoutOf is the hang guard of one run.
func runTimeoutOf(o opts) time.Duration {
	if o.timeout != 0 {
		return o.timeout
	}
	if backend != "" {
		// File-heavy probes (grep -r /) go through gVisor's Gofer.
		return 3 * runTimeout
	}
	return runTimeout
}

// airlock runs the binary with args and returns what it did.
func airlock(t testing.TB, o opts, args ...string) result {
	t.Helper()
	ctx, cancel := runContext(t, o)
	defer cancel()
	cmd := command(ctx, o, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if o.stdin != "" {
		cmd.Stdin = strings.NewReader(o.stdin)
	}
	t0 := time.Now()
	err := cmd.Run()
	r := result{stdout: stdout.String(), stderr: stderr.String(), dur: time.Since(t0)}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			r.code = 128 + int(ws.Signal())
		}
	default:
		t.Fatalf("airlock %q: %v", args, err)
	}
	if ctx.Err() != nil {
		t.Fatalf("airlock %q did not finish within %s (hang guard)\n%s", args, runTimeoutOf(o), r)
	}
	return r
}

// run runs cmd in a fresh sandbox with the given flags.
func run(t testing.TB, o opts, flags []string, cmd ...string) result {
	t.Helper()
	args := append([]string{"run"}, flags...)
	args = append(args, "--")
	return airlock(t, o, append(args, cmd...)...)
}

// sh runs a shell script in a fresh sandbox.
func sh(t testing.TB, o opts, flags []string, script string) result {
	t.Helper()
	return run(t, o, flags, "/bin/sh", "-c", script)
}

// mustOK fails the test unless r exited 0.
func mustOK(t testing.TB, r result, what string) {
	t.Helper()
	if r.code != 0 {
		t.Fatalf("%s: want exit 0\n%s", what, r)
	}
}

// pyPrelude gives Python scripts the `sc` helper of probes.md (a raw
// syscall that returns the result and the errno name) and small helpers.
const pyPrelude = `import ctypes as C, errno as E, os, sys, socket, time
_l = C.CDLL(None, use_errno=True)
def sc(*a):
    C.set_errno(0)
    r = _l.syscall(*[C.c_long(x) for x in a])
    return r, E.errorcode.get(C.get_errno(), "OK") if r == -1 else "OK"
def out(k, v):
    print("%s=%s" % (k, v), flush=True)
def tryerr(f):
    try:
        f()
        return "OK"
    except OSError as e:
        return E.errorcode.get(e.errno, str(e.errno))
`

// py runs a Python script (after pyPrelude) in a fresh sandbox.
func py(t testing.TB, o opts, flags []string, script string) result {
	t.Helper()
	return run(t, o, flags, "/usr/bin/python3", "-c", pyPrelude+script)
}

// kv parses the KEY=VALUE lines of out.
func kv(out string) map[string]string {
	m := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			m[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	return m
}

// expect checks that m[key] is one of want.
func expect(t testing.TB, m map[string]string, key string, want ...string) {
	t.Helper()
	got, ok := m[key]
	if !ok {
		t.Errorf("%s: no result printed (want %s)", key, strings.Join(want, " or "))
		return
	}
	for _, w := range want {
		if got == w {
			return
		}
	}
	t.Errorf("%s = %s, want %s", key, got, strings.Join(want, " or "))
}

// randHex returns n random bytes as hex.
func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// hashFile returns the SHA-256 of path ("missing" when it does not exist).
func hashFile(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return "missing"
	}
	if err != nil {
		t.Fatalf("hash %s: %v", path, err)
	}
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// bg is an airlock process running in the background.
type bg struct {
	cmd    *exec.Cmd
	cancel context.CancelFunc
	stdout *lineReader
	stderr *lineReader
	done   chan struct{}
	err    error
}

// lineReader collects a stream and lets a test wait for a line.
type lineReader struct {
	mu    sync.Mutex
	buf   strings.Builder
	lines chan string
	ended chan struct{} // closed at the stream's end
}

// newLineReader reads r to its end, and closes it then.
func newLineReader(r io.ReadCloser) *lineReader {
	lr := &lineReader{lines: make(chan string, 1024), ended: make(chan struct{})}
	go func() {
		defer close(lr.ended)
		defer r.Close()
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			lr.mu.Lock()
			lr.buf.WriteString(sc.Text() + "\n")
			lr.mu.Unlock()
			select {
			case lr.lines <- sc.Text():
			default:
			}
		}
		close(lr.lines)
	}()
	return lr
}

// drained waits, until deadline fires, for the ends of the streams:
// everything written to them has been read.
func drained(deadline <-chan time.Time, streams ...*lineReader) {
	for _, lr := range streams {
		select {
		case <-lr.ended:
		case <-deadline:
			return
		}
	}
}

func (lr *lineReader) String() string {
	lr.mu.Lock()
	defer lr.mu.Unlock()
	return lr.buf.String()
}

// waitFor waits for a line matching re and returns its submatches.
func (lr *lineReader) waitFor(t testing.TB, re *regexp.Regexp, d time.Duration) []string {
	t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		select {
		case line, ok := <-lr.lines:
			if !ok {
				t.Fatalf("stream ended before a line matching %q; got:\n%s", re, lr.String())
			}
			if m := re.FindStringSubmatch(line); m != nil {
				return m
			}
		case <-timer.C:
			t.Fatalf("no line matching %q within %s; got:\n%s", re, d, lr.String())
		}
	}
}

// start starts airlock in the background; it is killed at the end of the test.
func start(t testing.TB, o opts, args ...string) *bg {
	t.Helper()
	ctx, cancel := runContext(t, o)
	cmd := command(ctx, o, args...)
	// Pipes of the test's own, not StdoutPipe and StderrPipe: Wait closes
	// those as soon as the process has exited, and a reader that had not
	// got to the last lines yet lost them (TestCheckpointReview missed
	// the run's closing lines once).
	so, sow, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	se, sew, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = sow, sew
	if o.stdin != "" {
		cmd.Stdin = strings.NewReader(o.stdin)
	}
	err = cmd.Start()
	sow.Close()
	sew.Close()
	if err != nil {
		so.Close()
		se.Close()
		cancel()
		t.Fatal(err)
	}
	b := &bg{cmd: cmd, cancel: cancel, stdout: newLineReader(so), stderr: newLineReader(se), done: make(chan struct{})}
	go func() {
		b.err = cmd.Wait()
		// Done once the streams have been read to their end too (a
		// process the run left behind that holds them cannot keep a test
		// waiting for long).
		drained(time.After(2*time.Second), b.stdout, b.stderr)
		close(b.done)
	}()
	t.Cleanup(func() {
		// Forwarded to the command, so airlock tears the sandbox down
		// itself; SIGKILL only if that does not end it.
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-b.done:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			b.wait(t, 10*time.Second)
		}
		cancel()
	})
	return b
}

// wait waits for the background airlock to exit and returns its status.
func (b *bg) wait(t testing.TB, d time.Duration) int {
	t.Helper()
	select {
	case <-b.done:
	case <-time.After(d):
		b.cmd.Process.Kill()
		<-b.done
		t.Errorf("airlock did not exit within %s (hang guard)", d)
	}
	var ee *exec.ExitError
	if errors.As(b.err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	}
	if b.err != nil {
		return -1
	}
	return 0
}

// exited reports whether the background airlock has exited.
func (b *bg) exited() bool {
	select {
	case <-b.done:
		return true
	default:
		return false
	}
}

var cgroupLineRE = regexp.MustCompile(`layers: .*cgroups (/[^;]+);`)
var sandboxIDRE = regexp.MustCompile(`airlock: sandbox ([0-9a-f]+) `)

// cgroupPaths waits for the -v report of a background run and returns the
// sandbox id and its cgroup directories.
func (b *bg) cgroupPaths(t testing.TB) (string, []string) {
	t.Helper()
	id := b.stderr.waitFor(t, sandboxIDRE, 30*time.Second)[1]
	m := b.stderr.waitFor(t, cgroupLineRE, 30*time.Second)
	return id, strings.Split(m[1], ",")
}

// pidsCgroup picks the pids controller's directory (or, on v2, the only one).
func pidsCgroup(t testing.TB, paths []string) string {
	t.Helper()
	for _, p := range paths {
		if strings.Contains(p, "/pids/") {
			return p
		}
	}
	if len(paths) == 1 {
		return paths[0]
	}
	t.Fatalf("no pids cgroup among %q", paths)
	return ""
}

// cgroupPids lists the processes of a cgroup directory.
func cgroupPids(t testing.TB, dir string) []int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		if n, err := strconv.Atoi(f); err == nil {
			pids = append(pids, n)
		}
	}
	return pids
}

// poll calls f every 50ms until it returns true or d passes.
func poll(d time.Duration, f func() bool) bool {
	deadline := time.Now().Add(d)
	for {
		if f() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && len(s) > i+2 && s[i+2] != 'Z'
}

// nobodyDir makes a directory owned by nobody under a 0755 temp dir.
func nobodyDir(t testing.TB) string {
	t.Helper()
	parent := t.TempDir()
	// t.TempDir's own parent directory is private (0700) too.
	for _, d := range []string{filepath.Dir(parent), parent} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	d := filepath.Join(parent, "ws")
	if err := os.Mkdir(d, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(d, nobodyID, nobodyID); err != nil {
		t.Fatal(err)
	}
	return d
}

// hostDecoy starts a host process with a unique argument; it is killed at
// the end of the test.
func hostDecoy(t testing.TB) (*exec.Cmd, string) {
	t.Helper()
	arg := fmt.Sprintf("%d.%s", 900+time.Now().Nanosecond()%99, strings.Map(func(r rune) rune {
		if r >= 'a' {
			return r - 'a' + '0'
		}
		return r
	}, randHex(6)))
	cmd := exec.Command("sleep", arg)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd, arg
}

var _ = unix.Getpid
