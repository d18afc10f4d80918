//go:build linux

package e2e

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestExitStatus(t *testing.T) {
	need(t)
	for _, c := range []struct {
		script string
		want   int
	}{
		{"exit 0", 0},
		{"exit 3", 3},
		{"exit 255", 255},
		{"kill -TERM $$", 143},
		{"kill -KILL $$", 137},
	} {
		t.Run(c.script, func(t *testing.T) {
			if r := sh(t, opts{}, nil, c.script); r.code != c.want {
				t.Fatalf("want exit %d\n%s", c.want, r)
			}
		})
	}
}

func TestCommandNotFound(t *testing.T) {
	r := run(t, opts{}, nil, "no-such-command-airlock-e2e")
	if r.code != 127 {
		t.Fatalf("want 127\n%s", r)
	}
	// Control: a command that exists is found through PATH.
	mustOK(t, run(t, opts{}, nil, "true"), "true")
	// A file that is not executable: 126.
	ws := t.TempDir()
	if err := os.WriteFile(ws+"/noexec", []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := run(t, opts{}, []string{"--workspace", ws}, "/workspace/noexec"); r.code != 126 {
		t.Errorf("non-executable file: want 126\n%s", r)
	}
	// A path that does not exist is not found too (127), like a name not
	// in PATH; a script that exists but whose interpreter does not cannot
	// be executed (126). Control: the same script with an interpreter that
	// exists runs.
	if r := run(t, opts{}, []string{"--workspace", ws}, "/workspace/no/such/cmd"); r.code != 127 || !strings.Contains(r.stderr, "no such file") {
		t.Errorf("missing path: want 127 naming it\n%s", r)
	}
	if err := os.WriteFile(ws+"/badinterp", []byte("#!/no/such/interpreter\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(ws+"/goodinterp", []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if r := run(t, opts{}, []string{"--workspace", ws}, "/workspace/badinterp"); r.code != 126 || !strings.Contains(r.stderr, "interpreter") {
		t.Errorf("missing interpreter: want 126 saying so\n%s", r)
	}
	mustOK(t, run(t, opts{}, []string{"--workspace", ws}, "/workspace/goodinterp"), "script with an interpreter")
}

func TestStdio(t *testing.T) {
	r := run(t, opts{stdin: "hi\n"}, nil, "cat")
	if r.code != 0 || r.stdout != "hi\n" {
		t.Fatalf("stdin passthrough: want stdout \"hi\\n\"\n%s", r)
	}
	r = sh(t, opts{}, nil, "echo out; echo err >&2")
	if r.code != 0 || r.stdout != "out\n" || !strings.Contains(r.stderr, "err\n") || strings.Contains(r.stderr, "out") {
		t.Fatalf("stdout/stderr not separated\n%s", r)
	}
	// Large output goes through intact.
	r = run(t, opts{}, nil, "head", "-c", "3000000", "/dev/zero")
	if r.code != 0 || len(r.stdout) != 3000000 {
		t.Fatalf("want 3000000 bytes, got %d\n%s", len(r.stdout), r.stderr)
	}
}

func TestTimeout(t *testing.T) {
	r := run(t, opts{}, []string{"--timeout", "2s"}, "/bin/sh", "-c", "trap '' TERM INT; while :; do :; done")
	if r.code != 124 {
		t.Fatalf("want 124\n%s", r)
	}
	if !strings.Contains(r.stderr, "timeout") {
		t.Errorf("no timeout message on stderr\n%s", r)
	}
	if r.dur > 20*time.Second { // hang guard, not a performance check
		t.Errorf("run took %s after a 2s timeout", r.dur)
	}
	// Control: a command that ends in time keeps its own status.
	if r := run(t, opts{}, []string{"--timeout", "30s"}, "/bin/sh", "-c", "exit 7"); r.code != 7 {
		t.Fatalf("control: want 7\n%s", r)
	}
}

// openPTY opens a new pseudo-terminal pair with a 24x80 window.
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	mfd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals: %v", err)
	}
	master = os.NewFile(uintptr(mfd), "ptmx")
	if err := unix.IoctlSetPointerInt(mfd, unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(mfd, unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	unix.IoctlSetWinsize(mfd, unix.TIOCSWINSZ, &unix.Winsize{Row: 24, Col: 80})
	slave, err = os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		master.Close()
		t.Fatal(err)
	}
	return master, slave
}

// startOnPTY starts airlock with the pseudo-terminal slave as its
// controlling terminal and stdio, and closes this process's copy of it.
func startOnPTY(t *testing.T, ctx context.Context, slave *os.File, args ...string) *exec.Cmd {
	t.Helper()
	cmd := command(ctx, opts{}, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	err := cmd.Start()
	slave.Close()
	if err != nil {
		t.Fatal(err)
	}
	return cmd
}

// ttyRun runs airlock with a new pseudo-terminal as its controlling
// terminal and stdio, and returns what the master read and the exit code.
func ttyRun(t *testing.T, args ...string) (string, int) {
	t.Helper()
	need(t)
	master, slave := openPTY(t)
	defer master.Close()
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	cmd := startOnPTY(t, ctx, slave, args...)
	outc := make(chan string, 1)
	go func() {
		var b strings.Builder
		buf := make([]byte, 4096)
		for {
			n, err := master.Read(buf)
			b.Write(buf[:n])
			if err != nil { // EIO once every slave is closed
				break
			}
		}
		outc <- b.String()
	}()
	err := cmd.Wait()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	if ctx.Err() != nil {
		t.Fatalf("tty run did not finish within %s", runTimeout)
	}
	var out string
	select {
	case out = <-outc:
	case <-time.After(10 * time.Second):
		master.Close()
		out = <-outc
	}
	return strings.ReplaceAll(out, "\r\n", "\n"), code
}

func TestTTY(t *testing.T) {
	out, code := ttyRun(t, "run", "--", "/bin/sh", "-c", "tty; test -t 0 && echo stdin-is-tty; test -t 1 && echo stdout-is-tty; stty size; exit 4")
	if code != 4 {
		t.Errorf("want exit 4, got %d\n%s", code, out)
	}
	for _, want := range []string{"/dev/pts/", "stdin-is-tty", "stdout-is-tty", "24 80"} {
		if !strings.Contains(out, want) {
			t.Errorf("tty output lacks %q:\n%s", want, out)
		}
	}
}

// TestTIOCSTI is P14: no terminal injection, neither into the sandbox's own
// terminal nor into the caller's.
func TestTIOCSTI(t *testing.T) {
	script := pyPrelude + `
import fcntl, termios
out("isatty", os.isatty(0))
out("winsz", tryerr(lambda: fcntl.ioctl(0, termios.TIOCGWINSZ, b"\0"*8)))
out("sti_stdin", tryerr(lambda: fcntl.ioctl(0, termios.TIOCSTI, b"x")))
def devtty():
    fd = os.open("/dev/tty", os.O_RDWR)
    try:
        fcntl.ioctl(fd, termios.TIOCSTI, b"x")
    finally:
        os.close(fd)
out("sti_devtty", tryerr(devtty))
out("sti_raw", sc(16, 0, 0x5412, C.addressof(C.create_string_buffer(b"x")))[1])
`
	t.Run("tty", func(t *testing.T) {
		out, code := ttyRun(t, "run", "--", "/usr/bin/python3", "-c", script)
		m := kv(out)
		if code != 0 {
			t.Fatalf("exit %d\n%s", code, out)
		}
		expect(t, m, "isatty", "True")
		expect(t, m, "winsz", "OK") // control: other terminal ioctls work
		expect(t, m, "sti_stdin", "EPERM", "EIO", "ENOTTY")
		expect(t, m, "sti_devtty", "EPERM", "EIO", "ENOTTY", "ENXIO")
		expect(t, m, "sti_raw", "EPERM", "EIO", "ENOTTY")
	})
	t.Run("caller-terminal", func(t *testing.T) {
		// The caller has a terminal but airlock is told not to give one:
		// the sandbox must not reach the caller's terminal at all.
		out, code := ttyRun(t, "run", "--no-tty", "--", "/usr/bin/python3", "-c", script)
		m := kv(out)
		if code != 0 {
			t.Fatalf("exit %d\n%s", code, out)
		}
		expect(t, m, "isatty", "False")
		expect(t, m, "sti_stdin", "EPERM", "ENOTTY")
		expect(t, m, "sti_devtty", "EPERM", "ENXIO")
		expect(t, m, "sti_raw", "EPERM", "ENOTTY")
	})
}

// An argv larger than one control packet (1.2 MB in 12 arguments, within
// the kernel's own limits) reaches the command whole.
func TestLargeArgv(t *testing.T) {
	arg := strings.Repeat("a", 100000)
	args := []string{"/bin/sh", "-c", `n=0; for a in "$@"; do n=$((n + ${#a})); done; echo "$# $n"`, "x"}
	for i := 0; i < 12; i++ {
		args = append(args, arg)
	}
	r := run(t, opts{}, nil, args...)
	if r.code != 0 || strings.TrimSpace(r.stdout) != "12 1200000" {
		t.Fatalf("want 12 arguments of 1200000 bytes in all\n%.300s", r)
	}
}
