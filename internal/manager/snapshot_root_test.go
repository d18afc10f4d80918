package manager

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/internal/runtime"
)

// shiftOwners maps host ids of the sandbox's range to in-sandbox ids and
// every other id to 65534, keeps modes (chown clears set-id bits), and
// clears set-id bits of regular files only; links are not followed.
func TestShiftOwners(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (chown)")
	}
	const base = 1879048192
	info := runtime.Info{HostUID: base, HostGID: base, HostIDs: 65536}
	dir := t.TempDir()
	mk := func(name string, uid, gid int, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if mode.IsDir() {
			if err := os.Mkdir(p, 0o700); err != nil {
				t.Fatal(err)
			}
		} else if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Lchown(p, uid, gid); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	inRange := mk("in", base+1000, base+1001, 0o4755)
	sgidDir := mk("dir", base, base+5, os.ModeDir|os.ModeSetgid|0o2775)
	outside := mk("out", base+70000, 0, 0o640)
	target := mk("target", 0, 0, 0o644)
	link := filepath.Join(dir, "link")
	if err := os.Symlink("target", link); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(link, base+7, base+7); err != nil {
		t.Fatal(err)
	}
	if err := shiftOwners(dir, info); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		path     string
		uid, gid uint32
		mode     uint32 // 0: not checked (a link)
	}{
		{inRange, 1000, 1001, 0o755}, // set-uid dropped on a regular file
		{sgidDir, 0, 5, 0o2775},      // kept on a directory
		{outside, 65534, 65534, 0o640},
		{target, 65534, 65534, 0o644}, // host root is outside the range
		{link, 7, 7, 0},
	} {
		var st unix.Stat_t
		if err := unix.Lstat(c.path, &st); err != nil {
			t.Fatal(err)
		}
		if st.Uid != c.uid || st.Gid != c.gid || (c.mode != 0 && st.Mode&0o7777 != c.mode) {
			t.Errorf("%s: %d:%d %#o, want %d:%d %#o", filepath.Base(c.path), st.Uid, st.Gid, st.Mode&0o7777, c.uid, c.gid, c.mode)
		}
	}
}
