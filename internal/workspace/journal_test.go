package workspace

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// snapshot maps every entry below dir to its type, mode, owner, size,
// content hash or link target, and (files, links) modification time.
func snapshot(t testing.TB, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		st := fi.Sys().(*syscall.Stat_t)
		v := fmt.Sprintf("%v uid=%d gid=%d", fi.Mode(), st.Uid, st.Gid)
		switch {
		case fi.Mode()&os.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			v += " -> " + target
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			h := sha256.Sum256(b)
			v += fmt.Sprintf(" %d %s mtime=%d", len(b), hex.EncodeToString(h[:]), st.Mtim.Nano())
		}
		out[rel] = v
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func sameSnapshot(t testing.TB, what string, got, want map[string]string) {
	t.Helper()
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %q is %q, want %q", what, k, got[k], v)
		}
	}
	for k, v := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("%s: %q (%s) was not there before", what, k, v)
		}
	}
}

// rollbackTree makes a workspace and a run whose upper layer rewrites,
// deletes (a file and a tree), chmods, re-links, turns a file into a
// directory and a directory into a file, adds files and directories,
// and changes a file the host also changed (a conflict).
func rollbackTree(t *testing.T, id string) (*Run, string) {
	t.Helper()
	_, ws := newRun(t, "")
	write(t, filepath.Join(ws, "mod.txt"), "old\n")
	write(t, filepath.Join(ws, "del.txt"), "bye\n")
	write(t, filepath.Join(ws, "deldir/a/b.txt"), "b\n")
	os.Symlink("b.txt", filepath.Join(ws, "deldir/a/l"))
	write(t, filepath.Join(ws, "mode.sh"), "#!/bin/sh\n")
	write(t, filepath.Join(ws, "dirmode/f"), "f\n")
	write(t, filepath.Join(ws, "f2d"), "file\n")
	write(t, filepath.Join(ws, "d2f/x"), "x\n")
	os.Chmod(filepath.Join(ws, "dirmode"), 0o750)
	os.Symlink("mod.txt", filepath.Join(ws, "link"))
	write(t, filepath.Join(ws, "both.txt"), "host-old\n")
	os.Chown(filepath.Join(ws, "mod.txt"), 1234, 1234)
	r := create(t, id, ws)
	up := r.Upper()
	write(t, filepath.Join(up, "mod.txt"), "new\n")
	whiteout(t, filepath.Join(up, "del.txt"))
	whiteout(t, filepath.Join(up, "deldir"))
	write(t, filepath.Join(up, "mode.sh"), "#!/bin/sh\n")
	os.Chmod(filepath.Join(up, "mode.sh"), 0o755)
	os.Mkdir(filepath.Join(up, "dirmode"), 0o700)
	os.Symlink("del.txt", filepath.Join(up, "link"))
	write(t, filepath.Join(up, "f2d/inner"), "in\n")
	write(t, filepath.Join(up, "d2f"), "now a file\n")
	if err := unix.Setxattr(filepath.Join(up, "f2d"), "user.overlay.opaque", []byte("y"), 0); err != nil {
		t.Skipf("no user extended attributes here: %v", err)
	}
	write(t, filepath.Join(up, "new/deep/file.txt"), "fresh\n")
	write(t, filepath.Join(up, "both.txt"), "sandbox\n")
	tick(t, r)
	write(t, filepath.Join(ws, "both.txt"), "host-new\n")
	return r, ws
}

// A completed apply rolled back leaves the workspace byte-identical
// (contents, modes, owners, link targets, times) to before the apply; the
// conflict file keeps the host's version throughout; a second rollback
// changes nothing.
func TestRollbackCompleted(t *testing.T) {
	needRoot(t)
	r, ws := rollbackTree(t, "00000000000000b1")
	before := snapshot(t, ws)
	rep, err := r.Apply()
	if err != nil || len(rep.Errors) > 0 {
		t.Fatalf("apply: %v %v", err, rep.Errors)
	}
	if err := r.Finish(rep); err != nil {
		t.Fatal(err)
	}
	after := snapshot(t, ws)
	if after["mod.txt"] == before["mod.txt"] || after["link"] == before["link"] || after["deldir"] != "" || after["new/deep/file.txt"] == "" {
		t.Fatalf("the apply did not change the tree:\n%v", after)
	}
	if read(t, filepath.Join(ws, "both.txt")) != "host-new\n" {
		t.Fatal("the conflict file was overwritten by the apply")
	}
	rb, err := r.Rollback()
	if err != nil || len(rb.Errors) > 0 || len(rb.Conflicts) > 0 {
		t.Fatalf("rollback: %v %+v", err, rb)
	}
	want := before
	sameSnapshot(t, "after rollback", snapshot(t, ws), want)
	if got := read(t, filepath.Join(r.RolledBackDir(), "mod.txt")); got != "new\n" {
		t.Errorf("the sandbox's mod.txt is not kept: %q", got)
	}
	rb, err = r.Rollback()
	if err != nil || len(rb.Restored)+len(rb.Conflicts)+len(rb.Errors) != 0 {
		t.Errorf("a second rollback did something: %v %+v", err, rb)
	}
	sameSnapshot(t, "after a second rollback", snapshot(t, ws), want)
}

// An apply interrupted after N changes (every N) rolls back to the
// original tree; and the same interruption resumed (apply again) finishes
// the apply, and that rolls back too.
func TestRollbackInterrupted(t *testing.T) {
	needRoot(t)
	defer func() { stopAfter = 0 }()
	total := 0
	for n := 1; ; n++ {
		r, ws := rollbackTree(t, fmt.Sprintf("00000000000000%02x", 0xc0+n%64))
		before := snapshot(t, ws)
		applySteps.Store(0)
		stopAfter = n
		_, err := r.Apply()
		stopAfter = 0
		if !errors.Is(err, errStopped) {
			total = n - 1
			break
		}
		if n > 100 {
			t.Fatal("the apply never finishes")
		}
		if n%2 == 0 {
			// Resume, then roll back the whole.
			rep, err := r.Apply()
			if err != nil || len(rep.Errors) > 0 {
				t.Fatalf("resume after %d: %v %v", n, err, rep.Errors)
			}
			if read(t, filepath.Join(ws, "mod.txt")) != "new\n" {
				t.Fatalf("resume after %d: mod.txt not applied", n)
			}
		}
		rb, err := r.Rollback()
		if err != nil || len(rb.Errors) > 0 || len(rb.Conflicts) > 0 {
			t.Fatalf("rollback after %d: %v %+v", n, err, rb)
		}
		sameSnapshot(t, fmt.Sprintf("rolled back after %d changes", n), snapshot(t, ws), before)
		if read(t, filepath.Join(ws, "both.txt")) != "host-new\n" {
			t.Fatalf("after %d: the conflict file was overwritten", n)
		}
	}
	if total < 10 {
		t.Fatalf("only %d journaled changes: the tree is too small to test interruptions", total)
	}
}

// A file changed on the host after the apply is never overwritten by the
// rollback (a conflict, reported); everything else is put back.
func TestRollbackConflict(t *testing.T) {
	needRoot(t)
	r, ws := rollbackTree(t, "00000000000000d1")
	before := snapshot(t, ws)
	rep, err := r.Apply()
	if err != nil || len(rep.Errors) > 0 {
		t.Fatalf("apply: %v %v", err, rep.Errors)
	}
	write(t, filepath.Join(ws, "mod.txt"), "edited after the apply\n")
	write(t, filepath.Join(ws, "new/deep/mine.txt"), "mine\n")
	rb, err := r.Rollback()
	if err != nil || len(rb.Errors) > 0 {
		t.Fatalf("rollback: %v %+v", err, rb)
	}
	if len(rb.Conflicts) != 3 { // mod.txt, new/deep/ and new/ (not empty)
		t.Errorf("conflicts %q, want mod.txt, new/deep/, new/", rb.Conflicts)
	}
	if got := read(t, filepath.Join(ws, "mod.txt")); got != "edited after the apply\n" {
		t.Errorf("mod.txt overwritten by the rollback: %q", got)
	}
	if got := read(t, filepath.Join(ws, "new/deep/mine.txt")); got != "mine\n" {
		t.Errorf("mine.txt: %q", got)
	}
	got := snapshot(t, ws)
	for _, k := range []string{"mod.txt", "new", "new/deep", "new/deep/mine.txt"} {
		delete(got, k)
	}
	delete(before, "mod.txt")
	sameSnapshot(t, "the rest after rollback", got, before)
}

// A record cut short (airlock killed while writing it) does not swallow
// the next one.
func TestJournalTornRecord(t *testing.T) {
	needRoot(t)
	r, ws := rollbackTree(t, "00000000000000e1")
	before := snapshot(t, ws)
	applySteps.Store(0)
	stopAfter = 2
	_, err := r.Apply()
	stopAfter = 0
	if !errors.Is(err, errStopped) {
		t.Fatalf("not stopped: %v", err)
	}
	f, err := os.OpenFile(filepath.Join(r.Journal(), "log"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(`{"op":"pre","seq":99,"pa`)
	f.Close()
	rep, err := r.Apply()
	if err != nil || len(rep.Errors) > 0 {
		t.Fatalf("resume: %v %v", err, rep)
	}
	rb, err := r.Rollback()
	if err != nil || len(rb.Errors)+len(rb.Conflicts) > 0 {
		t.Fatalf("rollback: %v %+v", err, rb)
	}
	sameSnapshot(t, "after rollback", snapshot(t, ws), before)
}
