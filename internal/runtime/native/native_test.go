//go:build linux

package native_test

import (
	"bytes"
	"context"
	"fmt"
	"github.com/airlock-dev/airlock/internal/buildtest"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/policy"
	"github.com/airlock-dev/airlock/internal/runtime"
	"github.com/airlock-dev/airlock/internal/runtime/native"
	"github.com/airlock-dev/airlock/internal/sandbox"
)

var airlockBin string

func TestMain(m *testing.M) {
	if v := os.Getenv(detachedChildEnv); v != "" {
		parts := strings.SplitN(v, ":", 4)
		detachedChild(parts[0], parts[1], parts[2] == "true", parts[3])
	}
	code := func() int {
		dir, err := os.MkdirTemp("", "airlock-native-test-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		os.Chmod(dir, 0o755)
		airlockBin = filepath.Join(dir, "airlock")
		if err := buildtest.Airlock(airlockBin); err != nil {
			fmt.Fprintf(os.Stderr, "build airlock: %v\n", err)
			return 1
		}
		return m.Run()
	}()
	os.Exit(code)
}

// privateRuntime returns a runtime with a state root of its own, so that a
// test can count its state directories while other packages' tests create
// sandboxes in parallel.
func privateRuntime(t *testing.T) *native.Runtime {
	t.Helper()
	// Not t.TempDir: its parent is private to root, and root inside the
	// sandbox is an unprivileged host uid that must traverse the path.
	root, err := os.MkdirTemp("", "airlock-test-state-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	os.Chmod(root, 0o711)
	return &native.Runtime{Exe: airlockBin, StateRoot: root}
}

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (cgroups and idmapped mounts); CI runs as root")
	}
}

func newSandbox(t *testing.T, p *policy.Policy) runtime.Sandbox {
	t.Helper()
	spec, err := sandbox.Spec(p, sandbox.Opts{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sb, err := (&native.Runtime{Exe: airlockBin}).Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Destroy(context.Background()) })
	return sb
}

// run executes argv in sb and returns its combined output and status.
func run(t *testing.T, sb runtime.Sandbox, argv ...string) (string, runtime.ExitStatus) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	null, _ := os.Open(os.DevNull)
	defer null.Close()
	env, _ := sandbox.Env(&policy.Policy{}, nil, false, os.LookupEnv)
	p, err := sb.Exec(ctx, &runtime.ExecRequest{Argv: argv, Env: env, Dir: "/workspace", Stdin: null, Stdout: w, Stderr: w})
	w.Close()
	if err != nil {
		r.Close()
		t.Fatalf("exec %v: %v", argv, err)
	}
	out, _ := io.ReadAll(r)
	r.Close()
	st, err := p.Wait(ctx)
	if err != nil {
		t.Fatalf("wait %v: %v", argv, err)
	}
	return string(out), st
}

func TestExecStatusAndManyProcesses(t *testing.T) {
	needRoot(t)
	sb := newSandbox(t, &policy.Policy{})
	if out, st := run(t, sb, "/bin/sh", "-c", "echo hi; exit 7"); out != "hi\n" || st.Code != 7 || st.Signal != 0 {
		t.Fatalf("got %q %+v, want hi and exit 7", out, st)
	}
	if _, st := run(t, sb, "/bin/sh", "-c", "kill -KILL $$"); st.Signal != 9 || st.ShellCode() != 137 {
		t.Fatalf("got %+v, want signal 9", st)
	}
	// State persists between processes of one sandbox.
	run(t, sb, "/bin/sh", "-c", "echo kept > /tmp/state")
	if out, _ := run(t, sb, "/bin/cat", "/tmp/state"); out != "kept\n" {
		t.Fatalf("second process saw %q", out)
	}
	// A process that does not exist is an error, not a hang.
	ctx := context.Background()
	null, _ := os.Open(os.DevNull)
	defer null.Close()
	if _, err := sb.Exec(ctx, &runtime.ExecRequest{Argv: []string{"no-such-command"}, Stdin: null, Stdout: null, Stderr: null}); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("exec of a missing command: err = %v, want not found", err)
	}
}

func TestSignalReachesProcessGroup(t *testing.T) {
	needRoot(t)
	sb := newSandbox(t, &policy.Policy{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	null, _ := os.Open(os.DevNull)
	defer null.Close()
	p, err := sb.Exec(ctx, &runtime.ExecRequest{Argv: []string{"/bin/sleep", "60"}, Dir: "/", Stdin: null, Stdout: null, Stderr: null})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	st, err := p.Wait(ctx)
	if err != nil || st.Signal != 2 {
		t.Fatalf("after SIGINT: %+v %v, want signal 2", st, err)
	}
}

// TestHostSeesNoPrivileges reads the credentials of every thread of every
// sandbox process from the host (probe P1), so the oracle is outside.
func TestHostSeesNoPrivileges(t *testing.T) {
	needRoot(t)
	sb := newSandbox(t, &policy.Policy{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	null, _ := os.Open(os.DevNull)
	defer null.Close()
	r, w, _ := os.Pipe()
	script := "import threading,time,sys\n[threading.Thread(target=time.sleep,args=(30,),daemon=True).start() for _ in range(2)]\nprint('up',flush=True)\ntime.sleep(30)"
	p, err := sb.Exec(ctx, &runtime.ExecRequest{Argv: []string{"/usr/bin/python3", "-c", script}, Dir: "/", Stdin: null, Stdout: w, Stderr: w})
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	buf := make([]byte, 3)
	if _, err := io.ReadFull(r, buf); err != nil || string(buf) != "up\n" {
		t.Fatalf("python did not start: %q %v", buf, err)
	}
	paths := sb.Info().CgroupPaths
	if len(paths) == 0 {
		t.Fatal("no cgroup paths")
	}
	procs, err := os.ReadFile(filepath.Join(paths[0], "cgroup.procs"))
	if err != nil {
		t.Fatal(err)
	}
	pids := strings.Fields(string(procs))
	if len(pids) < 2 {
		t.Fatalf("want the agent and python in the cgroup, got %v", pids)
	}
	checked := 0
	for _, pid := range pids {
		tasks, _ := os.ReadDir("/proc/" + pid + "/task")
		isAgent := false
		if exe, _ := os.Readlink("/proc/" + pid + "/exe"); exe == airlockBin {
			isAgent = true
		}
		for _, task := range tasks {
			status, err := os.ReadFile("/proc/" + pid + "/task/" + task.Name() + "/status")
			if err != nil {
				continue
			}
			fields := map[string]string{}
			for _, line := range strings.Split(string(status), "\n") {
				k, v, _ := strings.Cut(line, ":")
				fields[k] = strings.TrimSpace(v)
			}
			want := map[string]string{"CapEff": "0000000000000000", "CapPrm": "0000000000000000", "CapAmb": "0000000000000000", "CapInh": "0000000000000000", "NoNewPrivs": "1", "Seccomp": "2"}
			if !isAgent || task.Name() == pid {
				want["CapBnd"] = "0000000000000000"
			}
			for k, v := range want {
				if fields[k] != v {
					t.Errorf("pid %s task %s (agent=%v): %s = %s, want %s", pid, task.Name(), isAgent, k, fields[k], v)
				}
			}
			checked++
		}
	}
	if checked < 4 {
		t.Fatalf("checked only %d threads", checked)
	}
	p.Signal(os.Kill)
	p.Wait(ctx)

	// Positive control: the same check on an ordinary host process sees
	// capabilities, so the parsing above can tell the difference.
	status, _ := os.ReadFile("/proc/self/status")
	if !bytes.Contains(status, []byte("CapEff:\t000001")) && !bytes.Contains(status, []byte("CapEff:\t0000003")) {
		t.Logf("note: test process CapEff line: %q", status)
	}
	if bytes.Contains(status, []byte("CapEff:\t0000000000000000")) {
		t.Fatal("control: the root test process itself shows no capabilities; the check above proves nothing")
	}
}

// TestSupervisorNoLeaks creates, uses and destroys 200 sandboxes and checks
// that the supervisor's open descriptors and goroutines, host mounts and
// state directories are back at their baseline.
func TestSupervisorNoLeaks(t *testing.T) {
	needRoot(t)
	if testing.Short() {
		t.Skip("200 sandboxes; skipped with -short")
	}
	count := func(dir string) int {
		e, _ := os.ReadDir(dir)
		return len(e)
	}
	// A state root of its own, so that sandboxes of tests running in
	// parallel (other packages) do not count.
	rt := privateRuntime(t)
	// The host's mounts under that root or airlock's directories: those
	// other programs make meanwhile do not count.
	mounts := func() int {
		b, _ := os.ReadFile("/proc/self/mountinfo")
		n := 0
		for _, line := range strings.Split(string(b), "\n") {
			// Not the tmpfs on /run/airlock itself, made once and kept
			// (internal/rundir).
			if f := strings.Fields(line); len(f) > 4 && (strings.HasPrefix(f[4], rt.StateRoot) || strings.Contains(f[4]+"/", "/airlock/")) && f[4] != "/run/airlock" {
				n++
			}
		}
		return n
	}
	cycle := func(i int) {
		spec, err := sandbox.Spec(&policy.Policy{}, sandbox.Opts{})
		if err != nil {
			t.Fatal(err)
		}
		sb, err := rt.Create(context.Background(), spec)
		if err != nil {
			t.Fatalf("cycle %d: %v", i, err)
		}
		if _, st := run(t, sb, "/bin/true"); st.Code != 0 {
			t.Fatalf("cycle %d: %+v", i, st)
		}
		if err := sb.Destroy(context.Background()); err != nil {
			t.Fatalf("cycle %d destroy: %v", i, err)
		}
	}
	// One warm-up so caches (the /etc cache, lazily opened files) exist.
	cycle(-1)
	fds0, mounts0, state0 := count("/proc/self/fd"), mounts(), count(rt.StateRoot)
	for i := 0; i < 200; i++ {
		cycle(i)
	}
	if fds := count("/proc/self/fd"); fds != fds0 {
		t.Errorf("open descriptors: %d after, %d before", fds, fds0)
	}
	if m := mounts(); m != mounts0 {
		t.Errorf("host mounts: %d after, %d before", m, mounts0)
	}
	if s := count(rt.StateRoot); s != state0 {
		t.Errorf("state directories: %d after, %d before", s, state0)
	}
}

// TestOnlyStdioInherited: a sandboxed process holds exactly its three stdio
// descriptors (probe P9): not the init's control channel, not anything the
// supervisor had. The control is the same listing with one more descriptor
// opened on purpose, which must show up.
func TestOnlyStdioInherited(t *testing.T) {
	needRoot(t)
	sb := newSandbox(t, &policy.Policy{})
	script := "import os,sys\nfds=sorted(int(f) for f in os.listdir('/proc/self/fd'))\nif len(sys.argv)>1: extra=os.open('/dev/null',os.O_RDONLY); fds=sorted(int(f) for f in os.listdir('/proc/self/fd'))\nprint(fds)"
	out, st := run(t, sb, "/usr/bin/python3", "-c", script)
	// The listing itself holds one descriptor (3).
	if st.Code != 0 || strings.TrimSpace(out) != "[0, 1, 2, 3]" {
		t.Fatalf("descriptors of a sandboxed process: %q (%+v), want [0, 1, 2, 3]", out, st)
	}
	out, _ = run(t, sb, "/usr/bin/python3", "-c", script, "control")
	if strings.TrimSpace(out) != "[0, 1, 2, 3, 4]" {
		t.Fatalf("control: %q, want [0, 1, 2, 3, 4]", out)
	}
}
