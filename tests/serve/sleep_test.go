//go:build linux

package serve

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/client"
)

// cmdline is a process's command line, its arguments joined by spaces.
func cmdline(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return strings.TrimSpace(string(bytes.ReplaceAll(b, []byte{0}, []byte{' '})))
}

// asleep: the sandbox's init is the sleeper.
func asleep(pid int) bool { return strings.HasPrefix(cmdline(pid), "airlock-hold __hold ") }

// waitAsleep waits until the init sleeps (or fails the test).
func waitAsleep(t *testing.T, pid int) {
	t.Helper()
	for i := 0; i < 300 && !asleep(pid); i++ {
		time.Sleep(50 * time.Millisecond)
	}
	if !asleep(pid) {
		t.Fatalf("the init (%d) did not sleep: %q", pid, cmdline(pid))
	}
}

// initSecured checks that PID 1 kept, across the execs, what the init
// applied to itself: no capability (bounding set included), no_new_privs,
// its seccomp filter. (Dumpable, which execve resets, is set again by each
// program, which exits if it cannot; the sandbox's root, the user
// namespace's owner on the host, sees through it from there, so it is
// checked from inside, below.)
func initSecured(t *testing.T, pid int, what string) {
	t.Helper()
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if !strings.Contains(string(b), "CapEff:\t0000000000000000") || !strings.Contains(string(b), "CapBnd:\t0000000000000000") || !strings.Contains(string(b), "NoNewPrivs:\t1") || !strings.Contains(string(b), "Seccomp:\t2") {
		t.Fatalf("%s: capabilities, no_new_privs or seccomp lost:\n%s", what, b)
	}
}

// outputOf reads a finished process's whole output.
func outputOf(t *testing.T, d *daemon, id, pid string) (stdout, stderr string) {
	t.Helper()
	s, err := d.c.Output(ctxT(t), id, pid, client.OutputOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var o, e strings.Builder
	for {
		ev, err := s.Next()
		if errors.Is(err, io.EOF) {
			return o.String(), e.String()
		}
		if err != nil {
			t.Fatal(err)
		}
		switch ev.Kind {
		case api.EventStdout:
			o.Write(ev.Data)
		case api.EventStderr:
			e.Write(ev.Data)
		case api.EventLost:
			t.Fatalf("output lost: %+v", ev)
		}
	}
}

// TestAgentSleeps: a sandbox with nothing running gives its agent's place
// as PID 1 to the sleeper after sleep_after without activity (one thread,
// a few pages), and every request wakes it: exec, files and output of
// processes that finished before it slept, which it carried. PID 1 keeps
// its hardening across both executions. Control: a sandbox with a
// process running (started by the API, or left behind by a command that
// ended) stays awake, and sleeps once it ended.
func TestAgentSleeps(t *testing.T) {
	need(t)
	d := startDaemon(t, "sleep_after: 1s\n")
	ctx := ctxT(t)
	a := d.create(t, nil)
	b := d.create(t, nil)
	c := d.create(t, nil)
	pidA, pidB, pidC := statePid(t, d, a.ID), statePid(t, d, b.ID), statePid(t, d, c.ID)
	// c: a process left behind by a command that ended, which the daemon
	// does not count as running; the agent sees it.
	d.sh(t, c.ID, "sleep 1000 </dev/null >/dev/null 2>&1 &")
	if got := d.sh(t, a.ID, "echo one"); got != "one\n" {
		t.Fatalf("exec: %q", got)
	}
	p, err := d.c.StartProcess(ctx, a.ID, &api.ExecRequest{Argv: []string{"sh", "-c", "echo kept-out; echo kept-err >&2; exit 3"}})
	if err != nil {
		t.Fatal(err)
	}
	if w, err := d.c.WaitProcess(ctx, a.ID, p.ID, time.Minute); err != nil || w.ExitCode == nil || *w.ExitCode != 3 {
		t.Fatalf("wait: %+v %v", w, err)
	}
	long, err := d.c.StartProcess(ctx, b.ID, &api.ExecRequest{Argv: []string{"sleep", "1000"}})
	if err != nil {
		t.Fatal(err)
	}

	waitAsleep(t, pidA)
	initSecured(t, pidA, "the sleeper")
	st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pidA))
	if !strings.Contains(string(st), "Threads:\t1\n") {
		t.Fatalf("the sleeper runs more than one thread:\n%s", st)
	}
	if got := d.metric(t, `airlock_sandboxes_asleep{runtime="native"}`); got != 1 {
		t.Errorf("airlock_sandboxes_asleep = %v, want 1", got)
	}
	// The control: b has a process running, through several rounds of
	// a's sleep_after.
	time.Sleep(2500 * time.Millisecond)
	if asleep(pidB) || asleep(pidC) {
		t.Fatalf("a sandbox with a process running slept: %v, one left behind: %v", asleep(pidB), asleep(pidC))
	}
	d.sh(t, c.ID, "kill $(pidof sleep)")
	waitAsleep(t, pidC)

	// Output kept across the sleep: the agent carried it.
	if o, e := outputOf(t, d, a.ID, p.ID); o != "kept-out\n" || e != "kept-err\n" {
		t.Fatalf("output after a sleep: %q %q", o, e)
	}
	if asleep(pidA) {
		t.Fatal("a request for output did not wake the agent")
	}
	initSecured(t, pidA, "the agent woken")
	if got := d.sh(t, a.ID, "echo two; grep Threads /proc/1/status"); !strings.HasPrefix(got, "two\nThreads:") {
		t.Fatalf("exec after waking: %q", got)
	}
	// Not dumpable once woken: its environment (like its memory) is out
	// of the sandbox's reach; the control, a process's own, is not.
	if got := d.sh(t, a.ID, "cat /proc/self/environ >/dev/null && echo own; cat /proc/1/environ 2>&1 >/dev/null | grep -c 'Permission denied'"); got != "own\n1\n" {
		t.Fatalf("PID 1's environment from inside after waking: %q", got)
	}

	// Asleep again: files wake it.
	waitAsleep(t, pidA)
	if err := d.c.WriteFile(ctx, a.ID, "/workspace/f", 0o644, strings.NewReader("data")); err != nil {
		t.Fatalf("write after a sleep: %v", err)
	}
	waitAsleep(t, pidA)
	if got := d.sh(t, a.ID, "cat /workspace/f"); got != "data" {
		t.Fatalf("file after sleeps: %q", got)
	}

	// A daemon killed while the agent sleeps: the channel's end wakes it,
	// and it waits for the next daemon, which adopts the sandbox, and it
	// sleeps again under that one.
	waitAsleep(t, pidA)
	d.restart(syscall.SIGKILL)
	if got := d.sh(t, a.ID, "cat /workspace/f"); got != "data" {
		t.Fatalf("after a restart: %q", got)
	}
	waitAsleep(t, pidA)
	if got := d.sh(t, a.ID, "echo three"); got != "three\n" {
		t.Fatalf("after a restart and a sleep: %q", got)
	}

	// b sleeps once its process ended.
	if err := d.c.Signal(ctx, b.ID, long.ID, "KILL"); err != nil {
		t.Fatal(err)
	}
	waitAsleep(t, pidB)

	// Destroyed asleep: nothing is left.
	if err := d.c.DeleteSandbox(ctx, b.ID); err != nil {
		t.Fatal(err)
	}
	// (Its parent was the first daemon: the host's init reaps it.)
	gone := func() bool {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pidB))
		return err != nil || strings.Contains(string(b), "State:\tZ")
	}
	for i := 0; i < 100 && !gone(); i++ {
		time.Sleep(50 * time.Millisecond)
	}
	if !gone() {
		t.Fatalf("the sleeper of a deleted sandbox runs: %q", cmdline(pidB))
	}
}
