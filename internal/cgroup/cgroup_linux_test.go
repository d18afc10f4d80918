package cgroup

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

var testSeq atomic.Int64

// needCgroups skips unless the test runs as root on a host with usable
// cgroups, and returns the layout.
func needCgroups(t *testing.T) *layout {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to create cgroups")
	}
	info := Detect()
	if info.Reason != "" {
		t.Skipf("cgroups not usable here: %s", info.Reason)
	}
	lo, err := readLayout()
	if err != nil {
		t.Skip(err)
	}
	return lo
}

// hierarchyBases returns the directories New uses as base for parent "".
func hierarchyBases(t *testing.T, lo *layout) []string {
	t.Helper()
	if lo.version() == V2 {
		b, err := v2Base(lo.v2, "")
		if err != nil {
			t.Fatal(err)
		}
		return []string{b}
	}
	var out []string
	for _, c := range v1Wanted {
		if m := lo.v1[c]; m != nil && !contains(out, m.point) {
			d, err := hierDir(m, "/")
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, d)
		}
	}
	return out
}

// testTop returns a fresh top-level test cgroup name and removes it (in
// every hierarchy) when the test ends.
func testTop(t *testing.T, lo *layout) string {
	t.Helper()
	top := fmt.Sprintf("airlock-test-%d-%d", os.Getpid(), testSeq.Add(1))
	bases := hierarchyBases(t, lo)
	t.Cleanup(func() {
		for _, b := range bases {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			if err := removeTree(ctx, filepath.Join(b, top)); err != nil {
				t.Errorf("cleanup: %v", err)
			}
			cancel()
		}
	})
	return top
}

func newT(t *testing.T, parent, name string, l Limits) *Cgroup {
	t.Helper()
	cg, err := New(parent, name, l)
	if err != nil {
		t.Fatalf("New(%q, %q, %+v): %v", parent, name, l, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := cg.Destroy(ctx); err != nil {
			t.Errorf("Destroy: %v", err)
		}
	})
	return cg
}

func readTrim(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(data))
}

// startIn starts args with its stdin as a gate: the process is moved into
// cg before it is let go, so everything it runs is limited from the start.
func startIn(t *testing.T, cg *Cgroup, script string) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", "read gate; "+script)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	gate, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if err := cg.Add(cmd.Process.Pid); err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatal(err)
	}
	if _, err := gate.Write([]byte("go\n")); err != nil {
		t.Fatal(err)
	}
	gate.Close()
	return cmd, &out
}

func killedBySIGKILL(err error) bool {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

func TestLimitsReadBack(t *testing.T) {
	lo := needCgroups(t)
	top := testTop(t, lo)
	l := Limits{Memory: 64 << 20, Swap: 16 << 20, Pids: 42, CPU: 1.5}
	cg := newT(t, "", top+"/limits", l)
	switch cg.Version() {
	case V1:
		want := map[string]string{
			"memory/memory.limit_in_bytes":       "67108864",
			"memory/memory.memsw.limit_in_bytes": "83886080",
			"pids/pids.max":                      "42",
			"cpu/cpu.cfs_quota_us":               "150000",
			"cpu/cpu.cfs_period_us":              "100000",
		}
		for k, v := range want {
			ctl, file, _ := strings.Cut(k, "/")
			if got := readTrim(t, filepath.Join(cg.dirOf(ctl), file)); got != v {
				t.Errorf("%s = %s, want %s", k, got, v)
			}
		}
		if _, ok := cg.FD(); ok {
			t.Error("FD on v1 reported ok")
		}
	case V2:
		dir := cg.Paths()[0]
		want := map[string]string{"memory.max": "67108864", "memory.swap.max": "16777216", "pids.max": "42", "cpu.max": "150000 100000"}
		for f, v := range want {
			if got := readTrim(t, filepath.Join(dir, f)); got != v {
				t.Errorf("%s = %s, want %s", f, got, v)
			}
		}
	}
	for _, p := range cg.Paths() {
		if !strings.HasSuffix(p, "/"+top+"/limits") {
			t.Errorf("path %s", p)
		}
	}
	if cg.Version() == V1 && len(cg.Paths()) < 4 {
		t.Errorf("v1 paths %v: want memory, pids, cpu and freezer", cg.Paths())
	}
}

func TestProcessKillDestroy(t *testing.T) {
	lo := needCgroups(t)
	top := testTop(t, lo)
	cg := newT(t, "", top+"/kill", Limits{Pids: 100})
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	if err := cg.Add(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	pids, err := cg.Procs()
	if err != nil || len(pids) != 1 || pids[0] != cmd.Process.Pid {
		t.Fatalf("Procs = %v, %v; want [%d]", pids, err, cmd.Process.Pid)
	}
	if err := cg.Freeze(); err != nil {
		t.Fatalf("Freeze: %v", err)
	}
	if err := cg.Thaw(); err != nil {
		t.Fatalf("Thaw: %v", err)
	}
	if err := cg.Kill(); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if !killedBySIGKILL(err) {
			t.Fatalf("Wait = %v, want killed by SIGKILL", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("process not killed within 10s")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := cg.Destroy(ctx); err != nil {
		t.Fatalf("Destroy: %v", err)
	}
	for _, p := range cg.Paths() {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s still exists after Destroy (%v)", p, err)
		}
	}
	if err := cg.Destroy(ctx); err != nil {
		t.Fatalf("second Destroy: %v", err)
	}
	if cg.OOMKilled() {
		t.Error("OOMKilled after a plain kill")
	}
}

// Destroy of a cgroup left with a child cgroup in one directory (no
// process): the directories rmdir removes at once go, the one with the
// child takes the careful path, child first; nothing is left and a second
// Destroy is a no-op.
func TestDestroyLeftChild(t *testing.T) {
	lo := needCgroups(t)
	top := testTop(t, lo)
	cg := newT(t, "", top+"/child", Limits{})
	paths := cg.Paths()
	sub := filepath.Join(paths[len(paths)-1], "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := cg.Destroy(ctx); err != nil {
		t.Fatalf("Destroy: %v", err)
	}
	for _, p := range append(paths, sub) {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s still exists after Destroy (%v)", p, err)
		}
	}
	if err := cg.Destroy(ctx); err != nil {
		t.Fatalf("second Destroy: %v", err)
	}
}

// Destroy alone kills a whole process tree that is still running.
func TestDestroyKillsTree(t *testing.T) {
	lo := needCgroups(t)
	top := testTop(t, lo)
	cg := newT(t, "", top+"/tree", Limits{})
	cmd, _ := startIn(t, cg, "for i in 1 2 3 4 5; do sleep 60 & done; wait")
	deadline := time.Now().Add(5 * time.Second)
	for {
		pids, _ := cg.Procs()
		if len(pids) == 6 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Procs = %v, want 6 processes", pids)
		}
		time.Sleep(10 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := cg.Destroy(ctx); err != nil {
		t.Fatalf("Destroy: %v", err)
	}
	if err := cmd.Wait(); !killedBySIGKILL(err) {
		t.Fatalf("Wait = %v, want SIGKILL", err)
	}
}

func TestPidsLimit(t *testing.T) {
	lo := needCgroups(t)
	const script = `i=0; while [ $i -lt 50 ]; do sleep 5 & i=$((i+1)); done; echo started $i`
	for _, tc := range []struct {
		pids int64
		fail bool
	}{{10, true}, {100, false}} {
		t.Run(fmt.Sprint(tc.pids), func(t *testing.T) {
			top := testTop(t, lo)
			cg := newT(t, "", top+"/pids", Limits{Pids: tc.pids})
			cmd, out := startIn(t, cg, script)
			err := cmd.Wait()
			t.Logf("pids=%d: err=%v out=%q", tc.pids, err, out.String())
			if tc.fail {
				if err == nil || strings.Contains(out.String(), "started 50") {
					t.Fatalf("50 forks succeeded under pids.max=%d", tc.pids)
				}
				if !strings.Contains(strings.ToLower(out.String()), "fork") {
					t.Errorf("output does not mention the fork failure: %q", out.String())
				}
			} else if err != nil || !strings.Contains(out.String(), "started 50") {
				t.Fatalf("control with pids.max=%d failed: %v %q", tc.pids, err, out.String())
			}
		})
	}
}

func TestMemoryOOM(t *testing.T) {
	lo := needCgroups(t)
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not installed")
	}
	script := python + ` -c 'a=bytearray(300*1024*1024); import time; time.sleep(1)'`
	t.Run("64MiB", func(t *testing.T) {
		top := testTop(t, lo)
		cg := newT(t, "", top+"/oom", Limits{Memory: 64 << 20, Swap: 0})
		cmd, out := startIn(t, cg, "exec "+script)
		err := cmd.Wait()
		if !killedBySIGKILL(err) {
			t.Fatalf("Wait = %v (%q), want killed by the OOM killer", err, out.String())
		}
		if !cg.OOMKilled() {
			t.Fatal("OOMKilled() = false after an OOM kill")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := cg.Destroy(ctx); err != nil {
			t.Fatal(err)
		}
		if !cg.OOMKilled() {
			t.Fatal("OOMKilled() = false after Destroy")
		}
	})
	t.Run("1GiB", func(t *testing.T) {
		top := testTop(t, lo)
		cg := newT(t, "", top+"/nooom", Limits{Memory: 1 << 30, Swap: 0})
		cmd, out := startIn(t, cg, "exec "+script)
		if err := cmd.Wait(); err != nil {
			t.Fatalf("control failed: %v %q", err, out.String())
		}
		if cg.OOMKilled() {
			t.Fatal("OOMKilled() = true without an OOM")
		}
	})
}

func TestFailureLeavesNothing(t *testing.T) {
	lo := needCgroups(t)
	top := testTop(t, lo)
	bases := hierarchyBases(t, lo)
	// pids.max beyond PID_MAX_LIMIT: the kernel rejects it after the
	// directories exist and the memory limit is written.
	for _, l := range []Limits{{Memory: 64 << 20, Pids: 1 << 40}, {Memory: 64 << 20, Swap: 1 << 20, Pids: 10, CPU: 2e6}} {
		if _, err := New("", top+"/bad", l); err == nil {
			t.Fatalf("New accepted %+v", l)
		} else {
			t.Logf("%+v: %v", l, err)
		}
		for _, b := range bases {
			if _, err := os.Stat(filepath.Join(b, top, "bad")); !os.IsNotExist(err) {
				t.Errorf("%s left behind (%v)", filepath.Join(b, top, "bad"), err)
			}
			// The intermediate directory New created is gone too.
			if _, err := os.Stat(filepath.Join(b, top)); !os.IsNotExist(err) {
				t.Errorf("%s left behind (%v)", filepath.Join(b, top), err)
			}
		}
	}
	// An existing leaf is an error and is not removed.
	cg := newT(t, "", top+"/dup", Limits{})
	if _, err := New("", top+"/dup", Limits{}); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Fatalf("duplicate New: %v", err)
	}
	for _, p := range cg.Paths() {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("duplicate New removed %s: %v", p, err)
		}
	}
}

func TestSweep(t *testing.T) {
	lo := needCgroups(t)
	top := testTop(t, lo)
	mk := func(id string) *Cgroup {
		cg, err := New(top, Prefix+"/"+id, Limits{})
		if err != nil && id == "old" {
			// The parent must exist: create it through a first cgroup.
			t.Fatal(err)
		}
		if err != nil {
			t.Fatal(err)
		}
		return cg
	}
	// New(parent) needs the parent: create it.
	if _, err := New("", top+"/"+Prefix+"/seed", Limits{}); err != nil {
		t.Fatal(err)
	}
	old := mk("old")
	busy := mk("busy")
	t.Cleanup(func() { _ = busy.Destroy(context.Background()) })
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	if err := busy.Add(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	saved := SweepGrace
	SweepGrace = 700 * time.Millisecond
	defer func() { SweepGrace = saved }()
	time.Sleep(SweepGrace + 200*time.Millisecond)
	young := mk("young")
	n, err := Sweep(top)
	if err != nil {
		t.Fatal(err)
	}
	// seed and old are empty and old enough.
	if n != 2 {
		t.Errorf("Sweep removed %d, want 2 (seed, old)", n)
	}
	for _, p := range old.Paths() {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("old %s kept (%v)", p, err)
		}
	}
	for _, cg := range []*Cgroup{young, busy} {
		for _, p := range cg.Paths() {
			if _, err := os.Stat(p); err != nil {
				t.Errorf("%s removed: %v", p, err)
			}
		}
	}
	// Destroy of a swept cgroup is fine.
	if err := old.Destroy(context.Background()); err != nil {
		t.Errorf("Destroy after Sweep: %v", err)
	}
	if err := young.Destroy(context.Background()); err != nil {
		t.Error(err)
	}
}

// Concurrent New calls share the intermediate directory; failing ones clean
// up after themselves without breaking the others.
func TestConcurrentNew(t *testing.T) {
	lo := needCgroups(t)
	top := testTop(t, lo)
	const n = 16
	errs := make(chan error, n)
	cgs := make(chan *Cgroup, n)
	for i := 0; i < n; i++ {
		go func(i int) {
			l := Limits{Pids: 10}
			if i%2 == 1 {
				l.Pids = 1 << 40 // rejected by the kernel
			}
			cg, err := New("", fmt.Sprintf("%s/%s/%d", top, Prefix, i), l)
			if i%2 == 1 {
				if err == nil {
					err = fmt.Errorf("New %d accepted an invalid limit", i)
					cgs <- cg
				} else {
					err = nil
				}
			} else if err == nil {
				cgs <- cg
			}
			errs <- err
		}(i)
	}
	for i := 0; i < n; i++ {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	close(cgs)
	got := 0
	for cg := range cgs {
		got++
		if err := cg.Destroy(context.Background()); err != nil {
			t.Error(err)
		}
	}
	if got != n/2 {
		t.Errorf("%d cgroups created, want %d", got, n/2)
	}
}

// Open finds the cgroup New made from its paths alone, and the reopened
// handle controls it (kills its processes, destroys it); a path outside the
// hierarchies is refused.
func TestOpenAdopts(t *testing.T) {
	lo := needCgroups(t)
	cg, err := New("", testTop(t, lo)+"/open", Limits{Memory: 64 << 20, Pids: 32})
	if err != nil {
		t.Fatal(err)
	}
	defer cg.Destroy(context.Background())
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if err := cg.Add(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	again, err := Open(cg.Paths())
	if err != nil {
		t.Fatal(err)
	}
	if procs, _ := again.Procs(); len(procs) != 1 || procs[0] != cmd.Process.Pid {
		t.Fatalf("reopened cgroup lists %v, want [%d]", procs, cmd.Process.Pid)
	}
	if err := again.Destroy(context.Background()); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	for _, p := range cg.Paths() {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s still exists after the reopened handle destroyed it", p)
		}
	}
	if _, err := Open([]string{"/tmp"}); err == nil {
		t.Error("Open(/tmp) succeeded")
	}
}
