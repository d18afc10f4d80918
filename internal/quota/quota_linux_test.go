package quota

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/internal/errdefs"
)

func openOrSkip(t *testing.T, dir string, reserve int64) *Volumes {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("loop volumes need root")
	}
	if _, err := findMkfs(); err != nil {
		t.Skip(err)
	}
	vs, err := Open(dir, KindAuto, reserve)
	if err != nil {
		t.Fatal(err)
	}
	return vs
}

// fill writes 1 MiB chunks to path until the write fails or limit bytes
// are written, and returns what it wrote and the error.
func fill(path string, limit int64) (int64, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = byte(i) | 1 // not zeros: nothing may store it sparsely
	}
	var n int64
	for n < limit {
		m, err := f.Write(buf)
		n += int64(m)
		if err != nil {
			return n, err
		}
	}
	return n, f.Sync()
}

func mounted(t *testing.T, path string) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && f[4] == path {
			return true
		}
	}
	return false
}

// A volume takes writes up to its size and then fails with ENOSPC; df
// (statfs) in it reports its own size; Remove leaves nothing behind.
func TestVolumeCap(t *testing.T) {
	dir := t.TempDir()
	vs := openOrSkip(t, filepath.Join(dir, "vols"), 0)
	v, err := vs.Create("a", 16<<20, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Remove()
	if !mounted(t, v.Path) {
		t.Fatalf("%s is not a mount point", v.Path)
	}
	entries, err := os.ReadDir(v.Path)
	if err != nil || len(entries) != 0 {
		t.Errorf("a new volume holds %v (%v), want nothing", entries, err)
	}

	// Control: a write within the size succeeds.
	if n, err := fill(filepath.Join(v.Path, "small"), 4<<20); err != nil {
		t.Fatalf("4 MiB into a 16 MiB volume: %v after %d bytes", err, n)
	}
	n, err := fill(filepath.Join(v.Path, "big"), 64<<20)
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("64 MiB into a 16 MiB volume: wrote %d bytes, err %v; want ENOSPC", n, err)
	}
	if n > 16<<20 {
		t.Errorf("wrote %d bytes into a 16 MiB volume", n)
	}
	var img unix.Stat_t
	if err := unix.Stat(v.Image, &img); err != nil {
		t.Fatal(err)
	}
	if img.Blocks*512 > 17<<20 {
		t.Errorf("the image holds %d bytes of host storage for a 16 MiB volume", img.Blocks*512)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(v.Path, &st); err != nil {
		t.Fatal(err)
	}
	if total := int64(st.Blocks) * st.Bsize; total > 16<<20 || total < 14<<20 {
		t.Errorf("statfs in the volume: %d bytes, want its own size (16 MiB less the file system's overhead)", total)
	}
	if st.Files > (16<<20)/InodeRatio {
		t.Errorf("statfs in the volume: %d inodes, want at most %d", st.Files, (16<<20)/InodeRatio)
	}

	if err := v.Remove(); err != nil {
		t.Fatal(err)
	}
	if mounted(t, v.Path) {
		t.Errorf("%s still mounted after Remove", v.Path)
	}
	for _, p := range []string{v.Path, v.Image} {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("%s still there after Remove (%v)", p, err)
		}
	}
	if err := v.Remove(); err != nil {
		t.Errorf("second Remove: %v", err)
	}
}

// The reserve holds: volumes are refused once their sizes would eat into
// it, and volumes filled to the brim leave it free on the host.
func TestVolumeReserve(t *testing.T) {
	dir := t.TempDir()
	outer := openOrSkip(t, filepath.Join(dir, "outer"), 0)
	// A small file system of its own, so that the numbers are exact.
	scratch, err := outer.Create("scratch", 160<<20, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer scratch.Remove()
	const reserve = 32 << 20
	vs, err := Open(filepath.Join(scratch.Path, "vols"), KindAuto, reserve)
	if err != nil {
		t.Fatal(err)
	}
	free, promised, n, err := vs.Space()
	if err != nil || promised != 0 || n != 0 {
		t.Fatalf("Space of an empty directory: free %d, promised %d, %d volumes, %v", free, promised, n, err)
	}
	size := (free-reserve)/2 - 2<<20
	a, err := vs.Create("a", size, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Remove()
	b, err := vs.Create("b", size, 0, 0)
	if err != nil {
		t.Fatalf("second volume of %d bytes (%d free, reserve %d): %v", size, free, reserve, err)
	}
	defer b.Remove()
	_, err = vs.Create("c", size, 0, 0)
	if !errors.Is(err, errdefs.ErrExhausted) {
		t.Fatalf("third volume of %d bytes: err %v, want ErrExhausted", size, err)
	}
	if _, err := os.Lstat(filepath.Join(vs.Dir(), "c.img")); !os.IsNotExist(err) {
		t.Errorf("a refused volume left its image (%v)", err)
	}

	// Fill both: the reserve is still free on the file system beneath.
	for _, v := range []*Volume{a, b} {
		if _, err := fill(filepath.Join(v.Path, "f"), size); !errors.Is(err, syscall.ENOSPC) && err != nil {
			t.Fatalf("fill %s: %v", v.Path, err)
		}
	}
	var st unix.Statfs_t
	if err := unix.Statfs(vs.Dir(), &st); err != nil {
		t.Fatal(err)
	}
	if left := int64(st.Bavail) * st.Bsize; left < reserve {
		t.Errorf("with both volumes full, %d bytes are free beneath them; the reserve is %d", left, reserve)
	}
	// Control: once one is removed, the same volume fits again.
	if err := a.Remove(); err != nil {
		t.Fatal(err)
	}
	c, err := vs.Create("c", size, 0, 0)
	if err != nil {
		t.Fatalf("after removing a volume, one of the same size: %v", err)
	}
	c.Remove()
}

// Sweep removes the volumes whose owner is gone and keeps the others.
func TestVolumeSweep(t *testing.T) {
	vs := openOrSkip(t, filepath.Join(t.TempDir(), "vols"), 0)
	keep, err := vs.Create("keep", 4<<20, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer keep.Remove()
	gone, err := vs.Create("gone", 4<<20, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer gone.Remove()
	vs.Sweep(func(name string) bool { return name == "keep" })
	if !mounted(t, keep.Path) {
		t.Errorf("Sweep removed a volume it was told to keep")
	}
	if mounted(t, gone.Path) {
		t.Errorf("Sweep left a volume whose owner is gone")
	}
	if _, err := os.Lstat(gone.Image); !os.IsNotExist(err) {
		t.Errorf("Sweep left %s", gone.Image)
	}
}

func TestCreateRefusesBadNames(t *testing.T) {
	vs := &Volumes{dir: "/nonexistent", kind: KindLoop}
	for _, name := range []string{"", "../x", "a/b", ".lock", "x\x00"} {
		if _, err := vs.Create(name, 4<<20, 0, 0); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("Create(%q): %v, want ErrInvalid", name, err)
		}
	}
	if _, err := vs.Create("ok", 1000, 0, 0); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("Create with 1000 bytes: %v, want ErrInvalid", err)
	}
	for _, v := range []*Volume{{Kind: KindLoop, Path: "relative", Image: "relative.img"}, {Kind: KindLoop, Path: "/a/b", Image: "/etc/passwd"}, {Kind: "other", Path: "/a", Image: "/a.img"}} {
		if err := v.Remove(); err == nil {
			t.Errorf("Remove of %+v: no error", v)
		}
	}
}

// BenchmarkVolume measures making and removing a 1 GiB volume (what a
// daemon's sandbox pays at create and destroy).
func BenchmarkVolume(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("loop volumes need root")
	}
	vs, err := Open(filepath.Join(b.TempDir(), "vols"), KindAuto, 0)
	if err != nil {
		b.Skip(err)
	}
	for i := 0; b.Loop(); i++ {
		v, err := vs.Create("b", 1<<30, 0, 0)
		if err != nil {
			b.Fatal(err)
		}
		if err := v.Remove(); err != nil {
			b.Fatal(err)
		}
	}
}

// TestProbeSweep: a test volume left by a daemon killed during Open is
// removed once its process is gone; one whose process lives is kept.
func TestProbeSweep(t *testing.T) {
	vs := openOrSkip(t, filepath.Join(t.TempDir(), "vols"), 0)
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	left, err := vs.create(fmt.Sprintf(".probe-%d", dead.Process.Pid), 8<<20, 0, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	defer left.Remove()
	live, err := vs.create(fmt.Sprintf(".probe-%d", os.Getpid()), 8<<20, 0, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	defer live.Remove()
	vs.Sweep(func(string) bool { return true })
	if mounted(t, left.Path) {
		t.Errorf("Sweep left the test volume of a process that is gone")
	}
	if _, err := os.Lstat(left.Image); !os.IsNotExist(err) {
		t.Errorf("Sweep left %s", left.Image)
	}
	if !mounted(t, live.Path) {
		t.Errorf("control: Sweep removed the test volume of a live process")
	}
}
