package mcpserver

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"path"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/client"
	"github.com/airlock-dev/airlock/internal/egress/netsum"
)

// ToolNames are the tools the server offers, in the order it lists them.
var ToolNames = []string{
	"create_sandbox", "list_sandboxes", "destroy_sandbox",
	"run_command", "start_command", "read_output", "write_stdin", "stop_command",
	"read_file", "write_file", "list_files", "network_audit",
}

// Limits of the tools' arguments.
const (
	defaultReadBytes   = 256 << 10
	maxReadBytes       = 4 << 20
	defaultOutputBytes = 64 << 10
	maxOutputBytes     = 1 << 20
	maxWaitSeconds     = 30
	maxWriteBytes      = 16 << 20
	// maxFrame is the largest request the server reads: a write_file of
	// maxWriteBytes in the costliest JSON (6 bytes a byte), so that an
	// oversized write is that tool's error, not the end of the session
	// (over stdio, the end of every sandbox in it).
	maxFrame = 6*maxWriteBytes + 1<<20
)

// toolError turns an error of the SDK into the message a model reads: the
// API's message and code, without the SDK's prefix.
func toolError(what string, err error) error {
	var e *client.Error
	if errors.As(err, &e) {
		return fmt.Errorf("%s: %s (%s)", what, e.Message, e.Code)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%s: timed out", what)
	}
	return fmt.Errorf("%s: %s", what, strings.TrimPrefix(err.Error(), "airlock: "))
}

func text(format string, a ...any) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf(format, a...)}}}
}

// schemaFor is the input schema of In. It has no defaults: go-sdk v1.8.0
// panics applying defaults to a call whose arguments are null.
func schemaFor[In any]() *jsonschema.Schema {
	s, err := jsonschema.For[In](nil)
	if err != nil {
		panic(err)
	}
	return s
}

// ---- sandboxes

type createIn struct {
	Policy         string  `json:"policy,omitempty" jsonschema:"the named policy (isolation, network and resource limits) the sandbox is made from; the operator allows only the names listed; omit for the first one"`
	TimeoutMinutes float64 `json:"timeout_minutes,omitempty" jsonschema:"the sandbox is destroyed this many minutes after it is created; omit for the daemon's default (usually 60)"`
}

type sandboxOut struct {
	SandboxID string `json:"sandbox_id"`
	State     string `json:"state" jsonschema:"creating, running, paused, stopped or failed"`
	Policy    string `json:"policy"`
	CreatedAt string `json:"created_at"`
	ExpiresAt string `json:"expires_at,omitempty" jsonschema:"when the sandbox is destroyed (RFC 3339)"`
	Reason    string `json:"reason,omitempty" jsonschema:"why a sandbox stopped or failed"`
	Workspace string `json:"workspace"`
}

func sandboxView(sb *api.Sandbox) sandboxOut {
	o := sandboxOut{SandboxID: sb.ID, State: sb.State, Policy: sb.Policy, CreatedAt: sb.CreatedAt.UTC().Format(time.RFC3339), Reason: sb.Reason, Workspace: Workspace}
	if o.Policy == "" {
		o.Policy = "default"
	}
	if sb.ExpiresAt != nil {
		o.ExpiresAt = sb.ExpiresAt.UTC().Format(time.RFC3339)
	}
	return o
}

type listIn struct{}

type listOut struct {
	Sandboxes    []sandboxOut `json:"sandboxes"`
	MaxSandboxes int          `json:"max_sandboxes" jsonschema:"how many sandboxes this server may hold at once"`
}

type sandboxIn struct {
	SandboxID string `json:"sandbox_id" jsonschema:"the id create_sandbox returned"`
}

type destroyOut struct {
	SandboxID string `json:"sandbox_id"`
	Destroyed bool   `json:"destroyed"`
}

// ---- commands

type runIn struct {
	SandboxID      string            `json:"sandbox_id" jsonschema:"the id create_sandbox returned"`
	Command        string            `json:"command,omitempty" jsonschema:"a shell command line, run with /bin/sh -c (pipes, redirections and && work); give this or argv"`
	Argv           []string          `json:"argv,omitempty" jsonschema:"the program and its arguments, run without a shell; give this or command"`
	Cwd            string            `json:"cwd,omitempty" jsonschema:"working directory inside the sandbox; default /workspace"`
	Env            map[string]string `json:"env,omitempty" jsonschema:"environment variables to add"`
	Stdin          string            `json:"stdin,omitempty" jsonschema:"text written to the command's standard input, which is then closed"`
	TimeoutSeconds float64           `json:"timeout_seconds,omitempty" jsonschema:"kill the command after this many seconds; default 60, at most the operator's limit (600 unless changed)"`
}

type runOut struct {
	ProcessID      string      `json:"process_id"`
	ExitCode       int         `json:"exit_code" jsonschema:"the command's exit status; -1 when a signal killed it"`
	Signal         int         `json:"signal,omitempty" jsonschema:"the signal that killed the command, if one did"`
	TimedOut       bool        `json:"timed_out" jsonschema:"the command was killed because it ran past timeout_seconds"`
	TimeoutSeconds float64     `json:"timeout_seconds" jsonschema:"the timeout that applied"`
	DurationMs     float64     `json:"duration_ms"`
	Stdout         string      `json:"stdout" jsonschema:"standard output; past 32 KiB only its first and last 16 KiB, with a marker line saying how many bytes were cut"`
	Stderr         string      `json:"stderr" jsonschema:"standard error, cut like stdout"`
	StdoutBytes    int64       `json:"stdout_bytes" jsonschema:"how many bytes the command wrote to stdout"`
	StderrBytes    int64       `json:"stderr_bytes"`
	StdoutBytesCut int64       `json:"stdout_bytes_cut" jsonschema:"bytes of stdout left out of this result"`
	StderrBytesCut int64       `json:"stderr_bytes_cut"`
	NetworkDenied  []netDenial `json:"network_denied,omitempty" jsonschema:"connections and requests the sandbox's network policy denied, or that failed before they started, while the command ran (network_audit lists every one)"`
}

// netDenial is one destination the egress gateway refused during a
// command, with how many times.
type netDenial struct {
	Host  string `json:"host"`
	Port  int    `json:"port"`
	Rule  string `json:"rule,omitempty" jsonschema:"the rule that denied it"`
	Error string `json:"error,omitempty" jsonschema:"why it failed, when no rule denied it"`
	Count int    `json:"count"`
}

type startIn struct {
	SandboxID      string            `json:"sandbox_id" jsonschema:"the id create_sandbox returned"`
	Command        string            `json:"command,omitempty" jsonschema:"a shell command line, run with /bin/sh -c; give this or argv"`
	Argv           []string          `json:"argv,omitempty" jsonschema:"the program and its arguments, run without a shell; give this or command"`
	Cwd            string            `json:"cwd,omitempty" jsonschema:"working directory inside the sandbox; default /workspace"`
	Env            map[string]string `json:"env,omitempty" jsonschema:"environment variables to add"`
	Stdin          string            `json:"stdin,omitempty" jsonschema:"text written to standard input at the start; stdin stays open for write_stdin"`
	TimeoutSeconds float64           `json:"timeout_seconds,omitempty" jsonschema:"kill the process after this many seconds; omit to let it run until stop_command or the sandbox ends"`
}

type startOut struct {
	SandboxID string `json:"sandbox_id"`
	ProcessID string `json:"process_id"`
	Cursor    string `json:"cursor" jsonschema:"pass to read_output to read from the start"`
}

type processIn struct {
	SandboxID string `json:"sandbox_id" jsonschema:"the id create_sandbox returned"`
	ProcessID string `json:"process_id" jsonschema:"the id start_command returned"`
}

type readOutputIn struct {
	SandboxID   string  `json:"sandbox_id" jsonschema:"the id create_sandbox returned"`
	ProcessID   string  `json:"process_id" jsonschema:"the id start_command returned"`
	Cursor      string  `json:"cursor,omitempty" jsonschema:"the cursor of the previous read_output (or start_command); omit to read from the oldest output kept"`
	WaitSeconds float64 `json:"wait_seconds,omitempty" jsonschema:"when there is no new output yet, wait up to this many seconds (at most 30) for some or for the exit; 0 returns at once"`
	MaxBytes    int     `json:"max_bytes,omitempty" jsonschema:"return at most this many bytes of output (default 65536, at most 1048576); the rest waits for the next call"`
}

type readOutputOut struct {
	Stdout    string `json:"stdout"`
	Stderr    string `json:"stderr"`
	Cursor    string `json:"cursor" jsonschema:"pass to the next read_output to read what comes after"`
	Running   bool   `json:"running" jsonschema:"the process is still running"`
	Finished  bool   `json:"finished" jsonschema:"the process exited and all its output has been read"`
	ExitCode  *int   `json:"exit_code,omitempty" jsonschema:"the exit status, once finished"`
	Signal    int    `json:"signal,omitempty"`
	LostBytes int64  `json:"lost_bytes,omitempty" jsonschema:"output the sandbox dropped before it was read (it keeps the last 1 MiB per stream while nobody reads)"`
}

type writeStdinIn struct {
	SandboxID  string `json:"sandbox_id" jsonschema:"the id create_sandbox returned"`
	ProcessID  string `json:"process_id" jsonschema:"the id start_command returned"`
	Data       string `json:"data,omitempty" jsonschema:"text to write; include the newline a line-reading program waits for"`
	CloseStdin bool   `json:"close_stdin,omitempty" jsonschema:"close standard input after writing (the program then sees end of file)"`
}

type writeStdinOut struct {
	BytesWritten int  `json:"bytes_written"`
	Closed       bool `json:"closed"`
}

type stopIn struct {
	SandboxID string `json:"sandbox_id" jsonschema:"the id create_sandbox returned"`
	ProcessID string `json:"process_id" jsonschema:"the id start_command returned"`
	Signal    string `json:"signal,omitempty" jsonschema:"the signal to send: TERM (when omitted), INT, HUP, KILL, ..."`
}

type processOut struct {
	ProcessID string `json:"process_id"`
	State     string `json:"state" jsonschema:"running or exited"`
	ExitCode  *int   `json:"exit_code,omitempty"`
	Signal    int    `json:"signal,omitempty"`
}

// ---- files

type readFileIn struct {
	SandboxID string `json:"sandbox_id" jsonschema:"the id create_sandbox returned"`
	Path      string `json:"path" jsonschema:"a file under /workspace (absolute, or relative to /workspace)"`
	MaxBytes  int    `json:"max_bytes,omitempty" jsonschema:"read at most this many bytes from the start (default 262144, at most 4194304)"`
}

type readFileOut struct {
	Path      string `json:"path"`
	Size      int64  `json:"size"`
	Encoding  string `json:"encoding" jsonschema:"utf-8 when content is the text itself, base64 for a binary file"`
	Content   string `json:"content"`
	Truncated bool   `json:"truncated" jsonschema:"the file is longer than what content holds"`
}

type writeFileIn struct {
	SandboxID  string `json:"sandbox_id" jsonschema:"the id create_sandbox returned"`
	Path       string `json:"path" jsonschema:"a file under /workspace (absolute, or relative to /workspace); missing directories are created, an existing file is replaced"`
	Content    string `json:"content" jsonschema:"the file's content"`
	Encoding   string `json:"encoding,omitempty" jsonschema:"utf-8 (when omitted) or base64 for binary content"`
	Executable bool   `json:"executable,omitempty" jsonschema:"make the file executable (mode 0755 instead of 0644)"`
}

type writeFileOut struct {
	Path  string `json:"path"`
	Bytes int    `json:"bytes"`
}

type listFilesIn struct {
	SandboxID string `json:"sandbox_id" jsonschema:"the id create_sandbox returned"`
	Path      string `json:"path,omitempty" jsonschema:"a directory under /workspace; default /workspace"`
}

type fileEntry struct {
	Name    string `json:"name"`
	Path    string `json:"path"`
	Type    string `json:"type" jsonschema:"file, dir or symlink"`
	Size    int64  `json:"size"`
	Mode    string `json:"mode" jsonschema:"permission bits in octal"`
	Target  string `json:"target,omitempty" jsonschema:"where a symlink points"`
	ModTime string `json:"mod_time"`
}

type listFilesOut struct {
	Path    string      `json:"path"`
	Entries []fileEntry `json:"entries"`
}

// ---- network

type auditIn struct {
	SandboxID string `json:"sandbox_id" jsonschema:"the id create_sandbox returned"`
	Only      string `json:"only,omitempty" jsonschema:"allowed or denied to keep only those; problems for those denied by a rule or failed before any byte moved; omit for all"`
	Host      string `json:"host,omitempty" jsonschema:"keep only this host"`
	Cursor    string `json:"cursor,omitempty" jsonschema:"the cursor of the previous network_audit, to list only later records"`
	Limit     int    `json:"limit,omitempty" jsonschema:"at most this many records (1 to 1000, default 100)"`
}

type auditEvent struct {
	Time      string  `json:"time"`
	Proto     string  `json:"proto" jsonschema:"http, connect, socks or https"`
	Method    string  `json:"method,omitempty"`
	Host      string  `json:"host"`
	Port      int     `json:"port"`
	Path      string  `json:"path,omitempty"`
	Allowed   bool    `json:"allowed"`
	Rule      string  `json:"rule,omitempty" jsonschema:"the rule or reason that decided"`
	BytesUp   int64   `json:"bytes_up"`
	BytesDown int64   `json:"bytes_down"`
	Duration  float64 `json:"duration_ms"`
	Error     string  `json:"error,omitempty"`
}

type auditOut struct {
	Events []auditEvent `json:"events"`
	Cursor string       `json:"cursor" jsonschema:"pass as cursor to list the records after these"`
	More   bool         `json:"more" jsonschema:"more records match now: call again with cursor"`
}

// addTools registers the tools.
func (s *server) addTools() {
	create := schemaFor[createIn]()
	enum := make([]any, len(s.o.Policies))
	for i, p := range s.o.Policies {
		enum[i] = p
	}
	create.Properties["policy"].Enum = enum
	create.Properties["policy"].Description += " (" + strings.Join(s.o.Policies, ", ") + ")"
	mcp.AddTool(s.mcp, &mcp.Tool{Name: "create_sandbox", InputSchema: create,
		Description: "Create an isolated Linux sandbox and return its sandbox_id. It has an empty, writable /workspace (the working directory of commands), the host's programs read-only, and the network the policy allows (none by default). It is destroyed when its timeout passes, with destroy_sandbox, or when this MCP server stops. Sandboxes are limited in number: destroy the ones you are done with."},
		s.createSandbox)
	mcp.AddTool(s.mcp, &mcp.Tool{Name: "list_sandboxes", InputSchema: schemaFor[listIn](),
		Description: "List the sandboxes this server created, with their state and when they expire."},
		s.listSandboxes)
	mcp.AddTool(s.mcp, &mcp.Tool{Name: "destroy_sandbox", InputSchema: schemaFor[sandboxIn](),
		Description: "Destroy a sandbox: its processes are killed and its files are gone."},
		s.destroySandbox)
	mcp.AddTool(s.mcp, &mcp.Tool{Name: "run_command", InputSchema: schemaFor[runIn](),
		Description: "Run a command in a sandbox and wait for it to finish (60 s by default, timeout_seconds to change). Returns the exit code, stdout and stderr. Give a shell line in command, or argv. Output past 32 KiB per stream keeps its first and last 16 KiB with a marker saying how many bytes were cut: redirect big output to a file and read it with read_file, or filter it (grep, tail). For servers, watchers or interactive programs use start_command."},
		s.runCommand)
	mcp.AddTool(s.mcp, &mcp.Tool{Name: "start_command", InputSchema: schemaFor[startIn](),
		Description: "Start a command in the background and return its process_id at once. Read its output with read_output, send input with write_stdin, end it with stop_command. Use it for long builds, servers and interactive programs."},
		s.startCommand)
	mcp.AddTool(s.mcp, &mcp.Tool{Name: "read_output", InputSchema: schemaFor[readOutputIn](),
		Description: "Read a background process's output after a cursor: give the cursor the previous call returned to get only new output. With wait_seconds it waits for new output or the exit. finished is true once the process has exited and everything was read."},
		s.readOutput)
	mcp.AddTool(s.mcp, &mcp.Tool{Name: "write_stdin", InputSchema: schemaFor[writeStdinIn](),
		Description: "Write text to a background process's standard input; close_stdin sends end of file."},
		s.writeStdin)
	mcp.AddTool(s.mcp, &mcp.Tool{Name: "stop_command", InputSchema: schemaFor[stopIn](),
		Description: "Send a signal (TERM unless given) to a background process and wait up to 5 s for it to exit; returns its state. Use KILL for one that ignores TERM."},
		s.stopCommand)
	mcp.AddTool(s.mcp, &mcp.Tool{Name: "read_file", InputSchema: schemaFor[readFileIn](),
		Description: "Read a file under /workspace. Text comes back as is (encoding utf-8); a binary file comes back in base64 (encoding base64). Long files are cut at max_bytes (truncated is then true)."},
		s.readFile)
	mcp.AddTool(s.mcp, &mcp.Tool{Name: "write_file", InputSchema: schemaFor[writeFileIn](),
		Description: "Write a file under /workspace, creating missing directories and replacing an existing file. Give encoding base64 for binary content."},
		s.writeFile)
	mcp.AddTool(s.mcp, &mcp.Tool{Name: "list_files", InputSchema: schemaFor[listFilesIn](),
		Description: "List a directory under /workspace (default /workspace itself): names, types, sizes and modes."},
		s.listFiles)
	mcp.AddTool(s.mcp, &mcp.Tool{Name: "network_audit", InputSchema: schemaFor[auditIn](),
		Description: "List the sandbox's network connections and HTTP requests, allowed and denied, oldest first, with the rule that decided. Use it to see why a download or an API call failed. Pass the returned cursor to see only later records."},
		s.networkAudit)
}

func (s *server) createSandbox(ctx context.Context, _ *mcp.CallToolRequest, in createIn) (*mcp.CallToolResult, sandboxOut, error) {
	p := in.Policy
	if p == "" {
		p = s.o.Policies[0]
	}
	allowed := false
	for _, a := range s.o.Policies {
		allowed = allowed || a == p
	}
	if !allowed {
		return nil, sandboxOut{}, fmt.Errorf("policy %q is not allowed here: the operator allows %s", clip(p), strings.Join(s.o.Policies, ", "))
	}
	if in.TimeoutMinutes < 0 {
		return nil, sandboxOut{}, errors.New("timeout_minutes must be positive")
	}
	if err := s.reserve(ctx); err != nil {
		return nil, sandboxOut{}, err
	}
	id := ""
	defer func() { s.created(id) }()
	sb, err := s.c.CreateSandbox(ctx, &api.CreateSandboxRequest{PolicyName: p, TimeoutSeconds: in.TimeoutMinutes * 60,
		Labels: map[string]string{ownerLabel: s.instance}})
	if err != nil {
		return nil, sandboxOut{}, toolError("create_sandbox", err)
	}
	id = sb.ID
	o := sandboxView(sb)
	return text("Created sandbox %s (policy %s, expires %s). Its working directory is /workspace.", o.SandboxID, o.Policy, orNone(o.ExpiresAt)), o, nil
}

func orNone(s string) string {
	if s == "" {
		return "never"
	}
	return s
}

func (s *server) listSandboxes(ctx context.Context, _ *mcp.CallToolRequest, _ listIn) (*mcp.CallToolResult, listOut, error) {
	out := listOut{Sandboxes: []sandboxOut{}, MaxSandboxes: s.o.MaxSandboxes}
	list, err := s.c.AllSandboxes(ctx, client.ListOptions{Labels: map[string]string{ownerLabel: s.instance}})
	if err != nil {
		return nil, out, toolError("list_sandboxes", err)
	}
	var b strings.Builder
	for i := range list {
		if s.own(list[i].ID) != nil {
			continue
		}
		v := sandboxView(&list[i])
		out.Sandboxes = append(out.Sandboxes, v)
		fmt.Fprintf(&b, "%s %s policy=%s expires=%s\n", v.SandboxID, v.State, v.Policy, orNone(v.ExpiresAt))
	}
	if len(out.Sandboxes) == 0 {
		b.WriteString("No sandboxes: create one with create_sandbox.\n")
	}
	fmt.Fprintf(&b, "(%d of at most %d)", len(out.Sandboxes), s.o.MaxSandboxes)
	return text("%s", b.String()), out, nil
}

func (s *server) destroySandbox(ctx context.Context, _ *mcp.CallToolRequest, in sandboxIn) (*mcp.CallToolResult, destroyOut, error) {
	if err := s.own(in.SandboxID); err != nil {
		return nil, destroyOut{}, err
	}
	if err := s.c.DeleteSandbox(ctx, in.SandboxID); err != nil && !errors.Is(err, client.ErrNotFound) {
		return nil, destroyOut{}, toolError("destroy_sandbox", err)
	}
	s.forget(in.SandboxID)
	return text("Destroyed sandbox %s.", in.SandboxID), destroyOut{SandboxID: in.SandboxID, Destroyed: true}, nil
}

// argv returns the command to run from a shell line or an argv.
func argv(command string, av []string) ([]string, error) {
	switch {
	case command != "" && len(av) > 0:
		return nil, errors.New("give command (a shell line) or argv, not both")
	case command != "":
		return []string{"/bin/sh", "-c", command}, nil
	case len(av) > 0 && av[0] != "":
		return av, nil
	}
	return nil, errors.New("no command: give command (a shell line, e.g. \"ls -la\") or argv (e.g. [\"ls\", \"-la\"])")
}

func (s *server) runCommand(ctx context.Context, req *mcp.CallToolRequest, in runIn) (*mcp.CallToolResult, runOut, error) {
	if err := s.own(in.SandboxID); err != nil {
		return nil, runOut{}, err
	}
	av, err := argv(in.Command, in.Argv)
	if err != nil {
		return nil, runOut{}, err
	}
	timeout := DefaultExecTimeout
	if in.TimeoutSeconds < 0 {
		return nil, runOut{}, errors.New("timeout_seconds must be positive")
	}
	if in.TimeoutSeconds > 0 {
		// Compared in seconds first: a large number would overflow the
		// Duration.
		timeout = s.o.MaxExecTimeout
		if in.TimeoutSeconds < timeout.Seconds() {
			timeout = time.Duration(in.TimeoutSeconds * float64(time.Second))
		}
	}
	timeout = min(timeout, s.o.MaxExecTimeout)
	p, err := s.c.StartProcess(ctx, in.SandboxID, &api.ExecRequest{Argv: av, Cwd: in.Cwd, Env: in.Env, Stdin: []byte(in.Stdin), TimeoutSeconds: timeout.Seconds()})
	if err != nil {
		return nil, runOut{}, toolError("run_command", err)
	}
	// The daemon kills the process at its timeout; this bounds the wait
	// should it not.
	rctx, cancel := context.WithTimeout(ctx, timeout+30*time.Second)
	defer cancel()
	if err := s.c.CloseStdin(rctx, in.SandboxID, p.ID); err != nil && !errors.Is(err, client.ErrConflict) {
		s.kill(in.SandboxID, p.ID)
		return nil, runOut{}, toolError("run_command: close stdin", err)
	}
	stdout, stderr := newCapture(keepBytes), newCapture(keepBytes)
	stopProgress := s.progress(rctx, req, time.Now())
	out := runOut{ProcessID: p.ID, TimeoutSeconds: timeout.Seconds(), ExitCode: -1}
	err = s.c.FollowOutput(rctx, in.SandboxID, p.ID, "", func(ev api.OutputEvent) error {
		switch ev.Kind {
		case api.EventStdout:
			stdout.write(ev.Data)
		case api.EventStderr:
			stderr.write(ev.Data)
		case api.EventLost:
			if ev.Stream == api.EventStderr {
				stderr.lost += int64(ev.Bytes)
			} else {
				stdout.lost += int64(ev.Bytes)
			}
		case api.EventExit:
			if ev.ExitCode != nil {
				out.ExitCode = *ev.ExitCode
			}
			out.Signal = ev.Signal
		}
		return nil
	})
	stopProgress()
	if err != nil {
		s.kill(in.SandboxID, p.ID)
		return nil, runOut{}, toolError("run_command", err)
	}
	if fin, err := s.c.GetProcess(rctx, in.SandboxID, p.ID); err == nil {
		out.TimedOut, out.DurationMs = fin.TimedOut, fin.DurationMs
	}
	out.NetworkDenied = s.deniedSince(rctx, in.SandboxID, p.StartedAt)
	out.Stdout, out.Stderr = stdout.text(), stderr.text()
	out.StdoutBytes, out.StderrBytes = stdout.total, stderr.total
	out.StdoutBytesCut, out.StderrBytesCut = stdout.cut(), stderr.cut()

	var b strings.Builder
	switch {
	case out.TimedOut:
		fmt.Fprintf(&b, "Timed out after %gs and was killed (exit code %d).\n", out.TimeoutSeconds, out.ExitCode)
	case out.Signal != 0:
		fmt.Fprintf(&b, "Killed by signal %d.\n", out.Signal)
	default:
		fmt.Fprintf(&b, "Exit code %d.\n", out.ExitCode)
	}
	if out.Stdout != "" {
		fmt.Fprintf(&b, "--- stdout ---\n%s\n", strings.TrimSuffix(out.Stdout, "\n"))
	}
	if out.Stderr != "" {
		fmt.Fprintf(&b, "--- stderr ---\n%s\n", strings.TrimSuffix(out.Stderr, "\n"))
	}
	if len(out.NetworkDenied) > 0 {
		b.WriteString("--- network denied or failed (denied by a rule of the sandbox's policy, or failed before any byte moved; network_audit lists every record) ---\n")
		for _, d := range out.NetworkDenied {
			why := d.Rule
			if why == "" {
				why = "failed: " + d.Error
			}
			fmt.Fprintf(&b, "%s: %s", net.JoinHostPort(d.Host, strconv.Itoa(d.Port)), why)
			if d.Count > 1 {
				fmt.Fprintf(&b, " (%d times)", d.Count)
			}
			b.WriteString("\n")
		}
	}
	return text("%s", strings.TrimSuffix(b.String(), "\n")), out, nil
}

// maxNetDenials is how many distinct denials a run_command result lists.
const maxNetDenials = 20

// deniedSince returns the egress records of sandbox id from since on that
// a rule denied or that failed before any byte moved (netsum.Problem), one
// entry per destination and reason: an agent that sees a 403 or a failed
// download learns why without another call. Best effort: nil when the
// audit cannot be read (or the sandbox has no network, and so no records).
func (s *server) deniedSince(ctx context.Context, id string, since time.Time) []netDenial {
	sum, err := netsum.FromAudit(ctx, s.c, id, since, maxNetDenials)
	if err != nil {
		return nil
	}
	var out []netDenial
	for _, k := range sum.Kinds() {
		out = append(out, netDenial{Host: k.Host, Port: k.Port, Rule: k.Rule, Error: k.Error, Count: k.Count})
	}
	return out
}

// kill ends a process whose caller went away.
func (s *server) kill(id, pid string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s.c.Signal(ctx, id, pid, "KILL")
}

// progress sends a progress notification every ProgressInterval while a
// command runs, when the client asked for them (a progress token), so that
// a client that resets its timeout on progress waits for long commands.
func (s *server) progress(ctx context.Context, req *mcp.CallToolRequest, start time.Time) func() {
	token := req.Params.GetProgressToken()
	if token == nil || req.Session == nil {
		return func() {}
	}
	done := make(chan struct{})
	finished := make(chan struct{})
	// The captures belong to the caller's goroutine: progress tells the
	// time only.
	go func() {
		defer close(finished)
		t := time.NewTicker(ProgressInterval)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				el := time.Since(start)
				s.o.Log.Debug("progress", "elapsed", el)
				req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: token,
					Progress: el.Seconds(), Message: fmt.Sprintf("still running after %ds", int(el.Seconds()))})
			}
		}
	}()
	return func() { close(done); <-finished }
}

func (s *server) startCommand(ctx context.Context, _ *mcp.CallToolRequest, in startIn) (*mcp.CallToolResult, startOut, error) {
	if err := s.own(in.SandboxID); err != nil {
		return nil, startOut{}, err
	}
	av, err := argv(in.Command, in.Argv)
	if err != nil {
		return nil, startOut{}, err
	}
	if in.TimeoutSeconds < 0 {
		return nil, startOut{}, errors.New("timeout_seconds must be positive")
	}
	p, err := s.c.StartProcess(ctx, in.SandboxID, &api.ExecRequest{Argv: av, Cwd: in.Cwd, Env: in.Env, Stdin: []byte(in.Stdin), TimeoutSeconds: in.TimeoutSeconds})
	if err != nil {
		return nil, startOut{}, toolError("start_command", err)
	}
	return text("Started process %s in sandbox %s. Read its output with read_output (cursor \"\").", p.ID, in.SandboxID),
		startOut{SandboxID: in.SandboxID, ProcessID: p.ID, Cursor: ""}, nil
}

func (s *server) readOutput(ctx context.Context, _ *mcp.CallToolRequest, in readOutputIn) (*mcp.CallToolResult, readOutputOut, error) {
	out := readOutputOut{Cursor: in.Cursor}
	if err := s.own(in.SandboxID); err != nil {
		return nil, out, err
	}
	if in.ProcessID == "" {
		return nil, out, errors.New("process_id is empty: give the id start_command returned")
	}
	if in.WaitSeconds < 0 || in.WaitSeconds > maxWaitSeconds {
		return nil, out, fmt.Errorf("wait_seconds must be between 0 and %d", maxWaitSeconds)
	}
	limit := in.MaxBytes
	if limit == 0 {
		limit = defaultOutputBytes
	}
	if limit < 0 || limit > maxOutputBytes {
		return nil, out, fmt.Errorf("max_bytes must be between 1 and %d", maxOutputBytes)
	}
	follow := in.WaitSeconds > 0
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if follow {
		rctx, cancel = context.WithTimeout(ctx, time.Duration(in.WaitSeconds*float64(time.Second)))
		defer cancel()
	}
	st, err := s.c.Output(rctx, in.SandboxID, in.ProcessID, client.OutputOptions{Cursor: in.Cursor, Follow: follow})
	if err != nil {
		return nil, out, toolError("read_output", err)
	}
	defer st.Close()
	// Events come one at a time from a reader that waits for the next one
	// only once the last was taken, so the cursor returned is exactly
	// after what this answer holds.
	type item struct {
		ev  api.OutputEvent
		err error
	}
	next := make(chan item)
	want := make(chan struct{})
	go func() {
		for range want {
			ev, err := st.Next()
			next <- item{ev, err}
			if err != nil {
				return
			}
		}
	}()
	defer close(want)
	var stdout, stderr bytes.Buffer
	var settle <-chan time.Time
	n, cost := 0, 0 // bytes taken, and their JSON length
	partial := false
loop:
	for {
		select {
		case want <- struct{}{}:
		case <-settle:
			break loop
		}
		var it item
		select {
		case it = <-next:
		case <-settle:
			cancel() // ends the pending read
			<-next
			break loop
		}
		if it.err != nil {
			if errors.Is(it.err, io.EOF) || rctx.Err() != nil {
				break
			}
			return nil, out, toolError("read_output", it.err)
		}
		ev := it.ev
		switch ev.Kind {
		case api.EventStdout, api.EventStderr:
			data := ev.Data
			take := len(data)
			if n+take > limit {
				take = cutAt(data, limit-n)
			}
			if c := jsonCost(data[:take]); cost+c > maxEncoded {
				take = cutCost(data[:take], maxEncoded-cost)
			}
			if take < len(data) {
				// Only what fits (cut at a character's start when it can
				// be); the cursor then points inside the event, where the
				// next call resumes, and this call answers: a later event's
				// cursor would skip the rest of this one.
				if take == 0 || n > 0 && cost+jsonCost(data[:take]) > maxEncoded {
					break loop
				}
				cur, ok := cursorAt(ev, take)
				if !ok {
					if n > 0 {
						break loop // left whole for the next call
					}
					take = len(data)
					cur = ev.Cursor
				}
				data, ev.Cursor = data[:take], cur
			}
			partial = len(data) < len(ev.Data)
			if ev.Kind == api.EventStdout {
				stdout.Write(data)
			} else {
				stderr.Write(data)
			}
			n += len(data)
			cost += jsonCost(data)
		case api.EventLost:
			out.LostBytes += int64(ev.Bytes)
		case api.EventExit:
			out.Finished = true
			code := -1
			if ev.ExitCode != nil {
				code = *ev.ExitCode
			}
			out.ExitCode, out.Signal = &code, ev.Signal
		}
		out.Cursor = ev.Cursor
		if out.Finished || partial || n >= limit || cost >= maxEncoded {
			break
		}
		// Once something arrived, a follower gives what follows at once
		// a short moment, then answers.
		if follow && settle == nil && n > 0 {
			settle = time.After(200 * time.Millisecond)
		}
	}
	out.Stdout, out.Stderr = utf8Text(stdout.Bytes()), utf8Text(stderr.Bytes())
	if !out.Finished {
		p, err := s.c.GetProcess(ctx, in.SandboxID, in.ProcessID)
		if err != nil {
			return nil, out, toolError("read_output", err)
		}
		out.Running = p.State == api.ProcessRunning
	}
	var b strings.Builder
	if out.Stdout != "" {
		fmt.Fprintf(&b, "--- stdout ---\n%s\n", strings.TrimSuffix(out.Stdout, "\n"))
	}
	if out.Stderr != "" {
		fmt.Fprintf(&b, "--- stderr ---\n%s\n", strings.TrimSuffix(out.Stderr, "\n"))
	}
	if out.LostBytes > 0 {
		fmt.Fprintf(&b, "(%d bytes were dropped before they were read)\n", out.LostBytes)
	}
	switch {
	case out.Finished:
		fmt.Fprintf(&b, "Process finished, exit code %d. cursor=%s", *out.ExitCode, out.Cursor)
	case out.Running:
		fmt.Fprintf(&b, "Process still running. Next cursor=%s", out.Cursor)
	default:
		fmt.Fprintf(&b, "Process exited; more output to read. Next cursor=%s", out.Cursor)
	}
	return text("%s", b.String()), out, nil
}

func (s *server) writeStdin(ctx context.Context, _ *mcp.CallToolRequest, in writeStdinIn) (*mcp.CallToolResult, writeStdinOut, error) {
	if err := s.own(in.SandboxID); err != nil {
		return nil, writeStdinOut{}, err
	}
	if in.ProcessID == "" {
		return nil, writeStdinOut{}, errors.New("process_id is empty: give the id start_command returned")
	}
	if in.Data == "" && !in.CloseStdin {
		return nil, writeStdinOut{}, errors.New("nothing to do: give data, close_stdin, or both")
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := s.c.WriteStdin(wctx, in.SandboxID, in.ProcessID, strings.NewReader(in.Data), in.CloseStdin); err != nil {
		if wctx.Err() != nil && ctx.Err() == nil {
			return nil, writeStdinOut{}, errors.New("write_stdin: the process did not read its input within 30s")
		}
		return nil, writeStdinOut{}, toolError("write_stdin", err)
	}
	msg := fmt.Sprintf("Wrote %d bytes.", len(in.Data))
	if in.CloseStdin {
		msg += " Standard input is closed."
	}
	return text("%s", msg), writeStdinOut{BytesWritten: len(in.Data), Closed: in.CloseStdin}, nil
}

func (s *server) stopCommand(ctx context.Context, _ *mcp.CallToolRequest, in stopIn) (*mcp.CallToolResult, processOut, error) {
	if err := s.own(in.SandboxID); err != nil {
		return nil, processOut{}, err
	}
	if in.ProcessID == "" {
		return nil, processOut{}, errors.New("process_id is empty: give the id start_command returned")
	}
	sig := in.Signal
	if sig == "" {
		sig = "TERM"
	}
	if err := s.c.Signal(ctx, in.SandboxID, in.ProcessID, sig); err != nil && !errors.Is(err, client.ErrConflict) {
		return nil, processOut{}, toolError("stop_command", err)
	}
	p, err := s.c.WaitProcess(ctx, in.SandboxID, in.ProcessID, 5*time.Second)
	if err != nil {
		return nil, processOut{}, toolError("stop_command", err)
	}
	out := processOut{ProcessID: p.ID, State: p.State, ExitCode: p.ExitCode, Signal: p.Signal}
	if p.State == api.ProcessRunning {
		return text("Sent %s; process %s is still running after 5s (send KILL to force it).", sig, p.ID), out, nil
	}
	return text("Process %s has exited (exit code %s, signal %d).", p.ID, intOr(p.ExitCode), p.Signal), out, nil
}

func intOr(p *int) string {
	if p == nil {
		return "none"
	}
	return fmt.Sprint(*p)
}

func (s *server) readFile(ctx context.Context, _ *mcp.CallToolRequest, in readFileIn) (*mcp.CallToolResult, readFileOut, error) {
	if err := s.own(in.SandboxID); err != nil {
		return nil, readFileOut{}, err
	}
	p, err := workspacePath(in.Path)
	if err != nil {
		return nil, readFileOut{}, err
	}
	limit := in.MaxBytes
	if limit == 0 {
		limit = defaultReadBytes
	}
	if limit < 0 || limit > maxReadBytes {
		return nil, readFileOut{}, fmt.Errorf("max_bytes must be between 1 and %d", maxReadBytes)
	}
	rc, info, err := s.c.ReadFile(ctx, in.SandboxID, p, client.DownloadOptions{})
	if err != nil {
		return nil, readFileOut{}, toolError("read_file "+p, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, int64(limit)+1))
	if err != nil {
		return nil, readFileOut{}, toolError("read_file "+p, err)
	}
	out := readFileOut{Path: p, Size: int64(len(b))}
	if info != nil {
		out.Size = info.Size
	}
	if len(b) > limit {
		b, out.Truncated = b[:limit], true
	}
	if isText(b, out.Truncated) {
		if take := cutCost(b, maxEncoded); take < len(b) {
			b, out.Truncated = b[:take], true
		}
		if out.Truncated {
			b = wholeChars(b)
		}
		out.Encoding, out.Content = "utf-8", string(b)
	} else {
		if most := maxEncoded / 4 * 3; len(b) > most {
			b, out.Truncated = b[:most], true
		}
		out.Encoding, out.Content = "base64", base64.StdEncoding.EncodeToString(b)
	}
	note := ""
	if out.Truncated {
		note = fmt.Sprintf(" (first %d of %d bytes)", len(b), out.Size)
	}
	if out.Encoding == "base64" {
		return text("%s is binary, %d bytes%s, in base64:\n%s", p, out.Size, note, out.Content), out, nil
	}
	return text("%s, %d bytes%s:\n%s", p, out.Size, note, out.Content), out, nil
}

// wholeChars is b without a character cut at its end.
func wholeChars(b []byte) []byte {
	for i := 0; i < utf8.UTFMax && i < len(b); i++ {
		if utf8.Valid(b[:len(b)-i]) {
			return b[:len(b)-i]
		}
	}
	return b
}

// isText reports whether b is text: UTF-8 without NUL bytes. A cut file
// may end in the middle of a character.
func isText(b []byte, cut bool) bool {
	if bytes.IndexByte(b, 0) >= 0 {
		return false
	}
	if utf8.Valid(b) {
		return true
	}
	if !cut {
		return false
	}
	for i := 1; i < utf8.UTFMax && i <= len(b); i++ {
		if utf8.Valid(b[:len(b)-i]) {
			return true
		}
	}
	return false
}

func (s *server) writeFile(ctx context.Context, _ *mcp.CallToolRequest, in writeFileIn) (*mcp.CallToolResult, writeFileOut, error) {
	if err := s.own(in.SandboxID); err != nil {
		return nil, writeFileOut{}, err
	}
	p, err := workspacePath(in.Path)
	if err != nil {
		return nil, writeFileOut{}, err
	}
	if p == Workspace {
		return nil, writeFileOut{}, errors.New("path is /workspace itself: name a file under it")
	}
	var data []byte
	switch in.Encoding {
	case "", "utf-8", "utf8", "text":
		data = []byte(in.Content)
	case "base64":
		if data, err = base64.StdEncoding.DecodeString(in.Content); err != nil {
			return nil, writeFileOut{}, fmt.Errorf("content is not valid base64: %v", err)
		}
	default:
		return nil, writeFileOut{}, fmt.Errorf("encoding %q: want utf-8 or base64", clip(in.Encoding))
	}
	if len(data) > maxWriteBytes {
		return nil, writeFileOut{}, fmt.Errorf("content is %d bytes; write_file takes at most %d (write it in parts with run_command, e.g. cat >> file)", len(data), maxWriteBytes)
	}
	if dir := path.Dir(p); dir != Workspace {
		if err := s.c.Mkdir(ctx, in.SandboxID, dir, 0o755); err != nil {
			return nil, writeFileOut{}, toolError("write_file: create "+dir, err)
		}
	}
	mode := 0o644
	if in.Executable {
		mode = 0o755
	}
	if err := s.c.WriteFile(ctx, in.SandboxID, p, fileMode(mode), bytes.NewReader(data)); err != nil {
		return nil, writeFileOut{}, toolError("write_file "+p, err)
	}
	return text("Wrote %d bytes to %s.", len(data), p), writeFileOut{Path: p, Bytes: len(data)}, nil
}

func (s *server) listFiles(ctx context.Context, _ *mcp.CallToolRequest, in listFilesIn) (*mcp.CallToolResult, listFilesOut, error) {
	if err := s.own(in.SandboxID); err != nil {
		return nil, listFilesOut{}, err
	}
	if in.Path == "" {
		in.Path = Workspace
	}
	p, err := workspacePath(in.Path)
	if err != nil {
		return nil, listFilesOut{}, err
	}
	list, err := s.c.List(ctx, in.SandboxID, p)
	if err != nil {
		return nil, listFilesOut{}, toolError("list_files "+p, err)
	}
	out := listFilesOut{Path: p, Entries: make([]fileEntry, 0, len(list))}
	var b strings.Builder
	for _, f := range list {
		e := fileEntry{Name: f.Name, Path: path.Join(p, f.Name), Type: "file", Size: f.Size, Mode: fmt.Sprintf("%04o", f.Mode), Target: f.Link, ModTime: f.ModTime.UTC().Format(time.RFC3339)}
		switch {
		case f.Link != "":
			e.Type = "symlink"
		case f.Dir:
			e.Type = "dir"
		}
		out.Entries = append(out.Entries, e)
		switch e.Type {
		case "dir":
			fmt.Fprintf(&b, "%s/\n", e.Name)
		case "symlink":
			fmt.Fprintf(&b, "%s -> %s\n", e.Name, e.Target)
		default:
			fmt.Fprintf(&b, "%s  %d bytes  %s\n", e.Name, e.Size, e.Mode)
		}
	}
	if len(list) == 0 {
		b.WriteString("(empty)")
	}
	return text("%s:\n%s", p, strings.TrimSuffix(b.String(), "\n")), out, nil
}

func (s *server) networkAudit(ctx context.Context, _ *mcp.CallToolRequest, in auditIn) (*mcp.CallToolResult, auditOut, error) {
	out := auditOut{Events: []auditEvent{}, Cursor: in.Cursor}
	if err := s.own(in.SandboxID); err != nil {
		return nil, out, err
	}
	q := client.NetworkQuery{Host: in.Host, Cursor: in.Cursor, Limit: in.Limit}
	switch in.Only {
	case "":
	case "allowed", "denied":
		v := in.Only == "allowed"
		q.Allowed = &v
	case "problems":
		q.Problems = true
	default:
		return nil, out, fmt.Errorf("only %q: want allowed, denied or problems (or omit it)", clip(in.Only))
	}
	if in.Limit < 0 || in.Limit > 1000 {
		return nil, out, errors.New("limit must be between 1 and 1000")
	}
	page, err := s.c.NetworkEvents(ctx, in.SandboxID, q)
	if err != nil {
		return nil, out, toolError("network_audit", err)
	}
	var b strings.Builder
	for _, e := range page.Events {
		out.Events = append(out.Events, auditEvent{Time: e.Time.UTC().Format(time.RFC3339Nano), Proto: e.Proto, Method: e.Method, Host: e.Host, Port: e.Port, Path: e.Path,
			Allowed: e.Allowed, Rule: e.Rule, BytesUp: e.BytesUp, BytesDown: e.BytesDown, Duration: e.DurationMs, Error: e.Error})
		verdict := "denied"
		if e.Allowed {
			verdict = "allowed"
		}
		fmt.Fprintf(&b, "%s %s %s:%d%s %s (%s)", e.Time.UTC().Format(time.RFC3339), e.Proto, e.Host, e.Port, e.Path, verdict, e.Rule)
		if e.Error != "" {
			fmt.Fprintf(&b, " error: %s", e.Error)
		}
		b.WriteString("\n")
		out.Cursor = e.Cursor
	}
	if page.NextCursor != "" {
		out.Cursor, out.More = page.NextCursor, true
	}
	if len(page.Events) == 0 {
		b.WriteString("No network activity recorded (since the cursor).\n")
	}
	return text("%scursor=%s", b.String(), out.Cursor), out, nil
}
