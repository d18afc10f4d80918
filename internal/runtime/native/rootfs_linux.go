package native

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	securejoin "github.com/cyphar/filepath-securejoin"
	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/internal/sysfile"
)

// buildRoot assembles the sandbox's root filesystem inside the init's new
// mount namespace and pivots into it. Everything it mounts lives in that
// namespace only and disappears with it; the only host-visible effect is the
// placeholders it may create in the workspace, which it returns.
func buildRoot(s *setup, idmapped map[string]*os.File, step func(string)) ([]string, error) {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return nil, fmt.Errorf("make / private: %w", err)
	}
	// One tmpfs, capped at the disk limit, holds the new root and the
	// upper layers of every overlay: the writable copy-on-write layer.
	top := filepath.Join(s.StateDir, "root")
	if err := mount("airlock", top, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, tmpfsOptions(s.Disk, 0o755)); err != nil {
		return nil, err
	}
	if err := keepRoot(top); err != nil {
		return nil, err
	}
	newRoot := filepath.Join(top, "rootfs")
	layers := filepath.Join(top, "layers")
	for _, d := range []string{newRoot, layers} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return nil, err
		}
	}
	if f := idmapped["rootsnap"]; f != nil {
		if err := fillRoot(f, top); err != nil {
			return nil, err
		}
		step("mounts.rootsnap")
	}
	// pivot_root needs the new root to be a mount point.
	if err := mount(newRoot, newRoot, "", unix.MS_BIND, ""); err != nil {
		return nil, err
	}

	if s.Image != "" {
		lower, err := lowerDir(s.Image, "image", layers, idmapped)
		if err != nil {
			return nil, err
		}
		if err := overlay(lower, layers, "image", newRoot); err != nil {
			return nil, fmt.Errorf("image %s: %w", s.Image, err)
		}
	} else if err := hostRoot(newRoot, layers, s.Etc, idmapped, step); err != nil {
		return nil, err
	}
	step("mounts.root")
	for _, d := range []string{"proc", "dev", "tmp", "workspace"} {
		if err := os.MkdirAll(filepath.Join(newRoot, d), 0o755); err != nil {
			return nil, fmt.Errorf("create /%s: %w", d, err)
		}
	}

	ws := filepath.Join(newRoot, "workspace")
	if s.WorkspaceTmpfs {
		if err := mount("workspace", ws, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, tmpfsOptions(s.Disk, 0o755)); err != nil {
			return nil, fmt.Errorf("workspace: %w", err)
		}
	} else if s.WorkspaceLayer != "" {
		if err := workspaceOverlay(s, layers, ws, idmapped); err != nil {
			return nil, inLayer(layerWorkspace, err)
		}
	} else if f := idmapped["workspace"]; f != nil {
		if err := moveMount(f, ws); err != nil {
			return nil, fmt.Errorf("workspace %s: %w", s.Workspace, err)
		}
	} else if err := mount(s.Workspace, ws, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return nil, fmt.Errorf("workspace: %w", err)
	}
	if err := remount(ws, unix.MS_NOSUID|unix.MS_NODEV); err != nil {
		return nil, fmt.Errorf("workspace: %w", err)
	}
	step("mounts.workspace")
	placeholders, err := protect(ws, s.Protected, s.WorkspaceLayer == "")
	if err != nil {
		return placeholders, err
	}
	step("mounts.protect")

	if err := mount("tmpfs", filepath.Join(newRoot, "tmp"), "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, tmpfsOptions(s.Tmp, 0o1777)); err != nil {
		return placeholders, err
	}
	for i, m := range s.Mounts {
		if err := bindInto(newRoot, m, idmapped[fmt.Sprintf("bind:%d", i)]); err != nil {
			return placeholders, err
		}
	}
	step("mounts.binds")
	if err := mountDev(filepath.Join(newRoot, "dev"), s.Shm); err != nil {
		return placeholders, err
	}
	step("mounts.dev")
	mask := &masker{}
	if err := mountProc(filepath.Join(newRoot, "proc"), mask); err != nil {
		return placeholders, err
	}
	step("mounts.proc")
	for _, p := range s.Deny {
		if err := deny(newRoot, p, mask); err != nil {
			return placeholders, err
		}
	}
	if err := remount(newRoot, unix.MS_NOSUID|unix.MS_NODEV); err != nil {
		return placeholders, err
	}
	return placeholders, pivot(newRoot)
}

// workspaceOverlay mounts the workspace at ws as an overlay: the host
// directory (attached read-only) below, the run's layer directory's upper
// and work above. Both are named relative to layers, so the mount table
// shows no host path.
func workspaceOverlay(s *setup, layers, ws string, idmapped map[string]*os.File) error {
	lower, err := lowerDir(s.Workspace, "workspace", layers, idmapped)
	if err != nil {
		return fmt.Errorf("lower layer %s: %w", s.Workspace, err)
	}
	if idmapped["workspace"] == nil {
		// Rootless: a plain bind, made read-only here.
		if err := remount(filepath.Join(layers, lower), unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV); err != nil {
			return fmt.Errorf("lower layer %s: %w", s.Workspace, err)
		}
	}
	dst := filepath.Join(layers, "changes")
	if err := os.Mkdir(dst, 0o755); err != nil {
		return err
	}
	if f := idmapped["workspace-layer"]; f != nil {
		if err := moveMount(f, dst); err != nil {
			return fmt.Errorf("upper layer: %w", err)
		}
	} else if err := mount(s.WorkspaceLayer, dst, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("upper layer: %w", err)
	}
	if err := unix.Chdir(layers); err != nil {
		return fmt.Errorf("chdir %s: %w", layers, err)
	}
	// userxattr: mounted in a user namespace (whiteouts, opaque
	// directories as user.overlay.*); no redirects or metacopy, so that
	// every change in the upper layer is whole and applies by itself.
	opts := fmt.Sprintf("lowerdir=%s,upperdir=changes/upper,workdir=changes/work,userxattr", lower)
	if s.WorkspaceVolatile {
		// Its unmount, when the sandbox ends, does not sync the whole
		// filesystem of the changes directory (every dirty page on it,
		// the sandbox's or not). A kernel without the option (before
		// 5.10) mounts it as before.
		err := mount("workspace", ws, "overlay", unix.MS_NOSUID|unix.MS_NODEV, opts+",volatile")
		if err == nil || !errors.Is(err, unix.EINVAL) {
			return wrapUpper(err)
		}
	}
	return wrapUpper(mount("workspace", ws, "overlay", unix.MS_NOSUID|unix.MS_NODEV, opts))
}

func wrapUpper(err error) error {
	if err != nil {
		return fmt.Errorf("upper layer: %w", err)
	}
	return nil
}

// hostRoot lays the host's system directories into newRoot, each under its
// own overlay so that writes land in the capped tmpfs and never on the host.
func hostRoot(newRoot, layers, etc string, idmapped map[string]*os.File, step func(string)) error {
	for _, d := range hostSystemDirs {
		fi, err := os.Lstat(d)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		dst := filepath.Join(newRoot, d)
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(d)
			if err != nil {
				return err
			}
			if err := os.Symlink(target, dst); err != nil {
				return err
			}
		case fi.IsDir():
			lower, err := lowerDir(d, d, layers, idmapped)
			if err != nil {
				return err
			}
			if err := os.Mkdir(dst, 0o755); err != nil {
				return err
			}
			if err := overlay(lower, layers, d, dst); err != nil {
				return fmt.Errorf("%s: %w", d, err)
			}
		}
	}
	etcDir := filepath.Join(newRoot, "etc")
	lower, err := lowerDir(etc, "etc", layers, idmapped)
	if err != nil {
		return err
	}
	if err := os.Mkdir(etcDir, 0o755); err != nil {
		return err
	}
	if err := overlay(lower, layers, "etc", etcDir); err != nil {
		return fmt.Errorf("/etc: %w", err)
	}
	step("mounts.overlays")
	for _, d := range []struct {
		path string
		mode os.FileMode
	}{{"root", 0o700}, {"home", 0o755}, {"var", 0o755}, {"var/tmp", 0o1777}, {"run", 0o755}, {"mnt", 0o755}, {"opt", 0o755}} {
		p := filepath.Join(newRoot, d.path)
		if err := os.Mkdir(p, d.mode); errors.Is(err, fs.ErrExist) {
			if fi, err := os.Lstat(p); err == nil && fi.IsDir() {
				continue // from a captured root layer (fillRoot), as it was
			}
			return err
		} else if err != nil {
			return err
		}
		if err := os.Chmod(p, d.mode); err != nil {
			return err
		}
	}
	return nil
}

// lowerDir returns an overlay's lower layer as overlay names it: the
// idmapped mount the supervisor made for it, or else a bind of the host
// path, at layers/lower/<name> and named relative to layers (see overlay).
// A host system directory without an idmapped mount is used as it is: its
// name ("/usr") is its place in the sandbox and reveals nothing.
func lowerDir(path, name, layers string, idmapped map[string]*os.File) (string, error) {
	f := idmapped[name]
	if f == nil && path == name {
		if strings.ContainsAny(path, ",:\\") {
			return "", fmt.Errorf("path %q: ',', ':' and '\\' cannot be used in an overlay layer", path)
		}
		return path, nil
	}
	rel := filepath.Join("lower", strings.TrimPrefix(name, "/"))
	dst := filepath.Join(layers, rel)
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return "", err
	}
	if f == nil {
		// Recursive: a non-recursive bind of a tree with mounts locked by
		// the user namespace is refused; the overlay sees none of them.
		if err := mount(path, dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return "", err
		}
	} else if err := moveMount(f, dst); err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	return rel, nil
}

// overlay mounts an overlay of lower, with its upper and work directories
// in layers, on dst. It names its layers relative to layers (from there
// as the working directory): the kernel shows an overlay's layers in
// /proc/*/mountinfo as they were given, and the sandbox must not learn its
// state directory's host path from them.
func overlay(lower, layers, name, dst string) error {
	name = strings.Trim(name, "/")
	upper := filepath.Join("upper", name)
	work := filepath.Join("work", name)
	for _, d := range []string{upper, work} {
		if err := os.MkdirAll(filepath.Join(layers, d), 0o755); err != nil {
			return err
		}
	}
	if err := unix.Chdir(layers); err != nil {
		return fmt.Errorf("chdir %s: %w", layers, err)
	}
	// userxattr: the overlay is mounted inside a user namespace, where
	// trusted.* extended attributes are not available.
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s,userxattr", lower, upper, work)
	return mount("airlock", dst, "overlay", unix.MS_NOSUID|unix.MS_NODEV, opts)
}

func moveMount(f *os.File, dst string) error {
	if err := unix.MoveMount(int(f.Fd()), "", unix.AT_FDCWD, dst, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("move_mount to %s: %w", dst, err)
	}
	return nil
}

func mount(src, dst, fstype string, flags uintptr, data string) error {
	if err := unix.Mount(src, dst, fstype, flags, data); err != nil {
		what := fstype
		if what == "" {
			what = "bind " + src
		}
		return fmt.Errorf("mount %s on %s: %w", what, dst, err)
	}
	return nil
}

// remount changes the flags of the bind mount at path, keeping the flags that
// the kernel locked on it (a user namespace may not clear those).
func remount(path string, flags uintptr) error {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return fmt.Errorf("statfs %s: %w", path, err)
	}
	keep := uintptr(0)
	for _, f := range []struct{ st, ms uintptr }{
		{unix.ST_RDONLY, unix.MS_RDONLY}, {unix.ST_NOSUID, unix.MS_NOSUID}, {unix.ST_NODEV, unix.MS_NODEV},
		{unix.ST_NOEXEC, unix.MS_NOEXEC}, {unix.ST_NOATIME, unix.MS_NOATIME}, {unix.ST_NODIRATIME, unix.MS_NODIRATIME},
		{unix.ST_RELATIME, unix.MS_RELATIME},
	} {
		if uintptr(st.Flags)&f.st != 0 {
			keep |= f.ms
		}
	}
	return mount("", path, "", unix.MS_BIND|unix.MS_REMOUNT|keep|flags, "")
}

// bindRO bind-mounts src on dst read-only.
func bindRO(src, dst string) error {
	if err := mount(src, dst, "", unix.MS_BIND, ""); err != nil {
		return err
	}
	return remount(dst, unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV)
}

// resolveIn resolves target inside root and refuses a target whose path goes
// through a symlink, so that a mount can never land outside the new root.
func resolveIn(root, target string) (string, error) {
	if !filepath.IsAbs(target) {
		return "", fmt.Errorf("path %q is not absolute", target)
	}
	clean := filepath.Join(root, filepath.Clean(target))
	resolved, err := securejoin.SecureJoin(root, target)
	if err != nil {
		return "", fmt.Errorf("resolve %q: %w", target, err)
	}
	if resolved != clean {
		return "", fmt.Errorf("path %q goes through a symlink (resolves to %q inside the sandbox); refusing", target, strings.TrimPrefix(resolved, root))
	}
	return clean, nil
}

// bindInto mounts an extra bind at its target inside newRoot: the detached
// mount the supervisor made (f), or else the host path.
func bindInto(newRoot string, m bindMount, f *os.File) error {
	dst, err := resolveIn(newRoot, m.Target)
	if err != nil {
		return fmt.Errorf("bind target: %w", err)
	}
	if m.Dir {
		err = os.MkdirAll(dst, 0o755)
	} else if err = os.MkdirAll(filepath.Dir(dst), 0o755); err == nil {
		err = touch(dst)
	}
	if err != nil {
		return fmt.Errorf("bind target %s: %w", m.Target, err)
	}
	// Re-check after creating the mount point: nothing may have swapped a
	// symlink in (nothing else runs yet, but keep the invariant local).
	if _, err := resolveIn(newRoot, m.Target); err != nil {
		return err
	}
	if f != nil {
		if err := moveMount(f, dst); err != nil {
			return err
		}
	} else if err := mount(m.Source, dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return err
	}
	flags := uintptr(unix.MS_NOSUID | unix.MS_NODEV)
	if !m.Writable {
		flags |= unix.MS_RDONLY
	}
	return remount(dst, flags)
}

func touch(path string) error { return sysfile.Touch(path, 0o644) }

// deny hides a path inside the sandbox: an empty read-only tmpfs over a
// directory (see masker), /dev/null over anything else.
func deny(newRoot, path string, mask *masker) error {
	dst, err := resolveIn(newRoot, path)
	if err != nil {
		return fmt.Errorf("deny: %w", err)
	}
	fi, err := os.Stat(dst)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("deny %s: %w", path, err)
	}
	if fi.IsDir() {
		return mask.dir(dst)
	}
	return bindRO("/dev/null", dst)
}

func pivot(newRoot string) error {
	if err := unix.Chdir(newRoot); err != nil {
		return fmt.Errorf("chdir %s: %w", newRoot, err)
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	// The old root is now stacked beneath the new one; detach it.
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach old root: %w", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return err
	}
	return nil
}

func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
