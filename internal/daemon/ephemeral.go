package daemon

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/internal/rundir"
	"github.com/airlock-dev/airlock/internal/runtime/native"
)

// EphemeralRoot holds the private daemons of `airlock mcp` (Config.Ephemeral):
// one directory per process, named after its pid, with its socket, store
// and egress files, and a state root ("state") that they share, so that
// each one's runtime sweeps what a killed one left there.
func EphemeralRoot() string {
	return filepath.Join(native.DefaultStateRoot(), "mcp")
}

// EphemeralSocket is the API socket of this process's ephemeral daemon.
func EphemeralSocket() string {
	return filepath.Join(EphemeralRoot(), strconv.Itoa(os.Getpid()), "airlock.sock")
}

// ephemeral fills in the private directories of an ephemeral daemon and
// removes those of ephemeral daemons that are gone. The settings it owns
// may not come from the configuration file.
func (c *Config) ephemeral() error {
	switch {
	case c.Listen != "":
		return errors.New("config: listen: airlock mcp's private daemon has no TCP listener (run airlock serve for one)")
	case c.Socket != "" || c.DataDir != "" || c.StateDir != "":
		return errors.New("config: socket, data_dir and state_dir are chosen by airlock mcp for its private daemon (under " + EphemeralRoot() + "); remove them")
	case len(c.Pools) > 0:
		return errors.New("config: pools: airlock mcp's private daemon keeps no warm pools; remove them")
	case c.DiskQuota != "" && c.DiskQuota != "tmpfs":
		return fmt.Errorf("config: disk_quota: %q: airlock mcp's private daemon keeps workspaces in tmpfs; remove it", c.DiskQuota)
	}
	root := EphemeralRoot()
	rundir.For(root)
	if err := os.MkdirAll(root, 0o711); err != nil {
		return fmt.Errorf("private daemon directory: %w", err)
	}
	sweepEphemeral(root)
	dir := filepath.Join(root, strconv.Itoa(os.Getpid()))
	// A directory of this pid is a dead process's (pids are reused).
	os.RemoveAll(dir)
	// The sandboxes' inits (unprivileged on the host) traverse it.
	if err := os.Mkdir(dir, 0o711); err != nil {
		return fmt.Errorf("private daemon directory: %w", err)
	}
	c.Socket = EphemeralSocket()
	c.DataDir = filepath.Join(dir, "data")
	c.StateDir = filepath.Join(root, "state")
	c.DiskQuota = "tmpfs"
	c.ephemeralDir = dir
	return nil
}

// sweepEphemeral removes the directories of ephemeral daemons that are
// gone: those whose data directory lock nobody holds.
func sweepEphemeral(root string) {
	entries, err := os.ReadDir(root)
	if err != nil {
		return
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 0 || pid == os.Getpid() || !e.IsDir() {
			continue
		}
		dir := filepath.Join(root, e.Name())
		if held(filepath.Join(dir, "data", lockName)) {
			continue
		}
		// Not locked: its daemon is gone, or it is still starting. One
		// that has not locked yet has no socket either.
		if _, err := os.Lstat(filepath.Join(dir, "airlock.sock")); err != nil && unix.Kill(pid, 0) == nil {
			continue
		}
		os.RemoveAll(dir)
	}
}

// held reports whether another process holds the lock file p.
func held(p string) bool {
	f, err := os.Open(p)
	if err != nil {
		return false
	}
	defer f.Close()
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB)
		if err != unix.EINTR {
			break
		}
	}
	return errors.Is(err, unix.EWOULDBLOCK)
}
