package seccomp

import (
	"fmt"
	"runtime"
	"slices"
	"sort"
)

// Action is what the filter does with a syscall.
type Action string

// Actions a Profile may use. Any syscall without an explicit action gets
// ActionEPERM.
const (
	ActionAllow  Action = "allow"  // SECCOMP_RET_ALLOW
	ActionEPERM  Action = "eperm"  // SECCOMP_RET_ERRNO | EPERM
	ActionENOSYS Action = "enosys" // SECCOMP_RET_ERRNO | ENOSYS
)

// Cond is one argument test: (args[Arg] & Mask) == Value. Mask 0 means all
// bits. With Low32 only the low 32 bits of the argument are compared (for
// int / unsigned int parameters, which the kernel truncates); otherwise
// both halves are.
type Cond struct {
	Arg   int    `json:"arg"`
	Mask  uint64 `json:"mask,omitempty"`
	Value uint64 `json:"value"`
	Low32 bool   `json:"low32,omitempty"`
}

// Case applies Action when every condition in When holds.
type Case struct {
	When   []Cond `json:"when"`
	Action Action `json:"action"`
	Note   string `json:"note,omitempty"`
}

// Rule gives one syscall argument-dependent behaviour: the first Case whose
// conditions all hold decides; if none does, Else applies. A Rule with no
// cases gives the syscall a fixed action (e.g. clone3 -> enosys).
type Rule struct {
	Syscall string `json:"syscall"`
	Cases   []Case `json:"cases,omitempty"`
	Else    Action `json:"else"`
}

// Profile is an allowlist: syscalls in Allow are allowed, syscalls with a
// Rule get the rule's actions, everything else fails with EPERM. Denied
// records the syscalls that were denied explicitly (the forbidden set plus
// whatever Deny added); a name must not be both in Denied and in Allow/Rules.
type Profile struct {
	Allow  []string `json:"allow"`
	Rules  []Rule   `json:"rules"`
	Denied []string `json:"denied"`
}

// Linux constants used by the default rules. They are the same on every
// supported architecture.
const (
	cloneNewNS     = 0x00020000
	cloneNewCgroup = 0x02000000
	cloneNewUTS    = 0x04000000
	cloneNewIPC    = 0x08000000
	cloneNewUser   = 0x10000000
	cloneNewPID    = 0x20000000
	cloneNewNet    = 0x40000000
	cloneNSFlags   = cloneNewNS | cloneNewCgroup | cloneNewUTS | cloneNewIPC | cloneNewUser | cloneNewPID | cloneNewNet

	afUnix    = 1
	afInet    = 2
	afInet6   = 10
	afNetlink = 16

	netlinkRoute = 0
	sockTypeMask = 0xf
	sockRaw      = 3
	sockPacket   = 10

	tiocsti   = 0x5412
	tioclinux = 0x541c

	// personality(2) personas: the ones the container runtimes' default
	// profiles allow, and the query. Every other value (flags such as
	// READ_IMPLIES_EXEC or ADDR_NO_RANDOMIZE included) fails with EPERM.
	perLinux       = 0x0
	perLinux32     = 0x8     // uname reports a 32-bit machine
	perUname26     = 0x20000 // uname reports a 2.6 release
	perLinux32Un26 = perLinux32 | perUname26
	perQuery       = 0xffffffff
)

// forbidden can never be allowed by any Profile; Compile rejects a profile
// that allows one of them. (vm86/vm86old do not exist on the supported
// 64-bit ABIs; the arch check kills the i386 ABI that has them.)
var forbidden = []string{
	// tracing and cross-process memory access
	"ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd", "kcmp", "process_madvise",
	// kernel attack surface with a history of exploits
	"bpf", "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register",
	"keyctl", "add_key", "request_key", "modify_ldt", "uselib", "_sysctl", "sysfs", "lookup_dcookie",
	// namespaces and filesystem topology
	"mount", "umount2", "move_mount", "open_tree", "open_tree_attr", "fsopen", "fsconfig", "fsmount", "fspick",
	"mount_setattr", "pivot_root", "chroot", "unshare", "setns", "listmount", "statmount", "listns",
	"open_by_handle_at", "name_to_handle_at", "quotactl", "quotactl_fd", "fanotify_init",
	// host administration
	"kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module", "create_module",
	"get_kernel_syms", "query_module", "nfsservctl", "reboot", "swapon", "swapoff", "acct", "vhangup",
	"syslog", "iopl", "ioperm", "settimeofday", "clock_settime", "clock_adjtime", "adjtimex",
	"sethostname", "setdomainname",
	// LSM self-attributes
	"lsm_get_self_attr", "lsm_set_self_attr", "lsm_list_modules",
}

// defaultAllow is allowed unconditionally (names missing on the running
// architecture are left out of Default). Modelled on the Docker default
// profile minus the forbidden set.
var defaultAllow = []string{
	// process, threads, signals
	"arch_prctl", "capget", "capset", "execve", "execveat", "exit", "exit_group", "fork", "vfork",
	"get_robust_list", "set_robust_list", "get_thread_area", "set_thread_area", "set_tid_address",
	"getcpu", "getegid", "geteuid", "getgid", "getgroups", "getpgid", "getpgrp", "getpid", "getppid",
	"getpriority", "getresgid", "getresuid", "getrlimit", "getrusage", "getsid", "gettid", "getuid",
	"ioprio_get", "ioprio_set", "kill", "membarrier", "pause", "pidfd_open", "pidfd_send_signal",
	"prctl", "prlimit64", "process_mrelease", "restart_syscall", "rseq", "rt_sigaction",
	"rt_sigpending", "rt_sigprocmask", "rt_sigqueueinfo", "rt_sigreturn", "rt_sigsuspend",
	"rt_sigtimedwait", "rt_tgsigqueueinfo", "sched_get_priority_max", "sched_get_priority_min",
	"sched_getaffinity", "sched_getattr", "sched_getparam", "sched_getscheduler",
	"sched_rr_get_interval", "sched_setaffinity", "sched_setattr", "sched_setparam",
	"sched_setscheduler", "sched_yield", "seccomp", "setfsgid", "setfsuid", "setgid", "setgroups",
	"setpgid", "setpriority", "setregid", "setresgid", "setresuid", "setreuid", "setrlimit",
	"setsid", "setuid", "sigaltstack", "tgkill", "tkill", "umask", "uname", "wait4", "waitid",
	// landlock: lets nested tools restrict themselves further
	"landlock_add_rule", "landlock_create_ruleset", "landlock_restrict_self",
	// memory
	"brk", "cachestat", "get_mempolicy", "madvise", "map_shadow_stack", "mbind", "memfd_create",
	"memfd_secret", "mincore", "mlock", "mlock2", "mlockall", "mmap", "move_pages", "mprotect",
	"mremap", "mseal", "msync", "munlock", "munlockall", "munmap", "pkey_alloc", "pkey_free",
	"pkey_mprotect", "remap_file_pages", "set_mempolicy", "set_mempolicy_home_node",
	// futexes and time
	"futex", "futex_requeue", "futex_wait", "futex_waitv", "futex_wake", "getrandom", "alarm", "clock_getres",
	"clock_gettime", "clock_nanosleep", "getitimer", "gettimeofday", "nanosleep", "setitimer",
	"sysinfo", "time", "timer_create", "timer_delete", "timer_getoverrun", "timer_gettime",
	"timer_settime", "timerfd_create", "timerfd_gettime", "timerfd_settime", "times",
	// files and directories
	"access", "chdir", "chown", "close", "close_range", "copy_file_range", "dup",
	"dup2", "dup3", "faccessat", "faccessat2", "fadvise64", "fallocate", "fanotify_mark", "fchdir",
	"fchown", "fchownat", "fcntl", "fdatasync", "fgetxattr",
	"file_getattr", "file_setattr", "flistxattr", "flock", "fremovexattr", "fsetxattr", "fstat",
	"fstatfs", "fsync", "ftruncate", "futimesat", "getcwd", "getdents", "getdents64", "getxattr",
	"getxattrat", "inotify_add_watch", "inotify_init", "inotify_init1", "inotify_rm_watch",
	"lchown", "lgetxattr", "link", "linkat", "listxattr", "listxattrat", "llistxattr",
	"lremovexattr", "lseek", "lsetxattr", "lstat", "mkdir", "mkdirat",
	"newfstatat", "pipe", "pipe2", "pread64", "preadv", "preadv2",
	"pwrite64", "pwritev", "pwritev2", "read", "readahead", "readlink", "readlinkat", "readv",
	"removexattr", "removexattrat", "rename", "renameat", "renameat2", "rmdir", "sendfile",
	"setxattr", "setxattrat", "splice", "stat", "statfs", "statx", "symlink", "symlinkat", "sync",
	"sync_file_range", "syncfs", "tee", "truncate", "unlink", "unlinkat", "ustat", "utime",
	"utimensat", "utimes", "vmsplice", "write", "writev",
	// polling, events, AIO
	"epoll_create", "epoll_create1", "epoll_ctl", "epoll_ctl_old", "epoll_pwait", "epoll_pwait2",
	"epoll_wait", "epoll_wait_old", "eventfd", "eventfd2", "io_cancel", "io_destroy",
	"io_getevents", "io_pgetevents", "io_setup", "io_submit", "poll", "ppoll", "pselect6",
	"select", "signalfd", "signalfd4",
	// sockets (socket and socketpair have rules)
	"accept", "accept4", "bind", "connect", "getpeername", "getsockname", "getsockopt", "listen",
	"recvfrom", "recvmmsg", "recvmsg", "sendmmsg", "sendmsg", "sendto", "setsockopt", "shutdown",
	// System V and POSIX IPC
	"mq_getsetattr", "mq_notify", "mq_open", "mq_timedreceive", "mq_timedsend", "mq_unlink",
	"msgctl", "msgget", "msgrcv", "msgsnd", "semctl", "semget", "semop", "semtimedop", "shmat",
	"shmctl", "shmdt", "shmget",
}

func eq32(arg int, v uint64) Cond         { return Cond{Arg: arg, Value: v, Low32: true} }
func masked32(arg int, m, v uint64) Cond  { return Cond{Arg: arg, Mask: m, Value: v, Low32: true} }
func allowIf(note string, c ...Cond) Case { return Case{When: c, Action: ActionAllow, Note: note} }
func denyIf(note string, c ...Cond) Case  { return Case{When: c, Action: ActionEPERM, Note: note} }

// Mode bits and open flags of the set-id rules.
const (
	sISUID   = 0o4000
	sISGID   = 0o2000
	oCreat   = 0o100
	oTmpfile = 0o20000000 // __O_TMPFILE, without O_DIRECTORY
)

// noSetID refuses a mode argument with the setuid or setgid bit.
func noSetID(mode int) []Case {
	return []Case{
		denyIf("S_ISUID", masked32(mode, sISUID, sISUID)),
		denyIf("S_ISGID", masked32(mode, sISGID, sISGID)),
	}
}

// noSetIDCreate refuses an open that creates a file (O_CREAT, O_TMPFILE)
// with the setuid or setgid bit in its mode.
func noSetIDCreate(flags, mode int) []Case {
	var out []Case
	for _, f := range []struct {
		name string
		bit  uint64
	}{{"O_CREAT", oCreat}, {"O_TMPFILE", oTmpfile}} {
		out = append(out,
			denyIf(f.name+" S_ISUID", masked32(flags, f.bit, f.bit), masked32(mode, sISUID, sISUID)),
			denyIf(f.name+" S_ISGID", masked32(flags, f.bit, f.bit), masked32(mode, sISGID, sISGID)))
	}
	return out
}

// defaultRules returns fresh copies of the argument rules.
func defaultRules() []Rule {
	inet := func(family uint64, name string) []Case {
		return []Case{
			denyIf(name+" SOCK_RAW", eq32(0, family), masked32(1, sockTypeMask, sockRaw)),
			denyIf(name+" SOCK_PACKET", eq32(0, family), masked32(1, sockTypeMask, sockPacket)),
			allowIf(name, eq32(0, family)),
		}
	}
	var socket []Case
	socket = append(socket, allowIf("AF_UNIX", eq32(0, afUnix)))
	socket = append(socket, inet(afInet, "AF_INET")...)
	socket = append(socket, inet(afInet6, "AF_INET6")...)
	socket = append(socket, allowIf("AF_NETLINK NETLINK_ROUTE", eq32(0, afNetlink), eq32(2, netlinkRoute)))
	return []Rule{
		// clone's flags are args[0] on amd64 and arm64. The legacy clone
		// syscall only looks at the low 32 bits of the flags.
		{Syscall: "clone", Cases: []Case{allowIf("no namespace flags", masked32(0, cloneNSFlags, 0))}, Else: ActionEPERM},
		// clone3 passes its flags in memory the filter cannot read; ENOSYS
		// makes glibc and Go fall back to clone.
		{Syscall: "clone3", Else: ActionENOSYS},
		{Syscall: "ioctl", Cases: []Case{
			denyIf("TIOCSTI", eq32(1, tiocsti)),
			denyIf("TIOCLINUX", eq32(1, tioclinux)),
		}, Else: ActionAllow},
		// personality's persona is an unsigned int. Only plain personas
		// pass: READ_IMPLIES_EXEC, ADDR_NO_RANDOMIZE and the other flags
		// would weaken the process's own memory protections.
		{Syscall: "personality", Cases: []Case{
			allowIf("query", eq32(0, perQuery)),
			allowIf("PER_LINUX", eq32(0, perLinux)),
			allowIf("PER_LINUX32", eq32(0, perLinux32)),
			allowIf("UNAME26", eq32(0, perUname26)),
			allowIf("PER_LINUX32|UNAME26", eq32(0, perLinux32Un26)),
		}, Else: ActionEPERM},
		// Setuid and setgid bits: every mount inside is nosuid, so inside
		// they mean nothing, but a file made in a root-owned workspace or
		// writable bind belongs to host root (idmapped), where a setuid
		// bit would hand host root to whoever runs it. Refused when set
		// (chmod family, creat, mknod) or asked for with O_CREAT or
		// O_TMPFILE; openat2 passes its mode in memory the filter cannot
		// read, so it is ENOSYS (glibc and Go fall back to openat).
		{Syscall: "chmod", Cases: noSetID(1), Else: ActionAllow},
		{Syscall: "fchmod", Cases: noSetID(1), Else: ActionAllow},
		{Syscall: "fchmodat", Cases: noSetID(2), Else: ActionAllow},
		{Syscall: "fchmodat2", Cases: noSetID(2), Else: ActionAllow},
		{Syscall: "creat", Cases: noSetID(1), Else: ActionAllow},
		{Syscall: "mknod", Cases: noSetID(1), Else: ActionAllow},
		{Syscall: "mknodat", Cases: noSetID(2), Else: ActionAllow},
		{Syscall: "open", Cases: noSetIDCreate(1, 2), Else: ActionAllow},
		{Syscall: "openat", Cases: noSetIDCreate(2, 3), Else: ActionAllow},
		{Syscall: "openat2", Else: ActionENOSYS},
		{Syscall: "socket", Cases: socket, Else: ActionEPERM},
		{Syscall: "socketpair", Cases: []Case{allowIf("AF_UNIX", eq32(0, afUnix))}, Else: ActionEPERM},
	}
}

// Default returns a fresh copy of airlock's default allowlist profile for
// the running architecture.
func Default() *Profile {
	return defaultFor(runtime.GOARCH)
}

// DefaultProgram is Default().Compile(), compiled ahead for the
// architectures airlock supports (default_program.go, which
// TestDefaultPrograms keeps equal to the compiler's output): building and
// compiling the profile took about 0.25 ms of every `airlock run`. The
// caller owns the copy it gets.
func DefaultProgram() ([]SockFilter, error) {
	if p, ok := defaultPrograms[runtime.GOARCH]; ok {
		return slices.Clone(p), nil
	}
	return Default().Compile()
}

// defaultFor builds the default profile for goarch, keeping only syscalls
// that exist there. For an unsupported architecture the lists are empty
// and Compile reports the architecture.
func defaultFor(goarch string) *Profile {
	a, _ := archFor(goarch)
	has := func(name string) bool {
		if a == nil {
			return false
		}
		_, ok := a.syscalls()[name]
		return ok
	}
	p := &Profile{Allow: make([]string, 0, len(defaultAllow)), Rules: []Rule{}, Denied: make([]string, 0, len(forbidden))}
	for _, n := range defaultAllow {
		if has(n) {
			p.Allow = append(p.Allow, n)
		}
	}
	for _, r := range defaultRules() {
		if has(r.Syscall) {
			p.Rules = append(p.Rules, r)
		}
	}
	for _, n := range forbidden {
		if has(n) {
			p.Denied = append(p.Denied, n)
		}
	}
	sort.Strings(p.Allow)
	sort.Strings(p.Denied)
	return p
}

// Deny tightens the profile: each named syscall is removed from the
// allowlist and the rules and recorded in p.Denied, so it fails with EPERM.
// Denying an already denied syscall is fine. A name that is a syscall on
// no supported architecture is an error and leaves p unchanged. A name
// that exists on another supported architecture but not on this one is
// accepted (it cannot be called here anyway).
func (p *Profile) Deny(names ...string) error {
	for _, n := range names {
		if !knownAnywhere(n) {
			return fmt.Errorf("seccomp: unknown syscall %q", n)
		}
	}
	for _, n := range names {
		p.Allow = slices.DeleteFunc(p.Allow, func(s string) bool { return s == n })
		p.Rules = slices.DeleteFunc(p.Rules, func(r Rule) bool { return r.Syscall == n })
		if !slices.Contains(p.Denied, n) {
			p.Denied = append(p.Denied, n)
		}
	}
	sort.Strings(p.Denied)
	return nil
}
