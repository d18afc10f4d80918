package workspace

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"unicode/utf8"

	"golang.org/x/sys/unix"
)

// maxDiffSize: larger files are listed with their sizes, not diffed.
const maxDiffSize = 1 << 20

// Change is one entry of a run's upper layer compared with the host
// directory as it is now.
type Change struct {
	Path string `json:"path"`
	// Kind: added, modified, deleted, mode (only the mode changed),
	// symlink (a link's target changed), type (a file became a directory,
	// ...), or kept (a protected path: never applied).
	Kind      string `json:"kind"`
	Type      string `json:"type"` // file, dir, symlink or special
	OldMode   string `json:"old_mode,omitempty"`
	NewMode   string `json:"new_mode,omitempty"`
	OldTarget string `json:"old_target,omitempty"`
	NewTarget string `json:"new_target,omitempty"`
	OldSize   int64  `json:"old_size,omitempty"`
	Size      int64  `json:"size,omitempty"`
	// Binary: not shown as a diff (not UTF-8, has a NUL, or over 1 MiB).
	Binary bool   `json:"binary,omitempty"`
	Diff   string `json:"diff,omitempty"`
	// Protected: a protected path (FileChanges only; Changes lists it as
	// kind kept).
	Protected bool `json:"protected,omitempty"`
}

// Changes lists what applying the run would change, with unified diffs
// of text files when diff is set. It reads the host directory without
// following a link, and changes nothing.
func (r *Run) Changes(diff bool) ([]Change, error) { return r.ChangesAt("", diff) }

// ChangesAt is Changes of the state as of checkpoint cp ("": the last
// state, the upper layer itself).
func (r *Run) ChangesAt(cp string, diff bool) ([]Change, error) {
	upper, err := r.stateUpper(cp)
	if err != nil {
		return nil, err
	}
	return r.list(upper, diff, false)
}

// FileChanges lists the upper layer's changes for the activity record:
// as Changes without diffs, except that a change at a protected path has
// its real kind and Protected set instead of kind kept.
func (r *Run) FileChanges() ([]Change, error) { return r.list(r.Upper(), false, true) }

func (r *Run) list(upper string, diff, full bool) ([]Change, error) {
	up, err := unix.Open(upper, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("run %s: upper layer: %w", r.ID, err)
	}
	defer unix.Close(up)
	host, err := unix.Open(r.Workspace, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("workspace %s: %w", r.Workspace, err)
	}
	defer unix.Close(host)
	c := &lister{a: &applier{run: r}, diff: diff, full: full}
	c.dir(up, host, "")
	if full {
		for i := range c.out {
			p := strings.TrimSuffix(c.out[i].Path, "/")
			c.out[i].Protected = c.a.protectedAt(p) || (c.out[i].Type != "dir" && c.a.aboveProtected(p))
		}
	}
	return c.out, c.err
}

type lister struct {
	a    *applier
	diff bool
	full bool // protected paths listed as what they are, not as kept
	// whole: up is a whole tree, not an overlay layer (CompareTrees):
	// every directory is opaque.
	whole bool
	out   []Change
	err   error
}

func typeName(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFREG:
		return "file"
	case unix.S_IFDIR:
		return "dir"
	case unix.S_IFLNK:
		return "symlink"
	}
	return "special"
}

func modeString(mode uint32) string { return fmt.Sprintf("%04o", mode&0o7777) }

// dir compares the upper directory up with the host directory host (-1:
// absent on the host) at rel.
func (c *lister) dir(up, host int, rel string) {
	names, err := readNames(up)
	if err != nil {
		c.err = errors.Join(c.err, err)
		return
	}
	for _, name := range names {
		p := join(rel, name)
		var ust unix.Stat_t
		if err := unix.Fstatat(up, name, &ust, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			c.err = errors.Join(c.err, err)
			continue
		}
		typ := ust.Mode & unix.S_IFMT
		whiteout := typ == unix.S_IFCHR && ust.Rdev == 0
		var hst unix.Stat_t
		exists := host >= 0 && unix.Fstatat(host, name, &hst, unix.AT_SYMLINK_NOFOLLOW) == nil
		if !c.full && (c.a.protectedAt(p) || (typ != unix.S_IFDIR && c.a.aboveProtected(p))) {
			ch := Change{Path: p, Kind: "kept", Type: typeName(ust.Mode)}
			if whiteout {
				ch.Type = "deletion"
			}
			c.out = append(c.out, ch)
			continue
		}
		switch {
		case whiteout:
			if exists {
				c.deleted(host, name, p, &hst)
			}
		case typ == unix.S_IFDIR:
			child := -1
			if exists && hst.Mode&unix.S_IFMT == unix.S_IFDIR {
				if modeString(hst.Mode) != modeString(ust.Mode&0o1777) {
					c.out = append(c.out, Change{Path: p + "/", Kind: "mode", Type: "dir", OldMode: modeString(hst.Mode), NewMode: modeString(ust.Mode & 0o1777)})
				}
				child, _ = unix.Openat(host, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			} else if exists {
				c.out = append(c.out, Change{Path: p, Kind: "type", Type: "dir", OldMode: modeString(hst.Mode), NewMode: modeString(ust.Mode & 0o1777)})
			} else {
				c.out = append(c.out, Change{Path: p + "/", Kind: "added", Type: "dir", NewMode: modeString(ust.Mode & 0o1777)})
			}
			cup, err := unix.Openat(up, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				c.err = errors.Join(c.err, err)
			} else {
				if child >= 0 && (c.whole || isOpaque(up, name)) {
					// The host's entries the upper directory lacks go.
					if hn, err := readNames(child); err == nil {
						for _, n := range hn {
							var s unix.Stat_t
							if unix.Fstatat(cup, n, &s, unix.AT_SYMLINK_NOFOLLOW) == nil {
								continue
							}
							var h unix.Stat_t
							if unix.Fstatat(child, n, &h, unix.AT_SYMLINK_NOFOLLOW) == nil {
								c.deleted(child, n, join(p, n), &h)
							}
						}
					}
				}
				c.dir(cup, child, p)
				unix.Close(cup)
			}
			if child >= 0 {
				unix.Close(child)
			}
		case typ == unix.S_IFLNK:
			target, _ := readlinkat(up, name)
			ch := Change{Path: p, Type: "symlink", NewTarget: target}
			switch {
			case !exists:
				ch.Kind = "added"
			case hst.Mode&unix.S_IFMT == unix.S_IFLNK:
				ch.OldTarget, _ = readlinkat(host, name)
				if ch.OldTarget == target {
					continue
				}
				ch.Kind = "symlink"
			default:
				ch.Kind = "type"
			}
			c.out = append(c.out, ch)
		case typ == unix.S_IFREG:
			ch := Change{Path: p, Type: "file", NewMode: modeString(ust.Mode), Size: ust.Size}
			var oldData []byte
			switch {
			case !exists:
				ch.Kind = "added"
			case hst.Mode&unix.S_IFMT == unix.S_IFREG:
				ch.OldMode, ch.OldSize = modeString(hst.Mode), hst.Size
				same, old := sameContent(up, host, name, &ust, &hst)
				if same {
					if ch.OldMode == ch.NewMode {
						continue
					}
					ch.Kind = "mode"
					c.out = append(c.out, ch)
					continue
				}
				ch.Kind = "modified"
				oldData = old
			default:
				ch.Kind = "type"
				ch.OldMode = modeString(hst.Mode)
			}
			if c.diff {
				c.addDiff(&ch, up, name, oldData, exists && ch.Kind == "modified")
			}
			c.out = append(c.out, ch)
		default:
			if exists && hst.Mode&unix.S_IFMT == ust.Mode&unix.S_IFMT && hst.Mode&0o7777 == ust.Mode&0o7777 {
				continue // the same FIFO or socket as before: no change
			}
			c.out = append(c.out, Change{Path: p, Kind: "kept", Type: "special"})
		}
	}
}

// deleted lists a host entry the sandbox removed (a tree: each entry).
func (c *lister) deleted(host int, name, rel string, st *unix.Stat_t) {
	ch := Change{Path: rel, Kind: "deleted", Type: typeName(st.Mode), OldMode: modeString(st.Mode), OldSize: st.Size}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		ch.Path += "/"
		ch.OldSize = 0
	}
	c.out = append(c.out, ch)
}

func (c *lister) addDiff(ch *Change, up int, name string, old []byte, hasOld bool) {
	if ch.Size > maxDiffSize || (hasOld && ch.OldSize > maxDiffSize) {
		ch.Binary = true
		return
	}
	newData, err := readAt(up, name, maxDiffSize)
	if err != nil || !isText(newData) || (hasOld && !isText(old)) {
		ch.Binary = true
		return
	}
	oldName := diffName("a/" + ch.Path)
	if !hasOld {
		oldName = "/dev/null"
	}
	ch.Diff = UnifiedDiff(oldName, diffName("b/"+ch.Path), string(old), string(newData))
}

func isText(b []byte) bool { return utf8.Valid(b) && bytes.IndexByte(b, 0) < 0 }

// sameContent compares the upper file with the host's (no link
// followed); it returns the host's bytes when they are small enough to
// diff.
func sameContent(up, host int, name string, ust, hst *unix.Stat_t) (bool, []byte) {
	if ust.Size != hst.Size {
		old, _ := readAt(host, name, maxDiffSize)
		return false, old
	}
	a, err1 := openRead(up, name)
	b, err2 := openRead(host, name)
	if err1 != nil || err2 != nil {
		if a != nil {
			a.Close()
		}
		if b != nil {
			b.Close()
		}
		return false, nil
	}
	defer a.Close()
	defer b.Close()
	var keep []byte
	bufA, bufB := make([]byte, 64<<10), make([]byte, 64<<10)
	for {
		na, ea := io.ReadFull(a, bufA)
		nb, _ := io.ReadFull(b, bufB)
		if len(keep) <= maxDiffSize {
			keep = append(keep, bufB[:nb]...)
		}
		if na != nb || !bytes.Equal(bufA[:na], bufB[:nb]) {
			rest, _ := io.ReadAll(io.LimitReader(b, maxDiffSize+1-int64(len(keep))))
			return false, append(keep, rest...)
		}
		if ea != nil {
			return true, nil
		}
	}
}

func openRead(dir int, name string) (*os.File, error) {
	fd, err := unix.Openat(dir, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), name), nil
}

func readAt(dir int, name string, limit int64) ([]byte, error) {
	f, err := openRead(dir, name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, limit+1))
}
