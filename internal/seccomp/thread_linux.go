package seccomp

import (
	"errors"
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// InstallThread is Install for the calling OS thread alone (no TSYNC): it
// sets no_new_privs on the thread and installs prog on it. What the thread
// then executes, or forks, carries the filter; the process's other threads
// do not. The caller must hold the thread (runtime.LockOSThread) before the
// call and for as long as the filter matters: until it executes or forks
// from it. For a short-lived program that starts one command (gVisor's
// init), where the kernel's per-thread work for TSYNC is on the command's
// start path.
func InstallThread(prog []SockFilter) error {
	if len(prog) == 0 {
		return errors.New("seccomp: install filter: empty program")
	}
	if len(prog) > MaxInstructions {
		return fmt.Errorf("seccomp: install filter: program has %d instructions, the kernel limit is %d", len(prog), MaxInstructions)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("seccomp: install filter: prctl(PR_SET_NO_NEW_PRIVS): %w", err)
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	_, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, uintptr(unsafe.Pointer(&fprog)))
	runtime.KeepAlive(prog)
	if errno != 0 {
		return fmt.Errorf("seccomp: install filter: %w", errno)
	}
	return nil
}
