package server

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
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
	q.Host = qv.Get("host")
	if v := qv.Get("since"); v != "" {
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			return badRequest("since=%s: want an RFC 3339 time (2006-01-02T15:04:05Z)", errdefs.Quote(v))
		}
		q.Since = t
	}
	follow, err := boolParam(r, "follow", false)
	if err != nil {
		return err
	}
	if !follow {
		if v := qv.Get("limit"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > 1000 {
				return badRequest("limit=%s: want 1 to 1000", errdefs.Quote(v))
			}
			q.Limit = n
		}
		q.Cursor = qv.Get("cursor")
		page, err := s.m.NetworkEvents(r.Context(), id, q)
		if err != nil {
			return err
		}
		return writeJSON(w, http.StatusOK, page)
	}
	st := newStream(w, r)
	q.Cursor = st.cursor(r)
	err = s.untilDrained(r, func(ctx context.Context) error {
		return s.m.FollowNetwork(ctx, id, q, func() { st.start() }, func(ev api.NetworkEvent) error {
			return st.send(ev.Cursor, "", ev)
		})
	})
	return st.end(r.Context(), err)
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
