//go:build linux

package serve

import (
	"context"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/api"
)

// TestFollowersAcrossShutdown: a client following a process's output does
// not hold a SIGTERM shutdown for its grace period (the stream ends with
// "unavailable" when the shutdown begins), and it reconnects to the next
// daemon with its cursor: the whole output, once.
func TestFollowersAcrossShutdown(t *testing.T) {
	d := startDaemon(t, "")
	sb := d.create(t, nil)
	// It runs 30 s, longer than the 10 s grace period.
	pr, err := d.c.StartProcess(ctxT(t), sb.ID, &api.ExecRequest{Argv: counting(300, "0.1")})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var stdout strings.Builder
	got := func() string {
		mu.Lock()
		defer mu.Unlock()
		return stdout.String()
	}
	done := make(chan error, 1)
	fctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	go func() {
		done <- d.c.FollowOutput(fctx, sb.ID, pr.ID, "", func(ev api.OutputEvent) error {
			if ev.Kind == api.EventStdout {
				mu.Lock()
				stdout.Write(ev.Data)
				mu.Unlock()
			}
			return nil
		})
	}()
	eventually(t, 10*time.Second, "some output", func() bool { return got() != "" })
	d.restart(syscall.SIGTERM)
	if strings.Contains(d.Logs(), "after the grace period") {
		t.Error("a follower held the shutdown for its grace period")
	}
	// The follower goes on with the next daemon; then the process is
	// ended, and what was followed is every line up to there, once.
	n := strings.Count(got(), "\n")
	eventually(t, 10*time.Second, "output after the restart", func() bool { return strings.Count(got(), "\n") > n+3 })
	if err := d.c.Signal(ctxT(t), sb.ID, pr.ID, "KILL"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("follower: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the follower did not finish")
	}
	lines := strings.Count(got(), "\n")
	if wantOut, _ := want(lines); lines <= n || got() != wantOut {
		t.Fatalf("followed across the restart:\n%q\nwant\n%q", got(), wantOut)
	}
}
