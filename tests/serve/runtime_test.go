//go:build linux

package serve

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/api"
)

// A configured policy asking for a backend the daemon does not offer stops
// the daemon at start, naming it (never native sandboxes for it); the same
// policy with runtime native serves sandboxes.
func TestPolicyRuntimeConfig(t *testing.T) {
	need(t)
	dir := t.TempDir()
	pol := filepath.Join(dir, "g.yaml")
	if err := os.WriteFile(pol, []byte("runtime: gvisor\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "c.yaml")
	conf := "socket: " + filepath.Join(dir, "s.sock") + "\ndata_dir: " + filepath.Join(dir, "data") + "\nstate_dir: " + filepath.Join(dir, "state") + "\npolicies:\n  g: " + pol + "\n"
	if err := os.WriteFile(cfg, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	out, err := exec.CommandContext(ctx, airlockBin, "serve", "--config", cfg).CombinedOutput()
	cancel()
	if err == nil || !strings.Contains(string(out), "policies.g: runtime gvisor") {
		t.Fatalf("serve with a gvisor policy: err %v, want a start failure naming it\n%s", err, out)
	}
	// Control: runtime native.
	nat := filepath.Join(dir, "n.yaml")
	if err := os.WriteFile(nat, []byte("runtime: native\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, "policies:\n  n: "+nat+"\n")
	sb := d.create(t, &api.CreateSandboxRequest{PolicyName: "n"})
	res, err := d.c.Exec(ctxT(t), sb.ID, &api.ExecRequest{Argv: []string{"true"}})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("exec in a runtime: native sandbox: %+v %v", res, err)
	}
}
