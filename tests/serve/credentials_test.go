//go:build linux

package serve

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"encoding/pem"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/client"
)

// TestEgressCredentials: a named secret of the daemon, bound by an inline
// policy to one host, reaches that host's server over HTTPS; the sandbox
// sees the placeholder; request rules refuse a POST; an inline policy may
// not read the daemon's environment, and an unknown secret refuses the
// creation and leaves nothing behind.
func TestEgressCredentials(t *testing.T) {
	const secret = "serve-Secret-Value-7"
	var mu sync.Mutex
	var seen []string
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Method+" "+r.URL.Path+" "+r.Header.Get("Authorization"))
		mu.Unlock()
		fmt.Fprintf(w, "hello %s", r.URL.Path)
	}))
	ts.EnableHTTP2 = false
	ts.StartTLS()
	defer ts.Close()
	port := ts.URL[strings.LastIndex(ts.URL, ":")+1:]
	ca := filepath.Join(t.TempDir(), "ca.pem")
	os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ts.Certificate().Raw}), 0o644)
	// The daemon verifies the upstream with the test CA (Go honours
	// SSL_CERT_FILE) and reads the secret from its environment.
	t.Setenv("SSL_CERT_FILE", ca)
	t.Setenv("AIRLOCK_SERVE_TEST_TOKEN", secret)
	d := startDaemon(t, "egress_hosts:\n  api.example.com: [127.0.0.1]\n  other.example.com: [127.0.0.1]\nsecrets:\n  github: {source: env:AIRLOCK_SERVE_TEST_TOKEN, hosts: [api.example.com]}\n")
	pol := func(src string) string {
		return fmt.Sprintf(`network:
  mode: allowlist
  allow: [api.example.com, 127.0.0.1]
  http:
    - {hosts: [api.example.com], methods: [GET]}
  credentials:
    - {hosts: [api.example.com], secret: %q, env: GH_TOKEN}
`, src)
	}
	sb := d.create(t, &api.CreateSandboxRequest{Policy: pol("github")})
	out := d.sh(t, sb.ID, fmt.Sprintf(`echo "$GH_TOKEN"
curl -s -m 10 -H "Authorization: token $GH_TOKEN" https://api.example.com:%[1]s/user; echo
curl -s -m 10 -o /dev/null -w '%%{http_code}' -X POST -H "Authorization: token $GH_TOKEN" https://api.example.com:%[1]s/user`, port))
	lines := strings.Split(out, "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "airlock-placeholder-") || lines[1] != "hello /user" || lines[2] != "403" {
		t.Fatalf("inside the sandbox: %q", out)
	}
	mu.Lock()
	got := strings.Join(seen, "\n")
	mu.Unlock()
	if got != "GET /user token "+secret {
		t.Fatalf("the server saw %q", got)
	}
	// The audit, through the API: the inspected request with its path and
	// the credential's name; the refused POST with the rule.
	var evs []api.NetworkEvent
	eventually(t, 10*time.Second, "the audit of the inspected requests", func() bool {
		page, err := d.c.NetworkEvents(ctxT(t), sb.ID, client.NetworkQuery{Host: "api.example.com"})
		if err != nil {
			t.Fatal(err)
		}
		evs = nil
		for _, e := range page.Events {
			if e.Proto == "https" {
				evs = append(evs, e)
			}
		}
		return len(evs) == 2
	})
	if e := evs[0]; e.Method != "GET" || e.Path != "/user" || !e.Allowed || e.Credential != "GH_TOKEN" {
		t.Fatalf("audit of the GET: %+v", e)
	}
	if e := evs[1]; e.Method != "POST" || e.Allowed || !strings.Contains(e.Rule, "no http rule allows POST") || e.Credential != "" {
		t.Fatalf("audit of the POST: %+v", e)
	}

	// Request rules change while the sandbox runs: POST is now allowed.
	np, err := d.c.NetworkPolicy(ctxT(t), sb.ID)
	if err != nil || len(np.HTTP) != 1 || np.HTTP[0].Methods[0] != "GET" {
		t.Fatalf("policy: %+v %v", np, err)
	}
	np.HTTP[0].Methods = []string{"GET", "POST"}
	if _, err := d.c.SetNetworkPolicy(ctxT(t), sb.ID, *np); err != nil {
		t.Fatal(err)
	}
	np.HTTP[0].Hosts = []string{"10.0.0.1"}
	_, err = d.c.SetNetworkPolicy(ctxT(t), sb.ID, *np)
	wantCode(t, "an address in a request rule", err, 400)
	if out := d.sh(t, sb.ID, fmt.Sprintf(`curl -s -m 10 -o /dev/null -w '%%{http_code}' -X POST -H "Authorization: token $GH_TOKEN" https://api.example.com:%s/user`, port)); out != "200" {
		t.Fatalf("POST after the change: %q", out)
	}
	mu.Lock()
	got = strings.Join(seen, "\n")
	mu.Unlock()
	if got != "GET /user token "+secret+"\nPOST /user token "+secret {
		t.Fatalf("the server saw %q", got)
	}
	// Across a daemon restart (kill -9): the same placeholder, the secret
	// still added for the bound host only, the changed rules still in force.
	// Beside the live sandbox's egress files: a dead sandbox's (removed at
	// recovery) and something else (left alone).
	eg := d.stateDir + "-egress"
	os.MkdirAll(filepath.Join(eg, "sb-00000000000000aa"), 0o700)
	os.MkdirAll(filepath.Join(eg, "not-a-sandbox"), 0o700)
	d.restart(syscall.SIGKILL)
	for name, want := range map[string]bool{sb.ID: true, "sb-00000000000000aa": false, "not-a-sandbox": true} {
		if _, err := os.Stat(filepath.Join(eg, name)); (err == nil) != want {
			t.Errorf("egress dir %s after recovery: exists=%v, want %v", name, err == nil, want)
		}
	}
	os.Remove(filepath.Join(eg, "not-a-sandbox"))
	out = d.sh(t, sb.ID, fmt.Sprintf(`echo "$GH_TOKEN"
curl -s -m 10 -o /dev/null -w '%%{http_code}' -X POST -H "Authorization: token $GH_TOKEN" https://api.example.com:%s/after`, port))
	if out != lines[0]+"\n200" {
		t.Fatalf("after a restart: %q (placeholder before: %q)", out, lines[0])
	}
	mu.Lock()
	got = seen[len(seen)-1]
	mu.Unlock()
	if got != "POST /after token "+secret {
		t.Fatalf("after a restart the server saw %q", got)
	}
	if strings.Contains(d.Logs(), secret) {
		t.Fatal("the daemon's log holds the secret")
	}
	egressDir := filepath.Join(d.stateDir+"-egress", sb.ID)
	if _, err := os.Stat(filepath.Join(egressDir, "ca-key.pem")); err != nil {
		t.Fatalf("the sandbox's CA key is not where expected: %v", err)
	}

	// Refused: the daemon's environment, an unknown secret. Nothing is
	// left behind.
	before := d.stateEntries()
	for _, src := range []string{"env:HOME", "file:/etc/shadow", "nope"} {
		_, err := d.c.CreateSandbox(ctxT(t), &api.CreateSandboxRequest{Policy: pol(src)})
		wantCode(t, "credential "+src, err, 400)
	}
	_, err = d.c.CreateSandbox(ctxT(t), &api.CreateSandboxRequest{Policy: pol("github") + "  max_connections: 100000\n"})
	wantCode(t, "raising the connection cap", err, 400)
	// The daemon's configuration binds the secret to api.example.com: an
	// API caller cannot send it anywhere else.
	_, err = d.c.CreateSandbox(ctxT(t), &api.CreateSandboxRequest{Policy: strings.Replace(pol("github"), "{hosts: [api.example.com], secret:", "{hosts: [other.example.com], secret:", 1)})
	wantCode(t, "the secret bound to another host", err, 400)
	var ce *client.Error
	if !errors.As(err, &ce) || !strings.Contains(ce.Message, `secret "github" may not be sent to "other.example.com"`) {
		t.Fatalf("the secret bound to another host: %v", err)
	}
	if after := d.stateEntries(); strings.Join(after, ",") != strings.Join(before, ",") {
		t.Fatalf("a refused creation left state behind: %v -> %v", before, after)
	}
	if entries, _ := os.ReadDir(d.stateDir + "-egress"); len(entries) != 1 {
		t.Fatalf("egress dirs after refused creations: %v", entries)
	}
	if err := d.c.DeleteSandbox(ctxT(t), sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(egressDir); !os.IsNotExist(err) {
		t.Fatalf("the sandbox's egress files outlive it: %v", err)
	}
}
