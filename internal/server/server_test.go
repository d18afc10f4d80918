package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/internal/errdefs"
	"github.com/airlock-dev/airlock/internal/manager"
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
