// Package cache implements airlock's named persistent caches: directories
// of the invoking user (or of the daemon) that outlive a sandbox and are
// mounted read-write into every sandbox that asks for them, so that a fresh
// sandbox does not rebuild Go's build cache or download the same packages
// again.
//
// A cache is asked for by name: one of the known tools (go, npm, pip,
// cargo), mounted at /cache/NAME and named by the tool's own environment
// variables, or NAME:/path, a cache of any name mounted at /path with no
// variable set. Names, targets and variables are pure functions (Parse,
// Env); Prepare is the one part that touches the host: it creates the
// cache directories and refuses any that could be someone else's (a
// symlink, not a directory, another owner, writable by others).
package cache

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
)

// Root is where the known caches are mounted inside a sandbox.
const Root = "/cache"

// Cache is one cache a sandbox asks for.
type Cache struct {
	Name   string // the host directory's name under the cache root
	Target string // absolute, clean path inside the sandbox
}

// known lists the tools' caches and the variables that point each tool at
// its cache, relative to the cache's target.
var known = map[string]map[string]string{
	"go":    {"GOCACHE": "build", "GOMODCACHE": "mod"},
	"npm":   {"npm_config_cache": ""},
	"pip":   {"PIP_CACHE_DIR": ""},
	"cargo": {"CARGO_HOME": ""}, // cargo has no variable for its download cache alone
}

// Known returns the names of the known caches, sorted.
func Known() []string {
	out := make([]string, 0, len(known))
	for n := range known {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// MaxNameLen caps a cache's name.
const MaxNameLen = 64

// CheckName refuses a name that is not 1-64 bytes of lowercase letters,
// digits, '-', '_' and '.', starting with a letter or a digit: the name is
// a directory name on the host.
func CheckName(name string) error {
	if name == "" {
		return errors.New("empty cache name")
	}
	if len(name) > MaxNameLen {
		return fmt.Errorf("cache name %.20q...: longer than %d bytes", name, MaxNameLen)
	}
	for i, r := range name {
		ok := r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || i > 0 && (r == '-' || r == '_' || r == '.')
		if !ok {
			return fmt.Errorf("cache name %q: use lowercase letters, digits, '-', '_' and '.', starting with a letter or a digit", name)
		}
	}
	return nil
}

// refusedTargets are the sandbox paths a cache may not be mounted at or
// below: the runtime's own mounts, the workspace, and the system
// directories the sandboxed tools run from.
var refusedTargets = []string{
	"/proc", "/sys", "/dev", "/workspace",
	"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/boot",
}

// shadowedTargets may hold a cache below them but not be one: a cache
// there would hide the whole directory.
var shadowedTargets = []string{"/", "/tmp", "/root", "/home", "/var", "/run", "/opt", "/mnt", "/srv", "/media", Root}

// CheckTarget refuses a mount point inside the sandbox that is not
// absolute and clean, or that is or is below a refused path, or that would
// hide a whole top-level directory.
func CheckTarget(target string) error {
	switch {
	case target == "":
		return errors.New("empty cache path")
	case strings.ContainsRune(target, 0):
		return fmt.Errorf("cache path %q contains a NUL byte", target)
	case !strings.HasPrefix(target, "/"):
		return fmt.Errorf("cache path %q: must be absolute", target)
	case path.Clean(target) != target:
		return fmt.Errorf("cache path %q: must be clean (no trailing '/', '.', '..' or '//'; %s)", target, path.Clean(target))
	case len(target) > 1024:
		return fmt.Errorf("cache path %.40q...: longer than 1024 bytes", target)
	}
	for _, r := range refusedTargets {
		if target == r || strings.HasPrefix(target, r+"/") {
			return fmt.Errorf("cache path %q: %s is the sandbox's own; choose a path outside it (e.g. %s/NAME)", target, r, Root)
		}
	}
	for _, s := range shadowedTargets {
		if target == s {
			return fmt.Errorf("cache path %q would hide the whole directory; choose a path below it", target)
		}
	}
	return nil
}

// Parse reads a cache as the flag and the policy write it: a known name
// ("go"), mounted at /cache/NAME, or NAME:/path.
func Parse(s string) (Cache, error) {
	name, target, custom := strings.Cut(s, ":")
	if err := CheckName(name); err != nil {
		return Cache{}, err
	}
	if !custom {
		if _, ok := known[name]; !ok {
			return Cache{}, fmt.Errorf("unknown cache %q (known: %s; or NAME:/path for another)", name, strings.Join(Known(), ", "))
		}
		return Cache{Name: name, Target: Root + "/" + name}, nil
	}
	if err := CheckTarget(target); err != nil {
		return Cache{}, err
	}
	return Cache{Name: name, Target: target}, nil
}

// ParseAll parses a list of caches and refuses a name given twice, a target
// given twice, and a target below another (one cache would hide part of
// the other).
func ParseAll(list []string) ([]Cache, error) {
	out := make([]Cache, 0, len(list))
	for _, s := range list {
		c, err := Parse(s)
		if err != nil {
			return nil, err
		}
		for _, o := range out {
			switch {
			case o.Name == c.Name:
				return nil, fmt.Errorf("cache %q is given twice", c.Name)
			case o.Target == c.Target:
				return nil, fmt.Errorf("caches %q and %q are both mounted at %s", o.Name, c.Name, c.Target)
			case within(c.Target, o.Target) || within(o.Target, c.Target):
				return nil, fmt.Errorf("caches %q (%s) and %q (%s) are nested; give them separate paths", o.Name, o.Target, c.Name, c.Target)
			}
		}
		out = append(out, c)
	}
	return out, nil
}

func within(p, dir string) bool { return strings.HasPrefix(p, dir+"/") }

// Env returns the variables that point the known tools at their caches. A
// cache of another name sets none. The caller lets variables it was given
// explicitly win.
func Env(caches []Cache) map[string]string {
	env := map[string]string{}
	for _, c := range caches {
		for k, sub := range known[c.Name] {
			env[k] = path.Join(c.Target, sub)
		}
	}
	return env
}

// DefaultDir is where `airlock run` keeps its caches: $AIRLOCK_CACHE_DIR,
// else /var/cache/airlock/caches as root, else
// $XDG_CACHE_HOME/airlock/caches (~/.cache/airlock/caches). getenv reads
// the environment and euid is the effective user id. It never names the
// host tools' own caches.
func DefaultDir(getenv func(string) string, euid int) (string, error) {
	if d := getenv("AIRLOCK_CACHE_DIR"); d != "" {
		if !filepath.IsAbs(d) {
			return "", fmt.Errorf("AIRLOCK_CACHE_DIR=%q: must be an absolute path", d)
		}
		return filepath.Clean(d), nil
	}
	if euid == 0 {
		return "/var/cache/airlock/caches", nil
	}
	if d := getenv("XDG_CACHE_HOME"); filepath.IsAbs(d) {
		return filepath.Join(d, "airlock", "caches"), nil
	}
	if h := getenv("HOME"); filepath.IsAbs(h) && h != "/" {
		return filepath.Join(h, ".cache", "airlock", "caches"), nil
	}
	return "", errors.New("no directory for caches: set AIRLOCK_CACHE_DIR (or XDG_CACHE_HOME or HOME) to an absolute path")
}

// Mount is a prepared cache: the host directory Source, to be mounted
// read-write at Target.
type Mount struct {
	Name, Source, Target string
}

// Prepare makes sure the directory dir and a directory per cache below it
// exist (created mode 0700) and belong to uid, and returns the mounts.
// It fails closed: dir or a cache directory that is a symlink, not a
// directory, owned by another user, or writable by group or others is
// refused with an error naming it, and nothing is mounted.
//
// The parents of dir are trusted (they are the caller's choice: a home or
// a data directory); everything from dir down is checked without
// following symlinks.
func Prepare(dir string, uid int, caches []Cache) ([]Mount, error) {
	if len(caches) == 0 {
		return nil, nil
	}
	if !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("cache directory %q: must be absolute", dir)
	}
	dir = filepath.Clean(dir)
	if _, err := os.Lstat(dir); errors.Is(err, fs.ErrNotExist) {
		// The parents are shared (/var/cache/airlock also holds runsc,
		// which unprivileged users run): only dir itself is private.
		if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
			return nil, fmt.Errorf("cache directory %s: %w", dir, err)
		}
	}
	if err := ensureDir(dir, uid); err != nil {
		return nil, err
	}
	out := make([]Mount, 0, len(caches))
	for _, c := range caches {
		if err := CheckName(c.Name); err != nil {
			return nil, err
		}
		src := filepath.Join(dir, c.Name)
		if err := ensureDir(src, uid); err != nil {
			return nil, err
		}
		out = append(out, Mount{Name: c.Name, Source: src, Target: c.Target})
	}
	return out, nil
}

// ensureDir creates p (mode 0700) unless it exists, then checks it: a
// directory, not a symlink, owned by uid, not writable by group or others.
func ensureDir(p string, uid int) error {
	err := os.Mkdir(p, 0o700)
	if err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("cache directory %s: %w", p, err)
	}
	return Check(p, uid)
}

// Check refuses p unless it is a directory (not a symlink to one) owned
// by uid and not writable by group or others.
func Check(p string, uid int) error {
	fi, err := os.Lstat(p)
	if err != nil {
		return fmt.Errorf("cache directory %s: %w", p, err)
	}
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		return fmt.Errorf("cache directory %s is a symlink; refusing it (remove it, or set AIRLOCK_CACHE_DIR to a real directory)", p)
	case !fi.IsDir():
		return fmt.Errorf("cache directory %s is not a directory (%s); refusing it", p, kind(fi.Mode()))
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("cache directory %s: no owner information", p)
	}
	if int(st.Uid) != uid {
		return fmt.Errorf("cache directory %s is owned by uid %d, not by uid %d who uses it; refusing it", p, st.Uid, uid)
	}
	if fi.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("cache directory %s is writable by others (mode %04o); refusing it (chmod 700 it)", p, fi.Mode().Perm())
	}
	return nil
}

func kind(m fs.FileMode) string {
	switch {
	case m.IsRegular():
		return "a regular file"
	case m&fs.ModeNamedPipe != 0:
		return "a fifo"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeDevice != 0:
		return "a device"
	}
	return m.Type().String()
}
