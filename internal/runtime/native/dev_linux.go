package native

import (
	"errors"
	"fmt"
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
	// An entry this kernel does not have is skipped: the mount onto it
	// fails with ENOENT (ENOTDIR for a directory that is a file here).
	// That first mount's lookup is the only one: a separate stat of each
	// of these 27 entries, in a proc that has just been mounted and so
	// has none of them cached, cost about 0.1 ms per sandbox. Only that
	// mount's error can mean "absent"; any later step failing fails.
	absent := func(err error, dir bool) bool {
		return errors.Is(err, unix.ENOENT) || dir && errors.Is(err, unix.ENOTDIR)
	}
	// ENOENT must mean the entry: the masks' source has to be there, or
	// a mask would be skipped instead of failing.
	var st unix.Stat_t
	if err := unix.Stat("/dev/null", &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFCHR {
		return fmt.Errorf("mask /proc: /dev/null is missing or not a device (%v)", err)
	}
	for _, n := range procMaskedFiles {
		p := filepath.Join(proc, n)
		if err := mount("/dev/null", p, "", unix.MS_BIND, ""); err != nil {
			if absent(err, false) {
				continue
			}
			return err
		}
		if err := remount(p, unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV); err != nil {
			return err
		}
	}
	for _, n := range procMaskedDirs {
		if _, err := mask.dirIfPresent(filepath.Join(proc, n), absent); err != nil {
			return err
		}
	}
	for _, n := range procReadOnly {
		p := filepath.Join(proc, n)
		if err := mount(p, p, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			if absent(err, false) {
				continue
			}
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
	_, err := m.dirIfPresent(dst, func(error, bool) bool { return false })
	return err
}

// dirIfPresent is dir for a dst that may not exist: when its first mount
// fails with an error that absent accepts, it reports false and leaves
// dst alone; an error of any later step is returned.
func (m *masker) dirIfPresent(dst string, absent func(err error, dir bool) bool) (bool, error) {
	if m.first == "" {
		if err := mount("tmpfs", dst, "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=0,mode=000"); err != nil {
			if absent(err, true) {
				return false, nil
			}
			return false, err
		}
		m.first = dst
		return true, nil
	}
	if err := mount(m.first, dst, "", unix.MS_BIND, ""); err != nil {
		if absent(err, true) {
			return false, nil
		}
		return false, err
	}
	return true, remount(dst, unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC)
}
