package progfile

import (
	"bytes"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestCached: a program is written once per build into root's directory,
// read-only, and reused; a copy or a directory that someone else could
// write is refused (the caller then uses a memfd); old builds' copies of the
// same program are removed after a minute, never the one in use, and never
// another program's.
func TestCached(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the program cache is root's")
	}
	bin := bytes.Repeat([]byte("init"), 5000)
	top := t.TempDir() // root's, 0700
	dir := filepath.Join(top, "init")
	ino := func(f *os.File) uint64 {
		var st syscall.Stat_t
		if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
			t.Fatal(err)
		}
		return st.Ino
	}

	stale := filepath.Join(dir, "airlock-init-0ld")
	recent := filepath.Join(dir, "airlock-init-r3cent")
	other := filepath.Join(dir, "airlock-full-0ld")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{stale, recent, other} {
		if err := os.WriteFile(p, []byte("x"), 0o555); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-time.Hour)
	os.Chtimes(stale, old, old)
	os.Chtimes(other, old, old)

	f, err := Cached(dir, "airlock-init", "b1", bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got, err := os.ReadFile(f.Name())
	if err != nil || !bytes.Equal(got, bin) {
		t.Fatalf("the cached copy holds %d bytes (%v), want the program's %d", len(got), err, len(bin))
	}
	st, _ := os.Stat(f.Name())
	if st.Mode().Perm() != 0o555 {
		t.Errorf("the copy's mode is %v, want r-xr-xr-x", st.Mode())
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("an old build's copy was kept: %v", err)
	}
	if _, err := os.Stat(recent); err != nil {
		t.Errorf("a recent build's copy was removed: %v", err)
	}
	if _, err := os.Stat(other); err != nil {
		t.Errorf("another program's copy was removed: %v", err)
	}
	f2, err := Cached(dir, "airlock-init", "b1", bin)
	if err != nil {
		t.Fatal(err)
	}
	if ino(f2) != ino(f) {
		t.Errorf("the second call made a new copy instead of reusing the first")
	}
	f2.Close()

	// Refusals, each next to the accepted case above.
	if err := os.Chmod(f.Name(), 0o755); err != nil {
		t.Fatal(err)
	}
	if g, err := Cached(dir, "airlock-init", "b1", bin); err == nil {
		g.Close()
		t.Errorf("a copy its owner can write was used")
	}
	os.Chmod(f.Name(), 0o555)
	if g, err := Cached(dir, "airlock-init", "b1", bin[:100]); err == nil {
		g.Close()
		t.Errorf("a copy of another size was used")
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if g, err := Cached(dir, "airlock-init", "b1", bin); err == nil {
		g.Close()
		t.Errorf("a directory anyone can write was used")
	}
	os.Chmod(dir, 0o700)
	if g, err := Cached(dir, "airlock-init", "../b1", bin); err == nil {
		g.Close()
		t.Errorf("a build id with a path in it was used")
	}
	if g, err := Cached(dir, "airlock-init", "b1", bin); err != nil {
		t.Errorf("the control after the refusals: %v", err)
	} else {
		g.Close()
	}
}
