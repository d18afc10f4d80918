package main

import (
	"fmt"
	"strconv"
	"strings"
)

// Names of the values parseVerbose returns besides airlock's own step names.
const (
	stepCreated   = "created"   // total of the sandbox creation (rt.Create)
	stepHandshake = "handshake" // exec request -> command started
	stepDestroyed = "destroyed" // sandbox teardown after the command exited
)

// expectedSteps are the steps `airlock run -v` is expected to report on the
// default configuration; a missing one is warned about, in case the format
// changed. Sub-steps (init.mounts.*) are taken as they come.
var expectedSteps = []string{
	"cgroups", "clone", "idmap", "setup", "init.namespaces", "init.mounts",
	"init.capabilities", "init.landlock", "init.seccomp", stepHandshake, stepCreated,
}

// parseVerbose extracts the timings, in milliseconds, from the stderr of
// `airlock run -v`, whose lines look like (see cmd/airlock/run.go):
//
//	airlock: created in 10.43ms: cgroups=0.65ms clone=1.12ms ... setup=8.20ms
//	airlock: command started 0.85ms after the sandbox
//	airlock: destroyed in 1.42ms
//
// The "created" and "command started" lines are required.
func parseVerbose(stderr string) (map[string]float64, error) {
	out := map[string]float64{}
	for _, line := range strings.Split(stderr, "\n") {
		line = strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "airlock: created in "):
			rest := strings.TrimPrefix(line, "airlock: created in ")
			total, steps, _ := strings.Cut(rest, ":")
			v, err := parseMS(total)
			if err != nil {
				return nil, fmt.Errorf("created line %q: %v", line, err)
			}
			out[stepCreated] = v
			for _, f := range strings.Fields(steps) {
				k, val, ok := strings.Cut(f, "=")
				if !ok || k == "" {
					return nil, fmt.Errorf("created line %q: bad step %q", line, f)
				}
				v, err := parseMS(val)
				if err != nil {
					return nil, fmt.Errorf("created line %q: step %q: %v", line, k, err)
				}
				out[k] = v
			}
		case strings.HasPrefix(line, "airlock: command started "):
			rest := strings.TrimPrefix(line, "airlock: command started ")
			val, _, ok := strings.Cut(rest, " after the sandbox")
			if !ok {
				return nil, fmt.Errorf("unexpected line %q", line)
			}
			v, err := parseMS(val)
			if err != nil {
				return nil, fmt.Errorf("command started line %q: %v", line, err)
			}
			out[stepHandshake] = v
		case strings.HasPrefix(line, "airlock: destroyed in "):
			v, err := parseMS(strings.TrimPrefix(line, "airlock: destroyed in "))
			if err != nil {
				return nil, fmt.Errorf("destroyed line %q: %v", line, err)
			}
			out[stepDestroyed] = v
		}
	}
	if _, ok := out[stepCreated]; !ok {
		return nil, fmt.Errorf(`no "airlock: created in ..." line in the output of -v`)
	}
	if _, ok := out[stepHandshake]; !ok {
		return nil, fmt.Errorf(`no "airlock: command started ..." line in the output of -v`)
	}
	return out, nil
}

// parseMS parses "1.23ms".
func parseMS(s string) (float64, error) {
	s = strings.TrimSpace(s)
	num, ok := strings.CutSuffix(s, "ms")
	if !ok {
		return 0, fmt.Errorf("%q: want a value in ms", s)
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("%q: not a duration in ms", s)
	}
	return v, nil
}
