package workspace

import (
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"testing"
)

// CompareTrees lists exactly the changes between two whole trees, a
// deletion at the top and deep down included; CopyTree then CopyInto make
// a tree that compares equal (no change) to its source.
func TestCompareTrees(t *testing.T) {
	old, cur := t.TempDir(), t.TempDir()
	write := func(root, rel, data string, mode os.FileMode) {
		t.Helper()
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), mode); err != nil {
			t.Fatal(err)
		}
		os.Chmod(p, mode)
	}
	for _, r := range []string{old, cur} {
		write(r, "same.txt", "same\n", 0o644)
		write(r, "d/keep", "k", 0o644)
		write(r, "m.sh", "echo\n", 0o644)
		write(r, "text", "a\nb\n", 0o644)
	}
	write(old, "gone-top", "x", 0o644)
	write(old, "d/gone-deep", "x", 0o644)
	write(old, "olddir/f", "x", 0o644)
	os.Chmod(filepath.Join(cur, "m.sh"), 0o755)
	write(cur, "text", "a\nB\n", 0o644)
	write(cur, "d/new", "n", 0o600)
	os.Symlink("same.txt", filepath.Join(old, "ln"))
	os.Symlink("text", filepath.Join(cur, "ln"))

	got, err := CompareTrees(old, cur, true)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, c := range got {
		kinds = append(kinds, c.Kind+" "+c.Path)
		if c.Path == "text" && c.Diff == "" {
			t.Errorf("text: no diff: %+v", c)
		}
	}
	sort.Strings(kinds)
	want := []string{"added d/new", "deleted d/gone-deep", "deleted gone-top", "deleted olddir/", "mode m.sh", "modified text", "symlink ln"}
	if !reflect.DeepEqual(kinds, want) {
		t.Errorf("changes = %q, want %q", kinds, want)
	}

	cp := filepath.Join(t.TempDir(), "copy")
	if _, err := CopyTree(cur, cp); err != nil {
		t.Fatal(err)
	}
	if ch, err := CompareTrees(cur, cp, false); err != nil || len(ch) != 0 {
		t.Errorf("a copy differs from its source: %+v %v", ch, err)
	}
	// Into an emptied directory (as a restore does).
	into := t.TempDir()
	write(into, "stale/x", "s", 0o644)
	if err := EmptyDir(into); err != nil {
		t.Fatal(err)
	}
	if _, err := CopyInto(old, into); err != nil {
		t.Fatal(err)
	}
	if ch, err := CompareTrees(old, into, false); err != nil || len(ch) != 0 {
		t.Errorf("a copy into an emptied directory differs: %+v %v", ch, err)
	}
}
