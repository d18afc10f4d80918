//go:build linux && amd64

package main

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/internal/agent"
	"github.com/airlock-dev/airlock/internal/buildtest"
	"github.com/airlock-dev/airlock/internal/runtime"
	"github.com/airlock-dev/airlock/internal/runtime/gvisor"
)

const testBuild = "t35t"

var built, buildDir string

// program builds the program once per test binary, as `make build` does.
func program(t *testing.T) string {
	t.Helper()
	if built != "" {
		return built
	}
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("needs the go command to build the program:", err)
	}
	dir, err := os.MkdirTemp("", "airlock-pid1-test-")
	if err != nil {
		t.Fatal(err)
	}
	buildDir = dir
	out := filepath.Join(dir, "airlock-pid1")
	if _, err := buildtest.Pid1(out, testBuild); err != nil {
		t.Fatal(err)
	}
	built = out
	return out
}

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// TestNoRuntimeCalls: every function reachable from the entry point is in
// this package, and every call in them is direct, so none can reach the Go
// runtime (which was never started: an allocation, a failed bounds check or
// a stack check there would crash).
func TestNoRuntimeCalls(t *testing.T) {
	bin := program(t)
	out, err := exec.Command("go", "tool", "objdump", bin).Output()
	if err != nil {
		t.Fatal("go tool objdump:", err)
	}
	calls, indirect := callGraph(t, string(out))
	reach := func(from string) map[string]bool {
		seen := map[string]bool{from: true}
		for todo := []string{from}; len(todo) > 0; {
			f := todo[len(todo)-1]
			todo = todo[:len(todo)-1]
			for _, c := range calls[f] {
				if !seen[c] {
					seen[c] = true
					todo = append(todo, c)
				}
			}
		}
		return seen
	}
	got := reach("main.start")
	for _, want := range []string{"main.run", "main.sys.abi0", "main.lookPath", "main.child", "main.supervise", "main.fail", "main.startFailure"} {
		if !got[want] {
			t.Errorf("%s is not reached from main.start: the call graph is not read right", want)
		}
	}
	for f := range got {
		if !strings.HasPrefix(f, "main.") || f == "main.main" {
			t.Errorf("%s is reachable from the entry point: it is not this program's code", f)
		}
		for _, ins := range indirect[f] {
			t.Errorf("%s makes an indirect call (%s): its target cannot be checked", f, ins)
		}
	}
	// The controls: the reading finds that making a channel reaches the
	// allocator, and the listing has indirect calls to find.
	if !reach("runtime.makechan")["runtime.mallocgc"] {
		t.Errorf("runtime.makechan is not found to reach runtime.mallocgc: the check could not fail")
	}
	if len(indirect) == 0 {
		t.Errorf("no indirect call found in the whole binary: the check could not fail")
	}
}

// callGraph reads objdump's listing: each function's direct calls and
// jumps to other functions, and its indirect calls (any other CALL).
func callGraph(t *testing.T, listing string) (calls, indirect map[string][]string) {
	calls, indirect = map[string][]string{}, map[string][]string{}
	text := regexp.MustCompile(`^TEXT (\S+)\(SB\)`)
	target := regexp.MustCompile(`\t(CALL|JMP) ([^\s(]+)\(SB\)`)
	cur := ""
	for line := range strings.SplitSeq(listing, "\n") {
		if m := text.FindStringSubmatch(line); m != nil {
			cur = m[1]
			continue
		}
		if cur == "" {
			continue
		}
		if m := target.FindStringSubmatch(line); m != nil && m[2] != cur {
			calls[cur] = append(calls[cur], m[2])
		} else if strings.Contains(line, "\tCALL ") {
			indirect[cur] = append(indirect[cur], strings.TrimSpace(line))
		}
	}
	if len(calls) == 0 {
		t.Fatal("no calls found in the listing")
	}
	return calls, indirect
}

// TestForwardedMask: the program forwards runtime.ForwardedSignals.
func TestForwardedMask(t *testing.T) {
	var want uint64
	for _, s := range runtime.ForwardedSignals {
		want |= 1 << (s.(syscall.Signal) - 1)
	}
	if forwarded != want {
		t.Errorf("forwarded = %#x, runtime.ForwardedSignals = %#x", uint64(forwarded), want)
	}
}

// TestErrnoText: the texts are Go's (those airlock-init reports).
func TestErrnoText(t *testing.T) {
	for e := syscall.Errno(1); e < 200; e++ {
		msgLen = 0
		putErrno(uintptr(e))
		got := string(msg[:msgLen])
		if got != "errno "+strconv.Itoa(int(e)) && got != e.Error() {
			t.Errorf("errno %d: %q, Go says %q", int(e), got, e.Error())
		}
	}
	msgLen = 0
	putErrno(uintptr(syscall.ENOEXEC))
	if got := string(msg[:msgLen]); got != "exec format error" {
		t.Errorf("ENOEXEC: %q", got)
	}
}

// result is one run of the program: its exit code, the status line and
// the command's output.
type result struct {
	code           int
	status, stdout string
}

type start struct {
	argv    []string // the command; nil: no AIRLOCK_GVISOR_ARGV
	env     []string // the command's environment (PATH etc.)
	build   string   // "": testBuild
	filter  []byte   // the seccomp program (struct sock_filter); nil: none
	opts    []string // options before "--" (besides --init)
	noPipe  bool     // no status pipe at fd 3
	dir     string   // the working directory ("": the test's)
	signals func(t *testing.T, p *os.Process, out *bufio.Reader)
}

// programCmd is the program's command for s, as the host starts it (the
// options, then "--init --"; the build id, the command and the filter in
// the environment), and the read and write ends of its status pipe at fd 3
// (nil with s.noPipe; the caller closes the write end once it started).
func programCmd(ctx context.Context, t *testing.T, s start) (cmd *exec.Cmd, sr, sw *os.File) {
	t.Helper()
	args := append([]string{"__sandbox-init-gvisor-exec"}, s.opts...)
	if s.filter != nil {
		args = append(args, "--seccomp")
	}
	cmd = exec.CommandContext(ctx, program(t), append(args, "--init", "--")...)
	cmd.Dir = s.dir
	build := s.build
	if build == "" {
		build = testBuild
	}
	cmd.Env = append(slices.Clone(s.env), "AIRLOCK_INIT_BUILD="+build)
	if s.argv != nil {
		cmd.Env = append(cmd.Env, "AIRLOCK_GVISOR_ARGV="+gvisor.EncodeArgv(s.argv))
	}
	if s.filter != nil {
		cmd.Env = append(cmd.Env, "AIRLOCK_GVISOR_SECCOMP="+base64.StdEncoding.EncodeToString(s.filter))
	}
	if !s.noPipe {
		var err error
		if sr, sw, err = os.Pipe(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sr.Close(); sw.Close() })
		cmd.ExtraFiles = []*os.File{sw}
	}
	return cmd, sr, sw
}

func runProgram(t *testing.T, s start) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd, sr, sw := programCmd(ctx, t, s)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if sw != nil {
		sw.Close()
	}
	out := bufio.NewReader(stdout)
	if s.signals != nil {
		s.signals(t, cmd.Process, out)
	}
	rest, _ := io.ReadAll(out)
	err = cmd.Wait()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	r := result{code: cmd.ProcessState.ExitCode(), stdout: string(rest)}
	if sr != nil {
		st, _ := io.ReadAll(sr)
		r.status = string(st)
	}
	if ctx.Err() != nil {
		t.Fatalf("the program did not end within 20 s; stderr: %s", stderr.String())
	}
	t.Logf("exit %d, status %q, stderr %q", r.code, r.status, stderr.String())
	return r
}

func TestStart(t *testing.T) {
	dir := t.TempDir()
	plain := filepath.Join(dir, "plain")
	if err := os.WriteFile(plain, []byte("echo\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	noInterp := filepath.Join(dir, "nointerp")
	if err := os.WriteFile(noInterp, []byte("#!/nonexistent/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	path := []string{"PATH=/usr/bin:/bin"}

	t.Run("status", func(t *testing.T) {
		r := runProgram(t, start{argv: []string{"sh", "-c", `printf '[%s]' "$@"; echo; env; exit 7`, "x", "a b", ""}, env: append(path, "FOO=bar")})
		if r.code != 7 || r.status != "ok\n" {
			t.Errorf("want exit 7 and status ok, got %d %q", r.code, r.status)
		}
		if !strings.HasPrefix(r.stdout, "[a b][]\n") {
			t.Errorf("the arguments did not arrive as given: %q", r.stdout)
		}
		if !strings.Contains(r.stdout, "FOO=bar\n") || strings.Contains(r.stdout, "AIRLOCK_") {
			t.Errorf("want the command's environment without airlock's variables:\n%s", r.stdout)
		}
	})
	t.Run("killed", func(t *testing.T) {
		if r := runProgram(t, start{argv: []string{"sh", "-c", "kill -KILL $$"}, env: path}); r.code != 128+9 || r.status != "ok\n" {
			t.Errorf("want 137, got %d %q", r.code, r.status)
		}
	})

	// A command that cannot start: the code and message agent.StartFailure
	// gives (that airlock-init reports).
	lookup := func(name string, env []string) string {
		code, msg := agent.StartFailure(name, env, "", "", nil)
		return strconv.Itoa(code) + " " + msg + "\n"
	}
	execFails := func(name, path string, env []string, err error) string {
		code, msg := agent.StartFailure(name, env, path, "", err)
		return strconv.Itoa(code) + " " + msg + "\n"
	}
	exe := filepath.Join(dir, "exe")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, want string
		argv, env  []string
	}{
		{"empty PATH: not the working directory", lookup("exe", []string{"PATH="}), []string{"exe"}, []string{"PATH="}},
		{"empty entry: the working directory", "ok\n", []string{"exe"}, []string{"PATH=/nonexistent::"}},
		{"not found", lookup("nosuch", path), []string{"nosuch"}, path},
		{"not found, default PATH", lookup("nosuch", nil), []string{"nosuch"}, nil},
		{"not executable in PATH", lookup("plain", []string{"PATH=/nonexistent:" + dir + "/"}), []string{"plain"}, []string{"PATH=/nonexistent:" + dir + "/"}},
		{"found after a non-executable", "ok\n", []string{"sh", "-c", "true"}, []string{"PATH=" + dir + ":/bin"}},
		{"no interpreter", execFails(noInterp, noInterp, path, syscall.ENOENT), []string{noInterp}, path},
		{"path not found", execFails("./nosuch", "./nosuch", path, syscall.ENOENT), []string{"./nosuch"}, path},
		{"a directory", execFails(dir, dir, path, syscall.EACCES), []string{dir}, path},
		{"no permission", execFails(plain, plain, path, syscall.EACCES), []string{plain}, path},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := runProgram(t, start{argv: c.argv, env: c.env, dir: dir})
			if r.status != c.want {
				t.Errorf("status %q, want %q", r.status, c.want)
			}
			want := 0
			if c.want != "ok\n" {
				want, _ = strconv.Atoi(c.want[:3])
			}
			if r.code != want {
				t.Errorf("exit %d, want %d", r.code, want)
			}
		})
	}

	t.Run("bad input", func(t *testing.T) {
		for _, c := range []struct {
			name string
			s    start
			code int
			want string
		}{
			{"another build", start{argv: []string{"true"}, build: "other"}, 120, ""},
			{"no command", start{argv: []string{}}, 126, "126 no command\n"},
			{"no variable", start{}, 126, "126 command: AIRLOCK_GVISOR_ARGV is not set\n"},
			{"unknown option", start{argv: []string{"true"}, opts: []string{"--bogus"}}, 126, "126 airlock-pid1: unsupported option --bogus\n"},
			{"forward without relay", start{argv: []string{"true"}, opts: []string{"--forward=127.0.0.1:3128=/x.sock"}}, 126, "126 airlock-pid1: --forward without --relay\n"},
			{"forward to no address", start{argv: []string{"true"}, opts: []string{"--relay=/nonexistent", "--forward=127.0.0.1=/x.sock"}}, 126, "126 listen on 127.0.0.1 inside the sandbox: not an IP:PORT address\n"},
			{"relay missing", start{argv: []string{"true"}, opts: []string{"--relay=/nonexistent", "--forward=127.0.0.1:0=/x.sock"}}, 126, "126 egress relay: start /nonexistent: no such file or directory\n"},
			{"no status pipe", start{argv: []string{"true"}, noPipe: true}, 126, ""},
		} {
			t.Run(c.name, func(t *testing.T) {
				r := runProgram(t, c.s)
				if r.code != c.code || r.status != c.want {
					t.Errorf("got %d %q, want %d %q", r.code, r.status, c.code, c.want)
				}
			})
		}
	})
}

// TestSeccomp: with --seccomp the command runs under the given filter
// (mkdir denied with EPERM); without it, the same mkdir succeeds.
func TestSeccomp(t *testing.T) {
	ins := func(code uint16, jt, jf uint8, k uint32) []byte {
		b := make([]byte, 8)
		binary.NativeEndian.PutUint16(b, code)
		b[2], b[3] = jt, jf
		binary.NativeEndian.PutUint32(b[4:], k)
		return b
	}
	const (
		ldAbs = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
		jeq   = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
		ret   = unix.BPF_RET | unix.BPF_K
	)
	filter := slices.Concat(
		ins(ldAbs, 0, 0, 0), // seccomp_data.nr
		ins(jeq, 2, 0, unix.SYS_MKDIR),
		ins(jeq, 1, 0, unix.SYS_MKDIRAT),
		ins(ret, 0, 0, unix.SECCOMP_RET_ALLOW),
		ins(ret, 0, 0, unix.SECCOMP_RET_ERRNO|uint32(unix.EPERM)),
	)
	dir := t.TempDir()
	path := []string{"PATH=/usr/bin:/bin"}
	denied := filepath.Join(dir, "denied")
	r := runProgram(t, start{argv: []string{"mkdir", denied}, env: path, filter: filter})
	if r.code == 0 || r.status != "ok\n" {
		t.Errorf("mkdir under the filter: want a failure after a start, got %d %q", r.code, r.status)
	}
	if _, err := os.Stat(denied); err == nil {
		t.Errorf("mkdir under the filter made %s", denied)
	}
	allowed := filepath.Join(dir, "allowed")
	if r := runProgram(t, start{argv: []string{"mkdir", allowed}, env: path}); r.code != 0 {
		t.Errorf("mkdir without the filter: exit %d", r.code)
	}
	if _, err := os.Stat(allowed); err != nil {
		t.Errorf("mkdir without the filter: %v", err)
	}
	bad := runProgram(t, start{argv: []string{"true"}, env: path, filter: []byte{1, 2, 3}})
	if bad.code != 126 || !strings.HasPrefix(bad.status, "126 seccomp: ") {
		t.Errorf("a filter that is no program: want 126 and a seccomp message, got %d %q", bad.code, bad.status)
	}
}

// TestSignals: a forwarded signal reaches the command's process group; one
// that is not forwarded (SIGALRM, SIGTSTP) neither ends nor stops the
// program, and the command ends as the forwarded one made it.
func TestSignals(t *testing.T) {
	script := `trap 'exit 42' TERM; echo ready; while :; do sleep 0.05; done`
	r := runProgram(t, start{argv: []string{"sh", "-c", script}, env: []string{"PATH=/usr/bin:/bin"},
		signals: func(t *testing.T, p *os.Process, out *bufio.Reader) {
			if line, err := out.ReadString('\n'); line != "ready\n" {
				t.Fatalf("the command did not start: %q %v", line, err)
			}
			for _, s := range []syscall.Signal{syscall.SIGALRM, syscall.SIGTSTP} {
				if err := p.Signal(s); err != nil {
					t.Fatal(err)
				}
			}
			time.Sleep(100 * time.Millisecond)
			st, err := os.ReadFile("/proc/" + strconv.Itoa(p.Pid) + "/stat")
			if err != nil {
				t.Fatalf("the program ended on SIGALRM or SIGTSTP: %v", err)
			}
			if f := strings.Fields(string(st)); len(f) > 2 && f[2] == "T" {
				t.Errorf("the program was stopped by SIGTSTP")
			}
			if err := p.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
		}})
	if r.code != 42 {
		t.Errorf("want the trap's exit 42 after SIGTERM, got %d", r.code)
	}
}

// TestTerminal: with --tty the command is a process group of its own in
// the terminal's foreground (as airlock-init's Foreground start makes it),
// in the program's session; without it, a session of its own with no
// terminal.
func TestTerminal(t *testing.T) {
	// The shell prints its pid, process group, session and the
	// terminal's foreground group (/proc/PID/stat fields 1, 5, 6, 8).
	script := `read -r pid comm state ppid pgrp session tty tpgid rest < /proc/$$/stat; echo "$pid $pgrp $session $tpgid"`
	fields := func(t *testing.T, out string) (pid, pgrp, session, tpgid int) {
		t.Helper()
		for line := range strings.SplitSeq(out, "\n") {
			if n, _ := fmt.Sscan(strings.TrimSpace(line), &pid, &pgrp, &session, &tpgid); n == 4 {
				return
			}
		}
		t.Fatalf("no stat line in %q", out)
		return
	}

	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skip("no pty:", err)
	}
	defer master.Close()
	if err := unix.IoctlSetPointerInt(int(master.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(master.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	slave, err := os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd, sr, sw := programCmd(ctx, t, start{argv: []string{"sh", "-c", script}, env: []string{"PATH=/usr/bin:/bin"}, opts: []string{"--tty"}})
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	// As runsc starts it: the session's leader, the terminal its own.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	slave.Close()
	sw.Close()
	out, _ := io.ReadAll(master) // EIO once the terminal's last holder ends
	if err := cmd.Wait(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	status, _ := io.ReadAll(sr)
	pid, pgrp, session, tpgid := fields(t, string(out))
	if string(status) != "ok\n" || pgrp != pid || tpgid != pid || session != cmd.Process.Pid {
		t.Errorf("with --tty: status %q, pid %d, group %d, session %d, foreground %d; want its own group in the foreground of session %d",
			status, pid, pgrp, session, tpgid, cmd.Process.Pid)
	}

	// The control: without --tty, a session of its own, no terminal.
	r := runProgram(t, start{argv: []string{"sh", "-c", script}, env: []string{"PATH=/usr/bin:/bin"}})
	pid, pgrp, session, tpgid = fields(t, r.stdout)
	if pgrp != pid || session != pid || tpgid != -1 {
		t.Errorf("without --tty: pid %d, group %d, session %d, foreground %d; want a session of its own without a terminal", pid, pgrp, session, tpgid)
	}
}

// relayScript stands in for airlock-init's relay (gvisor.RelayMain, which
// the gVisor conformance table runs): it checks its arguments, writes its
// pid and session, and relays each connection of the listening socket at
// fd 3+i to the unix socket argv[2+i].
const relayScript = `#!/usr/bin/python3
import os, socket, sys, threading
assert sys.argv[1] == "__sandbox-init-gvisor-relay", sys.argv
with open(os.environ["RELAY_PID"] if "RELAY_PID" in os.environ else sys.argv[0] + ".pid", "w") as f:
    f.write("%d %d\n" % (os.getpid(), os.getsid(0)))
def pump(a, b):
    try:
        while True:
            d = a.recv(65536)
            if not d:
                break
            b.sendall(d)
        b.shutdown(socket.SHUT_WR)
    except OSError:
        pass
def serve(fd, path):
    l = socket.socket(fileno=fd)
    while True:
        c, _ = l.accept()
        u = socket.socket(socket.AF_UNIX)
        u.connect(path)
        threading.Thread(target=pump, args=(c, u), daemon=True).start()
        threading.Thread(target=pump, args=(u, c), daemon=True).start()
ts = [threading.Thread(target=serve, args=(3 + i, p)) for i, p in enumerate(sys.argv[2:])]
for t in ts:
    t.start()
for t in ts:
    t.join()
`

// TestForward: with --forward=ADDR=SOCKET the program listens on ADDR
// before the command starts and hands the listening socket to the relay
// (--relay), in a session of its own: the command reaches a unix echo
// server through 127.0.0.1 and ::1. The control: a port nobody forwards
// is refused.
func TestForward(t *testing.T) {
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("the stand-in relay needs python3:", err)
	}
	dir := t.TempDir()
	relay := filepath.Join(dir, "relay")
	if err := os.WriteFile(relay, []byte(relayScript), 0o755); err != nil {
		t.Fatal(err)
	}
	echo := filepath.Join(dir, "echo.sock")
	l, err := net.Listen("unix", echo)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(c, c); c.Close() }()
		}
	}()
	free := func(network, addr string) string {
		l, err := net.Listen(network, addr)
		if err != nil {
			return ""
		}
		defer l.Close()
		return l.Addr().String()
	}
	addrs := []string{free("tcp4", "127.0.0.1:0")}
	if a := free("tcp6", "[::1]:0"); a != "" {
		addrs = append(addrs, a)
	}
	unused := free("tcp4", "127.0.0.1:0")
	opts := []string{"--relay=" + relay}
	client := "import socket, sys\nfor a in sys.argv[1:]:\n    h, p = a.rsplit(':', 1)\n    try:\n        s = socket.create_connection((h.strip('[]'), int(p)), timeout=10)\n        s.sendall(b'ping ' + a.encode())\n        s.shutdown(socket.SHUT_WR)\n        print(s.recv(100).decode())\n    except OSError as e:\n        print(a, 'refused' if isinstance(e, ConnectionRefusedError) else e)\n"
	for _, a := range addrs {
		opts = append(opts, "--forward="+a+"="+echo)
	}
	out, err := os.Create(filepath.Join(dir, "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd, sr, sw := programCmd(ctx, t, start{argv: append([]string{"python3", "-c", client}, append(addrs, unused)...),
		env: []string{"PATH=/usr/bin:/bin"}, opts: opts})
	cmd.Stdout, cmd.Stderr = out, out // the relay keeps them: no pipes to wait on
	err = cmd.Run()
	sw.Close()
	// The relay outlives the program here (in a sandbox it ends with it).
	pidSid, _ := os.ReadFile(relay + ".pid")
	var rpid, rsid int
	fmt.Sscan(string(pidSid), &rpid, &rsid)
	if rpid > 0 {
		syscall.Kill(rpid, syscall.SIGKILL)
	}
	got, _ := os.ReadFile(out.Name())
	status, _ := io.ReadAll(sr)
	if err != nil || string(status) != "ok\n" {
		t.Fatalf("run: %v, status %q\n%s", err, status, got)
	}
	var want strings.Builder
	for _, a := range addrs {
		want.WriteString("ping " + a + "\n")
	}
	want.WriteString(unused + " refused\n")
	t.Logf("through the forwards:\n%s", got)
	if string(got) != want.String() {
		t.Errorf("through the forwards:\n%s\nwant:\n%s", got, want.String())
	}
	if rpid == 0 || rsid != rpid {
		t.Errorf("the relay (pid %d) is not the leader of a session of its own (session %d)", rpid, rsid)
	}
}

// TestHold: in hold mode the program waits, without executing anything,
// while its watched descriptors are quiet, and executes the agent's program
// (here a shell) with the given arguments and its own environment, the
// descriptors still open, once one of them is readable; and again when the
// other end hangs up. Bad arguments end it with 122.
func TestHold(t *testing.T) {
	bin := program(t)
	for _, wake := range []string{"write", "hangup"} {
		t.Run(wake, func(t *testing.T) {
			pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				t.Fatal(err)
			}
			ours, theirs := os.NewFile(uintptr(pair[0]), "ours"), os.NewFile(uintptr(pair[1]), "theirs")
			defer ours.Close()
			sh, err := os.Open("/bin/sh")
			if err != nil {
				t.Fatal(err)
			}
			defer sh.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			// fd 3: the agent's program; fd 4: the watched channel.
			cmd := exec.CommandContext(ctx, bin, "__hold", "3", "4", "--", "sh", "-c", `echo "woke $HOLD_TEST"; ls /proc/self/fd/4 >/dev/null && echo fd4`)
			cmd.ExtraFiles = []*os.File{sh, theirs}
			cmd.Env = []string{"HOLD_TEST=env-kept"}
			var out strings.Builder
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			theirs.Close()
			// Quiet channel: it holds (the control: it does wake below).
			time.Sleep(200 * time.Millisecond)
			if cmd.ProcessState != nil || out.Len() > 0 {
				t.Fatalf("woke on a quiet channel: %q", out.String())
			}
			if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", cmd.Process.Pid)); err != nil || !strings.Contains(string(b), "__hold") {
				t.Fatalf("not holding: %q %v", b, err)
			}
			if wake == "write" {
				if _, err := ours.Write([]byte("exec")); err != nil {
					t.Fatal(err)
				}
			} else {
				ours.Close()
			}
			if err := cmd.Wait(); err != nil {
				t.Fatalf("%v: %s", err, out.String())
			}
			if got := out.String(); got != "woke env-kept\nfd4\n" {
				t.Fatalf("after waking: %q", got)
			}
		})
	}
	for _, args := range [][]string{
		{"__hold"},
		{"__hold", "x", "4", "--", "sh"},
		{"__hold", "3", "--", "sh"},
		{"__hold", "3", "4", "--"},
	} {
		cmd := exec.Command(bin, args...)
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 122 || !strings.HasPrefix(string(out), "airlock-hold: ") {
			t.Errorf("%q: %v, %q; want exit 122 with airlock-hold's message", args, err, out)
		}
	}
}
