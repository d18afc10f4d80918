package gvisor

// The in-sandbox side: airlock's init program as the container's PID 1
// (InitMain) and as the first step of every command (ExecMain). Both run
// inside gVisor, are untrusted like everything in there, and hold nothing
// the host relies on: the Sentry enforces the sandbox, the supervisor only
// reads the status pipe of ExecMain to tell "could not start" (126/127)
// from the command's own exit status.

import (
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	goruntime "runtime"
	"slices"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/internal/agent"
	"github.com/airlock-dev/airlock/internal/initbin"
	"github.com/airlock-dev/airlock/internal/runtime"
	"github.com/airlock-dev/airlock/internal/seccomp"
)

// Paths inside the sandbox.
const (
	guestDir     = "/.airlock"
	guestInit    = guestDir + "/init"
	guestRelay   = guestDir + "/relay"
	guestSeccomp = guestDir + "/seccomp.bpf"
	guestEgress  = guestDir + "/egress"
	statusFD     = 3
	argvEnv      = "AIRLOCK_GVISOR_ARGV"
	seccompEnv   = "AIRLOCK_GVISOR_SECCOMP"
)

// InitMain is the container's PID 1: it reaps orphans. With "watch" (airlock
// run), its stdin is a pipe only the supervisor writes to; when that closes
// (the supervisor ended, even by SIGKILL) the init exits and runsc ends the
// whole sandbox.
func InitMain() {
	// Like the native init: commands (same uid) cannot look into it.
	unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
	if len(os.Args) > 2 && os.Args[2] == agentModeArg {
		agentMain(os.Args[3:])
	}
	var fwd []string
	for _, a := range os.Args[2:] {
		if v, ok := strings.CutPrefix(a, "--forward="); ok {
			fwd = append(fwd, v)
		}
	}
	if err := startForwarders(fwd); err != nil {
		fmt.Fprintln(os.Stderr, "airlock init:", err)
		os.Exit(1)
	}
	if len(os.Args) > 2 && os.Args[2] == "watch" {
		go func() {
			buf := make([]byte, 64)
			for {
				if _, err := os.Stdin.Read(buf); err != nil {
					os.Exit(0)
				}
			}
		}()
	}
	sigc := make(chan os.Signal, 16)
	signal.Notify(sigc, unix.SIGCHLD)
	for range sigc {
		for {
			var ws unix.WaitStatus
			pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}

// ExecMain runs as `init __gvisor-exec [--seccomp] -- ARGV...` with the
// status pipe at fd 3: it resolves ARGV[0] in the command's PATH, installs
// the policy's seccomp filter when asked, and executes the command (fd 3 is
// close-on-exec). It writes "ok\n" just before the execve; if the command
// cannot start it writes "CODE message\n" (127 not found, 126 not
// executable) instead and exits with CODE.
func ExecMain() {
	// The filter goes on this thread only (seccomp.InstallThread): it
	// executes the command, or forks it, itself.
	goruntime.LockOSThread()
	args := os.Args[2:]
	withSeccomp, tty, asInit := false, false, false
	var fwd []string
	for len(args) > 0 && args[0] != "--" {
		if v, ok := strings.CutPrefix(args[0], "--forward="); ok {
			fwd = append(fwd, v)
		}
		switch args[0] {
		case "--seccomp":
			withSeccomp = true
		case "--tty":
			tty = true
		case "--init":
			asInit = true
		}
		args = args[1:]
	}
	var sigs *forwarder
	if asInit {
		// Catching a signal costs a round trip between two of the
		// runtime's threads, ~0.2 ms each in the Sentry: done while the
		// command is looked up and the filter installed.
		sigs = catchForwarded()
	}
	argv := args[min(1, len(args)):]
	if asInit {
		// As PID 1 the command comes in argvEnv, not on the command
		// line, which every process in the sandbox can read.
		var err error
		if argv, err = decodeArgv(os.Getenv(argvEnv)); err != nil {
			fail(126, "command: "+err.Error())
		}
	}
	if len(argv) == 0 {
		fail(126, "no command")
	}
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, initbin.BuildEnv+"=") && !strings.HasPrefix(kv, argvEnv+"=") && !strings.HasPrefix(kv, seccompEnv+"=") {
			env = append(env, kv)
		}
	}
	path, err := agent.LookPath(argv[0], env)
	if err != nil {
		fail(agent.StartFailure(argv[0], env, "", "", nil))
	}
	if withSeccomp {
		filter, err := guestFilter()
		if err == nil {
			err = seccomp.InstallThread(filter)
		}
		if err != nil {
			fail(126, "seccomp: "+err.Error())
		}
	}
	// runsc exec keeps its own copy of the pipe open until the command
	// ends, so EOF cannot mean "started": say it. A failing execve after
	// this still ends with 126/127 as the command's status.
	if asInit {
		if err := startForwarders(fwd); err != nil {
			fail(126, err.Error())
		}
		runAsInit(path, argv, env, tty, sigs)
	}
	// A session (and process group) of its own, as in the native
	// runtime: signals go to the group, as a terminal would send them.
	// With a terminal, runsc already made it the session's controlling
	// terminal; a new session would lose it.
	if !tty {
		unix.Setsid()
	}
	unix.Write(statusFD, []byte("ok\n"))
	unix.CloseOnExec(statusFD)
	err = unix.Exec(path, argv, env)
	fail(agent.StartFailure(argv[0], env, path, "", err))
}

func fail(code int, msg string) {
	f := os.NewFile(statusFD, "status")
	fmt.Fprintf(f, "%d %s\n", code, strings.ReplaceAll(msg, "\n", " "))
	os.Exit(code)
}

// runAsInit is ExecMain as the container's PID 1 (one-shot sandboxes): it
// starts the command as its child (own session, or the terminal's
// foreground process group), forwards the signals the supervisor sends
// (Process.Signal) to the command's group, ignores every other signal, reaps
// every orphan, and exits with the command's status (128+N for signal N).
// Like the native init it is not dumpable, so the command cannot look into
// it.
func runAsInit(path string, argv, env []string, tty bool, sigs *forwarder) {
	unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
	unix.CloseOnExec(statusFD)
	attr := &syscall.ProcAttr{Env: env, Files: []uintptr{0, 1, 2}, Sys: &syscall.SysProcAttr{Setsid: true}}
	if tty {
		attr.Sys = &syscall.SysProcAttr{Setpgid: true, Foreground: true, Ctty: 0}
	}
	// A signal the supervisor forwards is caught from before the
	// command starts, so that it reaches the command rather than end the
	// init with its default action.
	<-sigs.ready
	pid, err := syscall.ForkExec(path, argv, attr)
	if err != nil {
		fail(agent.StartFailure(argv[0], env, path, "", err))
	}
	unix.Write(statusFD, []byte("ok\n"))
	unix.Close(statusFD)
	go sigs.forward(pid)
	// Every other signal is ignored, as a PID 1 without a handler
	// ignores signals on Linux (the Sentry does not do that for it: a
	// `kill -TSTP 1` from the command stopped the init). Ignoring, unlike
	// catching, costs no round trip between the runtime's threads; the
	// command, forked already, does not inherit it.
	go signal.Ignore(ignoredSignals()...)
	for {
		// A blocking wait: no SIGCHLD to catch and hand over.
		var ws unix.WaitStatus
		got, err := unix.Wait4(-1, &ws, 0, nil)
		switch {
		case err == unix.EINTR:
		case err != nil:
			// The status pipe is closed by now: say it on stderr.
			fmt.Fprintln(os.Stderr, "airlock init: wait:", err)
			os.Exit(126)
		case got == pid && ws.Signaled():
			os.Exit(128 + int(ws.Signal()))
		case got == pid && ws.Exited():
			os.Exit(ws.ExitStatus())
		}
		// Anything else is an orphan reaped, or the command stopped.
	}
}

// forwarder catches runtime.ForwardedSignals; ready is closed once all are caught.
type forwarder struct {
	c     chan os.Signal
	ready chan struct{}
}

func catchForwarded() *forwarder {
	f := &forwarder{c: make(chan os.Signal, 32), ready: make(chan struct{})}
	go func() {
		signal.Notify(f.c, runtime.ForwardedSignals...)
		close(f.ready)
	}()
	return f
}

// forward sends each caught signal to the command's process group (as a
// terminal would), or to the command if it left that group.
func (f *forwarder) forward(pid int) {
	for sig := range f.c {
		s := sig.(syscall.Signal)
		if unix.Kill(-pid, s) != nil {
			unix.Kill(pid, s)
		}
	}
}

// ignoredSignals are the signals the init ignores while the command runs:
// all but those it forwards, those that cannot be caught or ignored
// (SIGKILL, SIGSTOP), those whose default is to do nothing (SIGCHLD,
// SIGCONT, SIGWINCH), the Go runtime's own (SIGURG, SIGPROF and 32-33) and
// the faults it turns into panics.
func ignoredSignals() []os.Signal {
	var out []os.Signal
	for n := syscall.Signal(1); n <= 64; n++ {
		switch n {
		case unix.SIGKILL, unix.SIGSTOP, unix.SIGCHLD, unix.SIGCONT, unix.SIGURG, unix.SIGPROF,
			unix.SIGSEGV, unix.SIGBUS, unix.SIGFPE, unix.SIGILL, unix.SIGTRAP, unix.SIGSYS, 32, 33:
			continue
		}
		if slices.Contains(runtime.ForwardedSignals, os.Signal(n)) {
			continue
		}
		out = append(out, n)
	}
	return out
}

// startForwarders listens on each ADDR of "ADDR=SOCKET" inside the sandbox
// (the egress proxies' addresses on loopback) and relays every connection
// to SOCKET, a unix socket of the supervisor's bound into the sandbox,
// behind which the egress gateway enforces the policy. The forwarder is as
// untrusted as everything here: all it can reach is the gateway.
func startForwarders(specs []string) error {
	for _, sp := range specs {
		addr, sock, ok := strings.Cut(sp, "=")
		if !ok {
			return fmt.Errorf("forward %q: want ADDR=SOCKET", sp)
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			return fmt.Errorf("listen on %s inside the sandbox: %w", addr, err)
		}
		go serveForward(l, sock)
	}
	return nil
}

// serveForward relays each connection l accepts to the unix socket sock.
func serveForward(l net.Listener, sock string) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go relay(c, sock)
	}
}

// RelayMain runs as `init __gvisor-relay SOCKET...` started by
// airlock-pid1, which listens on the egress addresses itself and passes
// the listening sockets as fds 3, 4, ... in SOCKET's order: it relays
// their connections as the forwarders of InitMain and ExecMain do. Its Go
// runtime starts while the command does (a connection made meanwhile
// waits in the listen backlog), not before it.
func RelayMain() {
	unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
	socks := os.Args[2:]
	if len(socks) == 0 {
		fmt.Fprintln(os.Stderr, "airlock relay: no sockets")
		os.Exit(2)
	}
	for i, sock := range socks {
		l, err := net.FileListener(os.NewFile(uintptr(3+i), "egress"))
		if err != nil {
			fmt.Fprintf(os.Stderr, "airlock relay: fd %d: %v\n", 3+i, err)
			os.Exit(1)
		}
		go serveForward(l, sock)
	}
	select {}
}

func relay(c net.Conn, sock string) {
	defer c.Close()
	u, err := net.Dial("unix", sock)
	if err != nil {
		return
	}
	splice(c, u)
}

// splice copies both ways between a and b, half-closing each direction
// as it ends, and closes b.
func splice(a, b net.Conn) {
	defer b.Close()
	done := make(chan struct{}, 2)
	half := func(dst, src net.Conn) {
		io.Copy(dst, src)
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			cw.CloseWrite()
		}
		done <- struct{}{}
	}
	go half(b, a)
	go half(a, b)
	<-done
	<-done
}

// EncodeArgv is how a one-shot sandbox's command travels in argvEnv: the
// base64 of each argument followed by a NUL, which airlock-pid1 decodes
// without the Go runtime.
func EncodeArgv(argv []string) string {
	var b []byte
	for _, a := range argv {
		b = append(append(b, a...), 0)
	}
	return base64.StdEncoding.EncodeToString(b)
}

// decodeArgv reverses EncodeArgv.
func decodeArgv(v string) ([]string, error) {
	raw, err := base64.StdEncoding.DecodeString(v)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", argvEnv, err)
	}
	if len(raw) == 0 {
		return nil, nil
	}
	if raw[len(raw)-1] != 0 {
		return nil, fmt.Errorf("%s: the last argument has no NUL", argvEnv)
	}
	return strings.Split(string(raw[:len(raw)-1]), "\x00"), nil
}

// guestFilter is the policy's seccomp program: from seccompEnv for a
// one-shot sandbox's init, else from the file the supervisor bound in at
// guestSeccomp.
func guestFilter() ([]seccomp.SockFilter, error) {
	if v, ok := os.LookupEnv(seccompEnv); ok {
		raw, err := base64.StdEncoding.DecodeString(v)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", seccompEnv, err)
		}
		return decodeFilter(raw)
	}
	raw, err := os.ReadFile(guestSeccomp)
	if err != nil {
		return nil, err
	}
	return decodeFilter(raw)
}
