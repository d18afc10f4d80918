// Package api holds the wire types of airlock's HTTP API (/v1): the JSON
// bodies the daemon (`airlock serve`) accepts and returns, the error codes,
// and the OpenAPI 3 document that describes them (openapi.json, served at
// /v1/openapi.json).
//
// It is shared by the server and the Go SDK and depends on the standard
// library only. It must never hold behaviour: no I/O, no validation beyond
// what the types say. Changing a JSON name here changes the public API; the
// OpenAPI document and its test must change with it.
package api

import (
	_ "embed"
	"time"
)

// OpenAPI is the OpenAPI 3 document of the API.
//
//go:embed openapi.json
var OpenAPI []byte

// Version is the API's path prefix.
const Version = "/v1"

// Sandbox states. Legal transitions:
//
//	creating -> running | failed
//	running  -> paused | stopped | failed
//	paused   -> running | stopped | failed
//
// stopped and failed are final; a final sandbox holds no resources on the
// host and is kept for inspection until deleted (or purged after the
// daemon's retention period).
const (
	StateCreating = "creating"
	StateRunning  = "running"
	StatePaused   = "paused"
	StateStopped  = "stopped"
	StateFailed   = "failed"
)

// Sandbox is a sandbox as the API reports it.
type Sandbox struct {
	ID     string            `json:"id"`
	State  string            `json:"state"`
	Labels map[string]string `json:"labels,omitempty"`
	// Image is the name of a configured image ("" for the host's system
	// directories). Policy is the named policy it was made from, "" for the
	// default, or "inline".
	Image  string `json:"image,omitempty"`
	Policy string `json:"policy,omitempty"`
	// Reason says why a sandbox is stopped or failed (e.g. "ttl expired",
	// "idle for 5m0s", "agent gone: ...").
	Reason    string    `json:"reason,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	// ExpiresAt is when the sandbox is killed (its TTL); nil for none.
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	// IdleTimeoutSeconds stops the sandbox after that long without API
	// activity and without a running process; 0 for none.
	IdleTimeoutSeconds float64    `json:"idle_timeout_seconds,omitempty"`
	LastActivityAt     time.Time  `json:"last_activity_at"`
	EndedAt            *time.Time `json:"ended_at,omitempty"`
	Resources          Resources  `json:"resources"`
	// Tenant is the tenant of the API key that created it ("" when made
	// over the unix socket or with a key that has no tenant).
	Tenant string `json:"tenant,omitempty"`
	// Record is true for a sandbox made with an activity record
	// (CreateSandboxRequest.Record): GET /v1/sandboxes/{id}/events.
	Record bool `json:"record,omitempty"`
	// Runtime is the sandbox's isolation backend: "native" or "gvisor".
	Runtime string `json:"runtime,omitempty"`
}

// Resources are a sandbox's limits. Sizes are strings with an optional
// binary suffix ("512M", "2G"); empty means the daemon's default.
type Resources struct {
	Memory string  `json:"memory,omitempty"`
	Disk   string  `json:"disk,omitempty"`
	Pids   int64   `json:"pids,omitempty"`
	CPU    float64 `json:"cpu,omitempty"`
}

// CreateSandboxRequest is the body of POST /v1/sandboxes.
type CreateSandboxRequest struct {
	// Image names an image from the daemon's configuration; "" is the
	// host's system directories, read-only.
	Image string `json:"image,omitempty"`
	// Runtime is the isolation backend, overriding the policy's:
	// "native" or "gvisor" ("": the policy's, else the daemon's
	// default_runtime, else native). gvisor needs runsc on the daemon's
	// host: without it, a 400 naming the install command.
	Runtime string `json:"runtime,omitempty"`
	// PolicyName names a policy from the daemon's configuration. Policy is
	// an inline policy document (YAML, the `airlock run` format); it may
	// not name host paths (workspace, image, binds, read_only, writable),
	// pass the daemon's environment, or set a timeout (use
	// TimeoutSeconds). At most one of the two.
	PolicyName string `json:"policy_name,omitempty"`
	Policy     string `json:"policy,omitempty"`
	// Resources override the policy's limits.
	Resources Resources `json:"resources,omitempty"`
	// Env is set for every process of the sandbox (a process's own env
	// wins).
	Env    map[string]string `json:"env,omitempty"`
	Labels map[string]string `json:"labels,omitempty"`
	// TimeoutSeconds is the TTL: the sandbox is killed that long after its
	// creation (extend it with POST .../timeout). 0: the daemon's default.
	TimeoutSeconds float64 `json:"timeout_seconds,omitempty"`
	// IdleTimeoutSeconds: 0 is the daemon's default; negative disables it.
	IdleTimeoutSeconds float64 `json:"idle_timeout_seconds,omitempty"`
	// Files are written into the sandbox before it is returned.
	Files []File `json:"files,omitempty"`
	// Caches are persistent caches mounted read-write, on top of the
	// policy's: "go", "npm", "pip" or "cargo" (at /cache/NAME, with the
	// tool's variables set unless Env sets them), or "NAME:/path". The
	// daemon keeps one set, shared by every caller.
	Caches []string `json:"caches,omitempty"`
	// Record keeps an activity record of the sandbox, written by the
	// daemon (never by code inside): every exec with its argv, every exit,
	// network requests and resource use (GET /v1/sandboxes/{id}/events).
	// It needs a daemon running as root with the native runtime; if the
	// record cannot be set up, the creation fails and nothing is left.
	// Never served from a warm pool.
	Record bool `json:"record,omitempty"`
	// FromSnapshot (a snapshot's id or name) makes the sandbox's
	// workspace a copy of the snapshot's. The image must be the
	// snapshot's; its policy is the request's, as for any creation.
	FromSnapshot string `json:"from_snapshot,omitempty"`
}

// File is a file to write at creation. Relative paths are under /workspace.
type File struct {
	Path    string `json:"path"`
	Content []byte `json:"content"` // base64 in JSON
	Mode    uint32 `json:"mode,omitempty"`
}

// SandboxList is the body of GET /v1/sandboxes. Filters: ?state=S (repeatable),
// ?label=k=v (repeatable, all must match), ?limit=N (1..1000, default 100),
// ?cursor=C (NextCursor of the previous page).
type SandboxList struct {
	Sandboxes  []Sandbox `json:"sandboxes"`
	NextCursor string    `json:"next_cursor,omitempty"`
}

// TimeoutRequest is the body of POST /v1/sandboxes/{id}/timeout: the
// sandbox now expires TimeoutSeconds from now (never past the daemon's
// maximum lifetime).
type TimeoutRequest struct {
	TimeoutSeconds float64 `json:"timeout_seconds"`
}

// ExecRequest is the body of POST /v1/sandboxes/{id}/exec (run and wait)
// and POST /v1/sandboxes/{id}/processes (start in the background).
type ExecRequest struct {
	// Argv is the command; no shell is involved unless Argv asks for one.
	Argv []string `json:"argv"`
	// Env adds to (and overrides) the sandbox's environment.
	Env map[string]string `json:"env,omitempty"`
	// Cwd is the working directory inside the sandbox; default /workspace.
	Cwd string `json:"cwd,omitempty"`
	// TimeoutSeconds kills the process that long after it started; 0: none
	// (for exec: the daemon's default exec timeout).
	TimeoutSeconds float64 `json:"timeout_seconds,omitempty"`
	// Stdin is written to the process's stdin, which is then closed (exec),
	// or left open for more (processes; POST .../stdin).
	Stdin []byte `json:"stdin,omitempty"`
	// MaxOutputBytes caps stdout and stderr each in an exec result
	// (default and maximum: the daemon's limit, 1 MiB unless configured).
	MaxOutputBytes int `json:"max_output_bytes,omitempty"`
}

// ExecResult is the answer of POST /v1/sandboxes/{id}/exec.
type ExecResult struct {
	ProcessID string `json:"process_id"`
	ExitCode  int    `json:"exit_code"`
	// Signal is the signal number that killed the process, or 0.
	Signal     int     `json:"signal,omitempty"`
	TimedOut   bool    `json:"timed_out,omitempty"`
	Stdout     []byte  `json:"stdout"` // base64 in JSON
	Stderr     []byte  `json:"stderr"`
	DurationMs float64 `json:"duration_ms"`
	// StdoutTruncated and StderrTruncated say bytes were left out of the
	// result: the output went past the cap. The bytes kept are the first
	// ones, and a marker line says how many were dropped.
	StdoutTruncated bool `json:"stdout_truncated,omitempty"`
	StderrTruncated bool `json:"stderr_truncated,omitempty"`
}

// Process states.
const (
	ProcessRunning = "running"
	ProcessExited  = "exited"
)

// Process is a process started through the API.
type Process struct {
	ID         string     `json:"id"`
	SandboxID  string     `json:"sandbox_id"`
	Argv       []string   `json:"argv"`
	Cwd        string     `json:"cwd,omitempty"`
	TTY        bool       `json:"tty,omitempty"`
	State      string     `json:"state"`
	ExitCode   *int       `json:"exit_code,omitempty"`
	Signal     int        `json:"signal,omitempty"`
	TimedOut   bool       `json:"timed_out,omitempty"`
	StartedAt  time.Time  `json:"started_at"`
	EndedAt    *time.Time `json:"ended_at,omitempty"`
	DurationMs float64    `json:"duration_ms,omitempty"`
	// EndReason says why an exited process ended when it did not end of
	// its own accord: a PTY process whose terminal a daemon restart closed
	// (it is killed if it is still running then).
	EndReason string `json:"end_reason,omitempty"`
}

// ProcessList is the body of GET /v1/sandboxes/{id}/processes.
type ProcessList struct {
	Processes []Process `json:"processes"`
}

// SignalRequest is the body of POST .../processes/{pid}/signal. Signal is a
// name ("TERM", "SIGKILL") or a number ("9").
type SignalRequest struct {
	Signal string `json:"signal"`
}

// OutputEvent is one event of GET .../processes/{pid}/output, sent as a
// line of NDJSON (Accept: application/x-ndjson) or as a Server-Sent Event
// whose id is the cursor to resume from (Accept: text/event-stream).
//
// Kind "stdout"/"stderr": Data (base64 in JSON) starts at byte Offset of
// that stream. Kind "lost": Bytes bytes of Stream before Offset were
// dropped (the process wrote more than the daemon keeps while no client
// followed it). Kind "exit": the
// process ended and all its output was sent. Cursor, on every event, is the
// value of ?cursor= that resumes right after it.
type OutputEvent struct {
	Kind     string `json:"kind"`
	Stream   string `json:"stream,omitempty"`
	Offset   uint64 `json:"offset"`
	Data     []byte `json:"data,omitempty"`
	Bytes    uint64 `json:"bytes,omitempty"`
	ExitCode *int   `json:"exit_code,omitempty"`
	Signal   int    `json:"signal,omitempty"`
	Cursor   string `json:"cursor"`
}

// Output event kinds.
const (
	EventStdout = "stdout"
	EventStderr = "stderr"
	EventLost   = "lost"
	EventExit   = "exit"
)

// NetworkEvent is one audit record of a sandbox's egress gateway: one
// CONNECT or SOCKS connection, or one plain-HTTP request, whether allowed
// or denied. It never holds request headers, bodies, query strings or URL
// user info. In GET /v1/sandboxes/{id}/network?follow=true it is sent as a
// line of NDJSON or as a Server-Sent Event whose id is Cursor.
type NetworkEvent struct {
	// Cursor is the value of ?cursor= (or, for SSE, Last-Event-ID) that
	// lists the events after this one.
	Cursor string    `json:"cursor"`
	Time   time.Time `json:"time"` // when the connection or request started
	// Proto is how the sandbox asked: "http" (a plain-HTTP request through
	// the HTTP proxy), "connect" (an HTTP CONNECT tunnel), "socks", or
	// "https" (one request inside a tunnel to an inspected host).
	Proto string `json:"proto"`
	// Method is the HTTP method; "CONNECT", "BIND" or "UDP ASSOCIATE" for
	// SOCKS.
	Method string `json:"method,omitempty"`
	Host   string `json:"host"` // as normalized for the policy
	Port   int    `json:"port"`
	Path   string `json:"path,omitempty"` // plain HTTP and inspected HTTPS, without the query
	// Addr is the ip:port dialed; for a denial by address, the first
	// address the policy refused.
	Addr    string `json:"addr,omitempty"`
	Allowed bool   `json:"allowed"`
	// Rule is the rule or reason that decided. A connection the gateway
	// closed because a new policy denies it ends with Allowed false, the
	// rule that denies it, and Error saying so.
	Rule string `json:"rule,omitempty"`
	// BytesUp and BytesDown count the payload relayed: tunnel bytes after
	// the handshake, or request and response bodies for plain HTTP.
	BytesUp    int64   `json:"bytes_up"`
	BytesDown  int64   `json:"bytes_down"`
	DurationMs float64 `json:"duration_ms"`
	// Error says why the connection or request failed or was closed, if
	// it was ("closed: the new policy denies it"). Not "error": in a
	// stream, a line whose "error" is an object is the stream's error.
	Error string `json:"error_message,omitempty"`
	// Credential names the credentials the gateway added to an inspected
	// HTTPS request (comma-separated; never their values).
	Credential string `json:"credential,omitempty"`
}

// NetworkEventsPage is the body of GET /v1/sandboxes/{id}/network: the
// sandbox's egress audit, oldest first. Filters: ?allowed=true|false,
// ?host=H (exact), ?since=RFC3339 time, ?cursor=C (list the events after
// the one whose cursor C is), ?limit=N (1..1000, default 100).
type NetworkEventsPage struct {
	Events []NetworkEvent `json:"events"`
	// NextCursor is set when there are more events now: pass it as
	// ?cursor= with the same filters for the next page. Absent on the last
	// page (to poll for later events, use the last event's cursor).
	NextCursor string `json:"next_cursor,omitempty"`
}

// Types of RecordEvent.
const (
	RecordStart = "start" // the record begins (the sandbox was made)
	RecordExec  = "exec"  // a process called execve or execveat
	RecordExit  = "exit"  // a process of the sandbox ended
	RecordNet   = "net"   // a connection or request through the egress gateway
	RecordUsage = "usage" // a resource use sample of the sandbox's cgroup
	RecordLoss  = "loss"  // events are missing, and why
	RecordEnd   = "end"   // the record ends (the sandbox ended)
)

// RecordEvent is one event of a sandbox's activity record
// (GET /v1/sandboxes/{id}/events): the schema of `airlock run --record`'s
// lines, with a cursor. Fields that do not apply to the type are absent.
type RecordEvent struct {
	// Cursor is the value of ?cursor= (or, for SSE, Last-Event-ID) that
	// lists the events after this one.
	Cursor string    `json:"cursor"`
	Type   string    `json:"type"`
	Time   time.Time `json:"time"`

	// start and end: the sandbox; end: why it ended.
	Sandbox string `json:"sandbox,omitempty"`
	Version int    `json:"version,omitempty"`

	// exec and exit: pids as seen inside the sandbox and on the host.
	Pid      int `json:"pid,omitempty"`
	HostPid  int `json:"host_pid,omitempty"`
	PPid     int `json:"ppid,omitempty"`
	HostPPid int `json:"host_ppid,omitempty"`

	// exec: the call (execve or execveat), the path as passed, what a
	// descriptor path named (e.g. "/memfd:x (deleted)"), argv as read
	// while the caller waited, the working directory, and the outcome:
	// "ok", "failed" or "unconfirmed".
	Syscall       string   `json:"syscall,omitempty"`
	Path          string   `json:"path,omitempty"`
	PathTarget    string   `json:"path_target,omitempty"`
	Argv          []string `json:"argv,omitempty"`
	ArgvTruncated bool     `json:"argv_truncated,omitempty"`
	Cwd           string   `json:"cwd,omitempty"`
	Result        string   `json:"result,omitempty"`

	// exit: Exited with Code, or Signal (and Core); DurationMs from the
	// fork (absent when the start is unknown); Lost when the exit was
	// never seen.
	Exited     bool     `json:"exited,omitempty"`
	Code       *int     `json:"code,omitempty"`
	Signal     int      `json:"signal,omitempty"`
	Core       bool     `json:"core,omitempty"`
	DurationMs *float64 `json:"duration_ms,omitempty"`
	Lost       bool     `json:"lost,omitempty"`

	// net: as in NetworkEvent.
	Proto     string `json:"proto,omitempty"`
	Method    string `json:"method,omitempty"`
	Host      string `json:"host,omitempty"`
	Port      int    `json:"port,omitempty"`
	Addr      string `json:"addr,omitempty"`
	URLPath   string `json:"url_path,omitempty"`
	Allowed   *bool  `json:"allowed,omitempty"`
	Rule      string `json:"rule,omitempty"`
	BytesUp   int64  `json:"bytes_up,omitempty"`
	BytesDown int64  `json:"bytes_down,omitempty"`
	// Error: why a net request failed, or why an exec's memory could not
	// be read. Not "error": in a stream, a line whose "error" is an object
	// is the stream's error.
	Error string `json:"error_message,omitempty"`

	// usage: cumulative CPU time, memory in use and its peak, tasks.
	CPUNs           *uint64 `json:"cpu_ns,omitempty"`
	MemoryBytes     *uint64 `json:"memory_bytes,omitempty"`
	MemoryPeakBytes *uint64 `json:"memory_peak_bytes,omitempty"`
	Pids            *uint64 `json:"pids,omitempty"`

	// loss and end: why.
	Reason string `json:"reason,omitempty"`
}

// RecordEventsPage is the body of GET /v1/sandboxes/{id}/events: the
// sandbox's activity record, oldest first. Filters: ?type=T (repeatable or
// comma-separated), ?since=RFC3339 time, ?cursor=C, ?limit=N (1..1000,
// default 100).
type RecordEventsPage struct {
	Events []RecordEvent `json:"events"`
	// NextCursor is set when there are more events now: pass it as
	// ?cursor= with the same filters for the next page.
	NextCursor string `json:"next_cursor,omitempty"`
}

// NetworkPolicy is a sandbox's egress policy: the body of PUT and the
// answer of GET /v1/sandboxes/{id}/network/policy. A PUT replaces these
// fields while the sandbox runs; open connections the new policy denies
// are closed.
type NetworkPolicy struct {
	// Mode is "none", "allowlist" or "open". A sandbox created with mode
	// none has no egress gateway and keeps mode none without rules (a PUT
	// of another mode, or of any rule, is a 409); one created with a
	// gateway may switch between all three (none then denies everything).
	Mode string `json:"mode"`
	// Allow and Deny are egress rules: HOST[:PORT] with *.domain
	// wildcards, IP literals and CIDRs, or @preset names (Allow only).
	// Deny wins. Absent means none.
	Allow []string `json:"allow,omitempty"`
	Deny  []string `json:"deny,omitempty"`
	// HTTP are request rules for inspected hosts (whose TLS the gateway
	// terminates with the sandbox's CA). Credentials are not here: they
	// are fixed when the sandbox is created.
	HTTP []HTTPRule `json:"http,omitempty"`
}

// HTTPRule allows requests to Hosts by method and path prefix; a request
// to a host some rules name must match one of them.
type HTTPRule struct {
	Hosts   []string `json:"hosts"`             // names and *.wildcards, no IPs
	Methods []string `json:"methods,omitempty"` // none: any
	Paths   []string `json:"paths,omitempty"`   // prefixes; none: any
}

// Network modes.
const (
	NetworkModeNone      = "none"
	NetworkModeAllowlist = "allowlist"
	NetworkModeOpen      = "open"
)

// FileInfo describes a file inside a sandbox.
type FileInfo struct {
	Name    string    `json:"name"`
	Path    string    `json:"path,omitempty"`
	Size    int64     `json:"size"`
	Mode    uint32    `json:"mode"` // permission bits
	Dir     bool      `json:"dir,omitempty"`
	Link    string    `json:"link,omitempty"`
	ModTime time.Time `json:"mod_time"`
}

// FileList is the body of GET /v1/sandboxes/{id}/files/list.
type FileList struct {
	Entries []FileInfo `json:"entries"`
}

// MkdirRequest is the body of POST /v1/sandboxes/{id}/files/mkdir (mkdir -p).
type MkdirRequest struct {
	Path string `json:"path"`
	Mode uint32 `json:"mode,omitempty"`
}

// RenameRequest is the body of POST /v1/sandboxes/{id}/files/rename.
type RenameRequest struct {
	From string `json:"from"`
	To   string `json:"to"`
}

// PTY is the WebSocket protocol of GET /v1/sandboxes/{id}/pty: the client's
// first message is a text frame holding a PTYStart; then binary frames carry
// terminal bytes both ways, client text frames carry PTYControl (resize,
// signal), and the server's last text frame is a PTYExit before
// it closes the connection.
type PTYStart struct {
	ExecRequest
	Cols uint16 `json:"cols,omitempty"`
	Rows uint16 `json:"rows,omitempty"`
}

// PTYControl is a client control message on a PTY WebSocket.
type PTYControl struct {
	Resize *PTYSize `json:"resize,omitempty"`
	Signal string   `json:"signal,omitempty"`
}

// PTYSize is a terminal size.
type PTYSize struct {
	Cols uint16 `json:"cols"`
	Rows uint16 `json:"rows"`
}

// PTYExit is the server's last message on a PTY WebSocket. When the
// command could not run, Error says why and ErrorCode is the error code an
// HTTP answer would carry; a command not found has ExitCode 127, one not
// executable 126 (as a shell reports them), other failures -1.
type PTYExit struct {
	ProcessID string `json:"process_id"`
	ExitCode  int    `json:"exit_code"`
	Signal    int    `json:"signal,omitempty"`
	Error     string `json:"error,omitempty"`
	ErrorCode string `json:"error_code,omitempty"`
}

// APIKey describes an API key; Key (the secret) is set only in the answer
// that created it and is never stored by the daemon (only its hash is).
type APIKey struct {
	ID   string `json:"id"`
	Name string `json:"name,omitempty"`
	// Tenant: a key with a tenant lists, sees and touches only the
	// sandboxes made with keys of that tenant; a key without one sees all.
	Tenant    string     `json:"tenant,omitempty"`
	Key       string     `json:"key,omitempty"`
	CreatedAt time.Time  `json:"created_at"`
	RevokedAt *time.Time `json:"revoked_at,omitempty"`
	LastUsed  *time.Time `json:"last_used_at,omitempty"`
}

// CreateKeyRequest is the body of POST /v1/keys.
type CreateKeyRequest struct {
	Name string `json:"name,omitempty"`
	// Tenant (optional): 1 to 63 of a-z, 0-9, '.', '_', '-', starting with
	// a letter or digit.
	Tenant string `json:"tenant,omitempty"`
}

// KeyList is the body of GET /v1/keys.
type KeyList struct {
	Keys []APIKey `json:"keys"`
}

// Error is the body of every error answer: {"error": {...}}.
type Error struct {
	Err ErrorBody `json:"error"`
}

// ErrorBody says what went wrong.
type ErrorBody struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Error codes and the HTTP status each is sent with.
const (
	CodeInvalid       = "invalid_argument"    // 400
	CodeUnauthorized  = "unauthenticated"     // 401
	CodeForbidden     = "permission_denied"   // 403
	CodeNotFound      = "not_found"           // 404
	CodeConflict      = "failed_precondition" // 409: wrong state
	CodeExists        = "already_exists"      // 409
	CodeTooLarge      = "too_large"           // 413
	CodeExhausted     = "resource_exhausted"  // 429 with Retry-After
	CodeInternal      = "internal"            // 500
	CodeUnavailable   = "unavailable"         // 503
	CodeNotSupported  = "not_implemented"     // 501
	CodeTimeout       = "deadline_exceeded"   // 504
	CodeMethodInvalid = "method_not_allowed"  // 405
)

// Refinements of invalid_argument (400) for an exec, process or PTY start
// whose command does not exist in the sandbox (what a shell reports as 127)
// or exists but cannot be executed (126). No process was started.
const (
	CodeCommandNotFound = "command_not_found"
	CodeNotExecutable   = "not_executable"
)

// Headers of file answers.
const (
	HeaderFileSize = "X-Airlock-File-Size"
	HeaderFileMode = "X-Airlock-File-Mode"
	// HeaderError is the trailer of an archive download that failed after
	// its stream started: an ErrorBody as JSON. The stream is then cut
	// short of a whole tar block, so that no tar reader takes it for a
	// complete archive.
	HeaderError = "X-Airlock-Error"
)

// DefaultMaxDownload is the most a download (GET .../files or
// .../archive) may carry unless its max_size says otherwise: the bytes of
// the answer, and for an archive also the sizes of the files in it (a
// sparse file counts its holes).
const DefaultMaxDownload int64 = 1 << 30

// CreateSnapshotRequest is the body of POST /v1/sandboxes/{id}/snapshots.
type CreateSnapshotRequest struct {
	// Name is unique per tenant: 1-128 bytes of letters, digits, '.',
	// '_' and '-'. "": the snapshot's id.
	Name   string            `json:"name,omitempty"`
	Labels map[string]string `json:"labels,omitempty"`
}

// Snapshot is a snapshot of a sandbox's filesystem state: its workspace
// (/workspace) and, where Root is true, the copy-on-write layer over its
// root filesystem, taken with the sandbox frozen so that it is consistent.
// Processes and memory are not captured (Processes is always false). A
// snapshot outlives its
// sandbox and the daemon's restarts; it belongs to the tenant of the key
// that made it.
type Snapshot struct {
	ID        string            `json:"id"`
	Name      string            `json:"name"`
	SandboxID string            `json:"sandbox_id"`
	Image     string            `json:"image,omitempty"`
	Labels    map[string]string `json:"labels,omitempty"`
	// Size is the bytes of the snapshot's files; Files its entries.
	Size      int64     `json:"size"`
	Files     int       `json:"files"`
	CreatedAt time.Time `json:"created_at"`
	// Workspace is true: /workspace is captured.
	Workspace bool `json:"workspace"`
	// Root: the copy-on-write layer over the root filesystem is captured
	// too (false when it could not be read; see the OpenAPI description).
	Root bool `json:"root"`
	// Processes is false: running processes and memory are not captured.
	Processes bool `json:"processes"`
	// Seconds is how long taking it took (only in the answer of the
	// creation).
	Seconds float64 `json:"seconds,omitempty"`
	// CopyOnWrite: the snapshot is a copy-on-write clone of the
	// workspace volume's image (constant time; sandboxes made from it
	// clone it too); false: a file-by-file copy (the daemon's volumes
	// have no reflinks: see airlock doctor).
	CopyOnWrite bool `json:"copy_on_write"`
}

// SnapshotList is the answer of GET /v1/snapshots.
type SnapshotList struct {
	Snapshots []Snapshot `json:"snapshots"`
	// Used is the bytes all snapshots hold; Quota the daemon's
	// snapshot_quota (0: none).
	Used  int64 `json:"used"`
	Quota int64 `json:"quota,omitempty"`
}

// ForkRequest is the body of POST /v1/sandboxes/{id}/fork.
type ForkRequest struct {
	// Count is how many sandboxes to make (default 1, at most 64).
	Count  int               `json:"count,omitempty"`
	Labels map[string]string `json:"labels,omitempty"`
}

// ForkResult is the answer of a fork: the snapshot of the parent's state
// (kept, named fork-<parent>-<time>) and the sandboxes made from it.
type ForkResult struct {
	Snapshot  Snapshot  `json:"snapshot"`
	Sandboxes []Sandbox `json:"sandboxes"`
	Seconds   float64   `json:"seconds"`
}

// RestoreRequest is the body of POST /v1/sandboxes/{id}/restore.
type RestoreRequest struct {
	Snapshot string `json:"snapshot"` // id or name
}

// Changes is the answer of GET /v1/sandboxes/{id}/changes: the workspace's
// changes since a snapshot (Since) or since the sandbox was created, as
// `airlock review` lists them (paths relative to /workspace; a directory's
// path ends in '/').
type Changes struct {
	Since   string   `json:"since,omitempty"`
	Changes []Change `json:"changes"`
	// DiffsTruncated: the diffs stopped at 16 MiB in all; the changes
	// past that point are listed without one.
	DiffsTruncated bool `json:"diffs_truncated,omitempty"`
}

// Change is one changed path. Kind: added, modified, deleted, mode (only
// the mode changed), symlink (a link's target changed), type (a file
// became a directory, ...). Type: file, dir, symlink or special.
type Change struct {
	Path      string `json:"path"`
	Kind      string `json:"kind"`
	Type      string `json:"type"`
	OldMode   string `json:"old_mode,omitempty"`
	NewMode   string `json:"new_mode,omitempty"`
	OldTarget string `json:"old_target,omitempty"`
	NewTarget string `json:"new_target,omitempty"`
	OldSize   int64  `json:"old_size,omitempty"`
	Size      int64  `json:"size,omitempty"`
	Binary    bool   `json:"binary,omitempty"`
	// Diff is a unified diff of a text file (?diff=true).
	Diff string `json:"diff,omitempty"`
}
