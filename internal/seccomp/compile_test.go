package seccomp

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden (and default_program.go: TestDefaultPrograms)")

const (
	cloneThreadFlags = 0x3d0f00 // CLONE_VM|FS|FILES|SIGHAND|SYSVSEM|THREAD|SETTLS|PARENT_SETTID|CHILD_CLEARTID
	sigchld          = 17
	cloneVfork       = 0x4000 | 0x100 // CLONE_VFORK|CLONE_VM
	clonePidfd       = 0x1000

	afPacket    = 17
	afKey       = 15
	afBluetooth = 31
	afAlg       = 38
	afVsock     = 40
	sockStream  = 1
	sockDgram   = 2
	sockNonblk  = 0x800
	sockCloexec = 0x80000

	netlinkAudit   = 9
	netlinkUevent  = 15
	tcgets         = 0x5401
	garbageHigh    = 0xdeadbeef_00000000
	addrNoRandom   = 0x0040000
	readImplExec   = 0x0400000
	auditArchX32ok = auditArchX86_64
)

func TestGolden(t *testing.T) {
	for goarch, a := range archs(t) {
		t.Run(goarch, func(t *testing.T) {
			prog, err := defaultFor(goarch).compileFor(a)
			if err != nil {
				t.Fatal(err)
			}
			got := Disassemble(prog)
			path := filepath.Join("testdata", "default_"+goarch+".golden")
			if *update {
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test -update)", err)
			}
			if got != string(want) {
				t.Errorf("Disassemble(default %s program) differs from %s; run go test ./internal/seccomp -update and review the diff", goarch, path)
			}
			t.Logf("%s: %d instructions", goarch, len(prog))
		})
	}
}

func TestDefaultIsNativeDefault(t *testing.T) {
	a, err := archFor(runtime.GOARCH)
	if err != nil {
		if _, cerr := Default().Compile(); cerr == nil || cerr.Error() != "seccomp: architecture "+runtime.GOARCH+" not supported" {
			t.Fatalf("Compile on unsupported arch: %v", cerr)
		}
		t.Skip(err)
	}
	got, err := Default().Compile()
	if err != nil {
		t.Fatal(err)
	}
	want, err := defaultFor(runtime.GOARCH).compileFor(a)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatal("Default().Compile() differs from the per-arch default")
	}
	if nr, ok := Lookup("read"); !ok || nr != a.syscalls()["read"] {
		t.Fatalf("Lookup(read) = %d, %v", nr, ok)
	}
	if _, ok := Lookup("no_such_syscall"); ok {
		t.Fatal("Lookup(no_such_syscall) succeeded")
	}
}

func TestLookupTables(t *testing.T) {
	// Spot checks against numbers from the kernel's syscall tables.
	want := map[string]map[string]int{
		"amd64": {"read": 0, "write": 1, "open": 2, "ioctl": 16, "socket": 41, "clone": 56, "ptrace": 101,
			"personality": 135, "openat": 257, "clone3": 435, "landlock_restrict_self": 446},
		"arm64": {"io_setup": 0, "ioctl": 29, "openat": 56, "read": 63, "write": 64, "ptrace": 117,
			"personality": 92, "socket": 198, "clone": 220, "clone3": 435},
	}
	for goarch, a := range archs(t) {
		for name, nr := range want[goarch] {
			if got, ok := a.syscalls()[name]; !ok || got != nr {
				t.Errorf("%s: %s = %d, %v; want %d", goarch, name, got, ok, nr)
			}
		}
		seen := map[int]string{}
		for name, nr := range a.syscalls() {
			if other, dup := seen[nr]; dup {
				t.Errorf("%s: %s and %s share number %d", goarch, name, other, nr)
			}
			seen[nr] = name
		}
	}
	if _, ok := archs(t)["arm64"].syscalls()["open"]; ok {
		t.Error("arm64 has no open(2)")
	}
	if _, err := archFor("riscv64"); err == nil || err.Error() != "seccomp: architecture riscv64 not supported" {
		t.Errorf("archFor(riscv64) = %v", err)
	}
}

func TestDefaultListsAreSane(t *testing.T) {
	forb := map[string]bool{}
	for _, n := range forbidden {
		if !knownAnywhere(n) {
			t.Errorf("forbidden %q is no syscall on any supported arch", n)
		}
		forb[n] = true
	}
	for _, n := range defaultAllow {
		if !knownAnywhere(n) {
			t.Errorf("allowed %q is no syscall on any supported arch", n)
		}
		if forb[n] {
			t.Errorf("%q is both allowed and forbidden", n)
		}
	}
	for _, r := range defaultRules() {
		if forb[r.Syscall] || slices.Contains(defaultAllow, r.Syscall) {
			t.Errorf("rule for %q conflicts", r.Syscall)
		}
	}
	// The syscalls the brief requires to be denied.
	for _, n := range strings.Fields(`ptrace process_vm_readv process_vm_writev bpf perf_event_open userfaultfd
		keyctl add_key request_key mount umount2 move_mount open_tree fsopen fsconfig fsmount fspick
		mount_setattr pivot_root chroot unshare setns io_uring_setup io_uring_enter io_uring_register
		kexec_load kexec_file_load init_module finit_module delete_module reboot swapon swapoff
		settimeofday clock_settime clock_adjtime adjtimex open_by_handle_at name_to_handle_at
		lookup_dcookie acct quotactl vhangup iopl ioperm syslog sysfs uselib nfsservctl create_module
		get_kernel_syms query_module fanotify_init listmount statmount quotactl_fd lsm_get_self_attr
		lsm_set_self_attr lsm_list_modules`) {
		if !forb[n] {
			t.Errorf("%q is not in the forbidden set", n)
		}
	}
}

// TestDefaultActions asserts every syscall of each table against the
// profile's meaning, plus the argument rules, each denial next to its
// positive control.
func TestDefaultActions(t *testing.T) {
	for goarch, a := range archs(t) {
		t.Run(goarch, func(t *testing.T) {
			p := defaultFor(goarch)
			f := compileFilter(t, p, a)

			// Allowed basics.
			for _, n := range []string{"read", "write", "openat", "close", "mmap", "futex", "execve",
				"rt_sigreturn", "sigaltstack", "sched_yield", "epoll_pwait", "pidfd_open", "statx",
				"faccessat2", "close_range", "copy_file_range", "connect", "bind", "listen",
				"accept4", "sendmsg", "recvmmsg", "memfd_create", "landlock_create_ruleset", "seccomp",
				"prctl", "capset", "setuid", "mbind", "set_mempolicy", "move_pages", "pkey_alloc",
				"rseq", "getrandom", "wait4", "waitid", "tgkill", "timer_create", "madvise"} {
				f.expect(t, wantAllow, n)
			}
			// Every forbidden syscall that exists here: EPERM, whatever the args.
			for _, n := range forbidden {
				if _, ok := a.syscalls()[n]; ok {
					f.expect(t, wantEPERM, n)
					f.expect(t, wantEPERM, n, 0xffffffffffffffff, 1, 2, 3, 4, 5)
				}
			}
			// Truth table: every number in the table (and the holes) gets
			// exactly the profile's action.
			allow := map[string]bool{}
			for _, n := range p.Allow {
				allow[n] = true
			}
			rules := map[string]bool{}
			for _, r := range p.Rules {
				rules[r.Syscall] = true
			}
			for name, nr := range a.syscalls() {
				switch {
				case rules[name]:
				case allow[name]:
					f.expect(t, wantAllow, name, 1, 2, 3)
				default:
					f.expect(t, wantEPERM, name, 1, 2, 3)
				}
				delete(allow, name)
				_ = nr
			}
			if len(allow) != 0 {
				t.Errorf("allowed names missing from the table: %v", allow)
			}
			for nr := int32(0); nr < 1024; nr++ {
				if a.nameOf(int(nr)) == "" {
					if got := f.nr(t, nr); got != wantEPERM {
						t.Errorf("unassigned nr %d: %s, want EPERM", nr, actionName(got))
					}
				}
			}
			for _, nr := range []int32{0x3fffffff, -1} {
				if got := f.nr(t, nr); got != wantEPERM {
					t.Errorf("nr %#x: %s, want EPERM", uint32(nr), actionName(got))
				}
			}

			// Foreign ABIs.
			foreign := uint32(auditArchI386)
			if goarch == "arm64" {
				foreign = auditArchARM
			}
			readNr := int32(a.syscalls()["read"])
			if got := f.runData(t, seccompData{nr: readNr, arch: foreign}); got != wantKill {
				t.Errorf("read on foreign arch %#x: %s, want KILL_PROCESS", foreign, actionName(got))
			}
			if got := f.runData(t, seccompData{nr: readNr, arch: auditArchAArch64 ^ auditArchX86_64 ^ a.auditArch}); got != wantKill {
				t.Errorf("read on the other 64-bit arch: %s, want KILL_PROCESS", actionName(got))
			}
			if goarch == "amd64" {
				for _, nr := range []int32{x32SyscallBit, x32SyscallBit | readNr, x32SyscallBit | 0x3fffffff, -2} {
					if got := f.nr(t, nr); got != wantKill {
						t.Errorf("x32 nr %#x: %s, want KILL_PROCESS", uint32(nr), actionName(got))
					}
				}
				f.expect(t, wantAllow, "read") // control: same nr without the x32 bit
			}

			// clone: namespace flags are denied, thread/fork flags allowed.
			f.expect(t, wantAllow, "clone", cloneThreadFlags)
			f.expect(t, wantAllow, "clone", sigchld)
			f.expect(t, wantAllow, "clone", cloneVfork|clonePidfd|sigchld)
			f.expect(t, wantAllow, "clone", garbageHigh|sigchld) // kernel ignores the high half
			for _, ns := range []uint64{cloneNewNS, cloneNewUTS, cloneNewIPC, cloneNewUser, cloneNewPID, cloneNewNet, cloneNewCgroup} {
				f.expect(t, wantEPERM, "clone", ns|sigchld)
				f.expect(t, wantEPERM, "clone", ns|cloneThreadFlags|garbageHigh)
			}
			f.expect(t, wantENOSYS, "clone3", 0, 0)
			f.expect(t, wantENOSYS, "clone3", 0xdeadbeef, 88)

			// socket.
			f.expect(t, wantAllow, "socket", afInet, sockStream, 0)
			f.expect(t, wantAllow, "socket", afInet, sockStream|sockNonblk|sockCloexec, 6)
			f.expect(t, wantAllow, "socket", afInet6, sockDgram, 0)
			f.expect(t, wantAllow, "socket", afUnix, sockStream, 0)
			f.expect(t, wantAllow, "socket", afInet, sockDgram, 1) // ICMP ping socket
			f.expect(t, wantEPERM, "socket", afPacket, sockRaw, 0x300)
			f.expect(t, wantEPERM, "socket", afPacket, sockDgram, 0)
			f.expect(t, wantEPERM, "socket", afInet, sockRaw, 1)
			f.expect(t, wantEPERM, "socket", afInet, sockRaw|sockCloexec|sockNonblk, 255)
			f.expect(t, wantEPERM, "socket", afInet6, sockRaw, 58)
			f.expect(t, wantEPERM, "socket", afInet, sockPacket, 0)
			f.expect(t, wantEPERM, "socket", afInet6, sockPacket|garbageHigh, 0)
			f.expect(t, wantAllow, "socket", afNetlink, sockRaw, netlinkRoute)
			f.expect(t, wantAllow, "socket", afNetlink, sockDgram|sockCloexec, netlinkRoute)
			f.expect(t, wantEPERM, "socket", afNetlink, sockRaw, netlinkAudit)
			f.expect(t, wantEPERM, "socket", afNetlink, sockRaw, netlinkUevent)
			for _, fam := range []uint64{0, afKey, afBluetooth, afAlg, afVsock, 44, 0xffff} {
				f.expect(t, wantEPERM, "socket", fam, sockStream, 0)
			}
			f.expect(t, wantEPERM, "socket", afPacket|garbageHigh, sockRaw, 0)
			f.expect(t, wantAllow, "socketpair", afUnix, sockStream, 0)
			f.expect(t, wantEPERM, "socketpair", afInet, sockStream, 0)
			f.expect(t, wantEPERM, "socketpair", afNetlink, sockRaw, 0)

			// ioctl: the request is an unsigned int; garbage in the high half
			// must not dodge the rule.
			f.expect(t, wantAllow, "ioctl", 0, tcgets)
			f.expect(t, wantAllow, "ioctl", 0, tcgets|garbageHigh)
			f.expect(t, wantAllow, "ioctl", 0, tiocsti+1)
			f.expect(t, wantEPERM, "ioctl", 0, tiocsti)
			f.expect(t, wantEPERM, "ioctl", 0, tiocsti|garbageHigh)
			f.expect(t, wantEPERM, "ioctl", 5, tioclinux|0xffffffff00000000)
			f.expect(t, wantEPERM, "ioctl", 5, tioclinux)

			// personality: the query and the plain personas only, never
			// a flag (alone or on an allowed persona).
			f.expect(t, wantAllow, "personality", perQuery)
			f.expect(t, wantAllow, "personality", 0xffffffffffffffff) // truncated to the query
			for _, v := range []uint64{perLinux, perLinux32, perUname26, perLinux32Un26} {
				f.expect(t, wantAllow, "personality", v)
				f.expect(t, wantAllow, "personality", v|garbageHigh) // the kernel truncates to 32 bits
				f.expect(t, wantEPERM, "personality", v|addrNoRandom)
				f.expect(t, wantEPERM, "personality", v|readImplExec)
			}
			f.expect(t, wantEPERM, "personality", addrNoRandom)
			f.expect(t, wantEPERM, "personality", readImplExec)
			f.expect(t, wantEPERM, "personality", 0x0800000) // ADDR_LIMIT_32BIT
			f.expect(t, wantEPERM, "personality", 0xfffffffe)

			// Set-id bits: refused in every mode argument, next to the
			// same call without them. Open without O_CREAT ignores mode.
			f.expect(t, wantAllow, "fchmodat", 0, 0, 0o755)
			f.expect(t, wantEPERM, "fchmodat", 0, 0, 0o4755)
			f.expect(t, wantEPERM, "fchmodat", 0, 0, 0o2755)
			f.expect(t, wantAllow, "fchmod", 3, 0o644)
			f.expect(t, wantEPERM, "fchmod", 3, 0o6755)
			f.expect(t, wantAllow, "mknodat", 0, 0, 0o100644)
			f.expect(t, wantEPERM, "mknodat", 0, 0, 0o104755)
			f.expect(t, wantAllow, "openat", 0, 0, oCreat, 0o755)
			f.expect(t, wantEPERM, "openat", 0, 0, oCreat|1, 0o4755)
			f.expect(t, wantEPERM, "openat", 0, 0, oTmpfile|0o200000|2, 0o2755)
			f.expect(t, wantAllow, "openat", 0, 0, 0, 0o4755) // no O_CREAT: mode unused
			f.expect(t, wantENOSYS, "openat2", 0, 0, 0, 24)
		})
	}
}

func TestDeny(t *testing.T) {
	a := archs(t)["amd64"]
	p := defaultFor("amd64")
	if err := p.Deny("mkdir"); err != nil {
		t.Fatal(err)
	}
	f := compileFilter(t, p, a)
	f.expect(t, wantEPERM, "mkdir")
	f.expect(t, wantAllow, "mkdirat")
	f.expect(t, wantAllow, "read")

	if err := p.Deny("mkdirat", "mkdir", "read"); err != nil {
		t.Fatal(err)
	}
	f = compileFilter(t, p, a)
	f.expect(t, wantEPERM, "mkdir")
	f.expect(t, wantEPERM, "mkdirat")
	f.expect(t, wantEPERM, "read")
	f.expect(t, wantAllow, "write")
	if n := strings.Count(strings.Join(p.Denied, " "), "mkdir "); n != 1 {
		t.Errorf("mkdir recorded %d times in Denied: %v", n, p.Denied)
	}

	// Rule syscalls: denying removes the rule, so even the allowed
	// argument values fail, and clone3 turns from ENOSYS to EPERM.
	if err := p.Deny("socket", "ioctl", "clone3", "personality"); err != nil {
		t.Fatal(err)
	}
	f = compileFilter(t, p, a)
	f.expect(t, wantEPERM, "socket", afInet, sockStream, 0)
	f.expect(t, wantAllow, "socketpair", afUnix, sockStream, 0)
	f.expect(t, wantEPERM, "ioctl", 0, tcgets)
	f.expect(t, wantEPERM, "clone3")
	f.expect(t, wantEPERM, "personality", perQuery)
	f.expect(t, wantAllow, "clone", cloneThreadFlags)

	// Denying a forbidden (already denied) syscall is fine.
	if err := p.Deny("ptrace", "ptrace"); err != nil {
		t.Fatal(err)
	}
	if n := slices.Index(p.Denied, "ptrace"); n < 0 || slices.Contains(p.Denied[n+1:], "ptrace") {
		t.Errorf("ptrace not recorded exactly once: %v", p.Denied)
	}
	// A syscall that only exists on another supported arch is accepted.
	p2 := defaultFor("arm64")
	if err := p2.Deny("open", "iopl"); err != nil {
		t.Fatalf("Deny(open, iopl) on arm64: %v", err)
	}
	compileFilter(t, p2, archs(t)["arm64"])
}

func TestDenyUnknown(t *testing.T) {
	p := Default()
	before, _ := json.Marshal(p)
	err := p.Deny("read", "foo", "write")
	if err == nil || err.Error() != `seccomp: unknown syscall "foo"` {
		t.Fatalf("Deny(foo) = %v", err)
	}
	after, _ := json.Marshal(p)
	if string(before) != string(after) {
		t.Error("a failed Deny modified the profile")
	}
	for _, n := range []string{"", "READ", "read ", "sys_read", "vm86"} {
		if err := p.Deny(n); err == nil {
			t.Errorf("Deny(%q) succeeded", n)
		}
	}
	if err := p.Deny("read"); err != nil { // control
		t.Fatal(err)
	}
}

func TestDefaultIsFresh(t *testing.T) {
	p := Default()
	if err := p.Deny("read"); err != nil {
		t.Fatal(err)
	}
	p.Rules[0].Cases = nil
	q := Default()
	if !slices.Contains(q.Allow, "read") || slices.Contains(q.Denied, "read") {
		t.Error("Deny on one Default() changed another")
	}
	if len(q.Rules[0].Cases) == 0 {
		t.Error("rules are shared between Default() copies")
	}
}

func TestJSONRoundTrip(t *testing.T) {
	for goarch, a := range archs(t) {
		p := defaultFor(goarch)
		if err := p.Deny("mkdir", "socket"); err != nil {
			t.Fatal(err)
		}
		b, err := json.MarshalIndent(p, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		for _, key := range []string{`"allow"`, `"rules"`, `"denied"`, `"syscall": "clone"`, `"low32": true`, `"note": "TIOCSTI"`} {
			if !strings.Contains(string(b), key) {
				t.Errorf("JSON lacks %s", key)
			}
		}
		var q Profile
		if err := json.Unmarshal(b, &q); err != nil {
			t.Fatal(err)
		}
		want, err := p.compileFor(a)
		if err != nil {
			t.Fatal(err)
		}
		got, err := q.compileFor(a)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: profile changed through JSON", goarch)
		}
	}
}

// TestCompileErrors: Compile refuses, never drops.
func TestCompileErrors(t *testing.T) {
	a := archs(t)["amd64"]
	rule := func(c Cond) Rule {
		return Rule{Syscall: "ioctl", Cases: []Case{{When: []Cond{c}, Action: ActionEPERM}}, Else: ActionAllow}
	}
	cases := []struct {
		name string
		p    Profile
		arch string
		want string
	}{
		{"unknown", Profile{Allow: []string{"read", "foo"}}, "amd64", `seccomp: unknown syscall "foo"`},
		{"forbidden", Profile{Allow: []string{"ptrace"}}, "amd64", `seccomp: syscall "ptrace" is forbidden and cannot be allowed`},
		{"forbidden rule", Profile{Rules: []Rule{{Syscall: "unshare", Cases: []Case{{When: []Cond{{Arg: 0, Value: 0}}, Action: ActionAllow}}, Else: ActionEPERM}}}, "amd64", `seccomp: syscall "unshare" is forbidden and cannot be allowed`},
		{"twice", Profile{Allow: []string{"read", "read"}}, "amd64", `seccomp: syscall "read" listed twice (allow and allow)`},
		{"allow and rule", Profile{Allow: []string{"ioctl"}, Rules: []Rule{{Syscall: "ioctl", Else: ActionAllow}}}, "amd64", `seccomp: syscall "ioctl" listed twice (allow and rules)`},
		{"allowed and denied", Profile{Allow: []string{"read"}, Denied: []string{"read"}}, "amd64", `seccomp: syscall "read" is both denied and in allow`},
		{"denied unknown", Profile{Denied: []string{"foo"}}, "amd64", `seccomp: unknown syscall "foo"`},
		{"other arch", Profile{Allow: []string{"open"}}, "arm64", `seccomp: syscall "open" does not exist on aarch64`},
		{"bad action", Profile{Rules: []Rule{{Syscall: "ioctl", Else: "maybe"}}}, "amd64", `seccomp: rule for "ioctl": else: seccomp: unknown action "maybe"`},
		{"empty case", Profile{Rules: []Rule{{Syscall: "ioctl", Cases: []Case{{Action: ActionAllow}}, Else: ActionEPERM}}}, "amd64", `seccomp: rule for "ioctl": case 0 has no conditions (use else)`},
		{"arg range", Profile{Rules: []Rule{rule(Cond{Arg: 6})}}, "amd64", `seccomp: rule for "ioctl": case 0: argument index 6 out of range 0..5`},
		{"impossible", Profile{Rules: []Rule{rule(Cond{Arg: 1, Mask: 0xff, Value: 0x100})}}, "amd64", `seccomp: rule for "ioctl": case 0: args[1] & 0xff can never equal 0x100`},
		{"low32 wide", Profile{Rules: []Rule{rule(Cond{Arg: 1, Value: 1 << 32, Low32: true})}}, "amd64", `seccomp: rule for "ioctl": case 0: 32-bit condition on args[1] with a 64-bit mask or value`},
	}
	for _, c := range cases {
		arch := archs(t)[c.arch]
		_, err := c.p.compileFor(arch)
		if err == nil || err.Error() != c.want {
			t.Errorf("%s: err = %v, want %s", c.name, err, c.want)
		}
	}
	// Controls: the same shapes, valid, compile.
	for _, p := range []Profile{
		{Allow: []string{"read"}, Denied: []string{"ptrace"}},
		{Rules: []Rule{rule(Cond{Arg: 1, Mask: 0xff, Value: 0x10})}},
		{Rules: []Rule{rule(Cond{Arg: 5, Value: 1 << 40})}},
	} {
		if _, err := p.compileFor(a); err != nil {
			t.Errorf("%+v: %v", p, err)
		}
	}
	var nilp *Profile
	if _, err := nilp.Compile(); err == nil {
		t.Error("nil profile compiled")
	}
}

// TestTooLong: a profile that cannot fit is an error, not a truncation.
func TestTooLong(t *testing.T) {
	a := archs(t)["amd64"]
	mk := func(n int) Profile {
		r := Rule{Syscall: "ioctl", Else: ActionAllow}
		for i := 0; i < n; i++ {
			r.Cases = append(r.Cases, Case{When: []Cond{{Arg: 1, Value: uint64(i), Low32: true}}, Action: ActionEPERM})
		}
		return Profile{Rules: []Rule{r}}
	}
	if _, err := (&Profile{Rules: mk(1000).Rules}).compileFor(a); err != nil {
		t.Fatalf("1000 cases: %v", err) // control
	}
	p := mk(2100)
	_, err := p.compileFor(a)
	if err == nil || !strings.Contains(err.Error(), "the kernel limit is 4096") {
		t.Fatalf("2100 cases: %v", err)
	}
}

// TestLongJumps forces subtrees longer than a conditional jump can skip.
func TestLongJumps(t *testing.T) {
	a := archs(t)["amd64"]
	forb := map[string]bool{}
	for _, n := range forbidden {
		forb[n] = true
	}
	p := &Profile{}
	for name, nr := range a.syscalls() {
		if nr%2 == 0 && !forb[name] {
			p.Allow = append(p.Allow, name)
		}
	}
	p.Rules = defaultRules()
	p.Allow = slices.DeleteFunc(p.Allow, func(n string) bool {
		return slices.ContainsFunc(p.Rules, func(r Rule) bool { return r.Syscall == n })
	})
	f := compileFilter(t, p, a)
	if !slices.ContainsFunc(f.prog, func(in SockFilter) bool { return in.Code == opJa }) {
		t.Fatalf("no JA in a %d-instruction program; the test does not exercise long jumps", len(f.prog))
	}
	for _, n := range p.Allow {
		f.expect(t, wantAllow, n)
	}
	for name, nr := range a.syscalls() {
		if nr%2 == 1 && !slices.ContainsFunc(p.Rules, func(r Rule) bool { return r.Syscall == name }) {
			f.expect(t, wantEPERM, name)
		}
	}
	f.expect(t, wantEPERM, "ioctl", 0, tiocsti|garbageHigh)
	f.expect(t, wantAllow, "ioctl", 0, tcgets)
}

func TestDisassemble(t *testing.T) {
	prog, err := defaultFor("amd64").compileFor(archs(t)["amd64"])
	if err != nil {
		t.Fatal(err)
	}
	out := Disassemble(prog)
	if n := strings.Count(out, "\n"); n != len(prog) {
		t.Errorf("%d lines for %d instructions", n, len(prog))
	}
	for _, want := range []string{
		"0000: ld   [4]                             ; arch\n",
		"; AUDIT_ARCH_X86_64\n",
		"ret  #0x80000000                     ; KILL_PROCESS\n",
		"; ERRNO(ENOSYS)\n",
		"; args[1].lo\n",
		"jset #0x7e020000",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("disassembly lacks %q", want)
		}
	}
	odd := Disassemble([]SockFilter{{Code: 0x07, K: 0}, {Code: opJa, K: 0}, {Code: opRetK, K: retErrno | 13}})
	want := "0000: op=0x07 jt=0 jf=0 k=0x0\n0001: ja   2\n0002: ret  #0x5000d                        ; ERRNO(13)\n"
	if odd != want {
		t.Errorf("got\n%s\nwant\n%s", odd, want)
	}
}
