package manager

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
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

const outputChunk = 64 << 10

// Output sends a process's output from cursor on to emit, one event per
// chunk, then an "exit" event once the process has ended and everything was
// sent. With follow it waits for more until then; without, it sends what
// there is and returns. Stdout and stderr are read concurrently; each
// event's Cursor resumes right after it.
func (m *Manager) Output(ctx context.Context, id, pid string, cur Cursor, follow bool, emit func(api.OutputEvent) error) error {
	_, p, err := m.process(id, pid)
	if err != nil {
		return err
	}
	if p.rec.TTY {
		return conflict("process %s runs on a terminal: its output goes to its PTY session only", pid)
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
	type chunk struct {
		stream int
		ch     runtime.OutputChunk
		err    error
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	chunks := make(chan chunk)
	reader := func(stream int, cursor uint64) {
		wait := time.Duration(0)
		if follow {
			wait = 10 * time.Second
		}
		for {
			ch, err := or.ReadOutput(ctx, stream, cursor, outputChunk, wait)
			if err == nil && len(ch.Data) == 0 && !ch.EOF && ch.From == cursor {
				if !follow {
					err = errNoMore
				} else {
					continue
				}
			}
			select {
			case chunks <- chunk{stream, ch, err}:
			case <-ctx.Done():
				return
			}
			if err != nil || ch.EOF {
				return
			}
			cursor = ch.Next()
		}
	}
	go reader(1, cur.Stdout)
	go reader(2, cur.Stderr)
	eof := 0
	for open := 2; open > 0; {
		var c chunk
		select {
		case c = <-chunks:
		case <-ctx.Done():
			return ctx.Err()
		}
		if c.err != nil {
			open--
			if c.err == errNoMore {
				continue
			}
			if exited() || p.sb.gone() {
				continue // the sandbox ended under us: report the exit
			}
			return fmt.Errorf("process %s output: %w", pid, c.err)
		}
		pos, name := &cur.Stdout, api.EventStdout
		if c.stream == 2 {
			pos, name = &cur.Stderr, api.EventStderr
		}
		if c.ch.From > *pos {
			lost := c.ch.From - *pos
			*pos = c.ch.From
			if err := emit(api.OutputEvent{Kind: api.EventLost, Stream: name, Offset: c.ch.From, Bytes: lost, Cursor: cur.String()}); err != nil {
				return err
			}
		}
		if len(c.ch.Data) > 0 {
			off := *pos
			*pos = c.ch.Next()
			if err := emit(api.OutputEvent{Kind: name, Stream: name, Offset: off, Data: c.ch.Data, Cursor: cur.String()}); err != nil {
				return err
			}
		}
		if c.ch.EOF {
			open--
			eof++
		}
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
	return emit(exitEvent(p, cur))
}

var errNoMore = errors.New("no more output now")

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
