//go:build linux

package mcp_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/testdaemon"
)

// TestTypeScriptClient: the official TypeScript MCP SDK's client (pinned
// by tsclient/package-lock.json, installed with npm ci) drives a
// standalone airlock mcp through every tool with checks; it validates
// each structured result against the tool's output schema. A command
// longer than the request's timeout completes because progress resets it.
func TestTypeScriptClient(t *testing.T) {
	testdaemon.Need(t)
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed (the project's CI installs it)")
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		t.Skip("npm is not installed (the project's CI installs it)")
	}
	v, err := exec.Command(node, "-p", "process.versions.node.split('.')[0]").Output()
	if n, _ := strconv.Atoi(strings.TrimSpace(string(v))); err != nil || n < 18 {
		t.Skipf("node %s is older than 18", strings.TrimSpace(string(v)))
	}
	dir := t.TempDir()
	for _, f := range []string{"package.json", "package-lock.json", "client.mjs"} {
		b, err := os.ReadFile(filepath.Join("tsclient", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ci := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund", "--loglevel=error")
	ci.Dir = dir
	if out, err := ci.CombinedOutput(); err != nil {
		t.Fatalf("npm ci: %v\n%s", err, out)
	}

	nf := newNetFixture(t)
	conf := writeConfig(t, nf.config)
	args, _ := json.Marshal([]string{"mcp", "--config", conf, "--policy", "default", "--policy", "net", "--max-sandboxes", "2"})
	ctx2, cancel2 := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel2()
	run := exec.CommandContext(ctx2, node, "client.mjs")
	run.Dir = dir
	run.Env = append(os.Environ(), "AIRLOCK_BIN="+testdaemon.Bin, "MCP_ARGS="+string(args), "NET_PORT="+nf.port)
	out, err := run.CombinedOutput()
	if err != nil {
		t.Fatalf("the TypeScript client: %v\n%s", err, testdaemon.Tail(string(out), 60))
	}
	m := regexp.MustCompile(`(?m)^(\d+) checks passed$`).FindStringSubmatch(string(out))
	if m == nil {
		t.Fatalf("the TypeScript client did not report its checks:\n%s", out)
	}
	if n, _ := strconv.Atoi(m[1]); n < 100 {
		t.Fatalf("only %d checks ran", n)
	}
	t.Logf("TypeScript MCP client: %s checks passed", m[1])
}
