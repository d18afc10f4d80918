//go:build linux

package mcp_test

import (
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/client"
	"github.com/airlock-dev/airlock/internal/daemon"
	"github.com/airlock-dev/airlock/internal/testdaemon"
)

// The tools' results, as a client reads them.
type sandboxRes struct {
	SandboxID string `json:"sandbox_id"`
	State     string `json:"state"`
	Policy    string `json:"policy"`
	ExpiresAt string `json:"expires_at"`
}

type listRes struct {
	Sandboxes    []sandboxRes `json:"sandboxes"`
	MaxSandboxes int          `json:"max_sandboxes"`
}

type runRes struct {
	ProcessID      string  `json:"process_id"`
	ExitCode       int     `json:"exit_code"`
	Signal         int     `json:"signal"`
	TimedOut       bool    `json:"timed_out"`
	TimeoutSeconds float64 `json:"timeout_seconds"`
	Stdout         string  `json:"stdout"`
	Stderr         string  `json:"stderr"`
	StdoutBytes    int64   `json:"stdout_bytes"`
	StderrBytes    int64   `json:"stderr_bytes"`
	StdoutBytesCut int64   `json:"stdout_bytes_cut"`
	StderrBytesCut int64   `json:"stderr_bytes_cut"`
	NetworkDenied  []struct {
		Host  string `json:"host"`
		Port  int    `json:"port"`
		Rule  string `json:"rule"`
		Error string `json:"error"`
		Count int    `json:"count"`
	} `json:"network_denied"`
}

type startRes struct {
	ProcessID string `json:"process_id"`
	Cursor    string `json:"cursor"`
}

type outputRes struct {
	Stdout    string `json:"stdout"`
	Stderr    string `json:"stderr"`
	Cursor    string `json:"cursor"`
	Running   bool   `json:"running"`
	Finished  bool   `json:"finished"`
	ExitCode  *int   `json:"exit_code"`
	Signal    int    `json:"signal"`
	LostBytes int64  `json:"lost_bytes"`
}

type processRes struct {
	State    string `json:"state"`
	ExitCode *int   `json:"exit_code"`
	Signal   int    `json:"signal"`
}

type fileRes struct {
	Path      string `json:"path"`
	Size      int64  `json:"size"`
	Encoding  string `json:"encoding"`
	Content   string `json:"content"`
	Truncated bool   `json:"truncated"`
}

type listFilesRes struct {
	Path    string `json:"path"`
	Entries []struct {
		Name   string `json:"name"`
		Path   string `json:"path"`
		Type   string `json:"type"`
		Size   int64  `json:"size"`
		Mode   string `json:"mode"`
		Target string `json:"target"`
	} `json:"entries"`
}

type auditRes struct {
	Events []struct {
		Host    string `json:"host"`
		Port    int    `json:"port"`
		Allowed bool   `json:"allowed"`
		Rule    string `json:"rule"`
	} `json:"events"`
	Cursor string `json:"cursor"`
	More   bool   `json:"more"`
}

var allTools = []string{"create_sandbox", "destroy_sandbox", "list_files", "list_sandboxes", "network_audit", "read_file",
	"read_output", "run_command", "start_command", "stop_command", "write_file", "write_stdin"}

type m = map[string]any

// TestToolsDaemon: every tool against a running airlock serve, through a
// server that may use the policies default and net and hold 2 sandboxes.
// A sandbox made on the daemon directly is out of the tools' reach, and
// the server's own sandboxes are gone once its client leaves.
func TestToolsDaemon(t *testing.T) {
	nf := newNetFixture(t)
	d := testdaemon.Start(t, nf.config)
	other, err := d.C.CreateSandbox(ctxT(t), &api.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	s := startServer(t, nil, "--host", "unix://"+d.Sock, "--policy", "default", "--policy", "net", "--max-sandboxes", "2")
	ids := exerciseTools(t, s, nf)

	s.fails(t, "run_command", m{"sandbox_id": other.ID, "command": "true"}, "unknown sandbox_id")
	s.fails(t, "destroy_sandbox", m{"sandbox_id": other.ID}, "unknown sandbox_id")
	var l listRes
	s.ok(t, "list_sandboxes", m{}, &l)
	for _, sb := range l.Sandboxes {
		if sb.SandboxID == other.ID {
			t.Fatal("list_sandboxes shows a sandbox this server did not create")
		}
	}

	s.close() // closes stdin and waits for the process to exit
	for _, id := range ids {
		if _, err := d.C.GetSandbox(ctxT(t), id); !errors.Is(err, client.ErrNotFound) {
			t.Errorf("sandbox %s of the server still exists after its client left: %v", id, err)
		}
	}
	if _, err := d.C.GetSandbox(ctxT(t), other.ID); err != nil {
		t.Errorf("the daemon's other sandbox is gone: %v", err)
	}
}

// TestToolsStandalone: the same, with no daemon: the server runs a
// private one in its process (--config with the net policy). Once the
// client leaves, the process exits and its private directory and
// sandboxes are gone.
func TestToolsStandalone(t *testing.T) {
	nf := newNetFixture(t)
	conf := writeConfig(t, nf.config)
	s := startServer(t, nil, "--config", conf, "--policy", "default", "--policy", "net", "--max-sandboxes", "2")
	pid := s.cmd.Process.Pid
	dir := filepath.Join(daemon.EphemeralRoot(), fmt.Sprint(pid))
	if _, err := os.Stat(filepath.Join(dir, "airlock.sock")); err != nil {
		t.Fatalf("the private daemon's socket: %v", err)
	}
	ids := exerciseTools(t, s, nf)
	state := filepath.Join(daemon.EphemeralRoot(), "state")
	for _, id := range ids {
		if _, err := os.Stat(filepath.Join(state, strings.TrimPrefix(id, "sb-"))); err != nil {
			t.Fatalf("state of live sandbox %s: %v", id, err)
		}
	}
	s.close() // closes stdin and waits for the process to exit
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the private daemon's directory is left: %v", err)
	}
	for _, id := range ids {
		if _, err := os.Stat(filepath.Join(state, strings.TrimPrefix(id, "sb-"))); !os.IsNotExist(err) {
			t.Errorf("sandbox %s's state is left after the server stopped: %v", id, err)
		}
	}
}

// exerciseTools calls every tool, with its negative cases, and returns
// the ids of the sandboxes still held.
func exerciseTools(t *testing.T, s *server, nf *netFixture) []string {
	// The tool list and its schemas.
	tools, err := s.cs.ListTools(ctxT(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range tools.Tools {
		names = append(names, tool.Name)
		if tool.Description == "" || tool.OutputSchema == nil || tool.InputSchema == nil {
			t.Errorf("tool %s lacks a description or a schema", tool.Name)
		}
		if tool.Name == "create_sandbox" {
			b := fmt.Sprint(tool.InputSchema)
			if !strings.Contains(b, "enum:[default net]") {
				t.Errorf("create_sandbox's policy is not the operator's enum: %s", b)
			}
		}
	}
	slices.Sort(names)
	if !slices.Equal(names, allTools) {
		t.Fatalf("tools %v, want %v", names, allTools)
	}

	// Sandboxes: a policy the operator did not allow, then the limit.
	s.fails(t, "create_sandbox", m{"policy": "evil"}, "policy", "evil")
	s.fails(t, "create_sandbox", m{"timeout_minutes": -1}, "timeout_minutes")
	var a, b sandboxRes
	s.ok(t, "create_sandbox", m{"timeout_minutes": 30}, &a)
	s.ok(t, "create_sandbox", m{"policy": "net"}, &b)
	if a.SandboxID == "" || a.State != "running" || a.Policy != "default" || b.Policy != "net" || a.ExpiresAt == "" {
		t.Fatalf("created %+v and %+v", a, b)
	}
	s.fails(t, "create_sandbox", m{}, "most the operator allows", "--max-sandboxes 2")
	var l listRes
	// Arguments absent altogether.
	res := s.callParams(t, &mcp.CallToolParams{Name: "list_sandboxes"})
	if res.IsError {
		t.Fatalf("list_sandboxes without arguments: %s", resultText(res))
	}
	s.ok(t, "list_sandboxes", m{}, &l)
	if len(l.Sandboxes) != 2 || l.MaxSandboxes != 2 {
		t.Fatalf("list_sandboxes: %+v", l)
	}
	s.fails(t, "run_command", m{"sandbox_id": "sb-nope", "command": "true"}, "unknown sandbox_id")
	s.fails(t, "read_file", m{"sandbox_id": "", "path": "x"}, "sandbox_id is empty")

	// run_command.
	var r runRes
	s.ok(t, "run_command", m{"sandbox_id": a.SandboxID, "command": "echo hello; echo oops >&2; exit 3"}, &r)
	if r.ExitCode != 3 || r.Stdout != "hello\n" || r.Stderr != "oops\n" || r.TimedOut || r.StdoutBytesCut != 0 || r.TimeoutSeconds != 60 {
		t.Fatalf("run_command: %+v", r)
	}
	s.ok(t, "run_command", m{"sandbox_id": a.SandboxID, "argv": []string{"printf", "%s|", "a b", "c"}}, &r)
	if r.ExitCode != 0 || r.Stdout != "a b|c|" {
		t.Fatalf("run_command argv: %+v", r)
	}
	s.ok(t, "run_command", m{"sandbox_id": a.SandboxID, "command": "tr a-z A-Z", "stdin": "abc\n", "cwd": "/tmp", "env": m{"X": "1"}}, &r)
	if r.Stdout != "ABC\n" {
		t.Fatalf("run_command with stdin: %+v", r)
	}
	s.ok(t, "run_command", m{"sandbox_id": a.SandboxID, "command": "pwd; echo $X", "cwd": "/tmp", "env": m{"X": "1"}}, &r)
	if r.Stdout != "/tmp\n1\n" {
		t.Fatalf("run_command cwd and env: %+v", r)
	}
	// cat must see end of file at once when no stdin is given.
	s.ok(t, "run_command", m{"sandbox_id": a.SandboxID, "command": "cat; echo eof"}, &r)
	if r.Stdout != "eof\n" {
		t.Fatalf("run_command without stdin: %+v", r)
	}
	s.fails(t, "run_command", m{"sandbox_id": a.SandboxID, "command": "true", "argv": []string{"true"}}, "not both")
	s.fails(t, "run_command", m{"sandbox_id": a.SandboxID}, "no command")
	s.fails(t, "run_command", m{"sandbox_id": a.SandboxID, "argv": []string{"/no/such/program"}}, "command_not_found")
	s.ok(t, "run_command", m{"sandbox_id": a.SandboxID, "command": "echo start; sleep 30; echo never", "timeout_seconds": 1}, &r)
	if !r.TimedOut || r.Stdout != "start\n" || r.TimeoutSeconds != 1 {
		t.Fatalf("run_command past its timeout: %+v", r)
	}
	// Over the operator's cap: the cap applies.
	s.ok(t, "run_command", m{"sandbox_id": a.SandboxID, "command": "true", "timeout_seconds": 100000}, &r)
	if r.TimeoutSeconds != 600 {
		t.Fatalf("timeout past --max-exec-timeout: %+v", r)
	}
	// 100000 a's, a newline and END on stdout: the first and last 16 KiB
	// are kept, the marker says how much was cut.
	s.ok(t, "run_command", m{"sandbox_id": a.SandboxID, "command": "head -c 100000 /dev/zero | tr '\\0' a; echo; printf END; printf 'x\\377y' >&2"}, &r)
	const keep = 16 << 10
	total := int64(100000 + 1 + 3)
	if r.StdoutBytes != total || r.StdoutBytesCut != total-2*keep {
		t.Fatalf("cut output: %d bytes, %d cut", r.StdoutBytes, r.StdoutBytesCut)
	}
	marker := fmt.Sprintf("[... airlock: %d bytes cut here; the first and last 16 KiB of this stream are kept ...]", total-2*keep)
	if !strings.HasPrefix(r.Stdout, strings.Repeat("a", keep)+"\n"+marker+"\n") || !strings.HasSuffix(r.Stdout, "aaa\nEND") ||
		len(r.Stdout) != 2*keep+len(marker)+2 {
		t.Fatalf("cut output: %q...%q (%d bytes)", r.Stdout[:40], r.Stdout[len(r.Stdout)-40:], len(r.Stdout))
	}
	if r.Stderr != "x\uFFFDy" || r.StderrBytes != 3 || r.StderrBytesCut != 0 {
		t.Fatalf("non-UTF-8 stderr: %q (%d bytes)", r.Stderr, r.StderrBytes)
	}

	// Background processes: stdin, cursor reads, stop.
	var st startRes
	s.ok(t, "start_command", m{"sandbox_id": a.SandboxID, "command": "echo ready; read line; echo got $line; read l2; echo then $l2; echo bye >&2"}, &st)
	var o outputRes
	s.ok(t, "read_output", m{"sandbox_id": a.SandboxID, "process_id": st.ProcessID, "cursor": st.Cursor, "wait_seconds": 20}, &o)
	if o.Stdout != "ready\n" || !o.Running || o.Finished {
		t.Fatalf("read_output before input: %+v", o)
	}
	first := o.Cursor
	// Nothing new: without waiting, an empty answer with the same cursor.
	s.ok(t, "read_output", m{"sandbox_id": a.SandboxID, "process_id": st.ProcessID, "cursor": first}, &o)
	if o.Stdout != "" || o.Cursor != first || !o.Running {
		t.Fatalf("read_output with nothing new: %+v", o)
	}
	var w struct {
		BytesWritten int  `json:"bytes_written"`
		Closed       bool `json:"closed"`
	}
	s.ok(t, "write_stdin", m{"sandbox_id": a.SandboxID, "process_id": st.ProcessID, "data": "one\n"}, &w)
	if w.BytesWritten != 4 || w.Closed {
		t.Fatalf("write_stdin: %+v", w)
	}
	s.ok(t, "write_stdin", m{"sandbox_id": a.SandboxID, "process_id": st.ProcessID, "data": "two\n", "close_stdin": true}, &w)
	if !w.Closed {
		t.Fatalf("write_stdin close: %+v", w)
	}
	stdout, stderr, cur := "", "", first
	for i := 0; !o.Finished; i++ {
		if i == 50 {
			t.Fatalf("read_output: not finished after 50 reads: %q %q", stdout, stderr)
		}
		s.ok(t, "read_output", m{"sandbox_id": a.SandboxID, "process_id": st.ProcessID, "cursor": cur, "wait_seconds": 10}, &o)
		stdout, stderr, cur = stdout+o.Stdout, stderr+o.Stderr, o.Cursor
	}
	if stdout != "got one\nthen two\n" || stderr != "bye\n" || o.ExitCode == nil || *o.ExitCode != 0 || o.Running {
		t.Fatalf("read_output after input: %q %q %+v", stdout, stderr, o)
	}
	// From the start again, everything; from the first cursor, the rest.
	s.ok(t, "read_output", m{"sandbox_id": a.SandboxID, "process_id": st.ProcessID}, &o)
	if o.Stdout != "ready\ngot one\nthen two\n" || !o.Finished {
		t.Fatalf("read_output from the start: %+v", o)
	}
	s.ok(t, "read_output", m{"sandbox_id": a.SandboxID, "process_id": st.ProcessID, "cursor": first}, &o)
	if o.Stdout != "got one\nthen two\n" || !o.Finished {
		t.Fatalf("read_output from a cursor: %+v", o)
	}
	// A long output read in parts of about max_bytes.
	s.ok(t, "start_command", m{"sandbox_id": a.SandboxID, "argv": []string{"seq", "1", "30000"}}, &st)
	var seq strings.Builder
	for i := 1; i <= 30000; i++ {
		fmt.Fprintf(&seq, "%d\n", i)
	}
	want := seq.String()
	got, cur := "", ""
	for i := 0; ; i++ {
		if i == 500 {
			t.Fatal("read_output: not finished after 500 reads")
		}
		s.ok(t, "read_output", m{"sandbox_id": a.SandboxID, "process_id": st.ProcessID, "cursor": cur, "wait_seconds": 10, "max_bytes": 4096}, &o)
		got, cur = got+o.Stdout, o.Cursor
		if o.Finished {
			break
		}
	}
	if got != want {
		t.Fatalf("read in parts: %d bytes, want %d", len(got), len(want))
	}
	// Many small events, read a few bytes at a time: no answer holds more
	// than max_bytes (however the output was cut into events: under load
	// several lines arrive as one), and nothing is lost or repeated.
	s.ok(t, "start_command", m{"sandbox_id": a.SandboxID, "command": "for i in $(seq 1 40); do echo line$i; sleep 0.005; done"}, &st)
	var lines strings.Builder
	for i := 1; i <= 40; i++ {
		fmt.Fprintf(&lines, "line%d\n", i)
	}
	got, cur = "", ""
	calls := 0
	for ; calls < 500; calls++ {
		s.ok(t, "read_output", m{"sandbox_id": a.SandboxID, "process_id": st.ProcessID, "cursor": cur, "wait_seconds": 10, "max_bytes": 16}, &o)
		if len(o.Stdout) > 16 {
			t.Fatalf("read_output past max_bytes: %q", o.Stdout)
		}
		got, cur = got+o.Stdout, o.Cursor
		if o.Finished {
			break
		}
	}
	t.Logf("small events: %d calls", calls)
	if got != lines.String() || calls < 10 {
		t.Fatalf("small events in parts (%d calls): %q", calls, got)
	}
	s.fails(t, "read_output", m{"sandbox_id": a.SandboxID, "process_id": st.ProcessID, "max_bytes": 1 << 30}, "max_bytes")
	s.fails(t, "read_output", m{"sandbox_id": a.SandboxID, "process_id": st.ProcessID, "wait_seconds": 31}, "wait_seconds must be between 0 and 30")
	s.fails(t, "read_output", m{"sandbox_id": a.SandboxID, "process_id": "p-nope"}, "not_found")
	s.fails(t, "write_stdin", m{"sandbox_id": a.SandboxID, "process_id": "p-nope", "data": "x"}, "not_found")

	s.ok(t, "start_command", m{"sandbox_id": a.SandboxID, "command": "exec sleep 300"}, &st)
	s.fails(t, "stop_command", m{"sandbox_id": a.SandboxID, "process_id": st.ProcessID, "signal": "NOPE"}, "NOPE")
	var pr processRes
	s.ok(t, "stop_command", m{"sandbox_id": a.SandboxID, "process_id": st.ProcessID}, &pr)
	if pr.State != "exited" || pr.Signal != int(syscall.SIGTERM) {
		t.Fatalf("stop_command: %+v", pr)
	}
	s.ok(t, "stop_command", m{"sandbox_id": a.SandboxID, "process_id": st.ProcessID, "signal": "KILL"}, &pr)
	if pr.State != "exited" {
		t.Fatalf("stop_command of an exited process: %+v", pr)
	}
	s.ok(t, "start_command", m{"sandbox_id": a.SandboxID, "command": "trap '' TERM; echo trapped; while :; do sleep 1; done"}, &st)
	s.ok(t, "read_output", m{"sandbox_id": a.SandboxID, "process_id": st.ProcessID, "wait_seconds": 20}, &o)
	s.ok(t, "stop_command", m{"sandbox_id": a.SandboxID, "process_id": st.ProcessID, "signal": "KILL"}, &pr)
	if pr.State != "exited" || pr.Signal != int(syscall.SIGKILL) {
		t.Fatalf("stop_command KILL: %+v", pr)
	}

	// Files, only under /workspace.
	var wf struct {
		Path  string `json:"path"`
		Bytes int    `json:"bytes"`
	}
	s.ok(t, "write_file", m{"sandbox_id": a.SandboxID, "path": "dir/sub/a.txt", "content": "hello\n"}, &wf)
	if wf.Path != "/workspace/dir/sub/a.txt" || wf.Bytes != 6 {
		t.Fatalf("write_file: %+v", wf)
	}
	var f fileRes
	s.ok(t, "read_file", m{"sandbox_id": a.SandboxID, "path": "/workspace/dir/sub/a.txt"}, &f)
	if f.Encoding != "utf-8" || f.Content != "hello\n" || f.Size != 6 || f.Truncated {
		t.Fatalf("read_file: %+v", f)
	}
	s.ok(t, "read_file", m{"sandbox_id": a.SandboxID, "path": "dir/sub/a.txt", "max_bytes": 3}, &f)
	if f.Content != "hel" || !f.Truncated || f.Size != 6 {
		t.Fatalf("read_file cut: %+v", f)
	}
	bin := []byte{0, 1, 2, 0xff, 'a'}
	s.ok(t, "write_file", m{"sandbox_id": a.SandboxID, "path": "bin.dat", "content": base64.StdEncoding.EncodeToString(bin), "encoding": "base64"}, &wf)
	s.ok(t, "read_file", m{"sandbox_id": a.SandboxID, "path": "bin.dat"}, &f)
	if f.Encoding != "base64" || f.Content != base64.StdEncoding.EncodeToString(bin) {
		t.Fatalf("read_file of a binary file: %+v", f)
	}
	s.ok(t, "run_command", m{"sandbox_id": a.SandboxID, "command": "od -An -tx1 bin.dat"}, &r)
	if strings.Join(strings.Fields(r.Stdout), "") != "000102ff61" {
		t.Fatalf("the binary file in the sandbox: %q", r.Stdout)
	}
	s.ok(t, "write_file", m{"sandbox_id": a.SandboxID, "path": "run.sh", "content": "#!/bin/sh\necho script ran\n", "executable": true}, &wf)
	s.ok(t, "run_command", m{"sandbox_id": a.SandboxID, "command": "./run.sh"}, &r)
	if r.Stdout != "script ran\n" {
		t.Fatalf("executable file: %+v", r)
	}
	s.fails(t, "write_file", m{"sandbox_id": a.SandboxID, "path": "x", "content": "%%%", "encoding": "base64"}, "base64")
	var lf listFilesRes
	s.ok(t, "list_files", m{"sandbox_id": a.SandboxID}, &lf)
	types := map[string]string{}
	for _, e := range lf.Entries {
		types[e.Name] = e.Type
	}
	if lf.Path != "/workspace" || types["dir"] != "dir" || types["bin.dat"] != "file" || types["run.sh"] != "file" {
		t.Fatalf("list_files: %+v", lf)
	}
	s.ok(t, "list_files", m{"sandbox_id": a.SandboxID, "path": "dir/sub"}, &lf)
	if len(lf.Entries) != 1 || lf.Entries[0].Name != "a.txt" || lf.Entries[0].Size != 6 || lf.Entries[0].Path != "/workspace/dir/sub/a.txt" || lf.Entries[0].Mode != "0644" {
		t.Fatalf("list_files dir/sub: %+v", lf)
	}
	for _, p := range []string{"/etc/passwd", "../etc/passwd", "dir/../../etc", "/workspacex/a", "/"} {
		s.fails(t, "read_file", m{"sandbox_id": a.SandboxID, "path": p}, "outside /workspace")
		s.fails(t, "write_file", m{"sandbox_id": a.SandboxID, "path": p, "content": "x"}, "outside /workspace")
		s.fails(t, "list_files", m{"sandbox_id": a.SandboxID, "path": p}, "outside /workspace")
	}
	s.ok(t, "run_command", m{"sandbox_id": a.SandboxID, "command": "ls /tmp/x 2>&1; test -e /etc/x || echo absent"}, &r)
	if !strings.Contains(r.Stdout, "absent") {
		t.Fatalf("a refused write landed: %+v", r)
	}
	s.fails(t, "read_file", m{"sandbox_id": a.SandboxID, "path": "missing.txt"}, "not_found")
	s.fails(t, "read_file", m{"sandbox_id": a.SandboxID, "path": ""}, "path is empty")

	// The network audit: one allowed and one denied request, and one to
	// an allowed address where nothing listens. run_command names the
	// denied one (twice asked) and the failed one in its result; the
	// allowed one, and an earlier command's, are not there.
	dead := deadPort(t)
	var dr runRes
	txt := s.ok(t, "run_command", m{"sandbox_id": b.SandboxID, "command": fmt.Sprintf("curl -s -m 10 http://api.test:%[1]s/; echo; curl -s -m 10 -o /dev/null -w '%%{http_code}' http://other.test:%[1]s/; curl -s -m 10 -o /dev/null http://other.test:%[1]s/; curl -s -m 10 -o /dev/null http://api.test:%[2]d/", nf.port, dead)}, &dr)
	if dr.Stdout != "hello api.test:"+nf.port+"\n403" {
		t.Fatalf("egress: %+v", dr)
	}
	port, _ := strconv.Atoi(nf.port)
	if len(dr.NetworkDenied) != 2 || dr.NetworkDenied[0].Host != "other.test" || dr.NetworkDenied[0].Port != port ||
		dr.NetworkDenied[0].Rule != "not in allowlist" || dr.NetworkDenied[0].Count != 2 ||
		dr.NetworkDenied[1].Host != "api.test" || dr.NetworkDenied[1].Port != dead || dr.NetworkDenied[1].Rule != "" ||
		!strings.Contains(dr.NetworkDenied[1].Error, "refused") || dr.NetworkDenied[1].Count != 1 ||
		!strings.Contains(txt, "--- network denied") || !strings.Contains(txt, "other.test:"+nf.port+": not in allowlist (2 times)") ||
		!strings.Contains(txt, fmt.Sprintf("api.test:%d: failed: ", dead)) {
		t.Fatalf("run_command's network_denied: %+v\n%s", dr.NetworkDenied, txt)
	}
	var ar runRes
	txt = s.ok(t, "run_command", m{"sandbox_id": b.SandboxID, "command": "curl -s -m 10 http://api.test:" + nf.port + "/"}, &ar)
	if ar.Stdout != "hello api.test:"+nf.port || len(ar.NetworkDenied) != 0 || strings.Contains(txt, "network denied") {
		t.Fatalf("control: an allowed request, after the denied ones: %+v\n%s", ar, txt)
	}
	var au auditRes
	s.ok(t, "network_audit", m{"sandbox_id": b.SandboxID}, &au)
	allowed, denied := false, false
	for _, e := range au.Events {
		allowed = allowed || (e.Host == "api.test" && e.Allowed)
		denied = denied || (e.Host == "other.test" && !e.Allowed && e.Rule != "")
	}
	if !allowed || !denied || au.Cursor == "" {
		t.Fatalf("network_audit: %+v", au)
	}
	s.ok(t, "network_audit", m{"sandbox_id": b.SandboxID, "only": "denied"}, &au)
	if len(au.Events) != 2 || au.Events[0].Host != "other.test" || au.Events[1].Host != "other.test" {
		t.Fatalf("network_audit denied: %+v", au)
	}
	s.ok(t, "network_audit", m{"sandbox_id": b.SandboxID, "cursor": au.Cursor, "only": "denied"}, &au)
	if len(au.Events) != 0 {
		t.Fatalf("network_audit after the cursor: %+v", au)
	}
	// problems: the denied ones and the request to the dead port.
	s.ok(t, "network_audit", m{"sandbox_id": b.SandboxID, "only": "problems"}, &au)
	if len(au.Events) != 3 || au.Events[0].Host != "other.test" || au.Events[2].Host != "api.test" || au.Events[2].Port != dead {
		t.Fatalf("network_audit problems: %+v", au)
	}
	s.fails(t, "network_audit", m{"sandbox_id": b.SandboxID, "only": "maybe"}, "allowed, denied or problems")
	// The default policy has no network.
	s.ok(t, "run_command", m{"sandbox_id": a.SandboxID, "command": "curl -s -m 5 http://api.test:" + nf.port + "/"}, &r)
	if r.ExitCode == 0 {
		t.Fatalf("a sandbox of the default policy reached the network: %+v", r)
	}

	// destroy_sandbox frees a place.
	s.ok(t, "destroy_sandbox", m{"sandbox_id": a.SandboxID}, nil)
	s.fails(t, "run_command", m{"sandbox_id": a.SandboxID, "command": "true"}, "unknown sandbox_id")
	s.fails(t, "destroy_sandbox", m{"sandbox_id": a.SandboxID}, "unknown sandbox_id")
	var c sandboxRes
	s.ok(t, "create_sandbox", m{}, &c)
	s.ok(t, "list_sandboxes", m{}, &l)
	if len(l.Sandboxes) != 2 {
		t.Fatalf("list_sandboxes after destroy and create: %+v", l)
	}
	return []string{b.SandboxID, c.SandboxID}
}
