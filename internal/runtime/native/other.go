//go:build !linux

package native

import (
	"context"
	"errors"

	"github.com/airlock-dev/airlock/internal/runtime"
)

// InitArg is the hidden subcommand that makes the airlock binary act as a
// sandbox's init.
const InitArg = "__sandbox-init"

// Runtime is the native runtime; it needs Linux.
type Runtime struct {
	Exe       string
	StateRoot string
}

// ErrUnsupported is returned on operating systems other than Linux.
var ErrUnsupported = errors.New("the native runtime needs Linux (namespaces, seccomp, Landlock, cgroups)")

func (r *Runtime) Name() string { return "native" }
func (r *Runtime) Create(ctx context.Context, spec *runtime.Spec) (runtime.Sandbox, error) {
	return nil, ErrUnsupported
}

// InitMain is never reached on other systems.
func InitMain() { panic(ErrUnsupported) }
