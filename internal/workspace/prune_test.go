package workspace

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// applied makes a run of ws that changes file (or, with kept, also a
// protected path, which is kept aside), applies it and finishes it.
func applied(t *testing.T, id, ws, file string, kept bool) *Run {
	t.Helper()
	r := create(t, id, ws)
	write(t, filepath.Join(r.Upper(), file), id+"\n")
	if kept {
		write(t, filepath.Join(r.Upper(), ".bashrc"), "evil\n")
	}
	rep, err := r.Apply()
	if err != nil || len(rep.Errors) > 0 {
		t.Fatalf("apply %s: %v %v", id, err, rep.Errors)
	}
	if err := r.Finish(rep); err != nil {
		t.Fatal(err)
	}
	if !r.HasJournal() {
		t.Fatalf("run %s: no journal after an apply", id)
	}
	r.Close()
	return r
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

// An apply keeps one journal per workspace (its own), and none for
// workspaces that are gone; what was kept aside stays.
func TestPruneOlder(t *testing.T) {
	_, ws := newRun(t, "")
	defer func(v time.Duration) { goneEvery = v }(goneEvery)
	goneEvery = 0 // look for gone workspaces at every apply
	other := t.TempDir()
	gone := t.TempDir()
	replaced := t.TempDir()
	goneKept := t.TempDir()

	first := applied(t, "00000000000000c1", ws, "a", false)
	keep := applied(t, "00000000000000c2", other, "a", false)
	g := applied(t, "00000000000000c3", gone, "a", false)
	rp := applied(t, "00000000000000c4", replaced, "a", false)
	gk := applied(t, "00000000000000c5", goneKept, "a", true)
	if !exists(first.Dir) || !exists(g.Dir) || !exists(gk.Journal()) {
		t.Fatal("control: an applied run's directory went before another apply")
	}
	os.RemoveAll(gone)
	os.RemoveAll(goneKept)
	// Another directory at the same path, made while the first exists
	// (so that it cannot get the first one's inode number).
	if err := os.Mkdir(replaced+".new", 0o755); err != nil {
		t.Fatal(err)
	}
	os.RemoveAll(replaced)
	if err := os.Rename(replaced+".new", replaced); err != nil {
		t.Fatal(err)
	}

	second := applied(t, "00000000000000c6", ws, "b", false)
	if exists(first.Dir) {
		t.Error("the workspace's earlier apply kept its run (journal) after a later apply")
	}
	if !second.HasJournal() {
		t.Error("the latest apply lost its journal")
	}
	if !exists(keep.Journal()) {
		t.Error("another workspace's journal was pruned")
	}
	if exists(g.Dir) || exists(rp.Dir) {
		t.Errorf("runs of workspaces that are gone are kept: %v %v", exists(g.Dir), exists(rp.Dir))
	}
	if exists(gk.Journal()) || !exists(filepath.Join(gk.Kept(), ".bashrc")) {
		t.Errorf("a gone workspace's run with kept files: journal %v, kept file %v", exists(gk.Journal()), exists(filepath.Join(gk.Kept(), ".bashrc")))
	}

	// A run held by another airlock (a review, a rollback) is left alone.
	busy := applied(t, "00000000000000c7", other, "b", false)
	held, err := Open(busy.ID)
	if err != nil {
		t.Fatal(err)
	}
	os.RemoveAll(other)
	applied(t, "00000000000000c8", ws, "c", false)
	if !exists(busy.Journal()) {
		t.Error("a held run was pruned")
	}
	held.Close()
	applied(t, "00000000000000c9", ws, "d", false)
	if exists(busy.Dir) {
		t.Error("control: the run, no longer held, was not pruned")
	}

	// A run made before runs named their workspace (no link) is pruned
	// the same way, and named.
	old := applied(t, "00000000000000ca", ws, "e", false)
	os.Remove(filepath.Join(old.Dir, wsLink))
	third := t.TempDir()
	legacy := applied(t, "00000000000000cb", third, "a", false)
	os.Remove(filepath.Join(legacy.Dir, wsLink))
	applied(t, "00000000000000cc", ws, "f", false)
	if exists(old.Dir) {
		t.Error("a run without its link was not pruned")
	}
	if l, err := os.Readlink(filepath.Join(legacy.Dir, wsLink)); err != nil || l != legacy.wsID() || !exists(legacy.Journal()) {
		t.Errorf("another workspace's run without its link: link %q, %v; journal kept %v", l, err, exists(legacy.Journal()))
	}
}

// The runs of gone workspaces are looked for at most every goneEvery; the
// workspace's own older runs at every apply.
func TestPruneGoneEvery(t *testing.T) {
	_, ws := newRun(t, "")
	defer func(v time.Duration) { goneEvery = v }(goneEvery)
	goneEvery = time.Hour
	gone := t.TempDir()
	g := applied(t, "00000000000000e1", gone, "a", false) // looks, and stamps
	os.RemoveAll(gone)
	first := applied(t, "00000000000000e2", ws, "a", false)
	if !exists(g.Dir) {
		t.Error("looked for gone workspaces again within goneEvery")
	}
	second := applied(t, "00000000000000e3", ws, "b", false)
	if exists(first.Dir) {
		t.Error("the workspace's own older run was not pruned")
	}
	stamp := filepath.Join(filepath.Dir(g.Dir), goneStamp)
	past := time.Now().Add(-2 * time.Hour)
	if err := os.Chtimes(stamp, past, past); err != nil {
		t.Fatal(err)
	}
	if !exists(g.Dir) || !exists(second.Dir) {
		t.Fatal("control: runs went before the apply that should prune them")
	}
	applied(t, "00000000000000e5", ws, "c", false)
	if exists(g.Dir) {
		t.Error("did not look for gone workspaces goneEvery later")
	}
}

// PendingRuns lists a run whose airlock is gone before it applied, and no
// other.
func TestPendingRuns(t *testing.T) {
	_, ws := newRun(t, "")
	applied(t, "00000000000000d1", ws, "a", false)
	pending := create(t, "00000000000000d2", ws)
	write(t, filepath.Join(pending.Upper(), "x"), "x\n")
	running := create(t, "00000000000000d3", ws) // still held
	if got := PendingRuns(); len(got) != 0 {
		t.Fatalf("pending while held: %+v", got)
	}
	pending.Close()
	got := PendingRuns()
	if len(got) != 1 || got[0].ID != pending.ID || got[0].Workspace != ws {
		t.Fatalf("PendingRuns = %+v, want run %s", got, pending.ID)
	}
	running.Close()
	if got := PendingRuns(); len(got) != 2 {
		t.Errorf("with both airlocks gone: %d pending, want 2", len(got))
	}
}

// A run that changed nothing in the workspace leaves the previous apply
// undoable: the journal still describes the workspace exactly. The next
// run that applies something takes its place.
func TestEmptyRunKeepsJournal(t *testing.T) {
	_, ws := newRun(t, "")
	first := applied(t, "00000000000000d1", ws, "a", false)

	empty := create(t, "00000000000000d2", ws)
	rep, err := empty.Apply()
	if err != nil || !rep.Empty() {
		t.Fatalf("apply of an untouched layer: %v, empty %v", err, rep.Empty())
	}
	if err := empty.Finish(rep); err != nil {
		t.Fatal(err)
	}
	if exists(empty.Dir) {
		t.Error("a run with nothing applied kept its directory")
	}
	if !exists(first.Journal()) {
		t.Fatal("a run that changed nothing dropped the previous apply's journal")
	}

	// Control: an apply that changes something drops it.
	applied(t, "00000000000000d3", ws, "b", false)
	if exists(first.Dir) {
		t.Error("control: the earlier apply kept its run after a later apply changed the workspace")
	}
}
