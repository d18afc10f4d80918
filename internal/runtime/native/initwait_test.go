//go:build linux

package native_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/policy"
)

// threadsIn counts the threads of this process that sleep in the kernel
// function wchan (e.g. do_wait: in wait4 or waitid).
func threadsIn(t *testing.T, wchan string) int {
	t.Helper()
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, tk := range tasks {
		b, _ := os.ReadFile("/proc/self/task/" + tk.Name() + "/wchan")
		if string(b) == wchan {
			n++
		}
	}
	return n
}

// children lists the pids of this process's children, zombies included.
func children(t *testing.T) []string {
	t.Helper()
	tasks, _ := os.ReadDir("/proc/self/task")
	var out []string
	for _, tk := range tasks {
		b, _ := os.ReadFile("/proc/self/task/" + tk.Name() + "/children")
		out = append(out, strings.Fields(string(b))...)
	}
	return out
}

// TestInitWaitHoldsNoThread: the supervisor waits for each sandbox's init
// through its pidfd in the runtime's poller, not in a wait4 that blocks a
// thread of its own for the sandbox's life (a daemon with 500 sandboxes
// had 500 such threads); the init is still reaped when it ends. The
// control: a process waited for with a blocking wait (os/exec) is seen in
// do_wait by the same probe.
func TestInitWaitHoldsNoThread(t *testing.T) {
	needRoot(t)
	if _, err := os.Stat("/proc/self/task/" + fmt.Sprint(os.Getpid()) + "/wchan"); err != nil {
		t.Skipf("no wchan in /proc: %v", err)
	}
	// The control.
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	seen := false
	for i := 0; i < 500 && !seen; i++ { // 5 s at most
		seen = threadsIn(t, "do_wait") > 0
		if !seen {
			time.Sleep(10 * time.Millisecond)
		}
	}
	cmd.Process.Kill()
	<-done
	if !seen {
		t.Fatal("control: no thread seen in do_wait while os/exec waits for sleep; the probe cannot see blocking waits")
	}

	const n = 3
	var pids []string
	before := map[string]bool{}
	for _, p := range children(t) {
		before[p] = true
	}
	sbs := make([]interface{ Destroy(context.Context) error }, 0, n)
	for i := 0; i < n; i++ {
		sb := newSandbox(t, &policy.Policy{})
		// A round trip through each: its init is up and serving, and the
		// goroutine that waits for it has long been started.
		if out, st := run(t, sb, "/bin/true"); st.Code != 0 {
			t.Fatalf("true in sandbox %d: %+v %s", i, st, out)
		}
		sbs = append(sbs, sb)
	}
	for _, p := range children(t) {
		if !before[p] {
			pids = append(pids, p)
		}
	}
	if len(pids) < n {
		t.Fatalf("found %d new children (%v) for %d sandbox inits", len(pids), pids, n)
	}
	if got := threadsIn(t, "do_wait"); got != 0 {
		t.Errorf("%d threads of the supervisor block in wait4/waitid with %d sandboxes, want none", got, n)
	}
	// Reaped when they end: Destroy waits for the exit, and no init stays
	// a zombie child of this process.
	for _, sb := range sbs {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if err := sb.Destroy(ctx); err != nil {
			t.Error(err)
		}
		cancel()
	}
	left := map[string]bool{}
	for _, p := range children(t) {
		left[p] = true
	}
	for _, p := range pids {
		if left[p] {
			st, _ := os.ReadFile("/proc/" + p + "/stat")
			t.Errorf("sandbox init %s is still a child after Destroy: %s", p, st)
		}
	}
}
