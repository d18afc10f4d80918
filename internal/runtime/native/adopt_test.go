//go:build linux

package native_test

import (
	"context"
	"encoding/json"
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
	"github.com/airlock-dev/airlock/internal/sysfile"
	"golang.org/x/sys/unix"
)

// detachedChildEnv makes the test binary act as a supervisor that creates a
// detached sandbox, starts a long process in it, prints the sandbox id and
// dies without destroying anything (the daemon crash of the adoption test).
const detachedChildEnv = "AIRLOCK_TEST_DETACHED_CHILD"

// detachedChild is that supervisor. Mode "listen" gives the sandbox Spec.Listen sockets (which die with this
// supervisor); "squat" also starts a process inside that binds
// 127.0.0.1:3128 as soon as this supervisor's listener is gone.
func detachedChild(stateRoot, exe string, detached bool, mode string) {
	spec, err := sandbox.Spec(&policy.Policy{}, sandbox.Opts{})
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	if mode != "" {
		spec.Listen = []string{"127.0.0.1:3128", "[::1]:1080"}
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
	// A captured process whose output outlives this supervisor.
	if _, err := sb.Exec(context.Background(), &runtime.ExecRequest{
		Argv: []string{"/bin/sh", "-c", "echo one; sleep 0.5; echo two; echo err >&2"}, Env: env, Dir: "/", Capture: true,
	}); err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	if mode == "squat" {
		if _, err := sb.Exec(context.Background(), &runtime.ExecRequest{
			Argv: []string{"python3", "-c", squatter}, Env: env, Dir: "/", Stdin: null, Stdout: null, Stderr: null,
		}); err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
	}
	// Let the process write its file before this supervisor "crashes".
	time.Sleep(200 * time.Millisecond)
	fmt.Println("id", sb.ID())
	os.Exit(0)
}

// runDetachedChild runs the crashing supervisor and returns the sandbox id.
func runDetachedChild(t *testing.T, stateRoot string, detached bool) string {
	t.Helper()
	return runDetachedChildMode(t, stateRoot, detached, "")
}

// runDetachedChildMode is runDetachedChild with a mode of detachedChild.
func runDetachedChildMode(t *testing.T, stateRoot string, detached bool, mode string) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, "-test.run=^$")
	cmd.Env = append(os.Environ(), detachedChildEnv+"="+stateRoot+":"+airlockBin+":"+fmt.Sprint(detached)+":"+mode)
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
	// A failing test must not leave a detached sandbox running: the
	// adopted sandbox is destroyed (the agent takes one supervisor at a
	// time, so adopting it again would fail while it is held).
	var adopted runtime.Sandbox
	t.Cleanup(func() {
		if adopted != nil {
			adopted.Destroy(context.Background())
		} else if sb, _, err := rt.Adopt(context.Background(), id); err == nil {
			sb.Destroy(context.Background())
		}
	})

	sb, state, err := rt.Adopt(context.Background(), id)
	if err != nil {
		t.Fatalf("adopt: %v", err)
	}
	adopted = sb
	if len(state.Running) != 2 || state.MaxID != 2 {
		t.Fatalf("agent state after adoption: %+v, want the sleeping and the captured process", state)
	}
	// The captured process's output, written partly before and partly
	// after its supervisor died, is all there, from cursor 0.
	finder := sb.(interface {
		Process(uint64) (runtime.Process, bool)
	})
	captured, ok := finder.Process(2)
	if !ok {
		t.Fatal("the captured process is not known after adoption")
	}
	if got := readAll(t, captured, 1); got != "one\ntwo\n" {
		t.Errorf("captured stdout after adoption: %q", got)
	}
	if got := readAll(t, captured, 2); got != "err\n" {
		t.Errorf("captured stderr after adoption: %q", got)
	}
	if out, st := run(t, sb, "/bin/cat", "/tmp/state"); out != "kept\n" || st.Code != 0 {
		t.Fatalf("adopted sandbox lost its files: %q %+v", out, st)
	}
	p, ok := finder.Process(1)
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

// readAll reads a captured stream from the start to its end.
func readAll(t *testing.T, p runtime.Process, stream int) string {
	t.Helper()
	r := p.(runtime.OutputReader)
	var out []byte
	var cursor uint64
	for i := 0; i < 100; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		c, err := r.ReadOutput(ctx, stream, cursor, 0, 2*time.Second)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if c.From != cursor {
			t.Fatalf("lost %d bytes at %d", c.From-cursor, cursor)
		}
		out = append(out, c.Data...)
		cursor = c.Next()
		if c.EOF {
			return string(out)
		}
	}
	t.Fatalf("no end of stream %d after 100 reads: %q", stream, out)
	return ""
}

// TestCapturedOutput: captured output is read in order from any cursor;
// a reader that falls more than the buffer behind learns how much it lost;
// stdout and stderr stay apart.
func TestCapturedOutput(t *testing.T) {
	needRoot(t)
	sb := newSandbox(t, &policy.Policy{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	env, _ := sandbox.Env(&policy.Policy{}, nil, false, os.LookupEnv)
	p, err := sb.Exec(ctx, &runtime.ExecRequest{Argv: []string{"/bin/sh", "-c", "echo first; echo warn >&2; echo last"}, Env: env, Dir: "/", Capture: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, p, 1); got != "first\nlast\n" {
		t.Errorf("stdout = %q", got)
	}
	if got := readAll(t, p, 2); got != "warn\n" {
		t.Errorf("stderr = %q", got)
	}
	// Resume from a cursor in the middle: exactly the rest.
	c, err := p.(runtime.OutputReader).ReadOutput(ctx, 1, 6, 0, 0)
	if err != nil || string(c.Data) != "last\n" || c.From != 6 || !c.EOF {
		t.Errorf("read from cursor 6: %+v %v", c, err)
	}
	if st, err := p.Wait(ctx); err != nil || st.Code != 0 {
		t.Errorf("wait: %+v %v", st, err)
	}

	// 3 MiB through a 1 MiB buffer, read only after the end: the first
	// 2 MiB are reported lost, the last MiB is intact.
	big, err := sb.Exec(ctx, &runtime.ExecRequest{Argv: []string{"/bin/sh", "-c", "head -c 3145728 /dev/zero | tr '\\0' x; echo END"}, Env: env, Dir: "/", Capture: true})
	if err != nil {
		t.Fatal(err)
	}
	big.Wait(ctx)
	var tail []byte
	cursor, first := uint64(0), true
	for i := 0; i < 64; i++ {
		c, err := big.(runtime.OutputReader).ReadOutput(ctx, 1, cursor, 0, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if first {
			if lost := c.From - cursor; lost != 3145728+4-(1<<20) {
				t.Errorf("lost %d bytes, want %d", lost, 3145728+4-(1<<20))
			}
			first = false
		}
		tail = append(tail, c.Data...)
		cursor = c.Next()
		if c.EOF {
			break
		}
	}
	if len(tail) != 1<<20 || string(tail[len(tail)-4:]) != "END\n" {
		t.Errorf("kept %d bytes ending %q, want 1 MiB ending END", len(tail), tail[max(0, len(tail)-4):])
	}
	// Asking for a process that does not capture is an error, not a hang.
	null, _ := os.Open(os.DevNull)
	defer null.Close()
	plain, err := sb.Exec(ctx, &runtime.ExecRequest{Argv: []string{"/bin/true"}, Env: env, Dir: "/", Stdin: null, Stdout: null, Stderr: null})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := plain.(runtime.OutputReader).ReadOutput(ctx, 1, 0, 0, 0); err == nil {
		t.Error("reading output of a process that was not captured succeeded")
	}
}

// TestCollectedOutput: a process started with Collect brings its whole
// output with its exit when it fits, both streams apart, and the output
// stays readable; it does not without Collect (the control), when the
// output is larger than asked for, or when a child it left holds the
// output open, and then reading it gives all of it.
func TestCollectedOutput(t *testing.T) {
	needRoot(t)
	sb := newSandbox(t, &policy.Policy{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	env, _ := sandbox.Env(&policy.Policy{}, nil, false, os.LookupEnv)
	run := func(script string, collect int) runtime.Process {
		t.Helper()
		p, err := sb.Exec(ctx, &runtime.ExecRequest{Argv: []string{"/bin/sh", "-c", script}, Env: env, Dir: "/", Capture: true, Hold: true, Collect: collect})
		if err != nil {
			t.Fatal(err)
		}
		if st, err := p.Wait(ctx); err != nil || st.Code != 3 {
			t.Fatalf("%s: wait: %+v %v", script, st, err)
		}
		return p
	}
	const script = "echo first; echo warn >&2; echo last; exit 3"
	p := run(script, 100)
	stdout, stderr, ok := p.(runtime.Collector).Collected()
	if !ok || string(stdout) != "first\nlast\n" || string(stderr) != "warn\n" {
		t.Fatalf("collected: %q %q %v", stdout, stderr, ok)
	}
	if got := readAll(t, p, 1); got != "first\nlast\n" {
		t.Errorf("stdout read after collecting = %q", got)
	}
	// Exactly the limit (16 bytes in all) still comes; one byte less
	// does not.
	if _, _, ok := run(script, 16).(runtime.Collector).Collected(); !ok {
		t.Error("16 bytes of output with Collect 16 did not come with the exit")
	}
	for name, p := range map[string]runtime.Process{
		"without Collect": run(script, 0),
		"one byte over":   run(script, 15),
		"held open":       run("sleep 2 & echo first; echo last; echo warn >&2; exit 3", 100),
	} {
		if stdout, stderr, ok := p.(runtime.Collector).Collected(); ok {
			t.Errorf("%s: output came with the exit: %q %q", name, stdout, stderr)
		}
		if got := readAll(t, p, 2); got != "warn\n" {
			t.Errorf("%s: stderr read = %q", name, got)
		}
	}
}

// TestCapturedStdin: bytes written to a captured process's stdin arrive in
// order, closing it ends the process's input, and writing after the close is
// an error (the control is the same write before the close).
func TestCapturedStdin(t *testing.T) {
	needRoot(t)
	sb := newSandbox(t, &policy.Policy{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	env, _ := sandbox.Env(&policy.Policy{}, nil, false, os.LookupEnv)
	p, err := sb.Exec(ctx, &runtime.ExecRequest{Argv: []string{"/usr/bin/wc", "-c"}, Env: env, Dir: "/", Capture: true})
	if err != nil {
		t.Fatal(err)
	}
	w := p.(runtime.StdinWriter)
	big := strings.Repeat("z", 600000) // more than one write message and a pipe buffer
	for _, chunk := range []string{"hello ", big} {
		if err := w.WriteStdin(ctx, []byte(chunk)); err != nil {
			t.Fatalf("write stdin: %v", err)
		}
	}
	if err := w.CloseStdin(ctx); err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(readAll(t, p, 1)); got != fmt.Sprint(6+len(big)) {
		t.Errorf("wc -c counted %q bytes, want %d", got, 6+len(big))
	}
	if st, err := p.Wait(ctx); err != nil || st.Code != 0 {
		t.Errorf("wait: %+v %v", st, err)
	}
	if err := w.WriteStdin(ctx, []byte("late")); err == nil {
		t.Error("a write after closing stdin succeeded")
	}
}

// StdinClosed: the process's stdin is a pipe already at its end (the agent
// closes it at the start, with no request of its own), so a command that
// reads it ends at once, and nothing can be written to it. The control is
// the same command with its stdin open, which waits for input and gets it.
func TestCapturedStdinClosed(t *testing.T) {
	needRoot(t)
	sb := newSandbox(t, &policy.Policy{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	env, _ := sandbox.Env(&policy.Policy{}, nil, false, os.LookupEnv)
	// What stdin is, then a count of what it gave.
	argv := []string{"/bin/sh", "-c", `[ -p /dev/stdin ] && echo pipe; wc -c`}
	p, err := sb.Exec(ctx, &runtime.ExecRequest{Argv: argv, Env: env, Dir: "/", Capture: true, StdinClosed: true})
	if err != nil {
		t.Fatal(err)
	}
	if st, err := p.Wait(ctx); err != nil || st.Code != 0 {
		t.Fatalf("with stdin closed: wait: %+v %v", st, err)
	}
	if got := strings.Fields(readAll(t, p, 1)); len(got) != 2 || got[0] != "pipe" || got[1] != "0" {
		t.Errorf("with stdin closed: output %q, want a pipe that gave 0 bytes", got)
	}
	if err := p.(runtime.StdinWriter).WriteStdin(ctx, []byte("late")); err == nil {
		t.Error("a write to a stdin closed from the start succeeded")
	}

	p, err = sb.Exec(ctx, &runtime.ExecRequest{Argv: argv, Env: env, Dir: "/", Capture: true})
	if err != nil {
		t.Fatal(err)
	}
	w := p.(runtime.StdinWriter)
	if err := w.WriteStdin(ctx, []byte("four")); err != nil {
		t.Fatalf("with stdin open: write: %v", err)
	}
	if err := w.CloseStdin(ctx); err != nil {
		t.Fatal(err)
	}
	if st, err := p.Wait(ctx); err != nil || st.Code != 0 {
		t.Fatalf("with stdin open: wait: %+v %v", st, err)
	}
	if got := strings.Fields(readAll(t, p, 1)); len(got) != 2 || got[0] != "pipe" || got[1] != "4" {
		t.Errorf("with stdin open: output %q, want a pipe that gave 4 bytes", got)
	}
}

// TestRemoveWithoutState: a detached sandbox whose state file is lost (its
// supervisor was killed before writing it, as a daemon killed during a
// fork) is killed by Remove, found by its cgroup's name; it kept running,
// its volume mounted, for good. The control: the sandbox runs until then.
func TestRemoveWithoutState(t *testing.T) {
	needRoot(t)
	rt := privateRuntime(t)
	rt.Detached = true
	id := runDetachedChild(t, rt.StateRoot, true)
	b, err := os.ReadFile(filepath.Join(rt.StateRoot, id, "state.json"))
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		Init      int      `json:"init"`
		InitStart string   `json:"init_start"`
		Cgroups   []string `json:"cgroups"`
	}
	if err := json.Unmarshal(b, &st); err != nil || st.Init <= 0 || len(st.Cgroups) == 0 {
		t.Skipf("no init or cgroups recorded (%+v, %v): nothing to find it by", st, err)
	}
	alive := func() bool { return sysfile.ProcStart(st.Init) == st.InitStart }
	t.Cleanup(func() {
		if alive() {
			unix.Kill(st.Init, unix.SIGKILL)
		}
	})
	if !alive() {
		t.Fatal("control: the detached sandbox is not running")
	}
	if err := os.Remove(filepath.Join(rt.StateRoot, id, "state.json")); err != nil {
		t.Fatal(err)
	}
	if err := rt.Remove(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for alive() && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if alive() {
		t.Fatalf("the init (pid %d) of a sandbox removed without its state still runs", st.Init)
	}
}
