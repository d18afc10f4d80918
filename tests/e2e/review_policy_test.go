//go:build linux

package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writePolicy writes a policy file and returns its path.
func writePolicy(t *testing.T, doc string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(p, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// sameTree fails unless the files of reviewTree are as before.
func sameTree(t *testing.T, ws string, before map[string]string, what string) {
	t.Helper()
	entries, _ := os.ReadDir(ws)
	if len(entries) != len(before) {
		t.Errorf("%s: workspace has %d entries, want %d", what, len(entries), len(before))
	}
	for p, h := range before {
		if got := hashFile(t, filepath.Join(ws, p)); got != h {
			t.Errorf("%s: %s changed", what, p)
		}
		if fi, err := os.Stat(filepath.Join(ws, p)); err != nil || fi.Mode().Perm() != 0o644 {
			t.Errorf("%s: %s: %v %v", what, p, fi, err)
		}
	}
}

// A policy with workspace: {mode: review} behaves as --review (the changes
// shown, nothing applied, the run left pending or discarded); the flags
// --workspace-mode and --review override the policy; bad values are
// refused naming the file and the line, and the command does not run.
func TestReviewPolicyMode(t *testing.T) {
	need(t)
	o := opts{}
	changesEnv(t, &o)

	review := writePolicy(t, "workspace:\n  mode: review\n")
	ws, before := reviewTree(t)
	r := sh(t, o, []string{"--policy", review, "--workspace", ws}, reviewScript)
	mustOK(t, r, "policy review")
	m := pendingRE.FindStringSubmatch(r.stderr)
	if m == nil || !strings.Contains(r.stderr, "modified  edit.txt") || !strings.Contains(r.stderr, "+TWO") {
		t.Fatalf("policy mode review: no change list or pending commands\n%s", r)
	}
	sameTree(t, ws, before, "policy review, pending")
	mustOK(t, airlock(t, o, "review", "discard", m[1]), "discard")
	sameTree(t, ws, before, "policy review, discarded")

	// --discard goes with a review from the policy.
	r = sh(t, o, []string{"--policy", review, "--discard", "--workspace", ws}, reviewScript)
	mustOK(t, r, "policy review --discard")
	if !strings.Contains(r.stderr, "discarded") {
		t.Errorf("no discard reported\n%s", r)
	}
	sameTree(t, ws, before, "policy review --discard")

	// The path in the policy too.
	both := writePolicy(t, "workspace:\n  path: "+ws+"\n  mode: review\n")
	r = sh(t, o, []string{"--policy", both, "--discard"}, reviewScript)
	mustOK(t, r, "policy path+review --discard")
	if !strings.Contains(r.stderr, "modified  edit.txt") {
		t.Errorf("no change list\n%s", r)
	}
	sameTree(t, ws, before, "policy path+review --discard")

	// --workspace-mode apply overrides the policy: applied at once.
	r = sh(t, o, []string{"--policy", review, "--workspace-mode", "apply", "--workspace", ws}, "echo new > new.txt")
	mustOK(t, r, "policy review, --workspace-mode apply")
	if b, _ := os.ReadFile(filepath.Join(ws, "new.txt")); string(b) != "new\n" || strings.Contains(r.stderr, "airlock review apply") {
		t.Errorf("--workspace-mode apply over a review policy: new.txt %q\n%s", b, r)
	}
	os.Remove(filepath.Join(ws, "new.txt"))

	// --review overrides a policy's apply or live.
	for _, mode := range []string{"apply", "live"} {
		pf := writePolicy(t, "workspace: {mode: "+mode+"}\n")
		r = sh(t, o, []string{"--policy", pf, "--review", "--discard", "--workspace", ws}, reviewScript)
		mustOK(t, r, "--review over mode "+mode)
		if !strings.Contains(r.stderr, "modified  edit.txt") || strings.Contains(r.stderr, "WARNING") {
			t.Errorf("--review over mode %s:\n%s", mode, r)
		}
		sameTree(t, ws, before, "--review over mode "+mode)
	}

	// mode live: the directory itself (the warning says so).
	live := writePolicy(t, "workspace: {mode: live}\n")
	r = sh(t, o, []string{"--policy", live, "--workspace", ws}, "echo live > live.txt")
	mustOK(t, r, "mode live")
	if !strings.Contains(r.stderr, "workspace mode live") {
		t.Errorf("mode live: no warning\n%s", r)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "live.txt")); string(b) != "live\n" {
		t.Errorf("mode live: live.txt %q", b)
	}
	os.Remove(filepath.Join(ws, "live.txt"))

	// Refusals: exit 125, one line naming the file and line, nothing run.
	for _, c := range []struct {
		doc   string
		flags []string
		want  string
	}{
		{"resources: {pids: 64}\nworkspace:\n  mode: sideways\n", nil, ":3: workspace.mode: unknown workspace mode \"sideways\""},
		{"workspace:\n  mode: ''\n", nil, ":2: workspace.mode: empty workspace mode"},
		{"workspace:\n  mood: review\n", nil, ":2: workspace.mood: unknown key"},
		{"workspace: {mode: apply}\n", []string{"--discard"}, "--apply and --discard go with --review"},
		{"workspace: {mode: review}\n", []string{"--workspace-mode", "live", "--apply"}, "--apply and --discard go with --review"},
	} {
		pf := writePolicy(t, c.doc)
		flags := append([]string{"--policy", pf, "--workspace", ws}, c.flags...)
		r := sh(t, o, flags, "touch ran")
		if r.code != 125 || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 || !strings.Contains(r.stderr, c.want) {
			t.Errorf("%q %v: want exit 125 and one line with %q\n%s", c.doc, c.flags, c.want, r)
		}
		if c.flags == nil && !strings.Contains(r.stderr, pf+":") {
			t.Errorf("%q: the error does not name %s\n%s", c.doc, pf, r)
		}
		if _, err := os.Stat(filepath.Join(ws, "ran")); err == nil {
			t.Fatalf("%q: the command ran", c.doc)
		}
	}
	sameTree(t, ws, before, "after the refusals")
}
