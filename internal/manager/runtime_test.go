package manager

import (
	"errors"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/internal/errdefs"
)

// A policy asking for a backend the daemon does not offer is refused as
// invalid (400), naming it, never turned into a native sandbox.
func TestResolveRuntime(t *testing.T) {
	c := &Config{}
	_, _, err := c.resolve(&api.CreateSandboxRequest{Policy: "runtime: gvisor\n"})
	if err == nil || !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), "runtime gvisor") {
		t.Fatalf("runtime gvisor: %v, want an invalid-argument error naming it", err)
	}
	_, _, err = c.resolve(&api.CreateSandboxRequest{Policy: "runtime: vm\n"})
	if err == nil || !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), `unknown runtime "vm"`) {
		t.Fatalf("runtime vm: %v, want an invalid-argument error", err)
	}
	_, _, err = c.resolve(&api.CreateSandboxRequest{Runtime: "gvisor", Policy: "runtime: native\n"})
	if err == nil || !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), "runtime gvisor") {
		t.Fatalf("request runtime gvisor: %v, want an invalid-argument error naming it", err)
	}
	_, _, err = c.resolve(&api.CreateSandboxRequest{Runtime: "vm", Policy: "runtime: native\n"})
	if err == nil || !errors.Is(err, errdefs.ErrInvalid) {
		t.Fatalf("request runtime vm: %v, want an invalid-argument error", err)
	}
	if _, _, err := c.resolve(&api.CreateSandboxRequest{Runtime: "native", Policy: "runtime: gvisor\n"}); err != nil {
		t.Fatalf("request runtime native over a gvisor policy: %v", err)
	}
	// Control: native (and no runtime) resolve.
	for _, src := range []string{"runtime: native\n", "resources: {memory: 256MiB}\n"} {
		if _, _, err := c.resolve(&api.CreateSandboxRequest{Policy: src}); err != nil {
			t.Fatalf("%q: %v", src, err)
		}
	}
}
