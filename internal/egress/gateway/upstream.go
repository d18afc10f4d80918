package gateway

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Bounds of the plain-HTTP proxy's kept upstream connections.
const (
	maxIdleUp        = 64
	maxIdleUpPerAddr = 8
	idleUpTimeout    = 90 * time.Second
	upReadBuf        = 64 << 10
	upWriteBuf       = 16 << 10
	// max1xx bounds the informational responses dropped before the final
	// one of a request.
	max1xx = 32
)

// upPool is the plain-HTTP proxy's client of origin servers: HTTP/1.1,
// one request at a time on a connection, and connections kept per checked
// address for later requests. It does the work net/http's Transport did
// here so that a large response body can be spliced from the upstream
// socket to the client's (the Transport reads every body through its own
// buffer, a copy in and a copy out of the gateway) and so that a request
// is written and its answer read on the handler's own goroutine.
type upPool struct {
	dial func(ctx context.Context, ap netip.AddrPort) (net.Conn, error)

	mu     sync.Mutex
	idle   map[netip.AddrPort][]*upConn // per address, the most recent last
	nidle  int
	closed bool
}

func newUpPool(dial func(ctx context.Context, ap netip.AddrPort) (net.Conn, error)) *upPool {
	return &upPool{dial: dial, idle: make(map[netip.AddrPort][]*upConn)}
}

// upConn is one upstream connection, in use by one request or idle.
type upConn struct {
	u      *upPool
	nc     net.Conn
	br     *bufio.Reader
	bw     *bufio.Writer
	ap     netip.AddrPort
	reused bool      // it served an earlier request
	idleAt time.Time // when it was last put back

	// Of the request in progress:
	stop  func() bool   // unregisters the context's close
	wrote chan struct{} // closed when a request with a body was written (nil: no body)
	werr  atomic.Pointer[error]
}

// roundTrip sends req to ap and reads the head of its final response. The
// response's body reads from the connection; reading it to its end and
// closing it gives the connection back for another request, closing it
// before closes the connection. ctx's end closes the connection, whatever
// the exchange is doing. A failure to connect is a *dialError.
func (u *upPool) roundTrip(ctx context.Context, ap netip.AddrPort, req *http.Request) (*http.Response, error) {
	for try := 0; ; try++ {
		uc, err := u.get(ctx, ap)
		if err != nil {
			return nil, err
		}
		resp, err := uc.exchange(ctx, req)
		if err == nil {
			return resp, nil
		}
		uc.stop()
		uc.nc.Close()
		// A kept connection the server closed meanwhile: once more on a
		// new one, for a request that may be sent twice.
		if try == 0 && uc.reused && replayable(req) && ctx.Err() == nil && closedByPeer(err) {
			continue
		}
		return nil, err
	}
}

// replayable reports whether req may be sent again after a failure that
// may have reached the server (net/http's rule: no body, and a method
// that changes nothing, or an idempotency key).
func replayable(req *http.Request) bool {
	if req.Body != nil && req.Body != http.NoBody {
		return false
	}
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	_, k1 := req.Header["Idempotency-Key"]
	_, k2 := req.Header["X-Idempotency-Key"]
	return k1 || k2
}

// closedByPeer reports whether err is the server ending the connection
// before a response.
func closedByPeer(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// get returns a kept connection to ap that is still open, or dials one.
func (u *upPool) get(ctx context.Context, ap netip.AddrPort) (*upConn, error) {
	for {
		uc := u.take(ap)
		if uc == nil {
			break
		}
		if uc.br.Buffered() == 0 && peerOpen(uc.nc) {
			uc.reused = true
			return uc, nil
		}
		uc.nc.Close()
	}
	dctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	nc, err := u.dial(dctx, ap)
	if err != nil {
		return nil, &dialError{err}
	}
	return &upConn{u: u, nc: nc, br: bufio.NewReaderSize(nc, upReadBuf), bw: bufio.NewWriterSize(nc, upWriteBuf), ap: ap}, nil
}

// take removes and returns the most recently kept connection to ap, or
// nil; connections kept too long are closed on the way.
func (u *upPool) take(ap netip.AddrPort) *upConn {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.expireLocked(time.Now())
	l := u.idle[ap]
	if len(l) == 0 {
		return nil
	}
	uc := l[len(l)-1]
	l[len(l)-1] = nil
	if len(l) == 1 {
		delete(u.idle, ap)
	} else {
		u.idle[ap] = l[:len(l)-1]
	}
	u.nidle--
	return uc
}

// put keeps uc for a later request, unless the bounds are reached.
func (u *upPool) put(uc *upConn) {
	uc.stop, uc.wrote, uc.reused = nil, nil, false
	uc.werr.Store(nil)
	uc.idleAt = time.Now()
	u.mu.Lock()
	defer u.mu.Unlock()
	u.expireLocked(uc.idleAt)
	if u.closed || u.nidle >= maxIdleUp || len(u.idle[uc.ap]) >= maxIdleUpPerAddr {
		uc.nc.Close()
		return
	}
	u.idle[uc.ap] = append(u.idle[uc.ap], uc)
	u.nidle++
}

// expireLocked closes the connections kept longer than idleUpTimeout.
func (u *upPool) expireLocked(now time.Time) {
	for ap, l := range u.idle {
		i := 0
		for i < len(l) && now.Sub(l[i].idleAt) >= idleUpTimeout {
			l[i].nc.Close()
			i++
		}
		if i == 0 {
			continue
		}
		u.nidle -= i
		if i == len(l) {
			delete(u.idle, ap)
		} else {
			u.idle[ap] = append(l[:0], l[i:]...)
		}
	}
}

// close closes the kept connections; later ones are closed when put.
func (u *upPool) close() {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.closed = true
	for _, l := range u.idle {
		for _, uc := range l {
			uc.nc.Close()
		}
	}
	clear(u.idle)
	u.nidle = 0
}

// exchange writes req and reads the head of its final response. A request
// with a body is written on a goroutine of its own, so that a server that
// answers before reading all of it (413, say) is heard.
func (uc *upConn) exchange(ctx context.Context, req *http.Request) (*http.Response, error) {
	nc := uc.nc
	uc.stop = context.AfterFunc(ctx, func() { nc.Close() })
	if req.Body != nil && req.Body != http.NoBody {
		uc.wrote = make(chan struct{})
		go func() {
			defer close(uc.wrote)
			if err := uc.write(req); err != nil {
				uc.werr.Store(&err)
				// The request cannot be completed (its body failed on the
				// client's side): stop waiting for an answer. A failed
				// write upstream leaves the connection to the reader: the
				// server may have answered before it closed.
				var oe *net.OpError
				if !errors.As(err, &oe) || oe.Op != "write" {
					nc.Close()
				}
			}
		}()
	} else if err := uc.write(req); err != nil {
		return nil, err
	}
	for n := 0; ; n++ {
		resp, err := http.ReadResponse(uc.br, req)
		if err != nil {
			if werr := uc.werr.Load(); werr != nil {
				err = *werr // the reason the connection was closed
			}
			return nil, err
		}
		if resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols {
			b := &upBody{uc: uc, rc: resp.Body, keep: !resp.Close}
			b.eof = resp.Body == http.NoBody
			resp.Body = b
			return resp, nil
		}
		if n+1 == max1xx {
			return nil, fmt.Errorf("more than %d informational (1xx) responses", max1xx-1)
		}
	}
}

func (uc *upConn) write(req *http.Request) error {
	if err := req.Write(uc.bw); err != nil {
		return err
	}
	return uc.bw.Flush()
}

// release ends a request's use of uc: kept for the next request when
// reuse holds and nothing of the exchange is pending, closed otherwise.
func (uc *upConn) release(reuse bool) {
	if uc.stop != nil && !uc.stop() {
		reuse = false // the context ended: the connection is closed
	}
	if uc.wrote != nil {
		select {
		case <-uc.wrote:
			reuse = reuse && uc.werr.Load() == nil
		default:
			reuse = false // still writing: the body was not read to its end
		}
	}
	if !reuse || uc.br.Buffered() > 0 {
		uc.nc.Close()
		return
	}
	uc.u.put(uc)
}

// upBody is a response's body as read from its upstream connection.
type upBody struct {
	uc   *upConn
	rc   io.ReadCloser // as http.ReadResponse reads it
	keep bool          // the response lets the connection serve another
	eof  bool          // read to its end
	done bool
}

func (b *upBody) Read(p []byte) (int, error) {
	if b.eof {
		return 0, io.EOF
	}
	n, err := b.rc.Read(p)
	if err == io.EOF {
		b.eof = true
	}
	return n, err
}

// Close gives the connection back when the body was read to its end, and
// closes it otherwise (net/http's body would read the rest first).
func (b *upBody) Close() error {
	if !b.done {
		b.done = true
		b.uc.release(b.eof && b.keep)
	}
	return nil
}
