//go:build linux

package serve

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/api"
)

// TestConfigImageLayout: the daemon refuses, at start, a configured image
// whose /dev is a symlink, naming the image and the path; a configured
// image with a directory there loads and a sandbox starts from it
// (control).
func TestConfigImageLayout(t *testing.T) {
	need(t)
	parent := t.TempDir()
	os.Chmod(parent, 0o755)
	bad, good := filepath.Join(parent, "bad"), filepath.Join(parent, "good")
	for _, d := range []string{bad, filepath.Join(good, "dev")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("/etc", filepath.Join(bad, "dev")); err != nil {
		t.Fatal(err)
	}

	cfg := filepath.Join(parent, "config.yaml")
	conf := fmt.Sprintf("socket: %s\ndata_dir: %s\nstate_dir: %s\nimages:\n  bad: %s\n",
		filepath.Join(parent, "sock"), filepath.Join(parent, "data"), filepath.Join(parent, "state"), bad)
	if err := os.WriteFile(cfg, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, airlockBin, "serve", "--config", cfg)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	want := "config: images.bad: image " + bad + ": /dev is a symlink (to /etc); the sandbox mounts its own /dev there: make it a directory"
	if err == nil || ctx.Err() != nil || !strings.Contains(out.String(), want) {
		t.Fatalf("serve with a hostile image: %v, want a refusal naming %q\n%s", err, want, out.String())
	}

	// Control: the same configuration with a correct image.
	d := startDaemon(t, "images:\n  good: "+good+"\n")
	sb := d.create(t, &api.CreateSandboxRequest{Image: "good"})
	if sb.State != api.StateRunning {
		t.Fatalf("sandbox from the good image: %+v", sb)
	}
}
