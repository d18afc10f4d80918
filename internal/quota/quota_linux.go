package quota

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/internal/errdefs"
)

// Volumes makes capped volumes in one host directory, which belongs to
// one owner (a runtime and its state root): Sweep removes what that owner
// no longer knows.
type Volumes struct {
	dir     string
	kind    string
	reserve int64
	mkfs    string
	// cow: images can be cloned (cow_linux.go); cowInfo says why or why
	// not; pool is the pool file mounted on dir by Open ("": none).
	cow      bool
	cowInfo  string
	pool     string
	poolFile string // the pool file of the options, mounted or not
	held     heldCache
	spare    spares // spare_linux.go
}

// Open prepares dir (created if missing, mode 0711) for volumes of the
// given kind (KindAuto or "": the best the host offers) with reserve
// bytes of its filesystem kept free. It makes and removes a small test
// volume, so that a host that cannot make volumes fails here, with the
// reason and the fix, rather than at the first sandbox.
func Open(dir, kind string, reserve int64) (*Volumes, error) {
	return OpenWith(dir, Options{Kind: kind, Reserve: reserve, CopyOnWrite: "off"})
}

// OpenWith is Open with copy-on-write settings (cow_linux.go): with
// o.CopyOnWrite auto, images are cloned where the directory's filesystem
// has reflinks, else in a pool made or mounted on the directory.
func OpenWith(dir string, o Options) (*Volumes, error) {
	kind, reserve := o.Kind, o.Reserve
	if kind == "" {
		kind = KindAuto
	}
	if kind != KindAuto && kind != KindLoop {
		return nil, fmt.Errorf("disk quota %q: unknown kind (want %s or %s)", kind, KindAuto, KindLoop)
	}
	if reserve < 0 {
		return nil, fmt.Errorf("disk reserve %d: must not be negative", reserve)
	}
	if !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("volume directory %q: must be absolute", dir)
	}
	if o.CopyOnWrite != "" && o.CopyOnWrite != "auto" && o.CopyOnWrite != "off" {
		return nil, fmt.Errorf("copy_on_write %q: want auto or off", o.CopyOnWrite)
	}
	if o.Spares < 0 {
		return nil, fmt.Errorf("spare volumes %d: must not be negative", o.Spares)
	}
	vs := &Volumes{dir: filepath.Clean(dir), kind: KindLoop, reserve: reserve}
	vs.spare.ready, vs.spare.making = map[int64][]*Volume{}, map[int64]int{}
	if err := vs.probeLoop(); err != nil {
		return nil, fmt.Errorf("disk quota in %s: loop volumes: %w", dir, err)
	}
	vs.setupCoW(o)
	vs.removeOrphans(true)
	if vs.cow {
		vs.thawAll()
		os.RemoveAll(filepath.Join(vs.dir, blankDir))
		vs.spare.keep = o.Spares
	}
	return vs, nil
}

// Kind is the kind of volume made.
func (vs *Volumes) Kind() string { return vs.kind }

// Dir is the directory the volumes live in.
func (vs *Volumes) Dir() string { return vs.dir }

// Reserve is the free space kept on the directory's filesystem.
func (vs *Volumes) Reserve() int64 { return vs.reserve }

func (vs *Volumes) String() string {
	return fmt.Sprintf("%s volumes in %s (ext4 images made with %s), %s kept in reserve, snapshots by %s (%s)", vs.kind, vs.dir, vs.mkfs, Human(vs.reserve), vs.Method(), vs.cowInfo)
}

// probeLoop checks what loop volumes need, then makes and removes one.
func (vs *Volumes) probeLoop() error {
	if os.Geteuid() != 0 {
		return errors.New("mounting an ext4 image needs root")
	}
	mkfs, err := findMkfs()
	if err != nil {
		return err
	}
	vs.mkfs = mkfs
	fd, err := unix.Open("/dev/loop-control", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open /dev/loop-control: %w (load the loop module: modprobe loop)", err)
	}
	unix.Close(fd)
	if err := ensureDir(vs.dir); err != nil {
		return err
	}
	v, err := vs.create(fmt.Sprintf(".probe-%d", os.Getpid()), 8<<20, 0, 0, false)
	if err != nil {
		return fmt.Errorf("a test volume failed: %w", err)
	}
	return v.Remove()
}

// findMkfs finds mkfs.ext4 in PATH or the usual sbin directories (a
// daemon's PATH may lack them).
func findMkfs() (string, error) {
	if p, err := exec.LookPath("mkfs.ext4"); err == nil {
		return p, nil
	}
	for _, p := range []string{"/usr/sbin/mkfs.ext4", "/sbin/mkfs.ext4"} {
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", errors.New("mkfs.ext4 not found (install e2fsprogs)")
}

// ensureDir creates dir and refuses one that another user could tamper
// with.
func ensureDir(dir string) error {
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return fmt.Errorf("volume directory: %w", err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return fmt.Errorf("volume directory: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR || int(st.Uid) != os.Geteuid() || st.Mode&0o022 != 0 {
		return fmt.Errorf("volume directory %s must be a directory owned by uid %d and writable only by it", dir, os.Geteuid())
	}
	return nil
}

// Create makes the volume name (a file name) of size bytes, its root
// directory owned by uid and gid, mode 0755. It fails with
// errdefs.ErrExhausted when the volume would eat into the reserve.
func (vs *Volumes) Create(name string, size int64, uid, gid int) (*Volume, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	if size < 1<<20 {
		return nil, fmt.Errorf("volume %s: size %d: want at least 1 MiB: %w", name, size, errdefs.ErrInvalid)
	}
	if v := vs.takeSpare(name, size, uid, gid); v != nil {
		return v, nil
	}
	v, err := vs.create(name, size, uid, gid, true)
	if errors.Is(err, errdefs.ErrExhausted) && vs.dropSpares() {
		// The spares' promised space is what was missing.
		v, err = vs.create(name, size, uid, gid, true)
	}
	return v, err
}

// Planned is the record of the volume Create(name, size, ...) makes, known
// before it exists: its owner can record it (and start what does not need
// its content) while it is being made; Remove of it is safe at any time.
func (vs *Volumes) Planned(name string, size int64) (*Volume, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	return vs.volume(name, size), nil
}

func (vs *Volumes) volume(name string, size int64) *Volume {
	p := filepath.Join(vs.dir, name)
	return &Volume{Kind: KindLoop, Path: p, Image: p + ".img", Size: size}
}

// checkName refuses a volume name that is not a plain file name.
func checkName(name string) error {
	if name == "" || strings.ContainsAny(name, "/\x00") || strings.HasPrefix(name, ".") {
		return fmt.Errorf("volume name %q: want a plain file name: %w", name, errdefs.ErrInvalid)
	}
	return nil
}

func (vs *Volumes) create(name string, size int64, uid, gid int, checkReserve bool) (_ *Volume, retErr error) {
	v := vs.volume(name, size)
	img, err := vs.allocate(v, checkReserve, v.Size)
	if err != nil {
		return nil, err
	}
	defer img.Close()
	defer func() {
		if retErr != nil {
			v.Remove()
		}
	}()
	// With reflinks, a clone of an empty filesystem of this size made
	// before (cloneBlank) instead of mkfs: no process to start, no fsync.
	cloned := vs.cow && checkReserve && vs.cloneBlank(img, size) == nil
	if !cloned {
		if err := vs.format(v.Image, size, uid, gid); err != nil {
			return nil, err
		}
	}
	if err := os.Mkdir(v.Path, 0o700); err != nil {
		return nil, fmt.Errorf("volume mount point: %w", err)
	}
	// The loop device clears itself (autoclear) once nothing holds it.
	if err := mountImage(img, name, v.Path, false); err != nil {
		return nil, err
	}
	if cloned {
		// The blank's root belongs to root; this volume's to uid:gid,
		// as mkfs's root_owner would have made it.
		if err := os.Chown(v.Path, uid, gid); err != nil {
			return nil, fmt.Errorf("volume %s: %w", v.Path, err)
		}
	}
	// mkfs made lost+found; the volume is a sandbox's empty workspace.
	// (A clone's blank had it removed once: removeLostFound.)
	if !cloned {
		if err := os.Remove(filepath.Join(v.Path, "lost+found")); err != nil && !os.IsNotExist(err) {
			return nil, err
		}
	}
	return v, nil
}

// format makes an empty ext4 filesystem of size bytes in the image at
// path (which exists), its root directory owned by uid:gid.
func (vs *Volumes) format(path string, size int64, uid, gid int) error {
	cmd := exec.Command(vs.mkfs, "-q", "-F", "-b", "4096", "-I", "256", "-i", strconv.Itoa(InodeRatio), "-m", "0",
		"-O", "^has_journal", "-E", fmt.Sprintf("lazy_itable_init=1,nodiscard,root_owner=%d:%d", uid, gid), "-L", "airlock", path)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C"}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s: %w: %s", vs.mkfs, path, err, bytes.TrimSpace(out))
	}
	return nil
}

// allocate creates v's image, sparse, of length bytes. With the reserve
// checked, the check and the creation happen under the directory's lock,
// so that two creations (from any process) cannot both take the last
// room.
func (vs *Volumes) allocate(v *Volume, checkReserve bool, length int64) (*os.File, error) {
	if checkReserve {
		lock, err := os.OpenFile(filepath.Join(vs.dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o600)
		if err != nil {
			return nil, fmt.Errorf("volume directory lock: %w", err)
		}
		defer lock.Close() // releases the lock
		if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
			return nil, fmt.Errorf("volume directory lock: %w", err)
		}
		free, promised, _, err := vs.Space()
		if err != nil {
			return nil, err
		}
		// A disk larger than the store could ever hold beside the reserve
		// is the caller's mistake (400), not a full host to wait out (429).
		// A reserve that leaves no room at all is the operator's: 429 below.
		if total, err := vs.capacity(); err == nil && total > vs.reserve && v.Size > total-vs.reserve {
			return nil, fmt.Errorf("a %s disk can never fit on the daemon's volume store: it holds %s in all, %s of it kept in reserve, so a disk may be at most %s: %w",
				Human(v.Size), Human(total), Human(vs.reserve), Human(total-vs.reserve), errdefs.ErrInvalid)
		}
		if free-promised-v.Size < vs.reserve {
			// Said to API callers, tenants included: no host path, no
			// count of other sandboxes' volumes.
			return nil, fmt.Errorf("a %s disk does not fit on the daemon's volume store: %s free, %s promised to live sandboxes, %s kept in reserve (lower the sandbox's disk size, or remove sandboxes): %w",
				Human(v.Size), Human(free), Human(promised), Human(vs.reserve), errdefs.ErrExhausted)
		}
	}
	img, err := os.OpenFile(v.Image, os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o600)
	if err != nil {
		if os.IsExist(err) {
			return nil, fmt.Errorf("volume %s: %w", v.Path, errdefs.ErrExists)
		}
		return nil, fmt.Errorf("volume image: %w", err)
	}
	if err := img.Truncate(length); err != nil {
		img.Close()
		os.Remove(v.Image)
		return nil, fmt.Errorf("volume image %s: %w", v.Image, err)
	}
	return img, nil
}

// capacity is the size of the directory's filesystem (under a pool, the
// lesser of the pool's and the data disk's).
func (vs *Volumes) capacity() (int64, error) {
	total := int64(-1)
	for _, dir := range []string{vs.dir, filepath.Dir(vs.pool)} {
		if dir == "." {
			continue // no pool
		}
		var st unix.Statfs_t
		if err := unix.Statfs(dir, &st); err != nil {
			return 0, fmt.Errorf("statfs %s: %w", dir, err)
		}
		if n := int64(st.Blocks) * st.Bsize; total < 0 || n < total {
			total = n
		}
	}
	return total, nil
}

// Space reports the free space of the directory's filesystem (for an
// unprivileged writer; under a pool, the lesser of the pool's and the
// data disk's), what the live volumes may still grow into (their size
// less what their image already holds, or with reflinks less what it
// holds unshared: a clone's shared blocks are copied when written), and
// how many there are.
func (vs *Volumes) Space() (free, promised int64, n int, err error) {
	var st unix.Statfs_t
	if err := unix.Statfs(vs.dir, &st); err != nil {
		return 0, 0, 0, fmt.Errorf("statfs %s: %w", vs.dir, err)
	}
	free = int64(st.Bavail) * st.Bsize
	if vs.pool != "" {
		var disk unix.Statfs_t
		if err := unix.Statfs(filepath.Dir(vs.pool), &disk); err != nil {
			return 0, 0, 0, fmt.Errorf("statfs %s: %w", filepath.Dir(vs.pool), err)
		}
		free = min(free, int64(disk.Bavail)*disk.Bsize)
	}
	entries, err := os.ReadDir(vs.dir)
	if err != nil {
		return 0, 0, 0, err
	}
	gen := vs.held.generation()
	seen := make(map[string]bool, len(entries))
	defer vs.held.keepOnly(seen)
	for _, e := range entries {
		seen[filepath.Join(vs.dir, e.Name())] = true
		if !strings.HasSuffix(e.Name(), ".img") {
			continue
		}
		var fst unix.Stat_t
		if unix.Stat(filepath.Join(vs.dir, e.Name()), &fst) != nil {
			continue // removed meanwhile
		}
		n++
		held := fst.Blocks * 512
		if vs.cow {
			held = vs.held.exclusive(filepath.Join(vs.dir, e.Name()), &fst, gen)
		}
		if rest := fst.Size - held; rest > 0 {
			promised += rest
		}
	}
	return free, promised, n, nil
}

// attachLoop attaches img to a free loop device (autoclear, direct I/O
// where the backing filesystem allows it, read-only with ro) and returns the device's path
// and an open descriptor on it.
func attachLoop(img *os.File, name string, ro bool) (string, int, error) {
	ctl, err := unix.Open("/dev/loop-control", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", -1, fmt.Errorf("open /dev/loop-control: %w", err)
	}
	defer unix.Close(ctl)
	for try := 0; try < 32; try++ {
		n, err := unix.IoctlRetInt(ctl, unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return "", -1, fmt.Errorf("find a free loop device: %w", err)
		}
		dev := "/dev/loop" + strconv.Itoa(n)
		fd, err := unix.Open(dev, unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			return "", -1, fmt.Errorf("open %s: %w", dev, err)
		}
		cfg := unix.LoopConfig{Fd: uint32(img.Fd())}
		cfg.Info.Flags = unix.LO_FLAGS_AUTOCLEAR | unix.LO_FLAGS_DIRECT_IO
		if ro {
			cfg.Info.Flags |= unix.LO_FLAGS_READ_ONLY
		}
		copy(cfg.Info.File_name[:len(cfg.Info.File_name)-1], "airlock:"+name)
		err = unix.IoctlLoopConfigure(fd, &cfg)
		if err == unix.EINVAL {
			// The backing filesystem cannot do direct I/O.
			cfg.Info.Flags &^= unix.LO_FLAGS_DIRECT_IO
			err = unix.IoctlLoopConfigure(fd, &cfg)
		}
		if err == unix.EBUSY {
			unix.Close(fd) // taken by someone else since GET_FREE
			continue
		}
		if err != nil {
			unix.Close(fd)
			return "", -1, fmt.Errorf("attach %s to %s: %w", img.Name(), dev, err)
		}
		return dev, fd, nil
	}
	return "", -1, errors.New("attach a loop device: every free device was taken before it could be configured")
}

// Remove unmounts the volume and deletes it. Removing a volume that is
// already gone is not an error.
func (v *Volume) Remove() error {
	if v.Kind != KindLoop {
		return fmt.Errorf("volume %s: unknown kind %q", v.Path, v.Kind)
	}
	if !filepath.IsAbs(v.Path) || filepath.Clean(v.Path) != v.Path || v.Image != v.Path+".img" {
		return fmt.Errorf("volume %q (image %q): not a volume this package made", v.Path, v.Image)
	}
	var errs []error
	err := unix.Unmount(v.Path, 0)
	if err == unix.EBUSY {
		// Still held (a mount namespace that has not gone yet): detach
		// it; the loop device clears itself when the last user goes.
		err = unix.Unmount(v.Path, unix.MNT_DETACH)
	}
	if err != nil && err != unix.EINVAL && err != unix.ENOENT {
		errs = append(errs, fmt.Errorf("unmount %s: %w", v.Path, err))
	}
	for _, p := range []string{v.Path, v.Image} {
		if err := os.Remove(p); err != nil && !os.IsNotExist(err) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Remove removes the volume name, if there is one.
func (vs *Volumes) Remove(name string) error {
	if err := checkName(name); err != nil {
		return err
	}
	p := filepath.Join(vs.dir, name)
	return (&Volume{Kind: KindLoop, Path: p, Image: p + ".img"}).Remove()
}

// Sweep removes the volumes whose name keep does not accept (their owner
// is gone).
func (vs *Volumes) Sweep(keep func(name string) bool) {
	// Spares and test volumes of a process killed meanwhile: removed once
	// that process is gone.
	vs.removeOrphans(false)
	entries, err := os.ReadDir(vs.dir)
	if err != nil {
		return
	}
	seen := map[string]bool{}
	for _, e := range entries {
		name := strings.TrimSuffix(e.Name(), ".img")
		if seen[name] {
			continue
		}
		if strings.HasPrefix(name, ".") {
			continue
		}
		seen[name] = true
		if !keep(name) {
			vs.Remove(name)
		}
	}
}
