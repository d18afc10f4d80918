// Package workspace keeps what a sandbox wrote to a caller's workspace
// aside until the command ends, and then applies it to the host directory.
//
// `airlock run --workspace DIR` mounts an overlay at /workspace: the lower
// layer is DIR (read-only), the upper layer is a directory of a run, here.
// When the command ends, Apply walks the upper layer and brings each change
// to DIR, one name at a time relative to an open directory, never following
// a host symlink. Changes at protected paths (.git/hooks, .bashrc, ...) are
// kept aside in the run's kept/ directory and reported, never applied; a
// file that also changed on the host since the run started keeps the host's
// version, the sandbox's goes to conflicts/. A run whose supervisor died
// stays pending until `airlock review apply|discard ID`.
package workspace

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Meta is what a run records about itself (meta.json).
type Meta struct {
	ID        string   `json:"id"`
	Workspace string   `json:"workspace"`
	Protected []string `json:"protected,omitempty"`
	Command   []string `json:"command,omitempty"`
	// UID and GID own the workspace: new entries land owned by them.
	UID int `json:"uid"`
	GID int `json:"gid"`
	// Dev and Ino identify the workspace directory: apply refuses a
	// different directory at the same path.
	Dev uint64 `json:"dev"`
	Ino uint64 `json:"ino"`
	// Started is when the run began; StartNS the change time (ns) of the
	// run's lock file, made when it began: a host entry whose change time is
	// later was changed on the host during the run.
	Started time.Time `json:"started"`
	StartNS int64     `json:"start_ns"`
	PID     int       `json:"pid"`
	// Review: the run was made with --review (nothing applied at the end).
	Review bool `json:"review,omitempty"`
	// Applied: the changes were applied; what is left is kept/ and
	// conflicts/ for the user to look at.
	Applied bool `json:"applied,omitempty"`
	// RolledBack: Rollback put the workspace back as it was before the
	// apply; the sandbox's versions are in rolledback/ (and what was not
	// applied yet in layer/upper) until the run is discarded.
	RolledBack bool `json:"rolled_back,omitempty"`
	// ApplyingCheckpoint: the checkpoint whose state an apply brings (or
	// brought) to the workspace; "" for the last state.
	ApplyingCheckpoint string `json:"applying_checkpoint,omitempty"`
	// Volatile: the sandbox's overlay was mounted volatile (see
	// SetVolatile); BootID is the kernel's boot id when the run began.
	Volatile bool   `json:"volatile,omitempty"`
	BootID   string `json:"boot_id,omitempty"`
}

// Run is one run's directory: meta.json, lock, layer/{upper,work}, kept/,
// conflicts/.
type Run struct {
	Meta
	Dir  string
	lock *os.File
	// AfterRestart lets ApplyAt apply a run that Restarted.
	AfterRestart bool
}

// Root is the directory that holds runs: $AIRLOCK_CHANGES_DIR, else
// /var/lib/airlock/changes as root, else $XDG_STATE_HOME/airlock/changes,
// else ~/.local/state/airlock/changes, else (no usable home, as for
// nobody) <tmp>/airlock-<uid>-changes. It is made if missing and must be
// a directory owned by the caller that nobody else can write.
func Root() (string, error) {
	root := RootPath()
	if err := os.MkdirAll(root, 0o700); err != nil {
		return "", fmt.Errorf("changes directory: %w", err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(root, &st); err != nil {
		return "", fmt.Errorf("changes directory: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR || int(st.Uid) != os.Geteuid() || st.Mode&0o022 != 0 {
		return "", fmt.Errorf("changes directory %s must be a directory owned by uid %d and writable only by it; remove it or set AIRLOCK_CHANGES_DIR", root, os.Geteuid())
	}
	return root, nil
}

// RootPath is Root's path, without making or checking it.
func RootPath() string {
	if d := os.Getenv("AIRLOCK_CHANGES_DIR"); d != "" {
		return d
	}
	if os.Geteuid() == 0 {
		return "/var/lib/airlock/changes"
	}
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "airlock", "changes")
	}
	if h := os.Getenv("HOME"); h != "" {
		if fi, err := os.Stat(h); err == nil && fi.IsDir() && unix.Access(h, unix.W_OK) == nil {
			return filepath.Join(h, ".local", "state", "airlock", "changes")
		}
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("airlock-%d-changes", os.Geteuid()))
}

// ErrBusy: the run is still held by the airlock that made it.
var ErrBusy = errors.New("the run is still in progress")

// ErrNoRun: there is no run of that id.
var ErrNoRun = errors.New("no such run (see airlock review)")

// Create makes a run for workspace ws (an absolute path): the layer
// directory with upper/ and work/ owned by the workspace's owner (so that
// an idmapped attachment makes it root's inside) and the upper's root
// carrying the workspace's own mode. The run is locked until Close.
func Create(id, ws string, protected, argv []string) (_ *Run, retErr error) {
	if !isID(id) {
		return nil, fmt.Errorf("run id %q: want 16 lowercase hex digits", id)
	}
	root, err := Root()
	if err != nil {
		return nil, err
	}
	var wst unix.Stat_t
	if err := unix.Stat(ws, &wst); err != nil {
		return nil, fmt.Errorf("workspace %s: %w", ws, err)
	}
	if wst.Mode&unix.S_IFMT != unix.S_IFDIR {
		return nil, fmt.Errorf("workspace %s: not a directory", ws)
	}
	dir := filepath.Join(root, id)
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, fmt.Errorf("changes directory: %w", err)
	}
	defer func() {
		if retErr != nil {
			removeAll(dir)
		}
	}()
	r := &Run{Dir: dir}
	if err := r.lockNB(); err != nil {
		return nil, err
	}
	defer func() {
		if retErr != nil {
			r.Close()
		}
	}()
	layer := filepath.Join(dir, "layer")
	for _, d := range []string{layer, filepath.Join(layer, "upper"), filepath.Join(layer, "work")} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return nil, fmt.Errorf("changes directory: %w", err)
		}
		if os.Geteuid() == 0 {
			if err := os.Lchown(d, int(wst.Uid), int(wst.Gid)); err != nil {
				return nil, fmt.Errorf("changes directory: %w", err)
			}
		}
	}
	// The upper's root is the merged root: it shows its mode inside.
	if err := os.Chmod(filepath.Join(layer, "upper"), os.FileMode(wst.Mode&0o7777)); err != nil {
		return nil, err
	}
	// The lock file, made just now and never written, marks the start:
	// its change time is the run's (StartNS).
	var mst unix.Stat_t
	if err := unix.Fstat(int(r.lock.Fd()), &mst); err != nil {
		return nil, err
	}
	r.Meta = Meta{
		ID: id, Workspace: ws, Protected: protected, Command: argv,
		UID: int(wst.Uid), GID: int(wst.Gid), Dev: uint64(wst.Dev), Ino: wst.Ino,
		Started: time.Now().UTC(), StartNS: mst.Ctim.Nano(), PID: os.Getpid(),
	}
	if err := r.save(); err != nil {
		return nil, err
	}
	if err := r.markWorkspace(); err != nil {
		return nil, err
	}
	return r, nil
}

// wsLink names the run's workspace by device and inode (a symbolic link's
// target, read in one system call), so that an apply can pass over the
// runs of other workspaces without reading their meta.json.
const wsLink = "ws"

func (r *Run) wsID() string { return fmt.Sprintf("%x-%x", r.Dev, r.Ino) }

func (r *Run) markWorkspace() error {
	err := os.Symlink(r.wsID(), filepath.Join(r.Dir, wsLink))
	if errors.Is(err, os.ErrExist) {
		return nil
	}
	return err
}

// Layer is the host directory with the overlay's upper/ and work/.
func (r *Run) Layer() string { return filepath.Join(r.Dir, "layer") }

// Upper is the overlay's upper layer.
func (r *Run) Upper() string { return filepath.Join(r.Dir, "layer", "upper") }

// Kept is where changes at protected paths are kept aside.
func (r *Run) Kept() string { return filepath.Join(r.Dir, "kept") }

// Conflicts is where the sandbox's version of files that also changed on
// the host are kept.
func (r *Run) Conflicts() string { return filepath.Join(r.Dir, "conflicts") }

// Pending reports whether the run has changes that were neither applied
// nor discarded.
func (r *Run) Pending() bool {
	if r.Applied || r.RolledBack {
		return false
	}
	_, err := os.Lstat(r.Upper())
	return err == nil
}

// Open opens the run id, locked for the caller (ErrBusy while the airlock
// that made it still holds it).
func Open(id string) (*Run, error) {
	if !isID(id) {
		return nil, fmt.Errorf("run id %q: want 16 lowercase hex digits (see airlock review)", id)
	}
	root, err := Root()
	if err != nil {
		return nil, err
	}
	r, err := load(filepath.Join(root, id))
	if err != nil {
		return nil, err
	}
	if err := r.lockNB(); err != nil {
		return nil, err
	}
	return r, nil
}

// Peek opens the run id without its lock, to read its checkpoints while
// its airlock still runs (a checkpoint, once listed, never changes until
// the run ends).
func Peek(id string) (*Run, error) {
	if !isID(id) {
		return nil, fmt.Errorf("run id %q: want 16 lowercase hex digits (see airlock review)", id)
	}
	root, err := Root()
	if err != nil {
		return nil, err
	}
	return load(filepath.Join(root, id))
}

// List returns every run under Root, oldest first; Busy marks those still
// held by their airlock.
func List() ([]Listed, error) {
	root, err := Root()
	if err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil, err
	}
	var out []Listed
	for _, e := range entries {
		if !isID(e.Name()) {
			continue
		}
		r, err := load(filepath.Join(root, e.Name()))
		if err != nil {
			continue
		}
		out = append(out, r.listed())
	}
	sortListed(out)
	return out, nil
}

// listed describes r as List does.
func (r *Run) listed() Listed {
	l := Listed{Meta: r.Meta, Dir: r.Dir, Pending: r.Pending(), Undoable: !r.RolledBack && r.HasJournal()}
	if err := r.lockNB(); errors.Is(err, ErrBusy) {
		l.Busy = true
	}
	r.Close()
	l.Kept = countFiles(r.Kept())
	l.Conflicts = countFiles(r.Conflicts())
	l.Checkpoints, _ = r.Checkpoints()
	return l
}

func sortListed(l []Listed) {
	sort.Slice(l, func(i, j int) bool { return l[i].Started.Before(l[j].Started) })
}

// Listed is one run as List sees it.
type Listed struct {
	Meta
	Dir       string `json:"dir"`
	Pending   bool   `json:"pending"`
	Busy      bool   `json:"running"`
	Kept      int    `json:"kept"`
	Conflicts int    `json:"conflicts"`
	// Undoable: airlock review rollback can undo what was applied.
	Undoable bool `json:"rollback"`
	// Checkpoints of the run, oldest first.
	Checkpoints []Checkpoint `json:"checkpoints,omitempty"`
}

// PendingRuns lists the runs left pending by an airlock that is gone.
// Every `airlock run --workspace` asks, so it reads only what can be
// pending: a run without a layer (Finish and Discard remove it) costs one
// lstat, however many runs the root keeps.
func PendingRuns() []Listed {
	root, err := Root()
	if err != nil {
		return nil
	}
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil
	}
	var out []Listed
	for _, e := range entries {
		if !isID(e.Name()) {
			continue
		}
		dir := filepath.Join(root, e.Name())
		if _, err := os.Lstat(filepath.Join(dir, "layer", "upper")); err != nil {
			continue
		}
		r, err := load(dir)
		if err != nil || !r.Pending() {
			continue
		}
		if l := r.listed(); !l.Busy {
			out = append(out, l)
		}
	}
	sortListed(out)
	return out
}

// Discard removes the run: its changes, kept and conflicting files.
func (r *Run) Discard() error {
	defer r.Close()
	return removeAll(r.Dir)
}

// Close releases the run's lock.
func (r *Run) Close() {
	if r.lock != nil {
		r.lock.Close()
		r.lock = nil
	}
}

// Finish ends an applied run: its layer is removed, and so is the whole
// run when nothing was kept aside and nothing applied. The journal of what
// was applied stays for Rollback, for the workspace's latest apply that
// changed something only: older applied runs of the same workspace lose
// theirs (and go, unless they kept something aside).
func (r *Run) Finish(rep *Report) error {
	if len(rep.Kept) == 0 && len(rep.Conflicts) == 0 && !r.HasJournal() {
		// Nothing changed on the host and nothing is kept: the run goes
		// whole, at once (a crash half-way leaves at most a layer with
		// nothing left to apply). The workspace's previous apply stays
		// undoable: its journal still describes the workspace as it is.
		r.Close()
		return removeAll(r.Dir)
	}
	r.Applied = true
	if err := r.save(); err != nil {
		return err
	}
	if err := removeAll(r.Layer()); err != nil {
		return err
	}
	// One state of the run was applied: the others go with the layer.
	if err := removeAll(r.CheckpointsDir()); err != nil {
		return err
	}
	r.pruneOlder()
	return nil
}

// SetRolledBack records a rollback.
func (r *Run) SetRolledBack() error {
	r.RolledBack = true
	return r.save()
}

// pruneOlder drops the journals of the workspace's other applied runs, and
// those of applied runs whose workspace is gone (removed, or another
// directory at its path): nothing can be rolled back there. A run left
// with nothing (no kept, conflicting or rolled-back files) goes whole.
//
// Every apply calls it, and the root keeps a run for every workspace that
// had one, so it reads one link per run (wsLink; a run made before the
// link existed gets it here) and the meta.json of this workspace's runs
// alone; the runs of gone workspaces are looked for at most every
// goneEvery.
func (r *Run) pruneOlder() {
	root := filepath.Dir(r.Dir)
	entries, err := os.ReadDir(root)
	if err != nil {
		return
	}
	mine := r.wsID()
	stamp := filepath.Join(root, goneStamp)
	gone := false
	if fi, err := os.Stat(stamp); err != nil || time.Since(fi.ModTime()) >= goneEvery {
		gone = true
		if f, err := os.Create(stamp); err == nil {
			f.Close()
		}
	}
	for _, e := range entries {
		id := e.Name()
		if !isID(id) || id == r.ID {
			continue
		}
		dir := filepath.Join(root, id)
		ws, err := os.Readlink(filepath.Join(dir, wsLink))
		if err == nil && ws != mine && !gone {
			continue
		}
		if _, err := os.Lstat(filepath.Join(dir, "journal")); err != nil {
			continue
		}
		o, err := load(dir)
		if err != nil || !(o.Applied || o.RolledBack) {
			continue
		}
		if ws == "" {
			o.markWorkspace()
		}
		if (o.Dev != r.Dev || o.Ino != r.Ino) && !(gone && o.workspaceGone()) {
			continue
		}
		if o.lockNB() != nil {
			continue // busy: a review or rollback holds it
		}
		removeAll(o.Journal())
		if countFiles(o.Kept())+countFiles(o.Conflicts())+countFiles(o.RolledBackDir()) == 0 && !o.RolledBack {
			removeAll(o.Dir)
		}
		o.Close()
	}
}

// goneStamp's time is when pruneOlder last looked for the runs of gone
// workspaces; it looks again goneEvery later.
const goneStamp = ".gone-checked"

var goneEvery = time.Hour

// workspaceGone reports whether the run's workspace no longer exists as the
// directory it was made for.
func (r *Run) workspaceGone() bool {
	var st unix.Stat_t
	err := unix.Stat(r.Workspace, &st)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
		return true
	}
	return err == nil && (uint64(st.Dev) != r.Dev || st.Ino != r.Ino)
}

// SetVolatile records that the run's overlay is mounted volatile: the
// sandbox's writes and syncs are not made durable by the overlay (its
// unmount would otherwise sync the whole filesystem of the layer). The run
// is applied when its command ends; should the machine restart before,
// Restarted says so and ApplyAt refuses it.
func (r *Run) SetVolatile() error {
	r.Volatile, r.BootID = true, bootID()
	return r.save()
}

// Restarted reports whether the machine restarted since a volatile run
// began: files in its layer may be missing or cut short, whatever the
// sandbox synced.
func (r *Run) Restarted() bool {
	return r.Volatile && (r.BootID == "" || r.BootID != bootID())
}

// bootID is the kernel's random boot id ("" if it cannot be read).
func bootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// SetReview records that the run waits for a review.
func (r *Run) SetReview(v bool) error {
	r.Review = v
	return r.save()
}

func (r *Run) lockNB() error {
	f, err := os.OpenFile(filepath.Join(r.Dir, "lock"), os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return fmt.Errorf("run %s: %w", filepath.Base(r.Dir), err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return fmt.Errorf("run %s: %w", filepath.Base(r.Dir), ErrBusy)
		}
		return err
	}
	r.lock = f
	return nil
}

func (r *Run) save() error {
	b, err := json.MarshalIndent(&r.Meta, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(r.Dir, "meta.json.tmp")
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(r.Dir, "meta.json"))
}

func load(dir string) (*Run, error) {
	b, err := os.ReadFile(filepath.Join(dir, "meta.json"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("run %s: %w", filepath.Base(dir), ErrNoRun)
	}
	if err != nil {
		return nil, err
	}
	r := &Run{Dir: dir}
	if err := json.Unmarshal(b, &r.Meta); err != nil {
		return nil, fmt.Errorf("run %s: %w", filepath.Base(dir), err)
	}
	return r, nil
}

func countFiles(dir string) int {
	n := 0
	filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			n++
		}
		return nil
	})
	return n
}

// removeAll removes a tree that may hold directories without permissions
// (the overlay's work/work is mode 0).
func removeAll(dir string) error {
	if err := os.RemoveAll(dir); err == nil {
		return nil
	}
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if d != nil && d.IsDir() {
			os.Chmod(p, 0o700)
		}
		return nil
	})
	return os.RemoveAll(dir)
}

// ForWorkspace lists the runs whose workspace is dir: the same path, or
// the same directory (device and inode) when dir exists.
func ForWorkspace(dir string) ([]Listed, error) {
	all, err := List()
	if err != nil {
		return nil, err
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	var st unix.Stat_t
	exists := unix.Stat(abs, &st) == nil
	var out []Listed
	for _, l := range all {
		if filepath.Clean(l.Workspace) == abs || (exists && uint64(st.Dev) == l.Dev && st.Ino == l.Ino) {
			out = append(out, l)
		}
	}
	return out, nil
}

// IsID reports whether s has the form of a run id.
func IsID(s string) bool { return isID(s) }

func isID(s string) bool {
	if len(s) != 16 {
		return false
	}
	_, err := strconv.ParseUint(s, 16, 64)
	return err == nil && s == lower(s)
}

func lower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}
