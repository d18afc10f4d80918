package server

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/internal/errdefs"
	"github.com/airlock-dev/airlock/internal/manager"
)

// networkEvents answers a page of a sandbox's egress audit, or with
// ?follow=true streams it (NDJSON or SSE) until the sandbox ends.
func (s *Server) networkEvents(w http.ResponseWriter, r *http.Request) error {
	id, err := sandboxID(r)
	if err != nil {
		return err
	}
	qv := r.URL.Query()
	var q manager.NetworkQuery
	if v := qv.Get("allowed"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return badRequest("allowed=%s: want true or false", errdefs.Quote(v))
		}
		q.Allowed = &b
	}
	if v := qv.Get("problems"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return badRequest("problems=%s: want true or false", errdefs.Quote(v))
		}
		q.Problems = b
	}
	q.Host = qv.Get("host")
	ep, err := parseEventParams(r)
	if err != nil {
		return err
	}
	q.Since, q.Limit, q.Cursor = ep.since, ep.limit, ep.cursor
	if !ep.follow {
		page, err := s.m.NetworkEvents(r.Context(), id, q)
		if err != nil {
			return err
		}
		return writeJSON(w, http.StatusOK, page)
	}
	return s.followEvents(w, r, func(ctx context.Context, cursor string, start func(), send func(string, any) error) error {
		q.Cursor = cursor
		return s.m.FollowNetwork(ctx, id, q, start, func(ev api.NetworkEvent) error { return send(ev.Cursor, ev) })
	})
}

// eventParams are the query parameters of the stored event endpoints
// (.../network, .../events): ?since=, ?limit=, ?cursor=, ?follow=.
type eventParams struct {
	since  time.Time
	limit  int
	cursor string
	follow bool
}

func parseEventParams(r *http.Request) (eventParams, error) {
	var ep eventParams
	qv := r.URL.Query()
	if v := qv.Get("since"); v != "" {
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			return ep, badRequest("since=%s: want an RFC 3339 time (2006-01-02T15:04:05Z)", errdefs.Quote(v))
		}
		if y := t.Year(); y < 1678 || y > 2261 { // what nanoseconds since 1970 can hold
			return ep, badRequest("since=%s: want a time between the years 1678 and 2261", errdefs.Quote(v))
		}
		ep.since = t
	}
	var err error
	if ep.follow, err = boolParam(r, "follow", false); err != nil {
		return ep, err
	}
	if !ep.follow {
		if v := qv.Get("limit"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > 1000 {
				return ep, badRequest("limit=%s: want 1 to 1000", errdefs.Quote(v))
			}
			ep.limit = n
		}
		ep.cursor = qv.Get("cursor")
	}
	return ep, nil
}

// followEvents answers a stream of stored events (NDJSON or SSE): follow
// runs with the cursor to resume from, a start that sends the headers,
// and a send for each event with its cursor.
func (s *Server) followEvents(w http.ResponseWriter, r *http.Request, follow func(ctx context.Context, cursor string, start func(), send func(cursor string, v any) error) error) error {
	st := newStream(w, r)
	cursor := st.cursor(r)
	err := s.untilDrained(r, func(ctx context.Context) error {
		return follow(ctx, cursor, func() { st.start() }, func(c string, v any) error { return st.send(c, "", v) })
	})
	return st.end(r.Context(), err)
}

// recordEvents answers a page of a sandbox's activity record, or with
// ?follow=true streams it like networkEvents.
func (s *Server) recordEvents(w http.ResponseWriter, r *http.Request) error {
	id, err := sandboxID(r)
	if err != nil {
		return err
	}
	var q manager.RecordQuery
	for _, v := range r.URL.Query()["type"] {
		for _, t := range strings.Split(v, ",") {
			if t = strings.TrimSpace(t); t != "" {
				q.Types = append(q.Types, t)
			}
		}
	}
	if len(q.Types) > 16 {
		return badRequest("type: %d types, at most 16", len(q.Types))
	}
	ep, err := parseEventParams(r)
	if err != nil {
		return err
	}
	q.Since, q.Limit, q.Cursor = ep.since, ep.limit, ep.cursor
	if !ep.follow {
		page, err := s.m.Events(r.Context(), id, q)
		if err != nil {
			return err
		}
		return writeJSON(w, http.StatusOK, page)
	}
	return s.followEvents(w, r, func(ctx context.Context, cursor string, start func(), send func(string, any) error) error {
		q.Cursor = cursor
		return s.m.FollowEvents(ctx, id, q, start, func(ev api.RecordEvent) error { return send(ev.Cursor, ev) })
	})
}

// untilDrained runs a stream with r's context, also cancelled when the
// server drains, so that long streams end when a shutdown begins rather
// than when the grace period runs out; the stream then ends with an
// "unavailable" error, which tells the client to reconnect with its cursor.
// The context's cause is then manager.ErrDraining.
func (s *Server) untilDrained(r *http.Request, stream func(context.Context) error) error {
	ctx, cancel := context.WithCancelCause(r.Context())
	defer cancel(nil)
	if s.drained != nil {
		defer context.AfterFunc(s.drained, func() { cancel(manager.ErrDraining) })()
	}
	err := stream(ctx)
	if err != nil && r.Context().Err() == nil && s.draining.Load() {
		err = fmt.Errorf("the daemon is shutting down; reconnect with the last cursor: %w", errdefs.ErrUnavailable)
	}
	return err
}

func (s *Server) getNetworkPolicy(w http.ResponseWriter, r *http.Request) error {
	id, err := sandboxID(r)
	if err != nil {
		return err
	}
	np, err := s.m.NetworkPolicy(r.Context(), id)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, np)
}

func (s *Server) setNetworkPolicy(w http.ResponseWriter, r *http.Request) error {
	id, err := sandboxID(r)
	if err != nil {
		return err
	}
	var req api.NetworkPolicy
	if err := decode(w, r, maxJSON, &req); err != nil {
		return err
	}
	np, err := s.m.SetNetworkPolicy(r.Context(), id, req)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, np)
}
