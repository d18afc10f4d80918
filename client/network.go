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
	p, err := sandboxPath(id, "/network")
	if err != nil {
		return nil, err
	}
	v := q.query()
	v.Del("limit")
	v.Set("follow", "true")
	body, sse, err := c.openStream(ctx, p, v, sse, q.Cursor)
	if err != nil {
		return nil, err
	}
	return &NetworkStream{r: newEventReader(body, sse), cursor: q.Cursor}, nil
}

// NetworkStream is one HTTP stream of a sandbox's egress audit. It is not
// safe for concurrent use.
type NetworkStream struct {
	r      eventReader
	cursor string
	err    error // sticky: returned by every later Next
}

// Next returns the next event. It returns io.EOF when the stream ended
// cleanly (the sandbox ended: every record it made was sent),
// io.ErrUnexpectedEOF when the stream was cut, an *Error when the daemon
// reported one in the stream (ErrUnavailable while it shuts down), or the
// transport's error.
func (s *NetworkStream) Next() (api.NetworkEvent, error) {
	if s.err != nil {
		return api.NetworkEvent{}, s.err
	}
	data, id, err := s.r.next()
	var ev api.NetworkEvent
	if err == nil {
		err = decodeStreamEvent("network", data, &ev)
	}
	if err == nil && ev.Cursor == "" {
		if ev.Cursor = id; id == "" {
			err = fmt.Errorf("airlock: network stream: event without a cursor: %.80q", data)
		}
	}
	if err != nil {
		s.err = err
		return api.NetworkEvent{}, err
	}
	s.cursor = ev.Cursor
	return ev, nil
}

// Cursor returns the cursor of the last event Next returned (the one the
// stream was opened with before that): a query with it resumes right after
// that event.
func (s *NetworkStream) Cursor() string { return s.cursor }

// Close closes the stream.
func (s *NetworkStream) Close() error {
	if s.err == nil {
		s.err = errors.New("airlock: network stream closed")
	}
	return s.r.body.Close()
}

// FollowNetwork calls fn with each record of the egress audit of sandbox
// id that q selects, from q.Cursor on, then with each new one as the
// gateway makes it, until the sandbox ends (stopped, failed or deleted),
// when it returns nil. When the stream breaks (the connection dropped, the
// daemon restarted or answered 503) it reconnects from the cursor of the
// last event fn got, after a short backoff, so no event is lost or
// repeated; it gives up after 30 attempts or a minute without an event. An
// error from fn ends it and is returned as is.
func (c *Client) FollowNetwork(ctx context.Context, id string, q NetworkQuery, fn func(api.NetworkEvent) error) error {
	return reconnect(ctx, "network events of sandbox "+id, func() (progressed, done bool, err error) {
		s, err := c.NetworkStream(ctx, id, q, false)
		if err != nil {
			return false, false, err
		}
		defer s.Close()
		for {
			ev, err := s.Next()
			if errors.Is(err, io.EOF) {
				return progressed, true, nil
			}
			if err != nil {
				return progressed, false, err
			}
			q.Cursor = ev.Cursor
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
