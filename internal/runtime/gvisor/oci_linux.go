package gvisor

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/airlock-dev/airlock/internal/initbin"
	"github.com/airlock-dev/airlock/internal/runtime"
	"github.com/airlock-dev/airlock/internal/runtime/native"
)

// Defaults for sizes the Spec leaves at zero (the native runtime's).
const (
	defaultDisk = 1 << 30
	defaultTmp  = 512 << 20
	defaultShm  = 64 << 20
	// sentryPids is room for the Sentry's, the Gofer's and the systrap
	// stubs' host tasks on top of --pids in the sandbox's host cgroup.
	sentryPids = 128
)

// unsupported refuses a spec that asks for what this backend cannot
// enforce, naming the feature.
func unsupported(spec *runtime.Spec) error {
	if !spec.Insecure.NoSeccomp && len(spec.Seccomp) == 0 {
		return errors.New("seccomp: no filter in the spec (fix: compile the default profile, or pass --insecure-no-seccomp)")
	}
	if spec.WorkspaceLayer != "" && os.Geteuid() != 0 {
		return fmt.Errorf("workspace overlay (changes applied when the command ends) without root: %w (airlock mounts the overlay on the host for runsc); run as root or pass --workspace-mode live", ErrUnsupported)
	}
	if spec.RecordExec {
		return fmt.Errorf("the activity record (--record: seccomp user notification on exec in the sandbox's own kernel): %w; use the native runtime", ErrUnsupported)
	}
	if spec.RootFrom != "" {
		return fmt.Errorf("a root layer from a snapshot: %w; use the native runtime", ErrUnsupported)
	}
	if os.Geteuid() != 0 && !spec.Insecure.NoCgroups {
		return fmt.Errorf("cgroups without root: %w; run as root or pass --insecure-no-cgroups", ErrUnsupported)
	}
	if m := spec.Limits.Memory; m > 0 && m < MinMemory {
		return fmt.Errorf("memory %dMiB: below the %dMiB the gvisor runtime needs (the limit covers its Sentry and Gofer too; they do not start below about 24MiB): %w", m>>20, MinMemory>>20, ErrUnsupported)
	}
	return nil
}

// MinMemory is the smallest memory limit a gvisor sandbox is made with.
const MinMemory = 32 << 20

// bundle holds what ociSpec decided besides the spec itself.
type bundle struct {
	spec        *specs.Spec
	placeholder []string // host directories made for missing protected paths
}

func orDefault(v, d int64) int64 {
	if v > 0 {
		return v
	}
	return d
}

// ociSpec turns the sandbox spec into an OCI runtime spec. rootfs is an
// empty directory for the host-root case (mount points are made in it);
// workspace is the host workspace or "" for a tmpfs one; initPath is the
// host file of airlock's init program.
func ociSpec(id string, spec *runtime.Spec, rootfs, workspace, etc, initPath, seccompPath, egressDir string, watch bool) (*bundle, error) {
	b := &bundle{}
	mode := "detached"
	if watch {
		mode = "watch"
	}
	env := []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	if initbin.BuildID != "" {
		env = append(env, initbin.BuildEnv+"="+initbin.BuildID)
	}
	s := &specs.Spec{
		Version:  specs.Version,
		Hostname: "sandbox",
		Root:     &specs.Root{Path: rootfs},
		Process: &specs.Process{
			Args:            append([]string{guestInit, InitArg, mode}, forwardArgs(spec)...),
			Env:             env,
			Cwd:             "/",
			NoNewPrivileges: true,
			Capabilities:    &specs.LinuxCapabilities{},
			Rlimits:         rlimits(spec),
		},
		Linux: &specs.Linux{
			Namespaces: []specs.LinuxNamespace{{Type: specs.PIDNamespace}, {Type: specs.IPCNamespace}, {Type: specs.UTSNamespace}, {Type: specs.MountNamespace}, {Type: specs.NetworkNamespace}},
		},
	}
	if spec.Image != "" {
		s.Root.Path = spec.Image
	}
	tmpfs := func(dst string, size int64, extra ...string) specs.Mount {
		return specs.Mount{Destination: dst, Type: "tmpfs", Source: "tmpfs", Options: append([]string{"nosuid", "nodev", "size=" + strconv.FormatInt(size, 10)}, extra...)}
	}
	bind := func(src, dst string, writable bool) specs.Mount {
		o := []string{"rbind", "nosuid", "nodev", "ro"}
		if writable {
			o[3] = "rw"
		}
		return specs.Mount{Destination: dst, Type: "bind", Source: src, Options: o}
	}
	m := []specs.Mount{
		{Destination: "/proc", Type: "proc", Source: "proc", Options: []string{"nosuid", "nodev", "noexec"}},
		{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "noexec", "mode=755", "size=65536"}},
		{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}},
		// No /sys, as in the native runtime: an empty read-only tmpfs
		// over the one runsc would add.
		{Destination: "/sys", Type: "tmpfs", Source: "tmpfs", Options: []string{"ro", "nosuid", "nodev", "noexec", "size=4096", "mode=555"}},
		tmpfs("/dev/shm", orDefault(spec.Limits.Shm, defaultShm), "mode=1777"),
		tmpfs("/tmp", orDefault(spec.Limits.Tmp, defaultTmp), "mode=1777"),
	}
	if spec.Image == "" {
		for _, d := range native.HostSystemDirs() {
			fi, err := os.Lstat(d)
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err != nil {
				return nil, err
			}
			dst := filepath.Join(rootfs, d)
			if fi.Mode()&fs.ModeSymlink != 0 {
				target, err := os.Readlink(d)
				if err != nil {
					return nil, err
				}
				if err := os.Symlink(target, dst); err != nil {
					return nil, err
				}
				continue
			}
			if fi.IsDir() {
				m = append(m, bind(d, d, false))
			}
		}
		m = append(m, bind(etc, "/etc", false))
		// The root itself is read-only, as in the native runtime; the
		// places programs write to are tmpfs, each capped at the disk
		// size.
		s.Root.Readonly = true
		for _, d := range []string{"/root", "/home", "/var", "/opt", "/mnt", "/run"} {
			mode := "mode=755"
			if d == "/root" {
				mode = "mode=700"
			}
			m = append(m, tmpfs(d, orDefault(spec.Limits.Disk, defaultDisk), mode))
		}
		for _, d := range []string{"root", "home", "var", "opt", "mnt", "run", "workspace", "proc", "dev", "sys", "tmp", "etc", strings.TrimPrefix(guestDir, "/")} {
			if err := os.MkdirAll(filepath.Join(rootfs, d), 0o755); err != nil {
				return nil, err
			}
		}
		if err := os.Chmod(filepath.Join(rootfs, "root"), 0o700); err != nil {
			return nil, err
		}
	}
	if workspace == "" {
		m = append(m, tmpfs("/workspace", orDefault(spec.Limits.Disk, defaultDisk), "mode=755"))
	} else {
		m = append(m, bind(workspace, "/workspace", true))
		ph, pm, err := protect(workspace, spec.Protected, spec.WorkspaceLayer == "")
		b.placeholder = ph
		if err != nil {
			return b, fmt.Errorf("workspace protection: %w", err)
		}
		m = append(m, pm...)
	}
	// A source that is not there is the caller's mistake, said here as on
	// native: runsc would only fail to start the sandbox.
	exists := func(what, src string) error {
		if _, err := os.Stat(src); err != nil {
			return fmt.Errorf("%s: %w (fix: check that the path exists on the host)", what, err)
		}
		return nil
	}
	for _, p := range spec.ReadOnly {
		if err := exists("read-only path (--ro, read_only)", p); err != nil {
			return b, err
		}
		m = append(m, bind(p, p, false))
	}
	for _, p := range spec.Writable {
		if err := exists("writable path (--rw, writable)", p); err != nil {
			return b, err
		}
		m = append(m, bind(p, p, true))
	}
	for _, bd := range spec.Binds {
		if err := exists("bind source (--bind, binds)", bd.Source); err != nil {
			return b, err
		}
		m = append(m, bind(bd.Source, bd.Target, bd.Writable))
	}
	for _, d := range spec.Deny {
		host := d
		if spec.Image != "" {
			host = filepath.Join(spec.Image, d)
		} else if rel, ok := strings.CutPrefix(d, "/workspace"); ok && workspace != "" {
			host = filepath.Join(workspace, rel)
		}
		fi, err := os.Stat(host)
		switch {
		case err != nil:
			continue // nothing there to hide
		case fi.IsDir():
			m = append(m, specs.Mount{Destination: d, Type: "tmpfs", Source: "tmpfs", Options: []string{"ro", "nosuid", "nodev", "noexec", "size=4096", "mode=000"}})
		default:
			m = append(m, bind("/dev/null", d, false))
		}
	}
	m = append(m, bind(initPath, guestInit, false))
	if seccompPath != "" {
		m = append(m, bind(seccompPath, guestSeccomp, false))
	}
	if egressDir != "" {
		m = append(m, bind(egressDir, guestEgress, false))
	}
	s.Mounts = m

	// No linux.resources and no cgroupsPath: the host cgroup is airlock's
	// (cgroup_linux.go), and runsc runs with --ignore-cgroups.
	b.spec = s
	return b, nil
}

func rlimits(spec *runtime.Spec) []specs.POSIXRlimit {
	rl := []specs.POSIXRlimit{{Type: "RLIMIT_CORE"}}
	nofile := spec.Limits.NoFile
	if nofile == 0 {
		nofile = 1024
	}
	rl = append(rl, specs.POSIXRlimit{Type: "RLIMIT_NOFILE", Hard: nofile, Soft: nofile})
	if spec.Limits.FileSize > 0 {
		rl = append(rl, specs.POSIXRlimit{Type: "RLIMIT_FSIZE", Hard: uint64(spec.Limits.FileSize), Soft: uint64(spec.Limits.FileSize)})
	}
	return rl
}

// protect makes the protected workspace paths read-only mounts: an
// existing path is bound read-only onto itself; a missing one gets an empty
// placeholder directory in the host workspace (returned, removed at
// teardown if still empty), bound read-only so that creating it fails.
// Symlinks are refused: they could point the read-only mount elsewhere.
//
// Every directory between the workspace and a protected path is pinned
// (bound onto itself) so that it cannot be renamed away and replaced.
//
// Over the workspace overlay (withPlaceholders false) a missing path gets
// nothing: the sandbox may create it in its own layer, and airlock keeps
// it aside instead of applying it (internal/workspace).
func protect(ws string, paths []string, withPlaceholders bool) (placeholders []string, mounts []specs.Mount, _ error) {
	pinned := map[string]bool{}
	for _, rel := range paths {
		clean := filepath.Clean("/" + rel)
		host := filepath.Join(ws, clean)
		var parents []string
		for d := filepath.Dir(clean); d != "/"; d = filepath.Dir(d) {
			parents = append([]string{d}, parents...)
		}
		for _, d := range parents {
			if fi, err := os.Lstat(filepath.Join(ws, d)); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
				return placeholders, nil, fmt.Errorf("protected path %s: %s is a symlink", rel, d)
			}
		}
		fi, err := os.Lstat(host)
		switch {
		case errors.Is(err, fs.ErrNotExist) && !withPlaceholders:
			continue
		case errors.Is(err, fs.ErrNotExist):
			// Missing parents are placeholders too (removed in reverse
			// order at teardown, each only if still empty).
			for _, d := range append(parents, clean) {
				p := filepath.Join(ws, d)
				if _, err := os.Lstat(p); err == nil {
					continue
				}
				if err := native.MakePlaceholder(p); err != nil {
					return placeholders, nil, err
				}
				placeholders = append(placeholders, p)
			}
		case err != nil:
			return placeholders, nil, err
		case fi.Mode()&fs.ModeSymlink != 0:
			return placeholders, nil, fmt.Errorf("protected path %s is a symlink", rel)
		}
		for _, d := range parents {
			if !pinned[d] {
				pinned[d] = true
				mounts = append(mounts, specs.Mount{Destination: "/workspace" + d, Type: "bind", Source: filepath.Join(ws, d), Options: []string{"rbind", "rw", "nosuid", "nodev"}})
			}
		}
		mounts = append(mounts, specs.Mount{Destination: "/workspace" + clean, Type: "bind", Source: host, Options: []string{"rbind", "ro", "nosuid", "nodev"}})
	}
	return placeholders, mounts, nil
}

// forwardArgs tells the init to listen on each Spec.Listen address inside
// and relay to the matching socket in guestEgress.
func forwardArgs(spec *runtime.Spec) []string {
	var a []string
	for i, addr := range spec.Listen {
		a = append(a, fmt.Sprintf("--forward=%s=%s/%d.sock", addr, guestEgress, i))
	}
	return a
}
