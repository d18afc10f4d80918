//go:build linux

package mcp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-dev/airlock/internal/testdaemon"
)

func TestMain(m *testing.M) { os.Exit(testdaemon.Main(m, "mcp")) }

// server is one `airlock mcp` process and the Go SDK's client session
// to it over stdio.
type server struct {
	cmd    *exec.Cmd
	cs     *mcp.ClientSession
	stderr *testdaemon.LockedBuffer
	mu     sync.Mutex
	prog   []string // progress messages received
}

// startServer runs `airlock mcp ARGS...` (argv[0] is replaced by the
// built binary when it is "airlock") and connects to it.
func startServer(t *testing.T, env []string, args ...string) *server {
	t.Helper()
	testdaemon.Need(t)
	return startArgv(t, env, append([]string{"airlock", "mcp"}, args...))
}

// startArgv runs argv (argv[0] "airlock" is the built binary) as an MCP
// server over stdio and connects to it.
func startArgv(t *testing.T, env []string, argv []string) *server {
	t.Helper()
	return startArgvAs(t, env, argv, nil)
}

// startArgvAs is startArgv with the process's credentials (nil: ours).
func startArgvAs(t *testing.T, env []string, argv []string, cred *syscall.Credential) *server {
	t.Helper()
	testdaemon.Need(t)
	args := argv[1:]
	if argv[0] != "airlock" {
		t.Fatalf("not an airlock command: %q", argv)
	}
	s := &server{stderr: &testdaemon.LockedBuffer{}}
	s.cmd = exec.Command(testdaemon.Bin, args...)
	s.cmd.Env = append(os.Environ(), env...)
	s.cmd.Stderr = s.stderr
	if cred != nil {
		s.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	c := mcp.NewClient(&mcp.Implementation{Name: "airlock-test", Version: "1"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
			s.mu.Lock()
			s.prog = append(s.prog, r.Params.Message)
			s.mu.Unlock()
		}})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cs, err := c.Connect(ctx, &mcp.CommandTransport{Command: s.cmd, TerminateDuration: 30 * time.Second}, nil)
	if err != nil {
		t.Fatalf("connect to airlock mcp %v: %v\n%s", args, err, s.stderr.String())
	}
	s.cs = cs
	t.Cleanup(func() {
		s.close()
		if t.Failed() {
			t.Logf("airlock mcp stderr:\n%s", testdaemon.Tail(s.stderr.String(), 60))
		}
	})
	return s
}

// close ends the session (stdin closes) and waits for the process.
func (s *server) close() {
	if s.cs != nil {
		s.cs.Close()
		s.cs = nil
	}
}

func (s *server) progress() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string{}, s.prog...)
}

func ctxT(t *testing.T) context.Context { return testdaemon.Ctx(t) }

// call calls a tool and returns its result (a tool error is a result).
func (s *server) call(t *testing.T, name string, args any) *mcp.CallToolResult {
	t.Helper()
	return s.callParams(t, &mcp.CallToolParams{Name: name, Arguments: args})
}

func (s *server) callParams(t *testing.T, p *mcp.CallToolParams) *mcp.CallToolResult {
	t.Helper()
	res, err := s.cs.CallTool(ctxT(t), p)
	if err != nil {
		t.Fatalf("%s: protocol error: %v", p.Name, err)
	}
	return res
}

// ok calls a tool that must succeed and decodes its structured result
// into out; it checks that the text content is there too.
func (s *server) ok(t *testing.T, name string, args any, out any) string {
	t.Helper()
	res := s.call(t, name, args)
	txt := resultText(res)
	if res.IsError {
		t.Fatalf("%s(%v): tool error: %s", name, args, txt)
	}
	if txt == "" {
		t.Fatalf("%s: no text content", name)
	}
	b, err := json.Marshal(res.StructuredContent)
	if err != nil || res.StructuredContent == nil {
		t.Fatalf("%s: no structured content (%v)", name, err)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s: structured content %s: %v", name, b, err)
		}
	}
	return txt
}

// fails calls a tool that must fail with a message holding every want.
func (s *server) fails(t *testing.T, name string, args any, want ...string) string {
	t.Helper()
	res := s.call(t, name, args)
	txt := resultText(res)
	if !res.IsError {
		t.Fatalf("%s(%v): succeeded, want an error with %q: %s", name, args, want, txt)
	}
	for _, w := range want {
		if !strings.Contains(txt, w) {
			t.Fatalf("%s(%v): error %q does not hold %q", name, args, txt, w)
		}
	}
	return txt
}

func resultText(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// netFixture is an HTTP server on the host's loopback that sandboxes
// reach as api.test (allowed by the "net" policy) and other.test (not).
type netFixture struct {
	port   string
	config string // YAML for the daemon's configuration
}

func newNetFixture(t *testing.T) *netFixture {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello %s", r.Host)
	}))
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	pol := filepath.Join(dir, "net.yaml")
	if err := os.WriteFile(pol, []byte("network:\n  mode: allowlist\n  allow: [api.test, 127.0.0.1]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return &netFixture{port: u.Port(), config: fmt.Sprintf("egress_hosts:\n  api.test: [127.0.0.1]\n  other.test: [127.0.0.1]\npolicies:\n  net: %s\n", pol)}
}

// writeConfig writes a configuration file for a standalone server.
func writeConfig(t *testing.T, yaml string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(p, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// runFail runs `airlock mcp ARGS` with stdin closed and wants it to exit
// non-zero at once with one line on stderr holding want.
func runFail(t *testing.T, env []string, want string, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, testdaemon.Bin, append([]string{"mcp"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("airlock mcp %v: still running after 60s", args)
	}
	if err == nil {
		t.Fatalf("airlock mcp %v: exited 0, want a refusal with %q", args, want)
	}
	msg := strings.TrimSuffix(stderr.String(), "\n")
	if strings.Contains(msg, "\n") || !strings.HasPrefix(msg, "airlock: ") || !strings.Contains(msg, want) {
		t.Fatalf("airlock mcp %v: stderr %q, want one line holding %q", args, stderr.String(), want)
	}
	if stdout.Len() != 0 {
		t.Fatalf("airlock mcp %v: wrote to stdout: %q", args, stdout.String())
	}
}

// dialable reports whether something accepts TCP connections at addr.
func dialable(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err == nil {
		c.Close()
	}
	return err == nil
}

// deadPort is a loopback port where nothing listens: one just closed.
func deadPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	return port
}
