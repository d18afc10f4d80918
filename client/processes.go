package client

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/airlock-dev/airlock/api"
)

// Exec runs a command in sandbox id and waits for it: the result holds its
// status and its output (capped; see api.ExecResult).
func (c *Client) Exec(ctx context.Context, id string, req *api.ExecRequest) (*api.ExecResult, error) {
	p, err := sandboxPath(id, "/exec")
	if err != nil {
		return nil, err
	}
	var res api.ExecResult
	if err := c.call(ctx, http.MethodPost, p, nil, req, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// StartProcess starts a command in sandbox id in the background. Its stdin
// stays open (WriteStdin, CloseStdin); read its output with Output or
// FollowOutput, wait for it with WaitProcess.
func (c *Client) StartProcess(ctx context.Context, id string, req *api.ExecRequest) (*api.Process, error) {
	p, err := sandboxPath(id, "/processes")
	if err != nil {
		return nil, err
	}
	var pr api.Process
	if err := c.call(ctx, http.MethodPost, p, nil, req, &pr); err != nil {
		return nil, err
	}
	return &pr, nil
}

// ListProcesses returns the processes started in sandbox id.
func (c *Client) ListProcesses(ctx context.Context, id string) ([]api.Process, error) {
	return c.listProcesses(ctx, id, nil)
}

// ListProcessesIn returns the processes of sandbox id in state
// (api.ProcessRunning or api.ProcessExited). The running ones come from
// the daemon's memory, however many processes ended before them.
func (c *Client) ListProcessesIn(ctx context.Context, id, state string) ([]api.Process, error) {
	return c.listProcesses(ctx, id, url.Values{"state": {state}})
}

func (c *Client) listProcesses(ctx context.Context, id string, q url.Values) ([]api.Process, error) {
	p, err := sandboxPath(id, "/processes")
	if err != nil {
		return nil, err
	}
	var l api.ProcessList
	if err := c.call(ctx, http.MethodGet, p, q, nil, &l); err != nil {
		return nil, err
	}
	return l.Processes, nil
}

// GetProcess returns the process pid ("p3") of sandbox id.
func (c *Client) GetProcess(ctx context.Context, id, pid string) (*api.Process, error) {
	p, err := processPath(id, pid, "")
	if err != nil {
		return nil, err
	}
	var pr api.Process
	if err := c.call(ctx, http.MethodGet, p, nil, nil, &pr); err != nil {
		return nil, err
	}
	return &pr, nil
}

// maxServerWait is the longest wait the daemon grants in one request.
const maxServerWait = 300 * time.Second

// WaitProcess waits until the process has exited, timeout has passed (0:
// no limit) or ctx is done, asking the daemon for waits of at most 300 s at
// a time. It returns the process as it is then: exited, or still running
// when timeout passed.
func (c *Client) WaitProcess(ctx context.Context, id, pid string, timeout time.Duration) (*api.Process, error) {
	p, err := processPath(id, pid, "/wait")
	if err != nil {
		return nil, err
	}
	var deadline time.Time
	if timeout > 0 {
		deadline = time.Now().Add(timeout)
	}
	for {
		wait := maxServerWait
		if !deadline.IsZero() {
			wait = min(wait, time.Until(deadline))
		}
		secs := max(1, int(math.Ceil(wait.Seconds())))
		var pr api.Process
		if err := c.call(ctx, http.MethodGet, p, url.Values{"timeout_seconds": {strconv.Itoa(secs)}}, nil, &pr); err != nil {
			return nil, err
		}
		if pr.State == api.ProcessExited || (!deadline.IsZero() && !time.Now().Before(deadline)) {
			return &pr, nil
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
}

// WriteStdin appends what r holds to the process's stdin, streaming it as
// the request's body (r is read to its end, never held whole, and never
// closed); with close, stdin is closed after it. r may be nil.
func (c *Client) WriteStdin(ctx context.Context, id, pid string, r io.Reader, close bool) error {
	p, err := processPath(id, pid, "/stdin")
	if err != nil {
		return err
	}
	var q url.Values
	if close {
		q = url.Values{"close": {"true"}}
	}
	req, err := c.request(ctx, http.MethodPost, p, q, streamBody(r))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	return c.finish(req, nil)
}

// CloseStdin closes the process's stdin: it reads end-of-file.
func (c *Client) CloseStdin(ctx context.Context, id, pid string) error {
	return c.WriteStdin(ctx, id, pid, nil, true)
}

// Signal sends a signal to the process: a name ("TERM", "SIGKILL") or a
// number ("9").
func (c *Client) Signal(ctx context.Context, id, pid, sig string) error {
	p, err := processPath(id, pid, "/signal")
	if err != nil {
		return err
	}
	return c.call(ctx, http.MethodPost, p, nil, &api.SignalRequest{Signal: sig}, nil)
}

// OutputOptions say how to read a process's output.
type OutputOptions struct {
	// Cursor resumes after the event that carried it; "" starts at the
	// oldest output the daemon kept.
	Cursor string
	// Follow waits for more output until the process exits; without it the
	// stream holds what there is now (and the exit event if it has exited).
	Follow bool
	// SSE asks for Server-Sent Events rather than NDJSON; both carry the
	// same events.
	SSE bool
}

// Output opens one stream of the process's output. Read it with Next,
// and Close it. A stream that breaks is not resumed: FollowOutput does that.
// While the stream is open it gets every byte from its cursor on: a
// process that writes faster than it is read waits for the reader.
func (c *Client) Output(ctx context.Context, id, pid string, opts OutputOptions) (*OutputStream, error) {
	p, err := processPath(id, pid, "/output")
	if err != nil {
		return nil, err
	}
	q := url.Values{}
	if opts.Cursor != "" {
		q.Set("cursor", opts.Cursor)
	}
	if !opts.Follow {
		q.Set("follow", "false")
	}
	body, sse, err := c.openStream(ctx, p, q, opts.SSE, opts.Cursor)
	if err != nil {
		return nil, err
	}
	return newOutputStream(body, sse, opts.Cursor), nil
}

// OutputStream is one HTTP stream of a process's output. It is not safe for
// concurrent use.
type OutputStream struct {
	r      eventReader
	cursor string
	err    error // sticky: returned by every later Next
}

func newOutputStream(body io.ReadCloser, sse bool, cursor string) *OutputStream {
	return &OutputStream{r: newEventReader(body, sse), cursor: cursor}
}

// Next returns the next event. It returns io.EOF after the "exit" event or
// at the end of a stream that ended cleanly, io.ErrUnexpectedEOF when the
// stream was cut in the middle of an event, an *Error when the daemon
// reported one in the stream, or the transport's error.
func (s *OutputStream) Next() (api.OutputEvent, error) {
	if s.err != nil {
		return api.OutputEvent{}, s.err
	}
	ev, err := s.next()
	if err != nil {
		s.err = err
		return api.OutputEvent{}, err
	}
	if ev.Cursor != "" {
		s.cursor = ev.Cursor
	}
	if ev.Kind == api.EventExit {
		s.err = io.EOF
	}
	return ev, nil
}

func (s *OutputStream) next() (api.OutputEvent, error) {
	data, id, err := s.r.next()
	if err != nil {
		return api.OutputEvent{}, err
	}
	var ev api.OutputEvent
	if err := decodeOutputEvent(data, &ev); err != nil {
		return api.OutputEvent{}, err
	}
	if ev.Kind == "" {
		return api.OutputEvent{}, fmt.Errorf("airlock: output stream: event without a kind: %.80q", data)
	}
	if ev.Cursor == "" {
		ev.Cursor = id
	}
	return ev, nil
}

// Cursor returns the cursor of the last event Next returned (the one the
// stream was opened with before that): open a stream with it to resume
// right after that event.
func (s *OutputStream) Cursor() string { return s.cursor }

// Close closes the stream.
func (s *OutputStream) Close() error {
	if s.err == nil {
		s.err = errors.New("airlock: output stream closed")
	}
	return s.r.body.Close()
}

// FollowOutput calls fn with each event of the process's output from cursor
// on ("" for the start) until the "exit" event, which fn receives too. When
// the stream breaks (the connection dropped, the daemon restarted or
// answered 503) it reconnects from the cursor of the last event fn got,
// after a short backoff, so no event is lost or repeated; it gives up after
// 30 attempts or a minute without an event. An error from fn ends it and is
// returned as is.
func (c *Client) FollowOutput(ctx context.Context, id, pid, cursor string, fn func(api.OutputEvent) error) error {
	return reconnect(ctx, "output of process "+pid, func() (progressed, done bool, err error) {
		s, err := c.Output(ctx, id, pid, OutputOptions{Cursor: cursor, Follow: true})
		if err != nil {
			return false, false, err
		}
		defer s.Close()
		for {
			ev, err := s.Next()
			if err != nil {
				if errors.Is(err, io.EOF) {
					// A follow stream ends with the exit event: this one broke.
					err = io.ErrUnexpectedEOF
				}
				return progressed, false, err
			}
			if ev.Cursor != "" {
				cursor = ev.Cursor
			}
			progressed = true
			if err := fn(ev); err != nil {
				return true, true, err
			}
			if ev.Kind == api.EventExit {
				return true, true, nil
			}
		}
	})
}

// decodeOutputEvent decodes one output event. Its data, nearly all of a
// large event, is base64 that encoding/json would scan byte by byte three
// times over: it is cut out of the line and decoded directly, and the
// rest, a few dozen bytes, is decoded as JSON. Any other shape (the
// member not at the top level or with escapes, a second data member)
// takes the plain path, so the result is always encoding/json's.
func decodeOutputEvent(b []byte, ev *api.OutputEvent) error {
	key := []byte(`"data":"`)
	i := bytes.Index(b, key)
	if i < 0 || !topLevel(b[:i]) {
		return decodeStreamEvent("output", b, ev)
	}
	start := i + len(key)
	n := bytes.IndexByte(b[start:], '"')
	if n < 0 {
		return decodeStreamEvent("output", b, ev)
	}
	enc, tail := b[start:start+n], b[start+n:]
	// Decode would skip CR and LF, which a JSON string cannot hold raw.
	// (Three IndexByte are much faster than one ContainsAny.)
	if bytes.IndexByte(enc, '\\') >= 0 || bytes.IndexByte(enc, '\r') >= 0 || bytes.IndexByte(enc, '\n') >= 0 ||
		bytes.Contains(tail, []byte(`"data"`)) {
		return decodeStreamEvent("output", b, ev)
	}
	data := make([]byte, base64.StdEncoding.DecodedLen(len(enc)))
	k, err := base64.StdEncoding.Decode(data, enc)
	if err != nil {
		return decodeStreamEvent("output", b, ev)
	}
	rest := make([]byte, 0, len(b)-n)
	rest = append(append(rest, b[:start]...), tail...)
	if err := decodeStreamEvent("output", rest, ev); err != nil {
		return err
	}
	ev.Data = data[:k]
	return nil
}

// topLevel reports whether p, the start of a JSON object, ends directly
// inside that object, outside any string or nested value.
func topLevel(p []byte) bool {
	depth, inString, escaped := 0, false, false
	for _, c := range p {
		switch {
		case escaped:
			escaped = false
		case inString:
			escaped = c == '\\'
			inString = c != '"'
		case c == '"':
			inString = true
		case c == '{' || c == '[':
			depth++
		case c == '}' || c == ']':
			depth--
		}
	}
	return depth == 1 && !inString
}
