//go:build linux

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The kernel's per-user limits are per sandbox: each sandbox runs as a host
// id range of its own, and its user namespace is owned by that range's
// first uid (the kernel charges what a namespace's processes use to its
// owner too), so what one sandbox uses up never counts against another
// sandbox, nor against the host's root.
//
// For each limit: sandbox A uses it up and must itself hit it (the denial,
// and the proof the test reaches the limit); while A holds everything,
// sandbox B does the same thing once and must succeed, and so must the
// host's root where it is subject to the same counter.
func TestPerUserLimitsPerSandbox(t *testing.T) {
	needRoot(t)
	instances := readIntFile(t, "/proc/sys/fs/inotify/max_user_instances")
	watches := readIntFile(t, "/proc/sys/fs/inotify/max_user_watches")

	cases := []struct {
		name    string
		flags   []string
		exhaust string // sets hit (errno name) and n (how many it got)
		probe   string // prints B=OK or B=<errno>
		wantHit string
		wantN   int // 0: only 0 < n
		host    func() error
	}{{
		name:  "inotify instances",
		flags: []string{"--nofile", strconv.Itoa(instances + 256)},
		exhaust: `
fds = []
while len(fds) < 1000000:
    fd = _l.inotify_init1(0)
    if fd < 0:
        hit = E.errorcode.get(C.get_errno()); break
    fds.append(fd)
n = len(fds)
`,
		probe:   `fd = _l.inotify_init1(0); out("B", "OK" if fd >= 0 else E.errorcode.get(C.get_errno()))`,
		wantHit: "EMFILE", wantN: instances,
		host: func() error {
			fd, err := unix.InotifyInit1(unix.IN_CLOEXEC)
			if err == nil {
				unix.Close(fd)
			}
			return err
		},
	}, {
		name: "inotify watches",
		exhaust: fmt.Sprintf(`
W, K = %d, %d
os.mkdir("/tmp/w")
paths = []
for i in range(W // K + 1):
    p = b"/tmp/w/%%d" %% i
    open(p, "w").close()
    paths.append(p)
add = _l.inotify_add_watch
n = 0
for k in range(K):
    fd = _l.inotify_init1(0)
    if fd < 0:
        hit = "init:" + E.errorcode.get(C.get_errno()); break
    for p in paths:
        if add(fd, p, 2) < 0:
            hit = E.errorcode.get(C.get_errno()); break
        n += 1
    if hit != "NONE":
        break
`, watches, max(1, min(instances/2, 64))),
		probe: `fd = _l.inotify_init1(0)
w = _l.inotify_add_watch(fd, b"/tmp", 2) if fd >= 0 else -1
out("B", "OK" if w >= 0 else E.errorcode.get(C.get_errno()))`,
		wantHit: "ENOSPC", wantN: watches,
		host: func() error {
			fd, err := unix.InotifyInit1(unix.IN_CLOEXEC)
			if err != nil {
				return err
			}
			defer unix.Close(fd)
			_, err = unix.InotifyAddWatch(fd, t.TempDir(), unix.IN_MODIFY)
			return err
		},
	}, {
		name: "RLIMIT_NPROC",
		exhaust: `
import resource
resource.setrlimit(resource.RLIMIT_NPROC, (64, 64))
kids = []
while len(kids) < 1000:
    try:
        pid = os.fork()
    except OSError as e:
        hit = E.errorcode.get(e.errno); break
    if pid == 0:
        time.sleep(120); os._exit(0)
    kids.append(pid)
n = len(kids)
`,
		probe: `import resource
resource.setrlimit(resource.RLIMIT_NPROC, (64, 64))
res = "OK"
for i in range(8):
    try:
        pid = os.fork()
    except OSError as e:
        res = E.errorcode.get(e.errno); break
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
out("B", res)`,
		wantHit: "EAGAIN",
	}, {
		name: "POSIX message queues",
		// Landlock refuses to create a queue (EACCES: it is a file made
		// on the mqueue filesystem, outside every path Landlock allows),
		// so with it on a sandbox cannot use this counter at all; the
		// counter itself is tested with Landlock off.
		flags: []string{"--insecure-no-landlock"},
		exhaust: mqAttr + `
qs = []
while len(qs) < 1000:
    fd = _l.mq_open(b"/airlock-q%d" % len(qs), os.O_CREAT | os.O_RDWR, 0o600, C.byref(attr))
    if fd < 0:
        hit = E.errorcode.get(C.get_errno()); break
    qs.append(fd)
n = len(qs)
`,
		probe: mqAttr + `
fd = _l.mq_open(b"/airlock-b", os.O_CREAT | os.O_RDWR, 0o600, C.byref(attr))
out("B", "OK" if fd >= 0 else E.errorcode.get(C.get_errno()))`,
		wantHit: "EMFILE",
		host:    hostMqueue,
	}}

	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ws := t.TempDir()
			script := pyPrelude + "hit = \"NONE\"\n" + c.exhaust + `
out("A_HIT", hit)
out("A_N", n)
print("READY", flush=True)
for _ in range(1200):
    if os.path.exists("/workspace/release"):
        break
    time.sleep(0.05)
`
			args := append([]string{"run", "--workspace-mode", "live", "--workspace", ws}, c.flags...)
			a := start(t, opts{timeout: 90 * time.Second}, append(args, "--", "/usr/bin/python3", "-c", script)...)
			a.stdout.waitFor(t, regexp.MustCompile(`^READY$`), 60*time.Second)
			m := kv(a.stdout.String())
			if m["A_HIT"] != c.wantHit {
				t.Fatalf("sandbox A did not hit the limit with %s (A_HIT=%s, A_N=%s)\nstderr: %s", c.wantHit, m["A_HIT"], m["A_N"], a.stderr)
			}
			got, _ := strconv.Atoi(m["A_N"])
			if got <= 0 || (c.wantN > 0 && got != c.wantN) {
				t.Errorf("sandbox A got %d before the limit, want %d (a counter of its own, starting at 0)", got, c.wantN)
			}

			// While A holds all of it: B, then the host.
			r := py(t, opts{}, c.flags, c.probe)
			if b := kv(r.stdout)["B"]; b != "OK" {
				t.Errorf("sandbox B was denied (%s) while sandbox A held its whole %s limit: the limit is shared\n%s", b, c.name, r)
			}
			if c.host != nil {
				if err := c.host(); err != nil {
					t.Errorf("the host's root was denied (%v) while sandbox A held its whole %s limit: the sandbox's use is charged to root", err, c.name)
				}
			}
			if err := os.WriteFile(filepath.Join(ws, "release"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
			if code := a.wait(t, 30*time.Second); code != 0 {
				t.Errorf("sandbox A exited %d\n%s", code, a.stderr)
			}
		})
	}
}

// mqAttr defines attr, a struct mq_attr of 10 messages of 8 KiB (the
// default maximums).
const mqAttr = `
class MqAttr(C.Structure):
    _fields_ = [("flags", C.c_long), ("maxmsg", C.c_long), ("msgsize", C.c_long), ("curmsgs", C.c_long), ("pad", C.c_long * 4)]
attr = MqAttr(0, 10, 8192, 0)
`

// hostMqueue creates (and removes) a POSIX message queue of the same size
// on the host.
func hostMqueue() error {
	name := []byte("airlock-e2e-" + randHex(6) + "\x00")
	attr := [8]int64{0, 10, 8192, 0}
	fd, _, errno := unix.Syscall6(unix.SYS_MQ_OPEN, uintptr(unsafe.Pointer(&name[0])), unix.O_CREAT|unix.O_RDWR|unix.O_CLOEXEC, 0o600, uintptr(unsafe.Pointer(&attr[0])), 0, 0)
	if errno != 0 {
		return errno
	}
	unix.Close(int(fd))
	unix.Syscall(unix.SYS_MQ_UNLINK, uintptr(unsafe.Pointer(&name[0])), 0, 0)
	return nil
}

func readIntFile(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return n
}

// holdScript prints its id maps and READY, then waits for
// /workspace/release. The host creates that file while the sandbox runs,
// so the runs that use it take the workspace live: an overlay workspace
// does not promise to show host changes made during the run.
const holdScript = `cat /proc/self/uid_map /proc/self/gid_map; echo READY
i=0; while [ ! -e /workspace/release ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done`

// hostIDs is what the host sees of a running sandbox's init.
type hostIDs struct {
	init, uid, gid, owner int
	uidMap                string
}

// sandboxInit finds the init of the sandbox a background `airlock run`
// made (its child running __sandbox-init) and reads, from the host, the
// ids it runs as and the owner of its user namespace.
func sandboxInit(t *testing.T, b *bg) hostIDs {
	t.Helper()
	var h hostIDs
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", b.cmd.Process.Pid))
	for _, f := range tasks {
		c, _ := os.ReadFile(f)
		for _, s := range strings.Fields(string(c)) {
			pid, _ := strconv.Atoi(s)
			if cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); strings.Contains(string(cmd), "__sandbox-init") {
				h.init = pid
			}
		}
	}
	if h.init == 0 {
		t.Fatalf("no sandbox init among the children of airlock (pid %d)", b.cmd.Process.Pid)
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", h.init))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		for prefix, dst := range map[string]*int{"Uid:": &h.uid, "Gid:": &h.gid} {
			if v, ok := strings.CutPrefix(line, prefix); ok {
				f := strings.Fields(v)
				for _, x := range f[1:] {
					if x != f[0] {
						t.Errorf("init %d: %s ids differ: %q", h.init, prefix, v)
					}
				}
				*dst, _ = strconv.Atoi(f[0])
			}
		}
	}
	m, _ := os.ReadFile(fmt.Sprintf("/proc/%d/uid_map", h.init))
	h.uidMap = strings.Join(strings.Fields(string(m)), " ")
	ns, err := os.Open(fmt.Sprintf("/proc/%d/ns/user", h.init))
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	const nsGetOwnerUID = 0xb704 // NS_GET_OWNER_UID
	var owner uint32
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, ns.Fd(), nsGetOwnerUID, uintptr(unsafe.Pointer(&owner))); errno != 0 {
		t.Fatalf("NS_GET_OWNER_UID: %v", errno)
	}
	h.owner = int(owner)
	return h
}

// Two sandboxes running at once get disjoint host id ranges of 65536
// ids, leased in /run/airlock/uids while they run; each one's init runs
// as the first id of its range and owns its user namespace (from the
// host: /proc status, uid_map, NS_GET_OWNER_UID). Files the sandbox
// creates in host paths belong to those paths' owners, never to one of
// the sandbox's ids.
func TestSandboxHostIDRanges(t *testing.T) {
	needRoot(t)
	wsUser := t.TempDir() // owned by nobody
	if err := os.Chown(wsUser, nobodyID, nobodyID); err != nil {
		t.Fatal(err)
	}
	data := t.TempDir() // a writable bind owned by an id with no account
	if err := os.Chown(data, 4242, 4243); err != nil {
		t.Fatal(err)
	}
	wsRoot := t.TempDir()

	a := start(t, opts{}, "run", "--workspace-mode", "live", "--workspace", wsUser, "--rw", data, "--", "/bin/sh", "-c",
		`stat -c ws=%u:%g /workspace; stat -c data=%u:%g `+data+`; touch /workspace/a `+data+`/b; `+holdScript)
	b := start(t, opts{}, "run", "--workspace-mode", "live", "--workspace", wsRoot, "--", "/bin/sh", "-c", `touch /workspace/c; `+holdScript)
	a.stdout.waitFor(t, regexp.MustCompile(`^READY$`), 60*time.Second)
	b.stdout.waitFor(t, regexp.MustCompile(`^READY$`), 60*time.Second)
	ha, hb := sandboxInit(t, a), sandboxInit(t, b)
	for _, h := range []hostIDs{ha, hb} {
		if h.uid < 65536 || h.gid < 65536 {
			t.Errorf("init %d runs as host uid %d gid %d, not a range of the pool", h.init, h.uid, h.gid)
		}
		if want := fmt.Sprintf("0 %d 65536", h.uid); h.uidMap != want {
			t.Errorf("init %d: uid_map %q, want %q", h.init, h.uidMap, want)
		}
		if h.owner != h.uid {
			t.Errorf("init %d: user namespace owned by host uid %d, want its own %d (per-user counters are charged to the owner)", h.init, h.owner, h.uid)
		}
		if _, err := os.Stat(fmt.Sprintf("/run/airlock/uids/%d-%d", h.uid, h.gid)); err != nil {
			t.Errorf("no lease for the running sandbox's range: %v", err)
		}
	}
	if d := ha.uid - hb.uid; d > -65536 && d < 65536 {
		t.Errorf("the two sandboxes' uid ranges overlap: %d and %d", ha.uid, hb.uid)
	}
	if d := ha.gid - hb.gid; d > -65536 && d < 65536 {
		t.Errorf("the two sandboxes' gid ranges overlap: %d and %d", ha.gid, hb.gid)
	}
	m := kv(a.stdout.String())
	expect(t, m, "ws", "0:0")
	expect(t, m, "data", "0:0")
	for path, want := range map[string]string{
		filepath.Join(wsUser, "a"): "65534:65534",
		filepath.Join(data, "b"):   "4242:4243",
		filepath.Join(wsRoot, "c"): "0:0",
	} {
		var st unix.Stat_t
		if err := unix.Stat(path, &st); err != nil {
			t.Errorf("%s: %v", path, err)
		} else if got := fmt.Sprintf("%d:%d", st.Uid, st.Gid); got != want {
			t.Errorf("%s created by the sandbox is owned by %s on the host, want %s (the owner of the path)", path, got, want)
		}
	}
	for _, c := range []struct {
		b  *bg
		ws string
		h  hostIDs
	}{{a, wsUser, ha}, {b, wsRoot, hb}} {
		os.WriteFile(filepath.Join(c.ws, "release"), nil, 0o644)
		if code := c.b.wait(t, 30*time.Second); code != 0 {
			t.Errorf("sandbox exited %d\n%s", code, c.b.stderr)
		}
		if _, err := os.Stat(fmt.Sprintf("/run/airlock/uids/%d-%d", c.h.uid, c.h.gid)); !os.IsNotExist(err) {
			t.Errorf("lease %d-%d still there after the sandbox ended: %v", c.h.uid, c.h.gid, err)
		}
	}
}

// --uid-pool (or $AIRLOCK_UID_POOL) sets the pool: a pool of one range
// holds one sandbox at a time; a second fails to start, with the reason,
// while the first runs, and starts once it is gone. A pool reaching into
// the host's own ids is refused.
func TestUIDPoolFlag(t *testing.T) {
	needRoot(t)
	const start1 = 0x60000000
	pool := fmt.Sprintf("%d:65536", start1)
	ws := t.TempDir()
	a := start(t, opts{}, "run", "-v", "--uid-pool", pool, "--workspace-mode", "live", "--workspace", ws, "--", "/bin/sh", "-c", holdScript)
	a.stdout.waitFor(t, regexp.MustCompile(`^READY$`), 60*time.Second)
	if h := sandboxInit(t, a); h.uid != start1 || h.gid != start1 {
		t.Errorf("sandbox runs as %d/%d, want the pool's only range %d", h.uid, h.gid, start1)
	}
	r := run(t, opts{}, []string{"--uid-pool", pool}, "true")
	if r.code != 125 || !strings.Contains(r.stderr, "all 1 ranges are leased") {
		t.Errorf("second sandbox on a full pool: want exit 125 naming the exhausted pool\n%s", r)
	}
	r = run(t, opts{env: []string{"AIRLOCK_UID_POOL=" + pool}}, nil, "true")
	if r.code != 125 || !strings.Contains(r.stderr, "all 1 ranges are leased") {
		t.Errorf("$AIRLOCK_UID_POOL on a full pool: want exit 125\n%s", r)
	}
	os.WriteFile(filepath.Join(ws, "release"), nil, 0o644)
	if code := a.wait(t, 30*time.Second); code != 0 {
		t.Errorf("first sandbox exited %d\n%s", code, a.stderr)
	}
	// Control: the range is free again.
	mustOK(t, run(t, opts{}, []string{"--uid-pool", pool}, "true"), "sandbox on the freed pool")

	r = run(t, opts{}, []string{"--uid-pool", "1000:65536"}, "true")
	if r.code != 125 || !strings.Contains(r.stderr, "must start at or above 65536") {
		t.Errorf("pool over the host's own ids: want exit 125 with the reason\n%s", r)
	}
}
