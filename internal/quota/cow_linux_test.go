package quota

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/internal/errdefs"
)

// openPool opens volumes in a fresh directory on a filesystem without
// reflinks, with a pool beside it, or skips.
func openPool(t *testing.T) (*Volumes, string) {
	t.Helper()
	return openPoolWith(t, Options{})
}

// openPoolWith is openPool with options (o.Pool is set here).
func openPoolWith(t *testing.T, o Options) (*Volumes, string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("loop volumes need root")
	}
	if _, err := findMkfs(); err != nil {
		t.Skip(err)
	}
	if _, err := findTool("mkfs.xfs", "xfsprogs"); err != nil {
		t.Skip(err)
	}
	base := t.TempDir()
	if probeClone(base) == nil {
		t.Skip("the test directory's filesystem has reflinks: no pool would be made")
	}
	dir, pool := filepath.Join(base, "volumes"), filepath.Join(base, "volumes.pool")
	o.Pool = pool
	vs, err := OpenWith(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	if vs.Method() != MethodClone {
		if b, _ := os.ReadFile("/proc/filesystems"); !bytes.Contains(b, []byte("\txfs\n")) {
			t.Skip("the kernel has no XFS: " + vs.CopyOnWriteInfo())
		}
		t.Fatalf("method %s (%s), want clone", vs.Method(), vs.CopyOnWriteInfo())
	}
	return vs, pool
}

func usedBlocks(t *testing.T, dir string) int64 {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Blocks-st.Bfree) * st.Bsize
}

// The pool: made once on XFS, mounted again by the next Open, unmounted
// by Close only when unused; a snapshot of a volume holding 256 MiB adds
// (almost) no used blocks to it; a volume from the snapshot holds the
// same bytes, and a write in it is seen neither by the parent nor by the
// snapshot; a larger volume from it grows; a smaller one than it holds
// is refused with nothing left.
func TestPoolSnapshotClone(t *testing.T) {
	vs, pool := openPool(t)
	if fsName(vs.Dir()) != "xfs" || !isMountPoint(vs.Dir()) {
		t.Fatalf("the volume directory is %s (mount point %v), want the XFS pool", fsName(vs.Dir()), isMountPoint(vs.Dir()))
	}
	var pst unix.Stat_t
	if err := unix.Stat(pool, &pst); err != nil || pst.Blocks*512 > pst.Size/8 {
		t.Fatalf("pool file %v: %d of %d bytes allocated: want sparse", err, pst.Blocks*512, pst.Size)
	}
	v, err := vs.Create("parent", 512<<20, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Remove()
	if n, err := fill(filepath.Join(v.Path, "data"), 256<<20); err != nil || n != 256<<20 {
		t.Fatalf("fill: %d %v", n, err)
	}
	if err := os.WriteFile(filepath.Join(v.Path, "note"), []byte("parent\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	before := usedBlocks(t, vs.Dir())
	used, files, err := vs.Snapshot("parent", "snap-1")
	if err != nil {
		t.Fatal(err)
	}
	defer vs.RemoveSnapshot("snap-1")
	if used < 256<<20 || files < 3 {
		t.Errorf("snapshot holds %d bytes in %d inodes, want >= 256 MiB and >= 3", used, files)
	}
	if grew := usedBlocks(t, vs.Dir()) - before; grew > 16<<20 {
		t.Errorf("the snapshot added %d bytes to the pool, want a clone (< 16 MiB)", grew)
	}
	// Positive control of the measure: a copy of the data adds its size.
	copied, err := os.ReadFile(filepath.Join(v.Path, "data"))
	if err != nil {
		t.Fatal(err)
	}
	b0 := usedBlocks(t, vs.Dir())
	if err := os.WriteFile(filepath.Join(vs.Dir(), ".copy"), copied, 0o600); err != nil {
		t.Fatal(err)
	}
	unix.Sync()
	if grew := usedBlocks(t, vs.Dir()) - b0; grew < 200<<20 {
		t.Errorf("control: a 256 MiB copy added only %d bytes", grew)
	}
	os.Remove(filepath.Join(vs.Dir(), ".copy"))

	c, err := vs.CreateFrom("child", 512<<20, "snap-1")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Remove()
	got, err := os.ReadFile(filepath.Join(c.Path, "data"))
	if err != nil || !bytes.Equal(got, copied) {
		t.Fatalf("the clone's data differs (%v)", err)
	}
	if err := os.WriteFile(filepath.Join(c.Path, "note"), []byte("child\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(v.Path, "note")); string(b) != "parent\n" {
		t.Errorf("the child's write reached the parent: %q", b)
	}
	mnt := t.TempDir()
	umount, err := vs.MountSnapshot("snap-1", mnt)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(mnt, "note")); string(b) != "parent\n" {
		t.Errorf("the snapshot changed: %q", b)
	}
	if err := os.WriteFile(filepath.Join(mnt, "x"), nil, 0o644); !errors.Is(err, unix.EROFS) {
		t.Errorf("write in the read-only snapshot mount: %v, want EROFS", err)
	}
	if err := umount(); err != nil {
		t.Fatal(err)
	}
	// Accounting: a clone may still take its whole size.
	_, promised, _, err := vs.Space()
	if err != nil || promised < 512<<20 {
		t.Errorf("promised %d (%v): want at least the clone's size", promised, err)
	}

	big, err := vs.CreateFrom("big", 1<<30, "snap-1")
	if err != nil {
		t.Fatal(err)
	}
	var st unix.Statfs_t
	unix.Statfs(big.Path, &st)
	if total := int64(st.Blocks) * st.Bsize; total < 900<<20 {
		t.Errorf("a 1 GiB volume from a 512 MiB snapshot holds %d bytes", total)
	}
	big.Remove()
	if _, err := vs.CreateFrom("small", 64<<20, "snap-1"); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("a 64 MiB volume from a snapshot holding 256 MiB: %v, want ErrInvalid", err)
	}
	fits, err := vs.CreateFrom("fits", 300<<20, "snap-1")
	if err != nil {
		t.Errorf("control: a 300 MiB volume from it: %v", err)
	} else {
		fits.Remove()
	}
	if _, err := vs.CreateFrom("gone", 512<<20, "snap-none"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("from a missing snapshot: %v", err)
	}
	ents, _ := os.ReadDir(vs.Dir())
	for _, e := range ents {
		if n := e.Name(); strings.HasPrefix(n, "small") || strings.HasPrefix(n, "gone") || strings.HasPrefix(n, "big") {
			t.Errorf("left behind: %s", n)
		}
	}

	// Busy: Close keeps the pool; the next Open takes it as it is.
	if err := vs.Close(); err != nil || !isMountPoint(vs.Dir()) {
		t.Fatalf("close with live volumes: %v, mounted %v", err, isMountPoint(vs.Dir()))
	}
	again, err := OpenWith(vs.Dir(), Options{Pool: pool})
	if err != nil || again.Method() != MethodClone {
		t.Fatalf("reopen: %v %v", err, again)
	}
	c.Remove()
	v.Remove()
	if err := again.Close(); err != nil || isMountPoint(vs.Dir()) {
		t.Fatalf("close when unused: %v, mounted %v", err, isMountPoint(vs.Dir()))
	}
	// Mounted again from the same file, snapshots in it.
	third, err := OpenWith(vs.Dir(), Options{Pool: pool})
	if err != nil || third.Method() != MethodClone {
		t.Fatalf("mount again: %v %v", err, third)
	}
	if ids := third.SnapshotIDs(); len(ids) != 1 || ids[0] != "snap-1" {
		t.Errorf("snapshots after a remount: %v", ids)
	}
	// copy_on_write: off with the pool made before: mounted (its images
	// stay reachable), nothing new cloned.
	if err := third.Close(); err != nil || isMountPoint(vs.Dir()) {
		t.Fatalf("close: %v, mounted %v", err, isMountPoint(vs.Dir()))
	}
	if third.ImagesReachable() {
		t.Error("images reachable with the pool unmounted")
	}
	off, err := OpenWith(vs.Dir(), Options{CopyOnWrite: "off", Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	if off.Method() != MethodCopy || !isMountPoint(vs.Dir()) || !off.ImagesReachable() || len(off.SnapshotIDs()) != 1 {
		t.Errorf("off with a pool: method %s, mounted %v, images %v", off.Method(), isMountPoint(vs.Dir()), off.SnapshotIDs())
	}
	if _, _, err := off.Snapshot("x", "y"); !errors.Is(err, errdefs.ErrNotSupported) {
		t.Errorf("off: snapshot by clone: %v", err)
	}
}

// copy_on_write: off, or a directory without reflinks and no pool: the
// volumes work, snapshots are by copy, and the reason is given.
func TestPoolFallback(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("loop volumes need root")
	}
	if _, err := findMkfs(); err != nil {
		t.Skip(err)
	}
	base := t.TempDir()
	if probeClone(base) == nil {
		t.Skip("the test directory's filesystem has reflinks")
	}
	for _, o := range []Options{{CopyOnWrite: "off", Pool: filepath.Join(base, "p1")}, {}} {
		dir := filepath.Join(base, "v"+o.CopyOnWrite)
		vs, err := OpenWith(dir, o)
		if err != nil {
			t.Fatal(err)
		}
		if vs.Method() != MethodCopy || vs.CopyOnWriteInfo() == "" || isMountPoint(dir) {
			t.Errorf("%+v: method %s (%s), mounted %v", o, vs.Method(), vs.CopyOnWriteInfo(), isMountPoint(dir))
		}
		if _, _, err := vs.Snapshot("x", "s"); !errors.Is(err, errdefs.ErrNotSupported) {
			t.Errorf("%+v: snapshot: %v", o, err)
		}
	}
	if _, err := os.Stat(filepath.Join(base, "p1")); err == nil {
		t.Error("copy_on_write: off made a pool")
	}
	if _, err := OpenWith(filepath.Join(base, "v3"), Options{CopyOnWrite: "yes"}); err == nil {
		t.Error("copy_on_write: yes accepted")
	}
}

// A pool is not mounted over a directory that holds volumes of before:
// they stay reachable, and snapshots are by copy until they are gone.
func TestPoolNotOverVolumes(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("loop volumes need root")
	}
	if _, err := findTool("mkfs.xfs", "xfsprogs"); err != nil {
		t.Skip(err)
	}
	base := t.TempDir()
	if probeClone(base) == nil {
		t.Skip("the test directory's filesystem has reflinks")
	}
	dir := filepath.Join(base, "volumes")
	old, err := Open(dir, KindAuto, 0)
	if err != nil {
		t.Fatal(err)
	}
	v, err := old.Create("old", 8<<20, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Remove()
	vs, err := OpenWith(dir, Options{Pool: filepath.Join(base, "volumes.pool")})
	if err != nil {
		t.Fatal(err)
	}
	if vs.Method() != MethodCopy || !strings.Contains(vs.CopyOnWriteInfo(), "holds volumes") || !mountedAt(v.Path) {
		t.Errorf("method %s (%s); old volume mounted %v", vs.Method(), vs.CopyOnWriteInfo(), mountedAt(v.Path))
	}
	if _, err := os.Stat(filepath.Join(base, "volumes.pool")); err == nil {
		t.Error("a pool file was made")
	}
}

func mountedAt(p string) bool { return isMountPoint(p) }

// A volume left frozen (a daemon killed between FIFREEZE and FITHAW) is
// thawed by the next Open: a write into it completes (bounded wait; the
// control is that the freeze held it).
func TestPoolThawAtOpen(t *testing.T) {
	vs, pool := openPool(t)
	v, err := vs.Create("frozen", 16<<20, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Remove()
	root, err := os.Open(v.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	if _, err := unix.IoctlRetInt(int(root.Fd()), ioctlFIFREEZE); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- os.WriteFile(filepath.Join(v.Path, "f"), []byte("x"), 0o644) }()
	select {
	case err := <-done:
		unix.IoctlRetInt(int(root.Fd()), ioctlFITHAW)
		t.Fatalf("control: a write into a frozen volume did not wait (%v)", err)
	case <-time.After(300 * time.Millisecond):
	}
	if _, err := OpenWith(vs.Dir(), Options{Pool: pool}); err != nil {
		unix.IoctlRetInt(int(root.Fd()), ioctlFITHAW)
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		unix.IoctlRetInt(int(root.Fd()), ioctlFITHAW)
		t.Fatal("the write still waits after Open: the volume was not thawed")
	}
}

// TestPoolBlankClone: with reflinks, a new volume is a clone of one blank
// filesystem per size (made at the first volume of that size) instead of
// a fresh mkfs: its image shares its blocks with the blank, its root
// belongs to the owner asked for, it is empty and writable, and two
// volumes do not see each other's files. The control: copy_on_write off
// makes no blank, and its volumes have the same owner and contents.
func TestPoolBlankClone(t *testing.T) {
	vs, pool := openPool(t)
	const size = 64 << 20
	blank := filepath.Join(vs.Dir(), blankDir, "ext4-67108864.img")
	check := func(vs *Volumes, name string, uid int) *Volume {
		t.Helper()
		v, err := vs.Create(name, size, uid, uid+1)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { v.Remove() })
		var st unix.Stat_t
		if err := unix.Stat(v.Path, &st); err != nil || int(st.Uid) != uid || int(st.Gid) != uid+1 || st.Mode&0o777 != 0o755 {
			t.Fatalf("%s: root %d:%d mode %o (%v), want %d:%d 755", name, st.Uid, st.Gid, st.Mode&0o777, err, uid, uid+1)
		}
		if ents, err := os.ReadDir(v.Path); err != nil || len(ents) != 0 {
			t.Fatalf("%s: a new volume holds %v (%v), want nothing", name, ents, err)
		}
		if err := os.WriteFile(filepath.Join(v.Path, "f"), []byte(name), 0o644); err != nil {
			t.Fatalf("%s: write: %v", name, err)
		}
		return v
	}
	a := check(vs, "a", 100000)
	if _, err := os.Stat(blank); err != nil {
		t.Fatalf("no blank after the first volume: %v", err)
	}
	b := check(vs, "b", 200000)
	if got, _ := os.ReadFile(filepath.Join(a.Path, "f")); string(got) != "a" {
		t.Errorf("volume a holds %q after b was written, want \"a\"", got)
	}
	// A clone's image starts with every block shared: what it holds
	// exclusively is (almost) only what was written since.
	img, err := os.Stat(b.Image)
	if err != nil {
		t.Fatal(err)
	}
	unix.Sync()
	excl, err := exclusiveBytes(b.Image)
	if err != nil {
		t.Fatal(err)
	}
	var bst unix.Stat_t
	unix.Stat(blank, &bst)
	if held := bst.Blocks * 512; held == 0 || excl >= held {
		t.Errorf("volume b holds %d bytes of its own of a %d-byte image, the blank %d: want a clone sharing the blank's blocks", excl, img.Size(), held)
	}

	off, err := OpenWith(filepath.Join(t.TempDir(), "off"), Options{CopyOnWrite: "off"})
	if err != nil {
		t.Fatal(err)
	}
	check(off, "c", 300000)
	if _, err := os.Stat(filepath.Join(off.Dir(), blankDir)); !os.IsNotExist(err) {
		t.Errorf("copy_on_write off made a blank: %v", err)
	}
	// A daemon's start removes the blanks of the one before.
	if _, err := OpenWith(vs.Dir(), Options{Pool: pool}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(blank); !os.IsNotExist(err) {
		t.Errorf("the blank survived a new Open: %v", err)
	}
}

// Space reuses what it measured of an image that has not changed, and
// measures again one that was written to or cloned from; each figure is
// the one measuring every image afresh gives (the control).
func TestSpaceReusesMeasurements(t *testing.T) {
	vs, _ := openPool(t)
	var vols []*Volume
	for _, name := range []string{"a", "b", "c"} {
		v, err := vs.Create(name, 64<<20, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { v.Remove() })
		vols = append(vols, v)
	}
	// The control: every image measured now, nothing reused.
	fresh := func() int64 {
		t.Helper()
		var promised int64
		for _, v := range vols {
			var st unix.Stat_t
			if err := unix.Stat(v.Image, &st); err != nil {
				t.Fatal(err)
			}
			held, err := exclusiveBytes(v.Image)
			if err != nil {
				t.Fatal(err)
			}
			promised += st.Size - held
		}
		return promised
	}
	space := func(what string, newMaps int) {
		t.Helper()
		before := vs.held.maps
		_, promised, n, err := vs.Space()
		if err != nil || n != 3 {
			t.Fatalf("%s: Space: %d volumes, %v", what, n, err)
		}
		if want := fresh(); promised != want {
			t.Fatalf("%s: promised %d, measured afresh %d", what, promised, want)
		}
		if got := vs.held.maps - before; got != newMaps {
			t.Fatalf("%s: %d images measured, want %d", what, got, newMaps)
		}
	}
	time.Sleep(2 * heldQuiet) // the images are quiet now
	space("first", 3)
	space("nothing changed", 0)

	// 8 MiB written into a, to its image.
	data := bytes.Repeat([]byte{1}, 8<<20)
	if err := os.WriteFile(filepath.Join(vols[0].Path, "f"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	syncVolume(t, vols[0].Path)
	space("a written", 1)
	time.Sleep(2 * heldQuiet)
	space("a quiet again", 1) // measured while it had just changed: not reused
	space("a reused", 0)

	// A snapshot of b shares b's blocks: every image is measured again.
	if _, _, err := vs.Snapshot("b", "s1"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { vs.RemoveSnapshot("s1") })
	space("after a snapshot", 3)
}

// syncVolume writes a mounted volume's data through to its image.
func syncVolume(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Syncfs(int(f.Fd())); err != nil {
		t.Fatal(err)
	}
}
