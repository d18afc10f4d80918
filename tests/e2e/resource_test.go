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

// pyForks forks up to n children that sleep, reports how many it got and
// the error that stopped it, then kills them.
const pyForks = `
import signal
n = int(sys.argv[1])
kids, err = [], "NONE"
for i in range(n):
    try:
        pid = os.fork()
    except OSError as e:
        err = E.errorcode.get(e.errno)
        break
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    kids.append(pid)
out("forks", len(kids))
out("err", err)
for k in kids:
    os.kill(k, signal.SIGKILL)
    os.waitpid(k, 0)
`

// The agent's threads are not counted in --pids: the supervisor sets
// pids.max to the user's number plus the threads the agent runs with plus
// agentSpare (internal/runtime/native).
const (
	agentSpare      = 4
	agentThreadsMax = 16
)

// R1: a fork bomb stops at the pids limit; 20 forks under the same limit
// succeed; other sandboxes keep working while the bomb runs.
func TestR1ForkBomb(t *testing.T) {
	needRoot(t)
	r := run(t, opts{}, []string{"--pids", "64"}, "/usr/bin/python3", "-c", pyPrelude+pyForks, "500")
	m := kv(r.stdout)
	expect(t, m, "err", "EAGAIN")
	var n int
	fmt.Sscan(m["forks"], &n)
	// --pids counts the sandbox's own tasks (python itself is one); the
	// agent's threads come on top, plus a spare few (agentSparePids).
	if n > 64+agentSpare || n < 48 {
		t.Errorf("forks = %d under --pids 64\n%s", n, r)
	}
	r = run(t, opts{}, []string{"--pids", "64"}, "/usr/bin/python3", "-c", pyPrelude+pyForks, "20")
	m = kv(r.stdout)
	expect(t, m, "forks", "20")
	expect(t, m, "err", "NONE")

	// The real bomb, bounded by --timeout; meanwhile a new sandbox starts
	// and works.
	bomb := start(t, opts{}, "run", "-v", "--pids", "64", "--timeout", "8s", "--", "/usr/bin/python3", "-c",
		"import os\nwhile 1:\n try: os.fork()\n except OSError: pass")
	_, paths := bomb.cgroupPaths(t)
	cg := pidsCgroup(t, paths)
	hitLimit := poll(20*time.Second, func() bool {
		b, err := os.ReadFile(filepath.Join(cg, "pids.events"))
		return err == nil && !strings.Contains(string(b), "max 0")
	})
	if !hitLimit {
		t.Errorf("the bomb's cgroup never hit pids.max")
	}
	var cur, max int
	if b, err := os.ReadFile(filepath.Join(cg, "pids.current")); err == nil {
		fmt.Sscan(string(b), &cur)
	}
	if b, err := os.ReadFile(filepath.Join(cg, "pids.max")); err == nil {
		fmt.Sscan(string(b), &max)
	}
	// The limit is the user's 64 plus the agent's threads and the spare.
	if max < 64 || max > 64+agentThreadsMax+agentSpare || cur > max {
		t.Errorf("pids.current = %d, pids.max = %d under --pids 64", cur, max)
	}
	other := sh(t, opts{}, nil, "echo alive")
	if other.code != 0 || other.stdout != "alive\n" {
		t.Errorf("a sandbox started during the bomb failed\n%s", other)
	}
	if code := bomb.wait(t, 40*time.Second); code != 124 {
		t.Errorf("bomb: want exit 124 at the timeout, got %d\n%s", code, bomb.stderr.String())
	}
	if poll(10*time.Second, func() bool { _, err := os.Stat(cg); return err != nil }) == false {
		t.Errorf("the bomb's cgroup %s still exists after the run", cg)
	}
}

// R2: thread creation stops at the pids limit.
func TestR2Threads(t *testing.T) {
	needRoot(t)
	script := pyPrelude + `
import threading
n = int(sys.argv[1])
ev = threading.Event()
ts, err = [], "NONE"
for i in range(n):
    th = threading.Thread(target=ev.wait, daemon=True)
    try:
        th.start()
    except RuntimeError as e:
        err = "LIMIT"
        break
    ts.append(th)
out("threads", len(ts))
out("err", err)
ev.set()
`
	r := run(t, opts{}, []string{"--pids", "64"}, "/usr/bin/python3", "-c", script, "500")
	m := kv(r.stdout)
	expect(t, m, "err", "LIMIT")
	var n int
	fmt.Sscan(m["threads"], &n)
	if n > 64+agentSpare || n < 48 {
		t.Errorf("threads = %d under --pids 64\n%s", n, r)
	}
	r = run(t, opts{}, []string{"--pids", "64"}, "/usr/bin/python3", "-c", script, "20")
	m = kv(r.stdout)
	expect(t, m, "threads", "20")
	expect(t, m, "err", "NONE")
}

const pyHog = `
import sys
a = []
for i in range(int(sys.argv[1])):
    a.append(bytearray(1 << 20))
    a[-1][::4096] = b"x" * (1 << 8)
print("allocated", len(a), flush=True)
`

// R3: a memory hog is killed inside its limit; an allocation within it works.
func TestR3Memory(t *testing.T) {
	needRoot(t)
	r := run(t, opts{}, []string{"--memory", "64MiB"}, "/usr/bin/python3", "-c", pyHog, "1024")
	if r.code != 137 {
		t.Errorf("1 GiB under --memory 64MiB: want exit 137\n%s", r)
	}
	r = run(t, opts{}, []string{"--memory", "64MiB"}, "/usr/bin/python3", "-c", pyHog, "16")
	if r.code != 0 || !strings.Contains(r.stdout, "allocated 16") {
		t.Errorf("control: 16 MiB under --memory 64MiB\n%s", r)
	}
}

// R4, R5: /dev/shm, /tmp, the writable root layer and the fresh workspace
// are size-capped, also rootless; df shows each one's own cap.
func TestR4R5Disk(t *testing.T) {
	need(t)
	for _, c := range []struct {
		name, flag, size, path string
		nobody                 bool
	}{
		{"shm", "--shm", "8MiB", "/dev/shm/f", false},
		{"tmp", "--tmp", "8MiB", "/tmp/f", false},
		{"root-layer", "--disk", "16MiB", "/root/f", false},
		{"usr-layer", "--disk", "16MiB", "/usr/local/airlock-e2e-fill", false},
		{"workspace", "--disk", "16MiB", "/workspace/f", false},
		{"workspace-rootless", "--disk", "16MiB", "/workspace/f", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := opts{}
			if c.nobody {
				o = nobody(t)
			}
			r := sh(t, o, []string{c.flag, c.size}, `dd if=/dev/zero of=`+c.path+` bs=1M count=64 2>&1; echo rc=$?; echo size=$(stat -c %s `+c.path+`); echo fs=$(( $(stat -f -c '%b * %S' $(dirname `+c.path+`)) ))`)
			m := kv(r.stdout)
			if m["rc"] == "0" || !strings.Contains(r.stdout, "No space left on device") {
				t.Errorf("64 MiB into %s under %s %s: want ENOSPC\n%s", c.path, c.flag, c.size, r)
			}
			var size int64
			fmt.Sscan(m["size"], &size)
			if size >= 17<<20 {
				t.Errorf("%s grew to %d bytes", c.path, size)
			}
			want := int64(16 << 20)
			if c.size == "8MiB" {
				want = 8 << 20
			}
			if fs := m["fs"]; fs != fmt.Sprint(want) {
				t.Errorf("statfs of %s's directory: %s bytes, want its own cap %d", c.path, fs, want)
			}
			r = sh(t, o, []string{c.flag, c.size}, `dd if=/dev/zero of=`+c.path+` bs=1M count=4 2>/dev/null; echo rc=$?`)
			expect(t, kv(r.stdout), "rc", "0")
		})
	}
	if _, err := os.Stat("/usr/local/airlock-e2e-fill"); err == nil {
		os.Remove("/usr/local/airlock-e2e-fill")
		t.Errorf("a file written to /usr inside appeared on the host")
	}
}

// R7: the open file limit holds.
func TestR7Nofile(t *testing.T) {
	script := `
n = int(sys.argv[1])
fds, err = [], "NONE"
for i in range(n):
    try:
        fds += os.pipe()
    except OSError as e:
        err = E.errorcode.get(e.errno)
        break
out("fds", len(fds))
out("err", err)
import resource
out("limit", resource.getrlimit(resource.RLIMIT_NOFILE)[1])
out("raise", tryerr(lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (4096, 4096))))
`
	r := run(t, opts{}, []string{"--nofile", "64"}, "/usr/bin/python3", "-c", pyPrelude+script, "500")
	m := kv(r.stdout)
	expect(t, m, "err", "EMFILE")
	expect(t, m, "limit", "64")
	if v := m["raise"]; v == "OK" {
		t.Errorf("the hard RLIMIT_NOFILE could be raised")
	}
	var n int
	fmt.Sscan(m["fds"], &n)
	if n >= 64 {
		t.Errorf("%d descriptors under --nofile 64", n)
	}
	r = run(t, opts{}, []string{"--nofile", "64"}, "/usr/bin/python3", "-c", pyPrelude+script, "10")
	m = kv(r.stdout)
	expect(t, m, "fds", "20")
	expect(t, m, "err", "NONE")
}

// R11: the clock cannot be set; reading it works.
func TestR11Clock(t *testing.T) {
	need(t)
	before := time.Now()
	r := sh(t, opts{}, nil, `date -s 2000-01-01 >/dev/null 2>&1 && echo set=OK || echo set=DENIED; echo year=$(date +%Y)`)
	m := kv(r.stdout)
	expect(t, m, "set", "DENIED")
	expect(t, m, "year", fmt.Sprint(before.Year()), fmt.Sprint(time.Now().Year()))
	if time.Now().Before(before) || time.Now().Year() < 2020 {
		t.Errorf("host clock moved: %s", time.Now())
	}
}

// R13: SIGKILL of airlock kills every sandbox process and the next run
// cleans up the state directory.
func TestR13SupervisorDeath(t *testing.T) {
	needRoot(t)
	b := start(t, opts{}, "run", "-v", "--", "/bin/sh", "-c", "sleep 1000 & sleep 1000 & echo ready; wait")
	id, paths := b.cgroupPaths(t)
	b.stdout.waitFor(t, regexp.MustCompile(`^ready$`), 30*time.Second)
	ids := regexp.MustCompile(`host uids (\d+)-\d+, gids (\d+)-`).FindStringSubmatch(b.stderr.String())
	if ids == nil {
		t.Fatalf("no host ids in the -v report:\n%s", b.stderr)
	}
	lease := "/run/airlock/uids/" + ids[1] + "-" + ids[2]
	if _, err := os.Stat(lease); err != nil {
		t.Errorf("control: no lease %s while the sandbox runs: %v", lease, err)
	}
	cg := pidsCgroup(t, paths)
	var pids []int
	poll(10*time.Second, func() bool { pids = cgroupPids(t, cg); return len(pids) >= 4 })
	if len(pids) < 4 {
		t.Fatalf("control: want init, sh and 2 sleeps in %s, got %v", cg, pids)
	}
	stateDir := "/run/airlock/" + id
	if _, err := os.Stat(stateDir); err != nil {
		t.Errorf("control: state dir %s missing while running: %v", stateDir, err)
	}
	// The reaper (started once a sandbox has lived a moment) is what
	// cleans the host side after a SIGKILL; wait until it is there.
	if !poll(10*time.Second, func() bool { return reaperRunning(stateDir) }) {
		t.Fatalf("control: no reaper process for %s", stateDir)
	}
	b.cmd.Process.Kill()
	b.wait(t, 10*time.Second)
	gone := poll(15*time.Second, func() bool {
		for _, p := range pids {
			if alive(p) {
				return false
			}
		}
		return true
	})
	if !gone {
		var left []string
		for _, p := range pids {
			if alive(p) {
				c, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p))
				left = append(left, fmt.Sprintf("%d %q", p, c))
			}
		}
		t.Errorf("sandbox processes survived airlock's death: %v", left)
	}
	// No later airlock run is needed: the reaper removes the cgroups and
	// the state directory by itself.
	if !poll(10*time.Second, func() bool { _, err := os.Stat(stateDir); return err != nil }) {
		t.Errorf("state dir %s left after airlock was killed", stateDir)
	}
	for _, p := range paths {
		if !poll(10*time.Second, func() bool { _, err := os.Stat(p); return err != nil }) {
			t.Errorf("cgroup %s left after airlock was killed", p)
		}
	}
	// (Its last step, giving the host ids back, scans /proc: allow it a
	// moment.)
	if !poll(5*time.Second, func() bool { return !reaperRunning(stateDir) }) {
		t.Errorf("the reaper for %s is still running after its work", stateDir)
	}
	// Nothing of the sandbox is left: its host id range is free again.
	if !poll(10*time.Second, func() bool { _, err := os.Stat(lease); return err != nil }) {
		t.Errorf("lease %s left after airlock was killed and its sandbox cleaned up", lease)
	}
}

// TestR13EarlyKillSwept: a supervisor killed before its reaper started
// leaves its state directory to the next airlock, which sweeps it.
func TestR13EarlyKillSwept(t *testing.T) {
	needRoot(t)
	root := "/run/airlock"
	// A state directory as a supervisor that died leaves it: its owner
	// pid is not alive. The control is a directory whose owner is alive.
	dead := filepath.Join(root, "0e2edeadbeef0000") // a sandbox id: the sweep considers nothing else
	live := filepath.Join(root, "0e2e000000000001")
	for dir, owner := range map[string]string{dead: `{"owner": 2147483000, "owner_start": "1"}`, live: ownerJSON(t)} {
		if err := os.MkdirAll(dir, 0o711); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "state.json"), []byte(owner), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	defer os.RemoveAll(live)
	mustOK(t, run(t, opts{}, nil, "true"), "next run")
	if !poll(10*time.Second, func() bool { _, err := os.Stat(dead); return err != nil }) {
		t.Errorf("state of a dead supervisor %s not swept by the next run", dead)
	}
	if _, err := os.Stat(live); err != nil {
		t.Errorf("control: state of a live supervisor %s was swept: %v", live, err)
	}
}

// ownerJSON is a state file naming this test process as the owner.
func ownerJSON(t *testing.T) string {
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return fmt.Sprintf(`{"owner": %d, "owner_start": %q}`, os.Getpid(), f[19])
}

// reaperRunning reports whether a reaper process for stateDir exists.
func reaperRunning(stateDir string) bool {
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		b, err := os.ReadFile("/proc/" + p.Name() + "/cmdline")
		if err == nil && strings.Contains(string(b), "__sandbox-reap\x00"+stateDir) {
			return true
		}
	}
	return false
}

// --cpu sets a CFS quota on the sandbox's cgroup (v1 cpu.cfs_quota_us /
// cpu.cfs_period_us, v2 cpu.max); without --cpu there is no CPU cgroup to
// enforce (control).
func TestCPULimit(t *testing.T) {
	needRoot(t)
	quota := func(cpu ...string) (string, bool) {
		// The command is sleep itself, not `sh -c "echo ready; sleep 30"`:
		// dash run with -c catches SIGINT and defers it while it forks, and
		// its child inherits that handler until exec, so a SIGINT
		// forwarded right after "ready" (throttled by the quota, the
		// shell was often still between fork and exec) was lost and the
		// run lasted the whole 30 s. The -v report comes after the cgroup
		// and its limits were made; a SIGINT before the exec waits in
		// airlock until the command runs, and hits it with the default
		// action.
		args := append(append([]string{"run", "-v"}, cpu...), "--", "sleep", "30")
		b := start(t, opts{}, args...)
		_, paths := b.cgroupPaths(t)
		defer func() { b.cmd.Process.Signal(os.Interrupt); b.wait(t, 30*time.Second) }()
		read := func() (string, bool) {
			for _, p := range paths {
				if q, err := os.ReadFile(filepath.Join(p, "cpu.cfs_quota_us")); err == nil {
					per, _ := os.ReadFile(filepath.Join(p, "cpu.cfs_period_us"))
					return strings.TrimSpace(string(q)) + "/" + strings.TrimSpace(string(per)), true
				}
				if m, err := os.ReadFile(filepath.Join(p, "cpu.max")); err == nil {
					return strings.ReplaceAll(strings.TrimSpace(string(m)), " ", "/"), true
				}
			}
			return "", false
		}
		if len(cpu) == 0 {
			return read()
		}
		// A backend may set the quota as it starts the command (gVisor's
		// runsc does), after the -v report: wait for it, bounded.
		var q string
		var ok bool
		poll(10*time.Second, func() bool {
			q, ok = read()
			return ok && q != "-1/100000" && q != "max/100000"
		})
		return q, ok
	}
	if q, ok := quota("--cpu", "0.5"); !ok || q != "50000/100000" {
		t.Errorf("--cpu 0.5: quota %q (found %v), want 50000/100000", q, ok)
	}
	if q, ok := quota(); ok && q != "-1/100000" && q != "max/100000" {
		t.Errorf("control without --cpu: quota %q, want none", q)
	}
}
