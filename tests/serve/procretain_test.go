//go:build linux

package serve

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/client"
)

// TestFinishedProcessesFromStore: a sandbox that ran more commands than the
// daemon keeps whole (256 finished) still lists and answers for every one
// with its exit code, before and after a restart; the oldest one's output
// answers not found saying it was dropped, the newest one's is read back
// (control); a process running across the restart and one that ends while
// no daemon is up are still followed, signalled and waited for.
func TestFinishedProcessesFromStore(t *testing.T) {
	need(t)
	d := startDaemon(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	sb := d.create(t, nil)
	const total = 300
	ids := make([]string, 0, total)
	for i := 1; i <= total; i++ {
		p, err := d.c.StartProcess(ctx, sb.ID, &api.ExecRequest{Argv: []string{"sh", "-c", fmt.Sprintf("echo out-%d; exit %d", i, i%5)}})
		if err != nil {
			t.Fatalf("start %d: %v", i, err)
		}
		if p, err = d.c.WaitProcess(ctx, sb.ID, p.ID, time.Minute); err != nil || p.ExitCode == nil || *p.ExitCode != i%5 {
			t.Fatalf("wait %d: %v %+v", i, err, p)
		}
		ids = append(ids, p.ID)
	}
	readAll := func(pid string) (string, *int, error) {
		s, err := d.c.Output(ctx, sb.ID, pid, client.OutputOptions{})
		if err != nil {
			return "", nil, err
		}
		var out strings.Builder
		var code *int
		for {
			ev, err := s.Next()
			if err == io.EOF {
				return out.String(), code, nil
			}
			if err != nil {
				return out.String(), code, err
			}
			out.Write(ev.Data)
			if ev.Kind == api.EventExit {
				code = ev.ExitCode
			}
		}
	}
	check := func(when string, extra int) {
		t.Helper()
		list, err := d.c.ListProcesses(ctx, sb.ID)
		if err != nil || len(list) != total+extra {
			t.Fatalf("%s: %d processes listed, %v; want %d", when, len(list), err, total+extra)
		}
		for i, p := range list[:total] {
			if p.ID != ids[i] || p.State != api.ProcessExited || p.ExitCode == nil || *p.ExitCode != (i+1)%5 || p.EndedAt == nil {
				t.Fatalf("%s: listed process %d: %+v", when, i+1, p)
			}
		}
		for _, i := range []int{1, 2, total - 256, total - 255, total} {
			p, err := d.c.GetProcess(ctx, sb.ID, ids[i-1])
			if err != nil || p.State != api.ProcessExited || p.ExitCode == nil || *p.ExitCode != i%5 {
				t.Fatalf("%s: process %d (%s): %+v %v", when, i, ids[i-1], p, err)
			}
			if w, err := d.c.WaitProcess(ctx, sb.ID, ids[i-1], time.Minute); err != nil || w.ExitCode == nil || *w.ExitCode != i%5 {
				t.Fatalf("%s: wait on finished process %d: %+v %v", when, i, w, err)
			}
			if err := d.c.Signal(ctx, sb.ID, ids[i-1], "TERM"); !errors.Is(err, client.ErrConflict) {
				t.Fatalf("%s: signal to finished process %d: %v, want a conflict", when, i, err)
			}
		}
		if _, err := d.c.GetProcess(ctx, sb.ID, fmt.Sprintf("p%d", 10*total)); !errors.Is(err, client.ErrNotFound) {
			t.Fatalf("%s: a process that never was: %v, want not found", when, err)
		}
		_, _, err = readAll(ids[0])
		var ae *client.Error
		if !errors.Is(err, client.ErrNotFound) || !errors.As(err, &ae) || !strings.Contains(ae.Message, "dropped") || !strings.Contains(ae.Message, "stays listed") {
			t.Fatalf("%s: the first command's output (%s): %v; want not found, the daemon saying it was dropped", when, ids[0], err)
		}
	}
	check("before the restart", 0)
	if out, code, err := readAll(ids[total-1]); err != nil || out != fmt.Sprintf("out-%d\n", total) || code == nil || *code != total%5 {
		t.Fatalf("the newest command's output: %q, exit %v, %v", out, code, err)
	}

	// Across a restart: one process runs on, one ends while no daemon is up.
	long, err := d.c.StartProcess(ctx, sb.ID, &api.ExecRequest{Argv: []string{"sleep", "600"}})
	if err != nil {
		t.Fatal(err)
	}
	late, err := d.c.StartProcess(ctx, sb.ID, &api.ExecRequest{Argv: []string{"sh", "-c", "sleep 0.3; echo late; exit 3"}})
	if err != nil {
		t.Fatal(err)
	}
	d.restart(syscall.SIGTERM)
	check("after the restart", 2)
	if w, err := d.c.WaitProcess(ctx, sb.ID, late.ID, time.Minute); err != nil || w.ExitCode == nil || *w.ExitCode != 3 {
		t.Fatalf("the process that ended across the restart: %+v %v", w, err)
	}
	if out, code, err := readAll(late.ID); err != nil || out != "late\n" || code == nil || *code != 3 {
		t.Fatalf("its output after the restart: %q, exit %v, %v", out, code, err)
	}
	if p, err := d.c.GetProcess(ctx, sb.ID, long.ID); err != nil || p.State != api.ProcessRunning {
		t.Fatalf("the process running across the restart: %+v %v", p, err)
	}
	if err := d.c.Signal(ctx, sb.ID, long.ID, "TERM"); err != nil {
		t.Fatal(err)
	}
	if w, err := d.c.WaitProcess(ctx, sb.ID, long.ID, time.Minute); err != nil || w.Signal != 15 {
		t.Fatalf("the long process after TERM: %+v %v", w, err)
	}
	// New commands after the restart still run and serve output.
	r, err := d.c.Exec(ctx, sb.ID, &api.ExecRequest{Argv: []string{"sh", "-c", "echo again; exit 2"}})
	if err != nil || r.ExitCode != 2 || string(r.Stdout) != "again\n" {
		t.Fatalf("exec after the restart: %+v %v", r, err)
	}
	if list, err := d.c.ListProcesses(ctx, sb.ID); err != nil || len(list) != total+3 {
		t.Fatalf("after one more: %d processes, %v", len(list), err)
	}
}
