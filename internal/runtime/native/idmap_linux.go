package native

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/internal/runtime"
)

// idmappedMounts makes detached, idmapped copies of the host system
// directories (or the image), the etc cache, the workspace and the bind
// sources. Only a root supervisor can make them.
//
// The system directories, the etc cache, the image and root-owned bind
// sources are mapped through the sandbox's own user namespace: host ids
// 0-65535 appear as themselves, root's files owned by root. A root-owned
// workspace too; nothing inside can act as another uid than root (its
// capabilities are dropped before anything runs), so what the sandbox
// writes there belongs to host root. A workspace or bind source owned by
// anyone else is mapped through owners (see ownerUserns): its owner
// appears as root, and what the sandbox creates there belongs to that
// owner. So no writable host path ever gets a file owned by one of the
// sandbox's own ids, which could outlive the sandbox's lease on them.
//
// With layer (an overlay workspace), the workspace is attached read-only
// (the overlay's lower layer) and layer, owned by the workspace's owner,
// read-write as "workspace-layer" (its upper and work directories).
func idmappedMounts(pid int, image, etc, workspace, layer string, binds []bindMount, owners map[owner]*os.File) ([]*os.File, []string, error) {
	ns, err := os.Open(fmt.Sprintf("/proc/%d/ns/user", pid))
	if err != nil {
		return nil, nil, err
	}
	defer ns.Close()
	var files []*os.File
	var names []string
	fail := func(err error) ([]*os.File, []string, error) {
		for _, f := range files {
			f.Close()
		}
		return nil, nil, err
	}
	add := func(path, name string, readOnly, byOwner bool) error {
		usernsFD := int(ns.Fd())
		if byOwner {
			var st unix.Stat_t
			if err := unix.Stat(path, &st); err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
			if st.Uid != 0 {
				f := owners[owner{st.Uid, st.Gid}]
				if f == nil {
					return fmt.Errorf("%s: its owner changed to %d:%d while the sandbox was being made", path, st.Uid, st.Gid)
				}
				usernsFD = int(f.Fd())
			}
		}
		f, err := detachedMount(path, usernsFD, readOnly)
		if err != nil {
			return err
		}
		files = append(files, f)
		names = append(names, name)
		return nil
	}
	if image != "" {
		if err := add(image, "image", true, false); err != nil {
			return fail(err)
		}
	} else {
		for _, d := range hostSystemDirs {
			fi, err := os.Lstat(d)
			if err != nil || !fi.IsDir() {
				continue
			}
			if err := add(d, d, true, false); err != nil {
				return fail(err)
			}
		}
		if err := add(etc, "etc", true, false); err != nil {
			return fail(err)
		}
	}
	if workspace != "" { // empty: a tmpfs the init mounts
		if err := add(workspace, "workspace", layer != "", true); err != nil {
			return fail(err)
		}
		if layer != "" {
			if err := add(layer, "workspace-layer", false, true); err != nil {
				return fail(err)
			}
		}
	}
	for i, b := range binds {
		if err := add(b.Source, fmt.Sprintf("bind:%d", i), !b.Writable, true); err != nil {
			return fail(fmt.Errorf("bind source %s: %w", b.Source, err))
		}
	}
	return files, names, nil
}

// bindMounts lists the extra bind mounts of spec in the order the policy
// gives them, with the kind of each source.
func bindMounts(spec *runtime.Spec) ([]bindMount, error) {
	var out []bindMount
	// what names the policy entry (--ro, --rw, --bind) in an error.
	add := func(what, src, dst string, rw bool) error {
		fi, err := os.Stat(src)
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		out = append(out, bindMount{Source: src, Target: dst, Writable: rw, Dir: fi.IsDir()})
		return nil
	}
	for _, p := range spec.ReadOnly {
		if err := add("read-only path (--ro, read_only)", p, p, false); err != nil {
			return nil, err
		}
	}
	for _, p := range spec.Writable {
		if err := add("writable path (--rw, writable)", p, p, true); err != nil {
			return nil, err
		}
	}
	for _, b := range spec.Binds {
		if err := add("bind source (--bind, binds)", b.Source, b.Target, b.Writable); err != nil {
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

// OwnerUserns and DetachedMount are ownerUserns and detachedMount for
// another backend (gvisor) that idmaps a host workspace the same way.
func OwnerUserns(exe string, owner, group uint32, hostUID, hostGID int) (*os.File, error) {
	return ownerUserns(exe, owner, group, hostUID, hostGID)
}

func DetachedMount(path string, usernsFD int, readOnly bool) (*os.File, error) {
	return detachedMount(path, usernsFD, readOnly)
}
