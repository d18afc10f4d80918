package gateway

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"time"
)

// SOCKS5 (RFC 1928) constants the gateway speaks.
const (
	socksVersion  = 5
	authNone      = 0x00
	authNoneFound = 0xff

	cmdConnect      = 1
	cmdBind         = 2
	cmdUDPAssociate = 3

	atypIPv4   = 1
	atypDomain = 3
	atypIPv6   = 4

	repSucceeded          = 0x00
	repGeneralFailure     = 0x01
	repNotAllowed         = 0x02
	repHostUnreachable    = 0x04
	repConnectionRefused  = 0x05
	repCommandUnsupported = 0x07
	repAddrUnsupported    = 0x08
)

var socksCommands = map[byte]string{cmdConnect: "CONNECT", cmdBind: "BIND", cmdUDPAssociate: "UDP ASSOCIATE"}

// serveSOCKSConn serves one SOCKS5 connection: no authentication, CONNECT
// only. Anything else (SOCKS4, garbage) is closed; BIND and UDP ASSOCIATE
// get "command not supported".
func (g *Gateway) serveSOCKSConn(c *conn) {
	start := time.Now()
	rec := Record{Time: start, Proto: "socks"}
	defer func() {
		rec.Duration = time.Since(start)
		c.finish(&rec)
		g.audit(rec)
	}()
	c.SetDeadline(start.Add(g.headerTimeout(c)))
	br := bufio.NewReaderSize(c.Conn, 512)
	tg, cmd, err := socksHandshake(c, br)
	rec.Method, rec.Host, rec.Port = socksCommands[cmd], tg.host, tg.port
	if err != nil {
		rec.Error = "socks: " + err.Error()
		if c.refuse != "" {
			rec.Rule = c.refuse
		}
		return
	}
	reply := func(code byte) {
		c.SetWriteDeadline(time.Now().Add(g.cfg.HeaderTimeout))
		// The bound address is never the gateway's own: the sandbox has no
		// business knowing it.
		c.Write([]byte{socksVersion, code, 0, atypIPv4, 0, 0, 0, 0, 0, 0})
	}
	if cmd != cmdConnect {
		rec.Rule = "command not supported: only CONNECT is (no UDP, no BIND)"
		reply(repCommandUnsupported)
		return
	}
	if c.refuse != "" {
		rec.Rule = c.refuse
		reply(repNotAllowed)
		return
	}
	v := g.check(c.ctx, tg)
	switch v.fail {
	case failDenied:
		rec.Rule = v.rule
		if v.deniedAddr.IsValid() {
			rec.Addr = v.deniedAddr.String()
		}
		reply(repNotAllowed)
		return
	case failUnresolved:
		rec.Error = "resolve: " + v.err.Error()
		reply(repHostUnreachable)
		return
	}
	rec.Allowed, rec.Rule = true, v.rule
	if g.interceptFor(tg) != nil {
		// Inspected: the gateway answers the TLS itself and connects per
		// request, so nothing is dialed yet.
		reply(repSucceeded)
		c.SetDeadline(time.Time{})
		hello, err := g.readHello(c, br, tg)
		if err != nil {
			endTunnel(&rec, c, 0, 0, err)
			return
		}
		g.interceptTLS(c, &rec, tg, v, hello)
		return
	}
	up, ap, err := g.dial(c.ctx, &v)
	rec.Addr = ap.String()
	if err != nil {
		rec.Error = "dial: " + err.Error()
		reply(repConnectionRefused)
		return
	}
	reply(repSucceeded)
	c.SetDeadline(time.Time{})
	var prefix []byte
	if n := br.Buffered(); n > 0 {
		prefix, _ = br.Peek(n)
	}
	// The upstream is already connected (SOCKS replies after connecting),
	// so the client's first bytes are checked in the relay, before any of
	// them is forwarded. Buffered bytes are checked with them.
	check := g.firstBytesCheck(c, tg)
	if len(prefix) > 0 {
		check = g.prefixedCheck(c, tg, append([]byte(nil), prefix...))
		prefix = nil
	}
	g.startTunnel(c, &rec, tg, up, ap, &v, prefix, check)
}

// prefixedCheck is firstBytesCheck for a client whose first bytes were
// already buffered: it reads on from them.
func (g *Gateway) prefixedCheck(c *conn, tg target, buffered []byte) func(*tunnel) ([]byte, error) {
	return func(*tunnel) ([]byte, error) {
		r := io.MultiReader(&onceReader{b: buffered}, c.Conn)
		data, st, info, err := sniff(r, c.Conn, g.cfg.HeaderTimeout, g.cfg.HeaderTimeout)
		if err != nil {
			return nil, &refusal{rule: "bad ClientHello", detail: err.Error()}
		}
		if rule := g.helloRule(tg, st, info); rule != "" {
			return nil, &refusal{rule: rule}
		}
		return data, nil
	}
}

type onceReader struct{ b []byte }

func (r *onceReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p, r.b)
	r.b = r.b[n:]
	return n, nil
}

// socksHandshake reads the greeting and the request. It answers the
// greeting itself; the request's reply is the caller's.
func socksHandshake(c *conn, br *bufio.Reader) (target, byte, error) {
	var hdr [2]byte
	if _, err := io.ReadFull(br, hdr[:]); err != nil {
		return target{}, 0, err
	}
	if hdr[0] != socksVersion {
		return target{}, 0, fmt.Errorf("version %d: only SOCKS5 is served", hdr[0])
	}
	methods := make([]byte, hdr[1])
	if _, err := io.ReadFull(br, methods); err != nil {
		return target{}, 0, err
	}
	found := false
	for _, m := range methods {
		found = found || m == authNone
	}
	if !found {
		c.Write([]byte{socksVersion, authNoneFound})
		return target{}, 0, errors.New("the client offers no method without authentication")
	}
	if _, err := c.Write([]byte{socksVersion, authNone}); err != nil {
		return target{}, 0, err
	}
	var req [4]byte
	if _, err := io.ReadFull(br, req[:]); err != nil {
		return target{}, 0, err
	}
	if req[0] != socksVersion {
		return target{}, 0, fmt.Errorf("request version %d", req[0])
	}
	cmd := req[1]
	var host string
	switch req[3] {
	case atypIPv4, atypIPv6:
		b := make([]byte, 4)
		if req[3] == atypIPv6 {
			b = make([]byte, 16)
		}
		if _, err := io.ReadFull(br, b); err != nil {
			return target{}, 0, err
		}
		ip, _ := netip.AddrFromSlice(b)
		host = ip.String()
	case atypDomain:
		n, err := br.ReadByte()
		if err != nil {
			return target{}, 0, err
		}
		b := make([]byte, n)
		if _, err := io.ReadFull(br, b); err != nil {
			return target{}, 0, err
		}
		host = string(b)
	default:
		c.Write([]byte{socksVersion, repAddrUnsupported, 0, atypIPv4, 0, 0, 0, 0, 0, 0})
		return target{}, 0, fmt.Errorf("address type %d", req[3])
	}
	var pb [2]byte
	if _, err := io.ReadFull(br, pb[:]); err != nil {
		return target{}, 0, err
	}
	port := int(binary.BigEndian.Uint16(pb[:]))
	if _, ok := socksCommands[cmd]; !ok {
		c.Write([]byte{socksVersion, repCommandUnsupported, 0, atypIPv4, 0, 0, 0, 0, 0, 0})
		return target{}, 0, fmt.Errorf("command %d", cmd)
	}
	if cmd != cmdConnect {
		// Not dialed: the destination needs no validation beyond display.
		return target{host: cleanRule(host), port: port}, cmd, nil
	}
	tg, err := parseTarget(host, port)
	if err != nil {
		c.Write([]byte{socksVersion, repHostUnreachable, 0, atypIPv4, 0, 0, 0, 0, 0, 0})
		return target{host: cleanRule(host), port: port}, cmd, err
	}
	return tg, cmd, nil
}
