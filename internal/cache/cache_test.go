package cache

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	good := map[string]Cache{
		"go":                     {"go", "/cache/go"},
		"npm":                    {"npm", "/cache/npm"},
		"pip":                    {"pip", "/cache/pip"},
		"cargo":                  {"cargo", "/cache/cargo"},
		"tools:/opt/tools":       {"tools", "/opt/tools"},
		"go:/root/.cache/gobits": {"go", "/root/.cache/gobits"},
		"a.b-c_1:/cache/other":   {"a.b-c_1", "/cache/other"},
		"hf:/tmp/hf":             {"hf", "/tmp/hf"},
	}
	for in, want := range good {
		got, err := Parse(in)
		if err != nil || got != want {
			t.Errorf("Parse(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	bad := map[string]string{
		"":                                "empty cache name",
		"golang":                          "unknown cache",
		"Go":                              "lowercase",
		"-x:/opt/x":                       "lowercase",
		"../x:/opt/x":                     "lowercase",
		"a/b:/opt/x":                      "lowercase",
		"x:":                              "empty cache path",
		"x:opt/x":                         "absolute",
		"x:/opt/x/":                       "clean",
		"x:/opt/../etc":                   "clean",
		"x:/":                             "hide the whole",
		"x:/tmp":                          "hide the whole",
		"x:/cache":                        "hide the whole",
		"x:/root":                         "hide the whole",
		"x:/workspace":                    "sandbox's own",
		"x:/workspace/.cache":             "sandbox's own",
		"x:/usr/local/share/x":            "sandbox's own",
		"x:/etc/x":                        "sandbox's own",
		"x:/proc/x":                       "sandbox's own",
		"x:/dev/shm/x":                    "sandbox's own",
		"x:/lib64":                        "sandbox's own",
		"x:/a\x00b":                       "NUL",
		strings.Repeat("a", 65):           "longer than 64",
		"x:/" + strings.Repeat("a", 1100): "longer than 1024",
	}
	for in, want := range bad {
		if _, err := Parse(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%.40q) = %v; want an error containing %q", in, err, want)
		}
	}
}

func TestParseAll(t *testing.T) {
	got, err := ParseAll([]string{"go", "npm", "x:/opt/x", "y:/opt/y"})
	if err != nil || len(got) != 4 {
		t.Fatalf("ParseAll = %v, %v", got, err)
	}
	for _, c := range []struct {
		in   []string
		want string
	}{
		{[]string{"go", "go"}, "given twice"},
		{[]string{"go", "go:/opt/g"}, "given twice"},
		{[]string{"x:/opt/a", "y:/opt/a"}, "both mounted"},
		{[]string{"go", "x:/cache/go"}, "both mounted"},
		{[]string{"x:/opt/a", "y:/opt/a/b"}, "nested"},
		{[]string{"go", "x:/cache/go/mod"}, "nested"},
		{[]string{"y:/opt/a/b", "x:/opt/a"}, "nested"},
	} {
		if _, err := ParseAll(c.in); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseAll(%q) = %v; want %q", c.in, err, c.want)
		}
	}
	// Siblings sharing a prefix are not nested.
	if _, err := ParseAll([]string{"x:/opt/a", "y:/opt/ab"}); err != nil {
		t.Errorf("siblings: %v", err)
	}
}

func TestEnv(t *testing.T) {
	cs, err := ParseAll([]string{"go", "npm", "pip", "cargo", "other:/opt/o"})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"GOCACHE": "/cache/go/build", "GOMODCACHE": "/cache/go/mod",
		"npm_config_cache": "/cache/npm", "PIP_CACHE_DIR": "/cache/pip", "CARGO_HOME": "/cache/cargo",
	}
	got := Env(cs)
	if len(got) != len(want) {
		t.Errorf("Env = %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	// A known tool at a custom path: its variables follow the path.
	c, _ := Parse("go:/opt/gocache")
	if e := Env([]Cache{c}); e["GOCACHE"] != "/opt/gocache/build" || e["GOMODCACHE"] != "/opt/gocache/mod" {
		t.Errorf("custom go: %v", e)
	}
	if e := Env(nil); len(e) != 0 {
		t.Errorf("no caches: %v", e)
	}
}

func TestDefaultDir(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	for _, c := range []struct {
		env  map[string]string
		euid int
		want string
	}{
		{map[string]string{"AIRLOCK_CACHE_DIR": "/srv/c/", "XDG_CACHE_HOME": "/x", "HOME": "/h"}, 1000, "/srv/c"},
		{map[string]string{"AIRLOCK_CACHE_DIR": "/srv/c"}, 0, "/srv/c"},
		{map[string]string{"XDG_CACHE_HOME": "/x", "HOME": "/h"}, 0, "/var/cache/airlock/caches"},
		{map[string]string{"XDG_CACHE_HOME": "/x", "HOME": "/h"}, 1000, "/x/airlock/caches"},
		{map[string]string{"XDG_CACHE_HOME": "rel", "HOME": "/h"}, 1000, "/h/.cache/airlock/caches"},
		{map[string]string{"HOME": "/h"}, 1000, "/h/.cache/airlock/caches"},
	} {
		got, err := DefaultDir(env(c.env), c.euid)
		if err != nil || got != c.want {
			t.Errorf("DefaultDir(%v, %d) = %q, %v; want %q", c.env, c.euid, got, err, c.want)
		}
	}
	if _, err := DefaultDir(env(map[string]string{"AIRLOCK_CACHE_DIR": "rel"}), 0); err == nil {
		t.Error("relative AIRLOCK_CACHE_DIR accepted")
	}
	if _, err := DefaultDir(env(map[string]string{"HOME": "/"}), 1000); err == nil {
		t.Error("no usable directory accepted")
	}
}

func TestPrepare(t *testing.T) {
	uid := os.Geteuid()
	base := t.TempDir()
	dir := filepath.Join(base, "a", "caches")
	cs, _ := ParseAll([]string{"go", "tools:/opt/tools"})
	ms, err := Prepare(dir, uid, cs)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 2 || ms[0] != (Mount{"go", filepath.Join(dir, "go"), "/cache/go"}) || ms[1] != (Mount{"tools", filepath.Join(dir, "tools"), "/opt/tools"}) {
		t.Fatalf("mounts = %+v", ms)
	}
	for _, p := range []string{dir, ms[0].Source, ms[1].Source} {
		fi, err := os.Lstat(p)
		if err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
			t.Errorf("%s: %v %v", p, fi.Mode(), err)
		}
	}
	// Again: the existing directories are accepted, and what is in them stays.
	if err := os.WriteFile(filepath.Join(ms[0].Source, "kept"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Prepare(dir, uid, cs); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(ms[0].Source, "kept")); err != nil {
		t.Error(err)
	}
	if ms, err := Prepare("relative", uid, cs); err == nil {
		t.Errorf("relative dir: %v", ms)
	}
	if ms, err := Prepare("relative", uid, nil); err != nil || ms != nil {
		t.Errorf("no caches: nothing is touched: %v %v", ms, err)
	}
}

// Each refusal next to its control (the same layout, made right).
func TestPrepareRefuses(t *testing.T) {
	uid := os.Geteuid()
	cs, _ := ParseAll([]string{"npm"})
	t.Run("symlink", func(t *testing.T) {
		dir := t.TempDir()
		real := t.TempDir()
		if err := os.Chmod(real, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(real, filepath.Join(dir, "npm")); err != nil {
			t.Fatal(err)
		}
		_, err := Prepare(dir, uid, cs)
		if err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "npm")) || !strings.Contains(err.Error(), "symlink") {
			t.Fatalf("symlinked cache: %v", err)
		}
		// The root itself as a symlink.
		link := filepath.Join(t.TempDir(), "caches")
		if err := os.Symlink(dir, link); err != nil {
			t.Fatal(err)
		}
		if _, err := Prepare(link, uid, cs); err == nil || !strings.Contains(err.Error(), "symlink") {
			t.Fatalf("symlinked root: %v", err)
		}
		// Control: the real directory in its place.
		os.Remove(filepath.Join(dir, "npm"))
		if err := os.Mkdir(filepath.Join(dir, "npm"), 0o700); err != nil {
			t.Fatal(err)
		}
		if _, err := Prepare(dir, uid, cs); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("not a directory", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "npm"), nil, 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := Prepare(dir, uid, cs)
		if err == nil || !strings.Contains(err.Error(), "not a directory") || !strings.Contains(err.Error(), filepath.Join(dir, "npm")) {
			t.Fatalf("file: %v", err)
		}
	})
	t.Run("writable by others", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.Mkdir(filepath.Join(dir, "npm"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(filepath.Join(dir, "npm"), 0o777); err != nil {
			t.Fatal(err)
		}
		if _, err := Prepare(dir, uid, cs); err == nil || !strings.Contains(err.Error(), "writable by others") {
			t.Fatalf("0777: %v", err)
		}
		if err := os.Chmod(filepath.Join(dir, "npm"), 0o755); err != nil {
			t.Fatal(err)
		}
		if _, err := Prepare(dir, uid, cs); err != nil {
			t.Fatalf("0755: %v", err)
		}
	})
	t.Run("foreign", func(t *testing.T) {
		dir := t.TempDir()
		// Another uid than the directory's owner stands for a foreign owner
		// without needing root to chown.
		_, err := Prepare(dir, uid+1, cs)
		if err == nil || !strings.Contains(err.Error(), "owned by uid") || !strings.Contains(err.Error(), dir) {
			t.Fatalf("foreign: %v", err)
		}
		if uid == 0 {
			sub := filepath.Join(dir, "npm")
			if err := os.Mkdir(sub, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(sub, 65534, 65534); err != nil {
				t.Fatal(err)
			}
			if _, err := Prepare(dir, 0, cs); err == nil || !strings.Contains(err.Error(), sub) {
				t.Fatalf("foreign cache dir: %v", err)
			}
			if err := os.Chown(sub, 0, 0); err != nil {
				t.Fatal(err)
			}
			if _, err := Prepare(dir, 0, cs); err != nil {
				t.Fatalf("control: %v", err)
			}
		}
	})
}
