package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestInitLinksNoPolicyParser: the sandbox init links neither the policy
// package nor its YAML parser, whose package initialisers (about 270
// allocations) would run in every sandbox, native or gVisor; airlock itself
// (the control) links both, to read policy files.
func TestInitLinksNoPolicyParser(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command")
	}
	deps := func(dir, tags string) map[string]bool {
		out, err := exec.Command("go", "list", "-e", "-deps", "-tags", tags, dir).Output()
		if err != nil {
			t.Fatalf("go list %s: %v", dir, err)
		}
		m := map[string]bool{}
		for _, p := range strings.Fields(string(out)) {
			m[p] = true
		}
		return m
	}
	initDeps, airlockDeps := deps(".", ""), deps("../airlock", "airlock_init,airlock_lean")
	for _, p := range []string{"gopkg.in/yaml.v3", "github.com/airlock-dev/airlock/internal/policy"} {
		if initDeps[p] {
			t.Errorf("the init links %s", p)
		}
		if !airlockDeps[p] {
			t.Errorf("airlock does not link %s (the control)", p)
		}
	}
}
