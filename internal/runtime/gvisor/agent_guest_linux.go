package gvisor

// The in-sandbox side of a service sandbox (Runtime.Agent): the container's
// PID 1 is airlock's agent (internal/agent, the same server as in native
// sandboxes), reached by the supervisor over a host unix socket.
//
// The socket: the init binds and listens on guestAgent/agent.sock, a
// directory of the host (the sandbox's state directory) bound read-write
// into the sandbox, which runsc (--host-uds=create) turns into a socket on
// the host, in the supervisor's state directory. Then the init covers that
// directory with an empty read-only tmpfs and drops the only capabilities it
// had (CAP_SYS_ADMIN for that mount, CAP_SETPCAP to empty its bounding
// set) from every thread, before anything
// else runs in the sandbox: no process of the sandbox ever sees the host
// directory (nothing can be written to the host through it), while the
// listening socket stays bound, so a restarted supervisor connects again
// (adoption after kill -9).

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/internal/agent"
	"github.com/airlock-dev/airlock/internal/seccomp"
)

const (
	guestAgent   = guestDir + "/agent"
	agentSocket  = "agent.sock"
	portsSocket  = "ports.sock"
	agentModeArg = "agent"
)

// listenerFD and portsFD are where the agent's listening sockets come
// across the init's re-execution (see agentMain).
const (
	listenerFD = 3
	portsFD    = 4
)

// agentMain is InitMain in agent mode; it never returns. It runs twice:
// first with CAP_SYS_ADMIN and CAP_SETPCAP, to make the socket, cover its
// directory and empty its thread's capability bounding set, then (after
// executing itself from that thread, with --stage2) with no capability at
// all: root's execve gives it its bounding set, now empty.
func agentMain(args []string) {
	var fwd []string
	withSeccomp, stage2 := false, false
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--forward="); ok {
			fwd = append(fwd, v)
		}
		switch a {
		case "--seccomp":
			withSeccomp = true
		case "--stage2":
			stage2 = true
		}
	}
	die := func(step string, err error) {
		fmt.Fprintf(os.Stderr, "airlock init: %s: %v\n", step, err)
		os.Exit(1)
	}
	if !stage2 {
		goruntime.LockOSThread()
		l, err := listenAgent(filepath.Join(guestAgent, agentSocket), unix.SOCK_SEQPACKET)
		if err != nil {
			die("agent socket", err)
		}
		pl, err := listenAgent(filepath.Join(guestAgent, portsSocket), unix.SOCK_STREAM)
		if err != nil {
			die("ports socket", err)
		}
		if err := unix.Mount("tmpfs", guestAgent, "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=4096,mode=000"); err != nil {
			die("hide the agent directory", err)
		}
		for c := 0; c <= unix.CAP_LAST_CAP; c++ {
			if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil && err != unix.EINVAL {
				die("drop capabilities", err)
			}
		}
		for _, x := range []struct {
			f  *os.File
			fd int
		}{{l, listenerFD}, {pl, portsFD}} {
			if fd := int(x.f.Fd()); fd == x.fd {
				_, err = unix.FcntlInt(uintptr(fd), unix.F_SETFD, 0)
			} else {
				err = unix.Dup3(fd, x.fd, 0)
			}
			if err != nil {
				die("agent sockets", err)
			}
		}
		argv := append([]string{guestInit, InitArg, agentModeArg, "--stage2"}, args...)
		die("re-execute", unix.Exec(guestInit, argv, os.Environ()))
	}
	unix.CloseOnExec(listenerFD)
	unix.CloseOnExec(portsFD)
	// The Sentry does not spare its PID 1 a stop signal sent from inside
	// (Linux ignores one that the init has no handler for, and Go leaves
	// these three at their default): a `kill -TSTP 1` from a command froze
	// the agent and so the whole sandbox. Caught here, on a goroutine (a
	// round trip between the runtime's threads each), and dropped; a
	// command still gets them at their default, as handlers do not survive
	// an execve. (SIGSTOP and SIGKILL cannot be caught: README, Backends.)
	go func() {
		stops := make(chan os.Signal, 4)
		signal.Notify(stops, unix.SIGTSTP, unix.SIGTTIN, unix.SIGTTOU)
		for range stops {
		}
	}()
	l := os.NewFile(listenerFD, "agent-listener")
	if pl, err := net.FileListener(os.NewFile(portsFD, "ports-listener")); err == nil {
		go servePorts(pl)
	}
	if err := noCapabilities(); err != nil {
		die("capabilities", err)
	}
	if err := startForwarders(fwd); err != nil {
		die("egress", err)
	}
	if withSeccomp {
		// The agent runs under the policy's filter like everything it
		// starts (as in native sandboxes).
		filter, err := guestFilter()
		if err == nil {
			err = seccomp.Install(filter)
		}
		if err != nil {
			die("seccomp", err)
		}
	}
	// The first supervisor; later ones come through the server's
	// reconnect on the same listener.
	var fd int
	var err error
	for {
		fd, _, err = unix.Accept4(listenerFD, unix.SOCK_CLOEXEC)
		if err != unix.EINTR && err != unix.ECONNABORTED {
			break
		}
	}
	if err != nil {
		die("accept", err)
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		die("accept", err)
	}
	agent.NewServer(agent.NewConn(os.NewFile(uintptr(fd), "control")), l).Serve()
	os.Exit(0)
}

// servePorts relays each connection of the supervisor on the ports
// socket to a TCP port on the sandbox's loopback (port previews): the
// supervisor writes the port as a decimal line, the agent answers "ok" or
// "error MESSAGE" on a line, then relays. The connection comes from the
// host; the sandbox gains no way out.
func servePorts(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
			line, err := bufio.NewReader(io.LimitReader(c, 16)).ReadString('\n')
			c.SetReadDeadline(time.Time{})
			port, perr := strconv.Atoi(strings.TrimSpace(line))
			if err != nil || perr != nil || port < 1 || port > 65535 {
				io.WriteString(c, "error bad port\n")
				return
			}
			u, err := net.DialTimeout("tcp4", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), 5*time.Second)
			if err != nil {
				io.WriteString(c, "error "+strings.ReplaceAll(err.Error(), "\n", " ")+"\n")
				return
			}
			if _, err := io.WriteString(c, "ok\n"); err != nil {
				u.Close()
				return
			}
			splice(c, u)
		}()
	}
}

// listenAgent binds a unix socket of type typ at path, mode 0600.
func listenAgent(path string, typ int) (*os.File, error) {
	fd, err := unix.Socket(unix.AF_UNIX, typ|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	old := unix.Umask(0o177)
	err = unix.Bind(fd, &unix.SockaddrUnix{Name: path})
	unix.Umask(old)
	if err == nil {
		err = unix.Listen(fd, 4)
	}
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	return os.NewFile(uintptr(fd), path), nil
}

// noCapabilities checks that this process holds no capability.
func noCapabilities() error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var got [2]unix.CapUserData
	if err := unix.Capget(&hdr, &got[0]); err != nil {
		return err
	}
	if got != [2]unix.CapUserData{} {
		return fmt.Errorf("capabilities left after the re-execution: %+v", got)
	}
	for c := 0; c <= unix.CAP_LAST_CAP; c++ {
		if r, err := unix.PrctlRetInt(unix.PR_CAPBSET_READ, uintptr(c), 0, 0, 0); err == nil && r == 1 {
			return fmt.Errorf("capability %d left in the bounding set", c)
		}
	}
	return nil
}
