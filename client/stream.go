package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/airlock-dev/airlock/api"
)

// The daemon's streams (process output, network events) are NDJSON or
// Server-Sent Events carrying one JSON event each; an error after the
// stream started is its last event, an api.Error.

// openStream opens a streaming GET of p: SSE (with Last-Event-ID set to
// lastID, when not empty) or NDJSON. It returns the body and whether the
// daemon answered with SSE.
func (c *Client) openStream(ctx context.Context, p string, q url.Values, sse bool, lastID string) (io.ReadCloser, bool, error) {
	req, err := c.request(ctx, http.MethodGet, p, q, nil)
	if err != nil {
		return nil, false, err
	}
	if sse {
		req.Header.Set("Accept", "text/event-stream")
		if lastID != "" {
			req.Header.Set("Last-Event-ID", lastID)
		}
	} else {
		req.Header.Set("Accept", "application/x-ndjson")
	}
	resp, err := c.send(req)
	if err != nil {
		return nil, false, err
	}
	if mt, _, err := mime.ParseMediaType(resp.Header.Get("Content-Type")); err == nil {
		switch mt {
		case "text/event-stream":
			sse = true
		case "application/x-ndjson", "application/json":
			sse = false
		}
	}
	return resp.Body, sse, nil
}

// maxEventLine bounds one line of a stream.
const maxEventLine = 16 << 20

// eventReader reads the events of a stream as raw JSON.
type eventReader struct {
	body   io.ReadCloser
	br     *bufio.Reader
	sse    bool
	lines  [][]byte // SSE: lines split off a line by lone CRs, not yet parsed
	lastID string   // SSE: the last event id
	line   []byte   // readLine's buffer, reused
}

func newEventReader(body io.ReadCloser, sse bool) eventReader {
	return eventReader{body: body, br: bufio.NewReaderSize(body, 64<<10), sse: sse}
}

// next returns the next event's JSON and, for SSE, the last event id
// seen. It returns io.EOF at the clean end of the stream,
// io.ErrUnexpectedEOF when it was cut in the middle of an event, or the
// transport's error.
func (r *eventReader) next() ([]byte, string, error) {
	if r.sse {
		return r.nextSSE()
	}
	for {
		line, err := r.readLine()
		if err != nil {
			return nil, "", err
		}
		line = bytes.TrimSpace(line)
		if len(line) > 0 {
			return line, "", nil
		}
	}
}

// readLine returns the next line without its "\n", valid until the next
// call. A last line without one is io.ErrUnexpectedEOF: the daemon ends
// every line.
func (r *eventReader) readLine() ([]byte, error) {
	line := r.line[:0]
	defer func() { r.line = line[:0] }()
	for {
		frag, err := r.br.ReadSlice('\n')
		if len(line)+len(frag) > maxEventLine {
			return nil, fmt.Errorf("airlock: stream: a line is longer than %d bytes", maxEventLine)
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

// nextSSE parses Server-Sent Events (the WHATWG format): "data:" lines,
// joined with "\n", are the JSON event; "id:" is the event id (kept for
// the events that follow, as the format says); comments (":...") and
// other fields are skipped; a blank line ends an event. Lines end with
// "\n", "\r\n" or "\r".
func (r *eventReader) nextSSE() ([]byte, string, error) {
	var data []byte
	hasData, pending := false, false
	for {
		if len(r.lines) == 0 {
			line, err := r.readLine()
			if err != nil {
				if errors.Is(err, io.EOF) && pending {
					err = io.ErrUnexpectedEOF
				}
				return nil, "", err
			}
			r.lines = bytes.Split(bytes.TrimSuffix(line, []byte("\r")), []byte("\r"))
		}
		line := r.lines[0]
		r.lines = r.lines[1:]
		if len(line) == 0 {
			if hasData {
				return data, r.lastID, nil
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
				r.lastID = string(value)
			}
		}
	}
}

// decodeStreamEvent decodes one event of a what stream into v, or returns
// the error the daemon reported instead (an *Error with Status 0): a line
// whose "error" is an object.
func decodeStreamEvent(what string, b []byte, v any) error {
	var e struct {
		Error json.RawMessage `json:"error"`
	}
	// Only a line that names "error" can be one: parse it for that only
	// then (a parse scans the whole line, and output events are large).
	if bytes.Contains(b, []byte(`"error"`)) {
		if err := json.Unmarshal(b, &e); err != nil {
			return fmt.Errorf("airlock: %s stream: bad event %.80q: %w", what, b, err)
		}
	}
	if len(e.Error) > 0 && e.Error[0] == '{' {
		var body api.ErrorBody
		if err := json.Unmarshal(e.Error, &body); err != nil {
			return fmt.Errorf("airlock: %s stream: bad error %.80q: %w", what, b, err)
		}
		return &Error{Code: body.Code, Message: body.Message}
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("airlock: %s stream: bad event %.80q: %w", what, b, err)
	}
	return nil
}

// Bounds of the reconnections of FollowOutput and FollowNetwork.
const (
	followAttempts = 30
	followWindow   = time.Minute
)

// reconnect runs one stream after another until one is done: run opens a
// stream from the last cursor its caller got and reads it, reporting
// whether it got any event, whether it is done, and why it stopped. A
// stream that broke in a retryable way is reopened after a backoff; after
// 30 attempts or a minute without an event, reconnect gives up.
func reconnect(ctx context.Context, what string, run func() (progressed, done bool, err error)) error {
	attempts := 0
	var since time.Time // start of the current run of failures
	for {
		progressed, done, err := run()
		if done {
			return err
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
			return fmt.Errorf("airlock: %s: gave up reconnecting after %d failures: %w", what, attempts, err)
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

// retryable reports whether a broken stream is worth reopening.
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
