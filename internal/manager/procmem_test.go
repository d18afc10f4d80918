//go:build linux

package manager

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	goruntime "runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/internal/buildtest"
	"github.com/airlock-dev/airlock/internal/errdefs"
	"github.com/airlock-dev/airlock/internal/runtime/native"
	"github.com/airlock-dev/airlock/internal/store"
)

var (
	airlockOnce sync.Once
	airlockBin  string
	airlockErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if airlockBin != "" {
		os.RemoveAll(filepath.Dir(airlockBin))
	}
	os.Exit(code)
}

// liveManager returns a manager over real native sandboxes (the airlock
// binary built once per test binary), recovered and ready, closed at the
// test's end; it skips without root.
func liveManager(t testing.TB) *Manager {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (the sandboxes use cgroups)")
	}
	if _, err := os.Stat("/proc/self/ns/user"); err != nil {
		t.Skip("user namespaces are not available")
	}
	airlockOnce.Do(func() {
		dir, err := os.MkdirTemp("", "airlock-manager-test-bin-")
		if err != nil {
			airlockErr = err
			return
		}
		os.Chmod(dir, 0o755)
		airlockBin = filepath.Join(dir, "airlock")
		airlockErr = buildtest.Airlock(airlockBin)
	})
	if airlockErr != nil {
		t.Fatalf("build airlock: %v", airlockErr)
	}
	ctx := context.Background()
	st, err := store.Open(ctx, filepath.Join(t.TempDir(), "airlock.db"))
	if err != nil {
		t.Fatal(err)
	}
	// Not t.TempDir: root inside the sandbox is another host uid that must
	// traverse the path.
	root, err := os.MkdirTemp("", "airlock-manager-test-state-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(root, 0o711)
	m, err := New(Config{Runtime: &native.Runtime{Exe: airlockBin, StateRoot: root}, Store: st, Metrics: NewMetrics()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		m.Close(context.Background(), false)
		st.Close()
		os.RemoveAll(root)
	})
	if err := m.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	return m
}

func heapInUse() uint64 {
	var ms goruntime.MemStats
	for range 2 {
		goruntime.GC()
	}
	goruntime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// BenchmarkFinishedProcessMemory reports the daemon's heap growth per
// finished command once a sandbox has run more than it keeps whole
// (heap-B/exec; it was ~900 when every process was kept) and the change
// in goroutines: go test -run XXX -bench FinishedProcessMemory
// -benchtime 2000x ./internal/manager/ (root). AIRLOCK_PROCMEM_PROFILE=FILE
// writes a heap profile of every allocation at the end.
func BenchmarkFinishedProcessMemory(b *testing.B) {
	if os.Getenv("AIRLOCK_PROCMEM_PROFILE") != "" {
		goruntime.MemProfileRate = 1
	}
	m := liveManager(b)
	ctx := context.Background()
	sb, err := m.Create(ctx, &api.CreateSandboxRequest{})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Delete(context.Background(), sb.ID)
	run := func(n int) {
		for i := 0; i < n; i++ {
			r, err := m.Exec(ctx, sb.ID, &api.ExecRequest{Argv: []string{"true"}})
			if err != nil || r.ExitCode != 0 {
				b.Fatalf("exec %d: %v %+v", i, err, r)
			}
		}
	}
	run(keepFinishedProcs + 50) // past what is kept whole
	base, gbase := heapInUse(), goruntime.NumGoroutine()
	b.ResetTimer()
	run(b.N)
	b.StopTimer()
	h := heapInUse()
	b.ReportMetric(float64(int64(h)-int64(base))/float64(b.N), "heap-B/exec")
	b.ReportMetric(float64(goruntime.NumGoroutine()-gbase), "goroutines-added")
	if ph := os.Getenv("AIRLOCK_PROCMEM_PROFILE"); ph != "" {
		f, _ := os.Create(ph)
		goruntime.GC()
		pprof.Lookup("heap").WriteTo(f, 0)
		f.Close()
	}
}

// TestFinishedProcessesLetGo: a sandbox keeps whole (the runtime's process,
// its output, its channels) only its running processes and the newest
// keepFinishedProcs finished ones; the older ones stay listed and GET-able
// with their exit from the store, their output answers not found saying
// why, and nothing holds their runtime process any more (its finalizer
// runs), while the kept ones' still serve output and are held (control).
func TestFinishedProcessesLetGo(t *testing.T) {
	defer func(n int) { keepFinishedProcs = n }(keepFinishedProcs)
	keepFinishedProcs = 20
	m := liveManager(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	sbv, err := m.Create(ctx, &api.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Delete(context.Background(), sbv.ID)
	sb, err := m.lookup(ctx, sbv.ID)
	if err != nil {
		t.Fatal(err)
	}
	// Background processes (output kept for later readers) and execs.
	const total, watched = 100, 60
	var freed atomic.Int32
	freedOne := make(chan struct{}, total)
	var keptFreed atomic.Int32
	ids := make([]string, 0, total)
	for i := 1; i <= total; i++ {
		argv := []string{"/bin/sh", "-c", fmt.Sprintf("echo out-%d; exit %d", i, i%7)}
		var pid string
		if i%3 == 0 {
			r, err := m.Exec(ctx, sbv.ID, &api.ExecRequest{Argv: argv})
			if err != nil || r.ExitCode != i%7 || string(r.Stdout) != fmt.Sprintf("out-%d\n", i) {
				t.Fatalf("exec %d: %v %+v", i, err, r)
			}
			pid = r.ProcessID
		} else {
			p, err := m.Start(ctx, sbv.ID, &api.ExecRequest{Argv: argv})
			if err != nil {
				t.Fatalf("start %d: %v", i, err)
			}
			pid = p.ID
			if v, err := m.Wait(ctx, sbv.ID, pid, time.Minute); err != nil || v.ExitCode == nil || *v.ExitCode != i%7 {
				t.Fatalf("wait %d: %v %+v", i, err, v)
			}
		}
		ids = append(ids, pid)
		n, _ := parseProcID(pid)
		sb.mu.Lock()
		p := sb.procs[n]
		sb.mu.Unlock()
		if p == nil || p.rp == nil {
			t.Fatalf("process %s (%d) is not kept right after it ended", pid, i)
		}
		switch {
		case i <= watched:
			goruntime.SetFinalizer(p.rp, func(any) { freed.Add(1); freedOne <- struct{}{} })
		case i > total-5:
			goruntime.SetFinalizer(p.rp, func(any) { keptFreed.Add(1) })
		}
	}

	// (b) The heavy state of all but the newest 20 finished is gone. The
	// newest may still be storing its end (Wait answers as it ends).
	// extra: the processes kept other than the finished ones counted.
	kept := func(allowed ...string) (finished int, dropped bool) {
		t.Helper()
		sb.mu.Lock()
		defer sb.mu.Unlock()
		counted := map[uint64]bool{}
		for _, id := range sb.finished {
			counted[id] = true
		}
		for id := range sb.procs {
			if !counted[id] && !slices.Contains(allowed, procID(id)) {
				t.Fatalf("process %s is kept but neither running nor among the newest finished", procID(id))
			}
		}
		for id := range counted {
			if sb.procs[id] == nil {
				t.Fatalf("finished process %s is counted but not kept", procID(id))
			}
		}
		return len(sb.finished), sb.dropped
	}
	if n, dropped := kept(ids[total-1]); n < keepFinishedProcs-1 || n > keepFinishedProcs || !dropped {
		t.Fatalf("the sandbox keeps %d finished processes (dropped %v), want %d", n, dropped, keepFinishedProcs)
	}
	deadline := time.After(30 * time.Second)
	for freed.Load() < watched {
		goruntime.GC()
		select {
		case <-freedOne:
		case <-time.After(time.Second):
		case <-deadline:
			t.Fatalf("%d of the %d oldest processes' runtime objects were released; something still holds the rest", freed.Load(), watched)
		}
	}
	goruntime.GC()
	goruntime.GC()
	if n := keptFreed.Load(); n != 0 {
		t.Fatalf("%d of the newest processes' runtime objects were released while kept", n)
	}

	// (a) Every process stays listed, with its exit, in order.
	list, err := m.Processes(ctx, sbv.ID)
	if err != nil || len(list.Processes) != total {
		t.Fatalf("list: %d processes, %v; want %d", len(list.Processes), err, total)
	}
	for i, p := range list.Processes {
		if p.ID != ids[i] || p.State != api.ProcessExited || p.ExitCode == nil || *p.ExitCode != (i+1)%7 || p.EndedAt == nil ||
			len(p.Argv) != 3 || p.Argv[2] != fmt.Sprintf("echo out-%d; exit %d", i+1, (i+1)%7) {
			t.Fatalf("listed process %d: %+v", i+1, p)
		}
	}
	for _, i := range []int{1, 2, 40, total - 20, total - 19, total} {
		p, err := m.Process(ctx, sbv.ID, ids[i-1])
		if err != nil || p.ID != ids[i-1] || p.State != api.ProcessExited || p.ExitCode == nil || *p.ExitCode != i%7 {
			t.Fatalf("process %d (%s): %+v %v", i, ids[i-1], p, err)
		}
		if w, err := m.Wait(ctx, sbv.ID, ids[i-1], time.Minute); err != nil || w.ExitCode == nil || *w.ExitCode != i%7 {
			t.Fatalf("wait on finished process %d: %+v %v", i, w, err)
		}
		if err := m.Signal(ctx, sbv.ID, ids[i-1], "TERM"); !errors.Is(err, errdefs.ErrConflict) {
			t.Fatalf("signal to finished process %d: %v, want a conflict", i, err)
		}
	}
	if _, err := m.Process(ctx, sbv.ID, "p999"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("a process that never was: %v, want not found", err)
	}

	// (c) The newest finished ones serve their output; the old ones say
	// it was dropped.
	output := func(pid string) (string, error) {
		var out strings.Builder
		exit := false
		err := m.Output(ctx, sbv.ID, pid, Cursor{}, false, func(ev api.OutputEvent) error {
			out.Write(ev.Data)
			exit = exit || ev.Kind == api.EventExit
			return nil
		})
		if err == nil && !exit {
			err = errors.New("no exit event")
		}
		return out.String(), err
	}
	for _, i := range []int{total - 19, total - 1} {
		if got, err := output(ids[i-1]); err != nil || got != fmt.Sprintf("out-%d\n", i) {
			t.Fatalf("output of kept process %d: %q %v", i, got, err)
		}
	}
	for _, i := range []int{1, total - 20} {
		got, err := output(ids[i-1])
		if !errors.Is(err, errdefs.ErrNotFound) || !strings.Contains(err.Error(), "dropped") || got != "" {
			t.Fatalf("output of let-go process %d: %q %v; want not found, saying it was dropped", i, got, err)
		}
	}

	// Still running processes are never let go: one started before 30
	// more finish is still kept, signalled and waited for.
	long, err := m.Start(ctx, sbv.ID, &api.ExecRequest{Argv: []string{"sleep", "600"}})
	if err != nil {
		t.Fatal(err)
	}
	last := ""
	for i := 0; i < 30; i++ {
		r, err := m.Exec(ctx, sbv.ID, &api.ExecRequest{Argv: []string{"true"}})
		if err != nil || r.ExitCode != 0 {
			t.Fatalf("exec: %v %+v", err, r)
		}
		last = r.ProcessID
	}
	if n, _ := kept(long.ID, last); n < keepFinishedProcs-1 || n > keepFinishedProcs {
		t.Fatalf("kept %d finished processes with one running, want %d", n, keepFinishedProcs)
	}
	if v, err := m.Process(ctx, sbv.ID, long.ID); err != nil || v.State != api.ProcessRunning {
		t.Fatalf("the long process: %+v %v", v, err)
	}
	if err := m.Signal(ctx, sbv.ID, long.ID, "TERM"); err != nil {
		t.Fatal(err)
	}
	if w, err := m.Wait(ctx, sbv.ID, long.ID, time.Minute); err != nil || w.Signal != 15 {
		t.Fatalf("the long process after TERM: %+v %v", w, err)
	}
}
