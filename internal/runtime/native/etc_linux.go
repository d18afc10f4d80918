package native

import (
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// etcCopied are the host /etc entries a sandbox gets copies of: what the
// dynamic loader, name service switch, TLS clients, Python and shells need.
// Never shadow, gshadow, sudoers, ssh, host users' files or credentials.
var etcCopied = []string{
	"alternatives", "bash.bashrc", "ca-certificates", "ca-certificates.conf",
	"debian_version", "environment", "gai.conf", "host.conf", "inputrc",
	"issue", "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "locale.alias",
	"localtime", "lsb-release", "magic", "mime.types", "nsswitch.conf",
	"os-release", "profile", "protocols", "python3", "python3.11", "python3.12",
	"python3.13", "rpc", "services", "ssl", "terminfo", "timezone", "vim",
}

// etcGenerated are written fresh for every sandbox.
var etcGenerated = map[string]string{
	"passwd":      "root:x:0:0:root:/root:/bin/bash\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
	"group":       "root:x:0:\nnogroup:x:65534:\n",
	"hostname":    "sandbox\n",
	"hosts":       "127.0.0.1\tlocalhost sandbox\n::1\tlocalhost ip6-localhost ip6-loopback\n",
	"resolv.conf": "# airlock: no DNS resolver is reachable from this sandbox\n",
}

// etcCache returns a directory holding the sandbox's /etc, built once for
// each state of the host's /etc and shared, read-only, as the lower layer of
// every sandbox's /etc overlay. Copying the entries for every sandbox cost
// more than all the mounts together.
func etcCache(stateRoot string) (string, error) {
	dir := filepath.Join(stateRoot, "cache", "etc-"+etcKey(filepath.Join(stateRoot, "cache")))
	if _, err := os.Stat(dir); err == nil {
		return dir, nil
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o711); err != nil {
		return "", err
	}
	tmp := dir + ".tmp-" + newID()
	if err := makeEtc(tmp); err != nil {
		os.RemoveAll(tmp)
		return "", fmt.Errorf("build /etc for sandboxes: %w", err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		os.RemoveAll(tmp)
		if _, serr := os.Stat(dir); serr != nil {
			return "", err
		}
	}
	return dir, nil
}

// etcKey identifies the state of the host /etc entries a sandbox copies:
// the name, size and modification time of each entry and of the
// directories directly below it (a file replaced by rename, as package
// managers and update-ca-certificates do, changes its directory's time).
// Deeper in-place edits are not seen until one of those changes; `airlock
// doctor` and a reboot (the cache lives on /run) rebuild it anyway.
//
// Which directories lie below the entries is read once per state of the
// entries themselves and kept in cacheDir (etcSubdirs): a directory added
// or removed there changes its parent's time, so that state's list stays
// right, and the key costs a stat per name instead of reading every
// directory (/etc/alternatives holds hundreds of names) at every start.
func etcKey(cacheDir string) string { return etcKeyAt("/etc", cacheDir) }

// etcKeyAt is etcKey for the entries in etc.
func etcKeyAt(etc, cacheDir string) string {
	h := fnv.New64a()
	var dirs []string
	for _, name := range etcCopied {
		p := filepath.Join(etc, name)
		if fi, ok := etcStat(h, p); ok && fi.IsDir() {
			dirs = append(dirs, p)
		}
	}
	for _, p := range etcSubdirs(cacheDir, fmt.Sprintf("%016x", h.Sum64()), dirs) {
		etcStat(h, p)
	}
	names := make([]string, 0, len(etcGenerated))
	for k := range etcGenerated {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		fmt.Fprintf(h, "%s=%s\n", k, etcGenerated[k])
	}
	return fmt.Sprintf("%016x", h.Sum64())
}

// etcStat adds p's name, size, time and mode to h.
func etcStat(h io.Writer, p string) (fs.FileInfo, bool) {
	fi, err := os.Lstat(p)
	if err != nil {
		return nil, false
	}
	fmt.Fprintf(h, "%s %d %d %v\n", p, fi.Size(), fi.ModTime().UnixNano(), fi.Mode())
	return fi, true
}

// etcSubdirs lists the directories directly below dirs, from the list kept
// in cacheDir for this state of the entries (key), or read and kept there.
func etcSubdirs(cacheDir, key string, dirs []string) []string {
	list := filepath.Join(cacheDir, "etc-subdirs-"+key)
	if b, err := os.ReadFile(list); err == nil {
		if len(b) == 0 {
			return nil
		}
		return strings.Split(string(b), "\x00")
	}
	var subs []string
	for _, d := range dirs {
		entries, err := os.ReadDir(d)
		if err != nil {
			continue
		}
		for _, e := range entries {
			if e.IsDir() {
				subs = append(subs, filepath.Join(d, e.Name()))
			}
		}
	}
	if err := os.MkdirAll(cacheDir, 0o711); err == nil {
		tmp := list + ".tmp-" + newID()
		if os.WriteFile(tmp, []byte(strings.Join(subs, "\x00")), 0o644) != nil || os.Rename(tmp, list) != nil {
			os.Remove(tmp)
		}
	}
	return subs
}

// makeEtc builds the sandbox's minimal /etc at dst from copies of selected
// host entries and generated files.
func makeEtc(dst string) error {
	if err := os.Mkdir(dst, 0o755); err != nil {
		return err
	}
	for _, name := range etcCopied {
		if err := copyTree(filepath.Join("/etc", name), filepath.Join(dst, name)); err != nil {
			return err
		}
	}
	for name, content := range etcGenerated {
		if err := os.WriteFile(filepath.Join(dst, name), []byte(content), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// copyTree copies files, directories and symlinks; entries it cannot read
// (not world-readable on the host) are skipped, missing sources are ignored.
func copyTree(src, dst string) error {
	fi, err := os.Lstat(src)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		target, err := os.Readlink(src)
		if err != nil {
			return err
		}
		return os.Symlink(target, dst)
	case fi.IsDir():
		if err := os.Mkdir(dst, fi.Mode().Perm()|0o700); err != nil {
			return err
		}
		entries, err := os.ReadDir(src)
		if err != nil {
			if errors.Is(err, fs.ErrPermission) {
				return nil
			}
			return err
		}
		for _, e := range entries {
			if err := copyTree(filepath.Join(src, e.Name()), filepath.Join(dst, e.Name())); err != nil {
				return err
			}
		}
		return nil
	case fi.Mode().IsRegular():
		if fi.Mode().Perm()&0o004 == 0 {
			return nil // not world-readable on the host: not for the sandbox
		}
		return copyFile(src, dst, fi.Mode().Perm())
	}
	return nil
}
