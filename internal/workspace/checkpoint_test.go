package workspace

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// counter stands for the sandbox's freezer: it counts pauses and resumes
// and checks they alternate.
type counter struct {
	paused          bool
	pauses, resumes int
	pauseErr        error
}

func (c *counter) pause() error {
	c.pauses++
	if c.pauseErr != nil {
		return c.pauseErr
	}
	c.paused = true
	return nil
}

func (c *counter) resume() error {
	c.resumes++
	c.paused = false
	return nil
}

// A checkpoint is a faithful copy of the upper layer (files, a sparse
// file, links, a whiteout, an opaque directory, modes, owners), taken
// between pause and resume; the state it holds is listed and applied
// like the last state, while the upper layer goes on changing.
func TestCheckpointCopyAndApply(t *testing.T) {
	needRoot(t)
	_, ws := newRun(t, "")
	write(t, filepath.Join(ws, "gone.txt"), "bye\n")
	write(t, filepath.Join(ws, "old/x"), "x\n")
	write(t, filepath.Join(ws, "keep.txt"), "keep\n")
	r := create(t, "00000000000000c1", ws)
	up := r.Upper()
	write(t, filepath.Join(up, "a.txt"), "alpha\n")
	os.Chmod(filepath.Join(up, "a.txt"), 0o751)
	os.Chown(filepath.Join(up, "a.txt"), 1234, 5678)
	whiteout(t, filepath.Join(up, "gone.txt"))
	os.Symlink("a.txt", filepath.Join(up, "link"))
	if err := os.Mkdir(filepath.Join(up, "old"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Setxattr(filepath.Join(up, "old"), "trusted.overlay.opaque", []byte("y"), 0); err != nil {
		t.Skipf("trusted xattrs: %v", err)
	}
	write(t, filepath.Join(up, "old/new"), "n\n")
	sparse := filepath.Join(up, "sparse")
	f, _ := os.Create(sparse)
	f.WriteAt([]byte("end"), 64<<20)
	f.Close()
	write(t, filepath.Join(up, ".bashrc"), "evil\n") // protected
	old := time.Date(2001, 2, 3, 4, 5, 6, 789, time.UTC)
	for _, p := range []string{"a.txt", "old"} {
		if err := os.Chtimes(filepath.Join(up, p), old, old); err != nil {
			t.Fatal(err)
		}
	}

	c := &counter{}
	cp, err := r.TakeCheckpoint("first", false, c.pause, c.resume)
	if err != nil {
		t.Fatal(err)
	}
	if c.pauses != 1 || c.resumes != 1 || c.paused {
		t.Errorf("pauses %d resumes %d paused %v", c.pauses, c.resumes, c.paused)
	}
	if cp.ID != "1" || cp.Name != "first" || cp.Changes == 0 {
		t.Errorf("checkpoint %+v", cp)
	}
	cup := filepath.Join(r.CheckpointsDir(), "1", "upper")
	var st unix.Stat_t
	if unix.Lstat(filepath.Join(cup, "a.txt"), &st); st.Mode&0o7777 != 0o751 || st.Uid != 1234 || st.Gid != 5678 {
		t.Errorf("a.txt copied as mode %o owner %d:%d", st.Mode&0o7777, st.Uid, st.Gid)
	}
	if unix.Lstat(filepath.Join(cup, "gone.txt"), &st); st.Mode&unix.S_IFMT != unix.S_IFCHR || st.Rdev != 0 {
		t.Errorf("the whiteout was not copied as one: mode %o", st.Mode)
	}
	if unix.Lstat(filepath.Join(cup, "sparse"), &st); st.Size != 64<<20+3 || st.Blocks*512 > 1<<20 {
		t.Errorf("sparse copy: size %d, %d blocks", st.Size, st.Blocks)
	}
	if cp.Bytes > 1<<20 {
		t.Errorf("copied %d bytes for a few small files and a sparse one", cp.Bytes)
	}
	for _, p := range []string{"a.txt", "old"} {
		if fi, err := os.Lstat(filepath.Join(cup, p)); err != nil || !fi.ModTime().Equal(old) {
			t.Errorf("%s copied with mtime %v (%v), want %v", p, fi.ModTime(), err, old)
		}
	}
	if !isOpaqueAt(t, filepath.Join(cup, "old")) {
		t.Error("the opaque directory lost its attribute")
	}

	// The upper layer changes after the checkpoint.
	os.Remove(filepath.Join(up, "a.txt"))
	write(t, filepath.Join(up, "b.txt"), "beta\n")

	last := kinds(t, r, "")
	at1 := kinds(t, r, "1")
	if _, ok := last["a.txt"]; ok || last["b.txt"] != "added" {
		t.Errorf("last state: %v", last)
	}
	if at1["a.txt"] != "added" || at1["gone.txt"] != "deleted" || at1["old/x"] != "deleted" || at1[".bashrc"] != "kept" || at1["b.txt"] != "" {
		t.Errorf("checkpoint 1: %v", at1)
	}
	if _, err := r.ChangesAt("2", false); err == nil {
		t.Error("a checkpoint that does not exist was listed")
	}

	rep, err := r.ApplyAt("1")
	if err != nil || len(rep.Errors) > 0 {
		t.Fatalf("apply checkpoint 1: %v %+v", err, rep)
	}
	if err := r.Finish(rep); err != nil {
		t.Fatal(err)
	}
	if got := read(t, filepath.Join(ws, "a.txt")); got != "alpha\n" {
		t.Errorf("a.txt = %q", got)
	}
	for _, p := range []string{"gone.txt", "old/x", "b.txt"} {
		if _, err := os.Lstat(filepath.Join(ws, p)); err == nil {
			t.Errorf("%s exists after applying checkpoint 1", p)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(ws, ".bashrc")); len(b) != 0 {
		t.Errorf("protected .bashrc applied: %q", b)
	}
	if _, err := os.Stat(r.CheckpointsDir()); err == nil {
		t.Error("the checkpoints outlive the apply")
	}
}

func isOpaqueAt(t *testing.T, dir string) bool {
	buf := make([]byte, 8)
	n, err := unix.Lgetxattr(dir, "trusted.overlay.opaque", buf)
	return err == nil && string(buf[:n]) == "y"
}

func kinds(t *testing.T, r *Run, cp string) map[string]string {
	t.Helper()
	ch, err := r.ChangesAt(cp, false)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for _, c := range ch {
		m[strings.TrimSuffix(c.Path, "/")] = c.Kind
	}
	return m
}

// Names are unique and well-formed; an automatic checkpoint with nothing
// changed is skipped, an explicit one is not; a failed pause leaves no
// checkpoint; an interrupted apply of one state cannot be resumed as
// another.
func TestCheckpointRules(t *testing.T) {
	_, ws := newRun(t, "")
	r := create(t, "00000000000000c2", ws)
	write(t, filepath.Join(r.Upper(), "f"), "1\n")
	c := &counter{}
	if _, err := r.TakeCheckpoint("n1", false, c.pause, c.resume); err != nil {
		t.Fatal(err)
	}
	if _, err := r.TakeCheckpoint("n1", false, c.pause, c.resume); !errors.Is(err, ErrCheckpointExists) {
		t.Errorf("a second checkpoint named n1: %v", err)
	}
	for _, bad := range []string{"1", "-x", "a/b", "a b", strings.Repeat("a", 65), ".."} {
		if _, err := r.TakeCheckpoint(bad, false, c.pause, c.resume); err == nil {
			t.Errorf("name %q accepted", bad)
		}
	}
	if _, err := r.TakeCheckpoint("", true, c.pause, c.resume); !errors.Is(err, ErrUnchanged) {
		t.Errorf("automatic checkpoint with nothing changed: %v", err)
	}
	if cp, err := r.TakeCheckpoint("", false, c.pause, c.resume); err != nil || cp.ID != "2" {
		t.Errorf("explicit checkpoint with nothing changed: %+v %v", cp, err)
	}
	write(t, filepath.Join(r.Upper(), "g"), "2\n")
	if cp, err := r.TakeCheckpoint("", true, c.pause, c.resume); err != nil || cp.ID != "3" || !cp.Auto {
		t.Errorf("automatic checkpoint after a change: %+v %v", cp, err)
	}
	bad := &counter{pauseErr: fmt.Errorf("no freezer")}
	if _, err := r.TakeCheckpoint("x", false, bad.pause, bad.resume); err == nil || bad.resumes != 1 {
		t.Errorf("a failed pause: %v (resumes %d)", err, bad.resumes)
	}
	cps, _ := r.Checkpoints()
	if len(cps) != 3 || c.pauses != c.resumes {
		t.Errorf("checkpoints %+v; pauses %d resumes %d", cps, c.pauses, c.resumes)
	}
	ents, _ := os.ReadDir(r.CheckpointsDir())
	if len(ents) != 3 {
		t.Errorf("checkpoints directory holds %d entries, want 3", len(ents))
	}
	if cp, err := r.FindCheckpoint("n1"); err != nil || cp.ID != "1" {
		t.Errorf("find n1: %+v %v", cp, err)
	}
	if _, err := r.FindCheckpoint("nope"); err == nil || !strings.Contains(err.Error(), "1 (n1)") {
		t.Errorf("find nope: %v", err)
	}
	// An apply of checkpoint 1 interrupted after its first change: the
	// last state (or another checkpoint) waits; checkpoint 1 resumes.
	defer func() { stopAfter = 0 }()
	applySteps.Store(0)
	stopAfter = 1
	if _, err := r.ApplyAt("1"); !errors.Is(err, errStopped) {
		t.Fatalf("interrupted apply: %v", err)
	}
	stopAfter = 0
	for _, other := range []string{"", "3"} {
		if _, err := r.ApplyAt(other); err == nil || !strings.Contains(err.Error(), "--checkpoint 1") {
			t.Errorf("apply of %q after an interrupted apply of checkpoint 1: %v", other, err)
		}
	}
	rep, err := r.ApplyAt("1")
	if err != nil || len(rep.Errors) > 0 {
		t.Fatalf("resumed apply of checkpoint 1: %+v %v", rep, err)
	}
	if got := read(t, filepath.Join(ws, "f")); got != "1\n" {
		t.Errorf("f = %q after applying checkpoint 1", got)
	}
	if _, err := os.Lstat(filepath.Join(ws, "g")); err == nil {
		t.Error("g (after checkpoint 1) applied")
	}
}

// A checkpoint that would not fit beside the filesystem's reserve is
// refused whole (ErrNoRoom, nothing left, the sandbox resumed); a small
// one on the same filesystem is taken.
func TestCheckpointNoRoom(t *testing.T) {
	needRoot(t)
	base := t.TempDir()
	if err := unix.Mount("ckroom", base, "tmpfs", 0, "size=8m"); err != nil {
		t.Skipf("tmpfs: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(base, unix.MNT_DETACH) })
	t.Setenv("AIRLOCK_CHANGES_DIR", filepath.Join(base, "changes"))
	ws := t.TempDir()
	r := create(t, "00000000000000c3", ws)
	write(t, filepath.Join(r.Upper(), "small"), "s\n")
	c := &counter{}
	if _, err := r.TakeCheckpoint("", false, c.pause, c.resume); err != nil {
		t.Fatalf("small checkpoint: %v", err)
	}
	big := make([]byte, 5<<20)
	for i := range big {
		big[i] = byte(i)
	}
	if err := os.WriteFile(filepath.Join(r.Upper(), "big"), big, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := r.TakeCheckpoint("", false, c.pause, c.resume)
	if !errors.Is(err, ErrNoRoom) || c.paused || c.pauses != c.resumes {
		t.Errorf("big checkpoint: %v (paused %v)", err, c.paused)
	}
	ents, _ := os.ReadDir(r.CheckpointsDir())
	if len(ents) != 1 {
		t.Errorf("checkpoints directory holds %d entries, want 1", len(ents))
	}
}
