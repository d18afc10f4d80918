//go:build linux

package serve

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/client"
	"github.com/airlock-dev/airlock/internal/testdaemon"
)

// A second daemon on a data or state directory that a running daemon holds
// is refused at start with the first one's pid, and changes nothing: the
// first daemon's sandbox keeps running and stays in its store. Control: a
// second daemon with directories of its own starts and serves.
func TestSecondDaemonRefused(t *testing.T) {
	d := startDaemon(t, "")
	sb := d.create(t, nil)
	first := d.Pid()
	dataDir := filepath.Join(d.dir, "data")

	// second starts `airlock serve` on its own socket with the given
	// directories and waits until it exits or is ready.
	second := func(name, data, state string) (exited bool, out string) {
		t.Helper()
		dir := t.TempDir()
		os.Chmod(dir, 0o711)
		sock := filepath.Join(dir, "airlock.sock")
		cfg := filepath.Join(dir, "config.yaml")
		conf := fmt.Sprintf("socket: %s\ndata_dir: %s\nstate_dir: %s\n", sock, data, state)
		if err := os.WriteFile(cfg, []byte(conf), 0o600); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(airlockBin, "serve", "--config", cfg)
		logs := &testdaemon.LockedBuffer{}
		cmd.Stdout, cmd.Stderr = logs, logs
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		c, err := client.New("unix://"+sock, "")
		if err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			select {
			case err := <-done:
				if err == nil {
					t.Errorf("%s: the second daemon exited with status 0", name)
				}
				return true, logs.String()
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			ready := c.Ready(ctx) == nil
			cancel()
			if ready {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		cmd.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		return false, logs.String()
	}

	for _, c := range []struct{ name, data, state, dirName string }{
		{"same data directory", dataDir, filepath.Join(t.TempDir(), "state"), "data directory " + dataDir},
		{"same state directory", filepath.Join(t.TempDir(), "data"), d.stateDir, "state directory " + d.stateDir},
	} {
		exited, out := second(c.name, c.data, c.state)
		if !exited {
			t.Errorf("%s: a second daemon started and served:\n%s", c.name, out)
			continue
		}
		if !strings.Contains(out, c.dirName) || !strings.Contains(out, "pid "+strconv.Itoa(first)) {
			t.Errorf("%s: the refusal does not name the directory and pid %d:\n%s", c.name, first, out)
		}
	}
	// The first daemon and its sandbox are untouched.
	if got := d.sh(t, sb.ID, "echo alive"); got != "alive\n" {
		t.Fatalf("the first daemon's sandbox after the refusals: %q", got)
	}
	if got, err := d.c.GetSandbox(ctxT(t), sb.ID); err != nil || got.State != "running" {
		t.Fatalf("the first daemon's sandbox: %+v %v", got, err)
	}

	// Control: its own directories.
	own := t.TempDir()
	os.Chmod(own, 0o711)
	if exited, out := second("own directories", filepath.Join(own, "data"), filepath.Join(own, "state")); exited {
		t.Fatalf("a daemon with directories of its own did not start:\n%s", out)
	}
}
