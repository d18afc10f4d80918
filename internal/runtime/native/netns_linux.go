package native

import (
	"errors"
	"fmt"
	"net"
	"os"
	goruntime "runtime"

	"golang.org/x/sys/unix"
)

// Re-making a sandbox's Spec.Listen sockets from the supervisor, for a
// sandbox adopted after its previous supervisor died: the listeners that
// supervisor held died with it. The init cannot bind them again (it has
// dropped every privilege and runs under seccomp, and nothing inside the
// sandbox is trusted to hand the supervisor a socket), so the supervisor
// enters the sandbox's network namespace on one locked thread, makes the
// sockets there, and comes back.

// siocgskns is SIOCGSKNS: a descriptor of the network namespace a socket
// belongs to.
const siocgskns = 0x894C

// ListenError is a listening socket that could not be made again inside an
// adopted sandbox's network namespace. With Err EADDRINUSE, something inside
// the sandbox bound the address while no supervisor held it.
type ListenError struct {
	Addr string
	Err  error
}

func (e *ListenError) Error() string {
	msg := fmt.Sprintf("listen on %s inside the sandbox again: %v", e.Addr, e.Err)
	if errors.Is(e.Err, unix.EADDRINUSE) {
		msg += " (a process inside the sandbox bound it while no supervisor held it; refusing to serve the sandbox's proxies from anything else)"
	}
	return msg
}

func (e *ListenError) Unwrap() error { return e.Err }

// listenInNetns makes listening TCP sockets on addrs inside the network
// namespace of pid, a sandbox's init that pidfd refers to. The sockets are
// checked to belong to that namespace, never to this process's own.
func listenInNetns(pid, pidfd int, addrs []string) (_ []net.Listener, retErr error) {
	nsfd, err := unix.Open(fmt.Sprintf("/proc/%d/ns/net", pid), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open the sandbox's network namespace: %w", err)
	}
	defer unix.Close(nsfd)
	// The pid named the init when the namespace was opened: the pidfd's
	// process still exists (a pid is reused only once it is reaped).
	if err := unix.PidfdSendSignal(pidfd, 0, nil, 0); err != nil {
		return nil, fmt.Errorf("the sandbox's init is gone: %w", err)
	}
	var target, self unix.Stat_t
	if err := unix.Fstat(nsfd, &target); err != nil {
		return nil, err
	}
	if err := unix.Stat("/proc/self/ns/net", &self); err != nil {
		return nil, err
	}
	if sameFile(&target, &self) {
		return nil, errors.New("the sandbox shares this process's network namespace; refusing to listen in it")
	}

	var fds []int // -1 once closed or owned by a listener in ls
	var ls []net.Listener
	defer func() {
		if retErr != nil {
			for _, fd := range fds {
				if fd >= 0 {
					unix.Close(fd)
				}
			}
			for _, l := range ls {
				l.Close()
			}
		}
	}()
	err = inNetns(nsfd, &target, func() error {
		for _, addr := range addrs {
			fd, err := listenTCP(addr)
			if err != nil {
				return &ListenError{Addr: addr, Err: err}
			}
			fds = append(fds, fd)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for i, fd := range fds {
		// The socket's own namespace, from the kernel: the proof that it
		// listens inside the sandbox.
		if err := checkSocketNetns(fd, &target); err != nil {
			return nil, &ListenError{Addr: addrs[i], Err: err}
		}
		f := os.NewFile(uintptr(fd), "listener")
		l, err := net.FileListener(f) // a duplicate
		f.Close()
		fds[i] = -1
		if err != nil {
			return nil, &ListenError{Addr: addrs[i], Err: err}
		}
		ls = append(ls, l)
	}
	return ls, nil
}

// inNetns runs fn on a locked OS thread that has entered the network
// namespace nsfd (whose inode is want), then returns the thread to this
// process's namespace. If it cannot go back, the thread stays locked and
// ends with its goroutine, so that no other goroutine ever runs in the
// sandbox's namespace.
func inNetns(nsfd int, want *unix.Stat_t, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		goruntime.LockOSThread()
		self := fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid())
		orig, err := unix.Open(self, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			goruntime.UnlockOSThread()
			errc <- fmt.Errorf("open this thread's network namespace: %w", err)
			return
		}
		defer unix.Close(orig)
		if err := unix.Setns(nsfd, unix.CLONE_NEWNET); err != nil {
			goruntime.UnlockOSThread()
			errc <- fmt.Errorf("enter the sandbox's network namespace: %w", err)
			return
		}
		var now unix.Stat_t
		ferr := unix.Stat(self, &now)
		if ferr == nil && !sameFile(&now, want) {
			ferr = errors.New("this thread is not in the sandbox's network namespace after setns")
		}
		if ferr == nil {
			ferr = fn()
		}
		var back, origSt unix.Stat_t
		err = unix.Setns(orig, unix.CLONE_NEWNET)
		if err == nil {
			err = unix.Fstat(orig, &origSt)
		}
		if err == nil {
			err = unix.Stat(self, &back)
		}
		if err == nil && !sameFile(&back, &origSt) {
			err = errors.New("still in another namespace")
		}
		if err != nil {
			// Still locked: the thread exits with this goroutine.
			errc <- errors.Join(ferr, fmt.Errorf("return to the supervisor's network namespace: %w", err))
			return
		}
		goruntime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// checkSocketNetns checks that socket fd belongs to the network namespace
// whose inode is want.
func checkSocketNetns(fd int, want *unix.Stat_t) error {
	ns, err := unix.IoctlRetInt(fd, siocgskns)
	if err != nil {
		return fmt.Errorf("the socket's network namespace (SIOCGSKNS): %w", err)
	}
	defer unix.Close(ns)
	var st unix.Stat_t
	if err := unix.Fstat(ns, &st); err != nil {
		return err
	}
	if !sameFile(&st, want) {
		return errors.New("the socket is not in the sandbox's network namespace")
	}
	return nil
}

func sameFile(a, b *unix.Stat_t) bool { return a.Dev == b.Dev && a.Ino == b.Ino }
