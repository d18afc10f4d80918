// Package sysfile reads and writes small files (those of /proc and
// cgroupfs, airlock's own state files) with plain system calls. os.Open and
// its kin try to put every file they open into the Go runtime's poller: the
// descriptor is made non-blocking, added to epoll, and made blocking again
// when that fails, four or five system calls more per file (about 3 µs each
// time on a 2-CPU VM), and making and removing one sandbox opens some fifty
// such files. None of them ever blocks, so none needs the poller.
package sysfile

import (
	"io/fs"
	"os"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// ReadFile is os.ReadFile without the poller.
func ReadFile(path string) ([]byte, error) {
	fd, err := open(path, unix.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	buf := make([]byte, 0, 4096)
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := unix.Read(fd, buf[len(buf):cap(buf)])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, &fs.PathError{Op: "read", Path: path, Err: err}
		}
		if n == 0 {
			return buf, nil
		}
		buf = buf[:len(buf)+n]
	}
}

// WriteFile is os.WriteFile without the poller: path is created with perm
// (before the umask) if missing, and truncated.
func WriteFile(path string, data []byte, perm fs.FileMode) error {
	return write(path, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC, uint32(perm.Perm()), data)
}

// Write writes data to the existing file path, the way the files of /proc
// and cgroupfs are written (an error opening it is reported with the
// operation "open", one writing to it with "write").
func Write(path string, data []byte) error {
	return write(path, unix.O_WRONLY, 0, data)
}

// Touch creates path with perm (before the umask) if it is missing.
func Touch(path string, perm fs.FileMode) error {
	fd, err := open(path, unix.O_WRONLY|unix.O_CREAT, uint32(perm.Perm()))
	if err != nil {
		return err
	}
	if err := unix.Close(fd); err != nil {
		return &fs.PathError{Op: "close", Path: path, Err: err}
	}
	return nil
}

// ProcStart is the start time of process pid (field 22 of /proc/pid/stat,
// in clock ticks since boot), which tells a live process from a recycled
// pid; "" if there is no such process.
func ProcStart(pid int) string {
	if pid <= 0 {
		return ""
	}
	b, err := ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return ""
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return ""
	}
	return f[19]
}

func open(path string, flags int, perm uint32) (int, error) {
	for {
		fd, err := unix.Open(path, flags|unix.O_CLOEXEC, perm)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return -1, &fs.PathError{Op: "open", Path: path, Err: err}
		}
		return fd, nil
	}
}

func write(path string, flags int, perm uint32, data []byte) error {
	fd, err := open(path, flags, perm)
	if err != nil {
		return err
	}
	for len(data) > 0 {
		n, err := unix.Write(fd, data)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			unix.Close(fd)
			return &fs.PathError{Op: "write", Path: path, Err: err}
		}
		data = data[n:]
	}
	if err := unix.Close(fd); err != nil {
		return &fs.PathError{Op: "close", Path: path, Err: err}
	}
	return nil
}

// SelfStart is ProcStart of this process, read once.
var SelfStart = sync.OnceValue(func() string { return ProcStart(os.Getpid()) })
