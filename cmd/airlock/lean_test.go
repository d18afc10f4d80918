package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestLeanLinksNoDaemon: the lean build (`make build`'s bin/airlock) links
// none of the daemon's packages or their dependencies, whose initialisers
// would otherwise run on every `airlock run`; the complete program (the
// control) links all of them.
func TestLeanLinksNoDaemon(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command")
	}
	heavy := []string{
		"github.com/airlock-dev/airlock/internal/daemon",
		"github.com/airlock-dev/airlock/internal/server",
		"github.com/airlock-dev/airlock/internal/store",
		"github.com/airlock-dev/airlock/internal/mcpserver",
		"modernc.org/sqlite",
		"github.com/modelcontextprotocol/go-sdk/mcp",
		"google.golang.org/protobuf/proto",
	}
	deps := func(tags string) map[string]bool {
		// -e: the lean build embeds a file `make build` writes; listing
		// does not need it.
		out, err := exec.Command("go", "list", "-e", "-deps", "-tags", tags, ".").Output()
		if err != nil {
			t.Fatalf("go list -tags %s: %v", tags, err)
		}
		m := map[string]bool{}
		for _, p := range strings.Fields(string(out)) {
			m[p] = true
		}
		return m
	}
	lean, full := deps("airlock_init,airlock_lean"), deps("airlock_init")
	for _, p := range heavy {
		if lean[p] {
			t.Errorf("the lean airlock links %s", p)
		}
		if !full[p] {
			t.Errorf("the complete program does not link %s (the control)", p)
		}
	}
	if !lean["github.com/airlock-dev/airlock/internal/runtime/native"] || !lean["github.com/airlock-dev/airlock/internal/fullbin"] {
		t.Error("the lean airlock does not link the native runtime and the complete program it runs")
	}
}
