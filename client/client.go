// Package client is the Go SDK of airlock's HTTP API: it talks to the daemon
// (`airlock serve`) over its unix socket or over HTTP(S), and maps the wire
// types of package api and its errors to Go calls and errors.
//
// Make a client, then call its methods; every call takes a context first and
// none has a timeout of its own (output streams and PTY sessions last as
// long as the process does):
//
//	c, err := client.FromEnv() // AIRLOCK_HOST, AIRLOCK_API_KEY
//	if err != nil { ... }
//	sb, err := c.CreateSandbox(ctx, &api.CreateSandboxRequest{})
//	if err != nil { ... }
//	defer c.DeleteSandbox(context.WithoutCancel(ctx), sb.ID)
//	res, err := c.Exec(ctx, sb.ID, &api.ExecRequest{Argv: []string{"echo", "hi"}})
//
// Sandbox ids look like "sb-0123456789abcdef", process ids like "p3". Paths
// inside a sandbox are absolute or relative to /workspace. TarDir and
// UntarTo make and safely extract the tar streams of Upload and Download.
//
// Errors answered by the daemon are *Error values; compare them with the
// sentinels (errors.Is(err, client.ErrNotFound)). Anything else (the daemon
// is not reachable, the connection dropped) is the transport's error, as
// net/http returns it.
//
// The package depends on the standard library, package api and, for PTY
// sessions, github.com/coder/websocket; it must never import airlock's
// internal packages.
package client

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-dev/airlock/api"
)

// DefaultSocket is the daemon's socket when it runs as root.
const DefaultSocket = "/run/airlock/airlock.sock"

// unixHost is the HTTP host name sent over a unix socket.
const unixHost = "airlock"

// Client is a connection to an airlock daemon. It is safe for concurrent use.
type Client struct {
	host   string // as given (or defaulted), for messages
	socket string // path of the unix socket, "" for HTTP(S)
	base   string // "http://airlock" or "https://host:port/prefix": no trailing slash
	wsBase string // the same with ws:// or wss://
	apiKey string
	hc     *http.Client // API calls and streams
	wsc    *http.Client // WebSocket handshakes: HTTP/1.1 only
}

// DefaultHost returns the address New uses when given "": AIRLOCK_HOST if
// set, else DefaultSocket as root, else airlock.sock in XDG_RUNTIME_DIR.
func DefaultHost() (string, error) {
	if h := os.Getenv("AIRLOCK_HOST"); h != "" {
		return h, nil
	}
	if os.Geteuid() == 0 {
		return "unix://" + DefaultSocket, nil
	}
	dir := os.Getenv("XDG_RUNTIME_DIR")
	if dir == "" {
		return "", errors.New("airlock: no daemon address: set AIRLOCK_HOST (unix:///path/to.sock or http://host:port); XDG_RUNTIME_DIR, where a user's daemon puts its socket, is not set either")
	}
	return "unix://" + path.Join(dir, "airlock.sock"), nil
}

// hostSpec is a parsed daemon address.
type hostSpec struct {
	socket string // unix socket path, or ""
	base   string // base URL of HTTP requests, no trailing slash
	wsBase string // base URL of WebSocket requests
}

// parseHost parses a daemon address: unix:///absolute/path.sock,
// http://host[:port][/prefix] or https://host[:port][/prefix].
func parseHost(host string) (hostSpec, error) {
	bad := func(why string) (hostSpec, error) {
		return hostSpec{}, fmt.Errorf("airlock: daemon address %q: %s (want unix:///path/to.sock, http://host:port or https://host:port)", host, why)
	}
	u, err := url.Parse(host)
	if err != nil {
		return bad("not a URL")
	}
	switch u.Scheme {
	case "unix", "http", "https":
	case "":
		return bad("no scheme")
	default:
		return bad("unknown scheme " + strconv.Quote(u.Scheme))
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
		return bad("no user, query or fragment allowed")
	}
	if u.Scheme == "unix" {
		if u.Host != "" {
			return bad("the socket path must be absolute (three slashes: unix:///path)")
		}
		if u.Path == "" || !path.IsAbs(u.Path) || strings.HasSuffix(u.Path, "/") {
			return bad("no socket path")
		}
		return hostSpec{socket: u.Path, base: "http://" + unixHost, wsBase: "ws://" + unixHost}, nil
	}
	if u.Host == "" || u.Hostname() == "" {
		return bad("no host name")
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n <= 0 || n > 65535 {
			return bad("bad port")
		}
	}
	prefix := strings.TrimRight(u.EscapedPath(), "/")
	ws := "ws"
	if u.Scheme == "https" {
		ws = "wss"
	}
	return hostSpec{base: u.Scheme + "://" + u.Host + prefix, wsBase: ws + "://" + u.Host + prefix}, nil
}

// New returns a client of the daemon at host: "unix:///path/to.sock",
// "http://host:port" or "https://host:port"; "" is DefaultHost. apiKey, when
// not empty, is sent as a bearer token (the daemon needs one over TCP;
// over its unix socket the socket's permissions authenticate).
func New(host, apiKey string) (*Client, error) {
	if host == "" {
		var err error
		if host, err = DefaultHost(); err != nil {
			return nil, err
		}
	}
	spec, err := parseHost(host)
	if err != nil {
		return nil, err
	}
	var tr *http.Transport
	if spec.socket != "" {
		sock := spec.socket
		tr = &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "unix", sock)
			},
			MaxIdleConns:          100,
			MaxIdleConnsPerHost:   100,
			IdleConnTimeout:       90 * time.Second,
			ExpectContinueTimeout: time.Second,
		}
	} else {
		tr = http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = 100
	}
	// A WebSocket upgrade needs HTTP/1.1.
	wstr := tr.Clone()
	wstr.ForceAttemptHTTP2 = false
	wstr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	return &Client{
		host:   host,
		socket: spec.socket,
		base:   spec.base,
		wsBase: spec.wsBase,
		apiKey: apiKey,
		hc:     &http.Client{Transport: tr},
		wsc:    &http.Client{Transport: wstr},
	}, nil
}

// FromEnv returns New(os.Getenv("AIRLOCK_HOST"), os.Getenv("AIRLOCK_API_KEY")).
func FromEnv() (*Client, error) {
	return New(os.Getenv("AIRLOCK_HOST"), os.Getenv("AIRLOCK_API_KEY"))
}

// Host returns the daemon's address, as given to New or defaulted.
func (c *Client) Host() string { return c.host }

// Socket returns the path of the daemon's unix socket, or "" when the client
// talks HTTP(S) over TCP.
func (c *Client) Socket() string { return c.socket }

// Health returns nil when the daemon answers (GET /healthz).
func (c *Client) Health(ctx context.Context) error {
	return c.call(ctx, http.MethodGet, "/healthz", nil, nil, nil)
}

// Ready returns nil once the daemon has loaded its state and re-adopted its
// sandboxes (GET /readyz); an error matching ErrUnavailable before that and
// while it drains.
func (c *Client) Ready(ctx context.Context) error {
	return c.call(ctx, http.MethodGet, "/readyz", nil, nil, nil)
}

// Errors matched by *Error values through errors.Is, one per kind of
// failure the daemon reports.
var (
	ErrNotFound     = errors.New("airlock: not found")                             // not_found
	ErrInvalid      = errors.New("airlock: invalid argument")                      // invalid_argument
	ErrConflict     = errors.New("airlock: failed precondition or already exists") // failed_precondition, already_exists
	ErrUnauthorized = errors.New("airlock: unauthenticated")                       // unauthenticated
	ErrForbidden    = errors.New("airlock: permission denied")                     // permission_denied
	ErrTooLarge     = errors.New("airlock: too large")                             // too_large
	ErrExhausted    = errors.New("airlock: resource exhausted")                    // resource_exhausted
	ErrUnavailable  = errors.New("airlock: unavailable")                           // unavailable
)

// Errors of starting a command (Exec, StartProcess, PTY) that does not
// exist in the sandbox (what a shell reports as 127) or exists but cannot be
// executed (126). No process was started. They also match ErrInvalid.
var (
	ErrCommandNotFound = errors.New("airlock: command not found") // command_not_found
	ErrNotExecutable   = errors.New("airlock: not executable")    // not_executable
)

// codeSentinel maps each error code to the sentinel it matches.
var codeSentinel = map[string]error{
	api.CodeNotFound:     ErrNotFound,
	api.CodeInvalid:      ErrInvalid,
	api.CodeConflict:     ErrConflict,
	api.CodeExists:       ErrConflict,
	api.CodeUnauthorized: ErrUnauthorized,
	api.CodeForbidden:    ErrForbidden,
	api.CodeTooLarge:     ErrTooLarge,
	api.CodeExhausted:    ErrExhausted,
	api.CodeUnavailable:  ErrUnavailable,
}

// statusCode is the code of an error answer whose body is not an api.Error
// (a proxy's page, net/http's own 404 or 405).
var statusCode = map[int]string{
	http.StatusBadRequest:            api.CodeInvalid,
	http.StatusUnauthorized:          api.CodeUnauthorized,
	http.StatusForbidden:             api.CodeForbidden,
	http.StatusNotFound:              api.CodeNotFound,
	http.StatusMethodNotAllowed:      api.CodeMethodInvalid,
	http.StatusConflict:              api.CodeConflict,
	http.StatusRequestEntityTooLarge: api.CodeTooLarge,
	http.StatusTooManyRequests:       api.CodeExhausted,
	http.StatusInternalServerError:   api.CodeInternal,
	http.StatusNotImplemented:        api.CodeNotSupported,
	http.StatusServiceUnavailable:    api.CodeUnavailable,
	http.StatusGatewayTimeout:        api.CodeTimeout,
}

// Error is an error answered by the daemon.
type Error struct {
	// Status is the HTTP status of the answer (0 for an error reported in
	// the middle of a stream).
	Status int
	// Code is one of the api.Code* values; Message says what failed.
	Code, Message string
	// RetryAfter is how long the daemon asked to wait before trying again
	// (its Retry-After header), or 0.
	RetryAfter time.Duration
}

// Error returns "airlock: <message> (<code>, HTTP <status>)".
func (e *Error) Error() string {
	if e.Status == 0 {
		return fmt.Sprintf("airlock: %s (%s)", e.Message, e.Code)
	}
	return fmt.Sprintf("airlock: %s (%s, HTTP %d)", e.Message, e.Code, e.Status)
}

// Is reports whether target is the sentinel of e's code, so that
// errors.Is(err, ErrNotFound) works.
func (e *Error) Is(target error) bool {
	switch e.Code {
	case api.CodeCommandNotFound:
		return target == ErrCommandNotFound || target == ErrInvalid
	case api.CodeNotExecutable:
		return target == ErrNotExecutable || target == ErrInvalid
	}
	s, ok := codeSentinel[e.Code]
	return ok && s == target
}

// maxErrorBody bounds how much of an error answer is read.
const maxErrorBody = 64 << 10

// decodeError turns an error answer into an *Error, consuming its body.
func decodeError(resp *http.Response) *Error {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	return errorFromBody(resp.StatusCode, resp.Header.Get("Retry-After"), body, time.Now())
}

// errorFromBody builds the *Error of an answer with the given status,
// Retry-After header and body; now is the time Retry-After dates count from.
func errorFromBody(status int, retryAfter string, body []byte, now time.Time) *Error {
	e := &Error{Status: status, RetryAfter: parseRetryAfter(retryAfter, now)}
	var ae api.Error
	if err := json.Unmarshal(body, &ae); err == nil && (ae.Err.Code != "" || ae.Err.Message != "") {
		e.Code, e.Message = ae.Err.Code, ae.Err.Message
	}
	if e.Code == "" {
		e.Code = statusCode[status]
		if e.Code == "" {
			e.Code = "unknown"
			if status >= 500 {
				e.Code = api.CodeInternal
			}
		}
	}
	if e.Message == "" {
		e.Message = http.StatusText(status)
		if e.Message == "" {
			e.Message = "HTTP status " + strconv.Itoa(status)
		}
	}
	return e
}

// parseRetryAfter parses a Retry-After header: seconds, or an HTTP date.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n < 0 {
			return 0
		}
		return time.Duration(n) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// seg escapes one path segment, refusing an empty one (which would name a
// different route).
func seg(what, v string) (string, error) {
	if v == "" {
		return "", fmt.Errorf("airlock: empty %s: %w", what, ErrInvalid)
	}
	return url.PathEscape(v), nil
}

// sandboxPath returns /v1/sandboxes/{id} followed by rest.
func sandboxPath(id, rest string) (string, error) {
	s, err := seg("sandbox id", id)
	if err != nil {
		return "", err
	}
	return api.Version + "/sandboxes/" + s + rest, nil
}

// processPath returns /v1/sandboxes/{id}/processes/{pid} followed by rest.
func processPath(id, pid, rest string) (string, error) {
	p, err := seg("process id", pid)
	if err != nil {
		return "", err
	}
	return sandboxPath(id, "/processes/"+p+rest)
}

// request makes a request of the API; p is an escaped path, q may be nil.
func (c *Client) request(ctx context.Context, method, p string, q url.Values, body io.Reader) (*http.Request, error) {
	u := c.base + p
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, err
	}
	if c.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.apiKey)
	}
	req.Header.Set("User-Agent", "airlock-go-client")
	return req, nil
}

// send sends req and returns the answer when its status is 2xx; any other
// answer becomes an *Error.
func (c *Client) send(req *http.Request) (*http.Response, error) {
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		defer resp.Body.Close()
		return nil, decodeError(resp)
	}
	return resp, nil
}

// call sends in (nil for no body) as JSON and decodes the answer into out
// (nil to discard it).
func (c *Client) call(ctx context.Context, method, p string, q url.Values, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := c.request(ctx, method, p, q, body)
	if err != nil {
		return err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	return c.finish(req, out)
}

// finish sends req and decodes its JSON answer into out (nil: discard).
func (c *Client) finish(req *http.Request, out any) error {
	resp, err := c.send(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorBody))
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("airlock: %s %s: bad answer: %w", req.Method, req.URL.Path, err)
	}
	return nil
}

// streamBody wraps r for use as a request body so that net/http streams it
// (chunked) and never closes the caller's reader.
func streamBody(r io.Reader) io.Reader {
	switch r.(type) {
	case nil:
		return nil
	case *bytes.Reader, *bytes.Buffer, *strings.Reader:
		return r // net/http knows their length and never closes them
	}
	return struct{ io.Reader }{r}
}
