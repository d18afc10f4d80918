package workspace

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// The journal makes an apply undoable. Before Apply replaces, deletes or
// re-modes a host entry, or makes a new one, it appends a record of what
// was there (type, mode, owner, modification time, link target, and the
// file's bytes: a hard link to the old inode in journal/data, or a copy
// when a link is not possible), then makes the change, then appends a
// "done" record with the identity (inode, change time) of what it left.
// Rollback walks the records backwards and puts each entry back as it was,
// but only where the host still holds what the apply left: an entry
// changed since is reported and left alone. The records survive a killed
// airlock (each is written before the change it describes); they are not
// synced to disk one by one, so a power cut in the middle of an apply
// may lose the last ones.

// jEntry is one journal record.
type jEntry struct {
	// Op: "pre" (before a change; the fields describe the old entry),
	// "new" (the identity the change will leave, known before it is
	// made), "done" (the change is made; Ino and Ctime are the new
	// entry's) or "undone" (Seq was rolled back).
	Op   string `json:"op"`
	Seq  int    `json:"seq"`
	Path string `json:"path,omitempty"`
	// Type of the old entry: file, dir, symlink or none (it did not exist).
	Type   string `json:"type,omitempty"`
	Mode   uint32 `json:"mode,omitempty"`
	UID    int    `json:"uid,omitempty"`
	GID    int    `json:"gid,omitempty"`
	Mtime  int64  `json:"mtime,omitempty"`
	Target string `json:"target,omitempty"`
	Data   string `json:"data,omitempty"` // file name in journal/data
	Ino    uint64 `json:"ino,omitempty"`
	Ctime  int64  `json:"ctime,omitempty"`
}

// journal appends records for one Apply.
type journal struct {
	dir  string   // the run's journal/
	f    *os.File // journal/log; nil until the first record
	data int      // journal/data
	seq  int
	err  error
	// saved holds, by path, what an earlier, interrupted attempt of this
	// apply recorded of the host file before changing it ("pre").
	saved map[string]jEntry
}

// ours reports whether the host entry at rel (st) is one an earlier
// attempt of this apply saved and left as it was: its hard link into the
// journal moved the entry's change time, which is no change of the host's.
func (j *journal) ours(rel string, st *unix.Stat_t) bool {
	if j == nil {
		return false
	}
	e, ok := j.saved[rel]
	return ok && e.Ino == st.Ino && e.Mtime == st.Mtim.Nano() && e.Mode == st.Mode&0o7777 &&
		e.UID == int(st.Uid) && e.GID == int(st.Gid)
}

// Journal is the directory of the run's apply journal.
func (r *Run) Journal() string { return filepath.Join(r.Dir, "journal") }

// RolledBack is where rollback puts the sandbox's versions it took back
// from the host.
func (r *Run) RolledBackDir() string { return filepath.Join(r.Dir, "rolledback") }

func (r *Run) openJournal() (*journal, error) {
	j := &journal{dir: r.Journal(), data: -1, saved: map[string]jEntry{}}
	if _, err := os.Lstat(j.dir); errors.Is(err, os.ErrNotExist) {
		// Made with the first record: an apply that changes nothing on
		// the host (most runs) makes no journal.
		return j, nil
	}
	return j, j.open()
}

// open makes (or reopens, for an interrupted apply) the journal's files.
func (j *journal) open() error {
	dir := j.dir
	if err := os.MkdirAll(filepath.Join(dir, "data"), 0o700); err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	if old, err := readJournal(dir); err == nil {
		for _, e := range old {
			if e.Seq > j.seq {
				j.seq = e.Seq
			}
			if _, seen := j.saved[e.Path]; e.Op == "pre" && e.Data != "" && !seen {
				j.saved[e.Path] = e
			}
		}
	}
	f, err := os.OpenFile(filepath.Join(dir, "log"), os.O_WRONLY|os.O_APPEND|os.O_CREATE|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	// A record cut short by a kill ends its line here, so that the next
	// one is read whole.
	if st, err := f.Stat(); err == nil && st.Size() > 0 {
		last := make([]byte, 1)
		if r, err := os.Open(filepath.Join(dir, "log")); err == nil {
			if _, err := r.ReadAt(last, st.Size()-1); err == nil && last[0] != '\n' {
				f.Write([]byte{'\n'})
			}
			r.Close()
		}
	}
	d, err := unix.Open(filepath.Join(dir, "data"), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		f.Close()
		return fmt.Errorf("journal: %w", err)
	}
	j.f, j.data = f, d
	return nil
}

func (j *journal) close() {
	if j.f != nil {
		j.f.Close()
		unix.Close(j.data)
	}
}

func (j *journal) write(e *jEntry) error {
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	if _, err := j.f.Write(append(b, '\n')); err != nil {
		j.err = err
		return fmt.Errorf("journal: %w", err)
	}
	return nil
}

// before records the host entry name of dir (at rel) as it is now, and
// returns the record's sequence number. An error means the change must
// not be made (it could not be undone).
func (j *journal) before(dir int, name, rel string) (int, error) {
	if j.f == nil {
		if err := j.open(); err != nil {
			return 0, err
		}
	}
	j.seq++
	e := &jEntry{Op: "pre", Seq: j.seq, Path: rel, Type: "none"}
	var st unix.Stat_t
	err := unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW)
	switch {
	case errors.Is(err, unix.ENOENT):
	case err != nil:
		return 0, err
	default:
		e.Type = typeName(st.Mode)
		e.Mode, e.UID, e.GID, e.Mtime, e.Ino = st.Mode&0o7777, int(st.Uid), int(st.Gid), st.Mtim.Nano(), st.Ino
		switch e.Type {
		case "symlink":
			if e.Target, err = readlinkat(dir, name); err != nil {
				return 0, err
			}
		case "file":
			e.Data = strconv.Itoa(j.seq)
			if err := j.save(dir, name, e.Data, &st); err != nil {
				return 0, fmt.Errorf("journal: keeping the host's version: %w", err)
			}
		case "special":
			return 0, errors.New("a special file on the host is not replaced")
		}
	}
	return e.Seq, j.write(e)
}

// save keeps the host file's bytes: a hard link to its inode (the apply
// replaces the name, never writes into the inode), else a copy with the
// same mode, owner and times.
func (j *journal) save(dir int, name, as string, st *unix.Stat_t) error {
	if unix.Linkat(dir, name, j.data, as, 0) == nil {
		return nil
	}
	in, err := unix.Openat(dir, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return err
	}
	src := os.NewFile(uintptr(in), name)
	defer src.Close()
	return writeCopy(src, j.data, as, st)
}

// writeCopy writes src to dir/name (a new file) with st's mode, owner
// (as root) and modification time.
func writeCopy(src io.Reader, dir int, name string, st *unix.Stat_t) error {
	out, err := unix.Openat(dir, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	dst := os.NewFile(uintptr(out), name)
	_, err = io.Copy(dst, src)
	if err == nil && os.Geteuid() == 0 {
		err = unix.Fchown(out, int(st.Uid), int(st.Gid))
	}
	if err == nil {
		err = unix.Fchmod(out, st.Mode&0o7777)
	}
	if err == nil {
		err = unix.UtimesNanoAt(dir, name, []unix.Timespec{st.Atim, st.Mtim}, unix.AT_SYMLINK_NOFOLLOW)
	}
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		unix.Unlinkat(dir, name, 0)
	}
	return err
}

// expect records the inode a change of seq will leave, before it is made.
func (j *journal) expect(seq int, ino uint64) error {
	return j.write(&jEntry{Op: "new", Seq: seq, Ino: ino})
}

// done records what the change of seq left at dir/name.
func (j *journal) done(seq int, dir int, name string) {
	e := &jEntry{Op: "done", Seq: seq}
	var st unix.Stat_t
	if unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil {
		e.Ino, e.Ctime = st.Ino, st.Ctim.Nano()
	}
	j.write(e)
	applyStep()
}

// applySteps counts finished journal entries for the interruption hook.
var applySteps atomic.Int64

// killAfter, from $AIRLOCK_TEST_APPLY_KILL_AFTER (tests): SIGKILL airlock
// itself once that many changes are applied, to interrupt an apply at a
// known point. stopAfter is the in-process form for unit tests.
var killAfter, _ = strconv.Atoi(os.Getenv("AIRLOCK_TEST_APPLY_KILL_AFTER"))

var stopAfter int

// errStopped: the unit tests' interruption.
var errStopped = errors.New("apply stopped by the test hook")

func applyStep() {
	n := applySteps.Add(1)
	if killAfter > 0 && n == int64(killAfter) {
		unix.Kill(os.Getpid(), unix.SIGKILL)
		select {}
	}
	if stopAfter > 0 && n == int64(stopAfter) {
		panic(errStopped)
	}
}

func readJournal(dir string) ([]jEntry, error) {
	f, err := os.Open(filepath.Join(dir, "log"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []jEntry
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		var e jEntry
		if json.Unmarshal(sc.Bytes(), &e) != nil {
			continue // a record cut short by a kill
		}
		out = append(out, e)
	}
	return out, sc.Err()
}

// HasJournal reports whether the run has applied changes that Rollback
// could undo.
func (r *Run) HasJournal() bool {
	es, err := readJournal(r.Journal())
	if err != nil {
		return false
	}
	for _, e := range es {
		if e.Op == "pre" {
			return true
		}
	}
	return false
}

// RollbackReport says what Rollback did, with paths relative to the
// workspace.
type RollbackReport struct {
	Restored []string `json:"restored,omitempty"` // put back as before the apply
	// Conflicts changed on the host after the apply: left as they are.
	Conflicts []string `json:"conflicts,omitempty"`
	Errors    []string `json:"errors,omitempty"`
}

// change is one journal entry with what followed it.
type change struct {
	pre    jEntry
	newIno []uint64 // inodes the change may have left
	done   bool
	ino    uint64
	ctime  int64
	undone bool
}

// Rollback undoes the run's apply, completed or interrupted: each entry
// the apply changed is put back as it was before the apply, newest first,
// unless it changed on the host since (a conflict, left alone). The
// sandbox's versions it takes back go to RolledBackDir(). A Rollback
// interrupted in turn can be run again.
func (r *Run) Rollback() (*RollbackReport, error) {
	entries, err := readJournal(r.Journal())
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("run %s has no apply to roll back", r.ID)
		}
		return nil, err
	}
	byseq := map[int]*change{}
	var order []*change
	for _, e := range entries {
		c := byseq[e.Seq]
		if e.Op == "pre" {
			c = &change{pre: e}
			byseq[e.Seq] = c
			order = append(order, c)
			continue
		}
		if c == nil {
			continue
		}
		switch e.Op {
		case "new":
			c.newIno = append(c.newIno, e.Ino)
		case "done":
			c.done, c.ino, c.ctime = true, e.Ino, e.Ctime
		case "undone":
			c.undone = true
		}
	}
	if len(order) == 0 {
		return nil, fmt.Errorf("run %s has no apply to roll back", r.ID)
	}
	host, err := unix.Open(r.Workspace, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("workspace %s: %w; nothing rolled back", r.Workspace, err)
	}
	defer unix.Close(host)
	var st unix.Stat_t
	if err := unix.Fstat(host, &st); err != nil {
		return nil, err
	}
	if uint64(st.Dev) != r.Dev || st.Ino != r.Ino {
		return nil, fmt.Errorf("workspace %s is not the directory the run started with (it was replaced); nothing rolled back", r.Workspace)
	}
	j, err := r.openJournal()
	if err != nil {
		return nil, err
	}
	defer j.close()
	rb := &roller{run: r, j: j, rep: &RollbackReport{}}
	for i := len(order) - 1; i >= 0; i-- {
		c := order[i]
		if c.undone {
			continue
		}
		if err := rb.undo(host, c); err != nil {
			rb.rep.Errors = append(rb.rep.Errors, fmt.Sprintf("%s: %v", c.pre.Path, err))
			continue
		}
	}
	return rb.rep, nil
}

type roller struct {
	run *Run
	j   *journal
	rep *RollbackReport
}

// undo puts one entry back. It returns an error when the entry could not
// be looked at or restored; a conflict is reported, not an error.
func (rb *roller) undo(host int, c *change) error {
	p := c.pre
	dir, name, err := openParent(host, p.Path)
	if err != nil {
		if errors.Is(err, unix.ENOENT) && p.Type == "none" {
			rb.mark(c) // its directory is gone: so is what the apply made
			return nil
		}
		return err
	}
	defer unix.Close(dir)
	var cur unix.Stat_t
	cerr := unix.Fstatat(dir, name, &cur, unix.AT_SYMLINK_NOFOLLOW)
	if cerr != nil && !errors.Is(cerr, unix.ENOENT) {
		return cerr
	}
	exists := cerr == nil
	curType := "none"
	if exists {
		curType = typeName(cur.Mode)
	}
	// As before the apply already (never changed, or restored by an
	// interrupted rollback)?
	if curType == p.Type && (p.Type == "none" || cur.Ino == p.Ino) {
		if p.Type == "dir" && cur.Mode&0o7777 != p.Mode {
			if err := chmodAt(dir, name, p.Mode); err != nil {
				return err
			}
		}
		rb.mark(c)
		return nil
	}
	// What the apply left, unchanged since?
	left := false
	switch {
	case !exists:
		left = c.done && c.ino == 0 // the apply deleted it
		if !c.done {
			left = true // interrupted while deleting: it is gone
		}
	case c.done:
		left = cur.Ino == c.ino && (curType == "dir" || cur.Ctim.Nano() == c.ctime)
	default:
		for _, ino := range c.newIno {
			left = left || cur.Ino == ino
		}
		if p.Type == "none" && curType == "dir" {
			left = true // an interrupted mkdir
		}
	}
	if !left {
		rb.rep.Conflicts = append(rb.rep.Conflicts, p.Path+" (changed after the apply: left as it is)")
		return nil
	}
	// Take away what the apply left.
	if exists {
		if curType == "dir" {
			if cur.Ino == p.Ino { // same directory: only its mode changed
				if err := chmodAt(dir, name, p.Mode); err != nil {
					return err
				}
				rb.mark(c)
				rb.rep.Restored = append(rb.rep.Restored, p.Path+"/")
				return nil
			}
			if err := unix.Unlinkat(dir, name, unix.AT_REMOVEDIR); err != nil {
				if errors.Is(err, unix.ENOTEMPTY) || errors.Is(err, unix.EEXIST) {
					rb.rep.Conflicts = append(rb.rep.Conflicts, p.Path+"/ (a directory the apply made holds entries made after it: left as it is)")
					return nil
				}
				return err
			}
		} else if err := rb.takeBack(dir, name, p.Path); err != nil {
			return err
		}
	}
	// Put back the old entry.
	if err := rb.restore(dir, name, &p); err != nil {
		return err
	}
	rb.mark(c)
	if p.Type != "none" || exists {
		rb.rep.Restored = append(rb.rep.Restored, p.Path)
	}
	return nil
}

func (rb *roller) mark(c *change) {
	c.undone = true
	rb.j.write(&jEntry{Op: "undone", Seq: c.pre.Seq})
}

// takeBack moves the apply's file or link at dir/name to RolledBackDir().
func (rb *roller) takeBack(dir int, name, rel string) error {
	dst := filepath.Join(rb.run.RolledBackDir(), rel)
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return err
	}
	os.Remove(dst) // an earlier rollback's copy of the same path
	err := unix.Renameat(dir, name, unix.AT_FDCWD, dst)
	if !errors.Is(err, unix.EXDEV) {
		return err
	}
	var st unix.Stat_t
	if err := unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT == unix.S_IFLNK {
		t, err := readlinkat(dir, name)
		if err != nil {
			return err
		}
		if err := os.Symlink(t, dst); err != nil {
			return err
		}
	} else {
		f, err := openRead(dir, name)
		if err != nil {
			return err
		}
		parent, err := unix.Open(filepath.Dir(dst), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			f.Close()
			return err
		}
		err = writeCopy(f, parent, filepath.Base(dst), &st)
		f.Close()
		unix.Close(parent)
		if err != nil {
			return err
		}
	}
	return unix.Unlinkat(dir, name, 0)
}

// restore makes dir/name (absent now) the entry p describes.
func (rb *roller) restore(dir int, name string, p *jEntry) error {
	tmp := tmpName()
	switch p.Type {
	case "none":
		return nil
	case "dir":
		if err := unix.Mkdirat(dir, name, p.Mode&0o1777); err != nil {
			return err
		}
		if os.Geteuid() == 0 {
			unix.Fchownat(dir, name, p.UID, p.GID, unix.AT_SYMLINK_NOFOLLOW)
		}
		return chmodAt(dir, name, p.Mode)
	case "symlink":
		if err := unix.Symlinkat(p.Target, dir, tmp); err != nil {
			return err
		}
		if os.Geteuid() == 0 {
			unix.Fchownat(dir, tmp, p.UID, p.GID, unix.AT_SYMLINK_NOFOLLOW)
		}
		ts := unix.NsecToTimespec(p.Mtime)
		unix.UtimesNanoAt(dir, tmp, []unix.Timespec{ts, ts}, unix.AT_SYMLINK_NOFOLLOW)
	case "file":
		if err := unix.Linkat(rb.j.data, p.Data, dir, tmp, 0); err != nil {
			f, oerr := openRead(rb.j.data, p.Data)
			if oerr != nil {
				return fmt.Errorf("the journal's copy: %w", oerr)
			}
			ts := unix.NsecToTimespec(p.Mtime)
			st := unix.Stat_t{Mode: p.Mode, Uid: uint32(p.UID), Gid: uint32(p.GID), Atim: ts, Mtim: ts}
			err = writeCopy(f, dir, tmp, &st)
			f.Close()
			if err != nil {
				return err
			}
		}
	default:
		return fmt.Errorf("cannot restore a %s", p.Type)
	}
	if err := unix.Renameat(dir, tmp, dir, name); err != nil {
		unix.Unlinkat(dir, tmp, 0)
		return err
	}
	return nil
}

func chmodAt(dir int, name string, mode uint32) error {
	fd, err := unix.Openat(dir, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Fchmod(fd, mode)
}

// openParent opens the directory that holds rel below root, one name at
// a time without following a link, and returns it with rel's last name.
func openParent(root int, rel string) (int, string, error) {
	parts := strings.Split(rel, "/")
	fd, err := unix.Openat(root, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, "", err
	}
	for _, part := range parts[:len(parts)-1] {
		next, err := unix.Openat(fd, part, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		unix.Close(fd)
		if err != nil {
			return -1, "", err
		}
		fd = next
	}
	return fd, parts[len(parts)-1], nil
}

func tmpName() string {
	var rnd [6]byte
	unix.Getrandom(rnd[:], 0)
	return fmt.Sprintf(".airlock-apply-%x", rnd)
}
