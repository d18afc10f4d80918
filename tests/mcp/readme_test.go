//go:build linux

package mcp_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/internal/testdaemon"
)

// readmeSection returns the README's MCP section.
func readmeSection(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i := strings.Index(s, "\n## MCP")
	if i < 0 {
		t.Fatal("README has no MCP section")
	}
	s = s[i+1:]
	if j := strings.Index(s, "\n## "); j >= 0 {
		s = s[:j]
	}
	return s
}

// TestReadme: the README's Claude Desktop JSON and its `claude mcp add`
// line start a real server that creates a sandbox and runs a command;
// the README's tool list is the server's; the operator flags it shows
// exist.
func TestReadme(t *testing.T) {
	testdaemon.Need(t)
	sec := readmeSection(t)

	blocks := regexp.MustCompile("(?s)```json\n(.*?)```").FindAllStringSubmatch(sec, -1)
	if len(blocks) != 1 {
		t.Fatalf("want one JSON block in the MCP section, found %d", len(blocks))
	}
	var desktop struct {
		MCPServers map[string]struct {
			Command string   `json:"command"`
			Args    []string `json:"args"`
		} `json:"mcpServers"`
	}
	if err := json.Unmarshal([]byte(blocks[0][1]), &desktop); err != nil {
		t.Fatalf("the Claude Desktop JSON: %v", err)
	}
	entry, ok := desktop.MCPServers["airlock"]
	if !ok {
		t.Fatalf("no airlock server in the JSON: %+v", desktop)
	}
	line := regexp.MustCompile(`(?m)^claude mcp add airlock -- (.+)$`).FindStringSubmatch(sec)
	if line == nil {
		t.Fatal("no `claude mcp add airlock -- ...` line")
	}
	var names []string
	for _, m := range regexp.MustCompile("(?m)^- `([a-z_]+)`: ").FindAllStringSubmatch(sec, -1) {
		names = append(names, m[1])
	}

	for what, argv := range map[string][]string{
		"claude_desktop_config.json": append([]string{entry.Command}, entry.Args...),
		"claude mcp add":             strings.Fields(line[1]),
	} {
		t.Run(strings.ReplaceAll(what, " ", "_"), func(t *testing.T) {
			s := startArgv(t, nil, argv)
			tools, err := s.cs.ListTools(ctxT(t), nil)
			if err != nil {
				t.Fatal(err)
			}
			var served []string
			for _, tool := range tools.Tools {
				served = append(served, tool.Name)
			}
			slices.Sort(served)
			if listed := slices.Sorted(slices.Values(names)); !slices.Equal(served, listed) {
				t.Fatalf("the README lists the tools %v; the server offers %v", names, served)
			}
			var sb sandboxRes
			s.ok(t, "create_sandbox", m{}, &sb)
			var r runRes
			s.ok(t, "run_command", m{"sandbox_id": sb.SandboxID, "command": "echo from the readme"}, &r)
			if r.Stdout != "from the readme\n" {
				t.Fatalf("run_command: %+v", r)
			}
		})
	}

	help, err := exec.Command(testdaemon.Bin, "mcp", "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("airlock mcp --help: %v", err)
	}
	flags := regexp.MustCompile(`(?m)^(?:airlock mcp)?\s+(--[a-z-]+) `).FindAllStringSubmatch(sec, -1)
	if len(flags) < 5 {
		t.Fatalf("the operator flags block: found %d flags", len(flags))
	}
	for _, f := range flags {
		if !strings.Contains(string(help), f[1]+" ") {
			t.Errorf("the README shows %s, which airlock mcp does not have", f[1])
		}
	}
}
