package gvisor

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/internal/runtime/native"
)

// The host workspace of a gVisor sandbox, as runsc's Gofer serves it at
// /workspace. The Sentry checks permissions itself, with the host's owners
// (the sandbox's root is host root, with no capabilities), so a workspace
// owned by another user would be read-only inside. As root, airlock
// therefore idmaps it, as the native runtime does: its owner appears as
// root inside, and what root inside creates belongs to the owner on the
// host. The mounts live in the sandbox's state directory:
//
//	workspace  what runsc binds at /workspace: the idmapped workspace
//	           (live), or the overlay (Spec.WorkspaceLayer)
//	lower      the overlay's lower layer: the workspace, idmapped, read-only
//	layer      the overlay's upper/ and work/: the run's layer, idmapped
//
// With the overlay, the sandbox writes to the run's layer, never to the
// host workspace, and airlock applies the layer when the command ends
// (internal/workspace), as on native. The Sentry cannot mount the host's
// overlayfs itself, so airlock mounts it on the host before runsc starts.
// Redirects, metacopy and the index are off: every change in the upper
// layer is whole and applies by itself.

// mountNames are the mounts a sandbox's state directory may hold, in the
// order they are taken down.
var mountNames = []string{"workspace", "lower", "layer"}

// mountWorkspace prepares the host workspace ws for runsc and returns the
// path to bind at /workspace. layer is the run's layer directory for the
// overlay, or "", mounted volatile when volatile holds
// (runtime.Spec.WorkspaceLayerVolatile). exe is any executable (the init program): the idmap's
// user namespace needs a process, which never runs.
func mountWorkspace(dir, ws, layer string, volatile bool, exe string) (string, error) {
	var st unix.Stat_t
	if err := unix.Stat(ws, &st); err != nil {
		return "", fmt.Errorf("workspace %s: %w", ws, err)
	}
	idmap := os.Geteuid() == 0 && (st.Uid != 0 || st.Gid != 0)
	if !idmap && layer == "" {
		return ws, nil // host root's workspace, given as it is
	}
	nsFD := -1 // the idmap's user namespace, if any
	if idmap {
		ns, err := native.OwnerUserns(exe, st.Uid, st.Gid, 0, 0)
		if err != nil {
			return "", fmt.Errorf("workspace %s: %w", ws, err)
		}
		defer ns.Close()
		nsFD = int(ns.Fd())
	}
	// attach mounts a copy of the mount tree at src at dir/name,
	// idmapped if nsFD is a namespace, read-only if asked.
	attach := func(src, name string, readOnly bool) (string, error) {
		dst := filepath.Join(dir, name)
		if err := os.Mkdir(dst, 0o755); err != nil {
			return "", err
		}
		f, err := native.DetachedMount(src, nsFD, readOnly)
		if err != nil {
			return "", err
		}
		defer f.Close()
		if err := unix.MoveMount(int(f.Fd()), "", unix.AT_FDCWD, dst, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
			return "", fmt.Errorf("attach %s at %s: %w", src, dst, err)
		}
		return dst, nil
	}
	if layer == "" {
		return attach(ws, "workspace", false)
	}
	lower, err := attach(ws, "lower", true)
	if err != nil {
		return "", err
	}
	upper, err := attach(layer, "layer", false)
	if err != nil {
		return "", err
	}
	mnt := filepath.Join(dir, "workspace")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		return "", err
	}
	// Paths in the state directory: hex ids, no comma or colon that the
	// options would read as more options or layers.
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s/upper,workdir=%s/work,redirect_dir=off,metacopy=off,index=off", lower, upper, upper)
	err = unix.EINVAL
	if volatile {
		// Not synced at unmount (runtime.Spec.WorkspaceLayerVolatile);
		// a kernel without the option (before 5.10) mounts it as before.
		err = unix.Mount("airlock-workspace", mnt, "overlay", unix.MS_NOSUID|unix.MS_NODEV, opts+",volatile")
	}
	if errors.Is(err, unix.EINVAL) {
		err = unix.Mount("airlock-workspace", mnt, "overlay", unix.MS_NOSUID|unix.MS_NODEV, opts)
	}
	if err != nil {
		return "", fmt.Errorf("mount the workspace overlay: %w", err)
	}
	return mnt, nil
}

// unmountWorkspace detaches the sandbox's workspace mounts, if any. Its
// caller must not remove the state directory when this fails: removing
// through a mounted overlay would record every file of the workspace as
// deleted in the layer (and the apply would delete them), and through an
// idmapped workspace would delete the workspace itself.
func unmountWorkspace(dir string) error {
	for _, name := range mountNames {
		mnt := filepath.Join(dir, name)
		for range 3 {
			on, err := mounted(dir, mnt)
			if err != nil {
				return err
			}
			if !on {
				break
			}
			if err := unix.Unmount(mnt, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
				return fmt.Errorf("unmount %s: %w", mnt, err)
			}
		}
		if on, err := mounted(dir, mnt); err != nil || on {
			return fmt.Errorf("%s stays mounted (%v)", mnt, err)
		}
	}
	return nil
}

// mounted tells whether something is mounted at mnt, a directory in dir.
func mounted(dir, mnt string) (bool, error) {
	var m, d unix.Stat_t
	if err := unix.Lstat(mnt, &m); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return false, nil
		}
		return false, fmt.Errorf("%s: %w", mnt, err)
	}
	if err := unix.Lstat(dir, &d); err != nil {
		return false, fmt.Errorf("state directory %s: %w", dir, err)
	}
	if m.Dev != d.Dev {
		return true, nil
	}
	// A bind of a directory on the same file system keeps its device:
	// the mount table says.
	return isMountPoint(mnt)
}

// isMountPoint looks mnt up in this process's mount table.
func isMountPoint(mnt string) (bool, error) {
	raw, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false, err
	}
	for _, line := range strings.Split(string(raw), "\n") {
		// Field 5 is the mount point (octal escapes for spaces and the
		// like; state directory paths have none).
		f := strings.Fields(line)
		if len(f) > 4 && f[4] == mnt {
			return true, nil
		}
	}
	return false, nil
}
