//go:build linux

package serve

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/client"
)

// TestSandboxLifecycle walks one sandbox through every state and call.
func TestSandboxLifecycle(t *testing.T) {
	d := startDaemon(t, "")
	ctx := ctxT(t)
	sb := d.create(t, &api.CreateSandboxRequest{
		Labels:         map[string]string{"team": "a", "run": "1"},
		Env:            map[string]string{"GREETING": "hello"},
		Files:          []api.File{{Path: "src/main.py", Content: []byte("print('hi')\n"), Mode: 0o600}, {Path: "/tmp/abs.txt", Content: []byte("abs")}},
		TimeoutSeconds: 600,
	})
	if sb.State != api.StateRunning || !strings.HasPrefix(sb.ID, "sb-") || sb.ExpiresAt == nil {
		t.Fatalf("created: %+v", sb)
	}
	if d := time.Until(*sb.ExpiresAt); d < 590*time.Second || d > 601*time.Second {
		t.Fatalf("expires in %v, want about 600s", d)
	}
	// Initial files, environment, the working directory.
	if got := d.sh(t, sb.ID, `cat src/main.py /tmp/abs.txt; stat -c %a src/main.py; echo "$GREETING $PWD"`); got != "print('hi')\nabs600\nhello /workspace\n" {
		t.Fatalf("files/env: %q", got)
	}
	// Get and list with filters; a second sandbox with other labels.
	other := d.create(t, &api.CreateSandboxRequest{Labels: map[string]string{"team": "b"}})
	got, err := d.c.GetSandbox(ctx, sb.ID)
	if err != nil || got.Labels["team"] != "a" || got.State != api.StateRunning {
		t.Fatalf("get: %+v %v", got, err)
	}
	list, err := d.c.ListSandboxes(ctx, client.ListOptions{Labels: map[string]string{"team": "a"}})
	if err != nil || len(list.Sandboxes) != 1 || list.Sandboxes[0].ID != sb.ID {
		t.Fatalf("list by label: %+v %v", list, err)
	}
	all, err := d.c.AllSandboxes(ctx, client.ListOptions{States: []string{api.StateRunning}})
	if err != nil || len(all) != 2 {
		t.Fatalf("list running: %d %v", len(all), err)
	}
	// Extend the timeout.
	ext, err := d.c.SetTimeout(ctx, sb.ID, time.Hour)
	if err != nil || time.Until(*ext.ExpiresAt) < 59*time.Minute {
		t.Fatalf("set timeout: %+v %v", ext, err)
	}
	_, err = d.c.SetTimeout(ctx, sb.ID, 100*24*time.Hour)
	wantCode(t, "timeout past the maximum lifetime", err, http.StatusBadRequest)

	// Pause: processes stop (a counter does not advance), exec is refused;
	// resume: it advances again and exec works.
	if _, err := d.c.StartProcess(ctx, sb.ID, &api.ExecRequest{Argv: []string{"sh", "-c", "i=0; while :; do i=$((i+1)); echo $i > /tmp/n; sleep 0.05; done"}}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	p, err := d.c.Pause(ctx, sb.ID)
	if err != nil || p.State != api.StatePaused {
		t.Fatalf("pause: %+v %v", p, err)
	}
	_, err = d.c.Exec(ctx, sb.ID, &api.ExecRequest{Argv: []string{"true"}})
	wantCode(t, "exec while paused", err, http.StatusConflict)
	_, err = d.c.Pause(ctx, sb.ID)
	wantCode(t, "pause twice", err, http.StatusConflict)
	if _, err := d.c.Resume(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	n1 := d.sh(t, sb.ID, "cat /tmp/n")
	time.Sleep(300 * time.Millisecond)
	if n2 := d.sh(t, sb.ID, "cat /tmp/n"); n1 == n2 {
		t.Fatalf("counter did not advance after resume: %q", n1)
	}
	_, err = d.c.Resume(ctx, sb.ID)
	wantCode(t, "resume a running sandbox", err, http.StatusConflict)

	// Delete: gone from the API, from the host's state directory.
	if err := d.c.DeleteSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	_, err = d.c.GetSandbox(ctx, sb.ID)
	if !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("get after delete: %v", err)
	}
	err = d.c.DeleteSandbox(ctx, sb.ID)
	wantCode(t, "delete twice", err, http.StatusNotFound)
	for _, e := range d.stateEntries() {
		if "sb-"+e == sb.ID {
			t.Fatalf("state of %s left on the host", sb.ID)
		}
	}
	if err := d.c.DeleteSandbox(ctx, other.ID); err != nil {
		t.Fatal(err)
	}
	if left := d.stateEntries(); len(left) != 0 {
		t.Fatalf("state left: %v", left)
	}
}

// TestTTLAndIdle: a sandbox is stopped at its TTL, another after its idle
// timeout even while a client reads its state back to back (watching is
// not using), a third with a running process is not idle, and a fourth
// used by an exec at a steady pace is not either (the control).
func TestTTLAndIdle(t *testing.T) {
	d := startDaemon(t, "")
	ctx := ctxT(t)
	ttl := d.create(t, &api.CreateSandboxRequest{TimeoutSeconds: 1})
	idle := d.create(t, &api.CreateSandboxRequest{IdleTimeoutSeconds: 1})
	busy := d.create(t, &api.CreateSandboxRequest{IdleTimeoutSeconds: 1})
	// Three seconds of slack between uses: the pace below is ten times
	// that, so a slow exec on a loaded machine does not end it.
	used := d.create(t, &api.CreateSandboxRequest{IdleTimeoutSeconds: 3})
	if _, err := d.c.StartProcess(ctx, busy.ID, &api.ExecRequest{Argv: []string{"sleep", "30"}}); err != nil {
		t.Fatal(err)
	}
	stopped := func(id, reason string) func() bool {
		return func() bool {
			sb, err := d.c.GetSandbox(ctx, id)
			return err == nil && sb.State == api.StateStopped && strings.Contains(sb.Reason, reason)
		}
	}
	// Bounds against a hang, not speed: on a loaded machine the reaper's
	// pass and the stop itself can take seconds.
	limit := time.Now().Add(time.Minute)
	for !stopped(idle.ID, "idle")() {
		if time.Now().After(limit) {
			t.Fatalf("timed out after 1m0s waiting for the idle stop of a sandbox only read")
		}
		if _, err := d.c.Exec(ctx, used.ID, &api.ExecRequest{Argv: []string{"true"}}); err != nil {
			t.Fatalf("the used sandbox: %v", err)
		}
		time.Sleep(300 * time.Millisecond)
	}
	if sb, err := d.c.GetSandbox(ctx, used.ID); err != nil || sb.State != api.StateRunning {
		t.Fatalf("used sandbox: %+v %v", sb, err)
	}
	eventually(t, time.Minute, "TTL expiry", stopped(ttl.ID, "timeout"))
	if sb, err := d.c.GetSandbox(ctx, busy.ID); err != nil || sb.State != api.StateRunning {
		t.Fatalf("busy sandbox: %+v %v", sb, err)
	}
	// A stopped sandbox keeps its record but holds nothing on the host.
	_, err := d.c.Exec(ctx, ttl.ID, &api.ExecRequest{Argv: []string{"true"}})
	wantCode(t, "exec in a stopped sandbox", err, http.StatusConflict)
	eventually(t, 30*time.Second, "state removed", func() bool {
		for _, e := range d.stateEntries() {
			if "sb-"+e == ttl.ID || "sb-"+e == idle.ID {
				return false
			}
		}
		return true
	})
}

// TestDeletePaused: deleting a paused sandbox (with a background process)
// ends it and leaves nothing: no state directory, no cgroup, no process.
// The control: the same sandbox, resumed, runs commands before the pause.
func TestDeletePaused(t *testing.T) {
	d := startDaemon(t, "")
	ctx := ctxT(t)
	sb := d.create(t, nil)
	if out := d.sh(t, sb.ID, "echo up"); out != "up\n" {
		t.Fatalf("control: %q", out)
	}
	rids := d.stateEntries()
	if len(rids) != 1 {
		t.Fatalf("state entries: %v", rids)
	}
	var cgs []string
	for _, pat := range []string{"/sys/fs/cgroup/*/airlock*/" + rids[0], "/sys/fs/cgroup/*/airlock*/*/" + rids[0], "/sys/fs/cgroup/airlock*/" + rids[0]} {
		m, _ := filepath.Glob(pat)
		cgs = append(cgs, m...)
	}
	if len(cgs) == 0 {
		t.Fatalf("control: no cgroup named %s found", rids[0])
	}
	if _, err := d.c.StartProcess(ctx, sb.ID, &api.ExecRequest{Argv: []string{"sleep", "600"}}); err != nil {
		t.Fatal(err)
	}
	if p, err := d.c.Pause(ctx, sb.ID); err != nil || p.State != api.StatePaused {
		t.Fatalf("pause: %+v %v", p, err)
	}
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := d.c.DeleteSandbox(dctx, sb.ID); err != nil {
		t.Fatalf("delete of a paused sandbox: %v", err)
	}
	_, err := d.c.GetSandbox(ctx, sb.ID)
	wantCode(t, "get after delete", err, http.StatusNotFound)
	eventually(t, 10*time.Second, "the state directory to go", func() bool { return len(d.stateEntries()) == 0 })
	for _, cg := range cgs {
		if _, err := os.Stat(cg); err == nil {
			t.Errorf("cgroup left behind: %s", cg)
		}
	}
}
