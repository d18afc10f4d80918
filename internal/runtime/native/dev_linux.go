package native

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// devNodes are the only device nodes a sandbox gets, bind-mounted from the
// host (a user namespace cannot mknod).
var devNodes = []string{"null", "zero", "full", "random", "urandom", "tty"}

func mountDev(dev string, shm int64) error {
	if err := mount("tmpfs", dev, "tmpfs", unix.MS_NOSUID|unix.MS_NOEXEC, tmpfsOptions(64<<10, 0o755)); err != nil {
		return err
	}
	for _, n := range devNodes {
		p := filepath.Join(dev, n)
		if err := touch(p); err != nil {
			return err
		}
		if err := mount("/dev/"+n, p, "", unix.MS_BIND, ""); err != nil {
			return err
		}
	}
	pts := filepath.Join(dev, "pts")
	if err := os.Mkdir(pts, 0o755); err != nil {
		return err
	}
	if err := mount("devpts", pts, "devpts", unix.MS_NOSUID|unix.MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620"); err != nil {
		return err
	}
	shmDir := filepath.Join(dev, "shm")
	if err := os.Mkdir(shmDir, 0o1777); err != nil {
		return err
	}
	if err := mount("shm", shmDir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, tmpfsOptions(shm, 0o1777)); err != nil {
		return err
	}
	for link, target := range map[string]string{
		"ptmx": "pts/ptmx", "fd": "/proc/self/fd", "stdin": "/proc/self/fd/0",
		"stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2",
	} {
		if err := os.Symlink(target, filepath.Join(dev, link)); err != nil {
			return err
		}
	}
	return remount(dev, unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NOEXEC)
}

// procMaskedFiles leak host kernel state or offer host-wide controls; each
// gets /dev/null mounted over it.
var procMaskedFiles = []string{
	"kcore", "keys", "key-users", "kallsyms", "kmsg", "sched_debug", "timer_list",
	"timer_stats", "latency_stats", "sysrq-trigger", "config.gz", "vmallocinfo",
	"slabinfo", "pagetypeinfo", "modules", "iomem", "ioports",
}

// procMaskedDirs get an empty read-only tmpfs (see masker).
var procMaskedDirs = []string{"acpi", "scsi", "asound", "firmware", "driver", "dynamic_debug"}

// procReadOnly stay visible but read-only.
var procReadOnly = []string{"sys", "bus", "fs", "irq"}

func mountProc(proc string, mask *masker) error {
	if err := mount("proc", proc, "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return err
	}
	for _, n := range procMaskedFiles {
		p := filepath.Join(proc, n)
		if _, err := os.Lstat(p); errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err := bindRO("/dev/null", p); err != nil {
			return err
		}
	}
	for _, n := range procMaskedDirs {
		p := filepath.Join(proc, n)
		if fi, err := os.Lstat(p); err != nil || !fi.IsDir() {
			continue
		}
		if err := mask.dir(p); err != nil {
			return err
		}
	}
	for _, n := range procReadOnly {
		p := filepath.Join(proc, n)
		if _, err := os.Lstat(p); errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err := mount(p, p, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return err
		}
		if err := remount(p, unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC); err != nil {
			return err
		}
	}
	return nil
}

// masker hides directories of one sandbox under an empty, read-only tmpfs
// (size 0, mode 000): the first is mounted, every other is a bind mount of
// it, read-only, nosuid, nodev and noexec itself. One superblock per
// sandbox instead of one per hidden directory: each superblock is a
// memory-cgroup-aware shrinker, and the kernel sizes every memory
// cgroup's shrinker table by the most shrinkers the host has had (1 KiB
// per 64), so a superblock less per sandbox is also less in every
// sandbox's cgroup once there are many.
type masker struct {
	first string // the mounted one; "" until then
}

func (m *masker) dir(dst string) error {
	if m.first == "" {
		if err := mount("tmpfs", dst, "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=0,mode=000"); err != nil {
			return err
		}
		m.first = dst
		return nil
	}
	if err := mount(m.first, dst, "", unix.MS_BIND, ""); err != nil {
		return err
	}
	return remount(dst, unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC)
}
