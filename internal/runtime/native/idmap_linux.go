package native

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/internal/runtime"
)

// idmappedMounts makes detached, idmapped copies of the host system
// directories (or the image) and, when asked, of the workspace, mapped
// through the sandbox's user namespace so that files owned by host root
// appear owned by root inside. Only a root supervisor can make them.
func idmappedMounts(pid int, image, etc, workspace string, withWorkspace bool, binds []bindMount) ([]*os.File, []string, error) {
	ns, err := os.Open(fmt.Sprintf("/proc/%d/ns/user", pid))
	if err != nil {
		return nil, nil, err
	}
	defer ns.Close()
	var files []*os.File
	var names []string
	add := func(path, name string, readOnly bool) error {
		f, err := detachedMount(path, int(ns.Fd()), readOnly)
		if err != nil {
			return err
		}
		files = append(files, f)
		names = append(names, name)
		return nil
	}
	fail := func(err error) ([]*os.File, []string, error) {
		for _, f := range files {
			f.Close()
		}
		return nil, nil, err
	}
	if image != "" {
		if err := add(image, "image", true); err != nil {
			return fail(err)
		}
	} else {
		for _, d := range hostSystemDirs {
			fi, err := os.Lstat(d)
			if err != nil || !fi.IsDir() {
				continue
			}
			if err := add(d, d, true); err != nil {
				return fail(err)
			}
		}
		if err := add(etc, "etc", true); err != nil {
			return fail(err)
		}
	}
	if withWorkspace {
		if err := add(workspace, "workspace", false); err != nil {
			return fail(err)
		}
	}
	for i, b := range binds {
		// Files owned by host root appear owned by root inside; a source
		// owned by anyone else is passed as it is (root inside may be
		// that user, see Create).
		var st unix.Stat_t
		if err := unix.Stat(b.Source, &st); err != nil {
			return fail(fmt.Errorf("bind source %s: %w", b.Source, err))
		}
		nsFD := int(ns.Fd())
		if st.Uid != 0 {
			nsFD = -1
		}
		f, err := detachedMount(b.Source, nsFD, !b.Writable)
		if err != nil {
			return fail(err)
		}
		files = append(files, f)
		names = append(names, fmt.Sprintf("bind:%d", i))
	}
	return files, names, nil
}

// bindMounts lists the extra bind mounts of spec in the order the policy
// gives them, with the kind of each source.
func bindMounts(spec *runtime.Spec) ([]bindMount, error) {
	var out []bindMount
	add := func(src, dst string, rw bool) error {
		fi, err := os.Stat(src)
		if err != nil {
			return fmt.Errorf("bind source: %w", err)
		}
		out = append(out, bindMount{Source: src, Target: dst, Writable: rw, Dir: fi.IsDir()})
		return nil
	}
	for _, p := range spec.ReadOnly {
		if err := add(p, p, false); err != nil {
			return nil, err
		}
	}
	for _, p := range spec.Writable {
		if err := add(p, p, true); err != nil {
			return nil, err
		}
	}
	for _, b := range spec.Binds {
		if err := add(b.Source, b.Target, b.Writable); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// detachedMount makes a detached copy of the mount tree at path
// (open_tree), idmapped through the user namespace usernsFD unless it is
// negative, and read-only if asked.
func detachedMount(path string, usernsFD int, readOnly bool) (*os.File, error) {
	fd, err := unix.OpenTree(unix.AT_FDCWD, path, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
	if err != nil {
		return nil, fmt.Errorf("open_tree %s: %w", path, err)
	}
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV}
	if usernsFD >= 0 {
		attr.Attr_set |= unix.MOUNT_ATTR_IDMAP
		attr.Userns_fd = uint64(usernsFD)
	}
	if readOnly {
		attr.Attr_set |= unix.MOUNT_ATTR_RDONLY
	}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &attr); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("idmap %s: %w", path, err)
	}
	return os.NewFile(uintptr(fd), path), nil
}
