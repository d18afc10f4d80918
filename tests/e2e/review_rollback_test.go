//go:build linux

package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// rollbackWS makes a workspace for the rollback script: files to rewrite,
// delete and chmod, a link to re-point, a tree to delete.
func rollbackWS(t *testing.T) string {
	t.Helper()
	ws := t.TempDir()
	for p, c := range map[string]string{"edit.txt": "one\ntwo\n", "gone.txt": "bye\n", "mode.sh": "#!/bin/sh\n", "tree/a/b.txt": "b\n", "tree/c.txt": "c\n", "other.txt": "other\n"} {
		os.MkdirAll(filepath.Join(ws, filepath.Dir(p)), 0o755)
		if err := os.WriteFile(filepath.Join(ws, p), []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("edit.txt", filepath.Join(ws, "link")); err != nil {
		t.Fatal(err)
	}
	return ws
}

const rollbackScript = `printf 'one\nTWO\n' > edit.txt; rm gone.txt; chmod 700 mode.sh; ln -sfn other.txt link; echo new > new.txt; mkdir -p d/e; echo f > d/e/f; rm -r tree; echo ok`

// `airlock review rollback` puts the workspace back byte-identical (hashes,
// modes, link targets) after a completed apply and after an apply
// SIGKILLed half-way; an apply killed half-way can also be resumed. A
// file changed on the host after the apply is never overwritten.
func TestReviewRollback(t *testing.T) {
	need(t)
	o := opts{}
	changesEnv(t, &o)
	killAt := func(n string) opts {
		k := o
		k.env = append(append([]string{}, o.env...), "AIRLOCK_TEST_APPLY_KILL_AFTER="+n)
		return k
	}

	// Completed apply, rolled back by directory.
	ws := rollbackWS(t)
	before := treeHashes(t, ws)
	mustOK(t, sh(t, o, []string{"--workspace", ws}, rollbackScript), "run")
	applied := treeHashes(t, ws)
	if applied["new.txt"] == "" || applied["tree"] != "" || applied["link"] == before["link"] || applied["mode.sh"] == before["mode.sh"] {
		t.Fatalf("the run's changes did not land: %v", applied)
	}
	r := airlock(t, o, "review")
	if !strings.Contains(r.stdout, "applied") {
		t.Errorf("the applied run is not listed:\n%s", r)
	}
	r = airlock(t, o, "review", "rollback", ws)
	mustOK(t, r, "rollback")
	sameHashes(t, "after rolling back a completed apply", treeHashes(t, ws), before)
	if r := airlock(t, o, "review", "rollback", ws); r.code == 0 {
		t.Errorf("a second rollback succeeded\n%s", r)
	}
	sameHashes(t, "after a second rollback", treeHashes(t, ws), before)

	// Killed after 3 changes: part applied; rolled back by id.
	id := pendingID(t, sh(t, o, []string{"--review", "--workspace", ws}, rollbackScript))
	r = airlock(t, killAt("3"), "review", "apply", id)
	if r.code != 128+9 {
		t.Fatalf("the apply was not killed by the hook\n%s", r)
	}
	mid := treeHashes(t, ws)
	changed := 0
	for k, v := range before {
		if mid[k] != v {
			changed++
		}
	}
	for k := range mid {
		if _, ok := before[k]; !ok {
			changed++
		}
	}
	if changed == 0 || changed >= 10 {
		t.Fatalf("after a kill at 3 changes, %d entries differ", changed)
	}
	if r := airlock(t, o, "review"); !strings.Contains(r.stdout, "apply interrupted") {
		t.Errorf("the interrupted run is not shown as such:\n%s", r)
	}
	mustOK(t, airlock(t, o, "review", "rollback", id), "rollback of an interrupted apply")
	sameHashes(t, "after rolling back an interrupted apply", treeHashes(t, ws), before)
	if r := airlock(t, o, "review", "apply", id); r.code == 0 {
		t.Errorf("a rolled-back run applied again\n%s", r)
	}
	sameHashes(t, "after refusing to apply a rolled-back run", treeHashes(t, ws), before)
	mustOK(t, airlock(t, o, "review", "discard", id), "discard the rolled-back run")

	// Killed after 5, resumed: the same tree as a completed apply.
	id = pendingID(t, sh(t, o, []string{"--review", "--workspace", ws}, rollbackScript))
	if r := airlock(t, killAt("5"), "review", "apply", id); r.code != 128+9 {
		t.Fatalf("not killed\n%s", r)
	}
	mustOK(t, airlock(t, o, "review", "apply", id), "resume")
	sameHashes(t, "after resuming", treeHashes(t, ws), applied)

	// Changed on the host after the apply: left as it is (exit 1).
	os.WriteFile(filepath.Join(ws, "edit.txt"), []byte("mine\n"), 0o644)
	r = airlock(t, o, "review", "rollback", ws)
	if r.code != 1 || !strings.Contains(r.stderr, "edit.txt (changed after the apply") {
		t.Errorf("rollback over a host edit:\n%s", r)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "edit.txt")); string(b) != "mine\n" {
		t.Errorf("edit.txt overwritten by the rollback: %q", b)
	}
	got := treeHashes(t, ws)
	delete(got, "edit.txt")
	want := map[string]string{}
	for k, v := range before {
		want[k] = v
	}
	delete(want, "edit.txt")
	sameHashes(t, "the rest after a rollback with a conflict", got, want)

	// Nothing to roll back: a directory with no applied run.
	if r := airlock(t, o, "review", "rollback", t.TempDir()); r.code == 0 || !strings.Contains(r.stderr, "no applied run") {
		t.Errorf("rollback of a directory with no run:\n%s", r)
	}
}

// Rootless (as nobody): an apply and its rollback, and an interrupted
// apply rolled back, give back the tree byte-identical.
func TestRootlessReviewRollback(t *testing.T) {
	o := nobody(t)
	changesEnv(t, &o)
	ws := nobodyDir(t)
	src := rollbackWS(t)
	if out, err := exec.Command("cp", "-a", src+"/.", ws).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
	if out, err := exec.Command("chown", "-hR", "65534:65534", ws).CombinedOutput(); err != nil {
		t.Fatalf("chown: %v %s", err, out)
	}
	before := treeHashes(t, ws)
	mustOK(t, sh(t, o, []string{"--workspace", ws}, rollbackScript), "run")
	if treeHashes(t, ws)["new.txt"] == "" {
		t.Fatal("the run's changes did not land")
	}
	mustOK(t, airlock(t, o, "review", "rollback", ws), "rollback")
	sameHashes(t, "rootless, after rollback", treeHashes(t, ws), before)

	k := o
	k.env = append(append([]string{}, o.env...), "AIRLOCK_TEST_APPLY_KILL_AFTER=4")
	id := pendingID(t, sh(t, o, []string{"--review", "--workspace", ws}, rollbackScript))
	if r := airlock(t, k, "review", "apply", id); r.code != 128+9 {
		t.Fatalf("not killed\n%s", r)
	}
	mustOK(t, airlock(t, o, "review", "rollback", id), "rollback of the interrupted apply")
	sameHashes(t, "rootless, after rolling back an interrupted apply", treeHashes(t, ws), before)
}
