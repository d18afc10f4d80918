//go:build !linux

package seccomp

import (
	"fmt"
	"runtime"
)

// Install always fails: seccomp exists only on Linux.
func Install(prog []SockFilter) error {
	return fmt.Errorf("seccomp: install filter: not supported on %s", runtime.GOOS)
}
