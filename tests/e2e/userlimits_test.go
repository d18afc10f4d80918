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
			args := append([]string{"run", "--workspace", ws}, c.flags...)
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
