package workspace

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// A checkpoint is the workspace's state as of one moment while the
// command ran: a copy of the upper layer, taken while the sandbox is
// frozen (so no write is half in it), in <run>/checkpoints/<id>/upper
// with its meta.json. The copy costs what the sandbox changed, not the
// workspace's size: the upper layer holds only the changes. A checkpoint
// is reviewed and applied like the last state (ChangesAt, ApplyAt).

// Checkpoint describes one checkpoint of a run.
type Checkpoint struct {
	// ID: 1, 2, ... in the order they were taken.
	ID   string    `json:"id"`
	Name string    `json:"name,omitempty"`
	Time time.Time `json:"time"`
	// Auto: taken by --checkpoint-every.
	Auto bool `json:"auto,omitempty"`
	// Changes: how many changes the state makes to the workspace, as
	// compared when the checkpoint was taken.
	Changes int `json:"changes"`
	// Entries and Bytes: what was copied (entries of the upper layer,
	// bytes of file data).
	Entries int   `json:"entries"`
	Bytes   int64 `json:"bytes"`
	// FrozenMS: how long the sandbox was paused for the copy, from the
	// start of the freeze to the end of the thaw.
	FrozenMS float64 `json:"frozen_ms"`
	// State identifies the upper layer's entries (names, inodes, sizes,
	// change times) when it was copied: an automatic checkpoint is
	// skipped when nothing changed since the last one.
	State string `json:"state,omitempty"`
}

// ErrUnchanged: an automatic checkpoint was not taken because nothing
// changed since the last one.
var ErrUnchanged = errors.New("nothing changed since the last checkpoint")

// ErrCheckpointExists: a checkpoint of that name exists.
var ErrCheckpointExists = errors.New("a checkpoint of that name exists")

// nameRE is compiled on first use: every airlock command would otherwise
// pay for it at start.
var nameRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z][A-Za-z0-9._-]{0,63}$`) })

// CheckName checks a checkpoint name: a letter, then up to 63 letters,
// digits, dots, dashes and underscores (never a number: ids are).
func CheckName(name string) error {
	if !nameRE().MatchString(name) {
		return fmt.Errorf("checkpoint name %q: want a letter followed by up to 63 letters, digits, '.', '-' or '_'", name)
	}
	return nil
}

// CheckpointsDir holds the run's checkpoints.
func (r *Run) CheckpointsDir() string { return filepath.Join(r.Dir, "checkpoints") }

// Checkpoints lists the run's checkpoints, oldest first. A checkpoint
// still being copied is not listed.
func (r *Run) Checkpoints() ([]Checkpoint, error) {
	entries, err := os.ReadDir(r.CheckpointsDir())
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []Checkpoint
	for _, e := range entries {
		n, err := strconv.Atoi(e.Name())
		if err != nil || n <= 0 || strconv.Itoa(n) != e.Name() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(r.CheckpointsDir(), e.Name(), "meta.json"))
		if err != nil {
			continue
		}
		var c Checkpoint
		if json.Unmarshal(b, &c) != nil || c.ID != e.Name() {
			continue
		}
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool {
		a, _ := strconv.Atoi(out[i].ID)
		b, _ := strconv.Atoi(out[j].ID)
		return a < b
	})
	return out, nil
}

// FindCheckpoint returns the checkpoint ref names: its id or its name.
func (r *Run) FindCheckpoint(ref string) (*Checkpoint, error) {
	cps, err := r.Checkpoints()
	if err != nil {
		return nil, err
	}
	var names []string
	for i := range cps {
		if cps[i].ID == ref || (cps[i].Name != "" && cps[i].Name == ref) {
			return &cps[i], nil
		}
		n := cps[i].ID
		if cps[i].Name != "" {
			n += " (" + cps[i].Name + ")"
		}
		names = append(names, n)
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("run %s has no checkpoint %q: it has none", r.ID, ref)
	}
	return nil, fmt.Errorf("run %s has no checkpoint %q; its checkpoints: %s", r.ID, ref, strings.Join(names, ", "))
}

// stateUpper is the upper directory of the state cp: a checkpoint id, or
// "" for the last state.
func (r *Run) stateUpper(cp string) (string, error) {
	if cp == "" {
		return r.Upper(), nil
	}
	c, err := r.FindCheckpoint(cp)
	if err != nil {
		return "", err
	}
	if c.ID != cp {
		return "", fmt.Errorf("checkpoint %q: name it by its id (%s)", cp, c.ID)
	}
	return filepath.Join(r.CheckpointsDir(), c.ID, "upper"), nil
}

func stateName(cp string) string {
	if cp == "" {
		return "the last state"
	}
	return "checkpoint " + cp
}

func checkpointFlag(cp string) string {
	if cp == "" {
		return ""
	}
	return " --checkpoint " + cp
}

// TakeCheckpoint copies the upper layer into a new checkpoint between
// pause and resume (the sandbox's freezer), and counts its changes after
// resume. Only the airlock that holds the run calls it, one at a time.
// With auto, nothing is taken when nothing changed since the last
// checkpoint (ErrUnchanged). A checkpoint that could not be copied whole
// is removed: it exists complete or not at all. An error from resume is
// returned with the (complete) checkpoint.
func (r *Run) TakeCheckpoint(name string, auto bool, pause, resume func() error) (*Checkpoint, error) {
	if name != "" {
		if err := CheckName(name); err != nil {
			return nil, err
		}
	}
	cps, err := r.Checkpoints()
	if err != nil {
		return nil, err
	}
	next := 1
	for _, c := range cps {
		if name != "" && c.Name == name {
			return nil, fmt.Errorf("checkpoint %q of run %s: %w (checkpoint %s)", name, r.ID, ErrCheckpointExists, c.ID)
		}
		if n, _ := strconv.Atoi(c.ID); n >= next {
			next = n + 1
		}
	}
	cp := &Checkpoint{ID: strconv.Itoa(next), Name: name, Auto: auto}
	dir := r.CheckpointsDir()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	tmp := filepath.Join(dir, ".tmp-"+cp.ID)
	removeAll(tmp)
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return nil, err
	}
	done := false
	defer func() {
		if !done {
			removeAll(tmp)
		}
	}()
	dst := filepath.Join(tmp, "upper")
	t0 := time.Now()
	if err := pause(); err != nil {
		resume() // a freeze that timed out half-way is undone
		return nil, fmt.Errorf("pausing the sandbox: %w; no checkpoint taken", err)
	}
	cp.Time = time.Now().UTC()
	var copyErr error
	state, entries, need, err := upperState(r.Upper())
	switch {
	case err != nil:
		copyErr = err
	case auto && len(cps) > 0 && cps[len(cps)-1].State == state:
		copyErr = ErrUnchanged
	case auto && len(cps) == 0 && entries == 0:
		copyErr = ErrUnchanged // nothing changed yet
	default:
		copyErr = roomFor(dir, need)
	}
	if copyErr == nil {
		cp.State = state
		c := &copier{}
		copyErr = c.tree(r.Upper(), dst)
		cp.Entries, cp.Bytes = c.entries, c.bytes
	}
	resumeErr := resume()
	frozen := time.Since(t0)
	cp.FrozenMS = float64(frozen.Microseconds()) / 1000
	if copyErr != nil {
		if errors.Is(copyErr, ErrUnchanged) || errors.Is(copyErr, ErrNoRoom) {
			return nil, errors.Join(copyErr, resumeErr)
		}
		return nil, errors.Join(fmt.Errorf("copying the upper layer: %w; no checkpoint taken", copyErr), resumeErr)
	}
	if changes, err := r.list(dst, false, false); err == nil {
		cp.Changes = len(changes)
	}
	b, err := json.MarshalIndent(cp, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(tmp, "meta.json"), append(b, '\n'), 0o600); err != nil {
		return nil, errors.Join(err, resumeErr)
	}
	if err := os.Rename(tmp, filepath.Join(dir, cp.ID)); err != nil {
		return nil, errors.Join(err, resumeErr)
	}
	done = true
	if resumeErr != nil {
		return cp, fmt.Errorf("resuming the sandbox after checkpoint %s: %w", cp.ID, resumeErr)
	}
	return cp, nil
}

// ErrNoRoom: the checkpoint would not fit on the changes directory's
// filesystem, beyond its reserve.
var ErrNoRoom = errors.New("not enough free space for a checkpoint")

// roomReserve is the share of the changes directory's filesystem that
// checkpoints leave free: a sandbox that rewrites large files under
// --checkpoint-every must not fill the host's disk.
const roomReserve = 0.05

// roomFor checks that need bytes fit in dir's filesystem, leaving
// roomReserve of it free.
func roomFor(dir string, need int64) error {
	var fs unix.Statfs_t
	if err := unix.Statfs(dir, &fs); err != nil {
		return err
	}
	avail := int64(fs.Bavail) * int64(fs.Bsize)
	reserve := int64(float64(int64(fs.Blocks)*int64(fs.Bsize)) * roomReserve)
	if need > avail-reserve {
		return fmt.Errorf("%w: it needs %d MiB and %s has %d MiB free beyond its %.0f%% reserve", ErrNoRoom, need>>20, dir, max(avail-reserve, 0)>>20, roomReserve*100)
	}
	return nil
}

// upperState hashes the identity of every entry of the upper layer
// (name, inode, type and mode, size, modification and change times), and
// counts the entries below its root and the bytes their copy needs.
func upperState(upper string) (string, int, int64, error) {
	h := sha256.New()
	n := -1
	var need int64
	err := filepath.WalkDir(upper, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		n++
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		fmt.Fprintf(h, "%q %d %o %d %d %d %d\n", p, st.Ino, st.Mode, st.Size, st.Rdev, st.Mtim.Nano(), st.Ctim.Nano())
		need += st.Blocks*512 + 4096
		return nil
	})
	if err != nil {
		return "", 0, 0, err
	}
	return hex.EncodeToString(h.Sum(nil)), n, need, nil
}

// copier copies an upper layer as the overlay made it: directories,
// files (their data regions only: a sparse file stays sparse), links,
// whiteouts (0/0 character devices), FIFOs and sockets, with owner, mode,
// times and the overlay's extended attributes; no link is followed.
// Other devices (which an overlay inside a sandbox cannot make) are not
// copied; apply would not bring them anyway.
type copier struct {
	entries int
	bytes   int64
	buf     []byte
	// root is the destination tree's directory; linked maps a source
	// file with several links to where its first name was copied
	// (relative to root), so that the others are links to it again.
	root   int
	linked map[[2]uint64]string
}

func (c *copier) tree(src, dst string) error {
	s, err := unix.Open(src, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(s)
	var st unix.Stat_t
	if err := unix.Fstat(s, &st); err != nil {
		return err
	}
	if err := os.Mkdir(dst, 0o700); err != nil {
		return err
	}
	d, err := unix.Open(dst, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(d)
	c.root, c.linked = d, map[[2]uint64]string{}
	if err := c.dir(s, d, ""); err != nil {
		return err
	}
	return c.attrs(s, d, "", "", &st)
}

// dir copies the entries of directory s into directory d, which is rel
// in the destination tree.
func (c *copier) dir(s, d int, rel string) error {
	names, err := readNames(s)
	if err != nil {
		return err
	}
	for _, name := range names {
		var st unix.Stat_t
		if err := unix.Fstatat(s, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fmt.Errorf("%q: %w", name, err)
		}
		c.entries++
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			if err := unix.Mkdirat(d, name, 0o700); err != nil {
				return err
			}
			cs, err := unix.Openat(s, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				return err
			}
			cd, err := unix.Openat(d, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				unix.Close(cs)
				return err
			}
			err = c.dir(cs, cd, path.Join(rel, name))
			if err == nil {
				err = c.attrs(cs, cd, "", "", &st)
			}
			unix.Close(cs)
			unix.Close(cd)
			if err != nil {
				return fmt.Errorf("%q/%w", name, err)
			}
			continue
		case unix.S_IFREG:
			key := [2]uint64{uint64(st.Dev), st.Ino}
			if first, ok := c.linked[key]; ok && st.Nlink > 1 {
				// Another name of a file copied already: a link to it,
				// as in the source (a copy would double its size and
				// split what writes through one name show in the other).
				if err := unix.Linkat(c.root, first, d, name, 0); err != nil {
					return fmt.Errorf("%q: link to %q: %w", name, first, err)
				}
				continue
			}
			if err := c.file(s, d, name, &st); err != nil {
				return fmt.Errorf("%q: %w", name, err)
			}
			if st.Nlink > 1 && c.linked != nil {
				c.linked[key] = path.Join(rel, name)
			}
			continue
		case unix.S_IFLNK:
			target, err := readlinkat(s, name)
			if err != nil {
				return fmt.Errorf("%q: %w", name, err)
			}
			if err := unix.Symlinkat(target, d, name); err != nil {
				return fmt.Errorf("%q: %w", name, err)
			}
		case unix.S_IFCHR:
			if st.Rdev != 0 {
				continue
			}
			if err := unix.Mknodat(d, name, unix.S_IFCHR|0o600, 0); err != nil {
				return fmt.Errorf("%q (a whiteout): %w", name, err)
			}
		case unix.S_IFIFO, unix.S_IFSOCK:
			if err := unix.Mknodat(d, name, st.Mode&unix.S_IFMT|0o600, 0); err != nil {
				return fmt.Errorf("%q: %w", name, err)
			}
		default:
			continue
		}
		if err := c.attrs(s, d, name, name, &st); err != nil {
			return fmt.Errorf("%q: %w", name, err)
		}
	}
	return nil
}

// file copies the regular file s/name to d/name.
func (c *copier) file(s, d int, name string, st *unix.Stat_t) error {
	in, err := unix.Openat(s, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(in)
	out, err := unix.Openat(d, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	defer unix.Close(out)
	if err := c.data(in, out, st.Size); err != nil {
		return err
	}
	if err := c.attrsFd(in, out, st); err != nil {
		return err
	}
	return unix.UtimesNanoAt(d, name, []unix.Timespec{st.Atim, st.Mtim}, unix.AT_SYMLINK_NOFOLLOW)
}

// data copies the data regions of in to out (same offsets), then sets
// out's size: holes stay holes.
func (c *copier) data(in, out int, size int64) error {
	if size == 0 {
		return nil
	}
	if unix.IoctlFileClone(out, in) == nil {
		c.bytes += size
		return nil
	}
	off := int64(0)
	for off < size {
		start, err := unix.Seek(in, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break // only a hole is left
		}
		if err != nil {
			start = off // no SEEK_DATA: copy it all
		}
		end, err := unix.Seek(in, start, unix.SEEK_HOLE)
		if err != nil || end > size {
			end = size
		}
		if err := c.span(in, out, start, end); err != nil {
			return err
		}
		off = end
	}
	return unix.Ftruncate(out, size)
}

// span copies bytes [start, end) of in to the same offsets of out.
func (c *copier) span(in, out int, start, end int64) error {
	for start < end {
		roff, woff := start, start
		n, err := unix.CopyFileRange(in, &roff, out, &woff, int(min(end-start, 1<<30)), 0)
		if err != nil || n == 0 {
			break // not supported here (or the file shrank): by hand
		}
		start += int64(n)
		c.bytes += int64(n)
	}
	if c.buf == nil {
		c.buf = make([]byte, 1<<20)
	}
	for start < end {
		n, err := unix.Pread(in, c.buf[:min(int64(len(c.buf)), end-start)], start)
		if err != nil {
			return err
		}
		if n == 0 {
			return nil // the file is shorter than it was: Ftruncate pads
		}
		if _, err := unix.Pwrite(out, c.buf[:n], start); err != nil {
			return err
		}
		start += int64(n)
		c.bytes += int64(n)
	}
	return nil
}

// attrsFd gives the open file or directory out the overlay attributes,
// owner and mode of in (times: by name, see file and attrs).
func (c *copier) attrsFd(in, out int, st *unix.Stat_t) error {
	if err := copyXattrs(procFd(in), procFd(out), true); err != nil {
		return err
	}
	if os.Geteuid() == 0 {
		if err := unix.Fchown(out, int(st.Uid), int(st.Gid)); err != nil {
			return err
		}
	}
	return unix.Fchmod(out, st.Mode&0o7777)
}

// attrs gives d/dname what s/sname has (attributes, owner, mode, times),
// never following a link; with names "", the directories s and d
// themselves.
func (c *copier) attrs(s, d int, sname, dname string, st *unix.Stat_t) error {
	ts := []unix.Timespec{st.Atim, st.Mtim}
	if dname == "" {
		if err := c.attrsFd(s, d, st); err != nil {
			return err
		}
		return unix.UtimesNanoAt(d, ".", ts, 0)
	}
	if err := copyXattrs(procPath(s, sname), procPath(d, dname), false); err != nil {
		return err
	}
	if os.Geteuid() == 0 {
		if err := unix.Fchownat(d, dname, int(st.Uid), int(st.Gid), unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return err
		}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFLNK {
		if err := unix.Fchmodat(d, dname, st.Mode&0o7777, 0); err != nil {
			return err
		}
	}
	return unix.UtimesNanoAt(d, dname, ts, unix.AT_SYMLINK_NOFOLLOW)
}

func procFd(fd int) string { return "/proc/self/fd/" + strconv.Itoa(fd) }

func procPath(dir int, name string) string {
	if name == "" {
		return procFd(dir)
	}
	return procFd(dir) + "/" + name
}

// copyXattrs copies the overlay's extended attributes (opaque, whiteout,
// redirect, origin, ...): without them the copy would mean another state.
// Other attributes are not part of a workspace's changes. With fd, src
// and dst are /proc/self/fd links of a directory or a regular file
// (followed), and every attribute must be copied; else they are paths of
// a link or a special file (not followed), whose attributes are copied
// where the filesystem allows (none changes what apply does with them).
func copyXattrs(src, dst string, fd bool) error {
	list, get, set := unix.Llistxattr, unix.Lgetxattr, unix.Lsetxattr
	if fd {
		list, get, set = unix.Listxattr, unix.Getxattr, unix.Setxattr
	}
	size, err := list(src, nil)
	if err != nil || size == 0 {
		if errors.Is(err, unix.ENOTSUP) {
			return nil
		}
		return err
	}
	buf := make([]byte, size)
	size, err = list(src, buf)
	if err != nil {
		return err
	}
	val := make([]byte, 4096)
	for _, name := range strings.Split(string(buf[:size]), "\x00") {
		// The overlay's own attributes, and the user's (user.*, as the
		// files had them); not security.* or other trusted ones.
		if !strings.HasPrefix(name, "user.") && !strings.HasPrefix(name, "trusted.overlay.") {
			continue
		}
		n, err := get(src, name, val)
		if errors.Is(err, unix.ERANGE) {
			if n, err = get(src, name, nil); err == nil {
				val = make([]byte, n)
				n, err = get(src, name, val)
			}
		}
		if err != nil {
			return fmt.Errorf("xattr %s: %w", name, err)
		}
		if err := set(dst, name, val[:n], 0); err != nil && fd {
			return fmt.Errorf("xattr %s: %w", name, err)
		}
	}
	return nil
}
