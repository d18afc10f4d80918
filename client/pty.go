package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"

	"github.com/coder/websocket"

	"github.com/airlock-dev/airlock/api"
)

// maxPTYMessage bounds one message from the daemon on a PTY session.
const maxPTYMessage = 4 << 20

// PTY starts a command on a terminal in sandbox id and returns its session,
// a WebSocket (see api.PTYStart). ctx bounds the whole session: when it is
// done the connection is closed.
func (c *Client) PTY(ctx context.Context, id string, start api.PTYStart) (*PTYSession, error) {
	p, err := sandboxPath(id, "/pty")
	if err != nil {
		return nil, err
	}
	hdr := http.Header{}
	if c.apiKey != "" {
		hdr.Set("Authorization", "Bearer "+c.apiKey)
	}
	hdr.Set("User-Agent", "airlock-go-client")
	conn, resp, err := websocket.Dial(ctx, c.wsBase+p, &websocket.DialOptions{HTTPClient: c.wsc, HTTPHeader: hdr})
	if err != nil {
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols && resp.Body != nil {
			defer resp.Body.Close()
			return nil, decodeError(resp)
		}
		return nil, err
	}
	conn.SetReadLimit(maxPTYMessage)
	b, err := json.Marshal(start)
	if err != nil {
		conn.CloseNow()
		return nil, err
	}
	sctx, cancel := context.WithCancel(ctx)
	if err := conn.Write(sctx, websocket.MessageText, b); err != nil {
		cancel()
		conn.CloseNow()
		return nil, fmt.Errorf("airlock: pty: %w", err)
	}
	pr, pw := io.Pipe()
	s := &PTYSession{conn: conn, ctx: sctx, cancel: cancel, pr: pr, done: make(chan struct{})}
	go s.readLoop(pw)
	return s, nil
}

// PTYSession is a command running on a terminal. Read returns what the
// terminal prints, Write types on it. Read it to its end (or Close the
// session): its output is not buffered beyond what Read has not yet taken,
// so Wait returns only once it has been read. Read is not safe for
// concurrent use; the other methods are.
type PTYSession struct {
	conn   *websocket.Conn
	ctx    context.Context
	cancel context.CancelFunc
	pr     *io.PipeReader
	done   chan struct{} // closed when readLoop ends; exit and err are set
	exit   api.PTYExit
	err    error
	once   sync.Once
}

var (
	_ io.Reader = (*PTYSession)(nil)
	_ io.Writer = (*PTYSession)(nil)
)

// readLoop hands the terminal's bytes to Read until the daemon's PTYExit.
func (s *PTYSession) readLoop(pw *io.PipeWriter) {
	defer close(s.done)
	var err error
	for {
		typ, data, rerr := s.conn.Read(s.ctx)
		if rerr != nil {
			err = s.brokenErr(rerr)
			break
		}
		if typ == websocket.MessageBinary {
			if _, werr := pw.Write(data); werr != nil {
				err = errors.New("airlock: pty: session closed")
				break
			}
			continue
		}
		var ex api.PTYExit
		if jerr := json.Unmarshal(data, &ex); jerr != nil {
			err = fmt.Errorf("airlock: pty: bad message from the daemon %.80q: %w", data, jerr)
			break
		}
		s.exit = ex
		pw.Close()
		s.conn.Close(websocket.StatusNormalClosure, "")
		return
	}
	s.err = err
	pw.CloseWithError(err)
	s.conn.CloseNow()
}

// brokenErr describes a connection that ended before the PTYExit.
func (s *PTYSession) brokenErr(err error) error {
	if cerr := s.ctx.Err(); cerr != nil {
		return cerr
	}
	var ce websocket.CloseError
	if errors.As(err, &ce) {
		if ce.Reason != "" {
			return fmt.Errorf("airlock: pty: the daemon ended the session before the command exited: %s", ce.Reason)
		}
		return fmt.Errorf("airlock: pty: the daemon ended the session before the command exited (%v)", ce.Code)
	}
	return fmt.Errorf("airlock: pty: %w", err)
}

// Read reads what the terminal printed; io.EOF once the command exited and
// all of it was read.
func (s *PTYSession) Read(p []byte) (int, error) { return s.pr.Read(p) }

// Write sends p to the terminal, as if typed.
func (s *PTYSession) Write(p []byte) (int, error) {
	if err := s.conn.Write(s.ctx, websocket.MessageBinary, p); err != nil {
		return 0, fmt.Errorf("airlock: pty: %w", err)
	}
	return len(p), nil
}

// Resize sets the terminal's size.
func (s *PTYSession) Resize(cols, rows uint16) error {
	return s.control(api.PTYControl{Resize: &api.PTYSize{Cols: cols, Rows: rows}})
}

// Signal sends a signal to the command: a name ("INT", "SIGTERM") or a
// number ("2").
func (s *PTYSession) Signal(sig string) error {
	return s.control(api.PTYControl{Signal: sig})
}

func (s *PTYSession) control(c api.PTYControl) error {
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	if err := s.conn.Write(s.ctx, websocket.MessageText, b); err != nil {
		return fmt.Errorf("airlock: pty: %w", err)
	}
	return nil
}

// Wait waits until the command has exited and its output has been read (or
// the session was closed) and returns its status. The error is set when
// the session ended without one, or when the daemon reported that the
// command could not run (PTYExit.Error): then it is an *Error with the
// code the daemon gave (errors.Is(err, ErrCommandNotFound)).
func (s *PTYSession) Wait() (api.PTYExit, error) {
	<-s.done
	if s.err != nil {
		return s.exit, s.err
	}
	if s.exit.Error != "" {
		if s.exit.ErrorCode != "" {
			return s.exit, &Error{Code: s.exit.ErrorCode, Message: "pty: " + s.exit.Error}
		}
		return s.exit, fmt.Errorf("airlock: pty: %s", s.exit.Error)
	}
	return s.exit, nil
}

// Close ends the session and closes the connection; what the daemon does
// with a command still running is its own policy.
func (s *PTYSession) Close() error {
	s.once.Do(func() {
		s.pr.Close()
		s.conn.Close(websocket.StatusNormalClosure, "")
		s.cancel()
		<-s.done
	})
	return nil
}
