// Package e2b serves E2B's API on the daemon's TCP listener, so that the
// official E2B SDKs drive airlock's sandboxes unchanged: the control plane
// (REST: create, list, get, kill, timeouts, pause, resume/connect) and the
// in-sandbox API "envd" (Connect-RPC process and filesystem services and the
// HTTP /files endpoints), plus port previews of servers listening inside a
// sandbox.
//
// Every sandbox is an ordinary airlock sandbox, made and driven through the
// manager with every isolation layer and its egress gateway: this package
// only translates. Requests reach it in three ways:
//
//   - control-plane paths (/sandboxes, /v2/sandboxes, ...) with X-API-Key;
//   - E2b-Sandbox-Id and E2b-Sandbox-Port headers (the SDK's E2B_SANDBOX_URL
//     mode): port 49983 is envd, any other port a preview;
//   - the Host PORT-ID.DOMAIN when a domain is configured (E2B_DOMAIN mode).
//
// envd and previews need the sandbox's access token (an HMAC of its id under
// a key kept in the data directory, so tokens survive restarts) or an API
// key; another sandbox's token is refused.
package e2b

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/internal/errdefs"
	"github.com/airlock-dev/airlock/internal/manager"
	"github.com/airlock-dev/airlock/internal/store"
)

// EnvdPort is the port the SDKs address envd on.
const EnvdPort = 49983

// EnvdVersion is the envd version reported to the SDKs: the features they
// gate on it (stdin control, closing stdin, octet-stream uploads) are
// served.
const EnvdVersion = "0.5.7"

// Server serves the E2B API.
type Server struct {
	m   *manager.Manager
	st  *store.Store
	log *slog.Logger
	// Domain is the E2B_DOMAIN of host-based routing ("" for none).
	Domain string
	// MaxUpload caps one uploaded file (0: no cap beyond the sandbox's disk).
	MaxUpload int64

	key     []byte
	envd    http.Handler
	proxyTr *http.Transport

	mu   sync.Mutex
	tags map[string]map[string]uint32 // sandbox -> process tag -> pid
	ptys map[string]*terminal         // sandbox/process -> open terminal
}

// New makes the E2B server. Its token key is <dataDir>/e2b.key, made on
// first use.
func New(m *manager.Manager, st *store.Store, log *slog.Logger, dataDir string) (*Server, error) {
	key, err := loadKey(filepath.Join(dataDir, "e2b.key"))
	if err != nil {
		return nil, fmt.Errorf("e2b: token key: %w", err)
	}
	s := &Server{m: m, st: st, log: log, key: key, tags: map[string]map[string]uint32{}, ptys: map[string]*terminal{}}
	s.envd = s.envdHandler()
	s.proxyTr = s.previewTransport()
	return s, nil
}

// loadKey reads the token key, or makes it (32 random bytes, mode 0600).
func loadKey(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err == nil {
		if len(b) < 32 {
			return nil, fmt.Errorf("%s: %d bytes, want 32 (remove it to make a new one; every E2B access token changes)", path, len(b))
		}
		return b, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	b = make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		if errors.Is(err, os.ErrExist) { // another writer won
			return loadKey(path)
		}
		return nil, err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		os.Remove(path)
		return nil, err
	}
	if err := f.Close(); err != nil {
		os.Remove(path)
		return nil, err
	}
	return b, nil
}

// Token is the envd access token of a sandbox.
func (s *Server) Token(id string) string {
	h := hmac.New(sha256.New, s.key)
	h.Write([]byte("e2b-envd\x00" + id))
	return hex.EncodeToString(h.Sum(nil))
}

func (s *Server) tokenOK(id, tok string) bool {
	if tok == "" {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(tok), []byte(s.Token(id))) == 1
}

// apiKey returns the API key the request carries (X-API-Key, or
// Authorization: Bearer), "" for none.
func apiKey(r *http.Request) string {
	if k := r.Header.Get("X-API-Key"); k != "" {
		return k
	}
	if k, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		return k
	}
	return ""
}

// auth returns the valid API key whose text is key, or nil.
func (s *Server) auth(ctx context.Context, key string) *store.Key {
	if key == "" {
		return nil
	}
	k, err := s.st.Authenticate(ctx, key)
	if err != nil {
		return nil
	}
	return k
}

func (s *Server) keyOK(ctx context.Context, key string) bool { return s.auth(ctx, key) != nil }

// keyFor says whether key is valid for sandbox id: an admin key, or a key
// of the tenant that owns it.
func (s *Server) keyFor(ctx context.Context, key, id string) bool {
	k := s.auth(ctx, key)
	return k != nil && s.m.CheckTenant(manager.WithTenant(ctx, k.Tenant), id) == nil
}

// Handler serves E2B's API in front of next (airlock's own API): requests
// that are E2B's go here, all others to next.
func (s *Server) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if id, port, ok := s.hostRoute(r.Host); ok {
			s.serveSandbox(w, r, id, port)
			return
		}
		if id := r.Header.Get("E2b-Sandbox-Id"); id != "" {
			ps := r.Header.Get("E2b-Sandbox-Port")
			port, err := strconv.Atoi(ps)
			if err != nil || port < 1 || port > 65535 {
				writeErr(w, http.StatusBadRequest, fmt.Sprintf("E2b-Sandbox-Port %s: want a port number", errdefs.Quote(ps)))
				return
			}
			s.serveSandbox(w, r, id, port)
			return
		}
		if isControlPath(r.URL.Path) {
			s.serveControl(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// hostRoute parses a Host of the form PORT-ID.DOMAIN.
func (s *Server) hostRoute(host string) (id string, port int, ok bool) {
	if s.Domain == "" {
		return "", 0, false
	}
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	label, found := strings.CutSuffix(host, "."+strings.ToLower(s.Domain))
	if !found || strings.Contains(label, ".") {
		return "", 0, false
	}
	ps, id, found := strings.Cut(label, "-")
	if !found || id == "" {
		return "", 0, false
	}
	port, err := strconv.Atoi(ps)
	if err != nil || port < 1 || port > 65535 {
		return "", 0, false
	}
	return id, port, true
}

// serveSandbox serves a request addressed to a sandbox's port: envd or a
// preview. It needs the sandbox's token or an API key.
func (s *Server) serveSandbox(w http.ResponseWriter, r *http.Request, id string, port int) {
	start := time.Now()
	rec := &statusWriter{ResponseWriter: w}
	defer func() {
		if p := recover(); p != nil {
			s.log.Error("panic in E2B handler", "panic", p, "stack", string(debug.Stack()))
			if rec.status == 0 {
				writeErr(rec, http.StatusInternalServerError, "internal error")
			}
		}
		level := slog.LevelDebug
		if port != EnvdPort {
			level = slog.LevelInfo // previews are audited
		}
		if rec.status >= 400 {
			level = slog.LevelInfo
		}
		s.log.Log(r.Context(), level, "e2b sandbox request", "sandbox", id, "port", port, "method", r.Method, "path", r.URL.Path,
			"remote", r.RemoteAddr, "status", rec.status, "ms", float64(time.Since(start).Microseconds())/1000)
	}()
	if !s.ready(rec, r) {
		return
	}
	tok := r.Header.Get("X-Access-Token")
	if tok == "" {
		tok = r.Header.Get("E2b-Traffic-Access-Token")
	}
	if !s.tokenOK(id, tok) && !s.keyFor(r.Context(), apiKey(r), id) {
		if tok == "" && apiKey(r) == "" {
			writeErr(rec, http.StatusUnauthorized, "an access token is required: send X-Access-Token (the sandbox's envdAccessToken) or X-API-Key")
		} else {
			writeErr(rec, http.StatusUnauthorized, "invalid access token or API key for sandbox "+errdefs.Quote(id))
		}
		return
	}
	// As E2B's edge does, a sandbox that is gone (or was never there), or
	// paused, answers 502 on every port: the SDKs read it as "not running"
	// (isRunning() is false; connect() resumes it).
	if sb, err := s.m.Get(r.Context(), id); err != nil || sb.State == api.StateStopped || sb.State == api.StateFailed {
		writeErr(rec, http.StatusBadGateway, "sandbox "+errdefs.Quote(id)+" is not running")
		return
	} else if sb.State == api.StatePaused {
		writeErr(rec, http.StatusBadGateway, "sandbox "+errdefs.Quote(id)+" is paused: Sandbox.connect resumes it")
		return
	}
	if port == EnvdPort {
		s.envd.ServeHTTP(rec, r.WithContext(context.WithValue(r.Context(), sandboxKey{}, id)))
		return
	}
	s.preview(rec, r, id, port)
}

// ready waits until the manager has re-adopted the sandboxes of a previous
// daemon.
func (s *Server) ready(w http.ResponseWriter, r *http.Request) bool {
	select {
	case <-s.m.Ready():
		return true
	case <-r.Context().Done():
		writeErr(w, http.StatusServiceUnavailable, "starting: re-adopting sandboxes")
		return false
	}
}

type sandboxKey struct{}

func sandboxOf(ctx context.Context) string { id, _ := ctx.Value(sandboxKey{}).(string); return id }

// errorBody is E2B's error document.
type errorBody struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

func writeErr(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, errorBody{Code: status, Message: msg})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// status maps an airlock error to an HTTP status.
func status(err error) int {
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe), errors.Is(err, errdefs.ErrTooLarge):
		return http.StatusRequestEntityTooLarge
	case errors.Is(err, errdefs.ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, errdefs.ErrInvalid):
		return http.StatusBadRequest
	case errors.Is(err, errdefs.ErrExists), errors.Is(err, errdefs.ErrConflict):
		return http.StatusConflict
	case errors.Is(err, errdefs.ErrExhausted):
		return http.StatusTooManyRequests
	case errors.Is(err, errdefs.ErrNotSupported):
		return http.StatusNotImplemented
	case errors.Is(err, errdefs.ErrPermission):
		return http.StatusForbidden
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return http.StatusGatewayTimeout
	}
	return http.StatusInternalServerError
}

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

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Flush lets streams (Connect server streams, previews) reach the client.
func (w *statusWriter) Flush() {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	http.NewResponseController(w.ResponseWriter).Flush()
}
