//go:build linux

package mcp_test

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
)

// TestAnswerLimits: answers stay under the 10 MiB a stdio client reads at
// once (the TypeScript SDK ends the session past it, and the server's
// sandboxes with it), however the content escapes; output paged through
// read_output loses nothing, also when a page ends inside a character; a
// write_file past its limit is that tool's error, not the end of the
// session. Controls: the same tools on content within their limits.
func TestAnswerLimits(t *testing.T) {
	s := startServer(t, nil, "--standalone")
	var sb sandboxRes
	s.ok(t, "create_sandbox", m{}, &sb)
	id := sb.SandboxID
	size := func(what string, args m) int {
		t.Helper()
		res := s.call(t, what, args)
		if res.IsError {
			t.Fatalf("%s: %s", what, resultText(res))
		}
		b, _ := json.Marshal(res)
		if len(b) > 9<<20 {
			t.Errorf("%s %v: an answer of %d bytes", what, args["path"], len(b))
		}
		return len(b)
	}
	// Files of 4 MiB that escape 6-fold (control characters), in base64
	// (random bytes), and plain text (the control: whole).
	s.ok(t, "run_command", m{"sandbox_id": id, "command": "head -c 4194304 /dev/zero | tr '\\0' '\\1' > ctl; head -c 4194304 /dev/urandom > bin; yes 0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ | head -c 3000000 > txt"}, nil)
	for _, f := range []string{"ctl", "bin"} {
		size("read_file", m{"sandbox_id": id, "path": f, "max_bytes": 4194304})
	}
	var rf struct {
		Content   string `json:"content"`
		Truncated bool   `json:"truncated"`
	}
	s.ok(t, "read_file", m{"sandbox_id": id, "path": "txt", "max_bytes": 4194304}, &rf)
	if len(rf.Content) != 3000000 || rf.Truncated {
		t.Errorf("control: a 3 MB text file read as %d bytes (truncated %v)", len(rf.Content), rf.Truncated)
	}

	// Output paged 1 MiB at a time: every byte arrives once, multi-byte
	// characters included, and each answer stays small.
	for _, c := range []struct{ name, cmd string }{
		{"multibyte", "yes 日本 | head -c 200000"},
		{"control", "head -c 1048576 /dev/zero | tr '\\0' '\\1'"},
	} {
		var st startRes
		s.ok(t, "start_command", m{"sandbox_id": id, "command": c.cmd}, &st)
		var all strings.Builder
		cur := ""
		for i := 0; ; i++ {
			if i > 40 {
				t.Fatalf("%s: not finished after 40 reads", c.name)
			}
			args := m{"sandbox_id": id, "process_id": st.ProcessID, "cursor": cur, "max_bytes": 1048576, "wait_seconds": 10}
			size("read_output", args)
			var o outputRes
			s.ok(t, "read_output", args, &o)
			all.WriteString(o.Stdout)
			cur = o.Cursor
			if o.Finished {
				break
			}
		}
		want := strings.Repeat("日本\n", 200000/7+1)[:200000] // ends after a whole 日
		if c.name == "control" {
			want = strings.Repeat("\x01", 1048576)
		}
		if got := all.String(); got != want {
			t.Errorf("%s: read %d bytes, want %d", c.name, len(got), len(want))
		}
	}

	// write_file: 12 MiB of binary in base64 (a frame over the transport's
	// default 16 MiB) is written; 17 MiB is the tool's own error, and the
	// session goes on.
	data := make([]byte, 12<<20)
	for i := range data {
		data[i] = byte(i * 7)
	}
	s.ok(t, "write_file", m{"sandbox_id": id, "path": "big", "content": base64.StdEncoding.EncodeToString(data), "encoding": "base64"}, nil)
	var r runRes
	s.ok(t, "run_command", m{"sandbox_id": id, "command": "wc -c < big"}, &r)
	if strings.TrimSpace(r.Stdout) != "12582912" {
		t.Errorf("12 MiB write: %q", r.Stdout)
	}
	s.fails(t, "write_file", m{"sandbox_id": id, "path": "bigger", "content": strings.Repeat("x", 17<<20)}, "write_file takes at most")
	s.ok(t, "run_command", m{"sandbox_id": id, "command": "echo still here"}, &r)
	// A timeout past the operator's limit is clamped, not an error.
	s.ok(t, "run_command", m{"sandbox_id": id, "command": "echo clamped", "timeout_seconds": 1e10}, &r)
	if r.Stdout != "clamped\n" {
		t.Errorf("timeout_seconds 1e10: %+v", r)
	}
}
