//go:build linux

package e2e

import (
	"archive/zip"
	"bytes"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// egressWorld is an HTTP and an HTTPS server on loopback, named api.test
// and other.test through the gateway's static host map.
type egressWorld struct {
	httpPort, httpsPort string
	caFile              string
	hosts               []string
}

func newEgressWorld(t *testing.T) *egressWorld {
	t.Helper()
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello %s %s", r.Host, r.URL.Path)
	})
	hs := httptest.NewServer(h)
	t.Cleanup(hs.Close)
	ts := httptest.NewUnstartedServer(h)
	ts.EnableHTTP2 = false
	ts.StartTLS()
	t.Cleanup(ts.Close)
	// The test CA in a world-readable workspace file for curl's --cacert.
	dir, err := os.MkdirTemp("", "airlock-egress-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o755)
	t.Cleanup(func() { os.RemoveAll(dir) })
	ca := filepath.Join(dir, "ca.pem")
	os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ts.Certificate().Raw}), 0o644)
	hu, _ := url.Parse(hs.URL)
	tu, _ := url.Parse(ts.URL)
	return &egressWorld{httpPort: hu.Port(), httpsPort: tu.Port(), caFile: ca,
		hosts: []string{"--add-host", "api.test:127.0.0.1", "--add-host", "other.test:127.0.0.1", "--add-host", "example.com:127.0.0.1", "--workspace", dir}}
}

func (w *egressWorld) flags(extra ...string) []string {
	return append(append([]string{}, w.hosts...), extra...)
}

// TestEgressAllowDeny: the allowlist through the HTTP proxy (plain and
// CONNECT) and SOCKS5, each denial next to its allowed control.
func TestEgressAllowDeny(t *testing.T) {
	needRoot(t)
	w := newEgressWorld(t)
	// The test servers are on loopback: a private address, so they need an
	// explicit IP rule besides the name (a name alone never reaches one).
	allow := w.flags("--net-allow", "api.test", "--net-allow", "example.com", "--net-allow", "127.0.0.1")
	r := sh(t, opts{}, allow, fmt.Sprintf(`
curl -s -m 10 http://api.test:%[1]s/plain; echo
curl -s -m 10 --cacert /workspace/ca.pem https://example.com:%[2]s/tls; echo
curl -s -m 10 --socks5-hostname 127.0.0.1:1080 http://api.test:%[1]s/socks; echo
curl -s -m 10 -o /dev/null -w '%%{http_code} ' http://other.test:%[1]s/; curl -s -m 10 -D - -o /dev/null http://other.test:%[1]s/ | grep -i x-airlock-rule
curl -s -m 10 --socks5-hostname 127.0.0.1:1080 http://other.test:%[1]s/ >/dev/null; echo "socks other: $?"
curl -s -m 10 --cacert /workspace/ca.pem https://other.test:%[2]s/ >/dev/null; echo "connect other: $?"
`, w.httpPort, w.httpsPort))
	mustOK(t, r, "egress matrix")
	for _, want := range []string{
		"hello api.test:" + w.httpPort + " /plain", "hello example.com:" + w.httpsPort + " /tls", "hello api.test:" + w.httpPort + " /socks",
		"403 X-Airlock-Rule: not in allowlist", "socks other: 97", "connect other: 56",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("missing %q in:\n%s", want, r.stdout)
		}
	}
	// Deny wins over allow.
	r = sh(t, opts{}, append(allow, "--net-deny", "api.test"), fmt.Sprintf(`curl -s -m 10 -o /dev/null -w '%%{http_code}' http://api.test:%s/`, w.httpPort))
	if r.stdout != "403" {
		t.Errorf("deny over allow: %s", r)
	}
}

// TestEgressPrivateAddresses: open mode still refuses private and
// metadata addresses in any spelling, unless an IP rule allows them.
func TestEgressPrivateAddresses(t *testing.T) {
	needRoot(t)
	w := newEgressWorld(t)
	r := sh(t, opts{}, w.flags("--net", "open"), fmt.Sprintf(`
for h in api.test 127.0.0.1 2130706433 0x7f000001 0177.0.0.1 127.1 '[::ffff:127.0.0.1]' 169.254.169.254 '[fd00:ec2::254]'; do
  printf '%%s ' "$h"; curl -s -m 10 -o /dev/null -w '%%{http_code}\n' "http://$h:%s/"
done`, w.httpPort))
	mustOK(t, r, "open mode")
	for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		f := strings.Fields(line)
		if len(f) != 2 || f[1] == "200" {
			t.Errorf("private address reached in open mode: %q", line)
		}
	}
	// Control: the explicit IP rule lets the same request through.
	r = sh(t, opts{}, w.flags("--net", "open", "--net-allow", "127.0.0.1"), fmt.Sprintf(`curl -s -m 10 http://api.test:%s/ok`, w.httpPort))
	if !strings.Contains(r.stdout, "hello api.test") {
		t.Errorf("explicitly allowed private address: %s", r)
	}
}

// TestEgressNoneAndNoDNS: without a network mode nothing is set up; with
// one, there is still no resolver inside (the gateway resolves).
func TestEgressNoneAndNoDNS(t *testing.T) {
	needRoot(t)
	w := newEgressWorld(t)
	r := sh(t, opts{}, w.flags(), fmt.Sprintf(`env | grep -ci _proxy; curl -s -m 5 -x http://127.0.0.1:3128 http://api.test:%s/; echo "rc=$?"`, w.httpPort))
	if !strings.Contains(r.stdout, "0\n") || !strings.Contains(r.stdout, "rc=7") {
		t.Errorf("mode none: %s", r)
	}
	r = py(t, opts{}, w.flags("--net-allow", "api.test", "--net-allow", "127.0.0.1"), `
import socket, os
try:
    socket.getaddrinfo("api.test", 80); print("resolved")
except OSError as e:
    print("no dns")
print(os.environ.get("HTTPS_PROXY"), os.environ.get("ALL_PROXY"))
`)
	if !strings.Contains(r.stdout, "no dns") || !strings.Contains(r.stdout, "http://127.0.0.1:3128 socks5h://127.0.0.1:1080") {
		t.Errorf("with network: %s", r)
	}
}

// TestEgressAudit: every connection and request is recorded, allowed or
// not, with bytes.
func TestEgressAudit(t *testing.T) {
	needRoot(t)
	w := newEgressWorld(t)
	log := filepath.Join(t.TempDir(), "net.jsonl")
	r := sh(t, opts{}, w.flags("--net-allow", "api.test", "--net-allow", "127.0.0.1", "--net-log", log), fmt.Sprintf(`
curl -s -m 10 http://api.test:%[1]s/a >/dev/null
curl -s -m 10 http://other.test:%[1]s/b >/dev/null
curl -s -m 10 --socks5-hostname 127.0.0.1:1080 http://api.test:%[1]s/c >/dev/null
true`, w.httpPort))
	mustOK(t, r, "audit run")
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	var recs []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("audit line %q: %v", l, err)
		}
		recs = append(recs, m)
	}
	if len(recs) != 3 {
		t.Fatalf("want 3 records, got %d:\n%s", len(recs), b)
	}
	if recs[0]["path"] != "/a" || recs[0]["allowed"] != true || recs[0]["bytes_down"].(float64) <= 0 {
		t.Errorf("allowed request: %v", recs[0])
	}
	if recs[1]["host"] != "other.test" || recs[1]["allowed"] != false || recs[1]["rule"] == "" {
		t.Errorf("denied request: %v", recs[1])
	}
	if recs[2]["proto"] != "socks" || recs[2]["allowed"] != true {
		t.Errorf("socks connection: %v", recs[2])
	}
}

// TestEgressCredentials: a secret bound to api.example.com reaches its
// server over HTTPS from curl and Python, through the sandbox CA the
// sandbox trusts by default; the sandbox, other.example.com and the output see
// only the placeholder. Request rules refuse a POST next to the allowed
// GET.
func TestEgressCredentials(t *testing.T) {
	needRoot(t)
	const secret = "e2e-Secret-Value-42"
	var mu sync.Mutex
	var seen []string // "host auth"
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, _ := strings.Cut(r.Host, ":")
		mu.Lock()
		seen = append(seen, host+" "+r.Method+" "+r.URL.Path+" "+r.Header.Get("Authorization"))
		mu.Unlock()
		// A server that reflects the credential into its body (as echo
		// and debug endpoints do): the gateway scrubs it.
		fmt.Fprintf(w, "hello %s %s (auth: %s)", host, r.URL.Path, r.Header.Get("Authorization"))
	})
	ts := httptest.NewUnstartedServer(h)
	ts.EnableHTTP2 = false
	ts.StartTLS()
	t.Cleanup(ts.Close)
	w := newEgressWorld(t)
	os.WriteFile(w.caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ts.Certificate().Raw}), 0o644)
	port := strings.TrimPrefix(ts.URL[strings.LastIndex(ts.URL, ":"):], ":")
	pol := filepath.Join(t.TempDir(), "policy.yaml")
	os.WriteFile(pol, []byte(`network:
  mode: allowlist
  allow: [api.example.com, other.example.com, 127.0.0.1]
  http:
    - hosts: [api.example.com]
      methods: [GET]
      paths: [/repos/]
`), 0o644)
	// The gateway verifies api.example.com's server with the test CA, from its
	// own environment (Go honours SSL_CERT_FILE).
	o := opts{env: []string{"E2E_TOKEN=" + secret, "SSL_CERT_FILE=" + w.caFile}}
	r := sh(t, o, w.flags("--add-host", "api.example.com:127.0.0.1", "--add-host", "other.example.com:127.0.0.1", "--policy", pol, "--secret", "E2E_TOKEN@api.example.com"), fmt.Sprintf(`
echo "env: $E2E_TOKEN"
curl -s -m 10 -H "Authorization: Bearer $E2E_TOKEN" https://api.example.com:%[1]s/repos/curl; echo
python3 -c "
import os, urllib.request
r = urllib.request.Request('https://api.example.com:%[1]s/repos/python', headers={'Authorization': 'Bearer ' + os.environ['E2E_TOKEN']})
print(urllib.request.urlopen(r, timeout=10).read().decode())"
curl -s -m 10 -H "Authorization: Bearer $E2E_TOKEN" --cacert /workspace/ca.pem https://other.example.com:%[1]s/other; echo
curl -s -m 10 -o /dev/null -w 'post %%{http_code}\n' -X POST -H "Authorization: Bearer $E2E_TOKEN" https://api.example.com:%[1]s/repos/curl
curl -s -m 10 -o /dev/null -w 'admin %%{http_code}\n' https://api.example.com:%[1]s/admin
grep -rl -- "$E2E_TOKEN" /etc/ssl/certs/ca-certificates.crt >/dev/null && echo "placeholder in bundle"
grep -c "BEGIN CERTIFICATE" /etc/ssl/certs/airlock-sandbox-ca.pem
`, port))
	mustOK(t, r, "credentials")
	if strings.Contains(r.stdout+r.stderr, secret) {
		t.Fatalf("the secret reached the sandbox's output:\n%s", r)
	}
	for _, want := range []string{"env: airlock-placeholder-", "hello api.example.com /repos/curl (auth: Bearer airlock-placeholder-", "hello api.example.com /repos/python (auth: Bearer airlock-placeholder-", "hello other.example.com /other", "post 403", "admin 403"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("missing %q in:\n%s", want, r.stdout)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	got := strings.Join(seen, "\n")
	for _, want := range []string{"api.example.com GET /repos/curl Bearer " + secret, "api.example.com GET /repos/python Bearer " + secret, "other.example.com GET /other Bearer airlock-placeholder-"} {
		if !strings.Contains(got, want) {
			t.Errorf("the servers saw:\n%s\nwant a line %q", got, want)
		}
	}
	if strings.Contains(got, "POST") || strings.Contains(got, "/admin") || strings.Count(got, secret) != 2 {
		t.Errorf("the servers saw:\n%s", got)
	}
}

// TestEgressHostLoopback: a server on the host's loopback, reached from
// inside as host.airlock.internal:PORT with curl through the HTTP proxy
// (plain and CONNECT) and SOCKS5, and audited, next to the denials: no
// rule for it, another port, a wildcard, open mode. 127.0.0.1 inside is
// the sandbox's own loopback; a rule without a port does not start.
func TestEgressHostLoopback(t *testing.T) {
	needRoot(t)
	var hits atomic.Int32
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		fmt.Fprintf(w, "host service %s %s", r.Host, r.URL.Path)
	})
	svc, other := httptest.NewServer(h), httptest.NewServer(h) // both on 127.0.0.1
	t.Cleanup(svc.Close)
	t.Cleanup(other.Close)
	port, otherPort := svc.Listener.Addr().(*net.TCPAddr).Port, other.Listener.Addr().(*net.TCPAddr).Port
	name := fmt.Sprintf("host.airlock.internal:%d", port)
	log := filepath.Join(t.TempDir(), "net.jsonl")
	r := sh(t, opts{}, []string{"--net-allow", name, "--net-log", log}, fmt.Sprintf(`
curl -s -m 10 http://%[1]s/plain; echo
curl -s -m 10 --proxytunnel http://%[1]s/connect; echo
curl -s -m 10 --socks5-hostname 127.0.0.1:1080 http://%[1]s/socks; echo
curl -s -m 10 -o /dev/null -w 'other port %%{http_code}\n' http://host.airlock.internal:%[2]d/
curl -s -m 10 -o /dev/null -w 'own loopback %%{http_code}\n' http://127.0.0.1:%[3]d/
true`, name, otherPort, port))
	mustOK(t, r, "host loopback")
	for _, want := range []string{"host service " + name + " /plain", "host service " + name + " /connect", "host service " + name + " /socks", "other port 403", "own loopback 000"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("missing %q in:\n%s", want, r.stdout)
		}
	}
	if n := hits.Load(); n != 3 {
		t.Errorf("the host's services got %d requests, want 3", n)
	}
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	var allowed, denied int
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("audit line %q: %v", l, err)
		}
		switch {
		case m["host"] != "host.airlock.internal":
			t.Errorf("audit: %v", m)
		case m["allowed"] == true && m["addr"] == fmt.Sprintf("127.0.0.1:%d", port) && m["rule"] == name:
			allowed++
		case m["allowed"] == false && m["port"] == float64(otherPort) && strings.Contains(fmt.Sprint(m["rule"]), "only an allow rule naming it with the port"):
			denied++
		default:
			t.Errorf("audit: %v", m)
		}
	}
	if allowed != 3 || denied != 1 {
		t.Errorf("audit: %d allowed, %d denied records, want 3 and 1:\n%s", allowed, denied, b)
	}

	// No rule for it, a wildcard, open mode: denied, nothing reached.
	hits.Store(0)
	for _, flags := range [][]string{{"--net-allow", "example.com"}, {"--net-allow", "*.airlock.internal"}, {"--net", "open"}} {
		r := sh(t, opts{}, flags, fmt.Sprintf(`
curl -s -m 10 -o /dev/null -w 'http %%{http_code}\n' http://%[1]s/
curl -s -m 10 --socks5-hostname 127.0.0.1:1080 http://%[1]s/ >/dev/null; echo "socks $?"`, name))
		if !strings.Contains(r.stdout, "http 403") || !strings.Contains(r.stdout, "socks 97") {
			t.Errorf("%q: %s", flags, r)
		}
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("a denied sandbox reached the host's service %d times", n)
	}
	// A rule without a port: refused before anything starts.
	r = run(t, opts{}, []string{"--net-allow", "host.airlock.internal"}, "true")
	if r.code == 0 || !strings.Contains(r.stderr, "name the port, as in host.airlock.internal:11434") {
		t.Errorf("a rule without a port: %s", r)
	}
}

// TestEgressProbes: N1 with the gateway on (nothing leaves but through
// it), N2 (a denied host's SNI inside a tunnel to an allowed one) and C7
// (one sandbox's placeholder is worth nothing in another).
func TestEgressProbes(t *testing.T) {
	needRoot(t)
	const secret = "probe-Secret-Value-9"
	var mu sync.Mutex
	var seen []string
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if a := r.Header.Get("Authorization"); a != "" {
			mu.Lock()
			seen = append(seen, a)
			mu.Unlock()
		}
		fmt.Fprint(w, "hello")
	}))
	ts.EnableHTTP2 = false
	ts.StartTLS()
	t.Cleanup(ts.Close)
	w := newEgressWorld(t)
	os.WriteFile(w.caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ts.Certificate().Raw}), 0o644)
	port := ts.URL[strings.LastIndex(ts.URL, ":")+1:]
	flags := w.flags("--add-host", "api.example.com:127.0.0.1", "--add-host", "denied.example.com:127.0.0.1",
		"--net-allow", "api.example.com", "--net-allow", "127.0.0.1")

	// N1: proxy variables unset, direct connections fail; the control
	// through the proxy works.
	r := sh(t, opts{}, flags, fmt.Sprintf(`
curl -s -m 5 --noproxy '*' -o /dev/null https://1.1.1.1/; echo "direct ip: $?"
curl -s -m 5 --noproxy '*' -o /dev/null http://127.0.0.1:%[2]s/; echo "direct host port: $?"
bash -c 'echo > /dev/tcp/192.0.2.1/80' 2>/dev/null; echo "dev tcp: $?"
curl -s -m 10 --cacert /workspace/ca.pem https://api.example.com:%[1]s/; echo " via proxy"
`, port, w.httpPort))
	mustOK(t, r, "N1")
	for _, want := range []string{"direct ip: 7", "direct host port: 7", "dev tcp: 1", "hello via proxy"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("N1: missing %q in:\n%s", want, r.stdout)
		}
	}

	// N2: a tunnel to the allowed host carrying the denied host's SNI is
	// refused before anything reaches upstream; the same tunnel with the
	// allowed name is the control.
	r = sh(t, opts{}, flags, fmt.Sprintf(`python3 -c "
import socket, ssl
for sni in ['api.example.com', 'denied.example.com']:
    s = socket.create_connection(('127.0.0.1', 3128), timeout=10)
    s.sendall(b'CONNECT api.example.com:%[1]s HTTP/1.1\r\nHost: api.example.com:%[1]s\r\n\r\n')
    assert s.recv(4096).startswith(b'HTTP/1.1 200')
    ctx = ssl.create_default_context(cafile='/workspace/ca.pem')
    try:
        t = ctx.wrap_socket(s, server_hostname=sni)
        t.sendall(b'GET / HTTP/1.1\r\nHost: api.example.com\r\nConnection: close\r\n\r\n')
        print(sni, 'ok', t.recv(4096).split(b'\r\n')[0].decode())
    except (ssl.SSLError, OSError) as e:
        print(sni, 'refused')
"`, port))
	mustOK(t, r, "N2")
	if !strings.Contains(r.stdout, "api.example.com ok HTTP/1.1 200 OK") || !strings.Contains(r.stdout, "denied.example.com refused") {
		t.Errorf("N2:\n%s", r)
	}

	// C7: sandbox A's placeholder, used by sandbox B (which has no
	// credential, or its own), never becomes A's secret.
	o := opts{env: []string{"PROBE_TOKEN=" + secret, "SSL_CERT_FILE=" + w.caFile}}
	a := sh(t, o, append(flags, "--secret", "PROBE_TOKEN@api.example.com"), `echo "$PROBE_TOKEN"`)
	mustOK(t, a, "C7 A")
	phA := strings.TrimSpace(a.stdout)
	b := sh(t, o, append(flags, "--secret", "PROBE_TOKEN@api.example.com"), fmt.Sprintf(`echo "$PROBE_TOKEN"
curl -s -m 10 -H "Authorization: Bearer %[2]s" https://api.example.com:%[1]s/; echo
curl -s -m 10 -H "Authorization: Bearer $PROBE_TOKEN" https://api.example.com:%[1]s/; echo`, port, phA))
	mustOK(t, b, "C7 B")
	c := sh(t, o, flags, fmt.Sprintf(`curl -s -m 10 --cacert /workspace/ca.pem -H "Authorization: Bearer %[2]s" https://api.example.com:%[1]s/`, port, phA))
	mustOK(t, c, "C7 C")
	if !strings.HasPrefix(phA, "airlock-placeholder-") || strings.HasPrefix(b.stdout, phA) {
		t.Fatalf("placeholders: A %q, B %q", phA, b.stdout)
	}
	mu.Lock()
	defer mu.Unlock()
	// B with A's placeholder: unchanged; B with its own: the secret
	// (the control); C (no credential) with A's placeholder: unchanged.
	if len(seen) != 3 || seen[0] != "Bearer "+phA || seen[1] != "Bearer "+secret || seen[2] != "Bearer "+phA {
		t.Fatalf("the server saw %q", seen)
	}
}

// TestEgressClients: git over https (smart HTTP, Basic authorization
// challenged by the server) and a Go net/http program work through the
// gateway unchanged, with the credential the gateway adds in place of the
// placeholder they were configured with.
func TestEgressClients(t *testing.T) {
	needRoot(t)
	backend := "/usr/lib/git-core/git-http-backend"
	if _, err := os.Stat(backend); err != nil {
		t.Skipf("no %s: %v", backend, err)
	}
	const secret = "clients-Secret-Value-3"
	// A bare repository with one commit, served by git-http-backend.
	repos := t.TempDir()
	src := t.TempDir()
	for _, args := range [][]string{
		{"init", "-q", "--bare", filepath.Join(repos, "repo.git")},
		{"-C", src, "init", "-q"},
		{"-C", src, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "hello from the server"},
		{"-C", src, "push", "-q", filepath.Join(repos, "repo.git"), "HEAD:refs/heads/main"},
		{"-C", filepath.Join(repos, "repo.git"), "symbolic-ref", "HEAD", "refs/heads/main"},
	} {
		if out, err := exec.Command("git", args...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	git := &cgi.Handler{Path: backend, Env: []string{"GIT_PROJECT_ROOT=" + repos, "GIT_HTTP_EXPORT_ALL=1"}}
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/go") {
			if r.Header.Get("Authorization") == "Bearer "+secret {
				fmt.Fprint(w, "go client authorized")
			} else {
				http.Error(w, "unauthorized", http.StatusUnauthorized)
			}
			return
		}
		if _, pass, ok := r.BasicAuth(); !ok || pass != secret {
			w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		git.ServeHTTP(w, r)
	}))
	ts.EnableHTTP2 = false
	ts.StartTLS()
	t.Cleanup(ts.Close)
	port := ts.URL[strings.LastIndex(ts.URL, ":")+1:]
	w := newEgressWorld(t)
	os.WriteFile(w.caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ts.Certificate().Raw}), 0o644)

	// A Go program, built here, run inside: it reads its proxy and roots
	// from the environment like any Go tool.
	work := filepath.Dir(w.caFile)
	os.WriteFile(filepath.Join(work, "main.go"), []byte(`package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
)

func main() {
	req, _ := http.NewRequest("GET", os.Args[1], nil)
	req.Header.Set("Authorization", "Bearer "+os.Getenv("TOKEN"))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Println("go error:", err)
		os.Exit(1)
	}
	b, _ := io.ReadAll(resp.Body)
	fmt.Println(resp.StatusCode, string(b))
}
`), 0o644)
	build := exec.Command("go", "build", "-o", filepath.Join(work, "goclient"), filepath.Join(work, "main.go"))
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GO111MODULE=off")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}

	pol := filepath.Join(t.TempDir(), "policy.yaml")
	os.WriteFile(pol, []byte(`network:
  mode: allowlist
  allow: [git.example.com, 127.0.0.1]
  http:
    - {hosts: [git.example.com], methods: [GET, POST], paths: [/repo.git/, /go]}
`), 0o644)
	o := opts{env: []string{"TOKEN=" + secret, "SSL_CERT_FILE=" + w.caFile}}
	r := sh(t, o, w.flags("--add-host", "git.example.com:127.0.0.1", "--policy", pol, "--secret", "TOKEN@git.example.com"), fmt.Sprintf(`
cd /tmp
git clone -q "https://x-access-token:$TOKEN@git.example.com:%[1]s/repo.git" clone && git -C clone log --format=%%s
/workspace/goclient https://git.example.com:%[1]s/go
`, port))
	mustOK(t, r, "clients")
	for _, want := range []string{"hello from the server", "200 go client authorized"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("missing %q in:\n%s", want, r)
		}
	}
	if strings.Contains(r.stdout+r.stderr, secret) {
		t.Errorf("the secret reached the sandbox:\n%s", r)
	}
}

// TestEgressDenialSummary: when the command has ended, airlock run says
// what the gateway denied, with the flag that would allow it, and what it
// could not complete: a name allowed but resolving to a private address, a
// name not allowed, and an allowed address where nothing listens. The
// control is the same run with the flags it suggests, which reaches the
// two servers and reports only the address where nothing listens; with -v
// each record is printed as it comes instead.
func TestEgressDenialSummary(t *testing.T) {
	needRoot(t)
	w := newEgressWorld(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().(*net.TCPAddr).Port
	l.Close()
	script := fmt.Sprintf(`
curl -s -m 10 http://api.test:%[1]s/a; echo
curl -s -m 10 http://api.test:%[1]s/b; echo
curl -s -m 10 http://other.test:%[1]s/c; echo
curl -s -m 10 --noproxy '' http://127.0.0.1:%[2]d/d; echo
`, w.httpPort, closed)
	deadPort := fmt.Sprintf("127.0.0.1:%d", closed)
	r := sh(t, opts{}, w.flags("--net-allow", "api.test", "--net-allow", deadPort), script)
	mustOK(t, r, "denied run")
	other := `"other.test:` + w.httpPort + `"`
	for _, want := range []string{
		"airlock: the egress gateway denied 3 and could not complete 1 of the sandbox's connections and requests (every connection and request: -v, or --net-log FILE):\n",
		`airlock:   "api.test:` + w.httpPort + `": denied: private address 127.0.0.1 (loopback) (2 times)` + "\n",
		`"api.test" resolves to 127.0.0.1 here`, "add --net-allow 127.0.0.1\n",
		"airlock:   " + other + ": denied: not in allowlist\n",
		"to allow it: --net-allow " + other + " (or the policy's network.allow)\n",
		`airlock:   "` + deadPort + `": failed: `, "connection refused",
	} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("the summary lacks %q\n%s", want, r)
		}
	}
	if strings.Contains(r.stdout, "hello") {
		t.Errorf("a denied request was answered\n%s", r)
	}

	r = sh(t, opts{}, w.flags("--net-allow", "api.test", "--net-allow", "127.0.0.1", "--net-allow", strings.Trim(other, `"`)), script)
	mustOK(t, r, "control")
	if strings.Count(r.stdout, "hello") != 3 || strings.Contains(r.stderr, "denied") ||
		!strings.Contains(r.stderr, "the egress gateway could not complete 1 of") {
		t.Errorf("control: want three answers, no denial, one failure\n%s", r)
	}

	r = sh(t, opts{}, w.flags("-v", "--net-allow", "api.test"), script)
	mustOK(t, r, "verbose run")
	if strings.Contains(r.stderr, "the egress gateway") || strings.Count(r.stderr, `"allowed":false`) != 4 {
		t.Errorf("-v: want each denial as a line of its own and no summary\n%s", r)
	}
}

// TestEgressSecretErrors: a credential that cannot be honoured stops the
// run before the command starts, with one line saying why; the same run
// with the secret set is the control.
func TestEgressSecretErrors(t *testing.T) {
	needRoot(t)
	for _, tc := range []struct {
		env   []string
		flags []string
		want  string
	}{
		{nil, []string{"--secret", "E2E_UNSET_TOKEN@api.example.com", "--net-allow", "api.example.com"}, "$E2E_UNSET_TOKEN is not set in airlock's environment"},
		{[]string{"E2E_TOKEN=x"}, []string{"--secret", "E2E_TOKEN@api.example.com"}, "need network access"},
		{[]string{"E2E_TOKEN=x"}, []string{"--secret", "E2E_TOKEN", "--net-allow", "api.example.com"}, "want VAR@HOST"},
		{[]string{"E2E_TOKEN=x"}, []string{"--secret", "E2E_TOKEN@10.0.0.1", "--net-allow", "api.example.com"}, "is an address"},
		{[]string{"E2E_TOKEN=a\nb"}, []string{"--secret", "E2E_TOKEN@api.example.com", "--net-allow", "api.example.com"}, "line break"},
		{[]string{"E2E_TOKEN=x"}, []string{"--secret", "E2E_TOKEN@api.example.com", "--net-allow", "api.example.com", "-e", "E2E_TOKEN"}, "would copy the secret"},
	} {
		r := run(t, opts{env: tc.env}, tc.flags, "/bin/echo", "started")
		if r.code == 0 || strings.Contains(r.stdout, "started") || !strings.Contains(r.stderr, tc.want) || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
			t.Errorf("%v: want a one-line error with %q\n%s", tc.flags, tc.want, r)
		}
	}
	r := run(t, opts{env: []string{"E2E_TOKEN=x"}}, []string{"--secret", "E2E_TOKEN@api.example.com", "--net-allow", "api.example.com"}, "/bin/sh", "-c", `echo "started $E2E_TOKEN"`)
	if r.code != 0 || !strings.HasPrefix(r.stdout, "started airlock-placeholder-") {
		t.Errorf("control: %s", r)
	}
}

// TestEgressCaps: the policy's max_connections and max_bytes, each next
// to its control.
func TestEgressCaps(t *testing.T) {
	needRoot(t)
	big := strings.Repeat("x", 64<<10)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/big" {
			io.WriteString(w, big)
			return
		}
		io.WriteString(w, "small")
	}))
	t.Cleanup(ts.Close)
	port := ts.URL[strings.LastIndex(ts.URL, ":")+1:]
	w := newEgressWorld(t)
	pol := filepath.Join(t.TempDir(), "policy.yaml")
	os.WriteFile(pol, []byte("network:\n  mode: allowlist\n  allow: [api.test, 127.0.0.1]\n  max_connections: 1\n  max_bytes: 16KiB\n"), 0o644)
	r := sh(t, opts{}, w.flags("--policy", pol), fmt.Sprintf(`
curl -s -m 10 http://api.test:%[1]s/small; echo
python3 -c "
import socket, subprocess
held = socket.create_connection(('127.0.0.1', 3128), timeout=10)   # the one connection allowed
out = subprocess.run(['curl', '-s', '-m', '10', '-o', '/dev/null', '-w', '%%{http_code}', 'http://api.test:%[1]s/small'], capture_output=True, text=True).stdout
print('second connection:', out)
held.close()
"
sleep 0.5
curl -s -m 10 -o /dev/null -w 'after close: %%{http_code}\n' http://api.test:%[1]s/small
curl -s -m 10 -o /dev/null http://api.test:%[1]s/big; echo "big: $?"
curl -s -m 10 -o /dev/null -w 'spent: %%{http_code}\n' http://api.test:%[1]s/small
`, port))
	mustOK(t, r, "caps")
	for _, want := range []string{"small\n", "second connection: 503", "after close: 200", "spent: 503"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("missing %q in:\n%s", want, r)
		}
	}
	if strings.Contains(r.stdout, "big: 0") {
		t.Errorf("64 KiB went through a 16 KiB budget:\n%s", r)
	}
	// The control: without the caps, the same big download completes.
	r = sh(t, opts{}, w.flags("--net-allow", "api.test", "--net-allow", "127.0.0.1"), fmt.Sprintf(`curl -s -m 10 http://api.test:%s/big | wc -c`, port))
	if strings.TrimSpace(r.stdout) != fmt.Sprint(len(big)) {
		t.Errorf("control: %s", r)
	}
}

// TestEgressPackageManagers: npm (with an auth token it holds only as a
// placeholder) and pip fetch from registries through the gateway, trusting
// the sandbox CA from the variables airlock sets, with nothing configured
// for the proxy.
func TestEgressPackageManagers(t *testing.T) {
	needRoot(t)
	for _, tool := range []string{"/usr/bin/npm", "/usr/bin/python3"} {
		if _, err := os.Stat(tool); err != nil {
			t.Skipf("no %s: %v", tool, err)
		}
	}
	if err := exec.Command("/usr/bin/python3", "-m", "pip", "--version").Run(); err != nil {
		t.Skipf("no pip for /usr/bin/python3: %v", err)
	}
	const secret = "npm-Secret-Token-5"
	var wheel bytes.Buffer
	zw := zip.NewWriter(&wheel)
	for name, body := range map[string]string{
		"demo/__init__.py":                 "",
		"demo-1.0.dist-info/METADATA":      "Metadata-Version: 2.1\nName: demo\nVersion: 1.0\n",
		"demo-1.0.dist-info/WHEEL":         "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
		"demo-1.0.dist-info/RECORD":        "",
		"demo-1.0.dist-info/top_level.txt": "demo\n",
	} {
		f, _ := zw.Create(name)
		io.WriteString(f, body)
	}
	zw.Close()
	var mu sync.Mutex
	var npmAuth []string
	var port string
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/demo-pkg":
			mu.Lock()
			npmAuth = append(npmAuth, r.Header.Get("Authorization"))
			mu.Unlock()
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"name":"demo-pkg","dist-tags":{"latest":"1.2.3"},"versions":{"1.2.3":{"name":"demo-pkg","version":"1.2.3","dist":{"tarball":"https://registry.example.com:%s/demo-pkg/-/demo-pkg-1.2.3.tgz"}}}}`, port)
		case r.URL.Path == "/simple/demo/":
			fmt.Fprint(w, `<html><body><a href="/files/demo-1.0-py3-none-any.whl">demo-1.0-py3-none-any.whl</a></body></html>`)
		case r.URL.Path == "/files/demo-1.0-py3-none-any.whl":
			w.Write(wheel.Bytes())
		default:
			http.NotFound(w, r)
		}
	}))
	ts.EnableHTTP2 = false
	ts.StartTLS()
	t.Cleanup(ts.Close)
	port = ts.URL[strings.LastIndex(ts.URL, ":")+1:]
	w := newEgressWorld(t)
	os.WriteFile(w.caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ts.Certificate().Raw}), 0o644)
	pol := filepath.Join(t.TempDir(), "policy.yaml")
	os.WriteFile(pol, []byte(`network:
  mode: allowlist
  allow: [registry.example.com, pypi.example.com, 127.0.0.1]
  http:
    - {hosts: [registry.example.com, pypi.example.com], methods: [GET, HEAD]}
`), 0o644)
	o := opts{env: []string{"NPM_TOKEN=" + secret, "SSL_CERT_FILE=" + w.caFile}}
	r := sh(t, o, w.flags("--add-host", "registry.example.com:127.0.0.1", "--add-host", "pypi.example.com:127.0.0.1",
		"--policy", pol, "--secret", "NPM_TOKEN@registry.example.com"), fmt.Sprintf(`
cd /tmp
printf '//registry.example.com:%[1]s/:_authToken=${NPM_TOKEN}\n' > npmrc
npm view demo-pkg version --registry https://registry.example.com:%[1]s/ --userconfig /tmp/npmrc --cache /tmp/npm-cache --no-update-notifier 2>&1
python3 -m pip download -q --no-deps --disable-pip-version-check --no-cache-dir -d /tmp/dl --index-url https://pypi.example.com:%[1]s/simple/ demo 2>&1
ls /tmp/dl
`, port))
	mustOK(t, r, "package managers")
	for _, want := range []string{"1.2.3", "demo-1.0-py3-none-any.whl"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("missing %q in:\n%s", want, r)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(npmAuth) == 0 || npmAuth[0] != "Bearer "+secret {
		t.Errorf("the registry saw Authorization %q", npmAuth)
	}
	if strings.Contains(r.stdout+r.stderr, secret) {
		t.Errorf("the secret reached the sandbox:\n%s", r)
	}
}
