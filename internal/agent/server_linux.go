package agent

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	goruntime "runtime"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Server is the agent's side of the control channel. It runs as PID 1 of the
// sandbox after the runtime's init has applied every isolation layer.
type Server struct {
	// listener, when set, lets a new supervisor connect after the current
	// one went away (a daemon restart); without it the sandbox ends with
	// its channel.
	listener *os.File
	conn     *Conn   // guarded by sendM; nil while no supervisor is connected
	pending  []*Exit // exits that could not be delivered, guarded by sendM
	maxID    uint64  // guarded by mu

	mu      sync.Mutex
	procs   map[int]uint64              // pid -> request id
	outputs map[uint64][2]*outputBuffer // request id -> stdout, stderr of captured processes
	stdins  map[uint64]chan *Stdin      // request id -> queue of a captured process's stdin writer
	pids    map[uint64]int              // request id -> pid
	collect map[uint64]int              // request id -> ExecRequest.Collect, while it runs
	// Signals, when set, were caught before Serve (CatchSignals).
	Signals *Signals
	// finished lists the captured processes that exited, oldest first,
	// whose output is still kept (see keepFinished).
	finished []uint64
	sendM    sync.Mutex

	// Sleep, when set, lets the agent sleep (TypeSleep, sleep_linux.go):
	// it is called on Serve's goroutine with nothing running in the
	// sandbox, and executes a program that waits for the next request in
	// the agent's place, then executes the agent again, which resumes
	// with st (Resume). It returns only on failure; the agent then serves
	// on.
	Sleep func(conn *Conn, st *SleepState) error
	// busy counts the reads and file operations running off the request
	// loop.
	busy atomic.Int64
}

// The output of finished captured processes is kept for readers that come
// later, newest first, up to keepFinishedBytes of buffers and
// keepFinishedProcs processes in all; older output is dropped. Without a
// bound, every command a long-lived sandbox ran kept up to 1 MiB per
// stream in the agent, charged to the sandbox's memory limit.
var (
	keepFinishedBytes = 16 << 20
	keepFinishedProcs = 256
)

// maxPending bounds the exits kept for a supervisor that is not connected.
const maxPending = 1 << 16

// exitFlush is how long the exit of a captured process waits for the end
// of its output (a child it left may hold the output open).
const exitFlush = 100 * time.Millisecond

// Signals are the signals an agent catches (CatchSignals).
type Signals struct {
	ready        chan struct{}
	child, other chan os.Signal
}

// CatchSignals starts catching, on a goroutine, the signals Serve handles:
// SIGCHLD, to reap, and (caught, never ignored: SIG_IGN would be inherited
// across exec by every process the agent starts) those whose default in a
// Go program ends it, so that `kill -TERM 1` from inside cannot tear the
// sandbox down: SIGTERM, SIGINT and SIGHUP (the runtime exits) and SIGQUIT
// (it crashes). The Go runtime ignores the others it handles (SIGUSR1,
// SIGUSR2, SIGPIPE, SIGALRM, ...) unless they are caught. Catching each
// costs a round trip to the Go runtime's signal thread (about 70 µs of CPU
// on a 2-CPU VM): an init calls this before its setup, so that the first
// command, which follows the setup at once, does not wait for them.
func CatchSignals() *Signals {
	return catchSignals(true)
}

// CatchSignalsAsInit is CatchSignals for an agent that is PID 1 of its own
// PID namespace on Linux (the native init). Linux delivers a signal to
// such an init only if it has a handler for it (or SIGKILL and SIGSTOP,
// from outside the namespace): with the Go runtime's handlers of SIGTERM,
// SIGINT, SIGHUP and SIGQUIT replaced by their default action, the init is
// immune to them without catching them (four round trips fewer). The Go
// runtime is not told: it still resets them to the default in the
// processes the agent forks, as it must, and nothing in the init asks for
// them. Elsewhere (not PID 1, or sigaction failing) it catches them as
// CatchSignals does. Not for gVisor, whose Sentry applies the default
// action to its init.
func CatchSignalsAsInit() *Signals {
	if os.Getpid() != 1 {
		return catchSignals(true)
	}
	for _, sig := range endingSignals {
		// struct sigaction: SIG_DFL, no flags, an empty mask (all zero
		// in every architecture's layout).
		var act [4]uint64
		if _, _, e := unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(sig.(unix.Signal)), uintptr(unsafe.Pointer(&act)), 0, 8, 0, 0); e != 0 {
			return catchSignals(true)
		}
	}
	return catchSignals(false)
}

// endingSignals are the signals whose default in a Go program ends it.
var endingSignals = []os.Signal{unix.SIGTERM, unix.SIGINT, unix.SIGHUP, unix.SIGQUIT}

func catchSignals(ending bool) *Signals {
	sigs := &Signals{ready: make(chan struct{}), child: make(chan os.Signal, 16)}
	if ending {
		sigs.other = make(chan os.Signal, 16)
	}
	go func() {
		signal.Notify(sigs.child, unix.SIGCHLD)
		if ending {
			signal.Notify(sigs.other, endingSignals...)
		}
		close(sigs.ready)
	}()
	return sigs
}

// NewServer returns a server on conn. With a listener (a listening unix
// socket only the supervisor side can reach), the sandbox survives the loss
// of its channel and waits for the next supervisor there.
func NewServer(conn *Conn, listener *os.File) *Server {
	return &Server{conn: conn, listener: listener, procs: map[int]uint64{}, pids: map[uint64]int{}, outputs: map[uint64][2]*outputBuffer{}, stdins: map[uint64]chan *Stdin{}, collect: map[uint64]int{}}
}

// Serve handles requests until the supervisor closes the channel, then kills
// every process of the sandbox and returns; with a listener it waits for the
// next supervisor instead, and only a failing listener ends the sandbox. As PID 1 it also reaps every
// orphan that the kernel reparents to it.
func (s *Server) Serve() error {
	sigs := s.Signals
	if sigs == nil {
		sigs = CatchSignals()
	}
	<-sigs.ready
	if sigs.other != nil {
		go func() {
			for range sigs.other {
			}
		}()
	}
	go func() {
		for range sigs.child {
			s.reap()
		}
	}()
	// Once the channel has been quiet for a moment, give the memory the
	// last burst of work used back to the host (see idleRelease). The
	// timer starts with the first request that allocates: an agent never
	// asked for anything keeps no timer and never runs its goroutine.
	idle := &idleRelease{}
	var release *time.Timer
	defer func() {
		if release != nil {
			release.Stop()
		}
	}()
	conn := s.conn
	for {
		m, files, err := conn.Recv()
		if release != nil {
			release.Reset(releaseAfter)
		}
		if err != nil {
			if s.listener != nil {
				if conn, err = s.reconnect(conn); err == nil {
					continue
				}
			}
			// Supervisor gone: end the sandbox. Killing every process in
			// the PID namespace is what exiting PID 1 does anyway; do it
			// explicitly so nothing outlives the channel.
			unix.Kill(-1, unix.SIGKILL)
			return err
		}
		switch m.Type {
		case TypeExec, TypeFile, TypeRead, TypeStdin: // the requests that allocate
			idle.worked.Store(true)
			if release == nil {
				release = time.AfterFunc(releaseAfter, idle.release)
			}
		}
		switch m.Type {
		case TypeExec:
			s.exec(m.Exec, files)
		case TypeSignal:
			closeAll(files)
			s.signal(m.Signal)
		case TypeHello:
			closeAll(files)
			s.hello()
		case TypeRead:
			closeAll(files)
			if m.Read != nil && m.Read.Reader != 0 {
				// An attached reader's read holds the stream from its
				// cursor; in order with its other holds and releases.
				s.hold(&Hold{ID: m.Read.ID, Stream: m.Read.Stream, Reader: m.Read.Reader, Keep: m.Read.Cursor})
			}
			s.busy.Add(1)
			go func() {
				defer s.busy.Add(-1)
				s.read(m.Read)
			}()
		case TypeStdin:
			closeAll(files)
			s.stdin(m.Stdin)
		case TypeHold:
			closeAll(files)
			s.hold(m.Hold)
		case TypeFile:
			s.busy.Add(1)
			go func() { // off the request loop: a large remove must not stall exec
				defer s.busy.Add(-1)
				s.file(m.File, files)
			}()
		case TypeSleep:
			closeAll(files)
			if m.Ack != nil {
				s.sleep(conn, m.Ack.Seq)
			}
		case TypeRelease:
			closeAll(files)
			if m.Release != nil {
				s.mu.Lock()
				s.dropOutput(m.Release.ID)
				s.mu.Unlock()
			}
		default:
			closeAll(files)
			s.send(&Message{Type: TypeError, Error: &Error{Message: "unknown request " + m.Type}})
		}
	}
}

func (s *Server) send(m *Message, fds ...int) {
	s.sendM.Lock()
	defer s.sendM.Unlock()
	if s.conn != nil && s.conn.Send(m, fds...) == nil {
		return
	}
	if s.conn != nil && m.Type == TypeFileResult && m.Result != nil && m.Result.Error == "" {
		// An answer too large for the channel (a listing of a huge
		// directory where no message can be spilled): the caller gets
		// an error instead of waiting for an answer that never comes.
		if s.conn.Send(&Message{Type: TypeFileResult, Result: &FileResult{Seq: m.Result.Seq, Kind: KindTooLarge,
			Error: "the answer is too large for the sandbox's control channel"}}) == nil {
			return
		}
	}
	// Undelivered: keep exits for the next supervisor, drop the rest
	// (replies to requests of a supervisor that is gone).
	if m.Type == TypeExit && m.Exit != nil && len(s.pending) < maxPending {
		// Without its output: that stays in the buffers for reads.
		ex := *m.Exit
		ex.Output = nil
		s.pending = append(s.pending, &ex)
	}
}

// sendData sends a read's answer, with raw its bytes after the JSON when
// they fit.
func (s *Server) sendData(d *Data, raw bool) {
	if raw && len(d.Data) > 0 {
		s.sendM.Lock()
		sent := s.conn != nil && s.conn.SendPayload(d) == nil
		if !sent && s.conn != nil && len(d.Data) > smallRead {
			// The channel takes smaller packets than asked for (a host
			// socket of gVisor's keeps the host's default buffer, and
			// carries no spilled message): answer with the first bytes;
			// the reader goes on from there.
			short := *d
			short.Data, short.EOF = d.Data[:smallRead], false
			sent = s.conn.SendPayload(&short) == nil
		}
		s.sendM.Unlock()
		if sent {
			return
		}
	}
	s.send(&Message{Type: TypeData, Data: d})
}

// smallRead is the size of a read's answer that fits any channel's packet.
const smallRead = 64 << 10

// reconnect drops the dead channel and waits for the next supervisor on the
// listener.
func (s *Server) reconnect(dead *Conn) (*Conn, error) {
	s.sendM.Lock()
	s.conn = nil
	s.sendM.Unlock()
	dead.Close()
	for {
		fd, _, err := unix.Accept4(int(s.listener.Fd()), unix.SOCK_CLOEXEC)
		if err == unix.EINTR || err == unix.ECONNABORTED {
			continue
		}
		if err != nil {
			return nil, err
		}
		if err := unix.SetNonblock(fd, true); err != nil {
			unix.Close(fd)
			return nil, err
		}
		c := NewConn(os.NewFile(uintptr(fd), "control"))
		s.sendM.Lock()
		s.conn = c
		s.sendM.Unlock()
		return c, nil
	}
}

// hello answers a (re)connecting supervisor with the sandbox's processes.
func (s *Server) hello() {
	st := &State{Version: Version}
	s.mu.Lock()
	for pid, id := range s.procs {
		st.Running = append(st.Running, Started{ID: id, Pid: pid})
	}
	st.MaxID = s.maxID
	s.mu.Unlock()
	s.sendM.Lock()
	defer s.sendM.Unlock()
	for _, e := range s.pending {
		st.Exited = append(st.Exited, *e)
	}
	if s.conn != nil && s.conn.Send(&Message{Type: TypeState, State: st}) == nil {
		s.pending = nil
	}
}

func (s *Server) fail(id uint64, msg string) {
	s.send(&Message{Type: TypeError, Error: &Error{ID: id, Message: msg}})
}

// failExec reports a command that could not be started, with its kind.
func (s *Server) failExec(id uint64, err error) {
	e := &Error{ID: id, Message: err.Error()}
	var ee *execError
	if errors.As(err, &ee) {
		e.Kind = ee.kind
	}
	s.send(&Message{Type: TypeError, Error: e})
}

func (s *Server) exec(req *ExecRequest, files []*os.File) {
	defer closeAll(files)
	if req == nil || len(req.Argv) == 0 {
		s.fail(0, "exec: empty argv")
		return
	}
	path, err := lookPath(req.Argv[0], req.Env)
	if err != nil {
		s.failExec(req.ID, err)
		return
	}
	if req.Dir != "" {
		// Name the working directory in the error, which the child's
		// chdir failure would not.
		if fi, err := os.Stat(req.Dir); err != nil || !fi.IsDir() {
			if err == nil {
				err = syscall.ENOTDIR
			}
			s.fail(req.ID, "chdir "+req.Dir+": "+err.Error())
			return
		}
	}
	attr := &syscall.ProcAttr{Dir: req.Dir, Env: req.Env, Sys: &syscall.SysProcAttr{Setsid: true}}
	var master *os.File
	if req.TTY {
		m, slave, err := openPTY(req.Rows, req.Cols)
		if err != nil {
			s.fail(req.ID, "pty: "+err.Error())
			return
		}
		defer slave.Close()
		master = m
		defer master.Close()
		fd := slave.Fd()
		attr.Files = []uintptr{fd, fd, fd}
		attr.Sys.Setctty = true
		attr.Sys.Ctty = 0
	} else if req.Capture {
		stdio, bufs, stdinW, err := s.capture(req.NoStdin)
		if err != nil {
			s.fail(req.ID, "capture: "+err.Error())
			return
		}
		if req.Hold {
			now := time.Now()
			bufs[0].hold(startHold, 0, now)
			bufs[1].hold(startHold, 0, now)
		}
		defer closeFDs(stdio)
		attr.Files = []uintptr{uintptr(stdio[0]), uintptr(stdio[1]), uintptr(stdio[2])}
		var queue chan *Stdin
		if stdinW != nil {
			queue = make(chan *Stdin, 64)
			go s.stdinWriter(stdinW, queue)
		}
		s.mu.Lock()
		s.outputs[req.ID] = bufs
		if queue != nil {
			s.stdins[req.ID] = queue
		}
		if req.Collect > 0 {
			s.collect[req.ID] = min(req.Collect, CollectMax)
		}
		s.mu.Unlock()
	} else {
		if len(files) != 3 {
			s.fail(req.ID, "exec: want 3 stdio descriptors")
			return
		}
		attr.Files = []uintptr{files[0].Fd(), files[1].Fd(), files[2].Fd()}
	}
	// Start under the lock so the reaper cannot collect the child before it
	// is registered.
	s.mu.Lock()
	s.maxID = max(s.maxID, req.ID)
	pid, err := syscall.ForkExec(path, req.Argv, attr)
	pidfd := -1
	if err == nil {
		s.procs[pid] = req.ID
		s.pids[req.ID] = pid
		// Opened before the reaper can collect the child (it needs mu).
		pidfd, _ = unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	} else {
		// Never started: nothing will read its streams or feed its stdin.
		s.dropOutput(req.ID)
		delete(s.collect, req.ID)
	}
	s.mu.Unlock()
	if err != nil {
		s.failExec(req.ID, forkExecError(req.Argv[0], path, req.Dir, err))
		return
	}
	started := &Message{Type: TypeStarted, Started: &Started{ID: req.ID, Pid: pid}}
	if master != nil {
		s.send(started, int(master.Fd()))
	} else {
		s.send(started)
	}
	if pidfd >= 0 {
		go s.awaitExit(pidfd)
	}
	// A child may have exited before it was registered; collect it now.
	s.reap()
}

// awaitExit reaps when the process behind pidfd has exited. SIGCHLD tells
// the agent as well, but through the Go runtime's signal thread and two
// goroutines on other threads (about 0.15 ms on a 2-CPU VM); the pidfd is
// in the runtime's poller, whose thread runs this at once, usually in the
// same wake-up as the end of the process's output. Whichever comes first
// reaps; the other finds nothing. Where non-blocking pidfds are missing (a
// kernel before 5.10) the agent relies on SIGCHLD alone.
func (s *Server) awaitExit(pidfd int) {
	f := os.NewFile(uintptr(pidfd), "pidfd")
	defer f.Close()
	if rc, err := f.SyscallConn(); err == nil {
		rc.Read(func(fd uintptr) bool {
			var info unix.Siginfo
			// WNOWAIT: only look; reap collects it, with any orphan.
			// The pidfd does not block: EAGAIN while it runs.
			err := unix.Waitid(unix.P_PIDFD, int(fd), &info, unix.WEXITED|unix.WNOWAIT, nil)
			return err != unix.EAGAIN && err != unix.EINTR
		})
	}
	s.reap()
}

func (s *Server) signal(req *Signal) {
	if req == nil {
		return
	}
	s.mu.Lock()
	pid, ok := s.pids[req.ID]
	s.mu.Unlock()
	if !ok {
		s.fail(req.ID, "signal: no such process")
		return
	}
	// Deliver to the process group the process leads (it called setsid),
	// like a terminal does, falling back to the process itself.
	if err := unix.Kill(-pid, unix.Signal(req.Signal)); err != nil {
		unix.Kill(pid, unix.Signal(req.Signal))
	}
}

func (s *Server) reap() {
	// Exits whose output has ended already are sent once mu is released,
	// from this goroutine; the others wait for their output on one of
	// their own.
	var now []*Message
	defer func() {
		for _, m := range now {
			s.send(m)
		}
	}()
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil || pid <= 0 {
			return
		}
		id, ok := s.procs[pid]
		if !ok {
			continue // an orphan reparented to PID 1
		}
		delete(s.procs, pid)
		delete(s.pids, id)
		collect := s.collect[id]
		delete(s.collect, id)
		ex := &Exit{ID: id}
		switch {
		case ws.Exited():
			ex.Code = ws.ExitStatus()
		case ws.Signaled():
			ex.Signal = int(ws.Signal())
		}
		bufs, captured := s.outputs[id]
		if captured {
			s.keepFinished(id)
		}
		exit := func() *Message {
			if collect > 0 {
				ex.Output = collected(bufs, collect)
			}
			return &Message{Type: TypeExit, Exit: ex}
		}
		if !captured || bufs[0].hasEnded() && bufs[1].hasEnded() {
			now = append(now, exit())
			continue
		}
		go func() {
			// Its output first: a supervisor that reads what there is
			// once it learns of the exit then finds all of it, unless a
			// child the process left holds its output open.
			late := make(chan struct{})
			t := time.AfterFunc(exitFlush, func() { close(late) })
			for _, b := range bufs {
				select {
				case <-b.ended:
				case <-late:
				}
			}
			t.Stop()
			s.send(exit())
		}()
	}
}

// collected is the whole output of an ended process for its exit
// (ExecRequest.Collect), or nil unless both streams have ended, hold no
// more than max bytes together and dropped none.
func collected(bufs [2]*outputBuffer, max int) *Output {
	var out [2][]byte
	for i, b := range bufs {
		data, from, eof, _ := b.read(0, max+1)
		if from != 0 || !eof {
			return nil
		}
		out[i] = data
		max -= len(data)
		if max < 0 {
			return nil
		}
	}
	return &Output{Stdout: out[0], Stderr: out[1]}
}

// keepFinished records that captured process id exited, then drops the
// output of the oldest finished processes beyond keepFinishedBytes and
// keepFinishedProcs (never id's own). The caller holds s.mu.
func (s *Server) keepFinished(id uint64) {
	s.finished = append(s.finished, id)
	total := 0
	for _, f := range s.finished {
		if bufs, ok := s.outputs[f]; ok {
			total += bufs[0].size() + bufs[1].size()
		}
	}
	for len(s.finished) > 1 && (total > keepFinishedBytes || len(s.finished) > keepFinishedProcs) {
		old := s.finished[0]
		s.finished = s.finished[1:]
		if bufs, ok := s.outputs[old]; ok {
			total -= bufs[0].size() + bufs[1].size()
		}
		s.dropOutput(old)
	}
}

// dropOutput forgets captured process id's output and stdin. The caller
// holds s.mu.
func (s *Server) dropOutput(id uint64) {
	if bufs, ok := s.outputs[id]; ok {
		// A child still writing must not wait for readers of output
		// that is gone.
		bufs[0].releaseAll()
		bufs[1].releaseAll()
	}
	delete(s.outputs, id)
	if q, ok := s.stdins[id]; ok {
		delete(s.stdins, id)
		close(q)
	}
	if i := slices.Index(s.finished, id); i >= 0 {
		s.finished = slices.Delete(s.finished, i, i+1)
	}
}

// capture makes the stdio of a captured process: three pipes, whose
// read ends of stdout and stderr feed output buffers and whose write end of
// stdin is the agent's. It returns the child's ends (the caller closes them
// once the child has them), the buffers and the stdin writer. With
// noStdin, the write end of stdin is closed at once: no writer.
func (s *Server) capture(noStdin bool) ([]int, [2]*outputBuffer, *os.File, error) {
	var bufs [2]*outputBuffer
	var stdinR int
	var stdinW *os.File
	var err error
	if noStdin {
		var p [2]int
		if err = unix.Pipe2(p[:], unix.O_CLOEXEC); err == nil {
			unix.Close(p[1])
			stdinR = p[0]
		}
	} else {
		stdinR, stdinW, err = childPipe(0)
	}
	if err != nil {
		return nil, bufs, nil, err
	}
	child := []int{stdinR}
	for i := range bufs {
		w, r, err := childPipe(1)
		if err != nil {
			closeFDs(child)
			stdinW.Close()
			return nil, bufs, nil, err
		}
		child = append(child, w)
		bufs[i] = newOutputBuffer(DefaultOutputCap)
		go func(r *os.File, b *outputBuffer) {
			defer r.Close()
			b.pump(r)
		}(r, bufs[i])
	}
	return child, bufs, stdinW, nil
}

// childPipe makes a pipe of which the child gets end childEnd (0 read, 1
// write) as a plain blocking descriptor, and the agent the other end,
// non-blocking in its poller. Unlike os.Pipe, the child's end is never
// registered with the poller nor switched between modes: each exec makes
// three such pipes, and in gVisor every system call the agent makes is a
// round trip to the Sentry (this saves five per pipe).
func childPipe(childEnd int) (child int, ours *os.File, err error) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return -1, nil, err
	}
	if _, err := unix.FcntlInt(uintptr(p[1-childEnd]), unix.F_SETFL, unix.O_NONBLOCK); err != nil {
		unix.Close(p[0])
		unix.Close(p[1])
		return -1, nil, err
	}
	return p[childEnd], os.NewFile(uintptr(p[1-childEnd]), "pipe"), nil
}

// closeFDs closes raw descriptors.
func closeFDs(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// stdin queues a write to a captured process's stdin; the writer answers.
func (s *Server) stdin(req *Stdin) {
	if req == nil {
		return
	}
	s.mu.Lock()
	queue, ok := s.stdins[req.ID]
	if ok && req.Close {
		delete(s.stdins, req.ID) // later writes fail: stdin is closed
	}
	s.mu.Unlock()
	if !ok {
		s.send(&Message{Type: TypeAck, Ack: &Ack{Seq: req.Seq, Error: "no open stdin for that process"}})
		return
	}
	if req.Close {
		// Behind every write already queued; blocking is fine off the loop.
		go func() {
			queue <- req
			close(queue)
		}()
		return
	}
	select {
	case queue <- req:
	default:
		s.send(&Message{Type: TypeAck, Ack: &Ack{Seq: req.Seq, Error: "stdin busy: too many writes in flight"}})
	}
}

// stdinWriter feeds one captured process's stdin in order, off the request
// loop (a process that does not read must not stall the agent).
func (s *Server) stdinWriter(w *os.File, queue chan *Stdin) {
	defer w.Close()
	for req := range queue {
		ack := &Ack{Seq: req.Seq}
		if len(req.Data) > 0 {
			if _, err := w.Write(req.Data); err != nil {
				ack.Error = "write stdin: " + err.Error()
			}
		}
		s.send(&Message{Type: TypeAck, Ack: ack})
		if req.Close {
			return
		}
	}
}

// read answers one ReadRequest, waiting (bounded) for data if asked to.
func (s *Server) read(req *ReadRequest) {
	if req == nil {
		return
	}
	answer := &Data{Seq: req.Seq}
	defer func() { s.sendData(answer, req.Raw) }()
	s.mu.Lock()
	bufs, ok := s.outputs[req.ID]
	s.mu.Unlock()
	if !ok || (req.Stream != Stdout && req.Stream != Stderr) {
		answer.Error = "no captured output for that process and stream"
		s.mu.Lock()
		if !ok && req.ID != 0 && req.ID <= s.maxID {
			answer.Gone = true
			answer.Error = fmt.Sprintf("the output of this process is not kept: it was not captured (a terminal), or it finished and was dropped (the agent keeps the output of the newest finished processes, up to %d MiB and %d processes)", keepFinishedBytes>>20, keepFinishedProcs)
		}
		s.mu.Unlock()
		return
	}
	limit := req.Max
	if limit <= 0 || limit > MaxRead {
		limit = MaxRead
	}
	wait := time.NewTimer(time.Duration(min(max(req.WaitMs, 0), 60000)) * time.Millisecond)
	defer wait.Stop()
	b := bufs[req.Stream-1]
	for {
		data, from, eof, changed := b.read(req.Cursor, limit)
		if len(data) > 0 || eof {
			answer.From, answer.Data, answer.EOF = from, data, eof
			return
		}
		select {
		case <-changed:
		case <-wait.C:
			answer.From = from
			return
		}
	}
}

// hold renews, moves or releases an attached reader's hold on a captured
// stream. It has no answer: a hold for output that is gone is moot.
func (s *Server) hold(req *Hold) {
	if req == nil || req.Reader == 0 || (req.Stream != Stdout && req.Stream != Stderr) {
		return
	}
	s.mu.Lock()
	bufs, ok := s.outputs[req.ID]
	s.mu.Unlock()
	if !ok {
		return
	}
	b := bufs[req.Stream-1]
	if req.Release {
		b.release(req.Reader)
		return
	}
	b.hold(req.Reader, req.Keep, time.Now())
}

// releaseAfter is how long the control channel is quiet before the agent
// gives memory back to the host.
const releaseAfter = 2 * time.Second

// releaseMin is how much the agent must have allocated (since it started,
// then since it last gave memory back) for a release to be worth a
// collection: an agent that has only been set up, or has run a command or
// two, keeps its few hundred KiB, which a forced collection's own
// bookkeeping would outgrow (measured: +0.14 MiB).
const releaseMin = 1 << 20

// idleRelease returns an idle agent's garbage to the host. The Go collector
// first runs when the heap reaches 4 MiB and then keeps the freed pages for
// reuse, so an agent that ran a few commands and fell idle would hold a few
// MiB of garbage for as long as the sandbox lives (measured over 50 idle
// sandboxes: an agent's PSS 1.0 MiB after setup, 4.8 MiB after 60 execs of
// true, 2.0 MiB with this).
type idleRelease struct {
	mu     sync.Mutex
	worked atomic.Bool // a request came since the last look
	last   uint64      // bytes allocated up to the last release
}

// release runs when the channel has been quiet for releaseAfter.
// (runtime.ReadMemStats rather than runtime/metrics: that package's
// initialisation alone would cost every agent 15 KiB.)
func (r *idleRelease) release() {
	if !r.mu.TryLock() {
		return
	}
	defer r.mu.Unlock()
	if !r.worked.Swap(false) {
		return
	}
	var ms goruntime.MemStats
	goruntime.ReadMemStats(&ms)
	if ms.TotalAlloc-r.last < releaseMin {
		return
	}
	debug.FreeOSMemory()
	goruntime.ReadMemStats(&ms)
	r.last = ms.TotalAlloc
}
