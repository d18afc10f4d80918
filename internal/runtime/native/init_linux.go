package native

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	goruntime "runtime"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/internal/agent"
	"github.com/airlock-dev/airlock/internal/seccomp"
)

// controlFD is where the sandbox's init finds its end of the control channel.
const controlFD = 3

// layerError ties an error to the isolation layer that could not be applied.
type layerError struct {
	layer string
	err   error
}

func (e *layerError) Error() string { return e.err.Error() }

func inLayer(layer string, err error) error {
	if err == nil {
		return nil
	}
	var le *layerError
	if errors.As(err, &le) {
		return err
	}
	return &layerError{layer: layer, err: err}
}

// The init's main goroutine must run on the process's main thread, the
// one whose id is the PID, locked there from the start: Landlock gives each
// thread its own domain, its signal scope lets a process signal only tasks
// of its own domain or below, and kill(1, ...) from a command is checked
// against that thread. Go runs package initialisers on the main thread with
// the main goroutine locked to it; locking it here keeps it there into
// InitMain, where a lock taken after a blocking system call could find the
// goroutine moved to another thread (a command's signal to its init was
// then refused, now and then, with EPERM).
func init() {
	if len(os.Args) > 1 && (os.Args[1] == InitArg || os.Args[1] == ResumeArg) {
		goruntime.LockOSThread()
	}
}

// InitMain is the entry point of a sandbox's init (PID 1 of its PID
// namespace). It receives the setup from the supervisor, builds the root
// filesystem, applies every isolation layer to itself (all threads), and then
// serves the control channel as the sandbox's agent. It never returns.
func InitMain() {
	// The cgroup namespace is unshared on this thread, and every process
	// the agent starts is forked from it (the agent's request loop runs on
	// the main goroutine, which stays locked here).
	goruntime.LockOSThread()
	if unix.Gettid() != unix.Getpid() {
		fmt.Fprintln(os.Stderr, "airlock init: not on the process's main thread, where Landlock's signal scope needs it")
		os.Exit(121)
	}
	// Nothing the init holds, the control channel included, may leak into
	// the processes it starts; they get exactly the three stdio descriptors.
	if err := unix.CloseRange(controlFD, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err != nil {
		os.Exit(121)
	}
	if err := unix.SetNonblock(controlFD, true); err != nil {
		os.Exit(121)
	}
	conn := agent.NewConn(os.NewFile(controlFD, "control"))
	// Caught while the setup is on its way and applied.
	sigs := agent.CatchSignalsAsInit()
	ready, listener, err := initSandbox(conn)
	if err != nil {
		layer := layerNamespaces
		var le *layerError
		if errors.As(err, &le) {
			layer = le.layer
		}
		conn.Send(&agent.Message{Type: agent.TypeError, Error: &agent.Error{Layer: layer, Message: err.Error()}})
		os.Exit(1)
	}
	if err := conn.Send(&agent.Message{Type: agent.TypeReady, Ready: ready}, handedOut...); err != nil {
		os.Exit(1)
	}
	// The supervisor holds the listeners now; nothing in here keeps them,
	// except, in a detached sandbox, the exec listener: if its last
	// descriptor closed (the daemon killed), every exec in the sandbox
	// would fail with ENOSYS instead of waiting for the next daemon, which
	// takes this copy back with pidfd_getfd. It stays close-on-exec, and
	// the init is not dumpable, so nothing in the sandbox (no
	// capabilities) reaches it through /proc/1/fd or pidfd_getfd.
	for _, fd := range handedOut {
		if fd != ready.ExecListenerFD {
			unix.Close(fd)
		}
	}
	handedOut = nil
	srv := agent.NewServer(conn, listener)
	srv.Signals = sigs
	srv.Sleep = sleepFunc(listener)
	srv.Serve()
	os.Exit(0)
}

func initSandbox(conn *agent.Conn) (*agent.Ready, *os.File, error) {
	ready, listener, err := initSandboxSteps(conn)
	if err != nil && listener != nil {
		listener.Close()
		listener = nil
	}
	return ready, listener, err
}

func initSandboxSteps(conn *agent.Conn) (_ *agent.Ready, listener *os.File, _ error) {
	m, files, err := conn.Recv()
	if err != nil {
		return nil, nil, fmt.Errorf("read setup: %w", err)
	}
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	if m.Type != agent.TypeSetup {
		return nil, nil, fmt.Errorf("first message is %q, want setup", m.Type)
	}
	var s setup
	if err := s.decode(m.Setup); err != nil {
		return nil, nil, fmt.Errorf("decode setup: %w", err)
	}
	want := len(s.IDMapped)
	if s.Detached {
		want++
	}
	if s.Sleep {
		want += 2
	}
	if len(files) != want {
		return nil, nil, fmt.Errorf("setup names %d descriptors but carried %d", want, len(files))
	}
	if s.Detached {
		// The listening socket for later supervisors comes last; it must
		// outlive this function (the deferred close skips it).
		listener = files[len(files)-1]
		files = files[:len(files)-1]
	}
	if s.Sleep {
		// The two programs follow the idmapped descriptors; kept for as
		// long as the agent lives (close-on-exec, as every descriptor
		// here).
		n := len(s.IDMapped)
		sleeper, agentProgram = files[n], files[n+1]
		files = append(files[:n:n], files[n+2:]...)
	}
	idmapped := map[string]*os.File{}
	for i, name := range s.IDMapped {
		idmapped[name] = files[i]
	}

	ready := &agent.Ready{Steps: map[string]int64{}}
	step := func(name string, t0 time.Time) { ready.Steps[name] = int64(time.Since(t0)) }

	t0 := time.Now()
	if err := unix.Unshare(unix.CLONE_NEWCGROUP); err != nil {
		return nil, nil, inLayer(layerNamespaces, fmt.Errorf("unshare cgroup namespace: %w", err))
	}
	if err := unix.Sethostname([]byte(s.Hostname)); err != nil {
		return nil, nil, inLayer(layerNamespaces, fmt.Errorf("sethostname: %w", err))
	}
	if err := loopbackUp(); err != nil {
		return nil, nil, inLayer(layerNamespaces, fmt.Errorf("bring up loopback: %w", err))
	}
	for _, addr := range s.Listen {
		fd, err := listenTCP(addr)
		if err != nil {
			return nil, nil, inLayer(layerNamespaces, fmt.Errorf("listen on %s inside the sandbox: %w", addr, err))
		}
		handedOut = append(handedOut, fd)
	}
	step("namespaces", t0)

	t0 = time.Now()
	last := time.Now()
	placeholders, err := buildRoot(&s, idmapped, func(name string) {
		now := time.Now()
		ready.Steps[name] = int64(now.Sub(last))
		last = now
	})
	if err != nil {
		return nil, nil, inLayer(layerFilesystem, err)
	}
	ready.Placeholders = placeholders
	ready.RootFD = keptRoot
	step("mounts", t0)

	if err := setRlimits(&s); err != nil {
		return nil, nil, inLayer(layerRlimits, err)
	}
	t0 = time.Now()
	if err := dropPrivileges(); err != nil {
		return nil, nil, inLayer(layerCaps, err)
	}
	step("capabilities", t0)

	if !s.NoLandlock {
		t0 = time.Now()
		var rw []string
		for _, m := range s.Mounts {
			if m.Writable && m.Dir {
				rw = append(rw, m.Target)
			}
		}
		abi, err := applyLandlock(rw)
		if err != nil {
			return nil, nil, inLayer(layerLandlock, err)
		}
		ready.LandlockABI = abi
		step("landlock", t0)
	}
	if s.ExecNotify {
		// Before the policy's filter (which may refuse seccomp(2) itself).
		// The listener goes to the supervisor with the ready message and
		// is closed here once sent; it is close-on-exec until then.
		t0 = time.Now()
		prog, err := seccomp.ExecNotifyFilter()
		if err == nil {
			var fd int
			if fd, err = seccomp.InstallListener(prog); err == nil {
				handedOut = append(handedOut, fd)
				if s.Detached {
					ready.ExecListenerFD = fd
				}
			}
		}
		if err != nil {
			return nil, nil, inLayer(layerRecord, err)
		}
		step("record", t0)
	}
	if !s.NoSeccomp {
		t0 = time.Now()
		if err := applySeccomp(s.Seccomp); err != nil {
			return nil, nil, inLayer(layerSeccomp, err)
		}
		step("seccomp", t0)
	}
	return ready, listener, nil
}

// loopbackUp brings up lo, the only interface of the sandbox's network
// namespace, so that servers inside the sandbox can talk to each other.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}

// handedOut are the listening sockets (Spec.Listen) that go to the
// supervisor with the ready message.
var handedOut []int

// listenTCP makes a listening TCP socket on addr ("127.0.0.1:3128") in
// this network namespace, with SO_REUSEADDR: the previous listener's
// accepted connections may linger (TIME_WAIT, or FIN_WAIT after a daemon
// stopped) on the address, which must not block listening again (Adopt);
// a socket still listening there (something inside the sandbox) does.
func listenTCP(addr string) (int, error) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return -1, err
	}
	family := unix.AF_INET6
	var sa unix.Sockaddr = &unix.SockaddrInet6{Port: int(ap.Port()), Addr: ap.Addr().As16()}
	if ap.Addr().Is4() {
		family = unix.AF_INET
		sa = &unix.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}
	}
	fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); err != nil {
		unix.Close(fd)
		return -1, err
	}
	if err := unix.Bind(fd, sa); err != nil {
		unix.Close(fd)
		return -1, err
	}
	if err := unix.Listen(fd, 128); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}
