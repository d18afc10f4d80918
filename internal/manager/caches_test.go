package manager

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/internal/errdefs"
	"github.com/airlock-dev/airlock/internal/policy"
)

// The request's caches add to the policy's, set their variables (the
// request's env wins), and are prepared in the daemon's cache directory;
// bad ones are invalid, and a daemon without a cache directory refuses
// them.
func TestResolveCaches(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "caches")
	c := &Config{Policies: map[string]*policy.Policy{"default": {Caches: []string{"go"}}}, CacheDir: dir}
	p, rec, err := c.resolve(&api.CreateSandboxRequest{Caches: []string{"npm"}, Env: map[string]string{"GOCACHE": "/tmp/gc"}})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(p.Caches, ",") != "go,npm" || strings.Join(rec.Caches, ",") != "npm" {
		t.Errorf("caches: policy %q, record %q", p.Caches, rec.Caches)
	}
	if rec.Env["GOCACHE"] != "/tmp/gc" || rec.Env["GOMODCACHE"] != "/cache/go/mod" || rec.Env["npm_config_cache"] != "/cache/npm" {
		t.Errorf("env: %v", rec.Env)
	}
	if c.Policies["default"].Caches[0] != "go" || len(c.Policies["default"].Caches) != 1 {
		t.Errorf("the configured policy was changed: %q", c.Policies["default"].Caches)
	}
	ms, err := c.prepareCaches(context.Background(), p)
	if err != nil || len(ms) != 2 || ms[1].Source != filepath.Join(dir, "npm") {
		t.Fatalf("prepare: %+v %v", ms, err)
	}
	if fi, err := os.Lstat(filepath.Join(dir, "npm")); err != nil || !fi.IsDir() {
		t.Errorf("not made: %v", err)
	}
	for _, bad := range [][]string{{"golang"}, {"x:/workspace"}, {"npm", "npm"}, {"go"}} {
		_, _, err := c.resolve(&api.CreateSandboxRequest{Caches: bad})
		if !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("caches %q: %v, want invalid", bad, err)
		}
	}
	none := &Config{Policies: map[string]*policy.Policy{"default": {}}}
	if _, _, err := none.resolve(&api.CreateSandboxRequest{Caches: []string{"npm"}}); !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), "no caches") {
		t.Errorf("daemon without caches: %v", err)
	}
	if _, _, err := none.resolve(&api.CreateSandboxRequest{}); err != nil {
		t.Errorf("control: %v", err)
	}
}
