package gateway

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"sync"
	"sync/atomic"
	"time"
)

// Interceptor is implemented by a Policy that inspects the HTTPS requests
// to some hosts: to apply request rules (methods, paths) or to add
// credentials the sandbox never sees. The gateway terminates the
// sandbox's TLS to those hosts with a certificate from its CA and sends
// each request on over its own TLS connection; every other host's TLS is
// relayed untouched.
type Interceptor interface {
	// Intercept returns the request rules for host:port (host as given to
	// Policy.Host), or nil to leave its traffic alone.
	Intercept(host string, port int) Interception
}

// Interception holds the request rules and credentials of one inspected
// host.
type Interception interface {
	// Request decides a request by method and path (escaped, without the
	// query). It applies to plain-HTTP requests to the host too.
	Request(method, path string) Decision
	// Inject adds or substitutes credentials in a request about to go
	// upstream, and returns the names of those it used (for the audit;
	// never values). It is called only for requests inside an intercepted
	// TLS tunnel, which go upstream over TLS to the tunnel's host.
	Inject(h http.Header, u *url.URL) []string
	// Scrub returns what must not reach the sandbox in the response to
	// the request Inject saw (or to a plain-HTTP request, which Inject
	// never sees), and what goes in its place: old, new pairs, every
	// spelling of a secret the host may echo and its placeholder's. A
	// server that echoes a credential, or redirects with it in the query,
	// must not hand it over. nil: the host has no secrets.
	//
	// The gateway replaces the olds in the response's headers and,
	// streaming, in its body (at one position the longest old), which it
	// sends without a length; it asks upstream for an unencoded body
	// (Accept-Encoding: identity) and whole (no Range: a range could cut
	// a secret where no old matches), decodes gzip and deflate if the
	// server encodes anyway, and refuses any other encoding. It drops
	// the trailers of responses from intercepted tunnels.
	Scrub() []string
}

// interceptFor returns the current policy's rules for tg, or nil. IP
// literals are never intercepted (there is no name to check a server
// against); see helloRule for what keeps them from bypassing the rules.
func (g *Gateway) interceptFor(tg target) Interception {
	if tg.ip.IsValid() {
		return nil
	}
	ic, ok := g.policy.Load().p.(Interceptor)
	if !ok {
		return nil
	}
	return ic.Intercept(tg.host, tg.port)
}

// helloRule is sniRule plus: a tunnel to an IP address may not name an
// intercepted host in its ClientHello, which would reach that host's
// server with none of its request rules applied.
func (g *Gateway) helloRule(tg target, st helloState, info helloInfo) string {
	if rule := sniRule(tg, st, info); rule != "" {
		return rule
	}
	if tg.ip.IsValid() && st == helloDone && info.hasSNI {
		if sni, err := parseTarget(info.sni, tg.port); err == nil && !sni.ip.IsValid() && g.interceptFor(sni) != nil {
			return fmt.Sprintf("sni names an inspected host: %s has request rules or credentials; connect to it by name", sni.host)
		}
	}
	return ""
}

// readHello reads the ClientHello of a tunnel to an intercepted host:
// it must be TLS, and name the host. It returns the bytes read, with any
// the reader had buffered after them.
func (g *Gateway) readHello(c *conn, br interface {
	io.Reader
	Buffered() int
	Peek(int) ([]byte, error)
}, tg target) ([]byte, error) {
	data, st, info, err := sniff(br, c.Conn, g.cfg.HeaderTimeout, g.cfg.HeaderTimeout)
	switch {
	case errors.Is(err, errNoBytes):
		return nil, &refusal{rule: "not TLS: no ClientHello", detail: fmt.Sprintf("the client sent nothing for %v", g.cfg.HeaderTimeout)}
	case err != nil:
		if len(data) == 0 {
			return nil, err
		}
		return nil, &refusal{rule: "bad ClientHello", detail: err.Error()}
	case st != helloDone:
		return nil, &refusal{rule: fmt.Sprintf("not TLS: %s is inspected (it has request rules or credentials), so only HTTPS reaches it", tg.host)}
	}
	if rule := sniRule(tg, st, info); rule != "" {
		return nil, &refusal{rule: rule}
	}
	if n := br.Buffered(); n > 0 {
		more, _ := br.Peek(n)
		data = append(data, more...)
	}
	return data, nil
}

// intercepted is one TLS tunnel the gateway terminates.
type intercepted struct {
	tg        target
	v         verdict
	client    io.Writer // the sandbox's side, decrypted
	transport *http.Transport
	addr      atomic.Pointer[netip.AddrPort] // last dialed
}

// dialed is the address last dialed for the tunnel, or "".
func (ix *intercepted) dialed() string {
	if ap := ix.addr.Load(); ap != nil {
		return ap.String()
	}
	return ""
}

// interceptTLS terminates a tunnel's TLS (hello: the client's first bytes,
// already read and checked) and serves the requests inside it, each
// decided, given its credentials and audited on its own. rec is the
// tunnel's record.
func (g *Gateway) interceptTLS(c *conn, rec *Record, tg target, v verdict, hello []byte) {
	if g.cfg.CA == nil {
		endTunnel(rec, c, 0, 0, &refusal{rule: "inspection unavailable: the gateway has no CA, so the rules for " + tg.host + " cannot be enforced"})
		return
	}
	cc := &countConn{Conn: c.Conn, r: io.MultiReader(&onceReader{b: hello}, c.Conn)}
	tc := tls.Server(cc, &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"http/1.1"},
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return g.cfg.CA.leaf(tg.host)
		},
	})
	c.SetDeadline(time.Now().Add(g.cfg.HeaderTimeout))
	err := tc.HandshakeContext(c.ctx)
	c.SetDeadline(time.Time{})
	if err != nil {
		endTunnel(rec, c, cc.in.Load(), cc.out.Load(), fmt.Errorf("TLS handshake with the sandbox: %w", err))
		return
	}
	// Each write to the sandbox goes out as one write to the socket,
	// however many TLS records it makes.
	w := &recordWriter{Conn: tc, cc: cc}
	ix := &intercepted{tg: tg, v: v, client: w}
	ix.transport = g.upstreamTLS(ix)
	defer ix.transport.CloseIdleConnections()
	g.serveRequests(c, w, ix)
	c.SetWriteDeadline(time.Now().Add(lingerTimeout))
	tc.CloseWrite() // close_notify
	rec.Addr = ix.dialed()
	endTunnel(rec, c, cc.in.Load(), cc.out.Load(), nil)
}

// upstreamTLS is the transport of one intercepted tunnel: it dials the
// addresses checked for the tunnel, in order, and speaks TLS to the
// tunnel's host, verifying its certificate.
func (g *Gateway) upstreamTLS(ix *intercepted) *http.Transport {
	return &http.Transport{
		Proxy: nil,
		DialTLSContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var errs []error
			for _, a := range ix.v.addrs {
				dctx, cancel := context.WithTimeout(ctx, dialTimeout)
				raw, err := g.cfg.Dial(dctx, "tcp", a.ap.String())
				if err != nil {
					cancel()
					errs = append(errs, err)
					if ctx.Err() != nil {
						break
					}
					continue
				}
				tc := tls.Client(raw, &tls.Config{
					ServerName: ix.tg.host,
					RootCAs:    g.cfg.UpstreamRoots,
					MinVersion: tls.VersionTLS12,
					NextProtos: []string{"http/1.1"},
				})
				err = tc.HandshakeContext(dctx)
				cancel()
				if err != nil {
					raw.Close()
					return nil, fmt.Errorf("TLS to %s (%s): %w", ix.tg.host, a.ap, err)
				}
				ix.addr.Store(&a.ap)
				return tc, nil
			}
			return nil, &dialError{errors.Join(errs...)}
		},
		DisableCompression:  true,
		MaxIdleConnsPerHost: 4,
		IdleConnTimeout:     90 * time.Second,
		ReadBufferSize:      64 << 10,
		WriteBufferSize:     64 << 10,
	}
}

// countConn counts a client connection's bytes (TLS records included),
// reading through r. While held, writes are gathered and go out together
// at release: a TLS write of 16 KiB and a few bytes is two records, but
// need not be two writes to the socket.
type countConn struct {
	net.Conn
	r       io.Reader
	in, out atomic.Int64

	wmu     sync.Mutex // held while writing to Conn
	mu      sync.Mutex // guards held and pending
	held    bool
	pending []byte
}

func (c *countConn) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.in.Add(int64(n))
	return n, err
}

func (c *countConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	if c.held {
		c.pending = append(c.pending, p...)
		c.mu.Unlock()
		return len(p), nil
	}
	c.mu.Unlock()
	c.wmu.Lock()
	defer c.wmu.Unlock()
	n, err := c.Conn.Write(p)
	c.out.Add(int64(n))
	return n, err
}

func (c *countConn) hold() {
	c.mu.Lock()
	c.held = true
	c.mu.Unlock()
}

// release writes what was gathered since hold, in one write.
func (c *countConn) release() error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.mu.Lock()
	c.held = false
	data := c.pending
	c.pending = c.pending[:0]
	c.mu.Unlock()
	if len(data) == 0 {
		return nil
	}
	n, err := c.Conn.Write(data)
	c.out.Add(int64(n))
	if n < len(data) && err == nil {
		err = io.ErrShortWrite
	}
	return err
}

// recordWriter is the sandbox's side of an intercepted tunnel: each Write
// of application data reaches the socket in one write. Writes are
// serialized.
type recordWriter struct {
	*tls.Conn
	cc *countConn
	mu sync.Mutex
}

func (w *recordWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.cc.hold()
	n, err := w.Conn.Write(p)
	if rerr := w.cc.release(); err == nil && rerr != nil {
		return 0, rerr
	}
	return n, err
}
