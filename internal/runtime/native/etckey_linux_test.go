package native

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestEtcKey: the /etc cache's key changes when an entry, a directory
// directly below one (a file renamed into /etc/ssl/certs) or a directory
// added below one later (and then a file renamed into it) changes, and
// not otherwise; the list of those directories is read once per state of
// the entries and kept in the cache directory.
func TestEtcKey(t *testing.T) {
	etc, cache := t.TempDir(), t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(etc, "ssl", "certs"), 0o755))
	must(os.WriteFile(filepath.Join(etc, "ssl", "certs", "a.pem"), []byte("a"), 0o644))
	must(os.WriteFile(filepath.Join(etc, "os-release"), []byte("ID=test\n"), 0o644))
	// Times an hour apart, so that a change is seen whatever the
	// filesystem's time granularity.
	tick := time.Now().Add(-24 * time.Hour)
	stamp := func(p string) {
		t.Helper()
		tick = tick.Add(time.Hour)
		must(os.Chtimes(p, tick, tick))
	}
	for _, p := range []string{"ssl/certs/a.pem", "ssl/certs", "ssl", "os-release"} {
		stamp(filepath.Join(etc, p))
	}
	k1 := etcKeyAt(etc, cache)
	if k := etcKeyAt(etc, cache); k != k1 {
		t.Fatalf("the key changed with nothing changed: %s -> %s", k1, k)
	}
	lists, _ := filepath.Glob(filepath.Join(cache, "etc-subdirs-*"))
	if len(lists) != 1 {
		t.Fatalf("%d lists of directories kept, want 1", len(lists))
	}

	// A file renamed into ssl/certs: only ssl/certs's time changes.
	must(os.WriteFile(filepath.Join(etc, "ssl", "certs", ".b"), []byte("b"), 0o644))
	must(os.Rename(filepath.Join(etc, "ssl", "certs", ".b"), filepath.Join(etc, "ssl", "certs", "b.pem")))
	stamp(filepath.Join(etc, "ssl", "certs"))
	k2 := etcKeyAt(etc, cache)
	if k2 == k1 {
		t.Fatal("a change in ssl/certs left the key as it was")
	}

	// A new directory below ssl, then a file renamed into it.
	must(os.Mkdir(filepath.Join(etc, "ssl", "new"), 0o755))
	stamp(filepath.Join(etc, "ssl", "new"))
	stamp(filepath.Join(etc, "ssl"))
	k3 := etcKeyAt(etc, cache)
	if k3 == k2 {
		t.Fatal("a new directory in ssl left the key as it was")
	}
	must(os.WriteFile(filepath.Join(etc, "ssl", "new", "c"), []byte("c"), 0o644))
	stamp(filepath.Join(etc, "ssl", "new"))
	k4 := etcKeyAt(etc, cache)
	if k4 == k3 {
		t.Fatal("a change in the new directory ssl/new left the key as it was")
	}

	// A top entry's content and time.
	must(os.WriteFile(filepath.Join(etc, "os-release"), []byte("ID=other\n"), 0o644))
	stamp(filepath.Join(etc, "os-release"))
	if k := etcKeyAt(etc, cache); k == k4 {
		t.Fatal("a changed os-release left the key as it was")
	}
}
