//go:build linux

package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// treeHashes maps each entry of dir (recursively) to its type, mode and
// content hash or link target.
func treeHashes(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		v := fi.Mode().String()
		switch {
		case fi.Mode()&os.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			v += " -> " + target
		case fi.Mode().IsRegular():
			v += " " + hashFile(t, p)
		}
		out[rel] = v
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func sameHashes(t *testing.T, what string, got, want map[string]string) {
	t.Helper()
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %s is %q, want %q", what, k, got[k], v)
		}
	}
	for k, v := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("%s: %s (%s) is new", what, k, v)
		}
	}
}

func pendingID(t *testing.T, r result) string {
	t.Helper()
	m := pendingRE.FindStringSubmatch(r.stderr)
	if m == nil {
		t.Fatalf("no pending run in\n%s", r)
	}
	return m[1]
}

// `airlock review diff|apply|discard DIR` take the workspace instead of a
// run id. Bad input next to it: applying twice, a directory with no run,
// two pending runs (listed, none chosen), a workspace that is gone (a
// clear error, nothing applied, the run kept).
func TestReviewDir(t *testing.T) {
	need(t)
	o := opts{}
	changesEnv(t, &o)

	ws, before := reviewTree(t)
	id := pendingID(t, sh(t, o, []string{"--review", "--workspace", ws}, reviewScript))
	r := airlock(t, o, "review", "diff", ws)
	mustOK(t, r, "review diff DIR")
	if !strings.Contains(r.stdout, "+TWO") || !strings.Contains(r.stdout, id) {
		t.Errorf("review diff DIR:\n%s", r)
	}
	sameTree(t, ws, before, "after review diff DIR")
	mustOK(t, airlock(t, o, "review", "apply", ws+"/"), "review apply DIR")
	if b, _ := os.ReadFile(filepath.Join(ws, "edit.txt")); string(b) != "one\nTWO\nthree\n" {
		t.Errorf("edit.txt after review apply DIR = %q", b)
	}
	// Twice: refused, nothing changes.
	applied := treeHashes(t, ws)
	for _, args := range [][]string{{"apply", ws}, {"apply", id}, {"diff", ws}, {"discard", ws}} {
		r = airlock(t, o, append([]string{"review"}, args...)...)
		if r.code == 0 || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
			t.Errorf("review %v after the apply: want one error line\n%s", args, r)
		}
	}
	sameHashes(t, "after applying twice", treeHashes(t, ws), applied)

	// A directory no run used; a name that is neither.
	empty := t.TempDir()
	if r := airlock(t, o, "review", "apply", empty); r.code == 0 || !strings.Contains(r.stderr, "no pending run for workspace") {
		t.Errorf("review apply of a directory with no run:\n%s", r)
	}
	if r := airlock(t, o, "review", "apply", "nothex"); r.code == 0 || !strings.Contains(r.stderr, "neither a run id") {
		t.Errorf("review apply nothex:\n%s", r)
	}

	// Two pending runs: listed, nothing applied; by id it works.
	ws2 := t.TempDir()
	id1 := pendingID(t, sh(t, o, []string{"--review", "--workspace", ws2}, "echo a > a"))
	id2 := pendingID(t, sh(t, o, []string{"--review", "--workspace", ws2}, "echo b > b"))
	r = airlock(t, o, "review", "apply", ws2)
	if r.code == 0 || !strings.Contains(r.stderr, id1) || !strings.Contains(r.stderr, id2) || !strings.Contains(r.stderr, "2 pending runs") {
		t.Errorf("two pending runs: want both listed and a refusal\n%s", r)
	}
	if entries, _ := os.ReadDir(ws2); len(entries) != 0 {
		t.Errorf("two pending runs: %d entries applied", len(entries))
	}
	mustOK(t, airlock(t, o, "review", "discard", id1), "discard id1")
	mustOK(t, airlock(t, o, "review", "apply", ws2), "apply the one left")
	if _, err := os.Stat(filepath.Join(ws2, "b")); err != nil {
		t.Errorf("b not applied: %v", err)
	}
	if _, err := os.Stat(filepath.Join(ws2, "a")); err == nil {
		t.Error("a (discarded) applied")
	}

	// A workspace that is gone: a clear error, nothing applied anywhere,
	// the run kept and still pending.
	ws3, _ := reviewTree(t)
	id3 := pendingID(t, sh(t, o, []string{"--review", "--workspace", ws3}, reviewScript))
	moved := ws3 + "-moved"
	if err := os.Rename(ws3, moved); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(moved) })
	movedBefore := treeHashes(t, moved)
	for _, arg := range []string{ws3, id3} {
		for _, verb := range []string{"apply", "diff"} {
			r = airlock(t, o, "review", verb, arg)
			if r.code == 0 || !strings.Contains(r.stderr, "is gone") || !strings.Contains(r.stderr, "the run is kept") {
				t.Errorf("review %s %s of a gone workspace:\n%s", verb, arg, r)
			}
		}
	}
	if _, err := os.Stat(ws3); err == nil {
		t.Error("the gone workspace was made again")
	}
	sameHashes(t, "the moved workspace", treeHashes(t, moved), movedBefore)
	r = airlock(t, o, "review", "--json")
	var runs []struct {
		ID      string
		Pending bool
	}
	json.Unmarshal([]byte(r.stdout), &runs)
	kept := false
	for _, l := range runs {
		kept = kept || (l.ID == id3 && l.Pending)
	}
	if !kept {
		t.Errorf("run %s not kept pending:\n%s", id3, r)
	}
	mustOK(t, airlock(t, o, "review", "discard", ws3), "discard the gone workspace's run by DIR")
}
