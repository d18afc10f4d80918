package gvisor

// The sandbox's host cgroup is airlock's, not runsc's: airlock makes it
// with the limits (memory and swap, pids, CPU), as the native runtime
// does, and starts runsc inside it, so that runsc's Gofer and Sentry (and
// every systrap stub the Sentry forks) are born there; runsc is told to
// leave cgroups alone (--ignore-cgroups). When runsc made the cgroup
// itself it joined it and left it again around the start of the Gofer and
// the Sentry: two writes to cgroup.procs per hierarchy, and on cgroup v1
// each waits for an RCU grace period (10-30 ms per start here). Starting
// runsc inside the cgroup costs none: on v2 it is cloned into it
// (CLONE_INTO_CGROUP); on v1 it is forked from a thread that moved into
// the cgroup alone (cgroup.EnterThread). The runsc command stays in the
// cgroup for as long as it runs (the attached `runsc run` of airlock run),
// its memory charged to the sandbox's limit like the Sentry's.
//
// What runsc no longer does with the cgroup: it told the Sentry the
// memory limit and the CPU quota, which the Sentry shows in its own
// /proc/meminfo, sysinfo(2) and emulated cgroupfs. Without it the sandbox
// sees the host's total memory and CPUs there, as a native sandbox does;
// the limits are enforced on the host just the same.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/airlock-dev/airlock/internal/cgroup"
	"github.com/airlock-dev/airlock/internal/runtime"
	"github.com/airlock-dev/airlock/internal/runtime/native"
)

// cgroupFileName records, in a sandbox's state directory, the paths of
// the cgroup airlock made for it, for a later supervisor (adoption, the
// sweep, Remove).
const cgroupFileName = "cgroup.json"

// cgroupLayer names the layer in errors.
const cgroupLayer = "cgroups"

// cgroupLimits are the host cgroup's limits for spec: --pids gets room
// for the Sentry's, the Gofer's and the systrap stubs' host tasks.
func cgroupLimits(spec *runtime.Spec) cgroup.Limits {
	l := cgroup.Limits{Memory: spec.Limits.Memory, Swap: spec.Limits.Swap, CPU: spec.Limits.CPU}
	if spec.Limits.Pids > 0 {
		l.Pids = spec.Limits.Pids + sentryPids
	}
	return l
}

// newCgroup makes sandbox id's host cgroup with spec's limits and records
// its paths in dir. It fails closed: an error names the layer.
func newCgroup(dir, id string, spec *runtime.Spec) (*cgroup.Cgroup, error) {
	cg, err := cgroup.New(spec.CgroupParent, cgroup.Prefix+"/"+id, cgroupLimits(spec))
	if err != nil {
		fix := "run as root with a writable cgroup filesystem, check --cgroup-parent, or pass --insecure-no-cgroups to run without resource limits"
		if errors.Is(err, cgroup.ErrBadParent) {
			fix = "" // the error says it
		}
		return nil, &native.LayerError{Layer: cgroupLayer, Err: err, Fix: fix}
	}
	raw, _ := json.Marshal(cg.Paths())
	if err := os.WriteFile(filepath.Join(dir, cgroupFileName), raw, 0o600); err != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		cg.Destroy(ctx)
		return nil, err
	}
	return cg, nil
}

// openCgroup returns the cgroup recorded in dir, nil when there is none
// (a sandbox without cgroups, or made by an airlock that let runsc make
// them: runsc removes those itself on delete).
func openCgroup(dir string) (*cgroup.Cgroup, []string, error) {
	raw, err := os.ReadFile(filepath.Join(dir, cgroupFileName))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	var paths []string
	if err := json.Unmarshal(raw, &paths); err != nil {
		return nil, nil, fmt.Errorf("bad %s: %w", cgroupFileName, err)
	}
	var left []string
	for _, p := range paths {
		if _, err := os.Stat(p); err == nil {
			left = append(left, p)
		}
	}
	if len(left) == 0 {
		return nil, paths, nil // already removed
	}
	cg, err := cgroup.Open(left)
	return cg, paths, err
}

// startIn starts cmd inside cg (nil: where this process is) without moving
// any process: on cgroup v2 it is cloned into the cgroup, on v1 it is
// forked from a locked OS thread that moved into the cgroup alone and
// moves back right after the fork.
func startIn(cg *cgroup.Cgroup, cmd *exec.Cmd) error {
	if cg == nil {
		return cmd.Start()
	}
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	if fd, ok := cg.FD(); ok {
		cmd.SysProcAttr.UseCgroupFD = true
		cmd.SysProcAttr.CgroupFD = fd
		return cmd.Start()
	}
	var startErr error
	enterErr, leaveErr := cgroup.ForkInThread(cg, func() bool {
		startErr = cmd.Start()
		return true
	})
	if leaveErr != nil && startErr == nil && enterErr == nil {
		// runsc started, but the thread that forked it ended (runsc's
		// Pdeathsig may fire): it must not run on in any case.
		cmd.Process.Kill()
		cmd.Wait()
	}
	switch {
	case leaveErr != nil:
		return &native.LayerError{Layer: cgroupLayer, Err: fmt.Errorf("move the thread that started runsc out of the sandbox's cgroup: %w", leaveErr)}
	case enterErr != nil:
		return &native.LayerError{Layer: cgroupLayer, Err: fmt.Errorf("enter the sandbox's cgroup to start runsc in it: %w", enterErr)}
	}
	return startErr
}
