package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestLeanForwardsDaemonCommands: the lean airlock (what `make build` and
// the tests build) leaves serve, mcp and doctor to the complete program
// it carries: their help is the complete program's, for the root user and
// for nobody (a sealed memfd then), and a daemon started with it runs the
// complete program in the same process (its pid is airlock's), from
// root's read-only copy of this build. The control: `run`'s help comes
// from the lean program itself.
func TestLeanForwardsDaemonCommands(t *testing.T) {
	for _, o := range []opts{{}, {nobody: true}} {
		for _, args := range [][]string{{"serve", "--help"}, {"help", "serve"}, {"mcp", "--help"}, {"doctor", "--help"}} {
			r := airlock(t, o, args...)
			if r.code != 0 {
				t.Fatalf("airlock %v (nobody %v): exit %d\n%s", args, o.nobody, r.code, r)
			}
			want := map[string]string{"serve": "Sandboxes outlive the daemon", "help": "Sandboxes outlive the daemon", "mcp": "create_sandbox", "doctor": "self-test sandbox"}[args[0]]
			if !strings.Contains(r.stdout, want) {
				t.Errorf("airlock %v (nobody %v) printed no %q: the complete program's help\n%s", args, o.nobody, want, r)
			}
		}
	}
	if r := airlock(t, opts{}, "run", "--help"); r.code != 0 || !strings.Contains(r.stdout, "--workspace") {
		t.Fatalf("control: airlock run --help\n%s", r)
	}

	needRoot(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "cfg.yaml")
	sock := filepath.Join(dir, "sock")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("socket: %s\ndata_dir: %s\nstate_dir: %s\n", sock, filepath.Join(dir, "data"), filepath.Join(dir, "state"))), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := command(ctx, opts{}, "serve", "--config", cfg)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Signal(unix.SIGTERM)
		cmd.Wait()
	}()
	for i := 0; i < 300; i++ {
		if _, err := os.Stat(sock); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := os.Stat(sock); err != nil {
		t.Fatalf("the daemon made no socket within 6 s: %v", err)
	}
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Dir(exe) != "/run/airlock/full" || !strings.HasPrefix(filepath.Base(exe), "airlock-full-") {
		t.Fatalf("the daemon (pid %d, airlock's) runs %q, want root's copy of the complete program in /run/airlock/full", cmd.Process.Pid, exe)
	}
	var st unix.Stat_t
	if err := unix.Stat(exe, &st); err != nil || st.Uid != 0 || st.Mode&0o222 != 0 {
		t.Errorf("%s: uid %d mode %o (%v): want root's, writable by nobody", exe, st.Uid, st.Mode, err)
	}
	if out, err := exec.CommandContext(ctx, airlockBin, "--host", "unix://"+sock, "ls").CombinedOutput(); err != nil {
		t.Fatalf("airlock ls against the forwarded daemon: %v\n%s", err, out)
	}
}
