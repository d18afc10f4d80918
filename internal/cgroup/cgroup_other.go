//go:build !linux

package cgroup

import (
	"context"
	"errors"
	"time"
)

var errNotSupported = errors.New("cgroups: not supported on this OS")

// Cgroup is the cgroup of one sandbox (Linux only).
type Cgroup struct{}

// Detect reports that cgroups are not supported.
func Detect() Info { return Info{Reason: errNotSupported.Error()} }

// New fails: cgroups are Linux only.
func New(parent, name string, l Limits) (*Cgroup, error) { return nil, errNotSupported }

// CheckParent fails: cgroups are Linux only.
func CheckParent(parent string) error { return errNotSupported }

// Sweep fails: cgroups are Linux only.
func Sweep(parent string) (int, error) { return 0, errNotSupported }

func (c *Cgroup) Version() Version                  { return 0 }
func (c *Cgroup) Add(pid int) error                 { return errNotSupported }
func (c *Cgroup) FD() (int, bool)                   { return -1, false }
func (c *Cgroup) Procs() ([]int, error)             { return nil, errNotSupported }
func (c *Cgroup) Kill() error                       { return errNotSupported }
func (c *Cgroup) Destroy(ctx context.Context) error { return nil }
func (c *Cgroup) OOMKilled() bool                   { return false }
func (c *Cgroup) Freeze() error                     { return errNotSupported }
func (c *Cgroup) Thaw() error                       { return errNotSupported }
func (c *Cgroup) Frozen() bool                      { return false }
func (c *Cgroup) Paths() []string                   { return nil }

// SetPids fails: cgroups are Linux only.
func (c *Cgroup) SetPids(n int64) error { return errNotSupported }

// Open fails: cgroups are Linux only.
func Open(paths []string) (*Cgroup, error) { return nil, errNotSupported }

func (c *Cgroup) EnterThread() (func() error, error) { return nil, errNotSupported }

// ErrThreadStuck: see the Linux version.
var ErrThreadStuck = errors.New("the thread is left in the cgroup")

func ThreadGone(tid int, timeout time.Duration) bool { return true }
