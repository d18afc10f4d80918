package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/airlock-dev/airlock/api"
)

// NetworkQuery selects records of a sandbox's egress audit (NetworkEvents,
// NetworkStream, FollowNetwork). Its filters combine.
type NetworkQuery struct {
	// Allowed keeps only the allowed (true) or only the denied (false)
	// records; nil keeps both.
	Allowed *bool
	// Problems keeps only the records worth telling the user or agent
	// about: those a rule denied, and those that failed before any byte
	// moved either way (the name did not resolve, no address answered,
	// the request was malformed). Failures later in a transfer are not.
	Problems bool
	// Host keeps the records of this host, as the gateway normalizes it
	// (lowercase, no trailing dot); "" keeps all.
	Host string
	// Since keeps the records of connections and requests that started at
	// or after it; the zero time keeps all.
	Since time.Time
	// Cursor lists the records after the one that carried it (an event's
	// Cursor or a page's NextCursor); "" starts at the oldest kept.
	Cursor string
	// Limit is the page size of NetworkEvents (1..1000); 0 is the daemon's
	// default (100). Streams ignore it.
	Limit int
}

// query returns q as the query of GET .../network.
func (q NetworkQuery) query() url.Values {
	v := url.Values{}
	if q.Allowed != nil {
		v.Set("allowed", strconv.FormatBool(*q.Allowed))
	}
	if q.Problems {
		v.Set("problems", "true")
	}
	if q.Host != "" {
		v.Set("host", q.Host)
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

// NetworkEvents returns one page of the egress audit of sandbox id (one
// record per connection or plain-HTTP request through its gateway,
// allowed or denied), oldest first. When the page's NextCursor is set,
// pass it as Cursor, with the same filters, for the next page.
func (c *Client) NetworkEvents(ctx context.Context, id string, q NetworkQuery) (*api.NetworkEventsPage, error) {
	p, err := sandboxPath(id, "/network")
	if err != nil {
		return nil, err
	}
	var page api.NetworkEventsPage
	if err := c.call(ctx, http.MethodGet, p, q.query(), nil, &page); err != nil {
		return nil, err
	}
	return &page, nil
}

// NetworkStream opens one stream of the egress audit of sandbox id: the
// records q selects, then each new one as the gateway makes it, until the
// sandbox ends. It returns once the daemon has answered, so that records
// made from then on are in the stream. sse asks for Server-Sent Events
// (with q.Cursor sent as Last-Event-ID) rather than NDJSON; both carry the
// same events. Read it with Next, and Close it. A stream that breaks is not
// resumed: FollowNetwork does that.
func (c *Client) NetworkStream(ctx context.Context, id string, q NetworkQuery, sse bool) (*NetworkStream, error) {
	s, err := openCursorStream[api.NetworkEvent](ctx, c, id, "/network", "network", q.query(), q.Cursor, sse)
	if err != nil {
		return nil, err
	}
	return &NetworkStream{s}, nil
}

// NetworkStream is one HTTP stream of a sandbox's egress audit. It is not
// safe for concurrent use.
type NetworkStream struct {
	s *cursorStream[api.NetworkEvent]
}

// Next returns the next event. It returns io.EOF when the stream ended
// cleanly (the sandbox ended: every record it made was sent),
// io.ErrUnexpectedEOF when the stream was cut, an *Error when the daemon
// reported one in the stream (ErrUnavailable while it shuts down), or the
// transport's error.
func (s *NetworkStream) Next() (api.NetworkEvent, error) { return s.s.next() }

// Cursor returns the cursor of the last event Next returned (the one the
// stream was opened with before that): a query with it resumes right after
// that event.
func (s *NetworkStream) Cursor() string { return s.s.cursor }

// Close closes the stream.
func (s *NetworkStream) Close() error { return s.s.close() }

// FollowNetwork calls fn with each record of the egress audit of sandbox
// id that q selects, from q.Cursor on, then with each new one as the
// gateway makes it, until the sandbox ends (stopped, failed or deleted),
// when it returns nil. When the stream breaks (the connection dropped, the
// daemon restarted or answered 503) it reconnects from the cursor of the
// last event fn got, after a short backoff, so no event is lost or
// repeated; it gives up after 30 attempts or a minute without an event. An
// error from fn ends it and is returned as is.
func (c *Client) FollowNetwork(ctx context.Context, id string, q NetworkQuery, fn func(api.NetworkEvent) error) error {
	return followCursor(ctx, "network events of sandbox "+id, q.Cursor, func(cursor string) (*cursorStream[api.NetworkEvent], error) {
		q.Cursor = cursor
		s, err := c.NetworkStream(ctx, id, q, false)
		if err != nil {
			return nil, err
		}
		return s.s, nil
	}, fn)
}

// cursorEvent is an event of a stream whose events carry cursors.
type cursorEvent interface {
	api.NetworkEvent | api.RecordEvent
}

func cursorOf[E cursorEvent](ev *E) *string {
	switch e := any(ev).(type) {
	case *api.NetworkEvent:
		return &e.Cursor
	case *api.RecordEvent:
		return &e.Cursor
	}
	panic("unreachable")
}

// cursorStream is one HTTP stream of stored events with cursors (the
// egress audit, the activity record).
type cursorStream[E cursorEvent] struct {
	what   string // "network", in messages
	r      eventReader
	cursor string
	err    error // sticky: returned by every later next
}

// openCursorStream opens GET /v1/sandboxes/{id}{rest}?follow=true with
// the query v (its limit dropped).
func openCursorStream[E cursorEvent](ctx context.Context, c *Client, id, rest, what string, v url.Values, cursor string, sse bool) (*cursorStream[E], error) {
	p, err := sandboxPath(id, rest)
	if err != nil {
		return nil, err
	}
	v.Del("limit")
	v.Set("follow", "true")
	body, sse, err := c.openStream(ctx, p, v, sse, cursor)
	if err != nil {
		return nil, err
	}
	return &cursorStream[E]{what: what, r: newEventReader(body, sse), cursor: cursor}, nil
}

func (s *cursorStream[E]) next() (E, error) {
	var ev E
	if s.err != nil {
		return ev, s.err
	}
	data, id, err := s.r.next()
	if err == nil {
		err = decodeStreamEvent(s.what, data, &ev)
	}
	c := cursorOf(&ev)
	if err == nil && *c == "" {
		if *c = id; id == "" {
			err = fmt.Errorf("airlock: %s stream: event without a cursor: %.80q", s.what, data)
		}
	}
	if err != nil {
		s.err = err
		var zero E
		return zero, err
	}
	s.cursor = *c
	return ev, nil
}

func (s *cursorStream[E]) close() error {
	if s.err == nil {
		s.err = fmt.Errorf("airlock: %s stream closed", s.what)
	}
	return s.r.body.Close()
}

// followCursor is FollowNetwork's and FollowEvents's loop: open (from a
// cursor), read, call fn, and reconnect from the last cursor fn got.
func followCursor[E cursorEvent](ctx context.Context, what, cursor string, open func(cursor string) (*cursorStream[E], error), fn func(E) error) error {
	return reconnect(ctx, what, func() (progressed, done bool, err error) {
		s, err := open(cursor)
		if err != nil {
			return false, false, err
		}
		defer s.close()
		for {
			ev, err := s.next()
			if errors.Is(err, io.EOF) {
				return progressed, true, nil
			}
			if err != nil {
				return progressed, false, err
			}
			cursor = *cursorOf(&ev)
			progressed = true
			if err := fn(ev); err != nil {
				return true, true, err
			}
		}
	})
}

// NetworkPolicy returns the network policy of sandbox id now: as created,
// or as last set with SetNetworkPolicy.
func (c *Client) NetworkPolicy(ctx context.Context, id string) (*api.NetworkPolicy, error) {
	p, err := sandboxPath(id, "/network/policy")
	if err != nil {
		return nil, err
	}
	var np api.NetworkPolicy
	if err := c.call(ctx, http.MethodGet, p, nil, nil, &np); err != nil {
		return nil, err
	}
	return &np, nil
}

// SetNetworkPolicy replaces the mode and rules of sandbox id's network
// policy while it runs, and returns the policy now in force. Open
// connections the new policy denies are closed. A bad mode or rule is an
// error matching ErrInvalid (the policy stays as it was); a mode other than
// "none" for a sandbox created without network access, or a sandbox that
// no longer runs, one matching ErrConflict. To change one rule, read the
// policy with NetworkPolicy, change it, and set it.
func (c *Client) SetNetworkPolicy(ctx context.Context, id string, np api.NetworkPolicy) (*api.NetworkPolicy, error) {
	p, err := sandboxPath(id, "/network/policy")
	if err != nil {
		return nil, err
	}
	var out api.NetworkPolicy
	if err := c.call(ctx, http.MethodPut, p, nil, &np, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
