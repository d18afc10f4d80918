package manager

// More than one isolation backend in one daemon: every sandbox is made by
// the backend its request, its policy or the daemon's default_runtime
// names (recorded with it), pools are kept per backend, and a restarted
// daemon hands each sandbox back to the backend that holds it.

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/airlock-dev/airlock/internal/agent"
	"github.com/airlock-dev/airlock/internal/policy"
	"github.com/airlock-dev/airlock/internal/runtime"
)

// Backend is an isolation backend a daemon offers besides Config.Runtime:
// it makes sandboxes and adopts or removes them after a restart.
type Backend interface {
	runtime.Runtime
	Adopter
}

// Availability is implemented by backends that depend on something
// outside airlock (runsc): Available says, in one line, why the backend
// cannot make sandboxes now, or nil.
type Availability interface {
	Available() error
}

// runtimeName is the backend a sandbox gets: the request's, else the
// policy's, else the daemon's default.
func (c *Config) runtimeName(req, pol string) string {
	switch {
	case req != "":
		return req
	case pol != "":
		return pol
	case c.DefaultRuntime != "":
		return c.DefaultRuntime
	}
	return policy.RuntimeNative
}

// backend returns the runtime called name, or an invalid-argument error
// naming what is offered (and, for a backend that is not installed, how
// to install it).
func (c *Config) backend(name string) (runtime.Runtime, error) {
	if name == "" || name == policy.RuntimeNative {
		return c.Runtime, nil
	}
	b, ok := c.Runtimes[name]
	if !ok {
		names := []string{policy.RuntimeNative}
		for n := range c.Runtimes {
			names = append(names, n)
		}
		sort.Strings(names[1:])
		return nil, invalid("runtime %s: not offered by this daemon (offered: %s)", name, strings.Join(names, ", "))
	}
	if a, ok := b.(Availability); ok {
		if err := a.Available(); err != nil {
			return nil, invalid("runtime %s: %v", name, err)
		}
	}
	return b, nil
}

// adopters puts the daemon's backends behind one Adopter: a sandbox goes
// to the backend that has state for it.
type adopters struct {
	base  Adopter
	extra []Adopter
}

func newAdopters(base Adopter, backends map[string]Backend) Adopter {
	names := make([]string, 0, len(backends))
	for n := range backends {
		names = append(names, n)
	}
	sort.Strings(names)
	a := &adopters{base: base}
	for _, n := range names {
		a.extra = append(a.extra, backends[n])
	}
	return a
}

// holder is the backend that lists id, or the base one.
func (a *adopters) holder(id string) Adopter {
	for _, x := range a.extra {
		if ids, err := x.List(); err == nil && slices.Contains(ids, id) {
			return x
		}
	}
	return a.base
}

func (a *adopters) Adopt(ctx context.Context, id string) (runtime.Sandbox, *agent.State, error) {
	h := a.holder(id)
	if h == nil {
		return nil, nil, fmt.Errorf("sandbox %s: no runtime holds it", id)
	}
	return h.Adopt(ctx, id)
}

func (a *adopters) Remove(ctx context.Context, id string) error {
	h := a.holder(id)
	if h == nil {
		return nil
	}
	return h.Remove(ctx, id)
}

func (a *adopters) List() ([]string, error) {
	var all []string
	var first error
	for _, x := range append([]Adopter{a.base}, a.extra...) {
		if x == nil {
			continue
		}
		ids, err := x.List()
		if err != nil && first == nil {
			first = err
		}
		all = append(all, ids...)
	}
	return all, first
}

// runtimeOf names the backend of a live sandbox, for messages.
func runtimeOf(rt runtime.Sandbox) string {
	if rt == nil {
		return "sandbox's"
	}
	if n := rt.Info().Runtime; n != "" {
		return n
	}
	return policy.RuntimeNative
}
