//go:build !linux

package seccomp

import (
	"fmt"
	"runtime"
)

// InstallListener always fails: seccomp exists only on Linux.
func InstallListener(prog []SockFilter) (int, error) {
	return -1, fmt.Errorf("seccomp: install listener filter: not supported on %s", runtime.GOOS)
}
