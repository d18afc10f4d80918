//go:build linux

package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/internal/record"
)

// fifoGate is a FIFO in a host directory the sandbox sees read-only: the
// command blocks in `read x < fifoGate` until the test opens it.
type fifoGate struct {
	dir, path string
}

func newFifoGate(t *testing.T) *fifoGate {
	t.Helper()
	dir := sharedDir(t)
	g := &fifoGate{dir: dir, path: filepath.Join(dir, "fifoGate")}
	if err := unix.Mkfifo(g.path, 0o644); err != nil {
		t.Fatal(err)
	}
	return g
}

// open lets the command through (bounded: the command waits for it).
func (g *fifoGate) open(t *testing.T) {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		f, err := os.OpenFile(g.path, os.O_WRONLY, 0)
		if err == nil {
			_, err = f.WriteString("go\n")
			f.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("fifoGate: %v", err)
		}
	case <-time.After(runTimeout):
		t.Fatal("fifoGate: the command never read it")
	}
}

// sharedDir is a fresh directory the sandbox's ids can reach (t.TempDir
// and its parent are private).
func sharedDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

type listedRun struct {
	ID          string `json:"id"`
	Pending     bool   `json:"pending"`
	Checkpoints []struct {
		ID      string    `json:"id"`
		Name    string    `json:"name"`
		Time    time.Time `json:"time"`
		Changes int       `json:"changes"`
		Auto    bool      `json:"auto"`
	} `json:"checkpoints"`
}

func reviewRuns(t *testing.T, o opts) []listedRun {
	t.Helper()
	r := airlock(t, o, "review", "--json")
	mustOK(t, r, "review --json")
	var runs []listedRun
	if err := json.Unmarshal([]byte(r.stdout), &runs); err != nil {
		t.Fatalf("review --json: %v\n%s", err, r)
	}
	return runs
}

func diffKinds(t *testing.T, o opts, args ...string) map[string]string {
	t.Helper()
	r := airlock(t, o, append([]string{"review", "diff", "--json"}, args...)...)
	mustOK(t, r, "review diff --json "+strings.Join(args, " "))
	var changes []struct{ Path, Kind string }
	if err := json.Unmarshal([]byte(r.stdout), &changes); err != nil {
		t.Fatalf("review diff --json: %v\n%s", err, r)
	}
	m := map[string]string{}
	for _, c := range changes {
		m[c.Path] = c.Kind
	}
	return m
}

func sameMap(t *testing.T, what string, got, want map[string]string) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %v, want %v", what, got, want)
		return
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %v, want %v", what, got, want)
			return
		}
	}
}

var shaRE = regexp.MustCompile(`^sha=([0-9a-f]{64}) `)

// The script of the checkpoint tests: a.txt (random bytes, hashed inside)
// and a protected path before the fifoGate; after it b.txt, and a.txt goes.
func checkpointScript(g *fifoGate) string {
	return `head -c 300000 /dev/urandom > a.txt && echo "sha=$(sha256sum a.txt)" && echo evil > .mcp.json && echo written && read x < ` + g.path + ` && echo B > b.txt && rm a.txt && echo done`
}

// A --review run checkpointed from another airlock while its command
// waits: review lists the checkpoint, diff shows each state, applying the
// checkpoint makes the host hold exactly a.txt (byte-identical) and never
// the protected path written before it; rollback undoes that apply. Bad
// input next to it: a name that exists, a bad name, an unknown run, a
// finished run, a sandbox without the overlay workspace. A second run of
// the same script, applied in its last state, brings b.txt only.
func TestCheckpointReview(t *testing.T) {
	needRoot(t)
	o := opts{}
	changesEnv(t, &o)
	ws := t.TempDir()
	if err := os.WriteFile(filepath.Join(ws, "keep.txt"), []byte("host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	before := treeHashes(t, ws)
	g := newFifoGate(t)
	b := start(t, o, "run", "-v", "--review", "--workspace", ws, "--ro", g.dir, "--", "/bin/sh", "-c", checkpointScript(g))
	id := b.stderr.waitFor(t, sandboxIDRE, runTimeout)[1]
	sum := b.stdout.waitFor(t, shaRE, runTimeout)[1]
	b.stdout.waitFor(t, writtenRE, runTimeout)

	r := airlock(t, o, "checkpoint", id, "--name", "first", "--json")
	mustOK(t, r, "checkpoint --name first")
	var cp struct {
		ID      string `json:"id"`
		Name    string `json:"name"`
		Changes int    `json:"changes"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &cp); err != nil || cp.ID != "1" || cp.Name != "first" || cp.Changes != 2 {
		t.Fatalf("checkpoint: %+v %v\n%s", cp, err, r)
	}
	for _, bad := range []struct {
		args []string
		want string
	}{
		{[]string{id, "--name", "first"}, "exists"},
		{[]string{id, "--name", "1x"}, "checkpoint name"},
		{[]string{"0123456789abcdef"}, "no run 0123456789abcdef"},
		{[]string{filepath.Join(ws, "nope")}, "no run for workspace"},
	} {
		r := airlock(t, o, append([]string{"checkpoint"}, bad.args...)...)
		if r.code == 0 || !strings.Contains(r.stderr, bad.want) || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
			t.Errorf("checkpoint %v: want one line with %q and a failure\n%s", bad.args, bad.want, r)
		}
	}
	// A checkpoint can be looked at while the run goes on; the last
	// state cannot (it is still changing).
	sameMap(t, "diff of checkpoint first while running", diffKinds(t, o, ws, "--checkpoint", "first"), map[string]string{"a.txt": "added", ".mcp.json": "kept"})
	if r := airlock(t, o, "review", "diff", id); r.code == 0 || !strings.Contains(r.stderr, "in progress") {
		t.Errorf("diff of a running run's last state\n%s", r)
	}
	// By workspace directory, unnamed: checkpoint 2.
	r = airlock(t, o, "checkpoint", ws)
	mustOK(t, r, "checkpoint DIR")
	if !strings.Contains(r.stdout, "checkpoint 2 of run "+id) {
		t.Errorf("checkpoint DIR:\n%s", r)
	}
	if got := treeHashes(t, ws); len(got) != len(before) {
		t.Errorf("the workspace changed while the run is going: %v", got)
	}
	g.open(t)
	if code := b.wait(t, runTimeout); code != 0 {
		t.Fatalf("run exit %d\n%s", code, b.stderr)
	}
	if !strings.Contains(b.stderr.String(), "2 checkpoints") {
		t.Errorf("the end of the run does not name its checkpoints\n%s", b.stderr)
	}
	if r := airlock(t, o, "checkpoint", id); r.code == 0 || !strings.Contains(r.stderr, "has ended") {
		t.Errorf("checkpoint of a finished run\n%s", r)
	}

	runs := reviewRuns(t, o)
	if len(runs) != 1 || runs[0].ID != id || len(runs[0].Checkpoints) != 2 {
		t.Fatalf("review --json: %+v", runs)
	}
	if c := runs[0].Checkpoints[0]; c.ID != "1" || c.Name != "first" || c.Changes != 2 || c.Auto || c.Time.IsZero() {
		t.Errorf("checkpoint 1 listed as %+v", c)
	}
	r = airlock(t, o, "review")
	mustOK(t, r, "review")
	if !strings.Contains(r.stdout, "checkpoint 1 (first)") || !strings.Contains(r.stdout, "2 changes") || !strings.Contains(r.stdout, "checkpoint 2 ") {
		t.Errorf("review does not list the checkpoints\n%s", r)
	}
	sameMap(t, "diff of checkpoint first", diffKinds(t, o, id, "--checkpoint", "first"), map[string]string{"a.txt": "added", ".mcp.json": "kept"})
	sameMap(t, "diff of checkpoint 2", diffKinds(t, o, id, "--checkpoint", "2"), map[string]string{"a.txt": "added", ".mcp.json": "kept"})
	sameMap(t, "diff of the last state", diffKinds(t, o, id), map[string]string{"b.txt": "added", ".mcp.json": "kept"})
	if r := airlock(t, o, "review", "diff", id, "--checkpoint", "9"); r.code == 0 || !strings.Contains(r.stderr, "no checkpoint") {
		t.Errorf("diff of a checkpoint that does not exist\n%s", r)
	}
	if r := airlock(t, o, "review", "apply", id, "--checkpoint", "nope"); r.code == 0 || !strings.Contains(r.stderr, "no checkpoint") {
		t.Errorf("apply of a checkpoint that does not exist\n%s", r)
	}
	if got := treeHashes(t, ws); len(got) != len(before) {
		t.Errorf("a failed apply changed the workspace: %v", got)
	}

	r = airlock(t, o, "review", "apply", id, "--checkpoint", "first")
	mustOK(t, r, "review apply --checkpoint first")
	want := map[string]string{}
	for k, v := range before {
		want[k] = v
	}
	want["a.txt"] = "-rw-r--r-- " + sum
	sameHashes(t, "after applying checkpoint first", treeHashes(t, ws), want)
	if !strings.Contains(r.stderr, ".mcp.json") {
		t.Errorf("the protected path is not reported as kept\n%s", r)
	}
	if r := airlock(t, o, "review", "apply", id, "--checkpoint", "2"); r.code == 0 {
		t.Errorf("a second apply (another checkpoint) succeeded\n%s", r)
	}
	mustOK(t, airlock(t, o, "review", "rollback", id), "review rollback")
	sameHashes(t, "after rollback", treeHashes(t, ws), before)

	// The last state of the same script: b.txt only.
	g2 := newFifoGate(t)
	b = start(t, o, "run", "--review", "--workspace", ws, "--ro", g2.dir, "--", "/bin/sh", "-c", checkpointScript(g2))
	b.stdout.waitFor(t, writtenRE, runTimeout)
	g2.open(t)
	if code := b.wait(t, runTimeout); code != 0 {
		t.Fatalf("second run exit %d\n%s", code, b.stderr)
	}
	id2 := pendingRE.FindStringSubmatch(b.stderr.String())
	if id2 == nil {
		t.Fatalf("second run not pending\n%s", b.stderr)
	}
	mustOK(t, airlock(t, o, "review", "apply", id2[1]), "review apply (last state)")
	want = map[string]string{}
	for k, v := range before {
		want[k] = v
	}
	bsum := treeHashes(t, ws)["b.txt"]
	if !strings.HasSuffix(bsum, hashBytes("B\n")) {
		t.Errorf("b.txt: %q", bsum)
	}
	want["b.txt"] = "-rw-r--r-- " + hashBytes("B\n")
	sameHashes(t, "after applying the last state", treeHashes(t, ws), want)

	// A sandbox without the overlay workspace has nothing to checkpoint.
	g3 := newFifoGate(t)
	b = start(t, o, "run", "-v", "--ro", g3.dir, "--", "/bin/sh", "-c", "echo written; read x < "+g3.path)
	sid := b.stderr.waitFor(t, sandboxIDRE, runTimeout)[1]
	b.stdout.waitFor(t, writtenRE, runTimeout)
	if r := airlock(t, o, "checkpoint", sid); r.code == 0 || !strings.Contains(r.stderr, "no overlay workspace") {
		t.Errorf("checkpoint of a run without the overlay\n%s", r)
	}
	g3.open(t)
	b.wait(t, runTimeout)
}

// --checkpoint-every 200ms takes checkpoints while the command changes
// files (the command runs until the test has seen 3 of them), each
// automatic and in order; it is refused where it cannot work.
func TestCheckpointEvery(t *testing.T) {
	needRoot(t)
	o := opts{}
	changesEnv(t, &o)
	ws := t.TempDir()
	for _, bad := range []struct {
		flags []string
		want  string
	}{
		{[]string{"--checkpoint-every", "10ms", "--workspace", ws}, "at least"},
		{[]string{"--checkpoint-every", "1s"}, "needs the workspace overlay"},
		{[]string{"--checkpoint-every", "1s", "--workspace", ws, "--workspace-mode", "live"}, "needs the workspace overlay"},
		{[]string{"--checkpoint-every", "1s", "--workspace", ws, "--insecure-no-cgroups"}, "freezer"},
	} {
		r := run(t, o, bad.flags, "true")
		if r.code != 125 || !strings.Contains(r.stderr, bad.want) {
			t.Errorf("run %v: want exit 125 and %q\n%s", bad.flags, bad.want, r)
		}
	}
	if runs := reviewRuns(t, o); len(runs) != 0 {
		t.Errorf("refused runs left runs behind: %+v", runs)
	}

	stop := sharedDir(t)
	// n.txt is replaced whole (a checkpoint may come between any two
	// system calls, and must show the file system as it was then).
	script := `i=0; while [ ! -e ` + stop + `/stop ]; do i=$((i+1)); echo $i > n.tmp; mv n.tmp n.txt; sleep 0.02; done; echo done`
	b := start(t, o, "run", "-v", "--review", "--checkpoint-every", "200ms", "--workspace", ws, "--ro", stop, "--", "/bin/sh", "-c", script)
	id := b.stderr.waitFor(t, sandboxIDRE, runTimeout)[1]
	var runs []listedRun
	for i := 0; ; i++ {
		runs = reviewRuns(t, o)
		if len(runs) == 1 && len(runs[0].Checkpoints) >= 3 {
			break
		}
		if i == 600 || b.exited() {
			t.Fatalf("no 3 checkpoints after %d polls: %+v\n%s", i, runs, b.stderr)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := os.WriteFile(filepath.Join(stop, "stop"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if code := b.wait(t, runTimeout); code != 0 {
		t.Fatalf("run exit %d\n%s", code, b.stderr)
	}
	runs = reviewRuns(t, o)
	if len(runs) != 1 || runs[0].ID != id || len(runs[0].Checkpoints) < 3 {
		t.Fatalf("review: %+v", runs)
	}
	cps := runs[0].Checkpoints
	for i, c := range cps {
		if !c.Auto || c.Name != "" || c.Changes < 1 || c.ID != strconv.Itoa(i+1) || (i > 0 && !c.Time.After(cps[i-1].Time)) {
			t.Errorf("checkpoint %d: %+v", i, c)
		}
	}
	// Each checkpoint holds n.txt as of its time: the numbers never go
	// back, and they move (the first checkpoint may come before the
	// first n.txt: 0).
	var ns []int
	for _, c := range cps[:3] {
		n := checkpointN(t, o, id, c.ID)
		if len(ns) > 0 && n < ns[len(ns)-1] {
			t.Errorf("checkpoint %s holds n.txt = %d after %d", c.ID, n, ns[len(ns)-1])
		}
		ns = append(ns, n)
	}
	if ns[2] <= ns[0] {
		t.Errorf("n.txt in checkpoints 1-3: %v", ns)
	}
	mustOK(t, airlock(t, o, "review", "apply", id, "--checkpoint", "2"), "apply checkpoint 2")
	b2, err := os.ReadFile(filepath.Join(ws, "n.txt"))
	if (ns[1] == 0 && err == nil) || (ns[1] > 0 && string(b2) != strconv.Itoa(ns[1])+"\n") {
		t.Errorf("n.txt after applying checkpoint 2 = %q (%v), want %d", b2, err, ns[1])
	}
}

// checkpointN reads n.txt as of checkpoint cp (from review diff --json);
// n.txt is there in every checkpoint (0 if not).
func checkpointN(t *testing.T, o opts, id, cp string) int {
	t.Helper()
	r := airlock(t, o, "review", "diff", id, "--checkpoint", cp, "--json")
	mustOK(t, r, "review diff --checkpoint "+cp)
	var changes []struct{ Path, Diff string }
	if err := json.Unmarshal([]byte(r.stdout), &changes); err != nil {
		t.Fatalf("review diff --json: %v\n%s", err, r)
	}
	for _, c := range changes {
		if c.Path != "n.txt" {
			continue
		}
		m := regexp.MustCompile(`(?m)^\+(\d+)$`).FindStringSubmatch(c.Diff)
		if m == nil {
			t.Fatalf("checkpoint %s: no number in n.txt's diff\n%s", cp, c.Diff)
		}
		n, _ := strconv.Atoi(m[1])
		return n
	}
	return 0
}

// The record of an overlay run has one file event per change (the same
// changes review diff lists, a protected one with its real kind), before
// the end event, and a checkpoint event for the checkpoint taken.
func TestCheckpointRecord(t *testing.T) {
	needRoot(t)
	o := opts{}
	changesEnv(t, &o)
	ws := t.TempDir()
	for p, c := range map[string]string{"edit.txt": "one\n", "gone.txt": "bye\n", "mode.sh": "#!/bin/sh\n"} {
		if err := os.WriteFile(filepath.Join(ws, p), []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	os.Mkdir(filepath.Join(ws, "olddir"), 0o755)
	g := newFifoGate(t)
	file := filepath.Join(t.TempDir(), "record.jsonl")
	script := `echo 12345 > new.txt && printf 'two\n' > edit.txt && rm gone.txt && chmod 755 mode.sh && ln -s new.txt link && mkdir -p sub && : > sub/empty && rmdir olddir && echo x > .mcp.json && echo written && read x < ` + g.path
	b := start(t, o, "run", "-v", "--review", "--record", file, "--workspace", ws, "--ro", g.dir, "--", "/bin/sh", "-c", script)
	id := b.stderr.waitFor(t, sandboxIDRE, runTimeout)[1]
	b.stdout.waitFor(t, writtenRE, runTimeout)
	mustOK(t, airlock(t, o, "checkpoint", id, "--name", "mid"), "checkpoint")
	g.open(t)
	if code := b.wait(t, runTimeout); code != 0 {
		t.Fatalf("run exit %d\n%s", code, b.stderr)
	}
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	evs, err := record.Read(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) == 0 || evs[len(evs)-1].Type != record.TypeEnd {
		t.Fatalf("the record does not end with end: %d events", len(evs))
	}
	type fe struct{ kind, ftype, mode, oldMode, target string }
	got := map[string]fe{}
	sizes := map[string]int64{}
	lastFile := -1
	for i, e := range evs {
		if e.Type != record.TypeFile {
			continue
		}
		lastFile = i
		if _, dup := got[e.Path]; dup {
			t.Errorf("two file events for %s", e.Path)
		}
		got[e.Path] = fe{e.Kind, e.FileType, e.Mode, e.OldMode, e.Target}
		if e.Size != nil {
			sizes[e.Path] = *e.Size
		}
		if e.Protected != (e.Path == ".mcp.json") {
			t.Errorf("%s: protected %v", e.Path, e.Protected)
		}
	}
	if lastFile != len(evs)-2 {
		t.Errorf("file events are not right before the end event (last at %d of %d)", lastFile, len(evs))
	}
	want := map[string]fe{
		"new.txt":   {"added", "file", "0644", "", ""},
		"edit.txt":  {"modified", "file", "0644", "0644", ""},
		"gone.txt":  {"deleted", "file", "0644", "", ""},
		"mode.sh":   {"mode", "file", "0755", "0644", ""},
		"link":      {"added", "symlink", "", "", "new.txt"},
		"sub/":      {"added", "dir", "0755", "", ""},
		"sub/empty": {"added", "file", "0644", "", ""},
		"olddir/":   {"deleted", "dir", "0755", "", ""},
		".mcp.json": {"added", "file", "0644", "", ""},
	}
	if len(got) != len(want) {
		t.Errorf("file events: %v\nwant %v", got, want)
	}
	for p, w := range want {
		if got[p] != w {
			t.Errorf("file event %s: %+v, want %+v", p, got[p], w)
		}
	}
	for p, n := range map[string]int64{"new.txt": 6, "edit.txt": 4, "gone.txt": 4, "sub/empty": 0, ".mcp.json": 2} {
		if s, ok := sizes[p]; !ok || s != n {
			t.Errorf("%s: size %d (%v), want %d", p, s, ok, n)
		}
	}
	// The same changes as review diff lists (its kept is the record's
	// protected).
	diff := diffKinds(t, o, id)
	if len(diff) != len(got) {
		t.Errorf("review diff lists %v; the record %v", diff, got)
	}
	for p, k := range diff {
		if k == "kept" {
			k = "added"
		}
		if got[p].kind != k {
			t.Errorf("%s: record %q, review diff %q", p, got[p].kind, k)
		}
	}
	cps := 0
	for _, e := range evs {
		if e.Type == record.TypeCheckpoint {
			cps++
			if e.Checkpoint != "1" || e.Name != "mid" || e.Changes == nil || *e.Changes != len(want) || e.Auto {
				t.Errorf("checkpoint event %+v", e)
			}
		}
	}
	if cps != 1 {
		t.Errorf("%d checkpoint events, want 1", cps)
	}
}

func hashBytes(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// A sandbox without cgroups cannot be paused: a checkpoint of it is
// refused (one line, exit 1), nothing half-made is left, and the run
// goes on and ends as usual.
func TestCheckpointNoFreezer(t *testing.T) {
	needRoot(t)
	o := opts{}
	dir := changesEnv(t, &o)
	ws := t.TempDir()
	g := newFifoGate(t)
	b := start(t, o, "run", "-v", "--insecure-no-cgroups", "--review", "--workspace", ws, "--ro", g.dir, "--", "/bin/sh", "-c", "echo x > f && echo written && read x < "+g.path)
	id := b.stderr.waitFor(t, sandboxIDRE, runTimeout)[1]
	b.stdout.waitFor(t, writtenRE, runTimeout)
	r := airlock(t, o, "checkpoint", id)
	if r.code != 1 || !strings.Contains(r.stderr, "freezer") || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
		t.Errorf("checkpoint of a sandbox without cgroups: want one line about the freezer, exit 1\n%s", r)
	}
	if ents, err := os.ReadDir(filepath.Join(dir, id, "checkpoints")); err != nil || len(ents) != 0 {
		t.Errorf("checkpoints directory after a refused checkpoint: %v %v", ents, err)
	}
	g.open(t)
	if code := b.wait(t, runTimeout); code != 0 {
		t.Fatalf("run exit %d\n%s", code, b.stderr)
	}
	if runs := reviewRuns(t, o); len(runs) != 1 || len(runs[0].Checkpoints) != 0 || !runs[0].Pending {
		t.Errorf("review: %+v", runs)
	}
}

// The control socket answers its own uid (and root) only. The run's
// directory (0700) already keeps others away; here it is opened up on
// purpose so that the socket's own check is what refuses uid 65534, next
// to root's request that succeeds.
func TestCheckpointPeerUID(t *testing.T) {
	needRoot(t)
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("needs /usr/bin/python3 for the other uid's client")
	}
	o := opts{}
	dir := changesEnv(t, &o)
	ws := t.TempDir()
	g := newFifoGate(t)
	b := start(t, o, "run", "-v", "--review", "--workspace", ws, "--ro", g.dir, "--", "/bin/sh", "-c", "echo x > f && echo written && read x < "+g.path)
	id := b.stderr.waitFor(t, sandboxIDRE, runTimeout)[1]
	b.stdout.waitFor(t, writtenRE, runTimeout)
	sock := filepath.Join(dir, id, "ctl.sock")
	for _, p := range []string{filepath.Dir(filepath.Dir(dir)), filepath.Dir(dir), dir, filepath.Join(dir, id)} {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(sock, 0o666); err != nil {
		t.Fatal(err)
	}
	client := `import socket, sys
s = socket.socket(socket.AF_UNIX)
s.settimeout(30)
s.connect(sys.argv[1])
try:
    s.sendall(b'{"name":"other"}\n')
except OSError:
    pass  # refused before the request was read: the answer is there
print(s.makefile().readline().strip())`
	cmd := exec.Command("/usr/bin/python3", "-c", client, sock)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobodyID, Gid: nobodyID}}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "uid 65534 may not checkpoint") {
		t.Errorf("uid 65534's request: %v\n%s", err, out)
	}
	r := airlock(t, o, "checkpoint", id, "--name", "root")
	mustOK(t, r, "root's checkpoint")
	g.open(t)
	if code := b.wait(t, runTimeout); code != 0 {
		t.Fatalf("run exit %d\n%s", code, b.stderr)
	}
	runs := reviewRuns(t, o)
	if len(runs) != 1 || len(runs[0].Checkpoints) != 1 || runs[0].Checkpoints[0].Name != "root" {
		t.Errorf("review: %+v", runs)
	}
}
