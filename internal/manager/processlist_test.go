package manager

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/api"
)

// startMany makes a manager that keeps only 5 finished processes of a
// sandbox whole (the rest from the store) and a sandbox in it, starts long
// long-running processes there, then runs n quick commands to their end.
func startMany(t testing.TB, long, n int) (*Manager, string, []string) {
	t.Helper()
	keep := keepFinishedProcs
	t.Cleanup(func() { keepFinishedProcs = keep })
	keepFinishedProcs = 5
	m := liveManager(t)
	ctx := context.Background()
	sbv, err := m.Create(ctx, &api.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Delete(context.Background(), sbv.ID) })
	var running []string
	for i := 0; i < long; i++ {
		p, err := m.Start(ctx, sbv.ID, &api.ExecRequest{Argv: []string{"sleep", "300"}})
		if err != nil {
			t.Fatal(err)
		}
		running = append(running, p.ID)
	}
	for i := 0; i < n; i++ {
		if r, err := m.Exec(ctx, sbv.ID, &api.ExecRequest{Argv: []string{"true"}}); err != nil || r.ExitCode != 0 {
			t.Fatalf("exec %d: %v %+v", i, err, r)
		}
	}
	return m, sbv.ID, running
}

// RunningProcesses lists exactly the processes that have not ended, from
// memory, however many ended before (most of them only in the store);
// Processes, the control, lists them all.
func TestRunningProcesses(t *testing.T) {
	m, id, running := startMany(t, 2, 30)
	ctx := context.Background()
	ids := func(ps []api.Process) string {
		var out []string
		for _, p := range ps {
			out = append(out, p.ID+"/"+p.State)
		}
		return fmt.Sprint(out)
	}
	got, err := m.RunningProcesses(ctx, id)
	if want := fmt.Sprint([]string{running[0] + "/running", running[1] + "/running"}); err != nil || ids(got) != want {
		t.Fatalf("running processes: %s %v, want %s", ids(got), err, want)
	}
	all, err := m.Processes(ctx, id)
	if err != nil || len(all.Processes) != 32 {
		t.Fatalf("all processes: %d %v, want 32", len(all.Processes), err)
	}
	if err := m.Signal(ctx, id, running[0], "KILL"); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Wait(ctx, id, running[0], time.Minute); err != nil {
		t.Fatal(err)
	}
	got, err = m.RunningProcesses(ctx, id)
	if want := fmt.Sprint([]string{running[1] + "/running"}); err != nil || ids(got) != want {
		t.Fatalf("running processes after a kill: %s %v, want %s", ids(got), err, want)
	}
	if _, err := m.RunningProcesses(ctx, "sb-0000000000000000"); err == nil {
		t.Fatal("running processes of no sandbox: no error")
	}
}

// BenchmarkProcessList: the cost of listing a sandbox's processes with one
// running and 1,000 ended (5 kept whole): all of them (Processes, which
// reads the store), and the running ones only (RunningProcesses, what the
// E2B API's list answers).
func BenchmarkProcessList(b *testing.B) {
	m, id, _ := startMany(b, 1, 1000)
	ctx := context.Background()
	b.Run("all", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if l, err := m.Processes(ctx, id); err != nil || len(l.Processes) != 1001 {
				b.Fatal(len(l.Processes), err)
			}
		}
	})
	b.Run("running", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if l, err := m.RunningProcesses(ctx, id); err != nil || len(l) != 1 {
				b.Fatal(len(l), err)
			}
		}
	})
}
