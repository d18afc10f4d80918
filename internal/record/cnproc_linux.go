package record

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// The kernel's proc connector (linux/connector.h, linux/cn_proc.h): a
// netlink multicast of every fork, exec and exit on the host, with kernel
// timestamps (CLOCK_MONOTONIC). Subscribing needs CAP_NET_ADMIN.
const (
	cnIdxProc         = 1 // CN_IDX_PROC
	cnValProc         = 1 // CN_VAL_PROC
	procCnMcastListen = 1 // PROC_CN_MCAST_LISTEN
	procCnMcastIgnore = 2 // PROC_CN_MCAST_IGNORE

	procEventNone = 0x00000000
	procEventFork = 0x00000001
	procEventExec = 0x00000002
	procEventExit = 0x80000000

	cnMsgLen  = 20 // struct cn_msg: cb_id{idx,val} seq ack len(u16) flags(u16)
	rcvBuffer = 32 << 20
)

// Connector is a subscribed proc connector socket (non-blocking).
type Connector struct {
	fd  int
	buf []byte
}

// connEvent is one decoded proc event.
type connEvent struct {
	what uint32
	at   uint64
	a, b uint32 // fork: parent pid, parent tgid; exec, exit: pid, tgid
	c, d uint32 // fork: child pid, child tgid; exit: exit code, exit signal
	err  uint32 // none (ack): err
}

// OpenConnector subscribes to the proc connector and waits (up to 2 s) for
// the kernel's acknowledgement, so that a refusal is an error here and
// not a silent absence of events later.
func OpenConnector() (*Connector, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_CONNECTOR)
	if err != nil {
		return nil, fmt.Errorf("netlink connector socket: %w", err)
	}
	c := &Connector{fd: fd, buf: make([]byte, 1<<16)}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, rcvBuffer); err != nil {
		unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, rcvBuffer)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: cnIdxProc, Pid: 0}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("bind the proc connector group: %w", err)
	}
	const seq = 0x61697231
	if err := c.control(procCnMcastListen, seq); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("subscribe to the proc connector: %w", err)
	}
	// The acknowledgement (PROC_EVENT_NONE with the request's sequence).
	tv := unix.NsecToTimeval(int64(100 * time.Millisecond))
	unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	deadline := time.Now().Add(2 * time.Second)
	acked := false
	for !acked && time.Now().Before(deadline) {
		n, _, err := unix.Recvfrom(fd, c.buf, 0)
		if err != nil {
			if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) || errors.Is(err, unix.ENOBUFS) {
				continue
			}
			unix.Close(fd)
			return nil, fmt.Errorf("read the proc connector: %w", err)
		}
		for _, m := range splitNetlink(c.buf[:n]) {
			if len(m) < cnMsgLen+16 {
				continue
			}
			// The kernel does not echo the request's sequence in every
			// version: the first acknowledgement after it is ours.
			ev, ok := decodeProcEvent(m[cnMsgLen:])
			if ok && ev.what == procEventNone {
				if ev.err != 0 {
					unix.Close(fd)
					return nil, fmt.Errorf("the proc connector refused the subscription: %w", unix.Errno(ev.err))
				}
				acked = true
			}
		}
	}
	if !acked {
		c.control(procCnMcastIgnore, seq+1)
		unix.Close(fd)
		return nil, errors.New("the proc connector did not acknowledge the subscription within 2s")
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

func (c *Connector) control(op uint32, seq uint32) error {
	msg := make([]byte, unix.NLMSG_HDRLEN+cnMsgLen+4)
	binary.NativeEndian.PutUint32(msg[0:], uint32(len(msg)))
	binary.NativeEndian.PutUint16(msg[4:], unix.NLMSG_DONE)
	binary.NativeEndian.PutUint32(msg[8:], seq)
	binary.NativeEndian.PutUint32(msg[12:], uint32(os.Getpid()))
	cn := msg[unix.NLMSG_HDRLEN:]
	binary.NativeEndian.PutUint32(cn[0:], cnIdxProc)
	binary.NativeEndian.PutUint32(cn[4:], cnValProc)
	binary.NativeEndian.PutUint32(cn[8:], seq)
	binary.NativeEndian.PutUint16(cn[16:], 4)
	binary.NativeEndian.PutUint32(cn[cnMsgLen:], op)
	return unix.Sendto(c.fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK})
}

// Close unsubscribes and closes the socket.
func (c *Connector) Close() {
	if c.fd >= 0 {
		c.control(procCnMcastIgnore, 0)
		unix.Close(c.fd)
		c.fd = -1
	}
}

// drain reads every queued message without blocking, passing each event
// to fn; an overflow (ENOBUFS) is passed as lost=true.
func (c *Connector) drain(fn func(ev connEvent), lost func()) error {
	for {
		n, _, err := unix.Recvfrom(c.fd, c.buf, 0)
		if err != nil {
			switch {
			case errors.Is(err, unix.EAGAIN):
				return nil
			case errors.Is(err, unix.EINTR):
				continue
			case errors.Is(err, unix.ENOBUFS):
				lost()
				continue
			}
			return err
		}
		for _, m := range splitNetlink(c.buf[:n]) {
			if len(m) < cnMsgLen {
				continue
			}
			if ev, ok := decodeProcEvent(m[cnMsgLen:]); ok {
				fn(ev)
			}
		}
	}
}

// splitNetlink returns the payloads (after the header) of the netlink
// messages in b.
func splitNetlink(b []byte) [][]byte {
	var out [][]byte
	for len(b) >= unix.NLMSG_HDRLEN {
		l := int(binary.NativeEndian.Uint32(b[0:4]))
		if l < unix.NLMSG_HDRLEN || l > len(b) {
			break
		}
		out = append(out, b[unix.NLMSG_HDRLEN:l])
		al := (l + unix.NLMSG_ALIGNTO - 1) &^ (unix.NLMSG_ALIGNTO - 1)
		if al > len(b) {
			break
		}
		b = b[al:]
	}
	return out
}

// decodeProcEvent decodes struct proc_event: what, cpu, timestamp_ns, then
// the event's data.
func decodeProcEvent(b []byte) (connEvent, bool) {
	if len(b) < 32 {
		return connEvent{}, false
	}
	u32 := func(off int) uint32 { return binary.NativeEndian.Uint32(b[off:]) }
	ev := connEvent{what: u32(0), at: binary.NativeEndian.Uint64(b[8:])}
	switch ev.what {
	case procEventNone:
		ev.err = u32(16)
	case procEventFork, procEventExit:
		ev.a, ev.b, ev.c, ev.d = u32(16), u32(20), u32(24), u32(28)
	case procEventExec:
		ev.a, ev.b = u32(16), u32(20)
	default:
		return ev, false
	}
	return ev, true
}
