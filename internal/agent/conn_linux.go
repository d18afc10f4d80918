package agent

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// Conn is one end of the control channel: a SOCK_SEQPACKET unix socket.
type Conn struct {
	f   *os.File
	oob []byte
}

// recvBufs holds receive buffers of a whole packet's size. A Conn takes
// one only while a packet is there to read and gives it back once parsed
// (nothing parsed points into it), so a daemon with many sandboxes, whose
// channels sit idle waiting, holds a few of them instead of one each.
var recvBufs = sync.Pool{New: func() any { b := make([]byte, maxPacket+1); return &b }}

// NewConn wraps a connected SOCK_SEQPACKET socket.
func NewConn(f *os.File) *Conn {
	// A packet with a payload (SendPayload) needs a send buffer larger
	// than some systems' default; where this is refused, such packets
	// fall back to plain messages.
	if rc, err := f.SyscallConn(); err == nil {
		rc.Control(func(fd uintptr) {
			unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUF, 2*maxPacket)
		})
	}
	return &Conn{f: f, oob: make([]byte, unix.CmsgSpace(16*4))}
}

// File returns the underlying socket.
func (c *Conn) File() *os.File { return c.f }

// Close closes the channel.
func (c *Conn) Close() error { return c.f.Close() }

// Send writes one message with optional file descriptors.
func (c *Conn) Send(m *Message, fds ...int) error {
	b, err := m.MarshalJSON()
	if err != nil {
		return err
	}
	if len(b) > MaxMessage {
		return fmt.Errorf("control message of %d bytes exceeds %d", len(b), MaxMessage)
	}
	if len(b) > inlineMax {
		spill, err := spillFile(b)
		if err != nil {
			return err
		}
		defer spill.Close()
		header, _ := (&Message{Type: m.Type, Spill: true}).MarshalJSON()
		err = c.send(header, append([]int{int(spill.Fd())}, fds...))
		if err == nil || len(fds) > 0 || len(b) > inlineFallback {
			return err
		}
		// A channel that carries no descriptors out (a host socket of
		// gVisor's): the message inline, if the packet is taken.
	}
	return c.send(b, fds)
}

// SendPayload sends a data answer with its bytes outside the JSON, in the
// same packet after a NUL byte (which JSON never holds), sparing both ends
// base64 and the JSON scanner. It is for an agent whose supervisor asked
// for it (ReadRequest.Raw). An error leaves the caller to send d as a
// plain message, e.g. when the socket's send buffer cannot take the
// packet.
func (c *Conn) SendPayload(d *Data) error {
	if len(d.Data) > MaxPayload {
		return fmt.Errorf("payload of %d bytes exceeds %d", len(d.Data), MaxPayload)
	}
	h := *d
	h.Data, h.Raw = nil, len(d.Data)
	b, err := (&Message{Type: TypeData, Data: &h}).MarshalJSON()
	if err != nil {
		return err
	}
	rc, err := c.f.SyscallConn()
	if err != nil {
		return err
	}
	bufs := [][]byte{b, {0}, d.Data}
	var serr error
	werr := rc.Write(func(fd uintptr) bool {
		_, serr = unix.SendmsgBuffers(int(fd), bufs, nil, nil, 0)
		return serr != unix.EAGAIN
	})
	if werr != nil {
		return werr
	}
	return serr
}

// spillFile returns a memfd holding b, positioned at its start.
func spillFile(b []byte) (*os.File, error) {
	fd, err := unix.MemfdCreate("airlock-control", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("control message: memfd: %w", err)
	}
	f := os.NewFile(uintptr(fd), "airlock-control")
	if _, err := f.Write(b); err != nil {
		f.Close()
		return nil, err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

func (c *Conn) send(b []byte, fds []int) error {
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	rc, err := c.f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	werr := rc.Write(func(fd uintptr) bool {
		serr = unix.Sendmsg(int(fd), b, oob, nil, 0)
		return serr != unix.EAGAIN
	})
	if werr != nil {
		return werr
	}
	return serr
}

// Recv reads one message and the file descriptors that came with it. The
// caller owns the returned files.
func (c *Conn) Recv() (*Message, []*os.File, error) {
	rc, err := c.f.SyscallConn()
	if err != nil {
		return nil, nil, err
	}
	var n, oobn int
	var rerr error
	var bp *[]byte
	err = rc.Read(func(fd uintptr) bool {
		bp = recvBufs.Get().(*[]byte)
		n, oobn, _, _, rerr = unix.Recvmsg(int(fd), *bp, c.oob, unix.MSG_CMSG_CLOEXEC)
		if rerr == unix.EAGAIN {
			recvBufs.Put(bp)
			bp = nil
			return false
		}
		return true
	})
	if bp != nil {
		defer recvBufs.Put(bp)
	}
	if err != nil {
		return nil, nil, err
	}
	if rerr != nil {
		return nil, nil, rerr
	}
	buf := *bp
	var files []*os.File
	if oobn > 0 {
		scms, err := unix.ParseSocketControlMessage(c.oob[:oobn])
		if err != nil {
			return nil, nil, err
		}
		for _, scm := range scms {
			fds, err := unix.ParseUnixRights(&scm)
			if err != nil {
				continue
			}
			for _, fd := range fds {
				files = append(files, os.NewFile(uintptr(fd), "fd"))
			}
		}
	}
	if n == 0 {
		closeAll(files)
		return nil, nil, ErrClosed
	}
	if i := bytes.IndexByte(buf[:n], 0); i >= 0 {
		m, err := parsePayload(buf[:i], buf[i+1:n])
		if err != nil {
			closeAll(files)
			return nil, nil, err
		}
		return m, files, nil
	}
	if n > inlineFallback {
		closeAll(files)
		return nil, nil, fmt.Errorf("bad control message: inline message over %d bytes", inlineFallback)
	}
	var m Message
	if err := m.UnmarshalJSON(buf[:n]); err != nil {
		closeAll(files)
		return nil, nil, fmt.Errorf("bad control message: %w", err)
	}
	if !m.Spill {
		return &m, files, nil
	}
	// The message is in the first descriptor.
	if len(files) == 0 {
		return nil, nil, errors.New("bad control message: spilled without a descriptor")
	}
	spill := files[0]
	files = files[1:]
	b, err := io.ReadAll(io.LimitReader(spill, MaxMessage+1))
	spill.Close()
	if err == nil && len(b) > MaxMessage {
		err = fmt.Errorf("over %d bytes", MaxMessage)
	}
	var inner Message
	if err == nil {
		err = inner.UnmarshalJSON(b)
	}
	if err == nil && inner.Spill {
		err = errors.New("spilled twice")
	}
	if err != nil {
		closeAll(files)
		return nil, nil, fmt.Errorf("bad spilled control message: %w", err)
	}
	return &inner, files, nil
}

// parsePayload parses a packet of SendPayload: a data answer whose bytes
// follow its JSON.
func parsePayload(header, payload []byte) (*Message, error) {
	var m Message
	if len(header) > inlineMax {
		return nil, fmt.Errorf("bad control message: header over %d bytes", inlineMax)
	}
	if err := m.UnmarshalJSON(header); err != nil {
		return nil, fmt.Errorf("bad control message: %w", err)
	}
	if m.Type != TypeData || m.Data == nil || m.Spill || len(m.Data.Data) > 0 || m.Data.Raw != len(payload) {
		return nil, fmt.Errorf("bad control message: a %q message with a payload of %d bytes", m.Type, len(payload))
	}
	m.Data.Data, m.Data.Raw = bytes.Clone(payload), 0
	return &m, nil
}

func closeAll(files []*os.File) {
	for _, f := range files {
		f.Close()
	}
}

// SocketPair returns a connected SOCK_SEQPACKET pair, both ends close-on-exec.
func SocketPair() (a, b *os.File, err error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("socketpair: %w", err)
	}
	return os.NewFile(uintptr(fds[0]), "control"), os.NewFile(uintptr(fds[1]), "control"), nil
}
