package workspace

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"golang.org/x/sys/unix"
)

// Report says what Apply did, with paths relative to the workspace.
type Report struct {
	Applied   []string `json:"applied,omitempty"`   // created or replaced
	Deleted   []string `json:"deleted,omitempty"`   // removed from the host
	Kept      []string `json:"kept,omitempty"`      // protected: in <run>/kept, not applied
	Conflicts []string `json:"conflicts,omitempty"` // changed on the host too: host's kept, sandbox's in <run>/conflicts
	Errors    []string `json:"errors,omitempty"`    // could not be applied; the run stays pending
}

// Empty reports whether nothing changed.
func (r *Report) Empty() bool {
	return len(r.Applied)+len(r.Deleted)+len(r.Kept)+len(r.Conflicts)+len(r.Errors) == 0
}

// Overlay extended attributes: the overlay is mounted with userxattr inside
// the sandbox's user namespace; trusted.* are checked as well.
var xattrPrefixes = []string{"user.overlay.", "trusted.overlay."}

// Apply brings the run's upper layer to the workspace. Each applied entry
// leaves the upper layer, so a second Apply after a failure continues
// where the first stopped. It returns an error only when it could not start
// (the workspace is gone or was replaced); a failure on one entry is in
// Report.Errors.
func (r *Run) Apply() (rep *Report, retErr error) { return r.ApplyAt("") }

// ApplyAt is Apply of the state as of checkpoint cp ("": the last state).
// The run remembers which state it applies: an interrupted apply resumes
// only with the same one.
func (r *Run) ApplyAt(cp string) (rep *Report, retErr error) {
	if r.Restarted() && !r.AfterRestart {
		return nil, fmt.Errorf("run %s: the machine restarted after the run began, and its layer was never synced to disk (a volatile overlay): files in it may be missing or cut short; look at it with airlock review diff %s, then discard it, or apply it anyway with --after-restart; nothing applied", r.ID, r.ID)
	}
	upper, err := r.stateUpper(cp)
	if err != nil {
		return nil, err
	}
	if r.ApplyingCheckpoint != cp && r.HasJournal() {
		return nil, fmt.Errorf("run %s: an apply of %s was interrupted; resume it (airlock review apply %s%s) or roll it back (airlock review rollback %s); nothing applied", r.ID, stateName(r.ApplyingCheckpoint), r.ID, checkpointFlag(r.ApplyingCheckpoint), r.ID)
	}
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
	var st unix.Stat_t
	if err := unix.Fstat(host, &st); err != nil {
		return nil, err
	}
	if uint64(st.Dev) != r.Dev || st.Ino != r.Ino {
		return nil, fmt.Errorf("workspace %s is not the directory the run started with (it was replaced); nothing applied", r.Workspace)
	}
	if r.ApplyingCheckpoint != cp {
		// Named before anything is applied: a resumed apply brings the
		// same state.
		r.ApplyingCheckpoint = cp
		if err := r.save(); err != nil {
			return nil, fmt.Errorf("run %s: %w; nothing applied", r.ID, err)
		}
	}
	j, err := r.openJournal()
	if err != nil {
		return nil, fmt.Errorf("run %s: %w; nothing applied", r.ID, err)
	}
	defer j.close()
	a := &applier{run: r, rep: &Report{}, root: os.Geteuid() == 0, j: j}
	defer func() {
		if v := recover(); v != nil {
			if v != errStopped {
				panic(v)
			}
			rep, retErr = a.rep, errStopped
		}
	}()
	a.dir(up, host, "")
	for _, l := range [][]string{a.rep.Applied, a.rep.Deleted, a.rep.Kept, a.rep.Conflicts} {
		sort.Strings(l)
	}
	return a.rep, nil
}

type applier struct {
	run  *Run
	rep  *Report
	root bool
	j    *journal // nil: listing only
}

func (a *applier) fail(rel string, err error) {
	a.rep.Errors = append(a.rep.Errors, fmt.Sprintf("%s: %v", rel, err))
}

// protectedAt reports whether rel is a protected path or beneath one.
func (a *applier) protectedAt(rel string) bool {
	for _, p := range a.run.Protected {
		if rel == p || strings.HasPrefix(rel, p+"/") {
			return true
		}
	}
	return false
}

// aboveProtected reports whether rel is a proper ancestor of a protected
// path: only a directory may be applied there (a file `.git` could point
// git at a directory of hooks; a link could redirect the path).
func (a *applier) aboveProtected(rel string) bool {
	for _, p := range a.run.Protected {
		if strings.HasPrefix(p, rel+"/") {
			return true
		}
	}
	return false
}

// changed reports whether the host entry changed since the run started.
func (a *applier) changed(rel string, st *unix.Stat_t) bool {
	return st.Ctim.Nano() > a.run.StartNS && !a.j.ours(rel, st)
}

func (a *applier) dir(up, host int, rel string) {
	names, err := readNames(up)
	if err != nil {
		a.fail(orDot(rel), err)
		return
	}
	for _, name := range names {
		p := join(rel, name)
		var ust unix.Stat_t
		if err := unix.Fstatat(up, name, &ust, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			a.fail(p, err)
			continue
		}
		typ := ust.Mode & unix.S_IFMT
		whiteout := typ == unix.S_IFCHR && ust.Rdev == 0
		if typ == unix.S_IFREG && hasXattr(up, name, "whiteout") {
			whiteout = true
		}
		if a.protectedAt(p) || (typ != unix.S_IFDIR && a.aboveProtected(p)) {
			if whiteout {
				a.rep.Kept = append(a.rep.Kept, p+" (deletion)")
				unix.Unlinkat(up, name, 0)
				continue
			}
			a.aside(up, name, p, a.run.Kept(), &a.rep.Kept)
			continue
		}
		var hst unix.Stat_t
		herr := unix.Fstatat(host, name, &hst, unix.AT_SYMLINK_NOFOLLOW)
		if herr != nil && !errors.Is(herr, unix.ENOENT) {
			a.fail(p, herr)
			continue
		}
		exists := herr == nil
		hostIsDir := exists && hst.Mode&unix.S_IFMT == unix.S_IFDIR
		switch {
		case whiteout:
			if exists {
				if !hostIsDir && a.changed(p, &hst) {
					a.rep.Conflicts = append(a.rep.Conflicts, p+" (deleted in the sandbox, changed on the host: host's kept)")
				} else {
					a.remove(host, name, p)
				}
			}
			unix.Unlinkat(up, name, 0)
		case typ == unix.S_IFDIR:
			if hasXattr(up, name, "redirect") || hasXattr(up, name, "metacopy") {
				a.fail(p, errors.New("an overlay redirect or metacopy entry; not applied"))
				continue
			}
			if exists && !hostIsDir {
				if a.changed(p, &hst) {
					a.aside(up, name, p, a.run.Conflicts(), &a.rep.Conflicts)
					continue
				}
				seq, err := a.j.before(host, name, p)
				if err != nil {
					a.fail(p, err)
					continue
				}
				if err := unix.Unlinkat(host, name, 0); err != nil {
					a.fail(p, err)
					continue
				}
				a.j.done(seq, host, name)
				exists = false
			}
			mode := uint32(ust.Mode & 0o1777)
			seq := 0
			if !exists {
				if seq, err = a.j.before(host, name, p); err != nil {
					a.fail(p, err)
					continue
				}
				// Writable by its owner until its contents are in: its
				// own mode comes last (below).
				if err := unix.Mkdirat(host, name, 0o700); err != nil {
					a.fail(p, err)
					continue
				}
				a.rep.Applied = append(a.rep.Applied, p+"/")
			}
			child, err := unix.Openat(host, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				a.fail(p, err)
				continue
			}
			if !exists {
				a.own(child, a.run.UID, a.run.GID)
				a.j.done(seq, host, name)
			}
			cup, err := unix.Openat(up, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				unix.Close(child)
				a.fail(p, err)
				continue
			}
			if exists && isOpaque(up, name) {
				a.clearOpaque(cup, child, p)
			}
			// Its entries are moved out of the upper layer: a directory
			// the sandbox made read-only there refuses that to anyone
			// but root, so it is writable meanwhile, then as it was.
			lockedUp := !a.root && ust.Mode&0o200 == 0
			if lockedUp {
				unix.Fchmod(cup, uint32(ust.Mode&0o7777)|0o700)
			}
			a.dir(cup, child, p)
			if lockedUp {
				unix.Fchmod(cup, uint32(ust.Mode&0o7777))
			}
			unix.Close(cup)
			removed := false
			if !exists && a.aboveProtected(p) {
				// Made only to hold what was kept aside (mkdir -p
				// .git/hooks): not left empty on the host.
				if names, err := readNames(child); err == nil && len(names) == 0 && unix.Unlinkat(host, name, unix.AT_REMOVEDIR) == nil {
					a.rep.Applied = slices.DeleteFunc(a.rep.Applied, func(s string) bool { return s == p+"/" })
					removed = true
				}
			}
			// The directory's mode once its contents are in: one the
			// sandbox made read-only (0555, a Go module cache) would
			// refuse them to anyone but root.
			var cst unix.Stat_t
			if !removed && unix.Fstat(child, &cst) == nil && uint32(cst.Mode&0o1777) != mode {
				if seq, err := a.j.before(host, name, p); err != nil {
					a.fail(p, err)
				} else {
					unix.Fchmod(child, mode)
					a.j.done(seq, host, name)
				}
			}
			unix.Close(child)
			// Emptied: every change beneath it is applied.
			unix.Unlinkat(up, name, unix.AT_REMOVEDIR)
		case typ == unix.S_IFREG || typ == unix.S_IFLNK:
			if typ == unix.S_IFREG && hasXattr(up, name, "metacopy") {
				a.fail(p, errors.New("an overlay metacopy entry; not applied"))
				continue
			}
			if exists && a.changed(p, &hst) {
				a.aside(up, name, p, a.run.Conflicts(), &a.rep.Conflicts)
				continue
			}
			if hostIsDir {
				if !a.remove(host, name, p) {
					// Something under the host's directory stays (changed
					// on the host, protected, or failed): the sandbox's
					// file cannot take its place, and is kept with the
					// conflicts rather than dropped.
					a.aside(up, name, p, a.run.Conflicts(), &a.rep.Conflicts)
					continue
				}
			}
			uid, gid := a.run.UID, a.run.GID
			if exists && !hostIsDir {
				uid, gid = int(hst.Uid), int(hst.Gid)
			}
			seq, err := a.j.before(host, name, p)
			if err != nil {
				a.fail(p, err)
				continue
			}
			if err := a.place(up, host, name, &ust, uid, gid, seq); err != nil {
				a.fail(p, err)
				continue
			}
			a.j.done(seq, host, name)
			a.rep.Applied = append(a.rep.Applied, p)
		default:
			// FIFOs, sockets and devices are not brought to the host.
			a.aside(up, name, p+" (special file)", a.run.Kept(), &a.rep.Kept)
		}
	}
}

// place puts the upper entry name at host/name: by rename on the same
// filesystem, else by a copy into a temporary name renamed over it.
func (a *applier) place(up, host int, name string, ust *unix.Stat_t, uid, gid, seq int) error {
	if err := a.j.expect(seq, ust.Ino); err != nil {
		return err
	}
	err := unix.Renameat(up, name, host, name)
	if errors.Is(err, unix.EXDEV) {
		tmp := tmpName()
		if ust.Mode&unix.S_IFMT == unix.S_IFLNK {
			target, rerr := readlinkat(up, name)
			if rerr != nil {
				return rerr
			}
			err = unix.Symlinkat(target, host, tmp)
		} else {
			err = copyFile(up, host, name, tmp, uint32(ust.Mode&0o1777))
		}
		var tst unix.Stat_t
		if err == nil {
			if err = unix.Fstatat(host, tmp, &tst, unix.AT_SYMLINK_NOFOLLOW); err == nil {
				err = a.j.expect(seq, tst.Ino)
			}
		}
		if err == nil {
			if err = unix.Renameat(host, tmp, host, name); err == nil {
				unix.Unlinkat(up, name, 0)
			}
		}
		if err != nil {
			unix.Unlinkat(host, tmp, 0)
		}
	}
	if err != nil {
		return err
	}
	if a.root {
		unix.Fchownat(host, name, uid, gid, unix.AT_SYMLINK_NOFOLLOW)
	}
	if ust.Mode&unix.S_IFMT == unix.S_IFREG && ust.Mode&0o6000 != 0 {
		// Never a set-id bit from the sandbox.
		f, err := unix.Openat(host, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err == nil {
			unix.Fchmod(f, uint32(ust.Mode&0o1777))
			unix.Close(f)
		}
	}
	return nil
}

func copyFile(up, host int, name, tmp string, mode uint32) error {
	in, err := unix.Openat(up, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	src := os.NewFile(uintptr(in), name)
	defer src.Close()
	out, err := unix.Openat(host, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	dst := os.NewFile(uintptr(out), tmp)
	_, err = io.Copy(dst, src)
	if err == nil {
		err = unix.Fchmod(out, mode)
	}
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	return err
}

// own gives a new host directory the workspace's owner (as root).
func (a *applier) own(fd, uid, gid int) {
	if a.root {
		unix.Fchown(fd, uid, gid)
	}
}

// remove deletes host/name (a tree, one name at a time, never following a
// link). Protected paths and entries changed on the host since the run
// started stay (reported); it returns whether the name is gone.
func (a *applier) remove(host int, name, rel string) bool {
	if a.protectedAt(rel) {
		a.rep.Kept = append(a.rep.Kept, rel+" (deletion)")
		return false
	}
	var st unix.Stat_t
	if err := unix.Fstatat(host, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return errors.Is(err, unix.ENOENT)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		if a.changed(rel, &st) {
			a.rep.Conflicts = append(a.rep.Conflicts, rel+" (deleted in the sandbox, changed on the host: host's kept)")
			return false
		}
		seq, err := a.j.before(host, name, rel)
		if err != nil {
			a.fail(rel, err)
			return false
		}
		if err := unix.Unlinkat(host, name, 0); err != nil {
			a.fail(rel, err)
			return false
		}
		a.j.done(seq, host, name)
		a.rep.Deleted = append(a.rep.Deleted, rel)
		return true
	}
	fd, err := unix.Openat(host, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		a.fail(rel, err)
		return false
	}
	names, err := readNames(fd)
	all := err == nil
	for _, n := range names {
		if !a.remove(fd, n, join(rel, n)) {
			all = false
		}
	}
	unix.Close(fd)
	if !all {
		return false
	}
	seq, err := a.j.before(host, name, rel)
	if err != nil {
		a.fail(rel, err)
		return false
	}
	if err := unix.Unlinkat(host, name, unix.AT_REMOVEDIR); err != nil {
		a.fail(rel, err)
		return false
	}
	a.j.done(seq, host, name)
	a.rep.Deleted = append(a.rep.Deleted, rel+"/")
	return true
}

// clearOpaque removes the host entries of an opaque directory (one the
// sandbox removed and made again) that the upper directory does not have.
func (a *applier) clearOpaque(up, host int, rel string) {
	names, err := readNames(host)
	if err != nil {
		a.fail(rel, err)
		return
	}
	for _, n := range names {
		var st unix.Stat_t
		if unix.Fstatat(up, n, &st, unix.AT_SYMLINK_NOFOLLOW) == nil {
			continue // replaced by the upper's entry
		}
		a.remove(host, n, join(rel, n))
	}
}

// aside moves the upper entry name (at rel) below dir (kept/ or
// conflicts/) and lists rel in list.
func (a *applier) aside(up int, name, rel, dir string, list *[]string) {
	*list = append(*list, rel)
	clean := strings.TrimSuffix(rel, " (special file)")
	dst := filepath.Join(dir, clean)
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		a.fail(clean, err)
		return
	}
	if err := unix.Renameat(up, name, unix.AT_FDCWD, dst); err != nil {
		a.fail(clean, fmt.Errorf("keep aside: %w", err))
	}
}

func readNames(fd int) ([]string, error) {
	d, err := unix.Openat(fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(d), ".")
	defer f.Close()
	names, err := f.Readdirnames(-1)
	sort.Strings(names)
	return names, err
}

func readlinkat(dir int, name string) (string, error) {
	buf := make([]byte, 4096)
	n, err := unix.Readlinkat(dir, name, buf)
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

// hasXattr reports whether dir/name (not followed) has the overlay
// attribute attr.
func hasXattr(dir int, name, attr string) bool {
	_, ok := overlayXattr(dir, name, attr)
	return ok
}

func isOpaque(dir int, name string) bool {
	v, ok := overlayXattr(dir, name, "opaque")
	return ok && v == "y"
}

func overlayXattr(dir int, name, attr string) (string, bool) {
	fd, err := unix.Openat(dir, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", false
	}
	defer unix.Close(fd)
	path := fmt.Sprintf("/proc/self/fd/%d", fd)
	buf := make([]byte, 256)
	for _, p := range xattrPrefixes {
		n, err := unix.Getxattr(path, p+attr, buf)
		if err == nil {
			return string(buf[:n]), true
		}
	}
	return "", false
}

func join(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

func orDot(rel string) string {
	if rel == "" {
		return "."
	}
	return rel
}
