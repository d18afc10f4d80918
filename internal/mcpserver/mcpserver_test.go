package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"math/rand"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-dev/airlock/client"
)

// TestCapture: against the whole stream, the capture keeps exactly its
// first and last keep bytes and counts the rest, for random write sizes.
func TestCapture(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	for round := 0; round < 300; round++ {
		limit := 1 + r.Intn(64)
		c := newCapture(limit)
		var all []byte
		for n := r.Intn(40); n > 0; n-- {
			p := make([]byte, r.Intn(3*limit))
			r.Read(p)
			all = append(all, p...)
			c.write(p)
		}
		head := all[:min(limit, len(all))]
		tail := all[len(head):]
		if len(tail) > limit {
			tail = tail[len(tail)-limit:]
		}
		cut := int64(len(all) - len(head) - len(tail))
		if !bytes.Equal(c.head, head) || !bytes.Equal(c.tail, tail) || c.cut() != cut || c.total != int64(len(all)) {
			t.Fatalf("round %d (limit %d, %d bytes): head %d tail %d cut %d, want %d %d %d", round, limit, len(all), len(c.head), len(c.tail), c.cut(), len(head), len(tail), cut)
		}
	}
	c := newCapture(4)
	c.write([]byte("abcdefghijkl"))
	if got := c.text(); got != "abcd"+cutMarker(4, 4)+"ijkl" {
		t.Fatalf("text: %q", got)
	}
	c = newCapture(4)
	c.write([]byte("ab\xffc"))
	if got := c.text(); got != "ab\uFFFDc" {
		t.Fatalf("invalid UTF-8: %q", got)
	}
}

func TestWorkspacePath(t *testing.T) {
	for in, want := range map[string]string{
		"a.txt": "/workspace/a.txt", "/workspace": "/workspace", "/workspace/": "/workspace",
		"dir/../b": "/workspace/b", "/workspace/a/./b//c": "/workspace/a/b/c", ".": "/workspace",
	} {
		if got, err := workspacePath(in); err != nil || got != want {
			t.Errorf("workspacePath(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", "/", "/etc/passwd", "..", "../workspace2", "/workspace/../etc", "/workspacex", "a\x00b", "/tmp"} {
		if got, err := workspacePath(in); err == nil {
			t.Errorf("workspacePath(%q) = %q, want an error", in, got)
		}
	}
}

func TestIsText(t *testing.T) {
	for _, c := range []struct {
		b    string
		cut  bool
		want bool
	}{{"hello", false, true}, {"a\x00b", false, false}, {"\xff", false, false}, {"h\xc3\xa9", false, true}, {"h\xc3", true, true}, {"h\xc3", false, false}} {
		if got := isText([]byte(c.b), c.cut); got != c.want {
			t.Errorf("isText(%q, %v) = %v", c.b, c.cut, got)
		}
	}
}

// connectInMemory runs a server over in-memory transports and returns a
// client session.
func connectInMemory(t *testing.T, srv *mcp.Server) *mcp.ClientSession {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	st, ct := mcp.NewInMemoryTransports()
	ss, err := srv.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func textOf(r *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range r.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// TestRecoverPanics: a handler that panics answers a tool error, and the
// server keeps serving; the control tool answers normally.
func TestRecoverPanics(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	srv := mcp.NewServer(&mcp.Implementation{Name: "t"}, nil)
	srv.AddReceivingMiddleware(recoverPanics(log))
	type in struct {
		X string `json:"x,omitempty"`
	}
	type out struct {
		Y string `json:"y"`
	}
	mcp.AddTool(srv, &mcp.Tool{Name: "boom"}, func(context.Context, *mcp.CallToolRequest, in) (*mcp.CallToolResult, out, error) {
		var m map[string]int
		m["x"] = 1 // nil map: panics
		return nil, out{}, nil
	})
	mcp.AddTool(srv, &mcp.Tool{Name: "fine"}, func(_ context.Context, _ *mcp.CallToolRequest, i in) (*mcp.CallToolResult, out, error) {
		return nil, out{Y: "ok" + i.X}, nil
	})
	cs := connectInMemory(t, srv)
	ctx := context.Background()
	for i := 0; i < 2; i++ {
		r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "boom", Arguments: map[string]any{}})
		if err != nil || !r.IsError || !strings.Contains(textOf(r), "internal error in airlock mcp") || !strings.Contains(textOf(r), "nil map") {
			t.Fatalf("panicking tool: %+v %v", r, err)
		}
		r, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "fine", Arguments: map[string]any{"x": "!"}})
		if err != nil || r.IsError || !strings.Contains(textOf(r), "ok!") {
			t.Fatalf("control tool: %+v %v", r, err)
		}
	}
}

// TestServerTools: the tools' schemas, null arguments, and the checks a
// handler makes before it reaches the daemon (here unreachable): the
// policy (checked again behind the schema's enum), the sandbox ids.
func TestServerTools(t *testing.T) {
	c, err := client.New("unix:///nonexistent/airlock.sock", "")
	if err != nil {
		t.Fatal(err)
	}
	o := Options{Policies: []string{"default", "python"}}
	if err := o.check(); err != nil {
		t.Fatal(err)
	}
	s := newServer(c, o)
	cs := connectInMemory(t, s.mcp)
	ctx := context.Background()
	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(tools.Tools) != len(ToolNames) {
		t.Fatalf("%d tools, want %d", len(tools.Tools), len(ToolNames))
	}
	for _, tool := range tools.Tools {
		b, _ := json.Marshal(tool.InputSchema)
		if strings.Contains(string(b), `"default":`) {
			t.Errorf("tool %s: a default in its input schema (go-sdk v1.8.0 panics on null arguments then): %s", tool.Name, b)
		}
		if tool.OutputSchema == nil || len(tool.Description) < 40 {
			t.Errorf("tool %s: no output schema or a short description", tool.Name)
		}
		if tool.Name == "create_sandbox" && !strings.Contains(string(b), `"enum":["default","python"]`) {
			t.Errorf("create_sandbox's policy enum: %s", b)
		}
	}
	// Null arguments: an answer, not a crash.
	for _, name := range ToolNames {
		r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: json.RawMessage("null")})
		if err != nil {
			t.Fatalf("%s with null arguments: %v", name, err)
		}
		if strings.Contains(textOf(r), "internal error") {
			t.Fatalf("%s with null arguments panicked: %s", name, textOf(r))
		}
	}
	// Behind the schema: the handler refuses a policy the operator did
	// not allow.
	if _, _, err := s.createSandbox(ctx, nil, createIn{Policy: "evil"}); err == nil || !strings.Contains(err.Error(), `policy "evil" is not allowed here: the operator allows default, python`) {
		t.Fatalf("create_sandbox with a disallowed policy: %v", err)
	}
	r, _ := cs.CallTool(ctx, &mcp.CallToolParams{Name: "run_command", Arguments: map[string]any{"sandbox_id": "sb-x", "command": "true"}})
	if !r.IsError || !strings.Contains(textOf(r), `unknown sandbox_id "sb-x"`) {
		t.Fatalf("run_command on an unknown sandbox: %s", textOf(r))
	}
	// The daemon is unreachable: the tool error says so.
	r, _ = cs.CallTool(ctx, &mcp.CallToolParams{Name: "create_sandbox", Arguments: map[string]any{}})
	if !r.IsError || !strings.Contains(textOf(r), "create_sandbox:") {
		t.Fatalf("create_sandbox with no daemon: %s", textOf(r))
	}
	if s.creating != 0 || len(s.owned) != 0 {
		t.Fatalf("a failed create kept its place: %d creating, %d owned", s.creating, len(s.owned))
	}
}

func TestOptions(t *testing.T) {
	for _, c := range []struct {
		o    Options
		want string
	}{
		{Options{MaxSandboxes: -1}, "--max-sandboxes"},
		{Options{MaxExecTimeout: time.Millisecond}, "--max-exec-timeout"},
		{Options{Policies: []string{"a", "a"}}, "given twice"},
		{Options{Policies: []string{"a b"}}, "--policy"},
		{Options{Host: "unix:///x", Standalone: true}, "one or the other"},
		{Options{Host: "unix:///x", ConfigFile: "/c"}, "one or the other"},
		{Options{Listen: ":0"}, TokenEnv},
		{Options{Listen: ":0", Token: "short"}, "at least 16"},
	} {
		if err := c.o.check(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.o, err, c.want)
		}
	}
	o := Options{Listen: ":0", Token: strings.Repeat("x", MinTokenLen)}
	if err := o.check(); err != nil || o.MaxSandboxes != DefaultMaxSandboxes || o.MaxExecTimeout != DefaultMaxExecTimeout || o.Policies[0] != "default" {
		t.Fatalf("defaults: %+v %v", o, err)
	}
}

func TestBearer(t *testing.T) {
	h := bearer("0123456789abcdef", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "in") }))
	for auth, want := range map[string]int{"": 401, "Bearer 0123456789abcde": 401, "Bearer 0123456789abcdef0": 401, "Basic 0123456789abcdef": 401, "0123456789abcdef": 401, "Bearer": 401,
		"Bearer 0123456789abcdef": 200, "bearer 0123456789abcdef": 200, // the scheme is case-insensitive (RFC 9110)
	} {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodPost, "/mcp", nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		h.ServeHTTP(rec, req)
		if rec.Code != want {
			t.Errorf("Authorization %q: %d, want %d", auth, rec.Code, want)
		}
	}
}
