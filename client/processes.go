package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"mime"
	"net"
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
	p, err := sandboxPath(id, "/processes")
	if err != nil {
		return nil, err
	}
	var l api.ProcessList
	if err := c.call(ctx, http.MethodGet, p, nil, nil, &l); err != nil {
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
	req, err := c.request(ctx, http.MethodGet, p, q, nil)
	if err != nil {
		return nil, err
	}
	if opts.SSE {
		req.Header.Set("Accept", "text/event-stream")
		if opts.Cursor != "" {
			req.Header.Set("Last-Event-ID", opts.Cursor)
		}
	} else {
		req.Header.Set("Accept", "application/x-ndjson")
	}
	resp, err := c.send(req)
	if err != nil {
		return nil, err
	}
	sse := opts.SSE
	if mt, _, err := mime.ParseMediaType(resp.Header.Get("Content-Type")); err == nil {
		switch mt {
		case "text/event-stream":
			sse = true
		case "application/x-ndjson", "application/json":
			sse = false
		}
	}
	return newOutputStream(resp.Body, sse, opts.Cursor), nil
}

// maxEventLine bounds one line of an output stream.
const maxEventLine = 16 << 20

// OutputStream is one HTTP stream of a process's output. It is not safe for
// concurrent use.
type OutputStream struct {
	body   io.ReadCloser
	br     *bufio.Reader
	sse    bool
	cursor string
	err    error    // sticky: returned by every later Next
	lines  [][]byte // SSE: lines split off a line by lone CRs, not yet parsed
	lastID string   // SSE: the last event id
}

func newOutputStream(body io.ReadCloser, sse bool, cursor string) *OutputStream {
	return &OutputStream{body: body, br: bufio.NewReaderSize(body, 64<<10), sse: sse, cursor: cursor}
}

// Next returns the next event. It returns io.EOF after the "exit" event or
// at the end of a stream that ended cleanly, io.ErrUnexpectedEOF when the
// stream was cut in the middle of an event, an *Error when the daemon
// reported one in the stream, or the transport's error.
func (s *OutputStream) Next() (api.OutputEvent, error) {
	if s.err != nil {
		return api.OutputEvent{}, s.err
	}
	var ev api.OutputEvent
	var err error
	if s.sse {
		ev, err = s.nextSSE()
	} else {
		ev, err = s.nextNDJSON()
	}
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

// Cursor returns the cursor of the last event Next returned (the one the
// stream was opened with before that): open a stream with it to resume
// right after that event.
func (s *OutputStream) Cursor() string { return s.cursor }

// Close closes the stream.
func (s *OutputStream) Close() error {
	if s.err == nil {
		s.err = errors.New("airlock: output stream closed")
	}
	return s.body.Close()
}

// readLine returns the next line without its "\n". A last line without one
// is io.ErrUnexpectedEOF: the daemon ends every line.
func (s *OutputStream) readLine() ([]byte, error) {
	var line []byte
	for {
		frag, err := s.br.ReadSlice('\n')
		if len(line)+len(frag) > maxEventLine {
			return nil, fmt.Errorf("airlock: output stream: a line is longer than %d bytes", maxEventLine)
		}
		line = append(line, frag...)
		switch {
		case err == nil:
			return line[:len(line)-1], nil
		case errors.Is(err, bufio.ErrBufferFull):
		case errors.Is(err, io.EOF):
			if len(line) == 0 {
				return nil, io.EOF
			}
			return nil, io.ErrUnexpectedEOF
		default:
			return nil, err
		}
	}
}

func (s *OutputStream) nextNDJSON() (api.OutputEvent, error) {
	for {
		line, err := s.readLine()
		if err != nil {
			return api.OutputEvent{}, err
		}
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		return decodeEvent(line)
	}
}

// nextSSE parses Server-Sent Events (the WHATWG format): "data:" lines,
// joined with "\n", are the JSON event; "id:" is the cursor, used when the
// event has none; comments (":...") and other fields are skipped; a blank
// line ends an event. Lines end with "\n", "\r\n" or "\r".
func (s *OutputStream) nextSSE() (api.OutputEvent, error) {
	var data []byte
	hasData, pending := false, false
	for {
		if len(s.lines) == 0 {
			line, err := s.readLine()
			if err != nil {
				if errors.Is(err, io.EOF) && pending {
					err = io.ErrUnexpectedEOF
				}
				return api.OutputEvent{}, err
			}
			s.lines = bytes.Split(bytes.TrimSuffix(line, []byte("\r")), []byte("\r"))
		}
		line := s.lines[0]
		s.lines = s.lines[1:]
		if len(line) == 0 {
			if hasData {
				ev, err := decodeEvent(data)
				if err == nil && ev.Cursor == "" {
					ev.Cursor = s.lastID
				}
				return ev, err
			}
			pending = false
			continue
		}
		if line[0] == ':' {
			continue
		}
		field, value, _ := bytes.Cut(line, []byte(":"))
		value = bytes.TrimPrefix(value, []byte(" "))
		pending = true
		switch string(field) {
		case "data":
			if hasData {
				data = append(data, '\n')
			}
			data = append(data, value...)
			hasData = true
		case "id":
			if bytes.IndexByte(value, 0) < 0 {
				s.lastID = string(value)
			}
		}
	}
}

// decodeEvent decodes one event, or the error the daemon reported instead.
func decodeEvent(b []byte) (api.OutputEvent, error) {
	var v struct {
		api.OutputEvent
		Error *api.ErrorBody `json:"error"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return api.OutputEvent{}, fmt.Errorf("airlock: output stream: bad event %.80q: %w", b, err)
	}
	if v.Error != nil {
		return api.OutputEvent{}, &Error{Code: v.Error.Code, Message: v.Error.Message}
	}
	if v.Kind == "" {
		return api.OutputEvent{}, fmt.Errorf("airlock: output stream: event without a kind: %.80q", b)
	}
	return v.OutputEvent, nil
}

// Bounds of FollowOutput's reconnections.
const (
	followAttempts = 30
	followWindow   = time.Minute
)

// FollowOutput calls fn with each event of the process's output from cursor
// on ("" for the start) until the "exit" event, which fn receives too. When
// the stream breaks (the connection dropped, the daemon restarted or
// answered 503) it reconnects from the cursor of the last event fn got,
// after a short backoff, so no event is lost or repeated; it gives up after
// 30 attempts or a minute without an event. An error from fn ends it and is
// returned as is.
func (c *Client) FollowOutput(ctx context.Context, id, pid, cursor string, fn func(api.OutputEvent) error) error {
	attempts := 0
	var since time.Time // start of the current run of failures
	for {
		progressed := false
		s, err := c.Output(ctx, id, pid, OutputOptions{Cursor: cursor, Follow: true})
		if err == nil {
			var ev api.OutputEvent
			for {
				if ev, err = s.Next(); err != nil {
					break
				}
				if ev.Cursor != "" {
					cursor = ev.Cursor
				}
				progressed = true
				if ferr := fn(ev); ferr != nil {
					s.Close()
					return ferr
				}
				if ev.Kind == api.EventExit {
					s.Close()
					return nil
				}
			}
			s.Close()
			if errors.Is(err, io.EOF) {
				// A follow stream ends with the exit event: this one broke.
				err = io.ErrUnexpectedEOF
			}
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !retryable(err) {
			return err
		}
		if progressed || since.IsZero() {
			attempts, since = 0, time.Now()
		}
		attempts++
		left := followWindow - time.Since(since)
		if attempts > followAttempts || left <= 0 {
			return fmt.Errorf("airlock: output of process %s: gave up reconnecting after %d failures: %w", pid, attempts, err)
		}
		delay := min(100*time.Millisecond<<min(attempts-1, 5), 2*time.Second)
		var ae *Error
		if errors.As(err, &ae) && ae.RetryAfter > delay {
			delay = ae.RetryAfter
		}
		delay = min(delay, left)
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// retryable reports whether a broken output stream is worth reopening.
func retryable(err error) bool {
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, ErrUnavailable) {
		return true
	}
	var ae *Error
	if errors.As(err, &ae) {
		return false
	}
	var ne net.Error
	return errors.As(err, &ne)
}
