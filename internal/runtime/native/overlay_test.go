//go:build linux

package native_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/internal/policy"
	"github.com/airlock-dev/airlock/internal/runtime"
	"github.com/airlock-dev/airlock/internal/runtime/native"
)

// An overlay workspace: writes land in the layer's upper directory, not in
// the workspace; missing protected paths are absent and existing ones
// read-only. An overlay that cannot be mounted (work on another mount than
// upper) fails closed, naming the layer and --workspace-mode live.
func TestWorkspaceOverlaySpec(t *testing.T) {
	needRoot(t)
	rt := privateRuntime(t)
	ws := t.TempDir()
	os.MkdirAll(filepath.Join(ws, ".git/hooks"), 0o755)
	layer := t.TempDir()
	for _, d := range []string{"upper", "work"} {
		os.Mkdir(filepath.Join(layer, d), 0o755)
	}
	p := &policy.Policy{Workspace: ws}
	sb, err := create(t, rt, p, func(s *runtime.Spec) { s.WorkspaceLayer = layer })
	if err != nil {
		t.Fatal(err)
	}
	out, st := run(t, sb, "/bin/sh", "-c", `echo "ls=$(ls -A /workspace | tr '\n' ,)"; echo x > /workspace/f; (echo y > /workspace/.git/hooks/h) 2>/dev/null && echo hook=OK || echo hook=DENIED`)
	sb.Destroy(context.Background())
	if st.Code != 0 {
		t.Fatalf("exit %v: %s", st, out)
	}
	if !strings.Contains(out, "ls=.git,\n") || !strings.Contains(out, "hook=DENIED") {
		t.Errorf("inside: %q, want only .git listed and the hook refused", out)
	}
	if _, err := os.Stat(filepath.Join(ws, "f")); err == nil {
		t.Error("the write reached the workspace itself")
	}
	if b, err := os.ReadFile(filepath.Join(layer, "upper", "f")); err != nil || string(b) != "x\n" {
		t.Errorf("upper/f = %q, %v", b, err)
	}

	// work on a mount of its own: the overlay cannot be made.
	bad := t.TempDir()
	for _, d := range []string{"upper", "work"} {
		os.Mkdir(filepath.Join(bad, d), 0o755)
	}
	if err := unix.Mount("tmpfs", filepath.Join(bad, "work"), "tmpfs", 0, "size=1m"); err != nil {
		t.Skipf("mount tmpfs: %v", err)
	}
	defer unix.Unmount(filepath.Join(bad, "work"), unix.MNT_DETACH)
	before := stateEntries(rt)
	_, err = create(t, rt, p, func(s *runtime.Spec) { s.WorkspaceLayer = bad })
	var le *native.LayerError
	if !errors.As(err, &le) || le.Layer != "workspace overlay" || !strings.Contains(err.Error(), "--workspace-mode live") {
		t.Fatalf("err = %v, want a workspace overlay layer error naming --workspace-mode live", err)
	}
	if after := stateEntries(rt); after != before {
		t.Errorf("state entries: %d before, %d after a failed create", before, after)
	}
}
