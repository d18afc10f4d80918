package native

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/internal/cgroup"
	"github.com/airlock-dev/airlock/internal/runtime"
	"github.com/airlock-dev/airlock/internal/sysfile"
)

// What a daemon needs beyond runtime.Sandbox: pausing, noticing a dead
// agent, and finding and removing what a previous daemon left.

var (
	_ runtime.Pauser  = (*sandbox)(nil)
	_ runtime.Watcher = (*sandbox)(nil)
)

// ErrNoFreezer is returned by Pause and Resume for a sandbox without
// cgroups (created with Insecure.NoCgroups).
var ErrNoFreezer = errors.New("pausing needs the cgroup freezer, and this sandbox has no cgroup")

// Pause implements runtime.Pauser.
func (sb *sandbox) Pause(ctx context.Context) error {
	if sb.cg == nil {
		return ErrNoFreezer
	}
	return sb.cg.Freeze()
}

// Resume implements runtime.Pauser.
func (sb *sandbox) Resume(ctx context.Context) error {
	if sb.cg == nil {
		return ErrNoFreezer
	}
	return sb.cg.Thaw()
}

// Done implements runtime.Watcher.
func (sb *sandbox) Done() <-chan struct{} { return sb.done }

// isID reports whether name is a sandbox id (16 lowercase hex digits).
func isID(name string) bool {
	if len(name) != 16 {
		return false
	}
	for _, c := range name {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// List returns the ids of the sandboxes that have state under the state
// root: running ones, detached ones waiting for adoption, and leftovers.
// Those another live process holds are not listed: a state root shared by
// supervisors (airlock mcp's private daemons) must not have one remove
// another's sandboxes as unknown.
func (r *Runtime) List() ([]string, error) {
	root := r.stateRoot()
	entries, err := os.ReadDir(root)
	if err != nil {
		if os.IsNotExist(err) {
			return nil, nil
		}
		return nil, err
	}
	var ids []string
	for _, e := range entries {
		if e.IsDir() && isID(e.Name()) && !heldElsewhere(filepath.Join(root, e.Name()), e) {
			ids = append(ids, e.Name())
		}
	}
	return ids, nil
}

// heldElsewhere reports whether the sandbox with state directory dir
// belongs to another live supervisor: it owns it and the sandbox does not
// outlive it (not detached), or the sandbox is still being made (no state
// file yet, and not older than a setup may take), as sweep judges them.
func heldElsewhere(dir string, e os.DirEntry) bool {
	b, err := sysfile.ReadFile(filepath.Join(dir, "state.json"))
	if err != nil {
		fi, err := e.Info()
		return err == nil && time.Since(fi.ModTime()) <= 2*setupTimeout
	}
	var st stateFile
	if json.Unmarshal(b, &st) != nil {
		return false
	}
	return !st.Detached && st.Owner > 0 && st.Owner != os.Getpid() && sysfile.ProcStart(st.Owner) == st.OwnerStart
}

// Remove destroys the sandbox id that this process does not hold: it is
// adopted and destroyed when its agent is still there, otherwise what it
// left on the host (cgroups, placeholders, state) is removed. A sandbox
// with no state at all is not an error.
func (r *Runtime) Remove(ctx context.Context, id string) error {
	if !isID(id) {
		return fmt.Errorf("sandbox %q: %w", id, runtime.ErrInvalid)
	}
	if sb, _, err := r.adopt(ctx, id, false); err == nil {
		return sb.Destroy(ctx)
	}
	dir := filepath.Join(r.stateRoot(), id)
	b, err := sysfile.ReadFile(filepath.Join(dir, "state.json"))
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	var st stateFile
	if err != nil || json.Unmarshal(b, &st) != nil {
		// No state: its supervisor died before writing it (a daemon
		// killed while it made the sandbox), possibly after the init
		// was set up and running. Its processes are found by their
		// cgroup's name, which the state would have given, and killed
		// before its volume goes (it is mounted there).
		killByCgroup(id)
		if r.Volumes != nil {
			// Its volume, if it got one before its state was lost.
			r.Volumes.Remove(id)
		}
		return os.RemoveAll(dir)
	}
	if st.Init > 0 && sysfile.ProcStart(st.Init) == st.InitStart {
		// Alive but not adoptable (its agent socket is gone): kill it by
		// its cgroup or pid before cleaning up.
		if len(st.Cgroups) > 0 {
			if cg, err := cgroup.Open(st.Cgroups); err == nil {
				cg.Thaw()
				cg.Kill()
			}
		}
		if fd, err := unix.PidfdOpen(st.Init, 0); err == nil {
			if sysfile.ProcStart(st.Init) == st.InitStart {
				unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
			}
			unix.Close(fd)
		}
	}
	cleanupState(dir, &st)
	return nil
}

// ID is the process's id in the agent (unique per sandbox, never reused).
func (p *process) ID() uint64 { return p.id }

var _ runtime.Listeners = (*sandbox)(nil)

// Listeners implements runtime.Listeners.
func (sb *sandbox) Listeners() []net.Listener { return sb.listeners }

// closeListeners closes the listening sockets (at Destroy, or when setup
// or adoption fails after they were made).
func (sb *sandbox) closeListeners() {
	for _, l := range sb.listeners {
		l.Close()
	}
}

// killByCgroup kills every process in a cgroup named airlock/ID (under any
// parent, in any hierarchy): the sandbox id's, whose state is lost. Its
// init is the first (PID 1 of its namespace: the rest die with it).
func killByCgroup(id string) {
	suffix := "/" + cgroup.Prefix + "/" + id
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return
	}
	var killed []unix.PollFd
	defer func() {
		// Until they are gone (at most 5 s): the volume they hold is
		// removed next.
		deadline := time.Now().Add(5 * time.Second)
		for len(killed) > 0 && time.Now().Before(deadline) {
			n, err := unix.Poll(killed, 100)
			if err != nil && err != unix.EINTR {
				break
			}
			if n > 0 {
				left := killed[:0]
				for _, f := range killed {
					if f.Revents == 0 {
						left = append(left, f)
					} else {
						unix.Close(int(f.Fd))
					}
				}
				killed = left
			}
		}
		for _, f := range killed {
			unix.Close(int(f.Fd))
		}
	}()
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 1 {
			continue
		}
		b, err := sysfile.ReadFile(filepath.Join("/proc", e.Name(), "cgroup"))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			// hierarchy-id:controllers:path
			if parts := strings.SplitN(line, ":", 3); len(parts) == 3 && (strings.HasSuffix(parts[2], suffix) || strings.Contains(parts[2], suffix+"/")) {
				if fd, err := unix.PidfdOpen(pid, 0); err == nil {
					unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
					killed = append(killed, unix.PollFd{Fd: int32(fd), Events: unix.POLLIN})
				}
				break
			}
		}
	}
}
