//go:build !linux

package native

import (
	"context"
	"errors"

	"github.com/airlock-dev/airlock/internal/runtime"
	"github.com/airlock-dev/airlock/internal/uidpool"
)

// InitArg is the hidden subcommand that makes the airlock binary act as a
// sandbox's init.
const InitArg = "__sandbox-init"

// ReapArg is the hidden subcommand of the reaper.
const ReapArg = "__sandbox-reap"

// Runtime is the native runtime; it needs Linux.
type Runtime struct {
	Exe       string
	StateRoot string
	Reaper    bool
	UIDPool   *uidpool.Pool
}

// ErrUnsupported is returned on operating systems other than Linux.
var ErrUnsupported = errors.New("the native runtime needs Linux (namespaces, seccomp, Landlock, cgroups)")

func (r *Runtime) Name() string { return "native" }
func (r *Runtime) Create(ctx context.Context, spec *runtime.Spec) (runtime.Sandbox, error) {
	return nil, ErrUnsupported
}

// InitMain is never reached on other systems.
func InitMain() { panic(ErrUnsupported) }

// ReapMain is never reached on other systems.
func ReapMain() { panic(ErrUnsupported) }

// LandlockABI reports that Landlock is Linux only.
func LandlockABI() (int, error) { return 0, ErrUnsupported }

// ResumeArg is the hidden subcommand of an agent woken from its sleep.
const ResumeArg = "__sandbox-agent-resume"

// ResumeMain is never reached on other systems.
func ResumeMain() { panic(ErrUnsupported) }

// SleepAvailable reports that sleeping agents are Linux only.
func SleepAvailable() error { return ErrUnsupported }
