//go:build linux

package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// warnCgroups is the line airlock prints for --insecure-no-cgroups.
const warnCgroups = "WARNING: running without cgroups"

func nobody(t *testing.T) opts {
	t.Helper()
	needRoot(t)
	return opts{nobody: true}
}

// Rootless without cgroups fails closed, naming the layer and the flag.
func TestRootlessFailClosed(t *testing.T) {
	o := nobody(t)
	o.noFlag = true
	r := run(t, o, nil, "true")
	if r.code == 0 {
		// This host delegates cgroups to nobody: nothing to fail on.
		t.Skip("nobody can create cgroups here")
	}
	if r.code != 125 || !strings.Contains(r.stderr, "cgroups") || !strings.Contains(r.stderr, "--insecure-no-cgroups") {
		t.Errorf("want exit 125 naming cgroups and --insecure-no-cgroups\n%s", r)
	}
}

func TestRootlessBasics(t *testing.T) {
	o := nobody(t)
	r := sh(t, o, nil, "exit 3")
	if r.code != 3 {
		t.Errorf("want exit 3\n%s", r)
	}
	if !strings.Contains(r.stderr, warnCgroups) {
		t.Errorf("no cgroups warning on stderr\n%s", r)
	}
	r = sh(t, o, nil, "kill -KILL $$")
	if r.code != 137 {
		t.Errorf("want 137\n%s", r)
	}
	o.stdin = "hi\n"
	r = run(t, o, nil, "cat")
	if r.stdout != "hi\n" || r.code != 0 {
		t.Errorf("stdin passthrough\n%s", r)
	}
	o.stdin = ""
	r = sh(t, o, nil, "echo out; echo err >&2")
	if r.stdout != "out\n" || !strings.Contains(r.stderr, "err") {
		t.Errorf("stdio\n%s", r)
	}
	if r := run(t, o, nil, "no-such-command-airlock-e2e"); r.code != 127 {
		t.Errorf("want 127\n%s", r)
	}
}

// F1/F2/P1-style status, seccomp denials and the network, as nobody.
func TestRootlessProbes(t *testing.T) {
	o := nobody(t)
	ws := nobodyDir(t)
	secret := randHex(16)
	canary := filepath.Join(os.TempDir(), "airlock-e2e-rootless-"+randHex(4))
	if err := os.WriteFile(canary, []byte(secret), 0o644); err != nil { // world-readable on the host
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(canary) })
	script := pyPrelude + `
st = dict(l.split(":", 1) for l in open("/proc/self/status").read().splitlines() if ":" in l)
for k in ["CapEff", "CapPrm", "CapBnd", "CapAmb", "NoNewPrivs", "Seccomp"]:
    out(k, st[k].strip())
out("canary", tryerr(lambda: open("` + canary + `").read()))
out("root_write", tryerr(lambda: open("/x", "w")))
out("ws_write", tryerr(lambda: open("/workspace/f", "w").write("ok")))
out("unshare_user", sc(272, 0x10000000)[1])
out("ptrace", sc(101, 16, 1, 0, 0)[1])
out("bpf", sc(321, 0, 0, 0)[1])
out("mount", sc(165, 0, 0, 0, 0, 0)[1])
out("ctl_read", sc(0, -1, 0, 0)[1])
def sock(*a):
    try:
        socket.socket(*a).close(); return "OK"
    except OSError as e:
        return E.errorcode.get(e.errno)
out("packet", sock(socket.AF_PACKET, socket.SOCK_RAW, 0))
out("ctl_tcp", sock(socket.AF_INET, socket.SOCK_STREAM, 0))
s = socket.socket(); s.settimeout(3)
out("egress", tryerr(lambda: s.connect(("1.1.1.1", 443))))
out("id", os.getuid())
`
	r := py(t, o, []string{"--workspace", ws}, script)
	mustOK(t, r, "probe")
	m := kv(r.stdout)
	for _, k := range []string{"CapEff", "CapPrm", "CapBnd", "CapAmb"} {
		expect(t, m, k, "0000000000000000")
	}
	expect(t, m, "NoNewPrivs", "1")
	expect(t, m, "Seccomp", "2")
	expect(t, m, "canary", "ENOENT", "EACCES")
	expect(t, m, "root_write", "EACCES", "EROFS", "EPERM")
	expect(t, m, "ws_write", "OK")
	for _, k := range []string{"unshare_user", "ptrace", "bpf", "mount", "packet"} {
		expect(t, m, k, "EPERM")
	}
	expect(t, m, "ctl_read", "EBADF")
	expect(t, m, "ctl_tcp", "OK")
	expect(t, m, "id", "0")
	if v := m["egress"]; v == "OK" || v == "" {
		t.Errorf("egress from a rootless sandbox: %q", v)
	}
	if b, err := os.ReadFile(filepath.Join(ws, "f")); err != nil || string(b) != "ok" {
		t.Errorf("control: workspace write not on the host: %q %v", b, err)
	}
}

// Rootless, directories the sandbox made or left read-only are applied
// with their contents (a directory's mode was set before its contents,
// which nobody but root may then write: the run failed with "permission
// denied" and left ex at 0555 without its changes). The control: a
// directory left writable.
func TestRootlessReadOnlyDirApply(t *testing.T) {
	o := nobody(t)
	ws := nobodyDir(t)
	if err := os.MkdirAll(filepath.Join(ws, "ex"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(ws, "ex/e"), []byte("e\n"), 0o644)
	filepath.Walk(ws, func(p string, _ os.FileInfo, _ error) error { return os.Lchown(p, nobodyID, nobodyID) })
	changesEnv(t, &o)
	r := sh(t, o, []string{"--workspace", ws}, "mkdir ro rw && echo a > ro/f && echo b > rw/f && chmod 555 ro && echo m >> ex/e && echo n > ex/n && chmod 555 ex")
	mustOK(t, r, "read-only directories")
	for p, want := range map[string]string{"ro/f": "a\n", "rw/f": "b\n", "ex/e": "e\nm\n", "ex/n": "n\n"} {
		if b, err := os.ReadFile(filepath.Join(ws, p)); err != nil || string(b) != want {
			t.Errorf("%s on the host: %q %v", p, b, err)
		}
	}
	for p, want := range map[string]os.FileMode{"ro": 0o555, "ex": 0o555, "rw": 0o755} {
		if fi, err := os.Stat(filepath.Join(ws, p)); err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s's mode on the host: %v %v, want %v", p, fi.Mode().Perm(), err, want)
		}
	}
	os.Chmod(filepath.Join(ws, "ro"), 0o755)
	os.Chmod(filepath.Join(ws, "ex"), 0o755)
}

// Workspace protection as nobody.
func TestRootlessProtection(t *testing.T) {
	o := nobody(t)
	ws := nobodyDir(t)
	files := gitTree(t, ws)
	filepath.Walk(ws, func(p string, _ os.FileInfo, _ error) error { return os.Lchown(p, nobodyID, nobodyID) })
	before := map[string]string{}
	for p := range files {
		before[p] = hashFile(t, filepath.Join(ws, p))
	}
	changesEnv(t, &o)
	r := sh(t, o, []string{"--workspace", ws}, protectScript)
	mustOK(t, r, "probe")
	checkProtection(t, r, ws, before, []string{"hook", "config", "bashrc", "mvgit", "mvhooks"}, []string{"vscode", "mcp", "claude", "envrc", "workflows", "commondir", "worktreecfg", "modules", "gitconfig", "ssh"})
	// Without AIRLOCK_CHANGES_DIR and with no usable home, nobody's runs
	// keep their changes in a private directory of their own.
	o = nobody(t)
	r = sh(t, o, []string{"--workspace", ws}, "echo x > nohome.txt")
	mustOK(t, r, "nobody without a home")
	if b, err := os.ReadFile(filepath.Join(ws, "nohome.txt")); err != nil || string(b) != "x\n" {
		t.Errorf("nohome.txt on the host: %q, %v", b, err)
	}
}

// A rootless timeout still ends the run.
func TestRootlessTimeout(t *testing.T) {
	o := nobody(t)
	r := run(t, o, []string{"--timeout", "2s"}, "/bin/sh", "-c", "trap '' TERM INT; while :; do :; done")
	if r.code != 124 {
		t.Errorf("want 124\n%s", r)
	}
}

// A state root that someone else prepared (a symlink to a directory they
// control, as in a shared /tmp) is refused; the control is a private one.
func TestRootlessStateRootTampered(t *testing.T) {
	o := nobody(t)
	evil := nobodyDir(t)
	if err := os.Chmod(evil, 0o777); err != nil {
		t.Fatal(err)
	}
	runtimeDir := nobodyDir(t)
	if err := os.Symlink(evil, filepath.Join(runtimeDir, "airlock")); err != nil {
		t.Fatal(err)
	}
	o.env = []string{"XDG_RUNTIME_DIR=" + runtimeDir}
	r := sh(t, o, nil, "echo ran")
	if r.code != 125 || !strings.Contains(r.stderr, "state directory") {
		t.Errorf("want exit 125 refusing the state directory\n%s", r)
	}
	if entries, _ := os.ReadDir(evil); len(entries) != 0 {
		t.Errorf("airlock wrote into the foreign directory: %v", entries)
	}
	o.env = []string{"XDG_RUNTIME_DIR=" + nobodyDir(t)}
	if r := sh(t, o, nil, "echo ran"); r.code != 0 || !strings.Contains(r.stdout, "ran") {
		t.Errorf("control: a private runtime directory works\n%s", r)
	}
}
