package gateway

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

const relayBuf = 32 << 10

var bufPool = sync.Pool{New: func() any { b := make([]byte, relayBuf); return &b }}

// splicing counts the tunnel directions relayed with splice(2) (Linux,
// TCP or unix stream sockets on both sides) since the process started;
// tests read it to know which path ran.
var splicing atomic.Int64

var (
	errIdle      = errors.New("idle timeout")
	errByteLimit = errors.New("byte limit reached")
)

// refusal is a tunnel refused after it was set up (by its first bytes).
type refusal struct{ rule, detail string }

func (r *refusal) Error() string { return r.rule }

// tunnel relays bytes between a client connection and its upstream.
type tunnel struct {
	g        *Gateway
	idle     time.Duration
	last     atomic.Int64 // unix nanos of the last byte either way
	sent     atomic.Int64 // client -> upstream
	received atomic.Int64 // upstream -> client
}

// relay runs a tunnel until both sides are done, one fails, or it idles.
// prefix is client data already read (forwarded first). check, when
// non-nil, reads and judges the client's first bytes before any of them
// is forwarded (the upstream side is relayed meanwhile). It returns the
// first error that ended the tunnel (nil for a clean close), which is a
// *refusal when check refused.
func (g *Gateway) relay(c *conn, up net.Conn, prefix []byte, check func(*tunnel) ([]byte, error)) (sent, received int64, err error) {
	t := &tunnel{g: g, idle: g.cfg.IdleTimeout}
	t.touch()
	down := make(chan error, 1)
	go func() {
		err := t.pump(c.Conn, up, &t.received, nil, nil)
		if err != nil {
			c.Conn.Close()
			up.Close()
		}
		down <- err
	}()
	upErr := t.pump(up, c.Conn, &t.sent, prefix, check)
	if upErr != nil {
		c.Conn.Close()
		up.Close()
	}
	downErr := <-down
	c.Conn.Close()
	up.Close()
	err = upErr
	if err == nil || (errors.Is(err, net.ErrClosed) && downErr != nil) {
		err = downErr
	}
	return t.sent.Load(), t.received.Load(), err
}

func (t *tunnel) touch() { t.last.Store(time.Now().UnixNano()) }

func (t *tunnel) idleFor() time.Duration { return time.Duration(time.Now().UnixNano() - t.last.Load()) }

// pump copies src to dst; at src's EOF it half-closes dst and returns nil.
func (t *tunnel) pump(dst, src net.Conn, n *atomic.Int64, first []byte, check func(*tunnel) ([]byte, error)) error {
	if check != nil {
		data, err := check(t)
		if err != nil {
			return err
		}
		first = append(first, data...)
	}
	if len(first) > 0 {
		if err := t.write(dst, first, n); err != nil {
			return err
		}
	}
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	buf := *bp
	canSplice := true
	for {
		src.SetReadDeadline(time.Now().Add(t.idle))
		m, rerr := src.Read(buf)
		if m > 0 {
			if err := t.write(dst, buf[:m], n); err != nil {
				return err
			}
		}
		if rerr == nil {
			// A read that filled the buffer is bulk: from here on, two
			// stream sockets are spliced. A tunnel that never carries
			// bulk (handshakes, requests, an idle stream) keeps no pipe.
			if m == len(buf) && canSplice {
				ok, err := t.splicePump(dst, src, n)
				if ok {
					return err
				}
				canSplice = false
			}
			continue
		}
		if err := t.readEnd(dst, rerr); !errors.Is(err, errAgain) {
			return err
		}
	}
}

// errAgain: the read that failed timed out while the other direction was
// busy; read on.
var errAgain = errors.New("read again")

// readEnd decides what a failed read of a tunnel's source means: a
// deadline while the tunnel is not idle (errAgain), the idle timeout, the
// end of the stream (dst half-closed, nil), or an error that ends the
// tunnel.
func (t *tunnel) readEnd(dst net.Conn, rerr error) error {
	var ne net.Error
	if errors.As(rerr, &ne) && ne.Timeout() {
		if t.idleFor() < t.idle {
			return errAgain // the other direction is busy
		}
		return errIdle
	}
	if errors.Is(rerr, io.EOF) {
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			cw.CloseWrite()
			return nil
		}
		return errors.New("peer closed") // cannot half-close: end the tunnel
	}
	return rerr
}

func (t *tunnel) write(dst net.Conn, p []byte, n *atomic.Int64) error {
	t.touch()
	if !t.g.reserve(len(p)) {
		return errByteLimit
	}
	dst.SetWriteDeadline(time.Now().Add(t.idle))
	w, err := dst.Write(p)
	n.Add(int64(w))
	t.touch()
	return err
}

// firstBytesCheck returns the check relay runs on a tunnel's first client
// bytes when they were not read before dialing: it reads a ClientHello (or
// decides the stream is not TLS) and refuses a mismatch.
func (g *Gateway) firstBytesCheck(c *conn, tg target) func(*tunnel) ([]byte, error) {
	return func(t *tunnel) ([]byte, error) {
		data, st, info, err := sniff(c.Conn, c.Conn, t.idle, g.cfg.HeaderTimeout)
		for errors.Is(err, errNoBytes) {
			if t.idleFor() >= t.idle {
				return nil, errIdle
			}
			data, st, info, err = sniff(c.Conn, c.Conn, t.idle, g.cfg.HeaderTimeout)
		}
		if err != nil {
			if len(data) == 0 && errors.Is(err, io.EOF) {
				return nil, nil // closed without sending: a clean end
			}
			return nil, &refusal{rule: "bad ClientHello", detail: err.Error()}
		}
		if rule := g.helloRule(tg, st, info); rule != "" {
			return nil, &refusal{rule: rule}
		}
		return data, nil
	}
}

// endTunnel fills the tail of a tunnel's record.
func endTunnel(rec *Record, c *conn, sent, received int64, err error) {
	rec.BytesUp, rec.BytesDown = sent, received
	var rf *refusal
	switch {
	case errors.As(err, &rf):
		rec.Allowed, rec.Rule, rec.Error = false, rf.rule, rf.detail
	case err != nil:
		rec.Error = err.Error()
	}
	c.finish(rec)
}

// readClientFirst reads the client's first bytes before dialing (so a bad
// ClientHello never reaches upstream). It returns the bytes to forward and
// whether relay still has to check them (the client had not spoken within
// the first-byte wait on a port other than 443).
func (g *Gateway) readClientFirst(c *conn, r io.Reader, tg target) (data []byte, later bool, err error) {
	wait := g.cfg.HeaderTimeout
	if tg.port != 443 {
		wait = min(firstBytesWait, wait)
	}
	data, st, info, err := sniff(r, c.Conn, wait, g.cfg.HeaderTimeout)
	switch {
	case errors.Is(err, errNoBytes) && tg.port != 443:
		return nil, true, nil
	case errors.Is(err, errNoBytes):
		return nil, false, &refusal{rule: "not TLS: no ClientHello", detail: fmt.Sprintf("the client sent nothing for %v", wait)}
	case err != nil:
		if len(data) == 0 {
			return nil, false, err
		}
		return nil, false, &refusal{rule: "bad ClientHello", detail: err.Error()}
	}
	if rule := g.helloRule(tg, st, info); rule != "" {
		return nil, false, &refusal{rule: rule}
	}
	return data, false, nil
}
