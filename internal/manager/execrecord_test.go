package manager

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/internal/store"
)

// storedProc polls the store (bounded) until process pid of sandbox id
// has a record that ok accepts, and returns the last one read.
func storedProc(t *testing.T, m *Manager, id, pid string, ok func(*store.Process) bool) *store.Process {
	t.Helper()
	n, err := strconv.ParseUint(strings.TrimPrefix(pid, "p"), 10, 64)
	if err != nil {
		t.Fatalf("process id %q: %v", pid, err)
	}
	var r *store.Process
	for i := 0; i < 200; i++ {
		r, _ = m.st.GetProcess(context.Background(), id, n)
		if r != nil && ok(r) {
			return r
		}
		time.Sleep(10 * time.Millisecond)
	}
	return r
}

// An exec's record is in the store however soon its command ends: a
// command that ends within collectWait is stored once, ended (its start is
// not stored first); one that runs longer is stored while it runs, as a
// started process is; and the stored record is the ended one even when
// the start's deferred write and the end's race (commands that end right
// around collectWait).
func TestExecStoresItsRecord(t *testing.T) {
	m := liveManager(t)
	ctx := context.Background()
	sbv, err := m.Create(ctx, &api.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Delete(context.Background(), sbv.ID)
	ended := func(r *store.Process) bool { return r.EndedAt != nil }

	res, err := m.Exec(ctx, sbv.ID, &api.ExecRequest{Argv: []string{"sh", "-c", "echo hi; exit 4"}})
	if err != nil || res.ExitCode != 4 || string(res.Stdout) != "hi\n" {
		t.Fatalf("exec: %+v %v", res, err)
	}
	if r := storedProc(t, m, sbv.ID, res.ProcessID, ended); r == nil || r.EndedAt == nil || r.ExitCode == nil || *r.ExitCode != 4 {
		t.Fatalf("stored record of a quick exec: %+v", r)
	}

	// Runs for 2 s: stored while it runs.
	done := make(chan api.ExecResult, 1)
	go func() {
		r, _ := m.Exec(ctx, sbv.ID, &api.ExecRequest{Argv: []string{"sleep", "2"}})
		done <- r
	}()
	var pid string
	for i := 0; i < 100 && pid == ""; i++ {
		ps, _ := m.RunningProcesses(ctx, sbv.ID)
		for _, p := range ps {
			if len(p.Argv) > 0 && p.Argv[0] == "sleep" {
				pid = p.ID
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	if pid == "" {
		t.Fatal("the running exec is not listed")
	}
	if r := storedProc(t, m, sbv.ID, pid, func(*store.Process) bool { return true }); r == nil || r.EndedAt != nil {
		t.Fatalf("stored record of a running exec: %+v", r)
	}
	res = <-done
	if r := storedProc(t, m, sbv.ID, pid, ended); r == nil || r.EndedAt == nil || res.ExitCode != 0 {
		t.Fatalf("stored record of that exec after its end: %+v (exec %+v)", r, res)
	}

	// Ends around collectWait: both writes happen, the last one stored
	// is the end.
	for i := 0; i < 10; i++ {
		d := collectWait + time.Duration(i-5)*time.Millisecond
		res, err := m.Exec(ctx, sbv.ID, &api.ExecRequest{Argv: []string{"sleep", strconv.FormatFloat(d.Seconds(), 'f', 3, 64)}})
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond) // both writes are done by now
		if r := storedProc(t, m, sbv.ID, res.ProcessID, ended); r == nil || r.EndedAt == nil {
			t.Fatalf("exec of sleep %v: stored record %+v", d, r)
		}
	}
}
