//go:build linux

package serve

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/client"
	"github.com/airlock-dev/airlock/internal/store"
)

// TestRestart restarts the daemon (SIGTERM, then SIGKILL) with sandboxes
// running, one paused, and processes in flight: nothing is lost. A sandbox
// whose init died while no daemon ran is marked failed, with its host state
// removed.
func TestRestart(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		t.Run(sig.String(), func(t *testing.T) { testRestart(t, sig) })
	}
}

func testRestart(t *testing.T, sig syscall.Signal) {
	d := startDaemon(t, "")
	ctx := ctxT(t)
	a := d.create(t, &api.CreateSandboxRequest{Labels: map[string]string{"n": "a"}})
	b := d.create(t, &api.CreateSandboxRequest{Labels: map[string]string{"n": "b"}})
	doomed := d.create(t, nil)
	d.sh(t, a.ID, "echo kept > /workspace/f")
	// In flight across the restart: a counter that runs 3 s, and one that
	// finishes while no daemon is up.
	long, err := d.c.StartProcess(ctx, a.ID, &api.ExecRequest{Argv: counting(30, "0.1")})
	if err != nil {
		t.Fatal(err)
	}
	short, err := d.c.StartProcess(ctx, a.ID, &api.ExecRequest{Argv: []string{"sh", "-c", "sleep 0.3; echo done; exit 4"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.c.Pause(ctx, b.ID); err != nil {
		t.Fatal(err)
	}
	// Read a little of the long process's output before the restart.
	var out bytes.Buffer
	s, err := d.c.Output(ctx, a.ID, long.ID, clientFollow(""))
	if err != nil {
		t.Fatal(err)
	}
	cursor := ""
	for out.Len() < 12 {
		ev, err := s.Next()
		if err != nil {
			t.Fatal(err)
		}
		if ev.Kind == api.EventStdout {
			out.Write(ev.Data)
		}
		cursor = ev.Cursor
	}
	s.Close()

	d.stop(sig)
	// While no daemon runs: the doomed sandbox's init is killed from the
	// host (found through its state file).
	initPid := statePid(t, d, doomed.ID)
	syscall.Kill(initPid, syscall.SIGKILL)
	time.Sleep(500 * time.Millisecond) // "short" finishes meanwhile
	d.start()

	got, err := d.c.GetSandbox(ctx, a.ID)
	if err != nil || got.State != api.StateRunning {
		t.Fatalf("a after restart: %+v %v", got, err)
	}
	got, err = d.c.GetSandbox(ctx, b.ID)
	if err != nil || got.State != api.StatePaused {
		t.Fatalf("b after restart: %+v %v", got, err)
	}
	got, err = d.c.GetSandbox(ctx, doomed.ID)
	if err != nil || got.State != api.StateFailed || !strings.Contains(got.Reason, "re-adopt") {
		t.Fatalf("doomed after restart: %+v %v", got, err)
	}
	for _, e := range d.stateEntries() {
		if "sb-"+e == doomed.ID {
			t.Fatal("the failed sandbox's state is still on the host")
		}
	}
	if _, err := os.Lstat(filepath.Join(d.dir, "data", "volumes", strings.TrimPrefix(doomed.ID, "sb-")+".img")); !os.IsNotExist(err) {
		t.Fatalf("the failed sandbox's workspace volume is still on the host (%v)", err)
	}
	// The process that ended while no daemon ran: its status is known.
	p, err := d.c.WaitProcess(ctx, a.ID, short.ID, 10*time.Second)
	if err != nil || p.ExitCode == nil || *p.ExitCode != 4 {
		t.Fatalf("short process: %+v %v", p, err)
	}
	// The long one: resume at the cursor; everything arrives exactly once.
	if err := d.c.FollowOutput(ctx, a.ID, long.ID, cursor, func(ev api.OutputEvent) error {
		if ev.Kind == api.EventStdout {
			out.Write(ev.Data)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	wo, _ := want(30)
	if out.String() != wo {
		t.Fatalf("output across the restart:\n%q\nwant\n%q", out.String(), wo)
	}
	// Files survive; the paused sandbox resumes and works.
	if f := d.sh(t, a.ID, "cat /workspace/f"); f != "kept\n" {
		t.Fatalf("file: %q", f)
	}
	if _, err := d.c.Resume(ctx, b.ID); err != nil {
		t.Fatal(err)
	}
	d.sh(t, b.ID, "true")
	// New process ids do not collide with the old ones.
	np, err := d.c.StartProcess(ctx, a.ID, &api.ExecRequest{Argv: []string{"true"}})
	if err != nil || np.ID == long.ID || np.ID == short.ID {
		t.Fatalf("new process %+v %v", np, err)
	}
}

func clientFollow(cursor string) client.OutputOptions {
	return client.OutputOptions{Cursor: cursor, Follow: true}
}

// statePid reads a sandbox's init pid from its state file on the host.
func statePid(t *testing.T, d *daemon, id string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(d.stateDir, strings.TrimPrefix(id, "sb-"), "state.json"))
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.Index(b, []byte(`"init":`))
	if i < 0 {
		t.Fatalf("no init pid in %s", b)
	}
	rest := b[i+len(`"init":`):]
	j := bytes.IndexAny(rest, ",}")
	pid, err := strconv.Atoi(strings.TrimSpace(string(rest[:j])))
	if err != nil || pid <= 1 {
		t.Fatalf("init pid in %s", b)
	}
	return pid
}

// TestRestartRemovesUnrecordedSandbox: the store's record of a sandbox is
// written while the runtime makes it, so a daemon killed in between can
// leave a sandbox on the host that the store does not know. The next daemon
// removes it (its init, state and volume), and keeps the recorded one.
func TestRestartRemovesUnrecordedSandbox(t *testing.T) {
	d := startDaemon(t, "")
	ctx := ctxT(t)
	kept := d.create(t, nil)
	lost := d.create(t, nil)
	d.stop(syscall.SIGKILL)
	initPid := statePid(t, d, lost.ID)
	// What a kill before the record's write leaves: no record at all.
	st, err := store.Open(ctx, filepath.Join(d.dir, "data", "airlock.db"))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.DeleteSandbox(ctx, lost.ID); err != nil {
		t.Fatal(err)
	}
	st.Close()
	d.start()

	if _, err := d.c.GetSandbox(ctx, lost.ID); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("the unrecorded sandbox after restart: %v, want not found", err)
	}
	for _, e := range d.stateEntries() {
		if "sb-"+e == lost.ID {
			t.Fatal("the unrecorded sandbox's state is still on the host")
		}
	}
	if _, err := os.Lstat(filepath.Join(d.dir, "data", "volumes", strings.TrimPrefix(lost.ID, "sb-")+".img")); !os.IsNotExist(err) {
		t.Fatalf("the unrecorded sandbox's workspace volume is still on the host (%v)", err)
	}
	eventually(t, 10*time.Second, "the unrecorded sandbox's init to be gone", func() bool {
		// Gone, or a zombie waiting for whoever adopted it to reap it.
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", initPid))
		return err != nil || strings.Contains(string(b), ") Z ")
	})
	// The control: the recorded sandbox was re-adopted and works.
	got, err := d.c.GetSandbox(ctx, kept.ID)
	if err != nil || got.State != api.StateRunning {
		t.Fatalf("the recorded sandbox after restart: %+v %v", got, err)
	}
	if out := d.sh(t, kept.ID, "echo ok"); out != "ok\n" {
		t.Fatalf("exec in the recorded sandbox: %q", out)
	}
}
