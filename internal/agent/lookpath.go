package agent

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// execError is why a command could not be started, with its kind
// (KindNoCommand, KindNotExecutable, or "" when it is neither).
type execError struct {
	kind string
	msg  string
}

func (e *execError) Error() string { return e.msg }

// lookPath resolves argv[0] against PATH from the process's own environment
// (not the agent's, which is empty). A name found only as a file that is
// not executable is reported as such (a shell's "permission denied", 126),
// one found nowhere as not found (127).
func lookPath(file string, env []string) (string, error) {
	if strings.Contains(file, "/") {
		return file, nil
	}
	path := "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	denied := ""
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, file)
		fi, err := os.Stat(p)
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		if fi.Mode()&0o111 != 0 {
			return p, nil
		}
		if denied == "" {
			denied = p
		}
	}
	if denied != "" {
		return "", &execError{KindNotExecutable, "exec " + file + ": " + denied + " is not executable (permission denied)"}
	}
	return "", &execError{KindNoCommand, "exec " + file + ": executable file not found in $PATH"}
}

// forkExecError classifies a failed fork/exec of path (argv[0] is name,
// dir the working directory a relative path was resolved in):
// a path that does not exist is not found; one that exists but cannot be
// executed (permissions, a directory, an unknown format, a missing
// interpreter or loader) is not executable.
func forkExecError(name, path, dir string, err error) error {
	msg := "exec " + name + ": " + err.Error()
	var errno syscall.Errno
	if !errors.As(err, &errno) {
		return &execError{"", msg}
	}
	switch errno {
	case syscall.ENOENT, syscall.ENOTDIR:
		if !filepath.IsAbs(path) && dir != "" {
			path = filepath.Join(dir, path)
		}
		if _, serr := os.Lstat(path); serr == nil {
			// The file is there: its #! interpreter or ELF loader is not.
			return &execError{KindNotExecutable, "exec " + name + ": its interpreter or loader is missing (" + err.Error() + ")"}
		}
		return &execError{KindNoCommand, msg}
	case syscall.EACCES, syscall.EPERM, syscall.ENOEXEC, syscall.EISDIR, syscall.ETXTBSY, syscall.ELIBBAD:
		return &execError{KindNotExecutable, msg}
	}
	return &execError{"", msg}
}

// StartFailure is how a runtime that starts commands itself (the gVisor
// guest) classifies a command that cannot start, exactly as the agent does:
// resolved against env's PATH, or the error of the exec of path (dir is the
// working directory). code is the shell's: 127 not found, 126 not
// executable.
func StartFailure(name string, env []string, path, dir string, execErr error) (code int, msg string) {
	var err error
	if execErr == nil {
		if _, err = lookPath(name, env); err == nil {
			return 0, ""
		}
	} else {
		err = forkExecError(name, path, dir, execErr)
	}
	var ee *execError
	if errors.As(err, &ee) && ee.kind == KindNoCommand {
		return 127, ee.msg
	}
	return 126, err.Error()
}

// LookPath resolves name against env's PATH like the agent does (a name
// with a slash is returned as is).
func LookPath(name string, env []string) (string, error) { return lookPath(name, env) }
