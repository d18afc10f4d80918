package manager

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	goruntime "runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/internal/errdefs"
	"github.com/airlock-dev/airlock/internal/runtime"
	"github.com/airlock-dev/airlock/internal/store"
)

// Limits on exec requests.
const (
	maxArgv       = 4096
	maxArgvBytes  = 1 << 20
	maxStdinBytes = 16 << 20 // in an ExecRequest; POST .../stdin streams more
)

// exitGrace is how long exec keeps reading output after its process exited
// while something still holds the output open.
const exitGrace = 250 * time.Millisecond

// collectWait is how long exec waits for its process's exit to bring the
// whole output (runtime.Collector) before it reads the streams as usual.
// The output is held from the start meanwhile, so nothing is lost; a
// process that fills the runtime's buffer within it waits that long at
// most for its reader.
const collectWait = 20 * time.Millisecond

// proc is a process started through the API.
type proc struct {
	sb       *Sandbox
	rp       runtime.Process // nil for a process that ended before an adoption
	timedOut atomic.Bool
	// endedByDelete: it ended while its sandbox was being deleted (its
	// followers are told that, not an exit the delete made).
	endedByDelete atomic.Bool
	done          chan struct{} // closed when it has ended
	stdinMu       turnLock      // held by each writer of its stdin, in turn
	// saveMu orders the writes of its record: each one copies the record
	// and stores it under it, so the last write stores the latest record.
	saveMu sync.Mutex

	mu          sync.Mutex
	rec         store.Process
	stdinClosed bool // a close of its stdin was asked for

	// dropped: a finished process served from its stored record, no
	// longer kept whole by its sandbox (keepFinishedProcs).
	dropped bool
}

// end records how the process ended; only the first call counts.
func (p *proc) end(st runtime.ExitStatus, timedOut bool, now time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.rec.EndedAt != nil {
		return false
	}
	code := st.Code
	if st.Signal != 0 {
		code = 128 + st.Signal
	}
	p.rec.EndedAt, p.rec.ExitCode, p.rec.Signal = &now, &code, st.Signal
	p.rec.TimedOut = p.rec.TimedOut || timedOut
	close(p.done)
	return true
}

// view is the API's picture of the process.
func (p *proc) view() api.Process {
	p.mu.Lock()
	r := p.rec
	p.mu.Unlock()
	return procView(&r)
}

// procView is the API's picture of a process record.
func procView(r *store.Process) api.Process {
	v := api.Process{ID: procID(r.ID), SandboxID: r.SandboxID, Argv: r.Argv, Cwd: r.Cwd, TTY: r.TTY,
		State: api.ProcessRunning, StartedAt: r.StartedAt, Signal: r.Signal, TimedOut: r.TimedOut, EndReason: r.EndReason}
	if r.EndedAt != nil {
		v.State, v.EndedAt, v.ExitCode = api.ProcessExited, r.EndedAt, r.ExitCode
		v.DurationMs = float64(r.EndedAt.Sub(r.StartedAt).Microseconds()) / 1000
	}
	return v
}

func procID(n uint64) string { return "p" + strconv.FormatUint(n, 10) }

// parseProcID parses "p<N>".
func parseProcID(s string) (uint64, bool) {
	if len(s) < 2 || s[0] != 'p' || (s[1] == '0' && len(s) > 2) {
		return 0, false
	}
	n, err := strconv.ParseUint(s[1:], 10, 64)
	return n, err == nil
}

func (m *Manager) saveProc(ctx context.Context, p *proc) error {
	p.saveMu.Lock()
	defer p.saveMu.Unlock()
	p.mu.Lock()
	r := p.rec
	p.mu.Unlock()
	err := m.st.PutProcess(context.WithoutCancel(ctx), &r)
	if err != nil {
		m.log.Error("store process", "sandbox", r.SandboxID, "process", r.ID, "err", err)
	}
	return err
}

// keepFinishedProcs is how many finished processes a sandbox keeps whole
// (the runtime's process, its output, its channels), newest end first: as
// many as the agent keeps the output of. Older ones are served from the
// store: their record (state, exit, times) stays, their output does not.
// Without a bound the daemon kept every process a sandbox ever ran, about
// 0.9 KB each, for the sandbox's life.
var keepFinishedProcs = 256

// retire counts p, which has ended and whose end is stored, among the
// sandbox's finished processes, and lets go of the oldest beyond
// keepFinishedProcs. One whose end could not be stored is kept whole (the
// store would answer for it with a stale record).
func (m *Manager) retire(p *proc, saved error) {
	if saved != nil {
		return
	}
	sb := p.sb
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if sb.procs[p.rec.ID] != p {
		return
	}
	sb.finished = append(sb.finished, p.rec.ID)
	for len(sb.finished) > keepFinishedProcs {
		delete(sb.procs, sb.finished[0])
		sb.finished = sb.finished[1:]
		sb.dropped = true
	}
}

// errOutputDropped is the answer for the output of a finished process the
// sandbox no longer keeps whole.
func errOutputDropped(pid string) error {
	return fmt.Errorf("process %s output: it finished and was dropped (a sandbox keeps the output of its newest %d finished processes; the process stays listed with its exit): %w",
		pid, keepFinishedProcs, errdefs.ErrNotFound)
}

// live returns a sandbox that is running, touched, with its runtime.
func (m *Manager) live(ctx context.Context, id string) (*Sandbox, runtime.Sandbox, error) {
	sb, err := m.lookup(ctx, id)
	if err != nil {
		return nil, nil, err
	}
	now := time.Now().UTC()
	sb.mu.Lock()
	defer sb.mu.Unlock()
	sb.activity, sb.dirty = now, true
	if sb.rec.State != api.StateRunning || sb.ending || sb.rt == nil {
		return nil, nil, conflict("sandbox %s is %s, not running", id, sb.stateWord())
	}
	return sb, sb.rt, nil
}

// execRequest validates an API exec request and builds the runtime's.
func (m *Manager) execRequest(sb *Sandbox, req *api.ExecRequest, tty bool) (*runtime.ExecRequest, time.Duration, error) {
	if len(req.Argv) == 0 || req.Argv[0] == "" {
		return nil, 0, invalid("argv: empty (give the command and its arguments, e.g. [\"ls\", \"-l\"])")
	}
	if len(req.Argv) > maxArgv {
		return nil, 0, invalid("argv: %d arguments, the limit is %d", len(req.Argv), maxArgv)
	}
	n := 0
	for i, a := range req.Argv {
		if strings.ContainsRune(a, 0) {
			return nil, 0, invalid("argv[%d]: contains a NUL byte", i)
		}
		n += len(a)
	}
	if n > maxArgvBytes {
		return nil, 0, invalid("argv: %d bytes, the limit is %d", n, maxArgvBytes)
	}
	if len(req.Stdin) > maxStdinBytes {
		return nil, 0, fmt.Errorf("stdin: %d bytes, the limit in a request is %d (stream larger input with a background process and POST .../stdin): %w", len(req.Stdin), maxStdinBytes, errdefs.ErrTooLarge)
	}
	cwd := req.Cwd
	if cwd == "" {
		cwd = "/workspace"
	}
	if strings.ContainsRune(cwd, 0) {
		return nil, 0, invalid("cwd: contains a NUL byte")
	}
	if !path.IsAbs(cwd) {
		cwd = path.Join("/workspace", cwd)
	}
	cwd = path.Clean(cwd)
	if cwd == "/proc" || strings.HasPrefix(cwd, "/proc/") {
		return nil, 0, invalid("cwd %s: a directory under /proc is not a working directory", errdefs.Quote(req.Cwd))
	}
	if req.TimeoutSeconds < 0 || req.TimeoutSeconds != req.TimeoutSeconds {
		return nil, 0, invalid("timeout_seconds: %v must not be negative", req.TimeoutSeconds)
	}
	timeout, err := seconds("timeout_seconds", req.TimeoutSeconds, 0)
	if err != nil {
		return nil, 0, err
	}
	if req.MaxOutputBytes < 0 {
		return nil, 0, invalid("max_output_bytes: %d must not be negative", req.MaxOutputBytes)
	}
	sb.mu.Lock()
	env := make(map[string]string, len(sb.spec.Env)+len(req.Env))
	for k, v := range sb.spec.Env {
		env[k] = v
	}
	for k, v := range sb.egressEnv {
		env[k] = v
	}
	sb.mu.Unlock()
	if len(req.Env) > maxEnv {
		return nil, 0, invalid("env: %d variables, the limit is %d", len(req.Env), maxEnv)
	}
	for k, v := range req.Env {
		if err := checkEnv(k, v); err != nil {
			return nil, 0, err
		}
		env[k] = v
	}
	if tty && env["TERM"] == "" {
		env["TERM"] = "xterm-256color"
	}
	list := make([]string, 0, len(env))
	for k, v := range env {
		list = append(list, k+"="+v)
	}
	sort.Strings(list)
	// The output is held from the start: a client that starts a process
	// and follows it (airlock exec, exec's own drain) gets every byte; one
	// nobody follows is held back for the runtime's grace at most.
	return &runtime.ExecRequest{Argv: req.Argv, Env: list, Dir: cwd, TTY: tty, Capture: !tty, Hold: !tty}, timeout, nil
}

// start starts a process and tracks it until it ends; req.Stdin is fed
// to it, then with closeStdin its stdin is closed.
func (m *Manager) start(ctx context.Context, id string, req *api.ExecRequest, tty, closeStdin bool, rows, cols uint16, collect int) (*proc, error) {
	sb, rt, err := m.live(ctx, id)
	if err != nil {
		return nil, err
	}
	rreq, timeout, err := m.execRequest(sb, req, tty)
	if err != nil {
		return nil, err
	}
	rreq.Rows, rreq.Cols, rreq.Collect = rows, cols, collect
	// Nothing to feed it: its stdin is at its end from the start, without
	// a request and answer to close it once it runs.
	rreq.StdinClosed = rreq.Capture && closeStdin && len(req.Stdin) == 0
	rp, err := rt.Exec(ctx, rreq)
	if err != nil {
		m.met.errors.With("exec").Inc()
		return nil, execError(id, req.Argv[0], err)
	}
	aid := uint64(0)
	if a, ok := rp.(interface{ ID() uint64 }); ok {
		aid = a.ID()
	}
	p := &proc{sb: sb, rp: rp, done: make(chan struct{}), rec: store.Process{
		SandboxID: id, ID: aid, Argv: req.Argv, Cwd: rreq.Dir, TTY: tty, StartedAt: time.Now().UTC(),
	}}
	sb.mu.Lock()
	sb.procs[aid] = p
	sb.running++
	sb.mu.Unlock()
	if !collecting(p) {
		m.saveProc(ctx, p)
	}
	if timeout > 0 {
		t := time.AfterFunc(timeout, func() {
			p.timedOut.Store(true)
			rp.Signal(syscall.SIGKILL)
		})
		go func() { <-p.done; t.Stop() }()
	}
	go m.reapProc(p)
	if rreq.StdinClosed {
		p.closeStdin()
	} else if sw, ok := rp.(runtime.StdinWriter); ok && !tty && (len(req.Stdin) > 0 || closeStdin) {
		// Fed in the background, yet before any later write: the process
		// may write more meanwhile than the agent buffers, and its output
		// waits for a reader, who can attach only once start returns.
		p.stdinMu.lock(context.Background())
		go func() {
			defer p.stdinMu.unlock()
			ctx := context.WithoutCancel(ctx)
			if len(req.Stdin) > 0 {
				if err := sw.WriteStdin(ctx, req.Stdin); err != nil {
					m.log.Warn("stdin", "sandbox", id, "process", aid, "err", err)
				}
			}
			if closeStdin && p.closeStdin() {
				sw.CloseStdin(ctx)
			}
		}()
	}
	return p, nil
}

// collecting reports whether p's output may come with its exit (Exec
// with a runtime.Collector): start then leaves its record to Exec.
func collecting(p *proc) bool {
	c, ok := p.rp.(runtime.Collector)
	return ok && c.Collecting()
}

// reapProc waits for a process to end and records it.
func (m *Manager) reapProc(p *proc) {
	st, err := p.rp.Wait(context.Background())
	if err != nil && st == (runtime.ExitStatus{}) {
		st = runtime.ExitStatus{Signal: 9}
	}
	// Timed out only if the timer's SIGKILL ended it: a process that
	// exited as the timer fired ran to its end.
	timedOut := p.timedOut.Load() && st.Signal == int(syscall.SIGKILL)
	if p.end(st, timedOut, time.Now().UTC()) {
		p.sb.mu.Lock()
		p.endedByDelete.Store(p.sb.deleting)
		p.sb.running--
		p.sb.activity, p.sb.dirty = time.Now().UTC(), true
		p.sb.mu.Unlock()
		// The exec that waits for this end (p.done) was just made
		// runnable on this goroutine's P: let it answer before the store
		// write, which otherwise held it for the write's length (the exec
		// round trip of true 1.19-1.23 ms without this, 1.12-1.18 with).
		goruntime.Gosched()
		m.retire(p, m.saveProc(context.Background(), p))
	}
}

// execError classifies an exec failure.
func execError(id, cmd string, err error) error {
	msg := err.Error()
	// The agent's message repeats the command ("exec NAME: why"): keep
	// only why, since the command is quoted (and capped) already.
	why := strings.TrimPrefix(msg, "exec "+cmd+": ")
	switch {
	case errors.Is(err, runtime.ErrCommandNotFound):
		// The kind's own text ends the message: "...: command not found".
		return fmt.Errorf("sandbox %s: %s: %s: %w", id, errdefs.Quote(cmd), why, errdefs.ErrCommandNotFound)
	case errors.Is(err, runtime.ErrNotExecutable):
		return fmt.Errorf("sandbox %s: %s: %s: %w", id, errdefs.Quote(cmd), why, errdefs.ErrNotExecutable)
	case strings.Contains(msg, "chdir"):
		return fmt.Errorf("sandbox %s: working directory: %v: %w", id, err, errdefs.ErrInvalid)
	case strings.Contains(msg, "permission denied") || strings.Contains(msg, "not a directory"):
		return fmt.Errorf("sandbox %s: %v: %w", id, err, errdefs.ErrInvalid)
	case strings.Contains(msg, "sandbox ended"):
		return fmt.Errorf("sandbox %s: %v: %w", id, err, errdefs.ErrConflict)
	}
	return fmt.Errorf("sandbox %s: exec: %w", id, err)
}

// Start starts a process in the background.
func (m *Manager) Start(ctx context.Context, id string, req *api.ExecRequest) (api.Process, error) {
	p, err := m.start(ctx, id, req, false, false, 0, 0, 0)
	if err != nil {
		return api.Process{}, err
	}
	return p.view(), nil
}

// Exec runs a process and waits for it: exit status and output, each
// stream capped with a marker.
func (m *Manager) Exec(ctx context.Context, id string, req *api.ExecRequest) (api.ExecResult, error) {
	t0 := time.Now()
	if req.TimeoutSeconds == 0 {
		req.TimeoutSeconds = m.cfg.ExecTimeout.Seconds()
	}
	limit := m.cfg.MaxOutput
	if req.MaxOutputBytes > 0 {
		limit = min(req.MaxOutputBytes, limit)
	}
	p, err := m.start(ctx, id, req, false, true, 0, 0, limit)
	if err != nil {
		return api.ExecResult{}, err
	}
	if collecting(p) {
		// A command that ends at once brings its whole output with its
		// exit: no read of either stream, and its record is stored once,
		// ended (reapProc), instead of at its start and again at its end.
		t := time.NewTimer(collectWait)
		select {
		case <-p.done:
			if stdout, stderr, ok := p.rp.(runtime.Collector).Collected(); ok {
				t.Stop()
				return m.execResult(p, t0, capped{data: stdout}, capped{data: stderr}), ctx.Err()
			}
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
		// It runs on: its start is stored now, as start would have
		// (saveMu keeps a record that ends meanwhile from being
		// overwritten by an older one). One that ended, its output too
		// large to come with the exit, is stored by reapProc.
		select {
		case <-p.done:
		default:
			m.saveProc(ctx, p)
		}
	}
	or, ok := p.rp.(runtime.OutputReader)
	if !ok {
		return api.ExecResult{}, fmt.Errorf("exec: the %s runtime keeps no output: %w", "sandbox's", errdefs.ErrNotSupported)
	}
	var out, errb capped
	var wg sync.WaitGroup
	stop := make(chan struct{})
	drained := make(chan struct{})
	wg.Add(2)
	go func() { defer wg.Done(); out.drain(ctx, stop, or, 1, limit) }()
	go func() { defer wg.Done(); errb.drain(ctx, stop, or, 2, limit) }()
	go func() { wg.Wait(); close(drained) }()
	select {
	case <-p.done:
	case <-ctx.Done():
		// The caller went away: the process is killed, not orphaned.
		p.rp.Signal(syscall.SIGKILL)
		<-p.done
	}
	// The result is due when the process exits, even if a background child
	// it left keeps its output open: the streams are read to their end for
	// a short grace period, then to what the agent has (however long that
	// takes to arrive), and the rest is left to the output stream.
	select {
	case <-drained:
	case <-time.After(exitGrace):
		close(stop)
		<-drained
	}
	return m.execResult(p, t0, out, errb), ctx.Err()
}

// execResult is the answer to an exec whose process p ended, with the
// output read.
func (m *Manager) execResult(p *proc, t0 time.Time, out, errb capped) api.ExecResult {
	v := p.view()
	res := api.ExecResult{ProcessID: v.ID, Signal: v.Signal, TimedOut: v.TimedOut,
		Stdout: out.result(), Stderr: errb.result(), StdoutTruncated: out.dropped > 0, StderrTruncated: errb.dropped > 0,
		DurationMs: float64(time.Since(t0).Microseconds()) / 1000}
	if v.ExitCode != nil {
		res.ExitCode = *v.ExitCode
	}
	m.met.execSeconds.Observe(time.Since(t0).Seconds())
	return res
}

// capped keeps the first limit bytes of a stream and counts the rest.
type capped struct {
	data    []byte
	dropped uint64
}

// drain reads a captured stream to its end or, once stop is closed, to
// what the agent has then. Until it has its limit it is an attached
// reader (the process waits for it rather than losing bytes); beyond, it
// only counts what it discards and lets the process run free.
func (c *capped) drain(ctx context.Context, stop <-chan struct{}, or runtime.OutputReader, stream, limit int) {
	var cursor uint64
	a := attach(or, stream)
	defer func() { a.Close(false) }()
	waiting, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-stop:
			cancel()
		case <-waiting.Done():
		}
	}()
	rctx, wait := waiting, 10*time.Second
	// After stop: reads that do not wait, as many as the agent's buffer
	// and a pipe can hold (a background child may keep writing).
	const lastReads = 8
	for n := 0; wait > 0 || n < lastReads; n++ {
		if len(c.data) >= limit {
			if _, plain := a.(plainReader); !plain {
				a.Close(false)
				a = plainReader{or, stream}
			}
		}
		ch, err := a.Read(rctx, cursor, 256<<10, wait)
		if err != nil {
			if ctx.Err() != nil || wait == 0 || rctx.Err() == nil {
				return
			}
			// Stopped while waiting: an answer still on its way is
			// asked for again.
			rctx, wait, n = ctx, 0, -1
			continue
		}
		if ch.From > cursor {
			c.dropped += ch.From - cursor
		}
		keep := min(len(ch.Data), max(limit-len(c.data), 0))
		c.data = append(c.data, ch.Data[:keep]...)
		c.dropped += uint64(len(ch.Data) - keep)
		cursor = ch.Next()
		if ch.EOF || (wait == 0 && len(ch.Data) == 0) {
			return
		}
	}
}

func (c *capped) result() []byte {
	if c.dropped > 0 {
		return append(c.data, fmt.Sprintf("\n[airlock: output truncated, %d more bytes not shown]\n", c.dropped)...)
	}
	if c.data == nil {
		return []byte{}
	}
	return c.data
}

// process finds a process of a sandbox (running or not).
func (m *Manager) process(ctx context.Context, id, pid string) (*Sandbox, *proc, error) {
	sb, err := m.lookup(ctx, id)
	if err != nil {
		return nil, nil, err
	}
	n, ok := parseProcID(pid)
	if !ok {
		return nil, nil, fmt.Errorf("process %s: not a process id (p1, p2, ...): %w", errdefs.Quote(pid), errdefs.ErrNotFound)
	}
	sb.mu.Lock()
	p := sb.procs[n]
	dropped := sb.dropped
	sb.activity, sb.dirty = time.Now().UTC(), true
	sb.mu.Unlock()
	if p == nil && dropped {
		// A finished process the sandbox no longer keeps whole: its
		// stored record (its end was stored before it was let go).
		r, err := m.st.GetProcess(ctx, sb.id, n)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return nil, nil, fmt.Errorf("sandbox %s: process %s: %w", id, errdefs.Quote(pid), err)
		}
		if r != nil && r.EndedAt != nil {
			p = &proc{sb: sb, rec: *r, done: closedChan, dropped: true}
		}
	}
	if p == nil {
		return nil, nil, fmt.Errorf("sandbox %s: process %s: %w", id, errdefs.Quote(pid), errdefs.ErrNotFound)
	}
	return sb, p, nil
}

// closedChan is the done channel of a process served from the store.
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// Process returns a process.
func (m *Manager) Process(ctx context.Context, id, pid string) (api.Process, error) {
	_, p, err := m.process(ctx, id, pid)
	if err != nil {
		return api.Process{}, err
	}
	return p.view(), nil
}

// Processes lists a sandbox's processes.
func (m *Manager) Processes(ctx context.Context, id string) (api.ProcessList, error) {
	sb, err := m.lookup(ctx, id)
	if err != nil {
		return api.ProcessList{}, err
	}
	ps, dropped := sb.kept()
	out := api.ProcessList{Processes: make([]api.Process, 0, len(ps))}
	if !dropped {
		for _, p := range ps {
			out.Processes = append(out.Processes, p.view())
		}
		return out, nil
	}
	// The finished processes it no longer keeps whole are listed from
	// the store (each one's end was stored before it was let go); those
	// it keeps are listed as it knows them now.
	recs, err := m.st.ListProcesses(ctx, sb.id)
	if errors.Is(err, store.ErrNotFound) {
		return api.ProcessList{}, fmt.Errorf("sandbox %s: %w", id, errdefs.ErrNotFound)
	}
	if err != nil {
		return api.ProcessList{}, fmt.Errorf("sandbox %s: processes: %w", id, err)
	}
	kept := make(map[uint64]bool, len(ps))
	for _, p := range ps {
		kept[p.rec.ID] = true
	}
	type item struct {
		id uint64
		v  api.Process
	}
	all := make([]item, 0, len(recs)+len(ps))
	for _, r := range recs {
		if !kept[r.ID] {
			all = append(all, item{r.ID, procView(r)})
		}
	}
	for _, p := range ps {
		all = append(all, item{p.rec.ID, p.view()})
	}
	sort.Slice(all, func(i, j int) bool { return all[i].id < all[j].id })
	out.Processes = make([]api.Process, 0, len(all))
	for _, it := range all {
		out.Processes = append(out.Processes, it.v)
	}
	return out, nil
}

// RunningProcesses lists the processes of sandbox id that have not
// ended, oldest first. They are all kept whole in memory, so the store is
// not read: the answer costs the same however many processes ended before.
func (m *Manager) RunningProcesses(ctx context.Context, id string) ([]api.Process, error) {
	sb, err := m.lookup(ctx, id)
	if err != nil {
		return nil, err
	}
	ps, _ := sb.kept()
	var out []api.Process
	for _, p := range ps {
		if v := p.view(); v.State == api.ProcessRunning {
			out = append(out, v)
		}
	}
	return out, nil
}

// kept returns the processes the sandbox keeps whole (the running ones and
// the newest finished ones), oldest first, and whether older ones were let
// go; as a use of the sandbox, it counts against its idle timeout.
func (sb *Sandbox) kept() ([]*proc, bool) {
	sb.touch(time.Now().UTC())
	sb.mu.Lock()
	ps := make([]*proc, 0, len(sb.procs))
	for _, p := range sb.procs {
		ps = append(ps, p)
	}
	dropped := sb.dropped
	sb.mu.Unlock()
	sort.Slice(ps, func(i, j int) bool { return ps[i].rec.ID < ps[j].rec.ID })
	return ps, dropped
}

// Wait waits up to d for a process to end.
func (m *Manager) Wait(ctx context.Context, id, pid string, d time.Duration) (api.Process, error) {
	_, p, err := m.process(ctx, id, pid)
	if err != nil {
		return api.Process{}, err
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
	case <-ctx.Done():
		return api.Process{}, ctx.Err()
	}
	return p.view(), nil
}

// Signal sends a signal to a running process.
func (m *Manager) Signal(ctx context.Context, id, pid, sig string) error {
	s, err := ParseSignal(sig)
	if err != nil {
		return err
	}
	sb, p, err := m.process(ctx, id, pid)
	if err != nil {
		return err
	}
	if err := m.runningProc(sb, p); err != nil {
		return err
	}
	return p.rp.Signal(s)
}

// runningProc checks that p can be acted on.
func (m *Manager) runningProc(sb *Sandbox, p *proc) error {
	sb.mu.Lock()
	state := sb.rec.State
	sb.mu.Unlock()
	if state != api.StateRunning {
		return conflict("sandbox %s is %s, not running", sb.id, state)
	}
	select {
	case <-p.done:
		return conflict("process %s has exited", procID(p.rec.ID))
	default:
	}
	if p.rp == nil {
		return conflict("process %s is not reachable", procID(p.rec.ID))
	}
	return nil
}

// Stdin writes data to a process's stdin, then closes it if asked. Writes
// go in after those before them (the request's own stdin may still be
// going in); a close alone is queued behind them without waiting, so that
// a client can close stdin and then attach to the output the process may
// be waiting to write first.
func (m *Manager) Stdin(ctx context.Context, id, pid string, r io.Reader, closeAfter bool) error {
	sb, p, err := m.process(ctx, id, pid)
	if err != nil {
		return err
	}
	if err := m.runningProc(sb, p); err != nil {
		// A process that has ended reads no more: closing its stdin asks
		// for what already is (airlock exec closes a quick command's
		// stdin when the command may have ended), so it is no conflict.
		// Data for it still is.
		if closeAfter && isClosed(p.done) && emptyBody(r) {
			return nil
		}
		return err
	}
	sw, ok := p.rp.(runtime.StdinWriter)
	if !ok || p.rec.TTY {
		return conflict("process %s takes no stdin through the API (a TTY process reads its PTY session)", pid)
	}
	buf := make([]byte, 64<<10)
	n, rerr := io.ReadAtLeast(r, buf, 1)
	if n == 0 && errors.Is(rerr, io.EOF) {
		if !closeAfter {
			return nil
		}
		if !p.closeStdin() {
			return conflict("process %s: stdin is already closed", pid)
		}
		go func() {
			p.stdinMu.lock(context.Background())
			defer p.stdinMu.unlock()
			if err := sw.CloseStdin(context.WithoutCancel(ctx)); err != nil {
				m.log.Warn("close stdin", "sandbox", id, "process", pid, "err", err)
			}
		}()
		return nil
	}
	// A write waits behind the ones before it (the start's own stdin may be
	// held by a process that does not read), but never past its request: a
	// client that gave up does not leave its handler parked here.
	if err := p.stdinMu.lock(ctx); err != nil {
		return fmt.Errorf("stdin: waiting behind an earlier write: %w", err)
	}
	defer p.stdinMu.unlock()
	if p.stdinClosing() {
		return conflict("process %s: stdin is closed", pid)
	}
	for {
		if n > 0 {
			if err := sw.WriteStdin(ctx, buf[:n]); err != nil {
				return fmt.Errorf("stdin: %w: %w", errdefs.ErrConflict, err)
			}
		}
		if rerr != nil {
			if !errors.Is(rerr, io.EOF) {
				return fmt.Errorf("stdin: reading the request: %w", rerr)
			}
			break
		}
		n, rerr = r.Read(buf)
	}
	if closeAfter && p.closeStdin() {
		return sw.CloseStdin(ctx)
	}
	return nil
}

// emptyBody reports whether r has no byte to give.
func emptyBody(r io.Reader) bool {
	var b [1]byte
	n, _ := io.ReadFull(r, b[:])
	return n == 0
}

// turnLock is a mutex whose waiters can give up with their context.
type turnLock struct {
	once sync.Once
	ch   chan struct{}
}

func (l *turnLock) init() { l.once.Do(func() { l.ch = make(chan struct{}, 1) }) }

// lock takes the lock, or returns ctx's error if ctx ends first.
func (l *turnLock) lock(ctx context.Context) error {
	l.init()
	select {
	case l.ch <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (l *turnLock) unlock() { <-l.ch }

// closeStdin marks the process's stdin as closing; false if it already was.
func (p *proc) closeStdin() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	was := p.stdinClosed
	p.stdinClosed = true
	return !was
}

func (p *proc) stdinClosing() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stdinClosed
}

// ParseSignal parses "TERM", "SIGTERM" or "15".
func ParseSignal(s string) (syscall.Signal, error) {
	if n, err := strconv.Atoi(s); err == nil {
		if n < 1 || n > 64 {
			return 0, invalid("signal %s: want 1 to 64", errdefs.Quote(s))
		}
		return syscall.Signal(n), nil
	}
	name := strings.TrimPrefix(strings.ToUpper(s), "SIG")
	if sig, ok := signals[name]; ok {
		return sig, nil
	}
	return 0, invalid("signal %s: unknown (e.g. TERM, KILL, INT, HUP, USR1 or a number)", errdefs.Quote(s))
}

var signals = map[string]syscall.Signal{
	"HUP": syscall.SIGHUP, "INT": syscall.SIGINT, "QUIT": syscall.SIGQUIT, "KILL": syscall.SIGKILL,
	"TERM": syscall.SIGTERM, "USR1": syscall.SIGUSR1, "USR2": syscall.SIGUSR2, "STOP": syscall.SIGSTOP,
	"CONT": syscall.SIGCONT, "ALRM": syscall.SIGALRM, "WINCH": syscall.SIGWINCH, "PIPE": syscall.SIGPIPE,
	"ABRT": syscall.SIGABRT, "TSTP": syscall.SIGTSTP,
}

// PTY starts a process on a pseudo-terminal; the caller owns the master.
func (m *Manager) PTY(ctx context.Context, id string, req *api.PTYStart) (pid string, master *os.File, wait func() api.PTYExit, err error) {
	if req.Rows == 0 {
		req.Rows = 24
	}
	if req.Cols == 0 {
		req.Cols = 80
	}
	p, err := m.start(ctx, id, &req.ExecRequest, true, false, req.Rows, req.Cols, 0)
	if err != nil {
		return "", nil, nil, err
	}
	wait = func() api.PTYExit {
		<-p.done
		v := p.view()
		e := api.PTYExit{ProcessID: v.ID, Signal: v.Signal}
		if v.ExitCode != nil {
			e.ExitCode = *v.ExitCode
		}
		return e
	}
	return procID(p.rec.ID), p.rp.PTY(), wait, nil
}

// SignalPTY signals a PTY process by id (for the WebSocket's control
// messages).
func (m *Manager) SignalPTY(ctx context.Context, id, pid string, sig syscall.Signal) error {
	sb, p, err := m.process(ctx, id, pid)
	if err != nil {
		return err
	}
	if err := m.runningProc(sb, p); err != nil {
		return err
	}
	return p.rp.Signal(sig)
}
