//go:build linux && !amd64

package spawn

import "golang.org/x/sys/unix"

// The child's program is written for amd64 only: elsewhere ForkExec is
// syscall.ForkExec.
const haveClone3 = false

func rawClone3(*cloneArgs, uintptr, *childProg) (pid, errno uintptr) { return 0, uintptr(unix.ENOSYS) }
