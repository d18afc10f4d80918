//go:build unix

package runtime

import (
	"os"
	"syscall"
)

// ForwardedSignals are the signals `airlock run` catches and hands to the
// sandbox's command (Process.Signal) instead of dying of them. An init that
// passes them on (the gVisor one-shot init) catches exactly these before
// the command starts, so that none ends the init with its default action.
var ForwardedSignals = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGWINCH}
