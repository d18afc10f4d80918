//go:build linux

package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// reviewTree makes a workspace with files the review scripts change.
func reviewTree(t *testing.T) (string, map[string]string) {
	t.Helper()
	ws := t.TempDir()
	files := map[string]string{"keep.txt": "same\n", "edit.txt": "one\ntwo\nthree\n", "gone.txt": "bye\n", "mode.sh": "#!/bin/sh\n", ".bashrc": "# rc\n"}
	for p, c := range files {
		if err := os.WriteFile(filepath.Join(ws, p), []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	before := map[string]string{}
	for p := range files {
		before[p] = hashFile(t, filepath.Join(ws, p))
	}
	return ws, before
}

const reviewScript = `printf 'one\nTWO\nthree\n' > edit.txt; rm gone.txt; chmod 755 mode.sh; echo new > new.txt; echo 'curl evil' >> .bashrc 2>/dev/null; echo 'x' > .mcp.json; echo ok`

// --discard leaves the workspace byte-identical (deleted, rewritten and
// chmodded files included); the control --apply makes exactly those
// changes, never the protected ones. Both show the change list and diff.
func TestReviewDiscardApply(t *testing.T) {
	need(t)
	o := opts{}
	changesEnv(t, &o)
	ws, before := reviewTree(t)
	r := sh(t, o, []string{"--review", "--discard", "--workspace", ws}, reviewScript)
	mustOK(t, r, "review --discard")
	for _, want := range []string{"modified  edit.txt", "deleted   gone.txt", "mode      mode.sh 0644 -> 0755", "added     new.txt", "kept      .mcp.json", "-two", "+TWO", "discarded"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("review output lacks %q\n%s", want, r.stderr)
		}
	}
	entries, _ := os.ReadDir(ws)
	if len(entries) != len(before) {
		t.Errorf("workspace has %d entries after --discard, want %d", len(entries), len(before))
	}
	for p, h := range before {
		if got := hashFile(t, filepath.Join(ws, p)); got != h {
			t.Errorf("%s changed after --discard", p)
		}
		if fi, _ := os.Stat(filepath.Join(ws, p)); fi.Mode().Perm() != 0o644 {
			t.Errorf("%s mode %v after --discard", p, fi.Mode())
		}
	}
	if r := airlock(t, o, "review", "--json"); !strings.Contains(r.stdout, "[]") {
		t.Errorf("a discarded run is still listed\n%s", r)
	}

	r = sh(t, o, []string{"--review", "--apply", "--workspace", ws}, reviewScript)
	mustOK(t, r, "review --apply")
	if b, _ := os.ReadFile(filepath.Join(ws, "edit.txt")); string(b) != "one\nTWO\nthree\n" {
		t.Errorf("edit.txt = %q", b)
	}
	if _, err := os.Stat(filepath.Join(ws, "gone.txt")); err == nil {
		t.Error("gone.txt still there after --apply")
	}
	if fi, _ := os.Stat(filepath.Join(ws, "mode.sh")); fi.Mode().Perm() != 0o755 {
		t.Errorf("mode.sh mode %v after --apply", fi.Mode())
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "new.txt")); string(b) != "new\n" {
		t.Errorf("new.txt = %q", b)
	}
	if got := hashFile(t, filepath.Join(ws, ".bashrc")); got != before[".bashrc"] {
		t.Error(".bashrc changed by --apply")
	}
	if _, err := os.Stat(filepath.Join(ws, ".mcp.json")); err == nil {
		t.Error(".mcp.json applied")
	}
	if got := hashFile(t, filepath.Join(ws, "keep.txt")); got != before["keep.txt"] {
		t.Error("keep.txt changed")
	}
}

var pendingRE = regexp.MustCompile(`airlock review apply ([0-9a-f]{16})`)

// Without a terminal and without --apply/--discard the run stays pending:
// `review diff` shows it as text and JSON, `review apply` applies it.
func TestReviewPending(t *testing.T) {
	need(t)
	o := opts{}
	changesEnv(t, &o)
	ws, before := reviewTree(t)
	r := sh(t, o, []string{"--review", "--workspace", ws}, reviewScript)
	mustOK(t, r, "review")
	m := pendingRE.FindStringSubmatch(r.stderr)
	if m == nil || !strings.Contains(r.stderr, "airlock review diff "+m[1]) {
		t.Fatalf("no pending commands printed\n%s", r)
	}
	id := m[1]
	if got := hashFile(t, filepath.Join(ws, "edit.txt")); got != before["edit.txt"] {
		t.Error("edit.txt changed while the run is pending")
	}
	r = airlock(t, o, "review", "diff", id)
	mustOK(t, r, "review diff")
	if !strings.Contains(r.stdout, "+TWO") || !strings.Contains(r.stdout, "deleted   gone.txt") {
		t.Errorf("review diff:\n%s", r)
	}
	r = airlock(t, o, "review", "diff", id, "--json")
	mustOK(t, r, "review diff --json")
	var changes []struct {
		Path, Kind, Diff string
	}
	if err := json.Unmarshal([]byte(r.stdout), &changes); err != nil {
		t.Fatalf("review diff --json: %v\n%s", err, r)
	}
	kinds := map[string]string{}
	for _, c := range changes {
		kinds[c.Path] = c.Kind
	}
	for p, k := range map[string]string{"edit.txt": "modified", "gone.txt": "deleted", "mode.sh": "mode", "new.txt": "added", ".mcp.json": "kept"} {
		if kinds[p] != k {
			t.Errorf("%s: kind %q, want %q (all: %v)", p, kinds[p], k, kinds)
		}
	}
	mustOK(t, airlock(t, o, "review", "apply", id), "review apply")
	if b, _ := os.ReadFile(filepath.Join(ws, "new.txt")); string(b) != "new\n" {
		t.Errorf("new.txt after review apply = %q", b)
	}
	if r := airlock(t, o, "review", "apply", id); r.code == 0 {
		t.Errorf("applying twice succeeded\n%s", r)
	}
	if r := airlock(t, o, "review", "diff", "0123456789abcdef"); r.code == 0 {
		t.Errorf("diff of an unknown run succeeded\n%s", r)
	}
}

// Bad flag combinations are one-line errors (exit 125) and run nothing;
// the control is a good combination.
func TestReviewBadFlags(t *testing.T) {
	need(t)
	o := opts{}
	changesEnv(t, &o)
	ws := t.TempDir()
	for _, flags := range [][]string{
		{"--review"},
		{"--review", "--workspace", ws, "--workspace-mode", "live"},
		{"--apply", "--workspace", ws},
		{"--discard", "--workspace", ws},
		{"--review", "--apply", "--discard", "--workspace", ws},
		{"--workspace", ws, "--workspace-mode", "sideways"},
	} {
		r := sh(t, o, flags, "touch ran")
		if r.code != 125 || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
			t.Errorf("%v: want exit 125 and one line\n%s", flags, r)
		}
		if _, err := os.Stat(filepath.Join(ws, "ran")); err == nil {
			t.Fatalf("%v: the command ran", flags)
		}
	}
	mustOK(t, sh(t, o, []string{"--review", "--apply", "--workspace", ws}, "touch ran"), "control")
	if _, err := os.Stat(filepath.Join(ws, "ran")); err != nil {
		t.Errorf("control: %v", err)
	}
}

// On a terminal airlock asks: "n" discards, "y" applies, an empty answer
// leaves the run pending.
func TestReviewTerminal(t *testing.T) {
	need(t)
	for _, c := range []struct{ answer, want string }{{"n", "old\n"}, {"y", "new\n"}, {"", "old\n"}} {
		o := opts{}
		changesEnv(t, &o)
		ws := t.TempDir()
		os.WriteFile(filepath.Join(ws, "f"), []byte("old\n"), 0o644)
		master, slave := openPTY(t)
		ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
		cmd := command(ctx, o, "run", "--review", "--workspace", ws, "--", "/bin/sh", "-c", "echo new > f")
		cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		slave.Close()
		out := make(chan string, 16)
		go func() {
			buf := make([]byte, 4096)
			for {
				n, err := master.Read(buf)
				if n > 0 {
					out <- string(buf[:n])
				}
				if err != nil {
					close(out)
					return
				}
			}
		}()
		var seen strings.Builder
		deadline := time.After(runTimeout)
	wait:
		for !strings.Contains(seen.String(), "[y/N]") {
			select {
			case s, ok := <-out:
				if !ok {
					break wait
				}
				seen.WriteString(s)
			case <-deadline:
				t.Fatalf("no prompt within %s:\n%s", runTimeout, seen.String())
			}
		}
		master.Write([]byte(c.answer + "\n"))
		err := cmd.Wait()
		cancel()
		for s := range out {
			seen.WriteString(s)
		}
		master.Close()
		if err != nil {
			t.Errorf("answer %q: %v\n%s", c.answer, err, seen.String())
		}
		if b, _ := os.ReadFile(filepath.Join(ws, "f")); string(b) != c.want {
			t.Errorf("answer %q: f = %q, want %q\n%s", c.answer, b, c.want, seen.String())
		}
		if c.answer == "" && !strings.Contains(seen.String(), "airlock review apply") {
			t.Errorf("an empty answer does not leave the run pending:\n%s", seen.String())
		}
	}
}
