package manager

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/internal/errdefs"
	"github.com/airlock-dev/airlock/internal/runtime/gvisor"
)

// The backend of a sandbox: the request's, else the policy's, else the
// daemon's default; one that is unknown, not offered or not installed is
// refused as invalid (400), naming it, never turned into a native sandbox.
func TestResolveRuntime(t *testing.T) {
	invalidWith := func(t *testing.T, c *Config, req *api.CreateSandboxRequest, want string) {
		t.Helper()
		_, _, err := c.resolve(req)
		if err == nil || !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), want) {
			t.Fatalf("%+v: %v, want an invalid-argument error containing %q", req, err, want)
		}
	}
	resolvesTo := func(t *testing.T, c *Config, req *api.CreateSandboxRequest, want string) {
		t.Helper()
		p, rec, err := c.resolve(req)
		if err != nil {
			t.Fatalf("%+v: %v", req, err)
		}
		if rec.Runtime != want || p.Runtime != want {
			t.Fatalf("%+v: runtime %q (policy %q), want %q", req, rec.Runtime, p.Runtime, want)
		}
	}

	// A daemon without gvisor (airlock mcp's private one).
	c := &Config{}
	invalidWith(t, c, &api.CreateSandboxRequest{Policy: "runtime: gvisor\n"}, "runtime gvisor: not offered")
	invalidWith(t, c, &api.CreateSandboxRequest{Runtime: "gvisor", Policy: "runtime: native\n"}, "runtime gvisor: not offered")
	invalidWith(t, c, &api.CreateSandboxRequest{Policy: "runtime: vm\n"}, `unknown runtime "vm"`)
	invalidWith(t, c, &api.CreateSandboxRequest{Runtime: "vm", Policy: "runtime: native\n"}, `unknown runtime "vm"`)
	resolvesTo(t, c, &api.CreateSandboxRequest{Runtime: "native", Policy: "runtime: gvisor\n"}, "native")
	for _, src := range []string{"runtime: native\n", "resources: {memory: 256MiB}\n"} {
		resolvesTo(t, c, &api.CreateSandboxRequest{Policy: src}, "native")
	}

	// gvisor offered, runsc missing: one line naming the install command.
	t.Setenv("AIRLOCK_RUNSC", filepath.Join(t.TempDir(), "runsc"))
	c = &Config{Runtimes: map[string]Backend{"gvisor": &gvisor.Runtime{Detached: true, Agent: true}}}
	invalidWith(t, c, &api.CreateSandboxRequest{Runtime: "gvisor", Policy: "{}\n"}, "install-runsc")
	invalidWith(t, c, &api.CreateSandboxRequest{Policy: "runtime: gvisor\n"}, "runtime gvisor: runsc (gVisor) is not installed")
	resolvesTo(t, c, &api.CreateSandboxRequest{Policy: "{}\n"}, "native")

	// Installed (any executable file is taken for runsc here; creating a
	// sandbox with it is the serve tests' business).
	exe := filepath.Join(t.TempDir(), "runsc")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("AIRLOCK_RUNSC", exe)
	resolvesTo(t, c, &api.CreateSandboxRequest{Runtime: "gvisor", Policy: "{}\n"}, "gvisor")
	resolvesTo(t, c, &api.CreateSandboxRequest{Policy: "runtime: gvisor\n"}, "gvisor")
	resolvesTo(t, c, &api.CreateSandboxRequest{Runtime: "native", Policy: "runtime: gvisor\n"}, "native")

	// default_runtime: gvisor unless the request or the policy says.
	c.DefaultRuntime = "gvisor"
	resolvesTo(t, c, &api.CreateSandboxRequest{Policy: "{}\n"}, "gvisor")
	resolvesTo(t, c, &api.CreateSandboxRequest{Policy: "runtime: native\n"}, "native")
	resolvesTo(t, c, &api.CreateSandboxRequest{Runtime: "native", Policy: "{}\n"}, "native")
}
