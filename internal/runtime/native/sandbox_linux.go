package native

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/internal/agent"
	"github.com/airlock-dev/airlock/internal/cgroup"
	"github.com/airlock-dev/airlock/internal/errdefs"
	"github.com/airlock-dev/airlock/internal/quota"
	"github.com/airlock-dev/airlock/internal/runtime"
	"github.com/airlock-dev/airlock/internal/sysfile"
	"github.com/airlock-dev/airlock/internal/uidpool"
)

// sandbox is the supervisor's handle on one running sandbox.
type sandbox struct {
	id            string
	info          runtime.Info
	stateDir      string
	workspace     string
	tempWorkspace bool
	detached      bool // outlives its supervisor; see Runtime.Detached
	agentVersion  int  // the agent's protocol version (agent.Version)
	placeholders  []string
	cg            *cgroup.Cgroup
	initPid       int
	pidfdMu       sync.Mutex
	initPidFD     int           // -1 once closed
	exited        chan struct{} // closed when the init has exited
	swept         chan struct{} // closed when the sweep Create started is done
	conn          *agent.Conn

	// volume is the fresh workspace on host storage (Runtime.Volumes).
	volume *quota.Volume

	listen    []string       // Spec.Listen, recorded for a later Adopt
	listeners []net.Listener // Spec.Listen's sockets, served by the caller

	lease *uidpool.Lease // the host ids it runs as (as root); nil rootless

	recordExec   bool     // Spec.RecordExec
	execListener *os.File // the exec notification listener, handed to the caller
	// execListenerFD is the init's own copy of it (detached sandboxes).
	execListenerFD int
	// rootFD is the init's descriptor of its root tmpfs (RootLayer).
	rootFD int

	reaperMu    sync.Mutex
	reaperTimer *time.Timer
	reaper      *os.File // write end of the reaper's pipe, or nil
	destroyed   bool

	mu     sync.Mutex
	nextID uint64
	idBase uint64 // the id before the first process's (runtime.Spec.FirstProcessID)
	procs  map[uint64]*process
	ended  map[uint64]*process // after Adopt: processes that ended while no supervisor was connected
	// unclaimed: after Adopt, the processes reported running that the
	// caller has not asked for yet (Process); one that exits first goes
	// to ended rather than out of sight.
	unclaimed map[uint64]bool
	nextSeq   uint64
	calls     map[uint64]chan *agent.Message // pending requests (read, file, stdin) by sequence
	done      chan struct{}                  // closed when the control channel is gone
	destroy   sync.Once
}

var _ runtime.Sandbox = (*sandbox)(nil)

func (sb *sandbox) ID() string         { return sb.id }
func (sb *sandbox) Info() runtime.Info { return sb.info }

// ExecListener returns the seccomp listener that every execve/execveat in
// the sandbox waits on (Spec.RecordExec), or nil. The caller owns it: it
// must answer each notification, or execs inside wait (and fail with
// ENOSYS once it is closed).
func (sb *sandbox) ExecListener() *os.File {
	f := sb.execListener
	sb.execListener = nil
	return f
}

// InitPid returns the host pid of the sandbox's init (PID 1 inside).
func (sb *sandbox) InitPid() int { return sb.initPid }

// ErrSandboxGone is returned for processes of a sandbox that ended, and
// for calls to it (errdefs.ErrConflict: the API answers 409).
var ErrSandboxGone = errdefs.ErrSandboxEnded

func (sb *sandbox) readLoop() {
	defer close(sb.done)
	for {
		m, files, err := sb.conn.Recv()
		if err != nil {
			return
		}
		sb.dispatch(m, files)
	}
}

func (sb *sandbox) dispatch(m *agent.Message, files []*os.File) {
	var id uint64
	switch {
	case m.Type == agent.TypeStarted && m.Started != nil:
		id = m.Started.ID
	case m.Type == agent.TypeExit && m.Exit != nil:
		id = m.Exit.ID
	case m.Type == agent.TypeError && m.Error != nil:
		id = m.Error.ID
	case m.Type == agent.TypeAck && m.Ack != nil:
		sb.answer(m.Ack.Seq, m, files)
		return
	case m.Type == agent.TypeFileResult && m.Result != nil:
		sb.answer(m.Result.Seq, m, files)
		return
	case m.Type == agent.TypeData && m.Data != nil:
		sb.answer(m.Data.Seq, m, files)
		return
	}
	sb.mu.Lock()
	p := sb.procs[id]
	// A process is forgotten once both its start and its exit are in.
	// The exit can come first: the agent's reaper and its exec loop send
	// on their own, and a command that ends at once is reaped before its
	// start is sent. (Messages are dispatched one at a time, in order.)
	if p != nil {
		switch m.Type {
		case agent.TypeExit:
			if closed(p.started) {
				delete(sb.procs, id)
				if sb.unclaimed[id] {
					delete(sb.unclaimed, id)
					sb.ended[id] = p
				}
			}
		case agent.TypeStarted, agent.TypeError:
			if closed(p.exit) {
				delete(sb.procs, id)
			}
		}
	}
	sb.mu.Unlock()
	if p == nil {
		for _, f := range files {
			f.Close()
		}
		return
	}
	switch m.Type {
	case agent.TypeStarted:
		p.pid = m.Started.Pid
		// The agent is untrusted: take a descriptor only where one was
		// asked for (the terminal of a TTY process).
		for i, f := range files {
			if i == 0 && p.tty {
				p.pty = f
				continue
			}
			f.Close()
		}
		p.startOnce.Do(func() { close(p.started) })
	case agent.TypeError:
		for _, f := range files {
			f.Close()
		}
		p.startErr = m.Error
		p.startOnce.Do(func() { close(p.started) })
	case agent.TypeExit:
		p.exitOnce.Do(func() {
			p.status = runtime.ExitStatus{Code: m.Exit.Code, Signal: m.Exit.Signal}
			// From the untrusted agent: only what was asked for, and
			// no more than that.
			if o := m.Exit.Output; o != nil && p.collect > 0 && len(o.Stdout)+len(o.Stderr) <= p.collect {
				p.output = o
			}
			close(p.exit)
		})
	}
}

// closed reports whether ch is closed (it is only ever closed, never sent on).
func closed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// Exec implements runtime.Sandbox.
func (sb *sandbox) Exec(ctx context.Context, req *runtime.ExecRequest) (runtime.Process, error) {
	p, err := sb.sendExec(req)
	if err != nil {
		return nil, err
	}
	rp, err := sb.started(ctx, p)
	if err == nil && req.Capture && req.StdinClosed && !p.noStdin {
		// An agent older than version 5 opened its stdin: close it now.
		if err := p.CloseStdin(ctx); err != nil {
			p.Signal(syscall.SIGKILL)
			return nil, fmt.Errorf("exec: close stdin: %w", err)
		}
	}
	return rp, err
}

// sendExec registers a process for req and sends its request.
func (sb *sandbox) sendExec(req *runtime.ExecRequest) (*process, error) {
	if len(req.Argv) == 0 {
		return nil, errors.New("exec: empty command")
	}
	sb.mu.Lock()
	sb.nextID++
	p := &process{sb: sb, id: sb.nextID, tty: req.TTY, started: make(chan struct{}), exit: make(chan struct{})}
	if req.Capture && req.Collect > 0 && sb.agentVersion >= 4 {
		p.collect = min(req.Collect, agent.CollectMax)
	}
	sb.procs[p.id] = p
	sb.mu.Unlock()
	fail := func(err error) (*process, error) {
		sb.forget(p)
		return nil, err
	}
	msg := &agent.Message{Type: agent.TypeExec, Exec: &agent.ExecRequest{
		ID: p.id, Argv: req.Argv, Env: req.Env, Dir: req.Dir, TTY: req.TTY, Rows: req.Rows, Cols: req.Cols,
	}}
	if req.Capture && req.TTY {
		return fail(errors.New("exec: a TTY process cannot be captured"))
	}
	msg.Exec.Capture = req.Capture
	msg.Exec.Hold = req.Capture && req.Hold
	msg.Exec.Collect = p.collect
	p.noStdin = req.Capture && req.StdinClosed && sb.agentVersion >= 5
	msg.Exec.NoStdin = p.noStdin
	var fds []int
	if !req.TTY && !req.Capture {
		if req.Stdin == nil || req.Stdout == nil || req.Stderr == nil {
			return fail(errors.New("exec: stdin, stdout and stderr are required without a TTY"))
		}
		fds = []int{int(req.Stdin.Fd()), int(req.Stdout.Fd()), int(req.Stderr.Fd())}
	}
	if err := sb.conn.Send(msg, fds...); err != nil {
		return fail(fmt.Errorf("exec: %w", err))
	}
	return p, nil
}

// started waits for the agent's answer to p's request.
func (sb *sandbox) started(ctx context.Context, p *process) (runtime.Process, error) {
	var err error
	select {
	case <-p.started:
		if p.startErr != nil {
			err = startError(p.startErr)
		}
	case <-sb.done:
		err = ErrSandboxGone
	case <-ctx.Done():
		err = ctx.Err()
	}
	if err != nil {
		sb.forget(p)
		return nil, err
	}
	return p, nil
}

// forget drops p, which did not start.
func (sb *sandbox) forget(p *process) {
	sb.mu.Lock()
	delete(sb.procs, p.id)
	sb.mu.Unlock()
}

// SkipProcessIDs makes the next process's id larger than upTo: a
// supervisor that adopts a sandbox knows ids (from its store) that the
// agent may not have seen.
func (sb *sandbox) SkipProcessIDs(upTo uint64) {
	sb.mu.Lock()
	sb.nextID = max(sb.nextID, upTo)
	sb.mu.Unlock()
}

// startError is the error of an exec the agent could not start, with the
// runtime's kind for a command that is missing or not executable.
func startError(e *agent.Error) error {
	switch e.Kind {
	case agent.KindNoCommand:
		return &kindedError{e.Message, runtime.ErrCommandNotFound}
	case agent.KindNotExecutable:
		return &kindedError{e.Message, runtime.ErrNotExecutable}
	}
	return errors.New(e.Message)
}

// kindedError is a message that matches a kind through errors.Is without
// repeating its name.
type kindedError struct {
	msg  string
	kind error
}

func (e *kindedError) Error() string { return e.msg }
func (e *kindedError) Unwrap() error { return e.kind }

// Kill implements runtime.Sandbox.
func (sb *sandbox) Kill() error {
	if sb.cg != nil {
		sb.cg.Kill()
	}
	sb.killInit()
	return nil
}

// killInit kills the sandbox's PID 1; the kernel then kills every process
// in its PID namespace. Through the pidfd: never another process that
// reused the pid.
func (sb *sandbox) killInit() {
	sb.pidfdMu.Lock()
	defer sb.pidfdMu.Unlock()
	if sb.initPidFD >= 0 {
		unix.PidfdSendSignal(sb.initPidFD, unix.SIGKILL, nil, 0)
	}
}

// closePidFD releases the init's pidfd once nothing will signal it.
func (sb *sandbox) closePidFD() {
	sb.pidfdMu.Lock()
	defer sb.pidfdMu.Unlock()
	if sb.initPidFD >= 0 {
		unix.Close(sb.initPidFD)
		sb.initPidFD = -1
	}
}

// waitInit reaps the init (its pidfd stays open until Destroy, so a late
// killInit cannot reach another process).
func (sb *sandbox) waitInit() {
	// Wait for the exit through the pidfd first: a wait4 that blocks
	// holds an OS thread of this process for the sandbox's whole life
	// (one thread per sandbox in a daemon); the reap then returns at once.
	sb.pidfdMu.Lock()
	fd := sb.initPidFD
	sb.pidfdMu.Unlock()
	awaitPidfd(fd)
	var ws unix.WaitStatus
	for {
		_, err := unix.Wait4(sb.initPid, &ws, 0, nil)
		if err != unix.EINTR {
			break
		}
	}
	close(sb.exited)
}

// awaitPidfd returns once the process of pidfd fd has exited (its pidfd is
// readable), or when fd cannot be polled. The wait parks the goroutine in
// the runtime's poller (a private, non-blocking duplicate of fd), so it
// holds no OS thread; if the poller will not take the descriptor, a
// blocking poll(2) does the same on a thread of its own.
func awaitPidfd(fd int) {
	exited := func(fd int, timeout int) bool {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, timeout)
		return n > 0 || (err != nil && err != unix.EINTR)
	}
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return
	}
	// O_NONBLOCK (on the shared open file description: for a pidfd it
	// only changes waitid(P_PIDFD), which nothing here uses) is what
	// makes os.NewFile register it with the poller.
	if err := unix.SetNonblock(dup, true); err != nil {
		unix.Close(dup)
		return
	}
	f := os.NewFile(uintptr(dup), "pidfd")
	defer f.Close()
	rc, err := f.SyscallConn()
	if err == nil {
		err = rc.Read(func(fd uintptr) bool { return exited(int(fd), 0) })
	}
	if err != nil {
		// Not pollable (or closed): wait on this thread.
		rc.Control(func(fd uintptr) {
			for !exited(int(fd), -1) {
			}
		})
	}
}

// Destroy implements runtime.Sandbox.
func (sb *sandbox) Destroy(ctx context.Context) error {
	var errs []error
	sb.destroy.Do(func() {
		ctx := context.WithoutCancel(ctx)
		// Closing the channel makes the agent kill everything and exit;
		// SIGKILL follows if it does not within a short grace period. A
		// detached agent would wait for the next supervisor instead.
		if sb.detached {
			sb.killInit()
		}
		// A paused sandbox's agent cannot act, and (cgroup v1) a frozen
		// process that is sent SIGKILL stays until thawed: kill the init
		// (its PID namespace goes with it), then thaw.
		if sb.cg != nil && sb.cg.Frozen() {
			sb.killInit()
			if err := sb.cg.Thaw(); err != nil {
				errs = append(errs, fmt.Errorf("thaw a paused sandbox to end it: %w", err))
			}
		}
		sb.conn.Close()
		select {
		case <-sb.exited:
		case <-time.After(2 * time.Second):
			sb.killInit()
			<-sb.exited
		}
		if sb.cg != nil {
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			if err := sb.cg.Destroy(cctx); err != nil {
				errs = append(errs, err)
			}
			cancel()
		}
		sb.closeListeners()
		removePlaceholders(sb.workspace, sb.placeholders)
		if sb.volume != nil {
			if err := sb.volume.Remove(); err != nil {
				errs = append(errs, err)
			}
		}
		if err := os.RemoveAll(sb.stateDir); err != nil {
			errs = append(errs, err)
		}
		// The init is dead, and with it every process of its PID
		// namespace: the host ids can go back to the pool.
		releaseLease(sb.lease, sb.stateDir)
		sb.stopReaper()
		sb.closePidFD()
		<-sb.swept
	})
	return errors.Join(errs...)
}

// removePlaceholders removes the placeholders setup created in the host
// workspace, but only those still empty: anything the host user put there
// meanwhile stays.
func removePlaceholders(ws string, rel []string) {
	for i := len(rel) - 1; i >= 0; i-- {
		p := filepath.Clean(rel[i])
		if filepath.IsAbs(p) || p == ".." || strings.HasPrefix(p, "../") {
			continue
		}
		RemovePlaceholder(filepath.Join(ws, p))
	}
}

// process is a process started through the agent.
type process struct {
	sb        *sandbox
	id        uint64
	pid       int
	tty       bool
	pty       *os.File
	started   chan struct{}
	startOnce sync.Once
	startErr  *agent.Error
	exit      chan struct{}
	exitOnce  sync.Once
	status    runtime.ExitStatus
	collect   int           // ExecRequest.Collect
	output    *agent.Output // the whole output, when it came with the exit
	noStdin   bool          // ExecRequest.StdinClosed, done by the agent (NoStdin)
}

// Collecting implements runtime.Collector: an agent older than version 4
// sends no output with an exit.
func (p *process) Collecting() bool { return p.collect > 0 }

// Collected implements runtime.Collector.
func (p *process) Collected() (stdout, stderr []byte, ok bool) {
	select {
	case <-p.exit:
	default:
		return nil, nil, false
	}
	if p.output == nil {
		return nil, nil, false
	}
	return p.output.Stdout, p.output.Stderr, true
}

func (p *process) Pid() int      { return p.pid }
func (p *process) PTY() *os.File { return p.pty }

func (p *process) Signal(sig os.Signal) error {
	s, ok := sig.(syscall.Signal)
	if !ok {
		return fmt.Errorf("unsupported signal %v", sig)
	}
	return p.sb.conn.Send(&agent.Message{Type: agent.TypeSignal, Signal: &agent.Signal{ID: p.id, Signal: int(s)}})
}

func (p *process) Wait(ctx context.Context) (runtime.ExitStatus, error) {
	select {
	case <-p.exit:
		return p.status, nil
	case <-p.sb.done:
		// The channel may close right after the exit message arrived.
		select {
		case <-p.exit:
			return p.status, nil
		default:
		}
		return runtime.ExitStatus{Signal: int(unix.SIGKILL)}, ErrSandboxGone
	case <-ctx.Done():
		return runtime.ExitStatus{}, ctx.Err()
	}
}

// startReaperLater starts the reaper after delay unless the sandbox is
// destroyed first.
func (sb *sandbox) startReaperLater(exe string, env []string, delay time.Duration) {
	sb.reaperMu.Lock()
	defer sb.reaperMu.Unlock()
	sb.reaperTimer = time.AfterFunc(delay, func() {
		sb.reaperMu.Lock()
		defer sb.reaperMu.Unlock()
		if sb.destroyed {
			return
		}
		if w, err := startReaper(exe, env, sb.stateDir); err == nil {
			sb.reaper = w
		}
		// Without a reaper, the next airlock's sweep is the fallback.
	})
}

// stopReaper releases the reaper once the sandbox is gone: it wakes, finds
// the state directory removed, and exits.
func (sb *sandbox) stopReaper() {
	sb.reaperMu.Lock()
	defer sb.reaperMu.Unlock()
	sb.destroyed = true
	if sb.reaperTimer != nil {
		sb.reaperTimer.Stop()
	}
	if sb.reaper != nil {
		sb.reaper.Close()
		sb.reaper = nil
	}
}

// state is what state.json records about a running sandbox.
func (sb *sandbox) state() *stateFile {
	return &stateFile{
		Workspace: sb.workspace, Volume: sb.volume, Placeholders: sb.placeholders, Cgroups: sb.info.CgroupPaths,
		Detached: sb.detached, Init: sb.initPid, InitStart: sysfile.ProcStart(sb.initPid),
		HostUID: sb.info.HostUID, HostGID: sb.info.HostGID, Rootless: sb.info.Rootless, LandlockABI: sb.info.LandlockABI, TempWS: sb.tempWorkspace,
		Listen: sb.listen, ExecListenerFD: sb.execListenerFD, RootFD: sb.rootFD,
	}
}

var _ runtime.OutputReader = (*process)(nil)

// ReadOutput implements runtime.OutputReader.
func (p *process) ReadOutput(ctx context.Context, stream int, cursor uint64, max int, wait time.Duration) (runtime.OutputChunk, error) {
	return p.readOutput(ctx, stream, cursor, max, wait, 0)
}

// readOutput reads captured output, for the attached reader (0: none).
func (p *process) readOutput(ctx context.Context, stream int, cursor uint64, max int, wait time.Duration, reader uint64) (runtime.OutputChunk, error) {
	m, err := p.sb.call(ctx, func(seq uint64) *agent.Message {
		return &agent.Message{Type: agent.TypeRead, Read: &agent.ReadRequest{
			Seq: seq, ID: p.id, Stream: stream, Cursor: cursor, Max: max, WaitMs: int(wait / time.Millisecond), Reader: reader,
			Raw: p.sb.agentVersion >= 1,
		}}
	})
	if err != nil {
		return runtime.OutputChunk{}, err
	}
	d := m.Data
	if d == nil {
		return runtime.OutputChunk{}, fmt.Errorf("agent answered %q to a read", m.Type)
	}
	if d.Gone {
		return runtime.OutputChunk{}, fmt.Errorf("%s: %w", d.Error, runtime.ErrNotFound)
	}
	if d.Error != "" {
		return runtime.OutputChunk{}, errors.New(d.Error)
	}
	return runtime.OutputChunk{Data: d.Data, From: d.From, EOF: d.EOF}, nil
}

var _ runtime.StdinWriter = (*process)(nil)

// WriteStdin implements runtime.StdinWriter.
func (p *process) WriteStdin(ctx context.Context, data []byte) error {
	for len(data) > 0 {
		n := min(len(data), agent.MaxRead)
		if err := p.stdin(ctx, &agent.Stdin{ID: p.id, Data: data[:n]}); err != nil {
			return err
		}
		data = data[n:]
	}
	return nil
}

// CloseStdin implements runtime.StdinWriter.
func (p *process) CloseStdin(ctx context.Context) error {
	return p.stdin(ctx, &agent.Stdin{ID: p.id, Close: true})
}

func (p *process) stdin(ctx context.Context, req *agent.Stdin) error {
	m, err := p.sb.call(ctx, func(seq uint64) *agent.Message {
		req.Seq = seq
		return &agent.Message{Type: agent.TypeStdin, Stdin: req}
	})
	if err != nil {
		return err
	}
	if m.Ack == nil {
		return fmt.Errorf("agent answered %q to a stdin write", m.Type)
	}
	if m.Ack.Error != "" {
		return errors.New(m.Ack.Error)
	}
	return nil
}

// call sends a request built for a fresh sequence number (with optional
// descriptors) and waits for the answer that carries that number.
func (sb *sandbox) call(ctx context.Context, build func(seq uint64) *agent.Message, fds ...int) (*agent.Message, error) {
	ch := make(chan *agent.Message, 1)
	sb.mu.Lock()
	sb.nextSeq++
	seq := sb.nextSeq
	if sb.calls == nil {
		sb.calls = map[uint64]chan *agent.Message{}
	}
	sb.calls[seq] = ch
	sb.mu.Unlock()
	forget := func() {
		sb.mu.Lock()
		delete(sb.calls, seq)
		sb.mu.Unlock()
	}
	if err := sb.conn.Send(build(seq), fds...); err != nil {
		forget()
		select {
		case <-sb.done: // the channel is closed because the sandbox ended
			return nil, ErrSandboxGone
		default:
		}
		return nil, err
	}
	select {
	case m := <-ch:
		return m, nil
	case <-sb.done:
		forget()
		return nil, ErrSandboxGone
	case <-ctx.Done():
		forget()
		return nil, ctx.Err()
	}
}

// answer hands an answer to the call waiting for seq; descriptors are not
// expected with answers and are closed.
func (sb *sandbox) answer(seq uint64, m *agent.Message, files []*os.File) {
	for _, f := range files {
		f.Close()
	}
	sb.mu.Lock()
	ch := sb.calls[seq]
	delete(sb.calls, seq)
	sb.mu.Unlock()
	if ch != nil {
		ch <- m
	}
}
