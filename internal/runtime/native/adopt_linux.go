package native

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/internal/agent"
	"github.com/airlock-dev/airlock/internal/cgroup"
	"github.com/airlock-dev/airlock/internal/runtime"
	"github.com/airlock-dev/airlock/internal/sysfile"
	"github.com/airlock-dev/airlock/internal/uidpool"
)

// agentSocket is the listening socket of a detached sandbox's agent, in its
// state directory (reachable only by the supervisor's user: the directory
// is on the host, the socket is mode 0600, and nothing inside the sandbox
// sees the host's filesystem).
const agentSocket = "agent.sock"

// listenAgent makes the listening socket a detached sandbox's agent keeps.
func listenAgent(stateDir string) (*os.File, error) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	path := filepath.Join(stateDir, agentSocket)
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: path}); err != nil {
		unix.Close(fd)
		return nil, err
	}
	if err := os.Chmod(path, 0o600); err != nil {
		unix.Close(fd)
		return nil, err
	}
	if err := unix.Listen(fd, 1); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return os.NewFile(uintptr(fd), path), nil
}

// ErrNotAdoptable is returned by Adopt for a sandbox that does not exist,
// was not created detached, or whose init is gone.
var ErrNotAdoptable = errors.New("sandbox cannot be adopted")

// Adopt reconnects to a detached sandbox that another supervisor (this
// daemon before a restart) created: its processes kept running; the agent
// reports those still running and those that ended meanwhile. A sandbox
// made with Spec.Listen gets its listening sockets again (Listeners), made
// by this process inside the sandbox's network namespace; if one cannot be
// made (a *ListenError: EADDRINUSE when something inside the sandbox took
// the address while no supervisor held it), adoption fails and the
// sandbox is left as it was, for the caller to remove.
func (r *Runtime) Adopt(ctx context.Context, id string) (runtime.Sandbox, *agent.State, error) {
	return r.adopt(ctx, id, true)
}

// adopt is Adopt; without listen the Spec.Listen sockets are not made
// again (for Remove, which only destroys).
func (r *Runtime) adopt(ctx context.Context, id string, listen bool) (runtime.Sandbox, *agent.State, error) {
	if id == "" || filepath.Base(id) != id || id == "cache" {
		return nil, nil, fmt.Errorf("sandbox %q: %w", id, ErrNotAdoptable)
	}
	dir := filepath.Join(r.stateRoot(), id)
	b, err := sysfile.ReadFile(filepath.Join(dir, "state.json"))
	if err != nil {
		return nil, nil, fmt.Errorf("sandbox %q: %w (%v)", id, ErrNotAdoptable, err)
	}
	var st stateFile
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, nil, fmt.Errorf("sandbox %q: bad state: %w", id, err)
	}
	if !st.Detached || st.Init <= 0 {
		return nil, nil, fmt.Errorf("sandbox %q: not detached: %w", id, ErrNotAdoptable)
	}
	// Open the pidfd, then check it is still the same process (start time),
	// so that a recycled pid can never be adopted.
	pidfd, err := unix.PidfdOpen(st.Init, 0)
	if err != nil || sysfile.ProcStart(st.Init) != st.InitStart {
		if err == nil {
			unix.Close(pidfd)
		}
		return nil, nil, fmt.Errorf("sandbox %q: its init is gone: %w", id, ErrNotAdoptable)
	}
	sb := &sandbox{
		id: id, stateDir: dir, workspace: st.Workspace, tempWorkspace: st.TempWS, volume: st.Volume, placeholders: st.Placeholders,
		detached: true, initPid: st.Init, initPidFD: pidfd, listen: st.Listen,
		procs: map[uint64]*process{}, done: make(chan struct{}), exited: make(chan struct{}), swept: make(chan struct{}),
		info: runtime.Info{ID: id, Runtime: r.Name(), LandlockABI: st.LandlockABI, CgroupPaths: st.Cgroups,
			Rootless: st.Rootless, HostUID: st.HostUID, HostGID: st.HostGID, HostIDs: 1, Steps: map[string]time.Duration{}},
		// The agent may still answer calls of the previous supervisor (a
		// long read, say) on this connection: start the sequence numbers
		// far from where any previous supervisor's were, so that such an
		// answer matches no call of ours and is dropped.
		nextSeq: randomSeq(),
	}
	close(sb.swept)
	go sb.pollInit()
	fail := func(err error) (runtime.Sandbox, *agent.State, error) {
		sb.closeListeners()
		if sb.execListener != nil {
			sb.execListener.Close()
		}
		sb.closePidFD()
		return nil, nil, fmt.Errorf("sandbox %q: adopt: %w", id, err)
	}
	if !st.Rootless && st.HostGID != 0 {
		// The sandbox's host ids stay leased to it under this process.
		// (A state file without host_gid is from a version that mapped
		// every sandbox to one shared uid, and has no lease.)
		lease, err := leases.Claim(st.HostUID, st.HostGID, uidpool.Owner{Sandbox: id, StateDir: dir}, st.Init)
		if err != nil {
			return fail(err)
		}
		sb.lease, sb.info.HostIDs = lease, uidpool.SlotSize
	}
	if listen && len(st.Listen) > 0 {
		if sb.listeners, err = listenInNetns(st.Init, pidfd, st.Listen); err != nil {
			return fail(err)
		}
	}
	if listen && st.ExecListenerFD > 0 {
		// The exec listener (Spec.RecordExec): the init keeps a copy for
		// us. Without it the record cannot go on; the caller must not
		// keep the sandbox (its execs wait for a listener that nobody
		// answers).
		if sb.execListener, err = takeExecListener(pidfd, st.Init, st.ExecListenerFD); err != nil {
			return fail(&LayerError{Layer: layerRecord, Err: err})
		}
		sb.recordExec, sb.execListenerFD = true, st.ExecListenerFD
	}
	sb.rootFD = st.RootFD
	if len(st.Cgroups) > 0 {
		if sb.cg, err = cgroup.Open(st.Cgroups); err != nil {
			return fail(err)
		}
		// A paused (frozen) agent could not answer: adoption thaws the
		// sandbox; the caller pauses it again if it should stay paused.
		if err := sb.cg.Thaw(); err != nil {
			return fail(err)
		}
	}
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fail(err)
	}
	if err := unix.Connect(fd, &unix.SockaddrUnix{Name: filepath.Join(dir, agentSocket)}); err != nil {
		unix.Close(fd)
		return fail(err)
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return fail(err)
	}
	sb.conn = agent.NewConn(os.NewFile(uintptr(fd), "control"))
	state, err := sb.hello(ctx)
	if err != nil {
		sb.conn.Close()
		return fail(err)
	}
	sb.takeState(state)
	if err := writeState(dir, sb.state()); err != nil {
		sb.conn.Close()
		return fail(err)
	}
	go sb.readLoop()
	return sb, state, nil
}

// hello asks the agent for its state, bounded in time.
func (sb *sandbox) hello(ctx context.Context) (*agent.State, error) {
	if err := sb.conn.Send(&agent.Message{Type: agent.TypeHello}); err != nil {
		return nil, err
	}
	// The agent takes this channel before it reads the hello: what it
	// sends meanwhile comes first. Answers to the previous supervisor's
	// requests (a read that was waiting for output, ...) are dropped; an
	// exit is this supervisor's to know (the agent no longer counts that
	// process as running), so it joins the state's.
	var early []agent.Exit
	deadline := time.Now().Add(10 * time.Second)
	for n := 0; n < 1024; n++ {
		m, err := sb.recvOne(ctx, max(time.Until(deadline), time.Millisecond))
		if err != nil {
			return nil, err
		}
		switch m.Type {
		case agent.TypeState:
			if m.State == nil {
				return nil, errors.New("agent answered hello with an empty state")
			}
			m.State.Exited = append(m.State.Exited, early...)
			return m.State, nil
		case agent.TypeExit:
			if m.Exit != nil {
				early = append(early, *m.Exit)
			}
		case agent.TypeData, agent.TypeAck, agent.TypeFileResult, agent.TypeStarted, agent.TypeError:
		default:
			return nil, fmt.Errorf("agent answered %q to hello", m.Type)
		}
	}
	return nil, errors.New("agent sent no state in answer to hello")
}

// pollInit waits for an adopted init (not this process's child, so it
// cannot be waited for) to exit: its pidfd becomes readable.
func (sb *sandbox) pollInit() {
	defer close(sb.exited)
	sb.pidfdMu.Lock()
	fd := sb.initPidFD
	sb.pidfdMu.Unlock()
	// awaitPidfd waits on a private duplicate: closePidFD may close the
	// shared one meanwhile.
	awaitPidfd(fd)
}

// Process returns a process of the sandbox by its request id: after Adopt,
// the ones the agent reported running can be waited for and signalled.
// One that ended while no supervisor was connected, or after Adopt but
// before it was asked for, is handed out once:
// the sandbox keeps no table of finished processes (their holder, the
// daemon, lets go of them in its own time).
func (sb *sandbox) Process(id uint64) (runtime.Process, bool) {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if p, ok := sb.procs[id]; ok {
		delete(sb.unclaimed, id)
		return p, true
	}
	p, ok := sb.ended[id]
	delete(sb.ended, id)
	return p, ok
}

// randomSeq is a random starting point for call sequence numbers, below
// 2^62 so that it never wraps.
func randomSeq() uint64 {
	var b [8]byte
	rand.Read(b[:])
	return binary.LittleEndian.Uint64(b[:]) >> 2
}

// takeExecListener duplicates the exec listener the init (pidfd) keeps as
// descriptor fd (pidfd_getfd(2): needs ptrace access to the init, which
// the host's root has), and checks that it is one.
func takeExecListener(pidfd, pid, fd int) (*os.File, error) {
	nfd, err := unix.PidfdGetfd(pidfd, fd, 0)
	if err != nil {
		return nil, fmt.Errorf("take the exec listener from the sandbox init (pidfd_getfd, needs root and Linux >= 5.6): %w", err)
	}
	f := os.NewFile(uintptr(nfd), "exec-listener")
	var buf [128]byte
	n, err := unix.Readlink(fmt.Sprintf("/proc/self/fd/%d", nfd), buf[:])
	if err != nil || string(buf[:max(n, 0)]) != "anon_inode:seccomp notify" {
		f.Close()
		return nil, fmt.Errorf("descriptor %d of the sandbox init (pid %d) is not a seccomp listener", fd, pid)
	}
	return f, nil
}

// takeState takes over what an agent reported on connecting: its process
// ids, its protocol version, the processes still running and those that
// ended while no supervisor was connected.
func (sb *sandbox) takeState(state *agent.State) {
	sb.nextID = state.MaxID
	// An agent of an older binary knows no holds nor payloads: its
	// readers read plainly.
	sb.agentVersion = state.Version
	sb.unclaimed = map[uint64]bool{}
	for _, p := range state.Running {
		proc := &process{sb: sb, id: p.ID, pid: p.Pid, started: make(chan struct{}), exit: make(chan struct{})}
		proc.startOnce.Do(func() { close(proc.started) })
		sb.procs[p.ID] = proc
		sb.unclaimed[p.ID] = true
	}
	// Their status is known, and their captured output can still be read.
	sb.ended = map[uint64]*process{}
	for _, e := range state.Exited {
		proc := &process{sb: sb, id: e.ID, started: make(chan struct{}), exit: make(chan struct{}),
			status: runtime.ExitStatus{Code: e.Code, Signal: e.Signal}}
		proc.startOnce.Do(func() { close(proc.started) })
		close(proc.exit)
		sb.ended[e.ID] = proc
	}
}
