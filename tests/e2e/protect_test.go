//go:build linux

package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// gitTree creates a git-like workspace.
func gitTree(t *testing.T, dir string) map[string]string {
	t.Helper()
	files := map[string]string{
		".git/config":                  "[core]\n\trepositoryformatversion = 0\n",
		".git/HEAD":                    "ref: refs/heads/main\n",
		".git/hooks/pre-commit.sample": "#!/bin/sh\n",
		".git/objects/README":          "objects\n",
		".bashrc":                      "# rc\n",
		"src/main.py":                  "print(1)\n",
	}
	for p, c := range files {
		full := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return files
}

const protectScript = `
try() { name=$1; shift; if ( "$@" ) >/dev/null 2>&1; then echo "$name=OK"; else echo "$name=DENIED"; fi; }
try hook sh -c 'printf "#!/bin/sh\ncurl evil\n" > .git/hooks/pre-commit'
try hook_chmod chmod +x .git/hooks/pre-commit.sample
try config sh -c 'printf "[core]\n\thooksPath = /tmp\n" >> .git/config'
try config_rm rm -f .git/config
try bashrc sh -c 'echo "curl evil" >> .bashrc'
try vscode sh -c 'mkdir -p .vscode && echo "{}" > .vscode/settings.json'
try mcp sh -c 'echo "{}" > .mcp.json'
try claude sh -c 'mkdir -p .claude && echo "{}" > .claude/settings.json'
try mvgit mv .git .git2
try mvhooks mv .git/hooks .git/hooks2
try lnhooks sh -c 'rm -rf .git/hooks && ln -s /tmp .git/hooks'
try envrc sh -c 'echo "curl evil" > .envrc'
try workflows sh -c 'mkdir -p .github/workflows && echo x > .github/workflows/x.yml'
try commondir sh -c 'mkdir -p .cache/x && echo ../.cache/x > .git/commondir'
try worktreecfg sh -c 'printf "[core]\n\tfsmonitor = evil\n" > .git/config.worktree'
try modules sh -c 'mkdir -p .git/modules/m/hooks && echo x > .git/modules/m/hooks/post-checkout'
try gitconfig sh -c 'printf "[core]\n\tfsmonitor = evil\n" > .gitconfig'
try ssh sh -c 'mkdir -p .ssh && echo "ProxyCommand evil" > .ssh/config'
try ctl_src sh -c 'echo "print(2)" > src/main.py'
try ctl_objects sh -c 'echo x > .git/objects/x'
try ctl_new sh -c 'echo x > notes.txt'
`

// liveWorkspace reports whether runs of this test get the workspace itself
// (the conformance table runs other backends with --workspace-mode live)
// rather than the default overlay.
func liveWorkspace() bool { return backend != "" }

// Workspace protection: files that something outside the sandbox later runs
// never reach the host. Those that exist are read-only inside (EROFS); those
// that do not exist are absent: in the overlay a write to one is kept aside
// and reported at the end, in live mode a placeholder refuses it.
func TestWorkspaceProtection(t *testing.T) {
	need(t)
	o := opts{}
	changesEnv(t, &o)
	ws := t.TempDir()
	files := gitTree(t, ws)
	before := map[string]string{}
	for p := range files {
		before[p] = hashFile(t, filepath.Join(ws, p))
	}
	r := sh(t, o, []string{"--workspace", ws}, protectScript)
	mustOK(t, r, "probe")
	checkProtection(t, r, ws, before, []string{"hook", "hook_chmod", "config", "config_rm", "bashrc", "mvgit", "mvhooks", "lnhooks"},
		[]string{"vscode", "mcp", "claude", "envrc", "workflows", "commondir", "worktreecfg", "modules", "gitconfig", "ssh"})
	if b, _ := os.ReadFile(filepath.Join(ws, "src/main.py")); string(b) != "print(2)\n" {
		t.Errorf("control: src/main.py on the host = %q", b)
	}
	if _, err := os.Stat(filepath.Join(ws, ".git/objects/x")); err != nil {
		t.Errorf("control: .git/objects/x not on the host: %v", err)
	}
}

// checkProtection checks the probe's results: existing protected paths
// refused, missing ones refused (live) or kept aside and reported
// (overlay), the controls written, and the host workspace as it was.
func checkProtection(t *testing.T, r result, ws string, before map[string]string, existing, missing []string) {
	t.Helper()
	m := kv(r.stdout)
	for _, k := range existing {
		expect(t, m, k, "DENIED")
	}
	for _, k := range missing {
		if liveWorkspace() {
			expect(t, m, k, "DENIED")
		} else {
			expect(t, m, k, "OK")
		}
	}
	if !liveWorkspace() {
		for _, p := range []string{".vscode", ".mcp.json", ".claude", ".envrc", ".github/workflows", ".git/commondir", ".git/config.worktree", ".git/modules", ".gitconfig", ".ssh"} {
			if !strings.Contains(r.stderr, p) {
				t.Errorf("%s not reported as kept aside\n%s", p, r)
			}
		}
	}
	for _, k := range []string{"ctl_src", "ctl_objects", "ctl_new"} {
		expect(t, m, k, "OK")
	}
	checkHostWorkspace(t, ws, before)
}

// checkHostWorkspace checks that protected files are unchanged and that no
// placeholder is left behind.
func checkHostWorkspace(t *testing.T, ws string, before map[string]string) {
	t.Helper()
	for p, h := range before {
		if p == "src/main.py" {
			continue
		}
		if got := hashFile(t, filepath.Join(ws, p)); got != h {
			t.Errorf("host %s changed", p)
		}
	}
	for _, p := range []string{".git/hooks/pre-commit", ".git2", ".git/hooks2", ".envrc", ".github", ".vscode", ".mcp.json", ".claude", ".idea", ".cursor", ".profile", ".zshrc", ".gitmodules",
		".git/commondir", ".git/config.worktree", ".git/modules", ".git/worktrees", ".gitconfig", ".ssh", ".config"} {
		if _, err := os.Lstat(filepath.Join(ws, p)); err == nil {
			t.Errorf("host workspace has %s after the run", p)
		}
	}
	if fi, err := os.Lstat(filepath.Join(ws, ".git/hooks")); err != nil || !fi.IsDir() {
		t.Errorf(".git/hooks is no longer a directory on the host: %v", err)
	}
}

// Protection without a pre-existing .git and with --unprotect (positive
// control: an unprotected path reaches the host).
func TestUnprotect(t *testing.T) {
	need(t)
	o := opts{}
	changesEnv(t, &o)
	ws := t.TempDir()
	r := sh(t, o, []string{"--workspace", ws}, `ls -A | sed 's/^/entry=/'
mkdir -p .vscode 2>/dev/null; echo '{}' > .vscode/settings.json 2>/dev/null && echo vscode=OK || echo vscode=DENIED
mkdir -p .git/hooks 2>/dev/null; echo x > .git/hooks/post-checkout 2>/dev/null && echo hooks=OK || echo hooks=DENIED`)
	m := kv(r.stdout)
	if liveWorkspace() {
		expect(t, m, "vscode", "DENIED")
		expect(t, m, "hooks", "DENIED")
	} else {
		// Absent inside: nothing listed, written in the overlay, kept
		// aside at the end and reported.
		if e, ok := m["entry"]; ok {
			t.Errorf("an empty workspace lists %q inside", e)
		}
		expect(t, m, "vscode", "OK")
		expect(t, m, "hooks", "OK")
		if !strings.Contains(r.stderr, "kept aside") || !strings.Contains(r.stderr, ".vscode") || !strings.Contains(r.stderr, ".git/hooks") {
			t.Errorf("kept paths not reported\n%s", r)
		}
	}
	entries, _ := os.ReadDir(ws)
	if len(entries) != 0 {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("left in an empty workspace: %s", strings.Join(names, ", "))
	}
	r = sh(t, o, []string{"--workspace", ws, "--unprotect", ".vscode"}, `mkdir -p .vscode && echo '{}' > .vscode/settings.json && echo vscode=OK || echo vscode=DENIED`)
	expect(t, kv(r.stdout), "vscode", "OK")
	if b, err := os.ReadFile(filepath.Join(ws, ".vscode/settings.json")); err != nil || string(b) != "{}\n" {
		t.Errorf("control: .vscode/settings.json on the host: %q, %v", b, err)
	}
	// --protect adds a path.
	os.MkdirAll(filepath.Join(ws, "secrets"), 0o755)
	r = sh(t, o, []string{"--workspace", ws, "--protect", "secrets"}, `echo x > secrets/k 2>/dev/null && echo secrets=OK || echo secrets=DENIED`)
	expect(t, kv(r.stdout), "secrets", "DENIED")
}
