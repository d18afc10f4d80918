//go:build linux

package native_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/policy"
	"github.com/airlock-dev/airlock/internal/runtime"
	"github.com/airlock-dev/airlock/internal/runtime/native"
	"github.com/airlock-dev/airlock/internal/sandbox"
)

// detachedChildEnv makes the test binary act as a supervisor that creates a
// detached sandbox, starts a long process in it, prints the sandbox id and
// dies without destroying anything (the daemon crash of the adoption test).
const detachedChildEnv = "AIRLOCK_TEST_DETACHED_CHILD"

func detachedChild(stateRoot, exe string, detached bool) {
	spec, err := sandbox.Spec(&policy.Policy{}, sandbox.Opts{})
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	rt := &native.Runtime{Exe: exe, StateRoot: stateRoot, Detached: detached, Reaper: true}
	sb, err := rt.Create(context.Background(), spec)
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	null, _ := os.Open(os.DevNull)
	env, _ := sandbox.Env(&policy.Policy{}, nil, false, os.LookupEnv)
	if _, err := sb.Exec(context.Background(), &runtime.ExecRequest{
		Argv: []string{"/bin/sh", "-c", "echo kept > /tmp/state; exec sleep 1000"}, Env: env, Dir: "/", Stdin: null, Stdout: null, Stderr: null,
	}); err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	// Let the process write its file before this supervisor "crashes".
	time.Sleep(200 * time.Millisecond)
	fmt.Println("id", sb.ID())
	os.Exit(0)
}

// runDetachedChild runs the crashing supervisor and returns the sandbox id.
func runDetachedChild(t *testing.T, stateRoot string, detached bool) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, "-test.run=^$")
	cmd.Env = append(os.Environ(), detachedChildEnv+"="+stateRoot+":"+airlockBin+":"+fmt.Sprint(detached))
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("supervisor child: %v\n%s", err, out)
	}
	id, ok := strings.CutPrefix(strings.TrimSpace(string(out)), "id ")
	if !ok {
		t.Fatalf("supervisor child said %q", out)
	}
	return id
}

// TestAdoptAfterSupervisorDeath: a detached sandbox keeps running when its
// supervisor dies; a new supervisor adopts it, finds its process and its
// files, runs more in it, signals the old process, and destroys it all.
// The control is an ordinary sandbox, which dies with its supervisor and
// cannot be adopted.
func TestAdoptAfterSupervisorDeath(t *testing.T) {
	needRoot(t)
	rt := privateRuntime(t)
	rt.Detached = true
	id := runDetachedChild(t, rt.StateRoot, true)
	// A failing test must not leave a detached sandbox running.
	t.Cleanup(func() {
		if sb, _, err := rt.Adopt(context.Background(), id); err == nil {
			sb.Destroy(context.Background())
		}
	})

	sb, state, err := rt.Adopt(context.Background(), id)
	if err != nil {
		t.Fatalf("adopt: %v", err)
	}
	if len(state.Running) != 1 || state.MaxID < 1 {
		t.Fatalf("agent state after adoption: %+v, want the one sleeping process", state)
	}
	if out, st := run(t, sb, "/bin/cat", "/tmp/state"); out != "kept\n" || st.Code != 0 {
		t.Fatalf("adopted sandbox lost its files: %q %+v", out, st)
	}
	p, ok := sb.(interface {
		Process(uint64) (runtime.Process, bool)
	}).Process(state.Running[0].ID)
	if !ok {
		t.Fatal("the running process is not known after adoption")
	}
	if err := p.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if st, err := p.Wait(ctx); err != nil || st.Signal != 2 {
		t.Fatalf("old process after SIGINT: %+v %v", st, err)
	}
	paths := sb.Info().CgroupPaths
	if err := sb.Destroy(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, p := range append(paths, filepath.Join(rt.StateRoot, id)) {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s left after destroying the adopted sandbox", p)
		}
	}
	if _, _, err := rt.Adopt(context.Background(), id); !errors.Is(err, native.ErrNotAdoptable) {
		t.Errorf("adopting a destroyed sandbox: %v", err)
	}

	// Control: without Detached the sandbox ends with its supervisor (and
	// its reaper cleans up); it cannot be adopted.
	plain := privateRuntime(t)
	id = runDetachedChild(t, plain.StateRoot, false)
	if _, _, err := plain.Adopt(context.Background(), id); !errors.Is(err, native.ErrNotAdoptable) {
		t.Errorf("adopting a sandbox that was not detached: %v", err)
	}
	dir := filepath.Join(plain.StateRoot, id)
	for i := 0; i < 100; i++ {
		if _, err := os.Stat(dir); os.IsNotExist(err) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("control: %s left after its supervisor died", dir)
	}
}
