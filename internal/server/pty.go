package server

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/internal/manager"
)

// pty runs a process on a terminal and bridges it to a WebSocket (see
// api.PTYStart for the protocol).
func (s *Server) pty(w http.ResponseWriter, r *http.Request) error {
	id, err := sandboxID(r)
	if err != nil {
		return err
	}
	if _, err := s.m.Get(r.Context(), id); err != nil {
		return err
	}
	c, err := websocket.Accept(w, r, nil)
	if err != nil {
		return nil // Accept wrote the answer
	}
	defer c.CloseNow()
	c.SetReadLimit(1 << 20)
	ctx := context.WithoutCancel(r.Context())
	fail := func(msg, code string) error {
		ex := api.PTYExit{ExitCode: -1, Error: msg, ErrorCode: code}
		switch code {
		case api.CodeCommandNotFound:
			ex.ExitCode = 127
		case api.CodeNotExecutable:
			ex.ExitCode = 126
		}
		b, _ := json.Marshal(ex)
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		c.Write(wctx, websocket.MessageText, b)
		c.Close(websocket.StatusPolicyViolation, truncate(msg, 100))
		return nil
	}
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	typ, first, err := c.Read(rctx)
	cancel()
	if err != nil {
		return nil
	}
	var start api.PTYStart
	if typ != websocket.MessageText {
		return fail("the first message must be a JSON PTYStart text frame", api.CodeInvalid)
	}
	if err := json.Unmarshal(first, &start); err != nil {
		// Say which field (a size past 65535 fails here too).
		return fail("the first message must be a JSON PTYStart text frame: "+err.Error(), api.CodeInvalid)
	}
	pid, master, wait, err := s.m.PTY(ctx, id, &start)
	if err != nil {
		_, body, _ := classify(err)
		return fail(err.Error(), body.Code)
	}
	defer master.Close()
	// Terminal output to the client until the terminal closes.
	outDone := make(chan struct{})
	go func() {
		defer close(outDone)
		buf := make([]byte, 32<<10)
		for {
			n, err := master.Read(buf)
			if n > 0 {
				if c.Write(ctx, websocket.MessageBinary, buf[:n]) != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	// Client input and control messages until the process ends. Once it
	// has, the reader's end (the close below) is not a client hanging up.
	var ended atomic.Bool
	inCtx, stopIn := context.WithCancel(ctx)
	defer stopIn()
	go func() {
		for {
			typ, b, err := c.Read(inCtx)
			if err != nil {
				if !errors.Is(err, context.Canceled) && !ended.Load() {
					// The client went away: end the process with a hangup,
					// like a closed terminal.
					s.m.SignalPTY(context.WithoutCancel(r.Context()), id, pid, unix.SIGHUP)
				}
				return
			}
			if typ == websocket.MessageBinary {
				if _, err := master.Write(b); err != nil {
					return
				}
				continue
			}
			var ctl api.PTYControl
			if json.Unmarshal(b, &ctl) != nil {
				continue
			}
			if ctl.Resize != nil {
				resize(master, ctl.Resize.Rows, ctl.Resize.Cols)
			}
			if ctl.Signal != "" {
				if sig, err := manager.ParseSignal(ctl.Signal); err == nil {
					s.m.SignalPTY(context.WithoutCancel(r.Context()), id, pid, sig)
				}
			}
		}
	}()
	exit := wait()
	select {
	case <-outDone:
	case <-time.After(2 * time.Second):
		// A background process still holds the terminal; stop reading it.
	}
	// The exit goes out before the input reader stops: cancelling a read
	// closes the WebSocket, and a client would then miss the exit.
	ended.Store(true)
	b, _ := json.Marshal(exit)
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	c.Write(wctx, websocket.MessageText, b)
	c.Close(websocket.StatusNormalClosure, "exited")
	return nil
}

// resize sets the terminal size.
func resize(master *os.File, rows, cols uint16) {
	if rows == 0 || cols == 0 {
		return
	}
	sc, err := master.SyscallConn()
	if err != nil {
		return
	}
	sc.Control(func(fd uintptr) {
		unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, &unix.Winsize{Row: rows, Col: cols})
	})
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}
