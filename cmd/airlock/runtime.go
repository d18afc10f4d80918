package main

import (
	"fmt"
	"github.com/airlock-dev/airlock/internal/uidpool"

	"github.com/airlock-dev/airlock/internal/policy"
	"github.com/airlock-dev/airlock/internal/runtime"
	"github.com/airlock-dev/airlock/internal/runtime/gvisor"
	"github.com/airlock-dev/airlock/internal/runtime/native"
)

// runRuntime is the backend `airlock run` uses for a policy's runtime name.
// A missing runsc is reported here, before anything is made.
func runRuntime(name string, pool *uidpool.Pool) (runtime.Runtime, error) {
	switch name {
	case "", policy.RuntimeNative:
		return &native.Runtime{Reaper: true, UIDPool: pool}, nil
	case policy.RuntimeGVisor:
		runsc, err := gvisor.Find()
		if err != nil {
			return nil, err
		}
		return &gvisor.Runtime{Runsc: runsc, OneShot: true}, nil
	}
	return nil, fmt.Errorf("unknown runtime %q: want %s or %s", name, policy.RuntimeNative, policy.RuntimeGVisor)
}
