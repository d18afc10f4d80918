package cgroup

import (
	"fmt"
	"time"
)

// Version is the cgroup hierarchy version used for the sandbox cgroups.
type Version int

const (
	// V1 is the legacy (or "hybrid") layout: one hierarchy per controller.
	V1 Version = 1
	// V2 is the unified hierarchy (cgroup2).
	V2 Version = 2
)

func (v Version) String() string {
	switch v {
	case V1:
		return "v1"
	case V2:
		return "v2"
	}
	return "none"
}

// Prefix is the directory under the cgroup base that holds the sandbox
// cgroups: New(parent, Prefix+"/"+id, l) and Sweep(parent) go together.
const Prefix = "airlock"

// SweepGrace is how old an empty sandbox cgroup must be before Sweep removes
// it, so that a sandbox that is being set up right now is left alone.
var SweepGrace = 10 * time.Second

// CPUPeriod is the CFS period (microseconds) used for the CPU limit.
const CPUPeriod = 100000

// Limits are the resource limits of one sandbox. Zero means "no limit",
// except Swap, see below.
type Limits struct {
	// Memory is the memory limit in bytes; 0 = no limit.
	Memory int64
	// Swap is the swap allowed on top of Memory, in bytes. It only applies
	// when Memory is set, and then it is always enforced: 0 means no swap.
	// v2: memory.swap.max = Swap; v1: memory.memsw.limit_in_bytes =
	// Memory+Swap. Without swap accounting on the host, New fails.
	Swap int64
	// Pids is the maximum number of tasks; 0 = no limit.
	Pids int64
	// CPU is the CPU bandwidth in cores (1.5 = one and a half cores);
	// 0 = no limit. Implemented as a CFS quota with period CPUPeriod.
	CPU float64
	// CPUAccounting joins the v1 cpuacct hierarchy (for cpuacct.usage;
	// v2's cpu.stat always has usage_usec). Off by default: like cpu, a
	// hierarchy of its own costs every start and teardown on v1.
	CPUAccounting bool
}

// Validate reports limits that can never be applied.
func (l Limits) Validate() error {
	switch {
	case l.Memory < 0:
		return fmt.Errorf("cgroup: invalid memory limit %d: must be >= 0 bytes", l.Memory)
	case l.Swap < 0:
		return fmt.Errorf("cgroup: invalid swap limit %d: must be >= 0 bytes", l.Swap)
	case l.Swap > 0 && l.Memory == 0:
		return fmt.Errorf("cgroup: swap limit %d set without a memory limit: set Memory too (swap is limited on top of memory)", l.Swap)
	case l.Pids < 0:
		return fmt.Errorf("cgroup: invalid pids limit %d: must be >= 0", l.Pids)
	case l.CPU < 0 || l.CPU != l.CPU || l.CPU > 1e6:
		return fmt.Errorf("cgroup: invalid cpu limit %v: must be a number of cores >= 0", l.CPU)
	case l.CPU > 0 && l.CPU*CPUPeriod < 1000:
		return fmt.Errorf("cgroup: cpu limit %v cores is below the kernel minimum of 0.01 cores (1ms per %dus period)", l.CPU, CPUPeriod)
	case l.Memory > 0 && l.Swap > 0 && l.Memory+l.Swap < 0:
		return fmt.Errorf("cgroup: memory+swap limit overflows (memory %d, swap %d)", l.Memory, l.Swap)
	}
	return nil
}

// controllers returns the controllers the limits need (v2 names).
func (l Limits) controllers() []string {
	var cs []string
	if l.Memory > 0 {
		cs = append(cs, "memory")
	}
	if l.Pids > 0 {
		cs = append(cs, "pids")
	}
	if l.CPU > 0 {
		cs = append(cs, "cpu")
	}
	return cs
}

// Info describes the cgroup support of this host, for `airlock doctor` and
// for choosing the backend.
type Info struct {
	// Version is the hierarchy airlock uses (0 when there is none).
	Version Version
	// Controllers are the controllers available to airlock: on v2 those in
	// cgroup.controllers of the base, on v1 the mounted ones.
	Controllers []string
	// Root is the mount point (v2) or the controller mount points used by
	// airlock, space separated (v1).
	Root string
	// Writable reports whether airlock can create cgroups in the base.
	Writable bool
	// Reason says why cgroups are not usable (empty when they are).
	Reason string
}
