//go:build linux

package serve

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestCLI drives the daemon with the airlock CLI the way a user would:
// create, exec (exit status propagates), cp both ways with a directory, ls,
// logs, pause/resume, rm.
func TestCLI(t *testing.T) {
	d := startDaemon(t, "")
	run := func(stdin string, args ...string) (string, string, int) {
		t.Helper()
		cmd := exec.Command(airlockBin, args...)
		cmd.Env = append(os.Environ(), "AIRLOCK_HOST=unix://"+d.sock)
		cmd.Stdin = strings.NewReader(stdin)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return out.String(), errb.String(), code
	}
	out, errs, code := run("", "create", "--label", "cli=yes", "--timeout", "10m")
	id := strings.TrimSpace(out)
	if code != 0 || !strings.HasPrefix(id, "sb-") {
		t.Fatalf("create: %q %q %d", out, errs, code)
	}
	if out, _, code := run("", "exec", id, "--", "sh", "-c", "echo hi; exit 5"); out != "hi\n" || code != 5 {
		t.Fatalf("exec: %q %d", out, code)
	}
	if out, _, code := run("from stdin", "exec", "-i", id, "--", "cat"); out != "from stdin" || code != 0 {
		t.Fatalf("exec -i: %q %d", out, code)
	}
	// --disk sizes the workspace (a 200 MiB volume against the default 1
	// GiB); a size that is not one is refused before anything is made.
	out, errs, code = run("", "create", "--disk", "200M", "--label", "cli=disk")
	if code != 0 {
		t.Fatalf("create --disk 200M: %q %d", errs, code)
	}
	if out, _, _ := run("", "exec", strings.TrimSpace(out), "--", "sh", "-c", "df -Pk /workspace | awk 'NR==2{print $2}'"); !inRange(out, 150<<10, 200<<10) {
		t.Errorf("create --disk 200M: workspace of %q KiB", out)
	}
	if _, errs, code := run("", "create", "--disk", "lots"); code == 0 || !strings.Contains(errs, `"lots"`) {
		t.Errorf("create --disk lots: exit %d, %q", code, errs)
	}
	// cp a directory in, change it inside, cp it back out.
	src := t.TempDir()
	os.MkdirAll(filepath.Join(src, "proj", "sub"), 0o755)
	os.WriteFile(filepath.Join(src, "proj", "sub", "f.txt"), []byte("v1"), 0o644)
	if _, errs, code := run("", "cp", filepath.Join(src, "proj"), id+":/workspace/"); code != 0 {
		t.Fatalf("cp in: %q", errs)
	}
	if out, _, _ := run("", "exec", id, "--", "sh", "-c", "cat /workspace/proj/sub/f.txt && echo v2 > /workspace/proj/sub/g.txt"); out != "v1" {
		t.Fatalf("after cp in: %q", out)
	}
	dst := t.TempDir()
	if _, errs, code := run("", "cp", id+":/workspace/proj", filepath.Join(dst, "back")); code != 0 {
		t.Fatalf("cp out: %q", errs)
	}
	if b, err := os.ReadFile(filepath.Join(dst, "back", "sub", "g.txt")); err != nil || string(b) != "v2\n" {
		t.Fatalf("cp out: %q %v", b, err)
	}
	if out, _, code := run("", "ls", "--label", "cli=yes"); code != 0 || !strings.Contains(out, id) {
		t.Fatalf("ls: %q", out)
	}
	if out, _, code := run("", "ls", "--label", "cli=no"); code != 0 || strings.Contains(out, id) {
		t.Fatalf("ls filtered: %q", out)
	}
	if _, _, code := run("", "pause", id); code != 0 {
		t.Fatal("pause")
	}
	if _, errs, code := run("", "exec", id, "--", "true"); code == 0 || !strings.Contains(errs, "paused") {
		t.Fatalf("exec while paused: %q %d", errs, code)
	}
	if _, _, code := run("", "resume", id); code != 0 {
		t.Fatal("resume")
	}
	procs, err := d.c.ListProcesses(ctxT(t), id)
	if err != nil || len(procs) == 0 {
		t.Fatal(err)
	}
	if out, _, code := run("", "logs", id, procs[0].ID); out != "hi\n" || code != 0 {
		t.Fatalf("logs: %q %d", out, code)
	}
	if _, errs, code := run("", "rm", id, "sb-0000000000000000"); code == 0 || !strings.Contains(errs, "sb-0000000000000000") {
		t.Fatalf("rm with a missing id: %q %d", errs, code)
	}
	if _, _, code := run("", "exec", id, "--", "true"); code == 0 {
		t.Fatal("exec after rm succeeded")
	}
	// No daemon: one line, non-zero.
	cmd := exec.Command(airlockBin, "ls")
	cmd.Env = append(os.Environ(), "AIRLOCK_HOST=unix://"+filepath.Join(t.TempDir(), "none.sock"))
	b, err := cmd.CombinedOutput()
	if err == nil || strings.Count(strings.TrimSpace(string(b)), "\n") != 0 || !strings.Contains(string(b), "airlock serve") {
		t.Fatalf("no daemon: %q %v", b, err)
	}
}

// inRange reports whether s is a whole number in [lo, hi].
func inRange(s string, lo, hi int64) bool {
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	return err == nil && n >= lo && n <= hi
}
