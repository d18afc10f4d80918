//go:build linux

package native

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// resolveTree is a small root with the symlinks an attacker would plant:
// absolute, relative, escaping with .., and a loop.
func resolveTree(t testing.TB) string {
	root := t.TempDir()
	for _, d := range []string{"usr/lib", "mnt/data", "home"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for link, target := range map[string]string{
		"lib":         "usr/lib",
		"abs":         "/etc",
		"up":          "../../..",
		"home/escape": "../../../../tmp",
		"loop":        "loop",
		"mnt/rel":     "data",
	} {
		if err := os.Symlink(target, filepath.Join(root, link)); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// FuzzResolveIn: whatever the target, resolveIn either refuses it or
// returns the plain join of root and the cleaned target, inside root, with
// no symlink on the way. The seed corpus runs as a plain test.
func FuzzResolveIn(f *testing.F) {
	for _, s := range []string{"/mnt/data", "/lib/x", "/abs/passwd", "/up/etc", "/home/escape/x",
		"/loop/x", "/mnt/rel/x", "/../../etc/passwd", "/usr/../lib/x", "/a/b/c", "/", "relative", "//mnt//data/"} {
		f.Add(s)
	}
	root := resolveTree(f)
	f.Fuzz(func(t *testing.T, target string) {
		if strings.ContainsRune(target, 0) {
			return
		}
		got, err := resolveIn(root, target)
		if err != nil {
			return
		}
		if want := filepath.Join(root, filepath.Clean(target)); got != want {
			t.Fatalf("resolveIn(%q) = %q, want the plain join %q", target, got, want)
		}
		if got != root && !strings.HasPrefix(got, root+"/") {
			t.Fatalf("resolveIn(%q) = %q escapes %q", target, got, root)
		}
		for p := got; p != root && len(p) > len(root); p = filepath.Dir(p) {
			if fi, err := os.Lstat(p); err == nil && fi.Mode()&os.ModeSymlink != 0 {
				t.Fatalf("resolveIn(%q) = %q goes through the symlink %q", target, got, p)
			}
		}
	})
}

// TestResolveInRefusesLinks pins the expected answers for the planted
// links next to their controls.
func TestResolveInRefusesLinks(t *testing.T) {
	root := resolveTree(t)
	for _, target := range []string{"/lib/x", "/abs/passwd", "/up/etc", "/home/escape/x", "/loop/x", "/mnt/rel/x"} {
		if got, err := resolveIn(root, target); err == nil {
			t.Errorf("resolveIn(%q) = %q, want a refusal", target, got)
		}
	}
	for _, target := range []string{"/mnt/data", "/usr/lib/x", "/new/dir", "/../../mnt/data"} {
		if _, err := resolveIn(root, target); err != nil {
			t.Errorf("control resolveIn(%q): %v", target, err)
		}
	}
}
