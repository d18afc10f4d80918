package native

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/internal/initbin"
)

// initProgram says which program a sandbox's init (and reaper) runs, and the
// environment it needs.
//
// An explicit Runtime.Exe wins. Otherwise, when the airlock binary carries
// the small init program (internal/initbin, `make build`), that program runs,
// as root, from root's read-only copy of it (cachedInit), else from a sealed
// memfd made once per process: nothing a sandbox could overwrite through
// /proc/1/exe (F_SEAL_WRITE, or a file of host root's that nobody may
// write), and none of the daemon's dependencies initialising in every
// sandbox. Without it (a plain `go build`), airlock re-executes itself.
func (r *Runtime) initProgram() (exe string, env []string) {
	if r.Exe != "" {
		return r.Exe, nil
	}
	if f, err := embeddedInit(); err == nil && f != nil {
		return fmt.Sprintf("/proc/self/fd/%d", f.Fd()), []string{initbin.BuildEnv + "=" + initbin.BuildID}
	}
	return "/proc/self/exe", nil
}

// embeddedInit writes the embedded init program into a sealed, executable
// memfd, once per process. It returns nil when there is none, or when the
// host forbids executable memfds (vm.memfd_noexec=2): airlock then
// re-executes itself, which is slower but the same sandbox.
var embeddedInit = sync.OnceValues(func() (*os.File, error) {
	bin := initbin.Bin()
	if len(bin) == 0 {
		return nil, nil
	}
	if unix.Geteuid() == 0 {
		if f, err := cachedInit(initCacheDir, initbin.BuildID, bin); err == nil {
			return f, nil
		}
	}
	flags := unix.MFD_CLOEXEC | unix.MFD_ALLOW_SEALING
	fd, err := unix.MemfdCreate("airlock-init", flags|unix.MFD_EXEC)
	if errors.Is(err, unix.EINVAL) { // kernels before 6.3 know no MFD_EXEC
		fd, err = unix.MemfdCreate("airlock-init", flags)
	}
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), "airlock-init")
	if err := copyFromExe(f, bin); err != nil {
		// Copying from memory faults every page of the program into this
		// process first: slower, but always possible.
		if err := f.Truncate(0); err != nil {
			f.Close()
			return nil, err
		}
		if _, err := f.WriteAt(bin, 0); err != nil {
			f.Close()
			return nil, err
		}
	}
	seals := unix.F_SEAL_SEAL | unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_WRITE
	if _, err := unix.FcntlInt(f.Fd(), unix.F_ADD_SEALS, seals); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
})

// initCacheDir holds, as root, one copy of each build's init program.
const initCacheDir = "/run/airlock/init"

// cachedInit returns the init program of build id from a file in dir
// (made there once, from bin, if it is not yet): a run of `airlock run`
// then starts its sandbox without first copying the 5 MB program into a
// fresh memfd (about a tenth of its CPU time), and the pages of the program
// are shared by every sandbox. dir and its parent must belong to root and
// be writable by nobody else, and the file must belong to root, be
// writable by nobody and have bin's size, or it is not used (the caller
// falls back to a memfd). Nothing in a sandbox can write it: its users are
// unprivileged on the host. Other builds' copies older than a minute are
// removed.
func cachedInit(dir, id string, bin []byte) (*os.File, error) {
	if id == "" || strings.ContainsAny(id, "/.") {
		return nil, errors.New("no build id")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	for _, d := range []string{filepath.Dir(dir), dir} {
		var st unix.Stat_t
		if err := unix.Lstat(d, &st); err != nil {
			return nil, err
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR || st.Uid != 0 || st.Mode&0o022 != 0 {
			return nil, fmt.Errorf("%s: not a directory of root's that only root can write", d)
		}
	}
	name := filepath.Join(dir, "airlock-init-"+id)
	open := func() (*os.File, error) {
		fd, err := unix.Open(name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, err
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			unix.Close(fd)
			return nil, err
		}
		if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Uid != 0 || st.Mode&0o222 != 0 || st.Size != int64(len(bin)) {
			unix.Close(fd)
			return nil, fmt.Errorf("%s: not root's read-only copy of this build's init", name)
		}
		return os.NewFile(uintptr(fd), name), nil
	}
	if f, err := open(); err == nil || !errors.Is(err, os.ErrNotExist) {
		return f, err
	}
	tmp, err := os.CreateTemp(dir, ".tmp-*")
	if err != nil {
		return nil, err
	}
	defer os.Remove(tmp.Name())
	err = copyFromExe(tmp, bin)
	if err != nil {
		_, err = tmp.WriteAt(bin, 0)
	}
	if err == nil {
		err = tmp.Chmod(0o555)
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), name)
	}
	if err != nil {
		return nil, err
	}
	if old, _ := filepath.Glob(filepath.Join(dir, "airlock-init-*")); len(old) > 0 {
		for _, o := range old {
			if st, err := os.Lstat(o); err == nil && o != name && time.Since(st.ModTime()) > time.Minute {
				os.Remove(o)
			}
		}
	}
	return open()
}

// copyFromExe fills f with bin by copying it, inside the kernel, from the
// part of this program's executable file that the embedded bytes are mapped
// from: the page cache is shared and warm, so nothing is faulted into this
// process (a plain write of the 4.6 MB cost about a tenth of `airlock run`'s
// CPU time).
func copyFromExe(f *os.File, bin []byte) error {
	addr := uint64(uintptr(unsafe.Pointer(unsafe.SliceData(bin))))
	exe, err := os.Open("/proc/self/exe")
	if err != nil {
		return err
	}
	defer exe.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(exe.Fd()), &st); err != nil {
		return err
	}
	off, err := fileOffset(addr, st.Dev, st.Ino)
	if err != nil {
		return err
	}
	for n := len(bin); n > 0; {
		w, err := unix.Sendfile(int(f.Fd()), int(exe.Fd()), &off, n)
		if err != nil {
			return err
		}
		if w == 0 {
			return errors.New("sendfile: short copy")
		}
		n -= w
	}
	return nil
}

// fileOffset finds, in /proc/self/maps, the mapping of the file (dev, ino)
// that holds addr and returns addr's offset in that file.
func fileOffset(addr, dev, ino uint64) (int64, error) {
	m, err := os.Open("/proc/self/maps")
	if err != nil {
		return 0, err
	}
	defer m.Close()
	sc := bufio.NewScanner(m)
	for sc.Scan() {
		// start-end perms offset major:minor inode path
		f := strings.Fields(sc.Text())
		if len(f) < 6 {
			continue
		}
		lo, hi, ok := strings.Cut(f[0], "-")
		if !ok {
			continue
		}
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil || addr < start || addr >= end {
			continue
		}
		offset, err := strconv.ParseUint(f[2], 16, 64)
		major, minor, _ := strings.Cut(f[3], ":")
		maj, err3 := strconv.ParseUint(major, 16, 32)
		min, err4 := strconv.ParseUint(minor, 16, 32)
		inode, err5 := strconv.ParseUint(f[4], 10, 64)
		if err != nil || err3 != nil || err4 != nil || err5 != nil {
			return 0, errors.New("unreadable /proc/self/maps line")
		}
		if unix.Mkdev(uint32(maj), uint32(min)) != dev || inode != ino {
			return 0, errors.New("the embedded init is not mapped from the executable")
		}
		return int64(addr - start + offset), nil
	}
	return 0, errors.New("the embedded init is not in a file mapping")
}
