//go:build linux

package mcp_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-dev/airlock/client"
	"github.com/airlock-dev/airlock/internal/testdaemon"
)

const nobodyID = 65534

// TestRootlessStandalone: as a user (nobody), a standalone server without
// a cgroup for its sandboxes refuses to start and says what to add;
// with insecure no_cgroups in --config it starts and runs a command.
func TestRootlessStandalone(t *testing.T) {
	testdaemon.Need(t)
	if _, err := os.Stat("/proc/sys/kernel/unprivileged_userns_clone"); err == nil {
		if b, _ := os.ReadFile("/proc/sys/kernel/unprivileged_userns_clone"); strings.TrimSpace(string(b)) == "0" {
			t.Skip("unprivileged user namespaces are off")
		}
	}
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		os.Chmod(d, 0o755)
	}
	conf := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(conf, []byte("insecure: {no_cgroups: true}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cred := &syscall.Credential{Uid: nobodyID, Gid: nobodyID, Groups: []uint32{}}
	env := []string{"XDG_RUNTIME_DIR=", "HOME=/", "AIRLOCK_HOST="}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, testdaemon.Bin, "mcp", "--standalone")
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || !strings.Contains(string(out), "cgroup_parent") || !strings.Contains(string(out), "no_cgroups") || strings.Count(strings.TrimSpace(string(out)), "\n") != 0 {
		t.Fatalf("rootless standalone without a cgroup: %v\n%s", err, out)
	}

	s := startArgvAs(t, env, []string{"airlock", "mcp", "--config", conf}, cred)
	var sb sandboxRes
	s.ok(t, "create_sandbox", m{}, &sb)
	var r runRes
	s.ok(t, "run_command", m{"sandbox_id": sb.SandboxID, "command": "id -u; echo rootless"}, &r)
	if r.Stdout != "0\nrootless\n" {
		t.Fatalf("rootless run_command: %+v", r)
	}
}

// TestStdioSIGTERM: a stdio server told to stop with SIGTERM destroys its
// sandboxes and exits 0. The test owns the process (its pipes and its
// Wait), so that the exit status is its own to read.
func TestStdioSIGTERM(t *testing.T) {
	d := testdaemon.Start(t, "")
	cmd := exec.Command(testdaemon.Bin, "mcp", "--host", "unix://"+d.Sock)
	errb := &testdaemon.LockedBuffer{}
	cmd.Stderr = errb
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-done
		done <- nil
		if t.Failed() {
			t.Logf("airlock mcp stderr:\n%s", errb.String())
		}
	})
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "airlock-test", Version: "1"}, nil).Connect(ctxT(t), &mcp.IOTransport{Reader: stdout, Writer: stdin}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	s := &server{cs: cs}
	var sb sandboxRes
	s.ok(t, "create_sandbox", m{}, &sb)
	if _, err := d.C.GetSandbox(ctxT(t), sb.SandboxID); err != nil {
		t.Fatal(err)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-done:
		done <- err
		if err != nil {
			t.Fatalf("airlock mcp after SIGTERM: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("airlock mcp still running 60s after SIGTERM")
	}
	if _, err := d.C.GetSandbox(ctxT(t), sb.SandboxID); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("the server's sandbox after SIGTERM: %v", err)
	}
}
