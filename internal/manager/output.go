package manager

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/internal/errdefs"
	"github.com/airlock-dev/airlock/internal/runtime"
)

// Cursor is a position in a process's output: the next byte of stdout and
// of stderr. Its text form ("<stdout>.<stderr>") is opaque to clients.
type Cursor struct{ Stdout, Stderr uint64 }

func (c Cursor) String() string {
	return strconv.FormatUint(c.Stdout, 10) + "." + strconv.FormatUint(c.Stderr, 10)
}

// ParseCursor parses a cursor; "" is the start.
func ParseCursor(s string) (Cursor, error) {
	if s == "" {
		return Cursor{}, nil
	}
	a, b, ok := strings.Cut(s, ".")
	o, err1 := strconv.ParseUint(a, 10, 64)
	e, err2 := strconv.ParseUint(b, 10, 64)
	if !ok || err1 != nil || err2 != nil {
		return Cursor{}, invalid("cursor %s: not a cursor from this API (want the cursor of an output event)", errdefs.Quote(s))
	}
	return Cursor{o, e}, nil
}

// outputChunk is the most one output event carries.
const outputChunk = 256 << 10

// ErrDraining is the cause a caller cancels an output stream's context
// with when the daemon shuts down: the stream's holds on the process's
// output are then left to lapse, so that the client, which reconnects to
// the next daemon with its cursor, loses nothing meanwhile.
var ErrDraining = errors.New("the daemon is shutting down")

// Output sends a process's output from cursor on to emit, one event per
// chunk, then an "exit" event once the process has ended and everything was
// sent. With follow it waits for more until then; without, it sends what
// there is and returns. Stdout and stderr are read concurrently; each
// event's Cursor resumes right after it.
//
// The reader is attached (runtime.OutputAttacher): a stream's next chunk
// is read only once emit has taken the last one, and the process waits
// while what it wrote meanwhile fills the agent's buffer, so a slow client
// slows the process down rather than losing output.
func (m *Manager) Output(ctx context.Context, id, pid string, cur Cursor, follow bool, emit func(api.OutputEvent) error) error {
	_, p, err := m.process(ctx, id, pid)
	if err != nil {
		return err
	}
	if p.rec.TTY {
		return conflict("process %s runs on a terminal: its output goes to its PTY session only", pid)
	}
	if p.dropped {
		return errOutputDropped(pid)
	}
	or, _ := p.rp.(runtime.OutputReader)
	exited := func() bool {
		select {
		case <-p.done:
			return true
		default:
			return false
		}
	}
	if or == nil || p.sb.gone() {
		// The output went with the sandbox (or the agent before a restart):
		// only the exit remains to report.
		if !exited() {
			return fmt.Errorf("process %s: its output is not reachable: %w", pid, errdefs.ErrConflict)
		}
		return emit(exitEvent(p, cur))
	}
	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var mu sync.Mutex // serializes emit; guards cur and eof
	eof := 0
	// deliver emits what one chunk of stream says: bytes lost before it,
	// its data, and counts its end.
	deliver := func(stream int, c runtime.OutputChunk) error {
		mu.Lock()
		defer mu.Unlock()
		pos, name := &cur.Stdout, api.EventStdout
		if stream == 2 {
			pos, name = &cur.Stderr, api.EventStderr
		}
		if c.From > *pos {
			lost := c.From - *pos
			*pos = c.From
			if err := emit(api.OutputEvent{Kind: api.EventLost, Stream: name, Offset: c.From, Bytes: lost, Cursor: cur.String()}); err != nil {
				return err
			}
		}
		if len(c.Data) > 0 {
			off := *pos
			*pos = c.Next()
			if err := emit(api.OutputEvent{Kind: name, Stream: name, Offset: off, Data: c.Data, Cursor: cur.String()}); err != nil {
				return err
			}
		}
		if c.EOF {
			eof++
		}
		return nil
	}
	wait := time.Duration(0)
	if follow {
		wait = 10 * time.Second
	}
	// read delivers one stream until its end (or, without follow, until
	// nothing more is there).
	read := func(stream int, cursor uint64) error {
		a := attach(or, stream)
		defer func() { a.Close(errors.Is(context.Cause(parent), ErrDraining)) }()
		for {
			c, err := a.Read(ctx, cursor, outputChunk, wait)
			if err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				if p.sb.isDeleting() {
					return deletedUnder(id)
				}
				if errors.Is(err, errdefs.ErrNotFound) {
					// The agent no longer keeps this finished
					// process's output (it says why).
					return fmt.Errorf("process %s output: %w", pid, err)
				}
				if exited() || p.sb.gone() {
					return nil // the sandbox ended under us: report the exit
				}
				return fmt.Errorf("process %s output: %w", pid, err)
			}
			if len(c.Data) == 0 && !c.EOF && c.From == cursor {
				if !follow {
					return nil
				}
				continue
			}
			if err := deliver(stream, c); err != nil {
				return err
			}
			if c.EOF {
				return nil
			}
			cursor = c.Next()
		}
	}
	errs := make(chan error, 2)
	go func(c uint64) { errs <- read(1, c) }(cur.Stdout)
	go func(c uint64) { errs <- read(2, c) }(cur.Stderr)
	var first error
	for range 2 {
		if err := <-errs; err != nil && first == nil {
			first = err
			cancel()
		}
	}
	if first != nil {
		if err := parent.Err(); err != nil {
			return err
		}
		return first
	}
	if eof == 2 || follow {
		select {
		case <-p.done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if !exited() {
		return nil
	}
	if p.endedByDelete.Load() {
		return deletedUnder(id)
	}
	return emit(exitEvent(p, cur))
}

// deletedUnder is how a stream ends when its sandbox was deleted under it.
func deletedUnder(id string) error {
	return fmt.Errorf("sandbox %s ended (deleted): %w", id, errdefs.ErrNotFound)
}

// isDeleting reports a sandbox that a caller deleted (or is deleting).
func (sb *Sandbox) isDeleting() bool {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	return sb.deleting
}

// attach returns an attached reader of stream (runtime.OutputAttacher),
// or, from a runtime that cannot hold a process back, plain reads.
func attach(or runtime.OutputReader, stream int) runtime.OutputAttachment {
	if at, ok := or.(runtime.OutputAttacher); ok {
		return at.AttachOutput(stream)
	}
	return plainReader{or, stream}
}

// plainReader reads a stream without holding it.
type plainReader struct {
	or     runtime.OutputReader
	stream int
}

func (r plainReader) Read(ctx context.Context, cursor uint64, max int, wait time.Duration) (runtime.OutputChunk, error) {
	return r.or.ReadOutput(ctx, r.stream, cursor, max, wait)
}

func (plainReader) Close(bool) {}

func exitEvent(p *proc, cur Cursor) api.OutputEvent {
	v := p.view()
	return api.OutputEvent{Kind: api.EventExit, ExitCode: v.ExitCode, Signal: v.Signal, Cursor: cur.String()}
}

// gone reports a sandbox whose runtime is no longer there.
func (sb *Sandbox) gone() bool {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	return sb.rt == nil
}
