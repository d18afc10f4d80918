//go:build linux

package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestCgoBuildRefused: an airlock built with cgo (a plain `go build` where
// a C compiler is installed) cannot drop its init's privileges on every
// thread; it refuses to start a sandbox, naming the layer and the fix,
// instead of failing deep in the init. The control: the binary under test
// (CGO_ENABLED=0, as make builds it) runs the same command.
func TestCgoBuildRefused(t *testing.T) {
	needRoot(t)
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("no C compiler: a cgo build cannot be made here")
	}
	mustOK(t, run(t, opts{}, nil, "true"), "control: the CGO_ENABLED=0 build")
	bin := filepath.Join(t.TempDir(), "airlock-cgo")
	build := exec.Command("go", "build", "-o", bin, "./cmd/airlock")
	build.Dir = "../.."
	build.Env = append(os.Environ(), "CGO_ENABLED=1")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("cgo build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "run", "--", "true").CombinedOutput()
	code := -1
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	}
	if code != 125 || !strings.Contains(string(out), "built with cgo") || !strings.Contains(string(out), "CGO_ENABLED=0") {
		t.Fatalf("cgo build: exit %d (want 125 naming cgo and the fix)\n%s", code, out)
	}
}
