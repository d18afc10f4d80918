//go:build linux

package native_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/policy"
	"github.com/airlock-dev/airlock/internal/runtime"
	"github.com/airlock-dev/airlock/internal/runtime/native"
)

// TestMakeDirMove: the one-call mkdir and rename answer with what they
// made; an exclusive mkdir refuses a path that exists (a directory or a
// file) next to the same call on a new path, and a path that climbs out
// of /workspace stays in the sandbox. The same with an agent of protocol 2
// (a sandbox adopted from an older daemon), which gets stat, mkdir, stat.
func TestMakeDirMove(t *testing.T) {
	needRoot(t)
	for _, v := range []int{3, 2} {
		t.Run(fmt.Sprintf("protocol%d", v), func(t *testing.T) { testMakeDirMove(t, v) })
	}
}

func testMakeDirMove(t *testing.T, version int) {
	ws := t.TempDir()
	os.Chmod(ws, 0o755)
	sb := newSandbox(t, &policy.Policy{Workspace: ws})
	if version < 3 {
		native.SetAgentVersion(sb, version)
	}
	fm, ok := sb.(runtime.FileMaker)
	if !ok {
		t.Fatal("the native sandbox is not a runtime.FileMaker")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	fi, err := fm.MakeDir(ctx, "a/b/c", 0o750, true)
	if err != nil || !fi.Dir || fi.Name != "c" || fi.Mode != 0o750 || fi.ModTime.IsZero() {
		t.Fatalf("exclusive mkdir with missing parents: %+v %v", fi, err)
	}
	if st, err := os.Stat(filepath.Join(ws, "a", "b", "c")); err != nil || !st.IsDir() {
		t.Fatalf("the host does not see a/b/c: %v", err)
	}
	if _, err := fm.MakeDir(ctx, "a/b/c", 0o755, true); !errors.Is(err, runtime.ErrExists) {
		t.Errorf("exclusive mkdir of an existing directory: %v, want ErrExists", err)
	}
	if fi, err := fm.MakeDir(ctx, "a/b/c", 0o755, false); err != nil || !fi.Dir {
		t.Errorf("mkdir -p of an existing directory: %+v %v", fi, err)
	}
	if err := os.WriteFile(filepath.Join(ws, "a", "file"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := fm.MakeDir(ctx, "a/file", 0o755, true); !errors.Is(err, runtime.ErrExists) {
		t.Errorf("exclusive mkdir of an existing file: %v, want ErrExists", err)
	}
	if _, err := fm.MakeDir(ctx, "a/file/sub", 0o755, true); !errors.Is(err, runtime.ErrInvalid) {
		t.Errorf("mkdir under a file: %v, want ErrInvalid", err)
	}
	host := t.TempDir()
	climb := strings.Repeat("../", 12) + strings.TrimPrefix(host, "/") + "/escaped"
	if _, err := fm.MakeDir(ctx, climb, 0o755, true); err != nil {
		t.Fatalf("mkdir through ../ (inside the sandbox): %v", err)
	}
	if _, err := os.Stat(filepath.Join(host, "escaped")); !os.IsNotExist(err) {
		t.Fatalf("a mkdir through ../ reached the host: %v", err)
	}

	fi, err = fm.Move(ctx, "a/file", "a/b/moved")
	if err != nil || fi.Dir || fi.Name != "moved" || fi.Size != 1 {
		t.Fatalf("move: %+v %v", fi, err)
	}
	if b, err := os.ReadFile(filepath.Join(ws, "a", "b", "moved")); err != nil || string(b) != "x" {
		t.Errorf("the host after the move: %q %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(ws, "a", "file")); !os.IsNotExist(err) {
		t.Errorf("the source is still there: %v", err)
	}
	if _, err := fm.Move(ctx, "a/nope", "a/b/nope"); !errors.Is(err, runtime.ErrNotFound) {
		t.Errorf("move of a missing file: %v, want ErrNotFound", err)
	}
}
