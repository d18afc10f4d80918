package gvisor

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// The workspace overlay (Spec.WorkspaceLayer) on gVisor: the sandbox writes
// to the run's layer, never to the host workspace, and airlock applies the
// layer when the command ends (internal/workspace), as on native. The
// Sentry cannot mount the host's overlayfs itself, so airlock (root) mounts
// it on the host, in the sandbox's state directory, before runsc starts:
// the host workspace below, read-only to the overlay, the layer's upper/
// and work/ above; runsc's Gofer serves that mount as /workspace.

// overlayDir is where a sandbox's workspace overlay is mounted.
func overlayDir(dir string) string { return filepath.Join(dir, "workspace") }

// mountOverlay mounts the overlay of ws (lower) and layer (upper/ and
// work/) at overlayDir(dir). The directories are named through
// /proc/self/fd, so that a workspace path with a comma or colon cannot be
// read as more options or layers. No redirects, metacopy or index: every
// change in the upper layer is whole and applies by itself.
func mountOverlay(dir, ws, layer string) (string, error) {
	mnt := overlayDir(dir)
	if err := os.Mkdir(mnt, 0o755); err != nil {
		return "", err
	}
	lower, err := unix.Open(ws, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", fmt.Errorf("workspace %s: %w", ws, err)
	}
	defer unix.Close(lower)
	up, err := unix.Open(layer, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", fmt.Errorf("layer %s: %w", layer, err)
	}
	defer unix.Close(up)
	opts := fmt.Sprintf("lowerdir=/proc/self/fd/%d,upperdir=/proc/self/fd/%d/upper,workdir=/proc/self/fd/%d/work,redirect_dir=off,metacopy=off,index=off", lower, up, up)
	if err := unix.Mount("airlock-workspace", mnt, "overlay", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		return "", fmt.Errorf("mount the workspace overlay: %w", err)
	}
	return mnt, nil
}

// unmountOverlay detaches the sandbox's workspace overlay if it has one.
// Its caller must not remove the state directory when this fails: removing
// through a mounted overlay would record every file of the workspace as
// deleted in the layer, and the apply would delete them.
func unmountOverlay(dir string) error {
	mnt := overlayDir(dir)
	for range 3 {
		on, err := mounted(dir, mnt)
		if err != nil || !on {
			return err
		}
		if err := unix.Unmount(mnt, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("unmount the workspace overlay %s: %w", mnt, err)
		}
	}
	if on, err := mounted(dir, mnt); err != nil || on {
		return fmt.Errorf("the workspace overlay %s stays mounted (%v)", mnt, err)
	}
	return nil
}

// mounted tells whether something is mounted at mnt, a directory in dir:
// a mount has a device of its own.
func mounted(dir, mnt string) (bool, error) {
	var m, d unix.Stat_t
	if err := unix.Lstat(mnt, &m); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return false, nil
		}
		return false, fmt.Errorf("workspace overlay %s: %w", mnt, err)
	}
	if err := unix.Lstat(dir, &d); err != nil {
		return false, fmt.Errorf("state directory %s: %w", dir, err)
	}
	return m.Dev != d.Dev, nil
}
