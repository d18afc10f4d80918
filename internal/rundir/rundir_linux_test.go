package rundir

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

func TestTopOf(t *testing.T) {
	for path, want := range map[string]string{
		"/run/airlock":                   "/run/airlock",
		"/run/airlock/serve/0123":        "/run/airlock",
		"/run/airlock-gvisor/runsc":      "/run/airlock-gvisor",
		"/run/airlock-egress":            "/run/airlock-egress",
		"/run/airlock/../other":          "",
		"/run/airlockx":                  "",
		"/run/other/airlock":             "",
		"/run":                           "",
		"/tmp/airlock":                   "",
		"/var/lib/airlock":               "",
		"relative/run/airlock":           "",
		"/run/airlock//serve/./x/../y/z": "/run/airlock",
	} {
		if got := topOf(path); got != want {
			t.Errorf("topOf(%q) = %q, want %q", path, got, want)
		}
	}
}

// diskParent returns a fresh directory on a disk file system, or skips.
func diskParent(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (mount)")
	}
	dir := t.TempDir()
	if mem, _, err := InMemory(dir); err != nil || mem {
		t.Skipf("the temporary directory %s is in memory already (%v): nothing to test against", dir, err)
	}
	return dir
}

// mountsAt counts the mounts whose mount point is dir.
func mountsAt(t *testing.T, dir string) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 4 && f[4] == dir {
			n++
		}
	}
	return n
}

func unmountAll(t *testing.T, dir string) {
	t.Cleanup(func() {
		for mountsAt(t, dir) > 0 {
			if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
				t.Errorf("unmount %s: %v", dir, err)
				return
			}
		}
	})
}

// A missing directory on a disk file system gets a tmpfs (mode 0711);
// one that holds something is left as it is, its content visible.
func TestEnsureMountsOnlyWhatIsEmpty(t *testing.T) {
	parent := diskParent(t)
	fresh := filepath.Join(parent, "fresh")
	unmountAll(t, fresh)
	ensure(fresh)
	if mem, kind, err := InMemory(fresh); err != nil || !mem {
		t.Fatalf("%s after ensure: in memory %v (%s, %v), want a tmpfs", fresh, mem, kind, err)
	}
	var st unix.Stat_t
	if err := unix.Stat(fresh, &st); err != nil || st.Mode&0o7777 != 0o711 || st.Uid != 0 {
		t.Errorf("%s: mode %o uid %d (%v), want 0711 and root", fresh, st.Mode&0o7777, st.Uid, err)
	}
	ensure(fresh) // again: no second mount on top
	if n := mountsAt(t, fresh); n != 1 {
		t.Errorf("%s: %d mounts after two ensures, want 1", fresh, n)
	}

	used := filepath.Join(parent, "used")
	unmountAll(t, used)
	if err := os.MkdirAll(filepath.Join(used, "serve", "0123"), 0o711); err != nil {
		t.Fatal(err)
	}
	ensure(used)
	if n := mountsAt(t, used); n != 0 {
		t.Errorf("%s holds state: %d mounts on it, want none", used, n)
	}
	if _, err := os.Stat(filepath.Join(used, "serve", "0123")); err != nil {
		t.Errorf("its content: %v", err)
	}

	// An empty one that exists: mounted too.
	empty := filepath.Join(parent, "empty")
	unmountAll(t, empty)
	if err := os.Mkdir(empty, 0o711); err != nil {
		t.Fatal(err)
	}
	ensure(empty)
	if n := mountsAt(t, empty); n != 1 {
		t.Errorf("%s (empty): %d mounts, want 1", empty, n)
	}
}

// Below a parent that is in memory already, nothing is mounted.
func TestEnsureInMemoryParent(t *testing.T) {
	parent := diskParent(t)
	unmountAll(t, parent)
	if err := unix.Mount("test", parent, "tmpfs", 0, "mode=0755"); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(parent, "airlock")
	ensure(dir)
	if n := mountsAt(t, dir); n != 0 {
		t.Errorf("%s below a tmpfs: %d mounts, want none", dir, n)
	}
}

// Processes that race take turns: one mount, whoever wins.
func TestEnsureRace(t *testing.T) {
	parent := diskParent(t)
	dir := filepath.Join(parent, "raced")
	unmountAll(t, dir)
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); ensure(dir) }()
	}
	wg.Wait()
	if n := mountsAt(t, dir); n != 1 {
		t.Errorf("%s: %d mounts after 8 concurrent ensures, want 1", dir, n)
	}
}
