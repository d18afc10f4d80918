package daemon

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// lockName is the lock file a daemon holds in its data and state
// directories for as long as it runs.
const lockName = "airlock.lock"

// lockDir takes an exclusive lock (flock) on dir/airlock.lock and writes
// this process's pid into it. The lock is held until the returned file is
// closed or the process exits, however it exits; the descriptor is
// close-on-exec, so no sandbox inherits it. A directory another daemon
// holds is an error naming that daemon's pid. what names the directory in
// errors ("data directory").
func lockDir(dir, what string) (*os.File, error) {
	p := filepath.Join(dir, lockName)
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("%s %s: lock file: %w", what, dir, err)
	}
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err != unix.EINTR {
			break
		}
	}
	if errors.Is(err, unix.EWOULDBLOCK) {
		f.Close()
		pid := "unknown"
		if b, rerr := os.ReadFile(p); rerr == nil {
			if n, perr := strconv.Atoi(strings.TrimSpace(string(b))); perr == nil && n > 0 {
				pid = strconv.Itoa(n)
			}
		}
		return nil, fmt.Errorf("%s %s is in use by another airlock serve (pid %s, holding %s): stop that daemon, or give this one its own data_dir and state_dir", what, dir, pid, p)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s %s: lock %s: %w", what, dir, p, err)
	}
	if err := f.Truncate(0); err == nil {
		_, err = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s %s: write pid to %s: %w", what, dir, p, err)
	}
	return f, nil
}
