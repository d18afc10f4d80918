package workspace

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// CompareTrees lists the changes that take the directory tree old to the
// directory tree cur, both whole trees (not overlay layers): an entry of
// old missing from cur is deleted. It is Changes' listing (the same kinds,
// modes, sizes and diffs) for the daemon's snapshots. Nothing is followed
// and nothing is changed.
func CompareTrees(old, cur string, diff bool) ([]Change, error) {
	up, err := unix.Open(cur, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("tree %s: %w", cur, err)
	}
	defer unix.Close(up)
	host, err := unix.Open(old, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("tree %s: %w", old, err)
	}
	defer unix.Close(host)
	c := &lister{a: &applier{run: &Run{}}, diff: diff, full: true, whole: true}
	// The top level: what old has and cur lacks (below it, dir does this).
	if names, err := readNames(host); err == nil {
		for _, n := range names {
			var s unix.Stat_t
			if unix.Fstatat(up, n, &s, unix.AT_SYMLINK_NOFOLLOW) == nil {
				continue
			}
			var h unix.Stat_t
			if unix.Fstatat(host, n, &h, unix.AT_SYMLINK_NOFOLLOW) == nil {
				c.deleted(host, n, n, &h)
			}
		}
	} else {
		return nil, err
	}
	c.dir(up, host, "")
	return c.out, c.err
}

// CopyStats counts what a copy made.
type CopyStats struct {
	Entries int
	Bytes   int64
}

// CopyTree copies the tree src to dst, which must not exist, as a
// checkpoint copies an upper layer: owners, modes, times and extended
// attributes kept, data by FICLONE or copy_file_range over its data
// regions, no link followed.
func CopyTree(src, dst string) (CopyStats, error) {
	c := &copier{}
	err := c.tree(src, dst)
	return CopyStats{Entries: c.entries, Bytes: c.bytes}, err
}

// CopyInto copies the entries of the directory src into the existing
// directory dst (which should be empty), then src's own owner, mode and
// times onto dst.
func CopyInto(src, dst string) (CopyStats, error) {
	c := &copier{}
	s, err := unix.Open(src, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return CopyStats{}, err
	}
	defer unix.Close(s)
	d, err := unix.Open(dst, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return CopyStats{}, err
	}
	defer unix.Close(d)
	var st unix.Stat_t
	if err := unix.Fstat(s, &st); err != nil {
		return CopyStats{}, err
	}
	c.root, c.linked = d, map[[2]uint64]string{}
	if err := c.dir(s, d, ""); err != nil {
		return CopyStats{Entries: c.entries, Bytes: c.bytes}, err
	}
	err = c.attrs(s, d, "", "", &st)
	return CopyStats{Entries: c.entries, Bytes: c.bytes}, err
}

// EmptyDir removes every entry of the directory dir (not dir itself),
// without following a link.
func EmptyDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	names, err := f.Readdirnames(-1)
	f.Close()
	if err != nil {
		return err
	}
	for _, n := range names {
		if err := os.RemoveAll(dir + "/" + n); err != nil {
			return err
		}
	}
	return nil
}
