package native

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"github.com/landlock-lsm/go-landlock/landlock"
	llsys "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/internal/runtime"
	"github.com/airlock-dev/airlock/internal/seccomp"
	"github.com/airlock-dev/airlock/internal/sysfile"
)

func setRlimits(s *setup) error {
	limits := []struct {
		name     string
		resource int
		value    uint64
	}{
		{"core", unix.RLIMIT_CORE, 0},
	}
	if s.NoFile > 0 {
		limits = append(limits, struct {
			name     string
			resource int
			value    uint64
		}{"nofile", unix.RLIMIT_NOFILE, s.NoFile})
	}
	if s.FileSize > 0 {
		limits = append(limits, struct {
			name     string
			resource int
			value    uint64
		}{"fsize", unix.RLIMIT_FSIZE, uint64(s.FileSize)})
	}
	for _, l := range limits {
		if err := unix.Setrlimit(l.resource, &unix.Rlimit{Cur: l.value, Max: l.value}); err != nil {
			return fmt.Errorf("setrlimit %s=%d: %w", l.name, l.value, err)
		}
	}
	return nil
}

// Secure bits: never regain capabilities through uid 0, setuid or ambient
// raising, and lock all of that.
// (NOROOT, NO_SETUID_FIXUP, NO_CAP_AMBIENT_RAISE, each with its lock, and
// KEEP_CAPS_LOCKED with KEEP_CAPS off.)
const secureBits = 1<<0 | 1<<1 | 1<<2 | 1<<3 | 1<<5 | 1<<6 | 1<<7

// dropPrivileges drops every capability (bounding, ambient, inheritable,
// permitted, effective), locks the secure bits, sets no_new_privs and makes
// the process non-dumpable so that code in the sandbox cannot open
// /proc/1/exe, /proc/1/mem or /proc/1/fd.
//
// The bounding set is emptied on the calling thread, the one every sandbox
// process is forked from (InitMain locks it). The other threads of the Go
// runtime never fork or exec; they lose their permitted, effective,
// inheritable and ambient sets and get the locked secure bits
// (SECBIT_NOROOT: no capabilities from uid 0 on exec) and no_new_privs, so a
// bounding set left on them could never be used. Doing the ~40 bounding
// drops per thread would cost milliseconds of stop-the-world per sandbox.
func dropPrivileges() error {
	last, err := lastCap()
	if err != nil {
		return err
	}
	for c := 0; c <= last; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil {
			return fmt.Errorf("drop capability %d from the bounding set: %w", c, err)
		}
	}
	// On this thread explicitly; on the others the capset below clears the
	// ambient set with the permitted one (the kernel keeps ambient a subset
	// of permitted and inheritable).
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fmt.Errorf("clear ambient capabilities: %w", err)
	}
	if err := allThreads(unix.SYS_PRCTL, unix.PR_SET_SECUREBITS, secureBits, 0); err != nil {
		return fmt.Errorf("set secure bits: %w", err)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := allThreads(unix.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0); err != nil {
		return fmt.Errorf("capset: %w", err)
	}
	if err := allThreads(unix.SYS_PRCTL, unix.PR_SET_NO_NEW_PRIVS, 1, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("set non-dumpable: %w", err)
	}
	return nil
}

func allThreads(trap, a1, a2, a3 uintptr) error {
	_, _, errno := syscall.AllThreadsSyscall(trap, a1, a2, a3)
	if errno != 0 {
		return errno
	}
	return nil
}

func lastCap() (int, error) {
	b, err := sysfile.ReadFile("/proc/sys/kernel/cap_last_cap")
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

// LandlockABI returns the Landlock ABI version of the running kernel, or an
// error saying why Landlock is unavailable.
func LandlockABI() (int, error) {
	abi, err := llsys.LandlockGetABIVersion()
	if err != nil {
		if errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EOPNOTSUPP) {
			return 0, errors.New("the kernel has no Landlock (needs Linux >= 5.13 with CONFIG_SECURITY_LANDLOCK=y and landlock in the lsm= boot parameter)")
		}
		return 0, err
	}
	if abi < 1 {
		return 0, errors.New("the kernel reports no Landlock ABI")
	}
	return abi, nil
}

// landlockWritable (and the targets of writable binds) are the directories of the sandbox's root below which
// Landlock permits writes. Everything else (/proc, /dev apart from its
// device files, pseudo-terminals and shared memory, and the root directory
// itself) is read-only for every process of the sandbox.
var landlockWritable = []string{"/workspace", "/tmp", "/dev/shm", "/dev/pts", "/root", "/home", "/var", "/run", "/mnt", "/opt", "/usr", "/etc"}

// applyLandlock restricts every thread to the best Landlock ABI the kernel
// has: read and execute everywhere, write only below the writable paths,
// and (ABI >= 6) abstract unix sockets and signals scoped to the sandbox.
func applyLandlock(extraRW []string) (int, error) {
	abi, err := LandlockABI()
	if err != nil {
		return 0, fmt.Errorf("%w; to run without it pass --insecure-no-landlock", err)
	}
	var rw []string
	for _, p := range append(landlockWritable, extraRW...) {
		if fi, err := os.Stat(p); err == nil && fi.IsDir() {
			rw = append(rw, p)
		}
	}
	cfg := landlock.Config{HandledAccessFS: landlock.V9.HandledAccessFS, Scoped: landlock.V9.Scoped}.BestEffort()
	err = cfg.Restrict(
		landlock.RODirs("/").WithResolveUnix(),
		landlock.RWDirs(rw...).WithRefer().WithResolveUnix(),
		landlock.RWFiles("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty").WithIoctlDev(),
		landlock.PathAccess(landlock.AccessFSSet(llsys.AccessFSIoctlDev), "/dev/pts"),
	)
	if err != nil {
		return 0, fmt.Errorf("restrict (ABI %d): %w", abi, err)
	}
	return abi, nil
}

func applySeccomp(prog []runtime.SockFilter) error {
	if len(prog) == 0 {
		return errors.New("no filter program was supplied")
	}
	return seccomp.Install(runtime.Program(prog).Filter())
}
