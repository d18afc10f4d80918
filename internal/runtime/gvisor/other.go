//go:build !linux

package gvisor

import (
	"context"
	"errors"

	"github.com/airlock-dev/airlock/internal/runtime"
)

// Runtime is the gvisor runtime; it needs Linux.
type Runtime struct {
	Runsc, StateRoot string
	Detached         bool
	OneShot          bool
	Agent            bool
}

// Name implements runtime.Runtime.
func (r *Runtime) Name() string { return Name }

// Create implements runtime.Runtime.
func (r *Runtime) Create(ctx context.Context, spec *runtime.Spec) (runtime.Sandbox, error) {
	return nil, errors.New("the gvisor runtime needs Linux")
}

// InitMain, ExecMain and RelayMain exist on Linux only.
func InitMain()  { panic("gvisor: Linux only") }
func ExecMain()  { panic("gvisor: Linux only") }
func RelayMain() { panic("gvisor: Linux only") }
