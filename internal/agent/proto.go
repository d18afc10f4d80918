// Package agent owns the control protocol between airlock (the supervisor) and
// the agent that runs as PID 1 inside every sandbox, and the agent's side of it:
// starting processes on request, forwarding signals, reaping zombies.
//
// The agent is untrusted by design: it runs inside the jail, under the same
// seccomp filter, Landlock domain and capability set as the code it starts.
// Nothing that must be trusted (policy, audit, secrets) may live here, and the
// supervisor must treat every message from it as input from the sandbox.
package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Message types. The supervisor sends setup, exec and signal; the agent
// answers with ready or error (to setup), started or error (to exec) and
// sends exit when a process it started has ended.
const (
	TypeSetup   = "setup"
	TypeReady   = "ready"
	TypeError   = "error"
	TypeExec    = "exec"
	TypeStarted = "started"
	TypeExit    = "exit"
	TypeSignal  = "signal"
)

// MaxMessage bounds one control message. Messages travel over a
// SOCK_SEQPACKET socket pair, one message per packet.
const MaxMessage = 1 << 20

// Message is one control message. Exactly the field that matches Type is set.
type Message struct {
	Type string `json:"type"`

	// Setup is opaque to this package: the runtime that created the sandbox
	// defines its shape and decodes it in the sandbox's init.
	Setup json.RawMessage `json:"setup,omitempty"`

	Ready   *Ready       `json:"ready,omitempty"`
	Error   *Error       `json:"error,omitempty"`
	Exec    *ExecRequest `json:"exec,omitempty"`
	Started *Started     `json:"started,omitempty"`
	Exit    *Exit        `json:"exit,omitempty"`
	Signal  *Signal      `json:"signal,omitempty"`
}

// Ready reports a finished sandbox setup.
type Ready struct {
	LandlockABI int `json:"landlock_abi"`
	// Placeholders are workspace paths (relative) that setup created so that
	// protected paths which did not exist could be mounted read-only. The
	// supervisor removes them at teardown if they are still empty.
	Placeholders []string `json:"placeholders,omitempty"`
	// Steps is the time in nanoseconds each setup step took inside the sandbox.
	Steps map[string]int64 `json:"steps,omitempty"`
}

// Error reports a failure. Layer names the isolation layer or step that failed.
type Error struct {
	ID      uint64 `json:"id,omitempty"`
	Layer   string `json:"layer,omitempty"`
	Message string `json:"message"`
}

func (e *Error) Error() string {
	if e.Layer != "" {
		return e.Layer + ": " + e.Message
	}
	return e.Message
}

// ExecRequest asks the agent to start a process. Without TTY the request
// carries three file descriptors (stdin, stdout, stderr); with TTY it carries
// none and the agent answers with the pseudo-terminal's master.
type ExecRequest struct {
	ID   uint64   `json:"id"`
	Argv []string `json:"argv"`
	Env  []string `json:"env"`
	Dir  string   `json:"dir"`
	TTY  bool     `json:"tty,omitempty"`
	Rows uint16   `json:"rows,omitempty"`
	Cols uint16   `json:"cols,omitempty"`
}

// Started confirms a process start; with TTY it carries the master fd.
type Started struct {
	ID  uint64 `json:"id"`
	Pid int    `json:"pid"`
}

// Exit reports how a process ended: Code for a normal exit, Signal (non-zero)
// when it was killed by a signal.
type Exit struct {
	ID     uint64 `json:"id"`
	Code   int    `json:"code"`
	Signal int    `json:"signal,omitempty"`
}

// Signal asks the agent to deliver a signal to a process's process group.
type Signal struct {
	ID     uint64 `json:"id"`
	Signal int    `json:"signal"`
}

// Conn is one end of the control channel: a SOCK_SEQPACKET unix socket.
type Conn struct {
	f   *os.File
	buf []byte
	oob []byte
}

// NewConn wraps a connected SOCK_SEQPACKET socket.
func NewConn(f *os.File) *Conn {
	return &Conn{f: f, buf: make([]byte, MaxMessage), oob: make([]byte, unix.CmsgSpace(16*4))}
}

// File returns the underlying socket.
func (c *Conn) File() *os.File { return c.f }

// Close closes the channel.
func (c *Conn) Close() error { return c.f.Close() }

// Send writes one message with optional file descriptors.
func (c *Conn) Send(m *Message, fds ...int) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	if len(b) > MaxMessage {
		return fmt.Errorf("control message of %d bytes exceeds %d", len(b), MaxMessage)
	}
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

// ErrClosed is returned by Recv when the peer closed the channel.
var ErrClosed = errors.New("control channel closed")

// Recv reads one message and the file descriptors that came with it. The
// caller owns the returned files.
func (c *Conn) Recv() (*Message, []*os.File, error) {
	rc, err := c.f.SyscallConn()
	if err != nil {
		return nil, nil, err
	}
	var n, oobn int
	var rerr error
	err = rc.Read(func(fd uintptr) bool {
		n, oobn, _, _, rerr = unix.Recvmsg(int(fd), c.buf, c.oob, unix.MSG_CMSG_CLOEXEC)
		return rerr != unix.EAGAIN
	})
	if err != nil {
		return nil, nil, err
	}
	if rerr != nil {
		return nil, nil, rerr
	}
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
	var m Message
	if err := json.Unmarshal(c.buf[:n], &m); err != nil {
		closeAll(files)
		return nil, nil, fmt.Errorf("bad control message: %w", err)
	}
	return &m, files, nil
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
