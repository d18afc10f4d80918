//go:build linux

package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
)

// cacheDir is a fresh cache directory for one test ($AIRLOCK_CACHE_DIR),
// as the invoking user (root) would have it.
func cacheDir(t *testing.T) (string, opts) {
	t.Helper()
	need(t)
	d := filepath.Join(t.TempDir(), "caches")
	return d, opts{env: []string{"AIRLOCK_CACHE_DIR=" + d}}
}

func ownerOf(t *testing.T, p string) (uid, gid uint32, mode os.FileMode) {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	return st.Uid, st.Gid, fi.Mode()
}

// Each cache is mounted read-write at its place and named by its tool's
// variables; --env wins; without --cache there is neither.
func TestCacheEnv(t *testing.T) {
	dir, o := cacheDir(t)
	flags := []string{"--cache", "go", "--cache", "npm", "--cache", "pip", "--cache", "cargo", "--cache", "tools:/opt/tools"}
	script := `for v in GOCACHE GOMODCACHE npm_config_cache PIP_CACHE_DIR CARGO_HOME; do eval "echo $v=\${$v-unset}"; done
for d in /cache/go /cache/npm /cache/pip /cache/cargo /opt/tools; do echo made > $d/f && echo "$d=rw"; done
echo id=$(id -u)`
	r := sh(t, o, flags, script)
	mustOK(t, r, "caches")
	m := kv(r.stdout)
	expect(t, m, "GOCACHE", "/cache/go/build")
	expect(t, m, "GOMODCACHE", "/cache/go/mod")
	expect(t, m, "npm_config_cache", "/cache/npm")
	expect(t, m, "PIP_CACHE_DIR", "/cache/pip")
	expect(t, m, "CARGO_HOME", "/cache/cargo")
	for _, d := range []string{"/cache/go", "/cache/npm", "/cache/pip", "/cache/cargo", "/opt/tools"} {
		expect(t, m, d, "rw")
	}
	// On the host: one directory per name, 0700, the caller's (root), and
	// what the sandbox wrote belongs to the caller too, not to one of the
	// sandbox's host ids.
	for _, name := range []string{"go", "npm", "pip", "cargo", "tools"} {
		uid, gid, mode := ownerOf(t, filepath.Join(dir, name))
		if uid != uint32(os.Geteuid()) || gid != uint32(os.Getegid()) || mode.Perm() != 0o700 || !mode.IsDir() {
			t.Errorf("%s: %d:%d %v", name, uid, gid, mode)
		}
		b, err := os.ReadFile(filepath.Join(dir, name, "f"))
		if err != nil || string(b) != "made\n" {
			t.Errorf("%s/f on the host: %q %v", name, b, err)
		}
		if uid, _, _ := ownerOf(t, filepath.Join(dir, name, "f")); uid != uint32(os.Geteuid()) {
			t.Errorf("%s/f is owned by %d on the host", name, uid)
		}
	}
	// --env and the policy's environment win over a cache's variables.
	pol := filepath.Join(t.TempDir(), "p.yaml")
	if err := os.WriteFile(pol, []byte("caches: [go, pip]\nenvironment:\n  set: {PIP_CACHE_DIR: /tmp/mine}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r = sh(t, o, []string{"--policy", pol, "-e", "GOCACHE=/tmp/gc"}, `echo GOCACHE=$GOCACHE; echo GOMODCACHE=$GOMODCACHE; echo PIP_CACHE_DIR=$PIP_CACHE_DIR; test -d /cache/pip && echo pip=mounted`)
	mustOK(t, r, "policy caches")
	m = kv(r.stdout)
	expect(t, m, "GOCACHE", "/tmp/gc")
	expect(t, m, "GOMODCACHE", "/cache/go/mod")
	expect(t, m, "PIP_CACHE_DIR", "/tmp/mine")
	expect(t, m, "pip", "mounted")
	// Control: no --cache, no variable and no /cache.
	r = sh(t, o, nil, `echo GOCACHE=${GOCACHE-unset}; test -e /cache && echo cache=present || echo cache=absent`)
	mustOK(t, r, "no caches")
	m = kv(r.stdout)
	expect(t, m, "GOCACHE", "unset")
	expect(t, m, "cache", "absent")
}

// Two runs share a cache; another name, or another cache directory, does
// not see it.
func TestCacheShared(t *testing.T) {
	dir, o := cacheDir(t)
	tok := randHex(16)
	mustOK(t, sh(t, o, []string{"--cache", "npm"}, "echo "+tok+" > /cache/npm/tok"), "write")
	r := sh(t, o, []string{"--cache", "npm"}, "cat /cache/npm/tok")
	mustOK(t, r, "read")
	if strings.TrimSpace(r.stdout) != tok {
		t.Errorf("second run read %q, want %q", r.stdout, tok)
	}
	r = sh(t, o, []string{"--cache", "pip"}, "cat /cache/pip/tok /cache/npm/tok 2>&1; ls /cache")
	if strings.Contains(r.stdout, tok) || strings.TrimSpace(lastLine(r.stdout)) != "pip" {
		t.Errorf("another cache sees the token\n%s", r)
	}
	_, other := cacheDir(t)
	r = sh(t, other, []string{"--cache", "npm"}, "cat /cache/npm/tok 2>&1 || echo absent")
	if strings.Contains(r.stdout, tok) || !strings.Contains(r.stdout, "absent") {
		t.Errorf("another cache directory sees the token\n%s", r)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "npm", "tok")); err != nil || strings.TrimSpace(string(b)) != tok {
		t.Errorf("host copy: %q %v", b, err)
	}
}

func lastLine(s string) string {
	s = strings.TrimRight(s, "\n")
	return s[strings.LastIndexByte(s, '\n')+1:]
}

// compileRe matches a compiler invocation in `go build -x` output.
var compileRe = regexp.MustCompile(`(?m)/compile -o `)

// A real go build, twice in fresh sandboxes: with --cache go the second
// compiles nothing (every package is a cache hit); without it, it compiles
// again. The host's own Go cache (here the GOCACHE of airlock's caller) is
// never used.
func TestCacheGoBuild(t *testing.T) {
	dir, o := cacheDir(t)
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go tool")
	}
	goRoot := filepath.Dir(filepath.Dir(goBin))
	if r, err := filepath.EvalSymlinks(goBin); err == nil {
		goRoot = filepath.Dir(filepath.Dir(r))
	}
	hostCache := filepath.Join(t.TempDir(), "host-go-build")
	if err := os.Mkdir(hostCache, 0o755); err != nil {
		t.Fatal(err)
	}
	o.env = append(o.env, "GOCACHE="+hostCache, "GOMODCACHE="+hostCache+"-mod")
	o.timeout = 5 * runTimeout
	ws := t.TempDir()
	for name, content := range map[string]string{
		"go.mod":  "module example.com/tiny\n\ngo 1.21\n",
		"main.go": "package main\n\nimport (\n\t\"encoding/json\"\n\t\"fmt\"\n\t\"net/http\"\n)\n\nfunc main() {\n\tb, _ := json.Marshal(http.StatusOK)\n\tfmt.Println(string(b))\n}\n",
	} {
		if err := os.WriteFile(filepath.Join(ws, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	build := func(cache bool) result {
		t.Helper()
		flags := []string{"--workspace", ws, "--memory", "2GiB", "--tmp", "1GiB",
			"-e", "PATH=" + goRoot + "/bin:/usr/bin:/bin", "-e", "GOTOOLCHAIN=local", "-e", "GOFLAGS=-buildvcs=false", "-e", "CGO_ENABLED=0"}
		if cache {
			flags = append(flags, "--cache", "go")
		}
		return sh(t, o, flags, `echo GOCACHE=$(go env GOCACHE); go build -x -o /tmp/tiny . 2>/tmp/x.log; rc=$?; cat /tmp/x.log >&2; /tmp/tiny; exit $rc`)
	}
	first := build(true)
	mustOK(t, first, "first build")
	if !strings.Contains(first.stdout, "GOCACHE=/cache/go/build") || !strings.Contains(first.stdout, "200") {
		t.Fatalf("first build\n%s", first)
	}
	if n := len(compileRe.FindAllString(first.stderr, -1)); n < 10 {
		t.Fatalf("first build compiled %d packages; want the standard library's\n%s", n, first)
	}
	second := build(true)
	mustOK(t, second, "second build")
	if n := len(compileRe.FindAllString(second.stderr, -1)); n != 0 || !strings.Contains(second.stdout, "200") {
		t.Errorf("second build with --cache go compiled %d packages; want 0 (all cache hits)\n%s", n, second)
	}
	// Control: a fresh sandbox without the cache compiles everything again.
	third := build(false)
	mustOK(t, third, "build without cache")
	if n := len(compileRe.FindAllString(third.stderr, -1)); n < 10 {
		t.Errorf("build without cache compiled %d packages; want the standard library's\n%s", n, third)
	}
	// The cache is on the host, in the cache directory; the caller's own
	// Go cache was never touched.
	entries, _ := filepath.Glob(filepath.Join(dir, "go", "build", "*", "*-a"))
	if len(entries) < 10 {
		t.Errorf("%d action entries in the cache directory", len(entries))
	}
	if left, _ := os.ReadDir(hostCache); len(left) != 0 {
		t.Errorf("the host's GOCACHE got %d entries", len(left))
	}
	if _, err := os.Stat(hostCache + "-mod"); err == nil {
		t.Error("the host's GOMODCACHE was created")
	}
}

// A cache directory that is a symlink, not a directory, or someone else's
// is refused with an error naming it, and nothing runs; the same layout
// made right runs.
func TestCacheErrors(t *testing.T) {
	needRoot(t)
	dir, o := cacheDir(t)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	elsewhere := t.TempDir()
	if err := os.Symlink(elsewhere, filepath.Join(dir, "npm")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "pip"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	foreign := filepath.Join(dir, "cargo")
	if err := os.Mkdir(foreign, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(foreign, nobodyID, nobodyID); err != nil {
		t.Fatal(err)
	}
	ran := filepath.Join(t.TempDir(), "ran")
	ws := filepath.Dir(ran)
	for _, c := range []struct{ name, want string }{
		{"npm", "symlink"},
		{"pip", "not a directory"},
		{"cargo", "owned by uid 65534"},
	} {
		r := sh(t, o, []string{"--workspace", ws, "--cache", c.name}, "touch /workspace/ran")
		if r.code != 125 || !strings.Contains(r.stderr, filepath.Join(dir, c.name)) || !strings.Contains(r.stderr, c.want) {
			t.Errorf("--cache %s: want exit 125 naming %s (%s)\n%s", c.name, filepath.Join(dir, c.name), c.want, r)
		}
		if _, err := os.Stat(ran); err == nil {
			t.Fatalf("--cache %s: the command ran", c.name)
		}
	}
	if left, _ := os.ReadDir(elsewhere); len(left) != 0 {
		t.Errorf("the symlink's target got %d entries", len(left))
	}
	// Control: the same directory with a proper cache runs.
	mustOK(t, sh(t, o, []string{"--workspace", ws, "--cache", "go"}, "touch /workspace/ran /cache/go/ok"), "control")
	if _, err := os.Stat(ran); err != nil {
		t.Errorf("control did not run: %v", err)
	}
	// The cache directory itself as a symlink, or someone else's.
	link := filepath.Join(t.TempDir(), "caches")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	r := sh(t, opts{env: []string{"AIRLOCK_CACHE_DIR=" + link}}, []string{"--cache", "go"}, "true")
	if r.code != 125 || !strings.Contains(r.stderr, link) || !strings.Contains(r.stderr, "symlink") {
		t.Errorf("symlinked cache directory\n%s", r)
	}
	// Bad names and paths: one line, exit 125.
	for _, c := range []struct{ flag, want string }{
		{"golang", `unknown cache "golang"`},
		{"x:/workspace/x", "/workspace is the sandbox's own"},
		{"x:/usr/lib/x", "/usr is the sandbox's own"},
		{"x:relative", "must be absolute"},
		{"X:/opt/x", `cache name "X"`},
		{"go", `cache "go" is given twice`},
	} {
		flags := []string{"--cache", c.flag}
		if c.flag == "go" {
			flags = append(flags, "--cache", "go")
		}
		r := sh(t, o, flags, "true")
		if r.code != 125 || !strings.Contains(r.stderr, c.want) || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
			t.Errorf("--cache %s: want exit 125 and one line with %q\n%s", c.flag, c.want, r)
		}
	}
}

// As nobody: the caches are in $XDG_CACHE_HOME/airlock/caches, owned by
// nobody, and shared between nobody's runs; root's cache directory is
// refused.
func TestCacheRootless(t *testing.T) {
	o := nobody(t)
	home := nobodyDir(t)
	o.env = []string{"XDG_CACHE_HOME=" + home}
	tok := randHex(16)
	mustOK(t, sh(t, o, []string{"--cache", "pip"}, "echo "+tok+" > /cache/pip/tok; echo PIP_CACHE_DIR=$PIP_CACHE_DIR"), "rootless write")
	dir := filepath.Join(home, "airlock", "caches")
	for _, p := range []string{dir, filepath.Join(dir, "pip"), filepath.Join(dir, "pip", "tok")} {
		if uid, _, _ := ownerOf(t, p); uid != nobodyID {
			t.Errorf("%s is owned by %d, want nobody", p, uid)
		}
	}
	r := sh(t, o, []string{"--cache", "pip"}, "cat /cache/pip/tok")
	mustOK(t, r, "rootless read")
	if strings.TrimSpace(r.stdout) != tok {
		t.Errorf("read %q, want %q", r.stdout, tok)
	}
	// Root's cache directory is not nobody's.
	rootDir, _ := cacheDir(t)
	if err := os.MkdirAll(rootDir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{filepath.Dir(filepath.Dir(rootDir)), filepath.Dir(rootDir)} {
		os.Chmod(d, 0o755)
	}
	o.env = []string{"AIRLOCK_CACHE_DIR=" + rootDir}
	r = sh(t, o, []string{"--cache", "pip"}, "true")
	if r.code != 125 || !strings.Contains(r.stderr, rootDir) || !strings.Contains(r.stderr, "owned by uid 0") {
		t.Errorf("root's cache directory as nobody\n%s", r)
	}
}
