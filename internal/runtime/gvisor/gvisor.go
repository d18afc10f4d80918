// Package gvisor is airlock's second isolation tier: sandboxes run under
// gVisor's runsc, a user-space kernel (the Sentry) that implements Linux
// system calls itself, so code in the sandbox never talks to the host kernel
// directly. runsc is driven as an OCI runtime: the supervisor writes an OCI
// bundle (config.json from the opencontainers runtime-spec types), and runs
// `runsc run --detach`, `exec`, `kill`, `pause`, `resume` and `delete`.
//
// Inside, the container's PID 1 and every command's first step are airlock's
// own small init program (InitMain, ExecMain), bind-mounted read-only at
// /.airlock/init: it resolves the command (126/127), installs the policy's
// seccomp filter and executes the command. runsc applies its own seccomp and
// namespace sandboxing of the Sentry and Gofer; the host cgroup wraps the
// whole sandbox. This package never starts a sandbox with a policy feature
// it cannot enforce: such a spec is refused with ErrUnsupported, naming the
// feature.
package gvisor

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/airlock-dev/airlock/internal/errdefs"
)

// Version is the runsc release airlock is tested with and installs
// (scripts/install-runsc keeps the same value).
const Version = "v0.0.0-20260905035102-160fafc42237"

// Name is the runtime's name in policies, flags and the API.
const Name = "gvisor"

// InstallCommand is the one line that installs the pinned runsc.
const InstallCommand = "scripts/install-runsc (or: CGO_ENABLED=0 GOBIN=" + "/var/cache/airlock/runsc/" + Version + " go install gvisor.dev/gvisor/runsc@" + Version + ")"

// Arguments of the init program inside a gVisor sandbox.
const (
	InitArg  = "__sandbox-init-gvisor"
	ExecArg  = "__sandbox-init-gvisor-exec"
	RelayArg = "__sandbox-init-gvisor-relay"
)

// ErrUnsupported wraps errors for policy features the gvisor backend
// cannot enforce. It is an invalid-argument error (API 400, CLI 125).
var ErrUnsupported = fmt.Errorf("not supported by the gvisor runtime: %w", errdefs.ErrInvalid)

// ErrNotInstalled is returned when runsc cannot be found or run.
var ErrNotInstalled = errors.New("runsc (gVisor) is not installed")

// CacheDir is where scripts/install-runsc puts runsc:
// $AIRLOCK_RUNSC_CACHE or /var/cache/airlock/runsc.
func CacheDir() string {
	if d := os.Getenv("AIRLOCK_RUNSC_CACHE"); d != "" {
		return d
	}
	return "/var/cache/airlock/runsc"
}

// Find returns the runsc to use: $AIRLOCK_RUNSC, else the pinned version in
// CacheDir. The error is one line naming the install command.
func Find() (string, error) {
	p := os.Getenv("AIRLOCK_RUNSC")
	if p == "" {
		p = filepath.Join(CacheDir(), Version, "runsc")
	}
	fi, err := os.Stat(p)
	if err == nil && (!fi.Mode().IsRegular() || fi.Mode()&0o111 == 0) {
		err = errors.New("not an executable file")
	}
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return "", fmt.Errorf("%w: %s: %v; install it with %s, or set AIRLOCK_RUNSC", ErrNotInstalled, p, err, InstallCommand)
	}
	return p, nil
}
