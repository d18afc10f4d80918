//go:build linux

package native_test

import (
	"context"
	"errors"
	"io"
	"os"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/policy"
	"github.com/airlock-dev/airlock/internal/runtime"
	"github.com/airlock-dev/airlock/internal/sandbox"
)

// CreateExec starts the first command with the sandbox: it runs in the
// sandbox made for it, with the caller's streams, and the sandbox then
// serves more commands like any other. A command that cannot start comes
// back with the sandbox, which the caller destroys; a sandbox that cannot
// be made comes back as nothing. Neither leaves a state directory.
func TestCreateExec(t *testing.T) {
	needRoot(t)
	rt := privateRuntime(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	spec, err := sandbox.Spec(&policy.Policy{}, sandbox.Opts{})
	if err != nil {
		t.Fatal(err)
	}
	null, _ := os.Open(os.DevNull)
	defer null.Close()
	env, _ := sandbox.Env(&policy.Policy{}, nil, false, os.LookupEnv)
	req := func(w *os.File, argv ...string) *runtime.ExecRequest {
		return &runtime.ExecRequest{Argv: argv, Env: env, Dir: "/workspace", Stdin: null, Stdout: w, Stderr: w}
	}
	states := func() int {
		e, _ := os.ReadDir(rt.StateRoot)
		n := 0
		for _, d := range e {
			if d.IsDir() && len(d.Name()) == 16 {
				n++
			}
		}
		return n
	}

	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	sb, p, err := rt.CreateExec(ctx, spec, req(w, "/bin/sh", "-c", "echo in $(pwd); touch /workspace/f; exit 5"))
	w.Close()
	if err != nil {
		t.Fatalf("CreateExec: %v", err)
	}
	out, _ := io.ReadAll(r)
	r.Close()
	st, err := p.Wait(ctx)
	if err != nil || st.Code != 5 || string(out) != "in /workspace\n" {
		t.Errorf("first command: %q, %+v, %v; want /workspace and exit 5", out, st, err)
	}
	if _, ok := sb.Info().Steps["started"]; !ok {
		t.Errorf("no started step: %v", sb.Info().Steps)
	}
	if got, st := run(t, sb, "/bin/sh", "-c", "ls /workspace"); got != "f\n" || st.Code != 0 {
		t.Errorf("a second command in the same sandbox: %q %+v, want the first one's file", got, st)
	}
	if err := sb.Destroy(ctx); err != nil {
		t.Fatal(err)
	}

	// The command cannot start: the sandbox comes back with the error.
	sb, p, err = rt.CreateExec(ctx, spec, req(null, "/no/such/command"))
	if !errors.Is(err, runtime.ErrCommandNotFound) || sb == nil || p != nil {
		t.Fatalf("missing command: sandbox %v, process %v, error %v; want the sandbox and ErrCommandNotFound", sb, p, err)
	}
	if got, st := run(t, sb, "/bin/true"); got != "" || st.Code != 0 {
		t.Errorf("control: the sandbox of a command that did not start still runs one: %q %+v", got, st)
	}
	sb.Destroy(ctx)

	// The sandbox cannot be made (an image that is no directory).
	bad := *spec
	bad.Image = "/etc/passwd"
	if sb, p, err := rt.CreateExec(ctx, &bad, req(null, "/bin/true")); err == nil || sb != nil || p != nil {
		t.Fatalf("bad spec: sandbox %v, process %v, error %v; want an error alone", sb, p, err)
	}
	if n := states(); n != 0 {
		t.Errorf("%d state directories left", n)
	}
}
