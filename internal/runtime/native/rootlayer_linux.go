package native

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/internal/workspace"
)

// The root layer: what a sandbox changed in its root filesystem.
//
// buildRoot mounts one tmpfs, <StateDir>/root, with rootfs/ (the new root,
// whose own directories /root, /home, /var, ... are plain directories of
// that tmpfs) and layers/upper/<name>/ (the upper layer of each overlay:
// /usr, /etc, ... or the image). After pivot_root nothing on the host
// reaches it. The init keeps an O_PATH descriptor of its top (keptRoot,
// close-on-exec; the init is not dumpable, so nothing in the sandbox
// reaches it through /proc/1/fd or pidfd_getfd), and a root supervisor
// takes a copy of it with pidfd_getfd (RootLayer), also after adopting the
// sandbox. Through that descriptor the tmpfs shows no mount: the overlays,
// /tmp, /proc and the workspace were mounted on directories of it, which
// are empty there.

// keptRoot is the init's descriptor of its root tmpfs (0: none).
var keptRoot int

// keepRoot opens the root tmpfs at top and keeps it (see keptRoot).
func keepRoot(top string) error {
	fd, err := unix.Open(top, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("keep the root layer: %w", err)
	}
	keptRoot = fd
	return nil
}

// rootSetupDirs are the entries of rootfs/ that setup makes (mount points
// and links to the system directories, empty in a captured root layer): a
// sandbox made from one makes its own and skips these.
func rootSetupDirs() map[string]bool {
	out := map[string]bool{"etc": true, "proc": true, "dev": true, "tmp": true, "workspace": true}
	for _, d := range hostSystemDirs {
		out[filepath.Base(d)] = true
	}
	return out
}

// fillRoot copies a captured root layer (runtime.Spec.RootFrom, attached
// idmapped as "rootsnap": its in-sandbox owners appear as themselves)
// into the fresh tmpfs at top, before any overlay is mounted: its rootfs/
// into rootfs/, its upper/<name> to layers/upper/<name>. The copy keeps
// owners, modes, times, links, whiteouts and the overlays' opaque and
// whiteout attributes, so that each overlay mounted on top shows the
// captured state.
func fillRoot(f *os.File, top string) error {
	mnt := filepath.Join(top, "layers", "snapshot")
	if err := os.Mkdir(mnt, 0o700); err != nil {
		return err
	}
	if err := moveMount(f, mnt); err != nil {
		return err
	}
	defer func() {
		unix.Unmount(mnt, unix.MNT_DETACH)
		os.Remove(mnt)
	}()
	// rootfs/ by way of a scratch copy in the same tmpfs, whose entries
	// are then renamed into place.
	scratch := filepath.Join(top, "layers", "rootfs-copy")
	if _, err := workspace.CopyTree(filepath.Join(mnt, "rootfs"), scratch); err != nil {
		return fmt.Errorf("root layer: %w", err)
	}
	defer os.RemoveAll(scratch)
	ents, err := os.ReadDir(scratch)
	if err != nil {
		return err
	}
	skip := rootSetupDirs()
	for _, e := range ents {
		if skip[e.Name()] {
			continue
		}
		if err := os.Rename(filepath.Join(scratch, e.Name()), filepath.Join(top, "rootfs", e.Name())); err != nil {
			return fmt.Errorf("root layer: /%s: %w", e.Name(), err)
		}
	}
	upper := filepath.Join(mnt, "upper")
	ents, err = os.ReadDir(upper)
	if err != nil {
		return fmt.Errorf("root layer: %w", err)
	}
	if len(ents) > 0 {
		if err := os.MkdirAll(filepath.Join(top, "layers", "upper"), 0o755); err != nil {
			return err
		}
	}
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		if _, err := workspace.CopyTree(filepath.Join(upper, e.Name()), filepath.Join(top, "layers", "upper", e.Name())); err != nil {
			return fmt.Errorf("root layer: upper layer of %s: %w", e.Name(), err)
		}
	}
	return nil
}

// rootSnapMount attaches a captured root layer (runtime.Spec.RootFrom)
// read-only and idmapped through the sandbox's user namespace: its files,
// stored with in-sandbox owners, appear inside as those owners.
func rootSnapMount(pid int, dir string) (*os.File, error) {
	ns, err := os.Open(fmt.Sprintf("/proc/%d/ns/user", pid))
	if err != nil {
		return nil, err
	}
	defer ns.Close()
	f, err := detachedMount(dir, int(ns.Fd()), true)
	if err != nil {
		return nil, fmt.Errorf("root layer %s: %w", dir, err)
	}
	return f, nil
}

// RootLayer implements runtime.RootLayerer: a copy (pidfd_getfd) of the
// init's descriptor of its root tmpfs.
func (sb *sandbox) RootLayer() (*os.File, error) {
	if sb.info.Rootless {
		return nil, errors.New("a rootless sandbox's root layer cannot be read from the host")
	}
	if sb.rootFD <= 0 {
		return nil, errors.New("the sandbox init keeps no descriptor of its root layer (it was made by an older airlock)")
	}
	sb.pidfdMu.Lock()
	if sb.initPidFD < 0 {
		sb.pidfdMu.Unlock()
		return nil, errors.New("the sandbox ended")
	}
	nfd, err := unix.PidfdGetfd(sb.initPidFD, sb.rootFD, 0)
	sb.pidfdMu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("take the root layer from the sandbox init (pidfd_getfd): %w", err)
	}
	f := os.NewFile(uintptr(nfd), "root-layer")
	var fs unix.Statfs_t
	var st unix.Stat_t
	ok := unix.Fstatfs(nfd, &fs) == nil && fs.Type == unix.TMPFS_MAGIC
	for _, d := range []string{"rootfs", "layers"} {
		ok = ok && unix.Fstatat(nfd, d, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR
	}
	if !ok {
		f.Close()
		return nil, fmt.Errorf("descriptor %d of the sandbox init (pid %d) is not its root layer", sb.rootFD, sb.initPid)
	}
	return f, nil
}
