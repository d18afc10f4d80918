package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-dev/airlock/api"
)

// EventsQuery selects events of a sandbox's activity record (Events,
// EventsStream, FollowEvents). Its filters combine.
type EventsQuery struct {
	// Types keeps only events of these types (api.RecordExec, ...); empty
	// keeps all.
	Types []string
	// Since keeps the events at or after it; the zero time keeps all.
	Since time.Time
	// Cursor lists the events after the one that carried it (an event's
	// Cursor or a page's NextCursor); "" starts at the oldest.
	Cursor string
	// Limit is the page size of Events (1..1000); 0 is the daemon's
	// default (100). Streams ignore it.
	Limit int
}

// query returns q as the query of GET .../events.
func (q EventsQuery) query() url.Values {
	v := url.Values{}
	if len(q.Types) > 0 {
		v.Set("type", strings.Join(q.Types, ","))
	}
	if !q.Since.IsZero() {
		v.Set("since", q.Since.UTC().Format(time.RFC3339Nano))
	}
	if q.Cursor != "" {
		v.Set("cursor", q.Cursor)
	}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	return v
}

// Events returns one page of the activity record of sandbox id (made with
// CreateSandboxRequest.Record), oldest first: every exec and exit in it,
// its network requests and resource use, as the daemon recorded them.
// When the page's NextCursor is set, pass it as Cursor, with the same
// filters, for the next page. A sandbox made without a record is an error
// matching ErrConflict.
func (c *Client) Events(ctx context.Context, id string, q EventsQuery) (*api.RecordEventsPage, error) {
	p, err := sandboxPath(id, "/events")
	if err != nil {
		return nil, err
	}
	var page api.RecordEventsPage
	if err := c.call(ctx, http.MethodGet, p, q.query(), nil, &page); err != nil {
		return nil, err
	}
	return &page, nil
}

// EventsStream opens one stream of the activity record of sandbox id: the
// events q selects, then each new one as it is stored, until the sandbox
// ends (after its end event). It returns once the daemon has answered.
// sse asks for Server-Sent Events rather than NDJSON. Read it with Next,
// and Close it. A stream that breaks is not resumed: FollowEvents does
// that.
func (c *Client) EventsStream(ctx context.Context, id string, q EventsQuery, sse bool) (*EventsStream, error) {
	s, err := openCursorStream[api.RecordEvent](ctx, c, id, "/events", "record", q.query(), q.Cursor, sse)
	if err != nil {
		return nil, err
	}
	return &EventsStream{s}, nil
}

// EventsStream is one HTTP stream of a sandbox's activity record. It is
// not safe for concurrent use.
type EventsStream struct {
	s *cursorStream[api.RecordEvent]
}

// Next returns the next event: io.EOF when the stream ended cleanly (the
// sandbox ended), io.ErrUnexpectedEOF when it was cut, an *Error when the
// daemon reported one in the stream, or the transport's error.
func (s *EventsStream) Next() (api.RecordEvent, error) { return s.s.next() }

// Cursor returns the cursor of the last event Next returned.
func (s *EventsStream) Cursor() string { return s.s.cursor }

// Close closes the stream.
func (s *EventsStream) Close() error { return s.s.close() }

// FollowEvents calls fn with each event of the activity record of sandbox
// id that q selects, from q.Cursor on, then with each new one as it is
// stored, until the sandbox ends (stopped, failed or deleted), when it
// returns nil. A broken stream is resumed from the last cursor fn got,
// like FollowNetwork. An error from fn ends it and is returned as is.
func (c *Client) FollowEvents(ctx context.Context, id string, q EventsQuery, fn func(api.RecordEvent) error) error {
	return followCursor(ctx, "record events of sandbox "+id, q.Cursor, func(cursor string) (*cursorStream[api.RecordEvent], error) {
		q.Cursor = cursor
		s, err := c.EventsStream(ctx, id, q, false)
		if err != nil {
			return nil, err
		}
		return s.s, nil
	}, fn)
}
