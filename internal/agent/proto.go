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
	// TypeHello is the first request of a supervisor that adopts a running
	// sandbox; the agent answers TypeState.
	TypeHello = "hello"
	TypeState = "state"
	// TypeRead asks for captured output; the agent answers TypeData.
	// TypeRelease drops a finished process's captured output.
	TypeRead    = "read"
	TypeData    = "data"
	TypeRelease = "release"
	// TypeFile is a file operation done by the agent inside the sandbox
	// (so paths resolve in the sandbox's own view); it answers
	// TypeFileResult.
	TypeFile       = "file"
	TypeFileResult = "file_result"
	// TypeStdin writes to (or closes) the stdin of a captured process; the
	// agent answers TypeAck once the bytes are in the pipe.
	TypeStdin = "stdin"
	TypeAck   = "ack"
	// TypeHold renews, moves or releases an attached reader's hold on a
	// captured stream (see ReadRequest.Reader); it has no answer.
	TypeHold = "hold"
	// TypeSleep asks an idle agent to give its place as PID 1 to a program
	// of a few pages until the next request (Server.Sleep); its Ack
	// carries the sequence, and the agent answers TypeAck, with an Error
	// when it stays awake (something runs, or it cannot sleep).
	TypeSleep = "sleep"
)

// Version is the agent's protocol version, reported in State so that a
// supervisor adopting a sandbox started by an older binary knows what it
// understands. 0 (absent): no holds (ReadRequest.Reader, TypeHold).
// 1: no framed content (FileRequest.Framed).
// 2: no exclusive mkdir (FileRequest.Excl), and a mkdir or rename answers
// without the Stat of what it made.
// 3: no output with the exit (ExecRequest.Collect is ignored).
// 4: no ExecRequest.NoStdin (stdin stays open until a TypeStdin closes it).
// 5: no TypeSleep.
const Version = 6

// File operations.
const (
	FileStat   = "stat"
	FileList   = "list"
	FileMkdir  = "mkdir"   // with parents, like mkdir -p (Excl: the last one must be new); answers its Stat
	FileRemove = "remove"  // Recursive: the whole tree
	FileRename = "rename"  // answers the Stat of To
	FileRead   = "read"    // content written to the descriptor that comes with the request
	FileWrite  = "write"   // content read from the descriptor, replaced atomically
	FileTarOut = "tar_out" // Path (file or tree) as a tar stream to the descriptor; Max, Follow
	FileTarIn  = "tar_in"  // a tar stream from the descriptor extracted into Path
)

// Error kinds of a FileResult.
const (
	KindNotFound   = "not_found"
	KindExists     = "exists"
	KindNotEmpty   = "not_empty" // a directory with entries, where an empty one is needed
	KindInvalid    = "invalid"
	KindPermission = "permission"
	KindTooLarge   = "too_large"
	KindOther      = "other"
)

// Error kinds of an exec's Error: the command does not exist, or exists
// but cannot be executed.
const (
	KindNoCommand     = "command_not_found"
	KindNotExecutable = "not_executable"
)

// Output streams of a captured process.
const (
	Stdout = 1
	Stderr = 2
)

// MaxRead bounds the data of one TypeData answer.
const MaxRead = 256 << 10

// MaxPayload bounds the bytes that follow a message in its packet
// (Conn.SendPayload), and maxPacket the packet.
const (
	MaxPayload = MaxRead
	maxPacket  = inlineMax + 1 + MaxPayload
)

// Messages travel over a SOCK_SEQPACKET socket pair, one message per
// packet. A packet is bounded by the socket's send buffer (often ~200 KiB,
// and raising it needs privileges), so a message larger than inlineMax (an
// exec with a large argv or environment) is spilled: written to a memfd that
// travels as the packet's first descriptor, behind a small header.
const (
	inlineMax = 32 << 10
	// inlineFallback bounds a message sent inline because it could not be
	// spilled (see Conn.Send); it fits the host's default socket buffer.
	inlineFallback = 160 << 10
	// MaxMessage bounds one message, spilled or not.
	MaxMessage = 16 << 20
)

// Message is one control message. Exactly the field that matches Type is set.
type Message struct {
	Type string `json:"type"`
	// Spill marks a header whose message is in the first descriptor.
	Spill bool `json:"spill,omitempty"`

	// Setup is opaque to this package: the runtime that created the sandbox
	// defines its shape and decodes it in the sandbox's init.
	Setup json.RawMessage `json:"setup,omitempty"`

	Ready   *Ready       `json:"ready,omitempty"`
	Error   *Error       `json:"error,omitempty"`
	Exec    *ExecRequest `json:"exec,omitempty"`
	Started *Started     `json:"started,omitempty"`
	Exit    *Exit        `json:"exit,omitempty"`
	Signal  *Signal      `json:"signal,omitempty"`
	State   *State       `json:"state,omitempty"`
	Read    *ReadRequest `json:"read,omitempty"`
	Data    *Data        `json:"data,omitempty"`
	Release *Release     `json:"release,omitempty"`
	File    *FileRequest `json:"file,omitempty"`
	Stdin   *Stdin       `json:"stdin,omitempty"`
	Hold    *Hold        `json:"hold,omitempty"`
	Ack     *Ack         `json:"ack,omitempty"`
	Result  *FileResult  `json:"result,omitempty"`
}

// FileRequest is one file operation. Paths are absolute in the sandbox, or
// relative to /workspace.
type FileRequest struct {
	Seq       uint64 `json:"seq"`
	Op        string `json:"op"`
	Path      string `json:"path"`
	To        string `json:"to,omitempty"`
	Mode      uint32 `json:"mode,omitempty"`
	Recursive bool   `json:"recursive,omitempty"`
	// Max bounds a tar_out (bytes, see archiveSize); 0: no bound.
	Max int64 `json:"max,omitempty"`
	// Follow makes tar_out archive a symlink that leads out of the tree
	// as the regular file it points to.
	Follow bool `json:"follow,omitempty"`
	// Framed says the content of a write or tar_in comes framed
	// (CopyFramed): the agent commits nothing of a stream that ends
	// without its end mark.
	Framed bool `json:"framed,omitempty"`
	// Excl makes a mkdir fail (KindExists) when Path exists already; its
	// missing parents are still made.
	Excl bool `json:"excl,omitempty"`
}

// FileResult answers a FileRequest.
type FileResult struct {
	Seq     uint64     `json:"seq"`
	Error   string     `json:"error,omitempty"`
	Kind    string     `json:"kind,omitempty"`
	Stat    *FileInfo  `json:"stat,omitempty"`
	Entries []FileInfo `json:"entries,omitempty"`
}

// FileInfo describes one file.
type FileInfo struct {
	Name    string `json:"name"`
	Size    int64  `json:"size"`
	Mode    uint32 `json:"mode"` // permission bits
	Dir     bool   `json:"dir,omitempty"`
	Link    string `json:"link,omitempty"` // symlink target
	ModTime int64  `json:"mtime"`          // Unix nanoseconds
}

// ReadRequest asks for a captured stream of process ID from Cursor on,
// waiting up to WaitMs for data if there is none yet. Seq pairs it with its
// answer.
//
// Reader, when not 0, names an attached reader (a random id its
// supervisor chose): the read also holds the stream from Cursor on, as a
// Hold with Keep = Cursor would. While the bytes attached readers hold
// fill the buffer, the agent stops reading the process's pipe, so the
// process waits for them instead of losing output.
type ReadRequest struct {
	Seq    uint64 `json:"seq"`
	ID     uint64 `json:"id"`
	Stream int    `json:"stream"`
	Cursor uint64 `json:"cursor"`
	Max    int    `json:"max"`
	WaitMs int    `json:"wait_ms,omitempty"`
	Reader uint64 `json:"reader,omitempty"`
	// Raw asks for the answer's bytes after its JSON (Conn.SendPayload).
	Raw bool `json:"raw,omitempty"`
}

// Hold renews the hold of attached reader Reader on a stream of process
// ID, keeping the bytes from Keep on for it, or with Release ends it. A
// hold lapses HoldGrace after its last renewal (a read or a Hold).
type Hold struct {
	ID      uint64 `json:"id"`
	Stream  int    `json:"stream"`
	Reader  uint64 `json:"reader"`
	Keep    uint64 `json:"keep"`
	Release bool   `json:"release,omitempty"`
}

// Data answers a ReadRequest: Data starts at offset From (From > the
// requested cursor when bytes were dropped meanwhile); EOF is set once the
// stream ended and nothing is left after Data.
type Data struct {
	Seq   uint64 `json:"seq"`
	From  uint64 `json:"from"`
	Data  []byte `json:"data,omitempty"`
	EOF   bool   `json:"eof,omitempty"`
	Error string `json:"error,omitempty"`
	// Gone: the process is known but its output is not kept (it was not
	// captured, or it was dropped: see Server's retention of finished
	// processes' output).
	Gone bool `json:"gone,omitempty"`
	// Raw is the length of the data when it follows the JSON in the
	// packet instead (Conn.SendPayload); Recv moves it into Data.
	Raw int `json:"raw,omitempty"`
}

// Stdin carries bytes for a captured process's stdin, then (Close) its end.
type Stdin struct {
	Seq   uint64 `json:"seq"`
	ID    uint64 `json:"id"`
	Data  []byte `json:"data,omitempty"`
	Close bool   `json:"close,omitempty"`
}

// Ack answers a request that returns nothing but success or an error.
type Ack struct {
	Seq   uint64 `json:"seq"`
	Error string `json:"error,omitempty"`
}

// Release drops the captured output of a finished process.
type Release struct {
	ID uint64 `json:"id"`
}

// State is what an agent tells a supervisor that (re)connects: the
// processes still running, those that ended while no supervisor was
// connected, and the highest request id it has seen (new ids must be above).
type State struct {
	Version int       `json:"version,omitempty"` // the agent's Version
	Running []Started `json:"running,omitempty"`
	Exited  []Exit    `json:"exited,omitempty"`
	MaxID   uint64    `json:"max_id"`
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
	// ExecListenerFD is, for a detached sandbox with an exec listener, the
	// descriptor number under which the init keeps its own copy of the
	// listener, so that a supervisor that adopts the sandbox later can
	// take it back (pidfd_getfd) and the listener never closes while the
	// sandbox lives; 0: none kept.
	ExecListenerFD int `json:"exec_listener_fd,omitempty"`
	// RootFD is the descriptor (O_PATH, close-on-exec) under which the
	// init keeps the tmpfs that holds its root's copy-on-write layers, so
	// that a root supervisor can read them (pidfd_getfd) for a snapshot;
	// 0: none kept.
	RootFD int `json:"root_fd,omitempty"`
}

// Error reports a failure. Layer names the isolation layer or step that
// failed; Kind, for an exec, says why the command could not start
// (KindNoCommand, KindNotExecutable), if known.
type Error struct {
	ID      uint64 `json:"id,omitempty"`
	Layer   string `json:"layer,omitempty"`
	Kind    string `json:"kind,omitempty"`
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
	// Capture: the agent keeps the process's stdout and stderr (the last
	// DefaultOutputCap bytes of each, or what attached readers hold) for
	// TypeRead, instead of writing them
	// to descriptors of the supervisor, so output survives a supervisor
	// that goes away. Stdin is a pipe fed by TypeStdin. No descriptors come
	// with it.
	Capture bool `json:"capture,omitempty"`
	// Hold (with Capture) keeps the output from the process's start until
	// an attached reader's first read (see ReadRequest.Reader), or
	// HoldGrace, so that a reader that attaches right after the start
	// misses nothing.
	Hold bool `json:"hold,omitempty"`
	// Collect (with Capture) asks for the whole output with the exit:
	// when the process has ended and both its streams have ended
	// together, and they hold at most Collect bytes (CollectMax at most),
	// none dropped, Exit.Output carries them. A command that ends at once
	// is then answered in one message instead of a read of each stream
	// and its answer. The output is kept for reads all the same.
	Collect int `json:"collect,omitempty"`
	// NoStdin (with Capture): the process's stdin is a pipe already at
	// its end, as if a TypeStdin had closed it at once; nothing can be
	// written to it. An exec that sends nothing to stdin then needs no
	// second request and answer.
	NoStdin bool   `json:"no_stdin,omitempty"`
	Rows    uint16 `json:"rows,omitempty"`
	Cols    uint16 `json:"cols,omitempty"`
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
	// Output is the whole output of a process started with Collect, when
	// it qualified (see ExecRequest.Collect).
	Output *Output `json:"output,omitempty"`
}

// Output is the whole of both output streams of an ended process.
type Output struct {
	Stdout []byte `json:"stdout,omitempty"`
	Stderr []byte `json:"stderr,omitempty"`
}

// CollectMax bounds ExecRequest.Collect: an exit with that much output
// (base64 in JSON) still travels inline in one packet (inlineMax), also
// on channels that carry no spilled message.
const CollectMax = 16 << 10

// Signal asks the agent to deliver a signal to a process's process group.
type Signal struct {
	ID     uint64 `json:"id"`
	Signal int    `json:"signal"`
}

// ErrClosed is returned by Recv when the peer closed the channel.
var ErrClosed = errors.New("control channel closed")
