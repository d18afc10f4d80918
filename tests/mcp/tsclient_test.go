//go:build linux

package mcp_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"regexp"
	"strconv"
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
	dir := testdaemon.NPMInstall(t, "tsclient", "package.json", "package-lock.json", "client.mjs")

	nf := newNetFixture(t)
	conf := writeConfig(t, nf.config)
	args, _ := json.Marshal([]string{"mcp", "--config", conf, "--policy", "default", "--policy", "net", "--max-sandboxes", "2"})
	ctx2, cancel2 := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel2()
	run := exec.CommandContext(ctx2, "node", "client.mjs")
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
