package rundir

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// done holds, per directory, whether this process has decided already.
var done sync.Map // string -> *sync.Once

// For prepares the directory of airlock's under /run that holds path
// (path itself or an ancestor: /run/airlock or /run/airlock-NAME), before
// anything is made below it. Anything else, and any caller but root, is
// left alone.
func For(path string) {
	top := topOf(path)
	if top == "" || os.Geteuid() != 0 {
		return
	}
	once, _ := done.LoadOrStore(top, new(sync.Once))
	once.(*sync.Once).Do(func() { ensure(top) })
}

// topOf returns the directory directly under /run that holds path if it
// is one of airlock's, else "".
func topOf(path string) string {
	rest, ok := strings.CutPrefix(filepath.Clean(path), "/run/")
	if !ok {
		return ""
	}
	top, _, _ := strings.Cut(rest, "/")
	if top != "airlock" && !strings.HasPrefix(top, "airlock-") {
		return ""
	}
	return "/run/" + top
}

// InMemory reports whether dir is on a memory-backed file system (tmpfs,
// ramfs), and the file system's type otherwise.
func InMemory(dir string) (bool, string, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return false, "", err
	}
	switch st.Type {
	case unix.TMPFS_MAGIC, unix.RAMFS_MAGIC:
		return true, "", nil
	case unix.EXT4_SUPER_MAGIC:
		return false, "ext4", nil
	case unix.XFS_SUPER_MAGIC:
		return false, "xfs", nil
	case unix.BTRFS_SUPER_MAGIC:
		return false, "btrfs", nil
	case unix.OVERLAYFS_SUPER_MAGIC:
		return false, "overlay", nil
	}
	return false, "a disk file system", nil
}

func ensure(dir string) {
	if mem, _, err := InMemory(dir); err == nil && mem {
		return
	}
	parent := filepath.Dir(dir)
	if mem, _, err := InMemory(parent); err != nil || mem {
		return // a tmpfs /run: anything made there is in memory already
	}
	// Two airlock processes must not both mount: the second would hide
	// what the first made. They take turns on /run's lock, and look again.
	p, err := os.Open(parent)
	if err != nil {
		return
	}
	defer p.Close()
	if unix.Flock(int(p.Fd()), unix.LOCK_EX) != nil {
		return
	}
	defer unix.Flock(int(p.Fd()), unix.LOCK_UN)
	if err := os.Mkdir(dir, 0o711); err != nil && !errors.Is(err, os.ErrExist) {
		return
	}
	if mem, _, err := InMemory(dir); err != nil || mem {
		return
	}
	var st unix.Stat_t
	if unix.Lstat(dir, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR || st.Uid != 0 {
		return // not ours to mount over; the callers check it
	}
	if !empty(dir) {
		return
	}
	// Not noexec: the init programs run from here. Mode as the callers
	// make it (they check it).
	unix.Mount("airlock", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0711")
}

// empty reports whether dir holds nothing.
func empty(dir string) bool {
	f, err := os.Open(dir)
	if err != nil {
		return false
	}
	defer f.Close()
	_, err = f.Readdirnames(1)
	return err == io.EOF
}
