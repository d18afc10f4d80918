//go:build linux

package mcp_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-dev/airlock/client"
	"github.com/airlock-dev/airlock/internal/daemon"
	"github.com/airlock-dev/airlock/internal/testdaemon"
)

// procsWith returns the pids of processes whose command line (NULs as
// spaces) holds s.
func procsWith(s string) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		var pid int
		if _, err := fmt.Sscanf(e.Name(), "%d", &pid); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(bytes.ReplaceAll(b, []byte{0}, []byte{' '})), s) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// TestStandaloneKilled: a standalone server killed with SIGKILL cannot
// destroy its sandboxes. The kernel ends their processes, their reapers
// remove their host state, and the next server removes the dead one's
// private directory and works.
func TestStandaloneKilled(t *testing.T) {
	s := startServer(t, nil, "--standalone")
	pid := s.cmd.Process.Pid
	priv := filepath.Join(daemon.EphemeralRoot(), fmt.Sprint(pid))
	var sb sandboxRes
	s.ok(t, "create_sandbox", m{}, &sb)
	marker := fmt.Sprintf("sleep %d", 4000+pid%1000)
	var st startRes
	s.ok(t, "start_command", m{"sandbox_id": sb.SandboxID, "command": "exec " + marker}, &st)
	state := filepath.Join(daemon.EphemeralRoot(), "state", strings.TrimPrefix(sb.SandboxID, "sb-"))
	if _, err := os.Stat(state); err != nil {
		t.Fatalf("sandbox state: %v", err)
	}
	testdaemon.Eventually(t, 30*time.Second, "the sandbox's process", func() bool { return len(procsWith(marker)) == 1 })
	testdaemon.Eventually(t, 30*time.Second, "the sandbox's reaper", func() bool { return len(procsWith("__sandbox-reap "+state)) == 1 })

	s.cmd.Process.Signal(syscall.SIGKILL)
	s.close()
	testdaemon.Eventually(t, 30*time.Second, "the killed server's sandbox processes to end", func() bool { return len(procsWith(marker)) == 0 })
	testdaemon.Eventually(t, 30*time.Second, "the reaper to remove the sandbox's state", func() bool {
		_, err := os.Stat(state)
		return os.IsNotExist(err)
	})
	if _, err := os.Stat(priv); err != nil {
		t.Fatalf("the killed server's private directory should still be there for the next one to sweep: %v", err)
	}

	s2 := startServer(t, nil, "--standalone")
	if _, err := os.Stat(priv); !os.IsNotExist(err) {
		t.Fatalf("the next server left the dead one's private directory: %v", err)
	}
	s2.ok(t, "create_sandbox", m{}, &sb)
	var r runRes
	s2.ok(t, "run_command", m{"sandbox_id": sb.SandboxID, "command": "echo alive"}, &r)
	if r.Stdout != "alive\n" {
		t.Fatalf("the next server: %+v", r)
	}
}

type bearerRT struct{ token string }

func (b bearerRT) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// TestHTTP: --listen serves streamable HTTP at /mcp. Requests without the
// token or with a wrong one get 401, next to a session with the token
// that runs a command past a progress interval and gets progress. SIGTERM
// stops the server, which destroys its sandbox.
func TestHTTP(t *testing.T) {
	d := testdaemon.Start(t, "")
	addr := testdaemon.FreeAddr(t)
	token := "test-token-0123456789"
	cmd := exec.Command(testdaemon.Bin, "mcp", "--host", "unix://"+d.Sock, "--listen", addr)
	cmd.Env = append(os.Environ(), "AIRLOCK_MCP_TOKEN="+token)
	errb := &testdaemon.LockedBuffer{}
	cmd.Stdout, cmd.Stderr = errb, errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("airlock mcp output:\n%s", errb.String())
		}
	})
	testdaemon.Eventually(t, 30*time.Second, "airlock mcp to listen", func() bool { return dialable(addr) })

	url := "http://" + addr + "/mcp"
	init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"curl","version":"1"}}}`
	post := func(auth, u string) (int, string, http.Header) {
		req, _ := http.NewRequest(http.MethodPost, u, strings.NewReader(init))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
		return resp.StatusCode, string(b), resp.Header
	}
	if code, body, h := post("", url); code != http.StatusUnauthorized || !strings.Contains(body, "missing bearer token") || h.Get("WWW-Authenticate") == "" {
		t.Fatalf("no token: %d %q", code, body)
	}
	for _, bad := range []string{"Bearer wrong-token-0123456789", "Bearer " + token + "x", "Basic " + token, token} {
		if code, body, _ := post(bad, url); code != http.StatusUnauthorized || !strings.Contains(body, "wrong bearer token") {
			t.Fatalf("Authorization %q: %d %q", bad, code, body)
		}
	}
	// The scheme is case-insensitive (RFC 9110).
	for _, good := range []string{"Bearer " + token, "bearer " + token, "BEARER  " + token} {
		if code, body, _ := post(good, url); code != http.StatusOK || !strings.Contains(body, `"serverInfo"`) {
			t.Fatalf("Authorization %q: %d %q", good, code, body)
		}
	}
	if code, _, _ := post("Bearer "+token, "http://"+addr+"/other"); code != http.StatusNotFound {
		t.Fatalf("another path: %d", code)
	}

	var progress []string
	c := mcp.NewClient(&mcp.Implementation{Name: "airlock-test", Version: "1"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
			progress = append(progress, r.Params.Message)
		}})
	cs, err := c.Connect(ctxT(t), &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: bearerRT{token}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	s := &server{cs: cs}
	var sb sandboxRes
	s.ok(t, "create_sandbox", m{}, &sb)
	p := &mcp.CallToolParams{Name: "run_command", Arguments: m{"sandbox_id": sb.SandboxID, "command": "sleep 8; echo done"}}
	p.SetProgressToken("run-1")
	res := s.callParams(t, p)
	if res.IsError || !strings.Contains(resultText(res), "done") {
		t.Fatalf("run_command over HTTP: %s", resultText(res))
	}
	if len(progress) == 0 || !regexp.MustCompile(`^still running after [5-8]s$`).MatchString(progress[0]) {
		t.Fatalf("progress over HTTP: %q", progress)
	}

	termAt := time.Now()
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-exited:
		t.Logf("stopped %v after SIGTERM", time.Since(termAt).Round(time.Millisecond))
		exited <- err
		if err != nil {
			t.Fatalf("airlock mcp after SIGTERM: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("airlock mcp still running 60s after SIGTERM")
	}
	if _, err := d.C.GetSandbox(ctxT(t), sb.SandboxID); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("the server's sandbox after SIGTERM: %v", err)
	}
}

// TestStartErrors: bad flags, a bad configuration, an unreachable daemon
// and a missing or short token are one-line errors and a non-zero exit,
// before anything starts; the control starts with the same configuration
// fixed.
func TestStartErrors(t *testing.T) {
	testdaemon.Need(t)
	nf := newNetFixture(t)
	good := writeConfig(t, nf.config)
	runFail(t, []string{"AIRLOCK_MCP_TOKEN="}, "--listen needs a bearer token in AIRLOCK_MCP_TOKEN", "--standalone", "--listen", "127.0.0.1:0")
	runFail(t, []string{"AIRLOCK_MCP_TOKEN=short"}, "at least 16", "--standalone", "--listen", "127.0.0.1:0")
	runFail(t, nil, "cannot use the airlock daemon at unix:///nonexistent/airlock.sock", "--host", "unix:///nonexistent/airlock.sock")
	runFail(t, []string{"AIRLOCK_HOST=unix:///nonexistent/airlock.sock"}, "cannot use the airlock daemon", "--policy", "net")
	runFail(t, nil, "give one or the other", "--host", "unix:///x.sock", "--standalone")
	runFail(t, nil, "config", "--config", "/nonexistent/config.yaml")
	runFail(t, nil, "no_such_key", "--config", writeConfig(t, "no_such_key: 1\n"))
	runFail(t, nil, "no TCP listener", "--config", writeConfig(t, nf.config+"listen: 127.0.0.1:0\n"))
	runFail(t, nil, "chosen by airlock mcp", "--config", writeConfig(t, nf.config+"socket: /tmp/x.sock\n"))
	runFail(t, nil, "--policy nope: no such policy", "--config", good, "--policy", "nope")
	runFail(t, nil, "--policy net given twice", "--config", good, "--policy", "net", "--policy", "net")
	runFail(t, nil, "--max-sandboxes must be at least 1", "--standalone", "--max-sandboxes", "0")
	runFail(t, nil, "--max-exec-timeout", "--standalone", "--max-exec-timeout", "10ms")
	runFail(t, nil, "--max-exec-timeout 0s: want at least 1s", "--standalone", "--max-exec-timeout", "0s")
	runFail(t, []string{"AIRLOCK_MCP_TOKEN=                "}, "contains spaces", "--standalone", "--listen", "127.0.0.1:0")
	runFail(t, nil, "unknown flag", "--no-such-flag")

	s := startServer(t, nil, "--config", good, "--policy", "net")
	var sb sandboxRes
	s.ok(t, "create_sandbox", m{}, &sb)
	if sb.Policy != "net" {
		t.Fatalf("the first --policy is the default: %+v", sb)
	}
	s.fails(t, "create_sandbox", m{"policy": "default"}, "default", "net")
}

// TestAPIKey: against a daemon's TCP listener, the server takes its key
// from AIRLOCK_API_KEY. A wrong key stops it at start with the daemon's
// message; the right one works.
func TestAPIKey(t *testing.T) {
	addr := testdaemon.FreeAddr(t)
	d := testdaemon.Start(t, "listen: "+addr+"\n")
	key := d.Key(t, "mcp")
	host := "http://" + addr
	runFail(t, []string{"AIRLOCK_API_KEY=wrong"}, "unauthenticated", "--host", host)
	runFail(t, []string{"AIRLOCK_API_KEY="}, "unauthenticated", "--host", host)
	s := startServer(t, []string{"AIRLOCK_API_KEY=" + key}, "--host", host)
	var sb sandboxRes
	s.ok(t, "create_sandbox", m{}, &sb)
	var r runRes
	s.ok(t, "run_command", m{"sandbox_id": sb.SandboxID, "command": "echo over tcp"}, &r)
	if r.Stdout != "over tcp\n" {
		t.Fatalf("run_command over TCP: %+v", r)
	}
}

// TestTwoStandalone: a second standalone server, which shares the first
// one's state root, leaves the first one's sandboxes alone (it removed
// them as unknown to its store, with their workspaces). The control: the
// second server's own sandboxes work, and each server still sees its own
// files.
func TestTwoStandalone(t *testing.T) {
	a := startServer(t, nil, "--standalone")
	var sa sandboxRes
	a.ok(t, "create_sandbox", m{}, &sa)
	a.ok(t, "write_file", m{"sandbox_id": sa.SandboxID, "path": "work.txt", "content": "from a"}, nil)
	b := startServer(t, nil, "--standalone")
	var sb sandboxRes
	b.ok(t, "create_sandbox", m{}, &sb)
	b.ok(t, "write_file", m{"sandbox_id": sb.SandboxID, "path": "work.txt", "content": "from b"}, nil)
	for _, c := range []struct {
		s    *server
		id   string
		want string
	}{{a, sa.SandboxID, "from a"}, {b, sb.SandboxID, "from b"}} {
		if got := c.s.ok(t, "read_file", m{"sandbox_id": c.id, "path": "work.txt"}, nil); !strings.Contains(got, c.want) {
			t.Errorf("read_file in %s: %q, want %q", c.id, got, c.want)
		}
	}
	if strings.Contains(b.stderr.String(), "removing a sandbox the store does not know") {
		t.Errorf("the second server removed a sandbox:\n%s", testdaemon.Tail(b.stderr.String(), 20))
	}
}
