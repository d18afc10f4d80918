// Package spawn starts a process in new namespaces, user namespace
// included, without copying the caller's memory.
//
// syscall.ForkExec cannot share the parent's memory with a child that
// gets a new user namespace: the child must wait, before it executes,
// for the parent to write its uid and gid maps, and a vfork would suspend
// the parent. So it forks, and the kernel copies the page tables of the
// whole caller and marks its memory copy-on-write: the start takes longer
// the more memory the caller uses (BenchmarkForkExec: 0.56 ms from a bare
// test process, 4.4 ms with 100 MiB of heap in use), and every page the
// caller writes afterwards takes a fault (a daemon took ~470 per sandbox
// it made).
//
// ForkExec here clones with CLONE_VM instead, onto a small stack of its
// own, with clone3's CLONE_CLEAR_SIGHAND (no handler of the Go runtime can
// run in the child) and the child's part written in assembly: a list of
// system calls prepared by the parent (wait for the maps, setsid, the
// credentials, the parent-death signal, the descriptors, execve) run one
// after the other, none of which touches the Go runtime. The parent writes
// the maps meanwhile, then lets the child go on (0.32 and 0.34 ms in the
// same benchmark).
//
// It takes the subset of syscall.SysProcAttr that airlock's sandbox init
// needs and behaves there as syscall.ForkExec does; for anything else, on
// architectures without the assembly, and where clone3 or
// CLONE_CLEAR_SIGHAND is refused (older kernels, a seccomp filter), it
// calls syscall.ForkExec.
package spawn

import (
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/internal/sysfile"
)

// cloneArgs is the kernel's struct clone_args (version 2, 88 bytes).
type cloneArgs struct {
	flags      uint64
	pidfd      uint64
	childTID   uint64
	parentTID  uint64
	exitSignal uint64
	stack      uint64
	stackSize  uint64
	tls        uint64
	setTID     uint64
	setTIDSize uint64
	cgroup     uint64
}

// step is one system call of the child's program. The assembly reads it
// by offset: keep the layout (9 words).
type step struct {
	nr   uintptr
	a    [6]uintptr
	want uintptr // with mustEqual: the only result that lets the child go on
	mode uintptr
}

const (
	mustSucceed = 0 // any result but -1 to -4095
	mustEqual   = 1 // exactly want
	ignore      = 2 // whatever it returns
)

// childProg is what the child runs; the assembly reads its first fields
// by offset. It lives on the heap (which never moves, unlike a goroutine's
// stack): the child reads it, and writes into it, while the parent runs.
type childProg struct {
	steps *step
	n     uintptr
	errFD uintptr
	// Written by a child that fails: the step and its result (a negated
	// errno, or the unwanted result), sent to errFD.
	failed [2]uintptr

	mask  uint64  // the forking thread's signal mask, restored in the child
	sync  [8]byte // the child reads the parent's go-ahead here
	pidfd int32   // the kernel writes the child's pidfd here
	args  cloneArgs
}

const childStack = 16 << 10

// disabled is set once clone3 or CLONE_CLEAR_SIGHAND is refused here.
var disabled atomic.Bool

// lastUsed: whether the latest ForkExec went through clone3.
var lastUsed atomic.Bool

// Used reports whether the latest ForkExec of this process went through
// clone3 rather than syscall.ForkExec (for tests and benchmarks).
func Used() bool { return lastUsed.Load() }

// ForkExec starts argv0 as syscall.ForkExec does. See the package comment
// for what it handles itself.
func ForkExec(argv0 string, argv []string, attr *syscall.ProcAttr) (int, error) {
	if !haveClone3 || disabled.Load() || !supported(attr) {
		lastUsed.Store(false)
		return syscall.ForkExec(argv0, argv, attr)
	}
	pid, err, fallback := forkExec(argv0, argv, attr)
	if fallback {
		lastUsed.Store(false)
		return syscall.ForkExec(argv0, argv, attr)
	}
	lastUsed.Store(true)
	return pid, err
}

// supported reports whether attr asks for nothing beyond what forkExec
// does: new namespaces with a user namespace and its maps, a credential
// without supplementary groups, setsid, a parent-death signal, a pidfd, a
// cgroup to start in, and descriptors.
func supported(attr *syscall.ProcAttr) bool {
	if attr == nil || attr.Sys == nil {
		return false
	}
	s := attr.Sys
	if s.Cloneflags&unix.CLONE_NEWUSER == 0 {
		return false // syscall.ForkExec uses vfork then: nothing to gain
	}
	if s.Chroot != "" || s.Ptrace || s.Setpgid || s.Foreground || s.Noctty || s.Setctty ||
		s.Unshareflags != 0 || len(s.AmbientCaps) > 0 || attr.Dir != "" {
		return false
	}
	if s.Cloneflags&^uintptr(unix.CLONE_NEWUSER|unix.CLONE_NEWNS|unix.CLONE_NEWPID|unix.CLONE_NEWNET|
		unix.CLONE_NEWIPC|unix.CLONE_NEWUTS|unix.CLONE_NEWCGROUP) != 0 {
		return false
	}
	if s.Credential != nil && len(s.Credential.Groups) > 0 {
		return false
	}
	for _, fd := range attr.Files {
		if int(fd) < 0 || fd == ^uintptr(0) {
			return false
		}
	}
	return true
}

// forkExec is ForkExec's clone3 path; fallback asks for syscall.ForkExec
// (clone3 refused: nothing was started).
func forkExec(argv0 string, argv []string, attr *syscall.ProcAttr) (pid int, err error, fallback bool) {
	s := attr.Sys
	path, err := syscall.BytePtrFromString(argv0)
	if err != nil {
		return 0, err, false
	}
	argvp, err := syscall.SlicePtrFromStrings(argv)
	if err != nil {
		return 0, err, false
	}
	envp, err := syscall.SlicePtrFromStrings(attr.Env)
	if err != nil {
		return 0, err, false
	}

	// Nothing another thread opens meanwhile without close-on-exec may
	// reach the child (the descriptor table is copied at the clone).
	syscall.ForkLock.Lock()
	locked := true
	unlock := func() {
		if locked {
			syscall.ForkLock.Unlock()
			locked = false
		}
	}
	defer unlock()

	var fds fdSet
	defer fds.closeAll()
	n := len(attr.Files)
	// Every descriptor the child uses is numbered n or above, so that
	// putting the stdio in place (fd i onto i) never overwrites one still
	// to be used.
	high := func(fd int, ours bool) (int, error) {
		if fd >= n {
			return fd, nil
		}
		nfd, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, n)
		if err != nil {
			return -1, err
		}
		if ours {
			fds.close(fd)
		}
		fds.add(nfd)
		return nfd, nil
	}
	pipe := func() (r, w int, err error) {
		var p [2]int
		if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
			return -1, -1, err
		}
		fds.add(p[0])
		fds.add(p[1])
		if r, err = high(p[0], true); err == nil {
			w, err = high(p[1], true)
		}
		return r, w, err
	}
	errR, errW, err := pipe()
	if err != nil {
		return 0, err, false
	}
	mapR, mapW := -1, -1
	maps := s.UidMappings != nil || s.GidMappings != nil
	if maps {
		if mapR, mapW, err = pipe(); err != nil {
			return 0, err, false
		}
	}
	files := make([]int, n)
	for i, fd := range attr.Files {
		if files[i], err = high(int(fd), false); err != nil {
			return 0, err, false
		}
	}

	// The child's program, in order: what syscall.ForkExec's child does
	// for these attributes.
	prog := new(childProg)
	var steps []step
	var names []string // the steps', in errors
	add := func(name string, mode, want, nr uintptr, a ...uintptr) {
		st := step{nr: nr, want: want, mode: mode}
		copy(st.a[:], a)
		steps = append(steps, st)
		names = append(names, name)
	}
	if maps {
		add("close the maps pipe", mustSucceed, 0, unix.SYS_CLOSE, uintptr(mapW))
		add("wait for the uid and gid maps", mustEqual, 8, unix.SYS_READ, uintptr(mapR), uintptr(unsafe.Pointer(&prog.sync[0])), 8)
	}
	if s.Setsid {
		add("setsid", mustSucceed, 0, unix.SYS_SETSID)
	}
	// The handlers were reset by CLONE_CLEAR_SIGHAND; the mask, all
	// blocked around the clone, becomes the forking thread's again.
	add("restore the signal mask", mustSucceed, 0, unix.SYS_RT_SIGPROCMASK, unix.SIG_SETMASK, uintptr(unsafe.Pointer(&prog.mask)), 0, 8)
	if c := s.Credential; c != nil {
		if !(s.GidMappings != nil && !s.GidMappingsEnableSetgroups) && !c.NoSetGroups {
			add("setgroups", mustSucceed, 0, unix.SYS_SETGROUPS, 0, 0)
		}
		add("setgid", mustSucceed, 0, unix.SYS_SETGID, uintptr(c.Gid))
		add("setuid", mustSucceed, 0, unix.SYS_SETUID, uintptr(c.Uid))
	}
	if s.Pdeathsig != 0 {
		add("set the parent-death signal", mustSucceed, 0, unix.SYS_PRCTL, unix.PR_SET_PDEATHSIG, uintptr(s.Pdeathsig))
		// The parent died before the signal was set: go no further. (In
		// a new PID namespace the parent is outside it, getppid says 0,
		// and there is nothing to compare: syscall.ForkExec's check then
		// signals the namespace's init, itself, which the kernel ignores.)
		if s.Cloneflags&unix.CLONE_NEWPID == 0 {
			add("check that the parent lives", mustEqual, uintptr(unix.Getpid()), unix.SYS_GETPPID)
		}
	}
	for i, fd := range files {
		add("descriptor "+strconv.Itoa(i), mustSucceed, 0, unix.SYS_DUP3, uintptr(fd), uintptr(i), 0)
	}
	for i := n; i < 3; i++ {
		add("close "+strconv.Itoa(i), ignore, 0, unix.SYS_CLOSE, uintptr(i))
	}
	add("execve", mustSucceed, 0, unix.SYS_EXECVE, uintptr(unsafe.Pointer(path)), uintptr(unsafe.Pointer(&argvp[0])), uintptr(unsafe.Pointer(&envp[0])))
	prog.steps, prog.n, prog.errFD = &steps[0], uintptr(len(steps)), uintptr(errW)
	// The steps hold these as plain numbers, which the collector does not
	// see: they stay until the child has executed or is reaped.
	defer runtime.KeepAlive(argvp)
	defer runtime.KeepAlive(envp)
	defer runtime.KeepAlive(path)
	defer runtime.KeepAlive(steps)
	defer runtime.KeepAlive(prog)

	stack, err := unix.Mmap(-1, 0, childStack, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_STACK)
	if err != nil {
		return 0, fmt.Errorf("child stack: %w", err), false
	}
	// Unmapped once the child has executed or been reaped (the deferred
	// calls run after fail's wait).
	defer unix.Munmap(stack)
	prog.pidfd = -1
	args := &prog.args
	*args = cloneArgs{
		flags:      uint64(s.Cloneflags) | unix.CLONE_VM | unix.CLONE_CLEAR_SIGHAND,
		exitSignal: uint64(unix.SIGCHLD),
		stack:      uint64(uintptr(unsafe.Pointer(&stack[0]))),
		stackSize:  childStack,
	}
	if s.PidFD != nil {
		args.flags |= unix.CLONE_PIDFD
		args.pidfd = uint64(uintptr(unsafe.Pointer(&prog.pidfd)))
	}
	if s.UseCgroupFD {
		args.flags |= unix.CLONE_INTO_CGROUP
		args.cgroup = uint64(s.CgroupFD)
	}

	// The child's credentials and cgroup are this thread's.
	runtime.LockOSThread()
	r, errno := clone3(prog)
	runtime.UnlockOSThread()
	if errno != 0 {
		e := syscall.Errno(errno)
		if e == unix.ENOSYS || e == unix.EINVAL || e == unix.E2BIG || e == unix.EPERM {
			// Too old a kernel for clone3 or CLONE_CLEAR_SIGHAND, or
			// clone3 filtered (its flags are in memory a seccomp filter
			// cannot read, so filters refuse it): syscall.ForkExec's
			// clone instead. EPERM may also be the user namespace
			// refused, which syscall.ForkExec then reports.
			if e != unix.EPERM {
				disabled.Store(true)
			}
			return 0, nil, true
		}
		return 0, e, false
	}
	pid = int(r)
	unlock()

	fail := func(err error) (int, error, bool) {
		unix.Kill(pid, unix.SIGKILL)
		var ws unix.WaitStatus
		for {
			if _, e := unix.Wait4(pid, &ws, 0, nil); e != unix.EINTR {
				break
			}
		}
		if prog.pidfd >= 0 {
			unix.Close(int(prog.pidfd))
		}
		return 0, err, false
	}
	if maps {
		if err := writeMaps(pid, s); err != nil {
			return fail(err)
		}
		var goAhead [8]byte
		if _, err := unix.Write(mapW, goAhead[:]); err != nil {
			return fail(fmt.Errorf("let the child go on: %w", err))
		}
	}
	// Close our copies of the child's ends: the error pipe then reads end
	// of file once the child has executed (close-on-exec) or died.
	fds.close(errW)
	if maps {
		fds.close(mapR)
	}
	var rep [16]byte
	got := 0
	for got < len(rep) {
		m, err := unix.Read(errR, rep[got:])
		if err == unix.EINTR {
			continue
		}
		if err != nil || m == 0 {
			break
		}
		got += m
	}
	if got == len(rep) {
		i := *(*uintptr)(unsafe.Pointer(&rep[0]))
		res := *(*uintptr)(unsafe.Pointer(&rep[8]))
		return fail(stepError(steps, names, i, res))
	}
	if got != 0 {
		return fail(errors.New("start the process: the child's error report was cut short"))
	}
	// The child executed: the stack is no longer in its memory.
	if s.PidFD != nil {
		*s.PidFD = int(prog.pidfd)
	}
	return pid, nil, false
}

// fdSet is the descriptors forkExec opened, each closed exactly once.
type fdSet []int

func (f *fdSet) add(fd int) { *f = append(*f, fd) }

func (f *fdSet) close(fd int) {
	for i, x := range *f {
		if x == fd {
			unix.Close(fd)
			*f = append((*f)[:i], (*f)[i+1:]...)
			return
		}
	}
}

func (f *fdSet) closeAll() {
	for _, fd := range *f {
		unix.Close(fd)
	}
	*f = nil
}

// stepError describes the failure the child reported: step i (named
// names[i]) with result res. An execve failure is its errno alone, as
// syscall.ForkExec reports it.
func stepError(steps []step, names []string, i, res uintptr) error {
	if i >= uintptr(len(steps)) {
		return fmt.Errorf("start the process: the child failed past its last step")
	}
	if steps[i].mode == mustEqual {
		return fmt.Errorf("start the process: %s: unexpected result %d", names[i], int(res))
	}
	e := syscall.Errno(-int(res))
	if steps[i].nr == unix.SYS_EXECVE {
		return e
	}
	return fmt.Errorf("start the process: %s: %w", names[i], e)
}

// writeMaps writes the child's uid map, setgroups and gid map as
// syscall.ForkExec does.
func writeMaps(pid int, s *syscall.SysProcAttr) error {
	dir := "/proc/" + strconv.Itoa(pid) + "/"
	if s.UidMappings != nil {
		if err := sysfile.Write(dir+"uid_map", formatMaps(s.UidMappings)); err != nil {
			return err
		}
	}
	if s.GidMappings != nil {
		sg := "deny"
		if s.GidMappingsEnableSetgroups {
			sg = "allow"
		}
		if err := sysfile.Write(dir+"setgroups", []byte(sg)); err != nil {
			return err
		}
		if err := sysfile.Write(dir+"gid_map", formatMaps(s.GidMappings)); err != nil {
			return err
		}
	}
	return nil
}

func formatMaps(m []syscall.SysProcIDMap) []byte {
	var b []byte
	for _, e := range m {
		b = fmt.Appendf(b, "%d %d %d\n", e.ContainerID, e.HostID, e.Size)
	}
	return b
}

// clone3 blocks every signal on this thread around the clone: the child
// starts with them blocked and its handlers cleared, and restores the
// thread's mask (prog.mask) in its program.
func clone3(prog *childProg) (pid, errno uintptr) {
	all := ^uint64(0)
	if _, _, e := unix.RawSyscall6(unix.SYS_RT_SIGPROCMASK, unix.SIG_SETMASK, uintptr(unsafe.Pointer(&all)), uintptr(unsafe.Pointer(&prog.mask)), 8, 0, 0); e != 0 {
		return 0, uintptr(e)
	}
	pid, errno = rawClone3(&prog.args, unsafe.Sizeof(prog.args), prog)
	unix.RawSyscall6(unix.SYS_RT_SIGPROCMASK, unix.SIG_SETMASK, uintptr(unsafe.Pointer(&prog.mask)), 0, 8, 0, 0)
	return pid, errno
}
