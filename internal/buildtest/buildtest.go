// Package buildtest builds the airlock binary for tests and benchmarks the
// way `make build` does: the sandbox init (cmd/airlock-init) and the
// runtime-free PID 1 (cmd/airlock-pid1) first, then the complete program
// embedding them, then the lean airlock embedding all three, through a build
// overlay, so the source tree is not written and concurrent
// builds do not race on the embedded files.
package buildtest

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strings"
)

// Airlock builds the lean airlock (with its init and the complete program
// embedded) at out. It must run inside
// the module (any directory of it).
func Airlock(out string) error {
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "airlock-build-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	id := make([]byte, 8)
	rand.Read(id)
	ldflags := "-X github.com/airlock-dev/airlock/internal/initbin.BuildID=" + hex.EncodeToString(id)
	initBin := filepath.Join(tmp, "airlock-init")
	if err := goBuild(root, "-ldflags", ldflags, "-o", initBin, "./cmd/airlock-init"); err != nil {
		return err
	}
	pid1Bin := filepath.Join(tmp, "airlock-pid1")
	if err := pid1(root, pid1Bin, ldflags); err != nil {
		return err
	}
	fullBin := filepath.Join(tmp, "airlock-full")
	overlayFile := filepath.Join(tmp, "overlay.json")
	if err := writeOverlay(overlayFile, map[string]string{
		filepath.Join(root, "internal", "initbin", "airlock-init"): initBin,
		filepath.Join(root, "internal", "initbin", "airlock-pid1"): pid1Bin,
		filepath.Join(root, "internal", "fullbin", "airlock-full"): fullBin,
	}); err != nil {
		return err
	}
	if err := goBuild(root, "-tags", "airlock_init", "-overlay", overlayFile, "-ldflags", ldflags, "-o", fullBin, "./cmd/airlock"); err != nil {
		return err
	}
	return goBuild(root, "-tags", "airlock_init,airlock_lean", "-overlay", overlayFile, "-ldflags", ldflags, "-o", out, "./cmd/airlock")
}

// Pid1 builds cmd/airlock-pid1 at out as `make build` does, for build
// buildID: with its own entry point on linux/amd64, an empty file elsewhere
// (ok is then false).
func Pid1(out, buildID string) (ok bool, err error) {
	root, err := moduleRoot()
	if err != nil {
		return false, err
	}
	err = pid1(root, out, "-X github.com/airlock-dev/airlock/internal/initbin.BuildID="+buildID)
	return goruntime.GOOS == "linux" && goruntime.GOARCH == "amd64", err
}

func pid1(root, out, ldflags string) error {
	if goruntime.GOOS != "linux" || goruntime.GOARCH != "amd64" {
		return os.WriteFile(out, nil, 0o644)
	}
	return goBuild(root, "-ldflags", ldflags+" -E main.start", "-o", out, "./cmd/airlock-pid1")
}

func moduleRoot() (string, error) {
	gomod, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	return filepath.Dir(strings.TrimSpace(string(gomod))), nil
}

// writeOverlay writes a `go build -overlay` file that puts each built
// program where its package embeds it from, without writing the source tree.
func writeOverlay(path string, replace map[string]string) error {
	b, err := json.Marshal(map[string]map[string]string{"Replace": replace})
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

func goBuild(dir string, args ...string) error {
	cmd := exec.Command("go", append([]string{"build", "-trimpath"}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}
