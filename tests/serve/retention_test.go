package serve

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/client"
)

// TestFinishedOutputRetention: a sandbox that runs many commands does not
// keep every finished command's output (the agent's memory, charged to the
// sandbox): after 40 commands of 1 MiB of output each, the newest one's
// output is still read back whole, and the first one's answers not found
// with a message that says why (it used to be kept for the sandbox's
// life, every command's up to 1 MiB per stream).
func TestFinishedOutputRetention(t *testing.T) {
	need(t)
	d := startDaemon(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sb, err := d.c.CreateSandbox(ctx, &api.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.c.DeleteSandbox(context.Background(), sb.ID)
	// Background processes (what `airlock exec` and the SDKs' streaming
	// use): their output stays in the agent for readers that come later.
	var first, last string
	for i := 0; i < 40; i++ {
		p, err := d.c.StartProcess(ctx, sb.ID, &api.ExecRequest{Argv: []string{"head", "-c", "1048576", "/dev/zero"}})
		if err != nil {
			t.Fatalf("start %d: %v", i, err)
		}
		if i == 0 {
			first = p.ID
		}
		last = p.ID
		if p, err = d.c.WaitProcess(ctx, sb.ID, p.ID, time.Minute); err != nil || p.ExitCode == nil || *p.ExitCode != 0 {
			t.Fatalf("wait %d: %v %+v", i, err, p)
		}
	}
	if procs, err := d.c.ListProcesses(ctx, sb.ID); err != nil || len(procs) < 40 {
		t.Fatalf("processes: %d, %v (every one stays listed)", len(procs), err)
	}
	readAll := func(pid string) (int, error) {
		s, err := d.c.Output(ctx, sb.ID, pid, client.OutputOptions{})
		if err != nil {
			return 0, err
		}
		n := 0
		for {
			ev, err := s.Next()
			if err == io.EOF {
				return n, nil
			}
			if err != nil {
				return n, err
			}
			n += len(ev.Data)
		}
	}
	if n, err := readAll(last); err != nil || n != 1<<20 {
		t.Fatalf("the newest command's output (%s): %d bytes, %v; want 1 MiB", last, n, err)
	}
	_, err = readAll(first)
	var ae *client.Error
	if !errors.Is(err, client.ErrNotFound) || !errors.As(err, &ae) || !strings.Contains(ae.Message, "dropped") {
		t.Fatalf("the first command's output (%s): %v; want not found, saying it was dropped", first, err)
	}
}
