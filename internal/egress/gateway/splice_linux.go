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
		// A splice reads up to a MiB at once: what the byte budget has
		// left of it goes, so that the budget is spent to its last byte
		// (the copy loop's reads are small enough to drop whole).
		k := t.g.reserveUpTo(m)
		for w := 0; w < k; {
			dst.SetWriteDeadline(time.Now().Add(t.idle))
			d, err := s.drain(k - w)
			w += d
			n.Add(int64(d))
			t.touch()
			if err != nil {
				return true, err
			}
		}
		if k < m {
			t.g.trip()
			return true, errByteLimit
		}
	}
}
