package gateway

import (
	"context"
	"crypto/x509"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Defaults and fixed bounds.
const (
	DefaultMaxConns      = 256
	DefaultIdleTimeout   = 5 * time.Minute
	DefaultHeaderTimeout = 10 * time.Second

	dialTimeout = 10 * time.Second // per resolution and per address dialed
	// firstBytesWait is how long a CONNECT to a port other than 443 waits
	// for the client to speak before dialing (so that a ClientHello can be
	// checked before anything reaches upstream). Server-first protocols
	// then proceed, and the client's first bytes are still checked before
	// they are forwarded.
	firstBytesWait = 500 * time.Millisecond
	// refuseTimeout bounds reading the request of a connection that is
	// refused anyway (over a cap), and maxRefusing bounds how many such
	// connections are answered at once; beyond, they are closed unread.
	refuseTimeout = 2 * time.Second
	maxRefusing   = 32
	// lingerTimeout and lingerBytes bound waiting for the client to close
	// after the gateway's last answer.
	lingerTimeout = 500 * time.Millisecond
	lingerBytes   = 4 << 20
)

// Rules the gateway itself applies (audited, and shown to the sandbox).
const (
	RuleConnLimit = "connection limit"
	RuleByteLimit = "byte limit"
)

// Record is the audit record of one CONNECT or SOCKS connection, or of one
// plain-HTTP request. It never holds request headers, bodies, query
// strings or URL user info.
type Record struct {
	Time    time.Time // when the connection or request started
	Sandbox string
	Proto   string // "http" | "connect" | "socks"
	Method  string // HTTP method; "CONNECT", "BIND" or "UDP ASSOCIATE" for SOCKS
	Host    string // as normalized for the policy
	Port    int
	Path    string // plain HTTP only: the escaped path, without the query
	// Addr is the ip:port dialed; for a denial by address, the first
	// address the policy refused.
	Addr    string
	Allowed bool
	Rule    string // the rule or reason that decided
	// Credential names the credentials the gateway added to an
	// intercepted request (never their values).
	Credential string
	// BytesUp and BytesDown count payload relayed: tunnel bytes after the
	// handshake, or request and response bodies for plain HTTP.
	BytesUp, BytesDown int64
	Duration           time.Duration
	Error              string
}

// Config configures a Gateway. Only Policy is needed to let anything out.
type Config struct {
	Sandbox  string
	Policy   Policy   // nil denies everything
	Resolver Resolver // nil: &StaticResolver{Fallback: net.DefaultResolver}
	// Dial connects to an ip:port (never a name). Default: a net.Dialer.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// MaxConns caps concurrent client connections (default 256); beyond
	// it connections are refused with a 503 or SOCKS reply 0x02.
	MaxConns int
	// MaxBytes caps bytes both ways over the gateway's life (payload, and
	// the heads of plain-HTTP requests, which go upstream too); 0 is no
	// cap. Reaching it closes every connection and refuses new ones.
	MaxBytes int64
	// IdleTimeout closes a tunnel or request with no traffic either way
	// for this long (default 5 min).
	IdleTimeout time.Duration
	// HeaderTimeout bounds reading a request's head, the SOCKS handshake
	// and a TLS ClientHello (default 10 s).
	HeaderTimeout time.Duration
	// Audit gets exactly one Record per CONNECT or SOCKS connection and
	// per plain-HTTP request, after it ends. It must not block for long.
	Audit func(Record)
	Log   *slog.Logger // nil discards
	// CA signs the certificates shown to the sandbox for the hosts the
	// policy intercepts (see Interceptor). Without one, a connection to an
	// intercepted host is refused: its rules could not be enforced.
	CA *CA
	// UpstreamRoots verifies the servers of intercepted hosts; nil means
	// the system's roots.
	UpstreamRoots *x509.CertPool
}

// Gateway is one sandbox's egress proxy. It is safe for concurrent use.
type Gateway struct {
	cfg    Config
	log    *slog.Logger
	ctx    context.Context
	cancel context.CancelFunc
	up     *upPool // plain HTTP upstream, connections kept by checked ip:port

	policy atomic.Pointer[policyState]
	setMu  sync.Mutex // serializes SetPolicy

	mu        sync.Mutex
	closed    bool
	listeners map[net.Listener]struct{}
	conns     map[*conn]struct{}
	flows     map[*flow]struct{}
	active    int           // conns counted against MaxConns
	refusing  chan struct{} // semaphore for refusals answered
	wg        sync.WaitGroup

	used     atomic.Int64
	tripOnce sync.Once
	tripped  atomic.Bool
}

type policyState struct {
	p   Policy
	gen uint64
}

// New returns a Gateway. It serves nothing until ServeHTTP or ServeSOCKS.
func New(cfg Config) *Gateway {
	if cfg.Resolver == nil {
		cfg.Resolver = &StaticResolver{Fallback: net.DefaultResolver}
	}
	if cfg.Dial == nil {
		d := &net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}
		cfg.Dial = d.DialContext
	}
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = DefaultMaxConns
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	if cfg.HeaderTimeout <= 0 {
		cfg.HeaderTimeout = DefaultHeaderTimeout
	}
	g := &Gateway{
		cfg:       cfg,
		log:       cfg.Log,
		listeners: make(map[net.Listener]struct{}),
		conns:     make(map[*conn]struct{}),
		flows:     make(map[*flow]struct{}),
		refusing:  make(chan struct{}, maxRefusing),
	}
	if g.log == nil {
		g.log = slog.New(slog.DiscardHandler)
	}
	g.log = g.log.With("sandbox", cfg.Sandbox)
	g.ctx, g.cancel = context.WithCancel(context.Background())
	g.policy.Store(&policyState{p: orDenyAll(cfg.Policy), gen: 1})
	g.up = newUpPool(func(ctx context.Context, ap netip.AddrPort) (net.Conn, error) {
		return cfg.Dial(ctx, "tcp", ap.String())
	})
	return g
}

func orDenyAll(p Policy) Policy {
	if p == nil {
		return denyAll{}
	}
	return p
}

// SetPolicy installs p atomically (nil denies everything). Open tunnels and
// in-flight plain-HTTP requests whose host:port or dialed address p denies
// are closed at once, and so are tunnels relayed untouched to a host p
// inspects; the rest continue.
func (g *Gateway) SetPolicy(p Policy) {
	g.setMu.Lock()
	defer g.setMu.Unlock()
	p = orDenyAll(p)
	st := &policyState{p: p, gen: g.policy.Load().gen + 1}
	g.policy.Store(st)
	// A flow registered after this snapshot sees the new generation in
	// track and re-decides itself.
	g.mu.Lock()
	flows := make([]*flow, 0, len(g.flows))
	for f := range g.flows {
		flows = append(flows, f)
	}
	g.mu.Unlock()
	for _, f := range flows {
		if d := recheckFlow(p, f); !d.Allow {
			f.c.kill(endReason{rule: d.Rule, err: "closed: the new policy denies it"})
		}
	}
}

// ServeHTTP serves the HTTP proxy on l until Close (then it returns nil) or
// until l fails.
func (g *Gateway) ServeHTTP(l net.Listener) error { return g.serve(l, "http", g.serveHTTPConn) }

// ServeSOCKS serves the SOCKS5 proxy on l until Close (then it returns nil)
// or until l fails.
func (g *Gateway) ServeSOCKS(l net.Listener) error { return g.serve(l, "socks", g.serveSOCKSConn) }

// Close closes the listeners and every connection, and waits for the
// gateway's goroutines to end. Each open connection is still audited.
func (g *Gateway) Close() error {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		g.wg.Wait()
		return nil
	}
	g.closed = true
	for l := range g.listeners {
		l.Close()
	}
	conns := make([]*conn, 0, len(g.conns))
	for c := range g.conns {
		conns = append(conns, c)
	}
	g.mu.Unlock()
	g.cancel()
	for _, c := range conns {
		c.kill(endReason{err: "gateway closed"})
	}
	g.wg.Wait()
	g.up.close()
	return nil
}

func (g *Gateway) serve(l net.Listener, proto string, handle func(*conn)) error {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		l.Close()
		return nil
	}
	g.listeners[l] = struct{}{}
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		delete(g.listeners, l)
		g.mu.Unlock()
	}()
	var delay time.Duration
	for {
		nc, err := l.Accept()
		if err != nil {
			if g.isClosed() {
				return nil
			}
			if !temporary(err) {
				return err
			}
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			g.log.Warn("egress gateway: accept failed; retrying", "proto", proto, "err", err, "delay", delay)
			select {
			case <-time.After(delay):
			case <-g.ctx.Done():
				return nil
			}
			continue
		}
		delay = 0
		g.accept(nc, proto, handle)
	}
}

func temporary(err error) bool {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	for _, e := range []error{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM, syscall.ECONNABORTED, syscall.ECONNRESET} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

func (g *Gateway) isClosed() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.closed
}

// accept admits nc, or marks it to be refused (over MaxConns, or after the
// byte budget ran out), or, when too many refusals are under way, closes
// it unread.
func (g *Gateway) accept(nc net.Conn, proto string, handle func(*conn)) {
	c := &conn{Conn: nc, g: g}
	c.ctx, c.cancel = context.WithCancel(g.ctx)
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		c.cancel()
		nc.Close()
		return
	}
	switch {
	case g.tripped.Load():
		c.refuse = RuleByteLimit
	case g.active >= g.cfg.MaxConns:
		c.refuse = RuleConnLimit
	}
	if c.refuse == "" {
		g.active++
		c.counted = true
	} else {
		select {
		case g.refusing <- struct{}{}:
			c.refusing = true
		default:
			g.mu.Unlock()
			c.cancel()
			nc.Close()
			g.audit(Record{Time: time.Now(), Proto: proto, Rule: c.refuse, Error: "refused unread: too many refusals under way"})
			return
		}
	}
	g.conns[c] = struct{}{}
	g.wg.Add(1)
	g.mu.Unlock()
	go func() {
		defer g.wg.Done()
		defer g.release(c)
		defer func() {
			// A bug (in a Policy, say) costs one connection, not the
			// supervisor; the connection is closed, so this fails closed.
			if r := recover(); r != nil {
				c.kill(endReason{err: "internal error"})
				g.log.Error("egress gateway: panic serving a connection", "proto", proto, "panic", r, "stack", string(debug.Stack()))
			}
		}()
		handle(c)
	}()
}

func (g *Gateway) release(c *conn) {
	c.cancel()
	c.closeGracefully()
	g.mu.Lock()
	delete(g.conns, c)
	if c.counted {
		g.active--
	}
	g.mu.Unlock()
	if c.refusing {
		<-g.refusing
	}
}

// headerTimeout is the bound for reading c's request head or handshake.
func (g *Gateway) headerTimeout(c *conn) time.Duration {
	if c.refuse != "" {
		return min(refuseTimeout, g.cfg.HeaderTimeout)
	}
	return g.cfg.HeaderTimeout
}

// reserve takes n bytes from the byte budget; false means the budget ran
// out, every connection is being closed, and the bytes must not be sent.
func (g *Gateway) reserve(n int) bool {
	if g.cfg.MaxBytes <= 0 {
		return true
	}
	if g.used.Add(int64(n)) > g.cfg.MaxBytes {
		g.trip()
		return false
	}
	return true
}

// reserveUpTo takes as much of n bytes as the byte budget has left and
// returns how many it took; fewer than n means the budget ran out (the
// caller sends those, then trips).
func (g *Gateway) reserveUpTo(n int) int {
	if g.cfg.MaxBytes <= 0 {
		return n
	}
	for {
		used := g.used.Load()
		k := min(int64(n), g.cfg.MaxBytes-used)
		if k <= 0 {
			return 0
		}
		if g.used.CompareAndSwap(used, used+k) {
			return int(k)
		}
	}
}

func (g *Gateway) trip() {
	g.tripOnce.Do(func() {
		g.tripped.Store(true)
		g.log.Warn("egress gateway: byte budget exhausted; closing every connection", "max_bytes", g.cfg.MaxBytes)
		g.mu.Lock()
		conns := make([]*conn, 0, len(g.conns))
		for c := range g.conns {
			conns = append(conns, c)
		}
		g.mu.Unlock()
		for _, c := range conns {
			c.kill(endReason{rule: RuleByteLimit, err: "closed: the gateway's byte budget is exhausted"})
		}
	})
}

func (g *Gateway) audit(r Record) {
	r.Sandbox = g.cfg.Sandbox
	if g.log.Enabled(context.Background(), slog.LevelDebug) { // its arguments cost a dozen allocations
		g.log.Debug("egress", "proto", r.Proto, "method", r.Method, "host", r.Host, "port", r.Port,
			"addr", r.Addr, "allowed", r.Allowed, "rule", r.Rule, "up", r.BytesUp, "down", r.BytesDown,
			"duration", r.Duration, "err", r.Error)
	}
	if g.cfg.Audit != nil {
		g.cfg.Audit(r)
	}
}

// conn is one client connection from the sandbox.
type conn struct {
	net.Conn
	g        *Gateway
	ctx      context.Context // cancelled when the connection is killed or ends
	cancel   context.CancelFunc
	refuse   string // non-empty: answer every request with this refusal
	counted  bool   // counted against MaxConns
	refusing bool   // holds a refusal slot

	mu     sync.Mutex
	up     net.Conn // the current upstream of a tunnel
	reason *endReason
}

// endReason says why the gateway closed a connection.
type endReason struct {
	rule string // non-empty: the connection ends denied, by this rule
	err  string
}

// kill closes c and its upstream, once, remembering why.
func (c *conn) kill(r endReason) {
	c.mu.Lock()
	if c.reason == nil {
		c.reason = &r
	}
	up := c.up
	c.mu.Unlock()
	c.cancel()
	c.Conn.Close()
	if up != nil {
		up.Close()
	}
}

// closeGracefully closes c after letting the client read what was
// written: a close with unread input (a denied request's body, say) would
// reset the connection and could destroy the answer before it is read.
func (c *conn) closeGracefully() {
	cw, ok := c.Conn.(interface{ CloseWrite() error })
	if !ok || c.ended() != nil || cw.CloseWrite() != nil {
		c.Conn.Close()
		return
	}
	c.Conn.SetReadDeadline(time.Now().Add(lingerTimeout))
	io.CopyN(io.Discard, c.Conn, lingerBytes)
	c.Conn.Close()
}

// setUpstream attaches a tunnel's upstream; false (and up closed) when c
// was already killed.
func (c *conn) setUpstream(up net.Conn) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.reason != nil {
		up.Close()
		return false
	}
	c.up = up
	return true
}

func (c *conn) ended() *endReason {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reason
}

// finish applies the reason the gateway closed c, if any, to r.
func (c *conn) finish(r *Record) {
	if e := c.ended(); e != nil {
		if e.rule != "" {
			r.Allowed = false
			r.Rule = e.rule
		}
		r.Error = e.err
	}
}

// flow is an open tunnel or in-flight plain-HTTP request: what SetPolicy
// re-decides.
type flow struct {
	c    *conn
	host string
	port int
	addr netip.AddrPort
	gen  uint64 // policy generation that allowed it
	// raw: a tunnel relayed untouched, which must end if its host comes
	// to be inspected (its requests would escape the new rules).
	raw bool
}

// recheckFlow re-decides an open flow under policy p.
func recheckFlow(p Policy, f *flow) Decision {
	d := recheck(p, f.host, f.port, f.addr)
	if d.Allow && f.raw && inspects(p, f.host, f.port) {
		return Decision{Rule: "inspected now: " + f.host + " has request rules or credentials; reconnect"}
	}
	return d
}

// inspects reports whether p inspects host:port (never an IP literal).
func inspects(p Policy, host string, port int) bool {
	ic, ok := p.(Interceptor)
	if !ok {
		return false
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return false
	}
	return ic.Intercept(host, port) != nil
}

// track registers f; if the policy changed since f was decided, f is
// re-decided under the current policy, and a denial is returned (f not
// registered).
func (g *Gateway) track(f *flow) Decision {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return Decision{Rule: "gateway closed"}
	}
	g.flows[f] = struct{}{}
	g.mu.Unlock()
	if st := g.policy.Load(); st.gen != f.gen {
		if d := recheckFlow(st.p, f); !d.Allow {
			g.untrack(f)
			return d
		}
	}
	return Decision{Allow: true}
}

func (g *Gateway) untrack(f *flow) {
	g.mu.Lock()
	delete(g.flows, f)
	g.mu.Unlock()
}
