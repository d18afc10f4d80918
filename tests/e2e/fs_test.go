//go:build linux

package e2e

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// plantCanary writes secret into a file at path (creating its directory) and
// removes both at the end of the test.
func plantCanary(t *testing.T, path, secret string) {
	t.Helper()
	dir := filepath.Dir(path)
	if _, err := os.Stat(dir); err != nil {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
	}
	if err := os.WriteFile(path, []byte("CANARY_R="+secret+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(path) })
}

// F1: no host file outside the sandbox's view is readable.
func TestF1HostRead(t *testing.T) {
	needRoot(t)
	secret := randHex(16)
	wsSecret := randHex(16)
	tag := randHex(4)
	for _, p := range []string{
		"/var/tmp/airlock-e2e-" + tag + "/canary",
		"/root/.airlock-e2e-canary-" + tag,
		"/srv/airlock-e2e-" + tag + "/canary",
		"/opt/airlock-e2e-" + tag + "/canary",
		"/home/airlock-e2e-" + tag + "/canary",
		"/run/airlock-e2e-canary-" + tag,
		os.TempDir() + "/airlock-e2e-canary-" + tag,
	} {
		plantCanary(t, p, secret)
	}
	ws := t.TempDir()
	// A symlink planted in the workspace resolves inside the sandbox, never
	// to the host file it names.
	if err := os.Symlink("/var/tmp/airlock-e2e-"+tag+"/canary", filepath.Join(ws, "link")); err != nil {
		t.Fatal(err)
	}
	// Control: the same secret pattern is found where the sandbox may read.
	if err := os.WriteFile(filepath.Join(ws, "visible"), []byte(wsSecret+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The secrets are passed as arguments, visible only under /proc. /usr
	// is the host's own, bound read-only by design and holding no canary;
	// on this machine it is over 5 GB, which a cold page cache made a scan
	// of minutes, so it is left out of the search.
	r := run(t, opts{}, []string{"--workspace", ws}, "/bin/sh", "-c",
		`cat /workspace/link 2>/dev/null | sed 's/^/link:/'; grep -rlsE -e "$1" -e "$2" / --exclude-dir=proc --exclude-dir=sys --exclude-dir=usr; echo done`, "sh", secret, wsSecret)
	if !strings.Contains(r.stdout, "done") {
		t.Fatalf("grep did not finish\n%s", r)
	}
	var found []string
	for _, l := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		if strings.HasPrefix(l, "link:") {
			t.Errorf("the workspace symlink reached the host canary: %s", l)
			continue
		}
		if l != "done" && l != "" {
			found = append(found, l)
		}
	}
	if len(found) != 1 || found[0] != "/workspace/visible" {
		t.Fatalf("want only /workspace/visible to hold a secret, got %q\n%s", found, r)
	}
}

// F2: the host's files never change, whatever the sandbox writes.
func TestF2HostWrite(t *testing.T) {
	needRoot(t)
	tag := randHex(4)
	canary := "/usr/local/lib/airlock-e2e-canary-" + tag
	victim := "/usr/local/lib/airlock-e2e-victim-" + tag
	plantCanary(t, canary, randHex(8))
	plantCanary(t, victim, randHex(8))
	watched := []string{canary, victim, "/etc/passwd", "/etc/hostname", "/usr/bin/env", "/etc/shadow"}
	before := map[string]string{}
	for _, p := range watched {
		before[p] = hashFile(t, p)
	}
	created := []string{"/x-" + tag, "/etc/x-" + tag, "/usr/bin/x-" + tag, "/usr/local/lib/x-" + tag, "/root/x-" + tag}
	for _, p := range created {
		t.Cleanup(func() { os.Remove(p) })
	}
	ws := t.TempDir()
	script := `T=` + tag + `
touch /x-$T 2>/dev/null && echo root=OK || echo root=DENIED
touch /etc/x-$T /usr/bin/x-$T /usr/local/lib/x-$T /root/x-$T 2>/dev/null; echo cow=$?
echo pwned > ` + canary + ` 2>/dev/null; echo overwrite=$?
rm -f ` + victim + ` 2>/dev/null; echo rm=$?
echo pwned >> /etc/passwd 2>/dev/null; echo passwd=$?
echo ok > /tmp/f && echo tmp=OK
echo ok > /workspace/f && echo ws=OK
`
	r := sh(t, opts{}, []string{"--workspace", ws}, script)
	m := kv(r.stdout)
	expect(t, m, "root", "DENIED")
	expect(t, m, "tmp", "OK")
	expect(t, m, "ws", "OK")
	for _, p := range watched {
		if got := hashFile(t, p); got != before[p] {
			t.Errorf("host file %s changed (%s -> %s)", p, before[p], got)
		}
	}
	for _, p := range created {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("host file %s appeared", p)
		}
	}
	// Control: the workspace write reached the host.
	if b, err := os.ReadFile(filepath.Join(ws, "f")); err != nil || string(b) != "ok\n" {
		t.Errorf("control: workspace file on the host: %q, %v\n%s", b, err, r)
	}
}

// F3: masked procfs files and no sysfs.
func TestF3MaskedProc(t *testing.T) {
	script := pyPrelude + `
def first(p):
    try:
        with open(p, "rb") as f:
            return "DATA" if f.read(1) else "EMPTY"
    except OSError as e:
        return E.errorcode.get(e.errno)
for p in ["kcore", "keys", "key-users", "sched_debug", "kallsyms", "timer_list", "kmsg", "iomem", "ioports", "slabinfo", "vmallocinfo", "sysrq-trigger", "config.gz", "modules", "pagetypeinfo", "kpageflags", "kpagecount", "kpagecgroup"]:
    out(p, first("/proc/" + p))
for d in ["/sys/firmware", "/sys/kernel", "/proc/acpi", "/proc/scsi", "/proc/driver", "/proc/firmware"]:
    try:
        out(d, "ENTRIES" if os.listdir(d) else "EMPTY")
    except OSError as e:
        out(d, E.errorcode.get(e.errno))
out("control_status", first("/proc/self/status"))
out("control_version", first("/proc/version"))
`
	r := py(t, opts{}, nil, script)
	mustOK(t, r, "probe")
	m := kv(r.stdout)
	for _, p := range []string{"kcore", "keys", "key-users", "sched_debug", "kallsyms", "timer_list", "kmsg", "iomem", "ioports", "slabinfo", "vmallocinfo", "sysrq-trigger", "config.gz", "modules", "pagetypeinfo", "kpageflags", "kpagecount", "kpagecgroup"} {
		expect(t, m, p, "EMPTY", "EACCES", "ENOENT", "EPERM")
	}
	for _, d := range []string{"/sys/firmware", "/sys/kernel", "/proc/acpi", "/proc/scsi", "/proc/driver", "/proc/firmware"} {
		expect(t, m, d, "EMPTY", "EACCES", "ENOENT", "EPERM")
	}
	expect(t, m, "control_status", "DATA")
	expect(t, m, "control_version", "DATA")
}

// F4: /proc/sys and sysrq are read-only; the host's core_pattern is unchanged.
func TestF4ProcSys(t *testing.T) {
	need(t)
	before, err := os.ReadFile("/proc/sys/kernel/core_pattern")
	if err != nil {
		t.Fatal(err)
	}
	script := `
echo '|/tmp/x' > /proc/sys/kernel/core_pattern 2>/dev/null && echo core=OK || echo core=DENIED
echo h > /proc/sysrq-trigger 2>/dev/null && echo sysrq=OK || echo sysrq=DENIED
echo 1 > /proc/sys/kernel/sysrq 2>/dev/null && echo sysrqctl=OK || echo sysrqctl=DENIED
echo 1 > /proc/sys/vm/drop_caches 2>/dev/null && echo drop=OK || echo drop=DENIED
cat /proc/sys/kernel/core_pattern >/dev/null && echo read=OK
echo '|/tmp/x' > /tmp/core_pattern && echo tmp=OK
`
	r := sh(t, opts{}, nil, script)
	m := kv(r.stdout)
	expect(t, m, "core", "DENIED")
	expect(t, m, "sysrq", "DENIED", "OK") // /dev/null is mounted over it
	expect(t, m, "sysrqctl", "DENIED")
	expect(t, m, "drop", "DENIED")
	expect(t, m, "read", "OK")
	expect(t, m, "tmp", "OK")
	after, _ := os.ReadFile("/proc/sys/kernel/core_pattern")
	if string(after) != string(before) {
		t.Errorf("host core_pattern changed: %q -> %q", before, after)
	}
	// The sysrq-trigger inside must be the masked one: writes must not
	// reach the kernel. A write that "succeeds" has to land in /dev/null.
	if m["sysrq"] == "OK" {
		r := sh(t, opts{}, nil, `grep -c ' /proc/sysrq-trigger ' /proc/self/mountinfo`)
		if strings.TrimSpace(r.stdout) != "1" {
			t.Errorf("sysrq-trigger is writable and not masked\n%s", r)
		}
	}
}

// F5: no mount API.
func TestF5Mount(t *testing.T) {
	script := pyPrelude + `
import subprocess
out("mount_cmd", subprocess.run(["mount", "-t", "tmpfs", "x", "/mnt"], stderr=subprocess.DEVNULL).returncode)
out("mount", sc(165, 0, 0, 0, 0, 0)[1])
out("fsopen", sc(430, 0, 0)[1])
out("fsmount", sc(432, -1, 0, 0)[1])
out("open_tree", sc(428, -100, 0, 0)[1])
out("move_mount", sc(429, -1, 0, -1, 0, 0)[1])
out("mount_setattr", sc(442, -1, 0, 0, 0, 0)[1])
out("open_by_handle_at", sc(304, -1, 0, 0)[1])
out("name_to_handle_at", sc(303, -100, 0, 0, 0, 0)[1])
out("umount2", sc(166, 0, 0)[1])
out("pivot_root", sc(155, 0, 0)[1])
out("chroot", sc(161, 0)[1])
# Controls: the helper reaches the kernel for allowed syscalls.
out("ctl_read", sc(0, -1, 0, 0)[1])
out("ctl_close", sc(3, -1)[1])
out("ctl_openat", sc(257, -100, 0, 0, 0)[1])
out("ctl_getpid", "OK" if sc(39)[0] > 0 else "FAIL")
`
	r := py(t, opts{}, nil, script)
	mustOK(t, r, "probe")
	m := kv(r.stdout)
	if m["mount_cmd"] == "0" {
		t.Errorf("mount -t tmpfs succeeded inside the sandbox")
	}
	for _, k := range []string{"mount", "fsopen", "fsmount", "open_tree", "move_mount", "mount_setattr", "open_by_handle_at", "name_to_handle_at", "umount2", "pivot_root", "chroot"} {
		expect(t, m, k, "EPERM")
	}
	expect(t, m, "ctl_read", "EBADF")
	expect(t, m, "ctl_close", "EBADF")
	expect(t, m, "ctl_openat", "EFAULT")
	expect(t, m, "ctl_getpid", "OK")
}

// F9: /dev/shm is private to each sandbox.
func TestF9DevShm(t *testing.T) {
	need(t)
	tag := randHex(4)
	a := start(t, opts{}, "run", "--", "/bin/sh", "-c",
		"echo secret > /dev/shm/p-"+tag+" && cat /dev/shm/p-"+tag+" && echo ready && sleep 30")
	a.stdout.waitFor(t, regexp.MustCompile(`^ready$`), 30*time.Second)
	if !strings.Contains(a.stdout.String(), "secret") {
		t.Fatalf("control: sandbox A cannot read its own /dev/shm file:\n%s", a.stdout.String())
	}
	r := sh(t, opts{}, nil, "ls /dev/shm; cat /dev/shm/p-"+tag+" 2>/dev/null && echo B=SEEN || echo B=ABSENT")
	expect(t, kv(r.stdout), "B", "ABSENT")
	if _, err := os.Stat("/dev/shm/p-" + tag); err == nil {
		t.Errorf("sandbox A's /dev/shm file is visible on the host")
	}
	// SysV shared memory is per IPC namespace too.
	r = py(t, opts{}, nil, pyPrelude+`
out("ipc", open("/proc/sysvipc/shm").read().count("\n"))
`)
	expect(t, kv(r.stdout), "ipc", "1")
}

// F10: minimal /dev, no mknod of devices.
func TestF10Devices(t *testing.T) {
	script := pyPrelude + `
out("mknod_blk", tryerr(lambda: os.mknod("/tmp/d", 0o60600, os.makedev(8, 0))))
out("mknod_chr", tryerr(lambda: os.mknod("/tmp/c", 0o20600, os.makedev(1, 1))))
out("mknod_ws", tryerr(lambda: os.mknod("/workspace/c", 0o20600, os.makedev(1, 1))))
for d in ["mem", "kmem", "port", "kmsg", "kvm", "vda", "sda", "nvme0", "loop0", "net/tun", "fuse", "console", "tty0", "mapper/control", "vsock", "vhost-vsock", "hpet", "rtc0"]:
    out("dev_" + d, "PRESENT" if os.path.exists("/dev/" + d) else "ABSENT")
out("devlist", ",".join(sorted(os.listdir("/dev"))))
# Controls: a FIFO can be made, the usual devices work.
out("ctl_fifo", tryerr(lambda: os.mkfifo("/tmp/fifo")))
out("ctl_null", tryerr(lambda: open("/dev/null", "w").write("x")))
out("ctl_urandom", "OK" if len(open("/dev/urandom", "rb").read(16)) == 16 else "SHORT")
`
	r := py(t, opts{}, nil, script)
	mustOK(t, r, "probe")
	m := kv(r.stdout)
	expect(t, m, "mknod_blk", "EPERM")
	expect(t, m, "mknod_chr", "EPERM")
	expect(t, m, "mknod_ws", "EPERM")
	for k, v := range m {
		if strings.HasPrefix(k, "dev_") && v != "ABSENT" {
			t.Errorf("/dev/%s is present inside the sandbox", strings.TrimPrefix(k, "dev_"))
		}
	}
	allowed := map[string]bool{"null": true, "zero": true, "full": true, "random": true, "urandom": true, "tty": true,
		"pts": true, "shm": true, "ptmx": true, "fd": true, "stdin": true, "stdout": true, "stderr": true, "console": false}
	for _, d := range strings.Split(m["devlist"], ",") {
		if !allowed[d] {
			t.Errorf("unexpected /dev entry %q", d)
		}
	}
	expect(t, m, "ctl_fifo", "OK")
	expect(t, m, "ctl_null", "OK")
	expect(t, m, "ctl_urandom", "OK")
}

// F11: setuid binaries are present but unusable: every mount is nosuid and
// no_new_privs is set.
func TestF11Setuid(t *testing.T) {
	script := `
grep NoNewPrivs /proc/self/status | tr -d '\t' | tr : =
n=0; for f in /usr/bin/su /usr/bin/passwd /usr/bin/mount /bin/su; do test -u "$f" && n=$((n+1)); done; echo setuid_files=$n
awk '{ for (i=1;i<=NF;i++) if ($i=="-") break; if ($6 !~ /nosuid/) print "suid_mount=" $5 }' /proc/self/mountinfo
echo mounts=$(wc -l < /proc/self/mountinfo)
`
	r := sh(t, opts{}, nil, script)
	mustOK(t, r, "probe")
	m := kv(r.stdout)
	expect(t, m, "NoNewPrivs", "1")
	// Control: the setuid binaries exist (they would be usable without nosuid).
	if m["setuid_files"] == "0" || m["setuid_files"] == "" {
		t.Logf("no setuid file visible; the nosuid check still runs")
	}
	for _, l := range strings.Split(r.stdout, "\n") {
		if strings.HasPrefix(l, "suid_mount=") {
			mp := strings.TrimPrefix(l, "suid_mount=")
			// Device nodes bind-mounted into /dev hold no binaries and /dev
			// itself is nosuid, noexec.
			if strings.HasPrefix(mp, "/dev/") && mp != "/dev/shm" && mp != "/dev/pts" {
				continue
			}
			if strings.HasPrefix(mp, "/proc/") {
				continue // /dev/null masks and read-only procfs: no executables
			}
			t.Errorf("mount %s is not nosuid", mp)
		}
	}
	if m["mounts"] == "" || m["mounts"] == "0" {
		t.Errorf("control: no mounts listed\n%s", r)
	}
}
