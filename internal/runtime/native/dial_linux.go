package native

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/internal/runtime"
)

var _ runtime.PortDialer = (*sandbox)(nil)

// DialPort implements runtime.PortDialer: it connects to 127.0.0.1:port in
// the sandbox's network namespace. The socket is made on a locked thread
// that entered the namespace (and left it again), and checked to belong to
// it, so the connection starts inside the sandbox and ends in this process:
// the sandbox gets no new way out, only an incoming connection.
func (sb *sandbox) DialPort(ctx context.Context, port int) (net.Conn, error) {
	if port < 1 || port > 65535 {
		return nil, fmt.Errorf("port %d: want 1 to 65535: %w", port, runtime.ErrInvalid)
	}
	sb.pidfdMu.Lock()
	pidfd := sb.initPidFD
	if pidfd < 0 {
		sb.pidfdMu.Unlock()
		return nil, errors.New("the sandbox's init is gone")
	}
	nsfd, err := unix.Open(fmt.Sprintf("/proc/%d/ns/net", sb.initPid), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err == nil {
		// The pid still named the init when the namespace was opened.
		if err = unix.PidfdSendSignal(pidfd, 0, nil, 0); err != nil {
			unix.Close(nsfd)
			err = fmt.Errorf("the sandbox's init is gone: %w", err)
		}
	} else {
		err = fmt.Errorf("open the sandbox's network namespace: %w", err)
	}
	sb.pidfdMu.Unlock()
	if err != nil {
		return nil, err
	}
	defer unix.Close(nsfd)
	var target, self unix.Stat_t
	if err := unix.Fstat(nsfd, &target); err != nil {
		return nil, err
	}
	if err := unix.Stat("/proc/self/ns/net", &self); err != nil {
		return nil, err
	}
	if sameFile(&target, &self) {
		return nil, errors.New("the sandbox shares this process's network namespace; refusing to dial in it")
	}
	var conn net.Conn
	err = inNetns(nsfd, &target, func() error {
		// The socket is created by this goroutine, on this thread, so in
		// the sandbox's namespace; loopback connects at once.
		d := net.Dialer{Timeout: 5 * time.Second}
		c, err := d.DialContext(ctx, "tcp4", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			return err
		}
		conn = c
		return nil
	})
	if err != nil {
		if conn != nil {
			conn.Close()
		}
		return nil, err
	}
	if err := checkConnNetns(conn, &target); err != nil {
		conn.Close()
		return nil, err
	}
	return conn, nil
}

// checkConnNetns checks that conn's socket belongs to the namespace want.
func checkConnNetns(conn net.Conn, want *unix.Stat_t) error {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return errors.New("not a socket")
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return err
	}
	var cerr error
	if err := rc.Control(func(fd uintptr) { cerr = checkSocketNetns(int(fd), want) }); err != nil {
		return err
	}
	return cerr
}
