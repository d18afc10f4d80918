package gateway

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/textproto"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

const (
	maxHead = 64 << 10 // a request's line and headers
	maxPath = 1024     // of Record.Path
)

// serveHTTPConn serves one client connection of the HTTP proxy: plain-HTTP
// requests, each decided and audited on its own, possibly ending with a
// CONNECT that turns the connection into a tunnel.
func (g *Gateway) serveHTTPConn(c *conn) { g.serveRequests(c, c.Conn, nil) }

// serveRequests reads requests from rw until the connection ends: proxy
// requests from the sandbox (ix nil), or the requests inside an
// intercepted TLS tunnel.
func (g *Gateway) serveRequests(c *conn, rw io.ReadWriter, ix *intercepted) {
	br := bufio.NewReaderSize(rw, maxHead)
	bw := bufio.NewWriterSize(rw, 4<<10)
	var heads headReader
	proto := "http"
	if ix != nil {
		proto = "https"
	}
	for first := true; ; first = false {
		wait := g.cfg.IdleTimeout
		if first {
			wait = g.headerTimeout(c)
		}
		c.SetReadDeadline(time.Now().Add(wait))
		if _, err := br.Peek(1); err != nil {
			if first && c.refuse != "" {
				g.audit(Record{Time: time.Now(), Proto: proto, Rule: c.refuse, Error: "refused: no request within " + wait.String()})
			}
			return
		}
		start := time.Now()
		c.SetReadDeadline(start.Add(g.headerTimeout(c)))
		req, hosts, headLen, err := heads.read(br)
		if err != nil {
			rec := Record{Time: start, Proto: proto, Rule: c.refuse, Error: "bad request: " + err.Error(), Duration: time.Since(start)}
			if ix != nil {
				rec.Host, rec.Port = ix.tg.host, ix.tg.port
			}
			status := http.StatusBadRequest
			if errors.Is(err, errHeadTooLarge) {
				status = http.StatusRequestHeaderFieldsTooLarge
			}
			var ne net.Error
			if !errors.As(err, &ne) && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
				g.writeText(c, bw, status, "", "airlock egress: bad request: "+err.Error(), true, false)
			}
			c.finish(&rec)
			g.audit(rec)
			return
		}
		c.SetReadDeadline(time.Time{})
		if req.Method == http.MethodConnect && ix == nil {
			g.handleConnect(c, br, bw, req, start)
			return
		}
		if !g.handleHTTP(c, ix, bw, req, hosts, headLen, start) {
			return
		}
	}
}

var errHeadTooLarge = fmt.Errorf("request line and headers larger than %d bytes", maxHead)

// headReader reads requests and the values of their Host header lines,
// which http.ReadRequest would otherwise discard for an absolute URI. The
// lines are found by hostLines, which reads them as textproto does; a head
// with a folded line (obs-fold, which textproto joins to the line before)
// is parsed a second time by textproto itself, so both always agree. The
// reader of that parse is kept for the connection's next request.
type headReader struct {
	src bytes.Reader
	buf *bufio.Reader
}

func (hr *headReader) read(br *bufio.Reader) (req *http.Request, hosts []string, headLen int, err error) {
	head, err := peekHead(br)
	if err != nil {
		return nil, nil, 0, err
	}
	headLen = len(head)
	hosts, ok := hostLines(head)
	if !ok {
		if hosts, err = hr.parseHosts(head); err != nil {
			return nil, nil, 0, err
		}
	}
	req, err = http.ReadRequest(br)
	if err != nil {
		return nil, nil, 0, err
	}
	return req, hosts, headLen, nil
}

// parseHosts reads head's header lines with textproto.
func (hr *headReader) parseHosts(head []byte) ([]string, error) {
	hr.src.Reset(head)
	if hr.buf == nil {
		hr.buf = bufio.NewReader(&hr.src)
	} else {
		hr.buf.Reset(&hr.src)
	}
	tp := textproto.NewReader(hr.buf)
	if _, err := tp.ReadLine(); err != nil {
		return nil, err
	}
	h, err := tp.ReadMIMEHeader()
	if err != nil {
		return nil, err
	}
	return h.Values("Host"), nil
}

// hostLines returns the values of head's Host lines as textproto's
// ReadMIMEHeader would (the name in any case, the value without the
// spaces and tabs around it), and false if a header line is folded (starts
// with a space or a tab), which it leaves to textproto. head is a request
// line and header lines up to the empty line that ends them, as peekHead
// returns it; a head textproto refuses (a line without a colon, a name
// that is not a token) may give anything, as http.ReadRequest refuses it
// too.
func hostLines(head []byte) (hosts []string, ok bool) {
	i := bytes.IndexByte(head, '\n')
	if i < 0 {
		return nil, true
	}
	for rest := head[i+1:]; len(rest) > 0; {
		line := rest
		if i := bytes.IndexByte(rest, '\n'); i >= 0 {
			line, rest = rest[:i], rest[i+1:]
		} else {
			rest = nil
		}
		if len(line) > 0 && line[len(line)-1] == '\r' {
			line = line[:len(line)-1]
		}
		if len(line) == 0 {
			break // the end of the head
		}
		if line[0] == ' ' || line[0] == '\t' {
			return nil, false
		}
		if len(line) >= 5 && line[4] == ':' && (line[0]|0x20) == 'h' && (line[1]|0x20) == 'o' && (line[2]|0x20) == 's' && (line[3]|0x20) == 't' {
			hosts = append(hosts, string(bytes.Trim(line[5:], " \t")))
		}
	}
	return hosts, true
}

// peekHead returns the request's line and headers up to and including the
// blank line that ends them, without consuming them.
func peekHead(br *bufio.Reader) ([]byte, error) {
	for {
		buf, _ := br.Peek(br.Buffered())
		if end := headEnd(buf); end >= 0 {
			return buf[:end], nil
		}
		if br.Buffered() >= maxHead {
			return nil, errHeadTooLarge
		}
		if _, err := br.Peek(br.Buffered() + 1); err != nil {
			return nil, err
		}
	}
}

// headEnd finds the end of a request head the way textproto reads lines
// (a line ends at LF; a CR before it is dropped): just past the first
// empty line after the request line, or -1.
func headEnd(buf []byte) int {
	for pos, line := 0, 0; ; line++ {
		i := bytes.IndexByte(buf[pos:], '\n')
		if i < 0 {
			return -1
		}
		l := buf[pos : pos+i]
		pos += i + 1
		if line > 0 && (len(l) == 0 || len(l) == 1 && l[0] == '\r') {
			return pos
		}
	}
}

func (g *Gateway) handleConnect(c *conn, br *bufio.Reader, bw *bufio.Writer, req *http.Request, start time.Time) {
	rec := Record{Time: start, Proto: "connect", Method: http.MethodConnect}
	defer func() {
		rec.Duration = time.Since(start)
		c.finish(&rec)
		g.audit(rec)
	}()
	tg, err := authorityTarget(req.URL.Host, "")
	if err != nil {
		rec.Host, rec.Error = cleanRule(req.URL.Host), err.Error()
		g.writeText(c, bw, http.StatusBadRequest, "", "airlock egress: bad CONNECT target: "+err.Error(), true, false)
		return
	}
	rec.Host, rec.Port = tg.host, tg.port
	if c.refuse != "" {
		rec.Rule = c.refuse
		g.writeRefusal(c, bw, tg, c.refuse, false)
		return
	}
	v := g.check(c.ctx, tg)
	if !g.answerVerdict(c, bw, &rec, tg, v, false) {
		return
	}
	c.SetWriteDeadline(time.Now().Add(g.cfg.HeaderTimeout))
	if _, err := io.WriteString(c.Conn, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		rec.Error = err.Error()
		return
	}
	c.SetWriteDeadline(time.Time{})
	if g.interceptFor(tg) != nil {
		data, err := g.readHello(c, br, tg)
		if err != nil {
			endTunnel(&rec, c, 0, 0, err)
			return
		}
		g.interceptTLS(c, &rec, tg, v, data)
		return
	}
	data, later, err := g.readClientFirst(c, br, tg)
	if err != nil {
		endTunnel(&rec, c, 0, 0, err)
		return
	}
	if n := br.Buffered(); n > 0 {
		more, _ := br.Peek(n)
		data = append(data, more...)
	}
	var check func(*tunnel) ([]byte, error)
	if later {
		check = g.firstBytesCheck(c, tg)
	}
	g.runTunnel(c, &rec, tg, &v, data, check)
}

// runTunnel dials a checked tunnel, registers it for SetPolicy and relays
// it, filling rec.
func (g *Gateway) runTunnel(c *conn, rec *Record, tg target, v *verdict, prefix []byte, check func(*tunnel) ([]byte, error)) {
	up, ap, err := g.dial(c.ctx, v)
	rec.Addr = ap.String()
	if err != nil {
		rec.Error = "dial: " + err.Error()
		c.finish(rec)
		return
	}
	g.startTunnel(c, rec, tg, up, ap, v, prefix, check)
}

// startTunnel relays an upstream connection already dialed for tg.
func (g *Gateway) startTunnel(c *conn, rec *Record, tg target, up net.Conn, ap netip.AddrPort, v *verdict, prefix []byte, check func(*tunnel) ([]byte, error)) {
	rec.Rule = v.rule
	if !c.setUpstream(up) {
		c.finish(rec)
		return
	}
	f := &flow{c: c, host: tg.host, port: tg.port, addr: ap, gen: v.gen, raw: true}
	if d := g.track(f); !d.Allow {
		up.Close()
		rec.Allowed, rec.Rule = false, d.Rule
		return
	}
	defer g.untrack(f)
	sent, received, err := g.relay(c, up, prefix, check)
	endTunnel(rec, c, sent, received, err)
}

// answerVerdict answers a verdict that is not a go-ahead and records it;
// true means go ahead.
func (g *Gateway) answerVerdict(c *conn, bw *bufio.Writer, rec *Record, tg target, v verdict, keep bool) bool {
	switch v.fail {
	case failDenied:
		rec.Rule = v.rule
		if v.deniedAddr.IsValid() {
			rec.Addr = v.deniedAddr.String()
		}
		g.writeText(c, bw, http.StatusForbidden, v.rule, denialText(tg, v.rule), !keep, rec.Method == http.MethodHead)
		return false
	case failUnresolved:
		rec.Error = "resolve: " + v.err.Error()
		g.writeText(c, bw, http.StatusBadGateway, "", fmt.Sprintf("airlock egress: cannot resolve %s: %v", tg.host, v.err), !keep, rec.Method == http.MethodHead)
		return false
	}
	rec.Allowed, rec.Rule = true, v.rule
	return true
}

func denialText(tg target, rule string) string {
	return fmt.Sprintf("airlock egress: denied %s: %s", tg, cleanRule(rule))
}

func (g *Gateway) writeRefusal(c *conn, bw *bufio.Writer, tg target, rule string, head bool) {
	text := denialText(tg, rule)
	switch rule {
	case RuleConnLimit:
		text += fmt.Sprintf(" (%d connections open; close some and retry)", g.cfg.MaxConns)
	case RuleByteLimit:
		text += fmt.Sprintf(" (the sandbox's %d-byte egress budget is spent)", g.cfg.MaxBytes)
	}
	g.writeText(c, bw, http.StatusServiceUnavailable, rule, text, true, head)
}

// writeText writes a short text/plain response; rule, when set, goes in
// X-Airlock-Rule.
func (g *Gateway) writeText(c *conn, bw *bufio.Writer, status int, rule, text string, close, head bool) error {
	text = cleanRule(text)
	if len(text) > 0 {
		text += "\n"
	}
	fmt.Fprintf(bw, "HTTP/1.1 %d %s\r\n", status, http.StatusText(status))
	bw.WriteString("Content-Type: text/plain; charset=utf-8\r\nX-Content-Type-Options: nosniff\r\n")
	if rule != "" {
		fmt.Fprintf(bw, "X-Airlock-Rule: %s\r\n", cleanRule(rule))
	}
	fmt.Fprintf(bw, "Content-Length: %d\r\n", len(text))
	if close {
		bw.WriteString("Connection: close\r\n")
	}
	bw.WriteString("\r\n")
	if !head {
		bw.WriteString(text)
	}
	c.SetWriteDeadline(time.Now().Add(g.cfg.HeaderTimeout))
	err := bw.Flush()
	c.SetWriteDeadline(time.Time{})
	return err
}

// authorityTarget parses host[:port] (port defaults to def; "" requires
// one).
func authorityTarget(hostport, def string) (target, error) {
	host, port := hostport, def
	if h, p, err := net.SplitHostPort(hostport); err == nil {
		host = h
		if p != "" {
			port = p
		}
	} else if strings.HasPrefix(hostport, "[") && strings.HasSuffix(hostport, "]") {
		host = hostport[1 : len(hostport)-1]
	} else if strings.Contains(hostport, ":") && !strings.Contains(hostport, "]") && strings.Count(hostport, ":") == 1 {
		return target{}, fmt.Errorf("invalid host:port %q", hostport)
	}
	if port == "" {
		return target{}, fmt.Errorf("%q has no port: want host:port", hostport)
	}
	n, err := parsePort(port)
	if err != nil {
		return target{}, err
	}
	return parseTarget(host, n)
}

func parsePort(s string) (int, error) {
	if s == "" || len(s) > 5 || strings.Trim(s, "0123456789") != "" {
		return 0, fmt.Errorf("invalid port %q: want 1-65535", s)
	}
	n, _ := strconv.Atoi(s)
	if n < 1 || n > 65535 {
		return 0, fmt.Errorf("invalid port %q: want 1-65535", s)
	}
	return n, nil
}

// hopHeaders are connection-scoped and never forwarded, with the proxy's
// own credentials.
var hopHeaders = []string{
	"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

func stripHop(h http.Header) {
	for _, v := range h.Values("Connection") {
		for tok := range strings.SplitSeq(v, ",") {
			if tok = textproto.TrimString(tok); tok != "" {
				h.Del(tok)
			}
		}
	}
	for _, k := range hopHeaders {
		h.Del(k)
	}
}

// handleHTTP proxies one request; false ends the client connection. With
// ix nil it is a plain-HTTP proxy request (absolute URI); otherwise a
// request read inside an intercepted TLS tunnel (origin form), sent
// upstream over TLS with the host's credentials. The request's head
// (headLen bytes as read) is charged to the byte budget with its body: it
// carries the URL and headers upstream.
func (g *Gateway) handleHTTP(c *conn, ix *intercepted, bw *bufio.Writer, req *http.Request, hosts []string, headLen int, start time.Time) (keep bool) {
	rec := Record{Time: start, Proto: "http", Method: req.Method}
	defPort := "80"
	if ix != nil {
		rec.Proto, defPort = "https", "443"
	}
	defer func() {
		rec.Duration = time.Since(start)
		g.audit(rec)
	}()
	hasBody := req.Body != nil && req.Body != http.NoBody
	keep = req.ProtoAtLeast(1, 1) && !req.Close && c.refuse == ""
	head := req.Method == http.MethodHead
	// refuse answers without forwarding; an unread body ends the connection.
	refuse := func(status int, rule, text string) bool {
		k := keep && !hasBody
		g.writeText(c, bw, status, rule, text, !k, head)
		return k
	}
	var u *url.URL
	var tg target
	if ix == nil {
		u = req.URL
		if !u.IsAbs() || u.Host == "" {
			rec.Error = "not a proxy request"
			return refuse(http.StatusBadRequest, "", "airlock egress: not a proxy request: send an absolute URI (GET http://host/path) or use CONNECT")
		}
		if u.Scheme != "http" {
			rec.Host, rec.Error = cleanRule(u.Host), "scheme "+u.Scheme
			return refuse(http.StatusBadRequest, "", fmt.Sprintf("airlock egress: cannot proxy %q URLs: use CONNECT for https", cleanRule(u.Scheme)))
		}
		var err error
		if tg, err = authorityTarget(u.Host, defPort); err != nil {
			rec.Host, rec.Error = cleanRule(u.Host), err.Error()
			return refuse(http.StatusBadRequest, "", "airlock egress: bad request target: "+err.Error())
		}
	} else {
		tg = ix.tg
		rec.Host, rec.Port = tg.host, tg.port
		if req.URL.IsAbs() || req.URL.Host != "" || !strings.HasPrefix(req.URL.Path, "/") {
			rec.Error = "not an origin-form request"
			return refuse(http.StatusBadRequest, "", "airlock egress: inside a tunnel, send requests as GET /path (origin form)")
		}
		u = &url.URL{Scheme: "https", Host: authority(tg, 443), Path: req.URL.Path, RawPath: req.URL.RawPath, RawQuery: req.URL.RawQuery}
		if len(hosts) == 0 && req.ProtoAtLeast(1, 1) {
			rec.Error = "no Host header"
			return refuse(http.StatusBadRequest, "", "airlock egress: an HTTP/1.1 request needs a Host header")
		}
	}
	rec.Path = u.EscapedPath() // ASCII: no control characters in the audit
	if len(rec.Path) > maxPath {
		rec.Path = rec.Path[:maxPath]
	}
	rec.Host, rec.Port = tg.host, tg.port
	switch {
	case len(hosts) > 1:
		rec.Error = "several Host headers"
		return refuse(http.StatusBadRequest, "", "airlock egress: several Host headers")
	case len(hosts) == 1 && !sameAuthority(hosts[0], tg, defPort):
		rec.Rule = "host header mismatch"
		return refuse(http.StatusForbidden, rec.Rule, denialText(tg, fmt.Sprintf("host header mismatch: the Host header names %q", cleanRule(hosts[0]))))
	}
	if c.refuse != "" {
		rec.Rule = c.refuse
		g.writeRefusal(c, bw, tg, c.refuse, head)
		return false
	}
	var v verdict
	if ix == nil {
		v = g.check(c.ctx, tg)
		if !g.answerVerdict(c, bw, &rec, tg, v, keep && !hasBody) {
			return keep && !hasBody
		}
	} else {
		v = ix.v // checked when the tunnel was opened; SetPolicy re-decides it
		rec.Allowed, rec.Rule = true, v.rule
	}
	// Request rules (methods, paths) of an inspected host: for plain HTTP
	// and inside intercepted tunnels alike.
	var l7 string
	icpt := g.interceptFor(tg)
	if icpt != nil {
		d := icpt.Request(req.Method, u.EscapedPath())
		if !d.Allow {
			rule := ruleOr(d.Rule, "request not allowed")
			rec.Allowed, rec.Rule = false, rule
			return refuse(http.StatusForbidden, rule, fmt.Sprintf("airlock egress: denied %s %s%s: %s", cleanRule(req.Method), tg, rec.Path, cleanRule(rule)))
		}
		l7 = d.Rule
	}

	if !g.reserve(headLen) {
		c.finish(&rec)
		return false
	}
	ctx, cancel := context.WithCancelCause(c.ctx)
	defer cancel(nil)
	idle := g.cfg.IdleTimeout
	watchdog := time.AfterFunc(idle, func() { cancel(errIdle) })
	defer watchdog.Stop()
	touch := func() { watchdog.Reset(idle) }

	out := &http.Request{
		Method:     req.Method,
		URL:        new(*u),
		Proto:      "HTTP/1.1",
		ProtoMajor: 1,
		ProtoMinor: 1,
		Header:     req.Header.Clone(),
		Host:       u.Host,
	}
	out.URL.User = nil
	stripHop(out.Header)
	var scrub *replacer
	if icpt != nil {
		if ix != nil {
			// Credentials go upstream over TLS only, to the host they are
			// bound to (the tunnel's, whose SNI and Host header were checked).
			rec.Credential = strings.Join(icpt.Inject(out.Header, out.URL), ",")
		}
		if scrub = newReplacer(icpt.Scrub()); scrub != nil {
			out.Header.Set("Accept-Encoding", "identity")
			out.Header.Del("Range")
			out.Header.Del("If-Range")
		}
	}
	out.Header.Del("Expect") // answered here, below
	if _, ok := out.Header["User-Agent"]; !ok {
		out.Header["User-Agent"] = []string{""} // do not add Go's
	}
	var body *reqBody
	if hasBody {
		var client io.Writer = c.Conn
		if ix != nil {
			client = ix.client
		}
		body = &reqBody{g: g, c: c, w: client, src: req.Body, touch: touch,
			expect: req.ProtoAtLeast(1, 1) && strings.EqualFold(req.Header.Get("Expect"), "100-continue")}
		out.Body, out.ContentLength = body, req.ContentLength
	}
	out = out.WithContext(ctx)

	var resp *http.Response
	var err error
	if ix != nil {
		// The tunnel's own transport dials the checked addresses, over TLS
		// to the tunnel's host; its upstream connection is reused.
		f := &flow{c: c, host: tg.host, port: tg.port, addr: v.addrs[0].ap, gen: v.gen}
		if d := g.track(f); !d.Allow {
			rec.Allowed, rec.Rule = false, d.Rule
			return refuse(http.StatusForbidden, d.Rule, denialText(tg, d.Rule))
		}
		defer g.untrack(f)
		resp, err = ix.transport.RoundTrip(out)
		rec.Addr = ix.dialed()
	} else {
		for i, a := range v.addrs {
			rec.Addr, rec.Rule = a.ap.String(), a.rule
			f := &flow{c: c, host: tg.host, port: tg.port, addr: a.ap, gen: v.gen}
			if d := g.track(f); !d.Allow {
				rec.Allowed, rec.Rule = false, d.Rule
				return refuse(http.StatusForbidden, d.Rule, denialText(tg, d.Rule))
			}
			defer g.untrack(f)
			resp, err = g.up.roundTrip(ctx, a.ap, out)
			var de *dialError
			if err == nil || !errors.As(err, &de) || i == len(v.addrs)-1 || ctx.Err() != nil {
				break
			}
		}
	}
	rec.Rule = joinRules(rec.Rule, l7)
	if body != nil {
		body.stopContinue()
	}
	if err != nil {
		if c.ended() != nil || errors.Is(err, errByteLimit) {
			c.finish(&rec) // killed (policy, budget, Close) mid-request
			return false
		}
		status, what := http.StatusBadGateway, "upstream failed"
		if errors.Is(context.Cause(ctx), errIdle) {
			status, what = http.StatusGatewayTimeout, "upstream idle for "+idle.String()
			err = errIdle
		}
		rec.Error = err.Error()
		if scrub != nil {
			// A malformed response is quoted in the error.
			rec.Error = scrub.Replace(rec.Error)
		}
		return refuse(status, "", fmt.Sprintf("airlock egress: %s %s: %s", what, tg, rec.Error))
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusSwitchingProtocols {
		rec.Error = "upstream switched protocols"
		return refuse(http.StatusBadGateway, "", "airlock egress: protocol upgrades are not proxied: use CONNECT")
	}
	stripHop(resp.Header)
	if ix != nil && icpt != nil || scrub != nil {
		resp.Trailer = nil // sent after the body, unscrubbed
	}
	if scrub != nil {
		scrub.header(resp.Header)
		scrubbed, err := scrubBody(resp, scrub)
		if err != nil {
			rec.Error = "response refused: " + err.Error()
			keep = false // the body is not read
			return refuse(http.StatusBadGateway, "", fmt.Sprintf("airlock egress: response from %s refused: %v (%s has credentials, whose secrets are scrubbed from responses)", tg, err, tg.host))
		}
		if scrubbed && req.ProtoAtLeast(1, 1) {
			resp.TransferEncoding = []string{"chunked"}
		}
	}
	resp.ProtoMajor, resp.ProtoMinor = 1, 1
	if !req.ProtoAtLeast(1, 1) {
		resp.ProtoMinor, resp.TransferEncoding = 0, nil
	}
	if resp.ContentLength < 0 && !isChunked(resp.TransferEncoding) {
		keep = false // close-delimited: Response.Write says Connection: close
	}
	resp.Close = !keep
	// A chunk is written as its size line, its data and a CRLF: through a
	// writer that holds a whole chunk, each goes out in one write rather
	// than three (the small one's buffer fills mid-chunk).
	w, flush := bw, []*bufio.Writer{bw}
	if isChunked(resp.TransferEncoding) {
		w = bufio.NewWriterSize(bw, chunkBuf)
		flush = []*bufio.Writer{w, bw}
	}
	// A streamed (or large) body is flushed to the client before each
	// upstream read that may block; a small one goes out with the head.
	rb := &respBody{src: resp.Body, g: g, c: c, bw: flush, touch: touch,
		flushEarly: resp.ContentLength < 0 || resp.ContentLength > smallBody}
	resp.Body = rb
	c.SetWriteDeadline(time.Now().Add(idle))
	if w == bw && !head && plainLength(resp) {
		err = writeKnownLength(bw, resp, rb)
	} else {
		err = resp.Write(respWriter{w})
	}
	if err == nil {
		err = w.Flush()
	}
	if err == nil && w != bw {
		err = bw.Flush()
	}
	c.SetWriteDeadline(time.Time{})
	rec.BytesDown = rb.n
	if body != nil {
		rec.BytesUp = body.n.Load()
		if !body.detach() {
			keep = false
		}
	}
	if err != nil {
		if errors.Is(context.Cause(ctx), errIdle) {
			err = errIdle
		}
		rec.Error = err.Error()
		if scrub != nil {
			rec.Error = scrub.Replace(rec.Error)
		}
		c.finish(&rec)
		return false
	}
	return keep
}

func isChunked(te []string) bool { return len(te) > 0 && te[0] == "chunked" }

// sameAuthority reports whether a Host header names tg (port defPort by
// default; names compared case-insensitively, trailing dot ignored).
func sameAuthority(h string, tg target, defPort string) bool {
	ht, err := authorityTarget(h, defPort)
	return err == nil && ht.host == tg.host && ht.port == tg.port
}

// authority is tg as a URL host, without the scheme's default port.
func authority(tg target, defPort int) string {
	h := tg.host
	if tg.ip.Is6() {
		h = "[" + h + "]"
	}
	if tg.port == defPort {
		return h
	}
	return net.JoinHostPort(tg.host, strconv.Itoa(tg.port))
}

// plainLength reports whether resp is a final response with a body of
// known, non-zero length and nothing else to frame: what writeKnownLength
// writes as http.Response.Write would.
func plainLength(resp *http.Response) bool {
	return resp.ContentLength > 0 && len(resp.TransferEncoding) == 0 && len(resp.Trailer) == 0 &&
		!resp.Uncompressed && resp.StatusCode >= 200 && resp.StatusCode <= 999 &&
		resp.StatusCode != http.StatusNoContent && resp.StatusCode != http.StatusNotModified &&
		len(resp.Header["Connection"]) == 0 && resp.ProtoMajor == 1
}

// writeKnownLength writes a response that plainLength accepts, its body read
// from rb: the same bytes as http.Response.Write, without building its
// transfer writer and formatter for every response (the proxy's kept-alive
// requests spent about a tenth of the gateway's time in them). The header
// keys are sorted and the values cleaned as Header.WriteSubset does; the
// body is copied by respWriter (spliced when large) and must have exactly
// its declared length; it is then read to its end, as Response.Write does,
// so that the upstream connection can serve another request.
func writeKnownLength(bw *bufio.Writer, resp *http.Response, rb io.ReadCloser) error {
	text := resp.Status
	if text == "" {
		if text = http.StatusText(resp.StatusCode); text == "" {
			text = "status code " + strconv.Itoa(resp.StatusCode)
		}
	} else {
		text = strings.TrimPrefix(text, strconv.Itoa(resp.StatusCode)+" ")
	}
	var num [20]byte
	bw.WriteString("HTTP/1.")
	bw.Write(strconv.AppendInt(num[:0], int64(resp.ProtoMinor), 10))
	bw.WriteByte(' ')
	bw.Write(strconv.AppendInt(num[:0], int64(resp.StatusCode), 10))
	bw.WriteByte(' ')
	bw.WriteString(text)
	bw.WriteString("\r\n")
	if resp.Close {
		bw.WriteString("Connection: close\r\n")
	}
	bw.WriteString("Content-Length: ")
	bw.Write(strconv.AppendInt(num[:0], resp.ContentLength, 10))
	bw.WriteString("\r\n")
	var keyBuf [32]string
	keys := keyBuf[:0]
	for k := range resp.Header {
		switch {
		case k == "Content-Length", k == "Transfer-Encoding", k == "Trailer":
		case !fieldName(k): // dropped, as WriteSubset drops it
		default:
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		for _, v := range resp.Header[k] {
			if strings.ContainsAny(v, "\r\n") {
				v = strings.NewReplacer("\n", " ", "\r", " ").Replace(v)
			}
			bw.WriteString(k)
			bw.WriteString(": ")
			bw.WriteString(textproto.TrimString(v))
			bw.WriteString("\r\n")
		}
	}
	if _, err := bw.WriteString("\r\n"); err != nil {
		rb.Close()
		return err
	}
	n, err := respWriter{bw}.ReadFrom(&io.LimitedReader{R: rb, N: resp.ContentLength})
	if err == nil {
		var extra int64
		extra, err = io.Copy(io.Discard, rb)
		n += extra
	}
	if cerr := rb.Close(); err == nil {
		err = cerr
	}
	if err == nil && n != resp.ContentLength {
		err = fmt.Errorf("http: ContentLength=%d with Body length %d", resp.ContentLength, n)
	}
	return err
}

// fieldName reports whether k is an HTTP field name: one or more token
// characters (RFC 9110, 5.6.2).
func fieldName(k string) bool {
	if k == "" {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

// smallBody is the largest response body sent with its head in one write.
const smallBody = 64 << 10

// chunkBuf holds a chunk of a chunked response and its framing: reads of
// the body return at most 32 KiB (io.Copy's buffer).
const chunkBuf = 32<<10 + 64

// respWriter writes a response to the client's bufio.Writer. It hides
// bufio.Writer.ReadFrom (so that respBody.Read may flush between writes)
// and copies bodies with a pooled buffer.
type respWriter struct{ bw *bufio.Writer }

func (w respWriter) Write(p []byte) (int, error) { return w.bw.Write(p) }

func (w respWriter) ReadFrom(r io.Reader) (int64, error) {
	// A body of known length comes as a LimitedReader of it (see
	// http.Response.Write): spliced from upstream when it can be.
	if lr, ok := r.(*io.LimitedReader); ok {
		if rb, ok := lr.R.(*respBody); ok {
			if n, ok, err := rb.splice(lr.N); ok {
				lr.N -= n
				return n, err
			}
		}
	}
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	return io.CopyBuffer(struct{ io.Writer }{w.bw}, struct{ io.Reader }{r}, *bp)
}

// dialError marks a failure to connect (nothing was sent: another address
// may be tried).
type dialError struct{ err error }

func (e *dialError) Error() string { return e.err.Error() }
func (e *dialError) Unwrap() error { return e.err }

// reqBody is a plain-HTTP request body on its way upstream: counted,
// charged to the byte budget, answering Expect: 100-continue on first read,
// and detachable so the connection can read its next request.
type reqBody struct {
	g     *Gateway
	c     *conn
	w     io.Writer // the client, for 100 Continue
	src   io.Reader
	touch func()

	mu       sync.Mutex // held while reading src
	detached bool
	n        atomic.Int64
	eof      atomic.Bool

	contMu   sync.Mutex
	expect   bool
	contDone bool
}

var errDetached = errors.New("request finished")

func (b *reqBody) Read(p []byte) (int, error) {
	b.sendContinue()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.detached {
		return 0, errDetached
	}
	b.c.SetReadDeadline(time.Now().Add(b.g.cfg.IdleTimeout))
	n, err := b.src.Read(p)
	if n > 0 {
		if !b.g.reserve(n) {
			return 0, errByteLimit
		}
		b.n.Add(int64(n))
		b.touch()
	}
	if errors.Is(err, io.EOF) {
		b.eof.Store(true)
	}
	return n, err
}

// Close does nothing: the client connection owns the body.
func (b *reqBody) Close() error { return nil }

func (b *reqBody) sendContinue() {
	b.contMu.Lock()
	defer b.contMu.Unlock()
	if b.expect && !b.contDone {
		b.contDone = true
		b.c.SetWriteDeadline(time.Now().Add(b.g.cfg.HeaderTimeout))
		io.WriteString(b.w, "HTTP/1.1 100 Continue\r\n\r\n")
		b.c.SetWriteDeadline(time.Time{})
	}
}

// stopContinue keeps a late first read from writing 100 Continue into the
// response.
func (b *reqBody) stopContinue() {
	b.contMu.Lock()
	b.contDone = true
	b.contMu.Unlock()
}

// detach ends upstream reads of the body; false when it was not read to
// the end (the connection cannot be reused).
func (b *reqBody) detach() bool {
	if !b.eof.Load() {
		return false
	}
	b.mu.Lock()
	b.detached = true
	b.mu.Unlock()
	return true
}

// respBody is a plain-HTTP response body on its way to the client:
// counted, charged to the byte budget, and flushing the client writer
// before each read, so a streamed response is not held back.
type respBody struct {
	src   io.ReadCloser
	g     *Gateway
	c     *conn
	bw    []*bufio.Writer // flushed in order: the outermost first
	touch func()
	n     int64

	flushEarly bool
}

func (b *respBody) Read(p []byte) (int, error) {
	if b.flushEarly {
		if err := b.flush(); err != nil {
			return 0, err
		}
	}
	b.c.SetWriteDeadline(time.Now().Add(b.g.cfg.IdleTimeout))
	n, err := b.src.Read(p)
	if n > 0 {
		if !b.g.reserve(n) {
			return 0, errByteLimit
		}
		b.n += int64(n)
		b.touch()
	}
	return n, err
}

func (b *respBody) Close() error { return b.src.Close() }

// flush sends what the client's writers hold, the outermost first.
func (b *respBody) flush() error {
	for _, w := range b.bw {
		if w.Buffered() > 0 {
			if err := w.Flush(); err != nil {
				return err
			}
		}
	}
	return nil
}
