// Package progfile makes a program embedded in airlock's binary (the sandbox
// init, the complete airlock program a lean build carries) into a file the
// kernel can execute, and that neither a sandbox nor another user can change:
// as root, root's read-only copy in a directory only root can write, made
// once per build; otherwise a sealed memfd.
package progfile

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/internal/rundir"
)

// Open returns an executable file holding bin, the program called name of
// build id: as root, root's copy in dir (Cached); otherwise, or when that
// fails, a sealed memfd (Memfd).
func Open(dir, name, id string, bin []byte) (*os.File, error) {
	if unix.Geteuid() == 0 {
		if f, err := Cached(dir, name, id, bin); err == nil {
			return f, nil
		}
	}
	return Memfd(name, bin)
}

// Memfd writes bin into an executable memfd and seals it against writes,
// growth and shrinking, so nothing can change the program through
// /proc/PID/exe. It fails when the host forbids executable memfds
// (vm.memfd_noexec=2).
func Memfd(name string, bin []byte) (*os.File, error) {
	flags := unix.MFD_CLOEXEC | unix.MFD_ALLOW_SEALING
	fd, err := unix.MemfdCreate(name, flags|unix.MFD_EXEC)
	if errors.Is(err, unix.EINVAL) { // kernels before 6.3 know no MFD_EXEC
		fd, err = unix.MemfdCreate(name, flags)
	}
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), name)
	if err := CopyFromExe(f, bin); err != nil {
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
}

// Cached returns the program name of build id from the file dir/name-id
// (made there once, from bin, if it is not yet): later runs then start it
// without first copying it into a fresh memfd, and its pages are shared by
// every process that runs it. dir and its parent must belong to root and
// be writable by nobody else, and the file must belong to root, be writable
// by nobody and have bin's size, or it is not used (the caller falls back to
// a memfd). Other builds' copies of the same program older than a minute
// are removed.
func Cached(dir, name, id string, bin []byte) (*os.File, error) {
	if id == "" || strings.ContainsAny(id, "/.") || name == "" || strings.ContainsAny(name, "/.") {
		return nil, errors.New("no build id or program name")
	}
	rundir.For(dir)
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
	path := filepath.Join(dir, name+"-"+id)
	open := func() (*os.File, error) {
		fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
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
			return nil, fmt.Errorf("%s: not root's read-only copy of this build's %s", path, name)
		}
		return os.NewFile(uintptr(fd), path), nil
	}
	if f, err := open(); err == nil || !errors.Is(err, os.ErrNotExist) {
		return f, err
	}
	tmp, err := os.CreateTemp(dir, ".tmp-*")
	if err != nil {
		return nil, err
	}
	defer os.Remove(tmp.Name())
	err = CopyFromExe(tmp, bin)
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
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return nil, err
	}
	if old, _ := filepath.Glob(filepath.Join(dir, name+"-*")); len(old) > 0 {
		for _, o := range old {
			if st, err := os.Lstat(o); err == nil && o != path && time.Since(st.ModTime()) > time.Minute {
				os.Remove(o)
			}
		}
	}
	return open()
}

// CopyFromExe fills f with bin by copying it, inside the kernel, from the
// part of this program's executable file that the embedded bytes are mapped
// from: the page cache is shared and warm, so nothing is faulted into this
// process (a plain write of the 4.6 MB init cost about a tenth of
// `airlock run`'s CPU time).
func CopyFromExe(f *os.File, bin []byte) error {
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
			return 0, errors.New("the embedded program is not mapped from the executable")
		}
		return int64(addr - start + offset), nil
	}
	return 0, errors.New("the embedded program is not in a file mapping")
}
