//go:build linux

package native_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/internal/policy"
	"github.com/airlock-dev/airlock/internal/runtime"
	"github.com/airlock-dev/airlock/internal/runtime/native"
	"github.com/airlock-dev/airlock/internal/sandbox"
)

// stateEntries counts the sandbox state directories (not the shared cache).
func stateEntries(rt *native.Runtime) int {
	entries, _ := os.ReadDir(rt.StateRoot)
	n := 0
	for _, e := range entries {
		if e.Name() != "cache" {
			n++
		}
	}
	return n
}

func create(t *testing.T, rt *native.Runtime, p *policy.Policy, mutate func(*runtime.Spec)) (runtime.Sandbox, error) {
	t.Helper()
	spec, err := sandbox.Spec(p, sandbox.Opts{})
	if err != nil {
		t.Fatal(err)
	}
	if mutate != nil {
		mutate(spec)
	}
	return rt.Create(context.Background(), spec)
}

// TestFailClosedSeccomp: a filter the kernel rejects stops the sandbox from
// starting, the error names the layer, and nothing is left behind. The
// control is the same spec with the real filter.
func TestFailClosedSeccomp(t *testing.T) {
	needRoot(t)
	rt := privateRuntime(t)
	before := stateEntries(rt)
	_, err := create(t, rt, &policy.Policy{}, func(s *runtime.Spec) {
		// An out-of-range jump: the kernel's verifier refuses it.
		s.Seccomp = []runtime.SockFilter{{Code: 0x05, K: 1000}}
	})
	var le *native.LayerError
	if !errors.As(err, &le) || le.Layer != "seccomp" {
		t.Fatalf("err = %v, want a seccomp layer error", err)
	}
	if !strings.Contains(err.Error(), "--insecure-no-seccomp") {
		t.Errorf("error does not name the opt-out: %v", err)
	}
	if after := stateEntries(rt); after != before {
		t.Errorf("state entries: %d before, %d after a failed create", before, after)
	}
	sb, err := create(t, rt, &policy.Policy{}, nil)
	if err != nil {
		t.Fatalf("control: %v", err)
	}
	sb.Destroy(context.Background())
}

// TestFailClosedNoFilter: a spec without a filter and without the explicit
// opt-out is refused before anything is created.
func TestFailClosedNoFilter(t *testing.T) {
	rt := privateRuntime(t)
	_, err := create(t, rt, &policy.Policy{}, func(s *runtime.Spec) { s.Seccomp = nil })
	var le *native.LayerError
	if !errors.As(err, &le) || le.Layer != "seccomp" {
		t.Fatalf("err = %v, want a seccomp layer error", err)
	}
}

// TestBindTargetThroughSymlinkRefused: /lib64 is a symlink on merged-/usr
// hosts, so a bind target below it would be resolved through a link; it is
// refused. The control binds the same source at a plain path.
func TestBindTargetThroughSymlinkRefused(t *testing.T) {
	needRoot(t)
	if fi, err := os.Lstat("/lib64"); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Skip("/lib64 is not a symlink on this host")
	}
	src := t.TempDir()
	os.WriteFile(src+"/f", []byte("bound"), 0o644)
	rt := privateRuntime(t)
	before := stateEntries(rt)
	_, err := create(t, rt, &policy.Policy{Filesystem: policy.Filesystem{Binds: []policy.Bind{{Source: src, Target: "/lib64/evil"}}}}, nil)
	if err == nil || !strings.Contains(err.Error(), "symlink") {
		t.Fatalf("err = %v, want a refusal naming the symlink", err)
	}
	if after := stateEntries(rt); after != before {
		t.Errorf("state entries: %d before, %d after a failed create", before, after)
	}
	rw := t.TempDir()
	sb, err := create(t, rt, &policy.Policy{Filesystem: policy.Filesystem{Binds: []policy.Bind{
		{Source: src, Target: "/mnt/data"}, {Source: rw, Target: "/data/rw", Writable: true},
	}}}, nil)
	if err != nil {
		t.Fatalf("control: %v", err)
	}
	defer sb.Destroy(context.Background())
	if out, st := run(t, sb, "/bin/cat", "/mnt/data/f"); out != "bound" || st.Code != 0 {
		t.Fatalf("control bind: %q %+v", out, st)
	}
	// Read-only by default; the writable bind takes writes (Landlock
	// included) and they reach the host.
	if out, st := run(t, sb, "/bin/sh", "-c", "echo x > /mnt/data/g"); st.Code == 0 {
		t.Fatalf("write to a read-only bind succeeded: %q", out)
	}
	if out, st := run(t, sb, "/bin/sh", "-c", "echo x > /data/rw/g"); st.Code != 0 {
		t.Fatalf("write to a writable bind failed: %q %+v", out, st)
	}
	if b, _ := os.ReadFile(rw + "/g"); string(b) != "x\n" {
		t.Fatalf("host sees %q in the writable bind", b)
	}
}
