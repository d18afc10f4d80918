package quota

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/internal/errdefs"
)

// waitSpares waits until n spares of size are ready.
func waitSpares(t *testing.T, vs *Volumes, size int64, n int) {
	t.Helper()
	for i := 0; i < 1000; i++ {
		if vs.Spares()[size] == n {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("spares of %d bytes: %d ready, want %d", size, vs.Spares()[size], n)
}

// spareEntries lists the volume directory's entries of spares.
func spareEntries(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), sparePrefix) {
			out = append(out, e.Name())
		}
	}
	return out
}

// checkVolume checks that v is an empty, capped volume owned by uid:gid,
// mounted nosuid and nodev, that takes files.
func checkVolume(t *testing.T, v *Volume, uid, gid int) {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(v.Path, &st); err != nil || int(st.Uid) != uid || int(st.Gid) != gid || st.Mode&unix.S_IFMT != unix.S_IFDIR {
		t.Fatalf("%s: %+v %v, want a directory of %d:%d", v.Path, st, err, uid, gid)
	}
	if ents, _ := os.ReadDir(v.Path); len(ents) != 0 {
		t.Errorf("%s holds %d entries, want none", v.Path, len(ents))
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(v.Path, &fs); err != nil {
		t.Fatal(err)
	}
	if total := int64(fs.Blocks) * fs.Bsize; total > v.Size || total < v.Size*9/10 {
		t.Errorf("%s: %d bytes in all, want about %d", v.Path, total, v.Size)
	}
	if fs.Flags&unix.ST_NOSUID == 0 || fs.Flags&unix.ST_NODEV == 0 {
		t.Errorf("%s: mount flags %#x, want nosuid and nodev", v.Path, fs.Flags)
	}
	if !mountedAt(v.Path) {
		t.Errorf("%s is not a mount point", v.Path)
	}
	if _, err := os.Stat(v.Image); err != nil {
		t.Errorf("image: %v", err)
	}
	if n, err := fill(filepath.Join(v.Path, "fill"), 2*v.Size); !errors.Is(err, unix.ENOSPC) || n > v.Size {
		t.Errorf("filling %s: %d bytes, %v; want ENOSPC within %d", v.Path, n, err, v.Size)
	}
}

// TestSpareVolumes: with spares, a Create of a recently asked-for size
// hands over a volume made ahead, which is as a made one (empty, capped,
// owned, nosuid and nodev); the spare is made again; a name taken is
// refused without losing anything; Close removes the spares, and a later
// Open those of a process that is gone. The control: the first volume of
// a size, made the long way, is checked the same.
func TestSpareVolumes(t *testing.T) {
	vs, _ := openPoolWith(t, Options{Spares: 2})
	dir := vs.Dir()
	const size = 32 << 20
	first, err := vs.Create("first", size, 1000, 1001)
	if err != nil {
		t.Fatal(err)
	}
	checkVolume(t, first, 1000, 1001)
	waitSpares(t, vs, size, 2)
	if n := len(spareEntries(t, dir)); n != 4 {
		t.Fatalf("%d spare entries, want 2 directories and 2 images", n)
	}

	v, err := vs.Create("second", size, 1234, 5678)
	if err != nil {
		t.Fatal(err)
	}
	if v.Path != filepath.Join(dir, "second") || v.Image != v.Path+".img" || v.Size != size {
		t.Fatalf("volume %+v", v)
	}
	if n := vs.Spares()[size]; n != 1 {
		t.Errorf("%d spares right after a Create, want 1 (the other handed over)", n)
	}
	checkVolume(t, v, 1234, 5678)
	waitSpares(t, vs, size, 2) // made again

	// A name taken: refused, the volume there untouched, no spare lost.
	if _, err := vs.Create("second", size, 0, 0); !errors.Is(err, errdefs.ErrExists) {
		t.Errorf("a second volume named second: %v, want ErrExists", err)
	}
	if ents, _ := os.ReadDir(v.Path); len(ents) == 0 {
		t.Error("the volume named second lost its files")
	}
	waitSpares(t, vs, size, 2)

	for _, x := range []*Volume{first, v} {
		if err := x.Remove(); err != nil {
			t.Fatal(err)
		}
		if mountedAt(x.Path) {
			t.Errorf("%s still mounted", x.Path)
		}
	}
	if err := vs.Close(); err != nil {
		t.Fatal(err)
	}
	if left := spareEntries(t, dir); len(left) != 0 {
		t.Errorf("spares left after Close: %v", left)
	}

	// Spares of a process that is gone or of another boot: removed by
	// Sweep (and by Open); those of a live process of this boot stay, but
	// not past an Open by their own process (which has made none yet).
	vs2, _ := openPoolWith(t, Options{})
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	me := strconv.Itoa(os.Getpid())
	dead := sparePrefix + strconv.Itoa(cmd.Process.Pid) + "-" + bootID() + "-1"
	oldBoot := sparePrefix + me + "-00000000-2"
	live := sparePrefix + me + "-" + bootID() + "-9"
	for _, name := range []string{dead, oldBoot, live} {
		if _, err := vs2.create(name, 8<<20, 0, 0, true); err != nil {
			t.Fatal(err)
		}
	}
	vs2.Sweep(func(string) bool { return true })
	for _, name := range []string{dead, oldBoot} {
		if _, err := os.Stat(filepath.Join(vs2.Dir(), name+".img")); !os.IsNotExist(err) {
			t.Errorf("%s is still there after Sweep: %v", name, err)
		}
	}
	if !mountedAt(filepath.Join(vs2.Dir(), live)) {
		t.Fatal("Sweep removed the spare of a live process of this boot")
	}
	if _, err := OpenWith(vs2.Dir(), Options{}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(vs2.Dir(), live+".img")); !os.IsNotExist(err) {
		t.Errorf("Open by the spare's own process left it: %v", err)
	}
}

// TestSpareVolumesGiveWayToReserve: spares hold the space they promise;
// a Create that only fits without them drops them and succeeds (the
// control: without spares it fits the same way).
func TestSpareVolumesGiveWayToReserve(t *testing.T) {
	vs, _ := openPoolWith(t, Options{Spares: 2})
	free, promised, _, err := vs.Space()
	if err != nil {
		t.Fatal(err)
	}
	// Room for about 3.5 volumes of size a: the first and two spares take
	// 3, and a volume of 1.2a fits only once the spares are gone.
	room := free - promised
	a := (room / 7 * 2) &^ (1<<20 - 1)
	vs.reserve = room - a*7/2
	if vs.reserve < 0 || a < 64<<20 {
		t.Skipf("the test filesystem has %d bytes free: too small", room)
	}
	first, err := vs.Create("first", a, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Remove()
	waitSpares(t, vs, a, 2)
	b := (a * 6 / 5) &^ (1<<20 - 1)
	v, err := vs.Create("bigger", b, 0, 0)
	if err != nil {
		t.Fatalf("a volume that fits once the spares are gone: %v", err)
	}
	defer v.Remove()
	if n := vs.Spares()[a]; n != 0 {
		t.Errorf("%d spares of the first size left", n)
	}
	// And one that does not fit even without them is still refused.
	if _, err := vs.Create("toobig", 3*a, 0, 0); !errors.Is(err, errdefs.ErrExhausted) {
		t.Errorf("a volume over the reserve: %v, want ErrExhausted", err)
	}
	vs.Close()
}
