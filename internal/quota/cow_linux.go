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
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/internal/errdefs"
)

// Copy-on-write volumes.
//
// A volume's ext4 image can be cloned (FICLONE: the clone shares every
// block with its source until either writes it) when the volume
// directory's filesystem has reflinks (XFS made with reflink=1, btrfs).
// Then a snapshot of a volume is a clone of its image, taken with the
// volume's filesystem frozen (FIFREEZE: every dirty block written, no
// write until FITHAW), and a volume made from a snapshot is a clone of
// the snapshot's image: both take the same few milliseconds whatever the
// volume holds.
//
// When the directory's filesystem has no reflinks (ext4), Open can make a
// pool: a sparse file beside the directory (Options.Pool), formatted XFS
// with reflinks and loop-mounted on the directory. The pool is made once,
// while the directory holds no volume, and mounted again at every Open;
// Close unmounts it when nothing in it is in use. Nothing here removes
// the pool file.

// snapDir is the directory of snapshot images inside the volume
// directory (its name starts with a dot: never a volume).
const snapDir = ".snapshots"

// blankDir holds, inside the volume directory, one empty formatted image
// per volume size (cloneBlank). The daemon's start empties it, so a new
// e2fsprogs or new mkfs options take effect.
const blankDir = ".blank"

const (
	ioctlFIFREEZE     = 0xC0045877 // _IOWR('X', 119, int)
	ioctlFITHAW       = 0xC0045878 // _IOWR('X', 120, int)
	ioctlFIEMAP       = 0xC020660B // _IOWR('f', 11, struct fiemap)
	fiemapExtentLast  = 0x1
	fiemapExtentShare = 0x2000
)

// Method is how snapshots of these volumes are taken: MethodClone or
// MethodCopy.
func (vs *Volumes) Method() string {
	if vs.cow {
		return MethodClone
	}
	return MethodCopy
}

// CopyOnWriteInfo says where the reflinks come from (MethodClone) or why
// there are none and how to get them (MethodCopy).
func (vs *Volumes) CopyOnWriteInfo() string { return vs.cowInfo }

// setupCoW decides whether images can be cloned, making or mounting the
// pool when the directory's own filesystem has no reflinks.
func (vs *Volumes) setupCoW(o Options) {
	vs.poolFile = o.Pool
	if o.CopyOnWrite == "off" {
		vs.cowInfo = "copy_on_write: off in the configuration"
		// A pool made before still holds volumes and snapshot images:
		// mounted, though nothing new is cloned.
		if fi, err := os.Stat(o.Pool); o.Pool != "" && err == nil && fi.Mode().IsRegular() && !isMountPoint(vs.dir) {
			if err := vs.mountPool(o.Pool); err != nil {
				vs.cowInfo += fmt.Sprintf("; the pool %s made before is not mounted: %v", o.Pool, err)
			} else {
				vs.pool = o.Pool
			}
		}
		return
	}
	if isMountPoint(vs.dir) {
		if err := probeClone(vs.dir); err == nil {
			vs.cow, vs.cowInfo = true, "the volume directory is a mount with reflinks ("+fsName(vs.dir)+")"
			vs.pool = o.Pool // ours if it came from o.Pool: Close may unmount it
			return
		} else {
			vs.cowInfo = fmt.Sprintf("the volume directory is a mount without reflinks: %v", err)
			return
		}
	}
	if err := probeClone(vs.dir); err == nil {
		vs.cow, vs.cowInfo = true, "the volume directory's filesystem has reflinks ("+fsName(vs.dir)+")"
		return
	}
	if o.Pool == "" {
		vs.cowInfo = "the volume directory's filesystem (" + fsName(vs.dir) + ") has no reflinks"
		return
	}
	if err := vs.mountPool(o.Pool); err != nil {
		vs.cowInfo = fmt.Sprintf("no reflinks on %s and no pool: %v", fsName(vs.dir), err)
		return
	}
	if err := probeClone(vs.dir); err != nil {
		unix.Unmount(vs.dir, 0)
		vs.cowInfo = fmt.Sprintf("the pool %s has no reflinks: %v", o.Pool, err)
		return
	}
	vs.cow, vs.pool = true, o.Pool
	vs.cowInfo = "an XFS pool with reflinks in " + o.Pool + " mounted on the volume directory"
}

// cloneBlank fills img (empty) with a clone of an empty ext4 filesystem
// of size bytes, formatted once per size and daemon (mkfs and its four
// fsyncs through the pool's loop device took several milliseconds of every
// cold sandbox creation). Every clone starts with the blank's UUID and
// directory-hash seed, as forks of one snapshot do: nothing in a sandbox
// can read them, and no mount or lookup here goes by UUID.
func (vs *Volumes) cloneBlank(img *os.File, size int64) error {
	if size%4096 != 0 {
		return errors.New("a size that is not a whole number of blocks")
	}
	path := filepath.Join(vs.dir, blankDir, fmt.Sprintf("ext4-%d.img", size))
	src, err := os.Open(path)
	if os.IsNotExist(err) {
		if err = vs.makeBlank(path, size); err == nil {
			src, err = os.Open(path)
		}
	}
	if err != nil {
		return err
	}
	defer src.Close()
	if fi, err := src.Stat(); err != nil || fi.Size() != size {
		return fmt.Errorf("%s: not a blank of %d bytes", path, size)
	}
	return unix.IoctlFileClone(int(img.Fd()), int(src.Fd()))
}

// makeBlank formats a blank of size bytes at path (made under another
// name and renamed: a concurrent maker's result is as good).
func (vs *Volumes) makeBlank(path string, size int64) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	err = tmp.Truncate(size)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = vs.format(tmp.Name(), size, 0, 0)
	}
	if err == nil {
		err = removeLostFound(tmp.Name())
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	return err
}

// removeLostFound removes the lost+found directory mkfs made in the image
// at path, once for every volume cloned from it: each removal from a clone
// read the directory through the loop device and wrote its first shared
// blocks (0.56 ms of every cold sandbox creation, with 50 volumes in the
// pool; a volume is a sandbox's empty workspace).
func removeLostFound(path string) (err error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	mnt, err := os.MkdirTemp(filepath.Dir(path), ".mnt-")
	if err != nil {
		return err
	}
	defer os.Remove(mnt)
	if err := mountImage(f, "blank", mnt, false); err != nil {
		return err
	}
	defer func() {
		if uerr := unix.Unmount(mnt, 0); uerr != nil && err == nil {
			err = fmt.Errorf("unmount the blank %s: %w", path, uerr)
		}
	}()
	if err := os.Remove(filepath.Join(mnt, "lost+found")); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("the blank %s: %w", path, err)
	}
	return nil
}

// fsName names the filesystem type of path.
func fsName(path string) string {
	var st unix.Statfs_t
	if unix.Statfs(path, &st) != nil {
		return "unknown"
	}
	switch uint32(st.Type) {
	case unix.EXT4_SUPER_MAGIC:
		return "ext4"
	case unix.XFS_SUPER_MAGIC:
		return "xfs"
	case unix.BTRFS_SUPER_MAGIC:
		return "btrfs"
	case unix.TMPFS_MAGIC:
		return "tmpfs"
	case unix.OVERLAYFS_SUPER_MAGIC:
		return "overlay"
	}
	return fmt.Sprintf("type %#x", st.Type)
}

// isMountPoint: path is the root of a mount.
func isMountPoint(path string) bool {
	var st, parent unix.Stat_t
	if unix.Lstat(path, &st) != nil || unix.Lstat(filepath.Dir(path), &parent) != nil {
		return false
	}
	return st.Dev != parent.Dev
}

// probeClone clones a small file in dir.
func probeClone(dir string) error {
	src, err := os.CreateTemp(dir, ".clone-probe-")
	if err != nil {
		return err
	}
	defer os.Remove(src.Name())
	defer src.Close()
	if _, err := src.Write(make([]byte, 4096)); err != nil {
		return err
	}
	dst, err := os.CreateTemp(dir, ".clone-probe-")
	if err != nil {
		return err
	}
	defer os.Remove(dst.Name())
	defer dst.Close()
	if err := unix.IoctlFileClone(int(dst.Fd()), int(src.Fd())); err != nil {
		return fmt.Errorf("FICLONE: %w", err)
	}
	return nil
}

// findTool finds an administration program in PATH or the usual sbin
// directories (a daemon's PATH may lack them).
func findTool(name, pkg string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, d := range []string{"/usr/sbin", "/sbin"} {
		p := filepath.Join(d, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found (install %s)", name, pkg)
}

func run(prog string, args ...string) error {
	cmd := exec.Command(prog, args...)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C"}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s: %w: %s", filepath.Base(prog), strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// mountPool mounts the pool file on the volume directory, making the
// pool first when there is none and the directory holds no volume.
func (vs *Volumes) mountPool(pool string) error {
	if !filepath.IsAbs(pool) {
		return fmt.Errorf("pool %q: not an absolute path", pool)
	}
	f, err := os.OpenFile(pool, os.O_RDWR, 0)
	if errors.Is(err, os.ErrNotExist) {
		f, err = vs.makePool(pool)
	}
	if err != nil {
		return err
	}
	defer f.Close()
	if ents, _ := os.ReadDir(vs.dir); len(ents) > 0 && !(len(ents) == 1 && ents[0].Name() == ".lock") {
		// Mounting over them would hide live volumes.
		return fmt.Errorf("the volume directory %s holds volumes made before the pool; it is mounted once they are gone", vs.dir)
	}
	// The pool's filesystem may still be alive on a loop device (a mount
	// namespace made while it was mounted can hold it a while after an
	// unmount): mount that device again (the same filesystem), never the
	// file through a second device (two filesystems writing one file).
	const flags = unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC
	if dev := loopOf(f); dev != "" {
		if err := unix.Mount(dev, vs.dir, "xfs", flags, "discard"); err == nil {
			return os.Chmod(vs.dir, 0o711)
		} else if loopOf(f) != "" {
			return fmt.Errorf("mount the pool %s (%s, attached before) on %s: %w", pool, dev, vs.dir, err)
		}
		// Cleared meanwhile: attach it afresh.
	}
	dev, loop, err := attachLoop(f, "pool", false)
	if err != nil {
		return err
	}
	err = unix.Mount(dev, vs.dir, "xfs", flags, "discard")
	unix.Close(loop)
	if err != nil {
		return fmt.Errorf("mount the pool %s (%s) on %s: %w", pool, dev, vs.dir, err)
	}
	if err := os.Chmod(vs.dir, 0o711); err != nil {
		unix.Unmount(vs.dir, 0)
		return err
	}
	return nil
}

// loopOf returns the loop device f is attached to ("": none).
func loopOf(f *os.File) string {
	var st unix.Stat_t
	if unix.Fstat(int(f.Fd()), &st) != nil {
		return ""
	}
	devs, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, p := range devs {
		dev := "/dev/" + filepath.Base(filepath.Dir(filepath.Dir(p)))
		fd, err := unix.Open(dev, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			continue
		}
		info, err := unix.IoctlLoopGetStatus64(fd)
		unix.Close(fd)
		if err == nil && info.Device == st.Dev && info.Inode == st.Ino {
			return dev
		}
	}
	return ""
}

// makePool makes the pool file: sparse, the size of the filesystem it is
// on, formatted XFS with reflinks. Made under a temporary name and
// renamed: a pool file is whole or absent.
func (vs *Volumes) makePool(pool string) (*os.File, error) {
	if ents, _ := os.ReadDir(vs.dir); len(ents) > 0 && !(len(ents) == 1 && ents[0].Name() == ".lock") {
		return nil, fmt.Errorf("the volume directory %s holds volumes made before the pool; it is made once they are gone", vs.dir)
	}
	mkfs, err := findTool("mkfs.xfs", "xfsprogs")
	if err != nil {
		return nil, err
	}
	var st unix.Statfs_t
	if err := unix.Statfs(filepath.Dir(pool), &st); err != nil {
		return nil, err
	}
	size := int64(st.Blocks) * st.Bsize &^ (1<<20 - 1)
	if size < 512<<20 {
		size = 512 << 20
	}
	tmp := pool + ".new"
	os.Remove(tmp)
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("pool: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			f.Close()
			os.Remove(tmp)
		}
	}()
	if err := f.Truncate(size); err != nil {
		return nil, fmt.Errorf("pool: %w", err)
	}
	// -K: nothing to discard in a new sparse file; the smallest log
	// (64 MiB, written at once) is plenty for a few image files.
	if err := run(mkfs, "-q", "-K", "-m", "reflink=1,crc=1", "-l", "size=64m", "-L", "airlock-pool", tmp); err != nil {
		return nil, err
	}
	if err := os.Rename(tmp, pool); err != nil {
		return nil, fmt.Errorf("pool: %w", err)
	}
	ok = true
	return f, nil
}

// ImagesReachable says whether snapshot images made before can be read:
// false when a pool file exists but is not mounted on the directory.
func (vs *Volumes) ImagesReachable() bool {
	if vs.poolFile == "" {
		return true
	}
	if _, err := os.Stat(vs.poolFile); err != nil {
		return true
	}
	return isMountPoint(vs.dir)
}

// Close removes the spare volumes, then unmounts the pool when the volumes
// opened it and nothing in it is in use (no volume mounted; a busy pool
// stays mounted, for the sandboxes that outlive the daemon). The pool
// file stays.
func (vs *Volumes) Close() error {
	if vs == nil {
		return nil
	}
	vs.closeSpares()
	if vs.pool == "" {
		return nil
	}
	if err := unix.Unmount(vs.dir, 0); err != nil && err != unix.EBUSY && err != unix.EINVAL {
		return fmt.Errorf("unmount the pool: %w", err)
	}
	return nil
}

// thawAll thaws every mounted volume: a daemon killed between Snapshot's
// FIFREEZE and FITHAW would leave its sandbox's writes waiting forever.
// Thawing a filesystem that is not frozen fails harmlessly (EINVAL).
func (vs *Volumes) thawAll() {
	ents, _ := os.ReadDir(vs.dir)
	for _, e := range ents {
		if !e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		p := filepath.Join(vs.dir, e.Name())
		if !isMountPoint(p) {
			continue
		}
		if f, err := os.Open(p); err == nil {
			unix.IoctlRetInt(int(f.Fd()), ioctlFITHAW)
			f.Close()
		}
	}
}

// SnapshotImage returns the path of snapshot id's image (which may not
// exist).
func (vs *Volumes) SnapshotImage(id string) string {
	return filepath.Join(vs.dir, snapDir, id+".img")
}

// checkSnapID refuses an id that is not a plain file name.
func checkSnapID(id string) error {
	if id == "" || strings.ContainsAny(id, "/\x00") || strings.HasPrefix(id, ".") {
		return fmt.Errorf("snapshot id %q: want a plain file name: %w", id, errdefs.ErrInvalid)
	}
	return nil
}

// Snapshot clones volume name's image into snapshot id's image with the
// volume's filesystem frozen, and returns what the filesystem holds
// (bytes in use and inodes in use). On error no image is left.
func (vs *Volumes) Snapshot(name, id string) (used, files int64, err error) {
	if !vs.cow {
		return 0, 0, fmt.Errorf("snapshot: %s: %w", vs.cowInfo, errdefs.ErrNotSupported)
	}
	if err := checkName(name); err != nil {
		return 0, 0, err
	}
	if err := checkSnapID(id); err != nil {
		return 0, 0, err
	}
	mnt := filepath.Join(vs.dir, name)
	if !isMountPoint(mnt) {
		return 0, 0, fmt.Errorf("volume %s is not mounted", mnt)
	}
	src, err := os.Open(filepath.Join(vs.dir, name+".img"))
	if err != nil {
		return 0, 0, fmt.Errorf("volume image: %w", err)
	}
	defer src.Close()
	if err := os.Mkdir(filepath.Join(vs.dir, snapDir), 0o700); err != nil && !os.IsExist(err) {
		return 0, 0, err
	}
	dstPath := vs.SnapshotImage(id)
	dst, err := os.OpenFile(dstPath, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		if os.IsExist(err) {
			return 0, 0, fmt.Errorf("snapshot image %s: %w", id, errdefs.ErrExists)
		}
		return 0, 0, err
	}
	defer func() {
		dst.Close()
		if err != nil {
			os.Remove(dstPath)
		}
	}()
	root, err := os.Open(mnt)
	if err != nil {
		return 0, 0, err
	}
	defer root.Close()
	var st unix.Statfs_t
	if _, err := unix.IoctlRetInt(int(root.Fd()), ioctlFIFREEZE); err != nil {
		return 0, 0, fmt.Errorf("freeze %s: %w", mnt, err)
	}
	cerr := unix.IoctlFileClone(int(dst.Fd()), int(src.Fd()))
	vs.held.cloned()
	serr := unix.Fstatfs(int(root.Fd()), &st)
	if _, err := unix.IoctlRetInt(int(root.Fd()), ioctlFITHAW); err != nil {
		return 0, 0, fmt.Errorf("thaw %s: %w", mnt, err)
	}
	if cerr != nil {
		return 0, 0, fmt.Errorf("clone %s: %w", src.Name(), cerr)
	}
	if serr != nil {
		return 0, 0, serr
	}
	return int64(st.Blocks-st.Bfree) * st.Bsize, int64(st.Files - st.Ffree), nil
}

// RemoveSnapshot removes snapshot id's image; one already gone is not an
// error.
func (vs *Volumes) RemoveSnapshot(id string) error {
	if err := checkSnapID(id); err != nil {
		return err
	}
	if err := os.Remove(vs.SnapshotImage(id)); err != nil && !os.IsNotExist(err) {
		return err
	}
	return nil
}

// SnapshotIDs lists the snapshot images there are.
func (vs *Volumes) SnapshotIDs() []string {
	ents, _ := os.ReadDir(filepath.Join(vs.dir, snapDir))
	var out []string
	for _, e := range ents {
		if id, ok := strings.CutSuffix(e.Name(), ".img"); ok {
			out = append(out, id)
		}
	}
	return out
}

// CreateFrom makes the volume name of size bytes as a clone of snapshot
// id's image, grown or shrunk (resize2fs) to size. A size smaller than
// what the snapshot holds fails (errdefs.ErrInvalid).
func (vs *Volumes) CreateFrom(name string, size int64, id string) (_ *Volume, retErr error) {
	if !vs.cow {
		return nil, fmt.Errorf("volume from a snapshot image: %s: %w", vs.cowInfo, errdefs.ErrNotSupported)
	}
	if err := checkName(name); err != nil {
		return nil, err
	}
	if err := checkSnapID(id); err != nil {
		return nil, err
	}
	src, err := os.Open(vs.SnapshotImage(id))
	if err != nil {
		if os.IsNotExist(err) {
			return nil, fmt.Errorf("snapshot %s: no image (deleted meanwhile?): %w", id, errdefs.ErrNotFound)
		}
		return nil, err
	}
	defer src.Close()
	fi, err := src.Stat()
	if err != nil {
		return nil, err
	}
	if size>>12 == fi.Size()>>12 {
		size = fi.Size() // the same number of ext4 blocks: no resize
	} else {
		size &^= 4095
	}
	v := vs.volume(name, size)
	img, err := vs.allocate(v, true, 0)
	if err != nil {
		return nil, err
	}
	defer img.Close()
	defer func() {
		if retErr != nil {
			v.Remove()
		}
	}()
	err = unix.IoctlFileClone(int(img.Fd()), int(src.Fd()))
	vs.held.cloned()
	if err != nil {
		return nil, fmt.Errorf("clone snapshot %s: %w", id, err)
	}
	// Checked always: the image was taken from a mounted filesystem, and
	// without a journal ext4 keeps no orphan list, so a file deleted while
	// open there (a temporary file, a log) would hold its blocks in every
	// clone for good; e2fsck frees them.
	if size != fi.Size() {
		if err := resizeImage(v.Image, img, fi.Size(), size); err != nil {
			return nil, err
		}
	} else if err := checkImage(v.Image); err != nil {
		return nil, err
	}
	if err := os.Mkdir(v.Path, 0o700); err != nil {
		return nil, fmt.Errorf("volume mount point: %w", err)
	}
	if err := mountImage(img, name, v.Path, false); err != nil {
		return nil, err
	}
	// e2fsck makes lost+found where there is none (workspaces have none);
	// an empty one goes (one with files in it stays).
	if err := os.Remove(filepath.Join(v.Path, "lost+found")); err != nil && !os.IsNotExist(err) && !errors.Is(err, unix.ENOTEMPTY) && !errors.Is(err, unix.EEXIST) {
		return nil, fmt.Errorf("volume %s: %w", name, err)
	}
	return v, nil
}

// checkImage checks and repairs an unmounted ext4 image (e2fsck -f -p).
func checkImage(path string) error {
	fsck, err := findTool("e2fsck", "e2fsprogs")
	if err != nil {
		return err
	}
	cmd := exec.Command(fsck, "-f", "-p", path)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C"}
	if out, err := cmd.CombinedOutput(); err != nil {
		// 1: errors corrected; anything else is a failure.
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 {
			return fmt.Errorf("e2fsck %s: %w: %s", path, err, bytes.TrimSpace(out))
		}
	}
	return nil
}

// resizeImage grows or shrinks an unmounted ext4 image from old to size
// bytes (checked first: resize2fs wants a checked filesystem).
func resizeImage(path string, img *os.File, old, size int64) error {
	resize, err := findTool("resize2fs", "e2fsprogs")
	if err != nil {
		return err
	}
	if err := checkImage(path); err != nil {
		return err
	}
	if size > old {
		if err := img.Truncate(size); err != nil {
			return err
		}
	}
	if err := run(resize, "-f", path, strconv.FormatInt(size>>10, 10)+"K"); err != nil {
		if size < old {
			return fmt.Errorf("the snapshot holds more than a volume of %s can: %v: %w", Human(size), err, errdefs.ErrInvalid)
		}
		return err
	}
	if size < old {
		return img.Truncate(size)
	}
	return nil
}

// mountImage attaches img to a loop device and mounts it on at
// (read-only: a loop device that refuses writes, and ext4's noload).
func mountImage(img *os.File, name, at string, ro bool) error {
	dev, loop, err := attachLoop(img, name, ro)
	if err != nil {
		return err
	}
	flags, opts := uintptr(unix.MS_NOSUID|unix.MS_NODEV), "discard,noinit_itable"
	if ro {
		flags, opts = flags|unix.MS_RDONLY|unix.MS_NOEXEC, "noload"
	}
	err = unix.Mount(dev, at, "ext4", flags, opts)
	unix.Close(loop) // the mount holds the device now (autoclear)
	if err != nil {
		return fmt.Errorf("mount %s (%s) on %s: %w", dev, img.Name(), at, err)
	}
	return nil
}

// MountSnapshot mounts snapshot id's image read-only on at (an empty
// directory) and returns what unmounts it.
func (vs *Volumes) MountSnapshot(id, at string) (func() error, error) {
	if err := checkSnapID(id); err != nil {
		return nil, err
	}
	f, err := os.Open(vs.SnapshotImage(id))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if err := mountImage(f, "snap:"+id, at, true); err != nil {
		return nil, err
	}
	return func() error {
		err := unix.Unmount(at, 0)
		if err == unix.EBUSY {
			err = unix.Unmount(at, unix.MNT_DETACH)
		}
		return err
	}, nil
}

// heldCache keeps what FIEMAP said of each volume image (exclusiveBytes),
// so that Space, which every creation runs, does not map every live
// volume again (with 50 volumes that was 0.84 ms of each cold creation,
// and it grows with the number of sandboxes). An entry is used only while
// the image's size, block count and times are those it was measured
// with, nothing was cloned by this process since (a clone shares blocks:
// the source's exclusive bytes fall, which no stat of it shows), and the
// image had not been modified in the last moments before the measurement
// (the kernel's file times move in clock ticks: a write in the same tick
// would not change them). Everything else can only make an image's
// exclusive bytes grow (a write unsharing a block, another file's blocks
// freed), so a cached figure errs on the side of promising more.
type heldCache struct {
	mu      sync.Mutex
	gen     uint64
	entries map[string]heldEntry
	maps    int // FIEMAP measurements made (for tests)
}

type heldEntry struct {
	ino, size, blocks int64
	mtime, ctime      unix.Timespec
	gen               uint64
	held              int64
}

// heldQuiet is how long an image must have gone unmodified before its
// measurement for the measurement to be reused: longer than a clock tick
// of the kernel's file times.
const heldQuiet = 50 * time.Millisecond

func (c *heldCache) generation() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gen
}

// cloned records a clone made by this process.
func (c *heldCache) cloned() {
	c.mu.Lock()
	c.gen++
	c.mu.Unlock()
}

// exclusive is exclusiveBytes of the image at path (stat st), from the
// cache when it may be; 0 (promise it all) when it cannot be measured.
func (c *heldCache) exclusive(path string, st *unix.Stat_t, gen uint64) int64 {
	c.mu.Lock()
	e, ok := c.entries[path]
	c.mu.Unlock()
	if ok && e.gen == gen && e.ino == int64(st.Ino) && e.size == st.Size && e.blocks == st.Blocks &&
		e.mtime == st.Mtim && e.ctime == st.Ctim {
		return e.held
	}
	now := time.Now()
	held, err := exclusiveBytes(path)
	if err != nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.maps++
	// Kept only if the image was quiet before the measurement.
	if now.Sub(time.Unix(st.Mtim.Unix())) > heldQuiet && now.Sub(time.Unix(st.Ctim.Unix())) > heldQuiet {
		if c.entries == nil {
			c.entries = map[string]heldEntry{}
		}
		c.entries[path] = heldEntry{ino: int64(st.Ino), size: st.Size, blocks: st.Blocks, mtime: st.Mtim, ctime: st.Ctim, gen: gen, held: held}
	} else {
		delete(c.entries, path)
	}
	return held
}

// keepOnly forgets the images not in seen (removed).
func (c *heldCache) keepOnly(seen map[string]bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for p := range c.entries {
		if !seen[p] {
			delete(c.entries, p)
		}
	}
}

// exclusiveBytes is how much of a file's data is its own: allocated and
// shared with no other file (FIEMAP). A clone's blocks are shared until
// written.
func exclusiveBytes(path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	const n = 256
	// struct fiemap (32 bytes) followed by n struct fiemap_extent (56).
	buf := make([]byte, 32+56*n)
	var total int64
	var start uint64
	for range 1 << 16 {
		clear(buf)
		*(*uint64)(unsafe.Pointer(&buf[0])) = start
		*(*uint64)(unsafe.Pointer(&buf[8])) = ^uint64(0) - start
		// No FIEMAP_FLAG_SYNC: a live volume's image is not flushed for
		// a count; blocks not yet allocated count as not held (more is
		// promised, never less).
		*(*uint32)(unsafe.Pointer(&buf[24])) = n
		if _, _, e := unix.Syscall(unix.SYS_IOCTL, f.Fd(), ioctlFIEMAP, uintptr(unsafe.Pointer(&buf[0]))); e != 0 {
			return 0, fmt.Errorf("FIEMAP %s: %w", path, e)
		}
		mapped := *(*uint32)(unsafe.Pointer(&buf[20]))
		if mapped == 0 {
			return total, nil
		}
		for i := range int(mapped) {
			e := buf[32+56*i:]
			logical := *(*uint64)(unsafe.Pointer(&e[0]))
			length := *(*uint64)(unsafe.Pointer(&e[16]))
			flags := *(*uint32)(unsafe.Pointer(&e[40]))
			if flags&fiemapExtentShare == 0 {
				total += int64(length)
			}
			start = logical + length
			if flags&fiemapExtentLast != 0 {
				return total, nil
			}
		}
	}
	return total, nil
}

// PlanCopyOnWrite says, without making or mounting anything, how a daemon
// whose volume directory is dir (with its pool file pool) would take
// snapshots: MethodClone or MethodCopy, with where the reflinks would
// come from, or why there would be none and how to get them.
func PlanCopyOnWrite(dir, pool string) (method, detail string) {
	if isMountPoint(dir) {
		if probeClone(dir) == nil {
			return MethodClone, dir + " is mounted with reflinks (" + fsName(dir) + "): snapshots and forks clone the volumes' images"
		}
		return MethodCopy, dir + " is a mount without reflinks (" + fsName(dir) + "): snapshots copy files; keep it on XFS with reflinks or btrfs"
	}
	// The nearest directory that exists: where the volumes would be.
	at := dir
	for {
		if fi, err := os.Stat(at); err == nil && fi.IsDir() {
			break
		}
		if filepath.Dir(at) == at {
			break
		}
		at = filepath.Dir(at)
	}
	if err := probeClone(at); err == nil {
		return MethodClone, at + " has reflinks (" + fsName(at) + "): snapshots and forks clone the volumes' images"
	} else if os.Geteuid() != 0 {
		return MethodCopy, "not root: no volumes, and no reflinks in " + at
	}
	if fi, err := os.Stat(pool); err == nil && fi.Mode().IsRegular() {
		return MethodClone, "the XFS pool " + pool + " is mounted on " + dir + " at start: snapshots and forks clone the volumes' images"
	}
	if _, err := findTool("mkfs.xfs", "xfsprogs"); err != nil {
		return MethodCopy, fsName(at) + " has no reflinks and " + err.Error() + ": snapshots copy files (time grows with the workspace); install xfsprogs for copy-on-write snapshots (a pool " + pool + " is made at the next start)"
	}
	if b, err := os.ReadFile("/proc/filesystems"); err == nil && !bytes.Contains(b, []byte("\txfs\n")) {
		if _, err := os.Stat("/lib/modules"); err != nil {
			return MethodCopy, "the kernel has no XFS: snapshots copy files"
		}
		// A module may load at mount.
	}
	return MethodClone, fsName(at) + " has no reflinks: at start the daemon makes (once) and mounts an XFS pool " + pool + " on " + dir + " (sparse, the size of the data disk): snapshots and forks clone the volumes' images"
}
