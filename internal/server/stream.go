package server

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"github.com/airlock-dev/airlock/api"
)

// stream is an answer made of events: NDJSON (one JSON value per line,
// the default) or, when the request accepts text/event-stream,
// Server-Sent Events whose id is the event's cursor. The status and
// headers go out with the first event (or start); after that an error can
// only be the stream's last line, in the one error shape (end).
type stream struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	sse     bool
	started bool
	buf     bytes.Buffer // one event, reused
}

// newStream prepares the stream answer of r; streams have no write
// deadline.
func newStream(w http.ResponseWriter, r *http.Request) *stream {
	s := &stream{w: w, rc: http.NewResponseController(w), sse: strings.Contains(r.Header.Get("Accept"), "text/event-stream")}
	s.rc.SetWriteDeadline(time.Time{})
	return s
}

// cursor returns where the client resumes: ?cursor=, or for SSE the
// Last-Event-ID header.
func (s *stream) cursor(r *http.Request) string {
	c := r.URL.Query().Get("cursor")
	if c == "" && s.sse {
		c = r.Header.Get("Last-Event-ID")
	}
	return c
}

// start sends the status and headers, once.
func (s *stream) start() error {
	if s.started {
		return nil
	}
	s.started = true
	h := s.w.Header()
	if s.sse {
		h.Set("Content-Type", "text/event-stream")
		h.Set("Cache-Control", "no-cache")
	} else {
		h.Set("Content-Type", "application/x-ndjson")
	}
	h.Set("X-Accel-Buffering", "no")
	s.w.WriteHeader(http.StatusOK)
	return s.rc.Flush()
}

// send writes one event and flushes it. id is the SSE id (the cursor);
// name, when not empty, the SSE event name.
func (s *stream) send(id, name string, v any) error {
	if err := s.start(); err != nil {
		return err
	}
	s.buf.Reset()
	if s.sse {
		s.buf.WriteString("id: " + id + "\n")
		if name != "" {
			s.buf.WriteString("event: " + name + "\n")
		}
		s.buf.WriteString("data: ")
	}
	// Encode ends the JSON with "\n", as both formats want.
	if err := json.NewEncoder(&s.buf).Encode(v); err != nil {
		return err
	}
	if s.sse {
		s.buf.WriteByte('\n')
	}
	if _, err := s.w.Write(s.buf.Bytes()); err != nil {
		return err
	}
	return s.rc.Flush()
}

// end finishes the stream after its producer returned err. A stream that
// started gets err (unless the client went away) as its last line, an
// api.Error (SSE: an "error" event); one that did not start answers an
// empty stream when err is nil, and leaves err to writeError otherwise.
func (s *stream) end(ctx context.Context, err error) error {
	if err == nil {
		return s.start()
	}
	if !s.started || ctx.Err() != nil {
		return err
	}
	_, body, _ := classify(err)
	b, _ := json.Marshal(api.Error{Err: body})
	if s.sse {
		s.w.Write([]byte("event: error\ndata: " + string(b) + "\n\n"))
	} else {
		s.w.Write(append(b, '\n'))
	}
	s.rc.Flush()
	return err
}
