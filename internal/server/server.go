// Package server is airlock's HTTP API (/v1): routing, authentication,
// request decoding and limits, the mapping of errors to status codes (in
// one place: writeError), output streaming (NDJSON and Server-Sent Events)
// and the PTY WebSocket.
//
// It holds no sandbox state of its own: everything goes through the
// manager. It must never let a request over TCP through without a valid API
// key (apart from health, readiness, metrics and the API document), and
// never answer a bad request with a 5xx.
package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/airlock-dev/airlock/internal/metrics"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"time"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/internal/errdefs"
	"github.com/airlock-dev/airlock/internal/manager"
	"github.com/airlock-dev/airlock/internal/store"
)

// Limits of request bodies.
const (
	maxJSON       = 1 << 20  // most JSON bodies
	maxCreateJSON = 64 << 20 // create, which may carry files
)

// Server serves the API.
type Server struct {
	m   *manager.Manager
	st  *store.Store
	log *slog.Logger
	met *manager.Metrics
	// MaxUpload caps file and archive uploads (bytes); 0: no cap beyond the
	// sandbox's disk.
	MaxUpload int64

	draining atomic.Bool
	drained  context.Context // done once Drain was called (nil in tests that build a Server by hand)
	drain    context.CancelFunc
}

// New makes a server.
func New(m *manager.Manager, st *store.Store, met *manager.Metrics, log *slog.Logger) *Server {
	drained, drain := context.WithCancel(context.Background())
	return &Server{m: m, st: st, met: met, log: log, drained: drained, drain: drain}
}

// Drain makes /readyz fail (a shutdown has begun) and ends the network
// event streams, whose clients reconnect to the next daemon.
func (s *Server) Drain() {
	s.draining.Store(true)
	if s.drain != nil {
		s.drain()
	}
}

type handler func(w http.ResponseWriter, r *http.Request) error

// Handler returns the API's handler. remote is true for TCP listeners:
// every request but health, readiness, metrics and the API document then
// needs an API key, and key management is refused.
func (s *Server) Handler(remote bool) http.Handler {
	ops := s.ops()
	mux := http.NewServeMux()
	paths := map[string]bool{}
	for _, rt := range api.Routes {
		h, ok := ops[rt.Op]
		if !ok {
			panic("server: no handler for " + rt.Op)
		}
		mux.Handle(rt.Pattern(), s.wrap(rt, h, remote))
		paths[rt.Path] = true
	}
	// Other methods on known paths, and unknown paths, get JSON errors.
	for p := range paths {
		mux.Handle(p, s.wrap(api.Route{Path: p, Op: "-"}, func(w http.ResponseWriter, r *http.Request) error {
			return &apiError{http.StatusMethodNotAllowed, api.CodeMethodInvalid, fmt.Sprintf("%s %s: method not allowed", r.Method, r.URL.Path)}
		}, remote))
	}
	mux.Handle("/", s.wrap(api.Route{Path: "/", Op: "-"}, func(w http.ResponseWriter, r *http.Request) error {
		return &apiError{http.StatusNotFound, api.CodeNotFound, fmt.Sprintf("%s %s: no such API path (see /v1/openapi.json)", r.Method, r.URL.Path)}
	}, remote))
	return mux
}

// public operations need no API key.
var public = map[string]bool{"health": true, "ready": true, "metrics": true, "openapi": true}

// wrap adds authentication, panic recovery, error writing and logging.
func (s *Server) wrap(rt api.Route, h handler, remote bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &statusWriter{ResponseWriter: w}
		var err error
		defer func() {
			if p := recover(); p != nil {
				s.log.Error("panic in handler", "op", rt.Op, "panic", p, "stack", string(debug.Stack()))
				err = fmt.Errorf("internal error: %v", p)
				if rec.status == 0 {
					s.writeError(rec, err)
				}
			}
			level := slog.LevelDebug
			switch {
			case r.Context().Err() != nil && errors.Is(err, context.Canceled):
				// The client went away (a cancelled call, a closed
				// stream): nothing went wrong here.
				level = slog.LevelDebug
			case rec.status >= 500:
				level = slog.LevelError
			case rec.status >= 400:
				level = slog.LevelInfo
			}
			attrs := []any{"op", rt.Op, "method", r.Method, "path", r.URL.Path, "status", rec.status, "ms", float64(time.Since(start).Microseconds()) / 1000}
			if err != nil {
				attrs = append(attrs, "err", err)
			}
			s.log.Log(r.Context(), level, "request", attrs...)
		}()
		if remote && !public[rt.Op] {
			var key *store.Key
			if key, err = s.authenticate(r); err != nil {
				rec.Header().Set("WWW-Authenticate", `Bearer realm="airlock"`)
				s.writeError(rec, err)
				return
			}
			if strings.HasPrefix(rt.Path, "/v1/keys") {
				err = &apiError{http.StatusForbidden, api.CodeForbidden, "API keys can be managed only over the daemon's unix socket"}
				s.writeError(rec, err)
				return
			}
			r = r.WithContext(manager.WithTenant(r.Context(), key.Tenant))
		}
		// Until the sandboxes of a previous daemon are re-adopted, calls
		// wait (a sandbox not yet re-adopted would be "not found", and a
		// creation could race the recovery's clean-up).
		if !public[rt.Op] {
			select {
			case <-s.m.Ready():
			case <-r.Context().Done():
				err = &apiError{http.StatusServiceUnavailable, api.CodeUnavailable, "starting: re-adopting sandboxes"}
				s.writeError(rec, err)
				return
			}
		}
		if err = h(rec, r); err != nil {
			if rec.status == 0 {
				s.writeError(rec, err)
			} else {
				s.log.Debug("error after the answer started", "op", rt.Op, "err", err)
			}
		}
	})
}

// authenticate checks the request's API key and returns it.
func (s *Server) authenticate(r *http.Request) (*store.Key, error) {
	h := r.Header.Get("Authorization")
	key, ok := strings.CutPrefix(h, "Bearer ")
	if h == "" {
		return nil, &apiError{http.StatusUnauthorized, api.CodeUnauthorized, "an API key is required: send Authorization: Bearer <key> (make one with `airlock keys create`)"}
	}
	if !ok || key == "" {
		return nil, &apiError{http.StatusUnauthorized, api.CodeUnauthorized, "Authorization: want Bearer <key>"}
	}
	k, err := s.st.Authenticate(r.Context(), key)
	if err != nil {
		return nil, &apiError{http.StatusUnauthorized, api.CodeUnauthorized, "invalid or revoked API key"}
	}
	return k, nil
}

// statusWriter records the status written.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the real writer (Flush,
// Hijack for WebSockets, deadlines).
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// apiError is an error with its status and code decided.
type apiError struct {
	status  int
	code    string
	message string
}

func (e *apiError) Error() string { return e.message }

// writeError maps an error to its status and writes the JSON error body.
// This is the one place where errors become status codes (classify).
func (s *Server) writeError(w http.ResponseWriter, err error) {
	status, body, after := classify(err)
	if after > 0 {
		w.Header().Set("Retry-After", fmt.Sprint(int((after+time.Second-1)/time.Second)))
	}
	s.met.Error(body.Code)
	writeJSON(w, status, api.Error{Err: body})
}

// classify maps an error to its status, code and message, and for a 429
// the time to wait.
func classify(err error) (status int, body api.ErrorBody, retryAfter time.Duration) {
	status, code := http.StatusInternalServerError, api.CodeInternal
	var ae *apiError
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &ae):
		status, code = ae.status, ae.code
	case errors.As(err, &mbe):
		status, code = http.StatusRequestEntityTooLarge, api.CodeTooLarge
		err = fmt.Errorf("request body larger than %d bytes", mbe.Limit)
	case errors.Is(err, errdefs.ErrNotFound): // store.ErrNotFound is the same error
		status, code = http.StatusNotFound, api.CodeNotFound
	case errors.Is(err, errdefs.ErrCommandNotFound):
		status, code = http.StatusBadRequest, api.CodeCommandNotFound
	case errors.Is(err, errdefs.ErrNotExecutable):
		status, code = http.StatusBadRequest, api.CodeNotExecutable
	case errors.Is(err, errdefs.ErrInvalid):
		status, code = http.StatusBadRequest, api.CodeInvalid
	case errors.Is(err, errdefs.ErrExists):
		status, code = http.StatusConflict, api.CodeExists
	case errors.Is(err, errdefs.ErrConflict):
		status, code = http.StatusConflict, api.CodeConflict
	case errors.Is(err, errdefs.ErrTooLarge):
		status, code = http.StatusRequestEntityTooLarge, api.CodeTooLarge
	case errors.Is(err, errdefs.ErrExhausted):
		status, code = http.StatusTooManyRequests, api.CodeExhausted
		retryAfter = errdefs.RetryAfter(err)
		if retryAfter <= 0 {
			retryAfter = time.Second
		}
	case errors.Is(err, errdefs.ErrPermission):
		status, code = http.StatusForbidden, api.CodeForbidden
	case errors.Is(err, errdefs.ErrUnavailable):
		status, code = http.StatusServiceUnavailable, api.CodeUnavailable
	case errors.Is(err, errdefs.ErrNotSupported):
		status, code = http.StatusNotImplemented, api.CodeNotSupported
	case errors.Is(err, context.DeadlineExceeded):
		status, code = http.StatusGatewayTimeout, api.CodeTimeout
	}
	return status, api.ErrorBody{Code: code, Message: errdefs.Clip(err.Error())}, retryAfter
}

// writeJSON writes v as the answer.
func writeJSON(w http.ResponseWriter, status int, v any) error {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	return enc.Encode(v)
}

// ops maps operation ids to handlers.
func (s *Server) ops() map[string]handler {
	return map[string]handler{
		"health":  s.health,
		"ready":   s.ready,
		"metrics": s.metrics,
		"openapi": s.openapi,

		"createSandbox": s.createSandbox,
		"listSandboxes": s.listSandboxes,
		"getSandbox":    s.getSandbox,
		"deleteSandbox": s.deleteSandbox,
		"setTimeout":    s.setTimeout,
		"pauseSandbox":  s.pauseSandbox,
		"resumeSandbox": s.resumeSandbox,

		"exec":          s.exec,
		"startProcess":  s.startProcess,
		"listProcesses": s.listProcesses,
		"getProcess":    s.getProcess,
		"waitProcess":   s.waitProcess,
		"processOutput": s.processOutput,
		"writeStdin":    s.writeStdin,
		"signalProcess": s.signalProcess,
		"pty":           s.pty,

		"networkEvents": s.networkEvents,
		"recordEvents":  s.recordEvents,

		"createSnapshot":   s.createSnapshot,
		"listSnapshots":    s.listSnapshots,
		"getSnapshot":      s.getSnapshot,
		"deleteSnapshot":   s.deleteSnapshot,
		"forkSandbox":      s.forkSandbox,
		"restoreSandbox":   s.restoreSandbox,
		"sandboxChanges":   s.sandboxChanges,
		"getNetworkPolicy": s.getNetworkPolicy,
		"setNetworkPolicy": s.setNetworkPolicy,
		"portTunnel":       s.portTunnel,

		"readFile":  s.readFile,
		"writeFile": s.writeFile,
		"remove":    s.remove,
		"stat":      s.stat,
		"list":      s.list,
		"mkdir":     s.mkdir,
		"rename":    s.rename,
		"download":  s.download,
		"upload":    s.upload,

		"createKey": s.createKey,
		"listKeys":  s.listKeys,
		"revokeKey": s.revokeKey,
	}
}

func (s *Server) health(w http.ResponseWriter, r *http.Request) error {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, err := w.Write([]byte("ok\n"))
	return err
}

func (s *Server) ready(w http.ResponseWriter, r *http.Request) error {
	select {
	case <-s.m.Ready():
	default:
		return &apiError{http.StatusServiceUnavailable, api.CodeUnavailable, "starting: re-adopting sandboxes"}
	}
	if s.draining.Load() {
		return &apiError{http.StatusServiceUnavailable, api.CodeUnavailable, "shutting down"}
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, err := w.Write([]byte("ready\n"))
	return err
}

func (s *Server) metrics(w http.ResponseWriter, r *http.Request) error {
	w.Header().Set("Content-Type", metrics.ContentType)
	return s.met.Registry.Write(w)
}

func (s *Server) openapi(w http.ResponseWriter, r *http.Request) error {
	w.Header().Set("Content-Type", "application/json")
	_, err := w.Write(api.OpenAPI)
	return err
}
