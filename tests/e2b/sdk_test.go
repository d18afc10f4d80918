//go:build linux

package e2b_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/client"
	"github.com/airlock-dev/airlock/internal/testdaemon"
)

// installSDK installs the pinned E2B SDK (npm ci) and the test program into
// a temporary directory, or skips without node and npm.
func installSDK(t *testing.T) string {
	t.Helper()
	return testdaemon.NPMInstall(t, "sdk", "package.json", "package-lock.json", "run.mjs")
}

// TestSDK runs the official E2B SDK against a daemon: every step of
// sdk/run.mjs, then checks from airlock's own API that the SDK's writes
// landed and that the sandbox it killed is gone.
func TestSDK(t *testing.T) {
	testdaemon.Need(t)
	dir := installSDK(t)
	addr := testdaemon.FreeAddr(t)
	d := testdaemon.Start(t, "listen: "+addr+"\ne2b_domain: e2b.test")
	key := d.Key(t, "e2b-sdk")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "run.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "E2B_API_URL=http://"+addr, "E2B_SANDBOX_URL=http://"+addr,
		"E2B_API_KEY="+key, "E2B_DOMAIN=e2b.test", "RUN_ID="+filepath.Base(dir))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	steps := map[string]map[string]any{}
	var order []string
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) != nil {
			t.Logf("node: %s", sc.Text())
			continue
		}
		name, _ := m["step"].(string)
		steps[name] = m
		order = append(order, name)
	}
	io.Copy(io.Discard, out)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("the SDK program failed after steps %v: %v\n%s", order, err, stderr.String())
	}
	want := []string{"create", "run", "exit-error", "background", "stdin", "pty", "files", "list", "pause-connect", "timeout-info", "port", "keep", "kill", "errors", "done"}
	if strings.Join(order, ",") != strings.Join(want, ",") {
		t.Fatalf("steps %v, want %v", order, want)
	}
	t.Logf("SDK steps passed: %v (preview host %v)", order, steps["port"]["host"])
	killed, _ := steps["done"]["killed"].(string)
	keep, _ := steps["done"]["keep"].(string)

	// From /v1: the killed sandbox is gone, the kept one has the files.
	c := d.C
	if _, err := c.GetSandbox(ctx, killed); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("the sandbox the SDK killed: GetSandbox err %v, want not found", err)
	}
	for path, content := range map[string]string{"from-sdk.txt": "written by the e2b sdk\n", "/workspace/from-cmd.txt": "made by a command\n"} {
		rc, _, err := c.ReadFile(ctx, keep, path, client.DownloadOptions{})
		if err != nil {
			t.Errorf("read %s from /v1: %v", path, err)
			continue
		}
		b, _ := io.ReadAll(rc)
		rc.Close()
		if string(b) != content {
			t.Errorf("%s: %q, want %q", path, b, content)
		}
	}
	sb, err := c.GetSandbox(ctx, keep)
	if err != nil || sb.Labels["role"] != "keep" || sb.State != "running" {
		t.Errorf("the kept sandbox from /v1: %+v, %v", sb, err)
	}
	// Every preview request was logged.
	if !strings.Contains(d.Logs(), "port=8000") {
		t.Errorf("no log line for the preview requests")
	}
}
