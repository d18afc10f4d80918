package gateway

import (
	"io"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

const (
	// spliceMax is the most one splice moves, and the size a tunnel's
	// pipe grows to once a read fills the pipe it started with.
	spliceMax = 1 << 20
	// pipeStart is a new pipe's capacity (the kernel's default): a tunnel
	// that never carries bulk keeps it, and with it the user's pipe quota
	// (pipe-user-pages-soft), which counts a pipe's size, not its use.
	pipeStart = 64 << 10
)

// splicer moves a tunnel's bytes between two stream sockets through a pipe
// with splice(2): the kernel hands the socket buffers' pages on without
// copying them through the gateway, which for plain traffic halves the
// copies of a relayed byte. Its loop is the copy loop's: a read (into the
// pipe), the byte budget reserved for exactly what was read, a write (out
// of the pipe), under the same deadlines.
type splicer struct {
	src, dst syscall.RawConn
	pr, pw   int // the pipe's read and write ends
	grown    bool
}

// newSplicer returns a splicer from src to dst, or nil when either is not
// a TCP or unix stream socket or no pipe can be made (the caller copies).
func newSplicer(dst, src net.Conn) *splicer {
	drc, ok1 := streamSocket(dst)
	src2, ok2 := streamSocket(src)
	if !ok1 || !ok2 {
		return nil
	}
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		return nil
	}
	splicing.Add(1)
	return &splicer{src: src2, dst: drc, pr: p[0], pw: p[1]}
}

// streamSocket is c's raw connection when c is a TCP socket or a unix
// stream socket (the gateway's listeners for a gVisor sandbox).
func streamSocket(c net.Conn) (syscall.RawConn, bool) {
	var sc syscall.Conn
	switch c := c.(type) {
	case *net.TCPConn:
		sc = c
	case *net.UnixConn:
		if c.LocalAddr().Network() != "unix" {
			return nil, false // unixgram, unixpacket: messages, not a stream
		}
		sc = c
	default:
		return nil, false
	}
	rc, err := sc.SyscallConn()
	return rc, err == nil
}

func (s *splicer) close() {
	unix.Close(s.pr)
	unix.Close(s.pw)
}

// fill moves what src has (up to limit bytes) into the empty pipe, waiting
// for src to be readable within its read deadline. 0 and nil is the end
// of src's stream.
func (s *splicer) fill(limit int) (int, error) {
	var n int64
	var serr error
	err := s.src.Read(func(fd uintptr) bool {
		for {
			n, serr = unix.Splice(int(fd), nil, s.pw, nil, limit, unix.SPLICE_F_MOVE|unix.SPLICE_F_NONBLOCK)
			if serr != unix.EINTR {
				return serr != unix.EAGAIN
			}
		}
	})
	if err != nil {
		return 0, err
	}
	if serr != nil {
		return 0, os.NewSyscallError("splice", serr)
	}
	if !s.grown && n >= pipeStart {
		// Bulk: a larger pipe moves more per system call. When the host
		// refuses (the user's pipe quota), the pipe stays as it is.
		s.grown = true
		unix.FcntlInt(uintptr(s.pw), unix.F_SETPIPE_SZ, spliceMax)
	}
	return int(n), nil
}

// drain moves up to n bytes from the pipe to dst, waiting for dst to be
// writable within its write deadline, and returns as soon as it moved some
// and would wait again: the caller renews the deadline, so a slow reader
// that takes more than it to drain a MiB is not idle.
func (s *splicer) drain(n int) (int, error) {
	var done int
	var serr error
	err := s.dst.Write(func(fd uintptr) bool {
		for done < n {
			m, e := unix.Splice(s.pr, nil, int(fd), nil, n-done, unix.SPLICE_F_MOVE|unix.SPLICE_F_NONBLOCK)
			switch {
			case m > 0:
				done += int(m)
			case e == unix.EINTR:
			case e == unix.EAGAIN:
				return done > 0
			case e != nil:
				serr = e
				return true
			default: // the pipe ran dry, which it cannot
				serr = io.ErrUnexpectedEOF
				return true
			}
		}
		return true
	})
	if err == nil && serr != nil {
		err = os.NewSyscallError("splice", serr)
	}
	return done, err
}

// splicePump is pump's loop for two stream sockets, once a tunnel carries
// bulk; ok is false when they cannot be spliced (nothing was read: the
// caller copies).
func (t *tunnel) splicePump(dst, src net.Conn, n *atomic.Int64) (ok bool, err error) {
	s := newSplicer(dst, src)
	if s == nil {
		return false, nil
	}
	defer s.close()
	for {
		src.SetReadDeadline(time.Now().Add(t.idle))
		m, rerr := s.fill(spliceMax)
		if m == 0 {
			if rerr == nil {
				rerr = io.EOF
			}
			if err := t.readEnd(dst, rerr); err != errAgain {
				return true, err
			}
			continue
		}
		t.touch()
		if err := s.pass(t.g, dst, m, t.idle, func(d int) { n.Add(int64(d)); t.touch() }); err != nil {
			return true, err
		}
	}
}

// pass sends the m bytes fill put in the pipe on to dst. A splice reads up
// to a MiB at once: what the byte budget has left of it goes, so that the
// budget is spent to its last byte (the copy loop's reads are small enough
// to drop whole); fewer than m allowed trips the gateway and ends with
// errByteLimit. Each drain has a write deadline of idle from its start,
// and moved hears of every byte count it moved.
func (s *splicer) pass(g *Gateway, dst net.Conn, m int, idle time.Duration, moved func(int)) error {
	k := g.reserveUpTo(m)
	for w := 0; w < k; {
		dst.SetWriteDeadline(time.Now().Add(idle))
		d, err := s.drain(k - w)
		w += d
		moved(d)
		if err != nil {
			return err
		}
	}
	if k < m {
		g.trip()
		return errByteLimit
	}
	return nil
}

// peerOpen reports whether a kept connection can carry another request:
// the peer has neither closed it nor sent anything unasked (a peek that
// would block). A connection that is not a socket is taken as open.
func peerOpen(c net.Conn) bool {
	rc, ok := streamSocket(c)
	if !ok {
		return true
	}
	open := false
	err := rc.Read(func(fd uintptr) bool {
		var b [1]byte
		for {
			_, _, err := unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
			if err != unix.EINTR {
				open = err == unix.EAGAIN
				return true // never wait
			}
		}
	})
	return err == nil && open
}

// splice sends the next n bytes of a plain-HTTP response body, the whole
// of a body whose length is known, from its upstream socket to the
// client's socket through a pipe (see splicer), after the head and
// anything already read from upstream. ok is false when it cannot (not a
// body read from an upstream socket, a small one, or sockets that cannot
// be spliced): nothing was read, the caller copies. The byte budget, the
// idle watchdog and the client's write deadline apply as in Read.
func (b *respBody) splice(n int64) (done int64, ok bool, err error) {
	ub, isUp := b.src.(*upBody)
	if !isUp || ub.eof || n <= smallBody {
		return 0, false, nil
	}
	s := newSplicer(b.c.Conn, ub.uc.nc)
	if s == nil {
		return 0, false, nil
	}
	defer s.close()
	if err := b.flush(); err != nil {
		return 0, true, err
	}
	// What the head's read took in already goes through the buffer.
	if k := int64(ub.uc.br.Buffered()); k > 0 {
		bp := bufPool.Get().(*[]byte)
		defer bufPool.Put(bp)
		w := b.bw[len(b.bw)-1] // the client's own writer
		for k = min(k, n); done < k; {
			m, err := b.Read((*bp)[:min(int64(len(*bp)), k-done)])
			if m > 0 {
				w.Write((*bp)[:m])
				done += int64(m)
			}
			if err != nil {
				return done, true, err
			}
		}
		if err := w.Flush(); err != nil {
			return done, true, err
		}
	}
	for done < n {
		// No read deadline: the request's idle watchdog closes the
		// upstream connection when neither side moves for the idle time.
		m, err := s.fill(int(min(n-done, spliceMax)))
		if err != nil {
			return done, true, err
		}
		if m == 0 {
			return done, true, io.ErrUnexpectedEOF
		}
		b.touch()
		moved := func(d int) { done += int64(d); b.n += int64(d); b.touch() }
		if err := s.pass(b.g, b.c.Conn, m, b.g.cfg.IdleTimeout, moved); err != nil {
			return done, true, err
		}
	}
	ub.eof = true // all of it: the connection may serve another request
	return done, true, nil
}
