package native

import (
	"fmt"
	"os"
	goruntime "runtime"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/internal/cgroup"
	"github.com/airlock-dev/airlock/internal/spawn"
	"github.com/airlock-dev/airlock/internal/uidpool"
)

// As root, every sandbox runs as a host id range of its own, leased from a
// pool (package uidpool): root inside is the range's first uid and gid, and
// ids 0-65535 inside map to the range. Its user namespace is also owned by
// that uid (not by root, who creates it): the kernel charges the per-user
// counters of everything inside (inotify instances and watches, POSIX
// message queues, pending signals) to the namespace's owner, so with root
// as the owner, one sandbox could exhaust them for every other sandbox and
// for the host's root.

// leases are the host's uid leases, shared by every airlock process.
var leases = &uidpool.Leases{Dir: uidpool.DefaultDir}

// defaultPool is the pool of a Runtime that names none, resolved once.
var defaultPool = sync.OnceValues(func() (uidpool.Pool, error) { return uidpool.Resolve(nil) })

func (r *Runtime) pool() (uidpool.Pool, error) {
	if r.UIDPool != nil {
		return *r.UIDPool, nil
	}
	return defaultPool()
}

// secbitNoSetuidFixup keeps a thread's capabilities when its effective
// uid leaves 0.
const secbitNoSetuidFixup = 1 << 2

// forkOwned is spawn.ForkExec for the sandbox's init, made by a thread
// whose effective uid and gid are uid and gid while it clones, so that the
// new user namespace is owned by uid. The thread keeps its capabilities
// meanwhile (SECBIT_NO_SETUID_FIXUP), which writing the id maps needs, and
// gets its credentials back afterwards; a thread that cannot is never
// reused (its goroutine ends locked to it). Credentials are per thread in
// the kernel, and the raw system calls here change only this one.
func forkOwned(exe string, argv []string, attr *syscall.ProcAttr, uid, gid int, cg *cgroup.Cgroup) (int, error) {
	// On cgroup v1 the init is forked from a thread inside its cgroup, so
	// it starts there (as CLONE_INTO_CGROUP does on v2).
	var pid int
	var err error
	enterErr, leaveErr := cgroup.ForkInThread(cg, func() bool {
		var restored bool
		pid, restored, err = forkOwnedLocked(exe, argv, attr, uid, gid)
		return restored
	})
	switch {
	case enterErr != nil && leaveErr == nil:
		return 0, &LayerError{Layer: layerCgroups, Err: enterErr, Fix: "check cgroup permissions, or pass --insecure-no-cgroups"}
	case leaveErr != nil && err == nil:
		err = &LayerError{Layer: layerCgroups, Err: fmt.Errorf("move the forking thread out of the sandbox's cgroup: %w", leaveErr)}
	}
	return pid, err
}

func forkOwnedLocked(exe string, argv []string, attr *syscall.ProcAttr, uid, gid int) (pid int, restored bool, err error) {
	old, err := unix.PrctlRetInt(unix.PR_GET_SECUREBITS, 0, 0, 0, 0)
	if err != nil {
		return 0, true, fmt.Errorf("read secure bits: %w", err)
	}
	euid, egid := unix.Geteuid(), unix.Getegid() // this thread's, before any change
	const keep = ^uintptr(0)                     // -1: leave that id as it is
	steps := []struct {
		what       string
		trap, a, b uintptr
	}{
		{"keep capabilities across setresuid", unix.SYS_PRCTL, unix.PR_SET_SECUREBITS, uintptr(old | secbitNoSetuidFixup)},
		{"setresgid", unix.SYS_SETRESGID, keep, uintptr(gid)},
		{"setresuid", unix.SYS_SETRESUID, keep, uintptr(uid)},
	}
	undo := []struct {
		trap, a, b uintptr
	}{
		{unix.SYS_PRCTL, unix.PR_SET_SECUREBITS, uintptr(old)},
		{unix.SYS_SETRESGID, keep, uintptr(egid)},
		{unix.SYS_SETRESUID, keep, uintptr(euid)},
	}
	done := 0
	defer func() {
		restored = true
		for i := done - 1; i >= 0; i-- {
			u := undo[i]
			if _, _, e := unix.RawSyscall(u.trap, u.a, u.b, keep); e != 0 {
				restored = false
			}
		}
	}()
	for _, s := range steps {
		if _, _, e := unix.RawSyscall(s.trap, s.a, s.b, keep); e != 0 {
			err := fmt.Errorf("%s to own the sandbox's user namespace as uid %d gid %d: %w", s.what, uid, gid, e)
			if e == unix.EINVAL {
				err = fmt.Errorf("%w (the uid pool must lie within this process's own id map, /proc/self/uid_map and gid_map)", err)
			}
			return 0, true, err
		}
		done++
	}
	pid, err = spawn.ForkExec(exe, argv, attr)
	return pid, true, err
}

// ownerUserns makes a user namespace that maps host uid owner to hostUID
// and host gid group to hostGID, one id each, for an idmapped mount of a
// host path owned by owner: its owner appears as root inside the sandbox,
// and what root inside creates there belongs to owner on the host (no
// other id inside can create anything there). A user namespace needs a
// process: a child is cloned into it, stopped by ptrace at its first
// instruction (it never runs), and killed once the namespace is open.
func ownerUserns(exe string, owner, group uint32, hostUID, hostGID int) (*os.File, error) {
	goruntime.LockOSThread() // the tracer is this thread
	defer goruntime.UnlockOSThread()
	null := devNull().Fd()
	pid, err := syscall.ForkExec(exe, []string{"airlock", "__idmap-userns"}, &syscall.ProcAttr{
		Env:   []string{},
		Files: []uintptr{null, null, null},
		Sys: &syscall.SysProcAttr{
			Cloneflags:  unix.CLONE_NEWUSER,
			UidMappings: []syscall.SysProcIDMap{{ContainerID: int(owner), HostID: hostUID, Size: 1}},
			GidMappings: []syscall.SysProcIDMap{{ContainerID: int(group), HostID: hostGID, Size: 1}},
			Ptrace:      true,
			Pdeathsig:   unix.SIGKILL,
		},
	})
	if err != nil {
		return nil, fmt.Errorf("user namespace for the idmapped mount of uid %d: %w", owner, err)
	}
	// Our unreaped child: the pid cannot be reused until Wait4 below.
	ns, err := os.Open(fmt.Sprintf("/proc/%d/ns/user", pid))
	unix.Kill(pid, unix.SIGKILL)
	for {
		if _, werr := unix.Wait4(pid, nil, unix.WALL, nil); werr != unix.EINTR {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("user namespace for the idmapped mount of uid %d: %w", owner, err)
	}
	return ns, nil
}

// owner is a host path's owning uid and gid.
type owner struct{ uid, gid uint32 }

// ownerNamespaces makes, concurrently with the caller, one user namespace
// per owner other than root (see ownerUserns). wait returns them, or the
// first error; close releases them.
type ownerNamespaces struct {
	done chan struct{}
	ns   map[owner]*os.File
	err  error
}

func startOwnerNamespaces(exe string, owners map[owner]bool, hostUID, hostGID int) *ownerNamespaces {
	o := &ownerNamespaces{done: make(chan struct{}), ns: map[owner]*os.File{}}
	go func() {
		defer close(o.done)
		for ow := range owners {
			if ow.uid == 0 {
				continue // through the sandbox's own namespace
			}
			f, err := ownerUserns(exe, ow.uid, ow.gid, hostUID, hostGID)
			if err != nil {
				o.err = err
				return
			}
			o.ns[ow] = f
		}
	}()
	return o
}

func (o *ownerNamespaces) wait() (map[owner]*os.File, error) {
	<-o.done
	return o.ns, o.err
}

func (o *ownerNamespaces) close() {
	<-o.done
	for _, f := range o.ns {
		f.Close()
	}
}
