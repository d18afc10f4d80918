package cgroup

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestEnterThread: a process forked from a thread that entered the cgroup
// starts in it, in every hierarchy; the thread alone moves (its process
// is listed only while the thread is inside) and leave puts it back where
// it was; Kill while the thread is inside kills the child and spares the
// caller.
func TestEnterThread(t *testing.T) {
	lo := needCgroups(t)
	if lo.version() != V1 {
		t.Skip("EnterThread is for cgroup v1 (v2 clones into the cgroup)")
	}
	cg := newT(t, "", testTop(t, lo)+"/thread", Limits{Memory: 256 << 20, Pids: 64})
	before, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}

	type result struct {
		cmd             *exec.Cmd
		inside, outside []int
		thread, back    string
		err             error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		var r result
		defer func() { ch <- r }()
		leave, err := cg.EnterThread()
		if err != nil {
			r.err = err
			return
		}
		b, _ := os.ReadFile("/proc/thread-self/cgroup")
		r.thread = string(b)
		r.inside, _ = cg.Procs()
		r.cmd = exec.Command("sleep", "60")
		if r.err = r.cmd.Start(); r.err != nil {
			leave()
			return
		}
		if r.err = leave(); r.err != nil {
			return
		}
		b, _ = os.ReadFile("/proc/thread-self/cgroup")
		r.back = string(b)
		r.outside, _ = cg.Procs()
	}()
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	defer func() { r.cmd.Process.Kill(); r.cmd.Wait() }()
	child := r.cmd.Process.Pid
	for _, d := range cg.dirs {
		path, ok := threadPath(r.thread, d.controllers[0])
		if want, _ := filepath.Rel(d.mnt.point, d.dir); !ok || path != "/"+want {
			t.Errorf("the thread inside: %s cgroup %q, want /%s", d.controllers[0], path, want)
		}
		cb, _ := os.ReadFile("/proc/" + strconv.Itoa(child) + "/cgroup")
		if cp, _ := threadPath(string(cb), d.controllers[0]); cp != path {
			t.Errorf("the forked child's %s cgroup: %q, want %q", d.controllers[0], cp, path)
		}
	}
	if !slices.Contains(r.inside, os.Getpid()) {
		t.Errorf("while the thread was inside, Procs = %v: want this process (%d) listed", r.inside, os.Getpid())
	}
	if !slices.Equal(r.outside, []int{child}) {
		t.Errorf("after leave, Procs = %v: want only the child %d", r.outside, child)
	}
	if r.back != string(before) {
		t.Errorf("after leave the thread is in\n%s\nwant where the process is:\n%s", r.back, before)
	}

	// Kill, while a thread of the caller is inside, kills the child and
	// spares the caller.
	inside, release := make(chan error, 1), make(chan struct{})
	left := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		leave, err := cg.EnterThread()
		inside <- err
		if err != nil {
			return
		}
		<-release
		left <- leave()
	}()
	if err := <-inside; err != nil {
		t.Fatal(err)
	}
	kerr := cg.Kill()
	close(release)
	if err := <-left; err != nil {
		t.Fatalf("leave after Kill: %v", err)
	}
	if kerr != nil {
		t.Errorf("Kill with the caller's thread inside: %v", kerr)
	}
	done := make(chan error, 1)
	go func() { done <- r.cmd.Wait() }()
	select {
	case err := <-done:
		if !killedBySIGKILL(err) {
			t.Errorf("the child after Kill: %v, want killed by SIGKILL", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the child outlived Kill")
	}
}

// TestForkInThread: what the function forks starts in the cgroup, this
// process is not a member afterwards, and a thread the function says is not
// reusable ends; with no cgroup the child starts where this process is.
func TestForkInThread(t *testing.T) {
	lo := needCgroups(t)
	if lo.version() != V1 {
		t.Skip("ForkInThread moves a thread on cgroup v1 only (v2 clones into the cgroup)")
	}
	cg := newT(t, "", testTop(t, lo)+"/forkin", Limits{Memory: 256 << 20, Pids: 64})
	start := func(c *Cgroup, reusable bool) (*exec.Cmd, int) {
		t.Helper()
		cmd := exec.Command("sleep", "60")
		var tid int
		var serr error
		enterErr, leaveErr := ForkInThread(c, func() bool {
			tid = unix.Gettid()
			serr = cmd.Start()
			return reusable
		})
		if enterErr != nil || leaveErr != nil || serr != nil {
			t.Fatalf("enter %v, leave %v, start %v", enterErr, leaveErr, serr)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		return cmd, tid
	}
	cmd, _ := start(cg, true)
	if procs, err := cg.Procs(); err != nil || !slices.Equal(procs, []int{cmd.Process.Pid}) {
		t.Errorf("Procs = %v %v: want only the child %d (this process not a member)", procs, err, cmd.Process.Pid)
	}
	_, tid := start(cg, false)
	if !ThreadGone(tid, 10*time.Second) {
		t.Errorf("thread %d (process %d), not reusable, still runs", tid, os.Getpid())
	}
	// The control: without a cgroup the child is not in cg.
	free, _ := start(nil, true)
	if procs, _ := cg.Procs(); slices.Contains(procs, free.Process.Pid) {
		t.Errorf("a child started with no cgroup is in the sandbox's: %v", procs)
	}
}
