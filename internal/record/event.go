// Package record is the activity record of `airlock run --record FILE`:
// JSON lines written by the host-side supervisor, never by code inside the
// sandbox. Execs come from a seccomp user-notification listener only the
// supervisor holds (argv, path, cwd and parent read while the caller
// waits), their outcomes and every exit from the kernel's proc connector,
// network requests from the egress gateway, and resource use from the
// sandbox's cgroup. See the README's "Activity record".
package record

import (
	"encoding/json"
	"io"
	"sync"
	"time"
)

// Event types.
const (
	TypeStart = "start"
	TypeExec  = "exec"
	TypeExit  = "exit"
	TypeNet   = "net"
	TypeUsage = "usage"
	TypeLoss  = "loss"
	TypeEnd   = "end"
	// TypeFile: one change to the workspace, read from the overlay's
	// upper layer when the command ends.
	TypeFile = "file"
	// TypeCheckpoint: a checkpoint of the workspace was taken.
	TypeCheckpoint = "checkpoint"
)

// Exec results.
const (
	ResultOK          = "ok"          // the proc connector saw the exec succeed
	ResultFailed      = "failed"      // the caller went on (another exec, or exited) without it
	ResultUnconfirmed = "unconfirmed" // the connector lost events while it was in flight
)

// Event is one line of the record. Fields not used by a type are omitted.
type Event struct {
	Type string    `json:"type"`
	Time time.Time `json:"time"`

	// start and end
	Sandbox string   `json:"sandbox,omitempty"`
	Version int      `json:"version,omitempty"`
	Command []string `json:"command,omitempty"`

	// exec and exit: pids as seen inside the sandbox and on the host.
	Pid      int `json:"pid,omitempty"`
	HostPid  int `json:"host_pid,omitempty"`
	PPid     int `json:"ppid,omitempty"`
	HostPPid int `json:"host_ppid,omitempty"`

	// exec
	Syscall       string   `json:"syscall,omitempty"` // execve or execveat
	Path          string   `json:"path,omitempty"`    // as passed to the call
	PathTarget    string   `json:"path_target,omitempty"`
	Argv          []string `json:"argv,omitempty"`
	ArgvTruncated bool     `json:"argv_truncated,omitempty"`
	Cwd           string   `json:"cwd,omitempty"`
	Result        string   `json:"result,omitempty"`

	// exit (Code with Exited, or Signal); end (Code or Signal)
	Exited     bool     `json:"exited,omitempty"`
	Code       *int     `json:"code,omitempty"`
	Signal     int      `json:"signal,omitempty"`
	Core       bool     `json:"core,omitempty"`
	DurationMS *float64 `json:"duration_ms,omitempty"`
	Lost       bool     `json:"lost,omitempty"`

	// net (the egress gateway's audit record)
	Proto     string `json:"proto,omitempty"`
	Method    string `json:"method,omitempty"`
	Host      string `json:"host,omitempty"`
	Port      int    `json:"port,omitempty"`
	Addr      string `json:"addr,omitempty"`
	URLPath   string `json:"url_path,omitempty"`
	Allowed   *bool  `json:"allowed,omitempty"`
	Rule      string `json:"rule,omitempty"`
	Error     string `json:"error,omitempty"`
	BytesUp   int64  `json:"bytes_up,omitempty"`
	BytesDown int64  `json:"bytes_down,omitempty"`

	// usage
	CPUNs       *uint64 `json:"cpu_ns,omitempty"`
	MemoryBytes *uint64 `json:"memory_bytes,omitempty"`
	MemoryPeak  *uint64 `json:"memory_peak_bytes,omitempty"`
	Pids        *uint64 `json:"pids,omitempty"`

	// loss
	Reason string `json:"reason,omitempty"`

	// file (Path is the path in the workspace; a directory's ends in /):
	// Kind is added, modified, deleted, mode, symlink or type (a file
	// became a directory, ...); FileType file, dir, symlink or special;
	// Size and Mode are the new entry's (the old one's for deleted),
	// OldMode the host's for mode and modified; Target a link's target;
	// Protected a change at a protected path (never applied).
	Kind      string `json:"kind,omitempty"`
	FileType  string `json:"file_type,omitempty"`
	Size      *int64 `json:"size,omitempty"`
	Mode      string `json:"mode,omitempty"`
	OldMode   string `json:"old_mode,omitempty"`
	Target    string `json:"target,omitempty"`
	Protected bool   `json:"protected,omitempty"`

	// checkpoint: its id and name, how many changes its state makes, and
	// whether --checkpoint-every took it.
	Checkpoint string `json:"checkpoint,omitempty"`
	Name       string `json:"name,omitempty"`
	Changes    *int   `json:"changes,omitempty"`
	Auto       bool   `json:"auto,omitempty"`
}

// SchemaVersion is written in the start event.
const SchemaVersion = 1

// Writer writes events as JSON lines, one Write per line, safe for
// concurrent use. The first error sticks and is returned by Err.
type Writer struct {
	mu  sync.Mutex
	w   io.Writer
	err error
}

// NewWriter returns a Writer on w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w} }

// Write writes one event.
func (w *Writer) Write(e *Event) {
	b, err := json.Marshal(e)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return
	}
	if err != nil {
		w.err = err
		return
	}
	if _, err := w.w.Write(append(b, '\n')); err != nil {
		w.err = err
	}
}

// Err returns the first write error.
func (w *Writer) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// Read parses a record (JSON lines); a line that is not an event is an
// error naming its number.
func Read(r io.Reader) ([]Event, error) {
	dec := json.NewDecoder(r)
	var out []Event
	for n := 1; ; n++ {
		var e Event
		if err := dec.Decode(&e); err == io.EOF {
			return out, nil
		} else if err != nil {
			return nil, &LineError{Line: n, Err: err}
		}
		if e.Type == "" {
			return nil, &LineError{Line: n, Err: errNoType}
		}
		out = append(out, e)
	}
}

// LineError is a record line that could not be read.
type LineError struct {
	Line int
	Err  error
}

func (e *LineError) Error() string { return "record line " + itoa(e.Line) + ": " + e.Err.Error() }

type strErr string

func (s strErr) Error() string { return string(s) }

const errNoType = strErr("no \"type\"")

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }
