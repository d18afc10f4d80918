package gvisor

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestUnmountWorkspace: every workspace mount of a state directory is
// taken down, a bind of a directory on the same file system included (it
// keeps the device number: only the mount table tells), and a directory
// with nothing mounted is left as it is (the control).
func TestUnmountWorkspace(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (mounts)")
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	if err := os.Mkdir(src, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "keep"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, name := range mountNames {
		mnt := filepath.Join(dir, name)
		if err := os.Mkdir(mnt, 0o755); err != nil {
			t.Fatal(err)
		}
		if on, err := mounted(dir, mnt); err != nil || on {
			t.Fatalf("%s before the mount: mounted %v, %v", name, on, err)
		}
		if err := unix.Mount(src, mnt, "", unix.MS_BIND, ""); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.Unmount(mnt, unix.MNT_DETACH) })
		if on, err := mounted(dir, mnt); err != nil || !on {
			t.Fatalf("%s: a bind on the same file system not seen: %v, %v", name, on, err)
		}
	}
	if err := unmountWorkspace(dir); err != nil {
		t.Fatal(err)
	}
	for _, name := range mountNames {
		if on, err := mounted(dir, filepath.Join(dir, name)); err != nil || on {
			t.Errorf("%s still mounted: %v, %v", name, on, err)
		}
	}
	// Removing the state directory now removes nothing of the source.
	for _, name := range mountNames {
		if err := os.Remove(filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(filepath.Join(src, "keep")); err != nil {
		t.Fatal(err)
	}
	if err := unmountWorkspace(dir); err != nil {
		t.Errorf("nothing mounted: %v", err)
	}
}
