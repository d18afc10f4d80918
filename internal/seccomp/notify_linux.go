package seccomp

import (
	"errors"
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// InstallListener installs prog on every thread of the calling process
// (SECCOMP_FILTER_FLAG_TSYNC, with TSYNC_ESRCH, which the kernel requires
// together with NEW_LISTENER) and returns the filter's listener descriptor
// (SECCOMP_FILTER_FLAG_NEW_LISTENER), close-on-exec as the kernel makes it.
// Like Install it sets no_new_privs first. Needs Linux >= 5.7 (TSYNC with a
// listener); an older kernel is an error, never a silent fallback.
func InstallListener(prog []SockFilter) (int, error) {
	if len(prog) == 0 {
		return -1, errors.New("seccomp: install listener filter: empty program")
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return -1, fmt.Errorf("seccomp: install listener filter: prctl(PR_SET_NO_NEW_PRIVS): %w", err)
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	flags := uintptr(unix.SECCOMP_FILTER_FLAG_NEW_LISTENER | unix.SECCOMP_FILTER_FLAG_TSYNC | unix.SECCOMP_FILTER_FLAG_TSYNC_ESRCH)
	r, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, flags, uintptr(unsafe.Pointer(&fprog)))
	runtime.KeepAlive(prog)
	if errno != 0 {
		return -1, fmt.Errorf("seccomp: install listener filter (user notification needs Linux >= 5.7): %w", errno)
	}
	return int(r), nil
}
