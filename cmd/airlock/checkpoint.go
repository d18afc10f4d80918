package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/internal/record"
	"github.com/airlock-dev/airlock/internal/runtime"
	"github.com/airlock-dev/airlock/internal/runtime/native"
	"github.com/airlock-dev/airlock/internal/workspace"
)

// Checkpoints of a running `airlock run --workspace DIR`: the airlock that
// runs the command holds the sandbox (its freezer) and the run, so it is
// the one that takes them. It listens on a unix socket in the run's
// directory (ctl.sock; the directory is the caller's, mode 0700) and
// answers a peer of its own uid (or root) only. `airlock checkpoint`
// sends one JSON request line and reads one JSON answer line.

// ckSocket is the name of the control socket in a run's directory.
const ckSocket = "ctl.sock"

// minCheckpointEvery bounds --checkpoint-every: each checkpoint pauses
// the sandbox while it copies what changed.
const minCheckpointEvery = 100 * time.Millisecond

type ckRequest struct {
	Name string `json:"name,omitempty"`
}

type ckAnswer struct {
	Checkpoint *workspace.Checkpoint `json:"checkpoint,omitempty"`
	Error      string                `json:"error,omitempty"`
}

// ckServer takes a running run's checkpoints, on request and every
// interval.
type ckServer struct {
	run    *workspace.Run
	pauser runtime.Pauser
	rec    *record.Recorder
	stderr io.Writer

	mu     sync.Mutex // one checkpoint at a time; held while closing
	closed bool
	ln     *net.UnixListener
	path   string
	stop   chan struct{}
	wg     sync.WaitGroup

	connMu sync.Mutex
	conns  map[*net.UnixConn]bool // open requests, cut short by close
}

// startCheckpoints listens for checkpoint requests of run, whose sandbox
// is sb, and takes one every interval (0: never).
func startCheckpoints(run *workspace.Run, sb runtime.Sandbox, rec *record.Recorder, every time.Duration, stderr io.Writer) (*ckServer, error) {
	s := &ckServer{run: run, rec: rec, stderr: stderr, stop: make(chan struct{}), conns: map[*net.UnixConn]bool{}}
	s.pauser, _ = sb.(runtime.Pauser)
	s.path = filepath.Join(run.Dir, ckSocket)
	os.Remove(s.path) // left by an airlock that was killed
	ln, err := listenUnix(s.path)
	if err != nil {
		return nil, fmt.Errorf("checkpoint socket: %w", err)
	}
	s.ln = ln
	s.wg.Add(1)
	go s.serve()
	if every > 0 {
		s.wg.Add(1)
		go s.tick(every)
	}
	return s, nil
}

// listenUnix listens at path; a path too long for a socket address is
// reached through its directory's descriptor.
func listenUnix(path string) (*net.UnixListener, error) {
	addr := path
	if len(path) > 100 {
		d, err := unix.Open(filepath.Dir(path), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, err
		}
		defer unix.Close(d)
		addr = fmt.Sprintf("/proc/self/fd/%d/%s", d, filepath.Base(path))
	}
	// The run's directory (0700) keeps others out; the socket's own mode
	// says so too.
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: addr, Net: "unix"})
	if err != nil {
		return nil, err
	}
	ln.SetUnlinkOnClose(false)
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		os.Remove(path)
		return nil, err
	}
	return ln, nil
}

func dialUnix(path string) (*net.UnixConn, error) {
	addr := path
	if len(path) > 100 {
		d, err := unix.Open(filepath.Dir(path), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, err
		}
		defer unix.Close(d)
		addr = fmt.Sprintf("/proc/self/fd/%d/%s", d, filepath.Base(path))
	}
	return net.DialUnix("unix", nil, &net.UnixAddr{Name: addr, Net: "unix"})
}

func (s *ckServer) serve() {
	defer s.wg.Done()
	for {
		c, err := s.ln.AcceptUnix()
		if err != nil {
			return
		}
		s.connMu.Lock()
		if s.conns == nil {
			s.connMu.Unlock()
			c.Close()
			return
		}
		s.conns[c] = true
		s.connMu.Unlock()
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.handle(c)
			s.connMu.Lock()
			delete(s.conns, c)
			s.connMu.Unlock()
		}()
	}
}

func (s *ckServer) handle(c *net.UnixConn) {
	defer c.Close()
	answer := func(a ckAnswer) {
		b, _ := json.Marshal(a)
		c.SetWriteDeadline(time.Now().Add(5 * time.Second))
		c.Write(append(b, '\n'))
	}
	if err := peerAllowed(c); err != nil {
		answer(ckAnswer{Error: err.Error()})
		return
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	line, err := bufio.NewReader(io.LimitReader(c, 4096)).ReadBytes('\n')
	if err != nil {
		answer(ckAnswer{Error: "no request read: " + err.Error()})
		return
	}
	var req ckRequest
	if err := json.Unmarshal(line, &req); err != nil {
		answer(ckAnswer{Error: "bad request: " + err.Error()})
		return
	}
	cp, err := s.take(req.Name, false)
	a := ckAnswer{Checkpoint: cp}
	if err != nil {
		a.Error = err.Error()
	}
	answer(a)
}

// peerAllowed admits root and the uid this airlock runs as.
func peerAllowed(c *net.UnixConn) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var cred *unix.Ucred
	var cerr error
	rc.Control(func(fd uintptr) { cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) })
	if cerr != nil {
		return cerr
	}
	if cred.Uid != 0 && int(cred.Uid) != os.Geteuid() {
		return fmt.Errorf("uid %d may not checkpoint this run", cred.Uid)
	}
	return nil
}

func (s *ckServer) tick(every time.Duration) {
	defer s.wg.Done()
	t := time.NewTicker(every)
	defer t.Stop()
	said := map[string]bool{} // each failure once, not every tick
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			_, err := s.take("", true)
			if err == nil || errors.Is(err, workspace.ErrUnchanged) || errors.Is(err, errRunEnded) {
				continue
			}
			kind := err.Error()
			if errors.Is(err, workspace.ErrNoRoom) {
				kind = "room"
			}
			if !said[kind] {
				said[kind] = true
				fmt.Fprintf(s.stderr, "airlock: automatic checkpoint skipped: %v\n", err)
			}
		}
	}
}

var errRunEnded = errors.New("the run's command has ended; checkpoints are taken while it runs")

// take takes one checkpoint with the sandbox paused, and records it.
func (s *ckServer) take(name string, auto bool) (*workspace.Checkpoint, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errRunEnded
	}
	if s.pauser == nil {
		return nil, errors.New("this sandbox cannot be paused, and a checkpoint copies the changes while it is (checkpoints need the native runtime)")
	}
	ctx := context.Background()
	cp, err := s.run.TakeCheckpoint(name, auto, func() error { return s.pauser.Pause(ctx) }, func() error { return s.pauser.Resume(ctx) })
	if cp != nil && s.rec != nil {
		n := cp.Changes
		s.rec.Write(&record.Event{Type: record.TypeCheckpoint, Time: cp.Time, Sandbox: s.run.ID, Checkpoint: cp.ID, Name: cp.Name, Changes: &n, Auto: cp.Auto})
	}
	return cp, err
}

// close stops taking checkpoints: it returns once none is in progress,
// and none is taken after.
func (s *ckServer) close() {
	if s == nil {
		return
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	close(s.stop)
	s.ln.Close()
	os.Remove(s.path)
	s.mu.Unlock()
	// A request still being read is not waited for; one being answered
	// gets its answer.
	s.connMu.Lock()
	for c := range s.conns {
		c.SetReadDeadline(time.Now())
	}
	s.conns = nil
	s.connMu.Unlock()
	s.wg.Wait()
}

func newCheckpointCmd() *cobra.Command {
	var name string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "checkpoint RUN-ID|DIR",
		Short: "Checkpoint the workspace of a running airlock run --workspace DIR",
		Long: `Take a checkpoint of a running "airlock run --workspace DIR": the sandbox is
paused (its cgroup freezer) while the changes it made so far (the overlay's
upper layer) are copied, then resumed. "airlock review" lists a run's
checkpoints; "airlock review diff|apply ID --checkpoint C" shows or applies
the workspace as of checkpoint C (by id or name) instead of the last state.
The run is named by its id (see airlock review) or its workspace directory.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return checkpointRun(cmd.OutOrStdout(), cmd.ErrOrStderr(), args[0], name, asJSON)
		},
	}
	cmd.Flags().StringVar(&name, "name", "", "name the checkpoint (a letter, then letters, digits, '.', '-', '_'; unique in the run)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the checkpoint as JSON")
	return cmd
}

func checkpointRun(stdout, stderr io.Writer, arg, name string, asJSON bool) error {
	fail := func(err error) error {
		fmt.Fprintf(stderr, "airlock: checkpoint: %v\n", err)
		return exitError{1}
	}
	if name != "" {
		if err := workspace.CheckName(name); err != nil {
			return fail(err)
		}
	}
	l, err := runningRun(arg)
	if err != nil {
		return fail(err)
	}
	c, err := dialUnix(filepath.Join(l.Dir, ckSocket))
	if err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ECONNREFUSED) {
			return fail(fmt.Errorf("run %s is not running its command (it has ended); checkpoints are taken while it runs", l.ID))
		}
		return fail(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Minute))
	b, _ := json.Marshal(ckRequest{Name: name})
	// A refusal may come before the request is read: its answer is
	// read even when the request could not be sent whole.
	_, werr := c.Write(append(b, '\n'))
	line, err := bufio.NewReader(io.LimitReader(c, 1<<20)).ReadBytes('\n')
	if err != nil {
		if werr != nil {
			return fail(fmt.Errorf("run %s: %v", l.ID, werr))
		}
		return fail(fmt.Errorf("run %s ended before answering (%v)", l.ID, err))
	}
	var a ckAnswer
	if err := json.Unmarshal(line, &a); err != nil {
		return fail(fmt.Errorf("run %s: bad answer: %v", l.ID, err))
	}
	if a.Error != "" {
		if a.Checkpoint == nil {
			return fail(errors.New(a.Error))
		}
		fmt.Fprintf(stderr, "airlock: checkpoint: %s\n", a.Error)
	}
	if a.Checkpoint == nil {
		return fail(fmt.Errorf("run %s: no checkpoint in the answer", l.ID))
	}
	cp := a.Checkpoint
	if asJSON {
		out, _ := json.MarshalIndent(cp, "", "  ")
		fmt.Fprintf(stdout, "%s\n", out)
	} else {
		fmt.Fprintf(stdout, "checkpoint %s of run %s: %d changes (%d entries, %s copied; sandbox paused %.1fms)\n",
			checkpointLabel(*cp), l.ID, cp.Changes, cp.Entries, sizeString(cp.Bytes), cp.FrozenMS)
	}
	if a.Error != "" {
		return exitError{1}
	}
	return nil
}

// runningRun finds the running run arg names (an id or a workspace
// directory), or says why there is none.
func runningRun(arg string) (*workspace.Listed, error) {
	if arg == "" {
		return nil, errors.New("empty run id or workspace directory")
	}
	all, err := workspace.List()
	if err != nil {
		return nil, err
	}
	if workspace.IsID(arg) {
		for i := range all {
			if all[i].ID == arg {
				if !all[i].Busy {
					return nil, fmt.Errorf("run %s has ended (%s); checkpoints are taken while its command runs", arg, listState(all[i]))
				}
				return &all[i], nil
			}
		}
		if _, err := os.Lstat(arg); err != nil {
			if _, err := os.Lstat(filepath.Join(native.DefaultStateRoot(), arg)); err == nil {
				return nil, fmt.Errorf("sandbox %s has no overlay workspace: checkpoints need airlock run --workspace DIR (not --workspace-mode live)", arg)
			}
			return nil, fmt.Errorf("no run %s (see airlock review)", arg)
		}
	}
	runs, err := workspace.ForWorkspace(arg)
	if err != nil {
		return nil, err
	}
	abs, _ := filepath.Abs(arg)
	var busy []workspace.Listed
	var others []string
	for _, l := range runs {
		if l.Busy {
			busy = append(busy, l)
		} else {
			others = append(others, l.ID+" ("+listState(l)+")")
		}
	}
	switch {
	case len(busy) == 1:
		return &busy[0], nil
	case len(busy) > 1:
		var ids []string
		for _, l := range busy {
			ids = append(ids, l.ID)
		}
		return nil, fmt.Errorf("%d runs of workspace %s are running; name one by its id: %s", len(busy), quoteName(abs), strings.Join(ids, ", "))
	case len(others) > 0:
		return nil, fmt.Errorf("no running run for workspace %s (its runs have ended: %s)", quoteName(abs), strings.Join(others, ", "))
	}
	if _, err := os.Stat(abs); err != nil {
		if !strings.Contains(arg, "/") && !workspace.IsID(arg) {
			return nil, fmt.Errorf("%s is neither a run id (16 hex digits, see airlock review) nor a workspace directory", quoteName(arg))
		}
		return nil, fmt.Errorf("no run for workspace %s (%v)", quoteName(abs), err)
	}
	return nil, fmt.Errorf("no running run for workspace %s: checkpoints need airlock run --workspace DIR (the overlay, not --workspace-mode live)", quoteName(abs))
}

func checkpointLabel(c workspace.Checkpoint) string {
	if c.Name != "" {
		return c.ID + " (" + c.Name + ")"
	}
	return c.ID
}

func sizeString(n int64) string {
	switch {
	case n >= 1<<30:
		return strconv.FormatFloat(float64(n)/(1<<30), 'f', 1, 64) + " GiB"
	case n >= 1<<20:
		return strconv.FormatFloat(float64(n)/(1<<20), 'f', 1, 64) + " MiB"
	case n >= 1<<10:
		return strconv.FormatFloat(float64(n)/(1<<10), 'f', 1, 64) + " KiB"
	}
	return strconv.FormatInt(n, 10) + " bytes"
}
