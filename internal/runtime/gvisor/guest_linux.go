package gvisor

// The in-sandbox side: airlock's init program as the container's PID 1
// (InitMain) and as the first step of every command (ExecMain). Both run
// inside gVisor, are untrusted like everything in there, and hold nothing
// the host relies on: the Sentry enforces the sandbox, the supervisor only
// reads the status pipe of ExecMain to tell "could not start" (126/127)
// from the command's own exit status.

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/internal/initbin"
	"github.com/airlock-dev/airlock/internal/runtime"
	"github.com/airlock-dev/airlock/internal/seccomp"
)

// Paths inside the sandbox.
const (
	guestDir     = "/.airlock"
	guestInit    = guestDir + "/init"
	guestSeccomp = guestDir + "/seccomp.json"
	statusFD     = 3
)

// InitMain is the container's PID 1: it reaps orphans. With "watch" (airlock
// run), its stdin is a pipe only the supervisor writes to; when that closes
// (the supervisor ended, even by SIGKILL) the init exits and runsc ends the
// whole sandbox.
func InitMain() {
	// Like the native init: commands (same uid) cannot look into it.
	unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
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
	args := os.Args[2:]
	withSeccomp, tty := false, false
	for len(args) > 0 && args[0] != "--" {
		switch args[0] {
		case "--seccomp":
			withSeccomp = true
		case "--tty":
			tty = true
		}
		args = args[1:]
	}
	if len(args) < 2 {
		fail(126, "no command")
	}
	argv := args[1:]
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, initbin.BuildEnv+"=") {
			env = append(env, kv)
		}
	}
	path, err := lookPath(argv[0], env)
	if err != nil {
		code := 127
		if errors.Is(err, unix.EACCES) || errors.Is(err, unix.EISDIR) {
			code = 126
		}
		fail(code, err.Error())
	}
	if withSeccomp {
		raw, err := os.ReadFile(guestSeccomp)
		var prog []runtime.SockFilter
		if err == nil {
			err = json.Unmarshal(raw, &prog)
		}
		filter := make([]seccomp.SockFilter, len(prog))
		for i, in := range prog {
			filter[i] = seccomp.SockFilter{Code: in.Code, Jt: in.Jt, Jf: in.Jf, K: in.K}
		}
		if err == nil {
			err = seccomp.Install(filter)
		}
		if err != nil {
			fail(126, "seccomp: "+err.Error())
		}
	}
	// runsc exec keeps its own copy of the pipe open until the command
	// ends, so EOF cannot mean "started": say it. A failing execve after
	// this still ends with 126/127 as the command's status.
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
	code := 126
	if errors.Is(err, unix.ENOENT) {
		code = 127
	}
	fail(code, fmt.Sprintf("exec %s: %v", argv[0], err))
}

func fail(code int, msg string) {
	f := os.NewFile(statusFD, "status")
	fmt.Fprintf(f, "%d %s\n", code, strings.ReplaceAll(msg, "\n", " "))
	os.Exit(code)
}

// lookPath resolves file against PATH from the command's environment.
func lookPath(file string, env []string) (string, error) {
	check := func(p string) error {
		fi, err := os.Stat(p)
		if err != nil {
			return err
		}
		if fi.IsDir() {
			return &os.PathError{Op: "exec", Path: p, Err: unix.EISDIR}
		}
		if fi.Mode()&0o111 == 0 {
			return &os.PathError{Op: "exec", Path: p, Err: unix.EACCES}
		}
		return nil
	}
	if strings.Contains(file, "/") {
		if err := check(file); err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return "", fmt.Errorf("%s: not found", file)
			}
			return "", err
		}
		return file, nil
	}
	path := "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	var denied error
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, file)
		err := check(p)
		if err == nil {
			return p, nil
		}
		if denied == nil && errors.Is(err, unix.EACCES) {
			denied = err
		}
	}
	if denied != nil {
		return "", denied
	}
	return "", fmt.Errorf("exec %s: executable file not found in $PATH", file)
}
