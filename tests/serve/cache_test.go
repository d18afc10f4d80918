//go:build linux

package serve

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/client"
)

// The API's caches field: a cache persists between two sandboxes of the
// daemon (the first deleted before the second exists), lives in
// <data_dir>/caches, sets its tool's variables unless env does, comes from
// a named policy too, and bad caches are 400s that leave nothing behind.
func TestCaches(t *testing.T) {
	need(t)
	pol := filepath.Join(t.TempDir(), "gocache.yaml")
	if err := os.WriteFile(pol, []byte("caches: [go]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, "policies:\n  gocache: "+pol+"\n")
	ctx := ctxT(t)
	dir := filepath.Join(d.dir, "data", "caches")

	tok := strings.Repeat("c4", 8)
	a := d.create(t, &api.CreateSandboxRequest{Caches: []string{"npm", "tools:/opt/tools"}})
	out := d.sh(t, a.ID, "echo "+tok+" > /cache/npm/tok && echo x > /opt/tools/x && echo $npm_config_cache")
	if out != "/cache/npm\n" {
		t.Errorf("npm_config_cache = %q", out)
	}
	if err := d.c.DeleteSandbox(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{dir, filepath.Join(dir, "npm"), filepath.Join(dir, "tools")} {
		fi, err := os.Lstat(p)
		if err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 || fi.Sys().(*syscall.Stat_t).Uid != 0 {
			t.Errorf("%s on the host: %v %v", p, fi, err)
		}
	}
	if fi, err := os.Stat(filepath.Join(dir, "npm", "tok")); err != nil || fi.Sys().(*syscall.Stat_t).Uid != 0 {
		t.Errorf("the token on the host is not root's: %v", err)
	}

	// A second sandbox reads it; env wins over the cache's variable.
	b := d.create(t, &api.CreateSandboxRequest{Caches: []string{"npm"}, Env: map[string]string{"npm_config_cache": "/tmp/npm"}})
	if out := d.sh(t, b.ID, "cat /cache/npm/tok; echo $npm_config_cache"); out != tok+"\n/tmp/npm\n" {
		t.Errorf("second sandbox: %q", out)
	}
	// From a named policy.
	g := d.create(t, &api.CreateSandboxRequest{PolicyName: "gocache"})
	if out := d.sh(t, g.ID, "echo $GOCACHE $GOMODCACHE; touch /cache/go/w && echo ok"); out != "/cache/go/build /cache/go/mod\nok\n" {
		t.Errorf("named policy: %q", out)
	}
	// Control: no caches, no /cache and no variable.
	n := d.create(t, nil)
	if out := d.sh(t, n.ID, "test -e /cache && echo present; echo ${npm_config_cache-unset}"); out != "unset\n" {
		t.Errorf("without caches: %q", out)
	}

	// Bad caches: 400 naming the problem, no sandbox made.
	before, err := d.c.AllSandboxes(ctx, client.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	many := make([]string, 33)
	for i := range many {
		many[i] = "c" + strings.Repeat("x", i) + ":/opt/c" + strings.Repeat("x", i)
	}
	for _, c := range []struct {
		caches []string
		want   string
	}{
		{[]string{"golang"}, `unknown cache "golang"`},
		{[]string{"x:/workspace/x"}, "/workspace is the sandbox's own"},
		{[]string{"../x:/opt/x"}, "cache name"},
		{[]string{"npm", "npm"}, "given twice"},
		{many, "the limit is 32"},
	} {
		_, err := d.c.CreateSandbox(ctx, &api.CreateSandboxRequest{Caches: c.caches})
		wantCode(t, "caches "+strings.Join(c.caches, ","), err, 400)
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("caches %q: %v, want %q", c.caches, err, c.want)
		}
	}
	// A cache directory swapped for a symlink is refused, naming it.
	elsewhere := t.TempDir()
	if err := os.Symlink(elsewhere, filepath.Join(dir, "pip")); err != nil {
		t.Fatal(err)
	}
	_, err = d.c.CreateSandbox(ctx, &api.CreateSandboxRequest{Caches: []string{"pip"}})
	if err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "pip")) || !strings.Contains(err.Error(), "symlink") {
		t.Errorf("symlinked cache: %v", err)
	}
	after, err := d.c.AllSandboxes(ctx, client.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(after) != len(before) {
		t.Errorf("refused creations left sandboxes: %d before, %d after", len(before), len(after))
	}

	// The CLI: airlock create --cache.
	cmd := exec.CommandContext(ctx, airlockBin, "create", "--cache", "npm")
	cmd.Env = append(os.Environ(), "AIRLOCK_HOST=unix://"+d.sock)
	outb, err := cmd.Output()
	id := strings.TrimSpace(string(outb))
	if err != nil || !strings.HasPrefix(id, "sb-") {
		t.Fatalf("airlock create --cache npm: %q %v", outb, err)
	}
	if out := d.sh(t, id, "cat /cache/npm/tok"); out != tok+"\n" {
		t.Errorf("airlock create --cache: %q", out)
	}
	cmd = exec.CommandContext(context.WithoutCancel(ctx), airlockBin, "create", "--cache", "golang")
	cmd.Env = append(os.Environ(), "AIRLOCK_HOST=unix://"+d.sock)
	if outb, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(outb), "unknown cache") {
		t.Errorf("airlock create --cache golang: %q %v", outb, err)
	}
}
