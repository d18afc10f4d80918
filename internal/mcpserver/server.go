// Package mcpserver is `airlock mcp`: a Model Context Protocol server
// whose tools let a model create sandboxes, run commands in them, move
// files and read their network audit. It talks to airlock serve through
// the Go SDK, either a daemon that already runs or, standalone, a private
// daemon it runs in its own process (daemon.Config.Ephemeral), so that the
// tools behave the same both ways.
//
// The operator decides what the model may reach: which named policies
// (--policy), how many sandboxes (--max-sandboxes), how long a command may
// run (--max-exec-timeout). The tools touch only the sandboxes this server
// created, and it destroys them when it stops.
package mcpserver

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/client"
	"github.com/airlock-dev/airlock/internal/daemon"
)

// Defaults of the operator's flags.
const (
	DefaultMaxSandboxes   = 8
	DefaultMaxExecTimeout = 10 * time.Minute
	// DefaultExecTimeout is run_command's timeout when the model gives none.
	DefaultExecTimeout = 60 * time.Second
	// ProgressInterval is how often run_command reports progress.
	ProgressInterval = 5 * time.Second
	// MinTokenLen is the shortest bearer token --listen accepts.
	MinTokenLen = 16
	// TokenEnv holds the bearer token of the HTTP transport.
	TokenEnv = "AIRLOCK_MCP_TOKEN"
	// ownerLabel marks the sandboxes of one server process.
	ownerLabel = "airlock-mcp"
)

// Options are the operator's choices.
type Options struct {
	// Host is the daemon's address (unix:///path, http(s)://host:port);
	// "" is $AIRLOCK_HOST, else the default socket if a daemon answers
	// there, else standalone. APIKey goes with a TCP host.
	Host   string
	APIKey string
	// Standalone runs a private daemon in this process, configured by
	// ConfigFile (YAML, `airlock serve`'s format) when it is set; a
	// ConfigFile implies Standalone.
	Standalone bool
	ConfigFile string
	// Policies are the named policies the model may choose; the first is
	// used when it names none. Empty: only the daemon's "default".
	Policies       []string
	MaxSandboxes   int
	MaxExecTimeout time.Duration
	// Listen serves streamable HTTP at /mcp on this address instead of
	// stdio; every request needs "Authorization: Bearer <Token>".
	Listen string
	Token  string
	// Version is reported to clients.
	Version string
	// Log gets the server's (and a private daemon's) log; it must not be
	// the stdio transport's output.
	Log *slog.Logger
	// Stdin and Stdout are the stdio transport (default os.Stdin and
	// os.Stdout).
	Stdin  io.ReadCloser
	Stdout io.WriteCloser
}

// check validates the options and fills in defaults.
func (o *Options) check() error {
	if o.MaxSandboxes == 0 {
		o.MaxSandboxes = DefaultMaxSandboxes
	}
	if o.MaxSandboxes < 0 {
		return errors.New("--max-sandboxes must be at least 1")
	}
	if o.MaxExecTimeout == 0 {
		o.MaxExecTimeout = DefaultMaxExecTimeout
	}
	if o.MaxExecTimeout < time.Second {
		return fmt.Errorf("--max-exec-timeout %v: want at least 1s", o.MaxExecTimeout)
	}
	seen := map[string]bool{}
	for _, p := range o.Policies {
		if p == "" || strings.ContainsAny(p, " \t\n/") {
			return fmt.Errorf("--policy %q: want the name of a policy of the daemon's configuration", clip(p))
		}
		if seen[p] {
			return fmt.Errorf("--policy %s given twice", p)
		}
		seen[p] = true
	}
	if len(o.Policies) == 0 {
		o.Policies = []string{"default"}
	}
	if o.ConfigFile != "" {
		o.Standalone = true
	}
	if o.Standalone && o.Host != "" {
		return errors.New("--host names a daemon to use; --standalone and --config run a private one: give one or the other")
	}
	if o.Listen != "" {
		if o.Token == "" {
			return fmt.Errorf("--listen needs a bearer token in %s (at least %d characters): every HTTP request must carry it", TokenEnv, MinTokenLen)
		}
		if len(o.Token) < MinTokenLen {
			return fmt.Errorf("%s is %d characters long: use at least %d (e.g. openssl rand -hex 16)", TokenEnv, len(o.Token), MinTokenLen)
		}
		if strings.TrimSpace(o.Token) != o.Token || strings.ContainsAny(o.Token, " \t\r\n") {
			// HTTP trims a header's spaces: such a token could never match.
			return fmt.Errorf("%s contains spaces: use a token without (e.g. openssl rand -hex 16)", TokenEnv)
		}
	}
	if o.Version == "" {
		o.Version = "dev"
	}
	if o.Log == nil {
		o.Log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	if o.Stdin == nil {
		o.Stdin = os.Stdin
	}
	if o.Stdout == nil {
		o.Stdout = nopWriteCloser{os.Stdout}
	}
	return nil
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

// Run serves MCP until the client goes (stdin closes), ctx is cancelled,
// or SIGTERM/SIGINT arrives; then it destroys the sandboxes it created
// and, standalone, stops its private daemon.
func Run(ctx context.Context, o Options) error {
	if err := o.check(); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	c, stopDaemon, err := connect(ctx, &o)
	if err != nil {
		return err
	}
	defer stopDaemon()
	s := newServer(c, o)
	defer s.destroyAll()

	if o.Listen != "" {
		return s.serveHTTP(ctx)
	}
	err = s.mcp.Run(ctx, &mcp.IOTransport{Reader: o.Stdin, Writer: o.Stdout, MaxLineLength: maxFrame})
	if err != nil && (ctx.Err() != nil || errors.Is(err, io.EOF) || errors.Is(err, mcp.ErrConnectionClosed)) {
		err = nil // the client went, or we were told to stop
	}
	return err
}

// connect returns a client of the daemon the tools use, and what stops it
// (nothing for a daemon that was already running).
func connect(ctx context.Context, o *Options) (*client.Client, func(), error) {
	if !o.Standalone {
		host := o.Host
		if host == "" {
			host = os.Getenv("AIRLOCK_HOST")
		}
		c, err := client.New(host, o.APIKey)
		if err != nil && host != "" {
			return nil, nil, errors.New(strings.TrimPrefix(err.Error(), "airlock: "))
		}
		if err == nil {
			rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err = c.Ready(rctx)
			if err == nil {
				// Readiness needs no key: a call that does checks it now
				// rather than at the model's first tool call.
				_, err = c.ListSandboxes(rctx, client.ListOptions{Limit: 1})
			}
			cancel()
			if err == nil {
				o.Log.Info("using the airlock daemon", "host", c.Host())
				return c, func() {}, nil
			}
			if host != "" {
				return nil, nil, fmt.Errorf("cannot use the airlock daemon at %s: %s (drop --host and AIRLOCK_HOST to run a private one)", c.Host(), strings.TrimPrefix(err.Error(), "airlock: "))
			}
		}
		o.Log.Info("no airlock daemon answers on the default socket; running a private one", "err", err)
	}
	return standalone(o)
}

// standalone runs a private daemon in this process.
func standalone(o *Options) (*client.Client, func(), error) {
	cfg, err := daemon.LoadFile(o.ConfigFile)
	if err != nil {
		return nil, nil, err
	}
	if os.Geteuid() != 0 && cfg.CgroupParent == "" && !cfg.Insecure.NoCgroups {
		return nil, nil, errors.New("standalone airlock mcp without root needs a cgroup for its sandboxes' limits: give --config FILE with cgroup_parent: (a cgroup v2 directory delegated to you), or insecure: {no_cgroups: true} to run them without memory, CPU and process limits; or run airlock serve as root and point airlock mcp at it with --host")
	}
	for _, p := range o.Policies {
		if p != "default" && cfg.Policies[p] == "" {
			return nil, nil, fmt.Errorf("--policy %s: no such policy in the configuration (policies: in --config FILE)", p)
		}
	}
	if cfg.LogLevel == "" {
		cfg.LogLevel = "warn"
	}
	log, err := daemon.Logger(os.Stderr, cfg.LogFormat, cfg.LogLevel)
	if err != nil {
		return nil, nil, fmt.Errorf("config: %v", err)
	}
	cfg.Ephemeral = true
	dctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- daemon.Run(dctx, cfg, log) }()
	stop := func() {
		cancel()
		<-done
	}
	c, err := client.New("unix://"+daemon.EphemeralSocket(), "")
	if err != nil {
		stop()
		return nil, nil, err
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		rctx, rcancel := context.WithTimeout(dctx, time.Second)
		err := c.Ready(rctx)
		rcancel()
		if err == nil {
			o.Log.Info("private airlock daemon ready", "socket", daemon.EphemeralSocket())
			return c, stop, nil
		}
		select {
		case err := <-done:
			cancel()
			if err == nil {
				err = errors.New("stopped at start")
			}
			return nil, nil, fmt.Errorf("private airlock daemon: %v", err)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			stop()
			return nil, nil, fmt.Errorf("private airlock daemon not ready after 60s: %v", err)
		}
	}
}

// server holds the MCP server and the sandboxes it created.
type server struct {
	c        *client.Client
	o        Options
	mcp      *mcp.Server
	instance string

	mu       sync.Mutex
	owned    map[string]bool
	creating int
}

func newServer(c *client.Client, o Options) *server {
	b := make([]byte, 8)
	rand.Read(b)
	s := &server{c: c, o: o, instance: hex.EncodeToString(b), owned: map[string]bool{}}
	s.mcp = mcp.NewServer(&mcp.Implementation{Name: "airlock", Title: "airlock sandboxes", Version: o.Version},
		&mcp.ServerOptions{Instructions: instructions, Logger: o.Log, Capabilities: &mcp.ServerCapabilities{}})
	s.mcp.AddReceivingMiddleware(recoverPanics(o.Log))
	s.addTools()
	return s
}

const instructions = `airlock runs commands in isolated Linux sandboxes. Call create_sandbox first; each sandbox has an empty, writable /workspace, the host's programs read-only, and a network policy the operator chose. Run commands with run_command (waits, output cut to its first and last 16 KiB per stream) or start_command + read_output for long-running or interactive ones. Move files with read_file, write_file and list_files (under /workspace only). network_audit shows which connections the sandbox made and which were denied. Destroy sandboxes you no longer need: there is a limit on how many you may hold.`

// recoverPanics turns a panic in a handler into an error answer (a tool
// error for a tool call) instead of a dead server.
func recoverPanics(log *slog.Logger) mcp.Middleware {
	return func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (res mcp.Result, err error) {
			defer func() {
				r := recover()
				if r == nil {
					return
				}
				log.Error("panic in an MCP handler", "method", method, "panic", r, "stack", string(debug.Stack()))
				msg := fmt.Sprintf("internal error in airlock mcp while handling %s: %v", method, r)
				if method == "tools/call" {
					res, err = &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: msg}}}, nil
					return
				}
				res, err = nil, errors.New(msg)
			}()
			return next(ctx, method, req)
		}
	}
}

// serveHTTP serves streamable HTTP at /mcp until ctx is done.
func (s *server) serveHTTP(ctx context.Context) error {
	l, err := net.Listen("tcp", s.o.Listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", s.o.Listen, err)
	}
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s.mcp },
		&mcp.StreamableHTTPOptions{Logger: s.o.Log, SessionTimeout: time.Hour, MaxRequestBodyBytes: maxFrame})
	mux := http.NewServeMux()
	mux.Handle("/mcp", bearer(s.o.Token, h))
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second,
		ErrorLog: slog.NewLogLogger(s.o.Log.Handler(), slog.LevelDebug)}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(l) }()
	s.o.Log.Info("airlock mcp serves streamable HTTP", "url", "http://"+l.Addr().String()+"/mcp")
	select {
	case <-ctx.Done():
	case err = <-errc:
		return err
	}
	// Sessions end first: their open event streams would hold Shutdown.
	for ss := range s.mcp.Sessions() {
		ss.Close()
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if hs.Shutdown(sctx) != nil {
		hs.Close()
	}
	return nil
}

// bearer refuses requests without the token.
func bearer(token string, next http.Handler) http.Handler {
	want := []byte(token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := r.Header.Get("Authorization")
		var got []byte
		// The scheme is case-insensitive (RFC 9110 11.1).
		if scheme, cred, ok := strings.Cut(h, " "); ok && strings.EqualFold(scheme, "Bearer") {
			got = []byte(strings.TrimSpace(cred))
		}
		if subtle.ConstantTimeCompare(got, want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="airlock mcp"`)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			msg := "missing bearer token: send Authorization: Bearer <" + TokenEnv + ">"
			if h != "" {
				msg = "wrong bearer token"
			}
			fmt.Fprintf(w, `{"error":%q}`+"\n", msg)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// own checks that the sandbox is one of this server's.
func (s *server) own(id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if id == "" {
		return errors.New("sandbox_id is empty: give the id create_sandbox returned")
	}
	if !s.owned[id] {
		return fmt.Errorf("unknown sandbox_id %q: not a sandbox of this server (list_sandboxes shows its sandboxes)", clip(id))
	}
	return nil
}

// ownedIDs returns the ids of this server's sandboxes, sorted.
func (s *server) ownedIDs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := make([]string, 0, len(s.owned))
	for id := range s.owned {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// reserve takes a place for a new sandbox, or says why there is none.
// Sandboxes that ended (TTL, failure) are forgotten and deleted first.
func (s *server) reserve(ctx context.Context) error {
	s.mu.Lock()
	full := len(s.owned)+s.creating >= s.o.MaxSandboxes
	s.mu.Unlock()
	if full {
		for _, id := range s.ownedIDs() {
			sb, err := s.c.GetSandbox(ctx, id)
			if errors.Is(err, client.ErrNotFound) || (err == nil && (sb.State == api.StateStopped || sb.State == api.StateFailed)) {
				s.c.DeleteSandbox(ctx, id)
				s.forget(id)
			}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := len(s.owned) + s.creating; n >= s.o.MaxSandboxes {
		return fmt.Errorf("this server holds %d sandboxes, the most the operator allows (--max-sandboxes %d): destroy one with destroy_sandbox first", n, s.o.MaxSandboxes)
	}
	s.creating++
	return nil
}

func (s *server) created(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.creating--
	if id != "" {
		s.owned[id] = true
	}
}

func (s *server) forget(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.owned, id)
}

// destroyAll destroys every sandbox this server created.
func (s *server) destroyAll() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	for _, id := range s.ownedIDs() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.c.DeleteSandbox(ctx, id); err != nil && !errors.Is(err, client.ErrNotFound) {
				s.o.Log.Error("destroy sandbox at exit", "id", id, "err", err)
				return
			}
			s.forget(id)
		}()
	}
	wg.Wait()
}
