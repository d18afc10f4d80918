package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/internal/errdefs"
	"github.com/airlock-dev/airlock/internal/manager"
	"github.com/airlock-dev/airlock/internal/runtime/native"
	"github.com/airlock-dev/airlock/internal/store"
)

// Every route of the API has a handler (Handler panics otherwise) and no
// handler is left without a route.
func TestRoutesHaveHandlers(t *testing.T) {
	s := &Server{met: manager.NewMetrics()}
	s.Handler(false)
	ops := s.ops()
	for _, r := range api.Routes {
		delete(ops, r.Op)
	}
	if len(ops) != 0 {
		t.Fatalf("handlers without a route: %v", ops)
	}
}

// The one error mapping: each kind gets its status and code, wrapped or
// not, and 429 carries Retry-After.
func TestWriteError(t *testing.T) {
	s := &Server{met: manager.NewMetrics()}
	for _, c := range []struct {
		err    error
		status int
		code   string
	}{
		{errdefs.ErrNotFound, 404, api.CodeNotFound},
		{fmt.Errorf("sandbox x: %w", store.ErrNotFound), 404, api.CodeNotFound},
		{fmt.Errorf("bad: %w", errdefs.ErrInvalid), 400, api.CodeInvalid},
		{fmt.Errorf("sandbox x: nope: %w", errdefs.ErrCommandNotFound), 400, api.CodeCommandNotFound},
		{fmt.Errorf("sandbox x: /etc/passwd: %w", errdefs.ErrNotExecutable), 400, api.CodeNotExecutable},
		{errdefs.ErrExists, 409, api.CodeExists},
		{errdefs.ErrConflict, 409, api.CodeConflict},
		{errdefs.ErrTooLarge, 413, api.CodeTooLarge},
		{&http.MaxBytesError{Limit: 10}, 413, api.CodeTooLarge},
		{&errdefs.RetryError{Err: errdefs.ErrExhausted, After: 2500e6}, 429, api.CodeExhausted},
		{errdefs.ErrPermission, 403, api.CodeForbidden},
		{errdefs.ErrUnavailable, 503, api.CodeUnavailable},
		{errdefs.ErrNotSupported, 501, api.CodeNotSupported},
		{errors.New("disk on fire"), 500, api.CodeInternal},
	} {
		w := httptest.NewRecorder()
		s.writeError(w, c.err)
		var body api.Error
		if w.Code != c.status || json.Unmarshal(w.Body.Bytes(), &body) != nil || body.Err.Code != c.code || body.Err.Message == "" {
			t.Errorf("%v: got %d %s, want %d %s", c.err, w.Code, w.Body.String(), c.status, c.code)
		}
		if c.status == 429 && w.Header().Get("Retry-After") != "3" {
			t.Errorf("429: Retry-After %q, want 3 (rounded up)", w.Header().Get("Retry-After"))
		}
	}
}

// Whatever a layer below put in an error message, the answer's message is
// at most errdefs.MaxMessage bytes (plus the note of what was cut) and
// keeps its start.
func TestWriteErrorClipsMessage(t *testing.T) {
	s := &Server{met: manager.NewMetrics()}
	w := httptest.NewRecorder()
	s.writeError(w, fmt.Errorf("policy: unknown key %s: %w", strings.Repeat("k", 10000), errdefs.ErrInvalid))
	var body api.Error
	if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || w.Code != 400 {
		t.Fatalf("got %d %.200s", w.Code, w.Body.String())
	}
	if m := body.Err.Message; len(m) > errdefs.MaxMessage+64 || !strings.HasPrefix(m, "policy: unknown key kkk") {
		t.Errorf("message of %d bytes: %.100q...", len(m), m)
	}
	// Control: a message under the cap is left whole.
	w = httptest.NewRecorder()
	s.writeError(w, fmt.Errorf("policy: unknown key %s: %w", strings.Repeat("k", 100), errdefs.ErrInvalid))
	if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || !strings.HasSuffix(body.Err.Message, strings.Repeat("k", 100)+": invalid argument") {
		t.Errorf("short message changed: %q", body.Err.Message)
	}
}

// A stream sends its headers once, one event per line (NDJSON) or per SSE
// event with the cursor as id, and an error after the start as its last
// line, classified by the one mapping.
func TestStream(t *testing.T) {
	for _, sse := range []bool{false, true} {
		r := httptest.NewRequest("GET", "/x?cursor=7", nil)
		if sse {
			r.Header.Set("Accept", "text/event-stream")
			r.Header.Set("Last-Event-ID", "9")
		}
		w := httptest.NewRecorder()
		st := newStream(w, r)
		if c := st.cursor(r); c != "7" {
			t.Errorf("sse %v: cursor %q, want ?cursor= first", sse, c)
		}
		st.send("8", "", map[string]string{"cursor": "8"})
		st.end(r.Context(), fmt.Errorf("shutting down: %w", errdefs.ErrUnavailable))
		want := "{\"cursor\":\"8\"}\n{\"error\":{\"code\":\"unavailable\",\"message\":\"shutting down: unavailable\"}}\n"
		ct := "application/x-ndjson"
		if sse {
			want = "id: 8\ndata: {\"cursor\":\"8\"}\n\nevent: error\ndata: {\"error\":{\"code\":\"unavailable\",\"message\":\"shutting down: unavailable\"}}\n\n"
			ct = "text/event-stream"
		}
		if w.Code != 200 || w.Body.String() != want || w.Header().Get("Content-Type") != ct {
			t.Errorf("sse %v: %d %q %q", sse, w.Code, w.Header().Get("Content-Type"), w.Body.String())
		}
	}
	r := httptest.NewRequest("GET", "/x", nil)
	r.Header.Set("Accept", "text/event-stream")
	r.Header.Set("Last-Event-ID", "9")
	st := newStream(httptest.NewRecorder(), r)
	if c := st.cursor(r); c != "9" {
		t.Errorf("SSE without ?cursor=: cursor %q, want Last-Event-ID", c)
	}
	// Not started: the error is left to writeError.
	if err := st.end(r.Context(), errdefs.ErrNotFound); err != errdefs.ErrNotFound || st.started {
		t.Errorf("end before start: %v %v", err, st.started)
	}
}

// Until the manager has re-adopted a previous daemon's sandboxes, API
// calls wait (and give up with 503 when their caller does); health does
// not. Once recovery is done, the same call answers.
func TestCallsWaitForRecovery(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, filepath.Join(t.TempDir(), "airlock.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	met := manager.NewMetrics()
	m, err := manager.New(manager.Config{Runtime: &native.Runtime{StateRoot: t.TempDir()}, Store: st, Metrics: met})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(ctx, true)
	ts := httptest.NewServer(New(m, st, met, slog.New(slog.DiscardHandler)).Handler(false))
	defer ts.Close()
	get := func(path string, wait time.Duration) int {
		cctx, cancel := context.WithTimeout(ctx, wait)
		defer cancel()
		req, _ := http.NewRequestWithContext(cctx, "GET", ts.URL+path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0 // the caller gave up first
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if st := get("/healthz", 5*time.Second); st != 200 {
		t.Fatalf("health during recovery: %d", st)
	}
	if st := get("/v1/sandboxes", 200*time.Millisecond); st == 200 {
		t.Fatal("a list answered before recovery")
	}
	if err := m.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	if st := get("/v1/sandboxes", 5*time.Second); st != 200 {
		t.Fatalf("list after recovery: %d", st)
	}
}
