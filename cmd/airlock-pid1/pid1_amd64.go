//go:build linux && amd64

package main

// Everything here runs without the Go runtime (see main.go): every
// function is nosplit, buffers are global (zeroed memory the kernel maps on
// first touch), and memory is read through unsafe.Add rather than slices,
// so that no bounds check can call into the runtime.

import (
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/internal/initbin"
)

// Names shared with the host side (internal/runtime/gvisor).
const (
	argvEnv     = "AIRLOCK_GVISOR_ARGV="
	seccompEnv  = "AIRLOCK_GVISOR_SECCOMP="
	buildEnv    = initbin.BuildEnv + "="
	statusFD    = 3
	defaultPATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	relayArg    = "__sandbox-init-gvisor-relay" // gvisor.RelayArg
	maxForwards = 16
	maxFilter   = 4096         // BPF_MAXINSNS
	atFDCWD     = ^uintptr(99) // AT_FDCWD, -100
)

// forwarded is the mask of the signals the supervisor forwards
// (runtime.ForwardedSignals: INT, TERM, HUP, QUIT, USR1, USR2, WINCH;
// TestForwardedMask keeps the two equal).
const forwarded = 1<<(unix.SIGINT-1) | 1<<(unix.SIGTERM-1) | 1<<(unix.SIGHUP-1) | 1<<(unix.SIGQUIT-1) |
	1<<(unix.SIGUSR1-1) | 1<<(unix.SIGUSR2-1) | 1<<(unix.SIGWINCH-1)

var (
	tlsBlock [16]uint64 // the FS base points at its middle (entry_amd64.s)

	// Sized past the largest command line a process is given (arguments
	// and environment together: a quarter of the stack limit, 2 MiB at
	// the usual 8 MiB); only the pages used are ever mapped.
	argBuf  [8 << 20]byte // the decoded command, NUL-terminated arguments
	argv    [1 << 20]uintptr
	envp    [1 << 20]uintptr
	filter  [maxFilter * 8]byte
	pathBuf [8192]byte     // the command's path, NUL-terminated
	denied  [8192]byte     // the first non-executable match in PATH
	msg     [16 << 10]byte // a message being written (put)
	msgLen  uint
	out     [32 << 10]byte // the status line fail writes
	statBuf unix.Stat_t
	sigInfo unix.SignalfdSiginfo
	fprog   struct {
		n      uint16
		_      [6]byte
		filter uintptr
	}
	mask      uint64
	emptyMask uint64
	childErr  [2]uint64 // the child's failing step and its errno (shared memory: vfork)
	pgrp      int32     // the child's process group, for TIOCSPGRP
	status    int32

	// The egress forwards (--forward=ADDR=SOCKET): the listening sockets
	// and the relay's argv and environment.
	nfwd      uintptr
	fwdArg    [maxForwards]uintptr // the options' indexes in argv
	relayOpt  uintptr              // the --relay option's index in argv (0: none)
	listeners [maxForwards]uintptr
	relayArgv [maxForwards + 3]uintptr
	relayEnv  [2]uintptr
	sockAddr  unix.RawSockaddrInet4
	sockAddr6 unix.RawSockaddrInet6
	one       int32 = 1
)

// sys is a raw system call (entry_amd64.s): r is -1 and errno set on failure.
func sys(trap, a1, a2, a3, a4, a5, a6 uintptr) (r, errno uintptr)

// vfork is clone(CLONE_VM|CLONE_VFORK) (entry_amd64.s) as the kernel
// returns it: 0 in the child, which shares this memory until it executes
// the command or exits, -errno on failure. The child runs on the caller's
// stack, so the caller's child branch must only call a function that never
// returns (child, relayChild): code of its own there could spill into the
// caller's frame, over a value the parent reads once it resumes.
func vfork() (r uintptr)

// Steps of the child that can fail, in childErr[0].
const (
	stepNoNewPrivs = 1
	stepSeccomp    = 2
	stepExec       = 3
	stepRelay      = 4
)

//go:nosplit
func ptr(p unsafe.Pointer, i uintptr) unsafe.Pointer {
	return *(*unsafe.Pointer)(unsafe.Add(p, i*8))
}

//go:nosplit
func at(p unsafe.Pointer, i uintptr) byte { return *(*byte)(unsafe.Add(p, i)) }

//go:nosplit
func cstrlen(p unsafe.Pointer) uintptr {
	n := uintptr(0)
	for at(p, n) != 0 {
		n++
	}
	return n
}

// hasPrefix: whether the C string p starts with s (which holds no NUL).
//
//go:nosplit
func hasPrefix(p unsafe.Pointer, s string) bool {
	for i := 0; i < len(s); i++ {
		if at(p, uintptr(i)) != s[i] {
			return false
		}
	}
	return true
}

// equal: whether the C string p is s.
//
//go:nosplit
func equal(p unsafe.Pointer, s string) bool {
	return hasPrefix(p, s) && at(p, uintptr(len(s))) == 0
}

// The status message, built in msg.

//go:nosplit
func putByte(c byte) {
	if n := msgLen; n < uint(len(msg)) {
		msg[n] = c
		msgLen = n + 1
	}
}

//go:nosplit
func put(s string) {
	for i := 0; i < len(s); i++ {
		putByte(s[i])
	}
}

//go:nosplit
func putC(p unsafe.Pointer) {
	for i := uintptr(0); at(p, i) != 0; i++ {
		putByte(at(p, i))
	}
}

//go:nosplit
func putUint(v uintptr) {
	var d [20]byte
	i := uint(len(d))
	for i > 0 {
		i--
		d[i%uint(len(d))] = byte('0' + v%10)
		v /= 10
		if v == 0 {
			break
		}
	}
	for ; i < uint(len(d)); i++ {
		putByte(d[i%uint(len(d))])
	}
}

//go:nosplit
func exit(code uintptr) {
	for {
		sys(unix.SYS_EXIT_GROUP, code, 0, 0, 0, 0, 0)
	}
}

//go:nosplit
func writeMsg(fd uintptr) {
	sys(unix.SYS_WRITE, fd, uintptr(unsafe.Pointer(&msg[0])), uintptr(msgLen), 0, 0, 0)
}

// fail ends the start as airlock-init's fail does: "CODE message\n" on
// the status pipe, message being what msg holds, and exit with code.
//
//go:nosplit
func fail(code uintptr) {
	n := uint(0)
	if code >= 100 {
		out[n] = byte('0' + code/100%10)
		n++
	}
	if code >= 10 {
		out[n%uint(len(out))] = byte('0' + code/10%10)
		n++
	}
	out[n%uint(len(out))] = byte('0' + code%10)
	out[(n+1)%uint(len(out))] = ' '
	n += 2
	for i := uint(0); i < msgLen && i < uint(len(msg)); i++ {
		out[(n+i)%uint(len(out))] = msg[i]
	}
	n += msgLen
	out[n%uint(len(out))] = '\n'
	sys(unix.SYS_WRITE, statusFD, uintptr(unsafe.Pointer(&out[0])), uintptr(n+1), 0, 0, 0)
	exit(code)
}

// putErrno puts Go's text for the errors an exec or the filter can meet
// (syscall.Errno.Error; TestErrnoText compares them), "errno N" otherwise.
//
//go:nosplit
func putErrno(e uintptr) {
	switch e {
	case uintptr(unix.ENOENT):
		put("no such file or directory")
	case uintptr(unix.ENOTDIR):
		put("not a directory")
	case uintptr(unix.EACCES):
		put("permission denied")
	case uintptr(unix.EPERM):
		put("operation not permitted")
	case uintptr(unix.ENOEXEC):
		put("exec format error")
	case uintptr(unix.EISDIR):
		put("is a directory")
	case uintptr(unix.ETXTBSY):
		put("text file busy")
	case uintptr(unix.ELIBBAD):
		put("accessing a corrupted shared library")
	case uintptr(unix.E2BIG):
		put("argument list too long")
	case uintptr(unix.ENOMEM):
		put("cannot allocate memory")
	case uintptr(unix.ELOOP):
		put("too many levels of symbolic links")
	case uintptr(unix.ENAMETOOLONG):
		put("file name too long")
	case uintptr(unix.EFAULT):
		put("bad address")
	case uintptr(unix.EINVAL):
		put("invalid argument")
	case uintptr(unix.EIO):
		put("input/output error")
	case uintptr(unix.EMFILE):
		put("too many open files")
	case uintptr(unix.ENFILE):
		put("too many open files in system")
	case uintptr(unix.EAGAIN):
		put("resource temporarily unavailable")
	case uintptr(unix.ENOSYS):
		put("function not implemented")
	case uintptr(unix.EBADF):
		put("bad file descriptor")
	case uintptr(unix.ENOTTY):
		put("inappropriate ioctl for device")
	default:
		put("errno ")
		putUint(e)
	}
}

// b64 decodes the standard base64 (with padding) of the C string src into
// dst (at most max bytes): the length, -1 if src is not that, -2 if it
// holds more than max bytes.
//
//go:nosplit
func b64(src unsafe.Pointer, dst unsafe.Pointer, max uintptr) int {
	var acc, bits uint32
	n := uintptr(0)
	pad := 0
	for i := uintptr(0); ; i++ {
		c := at(src, i)
		var v uint32
		switch {
		case c == 0:
			if bits >= 6 || i%4 != 0 {
				return -1
			}
			return int(n)
		case c == '=':
			pad++
			continue
		case pad > 0:
			return -1
		case c >= 'A' && c <= 'Z':
			v = uint32(c - 'A')
		case c >= 'a' && c <= 'z':
			v = uint32(c-'a') + 26
		case c >= '0' && c <= '9':
			v = uint32(c-'0') + 52
		case c == '+':
			v = 62
		case c == '/':
			v = 63
		default:
			return -1
		}
		acc = acc<<6 | v
		bits += 6
		if bits >= 8 {
			bits -= 8
			if n >= max {
				return -2
			}
			*(*byte)(unsafe.Add(dst, n)) = byte(acc >> bits)
			n++
		}
	}
}

// run is called by start with the initial stack.
//
//go:nosplit
func run(sp unsafe.Pointer) {
	argc := *(*uintptr)(sp)
	args := unsafe.Add(sp, 8)
	env := unsafe.Add(sp, 8*(argc+2))
	if argc > 1 && equal(ptr(args, 1), holdArg) {
		hold(argc, args, env) // never returns
	}

	// The status pipe is fd 3; were it not open, the descriptors made
	// below could take its number.
	if _, e := sys(unix.SYS_FCNTL, statusFD, unix.F_GETFD, 0, 0, 0, 0); e != 0 {
		put("airlock-pid1: no status pipe at fd 3: ")
		putErrno(e)
		put("\n")
		writeMsg(2)
		exit(126)
	}

	// The environment: the build id, the command, the filter, PATH; the
	// rest is the command's.
	var build, cmd, sec, path unsafe.Pointer
	nenv := uintptr(0)
	for i := uintptr(0); ptr(env, i) != nil; i++ {
		e := ptr(env, i)
		switch {
		case hasPrefix(e, buildEnv):
			build = unsafe.Add(e, len(buildEnv))
			relayEnv[0] = uintptr(e)
			continue
		case hasPrefix(e, argvEnv):
			cmd = unsafe.Add(e, len(argvEnv))
			continue
		case hasPrefix(e, seccompEnv):
			sec = unsafe.Add(e, len(seccompEnv))
			continue
		case hasPrefix(e, "PATH="):
			path = unsafe.Add(e, 5) // the last one, as the agent reads it
		}
		if nenv+1 >= uintptr(len(envp)) {
			put("environment: too many variables")
			fail(126)
		}
		envp[nenv%uintptr(len(envp))] = uintptr(e)
		nenv++
	}
	// As airlock-init: the variable must be exactly this build's id (an
	// unset one matches only a build without one).
	if (build == nil && initbin.BuildID != "") || (build != nil && !equal(build, initbin.BuildID)) {
		put("airlock-pid1: built as \"")
		put(initbin.BuildID)
		put("\", started by airlock \"")
		if build != nil {
			putC(build)
		}
		put("\": rebuild both with 'make build'\n")
		writeMsg(2)
		exit(120)
	}

	// The options: those of `airlock-init __gvisor-exec`, without egress
	// forwarders (the host starts airlock-init for those).
	withSeccomp, tty := false, false
	i := uintptr(2)
	for ; i < argc && !equal(ptr(args, i), "--"); i++ {
		a := ptr(args, i)
		switch {
		case equal(a, "--seccomp"):
			withSeccomp = true
		case equal(a, "--tty"):
			tty = true
		case equal(a, "--init"):
		case hasPrefix(a, "--relay="):
			relayOpt = i
		case hasPrefix(a, "--forward="):
			if nfwd == maxForwards {
				put("airlock-pid1: more than 16 --forward options")
				fail(126)
			}
			fwdArg[nfwd%maxForwards] = i
			nfwd++
		default:
			put("airlock-pid1: unsupported option ")
			putC(a)
			fail(126)
		}
	}

	// The command.
	if cmd == nil {
		put("command: ")
		put(argvEnv[:len(argvEnv)-1])
		put(" is not set")
		fail(126)
	}
	n := b64(cmd, unsafe.Pointer(&argBuf[0]), uintptr(len(argBuf)))
	if n == -2 {
		put("command: longer than 8 MiB")
		fail(126)
	}
	if n < 0 || (n > 0 && argBuf[uint(n-1)%uint(len(argBuf))] != 0) {
		put("command: ")
		put(argvEnv[:len(argvEnv)-1])
		put(" is not base64 of NUL-terminated arguments")
		fail(126)
	}
	nargv := uintptr(0)
	for start, j := 0, 0; j < n; j++ {
		if argBuf[uint(j)%uint(len(argBuf))] != 0 {
			continue
		}
		if nargv+1 >= uintptr(len(argv)) {
			put("command: too many arguments")
			fail(126)
		}
		argv[nargv%uintptr(len(argv))] = uintptr(unsafe.Pointer(&argBuf[uint(start)%uint(len(argBuf))]))
		nargv++
		start = j + 1
	}
	if nargv == 0 {
		put("no command")
		fail(126)
	}
	name := unsafe.Pointer(&argBuf[0]) // argv[0]

	var nfilter int
	if withSeccomp {
		if sec == nil {
			put("seccomp: ")
			put(seccompEnv[:len(seccompEnv)-1])
			put(" is not set")
			fail(126)
		}
		nfilter = b64(sec, unsafe.Pointer(&filter[0]), uintptr(len(filter)))
		if nfilter <= 0 || nfilter%8 != 0 {
			put("seccomp: ")
			put(seccompEnv[:len(seccompEnv)-1])
			put(" is not a base64 program")
			fail(126)
		}
		fprog.n = uint16(nfilter / 8)
		fprog.filter = uintptr(unsafe.Pointer(&filter[0]))
	}

	lookPath(name, path)

	// Like airlock-init: not dumpable (the command cannot look into it),
	// named as it is, and nothing inherited but its stdio and the status
	// pipe.
	sys(unix.SYS_PRCTL, unix.PR_SET_DUMPABLE, 0, 0, 0, 0, 0)
	sys(unix.SYS_PRCTL, unix.PR_SET_NAME, uintptr(unsafe.Pointer(unsafe.StringData("airlock-init\x00"))), 0, 0, 0, 0)
	sys(unix.SYS_CLOSE_RANGE, statusFD+1, ^uintptr(0)>>33, unix.CLOSE_RANGE_CLOEXEC, 0, 0, 0)

	// Every signal blocked: those forwarded and SIGCHLD are read from a
	// signalfd, the others stay pending, as a PID 1 without handlers
	// ignores them (the Sentry would otherwise apply their default
	// action: a `kill -TSTP 1` would stop it).
	mask = ^uint64(0)
	if _, e := sys(unix.SYS_RT_SIGPROCMASK, unix.SIG_BLOCK, uintptr(unsafe.Pointer(&mask)), 0, 8, 0, 0); e != 0 {
		put("signals: ")
		putErrno(e)
		fail(126)
	}
	mask = forwarded | 1<<(unix.SIGCHLD-1)
	sfd, e := sys(unix.SYS_SIGNALFD4, ^uintptr(0), uintptr(unsafe.Pointer(&mask)), 8, unix.SFD_CLOEXEC, 0, 0)
	if e != 0 {
		put("signals: signalfd: ")
		putErrno(e)
		fail(126)
	}
	if nfwd > 0 {
		if relayOpt == 0 {
			put("airlock-pid1: --forward without --relay")
			fail(126)
		}
		startRelay(args)
	}

	// vfork, not fork: the child needs no copy of this address space,
	// and under gVisor's systrap platform each address space is a host
	// process of its own. This returns once the child has executed the
	// command or ended; a step that failed is in childErr.
	pid := vfork()
	if pid > ^uintptr(4095) { // -4095..-1: an errno
		put("fork: ")
		putErrno(-pid)
		fail(126)
	}
	if pid == 0 {
		child(withSeccomp, tty)
	}
	if childErr[0] != 0 {
		sys(unix.SYS_WAIT4, pid, 0, 0, 0, 0, 0)
		startFailure(name)
	}
	sys(unix.SYS_WRITE, statusFD, uintptr(unsafe.Pointer(unsafe.StringData("ok\n"))), 3, 0, 0, 0)
	sys(unix.SYS_CLOSE, statusFD, 0, 0, 0, 0, 0)
	supervise(sfd, pid)
}

// lookPath leaves the command's path in pathBuf, or fails as the agent's
// lookPath does: a name with a slash is used as is; else the first regular
// file with an execute bit in PATH's directories ("" is "."); a name found
// only without one is not executable (126), one found nowhere not found
// (127).
//
//go:nosplit
func lookPath(name, path unsafe.Pointer) {
	nlen := cstrlen(name)
	for i := uintptr(0); i < nlen; i++ {
		if at(name, i) == '/' {
			copyC(name, 0, nlen)
			return
		}
	}
	if path == nil {
		path = unsafe.Pointer(unsafe.StringData(defaultPATH + "\x00"))
	}
	// An empty PATH names no directory (filepath.SplitList), not ".".
	for start := uintptr(0); at(path, 0) != 0; {
		end := start
		for at(path, end) != 0 && at(path, end) != ':' {
			end++
		}
		// dir + "/" + name, as filepath.Join spells it for the usual
		// directories: "" and "." give the bare name, trailing slashes
		// are dropped.
		dir := end
		for dir > start+1 && at(path, dir-1) == '/' {
			dir--
		}
		k := uintptr(0)
		if !(dir == start || (dir == start+1 && at(path, start) == '.')) {
			k = copyC(unsafe.Add(path, start), 0, dir-start)
			if !(dir == start+1 && at(path, start) == '/') {
				k = copyC(unsafe.Pointer(unsafe.StringData("/")), k, 1)
			}
		}
		copyC(name, k, nlen)
		if _, e := sys(unix.SYS_NEWFSTATAT, atFDCWD, uintptr(unsafe.Pointer(&pathBuf[0])), uintptr(unsafe.Pointer(&statBuf)), 0, 0, 0); e == 0 &&
			statBuf.Mode&unix.S_IFMT == unix.S_IFREG {
			if statBuf.Mode&0o111 != 0 {
				return
			}
			if denied[0] == 0 {
				for j := 0; j < len(pathBuf) && j < len(denied); j++ {
					denied[j] = pathBuf[j]
				}
			}
		}
		if at(path, end) == 0 {
			break
		}
		start = end + 1
	}
	put("exec ")
	putC(name)
	if denied[0] != 0 {
		put(": ")
		putC(unsafe.Pointer(&denied[0]))
		put(" is not executable (permission denied)")
		fail(126)
	}
	put(": executable file not found in $PATH")
	fail(127)
}

// copyC writes n bytes of p at pathBuf[k:] and a NUL after them; it
// returns k+n. A path longer than pathBuf fails the start.
//
//go:nosplit
func copyC(p unsafe.Pointer, k, n uintptr) uintptr {
	if k+n+1 > uintptr(len(pathBuf)) {
		put("exec: path too long")
		fail(126)
	}
	for i := uintptr(0); i < n; i++ {
		pathBuf[(k+i)%uintptr(len(pathBuf))] = at(p, i)
	}
	pathBuf[(k+n)%uintptr(len(pathBuf))] = 0
	return k + n
}

// child becomes the command: a session of its own (signals go to its
// group, as a terminal sends them), or with a terminal (which runsc made
// this session's, on fd 0) a process group of its own in the terminal's
// foreground; then the policy's filter, the signal mask the command expects
// (empty), and the exec. It runs on the parent's memory (vfork): it writes
// nothing but childErr and pgrp, and never returns.
//
//go:nosplit
func child(withSeccomp, tty bool) {
	sys(unix.SYS_CLOSE, statusFD, 0, 0, 0, 0, 0)
	if tty {
		// SIGTTOU, which tcsetpgrp from a background group raises, is
		// blocked (the parent's mask) until the exec.
		sys(unix.SYS_SETPGID, 0, 0, 0, 0, 0, 0)
		pid, _ := sys(unix.SYS_GETPID, 0, 0, 0, 0, 0, 0)
		pgrp = int32(pid)
		if _, e := sys(unix.SYS_IOCTL, 0, unix.TIOCSPGRP, uintptr(unsafe.Pointer(&pgrp)), 0, 0, 0); e != 0 {
			// Reported as the exec's: Go's ForkExec returns it
			// to airlock-init the same way.
			childFail(stepExec, e)
		}
	} else {
		sys(unix.SYS_SETSID, 0, 0, 0, 0, 0, 0)
	}
	if withSeccomp {
		if _, e := sys(unix.SYS_PRCTL, unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0, 0); e != 0 {
			childFail(stepNoNewPrivs, e)
		}
		if _, e := sys(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, uintptr(unsafe.Pointer(&fprog)), 0, 0, 0); e != 0 {
			childFail(stepSeccomp, e)
		}
	}
	execOrFail(stepExec, uintptr(unsafe.Pointer(&pathBuf[0])), uintptr(unsafe.Pointer(&argv[0])), uintptr(unsafe.Pointer(&envp[0])))
}

//go:nosplit
func childFail(step, e uintptr) {
	childErr[0], childErr[1] = uint64(step), uint64(e)
	for {
		sys(unix.SYS_EXIT, 127, 0, 0, 0, 0, 0) // this task only
	}
}

// startFailure reports the child's failing step as airlock-init does
// (agent.StartFailure for the exec).
//
//go:nosplit
func startFailure(name unsafe.Pointer) {
	e := uintptr(childErr[1])
	switch childErr[0] {
	case stepNoNewPrivs:
		put("seccomp: seccomp: install filter: prctl(PR_SET_NO_NEW_PRIVS): ")
		putErrno(e)
		fail(126)
	case stepSeccomp:
		put("seccomp: seccomp: install filter: ")
		putErrno(e)
		fail(126)
	}
	// The exec (or the terminal's foreground).
	put("exec ")
	putC(name)
	code := uintptr(126)
	if e == uintptr(unix.ENOENT) || e == uintptr(unix.ENOTDIR) {
		if _, le := sys(unix.SYS_NEWFSTATAT, atFDCWD, uintptr(unsafe.Pointer(&pathBuf[0])), uintptr(unsafe.Pointer(&statBuf)), unix.AT_SYMLINK_NOFOLLOW, 0, 0); le == 0 {
			// The file is there: its #! interpreter or ELF loader is not.
			put(": its interpreter or loader is missing (")
			putErrno(e)
			put(")")
			fail(126)
		}
		code = 127
	}
	put(": ")
	putErrno(e)
	fail(code)
}

// supervise passes each forwarded signal to the command's process group
// (or the command, if it left it), reaps every child, and exits with the
// command's status once it has ended.
//
//go:nosplit
func supervise(sfd, pid uintptr) {
	for {
		_, e := sys(unix.SYS_READ, sfd, uintptr(unsafe.Pointer(&sigInfo)), unsafe.Sizeof(sigInfo), 0, 0, 0)
		if e == uintptr(unix.EINTR) {
			continue
		}
		if e != 0 {
			// The status pipe is closed by now: say it on stderr.
			put("airlock init: signalfd: ")
			putErrno(e)
			put("\n")
			writeMsg(2)
			exit(126)
		}
		sig := uintptr(sigInfo.Signo)
		if sig != uintptr(unix.SIGCHLD) {
			if _, e := sys(unix.SYS_KILL, -pid, sig, 0, 0, 0, 0); e != 0 {
				sys(unix.SYS_KILL, pid, sig, 0, 0, 0, 0)
			}
			continue
		}
		for {
			got, e := sys(unix.SYS_WAIT4, ^uintptr(0), uintptr(unsafe.Pointer(&status)), unix.WNOHANG, 0, 0, 0)
			if e != 0 || got == 0 {
				break
			}
			if got != pid {
				continue // an orphan reaped
			}
			switch s := uintptr(status); {
			case s&0x7f == 0: // exited
				exit(s >> 8 & 0xff)
			case s&0xff != 0x7f: // killed by a signal (not stopped)
				exit(128 + s&0x7f)
			}
		}
	}
}

// startRelay listens on each forward's address, then starts the relay
// program (--relay: airlock-init, gvisor.RelayMain) for their connections,
// with the listening sockets as its fds 3, 4, ...: the addresses accept
// connections from now on, before the command starts, while the relay's
// Go runtime starts beside the command. args is the program's argv, where
// fwdArg indexes the "--forward=ADDR=SOCKET" options. The relay has a
// session of its own, so the signals forwarded to the command's group do
// not reach it.
//
//go:nosplit
func startRelay(args unsafe.Pointer) {
	relay := unsafe.Add(ptr(args, relayOpt), len("--relay="))
	relayArgv[0] = uintptr(relay)
	relayArgv[1] = uintptr(unsafe.Pointer(unsafe.StringData(relayArg + "\x00")))
	for i := uintptr(0); i < nfwd; i++ {
		spec := unsafe.Add(ptr(args, fwdArg[i%maxForwards]), len("--forward="))
		eq := uintptr(0)
		for at(spec, eq) != 0 && at(spec, eq) != '=' {
			eq++
		}
		if at(spec, eq) != '=' {
			put("forward ")
			putC(spec)
			put(": want ADDR=SOCKET")
			fail(126)
		}
		listeners[i%maxForwards] = listen(spec, eq)
		relayArgv[(2+i)%uintptr(len(relayArgv))] = uintptr(unsafe.Add(spec, eq+1))
	}
	pid := vfork()
	if pid > ^uintptr(4095) {
		put("egress relay: fork: ")
		putErrno(-pid)
		fail(126)
	}
	if pid == 0 {
		relayChild()
	}
	if childErr[0] != 0 {
		put("egress relay: start ")
		putC(relay)
		put(": ")
		putErrno(uintptr(childErr[1]))
		fail(126)
	}
	for i := uintptr(0); i < nfwd; i++ {
		sys(unix.SYS_CLOSE, listeners[i%maxForwards], 0, 0, 0, 0, 0)
	}
}

// relayChild becomes the relay (vfork's child, like child): a session of
// its own, the listening sockets as fds 3, 4, ... (made after fds 0-3 and
// the signalfd, their numbers are above their targets, taken in increasing
// order), then the exec.
//
//go:nosplit
func relayChild() {
	sys(unix.SYS_SETSID, 0, 0, 0, 0, 0, 0)
	for i := uintptr(0); i < nfwd; i++ {
		if _, e := sys(unix.SYS_DUP3, listeners[i%maxForwards], 3+i, 0, 0, 0, 0); e != 0 {
			childFail(stepRelay, e)
		}
	}
	execOrFail(stepRelay, relayArgv[0], uintptr(unsafe.Pointer(&relayArgv[0])), uintptr(unsafe.Pointer(&relayEnv[0])))
}

// execOrFail gives a vfork child the signal mask a new program expects
// (empty) and executes path, or reports the failure as step.
//
//go:nosplit
func execOrFail(step, path, argv, envp uintptr) {
	sys(unix.SYS_RT_SIGPROCMASK, unix.SIG_SETMASK, uintptr(unsafe.Pointer(&emptyMask)), 0, 8, 0, 0)
	_, e := sys(unix.SYS_EXECVE, path, argv, envp, 0, 0, 0)
	childFail(step, e)
}

// listen makes a listening TCP socket on the address spec[:n], "IP:PORT"
// or "[IPv6]:PORT", or fails the start as airlock-init's forwarders do.
//
//go:nosplit
func listen(spec unsafe.Pointer, n uintptr) uintptr {
	colon := n
	for colon > 0 && at(spec, colon-1) != ':' {
		colon--
	}
	port, ok := parseUint(spec, colon, n, 65535)
	if colon < 2 || !ok {
		return listenFail(spec, n, 0)
	}
	host, hostEnd := uintptr(0), colon-1
	var sa unsafe.Pointer
	var salen, family uintptr
	if at(spec, 0) == '[' && at(spec, hostEnd-1) == ']' {
		if !parseIPv6(spec, 1, hostEnd-1, &sockAddr6.Addr) {
			return listenFail(spec, n, 0)
		}
		sockAddr6.Family = unix.AF_INET6
		sockAddr6.Port = uint16(port>>8 | port<<8&0xff00)
		sa, salen, family = unsafe.Pointer(&sockAddr6), unsafe.Sizeof(sockAddr6), unix.AF_INET6
	} else {
		for k := 0; k < 4; k++ {
			end := host
			for end < hostEnd && at(spec, end) != '.' {
				end++
			}
			v, ok := parseUint(spec, host, end, 255)
			if !ok || (k < 3) != (end < hostEnd) {
				return listenFail(spec, n, 0)
			}
			sockAddr.Addr[k%4] = byte(v)
			host = end + 1
		}
		sockAddr.Family = unix.AF_INET
		sockAddr.Port = uint16(port>>8 | port<<8&0xff00)
		sa, salen, family = unsafe.Pointer(&sockAddr), unsafe.Sizeof(sockAddr), unix.AF_INET
	}
	fd, e := sys(unix.SYS_SOCKET, family, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0, 0, 0, 0)
	if e != 0 {
		return listenFail(spec, n, e)
	}
	sys(unix.SYS_SETSOCKOPT, fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, uintptr(unsafe.Pointer(&one)), 4, 0)
	if _, e = sys(unix.SYS_BIND, fd, uintptr(sa), salen, 0, 0, 0); e == 0 {
		_, e = sys(unix.SYS_LISTEN, fd, 4096, 0, 0, 0, 0)
	}
	if e != 0 {
		return listenFail(spec, n, e)
	}
	return fd
}

//go:nosplit
func listenFail(spec unsafe.Pointer, n, e uintptr) uintptr {
	put("listen on ")
	for i := uintptr(0); i < n; i++ {
		putByte(at(spec, i))
	}
	put(" inside the sandbox: ")
	if e == 0 {
		put("not an IP:PORT address")
	} else {
		putErrno(e)
	}
	fail(126)
	return 0
}

// parseUint parses the decimal p[from:to] up to max.
//
//go:nosplit
func parseUint(p unsafe.Pointer, from, to, max uintptr) (uintptr, bool) {
	if from >= to || to-from > 5 {
		return 0, false
	}
	v := uintptr(0)
	for i := from; i < to; i++ {
		c := at(p, i)
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + uintptr(c-'0')
	}
	return v, v <= max
}

// parseIPv6 parses the IPv6 address p[from:to] ("::1", "fd00::2") into a.
//
//go:nosplit
func parseIPv6(p unsafe.Pointer, from, to uintptr, a *[16]byte) bool {
	var groups [8]uint16
	ng, gap := uintptr(0), ^uintptr(0)
	i := from
	if to-from >= 2 && at(p, i) == ':' && at(p, i+1) == ':' {
		gap, i = 0, i+2
	}
	for i < to {
		v, digits := uintptr(0), uintptr(0)
		for i < to && at(p, i) != ':' {
			c := at(p, i)
			switch {
			case c >= '0' && c <= '9':
				v = v<<4 | uintptr(c-'0')
			case c >= 'a' && c <= 'f':
				v = v<<4 | uintptr(c-'a'+10)
			case c >= 'A' && c <= 'F':
				v = v<<4 | uintptr(c-'A'+10)
			default:
				return false
			}
			digits++
			i++
		}
		if digits == 0 || digits > 4 || ng == 8 {
			return false
		}
		groups[ng%8] = uint16(v)
		ng++
		if i < to {
			i++ // the ':'
			if i < to && at(p, i) == ':' {
				if gap != ^uintptr(0) {
					return false
				}
				gap, i = ng, i+1
			} else if i == to {
				return false
			}
		}
	}
	if (gap == ^uintptr(0) && ng != 8) || (gap != ^uintptr(0) && ng > 7) {
		return false
	}
	// Groups after the gap move to the end.
	var out [8]uint16
	if gap == ^uintptr(0) {
		gap = ng
	}
	for k := uintptr(0); k < gap && k < 8; k++ {
		out[k%8] = groups[k%8]
	}
	for k := gap; k < ng; k++ {
		out[(8-(ng-k))%8] = groups[k%8]
	}
	for k := 0; k < 8; k++ {
		a[(2*k)%16] = byte(out[k] >> 8)
		a[(2*k+1)%16] = byte(out[k])
	}
	return true
}
