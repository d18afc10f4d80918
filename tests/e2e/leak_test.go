//go:build linux

package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// mountCount counts the host's mounts that are airlock's: those whose
// mount point lies under one of its directories (/run/airlock/...,
// /var/lib/airlock/..., /var/cache/airlock/...). Mounts other programs make
// meanwhile (another test's daemon volumes, runsc) do not count.
func mountCount(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(string(b), "\n") {
		// The tmpfs on /run/airlock itself is made once and kept (see
		// internal/rundir).
		if f := strings.Fields(line); len(f) > 4 && strings.Contains(f[4]+"/", "/airlock/") && f[4] != "/run/airlock" {
			n++
		}
	}
	return n
}

// ourProcesses lists the processes running the binary under test.
func ourProcesses() []string {
	var out []string
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		if exe, err := os.Readlink(d + "/exe"); err == nil && strings.TrimSuffix(exe, " (deleted)") == airlockBin {
			out = append(out, filepath.Base(d))
		}
	}
	return out
}

// R14: many create/exec/destroy cycles leave nothing behind.
func TestLeaks(t *testing.T) {
	needRoot(t)
	if testing.Short() {
		t.Skip("-short: skipping 200 runs")
	}
	mustOK(t, run(t, opts{}, nil, "true"), "warm-up") // etc cache, sweep
	mounts := mountCount(t)
	procs := ourProcesses()
	const n = 200
	ids := make([]string, 0, n)
	deadline := time.Now().Add(3 * time.Minute) // a hang guard, not a speed check
	for i := 0; i < n && time.Now().Before(deadline); i++ {
		r := run(t, opts{}, []string{"-v"}, "true")
		if r.code != 0 {
			t.Fatalf("run %d\n%s", i, r)
		}
		m := sandboxIDRE.FindStringSubmatch(r.stderr)
		if m == nil {
			t.Fatalf("run %d: no sandbox id in -v output\n%s", i, r)
		}
		ids = append(ids, m[1])
	}
	if len(ids) < n {
		t.Logf("only %d runs within the guard", len(ids))
	}
	if got := mountCount(t); got != mounts {
		t.Errorf("host mounts: %d before, %d after %d runs", mounts, got, len(ids))
	}
	if p := ourProcesses(); len(p) != len(procs) {
		t.Errorf("processes of the airlock binary: %v before, %v after", procs, p)
	}
	cgs, _ := filepath.Glob("/sys/fs/cgroup/*/airlock/*")
	cgs2, _ := filepath.Glob("/sys/fs/cgroup/airlock/*")
	cgs = append(cgs, cgs2...)
	leaked := map[string]bool{}
	for _, id := range ids {
		leaked[id] = true
	}
	for _, c := range cgs {
		if leaked[filepath.Base(c)] {
			t.Errorf("cgroup left behind: %s", c)
		}
	}
	for _, id := range ids {
		if _, err := os.Stat("/run/airlock/" + id); err == nil {
			t.Errorf("state dir left behind: /run/airlock/%s", id)
		}
	}
	// Control for the oracles: while a sandbox runs they do see it.
	b := start(t, opts{}, "run", "-v", "--", "sleep", "30")
	id, paths := b.cgroupPaths(t)
	if _, err := os.Stat("/run/airlock/" + id); err != nil {
		t.Errorf("control: state dir of a running sandbox not found: %v", err)
	}
	for _, p := range paths {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("control: cgroup of a running sandbox not found: %v", err)
		}
	}
	if !poll(5*time.Second, func() bool { return len(ourProcesses()) > len(procs) }) {
		t.Errorf("control: the running sandbox's init is not seen as a process of the binary")
	}
	b.cmd.Process.Signal(os.Interrupt)
	b.wait(t, 30*time.Second)
}
