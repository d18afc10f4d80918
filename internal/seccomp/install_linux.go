package seccomp

import (
	"errors"
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Install sets PR_SET_NO_NEW_PRIVS if it is not set yet, then installs prog
// with seccomp(SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC), so that
// every thread of the calling process gets the filter (TSYNC also copies
// no_new_privs to every thread). Filters stack: the kernel runs every
// installed filter and the strictest result wins. There is no way back.
func Install(prog []SockFilter) error {
	if len(prog) == 0 {
		return errors.New("seccomp: install filter: empty program")
	}
	if len(prog) > MaxInstructions {
		return fmt.Errorf("seccomp: install filter: program has %d instructions, the kernel limit is %d", len(prog), MaxInstructions)
	}
	// no_new_privs is a per-thread attribute and the kernel checks it on
	// the thread calling seccomp(2): both calls must run on one thread.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()

	nnp, err := unix.PrctlRetInt(unix.PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0)
	if err != nil {
		return fmt.Errorf("seccomp: install filter: prctl(PR_GET_NO_NEW_PRIVS): %w", err)
	}
	if nnp != 1 {
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			return fmt.Errorf("seccomp: install filter: prctl(PR_SET_NO_NEW_PRIVS): %w", err)
		}
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	r, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER,
		unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&fprog)))
	runtime.KeepAlive(prog)
	if errno != 0 {
		return fmt.Errorf("seccomp: install filter: %w", errno)
	}
	if r != 0 {
		// With TSYNC a positive return is the id of a thread that could
		// not be synchronised (it already has a diverging filter).
		return fmt.Errorf("seccomp: install filter: thread %d could not be synchronised (TSYNC)", r)
	}
	return nil
}
