//go:build linux

package serve

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/api"
)

// hostPids lists the host's processes whose command line contains marker.
func hostPids(marker string) []string {
	var pids []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Contains(b, []byte(marker)) {
			pids = append(pids, e.Name())
		}
	}
	return pids
}

// A PTY process's terminal is the daemon's: it cannot be served again after
// a daemon restart. One that outlives the restart (it ignores the hangup) is
// killed and recorded as ended with the reason, not listed as running
// forever; one that died of the hangup meanwhile gets the same reason.
// Control: a background (non-TTY) process started at the same time is
// re-adopted and keeps running; a new PTY works after the restart.
func TestPTYAcrossRestart(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		t.Run(sig.String(), func(t *testing.T) { testPTYAcrossRestart(t, sig) })
	}
}

func testPTYAcrossRestart(t *testing.T, sig syscall.Signal) {
	d := startDaemon(t, "")
	ctx := ctxT(t)
	sb := d.create(t, nil)
	marker := fmt.Sprintf("pty-restart-%d", sig)
	stubborn, err := d.c.PTY(ctx, sb.ID, api.PTYStart{ExecRequest: api.ExecRequest{
		Argv: []string{"sh", "-c", "trap '' HUP; echo ready; while :; do sleep 1; done", marker + "-stubborn"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer stubborn.Close()
	buf := make([]byte, 256)
	var seen bytes.Buffer
	for !strings.Contains(seen.String(), "ready") {
		n, err := stubborn.Read(buf)
		if err != nil {
			t.Fatalf("pty output before %q: %v", seen.String(), err)
		}
		seen.Write(buf[:n])
	}
	plain, err := d.c.PTY(ctx, sb.ID, api.PTYStart{ExecRequest: api.ExecRequest{Argv: []string{"sh", "-c", "read x", marker + "-plain"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	go io.Copy(io.Discard, plain)
	bg, err := d.c.StartProcess(ctx, sb.ID, &api.ExecRequest{Argv: []string{"sh", "-c", "while :; do sleep 1; done", marker + "-background"}})
	if err != nil {
		t.Fatal(err)
	}
	var ptys []api.Process
	eventually(t, 10*time.Second, "two PTY processes listed", func() bool {
		ptys = ptys[:0]
		list, _ := d.c.ListProcesses(ctx, sb.ID)
		for _, p := range list {
			if p.TTY && p.State == api.ProcessRunning {
				ptys = append(ptys, p)
			}
		}
		return len(ptys) == 2
	})
	if len(hostPids(marker+"-stubborn")) == 0 || len(hostPids(marker+"-plain")) == 0 {
		t.Fatal("the PTY processes are not running before the restart")
	}

	d.restart(sig)

	for _, p := range ptys {
		var got *api.Process
		eventually(t, 20*time.Second, "PTY process "+p.ID+" to end after the restart", func() bool {
			got, err = d.c.GetProcess(ctx, sb.ID, p.ID)
			return err == nil && got.State == api.ProcessExited
		})
		if got.Signal == 0 || !strings.Contains(got.EndReason, "terminal") || !strings.Contains(got.EndReason, "restart") {
			t.Errorf("PTY process %s after the restart: %+v, want killed by a signal with the reason", p.ID, got)
		}
	}
	eventually(t, 20*time.Second, "no PTY process left on the host", func() bool {
		return len(hostPids(marker+"-stubborn")) == 0 && len(hostPids(marker+"-plain")) == 0
	})
	// Control: the background process is still running, and PTYs work.
	if got, err := d.c.GetProcess(ctx, sb.ID, bg.ID); err != nil || got.State != api.ProcessRunning || got.EndReason != "" {
		t.Fatalf("background process after the restart: %+v %v", got, err)
	}
	if len(hostPids(marker+"-background")) == 0 {
		t.Fatal("the background process is gone from the host")
	}
	s, err := d.c.PTY(ctx, sb.ID, api.PTYStart{ExecRequest: api.ExecRequest{Argv: []string{"sh", "-c", "exit 3"}}})
	if err != nil {
		t.Fatal(err)
	}
	go io.Copy(io.Discard, s)
	if exit, err := s.Wait(); err != nil || exit.ExitCode != 3 {
		t.Fatalf("a PTY after the restart: %+v %v", exit, err)
	}
	s.Close()
}
