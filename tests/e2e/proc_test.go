//go:build linux

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// procStatus returns the fields of /proc/<pid>/task/<tid>/status.
func procStatus(path string) (map[string]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	m := map[string]string{}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok {
			m[k] = strings.TrimSpace(v)
		}
	}
	return m, nil
}

// P1: seen from the host, every thread of every sandbox process has no
// capabilities, no_new_privs and a seccomp filter.
func TestP1PrivilegeState(t *testing.T) {
	needRoot(t)
	b := start(t, opts{}, "run", "-v", "--", "/usr/bin/python3", "-c", `
import threading, time, os
def w(): time.sleep(60)
for _ in range(2): threading.Thread(target=w, daemon=True).start()
print("ready", os.getpid(), flush=True)
time.sleep(60)
`)
	_, paths := b.cgroupPaths(t)
	b.stdout.waitFor(t, regexp.MustCompile(`^ready`), 30*time.Second)
	cg := pidsCgroup(t, paths)
	var pids []int
	if !poll(10*time.Second, func() bool { pids = cgroupPids(t, cg); return len(pids) >= 2 }) {
		t.Fatalf("want >= 2 processes in %s, got %v", cg, pids)
	}
	sawInit, sawUser, userThreads := false, false, 0
	for _, pid := range pids {
		exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		// The init runs the program embedded in airlock, from root's copy
		// in /run/airlock/init (as root) or a memfd.
		isInit := exe == airlockBin || strings.HasPrefix(exe, "/memfd:airlock-init ") || strings.HasPrefix(exe, "/run/airlock/init/airlock-init-")
		tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/status", pid))
		if len(tasks) == 0 {
			t.Errorf("pid %d: no tasks", pid)
		}
		for _, task := range tasks {
			st, err := procStatus(task)
			if err != nil {
				continue // exited meanwhile
			}
			want := map[string]string{"CapEff": "0000000000000000", "CapPrm": "0000000000000000", "CapAmb": "0000000000000000", "NoNewPrivs": "1", "Seccomp": "2"}
			if !isInit {
				want["CapBnd"] = "0000000000000000"
				want["CapInh"] = "0000000000000000"
				userThreads++
			}
			for k, v := range want {
				if st[k] != v {
					t.Errorf("%s (%s, exe %s): %s = %q, want %q", task, st["Name"], exe, k, st[k], v)
				}
			}
		}
		if isInit {
			sawInit = true
		} else {
			sawUser = true
		}
	}
	if !sawInit || !sawUser {
		t.Errorf("control: want the init and a user process in the cgroup, got init=%v user=%v (pids %v)", sawInit, sawUser, pids)
	}
	if userThreads < 3 {
		t.Errorf("control: want >= 3 threads of the python process, checked %d", userThreads)
	}
}

// personality(2): only the plain personas the container runtimes' default
// profiles allow, and the query. The flags that weaken a process's own
// memory protections (READ_IMPLIES_EXEC, ADDR_NO_RANDOMIZE), alone or on an
// allowed persona, fail with EPERM. Controls: each allowed persona really
// takes effect (the query reads it back), and without the seccomp layer
// the denied values are accepted by the kernel, so the denials are the
// filter's.
func TestPersonality(t *testing.T) {
	script := pyPrelude + `
_l.personality.restype = C.c_int
_l.personality.argtypes = [C.c_ulong]
def pers(name, v):
    C.set_errno(0)
    r = _l.personality(v)
    if r == -1:
        out(name, E.errorcode.get(C.get_errno(), "?"))
        return
    now = _l.personality(0xffffffff)
    _l.personality(0)
    out(name, "OK" if now == v else "SET_%#x" % now)
out("query", "OK" if _l.personality(0xffffffff) == 0 else "FAIL")
pers("linux", 0x0)
pers("linux32", 0x8)
pers("uname26", 0x20000)
pers("linux32_uname26", 0x20008)
pers("read_implies_exec", 0x0400000)
pers("addr_no_randomize", 0x0040000)
pers("linux32_addr_no_randomize", 0x0040008)
pers("uname26_read_implies_exec", 0x0420000)
pers("addr_limit_32bit", 0x0800000)
`
	denied := []string{"read_implies_exec", "addr_no_randomize", "linux32_addr_no_randomize", "uname26_read_implies_exec", "addr_limit_32bit"}
	r := run(t, opts{}, nil, "/usr/bin/python3", "-c", script)
	mustOK(t, r, "personality probe")
	m := kv(r.stdout)
	for _, k := range []string{"query", "linux", "linux32", "uname26", "linux32_uname26"} {
		expect(t, m, k, "OK")
	}
	for _, k := range denied {
		expect(t, m, k, "EPERM")
	}

	// Control: the same calls without the filter reach the kernel, which
	// accepts them.
	r = run(t, opts{}, []string{"--insecure-no-seccomp"}, "/usr/bin/python3", "-c", script)
	mustOK(t, r, "personality probe without seccomp")
	m = kv(r.stdout)
	for _, k := range denied {
		expect(t, m, k, "OK")
	}
}

// P2, P4, P5, P7, P10..P13: the kernel attack surface is closed.
func TestSeccompDenials(t *testing.T) {
	script := pyPrelude + `
import subprocess
def rc(*a): return subprocess.run(list(a), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode
out("unshare_cmd", rc("unshare", "-Urm", "true"))
out("unshare_cgroup_cmd", rc("unshare", "-UrmC", "sh", "-c", "mount -t cgroup -o rdma x /mnt"))
out("unshare_user", sc(272, 0x10000000)[1])
out("unshare_ns", sc(272, 0x00020000)[1])
out("clone_newuser", sc(56, 0x10000000 | 17, 0, 0, 0, 0)[1])
out("clone3", sc(435, 0, 0)[1])
out("setns", sc(308, -1, 0)[1])
out("ptrace_attach", sc(101, 16, 1, 0, 0)[1])
out("ptrace_traceme", sc(101, 0, 0, 0, 0)[1])
out("process_vm_readv", sc(310, 1, 0, 0, 0, 0, 0)[1])
out("process_vm_writev", sc(311, 1, 0, 0, 0, 0, 0)[1])
out("proc1_mem", tryerr(lambda: open("/proc/1/mem", "rb").read(1)))
out("bpf", sc(321, 0, 0, 0)[1])
out("userfaultfd", sc(323, 0)[1])
out("perf_event_open", sc(298, 0, 0, -1, -1, 0)[1])
out("keyctl", sc(250, 0, -3, 0)[1])
out("add_key", sc(248, 0, 0, 0, 0, 0)[1])
out("request_key", sc(249, 0, 0, 0, 0)[1])
out("io_uring_setup", sc(425, 1, 0)[1])
out("finit_module", sc(313, -1, 0, 0)[1])
out("init_module", sc(175, 0, 0, 0)[1])
out("delete_module", sc(176, 0, 0)[1])
out("kexec_load", sc(246, 0, 0, 0, 0)[1])
out("kexec_file_load", sc(320, -1, -1, 0, 0, 0)[1])
out("reboot", sc(169, 0, 0, 0, 0)[1])
out("swapon", sc(167, 0, 0)[1])
out("acct", sc(163, 0)[1])
out("settimeofday", sc(164, 0, 0)[1])
out("clock_settime", sc(227, 0, 0)[1])
out("adjtimex", sc(159, 0)[1])
out("iopl", sc(172, 3)[1])
out("ioperm", sc(173, 0, 1, 1)[1])
out("personality", sc(135, 0x0040000)[1])
out("quotactl", sc(179, 0, 0, 0, 0)[1])
out("pidfd_getfd", sc(438, -1, 0, 0)[1])
out("open_by_handle_at", sc(304, -1, 0, 0)[1])
out("lookup_dcookie", sc(212, 0, 0, 0)[1])
out("vhangup", sc(153)[1])
out("fanotify_init", sc(300, 0, 0)[1])
# Controls: allowed syscalls with bad arguments reach the kernel.
out("ctl_read", sc(0, -1, 0, 0)[1])
out("ctl_write", sc(1, -1, 0, 0)[1])
out("ctl_fstat", sc(5, 0, 0)[1])
out("ctl_kill", sc(62, 1, 0)[1])
out("ctl_getppid", "OK" if sc(110)[0] >= 0 else "FAIL")
`
	r := py(t, opts{}, nil, script)
	mustOK(t, r, "probe")
	m := kv(r.stdout)
	for _, k := range []string{"unshare_cmd", "unshare_cgroup_cmd"} {
		if v := m[k]; v == "0" || v == "" {
			t.Errorf("%s: exit %q, want a failure", k, v)
		}
	}
	for _, k := range []string{"unshare_user", "unshare_ns", "clone_newuser", "setns", "ptrace_attach", "ptrace_traceme",
		"process_vm_readv", "process_vm_writev", "bpf", "userfaultfd", "perf_event_open", "keyctl", "add_key",
		"request_key", "finit_module", "init_module", "delete_module", "kexec_load", "kexec_file_load", "reboot",
		"swapon", "acct", "settimeofday", "clock_settime", "iopl", "ioperm", "quotactl", "pidfd_getfd",
		"open_by_handle_at", "lookup_dcookie", "vhangup", "fanotify_init"} {
		expect(t, m, k, "EPERM")
	}
	expect(t, m, "clone3", "EPERM", "ENOSYS", "EFAULT", "EINVAL") // clone3 with a NULL args struct
	expect(t, m, "io_uring_setup", "EPERM", "ENOSYS")
	expect(t, m, "adjtimex", "EPERM", "EFAULT")
	expect(t, m, "personality", "EPERM")
	expect(t, m, "proc1_mem", "EACCES", "EPERM")
	expect(t, m, "ctl_read", "EBADF")
	expect(t, m, "ctl_write", "EBADF")
	expect(t, m, "ctl_fstat", "EFAULT")
	expect(t, m, "ctl_kill", "OK") // signal 0 to our own init: allowed, it exists
	expect(t, m, "ctl_getppid", "OK")
	// The x32 ABI is blocked: an error, or the process is killed (SIGSYS).
	r = py(t, opts{}, nil, `out("x32_getpid", sc(0x40000000 | 39)[1])`)
	if m := kv(r.stdout); r.code != 128+31 && m["x32_getpid"] != "EPERM" && m["x32_getpid"] != "ENOSYS" {
		t.Errorf("x32 getpid: want EPERM, ENOSYS or SIGSYS\n%s", r)
	}
	// --deny-syscall adds to the profile; the same call is allowed without it.
	r = py(t, opts{}, []string{"--deny-syscall", "getppid"}, `out("getppid", sc(110)[1])`)
	expect(t, kv(r.stdout), "getppid", "EPERM")
	r = py(t, opts{}, nil, `out("getppid", sc(110)[1])`)
	expect(t, kv(r.stdout), "getppid", "OK")
}

// P5: the sandbox cannot touch its own cgroup's limits; the host sees them
// unchanged.
func TestP5OwnCgroup(t *testing.T) {
	needRoot(t)
	b := start(t, opts{}, "run", "-v", "--memory", "96MiB", "--pids", "50", "--", "/bin/sh", "-c", `
echo max > /sys/fs/cgroup/memory.max 2>/dev/null && echo v2write=OK || echo v2write=DENIED
echo -1 > /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null && echo v1write=OK || echo v1write=DENIED
echo $$ > /sys/fs/cgroup/cgroup.procs 2>/dev/null && echo move=OK || echo move=DENIED
mkdir -p /tmp/cg && mount -t cgroup -o memory x /tmp/cg 2>/dev/null && echo mountv1=OK || echo mountv1=DENIED
mount -t cgroup2 x /tmp/cg 2>/dev/null && echo mountv2=OK || echo mountv2=DENIED
echo max > /tmp/memory.max && echo tmp=OK
cat /proc/self/cgroup | sed 's/^/cg:/'
echo ready; sleep 30`)
	_, paths := b.cgroupPaths(t)
	b.stdout.waitFor(t, regexp.MustCompile(`^ready$`), 30*time.Second)
	m := kv(b.stdout.String())
	for _, k := range []string{"v2write", "v1write", "move", "mountv1", "mountv2"} {
		expect(t, m, k, "DENIED")
	}
	expect(t, m, "tmp", "OK")
	for _, l := range strings.Split(b.stdout.String(), "\n") {
		if strings.HasPrefix(l, "cg:") && !strings.HasSuffix(l, ":/") {
			t.Errorf("sandbox sees a cgroup path beyond its namespace root: %s", l)
		}
	}
	for _, p := range paths {
		check := func(file, want string) {
			got, err := os.ReadFile(filepath.Join(p, file))
			if err == nil && strings.TrimSpace(string(got)) != want {
				t.Errorf("%s/%s = %q, want %q", p, file, strings.TrimSpace(string(got)), want)
			}
		}
		check("memory.limit_in_bytes", fmt.Sprint(96<<20))
		check("memory.max", fmt.Sprint(96<<20))
		if got, err := os.ReadFile(filepath.Join(p, "pids.max")); err == nil {
			var max int
			fmt.Sscan(string(got), &max)
			// The user's 50 plus the agent's threads and spare (see R1).
			if max < 50 || max > 50+agentThreadsMax+agentSpare {
				t.Errorf("%s/pids.max = %d, want 50 plus the agent's share", p, max)
			}
		}
	}
}

// P6, C2: the sandbox sees only its own processes and arguments.
func TestP6HostPIDs(t *testing.T) {
	needRoot(t)
	decoy, arg := hostDecoy(t)
	mark := "c2mark" + randHex(6)
	script := `
sleep 999.111 &
n=0; for p in /proc/[0-9]*; do n=$((n+1)); [ "${p#/proc/}" = $$ ] && continue; cat $p/cmdline 2>/dev/null | tr '\0' ' '; echo; done > /tmp/all
echo count=$n
echo decoy=$(grep -c "$DECOY" /tmp/all)
echo mark=$(grep -c "$MARK" /tmp/all)
echo own=$(grep -cx "sleep 999.111 " /tmp/all)
echo host=$(grep -c "go-build\|e2e.test\|/usr/lib/go\|sshd\|systemd\|airlock run" /tmp/all)
echo init=$(tr '\0' ' ' < /proc/1/cmdline)
ps auxww > /tmp/ps; echo ps=$(grep -c "$DECOY" /tmp/ps); echo psown=$(grep -c " sleep 999.111$" /tmp/ps)
test -d /proc/$DECOYPID && echo hostpid=VISIBLE || echo hostpid=ABSENT
kill -0 $DECOYPID 2>/dev/null && echo kill=OK || echo kill=DENIED
kill $!
`
	r := run(t, opts{}, []string{"--env", "MARK=" + mark, "--env", "DECOY=" + arg, "--env", fmt.Sprint("DECOYPID=", decoy.Process.Pid)}, "/bin/sh", "-c", script)
	m := kv(r.stdout)
	expect(t, m, "decoy", "0")
	expect(t, m, "mark", "0")
	expect(t, m, "host", "0")
	expect(t, m, "ps", "0")
	expect(t, m, "psown", "1")
	expect(t, m, "own", "1") // control: the sandbox's own processes are listed
	if !strings.Contains(m["init"], "sandbox-init") {
		t.Errorf("/proc/1/cmdline = %q, want the sandbox's init", m["init"])
	}
	var n int
	fmt.Sscan(m["count"], &n)
	if n < 3 || n > 10 {
		t.Errorf("sandbox sees %d processes, want only its own few\n%s", n, r)
	}
	if m["hostpid"] == "VISIBLE" && m["kill"] == "OK" {
		// The pid number may exist inside by chance; it must not be the decoy.
		t.Errorf("host pid %d is reachable from the sandbox", decoy.Process.Pid)
	}
	if !alive(decoy.Process.Pid) {
		t.Errorf("host decoy died")
	}
}

// P9: only stdio reaches the sandbox; no descriptor of the caller or of
// airlock itself, and the working directory is inside the sandbox.
func TestP9LeakedFDs(t *testing.T) {
	needRoot(t)
	secret := randHex(12)
	dir := t.TempDir()
	secretFile := filepath.Join(dir, "secret")
	os.WriteFile(secretFile, []byte(secret), 0o600)
	f1, err := os.Open(secretFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f1.Close()
	f2, err := os.Open("/etc")
	if err != nil {
		t.Fatal(err)
	}
	defer f2.Close()
	// The caller leaks a host directory and a file (fds 3, 4, 5) into airlock.
	script := pyPrelude + `
fds = sorted(int(x) for x in os.listdir("/proc/self/fd"))
for fd in fds:
    try:
        out("fd%d" % fd, os.readlink("/proc/self/fd/%d" % fd))
    except OSError:
        pass
out("fds", ",".join(map(str, fds)))
out("cwd", os.getcwd())
out("cwdlink", os.readlink("/proc/self/cwd"))
out("root", os.readlink("/proc/self/root"))
def initfds():
    for n in os.listdir("/proc/1/fd"):
        os.readlink("/proc/1/fd/" + n)
        open("/proc/1/fd/" + n, "rb")
out("init_fds", tryerr(initfds))
data = b""
for fd in fds:
    if fd > 2:
        try:
            os.lseek(fd, 0, 0)
            data += os.read(fd, 100)
        except OSError:
            pass
out("leak", "` + secret + `" in data.decode(errors="replace"))
`
	r := py(t, opts{extra: []*os.File{f2, f1, f1}}, nil, script)
	mustOK(t, r, "probe")
	m := kv(r.stdout)
	// os.listdir holds one descriptor of its own while it lists.
	fds := strings.Split(m["fds"], ",")
	if len(fds) > 4 || m["fds"] == "" {
		t.Errorf("sandboxed process holds descriptors %s, want only 0,1,2 (+ the one listing them):\n%s", m["fds"], r.stdout)
	}
	expect(t, m, "leak", "False")
	expect(t, m, "init_fds", "EACCES", "EPERM")
	expect(t, m, "cwd", "/workspace")
	expect(t, m, "cwdlink", "/workspace")
	expect(t, m, "root", "/")
	// Control: stdio is there.
	for _, fd := range []string{"fd0", "fd1", "fd2"} {
		if m[fd] == "" {
			t.Errorf("control: %s missing", fd)
		}
	}
}

// P16: kill -9 -1 kills only the sandbox's own processes.
func TestP16KillAll(t *testing.T) {
	needRoot(t)
	decoy, _ := hostDecoy(t)
	other := start(t, opts{}, "run", "--", "/bin/sh", "-c", "echo ready; sleep 3; echo survived")
	other.stdout.waitFor(t, regexp.MustCompile(`^ready$`), 30*time.Second)
	r := sh(t, opts{}, nil, `sleep 100 & p=$!; kill -9 -1; wait $p; echo child=$?; kill -9 1 2>/dev/null; echo alive=yes`)
	m := kv(r.stdout)
	if r.code != 0 {
		t.Errorf("killer sandbox: want exit 0\n%s", r)
	}
	expect(t, m, "child", "137") // control: the sandbox's own process was killed
	expect(t, m, "alive", "yes")
	if code := other.wait(t, 30*time.Second); code != 0 || !strings.Contains(other.stdout.String(), "survived") {
		t.Errorf("other sandbox: exit %d, stdout %q", code, other.stdout.String())
	}
	if !alive(decoy.Process.Pid) {
		t.Errorf("host process %d was killed from inside a sandbox", decoy.Process.Pid)
	}
}

// Signals from inside the sandbox to its init (PID 1) leave the sandbox
// running: Linux delivers none to a PID namespace's init that has no
// handler for it, and the native init has none for those a Go program
// dies of (agent.CatchSignalsAsInit). The control: the same signals to
// the command itself end it.
func TestSignalsToInitFromInside(t *testing.T) {
	r := sh(t, opts{}, nil, `for s in TERM INT HUP QUIT USR1 USR2 PIPE ALRM; do kill -$s 1 || echo failed=$s; done; sleep 0.3; echo alive=yes`)
	mustOK(t, r, "signals to PID 1")
	m := kv(r.stdout)
	expect(t, m, "alive", "yes")
	if v, ok := m["failed"]; ok {
		t.Errorf("kill -%s 1 failed inside the sandbox\n%s", v, r)
	}
	for _, s := range []struct {
		name string
		num  int
	}{{"TERM", 15}, {"INT", 2}, {"HUP", 1}, {"QUIT", 3}} {
		r := sh(t, opts{}, nil, `kill -`+s.name+` $$; echo survived`)
		if r.code != 128+s.num || strings.Contains(r.stdout, "survived") {
			t.Errorf("control: kill -%s to the command: want exit %d\n%s", s.name, 128+s.num, r)
		}
	}
}
