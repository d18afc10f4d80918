//go:build linux

package e2e

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/internal/runtime/gvisor"
)

// cgroupParent makes a fresh parent cgroup in every hierarchy (every v1
// controller mount, or the v2 root), for --cgroup-parent, so that what a
// test's sandboxes leave under it is theirs alone on a shared host; it is
// removed when the test ends. It returns the parent's name and its
// directories.
func cgroupParent(t *testing.T) (string, []string) {
	t.Helper()
	name := "airlock-e2e-" + randHex(6)
	var st unix.Statfs_t
	var roots []string
	if unix.Statfs("/sys/fs/cgroup", &st) == nil && st.Type == unix.CGROUP2_SUPER_MAGIC {
		roots = []string{"/sys/fs/cgroup"}
	} else {
		hs, _ := filepath.Glob("/sys/fs/cgroup/*/cgroup.procs")
		for _, h := range hs {
			if d := filepath.Dir(h); filepath.Base(d) != "unified" {
				roots = append(roots, d)
			}
		}
	}
	var dirs []string
	for _, r := range roots {
		d := filepath.Join(r, name)
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		dirs = append(dirs, d)
	}
	t.Cleanup(func() {
		for _, d := range dirs {
			os.Remove(filepath.Join(d, "airlock"))
			os.Remove(d)
		}
	})
	return name, dirs
}

// leftUnder lists the sandbox cgroups left under a parent's directories.
func leftUnder(dirs []string) []string {
	var left []string
	for _, d := range dirs {
		ents, _ := os.ReadDir(filepath.Join(d, "airlock"))
		for _, e := range ents {
			if e.IsDir() {
				left = append(left, filepath.Join(d, "airlock", e.Name()))
			}
		}
	}
	return left
}

// TestGVisorCgroups: the host cgroup of a gVisor sandbox is airlock's:
// made with the limits before runsc starts, runsc's Sentry and Gofer (and
// every host task of the sandbox) born inside it, no cgroup of runsc's own
// anywhere, and the cgroup removed when the run ends. Control: with
// --insecure-no-cgroups none is made and the sandbox's tasks stay where
// airlock is.
func TestGVisorCgroups(t *testing.T) {
	needRoot(t)
	if why := backends()[gvisor.Name]; why != "" {
		t.Skip(why)
	}
	parent, dirs := cgroupParent(t)
	b := start(t, opts{}, "run", "--runtime", gvisor.Name, "-v", "--cgroup-parent", parent,
		"--memory", "64MiB", "--pids", "50", "--cpu", "0.5", "--", "/bin/sh", "-c", "echo ready; sleep 60")
	id, paths := b.cgroupPaths(t)
	b.stdout.waitFor(t, regexp.MustCompile(`^ready$`), 60*time.Second)
	want := "/" + parent + "/airlock/" + id
	read := func(dir, file string) string {
		raw, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil {
			return ""
		}
		return strings.TrimSpace(string(raw))
	}
	limits := map[string]bool{}
	for _, p := range paths {
		if !strings.HasSuffix(p, want) {
			t.Errorf("cgroup %s: want one under %s", p, want)
		}
		if v := read(p, "memory.limit_in_bytes"); v != "" {
			limits["memory"] = v == strconv.Itoa(64<<20)
		}
		if v := read(p, "memory.max"); v != "" {
			limits["memory"] = v == strconv.Itoa(64<<20)
		}
		if v := read(p, "pids.max"); v != "" {
			limits["pids"] = v == strconv.Itoa(50+128) // room for the Sentry's host tasks
		}
		if v := read(p, "cpu.cfs_quota_us"); v != "" {
			limits["cpu"] = v == "50000"
		}
		if v := read(p, "cpu.max"); v != "" {
			limits["cpu"] = v == "50000 100000"
		}
	}
	for _, l := range []string{"memory", "pids", "cpu"} {
		if ok, found := limits[l]; !found || !ok {
			t.Errorf("%s limit: found %v, right %v in %q", l, found, ok, paths)
		}
	}
	// The Sentry (runsc-sandbox), the Gofer and the runsc command that
	// started them (born inside: it never moved in and out) are in every
	// directory of the cgroup, and in no cgroup named after the sandbox
	// but this one; runsc was told to make none.
	roles := map[string]int{}
	for _, p := range paths {
		for _, pid := range cgroupPids(t, p) {
			cmdline, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
			argv0, _, _ := strings.Cut(string(cmdline), "\x00")
			roles[filepath.Base(argv0)]++
			if filepath.Base(argv0) == "runsc" && !strings.Contains(string(cmdline), "\x00--ignore-cgroups\x00") {
				t.Errorf("runsc %d runs without --ignore-cgroups: %q", pid, cmdline)
			}
			cg, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
			for _, line := range strings.Split(strings.TrimSpace(string(cg)), "\n") {
				f := strings.SplitN(line, ":", 3)
				if len(f) == 3 && strings.Contains(f[2], id) && f[2] != want {
					t.Errorf("process %d (%s) is in cgroup %s, not only in airlock's %s", pid, argv0, line, want)
				}
			}
		}
	}
	for _, r := range []string{"runsc", "runsc-sandbox", "runsc-gofer"} {
		if roles[r] != len(paths) {
			t.Errorf("%s is in %d of the %d directories of the sandbox's cgroup (tasks by argv[0]: %v)", r, roles[r], len(paths), roles)
		}
	}
	b.cmd.Process.Signal(syscall.SIGTERM)
	if code := b.wait(t, 30*time.Second); code != 128+int(syscall.SIGTERM) {
		t.Errorf("exit %d after SIGTERM\n%s", code, b.stderr)
	}
	for _, p := range paths {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("cgroup %s left after the run: %v", p, err)
		}
	}

	// Control: no cgroups asked for, none made; the Sentry stays in
	// airlock's own cgroups.
	r := run(t, opts{}, []string{"-v", "--insecure-no-cgroups", "--cgroup-parent", parent}, "/bin/sh", "-c", "echo ok")
	if r.code != 0 || r.stdout != "ok\n" || !strings.Contains(r.stderr, "cgroups OFF") {
		t.Errorf("--insecure-no-cgroups: want ok and cgroups OFF\n%s", r)
	}
	if left := leftUnder(dirs); len(left) > 0 {
		t.Errorf("cgroups left under the parent: %q", left)
	}
}

// TestGVisorCgroupFailClosed: a cgroup that cannot be made stops the run
// before runsc starts, with one error naming the layer (exit 125), and a
// start that fails after the cgroup was made (a broken runsc) leaves no
// cgroup behind; control: the same parent works once it exists.
func TestGVisorCgroupFailClosed(t *testing.T) {
	needRoot(t)
	if why := backends()[gvisor.Name]; why != "" {
		t.Skip(why)
	}
	for i := 0; i < 3; i++ {
		r := run(t, opts{}, []string{"--runtime", gvisor.Name, "--cgroup-parent", "airlock-e2e-missing-" + randHex(6)}, "/bin/echo", "ran")
		if r.code != 125 || strings.Contains(r.stdout, "ran") || !strings.Contains(r.stderr, "cgroups: ") || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
			t.Fatalf("missing parent cgroup: want one line naming the cgroups layer, exit 125, nothing run\n%s", r)
		}
	}
	parent, dirs := cgroupParent(t)
	broken := filepath.Join(t.TempDir(), "runsc")
	if err := os.WriteFile(broken, []byte("#!/bin/sh\necho broken runsc >&2\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		r := run(t, opts{env: []string{"AIRLOCK_RUNSC=" + broken}}, []string{"--runtime", gvisor.Name, "--memory", "64MiB", "--cgroup-parent", parent}, "/bin/echo", "ran")
		if r.code == 0 || strings.Contains(r.stdout, "ran") {
			t.Fatalf("broken runsc: want a failure\n%s", r)
		}
	}
	if left := leftUnder(dirs); len(left) > 0 {
		t.Errorf("cgroups left under the parent after failed starts: %q", left)
	}
	r := run(t, opts{}, []string{"--runtime", gvisor.Name, "--memory", "64MiB", "--cgroup-parent", parent}, "/bin/echo", "ran")
	if r.code != 0 || r.stdout != "ran\n" {
		t.Errorf("control: the same parent with a working runsc\n%s", r)
	}
	if left := leftUnder(dirs); len(left) > 0 {
		t.Errorf("cgroups left under the parent after the run: %q", left)
	}
}

// TestCgroupParentOutsideTree: a cgroup parent with ".." is refused on
// every backend before anything starts (exit 125, one line saying what a
// parent must be, not the generic "run as root" hint); control: a parent
// inside the tree runs the command.
func TestCgroupParentOutsideTree(t *testing.T) {
	needRoot(t)
	runtimes := []string{"native"}
	if backends()[gvisor.Name] == "" {
		runtimes = append(runtimes, gvisor.Name)
	}
	parent, dirs := cgroupParent(t)
	for _, rt := range runtimes {
		for _, bad := range []string{"../../etc", parent + "/../../tmp"} {
			r := run(t, opts{}, []string{"--runtime", rt, "--cgroup-parent", bad}, "/bin/echo", "ran")
			if r.code != 125 || strings.Contains(r.stdout, "ran") || !strings.Contains(r.stderr, "must not contain ..") ||
				strings.Contains(r.stderr, "run as root") || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
				t.Errorf("%s --cgroup-parent %s: want exit 125 and one line saying why\n%s", rt, bad, r)
			}
		}
		if r := run(t, opts{}, []string{"--runtime", rt, "--cgroup-parent", parent}, "/bin/echo", "ran"); r.code != 0 || r.stdout != "ran\n" {
			t.Errorf("%s control --cgroup-parent %s:\n%s", rt, parent, r)
		}
	}
	if left := leftUnder(dirs); len(left) > 0 {
		t.Errorf("cgroups left under the parent: %q", left)
	}
}

// TestKernelFSNotWritable: a workspace or a writable bind on one of the
// host kernel's own filesystems (/proc, /sys) is refused on every backend
// before anything starts: on gVisor `--bind /sys/kernel/mm:/mnt/mm:rw` let
// the sandbox write the host's transparent_hugepage settings. Controls: the
// same sysfs directory bound read-only is readable and not writable
// (gVisor; native cannot idmap sysfs at all), and a writable bind of an
// ordinary directory is written.
func TestKernelFSNotWritable(t *testing.T) {
	need(t)
	if _, err := os.Stat("/sys/kernel/mm/transparent_hugepage/defrag"); err != nil {
		t.Skip("no /sys/kernel/mm/transparent_hugepage here")
	}
	runtimes := []string{"native"}
	if backends()[gvisor.Name] == "" {
		runtimes = append(runtimes, gvisor.Name)
	}
	before, _ := os.ReadFile("/sys/kernel/mm/transparent_hugepage/defrag")
	for _, rt := range runtimes {
		for _, c := range []struct {
			flags []string
			want  string
		}{
			{[]string{"--workspace", "/proc"}, "workspace /proc is on the host kernel's proc filesystem"},
			{[]string{"--workspace", "/sys/kernel/mm", "--workspace-mode", "live"}, "workspace /sys/kernel/mm is on the host kernel's sysfs filesystem"},
			{[]string{"--bind", "/sys/kernel/mm:/mnt/mm:rw"}, "writable bind source /sys/kernel/mm is on the host kernel's sysfs"},
		} {
			r := run(t, opts{}, append([]string{"--runtime", rt}, c.flags...), "sh", "-c", "echo never > /mnt/mm/transparent_hugepage/defrag; echo ran")
			if r.code != 125 || strings.Contains(r.stdout, "ran") || !strings.Contains(r.stderr, c.want) || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
				t.Errorf("%s %v: want exit 125 and %q\n%s", rt, c.flags, c.want, r)
			}
		}
		if rt == gvisor.Name {
			r := run(t, opts{}, []string{"--runtime", rt, "--bind", "/sys/kernel/mm:/mnt/mm"}, "sh", "-c", "cat /mnt/mm/transparent_hugepage/defrag && ! echo never 2>/dev/null > /mnt/mm/transparent_hugepage/defrag")
			if r.code != 0 || r.stdout != string(before) {
				t.Errorf("%s control, read-only sysfs bind: want it read and not written\n%s", rt, r)
			}
		}
		dir := t.TempDir()
		os.Chmod(dir, 0o777)
		if r := run(t, opts{}, []string{"--runtime", rt, "--bind", dir + ":/mnt/d:rw"}, "sh", "-c", "echo ok > /mnt/d/f"); r.code != 0 {
			t.Errorf("%s control, writable bind of a directory:\n%s", rt, r)
		} else if b, _ := os.ReadFile(filepath.Join(dir, "f")); string(b) != "ok\n" {
			t.Errorf("%s control: wrote %q", rt, b)
		}
	}
	if after, _ := os.ReadFile("/sys/kernel/mm/transparent_hugepage/defrag"); string(after) != string(before) {
		t.Errorf("the host's defrag setting changed: %q -> %q", before, after)
	}
}
