// Package runtime defines the isolation backend interface that every sandbox
// runtime (native namespaces today; gVisor, microVMs and a simulated shell
// later) implements, and the types that describe a sandbox to create.
//
// A runtime creates and destroys sandboxes and starts processes in them
// through the sandbox's agent. It never decides policy: the caller hands it a
// complete Spec, and a runtime that cannot apply every layer the Spec asks for
// must fail instead of starting a weaker sandbox.
package runtime

import (
	"context"
	"io"
	"net"
	"os"
	"time"

	"github.com/airlock-dev/airlock/internal/errdefs"
)

// Runtime creates sandboxes.
type Runtime interface {
	// Name is the backend's name, e.g. "native".
	Name() string
	// Create builds and starts a sandbox. On error nothing is left behind.
	Create(ctx context.Context, spec *Spec) (Sandbox, error)
}

// FirstExecer is a Runtime that can start a sandbox's first command with
// the sandbox: the request goes in with the setup, and the command starts
// as soon as the sandbox is ready, without a round trip in between (for a
// one-shot run, which has nothing to do between the two). If the sandbox
// cannot be made, it returns a nil Sandbox and nothing is left behind; if
// the command cannot be started, it returns the Sandbox (for the caller
// to destroy) with Exec's error. Info().Steps["started"] is the time from
// the sandbox being ready to the command started.
type FirstExecer interface {
	CreateExec(ctx context.Context, spec *Spec, req *ExecRequest) (Sandbox, Process, error)
}

// Sandbox is a running sandbox.
type Sandbox interface {
	ID() string
	// Info reports what was applied.
	Info() Info
	// Exec starts a process through the sandbox's agent.
	Exec(ctx context.Context, req *ExecRequest) (Process, error)
	// Kill ends every process in the sandbox at once.
	Kill() error
	// Destroy kills the sandbox and removes everything it left on the host.
	// It is idempotent.
	Destroy(ctx context.Context) error
}

// Process is a process started in a sandbox.
type Process interface {
	Pid() int
	// PTY is the pseudo-terminal master when the process was started with
	// a TTY, or nil.
	PTY() *os.File
	Signal(sig os.Signal) error
	// Wait blocks until the process ends.
	Wait(ctx context.Context) (ExitStatus, error)
}

// Warmer is implemented by sandboxes whose first command pays one-time
// costs that can be paid ahead, while the sandbox waits in a warm pool
// (the agent's first captured exec and the sandbox's first load of a
// dynamic binary; in gVisor, also its kernel's). Warm leaves nothing the sandbox's user could
// see: no process, no output, and the first command still gets the first
// process id. It is called at most once, before anything else runs.
type Warmer interface {
	Warm(ctx context.Context) error
}

// Files is implemented by sandboxes whose agent serves file operations.
// Paths are absolute in the sandbox or relative to /workspace, and resolve
// in the sandbox's own view (the agent does the work inside).
type Files interface {
	Stat(ctx context.Context, path string) (FileInfo, error)
	ReadDir(ctx context.Context, path string) ([]FileInfo, error)
	MkdirAll(ctx context.Context, path string, mode os.FileMode) error
	Remove(ctx context.Context, path string, recursive bool) error
	Rename(ctx context.Context, from, to string) error
	// ReadFile streams a file's content; Size tells a short read.
	ReadFile(ctx context.Context, path string) (io.ReadCloser, FileInfo, error)
	// WriteFile replaces path atomically with everything r yields.
	WriteFile(ctx context.Context, path string, mode os.FileMode, r io.Reader) error
	// Download streams path (a file or a tree; a symlink given as path
	// is followed) as a tar archive. Sparse files stay sparse; FIFOs,
	// sockets and devices are refused (ErrInvalid), as is an archive over
	// opts.MaxSize (ErrTooLarge), before the stream starts.
	Download(ctx context.Context, path string, opts DownloadOptions) (io.ReadCloser, error)
	// Upload extracts the tar archive r yields into the directory dir;
	// entries that would leave dir are refused (ErrInvalid).
	Upload(ctx context.Context, dir string, r io.Reader) error
}

// FileMaker is implemented by Files that make a directory or move a file
// and describe the result in one step (one call into the sandbox instead of
// two or three).
type FileMaker interface {
	// MakeDir makes path with its missing parents and returns it; with
	// excl, a path that exists already is ErrExists (and nothing is made).
	MakeDir(ctx context.Context, path string, mode os.FileMode, excl bool) (FileInfo, error)
	// Move renames from to to and returns to.
	Move(ctx context.Context, from, to string) (FileInfo, error)
}

// DownloadOptions say how Download archives a path.
type DownloadOptions struct {
	// MaxSize bounds the archive: its bytes, and the sizes of the files
	// in it (holes included); 0: no bound.
	MaxSize int64
	// FollowLinks archives a symlink of the tree that leads out of it as
	// the regular file it points to.
	FollowLinks bool
}

// FileInfo describes a file in a sandbox.
type FileInfo struct {
	Name    string
	Size    int64
	Mode    os.FileMode // permission bits
	Dir     bool
	Link    string // symlink target
	ModTime time.Time
}

// Errors of file operations, to be matched with errors.Is.
// They are the shared taxonomy of package errdefs.
var (
	ErrNotFound   = errdefs.ErrNotFound
	ErrExists     = errdefs.ErrExists
	ErrInvalid    = errdefs.ErrInvalid
	ErrPermission = errdefs.ErrPermission
	ErrTooLarge   = errdefs.ErrTooLarge
)

// Errors of Exec for a command that cannot be started: it does not exist in
// the sandbox (a shell's 127), or it exists but cannot be executed (126).
// Both are also ErrInvalid.
var (
	ErrCommandNotFound = errdefs.ErrCommandNotFound
	ErrNotExecutable   = errdefs.ErrNotExecutable
)

// OutputReader is implemented by processes started with Capture.
type OutputReader interface {
	// ReadOutput returns up to max bytes of stream (1 stdout, 2 stderr)
	// from cursor on, waiting up to wait for some if there are none yet.
	ReadOutput(ctx context.Context, stream int, cursor uint64, max int, wait time.Duration) (OutputChunk, error)
}

// Collector is implemented by processes started with ExecRequest.Collect.
type Collector interface {
	// Collecting reports whether the output may come with the exit
	// (the request asked for it and the runtime can).
	Collecting() bool
	// Collected returns the whole output once the process has ended, if
	// it came with the exit; ok is false otherwise (the output is read
	// with OutputReader as usual).
	Collected() (stdout, stderr []byte, ok bool)
}

// OutputAttacher is implemented by processes started with Capture whose
// runtime can make the process wait for a reader that is attached and
// behind (backpressure) instead of dropping what it has not read.
type OutputAttacher interface {
	AttachOutput(stream int) OutputAttachment
}

// OutputAttachment is one attached reader of a stream. Each Read also
// holds the stream from its cursor on: while the bytes so held fill the
// runtime's buffer, the process blocks in write. The hold is renewed while
// the attachment is open, even when no Read is under way (the reader is
// busy delivering a chunk to a slow client).
type OutputAttachment interface {
	Read(ctx context.Context, cursor uint64, max int, wait time.Duration) (OutputChunk, error)
	// Close ends the hold at once; with linger it is left to lapse after
	// the runtime's grace period instead (the daemon is shutting down, and
	// the client will resume from its cursor with the next one).
	Close(linger bool)
}

// StdinWriter is implemented by processes started with Capture: their
// stdin is fed through the sandbox's agent, in order.
type StdinWriter interface {
	WriteStdin(ctx context.Context, data []byte) error
	CloseStdin(ctx context.Context) error
}

// OutputChunk is a piece of captured output: Data starts at offset From
// (From > the cursor asked for means From-cursor bytes were dropped before
// they were read); EOF means the stream ended and nothing follows Data.
type OutputChunk struct {
	Data []byte
	From uint64
	EOF  bool
}

// Next is the cursor that continues after this chunk.
func (c OutputChunk) Next() uint64 { return c.From + uint64(len(c.Data)) }

// ExitStatus says how a process ended.
type ExitStatus struct {
	Code   int // exit code when Signal is 0
	Signal int // the signal that killed it, or 0
}

// ShellCode is the status a shell would report: the code, or 128+signal.
func (e ExitStatus) ShellCode() int {
	if e.Signal != 0 {
		return 128 + e.Signal
	}
	return e.Code
}

// ExecRequest describes a process to start.
type ExecRequest struct {
	Argv []string
	Env  []string // complete environment, KEY=VALUE
	Dir  string   // working directory inside the sandbox
	TTY  bool
	// Capture keeps stdout and stderr in the sandbox (bounded, most recent
	// bytes) for OutputReader instead of writing to Stdout and Stderr, so
	// output outlives a supervisor that goes away; stdin is empty.
	Capture bool
	// Hold (with Capture, for an OutputAttacher) keeps the output from
	// the start until a reader attaches, for the runtime's grace period at
	// most: a client that starts a process and then follows it misses
	// nothing, however fast the process writes meanwhile.
	Hold bool
	// Collect (with Capture, for a Collector) asks for the process's whole
	// output with its exit when both streams together hold no more than
	// Collect bytes (the runtime may bound it lower): a short command is
	// then answered without reading its streams.
	Collect int
	// StdinClosed (with Capture): the process's stdin is at its end from
	// the start, as if closed (StdinWriter.CloseStdin) at once; nothing
	// can be written to it.
	StdinClosed bool
	Rows        uint16
	Cols        uint16
	// Stdin, Stdout and Stderr are handed to the process as they are when
	// TTY is false. They must not be terminals (the caller interposes pipes
	// for terminals so that the sandbox never holds the caller's tty).
	Stdin, Stdout, Stderr *os.File
}

// Spec describes a sandbox. Sizes are bytes; zero means the runtime default
// where one is documented, otherwise "no limit".
type Spec struct {
	// ID is the sandbox's id (16 lowercase hex digits), chosen by the
	// caller so that it can record the sandbox before it exists. Empty: the
	// runtime picks one.
	ID string
	// FirstProcessID is the id the sandbox's first process gets (0: 1).
	// A sandbox made anew for one that ran processes before (a restore)
	// starts past their ids, so that none is handed out twice.
	FirstProcessID uint64
	// Image is a root filesystem directory. Empty: the host's system
	// directories, read-only, under a copy-on-write layer.
	Image string
	// Workspace is the host directory mounted read-write at /workspace.
	// Empty: a fresh empty directory, removed with the sandbox.
	Workspace string
	// WorkspaceSnapshot, without Workspace: the fresh workspace volume is
	// a clone of this snapshot's image (quota.Volumes.CreateFrom) instead
	// of empty. Backends without such volumes refuse the spec.
	WorkspaceSnapshot string
	// WorkspaceLayer, with Workspace: the workspace is a copy-on-write
	// overlay whose lower layer is Workspace (read-only) and whose upper
	// and work directories are WorkspaceLayer/upper and WorkspaceLayer/work
	// (see internal/workspace, which applies the upper layer afterwards).
	// Protected paths that exist are read-only; those that do not are
	// absent (nothing is made on the host). Empty: Workspace is bound
	// read-write (live), with placeholders for missing protected paths.
	WorkspaceLayer string
	// WorkspaceLayerVolatile: the overlay need not keep the upper layer
	// through a crash of the machine (overlayfs's volatile option): its
	// unmount does not sync the whole filesystem that holds the layer, and
	// syncs inside are not passed on to it. For a layer applied as soon as
	// the command ends; internal/workspace refuses to apply one whose
	// machine restarted meanwhile (Run.Restarted).
	WorkspaceLayerVolatile bool
	// Protected lists workspace-relative paths that stay read-only, whether
	// or not they exist when the sandbox starts.
	Protected []string
	ReadOnly  []string // host paths visible read-only at the same path
	Writable  []string // host paths visible read-write at the same path
	Binds     []Bind
	Deny      []string // sandbox paths hidden from view

	Limits  Limits
	Seccomp []SockFilter // compiled filter, required unless Insecure.NoSeccomp

	// Listen lists TCP addresses ("127.0.0.1:3128") to listen on inside the
	// sandbox's network namespace. The listening sockets are handed to the
	// caller (Listeners) and not kept by anything inside the sandbox: what
	// connects to them reaches the caller, e.g. the egress gateway.
	Listen []string

	// RecordExec: the init adds a seccomp filter that sends every execve
	// and execveat to a listener handed to the supervisor (never kept
	// inside), for the activity record (`airlock run --record`). Backends
	// that cannot do it refuse the spec.
	RecordExec bool

	// RootFrom is a host directory holding a root layer captured from
	// another sandbox (RootLayerer): rootfs/ (the plain directories of the
	// root) and upper/<name>/ (each overlay's upper layer), owned by
	// in-sandbox ids. The new sandbox's copy-on-write root starts as a copy
	// of it. Backends that cannot do it refuse the spec.
	RootFrom string

	Insecure Insecure
	// CgroupParent overrides where the sandbox's cgroup is created.
	CgroupParent string
}

// Bind is an extra bind mount from the host.
type Bind struct {
	Source, Target string
	Writable       bool
}

// Limits are the resource caps of a sandbox.
type Limits struct {
	Memory, Swap int64
	Pids         int64
	CPU          float64
	Disk         int64 // writable copy-on-write layer, and a fresh workspace
	Tmp, Shm     int64
	NoFile       uint64
	FileSize     int64
	Timeout      time.Duration
}

// Insecure lists isolation layers the caller explicitly opted out of, by
// name. Each one makes the sandbox weaker and is reported on every run.
type Insecure struct {
	NoLandlock bool
	NoSeccomp  bool
	NoCgroups  bool
}

// SockFilter is one classic BPF instruction (struct sock_filter).
type SockFilter struct {
	Code uint16 `json:"c"`
	Jt   uint8  `json:"t"`
	Jf   uint8  `json:"f"`
	K    uint32 `json:"k"`
}

// Info reports what a sandbox got.
type Info struct {
	ID          string
	Runtime     string
	LandlockABI int
	CgroupPaths []string
	Rootless    bool
	// HostUID and HostGID are the host ids of root inside, and HostIDs
	// how many ids from them on are mapped (ids 0 to HostIDs-1 inside).
	HostUID, HostGID, HostIDs int
	// Steps holds the time each setup step took, for benchmarks.
	Steps map[string]time.Duration
}

// Pauser is implemented by sandboxes that can be frozen (the cgroup
// freezer): every process stops where it is until Resume.
type Pauser interface {
	Pause(ctx context.Context) error
	Resume(ctx context.Context) error
}

// RootLayerer is implemented by sandboxes whose copy-on-write root layer
// the host can read: RootLayer returns a directory (O_PATH) holding
// rootfs/ (the root's own directories: /root, /home, /var, ... and what
// was made at /) and layers/upper/<name>/ (the upper layer of each
// overlay: "usr", "etc", ... or "image"), with their files owned by the
// sandbox's host ids (Info.HostUID, HostGID, HostIDs). The caller closes
// it; it must not write there while the sandbox runs.
type RootLayerer interface {
	RootLayer() (*os.File, error)
}

// Sleeper is implemented by sandboxes whose agent can sleep while nothing
// runs in them: it gives its place to a program of a few pages, which
// executes the agent again at the next request (native: sleep_linux.go).
// Sleep fails, and the sandbox stays as it was, when something runs or
// the agent cannot sleep.
type Sleeper interface {
	Sleep(ctx context.Context) error
}

// Listeners is implemented by sandboxes created with Spec.Listen: the
// listening sockets, in the order of Spec.Listen. The caller serves them.
type Listeners interface {
	Listeners() []net.Listener
}

// Watcher is implemented by sandboxes that report the end of their agent:
// Done is closed when the control channel to the agent is gone, whether the
// sandbox was destroyed or its agent died.
type Watcher interface {
	Done() <-chan struct{}
}

// PortDialer is implemented by sandboxes whose loopback ports the host can
// reach: DialPort connects to 127.0.0.1:port inside the sandbox's own
// network namespace (the connection is made from outside, so the sandbox
// gains no way out). It is what port previews use.
type PortDialer interface {
	DialPort(ctx context.Context, port int) (net.Conn, error)
}
